"""A blocking producer for synchronous code: scripts, Django views, the Spark driver.

:class:`SyncProducer` runs an ordinary :class:`~aioproducer.Producer` on its own event loop
in a background thread (an anyio blocking portal, on uvloop when it is installed) and offers
the same operations as blocking calls::

    from aioproducer.sync import SyncProducer

    with SyncProducer(bootstrap_servers="localhost:9092", linger_ms=5) as producer:
        future = producer.send("events", b"hello")      # a concurrent.futures.Future
        metadata = future.result()                       # or producer.send_and_wait(...)
        producer.send_many("events", [b"a", b"b", b"c"])

``send`` does not hop into the loop thread for each record: records go into a queue that a
single task in the loop thread empties in order, and each returned future is resolved from
the record's own done-callback. Records sent from one thread keep their order.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import functools
import itertools
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from aioproducer._core.appender import (
    PreparedRecord,
    RecordPreparer,
    check_record_size,
    name_send_many_item,
    record_size,
)
from aioproducer._core.delivery import (
    DeliveredMessage,
    DeliveryCallback,
    DeliveryReports,
    check_delivery_callback,
    confluent_arguments,
)
from aioproducer._core.futures import error_copy
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    IllegalStateError,
    KafkaError,
    ProducerClosedError,
    PurgedError,
    SenderCrashedError,
)
from aioproducer.metric_catalog import Metric
from aioproducer.producer import Producer, run_on_send
from aioproducer.records import (
    ProducerRecord,
    RecordMetadata,
    RecordMetadataSequence,
    check_partition,
)
from aioproducer.serialization import SerializerNotReady, wait_for_serializer
from aioproducer.telemetry import attached as attached_telemetry

__all__ = ["SyncProducer"]

_log = logging.getLogger("aioproducer.sync")

# How many records may wait for the loop thread before ``send`` blocks: the producer's
# buffer_memory and max_block_ms do the real backpressure, this only stops the hand-off
# queue from growing without bound while the loop thread is waiting for buffer memory.
_MAX_QUEUED = 16_384

# How often a blocked caller looks whether the loop thread is still alive.
_LIVENESS_INTERVAL = 0.5

_portal_numbers = itertools.count(1)

_T = TypeVar("_T")
_Item = tuple[Any, ...]
_SEND, _SEND_MANY, _FLUSH, _CLOSE, _CALL = range(5)


def _enter(context: contextvars.Context | None) -> list[tuple[Any, Any]]:
    """Set the variables of a calling thread's ``context`` in the current one (the loop
    thread's task); :func:`_leave` restores them."""
    if context is None:
        return []
    return [(variable, variable.set(value)) for variable, value in context.items()]


def _leave(entered: list[tuple[Any, Any]]) -> None:
    for variable, token in reversed(entered):
        variable.reset(token)


def _uvloop_available() -> bool:
    if sys.platform == "win32":
        return False
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _records_in(items: list[_Item]) -> int:
    """How many records the queued ``items`` carry."""
    count = 0
    for item in items:
        kind = item[0]
        if item[-1].done():
            continue  # purged, or cancelled by its caller: skipped when its turn comes
        if kind == _SEND:
            count += 1
        elif kind == _SEND_MANY:
            count += len(item[2])
    return count


def _now_ms() -> int:
    """The time of a call, in ms since the epoch: what stamps its records."""
    return int(time.time() * 1000)


class SyncProducer:
    """A thread-safe, blocking Kafka producer for code that is not async.

    Takes the same options as :class:`~aioproducer.Producer`. Creating it starts an event
    loop thread and connects (blocking up to ``max_block_ms``); use it as a context manager
    or call :meth:`close` to deliver what is buffered and stop the thread.

    Every method may be called from any thread. Errors are the async producer's own classes
    (:mod:`aioproducer.errors`), raised in the calling thread. If the loop thread dies, the
    calls and the pending futures fail with :class:`~aioproducer.errors.SenderCrashedError`
    rather than hang.

    Args:
        config: options by snake_case or Java name, as for :class:`~aioproducer.Producer`.
        use_uvloop: run the loop on uvloop; the default uses it when it is installed.
        **options: producer options by snake_case name; they win over ``config``.

    Raises:
        ConfigurationError: an invalid option (nothing is started).
        KafkaConnectionError: no bootstrap server answered within ``max_block_ms``.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        use_uvloop: bool | None = None,
        **options: Any,
    ) -> None:
        # Built here, in the caller's thread, so configuration errors need no loop thread;
        # Producer.__init__ touches no event loop.
        self._config = ProducerConfig.from_options(config, **options)
        # As the Java client, interceptors' on_send and then the serializers run in the
        # calling thread, so everything a record can be refused for before a broker sees it
        # is raised there; the producer on the loop thread then takes bytes (and calls the
        # interceptors' on_acknowledgement only).
        cfg = self._config
        self._interceptors = cfg.interceptors
        interceptors = tuple(cfg.interceptors)
        self._preparer = RecordPreparer(
            key_serializer=cfg.key_serializer,
            value_serializer=cfg.value_serializer,
            intercept=(lambda record: run_on_send(interceptors, record)) if interceptors else None,
        )
        options = {**options, "key_serializer": None, "value_serializer": None}
        if self._interceptors:
            options["interceptors"] = [_AcknowledgementsOnly(i) for i in self._interceptors]
        self._producer = Producer(config, **options)
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._queue: list[_Item] = []
        self._pump_awake = False
        # The items the pump took from the queue, and the index of the one it hands over
        # (see __len__): read and written on the loop thread only.
        self._in_hand: list[_Item] = []
        self._in_hand_index = 0
        self._closing = False
        self._closed = threading.Event()
        self._dead: SenderCrashedError | None = None
        self._outstanding: set[concurrent.futures.Future[Any]] = set()
        self._reports = DeliveryReports()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._wakeup: asyncio.Event | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        if use_uvloop is None:
            use_uvloop = _uvloop_available()
        self._portal_cm = start_blocking_portal(
            "asyncio",
            {"use_uvloop": use_uvloop},
            name=f"aioproducer-sync-{next(_portal_numbers)}",
        )
        self._portal: BlockingPortal = self._portal_cm.__enter__()
        try:
            self._portal.call(self._start_in_loop)
        except BaseException:
            self._closing = True
            self._closed.set()
            self._portal_cm.__exit__(None, None, None)
            raise
        # Deliver what is buffered if the program ends without close(); a daemon loop
        # thread would otherwise be dropped with its records.
        self._atexit = functools.partial(_close_at_exit, self)
        atexit.register(self._atexit)

    # ---- properties ---------------------------------------------------------------------

    @property
    def config(self) -> ProducerConfig:
        """The validated configuration."""
        return self._config

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has finished."""
        return self._closed.is_set()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "closing" if self._closing else "running"
        return (
            f"<SyncProducer client_id={self.config.client_id!r} "
            f"bootstrap_servers={self.config.bootstrap_servers!r} state={state}>"
        )

    # ---- the loop thread ------------------------------------------------------------------

    async def _start_in_loop(self) -> None:
        await self._producer.start()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.current_thread()
        self._wakeup = asyncio.Event()
        self._pump_task = self._loop.create_task(self._pump())

    def _wake(self) -> None:
        assert self._wakeup is not None
        self._wakeup.set()

    async def _pump(self) -> None:
        """Hand queued work to the producer, in order, one queue-full at a time."""
        assert self._wakeup is not None
        wakeup = self._wakeup
        try:
            while True:
                await wakeup.wait()
                wakeup.clear()
                while True:
                    with self._lock:
                        items = self._queue
                        if not items:
                            self._pump_awake = False
                            break
                        self._queue = []
                        self._not_full.notify_all()
                    self._in_hand = items
                    for index, item in enumerate(items):
                        self._in_hand_index = index
                        target: concurrent.futures.Future[Any] = item[-1]
                        if target.done() and not target.cancelled():
                            # Purged before it was handed over: the transaction it was
                            # meant for cannot commit without it, as in the producer.
                            self._producer._dropped_before_append(target.exception())
                            continue
                        # Once RUNNING a future can no longer be cancelled: a record the
                        # producer has taken cannot be taken back.
                        if not target.set_running_or_notify_cancel():
                            continue
                        try:
                            if await self._hand_over(item, target):
                                return
                        except BaseException as exc:
                            if not target.done():
                                target.set_exception(exc)
                                if isinstance(target, _RecordFuture):
                                    target.refused = True
                            if not isinstance(exc, Exception):
                                raise
                    # Hold no future while waiting: one dropped by its caller is freed
                    # (and a refusal nobody looked at logged) now, not after the next send.
                    self._in_hand = []
                    del items, item, target
        finally:
            self._die("the SyncProducer's event loop thread stopped")

    async def _hand_over(self, item: _Item, target: concurrent.futures.Future[Any]) -> bool:
        """Give one queued item to the producer; True once the producer is closed."""
        producer = self._producer
        kind = item[0]
        if kind == _SEND:
            _, topic, value, key, partition, timestamp_ms, headers, context, _ = item
            entered = _enter(context)
            try:
                record = await producer.send(
                    topic, value, key, partition=partition, timestamp_ms=timestamp_ms,
                    headers=headers,
                )
            finally:
                _leave(entered)
            self._outstanding.add(target)
            record.add_done_callback(functools.partial(self._settle, target))
        elif kind == _SEND_MANY:
            _, topic, records, partition, now_ms, context, _ = item
            entered = _enter(context)
            try:
                results = await producer._send_many(topic, records, partition, now_ms)
            finally:
                _leave(entered)
            self._await_in_loop(_await(results), target)
        elif kind == _FLUSH:
            # Its own task: sends from other threads go on while this one waits.
            self._await_in_loop(producer.flush(item[1]), target)
        elif kind == _CALL:
            # Transaction control runs in line: what was sent before it belongs to the
            # transaction it ends, what is sent after it to the next one.
            _, function, args, _ = item
            target.set_result(await function(*args))
        else:  # _CLOSE: everything queued before it has been handed over
            await producer.close(item[1])
            target.set_result(None)
            return True
        return False

    def _context(self) -> contextvars.Context | None:
        # With tracing (aioproducer.telemetry), the calling thread's context goes along with
        # its records: the span current here is the parent of theirs.
        if attached_telemetry(self._producer) is None:
            return None
        return contextvars.copy_context()

    def _settle(self, target: concurrent.futures.Future[RecordMetadata], record: Any) -> None:
        self._outstanding.discard(target)
        error = record.exception()
        if error is None:
            target.set_result(record.result())
        else:
            target.set_exception(error)

    def _await_in_loop(
        self, awaitable: Coroutine[Any, Any, Any], target: concurrent.futures.Future[Any]
    ) -> None:
        async def run() -> None:
            try:
                result = await awaitable
            except BaseException as exc:
                if not target.done():
                    target.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                if not target.done():
                    target.set_result(result)
            finally:
                self._outstanding.discard(target)

        self._outstanding.add(target)
        assert self._loop is not None
        task = self._loop.create_task(run())
        # The loop keeps only weak references to tasks: hold each until it is done.
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _die(self, reason: str) -> None:
        # Runs in the loop thread when the pump ends, normally (after close) or not.
        with self._lock:
            queued, self._queue = self._queue, []
            if self._dead is None:
                self._dead = SenderCrashedError(
                    f"{reason}; the record was not delivered"
                    if not self._closing
                    else "the SyncProducer was closed before the record was delivered"
                )
            error = self._dead
            self._not_full.notify_all()
        pending = list(self._outstanding)
        self._outstanding.clear()
        for target in [item[-1] for item in queued] + pending:
            if not target.done():
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    target.set_exception(error_copy(error, fresh=True))

    # ---- hand-off from caller threads ------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise ProducerClosedError("cannot send: the SyncProducer is closed")
        if self._dead is not None:
            raise error_copy(self._dead, fresh=True)

    def _enqueue(self, item: _Item, *, closing: bool = False) -> None:
        wake = False
        with self._lock:
            if not closing:
                self._check_open()
                while len(self._queue) >= _MAX_QUEUED:
                    self._check_not_loop_thread("send")
                    self._not_full.wait(_LIVENESS_INTERVAL)
                    self._check_open()
                    self._check_alive()
            elif self._dead is not None:
                raise error_copy(self._dead, fresh=True)
            self._queue.append(item)
            if not self._pump_awake:
                self._pump_awake = wake = True
        if wake:
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._wake)
            except RuntimeError as exc:  # the loop is closed
                error = SenderCrashedError("the SyncProducer's event loop thread stopped")
                error.__cause__ = exc
                with self._lock:
                    if self._dead is None:
                        self._dead = error
                raise error_copy(error, fresh=True) from exc

    def _check_not_loop_thread(self, what: str) -> None:
        if threading.current_thread() is self._loop_thread:
            raise IllegalStateError(
                f"SyncProducer.{what}() would block its own event loop thread; call it from "
                "another thread"
            )

    def _check_alive(self) -> None:
        thread = self._loop_thread
        if thread is not None and not thread.is_alive():
            with self._lock:
                if self._dead is None:
                    self._dead = SenderCrashedError(
                        "the SyncProducer's event loop thread stopped"
                    )
                error = self._dead
            raise error_copy(error, fresh=True)

    def _wait(self, future: concurrent.futures.Future[Any], timeout: float | None = None) -> Any:
        """``future.result()``, but failing instead of hanging if the loop thread dies."""
        self._check_not_loop_thread("wait")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _LIVENESS_INTERVAL
            if deadline is not None:
                step = min(step, max(0.0, deadline - time.monotonic()))
            try:
                return future.result(step)
            except concurrent.futures.TimeoutError:
                if future.done():  # pragma: no cover - finished between the two checks
                    continue
                self._check_alive()
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def _call(self, func: Callable[..., Any], *args: Any) -> Any:
        self._check_open()
        self._check_not_loop_thread("call")
        try:
            return self._portal.call(func, *args)
        except RuntimeError as exc:
            if "portal is not running" not in str(exc):
                raise
            self._check_open()
            error = SenderCrashedError("the SyncProducer's event loop thread stopped")
            raise error from exc

    # ---- the public operations ---------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record; return a future of its :class:`~aioproducer.RecordMetadata`.

        Returns at once (unless thousands of records are already waiting for the loop thread,
        when it blocks until they are taken). As the Java client does, the interceptors'
        ``on_send``, the checks of the record and the serializers run here, in the calling
        thread: everything the async producer's ``send`` can refuse a record for before it
        waits is raised at once, and nothing is queued. What only the loop thread can find
        (a partition the topic does not have, no metadata or buffer memory within
        ``max_block_ms``) is set on the future, as are delivery errors. Cancelling the
        future before the record is handed to the producer keeps it from being sent.

        Raises:
            InvalidTopicError: an illegal topic name.
            InvalidArgumentTypeError: ``timestamp_ms`` or ``partition`` not an int (or None).
            InvalidArgumentError: ``timestamp_ms`` outside 0 to 2**63-1, or a negative
                ``partition``.
            SerializationError: headers that are not ``(str, bytes-like or None)`` pairs,
                a key or value that is not bytes-like and has no serializer, or a
                serializer that failed or returned something not bytes-like.
            RecordTooLargeError: the serialized record exceeds ``max_request_size`` or
                ``buffer_memory``.
            ProducerClosedError: the SyncProducer is closed.
            SenderCrashedError: the event loop thread died.
        """
        self._check_open()
        topic, partition, timestamp_ms, key, value, headers = self._prepared(
            topic, value, key, partition, timestamp_ms, headers
        )
        future: concurrent.futures.Future[RecordMetadata] = _RecordFuture()
        self._enqueue(
            (_SEND, topic, value, key, partition, timestamp_ms, headers, self._context(), future)
        )
        return future

    def _prepared(
        self, topic: Any, value: Any, key: Any, partition: Any, timestamp_ms: Any, headers: Any
    ) -> PreparedRecord:
        """A record intercepted, checked and serialized as the async producer's ``send``
        does before it waits for anything: what it refuses is raised in the calling thread."""
        try:
            prepared: PreparedRecord = self._preparer.prepare(
                topic, value, key, partition, timestamp_ms, headers
            )
        except SerializerNotReady as not_ready:
            prepared = self._when_serializable(not_ready)
        self._check_size(prepared)
        return prepared

    def _when_serializable(self, not_ready: SerializerNotReady) -> PreparedRecord:
        """Wait in this thread, within max_block_ms, for what a serializer must fetch (on
        the loop thread, where the registry client runs), then serialize again."""
        deadline = time.monotonic() + self._config.max_block_ms / 1000.0
        while True:
            self._call(wait_for_serializer, not_ready, deadline - time.monotonic())
            try:
                prepared: PreparedRecord = self._preparer.resume(not_ready)
                return prepared
            except SerializerNotReady as again:
                not_ready = again

    def _check_size(self, prepared: PreparedRecord) -> None:
        cfg = self._config
        size = record_size(prepared[3], prepared[4], prepared[5])
        check_record_size(size, cfg.max_request_size, cfg.buffer_memory)

    def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        timeout: float | None = None,
    ) -> RecordMetadata:
        """Send a record and block until the broker acknowledges it.

        Args:
            timeout: seconds to wait; ``concurrent.futures.TimeoutError`` after that (the
                record is still sent).

        Raises:
            KafkaError: any error of the async producer's ``send_and_wait``.
        """
        future = self.send(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        result: RecordMetadata = self._wait(future, timeout)
        return result

    def send_many_nowait(
        self, topic: str, items: Iterable[Any], *, partition: int | None = None
    ) -> concurrent.futures.Future[RecordMetadataSequence]:
        """Queue many records at once; return a future of their metadata, in order.

        ``items`` are what :meth:`Producer.send_many <aioproducer.Producer.send_many>` takes:
        values, ``(key, value)`` tuples or :class:`~aioproducer.ProducerRecord` objects. The
        future fails with the first error if any record fails.

        Raises:
            InvalidTopicError: an illegal topic name.
            InvalidArgumentTypeError: ``partition`` not an int (or None).
            InvalidArgumentError: a negative ``partition``.
            KafkaError: what :meth:`send` raises in the calling thread, for the first item
                that has it (every item is intercepted, checked and serialized here before
                any is queued): the message names the item (``send_many item 3: ...``), and
                no item was queued (``accepted`` is None).
            ProducerClosedError: the SyncProducer is closed.
        """
        self._check_open()
        topic = self._preparer.validate_topic(topic)
        partition = check_partition(partition)
        future: concurrent.futures.Future[RecordMetadataSequence] = _RecordFuture()
        records = items if isinstance(items, list | tuple) else list(items)
        now_ms = _now_ms()
        records = [
            self._prepared_item(topic, partition, now_ms, index, item)
            for index, item in enumerate(records)
        ]
        self._enqueue((_SEND_MANY, topic, records, partition, now_ms, self._context(), future))
        return future

    def _prepared_item(
        self, topic: str, partition: int | None, now_ms: int, index: int, item: Any
    ) -> Any:
        """A ``send_many`` item intercepted, checked and serialized here (see ``__init__``):
        as bytes or a ``(key, value)`` pair where that says it all, so that the producer's
        bulk paths take it, else as a :class:`~aioproducer.ProducerRecord`. The loop thread
        stamps bytes and pairs with the same ``now_ms``."""
        try:
            try:
                prepared: PreparedRecord = self._preparer.prepare_item(
                    topic, partition, item, now_ms
                )
            except SerializerNotReady as not_ready:
                prepared = self._when_serializable(not_ready)
            self._check_size(prepared)
        except KafkaError as exc:
            name_send_many_item(exc, index)
            raise
        name, chosen, timestamp, key, value, headers = prepared
        if name == topic and chosen == partition and timestamp == now_ms and headers is None:
            return value if key is None else (key, value)
        return ProducerRecord(name, value, key, chosen, timestamp, headers)

    def send_many(
        self,
        topic: str,
        items: Iterable[Any],
        *,
        partition: int | None = None,
        timeout: float | None = None,
    ) -> RecordMetadataSequence:
        """Send many records and block until every one is acknowledged; return their
        metadata, in order (a :class:`~aioproducer.RecordMetadataSequence`).

        Raises:
            KafkaError: the first error of any record.
        """
        result: RecordMetadataSequence = self._wait(
            self.send_many_nowait(topic, items, partition=partition), timeout
        )
        return result

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record sent before this call is acknowledged or failed.

        Then runs the delivery callbacks of :meth:`produce` records that are done, in the
        calling thread, as confluent-kafka's ``flush()`` does (also when it times out).

        Raises:
            FlushTimeoutError: ``timeout`` seconds passed first (the records stay buffered).
        """
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._enqueue((_FLUSH, timeout, future))
        try:
            self._wait(future)
        finally:
            self._serve_reports()

    # ---- confluent-kafka style: produce, poll, init_transactions ------------------------

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Mapping[str, bytes | str | None] | Sequence[tuple[str, Any]] | None = None,
        *,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Queue a record as confluent-kafka's ``Producer.produce()`` does; its delivery
        callback runs later, in the thread that calls :meth:`poll`, :meth:`flush` or
        :meth:`close`.

        The arguments are confluent-kafka's, as for :meth:`Producer.produce
        <aioproducer.Producer.produce>`: ``partition=-1`` lets the partitioner choose,
        ``timestamp=0`` means now, ``headers`` is a dict or a list of pairs, ``callback`` is
        another name for ``on_delivery``, and a str key, value or header value is encoded as
        UTF-8 (a key or value only when no serializer is set for it).

        Returns at once, as :meth:`send` does (it blocks only while thousands of records
        wait for the loop thread); where confluent-kafka raises ``BufferError`` on a full
        queue, the loop thread waits up to ``max_block_ms`` for buffer memory and then fails
        the record (``BufferExhaustedError`` reaches its callback). Returns nothing: the
        callback is how the outcome is told (:meth:`send` returns a future instead).

        Raises:
            KafkaError: what :meth:`send` raises (then no callback is called).
            InvalidArgumentTypeError: ``on_delivery`` is not callable, or both
                ``on_delivery`` and ``callback`` are given.
        """
        report = check_delivery_callback(on_delivery, callback)
        key, value, chosen, timestamp_ms, checked = confluent_arguments(
            key,
            value,
            partition,
            timestamp,
            headers,
            self._config.key_serializer,
            self._config.value_serializer,
        )
        future = self.send(topic, value, key, chosen, timestamp_ms, checked)
        if report is not None:
            message = DeliveredMessage(topic, value, key, chosen, checked)
            self._reports.track(message, report, future)

    def poll(self, timeout: float | None = -1) -> int:
        """Run the delivery callbacks of :meth:`produce` records that are done, in the
        calling thread; return how many ran.

        As confluent-kafka's ``poll()``: with nothing to report it blocks up to ``timeout``
        seconds for a report (0 does not block; None or a negative number, the default,
        blocks as long as it takes), and returns 0 at once when no ``produce()`` record is
        awaiting its report. If a callback raises, its exception propagates and the reports
        after it wait for the next call.
        """
        self._check_not_loop_thread("poll")
        if timeout is None or timeout < 0:
            self._reports.wait_blocking(None)
        elif timeout > 0:
            self._reports.wait_blocking(timeout)
        return self._reports.serve()

    def _serve_reports(self) -> int:
        # After flush() or close(): the records are done, their reports queued or about to be.
        self._reports.collect()
        return self._reports.serve()

    def init_transactions(self, timeout: float | None = None) -> None:
        """Java's and confluent-kafka's ``init_transactions()``: creating a transactional
        SyncProducer already did it (found the coordinator, got the producer id and epoch,
        fenced older producers with the same ``transactional_id``, within
        ``max_block_ms``), so this checks that the producer is transactional and open and
        returns. ``timeout`` is taken for confluent-kafka's signature; nothing is left to
        wait for.

        Raises:
            IllegalStateError: no ``transactional_id`` is set.
            ProducerClosedError: the SyncProducer is closed.
        """
        if self._config.transactional_id is None:
            raise IllegalStateError(
                "init_transactions() needs a transactional producer: set transactional_id"
            )
        self._check_open()

    def _in_order(self, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._enqueue((_CALL, function, args, future))
        return self._wait(future)

    def begin_transaction(self) -> None:
        """Start a transaction (needs ``transactional_id``), as ``Producer.begin_transaction``."""
        self._in_order(self._producer.begin_transaction)

    def commit_transaction(self) -> None:
        """Deliver every record sent in the transaction, then commit it."""
        self._in_order(self._producer.commit_transaction)

    def abort_transaction(self) -> None:
        """Abort the transaction: its records are not visible to read_committed consumers."""
        self._in_order(self._producer.abort_transaction)

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> None:
        """Commit consumer offsets as part of the transaction (KIP-447 group metadata)."""
        self._in_order(self._producer.send_offsets_to_transaction, offsets, group_metadata)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SyncProducer]:
        """``with producer.transaction():`` commits at the end, or aborts and re-raises."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            self.abort_transaction()
            raise
        self.commit_transaction()

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic``, waiting up to ``max_block_ms`` for its metadata."""
        result: list[int] = self._call(self._producer.partitions_for, topic)
        return result

    def __len__(self) -> int:
        """The records not yet delivered, as confluent-kafka's ``len(producer)``: those
        queued for the loop thread, buffered or in flight, plus the delivery reports of
        :meth:`produce` records that :meth:`poll` has not served yet. So
        ``while len(producer): producer.poll(0.1)`` waits until every record is done and its
        callback has run. A producer is true whatever its length."""
        if self._closed.is_set() or self._dead is not None:
            return self._reports.ready
        self._check_not_loop_thread("len")
        try:
            undelivered: int = self._portal.call(self._undelivered_in_loop)
        except RuntimeError:  # the loop thread stopped meanwhile
            return self._reports.ready
        return undelivered + self._reports.ready

    def __bool__(self) -> bool:
        return True

    def _undelivered_in_loop(self) -> int:
        with self._lock:
            queued = _records_in(self._queue)
        return queued + _records_in(self._in_hand[self._in_hand_index :]) + len(self._producer)

    def purge(self, *, in_flight: bool = False) -> int:
        """Fail the records not yet sent with :class:`~aioproducer.errors.PurgedError`,
        without closing the producer; return how many failed: those queued for the loop
        thread and those the producer buffers, and with ``in_flight=True`` those whose
        request is out as well (they may be written all the same). See
        :meth:`Producer.purge <aioproducer.Producer.purge>`. The one record the loop thread
        is handing to the producer at that moment may still be delivered.

        Raises:
            ProducerClosedError: the SyncProducer is closed.
        """
        result: int = self._call(self._purge_in_loop, in_flight)
        return result

    def _purge_in_loop(self, in_flight: bool) -> int:
        # The items stay where they are, failed: the pump skips them in order, and a purged
        # record meant for a transaction makes it abortable when the pump reaches it (not
        # before: what is queued behind a commit belongs to the next transaction).
        in_hand = self._in_hand[self._in_hand_index + 1 :]
        with self._lock:
            queued = list(self._queue)
        failed = 0
        for item in (*in_hand, *queued):
            if item[0] not in (_SEND, _SEND_MANY):
                continue
            target: concurrent.futures.Future[Any] = item[-1]
            if target.done() or not target.set_running_or_notify_cancel():
                continue  # purged before, or cancelled by its caller
            count = _records_in([item])
            target.set_exception(
                PurgedError(
                    f"purged {count} record(s) for {item[1]} before they reached the producer"
                )
            )
            failed += count
        return failed + self._producer.purge(in_flight=in_flight)

    def metrics(self) -> dict[str, float]:
        """Producer-wide metrics by their Java names (see the metrics page)."""
        result: dict[str, float] = self._call(self._producer.metrics)
        return result

    def metrics_detailed(self) -> list[Metric]:
        """Every metric with its group, tags, unit and meaning: see
        :meth:`Producer.metrics_detailed <aioproducer.Producer.metrics_detailed>`."""
        result: list[Metric] = self._call(self._producer.metrics_detailed)
        return result

    def close(self, timeout: float | None = None) -> None:
        """Deliver everything sent so far, close the producer and stop the loop thread.

        With a ``timeout`` (seconds), records still undelivered when it runs out fail with
        :class:`~aioproducer.errors.ProducerClosedError`. Calling close again is harmless.
        """
        self._check_not_loop_thread("close")
        with self._lock:
            first = not self._closing
            self._closing = True
            self._not_full.notify_all()
        if not first:
            self._closed.wait()
            return
        atexit.unregister(self._atexit)
        try:
            future: concurrent.futures.Future[None] = concurrent.futures.Future()
            try:
                self._enqueue((_CLOSE, timeout, future), closing=True)
            except SenderCrashedError:
                return
            with contextlib.suppress(SenderCrashedError):
                self._wait(future)
        finally:
            self._portal_cm.__exit__(None, None, None)
            self._closed.set()
            # As confluent-kafka's close() (which flushes), the delivery callbacks of
            # produce() records run now, in the calling thread: failed records' too.
            self._serve_reports()

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class _RecordFuture(concurrent.futures.Future[_T]):
    """The future ``send`` and ``send_many_nowait`` return. When the loop thread's producer
    refused the record (a partition the topic does not have, no metadata within
    ``max_block_ms``), the error is only on this future: if it is dropped without anyone
    asking for its result, the refusal is logged, as asyncio logs a task's exception that
    was never retrieved, so no record is lost without a word. Delivery failures are logged
    by the producer already."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = False
        self._looked_at = False

    def result(self, timeout: float | None = None) -> _T:
        self._looked_at = True
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._looked_at = True
        return super().exception(timeout)

    def __del__(self) -> None:
        if not self.refused or self._looked_at:
            return
        error = super().exception(0)
        _log.warning(
            "a record given to SyncProducer was refused and its future was dropped "
            "unchecked: %s: %s",
            type(error).__name__,
            error,
        )


class _AcknowledgementsOnly:
    """An interceptor as the loop thread's producer sees it: its ``on_send`` already ran in
    the calling thread, so only ``on_acknowledgement`` is passed on."""

    def __init__(self, interceptor: Any) -> None:
        self._interceptor = interceptor

    def __repr__(self) -> str:
        return repr(self._interceptor)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, exc: BaseException | None) -> None:
        self._interceptor.on_acknowledgement(metadata, exc)


async def _await(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


def _close_at_exit(producer: SyncProducer) -> None:
    with contextlib.suppress(Exception):
        producer.close()

