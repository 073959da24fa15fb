"""RecordAppender stepped without a broker: what ``append`` returns when a record is appended,
when it must wait for metadata, and when it must wait for memory only; and what a new batch
tells the appender's collaborators."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from aioproducer._core.accumulator import RecordAccumulator
from aioproducer._core.appender import PendingRecord, RecordAppender
from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.futures import BatchResults, RecordFuture
from aioproducer._core.metadata import Broker, Metadata, PartitionInfo, TopicInfo
from aioproducer._core.partitioner import (
    DefaultPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    murmur2,
    to_positive,
)
from aioproducer.compiled import compiled_modules
from aioproducer.errors import KafkaError, ProducerClosedError
from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.record_reader import decode_record_batches

BATCH_SIZE = 1024
TOPIC = "t"


class CountingSender:
    def __init__(self) -> None:
        self.wakeups = 0

    def wakeup(self) -> None:
        self.wakeups += 1


class RecordingTransactions:
    def __init__(self) -> None:
        self.added: list[tuple[str, int]] = []

    def maybe_add_partition(self, tp: tuple[str, int]) -> None:
        self.added.append(tp)


class CountingPartitioner:
    """Round-robin over the partitions, counting how often it is asked."""

    def __init__(self) -> None:
        self.inner = RoundRobinPartitioner()
        self.calls = 0

    def partition(
        self, topic: str, key_bytes: bytes | None, partition_count: int, available: Sequence[int]
    ) -> int:
        self.calls += 1
        return self.inner.partition(topic, key_bytes, partition_count, available)


class NoFaults:
    """Connections that refused nothing and reached every broker."""

    def fatal_error(self, since: float = 0.0) -> KafkaError | None:
        return None

    def unreachable_summary(self) -> str | None:
        return None


class Harness:
    def __init__(
        self,
        *,
        buffer_memory: int = 1 << 20,
        partitioner: Partitioner | None = None,
        transactions: RecordingTransactions | None = None,
        value_serializer: Callable[[str], bytes] | None = str.encode,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.pool = BufferPool(buffer_memory, BATCH_SIZE)
        self.metadata = Metadata(max_age=300.0, max_idle=300.0, retry_backoff=0.1, loop=loop)
        self.accumulator = RecordAccumulator(
            pool=self.pool,
            batch_size=BATCH_SIZE,
            linger=0.005,
            delivery_timeout=120.0,
            retry_backoff=0.1,
            compression=CompressionType.NONE,
            compression_level=None,
            loop=loop,
        )
        self.sender = CountingSender()
        self.closed = False
        self.appender = RecordAppender(
            metadata=self.metadata,
            accumulator=self.accumulator,
            pool=self.pool,
            partitioner=partitioner or RoundRobinPartitioner(),
            sender=self.sender,
            connections=NoFaults(),
            transactions=transactions,
            key_serializer=None,
            value_serializer=value_serializer,
            intercept=None,
            check_sendable=lambda: None,
            check_running=self.check_running,
            max_request_size=1 << 20,
            buffer_memory=buffer_memory,
        )
        self.appender.open = True

    def check_running(self) -> None:
        if self.closed:
            raise ProducerClosedError("closed by the test")

    def know_topic(self, partitions: int = 2) -> None:
        self.metadata.add_topic(TOPIC, 0.0)
        self.metadata.update(
            [Broker(1, "broker1", 9092)],
            [TopicInfo(TOPIC, tuple(PartitionInfo(p, 1) for p in range(partitions)))],
            0.0,
        )


async def test_an_appended_record_comes_back_as_its_future() -> None:
    h = Harness()
    h.know_topic()
    result = h.appender.append(TOPIC, "v", None, 1, 5, None)
    assert isinstance(result, RecordFuture)
    assert result
    assert result._batch.partition == 1
    assert h.sender.wakeups == 1, "a new batch did not wake the sender"


async def test_a_record_for_an_unknown_topic_waits_for_metadata_prepared() -> None:
    h = Harness()
    result = h.appender.append(TOPIC, "v", None, None, 5, [("h", b"x")])
    assert isinstance(result, PendingRecord)
    assert not result, "a pending record must be false"
    assert not result.needs_memory
    assert (result.topic, result.partition, result.target) == (TOPIC, None, -1)
    assert (result.timestamp, result.key, result.value) == (5, None, b"v")
    assert result.headers == [("h", b"x")]
    assert h.sender.wakeups == 0


async def test_a_record_short_of_memory_keeps_the_partition_chosen_for_it() -> None:
    partitioner = CountingPartitioner()
    h = Harness(buffer_memory=BATCH_SIZE, partitioner=partitioner)
    h.know_topic()
    first = h.appender.append(TOPIC, "a", None, None, 5, None)
    assert isinstance(first, RecordFuture) and first._batch.partition == 0
    pending = h.appender.append(TOPIC, "b", None, None, 5, None)
    assert isinstance(pending, PendingRecord)
    assert pending.needs_memory and pending.target == 1
    assert partitioner.calls == 2
    waiting = asyncio.ensure_future(h.appender.append_pending(pending, 60.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    h.accumulator.deallocate(first._batch)
    future = await asyncio.wait_for(waiting, 60.0)
    assert future._batch.partition == 1
    assert partitioner.calls == 2, "the partitioner was asked again after the wait"


async def test_a_new_batch_tells_the_metadata_the_transaction_and_the_sender() -> None:
    transactions = RecordingTransactions()
    h = Harness(transactions=transactions)
    h.know_topic()
    h.appender.append(TOPIC, "a", None, 0, 5, None)
    h.appender.append(TOPIC, "b", None, 0, 5, None)  # joins the open batch
    h.appender.append(TOPIC, "c", None, 1, 5, None)
    assert transactions.added == [(TOPIC, 0), (TOPIC, 1)]
    assert h.sender.wakeups == 2
    assert TOPIC in h.metadata.topics


async def test_send_many_returns_the_item_that_waits_and_where_to_go_on() -> None:
    h = Harness(buffer_memory=BATCH_SIZE)
    h.know_topic()
    results = BatchResults()
    items = ["a", "b", "x" * 600, "y" * 600, "z"]
    index, _, pending = h.appender.append_many(TOPIC, 0, 5, items, 0, 0, results)
    # The fourth value needs a second batch, and the pool holds one: it waits for memory,
    # prepared, and the next item to take is the one after it.
    assert index == 4
    assert isinstance(pending, PendingRecord)
    assert pending.needs_memory and pending.target == 0 and pending.value == b"y" * 600
    assert len(results) == 3


def _send_many(h: Harness, items: list[object]) -> BatchResults:
    """append_many called as send_many calls it, with memory enough for every batch."""
    results = BatchResults()
    index = run_end = 0
    while index < len(items):
        index, run_end, pending = h.appender.append_many(
            TOPIC, None, 5, items, index, run_end, results
        )
        assert pending is None, "no record should wait here"
    return results


def _stored(h: Harness) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """Each partition's records, batch after batch, as the batches were written."""
    stored: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for partition in range(len(h.metadata.cluster.topics[TOPIC].partitions)):
        for batch in h.accumulator.deque_for((TOPIC, partition)):
            if not batch.builder.closed:
                batch.builder.close()
            (decoded,) = decode_record_batches(bytes(batch.builder.closed_view or b""))
            stored.setdefault(partition, []).extend(
                (record.key, record.value) for record in decoded.records
            )
    return stored


async def test_send_many_pairs_keep_each_partitions_order_and_each_records_place() -> None:
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None)
    h.know_topic(partitions=3)
    # Values of different sizes, so that batches fill at different items in each partition;
    # more items than one chunk, a few batches per partition.
    items: list[object] = [
        (f"key-{i}".encode(), bytes([i % 251]) * (5 + i % 37)) for i in range(1500)
    ]
    results = _send_many(h, items)
    assert len(results) == len(items)
    stored = _stored(h)
    for partition, records in stored.items():
        expected = [
            item
            for item in items
            if to_positive(murmur2(item[0])) % 3 == partition  # type: ignore[index]
        ]
        assert records == expected, f"partition {partition} holds its records out of order"
    assert sum(map(len, stored.values())) == len(items)
    # Every record's future and metadata is the record's own: acknowledge each batch at an
    # offset that tells the batches apart, then read the metadata back.
    for partition in range(3):
        base = 0
        for batch in h.accumulator.deque_for((TOPIC, partition)):
            batch.complete(base, -1)
            base += batch.record_count
    metadata = await results
    offsets = {0: 0, 1: 0, 2: 0}
    for item, meta, future in zip(items, metadata, results.futures, strict=True):
        key, value = item  # type: ignore[misc]
        partition = to_positive(murmur2(key)) % 3
        assert (meta.partition, meta.offset) == (partition, offsets[partition])
        assert (meta.serialized_key_size, meta.serialized_value_size) == (len(key), len(value))
        assert future.result() == meta
        offsets[partition] += 1


async def test_send_many_pairs_stop_at_the_first_record_that_must_wait() -> None:
    h = Harness(
        buffer_memory=2 * BATCH_SIZE,
        partitioner=DefaultPartitioner(BATCH_SIZE),
        value_serializer=None,
    )
    h.know_topic(partitions=2)
    keys = {0: b"", 1: b""}
    number = 0
    while not (keys[0] and keys[1]):
        key = str(number).encode()
        keys.setdefault(to_positive(murmur2(key)) % 2, key)
        keys[to_positive(murmur2(key)) % 2] = keys[to_positive(murmur2(key)) % 2] or key
        number += 1
    # Both partitions get a batch; then partition 0's fills up while partition 1's has room.
    # The pool has no memory for a third batch: the first record of partition 0 past its
    # full batch must wait, and nothing after it may be taken, not even partition 1's.
    items: list[object] = []
    for _ in range(12):
        items.append((keys[0], b"a" * 100))
        items.append((keys[1], b"b" * 10))
    results = BatchResults()
    index, _, pending = h.appender.append_many(TOPIC, None, 5, items, 0, 0, results)
    assert isinstance(pending, PendingRecord) and pending.needs_memory
    assert pending.key == keys[0] and pending.target == 0
    assert len(results) == index - 1, "the waiting item is not among the results yet"
    stored = _stored(h)
    taken = items[: index - 1]
    assert stored[0] == [item for item in taken if item[0] == keys[0]]  # type: ignore[index]
    assert stored[1] == [item for item in taken if item[0] == keys[1]]  # type: ignore[index]
    assert sum(map(len, stored.values())) == index - 1


async def test_send_many_pairs_under_partitioner_ignore_keys_move_on_as_batches_fill() -> None:
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE, ignore_keys=True), value_serializer=None)
    h.know_topic(partitions=4)
    items: list[object] = [(b"same key", b"v" * 100) for _ in range(100)]
    _send_many(h, items)
    # Ten kilobytes through a sticky partitioner of 1 KiB batches: it moved on (each record
    # is told to it, as the Java client tells its built-in partitioner).
    assert len(_stored(h)) > 1


async def test_send_under_partitioner_ignore_keys_moves_on_as_batches_fill() -> None:
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE, ignore_keys=True), value_serializer=None)
    h.know_topic(partitions=4)
    partitions = set()
    for _ in range(100):
        future = h.appender.append(TOPIC, b"v" * 100, b"same key", None, 5, None)
        assert isinstance(future, RecordFuture)
        partitions.add(future._batch.partition)
    assert len(partitions) > 1


async def test_send_many_asks_a_custom_partitioner_once_per_plain_value() -> None:
    # Plain values take a bulk path that picks a partition per batch, as the built-in sticky
    # partitioner does; a round-robin partitioner must be asked once per record instead,
    # as send() asks it, or a run of values lands in one partition.
    partitioner = CountingPartitioner()
    h = Harness(partitioner=partitioner, value_serializer=None)
    h.know_topic(partitions=3)
    results = _send_many(h, [b"v%d" % i for i in range(9)])
    assert partitioner.calls == 9
    assert {p: len(r) for p, r in _stored(h).items()} == {0: 3, 1: 3, 2: 3}
    assert len(results) == 9


async def test_send_many_asks_a_subclass_with_its_own_partition_once_per_plain_value() -> None:
    # Where nothing is compiled the built-in partitioner can be subclassed: one with its own
    # partition() is asked per record too, not once per batch as the sticky choice is.
    try:

        class Alternating(DefaultPartitioner):
            calls = 0

            def partition(
                self,
                topic: str,
                key_bytes: bytes | None,
                partition_count: int,
                available: Sequence[int],
            ) -> int:
                Alternating.calls += 1
                return Alternating.calls % partition_count

        partitioner = Alternating(BATCH_SIZE)
    except TypeError:  # raised by the class or by making one, as the version goes
        # Compiled, the built-in partitioner cannot be subclassed: no partition() but its
        # own can be asked once per batch.
        assert "aioproducer._core.partitioner" in compiled_modules()
        return
    h = Harness(partitioner=partitioner, value_serializer=None)
    h.know_topic(partitions=2)
    _send_many(h, [b"v%d" % i for i in range(8)])
    assert Alternating.calls == 8
    assert {p: len(r) for p, r in _stored(h).items()} == {0: 4, 1: 4}


async def test_send_many_pairs_after_plain_values_in_one_batch_keep_their_places() -> None:
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None)
    h.know_topic(partitions=1)
    # Runs of plain values and of pairs, one after another into the same batches.
    items: list[object] = [
        (b"k%d" % i, b"v%d" % i) if i % 10 < 5 else b"v%d" % i for i in range(300)
    ]
    results = _send_many(h, items)
    base = 0
    for batch in h.accumulator.deque_for((TOPIC, 0)):
        batch.complete(base, -1)
        base += batch.record_count
    metadata = await results
    assert [meta.offset for meta in metadata] == list(range(300))
    assert [meta.serialized_key_size for meta in metadata] == [
        len(item[0]) if isinstance(item, tuple) else -1 for item in items
    ]
    assert [future.result().offset for future in results.futures] == list(range(300))
    assert _stored(h)[0] == [item if isinstance(item, tuple) else (None, item) for item in items]
