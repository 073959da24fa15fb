"""What a user sends and what comes back: records, their metadata and futures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aioproducer.accumulator import ProducerBatch

__all__ = [
    "Header",
    "ProducerRecord",
    "RecordFuture",
    "RecordMetadata",
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


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the broker stored a record.

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


class RecordFuture:
    """The result of one sent record: await it for its :class:`RecordMetadata`.

    There is one asyncio future per batch, not per record; this object derives the record's
    metadata from its batch's result, so sending stays cheap. It is awaitable, has ``done()``,
    ``result()``, ``exception()`` and ``add_done_callback()``, and can be passed to
    ``asyncio.gather``.
    """

    __slots__ = ("_batch", "_callbacks", "key_size", "relative_offset", "timestamp", "value_size")

    def __init__(
        self,
        batch: ProducerBatch,
        relative_offset: int,
        timestamp: int,
        key_size: int,
        value_size: int,
    ) -> None:
        self._batch = batch
        self.relative_offset = relative_offset
        self.timestamp = timestamp
        self.key_size = key_size
        self.value_size = value_size
        self._callbacks: list[Callable[[RecordFuture], object]] | None = None

    def _rebind(self, batch: ProducerBatch, relative_offset: int) -> None:
        # Called when a too-large batch is split: the record now lives in ``batch``.
        self._batch = batch
        self.relative_offset = relative_offset
        if self._callbacks:
            batch.future.add_done_callback(self._on_batch_done)

    def _current(self) -> asyncio.Future[Any]:
        return self._batch.future

    def done(self) -> bool:
        """True once the record was acknowledged or failed."""
        future = self._batch.future
        return future.done() and (future.cancelled() or future.exception() is not None
                                  or future.result() is not SPLIT)

    def _metadata(self, result: tuple[int, int]) -> RecordMetadata:
        base_offset, log_append_time = result
        batch = self._batch
        if log_append_time >= 0:
            timestamp = log_append_time
            timestamp_type = TimestampType.LOG_APPEND_TIME
        else:
            timestamp = self.timestamp
            timestamp_type = TimestampType.CREATE_TIME
        return RecordMetadata(
            batch.topic,
            batch.partition,
            base_offset + self.relative_offset if base_offset >= 0 else -1,
            timestamp,
            self.key_size,
            self.value_size,
            timestamp_type,
        )

    def result(self) -> RecordMetadata:
        """The metadata; raises the record's error, or InvalidStateError when not done."""
        if not self.done():
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return self._metadata(self._batch.future.result())

    def exception(self) -> BaseException | None:
        """The record's error, None on success; raises InvalidStateError when not done."""
        if not self.done():
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return self._batch.future.exception()

    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None:
        """Call ``callback(self)`` once the record is acknowledged or failed."""
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)
        if self.done():
            self._run_callbacks()
        elif len(self._callbacks) == 1:
            self._batch.future.add_done_callback(self._on_batch_done)

    def _on_batch_done(self, future: asyncio.Future[Any]) -> None:
        if future is not self._batch.future or not self.done():
            return
        self._run_callbacks()

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            callback(self)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        while True:
            result = yield from self._batch.future.__await__()
            if result is not SPLIT:
                return self._metadata(result)

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<RecordFuture {self._batch.topic}-{self._batch.partition} {state}>"


class BatchResults:
    """What ``send_many`` returns: awaitable, resolving to each record's metadata in order."""

    __slots__ = ("_futures",)

    def __init__(self, futures: list[RecordFuture]) -> None:
        self._futures = futures

    def __len__(self) -> int:
        return len(self._futures)

    @property
    def futures(self) -> list[RecordFuture]:
        """The per-record futures, in the order the records were given."""
        return self._futures

    def done(self) -> bool:
        """True once every record was acknowledged or failed."""
        return all(future.done() for future in self._futures)

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        # Await each distinct batch once, then derive the metadata of every record.
        seen: set[int] = set()
        for future in self._futures:
            batch_future = future._current()
            if id(batch_future) not in seen:
                seen.add(id(batch_future))
                yield from future.__await__()
        return [future.result() for future in self._futures]
