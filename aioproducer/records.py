"""What a user sends and what comes back: records and their metadata.

The futures of sent records are in :mod:`aioproducer.futures`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

__all__ = [
    "Header",
    "ProducerRecord",
    "RecordMetadata",
    "RecordMetadataSequence",
    "TimestampType",
]

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


# Sentinel a batch future resolves to when its records moved to smaller batches.
SPLIT = object()
