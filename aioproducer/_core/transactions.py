"""Transactions: the state machine of the Java client's ``TransactionManager``.

:class:`TransactionManager` extends the idempotent producer's bookkeeping
(:mod:`aioproducer._core.idempotence`) with a ``transactional_id``: it decides which
coordinator request goes next (FindCoordinator, InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn), builds it, and turns each answer into a state
change. The sender does the I/O.

Where the cluster has finalized ``transaction.version`` 2 (KIP-890 part 2, "transactions
v2"), the manager skips AddPartitionsToTxn and AddOffsetsToTxn: partition leaders add a
partition to the transaction when they get its first transactional Produce v12, and the
group coordinator adds the offsets partition on TxnOffsetCommit v5. EndTxn v5 then bumps the
producer epoch after every transaction and returns it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from aioproducer._core.accumulator import ProducerBatch
from aioproducer._core.backoff import ExponentialBackoff
from aioproducer._core.futures import error_copy
from aioproducer._core.idempotence import IdempotenceManager, SequenceVerdict
from aioproducer.errors import (
    ClusterAuthorizationFailedError,
    IllegalStateError,
    KafkaError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
    error_for_code,
)
from aioproducer.protocol.api import ApiKey, Request
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from aioproducer.records import ConsumerGroupMetadata, PreparedTransaction, TransactionState

if TYPE_CHECKING:
    from aioproducer.net.connection import FinalizedFeatures

__all__ = [
    "CoordinatorType",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionState",
    "TransactionStates",
    "TransactionalRequest",
    "TransactionalRequestKind",
    "consumer_group_metadata",
    "normalize_offsets",
    "transaction_v2_usable",
]

log = logging.getLogger("aioproducer.transactions")

TopicPartition = tuple[str, int]

#: The finalized feature whose level says which transaction protocol the cluster runs.
TRANSACTION_VERSION_FEATURE: Final = "transaction.version"
# The last versions of a transactions v1 producer (Java's LAST_STABLE_VERSION_BEFORE_
# TRANSACTION_V2 of ProduceRequest, EndTxnRequest and TxnOffsetCommitRequest): a higher
# version tells the broker the client follows transactions v2.
_PRODUCE_V1_MAX_VERSION: Final = 11
_END_TXN_V1_MAX_VERSION: Final = 4
_TXN_OFFSET_COMMIT_V1_MAX_VERSION: Final = 4
_PRODUCE_V2_MIN_VERSION: Final = 12
_END_TXN_V2_MIN_VERSION: Final = 5


def transaction_v2_usable(features: FinalizedFeatures) -> bool:
    """Whether a transactional producer may use transactions v2 (KIP-890 part 2).

    As the Java client (``TransactionManager.maybeUpdateTransactionV2Enabled``): the cluster
    has finalized ``transaction.version`` at level 2 or more. Unlike Java, the broker that
    reported the feature must also offer Produce v12 and EndTxn v5: v2 without them would
    send Produce v11 without AddPartitionsToTxn, and EndTxn v4 would not return the bumped
    epoch. (A cluster that finalized level 2 has both, so with Kafka this changes nothing.)
    """
    if features.level(TRANSACTION_VERSION_FEATURE) < 2:
        return False
    versions = features.api_versions
    produce = versions.get(ApiKey.PRODUCE, (0, -1))[1]
    end_txn = versions.get(ApiKey.END_TXN, (0, -1))[1]
    return produce >= _PRODUCE_V2_MIN_VERSION and end_txn >= _END_TXN_V2_MIN_VERSION


# Broker error codes the transaction manager treats specially.
_COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
# Errors after which the producer id may still be usable once the transaction is aborted and
# the epoch bumped (Java: abortable when an epoch bump is possible).
_NEEDS_EPOCH_BUMP = frozenset(
    {ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING}
)
# InitProducerId errors that leave a producer bumping its epoch after a transaction able to
# abort and go on (Java's InitProducerIdHandler); at the first InitProducerId they are fatal.
_ABORTABLE_ON_EPOCH_BUMP = frozenset(
    {
        ErrorCode.TRANSACTION_ABORTABLE,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    }
)
# As in Java: a first AddPartitionsToTxn that meets the previous transaction still completing
# retries quickly instead of waiting a full retry_backoff_ms.
_FIRST_ADD_RETRY_BACKOFF = 0.02


_State = TransactionState
# Which states each state may move to. Anything else is a bug, or a user calling an operation
# at the wrong time (which raises IllegalStateError and changes nothing).
_TRANSITIONS: dict[TransactionState, frozenset[TransactionState]] = {
    _State.UNINITIALIZED: frozenset({_State.INITIALIZING}),
    # To ABORTABLE_ERROR: the epoch bump after a transaction met an abortable error (Java's
    # InitProducerIdHandler: authorization and TRANSACTION_ABORTABLE); the next abort bumps.
    _State.INITIALIZING: frozenset({_State.READY, _State.ABORTABLE_ERROR}),
    _State.READY: frozenset({_State.IN_TRANSACTION}),
    _State.IN_TRANSACTION: frozenset(
        {
            _State.COMMITTING_TRANSACTION,
            _State.ABORTING_TRANSACTION,
            _State.ABORTABLE_ERROR,
            _State.PREPARED_TRANSACTION,
        }
    ),
    # Java's PREPARED_TRANSACTION (KIP-939): flushed, not committed; only its end is left.
    _State.PREPARED_TRANSACTION: frozenset(
        {_State.COMMITTING_TRANSACTION, _State.ABORTING_TRANSACTION, _State.ABORTABLE_ERROR}
    ),
    # To INITIALIZING: the epoch bump before the first transactions v2 transaction.
    _State.COMMITTING_TRANSACTION: frozenset(
        {_State.READY, _State.ABORTABLE_ERROR, _State.INITIALIZING}
    ),
    _State.ABORTING_TRANSACTION: frozenset({_State.READY, _State.INITIALIZING}),
    _State.ABORTABLE_ERROR: frozenset({_State.ABORTING_TRANSACTION, _State.ABORTABLE_ERROR}),
    _State.FATAL_ERROR: frozenset(),
}


def consumer_group_metadata(group: object) -> ConsumerGroupMetadata:
    """Turn what ``send_offsets_to_transaction`` accepts into :class:`ConsumerGroupMetadata`.

    Accepts a :class:`ConsumerGroupMetadata`, a plain group id, or any object with a
    ``group_id`` attribute and, optionally, ``generation_id``, ``member_id`` and
    ``group_instance_id`` (so a consumer library's own group metadata object works).

    Raises:
        TypeError: ``group`` is none of these.
        ValueError: the group id is empty.
    """
    if isinstance(group, ConsumerGroupMetadata):
        metadata = group
    elif isinstance(group, str):
        metadata = ConsumerGroupMetadata(group)
    elif isinstance(getattr(group, "group_id", None), str):
        instance_id = getattr(group, "group_instance_id", None)
        metadata = ConsumerGroupMetadata(
            getattr(group, "group_id"),  # noqa: B009 - checked above
            int(getattr(group, "generation_id", -1)),
            str(getattr(group, "member_id", "") or ""),
            None if instance_id is None else str(instance_id),
        )
    else:
        raise TypeError(
            "group_metadata must be a group id (str) or a ConsumerGroupMetadata, not "
            f"{type(group).__name__}"
        )
    if not metadata.group_id:
        raise ValueError("the consumer group id must not be empty")
    return metadata


def normalize_offsets(offsets: object) -> dict[TopicPartition, tuple[int, str | None, int]]:
    """Turn the offsets given to ``send_offsets_to_transaction`` into ``{(topic, partition):
    (offset, metadata, leader_epoch)}`` (leader epoch -1 when not known).

    Keys are ``(topic, partition)`` pairs or objects with ``topic`` and ``partition``
    attributes; values are offsets (the offset of the next record to consume), ``(offset,
    metadata)`` pairs, ``(offset, metadata, leader_epoch)`` triples, or objects with
    ``offset`` and (optionally) ``metadata`` and ``leader_epoch`` attributes (Java's
    ``OffsetAndMetadata``). The leader epoch, as the consumer saw it, lets the group
    coordinator fence a commit from a consumer behind a truncated log (KIP-320); a key
    with a ``leader_epoch`` attribute (confluent-kafka's ``TopicPartition``) gives it
    when the value does not.

    Raises:
        TypeError: ``offsets`` is not a mapping, or a key or value has the wrong shape.
        ValueError: an offset or partition is negative.
    """
    if not isinstance(offsets, Mapping):
        raise TypeError(
            "offsets must be a mapping of (topic, partition) to offset, not "
            f"{type(offsets).__name__}"
        )
    normalized: dict[TopicPartition, tuple[int, str | None, int]] = {}
    for key, value in offsets.items():
        if isinstance(key, tuple) and len(key) == 2:
            topic, partition = key
        elif hasattr(key, "topic") and hasattr(key, "partition"):
            topic, partition = key.topic, key.partition
        else:
            raise TypeError(f"an offsets key must be a (topic, partition) pair, not {key!r}")
        if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
            raise TypeError(f"an offsets key must be a (str, int >= 0) pair, not {key!r}")
        metadata: object = None
        leader_epoch: object = getattr(key, "leader_epoch", None)
        if isinstance(value, int) and not isinstance(value, bool):
            offset = value
        elif isinstance(value, tuple) and len(value) == 2:
            offset, metadata = value
        elif isinstance(value, tuple) and len(value) == 3:
            offset, metadata, leader_epoch = value
        elif hasattr(value, "offset"):
            offset, metadata = value.offset, getattr(value, "metadata", None)
            leader_epoch = getattr(value, "leader_epoch", leader_epoch)
        else:
            raise TypeError(
                f"the offset for {topic}-{partition} must be an int or (offset, metadata), "
                f"not {value!r}"
            )
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise TypeError(f"the offset for {topic}-{partition} must be an int, not {offset!r}")
        if offset < 0:
            raise ValueError(f"the offset for {topic}-{partition} is negative ({offset})")
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(
                f"the offset metadata for {topic}-{partition} must be a str or None, "
                f"not {type(metadata).__name__}"
            )
        if leader_epoch is None:
            leader_epoch = -1
        if not isinstance(leader_epoch, int) or isinstance(leader_epoch, bool):
            raise TypeError(
                f"the leader epoch for {topic}-{partition} must be an int or None, not "
                f"{type(leader_epoch).__name__}"
            )
        normalized[(topic, partition)] = (offset, metadata, max(-1, leader_epoch))
    return normalized


class CoordinatorType(enum.IntEnum):
    """The ``key_type`` of a FindCoordinator request."""

    GROUP = 0
    TRANSACTION = 1


class TransactionalRequestKind(enum.Enum):
    """The requests a transactional producer sends to a coordinator."""

    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    ADD_OFFSETS = "AddOffsetsToTxn"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"


_Kind = TransactionalRequestKind
# Java's priorities: a producer id first, then partitions and offsets, then EndTxn.
_PRIORITY = {
    _Kind.INIT_PRODUCER_ID: 1,
    _Kind.ADD_PARTITIONS: 2,
    _Kind.ADD_OFFSETS: 2,
    _Kind.TXN_OFFSET_COMMIT: 2,
    _Kind.END_TXN: 3,
}


@dataclass(eq=False, slots=True)
class TransactionalRequest:
    """One request for a coordinator, waiting or in flight, and the result it completes.

    ``result`` is the future a user call awaits (None for requests nobody waits for).
    """

    kind: TransactionalRequestKind
    coordinator_type: CoordinatorType
    coordinator_key: str
    result: asyncio.Future[None] | None
    committed: bool = False
    partitions: frozenset[TopicPartition] = frozenset()
    offsets: dict[TopicPartition, tuple[int, str | None, int]] = field(default_factory=dict)
    group: ConsumerGroupMetadata | None = None
    attempts: int = 0
    finding_coordinator: bool = False
    transaction_v2: bool = False
    """Built for a transactions v2 transaction (EndTxn v5, TxnOffsetCommit v5 allowed)."""
    epoch_bump: bool = False
    """InitProducerId only: bump the epoch of the producer id held (KIP-360), rather than
    initialize: the coordinator then fences only a producer older than this one."""

    @property
    def priority(self) -> int:
        """Lower goes first."""
        return _PRIORITY[self.kind]

    def describe(self) -> str:
        """A short name for logs and errors."""
        if self.kind is _Kind.END_TXN:
            return "EndTxn(commit)" if self.committed else "EndTxn(abort)"
        return str(self.kind.value)


def _fail(future: asyncio.Future[None] | None, exc: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(exc)
        # Retrieved on purpose: nobody may be waiting (a commit that timed out, an abort
        # started by close()), and the error is logged where it happens.
        future.exception()


def _succeed(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class TransactionStates:
    """The transaction state machine: the state, the error behind ``ABORTABLE_ERROR`` or
    ``FATAL_ERROR``, which state may follow which, and what each user operation needs of
    the state (the error when it does not allow it), as the Java client's
    ``TransactionManager`` keeps them. :class:`TransactionManager` adds the coordinator's
    requests; :class:`~aioproducer.testing.InMemoryProducer` drives the same machine with
    no coordinator.
    """

    def __init__(self, transactional_id: str) -> None:
        # Named in messages and logs.
        self._txn_name = transactional_id
        self._txn_state = TransactionState.UNINITIALIZED
        self._last_error: KafkaError | None = None

    @property
    def state(self) -> TransactionState:
        """The current :class:`TransactionState`."""
        return self._txn_state

    @property
    def last_error(self) -> KafkaError | None:
        """The error behind ``ABORTABLE_ERROR`` or ``FATAL_ERROR`` (None otherwise)."""
        return self._last_error

    @property
    def in_transaction(self) -> bool:
        """True between ``begin_transaction()`` and the end of its commit or abort."""
        return self._txn_state in (
            _State.IN_TRANSACTION,
            _State.PREPARED_TRANSACTION,
            _State.COMMITTING_TRANSACTION,
            _State.ABORTING_TRANSACTION,
            _State.ABORTABLE_ERROR,
        )

    @property
    def is_completing(self) -> bool:
        """True while a commit or abort is underway."""
        return self._txn_state in (_State.COMMITTING_TRANSACTION, _State.ABORTING_TRANSACTION)

    def transition(self, target: TransactionState) -> None:
        if target not in _TRANSITIONS[self._txn_state]:
            raise IllegalStateError(
                f"transactional id {self._txn_name!r}: invalid transition from "
                f"{self._txn_state.value} to {target.value}"
            )
        log.debug(
            "transactional id %r: %s -> %s",
            self._txn_name,
            self._txn_state.value,
            target.value,
        )
        self._txn_state = target

    def raise_if_failed(self, operation: str) -> None:
        error = self._last_error
        if self._txn_state is _State.FATAL_ERROR:
            assert error is not None
            raise error_copy(
                error, f"cannot {operation}: the producer hit a fatal error; close it", fresh=True
            )
        if self._txn_state is _State.ABORTABLE_ERROR:
            assert error is not None
            raise error_copy(
                error,
                f"cannot {operation}: the transaction failed and must be aborted "
                "(abort_transaction())",
                fresh=True,
            )

    def enter_abortable(self, exc: KafkaError) -> None:
        """Move to ``ABORTABLE_ERROR`` for ``exc`` (the first error of the transaction is
        kept): the user must abort."""
        if self._last_error is None or self._txn_state is not _State.ABORTABLE_ERROR:
            self._last_error = exc
        self.transition(_State.ABORTABLE_ERROR)

    def enter_fatal(self, exc: KafkaError) -> None:
        """Move to ``FATAL_ERROR`` for ``exc``, from any state: only ``close()`` is left."""
        self._txn_state = _State.FATAL_ERROR
        self._last_error = exc

    def transaction_ended(self) -> None:
        """A commit or abort completed: ``READY`` for the next transaction."""
        self.transition(_State.READY)
        self._last_error = None

    # ---- what each user operation needs of the state ------------------------------------------

    def check_begin_allowed(self) -> None:
        """Raise unless a transaction may begin now (``READY``)."""
        self.raise_if_failed("begin a transaction")
        if self._txn_state is _State.READY:
            return
        if self._txn_state is _State.IN_TRANSACTION:
            raise IllegalStateError("a transaction is open already: commit or abort it first")
        if self._txn_state is _State.PREPARED_TRANSACTION:
            raise IllegalStateError(
                "a prepared transaction is open: commit or abort it first, or close the "
                "producer and complete it elsewhere (complete_prepared_transaction)"
            )
        if self.is_completing:
            raise IllegalStateError(
                f"the previous transaction is still {self._txn_state.value.split('_')[0]}: call "
                "commit_transaction() or abort_transaction() again to wait for it"
            )
        raise IllegalStateError(
            f"cannot begin a transaction while {self._txn_state.value}: transactions are not "
            "initialized (start the producer first)"
        )

    def check_send_allowed(self) -> None:
        """Raise unless records may be sent now (inside an open transaction)."""
        if self._txn_state is _State.IN_TRANSACTION:
            return
        self.raise_if_failed("send")
        if self._txn_state is _State.PREPARED_TRANSACTION:
            raise IllegalStateError(
                "cannot send: the transaction is prepared (prepare_transaction()); nothing "
                "more may be added to it, only committed or aborted"
            )
        if self.is_completing:
            doing = "committing" if self._txn_state is _State.COMMITTING_TRANSACTION else "aborting"
            raise IllegalStateError(
                f"cannot send while the transaction is {doing}: begin a new transaction after "
                "it completes"
            )
        raise IllegalStateError(
            "a transactional producer sends only inside a transaction: call "
            "begin_transaction() first (or use `async with producer.transaction():`)"
        )

    def check_commit_allowed(self) -> None:
        """Raise unless the open transaction (or a prepared one) may be committed."""
        self.raise_if_failed("commit the transaction")
        if self._txn_state not in (_State.IN_TRANSACTION, _State.PREPARED_TRANSACTION):
            raise IllegalStateError(
                f"cannot commit: no transaction is open ({self._txn_state.value}); call "
                "begin_transaction() first"
            )

    def check_prepare_allowed(self) -> None:
        """Raise unless a transaction is open and may be prepared."""
        self.raise_if_failed("prepare the transaction")
        if self._txn_state is not _State.IN_TRANSACTION:
            raise IllegalStateError(
                f"cannot prepare: no transaction is open ({self._txn_state.value}); call "
                "begin_transaction() first"
            )

    def check_abort_allowed(self) -> None:
        """Raise unless there is a transaction to abort (also after an abortable error)."""
        if self._txn_state is _State.FATAL_ERROR:
            self.raise_if_failed("abort the transaction")
        if self._txn_state not in (
            _State.IN_TRANSACTION,
            _State.PREPARED_TRANSACTION,
            _State.ABORTABLE_ERROR,
        ):
            raise IllegalStateError(
                f"cannot abort: no transaction is open ({self._txn_state.value})"
            )

    def check_send_offsets_allowed(self) -> None:
        """Raise unless offsets may be added to the transaction now."""
        self.raise_if_failed("send offsets to the transaction")
        if self._txn_state is not _State.IN_TRANSACTION:
            raise IllegalStateError(
                f"cannot send offsets: no transaction is open ({self._txn_state.value}); call "
                "begin_transaction() first"
            )


class TransactionManager(IdempotenceManager, TransactionStates):
    """The transaction state machine of a producer with a ``transactional_id``.

    It keeps the producer id, epoch and sequences (as :class:`IdempotenceManager` does) and
    decides which coordinator request goes next; the sender does the I/O. The states follow
    the Java client: ``UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION ->
    COMMITTING_TRANSACTION / ABORTING_TRANSACTION -> READY``, plus ``ABORTABLE_ERROR`` (abort,
    then go on) and ``FATAL_ERROR`` (only ``close()`` is left).

    User operations (:meth:`initialize`, :meth:`begin_commit`, :meth:`begin_abort`,
    :meth:`send_offsets`) return a future that completes when the coordinator has answered.
    The sender calls :meth:`next_request` for the one request to send next (at most one is in
    flight), :meth:`coordinator_node` to learn where it goes (None: send
    :meth:`find_coordinator_request` first), :meth:`build_request`, and the ``handle_*``
    methods with what came back. Partitions are added to the transaction (AddPartitionsToTxn)
    before any of their batches may be drained: :meth:`may_drain` holds them back until then.

    Transactions v2 (KIP-890 part 2) is used where the cluster finalized
    ``transaction.version`` 2 (:func:`transaction_v2_usable`, read from ``finalized_features``):
    then no AddPartitionsToTxn or AddOffsetsToTxn is sent, batches go out at once as Produce
    v12, offsets as TxnOffsetCommit v5, and EndTxn v5 returns the producer id and bumped epoch
    the next transaction uses. As in Java, the choice is made when InitProducerId succeeds and
    again when a transaction begins to complete; a new choice applies from the next
    transaction on, and turning v2 on then first bumps the epoch (InitProducerId), so a
    transaction never mixes the two protocols. Otherwise this is transactions v1: Produce up to
    v11, EndTxn and TxnOffsetCommit up to v4, partitions and offsets added explicitly.
    """

    def __init__(
        self,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        retry_backoff: float,
        retry_backoff_max: float,
        request_timeout: float,
        create_future: Callable[[], asyncio.Future[None]],
        finalized_features: Callable[[], FinalizedFeatures] | None = None,
    ) -> None:
        IdempotenceManager.__init__(self, transactional_id)
        TransactionStates.__init__(self, transactional_id)
        self.transactional_id: str = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        # Coordinator requests retry after a doubling backoff, without jitter.
        self._retry_backoff = ExponentialBackoff(
            retry_backoff * 1000.0, retry_backoff_max * 1000.0, jitter=0.0
        )
        self._request_timeout = request_timeout
        self._create_future = create_future
        # The broker refused an InitProducerId naming our id and epoch (Tansu answers
        # UNKNOWN_SERVER_ERROR): bumps then ask with -1/-1, as the first InitProducerId does.
        self._bump_refused = False
        # The result of an abort that completes through an epoch bump, not EndTxn.
        self._abort_by_bump: asyncio.Future[None] | None = None
        # The transaction ended but its epoch bump failed abortably: the next abort bumps.
        self._bump_after_abort = False
        self._pending: list[TransactionalRequest] = []
        self._in_flight: TransactionalRequest | None = None
        self._coordinators: dict[tuple[CoordinatorType, str], int] = {}
        self._partitions_in_transaction: set[TopicPartition] = set()
        self._pending_partitions: set[TopicPartition] = set()
        self._new_partitions: set[TopicPartition] = set()
        # Partitions of an AddPartitionsToTxn that got no answer (its connection died, it
        # timed out): the coordinator may have added them, and so have a transaction open.
        self._unconfirmed_partitions: set[TopicPartition] = set()
        self._add_partitions_attempts = 0
        self._transaction_started = False
        self._retry_at = 0.0
        self._completion: TransactionalRequest | None = None
        self._completion_result: asyncio.Future[None] | None = None
        self._close_deadline: float | None = None
        self._finalized_features = finalized_features
        self._features_epoch = -1
        # Transactions v2 for the current transaction, and for the next one.
        self._transaction_v2 = False
        self._next_transaction_v2 = False
        # Turning v2 on between transactions bumps the epoch first (Java's KAFKA-18227).
        self._epoch_bump_required = False

    # ---- state --------------------------------------------------------------------------------

    @property
    def transaction_v2(self) -> bool:
        """True when the current (or next) transaction uses transactions v2 (KIP-890)."""
        return self._transaction_v2

    @property
    def produce_version_cap(self) -> int | None:
        """Produce v11 at most for transactions v1: v12 would ask the leader to add the
        partition to the transaction itself."""
        return None if self._transaction_v2 else _PRODUCE_V1_MAX_VERSION

    def _read_transaction_v2(self) -> bool | None:
        """Transactions v2 per the latest finalized features, None when nothing newer than
        what was read last time (Java reads only a newer finalized-features epoch)."""
        source = self._finalized_features
        if source is None:
            return None
        features = source()
        if features.epoch <= self._features_epoch:
            return None
        self._features_epoch = features.epoch
        usable = transaction_v2_usable(features)
        log.debug(
            "transactional id %r: transaction.version %d (finalized features epoch %d): "
            "transactions v%d",
            self.transactional_id,
            features.level(TRANSACTION_VERSION_FEATURE),
            features.epoch,
            2 if usable else 1,
        )
        return usable

    def _update_transaction_v2_on_initialization(self) -> None:
        # A fresh epoch was just obtained: the new protocol applies at once, with no bump.
        usable = self._read_transaction_v2()
        if usable is not None:
            self._transaction_v2 = self._next_transaction_v2 = usable
        self._epoch_bump_required = False

    def _update_transaction_v2_for_next_transaction(self) -> None:
        usable = self._read_transaction_v2()
        if usable is None:
            return
        if usable and not self._transaction_v2:
            # As Java: without a new epoch, a late v1 request could land in the first v2
            # transaction (KAFKA-18227).
            self._epoch_bump_required = True
        self._next_transaction_v2 = usable

    @property
    def partitions_in_transaction(self) -> frozenset[TopicPartition]:
        """The partitions the coordinator has added to the current transaction."""
        return frozenset(self._partitions_in_transaction)

    def has_in_flight_request(self) -> bool:
        """True while a coordinator request is out."""
        return self._in_flight is not None

    def has_pending_work(self) -> bool:
        """True while a coordinator request waits or is in flight (the sender keeps going)."""
        if self._in_flight is not None or self._pending:
            return True
        return bool(self._new_partitions) and self._txn_state in (
            _State.IN_TRANSACTION,
            _State.COMMITTING_TRANSACTION,
            _State.ABORTING_TRANSACTION,
        )

    def undrained_batch_error(self) -> KafkaError | None:
        """The error to fail batches not yet sent with, or None when they should be sent.

        Batches are dropped while aborting, after an abortable error and after a fatal one,
        as in Java's sender.
        """
        state = self._txn_state
        bump = self._abort_by_bump
        if state is _State.ABORTING_TRANSACTION or (
            # An abort that goes on as an epoch bump (_abort_by_epoch_bump).
            state is _State.INITIALIZING and bump is not None and not bump.done()
        ):
            error = self._last_error
            if error is None:
                return TransactionAbortedError(
                    "the transaction was aborted before the record was sent"
                )
            return error_copy(
                error, "the transaction was aborted before the record was sent", fresh=True
            )
        if state is _State.ABORTABLE_ERROR or state is _State.FATAL_ERROR:
            assert self._last_error is not None
            return error_copy(self._last_error, "the record was not sent", fresh=True)
        return None

    # ---- user operations ------------------------------------------------------------------------

    def initialize(self) -> asyncio.Future[None]:
        """Get a producer id and epoch for the transactional id (Java's ``initTransactions``).

        Finding the coordinator and InitProducerId fence any older producer with the same
        transactional id and abort its open transaction.
        """
        if self._txn_state is _State.INITIALIZING and self._completion_result is not None:
            return self._completion_result
        self.raise_if_failed("initialize transactions")
        self.transition(_State.INITIALIZING)
        result = self._create_future()
        self.needs_producer_id = True
        self._completion_result = result
        self._enqueue(self._request(_Kind.INIT_PRODUCER_ID, result))
        return result

    def begin_transaction(self) -> None:
        """Open a transaction (no request: partitions are added as records are sent)."""
        self.check_begin_allowed()
        self.transition(_State.IN_TRANSACTION)
        self._transaction_started = False

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """A record for ``tp`` was buffered: add the partition to the transaction if needed.

        With transactions v2 the partition leader adds it when the batch arrives (Produce
        v12): it counts as added at once, and the transaction as started (Java's
        ``maybeAddPartition``).
        """
        if self._transaction_v2:
            if self._txn_state is _State.IN_TRANSACTION:
                self._partitions_in_transaction.add(tp)
                self._transaction_started = True
            return
        if (
            tp not in self._partitions_in_transaction
            and tp not in self._pending_partitions
            and self._txn_state is _State.IN_TRANSACTION
        ):
            self._new_partitions.add(tp)

    def begin_commit(self) -> asyncio.Future[None]:
        """Commit the open transaction once every record of it is acknowledged."""
        if self._txn_state is _State.COMMITTING_TRANSACTION:
            assert self._completion_result is not None
            return self._completion_result
        self.check_commit_allowed()
        self.transition(_State.COMMITTING_TRANSACTION)
        return self._begin_completion(committed=True)

    def prepare_transaction(self, *, has_incomplete_batches: bool = False) -> PreparedTransaction:
        """Mark the open transaction prepared (Java's ``prepareTransaction``, KIP-939): every
        record of it was acknowledged (the producer flushed first) and every partition and
        offset added; from now on it may only be committed or aborted, by this producer or
        by another process that has the returned :class:`PreparedTransaction`. Closing the
        producer leaves it open.

        ``has_incomplete_batches``: whether a batch of the transaction is buffered or its
        request still out (the caller waits until none is, as EndTxn does).

        Raises:
            IllegalStateError: no transaction is open, or a coordinator request or a
                batch of it (an offset commit not awaited) is still underway.
            KafkaError: the transaction failed and must be aborted.
        """
        self.check_prepare_allowed()
        if (
            has_incomplete_batches
            or self._in_flight is not None
            or self._pending
            or self._new_partitions
            or self._pending_partitions
        ):
            raise IllegalStateError(
                "cannot prepare: a request of the transaction is still underway (await "
                "send_offsets_to_transaction() before preparing)"
            )
        self.transition(_State.PREPARED_TRANSACTION)
        prepared = PreparedTransaction(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            transaction_v2=self._transaction_v2,
            empty=not self._transaction_started,
        )
        log.debug("transactional id %r: prepared %s", self.transactional_id, prepared)
        return prepared

    def begin_abort(self, reason: KafkaError | None = None) -> asyncio.Future[None]:
        """Abort the open transaction; records not yet sent fail with ``reason``.

        Allowed after an abortable error. Records already sent are discarded by the brokers
        (consumers reading committed data never see them).
        """
        bump = self._abort_by_bump
        if self._txn_state is _State.INITIALIZING and bump is not None and not bump.done():
            return bump  # an abort that goes on as an epoch bump (_abort_by_epoch_bump)
        if self._txn_state is _State.ABORTING_TRANSACTION:
            if self._completion_result is not None and not self._completion_result.done():
                return self._completion_result
            # The previous abort failed (for example, it timed out): send EndTxn again.
            return self._begin_completion(committed=False)
        self.check_abort_allowed()
        if reason is not None and self._last_error is None:
            self._last_error = reason
        self.transition(_State.ABORTING_TRANSACTION)
        # Partitions never added need no adding now: their batches are dropped. Those the
        # coordinator may have added without our knowing are added (again) first, so that
        # the EndTxn that follows aborts what it has open (as Java's
        # beginCompletingTransaction adds the new partitions before EndTxn).
        self._new_partitions.clear()
        if not self._transaction_started:
            self._new_partitions |= self._unconfirmed_partitions
        for item in [i for i in self._pending if i.kind is not _Kind.INIT_PRODUCER_ID]:
            self._pending.remove(item)
            _fail(
                item.result,
                TransactionAbortedError(f"the transaction was aborted before {item.describe()}"),
            )
        if self._bump_after_abort or self._coordinator_lost_producer_id():
            return self._abort_by_epoch_bump()
        return self._begin_completion(committed=False)

    def _coordinator_lost_producer_id(self) -> bool:
        # Transactions v1: the coordinator no longer maps our producer id to the
        # transactional id (INVALID_PRODUCER_ID_MAPPING or UNKNOWN_PRODUCER_ID); it would
        # refuse an EndTxn too.
        error = self._last_error
        return (
            not self._transaction_v2 and error is not None and error.error_code in _NEEDS_EPOCH_BUMP
        )

    def _abort_by_epoch_bump(
        self, result: asyncio.Future[None] | None = None
    ) -> asyncio.Future[None]:
        """Abort without EndTxn: InitProducerId with our id and epoch makes the coordinator
        abort what is open and bump the epoch (Java's beginCompletingTransaction after an
        InvalidPidMappingException). The abort (``result``) completes when it succeeds."""
        if result is None:
            result = self._create_future()
        self._bump_after_abort = False
        self._completion_result = self._abort_by_bump = result
        self._completion = None
        self._partitions_in_transaction.clear()
        self._pending_partitions.clear()
        # InitProducerId aborts whatever the coordinator has open.
        self._unconfirmed_partitions.clear()
        self._transaction_started = False
        self.needs_producer_id = True
        self.transition(_State.INITIALIZING)
        self._enqueue(self._request(_Kind.INIT_PRODUCER_ID, result, epoch_bump=True), front=True)
        return result

    def _begin_completion(self, *, committed: bool) -> asyncio.Future[None]:
        result = self._create_future()
        self._completion_result = result
        item = self._request(_Kind.END_TXN, result, committed=committed)
        self._completion = item
        self._enqueue(item)
        # As Java's beginCompletingTransaction: after the EndTxn was built (it ends this
        # transaction with the protocol it began with), learn which protocol the next uses.
        self._update_transaction_v2_for_next_transaction()
        return result

    def send_offsets(
        self,
        offsets: dict[TopicPartition, tuple[int, str | None, int]],
        group: ConsumerGroupMetadata,
    ) -> asyncio.Future[None]:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit to the group coordinator; with transactions v2 TxnOffsetCommit v5
        only, which adds the offsets to the transaction itself)."""
        self.check_send_offsets_allowed()
        result = self._create_future()
        if self._transaction_v2:
            self._transaction_started = True
            commit = self._request(_Kind.TXN_OFFSET_COMMIT, result, offsets=offsets, group=group)
            self._enqueue(commit)
            return result
        self._enqueue(self._request(_Kind.ADD_OFFSETS, result, offsets=offsets, group=group))
        return result

    def begin_close(self, now: float) -> None:
        """The producer is closing: abort an open transaction and give coordinator requests
        at most ``request_timeout_ms`` more."""
        self._close_deadline = now + self._request_timeout
        if self._txn_state is _State.PREPARED_TRANSACTION:
            log.info(
                "transactional id %r: closing with a prepared transaction, left open for "
                "complete_prepared_transaction() (the coordinator aborts it after "
                "transaction_timeout_ms)",
                self.transactional_id,
            )
        if self._txn_state in (_State.IN_TRANSACTION, _State.ABORTABLE_ERROR):
            log.info(
                "transactional id %r: aborting the open transaction because the producer is "
                "closing",
                self.transactional_id,
            )
            self.begin_abort(
                TransactionAbortedError(
                    "the producer was closed with the transaction open, so it was aborted"
                )
            )

    def fail_all(self, exc: BaseException) -> None:
        """The sender stopped: fail every waiting or in-flight request with ``exc``."""
        items = list(self._pending)
        self._pending.clear()
        if self._in_flight is not None:
            items.append(self._in_flight)
            self._in_flight = None
        for item in items:
            _fail(item.result, exc)
        _fail(self._completion_result, exc)

    # ---- batches --------------------------------------------------------------------------------

    def may_drain(self, batch: ProducerBatch, node: int) -> bool:
        """Like :meth:`IdempotenceManager.may_drain`, and only once the partition was added."""
        tp = batch.tp
        if tp not in self._partitions_in_transaction and self._transaction_v2:
            # Transactions v2: Produce v12 adds the partition; nothing to wait for.
            if self._txn_state not in (_State.IN_TRANSACTION, _State.COMMITTING_TRANSACTION):
                return False
            self._partitions_in_transaction.add(tp)
            self._transaction_started = True
        if tp not in self._partitions_in_transaction:
            # A batch nobody registered (the producer registers partitions as it appends):
            # add its partition now rather than hold it forever.
            if tp not in self._pending_partitions and self._txn_state in (
                _State.IN_TRANSACTION,
                _State.COMMITTING_TRANSACTION,
            ):
                self._new_partitions.add(tp)
            return False
        return super().may_drain(batch, node)

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """Install a new producer id or epoch (InitProducerId, or EndTxn v5): the batches of
        the old one are done, and every partition starts again at sequence 0 (Java's
        ``resetSequenceNumbers``)."""
        super().set_producer_id(producer_id, producer_epoch)
        self.reset_sequences()

    def local_bump_refused(self, batch: ProducerBatch, error_name: str) -> bool:
        """A transactional producer never bumps its epoch locally: a fencing answer is what
        it says."""
        return False

    def request_epoch_bump(self, tp: TopicPartition, reason: str) -> None:
        """A transactional producer bumps its epoch only through the coordinator, after the
        transaction is aborted: the lost sequence makes the transaction abortable."""
        self.request_reset(f"{tp[0]}-{tp[1]}: {reason}")

    def can_retry(self, batch: ProducerBatch, code: int, log_start_offset: int) -> SequenceVerdict:
        """As :meth:`IdempotenceManager.can_retry`, the transactional way (Java's
        ``canRetry``): a real gap is not retried (the batch fails and the transaction must be
        aborted); records the broker removed by retention restart the partition's sequences
        under the same epoch."""
        state = self._state(batch.tp)
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            if log_start_offset < 0 or batch.sequence_reset:
                return SequenceVerdict.RETRY
            if state.last_acked_offset < log_start_offset:
                self._start_sequences_at_beginning(batch.tp, strand=False)
                return SequenceVerdict.RETRY
            return SequenceVerdict.FAIL
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            if state.unresolved_sequence is None and (
                batch.sequence_reset or not self.is_next_in_line(batch)
            ):
                return SequenceVerdict.RETRY
            if state.unresolved_sequence is None and self._passed_over(state, batch):
                # The batch fails and the transaction must be aborted either way; the error
                # says the batch may be in the log (where the abort hides it).
                return SequenceVerdict.OVERTAKEN
        return SequenceVerdict.FAIL

    def request_reset(self, reason: str) -> None:
        """A sequence was lost: the transaction must be aborted, and the epoch bumped after."""
        first = not self.needs_producer_id
        self.needs_producer_id = True
        if self._txn_state is _State.FATAL_ERROR:
            return
        if first:
            log.warning(
                "transactional id %r: %s; the transaction must be aborted and the producer "
                "epoch bumped",
                self.transactional_id,
                reason,
            )
        if self.in_transaction:
            self.transition_to_abortable(
                KafkaError(f"a record batch could not be kept in sequence: {reason}")
            )

    def on_batch_failed(self, batch: ProducerBatch, exc: BaseException) -> None:
        """A batch of the transaction failed for good: the transaction cannot commit."""
        error = exc if isinstance(exc, KafkaError) else KafkaError(repr(exc))
        if isinstance(error, _FATAL_BATCH_ERRORS) or (
            # Java 4.0 also treats a lost producer id mapping as fatal (transactions v2).
            self._transaction_v2 and error.error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        ):
            self.transition_to_fatal(self._fenced(error) if self._is_fenced(error) else error)
            return
        if self.in_transaction:
            self.transition_to_abortable(error)

    def transition_to_abortable(self, exc: KafkaError) -> None:
        """Move to ``ABORTABLE_ERROR``: the user must abort; waiting requests fail."""
        state = self._txn_state
        if state is _State.ABORTING_TRANSACTION or state is _State.FATAL_ERROR:
            return
        if state not in (
            _State.IN_TRANSACTION,
            _State.PREPARED_TRANSACTION,
            _State.COMMITTING_TRANSACTION,
            _State.ABORTABLE_ERROR,
        ):
            # Outside a transaction an error is about the producer itself.
            self.transition_to_fatal(exc)
            return
        if state is not _State.ABORTABLE_ERROR:
            log.warning(
                "transactional id %r: the transaction must be aborted: %s",
                self.transactional_id,
                exc,
            )
        self.enter_abortable(exc)
        self._new_partitions.clear()
        keep = []
        for item in self._pending:
            if item.kind is _Kind.INIT_PRODUCER_ID:
                keep.append(item)
            else:
                _fail(item.result, error_copy(exc, fresh=True))
        self._pending = keep
        if self._completion_result is not None:
            _fail(self._completion_result, error_copy(exc, fresh=True))

    def transition_to_fatal(self, exc: KafkaError) -> None:
        """Move to ``FATAL_ERROR``: every later operation raises ``exc``; close() still works."""
        if self._txn_state is _State.FATAL_ERROR:
            return
        log.error(
            "transactional id %r: fatal error, the producer can only be closed: %s",
            self.transactional_id,
            exc,
        )
        self.enter_fatal(exc)
        self._new_partitions.clear()
        self.fail_all(error_copy(exc, fresh=True))

    # ---- the next request -----------------------------------------------------------------------

    def _request(
        self,
        kind: TransactionalRequestKind,
        result: asyncio.Future[None] | None,
        **fields: Any,
    ) -> TransactionalRequest:
        fields.setdefault("transaction_v2", self._transaction_v2)
        if kind is _Kind.TXN_OFFSET_COMMIT:
            group = fields["group"]
            return TransactionalRequest(
                kind, CoordinatorType.GROUP, group.group_id, result, **fields
            )
        return TransactionalRequest(
            kind, CoordinatorType.TRANSACTION, self.transactional_id, result, **fields
        )

    def _enqueue(self, item: TransactionalRequest, *, front: bool = False) -> None:
        priority = item.priority
        index = len(self._pending)
        for position, queued in enumerate(self._pending):
            if queued.priority > priority or (front and queued.priority == priority):
                index = position
                break
        self._pending.insert(index, item)

    def time_to_next_request(self, now: float, has_incomplete_batches: bool = False) -> float:
        """Seconds until a backed-off request may go again: inf with nothing to send, and
        while the next request waits for the transaction's batches (the answers that
        complete them wake the sender)."""
        if not self.has_pending_work() or self._in_flight is not None:
            return float("inf")
        head = self._pending[0] if self._pending else None
        if (
            has_incomplete_batches
            and head is not None
            and (head.kind is _Kind.END_TXN or head.epoch_bump)
            and not self._new_partitions
        ):
            return float("inf")
        return max(0.0, self._retry_at - now)

    def next_request(self, now: float, has_incomplete_batches: bool) -> TransactionalRequest | None:
        """The request to send now, or None (nothing to do, backing off, or waiting).

        EndTxn waits until no batch is incomplete, so a commit covers every record sent
        before it. An EndTxn for a transaction that added no partition or offsets completes
        at once without a request, as in Java (the coordinator knows no such transaction).
        """
        if self._in_flight is not None or self._txn_state is _State.FATAL_ERROR:
            return None
        if self._close_deadline is not None and now >= self._close_deadline:
            if self.has_pending_work():
                self.fail_all(
                    RequestTimedOutError(
                        "the producer closed before the transaction coordinator answered"
                    )
                )
                self._new_partitions.clear()
            return None
        if now < self._retry_at:
            return None
        if self._txn_state is _State.ABORTABLE_ERROR:
            # Only an abort may go on (an offset commit whose AddOffsetsToTxn just came back
            # would otherwise still be sent).
            for item in [i for i in self._pending if i.kind is not _Kind.INIT_PRODUCER_ID]:
                self._pending.remove(item)
                assert self._last_error is not None
                _fail(item.result, error_copy(self._last_error, fresh=True))
        head = self._pending[0] if self._pending else None
        if head is not None and head.kind is _Kind.INIT_PRODUCER_ID:
            if head.epoch_bump and has_incomplete_batches:
                # An abort by epoch bump ends the transaction as EndTxn does: not while a
                # Produce of it is out (its retry would start the next transaction with it).
                return None
            return head
        if self._new_partitions and self._txn_state in (
            _State.IN_TRANSACTION,
            _State.COMMITTING_TRANSACTION,
            _State.ABORTING_TRANSACTION,
        ):
            partitions = frozenset(self._new_partitions)
            self._new_partitions.clear()
            self._pending_partitions |= partitions
            return self._request(_Kind.ADD_PARTITIONS, None, partitions=partitions)
        while head is not None and head.kind is _Kind.END_TXN:
            if has_incomplete_batches:
                return None
            if self._transaction_started:
                return head
            self._pending.pop(0)
            log.debug(
                "transactional id %r: nothing was added to the transaction; %s needs no request",
                self.transactional_id,
                head.describe(),
            )
            self._complete_transaction(head)
            head = self._pending[0] if self._pending else None
        return head

    def coordinator_node(self, item: TransactionalRequest) -> int | None:
        """The node the request goes to, or None when the coordinator must be found first."""
        return self._coordinators.get((item.coordinator_type, item.coordinator_key))

    def find_coordinator_request(self, item: TransactionalRequest) -> FindCoordinatorRequest:
        """The FindCoordinator request for ``item``'s coordinator."""
        return FindCoordinatorRequest(
            coordinator_keys=[item.coordinator_key], key_type=int(item.coordinator_type)
        )

    def build_request(self, item: TransactionalRequest) -> Request[Any]:
        """The request for ``item``, with the current producer id and epoch."""
        tid = self.transactional_id
        pid = self.producer_id
        epoch = self.producer_epoch
        kind = item.kind
        if kind is _Kind.INIT_PRODUCER_ID:
            # As Java's initializeTransactions(producerIdAndEpoch): the first InitProducerId
            # names no id; one that bumps the epoch after an abortable error names the id
            # and epoch held, so a newer instance with the same transactional id is not
            # fenced by this stale one: this one is (PRODUCER_FENCED). Brokers that take
            # only -1/-1 (Tansu) are asked again that way (see _handle_init_producer_id).
            bump = item.epoch_bump and not self._bump_refused and self.producer_id >= 0
            return InitProducerIdRequest(
                transactional_id=tid,
                transaction_timeout_ms=self.transaction_timeout_ms,
                producer_id=self.producer_id if bump else -1,
                producer_epoch=self.producer_epoch if bump else -1,
            )
        if kind is _Kind.ADD_PARTITIONS:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(item.partitions):
                by_topic.setdefault(topic, []).append(partition)
            topics = [AddPartitionsToTxnTopic(name, parts) for name, parts in by_topic.items()]
            return AddPartitionsToTxnRequest.for_client(tid, pid, epoch, topics)
        if kind is _Kind.ADD_OFFSETS:
            assert item.group is not None
            return AddOffsetsToTxnRequest(tid, pid, epoch, item.group.group_id)
        if kind is _Kind.TXN_OFFSET_COMMIT:
            group = item.group
            assert group is not None
            offsets: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
            for (topic, partition), committed in sorted(item.offsets.items()):
                offset, metadata, leader_epoch = committed
                offsets.setdefault(topic, []).append(
                    TxnOffsetCommitRequestPartition(partition, offset, leader_epoch, metadata)
                )
            return TxnOffsetCommitRequest(
                transactional_id=tid,
                group_id=group.group_id,
                producer_id=pid,
                producer_epoch=epoch,
                topics=[TxnOffsetCommitRequestTopic(n, p) for n, p in offsets.items()],
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                version_cap=None if item.transaction_v2 else _TXN_OFFSET_COMMIT_V1_MAX_VERSION,
            )
        return EndTxnRequest(
            tid,
            pid,
            epoch,
            item.committed,
            version_cap=None if item.transaction_v2 else _END_TXN_V1_MAX_VERSION,
        )

    def request_sent(self, item: TransactionalRequest, *, finding_coordinator: bool) -> None:
        """``item`` (or the FindCoordinator for it) is in flight now."""
        item.finding_coordinator = finding_coordinator
        self._in_flight = item
        if item in self._pending:
            self._pending.remove(item)

    def _backoff(self, attempts: int) -> float:
        return self._retry_backoff.backoff_ms(attempts) / 1000.0

    def _retry(self, item: TransactionalRequest, now: float, backoff: float | None = None) -> None:
        if self._in_flight is item:
            self._in_flight = None
        if item in self._pending:
            self._pending.remove(item)
        item.attempts += 1
        self._retry_at = now + (self._backoff(item.attempts - 1) if backoff is None else backoff)
        self._requeue(item)

    def _requeue(self, item: TransactionalRequest) -> None:
        if item.kind is _Kind.ADD_PARTITIONS:
            # Partitions are regrouped into the next AddPartitionsToTxn, with any new ones.
            self._pending_partitions -= item.partitions
            if self._txn_state in (_State.IN_TRANSACTION, _State.COMMITTING_TRANSACTION):
                self._new_partitions |= item.partitions
            elif self._txn_state is _State.ABORTING_TRANSACTION:
                self._new_partitions |= item.partitions & self._unconfirmed_partitions
            return
        if self._txn_state is not _State.FATAL_ERROR:
            self._enqueue(item, front=True)

    def _forget_coordinator(self, item: TransactionalRequest) -> None:
        self._coordinators.pop((item.coordinator_type, item.coordinator_key), None)

    def request_not_sent(self, item: TransactionalRequest, exc: KafkaError, now: float) -> None:
        """Sending ``item`` failed before it left (no connection, no common version)."""
        if self._in_flight is item:
            self._in_flight = None
        if item in self._pending:
            self._pending.remove(item)
        if exc.retriable:
            self._forget_coordinator(item)
            self._retry(item, now)
            return
        self._request_failed(item, exc, fatal=True)

    def coordinator_unreachable(self, item: TransactionalRequest, now: float) -> None:
        """The coordinator's node is not in the cluster metadata: look it up again later."""
        self._forget_coordinator(item)
        self._retry(item, now)

    def _request_failed(self, item: TransactionalRequest, exc: KafkaError, *, fatal: bool) -> None:
        if self._in_flight is item:
            self._in_flight = None
        if item in self._pending:
            self._pending.remove(item)
        if item.kind is _Kind.ADD_PARTITIONS:
            self._pending_partitions -= item.partitions
        log.warning(
            "transactional id %r: %s failed: %s", self.transactional_id, item.describe(), exc
        )
        _fail(item.result, error_copy(exc, fresh=True))
        if fatal or self._txn_state in (_State.INITIALIZING, _State.READY, _State.UNINITIALIZED):
            self.transition_to_fatal(exc)
        else:
            self.transition_to_abortable(exc)

    @staticmethod
    def _is_fenced(exc: KafkaError) -> bool:
        return exc.error_code in _FENCED

    def _fenced(self, cause: KafkaError) -> ProducerFencedError:
        error = ProducerFencedError(
            f"the producer with transactional id {self.transactional_id!r} was fenced "
            f"({cause.error_name}): a newer producer with the same transactional id started, "
            "or the coordinator aborted the transaction; close this producer"
        )
        error.__cause__ = cause
        return error

    # ---- responses ------------------------------------------------------------------------------

    def handle_find_coordinator(
        self,
        item: TransactionalRequest,
        response: FindCoordinatorResponse | None,
        exc: BaseException | None,
        now: float,
    ) -> None:
        """The FindCoordinator for ``item`` came back (or failed with ``exc``)."""
        if self._in_flight is not item:
            return  # failed or fenced meanwhile
        self._in_flight = None
        if response is None:
            self._retry(item, now)
            log.debug("FindCoordinator for %s failed, retrying: %s", item.describe(), exc)
            return
        entry = next(
            (c for c in response.coordinators if c.key == item.coordinator_key),
            response.coordinators[0] if response.coordinators else None,
        )
        if entry is None:
            self._retry(item, now)
            return
        code = entry.error_code
        if code == 0:
            self._coordinators[(item.coordinator_type, item.coordinator_key)] = entry.node_id
            log.debug(
                "the %s coordinator for %r is node %d",
                item.coordinator_type.name.lower(),
                item.coordinator_key,
                entry.node_id,
            )
            self._requeue(item)
            return
        error = self._error(code, "FindCoordinator", entry.error_message)
        if error.retriable:
            self._retry(item, now)
        elif code in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TRANSACTION_ABORTABLE):
            self._request_failed(item, error, fatal=False)
        else:
            self._request_failed(item, error, fatal=True)

    def _error(self, code: int, request: str, message: str | None = None) -> KafkaError:
        error = error_for_code(code, message)
        error.args = (f"{error.message} ({request}, transactional id {self.transactional_id!r})",)
        return error

    def handle_response(
        self,
        item: TransactionalRequest,
        response: Any,
        exc: BaseException | None,
        now: float,
    ) -> None:
        """The response to ``item`` came back, or the request failed with ``exc``."""
        if self._in_flight is not item:
            return  # failed or fenced meanwhile
        self._in_flight = None
        if response is None:
            if isinstance(exc, KafkaError) and not exc.retriable:
                self._request_failed(item, exc, fatal=True)
                return
            # The connection died or the request timed out: the coordinator may have moved.
            log.debug("%s failed, retrying: %s", item.describe(), exc)
            if item.kind is _Kind.ADD_PARTITIONS:
                self._unconfirmed_partitions |= item.partitions
            self._forget_coordinator(item)
            self._retry(item, now)
            return
        kind = item.kind
        if kind is _Kind.INIT_PRODUCER_ID:
            self._handle_init_producer_id(item, response, now)
        elif kind is _Kind.ADD_PARTITIONS:
            self._handle_add_partitions(item, response, now)
        elif kind is _Kind.ADD_OFFSETS:
            self._handle_add_offsets(item, response, now)
        elif kind is _Kind.TXN_OFFSET_COMMIT:
            self._handle_txn_offset_commit(item, response, now)
        else:
            self._handle_end_txn(item, response, now)

    def _common_error(self, item: TransactionalRequest, code: int, now: float) -> bool:
        """Coordinator moves, retriable errors and fencing, shared by every request."""
        if code in _COORDINATOR_MOVED:
            self._forget_coordinator(item)
            self._retry(item, now)
            return True
        error = self._error(code, item.describe())
        if self._is_fenced(error):
            self._request_failed(item, self._fenced(error), fatal=True)
            return True
        if error.retriable:
            self._retry(item, now)
            return True
        if code in (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ):
            self._request_failed(item, error, fatal=True)
            return True
        return False

    def _handle_init_producer_id(
        self, item: TransactionalRequest, response: InitProducerIdResponse, now: float
    ) -> None:
        code = response.error_code
        if code == 0:
            self.set_producer_id(response.producer_id, response.producer_epoch)
            log.info(
                "transactional id %r: producer id %d, epoch %d",
                self.transactional_id,
                response.producer_id,
                response.producer_epoch,
            )
            # Java's initTransactions then maybeUpdateTransactionV2Enabled(true).
            self._update_transaction_v2_on_initialization()
            self.transition(_State.READY)
            self._last_error = None
            self._partitions_in_transaction.clear()
            self._transaction_started = False
            _succeed(item.result)
            return
        if item.epoch_bump and code in _ABORTABLE_ON_EPOCH_BUMP:
            # As Java's InitProducerIdHandler: the producer may abort again (which bumps
            # again) and go on, rather than end here.
            error = self._error(code, item.describe())
            log.warning(
                "transactional id %r: the epoch bump after the transaction failed: %s; "
                "abort again to retry it",
                self.transactional_id,
                error,
            )
            self._last_error = error
            self._bump_after_abort = True
            self.transition(_State.ABORTABLE_ERROR)
            _fail(item.result, error_copy(error, fresh=True))
            return
        if code == ErrorCode.UNKNOWN_SERVER_ERROR and item.epoch_bump and not self._bump_refused:
            log.warning(
                "transactional id %r: the coordinator refused InitProducerId with producer id "
                "%d and epoch %d (UNKNOWN_SERVER_ERROR, as brokers without KIP-360 such as "
                "Tansu answer); asking without them, which fences by transactional id alone",
                self.transactional_id,
                self.producer_id,
                self.producer_epoch,
            )
            self._bump_refused = True
            self._retry(item, now, 0.0)
            return
        if self._common_error(item, code, now):
            return
        self._request_failed(item, self._error(code, item.describe()), fatal=True)

    def _handle_add_partitions(
        self, item: TransactionalRequest, response: AddPartitionsToTxnResponse, now: float
    ) -> None:
        # An answer, whatever it says, is what the coordinator did with these partitions.
        self._unconfirmed_partitions -= item.partitions
        errors: dict[TopicPartition, int] = {}
        if response.error_code:
            errors = dict.fromkeys(item.partitions, response.error_code)
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for partition in topic.results_by_partition:
                    if partition.partition_error_code:
                        errors[(topic.name, partition.partition_index)] = (
                            partition.partition_error_code
                        )
        if not errors:
            self._pending_partitions -= item.partitions
            self._partitions_in_transaction |= item.partitions
            self._transaction_started = True
            self._add_partitions_attempts = 0
            return
        # OPERATION_NOT_ATTEMPTED marks the partitions another partition's error held back.
        not_attempted = {ErrorCode.OPERATION_NOT_ATTEMPTED}
        codes = set(errors.values()) - not_attempted or not_attempted
        fenced = codes & _FENCED
        code = min(fenced) if fenced else min(codes)
        if code == ErrorCode.CONCURRENT_TRANSACTIONS and not self._partitions_in_transaction:
            # Usually the previous transaction's markers are still being written.
            self._retry(item, now, _FIRST_ADD_RETRY_BACKOFF)
            return
        if self._common_error(item, code, now):
            return
        error = self._error(
            code,
            "AddPartitionsToTxn for "
            + ", ".join(f"{t}-{p}" for (t, p), c in sorted(errors.items()) if c == code),
        )
        if code in (ErrorCode.INVALID_TXN_STATE,):
            self._request_failed(item, error, fatal=True)
        elif code in _NEEDS_EPOCH_BUMP:
            self.needs_producer_id = True
            self._request_failed(item, error, fatal=False)
        else:
            # TOPIC_AUTHORIZATION_FAILED, TRANSACTION_ABORTABLE, UNKNOWN_TOPIC_OR_PARTITION
            # past its retries, ...: this transaction cannot go on, the producer can.
            self._request_failed(item, error, fatal=False)

    def _handle_add_offsets(
        self, item: TransactionalRequest, response: AddOffsetsToTxnResponse, now: float
    ) -> None:
        code = response.error_code
        if code == 0:
            self._transaction_started = True
            if self._txn_state not in (_State.IN_TRANSACTION, _State.COMMITTING_TRANSACTION):
                # Aborted (or failed) while AddOffsetsToTxn was in flight: the offsets would
                # only be discarded with the transaction.
                _fail(
                    item.result,
                    TransactionAbortedError("the transaction ended before the offsets were sent"),
                )
                return
            commit = self._request(
                _Kind.TXN_OFFSET_COMMIT, item.result, offsets=item.offsets, group=item.group
            )
            self._enqueue(commit, front=True)
            return
        if self._common_error(item, code, now):
            return
        error = self._error(code, item.describe())
        if code in _NEEDS_EPOCH_BUMP:
            self.needs_producer_id = True
        fatal = code == ErrorCode.INVALID_TXN_STATE
        self._request_failed(item, error, fatal=fatal)

    def _handle_txn_offset_commit(
        self, item: TransactionalRequest, response: TxnOffsetCommitResponse, now: float
    ) -> None:
        retry: dict[TopicPartition, tuple[int, str | None, int]] = {}
        failure: tuple[int, TopicPartition] | None = None
        coordinator_moved = False
        for topic in response.topics:
            for partition in topic.partitions:
                tp = (topic.name, partition.partition_index)
                code = partition.error_code
                if code == 0 or tp not in item.offsets:
                    continue
                if code in _COORDINATOR_MOVED:
                    coordinator_moved = True
                    retry[tp] = item.offsets[tp]
                elif (
                    code
                    in (
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        ErrorCode.REQUEST_TIMED_OUT,
                        ErrorCode.CONCURRENT_TRANSACTIONS,
                    )
                    or error_for_code(code).retriable
                ):
                    retry[tp] = item.offsets[tp]
                elif failure is None or code in _FENCED:
                    failure = (code, tp)
        if failure is not None:
            code, (topic_name, partition_index) = failure
            error = self._error(code, f"TxnOffsetCommit for {topic_name}-{partition_index}")
            if code in _FENCED:
                self._request_failed(item, self._fenced(error), fatal=True)
            elif code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                self._request_failed(item, error, fatal=True)
            else:
                # GROUP_AUTHORIZATION_FAILED, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
                # FENCED_INSTANCE_ID (KIP-447: this member was fenced by a rebalance), ...
                self._request_failed(item, error, fatal=False)
            return
        if retry:
            if coordinator_moved:
                self._forget_coordinator(item)
            item.offsets = retry
            self._retry(item, now)
            return
        _succeed(item.result)

    def _handle_end_txn(
        self, item: TransactionalRequest, response: EndTxnResponse, now: float
    ) -> None:
        code = response.error_code
        if code == 0:
            if response.producer_id >= 0:
                # EndTxn v5 (transactions v2): the coordinator bumped the epoch (or, when it
                # ran out, gave a new producer id at epoch 0); the next transaction uses it,
                # every partition starting again at sequence 0.
                log.debug(
                    "transactional id %r: EndTxn returned producer id %d, epoch %d",
                    self.transactional_id,
                    response.producer_id,
                    response.producer_epoch,
                )
                self.set_producer_id(response.producer_id, response.producer_epoch)
            self._complete_transaction(item)
            return
        if self._common_error(item, code, now):
            return
        error = self._error(code, item.describe())
        if code == ErrorCode.INVALID_TXN_STATE and item.committed:
            # Seen when the coordinator aborted the transaction on its own, after it had
            # been open longer than transaction_timeout_ms: say so, the code alone does not.
            error = self._error(
                code,
                item.describe(),
                "the coordinator no longer has this transaction open to commit; it aborts a "
                "transaction that stays open longer than transaction_timeout_ms",
            )
        if item.transaction_v2 and code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            # Java 4.0's EndTxnHandler: fatal.
            self._request_failed(item, error, fatal=True)
            return
        if code in _NEEDS_EPOCH_BUMP and not item.transaction_v2:
            # Java's EndTxnHandler: abortable, and the epoch must be bumped. An abort goes
            # on that way at once: InitProducerId aborts what is open on the coordinator.
            self.needs_producer_id = True
            if item.committed:
                self._request_failed(item, error, fatal=False)
                return
            self._last_error = error
            self._abort_by_epoch_bump(item.result)
            return
        if code in _NEEDS_EPOCH_BUMP or code == ErrorCode.TRANSACTION_ABORTABLE:
            if item.committed:
                self._request_failed(item, error, fatal=False)
                return
            # An abort that cannot complete: fail it, stay aborting; the user may retry.
            _fail(item.result, error_copy(error, fresh=True))
            return
        self._request_failed(item, error, fatal=True)

    def _complete_transaction(self, item: TransactionalRequest) -> None:
        outcome = "committed" if item.committed else "aborted"
        log.debug("transactional id %r: transaction %s", self.transactional_id, outcome)
        self._partitions_in_transaction.clear()
        self._pending_partitions.clear()
        self._new_partitions.clear()
        self._unconfirmed_partitions.clear()
        self._transaction_started = False
        self._completion = None
        self._transaction_v2 = self._next_transaction_v2
        if self._epoch_bump_required or (not item.committed and self.needs_producer_id):
            # Sequences were lost in the aborted transaction, or the next transaction is the
            # first with transactions v2: start over under a new epoch before the next
            # transaction; the commit or abort completes with it.
            self.needs_producer_id = True
            self.transition(_State.INITIALIZING)
            self._enqueue(
                self._request(_Kind.INIT_PRODUCER_ID, item.result, epoch_bump=True), front=True
            )
            return
        self.transition(_State.READY)
        self._last_error = None
        _succeed(item.result)


_FATAL_BATCH_ERRORS = (
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    UnsupportedVersionError,
)
