"""Delivery reports for confluent-kafka style code: ``produce(on_delivery=...)`` and ``poll()``.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

confluent-kafka calls a record's delivery callback, ``callback(err, msg)``, from inside
``poll()`` or ``flush()``, in the thread that calls them, never from a thread of its own.
:meth:`Producer.produce <aioproducer.Producer.produce>` and
:meth:`SyncProducer.produce <aioproducer.SyncProducer.produce>` keep that contract: when a
record is acknowledged or fails, its report is queued here, and the callbacks run when the
application calls ``poll()``, ``flush()`` or ``close()``, in that caller's task or thread.

A record appended at once leaves its report with its batch (:meth:`DeliveryReports.pend`):
one object per batch holds its records' callbacks, and the batch queues all their reports
when it is done, so the cyclic GC walks no object per record while reports are pending.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from time import monotonic as _monotonic  # a global, not a module attribute, per record
from typing import TYPE_CHECKING, Any, Final

from aioproducer._core.futures import BatchWatcher, RecordFuture, error_copy
from aioproducer._core.gc import track as _gc_track
from aioproducer._core.gc import untrack as _gc_untrack
from aioproducer.errors import InvalidArgumentTypeError
from aioproducer.records import RecordMetadata, TimestampType

if TYPE_CHECKING:
    from aioproducer._core.accumulator import ProducerBatch

__all__ = [
    "DeliveredMessage",
    "DeliveryCallback",
    "DeliveryReports",
    "ProduceLater",
    "check_delivery_callback",
    "confluent_arguments",
]

DeliveryCallback = Callable[[BaseException | None, "DeliveredMessage"], object]
"""A delivery callback: ``callback(err, msg)``; ``err`` is None when the record was stored."""

# confluent-kafka's timestamp types (TIMESTAMP_NOT_AVAILABLE, _CREATE_TIME, _LOG_APPEND_TIME).
_NOT_AVAILABLE: Final = 0
_CREATE_TIME: Final = 1
_LOG_APPEND_TIME: Final = 2


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
        "_timestamp_ms",
        "_timestamp_type",
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
        self._timestamp_type = _NOT_AVAILABLE
        self._timestamp_ms = 0
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
        return (self._timestamp_type, self._timestamp_ms)

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
                self._timestamp_type = _CREATE_TIME
                self._timestamp_ms = create_time
            return
        assert metadata is not None
        self._partition = metadata.partition
        self._offset = metadata.offset
        self._timestamp_type = (
            _LOG_APPEND_TIME
            if metadata.timestamp_type == TimestampType.LOG_APPEND_TIME
            else _CREATE_TIME
        )
        self._timestamp_ms = metadata.timestamp


# A produce() record waiting in its batch's _BatchReports is six entries of a flat list: its
# offset in the batch, its timestamp, the key, value and headers given, and when it was
# produced. Its callback is in the batch's runs of callbacks.
_ENTRY: Final = 6


class _BatchReports(BatchWatcher):
    """The ``produce()`` records of one batch that wait for their reports: one object per
    batch, watched by it, instead of a message and a watched future per record.

    A caller who produces a hundred thousand records before polling would otherwise leave
    the cyclic GC two hundred thousand objects to walk at each full collection. Here a
    pending record is six entries of :attr:`entries`, a list that holds only atoms (ints,
    a float, bytes and None) and so is taken out of the collector (see
    :mod:`aioproducer._core.gc`); it is tracked again as soon as a key, value or headers of
    another kind (what a serializer takes, a header list) joins it. The callbacks, which
    may lead anywhere, are in :attr:`runs`, one entry per run of records with the same
    callback. The reports' messages are made when served.
    """

    __slots__ = (
        "batch",
        "callback",
        "done_at",
        "entries",
        "next",
        "owner",
        "queued",
        "run",
        "runs",
        "tracked",
    )

    def __init__(self, owner: DeliveryReports, batch: ProducerBatch) -> None:
        self.owner = owner
        self.batch = batch
        self.entries: list[Any] = []
        _gc_untrack(self.entries)
        self.tracked = False
        # [callback, first entry, callback, first entry, ...]: who gets each report.
        self.runs: list[Any] = []
        self.callback: Any = None  # the last run's callback
        self.next = 0  # the entry the next report is served from, once queued
        self.run = 0  # the run of the entry served next
        self.queued = False
        self.done_at = 0.0  # time.monotonic() when the batch was done: each latency's end

    def _on_batch_done(self) -> None:
        self.owner._batch_done(self)

    def add(
        self,
        relative_offset: int,
        timestamp: int,
        callback: Any,
        key: Any,
        value: Any,
        headers: Any,
        started: float,
    ) -> None:
        """Keep the report of the record at ``relative_offset`` in the batch."""
        entries = self.entries
        if callback is not self.callback and callback != self.callback:
            # (Equal but not the same: a bound method, made anew at each call.)
            self.callback = callback
            self.runs.append(callback)
            self.runs.append(len(entries))
        if not self.tracked and not (
            (key is None or type(key) is bytes)
            and (value is None or type(value) is bytes)
            and headers is None
        ):
            # Not an atom: it may refer to anything, this list included.
            _gc_track(entries)
            self.tracked = True
        entries.append(relative_offset)
        entries.append(timestamp)
        entries.append(key)
        entries.append(value)
        entries.append(headers)
        entries.append(started)

    def callback_at(self, at: int) -> DeliveryCallback:
        """The callback of the record at entry ``at``: served in order, from :attr:`run`."""
        runs = self.runs
        run = self.run
        following = run + 2
        while following < len(runs) and runs[following + 1] <= at:
            run = following
            following += 2
        self.run = run
        callback: DeliveryCallback = runs[run]
        return callback

    def message(self, at: int) -> DeliveredMessage:
        """The report of the record at entry ``at``, settled."""
        entries = self.entries
        batch = self.batch
        message = DeliveredMessage(
            batch.topic, entries[at + 3], entries[at + 2], batch.partition, entries[at + 4]
        )
        started: float = entries[at + 5]
        message._started = started
        message._latency = self.done_at - started
        error = batch.error
        if error is not None:
            message._error = error_copy(error)  # each record's own, as its future's
            message._timestamp_type = _CREATE_TIME
            message._timestamp_ms = entries[at + 1]
            return message
        base_offset, log_append_time = batch.outcome
        if base_offset >= 0:
            relative_offset: int = entries[at]
            message._offset = base_offset + relative_offset
        if log_append_time < 0:
            message._timestamp_type = _CREATE_TIME
            message._timestamp_ms = entries[at + 1]
        else:
            message._timestamp_type = _LOG_APPEND_TIME
            message._timestamp_ms = log_append_time
        return message


class DeliveryReports:
    """The delivery reports of one producer's ``produce()`` records.

    Reports are queued as records finish (in the order they finish) and served, callbacks
    run, by :meth:`serve`, in the thread that calls it. Thread-safe: records may finish on
    an event loop thread while another thread serves.

    A record reaches it in one of two ways: :meth:`pend`, for a record just appended to an
    open batch on the batch's loop (the batch then queues the reports of all its records
    at once), or :meth:`track`, for any future of the record's metadata.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._blocked = 0  # threads in wait_blocking(): only they need a notify
        # Messages (from track) and batches' reports (from pend), in the order they finished.
        self._ready: collections.deque[DeliveredMessage | _BatchReports] = collections.deque()
        self._ready_count = 0  # reports in _ready not served yet
        # By id() of the record's future (alive while here: the message holds it).
        self._outstanding: dict[int, DeliveredMessage] = {}
        # The pending batches' reports, by id() of the batch (alive: the reports hold it),
        # the last one used (a run of records mostly goes to one batch), and their records.
        self._batches: dict[int, _BatchReports] = {}
        self._last: _BatchReports | None = None
        self._pending = 0
        self._async_waiters: list[asyncio.Future[None]] = []
        # One bound method for every record's future (no closure per record).
        self._on_done = self._future_done

    @property
    def outstanding(self) -> int:
        """Records produced whose report has not been queued yet."""
        return len(self._outstanding) + self._pending

    @property
    def ready(self) -> int:
        """Reports queued and not served yet."""
        return self._ready_count

    def pend(
        self,
        batch: ProducerBatch,
        relative_offset: int,
        timestamp: int,
        callback: DeliveryCallback,
        key: Any,
        value: Any,
        headers: Any,
        started: float,
    ) -> None:
        """Queue the report of the record at ``relative_offset`` in ``batch``, with
        ``callback``, once the batch is done: a record just appended (the batch still open),
        on the batch's loop. ``timestamp`` is the record's, ``started`` when it was
        produced (``time.monotonic()``)."""
        reports = self._last
        if reports is None or reports.batch is not batch:
            found = self._batches.get(id(batch))
            if found is None or found.batch is not batch:
                found = _BatchReports(self, batch)
                with self._lock:
                    self._batches[id(batch)] = found
                if not (batch.final or batch.split):
                    # One that is done already (a split's part failed at once) never calls
                    # back: whoever pends into it queues it (_follow_split).
                    batch.watch(found)
            reports = self._last = found
        reports.add(relative_offset, timestamp, callback, key, value, headers, started)
        self._pending += 1

    def pend_record(
        self, future: RecordFuture, callback: DeliveryCallback, key: Any, value: Any, headers: Any
    ) -> None:
        """:meth:`pend` for the record of ``future``, appended just now to a batch still
        open: its report joins the batch's others, in the order of the batch's records,
        started now."""
        self.pend(
            future._batch,
            future.relative_offset,
            future.timestamp,
            callback,
            key,
            value,
            headers,
            _monotonic(),
        )

    def _batch_done(self, reports: _BatchReports) -> None:
        # The batch of pending reports is done (or split): queue them.
        if reports.queued:
            return
        batch = reports.batch
        if not batch.final and not batch.split:
            return
        count = len(reports.entries) // _ENTRY
        reports.done_at = time.monotonic()
        with self._lock:
            reports.queued = True
            if self._batches.get(id(batch)) is reports:
                del self._batches[id(batch)]
            if self._last is reports:
                self._last = None
            self._pending -= count
        if batch.split:
            self._follow_split(reports)
            return
        self._queue(reports, count)

    def _follow_split(self, reports: _BatchReports) -> None:
        # The broker found the batch too large and it was split: each record went to one
        # of the new batches (batch.forward), whose reports it joins, in its order.
        entries = reports.entries
        moved: list[_BatchReports] = []
        for at in range(0, len(entries), _ENTRY):
            batch = reports.batch
            relative_offset: int = entries[at]
            while batch.split:
                forward = batch.forward
                if forward is None:
                    raise AssertionError("a split batch without its forwarding table")
                batch, relative_offset = forward[relative_offset]
            self.pend(
                batch,
                relative_offset,
                entries[at + 1],
                reports.callback_at(at),
                entries[at + 2],
                entries[at + 3],
                entries[at + 4],
                entries[at + 5],
            )
            last = self._last
            if last is not None and (not moved or moved[-1] is not last):
                moved.append(last)
        for target in moved:
            # A new batch that is done already (failed at once) does not call back.
            self._batch_done(target)

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
            batches = list(self._batches.values())
        for reports in batches:
            self._batch_done(reports)
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
        # The outcome of a done future of the record's metadata, into its report.
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
        self._queue(message, 1)

    def _queue(self, item: DeliveredMessage | _BatchReports, count: int) -> None:
        with self._lock:
            self._ready.append(item)
            self._ready_count += count
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

    def _take(self) -> DeliveredMessage | _BatchReports | None:
        # The next queued item, off the queue (a batch's reports, all those not served
        # yet, to serve in a row); None when there is none.
        with self._lock:
            if not self._ready:
                return None
            item = self._ready.popleft()
            if isinstance(item, DeliveredMessage):
                self._ready_count -= 1
            else:
                self._ready_count -= (len(item.entries) - item.next) // _ENTRY
            return item

    def _put_back(self, reports: _BatchReports, at: int) -> None:
        # A callback of ``reports`` raised (or its awaiting was cancelled): those from
        # entry ``at`` on go back to the head of the queue, for the next call.
        left = (len(reports.entries) - at) // _ENTRY
        if left <= 0:
            return
        reports.next = at
        with self._lock:
            self._ready.appendleft(reports)
            self._ready_count += left

    def serve(self) -> int:
        """Run the callbacks of the queued reports, in order; return how many ran.

        A callback that raises stops the serving: its exception propagates, and the reports
        after it stay queued for the next call.
        """
        served = 0
        while True:
            item = self._take()
            if item is None:
                return served
            if isinstance(item, DeliveredMessage):
                served += 1
                callback, item._callback = item._callback, None
                assert callback is not None
                callback(item._error, item)
                continue
            at, end = item.next, len(item.entries)
            while at < end:
                report = item.callback_at(at)
                message = item.message(at)
                at += _ENTRY
                served += 1
                try:
                    report(message._error, message)
                except BaseException:
                    self._put_back(item, at)
                    raise

    async def serve_async(self) -> int:
        """:meth:`serve` for an event loop: a callback that returns an awaitable (a
        coroutine function's) is awaited before the next one runs."""
        served = 0
        while True:
            item = self._take()
            if item is None:
                return served
            if isinstance(item, DeliveredMessage):
                served += 1
                callback, item._callback = item._callback, None
                assert callback is not None
                result = callback(item._error, item)
                if result is not None and inspect.isawaitable(result):
                    await result
                continue
            at, end = item.next, len(item.entries)
            while at < end:
                report = item.callback_at(at)
                message = item.message(at)
                at += _ENTRY
                served += 1
                try:
                    result = report(message._error, message)
                except BaseException:
                    self._put_back(item, at)
                    raise
                if result is not None and inspect.isawaitable(result):
                    # The rest go back first: while this one is awaited, another poll() or
                    # flush() serves them, in order, as it would serve the next batch's.
                    self._put_back(item, at)
                    await result
                    break

    def wait_blocking(self, timeout: float | None) -> None:
        """Block until a report is queued, no record is outstanding, or ``timeout`` seconds
        (None: no limit) pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._ready and (self._outstanding or self._pending):
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
            if self._ready or not (self._outstanding or self._pending):
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


class ProduceLater:
    """What ``produce()`` still has to do for a record it could not append at once (it
    waits for metadata or memory, for its serializer, or is traced): the record as
    :meth:`~aioproducer.Producer.send` takes it, and what the appender returned.

    Attributes:
        report: the delivery callback, or None.
        topic, value, key, partition, timestamp_ms, headers: ``send()``'s arguments.
        result: the appender's :class:`~aioproducer._core.appender.PendingRecord`, or None
            for a traced record, or for one whose serializer was not ready.
        not_ready: the serializer's :class:`~aioproducer.serialization.SerializerNotReady`,
            or None.
    """

    __slots__ = (
        "headers",
        "key",
        "not_ready",
        "partition",
        "report",
        "result",
        "timestamp_ms",
        "topic",
        "value",
    )

    def __init__(
        self,
        report: DeliveryCallback | None,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        timestamp_ms: Any,
        headers: Any,
        result: Any,
        not_ready: Any,
    ) -> None:
        self.report = report
        self.topic = topic
        self.value = value
        self.key = key
        self.partition = partition
        self.timestamp_ms = timestamp_ms
        self.headers = headers
        self.result = result
        self.not_ready = not_ready


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
    if headers is not None:
        headers = _utf8_headers(headers)
    return key, value, partition, timestamp, headers


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
