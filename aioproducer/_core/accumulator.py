"""The RecordAccumulator: per-partition deques of record batches over the BufferPool.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

Plain synchronous state, no awaits (the producer does the waiting): ``try_append`` adds a
record to the open batch of its partition, ``ready(now)`` says which brokers have something to
send and when to look again, ``drain(now)`` takes batches for a broker up to
``max_request_size``, rotating partitions so none starves, and ``expired_batches(now)`` hands
back batches past ``delivery_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.futures import (
    BatchResults,
    BatchWatcher,
    RecordFuture,
    RecordRun,
    with_maybe_written,
)
from aioproducer._core.gc import track as _gc_track
from aioproducer._core.gc import untrack as _gc_untrack
from aioproducer._core.gc import untrack_new as _gc_untrack_new
from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.record_batch import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    estimate_record_size,
)
from aioproducer.records import SPLIT

if TYPE_CHECKING:
    from aioproducer._core.metadata import Cluster

__all__ = ["DrainGate", "ProducerBatch", "ReadyResult", "RecordAccumulator"]

# The Java client's CompressionRatioEstimator: with a codec, ``batch_size`` bounds a batch's
# *estimated compressed* size, the records' bytes times the topic's expected ratio times 1.05.
# The estimate starts at 1.0; each batch sent moves it towards the ratio it had: down by at
# most 0.005 per batch when it compressed better, up by at least 0.05 when worse.
# A split batch (the broker found it too large) sets the estimate back to at least 1.0.
COMPRESSION_RATIO_IMPROVING_STEP: Final = 0.005
COMPRESSION_RATIO_DETERIORATE_STEP: Final = 0.05
COMPRESSION_RATE_ESTIMATION_FACTOR: Final = 1.05
#: Unlike Java's, a batch here holds its records uncompressed until it is closed, and takes
#: that much of ``buffer_memory``: so a compressed batch gets a larger buffer only when its
#: partition's previous batch filled up (many partitions with a few records each keep
#: ``batch_size`` buffers), and at most this many times ``batch_size`` (records of 16 KiB
#: batches that compress 8:1 or better fill 128 KiB), and an eighth of ``buffer_memory``.
MAX_COMPRESSED_BATCH_FACTOR: Final = 8
#: Sequence numbers wrap at 2**31, as Kafka's.
SEQUENCE_MODULO: Final = 1 << 31

# The records of every finished batch (see RecordAccumulator.deallocate): shared, and never
# appended to, since records join only batches still open in their partition's deque.
_NO_RECORDS: list[RecordFuture | RecordRun] = []

TopicPartition = tuple[str, int]


class ProducerBatch:
    """Records for one partition, sent (and retried) together; one outcome for all of them.

    The asyncio future of the batch (:attr:`future`) is made only when something awaits the
    batch itself (``flush``, an awaited ``send_many``): a finished batch lives as long as
    its records' futures, and most batches are never awaited as such.
    """

    __slots__ = (
        "_future",
        "_loop_ref",
        "attempts",
        "base_sequence",
        "buffer_size",
        "builder",
        "compressing",
        "created",
        "deallocate_pending",
        "delivery_deadline",
        "drained",
        "error",
        "final",
        "forward",
        "full",
        "in_retry",
        "last_attempt",
        "last_error",
        "maybe_written",
        "offloaded",
        "open_run",
        "outcome",
        "partition",
        "producer_epoch",
        "producer_id",
        "records",
        "retry_backoff",
        "sequence_reset",
        "split",
        "split_from",
        "topic",
        "tp",
        "transactional",
        "watchers",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        builder: RecordBatchBuilder,
        buffer_size: int,
        now: float,
        delivery_timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.tp: TopicPartition = (topic, partition)
        self.builder = builder
        self.buffer_size = buffer_size
        self.created = now
        self.delivery_deadline = now + delivery_timeout
        self.last_attempt = now
        self.drained = 0.0
        self.attempts = 0
        self.retry_backoff = 0.0
        self.full = False
        # True while a worker thread compresses the records (see RecordAccumulator.offload).
        self.compressing = False
        self.offloaded = False
        self.deallocate_pending = False
        self.in_retry = False
        # A weak reference (one per loop, shared): a finished batch is untracked by the
        # cyclic GC (untrack_if_acyclic), and a strong one would make the loop, and every
        # cycle through it, look referenced from outside to the collector.
        self._loop_ref = weakref.ref(loop)
        self._future: asyncio.Future[Any] | None = None
        # True once the batch was split into smaller ones (its records moved there).
        self.split = False
        # The runs of send_many records, and, only for the producer's interceptors (see
        # RecordAccumulator's keep_record_futures), each send() record's future, in offset
        # order. Otherwise a future lives only as long as its caller keeps it: a batch that
        # kept every future until acknowledged made the cyclic GC walk all of them, again
        # and again (a quarter of the CPU of a caller who keeps none).
        self.records: list[RecordFuture | RecordRun] = []
        # The run the last send_many record joined, which the next may extend.
        self.open_run: RecordRun | None = None
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.transactional = False
        # True once the idempotence manager restarted the partition's sequences under a new
        # epoch and gave this batch a new one (Java's sequenceHasBeenReset).
        self.sequence_reset = False
        # True once an attempt ended without saying whether the broker wrote the batch (a
        # lost connection, a timeout, NOT_LEADER_OR_FOLLOWER, which Kafka also answers after
        # an append): the records may be in the log although no answer said so.
        self.maybe_written = False
        self.split_from: ProducerBatch | None = None
        # Once split: where each record went, by its offset here: (new batch, offset there).
        # A record's future follows it there when next asked (see RecordFuture._current).
        self.forward: list[tuple[ProducerBatch, int]] | None = None
        # The outcome, readable without touching the future: final is True once the batch
        # was acknowledged (outcome = (base offset, log append time)) or failed (error).
        self.final = False
        self.outcome: tuple[int, int] = (-1, -1)
        self.error: BaseException | None = None
        # The retriable error the batch was last retried for: the cause a
        # DeliveryTimeoutError names when the batch expires before another answer.
        self.last_error: BaseException | None = None
        self.watchers: list[BatchWatcher] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the batch belongs to.

        Raises:
            RuntimeError: the loop was garbage-collected (the producer's loop is gone).
        """
        loop = self._loop_ref()
        if loop is None:
            raise RuntimeError("the event loop of this batch no longer exists")
        return loop

    @property
    def future(self) -> asyncio.Future[Any]:
        """An asyncio future of the batch (made on first use): its result is
        ``(base offset, log append time)``, or :data:`~aioproducer.records.SPLIT` once split;
        its exception the batch's error."""
        future = self._future
        if future is None:
            future = self._future = self.loop.create_future()
            _gc_track(self)  # the future's callbacks may lead back here: a cycle the GC must see
            if self.final or self.split:
                self._resolve(future)
        return future

    def _resolve(self, future: asyncio.Future[Any]) -> None:
        error = self.error
        if error is not None:
            future.set_exception(error)
            # Mark it retrieved: the sender logs failures itself, and a batch whose records
            # nobody awaits should not print "exception was never retrieved" at exit.
            future.exception()
        else:
            future.set_result(SPLIT if self.split else self.outcome)

    def _finish(self) -> None:
        # The batch was acknowledged, failed or split: resolve its future if one was made,
        # and call the watching records soon after, as a future's callbacks are called.
        future = self._future
        if future is not None:
            self._resolve(future)
        if self.watchers is not None:
            self.loop.call_soon(self._fan_out)

    def watch(self, watcher: BatchWatcher) -> None:
        """Call ``watcher._on_batch_done()`` soon after the batch is done (one call in all
        for the batch; the watcher itself is kept, not a bound method made per watcher):
        a record's future, or the delivery reports of the batch's ``produce()`` records."""
        if self.watchers is None:
            self.watchers = []
            _gc_track(self)  # the batch refers to the watcher, which refers to the batch
        self.watchers.append(watcher)

    def _fan_out(self) -> None:
        watchers, self.watchers = self.watchers, None
        for watcher in watchers or ():
            watcher._on_batch_done()

    def untrack_if_acyclic(self) -> None:
        """Take an acknowledged batch that let go of its records out of the cyclic GC.

        Callers keep record futures, and each refers to its batch: a hundred thousand kept
        futures keep as many batches, which every full collection would walk. Once the
        batch holds only atoms, a weak reference to its loop and its detached builder, it
        can be in no reference cycle, nor make anything else look referenced from outside
        (see :mod:`aioproducer._core.gc`). A batch with an error, a future, watchers or split
        relations stays tracked; ``future`` and ``watch`` track it again.
        """
        if (
            self.final
            and self.error is None
            and self._future is None
            and self.watchers is None
            and self.split_from is None
            and self.forward is None
            and not self.records
        ):
            _gc_untrack(self)

    def record_futures(self) -> list[RecordFuture]:
        """A future for each record, in offset order (the futures of runs are made now)."""
        futures: list[RecordFuture] = []
        for entry in self.records:
            if isinstance(entry, RecordFuture):
                futures.append(entry)
            else:
                futures.extend(entry.materialize())
        return futures

    @property
    def record_count(self) -> int:
        """Records in the batch."""
        return self.builder.record_count

    @property
    def size_in_bytes(self) -> int:
        """Bytes the batch takes (before compression)."""
        return self.builder.size_in_bytes

    @property
    def has_sequence(self) -> bool:
        """True once the batch was given a sequence number (idempotence)."""
        return self.base_sequence >= 0

    def done(self) -> bool:
        """True once the batch was acknowledged, failed or split."""
        return self.final or self.split

    def complete(self, base_offset: int, log_append_time: int) -> bool:
        """Resolve every record of the batch; False when it was already done."""
        if self.done():
            return False
        self.outcome = (base_offset, log_append_time)
        self.last_error = None
        self.final = True
        self._finish()
        return True

    def fail(self, exc: BaseException) -> bool:
        """Fail every record of the batch with ``exc``; False when it was already done."""
        if self.done():
            return False
        self.error = exc
        self.final = True
        self._finish()
        return True

    def mark_split(self) -> None:
        """The batch was split: its records live on in the new batches."""
        self.split = True
        self._finish()

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} records={self.record_count} "
            f"attempts={self.attempts} seq={self.base_sequence}>"
        )


@dataclass(slots=True)
class ReadyResult:
    """What ``ready`` found: brokers with sendable data, when to look again, unknown leaders."""

    ready_nodes: set[int]
    next_ready_check_delay: float
    unknown_leader_topics: set[str]


class DrainGate(Protocol):
    """What the accumulator needs of the idempotence (or transaction) manager."""

    def may_drain(self, batch: ProducerBatch, node: int) -> bool:
        """Whether ``batch``, the head of its partition, may be sent now to broker ``node``
        (its leader) without breaking the partition's order (Java's
        ``shouldStopDrainBatchesForPartition``)."""
        ...


class RecordAccumulator:
    """Per-partition deques of batches; see the module docstring.

    Args:
        pool: the buffer pool batches take their buffers from and return them to.
        batch_size: the ``batch_size`` option.
        linger: ``linger_ms`` in seconds.
        delivery_timeout: ``delivery_timeout_ms`` in seconds.
        retry_backoff: ``retry_backoff_ms`` in seconds.
        compression: the codec of every batch.
        compression_level: the codec's level, or None for its default.
        loop: the event loop the batches' futures belong to.
        idempotence: with idempotence (or transactions), its manager, which says whether
            the head batch of a partition may be drained; None without.
        offload_threshold: the record bytes from which a batch is compressed off the event
            loop (by the ``offload`` that :meth:`drain` is given) before it is drained; None
            to compress every batch on the loop.
        keep_record_futures: batches keep each ``send()`` record's future in ``records``
            (for the interceptors' ``on_acknowledgement``, which reads every record of a
            finished batch).
    """

    def __init__(
        self,
        *,
        pool: BufferPool,
        batch_size: int,
        linger: float,
        delivery_timeout: float,
        retry_backoff: float,
        compression: CompressionType,
        compression_level: int | None,
        loop: asyncio.AbstractEventLoop,
        idempotence: DrainGate | None = None,
        offload_threshold: int | None = None,
        keep_record_futures: bool = False,
    ) -> None:
        self._pool = pool
        # True when something reads every record of a finished batch (the producer's
        # interceptors): batches then keep each send() record's future in ``records``.
        self._keep_record_futures = keep_record_futures
        self.batch_size = batch_size
        # As the Java client, linger is counted in whole milliseconds: a batch started during
        # millisecond m may leave once the clock reads millisecond m + linger_ms (see ready()).
        self._linger_ms = round(linger * 1000.0)
        self.delivery_timeout = delivery_timeout
        self.retry_backoff = retry_backoff
        self._compression = compression
        self._compression_level = compression_level
        #: True with a codec: batches are then sized by the expected compression ratio.
        self.compressed = compression is not CompressionType.NONE
        # Per topic, the expected compressed/uncompressed ratio of its batches' records
        # (only with a codec; see compression_ratio()).
        self._compression_ratios: dict[str, float] = {}
        self._loop = loop
        self._idempotence = idempotence
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        # The deque the last append went to: sticky partitioning appends to one partition
        # for a batch's worth of records, and this saves building a (topic, partition) key
        # per record. Deques are never removed from _batches, so the cache cannot go stale.
        self._last_topic = ""
        self._last_partition = -1
        self._last_batches: deque[ProducerBatch] | None = None
        self._incomplete: set[ProducerBatch] = set()
        # Futures of wait_until_complete(), resolved when the last incomplete batch goes.
        self._complete_waiters: list[asyncio.Future[None]] = []
        self._drain_index: dict[int, int] = {}
        self._flushes_in_progress = 0
        self._closed = False
        self._muted: set[TopicPartition] = set()
        #: Batches whose records reach this many bytes are compressed off the event loop.
        self.offload_threshold = offload_threshold

    # ---- appending ------------------------------------------------------------------------

    def deque_for(self, tp: TopicPartition) -> deque[ProducerBatch]:
        """The deque of batches for ``tp``, created on first use."""
        batches = self._batches.get(tp)
        if batches is None:
            batches = self._batches[tp] = deque()
        return batches

    def _existing_deque(self, topic: str, partition: int) -> deque[ProducerBatch] | None:
        if partition == self._last_partition and topic == self._last_topic:
            return self._last_batches
        batches = self._batches.get((topic, partition))
        if batches is not None:
            self._last_topic = topic
            self._last_partition = partition
            self._last_batches = batches
        return batches

    def try_append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> RecordFuture | None:
        """Append to the open batch of the partition; None when a new batch is needed."""
        batch = self._append_to_open_batch(topic, partition, timestamp, key, value, headers)
        if batch is None:
            return None
        return self._record_future(batch, batch.builder.record_count - 1, timestamp, key, value)

    def _record_future(
        self,
        batch: ProducerBatch,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
    ) -> RecordFuture:
        """The future of the record just appended to ``batch`` at ``offset``."""
        future = RecordFuture(
            batch,
            offset,
            timestamp,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
        )
        if self._keep_record_futures:
            batch.records.append(future)
            _gc_track(future)  # the batch refers to it: a cycle the GC must see
        return future

    def open_batch(self, topic: str, partition: int) -> ProducerBatch | None:
        """The partition's last batch if it still takes records."""
        batches = self._existing_deque(topic, partition)
        if not batches:
            return None
        batch = batches[-1]
        return None if batch.full else batch

    def _append_to_open_batch(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> ProducerBatch | None:
        """Write the record into the partition's open batch (at offset ``record_count - 1``
        after); None, the batch marked full, when it has no room."""
        batch = self.open_batch(topic, partition)
        if batch is None:
            return None
        if batch.builder.try_append(timestamp, key, value, headers) < 0:
            batch.full = True
            return None
        return batch

    def append_values(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        values: Sequence[bytes],
        start: int,
        stop: int,
        results: BatchResults,
    ) -> int:
        """Append a run of key-less, header-less values to the open batch of the partition.

        Adds the records to ``results`` (as one run, without a future each); returns the
        index it stopped at (``start`` when there is no open batch with room: the caller then
        starts a new batch).
        """
        batch = self.open_batch(topic, partition)
        if batch is None:
            return start
        first_offset = batch.builder.record_count
        stopped = batch.builder.append_values(timestamp, values, start, stop)
        if stopped < stop:
            batch.full = True
        results.add_values(batch, first_offset, timestamp, values, start, stopped)
        return stopped

    def append_value_rows(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        rows: Any,
        start: int,
        stop: int,
        results: BatchResults,
    ) -> int:
        """:meth:`append_values` for the rows ``start:stop`` of ``rows``, a BinaryPairs
        without a key column (``aioproducer._native.arrowcols``)."""
        batch = self.open_batch(topic, partition)
        if batch is None:
            return start
        first_offset = batch.builder.record_count
        # The records' key and value sizes, as the encoder writes them.
        sizes = bytearray()
        stopped = batch.builder.append_rows(timestamp, rows, 0, None, start, stop, True, sizes)
        if stopped < stop:
            batch.full = True
        results.add_value_rows(batch, first_offset, timestamp, start, stopped, sizes)
        return stopped

    def append_pairs(
        self,
        batch: ProducerBatch,
        timestamp: int,
        items: list[Any],
        base: int,
        places: list[int],
        start: int,
        stop: int,
        results: BatchResults,
        first_position: int,
        rows: Any = None,
    ) -> int:
        """Append the ``(key, value)`` records ``items[base + places[i]]`` (``i`` in
        ``start:stop``; keys and values ``bytes``), or those rows of ``rows`` (a BinaryPairs
        of ``aioproducer._native.arrowcols``) when it is not None, to ``batch``, the open
        batch of their partition.

        Adds them to ``results`` (see :meth:`BatchResults.add_pairs`); returns where it
        stopped (before ``stop`` when the batch filled up: it is then marked full).
        """
        builder = batch.builder
        first_offset = builder.record_count
        if rows is not None:
            # The records' key and value sizes, as the encoder writes them.
            sizes = bytearray()
            stopped = builder.append_rows(timestamp, rows, base, places, start, stop, True, sizes)
        else:
            stopped = builder.append_pairs(timestamp, items, base, places, start, stop)
        if stopped < stop:
            batch.full = True
        if rows is not None:
            results.add_rows(
                batch, first_offset, timestamp, rows, places, start, stopped, first_position, sizes
            )
        else:
            results.add_pairs(
                batch, first_offset, timestamp, items, base, places, start, stopped, first_position
            )
        return stopped

    def append_lazy(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        results: BatchResults,
    ) -> ProducerBatch | None:
        """:meth:`try_append` for ``send_many``: the record joins ``results`` without a
        future of its own. Returns its batch, or None when a new batch is needed."""
        batch = self._append_to_open_batch(topic, partition, timestamp, key, value, headers)
        if batch is None:
            return None
        results.add_lazy(
            batch,
            batch.builder.record_count - 1,
            timestamp,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
        )
        return batch

    def append_to_new_batch(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        buffer: bytearray,
        now: float,
    ) -> RecordFuture:
        """Start a batch in ``buffer`` (from the pool) with this record as its first."""
        batches = self.deque_for((topic, partition))
        if batches:
            # The previous batch is done taking records once a newer one exists.
            batches[-1].full = True
        builder = RecordBatchBuilder(buffer, self._compression, self._compression_level)
        # Its list of pieces holds bytes only (thousands of them in a large batch): out of
        # the collector, which would otherwise walk it at every young collection.
        _gc_untrack(builder.pending_parts)
        batch = ProducerBatch(
            topic,
            partition,
            builder,
            len(buffer),
            now,
            self.delivery_timeout,
            self._loop,
        )
        offset = builder.try_append(timestamp, key, value, headers)
        future = self._record_future(batch, offset, timestamp, key, value)
        batches.append(batch)
        self._incomplete.add(batch)
        return future

    def buffer_size_for(self, record_size: int, topic: str, partition: int) -> int:
        """The buffer a new batch of ``topic``'s ``partition`` needs.

        max(batch_size, the record plus the batch header); with a codec, while the
        partition's last batch is full (records come faster than batches leave), the records
        expected to compress to ``batch_size`` instead (as the Java client fills compressed
        batches; see :meth:`compression_ratio`), within ``MAX_COMPRESSED_BATCH_FACTOR *
        batch_size`` and an eighth of ``buffer_memory``.
        """
        batch_size = self.batch_size
        size = batch_size
        if self.compressed:
            ratio = self._compression_ratios.get(topic, 1.0)
            if ratio < 1.0:
                batches = self._existing_deque(topic, partition)
                if batches:
                    expected = RECORD_BATCH_OVERHEAD + math.ceil(
                        (batch_size - RECORD_BATCH_OVERHEAD)
                        / (ratio * COMPRESSION_RATE_ESTIMATION_FACTOR)
                    )
                    size = max(
                        size,
                        min(
                            expected,
                            MAX_COMPRESSED_BATCH_FACTOR * batch_size,
                            self._pool.total_memory // 8,
                        ),
                    )
        return max(size, record_size + RECORD_BATCH_OVERHEAD)

    def compression_ratio(self, topic: str) -> float:
        """The compressed/uncompressed size ratio expected of ``topic``'s next batch.

        1.0 without a codec, and for a topic none of whose batches was sent yet. The Java
        client's estimate: each batch sent moves it (:meth:`observe_compression`).
        """
        return self._compression_ratios.get(topic, 1.0)

    def observe_compression(self, topic: str, observed: float) -> None:
        """A batch of ``topic`` went out with its records compressed to ``observed`` of their
        size. Updates :meth:`compression_ratio` as Java does."""
        if not self.compressed:
            return
        current = self._compression_ratios.get(topic, 1.0)
        if observed > current:
            self._compression_ratios[topic] = max(
                current + COMPRESSION_RATIO_DETERIORATE_STEP, observed
            )
        elif observed < current:
            self._compression_ratios[topic] = max(
                current - COMPRESSION_RATIO_IMPROVING_STEP, observed
            )

    def estimated_size(self, batch: ProducerBatch) -> int:
        """The bytes ``batch`` is expected to take in a request: compressed, with a codec."""
        size = batch.size_in_bytes
        if self.compressed:
            closed = batch.builder.closed_size
            if closed:
                return closed
            ratio = self._compression_ratios.get(batch.topic, 1.0)
            return RECORD_BATCH_OVERHEAD + math.ceil(
                (size - RECORD_BATCH_OVERHEAD) * ratio * COMPRESSION_RATE_ESTIMATION_FACTOR
            )
        return size

    # ---- readiness and draining -------------------------------------------------------------

    def has_undrained(self) -> bool:
        """True when any partition holds a batch not yet sent."""
        return any(self._batches.values())

    def has_incomplete(self) -> bool:
        """True while any batch is buffered, or sent and its request not yet answered.

        A batch whose records failed while its request was out (it expired in flight) stays
        incomplete until the request ends: the broker may still write it.
        """
        return bool(self._incomplete)

    def wait_until_complete(self) -> asyncio.Future[None]:
        """A future that is done once :meth:`has_incomplete` is False (at once if it is)."""
        future: asyncio.Future[None] = self._loop.create_future()
        if self._incomplete:
            self._complete_waiters.append(future)
        else:
            future.set_result(None)
        return future

    def _wake_complete_waiters(self) -> None:
        waiters, self._complete_waiters = self._complete_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def queue_sizes(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """Batches waiting in each partition of ``topic`` (for adaptive partitioning)."""
        get = self._batches.get
        return [len(get((topic, p)) or ()) for p in partitions]

    def ready(self, cluster: Cluster, now: float) -> ReadyResult:
        """Which brokers lead a partition with a sendable batch, and when to check again."""
        ready_nodes: set[int] = set()
        unknown: set[str] = set()
        next_delay = float("inf")
        exhausted = self._pool.queued() > 0
        force = exhausted or self._closed or self._flushes_in_progress > 0
        linger_ms = self._linger_ms
        idempotence = self._idempotence
        for tp, batches in self._batches.items():
            if not batches:
                continue
            leader = cluster.leader_for(tp[0], tp[1])
            if leader < 0:
                unknown.add(tp[0])
                continue
            if leader in ready_nodes or tp in self._muted:
                continue
            batch = batches[0]
            if idempotence is not None and not idempotence.may_drain(batch, leader):
                continue
            if batch.in_retry:
                backoff_left = batch.last_attempt + batch.retry_backoff - now
                if backoff_left > 0:
                    next_delay = min(next_delay, backoff_left)
                    continue
                ready_nodes.add(leader)
                continue
            if force or batch.full or len(batches) > 1:
                ready_nodes.add(leader)
                continue
            # Whole milliseconds, as the Java client (its clock reads whole milliseconds):
            # ready once the millisecond the batch started in plus linger_ms has begun. The
            # event loop's timers tick in milliseconds too, so counting in seconds would only
            # add up to one tick of lateness to every lingering batch.
            time_left = (math.floor(batch.created * 1000.0) + linger_ms) / 1000.0 - now
            if time_left <= 0:
                ready_nodes.add(leader)
            else:
                next_delay = min(next_delay, time_left)
        return ReadyResult(ready_nodes, next_delay, unknown)

    def drain(
        self,
        cluster: Cluster,
        nodes: Iterable[int],
        max_request_size: int,
        now: float,
        prepare: Callable[[ProducerBatch], bool] | None = None,
        offload: Callable[[ProducerBatch], None] | None = None,
    ) -> dict[int, list[ProducerBatch]]:
        """Take at most one batch per partition for each broker, up to ``max_request_size``.

        ``prepare`` closes each batch taken for sending; one it returns False for could not
        be built (it failed the batch) and is left out. ``offload`` starts compressing a big
        batch off the event loop (see ``offload_threshold``); the batch stays in its deque
        until :meth:`offload_done`. Without ``offload``, every batch is compressed on the
        loop when it is closed.
        """
        drained: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            batches = self._drain_node(cluster, node, max_request_size, now, prepare, offload)
            if batches:
                drained[node] = batches
        return drained

    def _drain_node(
        self,
        cluster: Cluster,
        node: int,
        max_request_size: int,
        now: float,
        prepare: Callable[[ProducerBatch], bool] | None,
        offload: Callable[[ProducerBatch], None] | None,
    ) -> list[ProducerBatch]:
        partitions = cluster.partitions_for_node(node)
        count = len(partitions)
        if count == 0:
            return []
        start = self._drain_index.get(node, 0) % count
        size = 0
        ready: list[ProducerBatch] = []
        get = self._batches.get
        idempotence = self._idempotence
        offload_threshold = self.offload_threshold if offload is not None else None
        for i in range(count):
            tp = partitions[(start + i) % count]
            batches = get(tp)
            if not batches or tp in self._muted:
                continue
            first = batches[0]
            if first.compressing:
                continue
            if first.in_retry and first.last_attempt + first.retry_backoff > now:
                continue
            if idempotence is not None and not idempotence.may_drain(first, node):
                continue
            if (
                offload is not None
                and offload_threshold is not None
                and self._offload_head(batches, offload_threshold, offload)
            ):
                continue
            # As Java's: a compressed batch counts what it is expected to take compressed.
            batch_size = self.estimated_size(first) if self.compressed else first.size_in_bytes
            if ready and size + batch_size > max_request_size:
                # Start after this partition next time so it is not starved.
                self._drain_index[node] = (start + i) % count
                return ready
            batches.popleft()
            first.full = True
            first.drained = now
            if prepare is not None and not prepare(first):
                continue  # it could not be built: failed, and out of the queue
            ready.append(first)
            size += batch_size
        self._drain_index[node] = (start + 1) % count
        return ready

    def _offload_head(
        self,
        batches: deque[ProducerBatch],
        threshold: int,
        offload: Callable[[ProducerBatch], None],
    ) -> bool:
        """Start compressing big batches of a partition off the loop; True if the head waits.

        The head batch stops taking records and goes to ``offload``; so do the full batches
        behind it, so that a backlog compresses while the head is in flight. A batch that
        is compressing stays in its deque, so the partition's order cannot change.
        """
        head_waits = False
        for index, batch in enumerate(batches):
            builder = batch.builder
            if builder.closed or batch.offloaded:
                if index == 0:
                    return False
                continue
            if index and not batch.full:
                break
            if builder.records_size < threshold:
                if index == 0:
                    return False
                continue
            batch.full = True
            batch.compressing = batch.offloaded = True
            builder.write_pending()
            offload(batch)
            if index == 0:
                # offload() may have finished at once (a synchronous one in tests).
                head_waits = batch.compressing
        return head_waits

    def offload_done(self, batch: ProducerBatch, block: bytes | None) -> None:
        """A batch's records came back from the worker thread compressed into ``block``.

        ``None`` (the codec raised in the thread) leaves the batch to be compressed on the
        loop when it is drained, where the error surfaces as it would without a thread.
        """
        batch.compressing = False
        if batch.deallocate_pending:
            # Failed or aborted while the thread read its buffer: return the buffer now.
            self.deallocate(batch)
            return
        if block is not None and not batch.final:
            batch.builder.use_compressed(block)

    def mute(self, tp: TopicPartition) -> None:
        """Stop draining ``tp`` (one batch in flight at a time, to keep order)."""
        self._muted.add(tp)

    def unmute(self, tp: TopicPartition) -> None:
        """Allow draining ``tp`` again."""
        self._muted.discard(tp)

    def reenqueue(self, batch: ProducerBatch, now: float, backoff: float) -> None:
        """Put a batch to retry back at the front of its partition: in sequence order, or
        without sequences in the order the batches were made."""
        batch.attempts += 1
        batch.last_attempt = now
        batch.retry_backoff = backoff
        batch.in_retry = True
        batches = self.deque_for(batch.tp)
        if batch.has_sequence:
            self._insert_in_sequence_order(batches, batch)
        else:
            self._insert_in_creation_order(batches, batch)

    @staticmethod
    def _insert_in_sequence_order(batches: deque[ProducerBatch], batch: ProducerBatch) -> None:
        # Batches with sequence numbers stay ordered by sequence at the front, so the broker
        # sees no gap (Java's insertInSequenceOrder).
        index = len(batches)
        for position, queued in enumerate(batches):
            if not queued.has_sequence or queued.base_sequence > batch.base_sequence:
                index = position
                break
        batches.insert(index, batch)

    @staticmethod
    def _insert_in_creation_order(batches: deque[ProducerBatch], batch: ProducerBatch) -> None:
        # Without sequences, retries go back in the order their batches were made (Java puts
        # each at the front, so retries that failed together go again in reverse): the oldest
        # batch is then always first, which is where expired_batches() looks for deadlines.
        index = len(batches)
        for position, queued in enumerate(batches):
            if queued.created > batch.created:
                index = position
                break
        batches.insert(index, batch)

    def remove_queued(self, batch: ProducerBatch) -> bool:
        """Take ``batch`` out of its partition's queue; False if it is not queued there (it
        is in flight, or done)."""
        batches = self._batches.get(batch.tp)
        if not batches:
            return False
        try:
            batches.remove(batch)
        except ValueError:
            return False
        return True

    def expired_batches(self, now: float) -> list[ProducerBatch]:
        """Remove and return undrained batches older than ``delivery_timeout_ms``."""
        expired: list[ProducerBatch] = []
        for batches in self._batches.values():
            while batches and batches[0].delivery_deadline <= now:
                expired.append(batches.popleft())
        return expired

    def next_expiry(self) -> float:
        """The earliest delivery deadline of an undrained batch (inf when none)."""
        deadline = float("inf")
        for batches in self._batches.values():
            if batches and batches[0].delivery_deadline < deadline:
                deadline = batches[0].delivery_deadline
        return deadline

    def deallocate(self, batch: ProducerBatch) -> None:
        """Return the batch's buffer to the pool once it is done."""
        self._incomplete.discard(batch)
        if self._complete_waiters and not self._incomplete:
            self._wake_complete_waiters()
        if batch.compressing:
            # A worker thread still reads the buffer: offload_done() returns it.
            batch.deallocate_pending = True
            return
        batch.deallocate_pending = False
        builder = batch.builder
        if builder.detached:
            return  # deallocated before: the pool has the buffer already
        buffer = builder.buffer
        # Callers keep record futures, and each points at its finished batch: leave that batch
        # as little as possible to hold, and to the cycle collector to visit (detach() also
        # releases the view, so the pool may reuse the buffer). Dropping the records breaks
        # the future-batch cycle, so the batch is freed by reference counting.
        builder.detach()
        self._pool.deallocate(buffer, batch.buffer_size)
        batch.records = _NO_RECORDS
        batch.open_run = None
        batch.untrack_if_acyclic()

    def split_and_reenqueue(
        self,
        batch: ProducerBatch,
        records: list[Any],
        now: float,
        target_size: int | None = None,
        refused: Mapping[int, BaseException] | None = None,
    ) -> tuple[list[ProducerBatch], list[tuple[ProducerBatch, BaseException]]]:
        """Split a batch into new ones and queue them again; return them, and the batches of
        the ``refused`` records.

        Two uses: a batch the broker found too large is split into batches of at most
        ``batch_size`` (and ``target_size``); a batch the broker refused for some of its
        records (KIP-467: ``refused`` maps a record's index to its error) goes again
        without them. Each refused record gets a batch of its own, not queued, for the
        caller to fail with its error.

        ``records`` are the decoded records of the batch, in order. The new batches take the
        place of the old one in the partition; the old batch's :attr:`forward` tells each
        record's future where its record went. A batch with a sequence hands its range on,
        in order, under its producer id and epoch, and the new batches go in sequence order
        among the partition's queued retries (Java's ``ProducerBatch.split`` and
        ``splitAndReenqueue``), so nothing overtakes them.
        """
        if self.compressed and not refused:
            # As Java's: the estimate failed for this topic, so it starts over from at least
            # 1.0 (batch_size of records) rather than make the next batches too large too.
            self._compression_ratios[batch.topic] = max(1.0, batch.builder.compression_ratio)
        limit = self.batch_size if target_size is None else min(self.batch_size, target_size)
        new_batches: list[ProducerBatch] = []
        refused_batches: list[tuple[ProducerBatch, BaseException]] = []
        current: ProducerBatch | None = None
        # Where each record goes, by its offset here; futures (of send() records, and of
        # send_many records whenever they are made) follow it there when next asked.
        forward: list[tuple[ProducerBatch, int]] = []
        for index, record in enumerate(records):
            timestamp = batch.builder.base_timestamp + record.timestamp_delta
            record_size = estimate_record_size(record.key, record.value, record.headers)
            error = None if refused is None else refused.get(index)
            if error is not None:
                lone = self._split_part(batch, record_size + RECORD_BATCH_OVERHEAD)
                offset = lone.builder.try_append(
                    timestamp, record.key, record.value, record.headers
                )
                refused_batches.append((lone, error))
                forward.append((lone, offset))
                continue
            while True:
                if current is not None:
                    offset = current.builder.try_append(
                        timestamp, record.key, record.value, record.headers
                    )
                    if offset >= 0:
                        break
                    current.full = True
                # The new batches are at most target_size (a record bigger than that gets
                # a batch of its own).
                current = self._split_part(batch, max(limit, record_size + RECORD_BATCH_OVERHEAD))
                new_batches.append(current)
            forward.append((current, offset))
            if record_size + RECORD_BATCH_OVERHEAD > limit:
                # A record larger than target_size stays alone, so a split always makes
                # progress: otherwise a small record could join the large one in the slack
                # of its buffer, and the same batch would be split into itself again and
                # again (the Java client's KAFKA-8350). Alone, it fails as too large.
                current = None
        if self._keep_record_futures:
            # The interceptors read the records of each new batch when it finishes: hand
            # them their futures (in offset order, as the records were appended).
            for future in batch.record_futures():
                # _current() first: a future handed on by an earlier split still names that
                # split's batch and offset, not its offset in this one.
                future._current()
                forward[future.relative_offset][0].records.append(future)
        batch.forward = forward
        # The old batch's share of buffer_memory passes to the first new batch (the others
        # account nothing), so the pool stays within its total while the split batches live.
        sequence = batch.base_sequence
        for index, new_batch in enumerate(new_batches):
            new_batch.buffer_size = batch.buffer_size if index == 0 else 0
            if sequence >= 0:
                new_batch.producer_id = batch.producer_id
                new_batch.producer_epoch = batch.producer_epoch
                new_batch.transactional = batch.transactional
                new_batch.base_sequence = sequence
                sequence = (sequence + new_batch.record_count) % SEQUENCE_MODULO
        if refused_batches and not new_batches:
            refused_batches[0][0].buffer_size = batch.buffer_size
        batches = self.deque_for(batch.tp)
        if batch.has_sequence:
            for new_batch in new_batches:
                self._insert_in_sequence_order(batches, new_batch)
        else:
            for new_batch in reversed(new_batches):
                batches.appendleft(new_batch)
        self._incomplete.discard(batch)
        # The old batch lives on as the new ones' split_from (flush looks there), and through
        # them in the callers' futures: it keeps nothing of its buffer. The buffer is not the
        # pool's to take back: its share of buffer_memory went to the first new batch.
        batch.builder.detach()
        batch.records = _NO_RECORDS
        batch.open_run = None
        batch.mark_split()
        return new_batches, refused_batches

    def _split_part(self, batch: ProducerBatch, size: int) -> ProducerBatch:
        """A new, full batch of ``batch``'s partition, for records moved out of it."""
        part = ProducerBatch(
            batch.topic,
            batch.partition,
            RecordBatchBuilder(bytearray(size), self._compression, self._compression_level),
            size,
            batch.created,
            0.0,
            self._loop,
        )
        part.delivery_deadline = batch.delivery_deadline
        # The records of an attempt that may have been written may be in the log still.
        part.maybe_written = batch.maybe_written
        part.split_from = batch
        part.full = True
        part.buffer_size = 0
        self._incomplete.add(part)
        return part

    # ---- flush and close ------------------------------------------------------------------------

    def begin_flush(self) -> None:
        """Make every batch ready now, until ``end_flush``."""
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        """A flush is over."""
        self._flushes_in_progress -= 1

    def pending_batches(self) -> list[ProducerBatch]:
        """Every batch not yet acknowledged or failed."""
        return list(self._incomplete)

    def close(self) -> None:
        """No more appends; everything buffered becomes ready."""
        self._closed = True

    def take_batches_led_by(
        self, cluster: Cluster, node_id: int, created_by: float
    ) -> list[ProducerBatch]:
        """Remove and return the undrained batches created at ``created_by`` or before of
        the partitions ``node_id`` leads (except muted ones, whose head batch is in flight),
        oldest first per partition.

        The caller fails and deallocates them.
        """
        taken: list[ProducerBatch] = []
        for tp, batches in self._batches.items():
            if not batches or tp in self._muted or batches[0].created > created_by:
                continue
            if cluster.leader_for(tp[0], tp[1]) != node_id:
                continue
            while batches and batches[0].created <= created_by:
                taken.append(batches.popleft())
        return taken

    def purge_queued(self) -> list[ProducerBatch]:
        """Remove and return every batch not yet in a request (retries waiting for their
        backoff and batches being compressed included), oldest first per partition.

        The caller fails and deallocates them.
        """
        purged: list[ProducerBatch] = []
        for batches in self._batches.values():
            purged.extend(batches)
            batches.clear()
        return purged

    def queued_records(self) -> int:
        """Records in batches not yet in a request."""
        count = 0
        for batches in self._batches.values():
            for batch in batches:
                count += batch.record_count
        return count

    def undelivered_records(self) -> int:
        """Records in batches not yet acknowledged or failed: buffered, or in flight."""
        count = 0
        for batch in self._incomplete:
            if not batch.final:
                count += batch.record_count
        return count

    def abort_undrained(self, exc: BaseException) -> list[ProducerBatch]:
        """Fail every batch not yet sent with ``exc`` (``maybe_written`` as the batch's: a
        retry whose earlier attempt may have been written); return them.

        The caller deallocates them (after telling interceptors, who read ``batch.records``).
        """
        aborted: list[ProducerBatch] = []
        for batches in self._batches.values():
            while batches:
                batch = batches.popleft()
                batch.fail(with_maybe_written(exc, batch.maybe_written))
                aborted.append(batch)
        return aborted


# Compiled, the builders the accumulator makes start untracked by the cyclic GC: they refer
# only to buffers, bytes and lists of bytes, so they can be in no reference cycle (the rule
# and its reasons are in aioproducer._core.gc, the one module that deals with the collector; the
# protocol layer knows nothing of it).
_UNTRACKED_BUILDERS: Final = _gc_untrack_new(RecordBatchBuilder)
