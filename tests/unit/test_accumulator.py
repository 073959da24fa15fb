"""The RecordAccumulator stepped with a fake clock: readiness (full, linger, flush, close,
pool waiters, backoff), draining (max_request_size, rotation, one batch per partition),
expiry, retries in sequence order, and batch splitting."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import weakref
from typing import Any

import pytest

from aioproducer._core import futures as futures_module
from aioproducer._core.accumulator import ProducerBatch, RecordAccumulator
from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.futures import BatchResults, RecordFuture
from aioproducer._core.metadata import Broker, Cluster, PartitionInfo, TopicInfo, validate_topic
from aioproducer.errors import KafkaError, UnknownServerError
from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.record_reader import decode_record_batches
from aioproducer.records import RecordMetadata, TimestampType


def make_cluster(partitions: dict[int, int], topic: str = "t") -> Cluster:
    """A cluster where partition p of ``topic`` is led by broker partitions[p] (-1: none)."""
    brokers = {n: Broker(n, "127.0.0.1", 9000 + n) for n in (1, 2, 3)}
    info = TopicInfo(
        topic, tuple(PartitionInfo(p, leader) for p, leader in sorted(partitions.items()))
    )
    return Cluster(brokers=brokers, topics={topic: info})


class Harness:
    def __init__(self, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        self.pool = BufferPool(kwargs.pop("buffer_memory", 1 << 20), kwargs.get("batch_size", 1024))
        options: dict[str, Any] = {
            "batch_size": 1024,
            "linger": 0.005,
            "delivery_timeout": 120.0,
            "retry_backoff": 0.1,
            "compression": CompressionType.NONE,
            "compression_level": None,
        }
        options.update(kwargs)
        self.acc = RecordAccumulator(pool=self.pool, loop=loop, **options)

    def append(self, partition: int, value: bytes, now: float, topic: str = "t") -> RecordFuture:
        future = self.acc.try_append(topic, partition, 0, None, value, None)
        if future is not None:
            return future
        size = self.acc.buffer_size_for(len(value) + 30, topic, partition)
        buffer = self.pool.allocate_nowait(size)
        assert buffer is not None
        return self.acc.append_to_new_batch(topic, partition, 0, None, value, None, buffer, now)


async def test_linger_decides_readiness() -> None:
    h = Harness(asyncio.get_running_loop(), linger=0.010)
    cluster = make_cluster({0: 1, 1: 2})
    h.append(0, b"x", now=100.0)
    result = h.acc.ready(cluster, 100.004)
    assert result.ready_nodes == set()
    assert result.next_ready_check_delay == pytest.approx(0.006)
    assert h.acc.ready(cluster, 100.010).ready_nodes == {1}


async def test_linger_counts_whole_milliseconds_like_the_java_client() -> None:
    # The Java client reads its clock in whole milliseconds: a batch started at 100.0009 s
    # (millisecond 100000) may leave from millisecond 100010, 9.1 ms later with a 10 ms
    # linger. Counting exact seconds would add one timer tick (1 ms) of lateness instead.
    h = Harness(asyncio.get_running_loop(), linger=0.010)
    cluster = make_cluster({0: 1})
    h.append(0, b"x", now=100.0009)
    result = h.acc.ready(cluster, 100.0095)
    assert result.ready_nodes == set()
    assert result.next_ready_check_delay == pytest.approx(0.0005)
    assert h.acc.ready(cluster, 100.0100).ready_nodes == {1}
    assert h.acc.ready(cluster, 100.0109).ready_nodes == {1}


async def test_full_batch_is_ready_at_once() -> None:
    h = Harness(asyncio.get_running_loop(), linger=10.0, batch_size=200)
    cluster = make_cluster({0: 1})
    for _ in range(10):
        h.append(0, b"y" * 30, now=0.0)
    # More than one batch in the deque: the first is full.
    assert len(h.acc.deque_for(("t", 0))) > 1
    assert h.acc.ready(cluster, 0.0).ready_nodes == {1}


async def test_flush_and_close_make_everything_ready() -> None:
    h = Harness(asyncio.get_running_loop(), linger=10.0)
    cluster = make_cluster({0: 1, 1: 3})
    h.append(0, b"a", 0.0)
    h.append(1, b"b", 0.0)
    assert h.acc.ready(cluster, 0.0).ready_nodes == set()
    h.acc.begin_flush()
    assert h.acc.ready(cluster, 0.0).ready_nodes == {1, 3}
    h.acc.end_flush()
    assert h.acc.ready(cluster, 0.0).ready_nodes == set()
    h.acc.close()
    assert h.acc.ready(cluster, 0.0).ready_nodes == {1, 3}


async def test_unknown_leader_is_reported() -> None:
    h = Harness(asyncio.get_running_loop())
    cluster = make_cluster({0: -1})
    h.append(0, b"a", 0.0)
    result = h.acc.ready(cluster, 1.0)
    assert result.ready_nodes == set()
    assert result.unknown_leader_topics == {"t"}


async def test_drain_respects_max_request_size_and_rotates() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=1024)
    cluster = make_cluster({p: 1 for p in range(4)})
    for p in range(4):
        h.append(p, b"z" * 400, 0.0)
    # Room for two batches per request: partitions must take turns.
    first = h.acc.drain(cluster, [1], 1000, 1.0)[1]
    assert [b.partition for b in first] == [0, 1]
    second = h.acc.drain(cluster, [1], 1000, 1.0)[1]
    assert [b.partition for b in second] == [2, 3]
    for p in range(4):
        h.append(p, b"z" * 400, 0.0)
    # The next request starts after the last partition served, not at partition 0 again.
    third = h.acc.drain(cluster, [1], 1000, 1.0)[1]
    assert [b.partition for b in third] == [3, 0]


async def test_one_batch_per_partition_per_request() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=200)
    cluster = make_cluster({0: 1})
    for _ in range(20):
        h.append(0, b"q" * 50, 0.0)
    batches = h.acc.drain(cluster, [1], 1 << 20, 1.0)[1]
    assert len(batches) == 1
    assert len(h.acc.deque_for(("t", 0))) >= 1


async def test_retry_backoff_and_sequence_order() -> None:
    h = Harness(asyncio.get_running_loop(), linger=0.0)
    cluster = make_cluster({0: 1})
    h.append(0, b"a", 0.0)
    (first,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    h.append(0, b"b", 0.0)
    (second,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    first.base_sequence, second.base_sequence = 0, 1
    # Both fail; the second comes back first, but sequence order wins in the deque.
    h.acc.reenqueue(second, 1.0, 0.5)
    h.acc.reenqueue(first, 1.0, 0.5)
    assert list(h.acc.deque_for(("t", 0))) == [first, second]
    result = h.acc.ready(cluster, 1.2)
    assert result.ready_nodes == set()
    assert result.next_ready_check_delay == pytest.approx(0.3)
    assert h.acc.ready(cluster, 1.5).ready_nodes == {1}
    assert first.attempts == 1


async def test_expired_batches_are_returned() -> None:
    h = Harness(asyncio.get_running_loop(), delivery_timeout=2.0, linger=100.0)
    h.append(0, b"a", 10.0)
    assert h.acc.expired_batches(11.9) == []
    assert h.acc.next_expiry() == pytest.approx(12.0)
    expired = h.acc.expired_batches(12.0)
    assert len(expired) == 1 and isinstance(expired[0], ProducerBatch)


async def test_deallocate_returns_memory() -> None:
    h = Harness(asyncio.get_running_loop(), buffer_memory=4096, batch_size=1024)
    cluster = make_cluster({0: 1})
    h.append(0, b"a", 0.0)
    assert h.pool.available_memory() == 3072
    (batch,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    batch.builder.close()
    batch.complete(0, -1)
    h.acc.deallocate(batch)
    assert h.pool.available_memory() == 4096
    assert not h.acc.has_incomplete()


def _split(h: Harness, batch: ProducerBatch, batch_size: int, now: float = 1.0) -> int:
    """Close ``batch``, then split it as the sender does after MESSAGE_TOO_LARGE, into batches
    of ``batch_size``; return how many."""
    records = decode_record_batches(bytes(batch.builder.close()))[0].records
    h.acc.batch_size = batch_size
    return len(h.acc.split_and_reenqueue(batch, list(records), now)[0])


def _complete_in_order(batches: list[ProducerBatch], base: int) -> int:
    """Acknowledge ``batches`` one after another from offset ``base``; return the next."""
    for batch in batches:
        _finish(batch, base)
        base += batch.record_count
    return base


async def test_split_moves_record_futures() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    cluster = make_cluster({0: 1})
    futures = [h.append(0, f"{i:04d}".encode() * 50, 0.0) for i in range(15)]
    (batch,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    assert _split(h, batch, 1024) > 1
    new_batches = list(h.acc.deque_for(("t", 0)))
    _complete_in_order(new_batches, 0)
    metadata = [await f for f in futures]
    assert [m.offset for m in metadata] == list(range(15))
    # The split batch stays reachable (split_from) but no longer holds its buffer.
    assert all(b.split_from is batch for b in new_batches)
    assert batch.builder.detached
    assert not [r for r in gc.get_referents(batch.builder) if isinstance(r, bytearray) and r]


def _holders(objects: list[Any]) -> list[int]:
    # How many references to each object there are besides the list's: counted against
    # fresh objects held the same way. (gc.get_objects() would not do: compiled, a record
    # future is not tracked by the GC.)
    fresh = [object() for _ in objects]
    return [sys.getrefcount(o) - sys.getrefcount(f) for o, f in zip(objects, fresh, strict=True)]


async def test_a_batch_keeps_no_record_future_unless_asked() -> None:
    # A caller who drops the future of a send() must not leave it to the batch: kept until
    # the acknowledgement, every future was walked by the cyclic GC again and again (a
    # quarter of the CPU of a fire-and-forget caller).
    h = Harness(asyncio.get_running_loop())
    futures = [h.append(0, b"v%d" % i, 0.0) for i in range(50)]
    assert _holders(futures) == [0] * 50
    # Interceptors read every record of a finished batch: then the batch keeps them.
    kept = Harness(asyncio.get_running_loop(), keep_record_futures=True)
    futures = [kept.append(0, b"v%d" % i, 0.0) for i in range(50)]
    assert _holders(futures) == [1] * 50
    batch = kept.acc.deque_for(("t", 0))[0]
    assert [f.relative_offset for f in batch.record_futures()] == list(range(len(batch.records)))


@pytest.mark.parametrize("keep", [False, True])
async def test_a_split_forwards_futures_callbacks_and_kept_records(keep: bool) -> None:
    loop = asyncio.get_running_loop()
    h = Harness(loop, batch_size=4096, keep_record_futures=keep)
    cluster = make_cluster({0: 1})
    futures = [h.append(0, f"{i:04d}".encode() * 50, 0.0) for i in range(15)]
    called: list[int] = []
    futures[3].add_done_callback(lambda f: called.append(f.result().offset))
    futures[12].add_done_callback(lambda f: called.append(f.result().offset))
    (batch,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    assert _split(h, batch, 1024) > 1
    await asyncio.sleep(0)  # the split batch's watchers run: they must not fire yet
    assert called == [] and not any(f.done() for f in futures)
    new_batches = list(h.acc.deque_for(("t", 0)))
    _complete_in_order(new_batches, 100)
    await asyncio.sleep(0)
    assert sorted(called) == [103, 112]  # each callback once, with its record's new offset
    assert [(await f).offset for f in futures] == list(range(100, 115))
    # The new batches hold the records' futures only when asked to (for the interceptors).
    held = [f for b in new_batches for f in b.record_futures()]
    assert held == (futures if keep else [])


@pytest.mark.parametrize("keep", [False, True])
async def test_a_batch_split_twice_forwards_every_future(keep: bool) -> None:
    # The second split is of a batch the first one made: the futures handed on to it (for
    # the interceptors) still name the first batch until asked, and must be followed there.
    h = Harness(asyncio.get_running_loop(), batch_size=4096, keep_record_futures=keep)
    cluster = make_cluster({0: 1})
    futures = [h.append(0, f"{i:04d}".encode() * 50, 0.0) for i in range(15)]
    (batch,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    assert _split(h, batch, 2048) > 1
    # Split the last new batch again, into batches of one or two records.
    second = h.acc.deque_for(("t", 0))[-1]
    h.acc.deque_for(("t", 0)).remove(second)
    assert _split(h, second, 512, now=2.0) > 1
    # In record order: the first split's batches but the last, then that one's parts (the
    # second split put them at the front of the deque, to be sent first).
    queued = list(h.acc.deque_for(("t", 0)))
    new_batches = [b for b in queued if b.split_from is batch]
    new_batches += [b for b in queued if b.split_from is second]
    assert len(new_batches) == len(queued)
    assert _complete_in_order(new_batches, 0) == 15
    assert [(await f).offset for f in futures] == list(range(15))
    held = [f for b in new_batches for f in b.record_futures()]
    assert held == (futures if keep else [])


async def test_a_finished_batch_kept_by_its_futures_holds_no_buffer() -> None:
    # Callers keep record futures long after delivery (a list of 100,000 of them is common).
    # Each keeps its batch; a deallocated batch must no longer pin its pooled buffer, its
    # parts or its view, nor give the cycle collector more than itself to visit.
    h = Harness(asyncio.get_running_loop(), batch_size=4096, buffer_memory=8192)
    futures = [h.append(0, b"%03d" % i * 100, 0.0) for i in range(3)]
    batch = futures[0]._batch
    buffer = batch.builder.buffer
    _finish(batch, 10)
    assert h.pool.available_memory() == 4096
    h.acc.deallocate(batch)
    assert h.pool.available_memory() == 8192
    referents = gc.get_referents(batch.builder)
    assert not any(r is buffer for r in referents)
    assert not [r for r in referents if isinstance(r, memoryview)]
    assert not [r for r in referents if isinstance(r, (bytearray, list)) and len(r)]
    assert batch.builder.closed and batch.builder.remaining <= 0
    assert batch.record_count == 3
    # Nothing awaited the batch itself: it has no asyncio future to keep either.
    assert not [r for r in gc.get_referents(batch) if isinstance(r, asyncio.Future)]
    assert [(await f).offset for f in futures] == [10, 11, 12]
    # One made late is already done, with the batch's outcome.
    assert batch.future.done() and batch.future.result()[0] == 10
    with pytest.raises(RuntimeError, match="detached"):
        batch.builder.close()
    # A second deallocate (a batch failed on two paths) must not give the buffer back twice.
    h.acc.deallocate(batch)
    assert h.pool.available_memory() == 8192
    assert h.pool.allocate_nowait(4096) is buffer
    assert h.pool.allocate_nowait(4096) is not None
    assert h.pool.allocate_nowait(4096) is None


# ---- RecordFuture callbacks ---------------------------------------------------------------


def _single_batch(h: Harness, count: int) -> tuple[ProducerBatch, list[RecordFuture]]:
    futures = [h.append(0, b"v%d" % i, 0.0) for i in range(count)]
    return futures[0]._batch, futures


async def test_record_callbacks_run_once_in_registration_order() -> None:
    h = Harness(asyncio.get_running_loop())
    batch, (first, second) = _single_batch(h, 2)
    calls: list[tuple[str, int]] = []
    first.add_done_callback(lambda f: calls.append(("a", f.result().offset)))
    first.add_done_callback(lambda f: calls.append(("b", f.result().offset)))
    first.add_done_callback(lambda f: calls.append(("c", f.result().offset)))
    second.add_done_callback(lambda f: calls.append(("d", f.result().offset)))
    batch.builder.close()
    batch.complete(40, -1)
    assert calls == []  # never from inside complete(): on the loop, soon
    await asyncio.sleep(0)
    assert calls == [("a", 40), ("b", 40), ("c", 40), ("d", 41)]
    late: list[int] = []
    first.add_done_callback(lambda f: late.append(f.result().offset))
    await asyncio.sleep(0)
    assert late == [40]
    assert calls == [("a", 40), ("b", 40), ("c", 40), ("d", 41)]


async def test_removed_record_callbacks_are_not_called() -> None:
    h = Harness(asyncio.get_running_loop())
    batch, (future,) = _single_batch(h, 1)
    calls: list[str] = []

    def a(_: Any) -> None:
        calls.append("a")

    def b(_: Any) -> None:
        calls.append("b")

    def c(_: Any) -> None:
        calls.append("c")

    future.add_done_callback(a)
    future.add_done_callback(b)
    future.add_done_callback(a)
    assert future.remove_done_callback(a) == 2  # the first slot and the list alike
    future.add_done_callback(c)
    assert future.remove_done_callback(a) == 0
    batch.builder.close()
    batch.complete(0, -1)
    await asyncio.sleep(0)
    assert calls == ["b", "c"]


async def test_a_raising_record_callback_reaches_the_loop_and_spares_the_others() -> None:
    loop = asyncio.get_running_loop()
    h = Harness(loop)
    batch, (first, second) = _single_batch(h, 2)
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    calls: list[str] = []

    def broken(_: Any) -> None:
        raise RuntimeError("user bug")

    try:
        first.add_done_callback(broken)
        first.add_done_callback(lambda _: calls.append("first"))
        second.add_done_callback(lambda _: calls.append("second"))
        batch.builder.close()
        batch.complete(0, -1)
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert calls == ["first", "second"]
    assert len(reported) == 1
    assert isinstance(reported[0]["exception"], RuntimeError)
    assert reported[0]["future"] is first


async def test_a_cancelled_record_future_calls_its_callbacks_once() -> None:
    h = Harness(asyncio.get_running_loop())
    batch, (future,) = _single_batch(h, 1)
    calls: list[bool] = []
    future.add_done_callback(lambda f: calls.append(f.cancelled()))
    future.add_done_callback(lambda f: calls.append(f.cancelled()))
    assert future.cancel()
    await asyncio.sleep(0)
    assert calls == [True, True]
    batch.builder.close()
    batch.complete(0, -1)  # the record itself is still delivered; no second call
    await asyncio.sleep(0)
    assert calls == [True, True]
    (outcome,) = await asyncio.gather(future, return_exceptions=True)
    assert isinstance(outcome, asyncio.CancelledError)


async def test_a_cancel_message_reaches_gather_and_await_and_callbacks_keep_their_context() -> None:
    h = Harness(asyncio.get_running_loop())
    batch, (cancelled, kept) = _single_batch(h, 2)
    seen: list[tuple[str, object]] = []
    variable: contextvars.ContextVar[str] = contextvars.ContextVar("variable", default="unset")
    context = contextvars.copy_context()
    context.run(variable.set, "from the context")

    def first(_: Any) -> None:
        seen.append(("first", variable.get()))

    def second(_: Any) -> None:
        seen.append(("second", variable.get()))

    # One callback with a context, one without; removing the first leaves the second alone.
    kept.add_done_callback(first, context=context)
    kept.add_done_callback(second)
    kept.add_done_callback(first, context=context)
    assert kept.remove_done_callback(second) == 1
    cancelled.add_done_callback(second)
    assert cancelled.cancel("stopped by the test")
    assert cancelled.remove_done_callback(second) == 0  # cancelling removed it
    assert not cancelled.cancel("again")
    (gathered,) = await asyncio.gather(cancelled, return_exceptions=True)
    assert isinstance(gathered, asyncio.CancelledError)
    assert gathered.args == ("stopped by the test",)
    with pytest.raises(asyncio.CancelledError, match="stopped by the test"):
        await cancelled
    batch.builder.close()
    batch.complete(7, -1)
    await asyncio.sleep(0)
    assert seen == [
        ("second", "unset"),  # the cancelled record's, at cancel()
        ("first", "from the context"),
        ("first", "from the context"),
    ]
    assert (await kept).offset == 8
    with pytest.raises(asyncio.CancelledError):
        cancelled.result()


@pytest.mark.parametrize(
    ("key_size", "value_size"), [(-1, -1), (-1, 0), (0, -1), (3, 100), (2**31 - 1, 2**31 - 1)]
)
async def test_a_record_future_reports_the_sizes_it_was_given(
    key_size: int, value_size: int
) -> None:
    # The two sizes share one int inside the future; None (-1) and Kafka's int32 limits
    # must come back out as they went in, on the future and in the metadata.
    h = Harness(asyncio.get_running_loop())
    batch, _ = _single_batch(h, 1)
    future = RecordFuture(batch, 0, 1_700_000_000_000, key_size, value_size)
    assert (future.key_size, future.value_size) == (key_size, value_size)
    batch.builder.close()
    batch.complete(5, -1)
    metadata = future.result()
    assert (metadata.serialized_key_size, metadata.serialized_value_size) == (key_size, value_size)


# ---- send_many's records without futures (BatchResults runs) --------------------------------


def _open_batch(h: Harness, partition: int, now: float = 0.0) -> ProducerBatch:
    """Open a batch on ``partition`` (its first record has a future) and return it."""
    return h.append(partition, b"first", now)._batch


def _finish(batch: ProducerBatch, base_offset: int, log_append_time: int = -1) -> None:
    batch.builder.close()
    batch.complete(base_offset, log_append_time)


async def test_lazy_records_resolve_in_call_order_like_futures() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    first = _open_batch(h, 0)
    second = _open_batch(h, 1)
    results = BatchResults()
    # Positions 0-5 alternate between the partitions (keyed records do that); position 2
    # has its own timestamp (a ProducerRecord's), position 6 has a future of its own.
    items = [(0, b"k0", b"a"), (1, None, b"bb"), (0, None, b"ccc"), (1, b"k3", b"d")]
    for partition, key, value in items:
        assert h.acc.append_lazy("t", partition, 5, key, value, None, results) is not None
    assert h.acc.append_lazy("t", 0, 9, None, b"eeeee", None, results) is first
    assert h.acc.append_lazy("t", 1, 5, None, b"ffffff", None, results) is second
    results.add_future(h.append(0, b"ggggggg", 0.0))
    assert len(results) == 7
    assert not results.done()
    _finish(first, 100)
    assert not results.done()
    _finish(second, 200, log_append_time=1_700_000_000_000)
    assert results.done()
    metadata = await results
    assert [(m.partition, m.offset) for m in metadata] == [
        (0, 101), (1, 201), (0, 102), (1, 202), (0, 103), (1, 203), (0, 104),
    ]
    assert [m.timestamp for m in metadata] == [5, 1_700_000_000_000, 5, 1_700_000_000_000,
                                               9, 1_700_000_000_000, 0]
    assert [m.timestamp_type for m in metadata[:2]] == [
        TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME,
    ]
    assert [m.serialized_key_size for m in metadata] == [2, -1, -1, 2, -1, -1, -1]
    assert [m.serialized_value_size for m in metadata] == [1, 2, 3, 1, 5, 6, 7]
    # The futures, made on demand, tell the same.
    assert [f.result() for f in results.futures] == metadata
    assert results.futures is results.futures


async def test_bulk_values_make_no_object_per_record() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=1 << 16, buffer_memory=1 << 20)
    batch = _open_batch(h, 0)
    values = [b"%05d" % i for i in range(2000)]
    results = BatchResults()
    gc.collect()
    before = len(gc.get_objects())
    assert h.acc.append_values("t", 0, 7, values, 0, len(values), results) == len(values)
    made = len(gc.get_objects()) - before
    assert made < 20, f"{made} objects for the cyclic GC to walk for 2,000 records"
    _finish(batch, 0)
    metadata = await results
    assert [m.offset for m in metadata] == list(range(1, 2001))
    assert {m.serialized_value_size for m in metadata} == {5}


async def test_split_batch_moves_lazy_records_with_their_offsets() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    cluster = make_cluster({0: 1})
    batch = _open_batch(h, 0)
    values = [f"{i:04d}".encode() * 50 for i in range(14)]
    results = BatchResults()
    assert h.acc.append_values("t", 0, 0, values, 0, len(values), results) == len(values)
    (drained,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    assert drained is batch
    assert _split(h, batch, 1024) > 1
    _complete_in_order(list(h.acc.deque_for(("t", 0))), 50)
    metadata = await results
    assert [m.offset for m in metadata] == list(range(51, 65))
    assert [f.result().offset for f in results.futures] == list(range(51, 65))


async def test_batch_results_raise_the_error_of_the_first_failed_record() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    first = _open_batch(h, 0)
    second = _open_batch(h, 1)
    results = BatchResults()
    for partition in (1, 0, 1, 0):
        h.acc.append_lazy("t", partition, 0, None, b"v", None, results)
    first.fail(KafkaError("partition 0 failed"))
    second.fail(KafkaError("partition 1 failed"))
    with pytest.raises(KafkaError, match="partition 1 failed"):
        await results
    # Each record's future fails with its own batch's error.
    assert [str(f.exception()) for f in results.futures] == [
        "partition 1 failed", "partition 0 failed", "partition 1 failed", "partition 0 failed",
    ]


async def test_batch_results_wait_for_a_batch_split_while_awaited() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    cluster = make_cluster({0: 1})
    batch = _open_batch(h, 0)
    values = [b"x" * 300 for _ in range(6)]
    results = BatchResults()
    h.acc.append_values("t", 0, 0, values, 0, len(values), results)

    async def wait() -> list[Any]:
        return await results

    waiting = asyncio.ensure_future(wait())
    await asyncio.sleep(0)
    (drained,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    assert drained is batch
    _split(h, drained, 1024)
    await asyncio.sleep(0)
    assert not waiting.done()
    _complete_in_order(list(h.acc.deque_for(("t", 0))), 10)
    metadata = await asyncio.wait_for(waiting, 1.0)
    assert [m.offset for m in metadata] == list(range(11, 17))


# ---- RecordFuture and the cyclic GC -------------------------------------------------------

untracked_futures = pytest.mark.skipif(
    not futures_module._UNTRACKED,
    reason="only compiled record futures start untracked (the C helper is not built)",
)


@untracked_futures
async def test_a_record_future_is_tracked_once_it_holds_more_than_its_batch() -> None:
    # Kept by the caller, an untracked future costs the cyclic GC nothing; one that holds a
    # callback, a cancel message or an error can close a cycle, so the GC must see it.
    h = Harness(asyncio.get_running_loop())
    batch, (plain, called, cancelled, asked) = _single_batch(h, 4)
    assert not any(gc.is_tracked(f) for f in (plain, called, cancelled, asked))
    called.add_done_callback(lambda f: None)
    assert cancelled.cancel()
    batch.builder.close()
    batch.fail(KafkaError("failed"))
    assert isinstance(asked.exception(), KafkaError)
    assert [gc.is_tracked(f) for f in (plain, called, cancelled, asked)] == [
        False, True, True, True
    ]
    # A batch that keeps its futures (for interceptors) is in a cycle with each of them.
    kept = Harness(asyncio.get_running_loop(), keep_record_futures=True)
    assert gc.is_tracked(kept.append(0, b"v", 0.0))
    # So are the futures a send_many call makes when asked for them.
    results = BatchResults()
    h.acc.append_lazy("t", 1, 0, None, b"v", None, results)
    assert all(gc.is_tracked(f) for f in results.futures)


@untracked_futures
async def test_the_lists_of_bytes_and_ints_a_filling_batch_keeps_are_out_of_the_cyclic_gc() -> None:
    # A large batch keeps thousands of pieces of its records until it is full, and a
    # send_many run thousands of sizes and places: the GC must not walk them at each young
    # collection. None can be in a cycle: they hold only bytes and ints.
    h = Harness(asyncio.get_running_loop())
    results = BatchResults()
    items: list[object] = [(b"k", b"v")]
    h.append(0, b"first", 0.0)
    batch = h.acc.open_batch("t", 0)
    assert batch is not None
    h.acc.append_values("t", 0, 0, [b"a", b"b"], 0, 2, results)
    h.acc.append_pairs(batch, 0, items, 0, [0], 0, 1, results, 2)  # a key: key sizes too
    h.acc.append_pairs(batch, 0, items, 0, [0], 0, 1, results, 4)  # a gap: places too
    results.count_to(5)
    (run,) = results._runs
    assert run.key_sizes is not None and run.gaps is not None
    assert not any(
        gc.is_tracked(numbers) for numbers in (run.value_sizes, run.key_sizes, run.gaps)
    )
    assert batch.builder.pending_parts and not gc.is_tracked(batch.builder.pending_parts)


@untracked_futures
async def test_a_done_batch_leaves_the_cyclic_gc_only_while_it_can_be_in_no_cycle() -> None:
    # Kept futures keep their batches: an acknowledged batch that let go of its records and
    # buffer holds only atoms, so the GC need not walk it. Builders never can be in a cycle.
    h = Harness(asyncio.get_running_loop())
    batch, futures = _single_batch(h, 2)
    assert not gc.is_tracked(batch.builder)
    assert gc.is_tracked(batch)
    batch.builder.close()
    batch.complete(40, -1)
    h.acc.deallocate(batch)
    assert not gc.is_tracked(batch)
    assert [f.result().offset for f in futures] == [40, 41]
    # Asked for its asyncio future later, it can be in a cycle through the callbacks again.
    assert await batch.future == (40, -1)
    assert gc.is_tracked(batch)

    # A failed batch keeps its error (a traceback can lead back to it): it stays tracked.
    failed = h.append(1, b"f", 0.0)._batch
    failed.builder.close()
    failed.fail(KafkaError("failed"))
    h.acc.deallocate(failed)
    assert gc.is_tracked(failed)

    # So does one whose records wait on it (until it calls them), and one with a future.
    record = h.append(2, b"w", 0.0)
    watched = record._batch
    waiting = asyncio.ensure_future(asyncio.wait_for(record, 1.0))
    await asyncio.sleep(0)
    awaited = h.append(3, b"a", 0.0)._batch
    assert awaited.future is not None
    for each in (watched, awaited):
        each.builder.close()
        each.complete(7, -1)
        h.acc.deallocate(each)
        assert gc.is_tracked(each)
    assert (await waiting).offset == 7


@untracked_futures
async def test_an_acknowledged_record_s_metadata_is_an_untracked_record_metadata() -> None:
    # Made by the C helper in one step: the same named tuple as RecordMetadata(...) makes,
    # equal, hashed alike, each field in its place, and out of the cyclic GC (it holds a
    # topic, ints and a timestamp type, none of which can lead back to it).
    h = Harness(asyncio.get_running_loop())
    first = h.append(3, b"v0", 0.0)
    second = h.append(3, b"v12", 0.0)
    batch = first._batch
    results = BatchResults()
    h.acc.append_values("t", 3, 0, [b"a", b"bcde"], 0, 2, results)
    batch.builder.close()
    batch.complete(40, -1)
    made = second.result()
    expected = RecordMetadata(
        topic="t",
        partition=3,
        offset=41,
        timestamp=second.timestamp,
        serialized_key_size=-1,
        serialized_value_size=3,
        timestamp_type=TimestampType.CREATE_TIME,
    )
    assert type(made) is RecordMetadata and made == expected and hash(made) == hash(expected)
    assert made._asdict() == expected._asdict()
    assert not gc.is_tracked(made) and not gc.is_tracked(first.result())
    run_metadata = await results
    assert list(run_metadata) == [
        RecordMetadata("t", 3, 42, 0, -1, 1, TimestampType.CREATE_TIME),
        RecordMetadata("t", 3, 43, 0, -1, 4, TimestampType.CREATE_TIME),
    ]
    assert [type(m) for m in run_metadata] == [RecordMetadata, RecordMetadata]
    assert not any(gc.is_tracked(m) for m in run_metadata)
    # Log-append time: the broker's timestamp and its type.
    record = h.append(2, b"v0", 0.0)
    other = record._batch
    other.builder.close()
    other.complete(7, 1_700_000_000_000)
    assert record.result() == RecordMetadata(
        "t", 2, 7, 1_700_000_000_000, -1, 2, TimestampType.LOG_APPEND_TIME
    )
    # Only a named tuple class with one item per field: not tuple itself, nor a struct
    # sequence (hidden fields), nor too few items.
    for unfit, items in ((dict, (1,)), (tuple, (1,)), (type(sys.version_info), (1,) * 5)):
        with pytest.raises(TypeError, match="named tuple class"):
            futures_module._untracked_tuple(unfit, *items)
    with pytest.raises(TypeError, match="one item per field"):
        futures_module._untracked_tuple(RecordMetadata, "t", 0)


def test_a_topic_given_as_a_str_subclass_is_kept_as_a_plain_str() -> None:
    # Batches and record metadata hold the topic name and are out of the cyclic GC: an
    # object of a str subclass could refer back to them and make a cycle no one collects.
    class Name(str):
        pass

    checked = validate_topic(Name("orders"))
    assert type(checked) is str and checked == "orders"


@untracked_futures
def test_an_untracked_batch_leaves_no_cycle_through_its_loop_uncollected() -> None:
    # An untracked object's references look like outside references to the collector. A
    # finished batch refers to its loop only weakly, so a garbage cycle through the loop
    # (its exception handler holding the caller's results, which hold the batch) is freed.
    loop = asyncio.new_event_loop()
    h = Harness(loop)
    batch = h.append(0, b"v", 0.0)._batch
    results = BatchResults()
    h.acc.append_values("t", 0, 0, [b"a", b"b"], 0, 2, results)  # a run refers to the batch
    batch.builder.close()
    batch.complete(0, -1)
    h.acc.deallocate(batch)
    assert not gc.is_tracked(batch)

    class App:
        results: BatchResults

    app = App()
    app.results = results
    loop.set_exception_handler(lambda _loop, _context, app=app: None)
    loop.close()
    app_alive, loop_alive = weakref.ref(app), weakref.ref(loop)
    del app, results, batch, loop, h
    gc.collect()
    assert app_alive() is None and loop_alive() is None


class _Sentinel:
    pass


def _raise_first(futures: list[RecordFuture], sentinel: _Sentinel) -> BaseException:
    # The raised error's traceback holds this frame, and so the futures and the sentinel.
    try:
        futures[0].result()
    except KafkaError as exc:
        return exc
    raise AssertionError("the record did not fail")


async def test_a_failed_record_raised_beside_its_batch_mates_leaves_no_cycle_behind() -> None:
    # The frame that catches a record's error often holds other futures of the same batch.
    # Were the batch's own error raised, it would refer through that frame back to the
    # batch, in a cycle through futures the GC does not track: nothing of it would ever be
    # freed. Each future raises a copy of the error instead.
    h = Harness(asyncio.get_running_loop())
    batch, futures = _single_batch(h, 3)
    batch.builder.close()
    batch.fail(KafkaError("failed"))
    sentinel = _Sentinel()
    alive = weakref.ref(sentinel)
    error = _raise_first(futures, sentinel)
    assert error.__traceback__ is not None and batch.error is not error
    del h, batch, futures, sentinel, error
    gc.collect()
    assert alive() is None


async def test_each_record_future_hands_out_one_faithful_copy_of_its_batch_error() -> None:
    h = Harness(asyncio.get_running_loop())
    batch, (first, second) = _single_batch(h, 2)
    cause = ConnectionResetError("reset")
    original = UnknownServerError("broker said no", retriable=True, code=7)
    original.__cause__ = cause
    batch.builder.close()
    batch.fail(original)
    error = first.exception()
    assert type(error) is UnknownServerError and error is not original
    assert (error.args, error.retriable, error.code) == (original.args, True, 7)
    assert error.__cause__ is cause
    # The same copy every time, from exception() and result() and await alike.
    assert first.exception() is error
    with pytest.raises(UnknownServerError) as raised:
        first.result()
    assert raised.value is error
    with pytest.raises(UnknownServerError) as raised:
        await first
    assert raised.value is error
    # Another record of the batch has its own.
    assert second.exception() is not error and str(second.exception()) == "broker said no"


# ---- compressed batches sized by the expected compression ratio (Java's estimator) ---------


async def test_the_compression_ratio_estimate_moves_as_the_java_clients_does() -> None:
    h = Harness(asyncio.get_running_loop(), compression=CompressionType.ZSTD)
    acc = h.acc
    assert acc.compression_ratio("t") == 1.0
    # Better than expected: down by 0.005 per batch, never below what was seen.
    acc.observe_compression("t", 0.3)
    assert acc.compression_ratio("t") == pytest.approx(0.995)
    for _ in range(200):
        acc.observe_compression("t", 0.3)
    assert acc.compression_ratio("t") == pytest.approx(0.3)
    # Worse than expected: up at once, by at least 0.05.
    acc.observe_compression("t", 0.32)
    assert acc.compression_ratio("t") == pytest.approx(0.35)
    acc.observe_compression("t", 0.9)
    assert acc.compression_ratio("t") == pytest.approx(0.9)
    # Per topic.
    assert acc.compression_ratio("other") == 1.0


async def test_without_a_codec_there_is_no_estimate() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=16384, buffer_memory=1 << 24)
    h.acc.observe_compression("t", 0.1)
    assert h.acc.compression_ratio("t") == 1.0
    h.append(0, b"x" * 100, 0.0)
    assert h.acc.buffer_size_for(100, "t", 0) == 16384


def _settle(acc: RecordAccumulator, compressed: int, uncompressed: int, topic: str = "t") -> None:
    for _ in range(300):
        acc.observe_compression(topic, compressed / uncompressed)


async def test_compressed_batches_get_buffers_for_what_compresses_to_batch_size() -> None:
    h = Harness(
        asyncio.get_running_loop(),
        compression=CompressionType.LZ4,
        batch_size=16384,
        buffer_memory=1 << 24,
    )
    acc = h.acc
    # No estimate yet: batch_size, the size the pool keeps for reuse.
    h.append(0, b"x" * 100, 0.0)
    assert acc.buffer_size_for(100, "t", 0) == 16384
    _settle(acc, 40, 100)
    # While the partition's last batch is full: records of (16384 - 61) / (0.4 * 1.05)
    # bytes, which are expected to compress to batch_size.
    assert acc.buffer_size_for(100, "t", 0) == 61 + -(-(16384 - 61) * 100 // 42)
    # A partition without a batch waiting (its records come slower than batches leave)
    # keeps batch_size buffers: many quiet partitions do not hold big buffers.
    assert acc.buffer_size_for(100, "t", 1) == 16384
    # A record bigger than either still gets a buffer of its own size.
    assert acc.buffer_size_for(100_000, "t", 0) == 100_000 + 61
    assert acc.buffer_size_for(100_000, "t", 1) == 100_000 + 61
    # However well records compress, at most 8 batch sizes.
    _settle(acc, 1, 1000)
    assert acc.buffer_size_for(100, "t", 0) == 8 * 16384
    h.append(0, b"x" * 100, 0.0, topic="another topic")
    assert acc.buffer_size_for(100, "another topic", 0) == 16384


def _zstd_full_partition(buffer_memory: int) -> RecordAccumulator:
    """A zstd accumulator whose topic compresses 10:1 and whose partition 0 has a batch."""
    h = Harness(
        asyncio.get_running_loop(),
        compression=CompressionType.ZSTD,
        batch_size=16384,
        buffer_memory=buffer_memory,
    )
    h.append(0, b"x" * 100, 0.0)
    _settle(h.acc, 1, 10)
    return h.acc


async def test_a_small_buffer_memory_caps_compressed_batches() -> None:
    # An eighth of buffer_memory, so the pool still holds several batches...
    assert _zstd_full_partition(256 * 1024).buffer_size_for(100, "t", 0) == 32 * 1024
    # ... but never less than batch_size.
    assert _zstd_full_partition(64 * 1024).buffer_size_for(100, "t", 0) == 16384


def _zstd_4k_filled(count: int) -> tuple[Harness, list[bytes], list[RecordFuture]]:
    """4 KiB zstd batches of a topic that compresses 4:1, and ``count`` records appended to
    partition 0."""
    h = Harness(
        asyncio.get_running_loop(),
        compression=CompressionType.ZSTD,
        batch_size=4096,
        buffer_memory=1 << 22,
    )
    _settle(h.acc, 25, 100)
    values = [bytes([65 + i % 4]) * 100 for i in range(count)]
    return h, values, [h.append(0, value, 0.0) for value in values]


async def test_a_compressed_batch_takes_records_up_to_its_larger_buffer() -> None:
    h, values, futures = _zstd_4k_filled(400)
    first, second, *_ = list(h.acc.deque_for(("t", 0)))
    # The partition's first batch: batch_size. The next one, started when the first was
    # full: about (4096 - 61) / (0.25 * 1.05) bytes of records.
    assert first.builder.size_in_bytes <= 4096
    assert second.builder.size_in_bytes > 3 * 4096
    assert second.record_count == sum(1 for f in futures if f._batch is second)
    # Counted for a request as what it is expected to take compressed.
    assert h.acc.estimated_size(second) < 4096 < second.size_in_bytes
    view = second.builder.close()
    # Compressed, it is back within batch_size; and it decodes to the records appended.
    assert len(view) <= 4096
    assert h.acc.estimated_size(second) == len(view)
    (decoded,) = decode_record_batches(bytes(view))
    start = first.record_count
    assert [r.value for r in decoded.records] == values[start : start + second.record_count]


async def test_a_split_sets_the_estimate_back_to_at_least_one() -> None:
    h, _, _ = _zstd_4k_filled(100)
    batch = h.acc.deque_for(("t", 0)).popleft()
    view = batch.builder.close()
    records = decode_record_batches(bytes(view))[0].records
    assert len(h.acc.split_and_reenqueue(batch, records, 1.0)[0]) >= 1
    assert h.acc.compression_ratio("t") == 1.0
