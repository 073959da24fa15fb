"""What a user sends and what comes back: records and their metadata, and the public data
of transactions.

The futures of sent records are in :mod:`aioproducer._core.futures`.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

from aioproducer.errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = [
    "MAX_TIMESTAMP_MS",
    "ConsumerGroupMetadata",
    "Header",
    "PreparedTransaction",
    "ProducerRecord",
    "RecordMetadata",
    "RecordMetadataSequence",
    "TimestampType",
    "TransactionState",
    "check_partition",
    "check_timestamp",
]

MAX_TIMESTAMP_MS = 2**63 - 1
"""The largest record timestamp: the wire format holds a signed 64-bit count of
milliseconds, and Kafka refuses negative create times."""

Header = tuple[str, bytes | None]
"""A record header: a name and a value (bytes, or None)."""


class TimestampType:
    """Where a record's timestamp comes from."""

    CREATE_TIME = 0
    """Set by the producer (the default)."""
    LOG_APPEND_TIME = 1
    """Set by the broker when it appends the batch (topic config ``message.timestamp.type``)."""


class RecordMetadata(NamedTuple):
    """Where the broker stored a record (an immutable named tuple: cheap to make per record).

    Attributes:
        topic: the topic.
        partition: the partition.
        offset: the record's offset, or -1 when unknown (acks=0, or a duplicate the broker
            recognised without reporting the original offset).
        timestamp: the record's timestamp in milliseconds: the create time the producer set,
            or the broker's log-append time when the topic uses it.
        serialized_key_size: bytes of the serialized key, -1 for a None key.
        serialized_value_size: bytes of the serialized value, -1 for a None value.
        timestamp_type: :class:`TimestampType` of ``timestamp``.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int
    timestamp_type: int = TimestampType.CREATE_TIME


class RecordMetadataSequence(Sequence[RecordMetadata]):
    """The metadata of every record of a ``send_many`` call, in the order given: what
    awaiting its :class:`~aioproducer.BatchResults` returns.

    A read-only sequence (``len()``, indexing, slicing, iteration, ``==`` with a list or
    tuple of :class:`RecordMetadata`). Each record's :class:`RecordMetadata` is made on
    first access to any of them, not when the call completes: a caller that only awaits
    the call (or takes its ``len()``) makes no object per record. Millions of metadata
    tuples kept at once are also millions of objects for Python's cyclic garbage
    collector to walk again and again, most of the cost of a bulk send that keeps them.

    ``send_many`` makes these; there is no reason to make one yourself.
    """

    __slots__ = ("_build", "_items", "_length")

    def __init__(self, length: int, build: Callable[[], list[RecordMetadata]]) -> None:
        self._length = length
        self._build: Callable[[], list[RecordMetadata]] | None = build
        self._items: list[RecordMetadata] | None = None

    def _list(self) -> list[RecordMetadata]:
        items = self._items
        if items is None:
            build = self._build
            assert build is not None
            items = self._items = build()
            self._build = None
        return items

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        return self._list()[index]

    def __iter__(self) -> Iterator[RecordMetadata]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordMetadataSequence):
            return self._length == other._length and self._list() == other._list()
        if isinstance(other, list | tuple):
            return self._length == len(other) and self._list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordMetadataSequence({self._list()!r})"


def _as_int(value: Any, argument: str, expected: str) -> int:
    # bool is an int to Python, never a timestamp or a partition to Kafka; integer types
    # of other libraries (numpy's, say) say so with __index__.
    if not isinstance(value, bool) and hasattr(type(value), "__index__"):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise InvalidArgumentTypeError(
        f"{argument} must be {expected}, not of type {type(value).__name__}"
    )


def _shown(value: int) -> str:
    # A huge int has no str() beyond sys.get_int_max_str_digits(); its size says enough.
    return str(value) if value.bit_length() <= 128 else f"<an int of {value.bit_length()} bits>"


def check_timestamp(timestamp: Any, argument: str = "timestamp_ms") -> int | None:
    """``timestamp`` as an int of milliseconds since the epoch, or None (meaning now).

    Kafka's rule (the Java client's ``ProducerRecord``): an integer from 0 to
    :data:`MAX_TIMESTAMP_MS`. ``argument`` names it in the error.

    Raises:
        InvalidArgumentTypeError: not an integer (a float, a str, a bool, ...).
        InvalidArgumentError: negative, or beyond :data:`MAX_TIMESTAMP_MS`.
    """
    if timestamp is None:
        return None
    if type(timestamp) is not int:
        timestamp = _as_int(timestamp, argument, "an int of milliseconds since the epoch, or None")
    checked: int = timestamp
    if not 0 <= timestamp <= MAX_TIMESTAMP_MS:
        raise InvalidArgumentError(
            f"{argument}={_shown(timestamp)} is out of range: a record's timestamp is milliseconds "
            "since the epoch, from 0 to 2**63-1 (or None for the current time)"
        )
    return checked


def check_partition(partition: Any, argument: str = "partition") -> int | None:
    """``partition`` as an int from 0, or None (the partitioner chooses).

    Whether the topic has that partition is known only from its metadata: ``send()``
    checks that when it appends the record.

    Raises:
        InvalidArgumentTypeError: not an integer (a str, a float, a bool, ...).
        InvalidArgumentError: negative.
    """
    if partition is None:
        return None
    if type(partition) is not int:
        partition = _as_int(partition, argument, "an int partition id, or None")
    checked: int = partition
    if checked < 0:
        raise InvalidArgumentError(
            f"{argument}={_shown(partition)} is out of range: a partition is an int from 0 to the "
            "topic's partition count - 1 (or None to let the partitioner choose)"
        )
    return checked


@dataclass(slots=True)
class ProducerRecord:
    """A record to send: what ``send_many`` accepts as an item and interceptors see.

    Attributes:
        topic: the topic.
        value: the value (bytes-like, None, or anything the value serializer takes).
        key: the key (bytes-like, None, or anything the key serializer takes).
        partition: an explicit partition, or None to let the partitioner choose.
        timestamp_ms: the create time in milliseconds, or None for now.
        headers: headers as ``(name, value)`` pairs.
    """

    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Sequence[Header] | None = None

    def __post_init__(self) -> None:
        # As Java's ProducerRecord: a record with an impossible partition or timestamp is
        # refused where it is made, not when it is sent.
        self.partition = check_partition(self.partition)
        self.timestamp_ms = check_timestamp(self.timestamp_ms)


# Sentinel a batch future resolves to when its records moved to smaller batches.
SPLIT = object()


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A transaction that was flushed but not committed: what another process needs to
    commit or abort it (:func:`aioproducer.complete_prepared_transaction`).

    Made by :meth:`aioproducer.Producer.prepare_transaction`. Plain data: it pickles, and
    its fields can be stored and read back.

    Attributes:
        transactional_id: the producer's ``transactional_id``.
        producer_id: the producer id the transaction was written under.
        producer_epoch: the producer epoch the transaction was written under; the
            coordinator ends the transaction only for this epoch.
        transaction_v2: the transaction used transactions v2 (KIP-890): it is ended with
            EndTxn v5, as the producer would have.
        empty: nothing was sent in the transaction: the coordinator has no transaction to
            end, and completing it does nothing.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    transaction_v2: bool = False
    empty: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The consumer group a transaction commits offsets for (KIP-447).

    Pass the group's current generation, member id and group instance id from the consumer
    that read the input records, so the group coordinator can reject a commit from a member
    that was fenced by a rebalance (zombie fencing). With only a ``group_id`` the commit is
    not tied to a generation, as before KIP-447.

    Attributes:
        group_id: the consumer group id.
        generation_id: the group generation the member is in, -1 when unknown.
        member_id: the member id the coordinator assigned, ``""`` when unknown.
        group_instance_id: the static member id (KIP-345), if any.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionState(enum.Enum):
    """Where a transactional producer is, as in the Java client's ``TransactionManager``."""

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    PREPARED_TRANSACTION = "prepared_transaction"
    COMMITTING_TRANSACTION = "committing_transaction"
    ABORTING_TRANSACTION = "aborting_transaction"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


# Pickled by the public path they are imported from (``aioproducer.PreparedTransaction``),
# which stays put when the modules behind it move.
for _public in (PreparedTransaction, ConsumerGroupMetadata, TransactionState):
    _public.__module__ = "aioproducer"
del _public
