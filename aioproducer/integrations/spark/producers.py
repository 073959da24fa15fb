"""One producer per Python worker process and set of options, shared by the tasks that
run there one after another, and what one task has in flight on it."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aioproducer import BatchResults, Producer, ProducerState
from aioproducer.errors import (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerEpochError,
    ProducerClosedError,
    ProducerFencedError,
    SenderCrashedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from aioproducer.integrations.spark.options import SinkOptions, _Layout, _masked
from aioproducer.integrations.spark.rows import (
    _items,
    _prepend,
    _row_error,
    _RowRefused,
    _send_chunk,
)

__all__ = []

log = logging.getLogger("aioproducer.integrations.spark")

_T = TypeVar("_T")


# ---- one task's records on a producer -------------------------------------------------------


class _TaskRecords:
    """The records one task hands a producer, which other tasks may share: each chunk goes
    to ``send_many``, and the task waits for its own records' acknowledgements, not for
    other tasks'. Runs on the producer's event loop."""

    def __init__(self, producer: Producer, layout: _Layout) -> None:
        self.producer = producer
        self.layout = layout
        self.sent = 0
        self._pending: deque[BatchResults] = deque()

    async def send(self, topic: str, items: list[Any]) -> None:
        """Buffer one chunk's records (waiting for buffer memory: the backpressure on
        Spark's input); raise the first delivery error of an earlier chunk once it is known.

        Raises:
            _RowRefused: the producer refused an item for a fault of its own row.
            KafkaError: anything else the producer raised (the producer's error).
        """
        results = await _send_chunk(self.producer, self.layout, topic, items)
        self._pending.append(results)
        self.sent += len(items)
        # Fail early, and let go of the results of acknowledged chunks.
        pending = self._pending
        while pending and pending[0].done():
            await pending.popleft()

    async def wait(self) -> int:
        """Wait until every record of this task is acknowledged; return how many there are.

        The producer sends what it holds now (a flush) rather than after ``linger.ms``, but
        the task waits for its own records only: once they are acknowledged, the flush
        stops waiting for records other tasks may be sending through the same producer.

        Raises:
            KafkaError: the first delivery error of the task's records, in the order sent.
        """
        flushing = asyncio.ensure_future(self.producer.flush())
        try:
            pending = self._pending
            while pending:
                await pending.popleft()
        finally:
            if not flushing.done():
                flushing.cancel()
            # A flush that failed (a closed producer) says nothing the records do not.
            await asyncio.gather(flushing, return_exceptions=True)
        return self.sent


# ---- one producer per Python worker process and set of options ------------------------------

# Errors after which a producer cannot send again: it is replaced, not reused.
_FATAL = (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerEpochError,
    ProducerClosedError,
    ProducerFencedError,
    SenderCrashedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)


def _frozen(value: Any) -> Any:
    """``value`` as a hashable key part, or raise TypeError when it is not plain data."""
    if value is None or type(value) in (str, bytes, int, float, bool):
        return value
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    raise TypeError(type(value).__name__)


class _CacheKey(tuple):  # type: ignore[type-arg]
    """The producer options a cached producer was built with, passwords included: a cached
    producer is reused only with the very same credentials. Shown masked."""

    __slots__ = ()

    def __repr__(self) -> str:
        config, options, encoding = self
        shown = f"_CacheKey(config={_masked(dict(config))!r}, options={_masked(dict(options))!r}"
        return shown + (f", encoding={encoding!r})" if encoding is not None else ")")

    __str__ = __repr__


def _cache_key(sink: SinkOptions) -> _CacheKey | None:
    """The key of the producer ``sink``'s tasks share, or None when they must not share one:
    a transactional id (a transaction belongs to one task, and a producer holds one
    transaction at a time), or options that are Python objects rather than plain data (a
    callable, an ``ssl.SSLContext``), which each task unpickles anew and which cannot be
    compared."""
    try:
        key = _CacheKey((_frozen(sink.config), _frozen(sink.options), sink.encoding))
    except TypeError:
        return None
    for given in (sink.config, sink.options):
        if any(given.get(name) is not None for name in ("transactional.id", "transactional_id")):
            return None
    return key


@dataclass(eq=False)
class _Entry:
    """A cached producer, the tasks using it, and since when it has been idle."""

    producer: Producer
    started: concurrent.futures.Future[None]
    timeout: float
    users: int = 0
    idle_since: float = 0.0
    evicted: bool = False


@dataclass(frozen=True)
class _CacheStatistics:
    """What the producer cache of this process holds: for diagnostics and tests."""

    built: int  # producers built since the process started
    cached: int  # producers in the cache now
    in_use: int  # tasks sending through a cached producer now


class _ProducerCache:
    """The producers of one Python worker process, one per set of options, as Spark's
    ``CachedKafkaProducer`` keeps one per executor JVM.

    They run on one event loop (uvloop when installed) in a daemon thread of their own;
    tasks hand it their records from their own threads. A producer idle for its timeout
    (``spark.kafka.producer.cache.timeout``, 10 minutes by default) is closed; one that
    failed for good (fenced, refused credentials, closed) is replaced; at exit every one is
    flushed and closed.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[_CacheKey, _Entry] = {}
        self._built = 0
        self._loop = _new_loop()
        thread = threading.Thread(
            target=self._run_loop, name="aioproducer-spark-producers", daemon=True
        )
        thread.start()
        self._exit_hook = False

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the producers' loop; return its result in this thread."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # this thread was interrupted: so is the coroutine
            raise

    def statistics(self) -> _CacheStatistics:
        """Producers built, cached and in use in this process."""
        with self._lock:
            return _CacheStatistics(
                self._built, len(self._entries), sum(e.users for e in self._entries.values())
            )

    # ---- lending producers to tasks ---------------------------------------------------------

    def acquire(self, key: _CacheKey, sink: SinkOptions) -> _Entry:
        """The producer for ``key``, started (built on first use); the caller must
        :meth:`release` it.

        Raises:
            KafkaError: the producer could not start (it is not cached).
        """
        self.expire_idle()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.producer.state not in (
                ProducerState.CREATED,
                ProducerState.RUNNING,
            ):
                self._evict(key, entry)
                entry = None
            if entry is None:
                producer = sink.producer()
                started = asyncio.run_coroutine_threadsafe(producer.start(), self._loop)
                entry = _Entry(producer, started, sink.cache_timeout)
                self._entries[key] = entry
                self._built += 1
                if not self._exit_hook:
                    atexit.register(self.close)
                    self._exit_hook = True
            entry.timeout = sink.cache_timeout
            entry.users += 1
        try:
            entry.started.result()
        except BaseException:
            self.release(key, entry, failed=True)
            raise
        return entry

    def release(self, key: _CacheKey, entry: _Entry, error: BaseException | None = None,
                failed: bool = False) -> None:  # fmt: skip
        """A task is done with ``entry``'s producer. After ``error``, a fatal error or a
        producer that no longer runs, the producer is evicted: the next task builds a new
        one. What the failed task left in the producer's buffer is still sent."""
        with self._lock:
            entry.users -= 1
            if (
                failed
                or isinstance(error, _FATAL)
                or (entry.producer.state is not ProducerState.RUNNING)
            ):
                self._evict(key, entry)
            if entry.users == 0:
                entry.idle_since = self._clock()
                if entry.evicted:
                    self._close(entry)
                else:
                    self._loop.call_soon_threadsafe(
                        self._loop.call_later, entry.timeout, self.expire_idle
                    )

    def _evict(self, key: _CacheKey, entry: _Entry) -> None:
        if self._entries.get(key) is entry:
            del self._entries[key]
        if not entry.evicted:
            entry.evicted = True
            log.info("aioproducer: a Spark producer was replaced (%r)", entry.producer)
            if entry.users == 0:
                self._close(entry)

    def _close(self, entry: _Entry, timeout: float | None = 0) -> concurrent.futures.Future[None]:
        async def close() -> None:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(entry.started)
            try:
                await entry.producer.close(timeout)
            except Exception as exc:  # it failed already; the tasks saw why
                log.debug("closing a Spark producer: %r", exc)

        return asyncio.run_coroutine_threadsafe(close(), self._loop)

    def expire_idle(self) -> list[concurrent.futures.Future[None]]:
        """Close the producers no task has used for their timeout; they deliver what
        they hold first. Returns the closings under way."""
        now = self._clock()
        closing = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry.users == 0 and now - entry.idle_since >= entry.timeout:
                    del self._entries[key]
                    entry.evicted = True
                    closing.append(self._close(entry, timeout=None))
        return closing

    def close_all(self) -> None:
        """Flush and close every cached producer (at exit)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            for entry in entries:
                entry.evicted = True
            closing = [self._close(entry, timeout=None) for entry in entries]
        for future in closing:
            with contextlib.suppress(Exception):
                future.result()

    def close(self) -> None:
        """Flush and close every cached producer, then stop the loop (at exit)."""
        self.close_all()
        atexit.unregister(self.close)
        self._loop.call_soon_threadsafe(self._loop.stop)

    # ---- one task's write -------------------------------------------------------------------

    def write(
        self,
        key: _CacheKey,
        sink: SinkOptions,
        layout: _Layout,
        chunks: Iterator[Mapping[str, list[Any]]],
    ) -> int:
        """Send every chunk through the cached producer for ``key`` and wait for the
        records' acknowledgements; return their count.

        Raises:
            KafkaError: the first delivery error of this task's records, or the error of
                the first row that cannot be a record.
        """
        position = 0  # rows of the task's input before the chunk at hand
        try:
            first = next(chunks, None)
            if first is None:
                return 0  # an empty partition needs no producer
            entry: _Entry | None = self.acquire(key, sink)
            error: BaseException | None = None
            try:
                assert entry is not None
                task = _TaskRecords(entry.producer, layout)
                for columns in _prepend(first, chunks):
                    topic, items = _items(layout, sink.topic, columns)
                    if not items:
                        continue
                    try:
                        self.run(task.send(topic, items))
                    except _FATAL as exc:
                        if task.sent or (exc.accepted is not None and len(exc.accepted)):
                            raise
                        # The cached producer had failed before this task took it (its
                        # InitProducerId was refused, say): a new one sends instead.
                        log.info("aioproducer: a cached producer failed (%r); using a new one",
                                 exc)  # fmt: skip
                        self.release(key, entry, exc)
                        entry = None
                        entry = self.acquire(key, sink)
                        task = _TaskRecords(entry.producer, layout)
                        self.run(task.send(topic, items))
                    position += len(items)
                return self.run(task.wait())
            except BaseException as exc:
                error = exc
                raise
            finally:
                if entry is not None:
                    self.release(key, entry, error)
        except _RowRefused as refused:
            raise _row_error(position + refused.index, refused.column, refused.error) from (
                refused.error
            )


_cache: _ProducerCache | None = None
_cache_pid = -1
_cache_lock = threading.Lock()


def _producers() -> _ProducerCache:
    """This process's producer cache (a new one in a forked child: threads do not survive
    a fork)."""
    global _cache, _cache_pid
    with _cache_lock:
        if _cache is None or _cache_pid != os.getpid():
            _cache = _ProducerCache()
            _cache_pid = os.getpid()
        return _cache


# ---- event loops -----------------------------------------------------------------------------


def _new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when installed."""
    if sys.platform != "win32":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from synchronous code, on a fresh event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if sys.version_info < (3, 11):
            return asyncio.run(coroutine)
        with asyncio.Runner(loop_factory=_new_loop) as runner:
            return runner.run(coroutine)
    # This thread runs an event loop already (a notebook driver, say), where a coroutine
    # cannot be run to completion: give it a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(1, "aioproducer-spark") as pool:
        future: concurrent.futures.Future[_T] = pool.submit(_run, coroutine)
        return future.result()
