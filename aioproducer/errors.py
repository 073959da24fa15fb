"""Errors raised by aioproducer.

Every error derives from :class:`KafkaError` and says through ``retriable`` whether
trying the same operation again may succeed. Errors that come from a broker carry the
Kafka error code in ``error_code`` and its protocol name in ``error_name``.

There is one class per Kafka error code, classified as the Java client classifies it:
``retriable`` is True where Java's exception extends ``RetriableException``, and
``invalid_metadata`` (with ``retriable``) where it extends ``InvalidMetadataException``,
meaning "refresh metadata, then retry". :func:`error_for_code` turns a code from a response
into an exception instance; :data:`ERROR_CODES` maps every known code to its class. The
numbers and protocol names come from one table,
:class:`~aioproducer.protocol.error_codes.ErrorCode`.

Catch families with the shared bases: :class:`InvalidMetadataError`,
:class:`AuthorizationError`, :class:`AuthenticationError`, or :class:`KafkaError` for all.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import ClassVar

from aioproducer.protocol.error_codes import ErrorCode

if _TYPE_CHECKING:
    from aioproducer._core.futures import BatchResults

# ---- generated from tools/error_table.py: __all__ ------------------------------------------------
__all__ = [
    "ERROR_CODES",
    "AuthenticationError",
    "AuthorizationError",
    "BatchEncodingError",
    "BatchOvertakenError",
    "BrokerIdNotRegisteredError",
    "BrokerNotAvailableError",
    "BufferExhaustedError",
    "ClusterAuthorizationFailedError",
    "ConcurrentTransactionsError",
    "ConfigurationError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptMessageError",
    "CorruptResponseError",
    "DelegationTokenAuthDisabledError",
    "DelegationTokenAuthorizationFailedError",
    "DelegationTokenExpiredError",
    "DelegationTokenNotFoundError",
    "DelegationTokenOwnerMismatchError",
    "DelegationTokenRequestNotAllowedError",
    "DeliveryTimeoutError",
    "DuplicateBrokerRegistrationError",
    "DuplicateResourceError",
    "DuplicateSequenceNumberError",
    "DuplicateVoterError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "FeatureUpdateFailedError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "FencedMemberEpochError",
    "FencedStateEpochError",
    "FetchSessionIdNotFoundError",
    "FetchSessionTopicIdError",
    "FlushTimeoutError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "IllegalStateError",
    "InconsistentClusterIdError",
    "InconsistentGroupProtocolError",
    "InconsistentTopicIdError",
    "InconsistentVoterSetError",
    "IneligibleReplicaError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidCommitOffsetSizeError",
    "InvalidConfigError",
    "InvalidFetchSessionEpochError",
    "InvalidFetchSizeError",
    "InvalidGroupIdError",
    "InvalidMetadataError",
    "InvalidPartitionsError",
    "InvalidPrincipalTypeError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidRecordStateError",
    "InvalidRegistrationError",
    "InvalidRegularExpressionError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidShareSessionEpochError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "InvalidUpdateVersionError",
    "InvalidVoterKeyError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "ListenerNotFoundError",
    "LogDirNotFoundError",
    "MemberIdRequiredError",
    "MismatchedEndpointTypeError",
    "NetworkError",
    "NewLeaderElectedError",
    "NoReassignmentInProgressError",
    "NonEmptyGroupError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetMovedToTieredStorageError",
    "OffsetNotAvailableError",
    "OffsetOutOfRangeError",
    "OperationNotAttemptedError",
    "OutOfOrderSequenceNumberError",
    "PartitionerError",
    "PolicyViolationError",
    "PositionOutOfRangeError",
    "PreferredLeaderNotAvailableError",
    "PrincipalDeserializationFailureError",
    "ProducerClosedError",
    "ProducerFencedError",
    "PurgedError",
    "ReassignmentInProgressError",
    "RebalanceInProgressError",
    "RebootstrapRequiredError",
    "RecordListTooLargeError",
    "RecordTooLargeError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "SaslAuthenticationFailedError",
    "SchemaRegistryError",
    "SecurityDisabledError",
    "SenderCrashedError",
    "SerializationError",
    "ShareSessionLimitReachedError",
    "ShareSessionNotFoundError",
    "SnapshotNotFoundError",
    "SslError",
    "StaleBrokerEpochError",
    "StaleControllerEpochError",
    "StaleMemberEpochError",
    "StreamsInvalidTopologyEpochError",
    "StreamsInvalidTopologyError",
    "StreamsTopologyFencedError",
    "TelemetryTooLargeError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TopicDeletionDisabledError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "UnacceptableCredentialError",
    "UnknownControllerIdError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownSubscriptionIdError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnreleasedInstanceIdError",
    "UnstableOffsetCommitError",
    "UnsupportedAssignorError",
    "UnsupportedCompressionTypeError",
    "UnsupportedEndpointTypeError",
    "UnsupportedForMessageFormatError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "VoterNotFoundError",
    "error_for_code",
]
# ---- end of the generated __all__ ----------------------------------------------------------------


class KafkaError(Exception):
    """The root of every error aioproducer raises.

    Attributes:
        retriable: True when the same operation may succeed if tried again.
        accepted: on an error ``send_many`` raised for one item, the records before it
            (buffered and being sent); None otherwise.
        invalid_metadata: True when the client should refresh its metadata before retrying
            (the Java client's ``InvalidMetadataException`` family).
        error_code: the Kafka protocol error code, or None for errors raised by the client.
        error_name: the protocol name of ``error_code`` (``"NOT_LEADER_OR_FOLLOWER"``), or None.
        maybe_written: on a record's error, True when the record may be in the log all the
            same; False when the broker did not write it.
    """

    retriable: bool = False
    invalid_metadata: ClassVar[bool] = False
    error_code: ClassVar[int | None] = None
    error_name: ClassVar[str | None] = None
    accepted: BatchResults | None = None
    """Set on an error that ``send_many`` raised for one of its items: the records of the
    items before it, which were buffered and are being sent (await it for their metadata).
    ``len(accepted)`` is the index of the refused item. None on every other error."""
    maybe_written: bool = False
    """On the error of a record that failed: True when the record may have been written all
    the same, because an attempt to send its batch ended without an answer that rules it
    out (a lost connection, a request or delivery timeout while the batch was in flight,
    ``NOT_LEADER_OR_FOLLOWER``, which Kafka also answers after appending), or because the
    broker refused a retry with an error it checks before it recognises a retried batch
    (``INVALID_TIMESTAMP``, say). Reading the partition tells; in a transaction, the abort
    hides such records from ``read_committed`` consumers. False: the record was not written
    (the broker refused every attempt before appending, or it was never sent)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A class for a broker error names its code; the protocol name comes with it.
        code = cls.__dict__.get("error_code")
        if code is not None:
            cls.error_name = ErrorCode(code).name

    def __init__(self, message: str = "", *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable

    @property
    def message(self) -> str:
        """The human-readable message."""
        return str(self.args[0]) if self.args else ""


# ---- families ----------------------------------------------------------------------------


class InvalidMetadataError(KafkaError):
    """The client's view of the cluster is stale: refresh metadata, then retry.

    The base of every broker error in the Java client's ``InvalidMetadataException`` family
    (``NOT_LEADER_OR_FOLLOWER``, ``LEADER_NOT_AVAILABLE``, ``UNKNOWN_TOPIC_OR_PARTITION``,
    ``FENCED_LEADER_EPOCH``, ``KAFKA_STORAGE_ERROR``, ...).
    """

    retriable = True
    invalid_metadata: ClassVar[bool] = True


class AuthenticationError(KafkaError):
    """The broker rejected the credentials, or the TLS handshake failed."""


class SslError(AuthenticationError):
    """The TLS handshake failed: an untrusted or mismatched certificate, or a refused one."""


class AuthorizationError(KafkaError):
    """The principal is not allowed to do this."""


# ---- client-side errors ------------------------------------------------------------------


class ConfigurationError(KafkaError, ValueError):
    """An option has an unknown name or an invalid value."""


class SerializationError(KafkaError, TypeError):
    """A key or value is not bytes-like and no serializer is configured, or a serializer failed."""


class SchemaRegistryError(KafkaError):
    """A Schema Registry refused a request or could not be reached.

    The message names the registry request (the subject and version where there is one),
    the HTTP status and the registry's own message; never the credentials. Retriable when
    the registry could not be reached, timed out or answered 408, 429 or a 5xx status.

    Attributes:
        http_status: the HTTP status (None when there was no answer).
        registry_error_code: the registry's ``error_code`` (40401 subject not found, 40403
            schema not found, 409 incompatible, 42201 invalid schema, ...), or None.
    """

    http_status: int | None = None
    registry_error_code: int | None = None


class InvalidArgumentError(KafkaError, ValueError):
    """An argument of a record is out of its allowed range (a negative timestamp or
    partition, say); the message names the argument and the range. Nothing was buffered."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of a record has a type it cannot have (a float timestamp, a str
    partition); the message names the argument and the types it takes. Nothing was buffered."""


class PartitionerError(KafkaError, ValueError):
    """A partitioner returned something other than a partition of the topic."""


class BufferExhaustedError(KafkaError):
    """No buffer memory became free within ``max_block_ms``."""

    retriable = True


class DeliveryTimeoutError(KafkaError):
    """A record was not acknowledged within ``delivery_timeout_ms`` of being sent."""

    retriable = True


class BatchOvertakenError(KafkaError):
    """An idempotent or transactional batch whose outcome is unknown: the broker refused it
    as out of order (OUT_OF_ORDER_SEQUENCE_NUMBER) after its sequence for the partition had
    moved past it, and an earlier attempt of the batch may have been written.

    The records may or may not be in the log. The producer does not send them again, since
    that could write them twice or after records sent later; it restarts the partition's
    sequences under a new epoch and goes on. Not retriable: sending the records again is the
    application's choice, knowing they may be duplicated. The ``batch-overtaken-total``
    metric counts these batches. In a transaction, the transaction must be aborted (the
    abort hides the records from ``read_committed`` consumers either way).
    """

    retriable = False
    maybe_written = True
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    error_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class FlushTimeoutError(KafkaError):
    """``flush()`` gave up after its timeout; the records stay buffered and are still sent."""

    retriable = True


class ProducerClosedError(KafkaError):
    """The producer is closed (or closing) and takes no more records."""


class PurgedError(KafkaError):
    """``producer.purge()`` failed the record before it was delivered.

    A record purged while buffered was never sent (``maybe_written`` False). One purged
    while its request was out (``purge(in_flight=True)``) may be in the topic all the same
    (``maybe_written`` True): the broker may have written it before the producer stopped
    waiting. Not retriable: sending it again is the application's choice. In a
    transaction, the transaction can then only be aborted.
    """


class IllegalStateError(KafkaError):
    """An operation was called in a state that does not allow it."""


class TransactionAbortedError(KafkaError):
    """The transaction was aborted before this record was sent; it was not written.

    Raised by the futures of records still buffered when ``abort_transaction()`` runs (or when
    the producer closes with a transaction open). Not retriable: send the record again in a
    new transaction. The exactly-once Spark sink raises it when it aborted every
    transaction of a write rather than commit it in part (see "Delivery guarantees of the
    Spark sink").
    """


class BatchEncodingError(KafkaError):
    """The producer could not build, compress or encode the batch (or the request) that
    held the record: a codec failure, or a fault in aioproducer itself. The cause is chained
    as ``__cause__``. Only the records of that batch or request fail; the producer goes on.
    """


class SenderCrashedError(KafkaError):
    """The sender task died unexpectedly; the cause is chained as ``__cause__``."""


class KafkaConnectionError(KafkaError):
    """A connection to a broker failed or was closed while requests were in flight."""

    retriable = True


class CorruptResponseError(KafkaError):
    """A broker sent bytes that do not decode as the expected response."""

    retriable = True


# ---- errors sent by brokers, one class per code ----------------------------------------------


class UnknownServerError(KafkaError):
    """The broker hit an unexpected error, or sent an error code this client does not know.

    Kafka error code -1 (``UNKNOWN_SERVER_ERROR``); not retriable; the outcome of the request is
    unknown.
    """

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", *, retriable: bool | None = None, code: int = -1) -> None:
        super().__init__(message, retriable=retriable)
        #: The code the broker sent: -1, or a code this client does not know.
        self.code = code


# ---- generated from tools/error_table.py: classes ------------------------------------------------


class OffsetOutOfRangeError(KafkaError):
    """The requested offset is outside the range the broker holds.

    Kafka error code 1 (``OFFSET_OUT_OF_RANGE``); not retriable.
    """

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(KafkaError):
    """A record batch failed its CRC check, exceeded the valid size, or was otherwise malformed.

    Kafka error code 2 (``CORRUPT_MESSAGE``); retriable.
    """

    retriable = True
    error_code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(InvalidMetadataError):
    """The topic or partition does not exist (or did not appear within ``max_block_ms``).

    Also Kafka error code 3 (``UNKNOWN_TOPIC_OR_PARTITION``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidFetchSizeError(KafkaError):
    """The requested fetch size is invalid.

    Kafka error code 4 (``INVALID_FETCH_SIZE``); not retriable.
    """

    error_code = ErrorCode.INVALID_FETCH_SIZE


class LeaderNotAvailableError(InvalidMetadataError):
    """The partition has no leader right now, typically during a leader election.

    Kafka error code 5 (``LEADER_NOT_AVAILABLE``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(InvalidMetadataError):
    """The broker is not the leader of the partition (or not a replica of it).

    Kafka error code 6 (``NOT_LEADER_OR_FOLLOWER``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(KafkaError):
    """A request got no response within ``request_timeout_ms``.

    Also Kafka error code 7 (``REQUEST_TIMED_OUT``); retriable, but the records may have been
    written.
    """

    retriable = True
    error_code = ErrorCode.REQUEST_TIMED_OUT


class BrokerNotAvailableError(KafkaError):
    """The broker is not available.

    Kafka error code 8 (``BROKER_NOT_AVAILABLE``); not retriable.
    """

    error_code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(InvalidMetadataError):
    """The replica is not available for the partition.

    Kafka error code 9 (``REPLICA_NOT_AVAILABLE``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.REPLICA_NOT_AVAILABLE


class RecordTooLargeError(KafkaError):
    """A record is larger than ``max_request_size`` or ``buffer_memory`` (or the broker's limit).

    Also Kafka error code 10 (``MESSAGE_TOO_LARGE``); not retriable (the sender first splits a
    batch of several records).
    """

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class StaleControllerEpochError(KafkaError):
    """The controller moved to another broker.

    Kafka error code 11 (``STALE_CONTROLLER_EPOCH``); not retriable.
    """

    error_code = ErrorCode.STALE_CONTROLLER_EPOCH


class OffsetMetadataTooLargeError(KafkaError):
    """The metadata attached to an offset commit is too large.

    Kafka error code 12 (``OFFSET_METADATA_TOO_LARGE``); not retriable.
    """

    error_code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class NetworkError(InvalidMetadataError):
    """The broker disconnected before a response was received.

    Kafka error code 13 (``NETWORK_EXCEPTION``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.NETWORK_EXCEPTION


class CoordinatorLoadInProgressError(KafkaError):
    """The coordinator is still loading its state and cannot serve requests yet.

    Kafka error code 14 (``COORDINATOR_LOAD_IN_PROGRESS``); retriable.
    """

    retriable = True
    error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(KafkaError):
    """The coordinator is not available; look it up again.

    Kafka error code 15 (``COORDINATOR_NOT_AVAILABLE``); retriable.
    """

    retriable = True
    error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(KafkaError):
    """The broker is not the coordinator for this key; look the coordinator up again.

    Kafka error code 16 (``NOT_COORDINATOR``); retriable.
    """

    retriable = True
    error_code = ErrorCode.NOT_COORDINATOR


class InvalidTopicError(KafkaError):
    """The topic name is not a legal Kafka topic name, or the broker rejected it.

    Also Kafka error code 17 (``INVALID_TOPIC_EXCEPTION``); not retriable.
    """

    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(KafkaError):
    """A record batch is larger than the broker's configured segment size.

    Kafka error code 18 (``RECORD_LIST_TOO_LARGE``); not retriable.
    """

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(KafkaError):
    """Fewer in-sync replicas than ``min.insync.replicas``; the records were not written.

    Kafka error code 19 (``NOT_ENOUGH_REPLICAS``); retriable.
    """

    retriable = True
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(KafkaError):
    """The records were written to the leader, but to fewer in-sync replicas than required.

    Kafka error code 20 (``NOT_ENOUGH_REPLICAS_AFTER_APPEND``); retriable.
    """

    retriable = True
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class InvalidRequiredAcksError(KafkaError):
    """The produce request carried an ``acks`` value the broker does not accept.

    Kafka error code 21 (``INVALID_REQUIRED_ACKS``); not retriable.
    """

    error_code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(KafkaError):
    """The consumer group generation id is not valid.

    Kafka error code 22 (``ILLEGAL_GENERATION``); not retriable.
    """

    error_code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(KafkaError):
    """The member's group protocols are incompatible with those of the other members.

    Kafka error code 23 (``INCONSISTENT_GROUP_PROTOCOL``); not retriable.
    """

    error_code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(KafkaError):
    """The group id is invalid.

    Kafka error code 24 (``INVALID_GROUP_ID``); not retriable.
    """

    error_code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(KafkaError):
    """The coordinator does not know this group member.

    Kafka error code 25 (``UNKNOWN_MEMBER_ID``); not retriable.
    """

    error_code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(KafkaError):
    """The session timeout is outside the range the broker allows.

    Kafka error code 26 (``INVALID_SESSION_TIMEOUT``); not retriable.
    """

    error_code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(KafkaError):
    """The group is rebalancing, so the member must rejoin.

    Kafka error code 27 (``REBALANCE_IN_PROGRESS``); not retriable.
    """

    error_code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidCommitOffsetSizeError(KafkaError):
    """The size of the committed offset data is not valid.

    Kafka error code 28 (``INVALID_COMMIT_OFFSET_SIZE``); not retriable.
    """

    error_code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


class TopicAuthorizationFailedError(AuthorizationError):
    """The principal may not access the topic.

    Kafka error code 29 (``TOPIC_AUTHORIZATION_FAILED``); not retriable.
    """

    error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(AuthorizationError):
    """The principal may not access the group.

    Kafka error code 30 (``GROUP_AUTHORIZATION_FAILED``); not retriable.
    """

    error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(AuthorizationError):
    """The principal lacks a cluster permission (such as IdempotentWrite); fatal for a producer.

    Kafka error code 31 (``CLUSTER_AUTHORIZATION_FAILED``); not retriable.
    """

    error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class InvalidTimestampError(KafkaError):
    """A record timestamp is outside the range the broker accepts.

    Kafka error code 32 (``INVALID_TIMESTAMP``); not retriable.
    """

    error_code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedSaslMechanismError(AuthenticationError):
    """The broker does not support the requested SASL mechanism.

    Kafka error code 33 (``UNSUPPORTED_SASL_MECHANISM``); not retriable.
    """

    error_code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(AuthenticationError):
    """The request is not valid in the current state of the SASL exchange.

    Kafka error code 34 (``ILLEGAL_SASL_STATE``); not retriable.
    """

    error_code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedVersionError(KafkaError):
    """The broker does not support a version of a request this client can send.

    Also Kafka error code 35 (``UNSUPPORTED_VERSION``); not retriable, fatal for the producer.
    """

    error_code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(KafkaError):
    """A topic with this name already exists.

    Kafka error code 36 (``TOPIC_ALREADY_EXISTS``); not retriable.
    """

    error_code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(KafkaError):
    """The number of partitions is invalid (``NewTopic`` refuses one below 1 before anything is
    sent).

    Also Kafka error code 37 (``INVALID_PARTITIONS``); not retriable.
    """

    error_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError):
    """The replication factor is below 1 or larger than the number of brokers (``NewTopic`` refuses
    one below 1).

    Also Kafka error code 38 (``INVALID_REPLICATION_FACTOR``); not retriable.
    """

    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(KafkaError):
    """The replica assignment is invalid (``NewTopic`` refuses one that skips a partition or names a
    broker twice for one).

    Also Kafka error code 39 (``INVALID_REPLICA_ASSIGNMENT``); not retriable.
    """

    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(KafkaError):
    """A configuration in the request is invalid: the broker refused it, or ``NewTopic`` did (a
    config value of the wrong type).

    Also Kafka error code 40 (``INVALID_CONFIG``); not retriable.
    """

    error_code = ErrorCode.INVALID_CONFIG


class NotControllerError(KafkaError):
    """The broker is not the controller of the cluster.

    Kafka error code 41 (``NOT_CONTROLLER``); retriable.
    """

    retriable = True
    error_code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(KafkaError):
    """The broker could not make sense of the request (malformed, or an incompatible broker).

    Kafka error code 42 (``INVALID_REQUEST``); not retriable.
    """

    error_code = ErrorCode.INVALID_REQUEST


class UnsupportedForMessageFormatError(KafkaError):
    """The message format version on the broker does not support the request.

    Kafka error code 43 (``UNSUPPORTED_FOR_MESSAGE_FORMAT``); not retriable.
    """

    error_code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class PolicyViolationError(KafkaError):
    """The request does not satisfy a policy configured on the broker.

    Kafka error code 44 (``POLICY_VIOLATION``); not retriable.
    """

    error_code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceNumberError(KafkaError):
    """The broker received a batch whose sequence number does not follow the last one it stored.

    Kafka error code 45 (``OUT_OF_ORDER_SEQUENCE_NUMBER``); the idempotent producer may recover
    by bumping its epoch, otherwise not retriable.
    """

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(KafkaError):
    """The broker already holds a batch with this sequence number.

    Kafka error code 46 (``DUPLICATE_SEQUENCE_NUMBER``); the producer completes the batch as
    delivered, without an offset.
    """

    error_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    """The producer used an epoch older than the one the broker knows.

    Kafka error code 47 (``INVALID_PRODUCER_EPOCH``); not retriable.
    """

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaError):
    """The transactional operation is not valid in the transaction's current state.

    Kafka error code 48 (``INVALID_TXN_STATE``); not retriable.
    """

    error_code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(KafkaError):
    """The producer id is not currently assigned to this transactional id.

    Kafka error code 49 (``INVALID_PRODUCER_ID_MAPPING``); not retriable.
    """

    error_code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(KafkaError):
    """``transaction_timeout_ms`` exceeds the broker's ``transaction.max.timeout.ms``.

    Kafka error code 50 (``INVALID_TRANSACTION_TIMEOUT``); not retriable.
    """

    error_code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(KafkaError):
    """Another operation on the same transaction is still in progress.

    Kafka error code 51 (``CONCURRENT_TRANSACTIONS``); retriable.
    """

    retriable = True
    error_code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(KafkaError):
    """The transaction coordinator that sent the request is no longer the current one.

    Kafka error code 52 (``TRANSACTION_COORDINATOR_FENCED``); not retriable.
    """

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    """The principal may not use the transactional id; fatal for the producer.

    Kafka error code 53 (``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``); not retriable.
    """

    error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(KafkaError):
    """Security features are disabled on the broker.

    Kafka error code 54 (``SECURITY_DISABLED``); not retriable.
    """

    error_code = ErrorCode.SECURITY_DISABLED


class OperationNotAttemptedError(KafkaError):
    """The broker did not attempt this operation because another part of the request failed.

    Kafka error code 55 (``OPERATION_NOT_ATTEMPTED``); not retriable.
    """

    error_code = ErrorCode.OPERATION_NOT_ATTEMPTED


class KafkaStorageError(InvalidMetadataError):
    """The broker hit a disk error while accessing the partition's log.

    Kafka error code 56 (``KAFKA_STORAGE_ERROR``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogDirNotFoundError(KafkaError):
    """The requested log directory is not in the broker's configuration.

    Kafka error code 57 (``LOG_DIR_NOT_FOUND``); not retriable.
    """

    error_code = ErrorCode.LOG_DIR_NOT_FOUND


class SaslAuthenticationFailedError(AuthenticationError):
    """SASL authentication failed (wrong credentials or mechanism).

    Kafka error code 58 (``SASL_AUTHENTICATION_FAILED``); not retriable.
    """

    error_code = ErrorCode.SASL_AUTHENTICATION_FAILED


class UnknownProducerIdError(OutOfOrderSequenceNumberError):
    """The broker has no state for the producer id (for example, retention removed its records).

    Kafka error code 59 (``UNKNOWN_PRODUCER_ID``); the idempotent producer may recover by bumping
    its epoch, otherwise not retriable.
    """

    error_code = ErrorCode.UNKNOWN_PRODUCER_ID


class ReassignmentInProgressError(KafkaError):
    """A partition reassignment is in progress.

    Kafka error code 60 (``REASSIGNMENT_IN_PROGRESS``); not retriable.
    """

    error_code = ErrorCode.REASSIGNMENT_IN_PROGRESS


class DelegationTokenAuthDisabledError(KafkaError):
    """The delegation token feature is not enabled.

    Kafka error code 61 (``DELEGATION_TOKEN_AUTH_DISABLED``); not retriable.
    """

    error_code = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


class DelegationTokenNotFoundError(KafkaError):
    """The delegation token is not known to the broker.

    Kafka error code 62 (``DELEGATION_TOKEN_NOT_FOUND``); not retriable.
    """

    error_code = ErrorCode.DELEGATION_TOKEN_NOT_FOUND


class DelegationTokenOwnerMismatchError(KafkaError):
    """The principal is not the owner or a renewer of the delegation token.

    Kafka error code 63 (``DELEGATION_TOKEN_OWNER_MISMATCH``); not retriable.
    """

    error_code = ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH


class DelegationTokenRequestNotAllowedError(KafkaError):
    """Delegation token requests are not allowed on this kind of channel.

    Kafka error code 64 (``DELEGATION_TOKEN_REQUEST_NOT_ALLOWED``); not retriable.
    """

    error_code = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


class DelegationTokenAuthorizationFailedError(AuthorizationError):
    """The principal may not use the delegation token.

    Kafka error code 65 (``DELEGATION_TOKEN_AUTHORIZATION_FAILED``); not retriable.
    """

    error_code = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED


class DelegationTokenExpiredError(KafkaError):
    """The delegation token has expired.

    Kafka error code 66 (``DELEGATION_TOKEN_EXPIRED``); not retriable.
    """

    error_code = ErrorCode.DELEGATION_TOKEN_EXPIRED


class InvalidPrincipalTypeError(KafkaError):
    """The principal type is not supported.

    Kafka error code 67 (``INVALID_PRINCIPAL_TYPE``); not retriable.
    """

    error_code = ErrorCode.INVALID_PRINCIPAL_TYPE


class NonEmptyGroupError(KafkaError):
    """The group is not empty.

    Kafka error code 68 (``NON_EMPTY_GROUP``); not retriable.
    """

    error_code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(KafkaError):
    """The group id does not exist.

    Kafka error code 69 (``GROUP_ID_NOT_FOUND``); not retriable.
    """

    error_code = ErrorCode.GROUP_ID_NOT_FOUND


class FetchSessionIdNotFoundError(KafkaError):
    """The fetch session id was not found.

    Kafka error code 70 (``FETCH_SESSION_ID_NOT_FOUND``); retriable.
    """

    retriable = True
    error_code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND


class InvalidFetchSessionEpochError(KafkaError):
    """The fetch session epoch is invalid.

    Kafka error code 71 (``INVALID_FETCH_SESSION_EPOCH``); retriable.
    """

    retriable = True
    error_code = ErrorCode.INVALID_FETCH_SESSION_EPOCH


class ListenerNotFoundError(InvalidMetadataError):
    """The leader has no listener matching the one the metadata request arrived on.

    Kafka error code 72 (``LISTENER_NOT_FOUND``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.LISTENER_NOT_FOUND


class TopicDeletionDisabledError(KafkaError):
    """Topic deletion is disabled on the broker.

    Kafka error code 73 (``TOPIC_DELETION_DISABLED``); not retriable.
    """

    error_code = ErrorCode.TOPIC_DELETION_DISABLED


class FencedLeaderEpochError(InvalidMetadataError):
    """The leader epoch in the request is older than the broker's.

    Kafka error code 74 (``FENCED_LEADER_EPOCH``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaError):
    """The leader epoch in the request is newer than the broker's.

    Kafka error code 75 (``UNKNOWN_LEADER_EPOCH``); retriable.
    """

    retriable = True
    error_code = ErrorCode.UNKNOWN_LEADER_EPOCH


class UnsupportedCompressionTypeError(KafkaError):
    """The broker or the request version does not support the compression codec.

    Kafka error code 76 (``UNSUPPORTED_COMPRESSION_TYPE``); not retriable.
    """

    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class StaleBrokerEpochError(KafkaError):
    """The broker epoch has changed.

    Kafka error code 77 (``STALE_BROKER_EPOCH``); not retriable.
    """

    error_code = ErrorCode.STALE_BROKER_EPOCH


class OffsetNotAvailableError(KafkaError):
    """The new leader's high watermark has not caught up yet, so offsets are not available.

    Kafka error code 78 (``OFFSET_NOT_AVAILABLE``); retriable.
    """

    retriable = True
    error_code = ErrorCode.OFFSET_NOT_AVAILABLE


class MemberIdRequiredError(KafkaError):
    """The group member needs a member id before joining.

    Kafka error code 79 (``MEMBER_ID_REQUIRED``); not retriable.
    """

    error_code = ErrorCode.MEMBER_ID_REQUIRED


class PreferredLeaderNotAvailableError(InvalidMetadataError):
    """The preferred leader is not available.

    Kafka error code 80 (``PREFERRED_LEADER_NOT_AVAILABLE``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


class GroupMaxSizeReachedError(KafkaError):
    """The group has reached its maximum size.

    Kafka error code 81 (``GROUP_MAX_SIZE_REACHED``); not retriable.
    """

    error_code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(KafkaError):
    """Another member with the same ``group.instance.id`` fenced this one.

    Kafka error code 82 (``FENCED_INSTANCE_ID``); not retriable.
    """

    error_code = ErrorCode.FENCED_INSTANCE_ID


class EligibleLeadersNotAvailableError(InvalidMetadataError):
    """No eligible leader is available for the partition.

    Kafka error code 83 (``ELIGIBLE_LEADERS_NOT_AVAILABLE``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


class ElectionNotNeededError(InvalidMetadataError):
    """No leader election is needed for the partition.

    Kafka error code 84 (``ELECTION_NOT_NEEDED``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.ELECTION_NOT_NEEDED


class NoReassignmentInProgressError(KafkaError):
    """No partition reassignment is in progress.

    Kafka error code 85 (``NO_REASSIGNMENT_IN_PROGRESS``); not retriable.
    """

    error_code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


class GroupSubscribedToTopicError(KafkaError):
    """The group is subscribed to the topic, so its offsets cannot be deleted.

    Kafka error code 86 (``GROUP_SUBSCRIBED_TO_TOPIC``); not retriable.
    """

    error_code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


class InvalidRecordError(KafkaError):
    """The broker's validation rejected a record (for example a null key on a compacted topic).

    Kafka error code 87 (``INVALID_RECORD``); not retriable.
    """

    error_code = ErrorCode.INVALID_RECORD


class UnstableOffsetCommitError(KafkaError):
    """There are unstable offsets that must be cleared first.

    Kafka error code 88 (``UNSTABLE_OFFSET_COMMIT``); retriable.
    """

    retriable = True
    error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT


class ThrottlingQuotaExceededError(KafkaError):
    """The principal exceeded a throttling quota.

    Kafka error code 89 (``THROTTLING_QUOTA_EXCEEDED``); retriable.
    """

    retriable = True
    error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


class ProducerFencedError(KafkaError):
    """Another producer with the same transactional id has fenced this one.

    Also Kafka error code 90 (``PRODUCER_FENCED``); not retriable, fatal for the producer.
    """

    error_code = ErrorCode.PRODUCER_FENCED


class ResourceNotFoundError(KafkaError):
    """The request referred to a resource that does not exist.

    Kafka error code 91 (``RESOURCE_NOT_FOUND``); not retriable.
    """

    error_code = ErrorCode.RESOURCE_NOT_FOUND


class DuplicateResourceError(KafkaError):
    """The request referred to the same resource twice.

    Kafka error code 92 (``DUPLICATE_RESOURCE``); not retriable.
    """

    error_code = ErrorCode.DUPLICATE_RESOURCE


class UnacceptableCredentialError(KafkaError):
    """The requested credential does not meet the criteria for acceptability.

    Kafka error code 93 (``UNACCEPTABLE_CREDENTIAL``); not retriable.
    """

    error_code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class InconsistentVoterSetError(KafkaError):
    """The sender or recipient of a voter-only request is not an expected voter.

    Kafka error code 94 (``INCONSISTENT_VOTER_SET``); not retriable.
    """

    error_code = ErrorCode.INCONSISTENT_VOTER_SET


class InvalidUpdateVersionError(KafkaError):
    """The update version is invalid.

    Kafka error code 95 (``INVALID_UPDATE_VERSION``); not retriable.
    """

    error_code = ErrorCode.INVALID_UPDATE_VERSION


class FeatureUpdateFailedError(KafkaError):
    """The broker could not update the finalized features.

    Kafka error code 96 (``FEATURE_UPDATE_FAILED``); not retriable.
    """

    error_code = ErrorCode.FEATURE_UPDATE_FAILED


class PrincipalDeserializationFailureError(KafkaError):
    """The broker could not deserialize the forwarded request principal.

    Kafka error code 97 (``PRINCIPAL_DESERIALIZATION_FAILURE``); not retriable.
    """

    error_code = ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE


class SnapshotNotFoundError(KafkaError):
    """The requested snapshot was not found.

    Kafka error code 98 (``SNAPSHOT_NOT_FOUND``); not retriable.
    """

    error_code = ErrorCode.SNAPSHOT_NOT_FOUND


class PositionOutOfRangeError(KafkaError):
    """The requested position is outside the snapshot.

    Kafka error code 99 (``POSITION_OUT_OF_RANGE``); not retriable.
    """

    error_code = ErrorCode.POSITION_OUT_OF_RANGE


class UnknownTopicIdError(InvalidMetadataError):
    """The broker does not host a topic with this topic id.

    Kafka error code 100 (``UNKNOWN_TOPIC_ID``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.UNKNOWN_TOPIC_ID


class DuplicateBrokerRegistrationError(KafkaError):
    """This broker id is already in use.

    Kafka error code 101 (``DUPLICATE_BROKER_REGISTRATION``); not retriable.
    """

    error_code = ErrorCode.DUPLICATE_BROKER_REGISTRATION


class BrokerIdNotRegisteredError(KafkaError):
    """The broker id was not registered.

    Kafka error code 102 (``BROKER_ID_NOT_REGISTERED``); not retriable.
    """

    error_code = ErrorCode.BROKER_ID_NOT_REGISTERED


class InconsistentTopicIdError(InvalidMetadataError):
    """The topic id in the request does not match the topic id of the log.

    Kafka error code 103 (``INCONSISTENT_TOPIC_ID``); retriable after a metadata refresh.
    """

    error_code = ErrorCode.INCONSISTENT_TOPIC_ID


class InconsistentClusterIdError(KafkaError):
    """The cluster id in the request does not match the broker's.

    Kafka error code 104 (``INCONSISTENT_CLUSTER_ID``); not retriable.
    """

    error_code = ErrorCode.INCONSISTENT_CLUSTER_ID


class TransactionalIdNotFoundError(KafkaError):
    """The transactional id could not be found.

    Kafka error code 105 (``TRANSACTIONAL_ID_NOT_FOUND``); not retriable.
    """

    error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


class FetchSessionTopicIdError(KafkaError):
    """The fetch session used topic ids inconsistently.

    Kafka error code 106 (``FETCH_SESSION_TOPIC_ID_ERROR``); retriable.
    """

    retriable = True
    error_code = ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


class IneligibleReplicaError(KafkaError):
    """The new in-sync replica set contains an ineligible replica.

    Kafka error code 107 (``INELIGIBLE_REPLICA``); not retriable.
    """

    error_code = ErrorCode.INELIGIBLE_REPLICA


class NewLeaderElectedError(KafkaError):
    """The partition state was updated, but the leader has changed.

    Kafka error code 108 (``NEW_LEADER_ELECTED``); not retriable.
    """

    error_code = ErrorCode.NEW_LEADER_ELECTED


class OffsetMovedToTieredStorageError(KafkaError):
    """The requested offset has moved to tiered storage.

    Kafka error code 109 (``OFFSET_MOVED_TO_TIERED_STORAGE``); not retriable.
    """

    error_code = ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE


class FencedMemberEpochError(KafkaError):
    """The group coordinator fenced the member epoch; the member must rejoin.

    Kafka error code 110 (``FENCED_MEMBER_EPOCH``); not retriable.
    """

    error_code = ErrorCode.FENCED_MEMBER_EPOCH


class UnreleasedInstanceIdError(KafkaError):
    """Another member still uses the instance id.

    Kafka error code 111 (``UNRELEASED_INSTANCE_ID``); not retriable.
    """

    error_code = ErrorCode.UNRELEASED_INSTANCE_ID


class UnsupportedAssignorError(KafkaError):
    """The group does not support the assignor or its version range.

    Kafka error code 112 (``UNSUPPORTED_ASSIGNOR``); not retriable.
    """

    error_code = ErrorCode.UNSUPPORTED_ASSIGNOR


class StaleMemberEpochError(KafkaError):
    """The member epoch is stale.

    Kafka error code 113 (``STALE_MEMBER_EPOCH``); not retriable.
    """

    error_code = ErrorCode.STALE_MEMBER_EPOCH


class MismatchedEndpointTypeError(KafkaError):
    """The request was sent to an endpoint of the wrong type.

    Kafka error code 114 (``MISMATCHED_ENDPOINT_TYPE``); not retriable.
    """

    error_code = ErrorCode.MISMATCHED_ENDPOINT_TYPE


class UnsupportedEndpointTypeError(KafkaError):
    """This endpoint type is not supported yet.

    Kafka error code 115 (``UNSUPPORTED_ENDPOINT_TYPE``); not retriable.
    """

    error_code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


class UnknownControllerIdError(KafkaError):
    """The controller id is not known.

    Kafka error code 116 (``UNKNOWN_CONTROLLER_ID``); not retriable.
    """

    error_code = ErrorCode.UNKNOWN_CONTROLLER_ID


class UnknownSubscriptionIdError(KafkaError):
    """The telemetry subscription id is invalid or outdated.

    Kafka error code 117 (``UNKNOWN_SUBSCRIPTION_ID``); not retriable.
    """

    error_code = ErrorCode.UNKNOWN_SUBSCRIPTION_ID


class TelemetryTooLargeError(KafkaError):
    """The telemetry push is larger than the broker accepts.

    Kafka error code 118 (``TELEMETRY_TOO_LARGE``); not retriable.
    """

    error_code = ErrorCode.TELEMETRY_TOO_LARGE


class InvalidRegistrationError(KafkaError):
    """The controller considers the broker registration invalid.

    Kafka error code 119 (``INVALID_REGISTRATION``); not retriable.
    """

    error_code = ErrorCode.INVALID_REGISTRATION


class TransactionAbortableError(KafkaError):
    """The broker hit an error in the transaction; abort it to keep using the transactional id.

    Kafka error code 120 (``TRANSACTION_ABORTABLE``); not retriable; abort the transaction.
    """

    error_code = ErrorCode.TRANSACTION_ABORTABLE


class InvalidRecordStateError(KafkaError):
    """The record state is invalid, so its acknowledgement could not be completed.

    Kafka error code 121 (``INVALID_RECORD_STATE``); not retriable.
    """

    error_code = ErrorCode.INVALID_RECORD_STATE


class ShareSessionNotFoundError(KafkaError):
    """The share session was not found.

    Kafka error code 122 (``SHARE_SESSION_NOT_FOUND``); retriable.
    """

    retriable = True
    error_code = ErrorCode.SHARE_SESSION_NOT_FOUND


class InvalidShareSessionEpochError(KafkaError):
    """The share session epoch is invalid.

    Kafka error code 123 (``INVALID_SHARE_SESSION_EPOCH``); retriable.
    """

    retriable = True
    error_code = ErrorCode.INVALID_SHARE_SESSION_EPOCH


class FencedStateEpochError(KafkaError):
    """The share-group state epoch did not match.

    Kafka error code 124 (``FENCED_STATE_EPOCH``); not retriable.
    """

    error_code = ErrorCode.FENCED_STATE_EPOCH


class InvalidVoterKeyError(KafkaError):
    """The voter key does not match the receiving replica's key.

    Kafka error code 125 (``INVALID_VOTER_KEY``); not retriable.
    """

    error_code = ErrorCode.INVALID_VOTER_KEY


class DuplicateVoterError(KafkaError):
    """The voter is already part of the voter set.

    Kafka error code 126 (``DUPLICATE_VOTER``); not retriable.
    """

    error_code = ErrorCode.DUPLICATE_VOTER


class VoterNotFoundError(KafkaError):
    """The voter is not part of the voter set.

    Kafka error code 127 (``VOTER_NOT_FOUND``); not retriable.
    """

    error_code = ErrorCode.VOTER_NOT_FOUND


class InvalidRegularExpressionError(KafkaError):
    """The regular expression is not valid.

    Kafka error code 128 (``INVALID_REGULAR_EXPRESSION``); not retriable.
    """

    error_code = ErrorCode.INVALID_REGULAR_EXPRESSION


class RebootstrapRequiredError(KafkaError):
    """The client's metadata is stale; it should bootstrap again.

    Kafka error code 129 (``REBOOTSTRAP_REQUIRED``); not retriable.
    """

    error_code = ErrorCode.REBOOTSTRAP_REQUIRED


class StreamsInvalidTopologyError(KafkaError):
    """The supplied streams topology is invalid.

    Kafka error code 130 (``STREAMS_INVALID_TOPOLOGY``); not retriable.
    """

    error_code = ErrorCode.STREAMS_INVALID_TOPOLOGY


class StreamsInvalidTopologyEpochError(KafkaError):
    """The supplied streams topology epoch is invalid.

    Kafka error code 131 (``STREAMS_INVALID_TOPOLOGY_EPOCH``); not retriable.
    """

    error_code = ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH


class StreamsTopologyFencedError(KafkaError):
    """The supplied streams topology epoch is outdated.

    Kafka error code 132 (``STREAMS_TOPOLOGY_FENCED``); not retriable.
    """

    error_code = ErrorCode.STREAMS_TOPOLOGY_FENCED


class ShareSessionLimitReachedError(KafkaError):
    """The broker's limit of share sessions has been reached.

    Kafka error code 133 (``SHARE_SESSION_LIMIT_REACHED``); retriable.
    """

    retriable = True
    error_code = ErrorCode.SHARE_SESSION_LIMIT_REACHED


# Every class above, in code order: ERROR_CODES is made from it.
_BROKER_ERRORS: tuple[type[KafkaError], ...] = (
    UnknownServerError,
    OffsetOutOfRangeError,
    CorruptMessageError,
    UnknownTopicOrPartitionError,
    InvalidFetchSizeError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    BrokerNotAvailableError,
    ReplicaNotAvailableError,
    RecordTooLargeError,
    StaleControllerEpochError,
    OffsetMetadataTooLargeError,
    NetworkError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    InvalidTopicError,
    RecordListTooLargeError,
    NotEnoughReplicasError,
    NotEnoughReplicasAfterAppendError,
    InvalidRequiredAcksError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    UnknownMemberIdError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    InvalidCommitOffsetSizeError,
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    InvalidTimestampError,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
    UnsupportedVersionError,
    TopicAlreadyExistsError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidReplicaAssignmentError,
    InvalidConfigError,
    NotControllerError,
    InvalidRequestError,
    UnsupportedForMessageFormatError,
    PolicyViolationError,
    OutOfOrderSequenceNumberError,
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    ConcurrentTransactionsError,
    TransactionCoordinatorFencedError,
    TransactionalIdAuthorizationFailedError,
    SecurityDisabledError,
    OperationNotAttemptedError,
    KafkaStorageError,
    LogDirNotFoundError,
    SaslAuthenticationFailedError,
    UnknownProducerIdError,
    ReassignmentInProgressError,
    DelegationTokenAuthDisabledError,
    DelegationTokenNotFoundError,
    DelegationTokenOwnerMismatchError,
    DelegationTokenRequestNotAllowedError,
    DelegationTokenAuthorizationFailedError,
    DelegationTokenExpiredError,
    InvalidPrincipalTypeError,
    NonEmptyGroupError,
    GroupIdNotFoundError,
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    ListenerNotFoundError,
    TopicDeletionDisabledError,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
    UnsupportedCompressionTypeError,
    StaleBrokerEpochError,
    OffsetNotAvailableError,
    MemberIdRequiredError,
    PreferredLeaderNotAvailableError,
    GroupMaxSizeReachedError,
    FencedInstanceIdError,
    EligibleLeadersNotAvailableError,
    ElectionNotNeededError,
    NoReassignmentInProgressError,
    GroupSubscribedToTopicError,
    InvalidRecordError,
    UnstableOffsetCommitError,
    ThrottlingQuotaExceededError,
    ProducerFencedError,
    ResourceNotFoundError,
    DuplicateResourceError,
    UnacceptableCredentialError,
    InconsistentVoterSetError,
    InvalidUpdateVersionError,
    FeatureUpdateFailedError,
    PrincipalDeserializationFailureError,
    SnapshotNotFoundError,
    PositionOutOfRangeError,
    UnknownTopicIdError,
    DuplicateBrokerRegistrationError,
    BrokerIdNotRegisteredError,
    InconsistentTopicIdError,
    InconsistentClusterIdError,
    TransactionalIdNotFoundError,
    FetchSessionTopicIdError,
    IneligibleReplicaError,
    NewLeaderElectedError,
    OffsetMovedToTieredStorageError,
    FencedMemberEpochError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    StaleMemberEpochError,
    MismatchedEndpointTypeError,
    UnsupportedEndpointTypeError,
    UnknownControllerIdError,
    UnknownSubscriptionIdError,
    TelemetryTooLargeError,
    InvalidRegistrationError,
    TransactionAbortableError,
    InvalidRecordStateError,
    ShareSessionNotFoundError,
    InvalidShareSessionEpochError,
    FencedStateEpochError,
    InvalidVoterKeyError,
    DuplicateVoterError,
    VoterNotFoundError,
    InvalidRegularExpressionError,
    RebootstrapRequiredError,
    StreamsInvalidTopologyError,
    StreamsInvalidTopologyEpochError,
    StreamsTopologyFencedError,
    ShareSessionLimitReachedError,
)
# ---- end of the generated classes ----------------------------------------------------------------


def _code_table() -> Mapping[int, type[KafkaError]]:
    table: dict[int, type[KafkaError]] = {}
    for cls in _BROKER_ERRORS:
        code = cls.error_code
        assert code is not None and code not in table, cls
        table[code] = cls
    return MappingProxyType(table)


ERROR_CODES: Mapping[int, type[KafkaError]] = _code_table()
"""Every Kafka error code this client knows (``-1`` and ``1`` upwards), mapped to its class."""


def error_for_code(
    code: int, message: str | None = None, *, where: str | None = None
) -> KafkaError:
    """Return an exception instance for a Kafka error ``code`` taken from a response.

    The message starts with the code and its protocol name, then the broker's own
    ``message`` when it sent one (else the class's description), then ``where`` the error
    applies (such as ``"topic-partition orders-3"``) in parentheses. A code this client does
    not know gives an :class:`UnknownServerError` whose ``code`` attribute and message carry
    the number, as the Java client does.

    Raises:
        ValueError: ``code`` is 0, which means "no error".
    """
    if code == 0:
        raise ValueError("error code 0 means no error")
    suffix = f" ({where})" if where else ""
    cls = ERROR_CODES.get(code)
    if cls is None:
        text = f"[Error {code}] unknown error code"
        return UnknownServerError(
            f"{text}: {message}{suffix}" if message else text + suffix, code=code
        )
    detail = message or _description(cls)
    text = f"[Error {code} {cls.error_name}]"
    return cls(f"{text} {detail}{suffix}" if detail else text + suffix)


def _description(cls: type[KafkaError]) -> str:
    doc = cls.__doc__
    # Docstrings are absent under ``python -OO``; the code and name still identify the error.
    return doc.strip().split("\n", 1)[0] if doc else ""
