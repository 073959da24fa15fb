"""Delivery reports for confluent-kafka style code: ``produce(on_delivery=...)`` and ``poll()``.

confluent-kafka calls a record's delivery callback, ``callback(err, msg)``, from inside
``poll()`` or ``flush()``, in the thread that calls them, never from a thread of its own.
:meth:`Producer.produce <aioproducer.Producer.produce>` and
:meth:`SyncProducer.produce <aioproducer.SyncProducer.produce>` keep that contract: when a
record is acknowledged or fails, its report is queued here, and the callbacks run when the
application calls ``poll()``, ``flush()`` or ``close()``, in that caller's task or thread.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from aioproducer.errors import InvalidArgumentTypeError
from aioproducer.records import RecordMetadata, TimestampType

__all__ = [
    "DeliveredMessage",
    "DeliveryCallback",
    "DeliveryReports",
    "check_delivery_callback",
    "confluent_arguments",
]

DeliveryCallback = Callable[[BaseException | None, "DeliveredMessage"], object]
"""A delivery callback: ``callback(err, msg)``; ``err`` is None when the record was stored."""

# confluent-kafka's timestamp types (TIMESTAMP_NOT_AVAILABLE, _CREATE_TIME, _LOG_APPEND_TIME).
_NOT_AVAILABLE, _CREATE_TIME, _LOG_APPEND_TIME = 0, 1, 2


class DeliveredMessage:
    """What a delivery callback gets as ``msg``: the record and its outcome, with the
    accessor methods of confluent-kafka's ``Message``.

    ``key()``, ``value()`` and ``headers()`` are what was given to ``produce()`` (a str
    already encoded as UTF-8 there); ``partition()`` and ``offset()`` are where the broker
    stored the record, or -1 when it was not stored (``error()`` then says why).
    """

    __slots__ = (
        "_callback",
        "_error",
        "_future",
        "_headers",
        "_key",
        "_latency",
        "_offset",
        "_partition",
        "_reported",
        "_started",
        "_timestamp",
        "_topic",
        "_value",
    )

    def __init__(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Any,
    ) -> None:
        self._topic = topic
        self._value = value
        self._key = key
        self._partition = -1 if partition is None else partition
        self._headers = headers
        self._offset = -1
        self._error: BaseException | None = None
        self._timestamp = (_NOT_AVAILABLE, 0)
        self._started = time.monotonic()
        self._latency: float | None = None
        # While its report is pending (DeliveryReports): the callback and the record's
        # future; one object per record, for the collector to walk, not three.
        self._callback: DeliveryCallback | None = None
        self._future: Any = None
        self._reported = False

    def topic(self) -> str:
        """The topic."""
        return self._topic

    def partition(self) -> int:
        """The partition the record went to; -1 when none was chosen (it failed first)."""
        return self._partition

    def offset(self) -> int:
        """The record's offset; -1 when it was not stored, or unknown (``acks=0``)."""
        return self._offset

    def key(self) -> Any:
        """The key given to ``produce()`` (a str encoded as UTF-8)."""
        return self._key

    def value(self) -> Any:
        """The value given to ``produce()`` (a str encoded as UTF-8)."""
        return self._value

    def headers(self) -> Any:
        """The headers given to ``produce()``, or None."""
        return self._headers

    def error(self) -> BaseException | None:
        """The delivery error (a :class:`~aioproducer.errors.KafkaError`), or None."""
        return self._error

    def timestamp(self) -> tuple[int, int]:
        """``(type, milliseconds)`` with confluent-kafka's type numbers: 0 not available,
        1 create time, 2 log-append time (set by the broker)."""
        return self._timestamp

    def latency(self) -> float | None:
        """Seconds from ``produce()`` to the delivery report."""
        return self._latency

    def __repr__(self) -> str:
        outcome = "stored" if self._error is None else f"failed: {self._error!r}"
        return f"<DeliveredMessage {self._topic}-{self._partition}@{self._offset} {outcome}>"

    def _settle(
        self, metadata: RecordMetadata | None, error: BaseException | None, create_time: int | None
    ) -> None:
        self._latency = time.monotonic() - self._started
        if error is not None:
            self._error = error
            if create_time is not None:
                self._timestamp = (_CREATE_TIME, create_time)
            return
        assert metadata is not None
        self._partition = metadata.partition
        self._offset = metadata.offset
        kind = (
            _LOG_APPEND_TIME
            if metadata.timestamp_type == TimestampType.LOG_APPEND_TIME
            else _CREATE_TIME
        )
        self._timestamp = (kind, metadata.timestamp)


class DeliveryReports:
    """The delivery reports of one producer's ``produce()`` records.

    Reports are queued as records finish (in the order they finish) and served, callbacks
    run, by :meth:`serve`, in the thread that calls it. Thread-safe: records may finish on
    an event loop thread while another thread serves.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._blocked = 0  # threads in wait_blocking(): only they need a notify
        self._ready: collections.deque[DeliveredMessage] = collections.deque()
        # By id() of the record's future (alive while here: the message holds it).
        self._outstanding: dict[int, DeliveredMessage] = {}
        self._async_waiters: list[asyncio.Future[None]] = []
        # One bound method for every record's future (no closure per record).
        self._on_done = self._future_done

    @property
    def outstanding(self) -> int:
        """Records produced whose report has not been queued yet."""
        return len(self._outstanding)

    @property
    def ready(self) -> int:
        """Reports queued and not served yet."""
        return len(self._ready)

    def track(self, message: DeliveredMessage, callback: DeliveryCallback, future: Any) -> None:
        """Queue ``message``'s report with ``callback`` once ``future`` is done: a
        :class:`~aioproducer.RecordFuture` or a ``concurrent.futures.Future`` of the
        record's :class:`~aioproducer.RecordMetadata`."""
        message._callback = callback
        message._future = future
        with self._lock:
            self._outstanding[id(future)] = message
        future.add_done_callback(self._on_done)

    def _future_done(self, future: Any) -> None:
        message = self._outstanding.get(id(future))
        if message is not None and message._future is future:
            self._report(message)

    def collect(self) -> None:
        """Queue the reports of every record whose future is done, without waiting for the
        futures' own callbacks (which may run later: ``flush()`` is done as soon as the
        records are)."""
        with self._lock:
            messages = list(self._outstanding.values())
        for message in messages:
            future = message._future
            if future is not None and future.done():
                self._report(message)

    def _report(self, message: DeliveredMessage) -> None:
        future = message._future
        with self._lock:
            if message._reported:
                return
            message._reported = True
            del self._outstanding[id(future)]
        error: BaseException | None
        metadata: RecordMetadata | None = None
        if future.cancelled():
            error = asyncio.CancelledError()
        else:
            error = future.exception()
            if error is None:
                metadata = future.result()
        create_time = getattr(future, "timestamp", None)  # a RecordFuture's
        if not isinstance(create_time, int):
            create_time = None
        message._settle(metadata, error, create_time)
        message._future = None
        with self._lock:
            self._ready.append(message)
            if self._blocked:
                self._changed.notify_all()
            if not self._async_waiters:
                return
            waiters, self._async_waiters = self._async_waiters, []
        for waiter in waiters:
            loop = waiter.get_loop()
            if loop.is_closed():
                continue
            loop.call_soon_threadsafe(_wake, waiter)

    def serve(self) -> int:
        """Run the callbacks of the queued reports, in order; return how many ran.

        A callback that raises stops the serving: its exception propagates, and the reports
        after it stay queued for the next call.
        """
        served = 0
        while True:
            with self._lock:
                if not self._ready:
                    return served
                message = self._ready.popleft()
            served += 1
            callback, message._callback = message._callback, None
            assert callback is not None
            callback(message._error, message)

    async def serve_async(self) -> int:
        """:meth:`serve` for an event loop: a callback that returns an awaitable (a
        coroutine function's) is awaited before the next one runs."""
        served = 0
        while True:
            with self._lock:
                if not self._ready:
                    return served
                message = self._ready.popleft()
            served += 1
            callback, message._callback = message._callback, None
            assert callback is not None
            result = callback(message._error, message)
            if inspect.isawaitable(result):
                await result

    def wait_blocking(self, timeout: float | None) -> None:
        """Block until a report is queued, no record is outstanding, or ``timeout`` seconds
        (None: no limit) pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._ready and self._outstanding:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                self._blocked += 1
                try:
                    self._changed.wait(remaining)
                finally:
                    self._blocked -= 1

    async def wait(self, timeout: float | None) -> None:
        """Wait until a report is queued, no record is outstanding, or ``timeout`` seconds
        (None: no limit) pass."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._ready or not self._outstanding:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._async_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            with self._lock:
                if waiter in self._async_waiters:
                    self._async_waiters.remove(waiter)


def check_delivery_callback(
    on_delivery: DeliveryCallback | None, callback: DeliveryCallback | None
) -> DeliveryCallback | None:
    """``produce()``'s delivery callback, given under either of its names (or None).

    Raises:
        InvalidArgumentTypeError: both names given, or the callback is not callable.
    """
    if on_delivery is not None and callback is not None:
        raise InvalidArgumentTypeError(
            "give on_delivery or callback, not both: they are two names of one argument"
        )
    chosen = on_delivery if on_delivery is not None else callback
    if chosen is not None and not callable(chosen):
        raise InvalidArgumentTypeError(
            f"on_delivery must be callable as callback(err, msg), not {type(chosen).__name__}"
        )
    return chosen


def confluent_arguments(
    key: Any,
    value: Any,
    partition: Any,
    timestamp: Any,
    headers: Any,
    key_serializer: Any,
    value_serializer: Any,
) -> tuple[Any, Any, Any, Any, Any]:
    """confluent-kafka's ``produce()`` arguments as ``send()`` takes them: key, value,
    partition, timestamp_ms and headers.

    A str key or value is encoded as UTF-8 where no serializer is set for it, as are str
    header values; ``partition=-1`` (confluent-kafka's "unassigned") becomes None and
    ``timestamp=0`` ("now") None. Anything else goes on as given, for ``send()`` to check.
    """
    if type(key) is str and key_serializer is None:
        key = key.encode()
    if type(value) is str and value_serializer is None:
        value = value.encode()
    if type(partition) is int and partition == -1:
        partition = None
    if type(timestamp) is int and timestamp == 0:
        timestamp = None
    return key, value, partition, timestamp, _utf8_headers(headers)


def _utf8_headers(headers: Any) -> Any:
    """Headers with str values encoded as UTF-8 (confluent-kafka takes str or bytes)."""
    if headers is None or isinstance(headers, str | bytes | bytearray | memoryview):
        return headers  # check_headers refuses these with a clear message
    pairs: list[Any]
    if isinstance(headers, Mapping):
        pairs = list(headers.items())
    else:
        try:
            pairs = list(headers)
        except TypeError:
            return headers
    encoded: list[Any] = []
    for pair in pairs:
        if isinstance(pair, tuple | list) and len(pair) == 2 and type(pair[1]) is str:
            pair = (pair[0], pair[1].encode())
        encoded.append(pair)
    return encoded


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
