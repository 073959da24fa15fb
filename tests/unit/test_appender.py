"""RecordAppender stepped without a broker: what ``append`` returns when a record is appended,
when it must wait for metadata, and when it must wait for memory only; and what a new batch
tells the appender's collaborators."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aioproducer.accumulator import RecordAccumulator
from aioproducer.appender import PendingRecord, RecordAppender
from aioproducer.buffer_pool import BufferPool
from aioproducer.errors import ProducerClosedError
from aioproducer.futures import BatchResults, RecordFuture
from aioproducer.metadata import Broker, Metadata, PartitionInfo, TopicInfo
from aioproducer.partitioner import Partitioner, RoundRobinPartitioner
from aioproducer.protocol.compression import CompressionType

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


class Harness:
    def __init__(
        self,
        *,
        buffer_memory: int = 1 << 20,
        partitioner: Partitioner | None = None,
        transactions: RecordingTransactions | None = None,
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
            transactions=transactions,
            key_serializer=None,
            value_serializer=str.encode,
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
    waiting = asyncio.ensure_future(h.appender.append_when_memory_frees(pending, 60.0))
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
