"""The one table of Kafka error codes, from which ``python -m tools.generate_errors`` writes
``ErrorCode`` (aioproducer/protocol/error_codes.py) and one error class per code, with the
code-to-class map (aioproducer/errors.py).

Each row is a code, its protocol name (as Java's ``org.apache.kafka.common.protocol.Errors``
names it), the class aioproducer raises for it and the class's first paragraph. Keyword
fields say what differs from a plain, not retriable error:

- ``family``: the base class; ``METADATA`` (``InvalidMetadataError``: refresh metadata, then
  retry; retriable), ``AUTHORIZATION``, ``AUTHENTICATION``, or an earlier row's class.
  Without it: ``KafkaError``.
- ``retriable``: True where Java's exception extends ``RetriableException``.
- ``note``: what the docstring says after the code, when it is more than "retriable" or
  "not retriable".
- ``also_raised_by_the_client``: the client raises the class too, not only on this code.
- ``compiled_literal``: compiled modules compare the code, so error_codes.py also defines
  it as a ``Final`` literal (mypyc folds those into the comparison).
- ``hand_written``: errors.py defines the class by hand (it has behaviour of its own); the
  generator lists it in ``__all__`` and ``ERROR_CODES`` and checks it names its code.

To add a code: add its row in code order, run ``python -m tools.generate_errors``, and commit
the table with the two files it rewrites. ``tests/unit/test_errors.py`` fails while they
disagree.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["AUTHENTICATION", "AUTHORIZATION", "METADATA", "ROWS", "KafkaErrorRow"]

METADATA = "InvalidMetadataError"
AUTHORIZATION = "AuthorizationError"
AUTHENTICATION = "AuthenticationError"


class KafkaErrorRow(NamedTuple):
    """One Kafka error code and the class aioproducer raises for it."""

    code: int
    name: str
    cls: str
    doc: str
    family: str = "KafkaError"
    retriable: bool = False
    note: str | None = None
    also_raised_by_the_client: bool = False
    compiled_literal: bool = False
    hand_written: bool = False

    @property
    def docstring_note(self) -> str:
        """What the docstring says after the code."""
        if self.note is not None:
            return self.note
        if self.family == METADATA:
            return "retriable after a metadata refresh"
        return "retriable" if self.retriable else "not retriable"


E = KafkaErrorRow

ROWS: tuple[KafkaErrorRow, ...] = (
    # Written by hand in errors.py: its __init__ keeps the number the broker sent.
    E(-1, "UNKNOWN_SERVER_ERROR", "UnknownServerError", "", hand_written=True),
    E(
        1,
        "OFFSET_OUT_OF_RANGE",
        "OffsetOutOfRangeError",
        "The requested offset is outside the range the broker holds.",
    ),
    E(
        2,
        "CORRUPT_MESSAGE",
        "CorruptMessageError",
        "A record batch failed its CRC check, exceeded the valid size, or was otherwise malformed.",
        retriable=True,
    ),
    E(
        3,
        "UNKNOWN_TOPIC_OR_PARTITION",
        "UnknownTopicOrPartitionError",
        "The topic or partition does not exist (or did not appear within ``max_block_ms``).",
        family=METADATA,
        also_raised_by_the_client=True,
    ),
    E(4, "INVALID_FETCH_SIZE", "InvalidFetchSizeError", "The requested fetch size is invalid."),
    E(
        5,
        "LEADER_NOT_AVAILABLE",
        "LeaderNotAvailableError",
        "The partition has no leader right now, typically during a leader election.",
        family=METADATA,
    ),
    E(
        6,
        "NOT_LEADER_OR_FOLLOWER",
        "NotLeaderOrFollowerError",
        "The broker is not the leader of the partition (or not a replica of it).",
        family=METADATA,
    ),
    E(
        7,
        "REQUEST_TIMED_OUT",
        "RequestTimedOutError",
        "A request got no response within ``request_timeout_ms``.",
        retriable=True,
        note="retriable, but the records may have been written",
        also_raised_by_the_client=True,
    ),
    E(8, "BROKER_NOT_AVAILABLE", "BrokerNotAvailableError", "The broker is not available."),
    E(
        9,
        "REPLICA_NOT_AVAILABLE",
        "ReplicaNotAvailableError",
        "The replica is not available for the partition.",
        family=METADATA,
    ),
    E(
        10,
        "MESSAGE_TOO_LARGE",
        "RecordTooLargeError",
        "A record is larger than ``max_request_size`` or ``buffer_memory``"
        " (or the broker's limit).",
        note="not retriable (the sender first splits a batch of several records)",
        also_raised_by_the_client=True,
        compiled_literal=True,
    ),
    E(
        11,
        "STALE_CONTROLLER_EPOCH",
        "StaleControllerEpochError",
        "The controller moved to another broker.",
    ),
    E(
        12,
        "OFFSET_METADATA_TOO_LARGE",
        "OffsetMetadataTooLargeError",
        "The metadata attached to an offset commit is too large.",
    ),
    E(
        13,
        "NETWORK_EXCEPTION",
        "NetworkError",
        "The broker disconnected before a response was received.",
        family=METADATA,
    ),
    E(
        14,
        "COORDINATOR_LOAD_IN_PROGRESS",
        "CoordinatorLoadInProgressError",
        "The coordinator is still loading its state and cannot serve requests yet.",
        retriable=True,
    ),
    E(
        15,
        "COORDINATOR_NOT_AVAILABLE",
        "CoordinatorNotAvailableError",
        "The coordinator is not available; look it up again.",
        retriable=True,
    ),
    E(
        16,
        "NOT_COORDINATOR",
        "NotCoordinatorError",
        "The broker is not the coordinator for this key; look the coordinator up again.",
        retriable=True,
    ),
    E(
        17,
        "INVALID_TOPIC_EXCEPTION",
        "InvalidTopicError",
        "The topic name is not a legal Kafka topic name, or the broker rejected it.",
        also_raised_by_the_client=True,
    ),
    E(
        18,
        "RECORD_LIST_TOO_LARGE",
        "RecordListTooLargeError",
        "A record batch is larger than the broker's configured segment size.",
    ),
    E(
        19,
        "NOT_ENOUGH_REPLICAS",
        "NotEnoughReplicasError",
        "Fewer in-sync replicas than ``min.insync.replicas``; the records were not written.",
        retriable=True,
    ),
    E(
        20,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "NotEnoughReplicasAfterAppendError",
        "The records were written to the leader, but to fewer in-sync replicas than required.",
        retriable=True,
    ),
    E(
        21,
        "INVALID_REQUIRED_ACKS",
        "InvalidRequiredAcksError",
        "The produce request carried an ``acks`` value the broker does not accept.",
    ),
    E(
        22,
        "ILLEGAL_GENERATION",
        "IllegalGenerationError",
        "The consumer group generation id is not valid.",
    ),
    E(
        23,
        "INCONSISTENT_GROUP_PROTOCOL",
        "InconsistentGroupProtocolError",
        "The member's group protocols are incompatible with those of the other members.",
    ),
    E(24, "INVALID_GROUP_ID", "InvalidGroupIdError", "The group id is invalid."),
    E(
        25,
        "UNKNOWN_MEMBER_ID",
        "UnknownMemberIdError",
        "The coordinator does not know this group member.",
    ),
    E(
        26,
        "INVALID_SESSION_TIMEOUT",
        "InvalidSessionTimeoutError",
        "The session timeout is outside the range the broker allows.",
    ),
    E(
        27,
        "REBALANCE_IN_PROGRESS",
        "RebalanceInProgressError",
        "The group is rebalancing, so the member must rejoin.",
    ),
    E(
        28,
        "INVALID_COMMIT_OFFSET_SIZE",
        "InvalidCommitOffsetSizeError",
        "The size of the committed offset data is not valid.",
    ),
    E(
        29,
        "TOPIC_AUTHORIZATION_FAILED",
        "TopicAuthorizationFailedError",
        "The principal may not access the topic.",
        family=AUTHORIZATION,
    ),
    E(
        30,
        "GROUP_AUTHORIZATION_FAILED",
        "GroupAuthorizationFailedError",
        "The principal may not access the group.",
        family=AUTHORIZATION,
    ),
    E(
        31,
        "CLUSTER_AUTHORIZATION_FAILED",
        "ClusterAuthorizationFailedError",
        "The principal lacks a cluster permission (such as IdempotentWrite); fatal for a producer.",
        family=AUTHORIZATION,
    ),
    E(
        32,
        "INVALID_TIMESTAMP",
        "InvalidTimestampError",
        "A record timestamp is outside the range the broker accepts.",
        compiled_literal=True,
    ),
    E(
        33,
        "UNSUPPORTED_SASL_MECHANISM",
        "UnsupportedSaslMechanismError",
        "The broker does not support the requested SASL mechanism.",
        family=AUTHENTICATION,
        compiled_literal=True,
    ),
    E(
        34,
        "ILLEGAL_SASL_STATE",
        "IllegalSaslStateError",
        "The request is not valid in the current state of the SASL exchange.",
        family=AUTHENTICATION,
        compiled_literal=True,
    ),
    E(
        35,
        "UNSUPPORTED_VERSION",
        "UnsupportedVersionError",
        "The broker does not support a version of a request this client can send.",
        note="not retriable, fatal for the producer",
        also_raised_by_the_client=True,
        compiled_literal=True,
    ),
    E(
        36,
        "TOPIC_ALREADY_EXISTS",
        "TopicAlreadyExistsError",
        "A topic with this name already exists.",
    ),
    E(
        37,
        "INVALID_PARTITIONS",
        "InvalidPartitionsError",
        "The number of partitions is invalid (``NewTopic`` refuses one below 1 before anything "
        "is sent).",
        also_raised_by_the_client=True,
    ),
    E(
        38,
        "INVALID_REPLICATION_FACTOR",
        "InvalidReplicationFactorError",
        "The replication factor is below 1 or larger than the number of brokers (``NewTopic`` "
        "refuses one below 1).",
        also_raised_by_the_client=True,
    ),
    E(
        39,
        "INVALID_REPLICA_ASSIGNMENT",
        "InvalidReplicaAssignmentError",
        "The replica assignment is invalid (``NewTopic`` refuses one that skips a partition or "
        "names a broker twice for one).",
        also_raised_by_the_client=True,
    ),
    E(
        40,
        "INVALID_CONFIG",
        "InvalidConfigError",
        "A configuration in the request is invalid: the broker refused it, or ``NewTopic`` did "
        "(a config value of the wrong type).",
        also_raised_by_the_client=True,
    ),
    E(
        41,
        "NOT_CONTROLLER",
        "NotControllerError",
        "The broker is not the controller of the cluster.",
        retriable=True,
    ),
    E(
        42,
        "INVALID_REQUEST",
        "InvalidRequestError",
        "The broker could not make sense of the request (malformed, or an incompatible broker).",
    ),
    E(
        43,
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        "UnsupportedForMessageFormatError",
        "The message format version on the broker does not support the request.",
    ),
    E(
        44,
        "POLICY_VIOLATION",
        "PolicyViolationError",
        "The request does not satisfy a policy configured on the broker.",
    ),
    E(
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "OutOfOrderSequenceNumberError",
        "The broker received a batch whose sequence number does not follow the last one it stored.",
        note="the idempotent producer may recover by bumping its epoch, otherwise not retriable",
        compiled_literal=True,
    ),
    E(
        46,
        "DUPLICATE_SEQUENCE_NUMBER",
        "DuplicateSequenceNumberError",
        "The broker already holds a batch with this sequence number.",
        note="the producer completes the batch as delivered, without an offset",
        compiled_literal=True,
    ),
    E(
        47,
        "INVALID_PRODUCER_EPOCH",
        "InvalidProducerEpochError",
        "The producer used an epoch older than the one the broker knows.",
        compiled_literal=True,
    ),
    E(
        48,
        "INVALID_TXN_STATE",
        "InvalidTxnStateError",
        "The transactional operation is not valid in the transaction's current state.",
    ),
    E(
        49,
        "INVALID_PRODUCER_ID_MAPPING",
        "InvalidProducerIdMappingError",
        "The producer id is not currently assigned to this transactional id.",
    ),
    E(
        50,
        "INVALID_TRANSACTION_TIMEOUT",
        "InvalidTransactionTimeoutError",
        "``transaction_timeout_ms`` exceeds the broker's ``transaction.max.timeout.ms``.",
    ),
    E(
        51,
        "CONCURRENT_TRANSACTIONS",
        "ConcurrentTransactionsError",
        "Another operation on the same transaction is still in progress.",
        retriable=True,
    ),
    E(
        52,
        "TRANSACTION_COORDINATOR_FENCED",
        "TransactionCoordinatorFencedError",
        "The transaction coordinator that sent the request is no longer the current one.",
    ),
    E(
        53,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "TransactionalIdAuthorizationFailedError",
        "The principal may not use the transactional id; fatal for the producer.",
        family=AUTHORIZATION,
    ),
    E(
        54,
        "SECURITY_DISABLED",
        "SecurityDisabledError",
        "Security features are disabled on the broker.",
    ),
    E(
        55,
        "OPERATION_NOT_ATTEMPTED",
        "OperationNotAttemptedError",
        "The broker did not attempt this operation because another part of the request failed.",
    ),
    E(
        56,
        "KAFKA_STORAGE_ERROR",
        "KafkaStorageError",
        "The broker hit a disk error while accessing the partition's log.",
        family=METADATA,
    ),
    E(
        57,
        "LOG_DIR_NOT_FOUND",
        "LogDirNotFoundError",
        "The requested log directory is not in the broker's configuration.",
    ),
    E(
        58,
        "SASL_AUTHENTICATION_FAILED",
        "SaslAuthenticationFailedError",
        "SASL authentication failed (wrong credentials or mechanism).",
        family=AUTHENTICATION,
    ),
    E(
        59,
        "UNKNOWN_PRODUCER_ID",
        "UnknownProducerIdError",
        "The broker has no state for the producer id (for example, retention removed its records).",
        family="OutOfOrderSequenceNumberError",
        note="the idempotent producer may recover by bumping its epoch, otherwise not retriable",
        compiled_literal=True,
    ),
    E(
        60,
        "REASSIGNMENT_IN_PROGRESS",
        "ReassignmentInProgressError",
        "A partition reassignment is in progress.",
    ),
    E(
        61,
        "DELEGATION_TOKEN_AUTH_DISABLED",
        "DelegationTokenAuthDisabledError",
        "The delegation token feature is not enabled.",
    ),
    E(
        62,
        "DELEGATION_TOKEN_NOT_FOUND",
        "DelegationTokenNotFoundError",
        "The delegation token is not known to the broker.",
    ),
    E(
        63,
        "DELEGATION_TOKEN_OWNER_MISMATCH",
        "DelegationTokenOwnerMismatchError",
        "The principal is not the owner or a renewer of the delegation token.",
    ),
    E(
        64,
        "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        "DelegationTokenRequestNotAllowedError",
        "Delegation token requests are not allowed on this kind of channel.",
    ),
    E(
        65,
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        "DelegationTokenAuthorizationFailedError",
        "The principal may not use the delegation token.",
        family=AUTHORIZATION,
    ),
    E(
        66,
        "DELEGATION_TOKEN_EXPIRED",
        "DelegationTokenExpiredError",
        "The delegation token has expired.",
    ),
    E(
        67,
        "INVALID_PRINCIPAL_TYPE",
        "InvalidPrincipalTypeError",
        "The principal type is not supported.",
    ),
    E(68, "NON_EMPTY_GROUP", "NonEmptyGroupError", "The group is not empty."),
    E(69, "GROUP_ID_NOT_FOUND", "GroupIdNotFoundError", "The group id does not exist."),
    E(
        70,
        "FETCH_SESSION_ID_NOT_FOUND",
        "FetchSessionIdNotFoundError",
        "The fetch session id was not found.",
        retriable=True,
    ),
    E(
        71,
        "INVALID_FETCH_SESSION_EPOCH",
        "InvalidFetchSessionEpochError",
        "The fetch session epoch is invalid.",
        retriable=True,
    ),
    E(
        72,
        "LISTENER_NOT_FOUND",
        "ListenerNotFoundError",
        "The leader has no listener matching the one the metadata request arrived on.",
        family=METADATA,
    ),
    E(
        73,
        "TOPIC_DELETION_DISABLED",
        "TopicDeletionDisabledError",
        "Topic deletion is disabled on the broker.",
    ),
    E(
        74,
        "FENCED_LEADER_EPOCH",
        "FencedLeaderEpochError",
        "The leader epoch in the request is older than the broker's.",
        family=METADATA,
    ),
    E(
        75,
        "UNKNOWN_LEADER_EPOCH",
        "UnknownLeaderEpochError",
        "The leader epoch in the request is newer than the broker's.",
        retriable=True,
    ),
    E(
        76,
        "UNSUPPORTED_COMPRESSION_TYPE",
        "UnsupportedCompressionTypeError",
        "The broker or the request version does not support the compression codec.",
    ),
    E(77, "STALE_BROKER_EPOCH", "StaleBrokerEpochError", "The broker epoch has changed."),
    E(
        78,
        "OFFSET_NOT_AVAILABLE",
        "OffsetNotAvailableError",
        "The new leader's high watermark has not caught up yet, so offsets are not available.",
        retriable=True,
    ),
    E(
        79,
        "MEMBER_ID_REQUIRED",
        "MemberIdRequiredError",
        "The group member needs a member id before joining.",
    ),
    E(
        80,
        "PREFERRED_LEADER_NOT_AVAILABLE",
        "PreferredLeaderNotAvailableError",
        "The preferred leader is not available.",
        family=METADATA,
    ),
    E(
        81,
        "GROUP_MAX_SIZE_REACHED",
        "GroupMaxSizeReachedError",
        "The group has reached its maximum size.",
    ),
    E(
        82,
        "FENCED_INSTANCE_ID",
        "FencedInstanceIdError",
        "Another member with the same ``group.instance.id`` fenced this one.",
    ),
    E(
        83,
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        "EligibleLeadersNotAvailableError",
        "No eligible leader is available for the partition.",
        family=METADATA,
    ),
    E(
        84,
        "ELECTION_NOT_NEEDED",
        "ElectionNotNeededError",
        "No leader election is needed for the partition.",
        family=METADATA,
    ),
    E(
        85,
        "NO_REASSIGNMENT_IN_PROGRESS",
        "NoReassignmentInProgressError",
        "No partition reassignment is in progress.",
    ),
    E(
        86,
        "GROUP_SUBSCRIBED_TO_TOPIC",
        "GroupSubscribedToTopicError",
        "The group is subscribed to the topic, so its offsets cannot be deleted.",
    ),
    E(
        87,
        "INVALID_RECORD",
        "InvalidRecordError",
        "The broker's validation rejected a record (for example a null key on a compacted topic).",
        compiled_literal=True,
    ),
    E(
        88,
        "UNSTABLE_OFFSET_COMMIT",
        "UnstableOffsetCommitError",
        "There are unstable offsets that must be cleared first.",
        retriable=True,
    ),
    E(
        89,
        "THROTTLING_QUOTA_EXCEEDED",
        "ThrottlingQuotaExceededError",
        "The principal exceeded a throttling quota.",
        retriable=True,
    ),
    E(
        90,
        "PRODUCER_FENCED",
        "ProducerFencedError",
        "Another producer with the same transactional id has fenced this one.",
        note="not retriable, fatal for the producer",
        also_raised_by_the_client=True,
        compiled_literal=True,
    ),
    E(
        91,
        "RESOURCE_NOT_FOUND",
        "ResourceNotFoundError",
        "The request referred to a resource that does not exist.",
    ),
    E(
        92,
        "DUPLICATE_RESOURCE",
        "DuplicateResourceError",
        "The request referred to the same resource twice.",
    ),
    E(
        93,
        "UNACCEPTABLE_CREDENTIAL",
        "UnacceptableCredentialError",
        "The requested credential does not meet the criteria for acceptability.",
    ),
    E(
        94,
        "INCONSISTENT_VOTER_SET",
        "InconsistentVoterSetError",
        "The sender or recipient of a voter-only request is not an expected voter.",
    ),
    E(95, "INVALID_UPDATE_VERSION", "InvalidUpdateVersionError", "The update version is invalid."),
    E(
        96,
        "FEATURE_UPDATE_FAILED",
        "FeatureUpdateFailedError",
        "The broker could not update the finalized features.",
    ),
    E(
        97,
        "PRINCIPAL_DESERIALIZATION_FAILURE",
        "PrincipalDeserializationFailureError",
        "The broker could not deserialize the forwarded request principal.",
    ),
    E(98, "SNAPSHOT_NOT_FOUND", "SnapshotNotFoundError", "The requested snapshot was not found."),
    E(
        99,
        "POSITION_OUT_OF_RANGE",
        "PositionOutOfRangeError",
        "The requested position is outside the snapshot.",
    ),
    E(
        100,
        "UNKNOWN_TOPIC_ID",
        "UnknownTopicIdError",
        "The broker does not host a topic with this topic id.",
        family=METADATA,
    ),
    E(
        101,
        "DUPLICATE_BROKER_REGISTRATION",
        "DuplicateBrokerRegistrationError",
        "This broker id is already in use.",
    ),
    E(
        102,
        "BROKER_ID_NOT_REGISTERED",
        "BrokerIdNotRegisteredError",
        "The broker id was not registered.",
    ),
    E(
        103,
        "INCONSISTENT_TOPIC_ID",
        "InconsistentTopicIdError",
        "The topic id in the request does not match the topic id of the log.",
        family=METADATA,
    ),
    E(
        104,
        "INCONSISTENT_CLUSTER_ID",
        "InconsistentClusterIdError",
        "The cluster id in the request does not match the broker's.",
    ),
    E(
        105,
        "TRANSACTIONAL_ID_NOT_FOUND",
        "TransactionalIdNotFoundError",
        "The transactional id could not be found.",
    ),
    E(
        106,
        "FETCH_SESSION_TOPIC_ID_ERROR",
        "FetchSessionTopicIdError",
        "The fetch session used topic ids inconsistently.",
        retriable=True,
    ),
    E(
        107,
        "INELIGIBLE_REPLICA",
        "IneligibleReplicaError",
        "The new in-sync replica set contains an ineligible replica.",
    ),
    E(
        108,
        "NEW_LEADER_ELECTED",
        "NewLeaderElectedError",
        "The partition state was updated, but the leader has changed.",
    ),
    E(
        109,
        "OFFSET_MOVED_TO_TIERED_STORAGE",
        "OffsetMovedToTieredStorageError",
        "The requested offset has moved to tiered storage.",
    ),
    E(
        110,
        "FENCED_MEMBER_EPOCH",
        "FencedMemberEpochError",
        "The group coordinator fenced the member epoch; the member must rejoin.",
    ),
    E(
        111,
        "UNRELEASED_INSTANCE_ID",
        "UnreleasedInstanceIdError",
        "Another member still uses the instance id.",
    ),
    E(
        112,
        "UNSUPPORTED_ASSIGNOR",
        "UnsupportedAssignorError",
        "The group does not support the assignor or its version range.",
    ),
    E(113, "STALE_MEMBER_EPOCH", "StaleMemberEpochError", "The member epoch is stale."),
    E(
        114,
        "MISMATCHED_ENDPOINT_TYPE",
        "MismatchedEndpointTypeError",
        "The request was sent to an endpoint of the wrong type.",
    ),
    E(
        115,
        "UNSUPPORTED_ENDPOINT_TYPE",
        "UnsupportedEndpointTypeError",
        "This endpoint type is not supported yet.",
    ),
    E(116, "UNKNOWN_CONTROLLER_ID", "UnknownControllerIdError", "The controller id is not known."),
    E(
        117,
        "UNKNOWN_SUBSCRIPTION_ID",
        "UnknownSubscriptionIdError",
        "The telemetry subscription id is invalid or outdated.",
    ),
    E(
        118,
        "TELEMETRY_TOO_LARGE",
        "TelemetryTooLargeError",
        "The telemetry push is larger than the broker accepts.",
    ),
    E(
        119,
        "INVALID_REGISTRATION",
        "InvalidRegistrationError",
        "The controller considers the broker registration invalid.",
    ),
    E(
        120,
        "TRANSACTION_ABORTABLE",
        "TransactionAbortableError",
        "The broker hit an error in the transaction; abort it to keep using the transactional id.",
        note="not retriable; abort the transaction",
    ),
    E(
        121,
        "INVALID_RECORD_STATE",
        "InvalidRecordStateError",
        "The record state is invalid, so its acknowledgement could not be completed.",
    ),
    E(
        122,
        "SHARE_SESSION_NOT_FOUND",
        "ShareSessionNotFoundError",
        "The share session was not found.",
        retriable=True,
    ),
    E(
        123,
        "INVALID_SHARE_SESSION_EPOCH",
        "InvalidShareSessionEpochError",
        "The share session epoch is invalid.",
        retriable=True,
    ),
    E(
        124,
        "FENCED_STATE_EPOCH",
        "FencedStateEpochError",
        "The share-group state epoch did not match.",
    ),
    E(
        125,
        "INVALID_VOTER_KEY",
        "InvalidVoterKeyError",
        "The voter key does not match the receiving replica's key.",
    ),
    E(126, "DUPLICATE_VOTER", "DuplicateVoterError", "The voter is already part of the voter set."),
    E(127, "VOTER_NOT_FOUND", "VoterNotFoundError", "The voter is not part of the voter set."),
    E(
        128,
        "INVALID_REGULAR_EXPRESSION",
        "InvalidRegularExpressionError",
        "The regular expression is not valid.",
    ),
    E(
        129,
        "REBOOTSTRAP_REQUIRED",
        "RebootstrapRequiredError",
        "The client's metadata is stale; it should bootstrap again.",
    ),
    E(
        130,
        "STREAMS_INVALID_TOPOLOGY",
        "StreamsInvalidTopologyError",
        "The supplied streams topology is invalid.",
    ),
    E(
        131,
        "STREAMS_INVALID_TOPOLOGY_EPOCH",
        "StreamsInvalidTopologyEpochError",
        "The supplied streams topology epoch is invalid.",
    ),
    E(
        132,
        "STREAMS_TOPOLOGY_FENCED",
        "StreamsTopologyFencedError",
        "The supplied streams topology epoch is outdated.",
    ),
    E(
        133,
        "SHARE_SESSION_LIMIT_REACHED",
        "ShareSessionLimitReachedError",
        "The broker's limit of share sessions has been reached.",
        retriable=True,
    ),
)
