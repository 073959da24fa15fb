"""Record futures under asyncio's own functions: the ways users wait for many records.

``asyncio.gather``, ``wait``, ``as_completed``, ``shield`` and ``wait_for`` take a
:class:`~aioproducer.RecordFuture` as a future (``asyncio.isfuture``), with no task made per
record. Each test runs the real asyncio function over futures of records appended to a real
accumulator, and finishes the batches as the sender would (acknowledged, failed, split).

The expectations, as asyncio users know them from asyncio's own futures:

- ``gather`` returns each record's :class:`~aioproducer.RecordMetadata`, in the order given;
  a failed record makes it raise that record's error; ``return_exceptions=True`` puts the
  error in its place instead.
- Cancelling a ``gather`` (or a ``wait_for`` that times out) cancels the record futures it
  holds, and cancelling a record future only detaches it: the record stays in its batch
  and is delivered, as with a record handed to the Java producer, whose futures cannot
  cancel a send. Records nobody cancelled keep their results.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aioproducer import RecordFuture, RecordMetadata
from aioproducer._core.accumulator import ProducerBatch, RecordAccumulator
from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.metadata import Broker, Cluster, PartitionInfo, TopicInfo
from aioproducer.errors import KafkaError, NotLeaderOrFollowerError
from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.record_reader import decode_record_batches
from aioproducer.records import TimestampType

TIMESTAMP = 1_700_000_000_000


class Records:
    """Records appended to an accumulator (1 KiB batches); their futures and batches."""

    def __init__(self, count: int, partitions: int = 1, batch_size: int = 1024) -> None:
        loop = asyncio.get_running_loop()
        self.pool = BufferPool(1 << 20, batch_size)
        self.accumulator = RecordAccumulator(
            pool=self.pool, loop=loop, batch_size=batch_size, linger=0.005, delivery_timeout=120.0,
            retry_backoff=0.1, compression=CompressionType.NONE, compression_level=None,
        )
        self.futures = [self.append(n % partitions, b"value-%04d" % n) for n in range(count)]

    def append(self, partition: int, value: bytes) -> RecordFuture:
        """One record of ``value`` on ``partition``; its future."""
        accumulator = self.accumulator
        future = accumulator.try_append("t", partition, TIMESTAMP, None, value, None)
        if future is None:
            size = accumulator.buffer_size_for(len(value) + 30, "t", partition)
            buffer = self.pool.allocate_nowait(size)
            assert buffer is not None
            future = accumulator.append_to_new_batch(
                "t", partition, TIMESTAMP, None, value, None, buffer, 0.0
            )
        return future

    @property
    def batches(self) -> list[ProducerBatch]:
        """The batches, in the order their first record was appended."""
        seen: dict[int, ProducerBatch] = {}
        for future in self.futures:
            seen.setdefault(id(future._batch), future._batch)
        return list(seen.values())

    def acknowledge(self, batch: ProducerBatch, base_offset: int = 0) -> None:
        """Finish ``batch`` as a successful Produce answer does."""
        batch.builder.close()
        batch.complete(base_offset, -1)

    def acknowledge_all(self) -> None:
        """Acknowledge every batch, offsets growing per partition from 0."""
        next_offset: dict[int, int] = {}
        for batch in self.batches:
            base = next_offset.get(batch.partition, 0)
            self.acknowledge(batch, base)
            next_offset[batch.partition] = base + batch.record_count

    def expected(self) -> list[tuple[int, int]]:
        """(partition, offset) of each record once acknowledge_all() ran."""
        seen: dict[int, int] = {}
        out = []
        for future in self.futures:
            partition = future._batch.partition
            out.append((partition, seen.get(partition, 0)))
            seen[partition] = seen.get(partition, 0) + 1
        return out


def _places(metadata: list[Any]) -> list[tuple[int, int]]:
    return [(m.partition, m.offset) for m in metadata]


async def test_record_futures_are_asyncio_futures_to_asyncio() -> None:
    records = Records(1)
    (future,) = records.futures
    assert asyncio.isfuture(future)
    assert asyncio.ensure_future(future) is future  # no task wraps it
    assert future.get_loop() is asyncio.get_running_loop()


async def test_gather_returns_the_metadata_in_the_order_given() -> None:
    records = Records(300, partitions=3)
    assert len(records.batches) > 3  # records of several batches, interleaved
    order = records.futures[::-1]  # given in another order than sent
    waiting = asyncio.ensure_future(asyncio.gather(*order))
    await asyncio.sleep(0)
    assert not waiting.done()
    records.acknowledge_all()
    metadata = await asyncio.wait_for(waiting, 10)
    assert _places(metadata) == records.expected()[::-1]
    assert all(type(m) is RecordMetadata for m in metadata)
    assert metadata[-1] == RecordMetadata(
        "t", 0, 0, TIMESTAMP, -1, len(b"value-0000"), TimestampType.CREATE_TIME
    )
    # Gathering records already acknowledged gives the same.
    assert _places(await asyncio.gather(*records.futures)) == records.expected()


async def test_a_failed_record_makes_gather_raise_its_error() -> None:
    records = Records(30, partitions=2)
    first, *rest = records.batches
    waiting = asyncio.ensure_future(asyncio.gather(*records.futures))
    await asyncio.sleep(0)
    first.fail(NotLeaderOrFollowerError("leader moved"))
    with pytest.raises(NotLeaderOrFollowerError, match="leader moved") as raised:
        await asyncio.wait_for(waiting, 10)
    assert raised.value.retriable
    # The others were not touched by gather's failure: they still deliver.
    for batch in rest:
        records.acknowledge(batch)
    assert all(f.done() and not f.cancelled() for f in records.futures)
    outcomes = [f.exception() for f in records.futures]
    failed = [f for f in records.futures if f._batch is first]
    assert [type(e) for e, f in zip(outcomes, records.futures, strict=True) if f in failed] == [
        NotLeaderOrFollowerError
    ] * len(failed)
    assert sum(e is None for e in outcomes) == len(records.futures) - len(failed)


async def test_gather_with_return_exceptions_puts_each_error_in_its_place() -> None:
    records = Records(30, partitions=2)
    first, *rest = records.batches
    waiting = asyncio.ensure_future(asyncio.gather(*records.futures, return_exceptions=True))
    await asyncio.sleep(0)
    first.fail(KafkaError("batch failed"))
    for batch in rest:
        records.acknowledge(batch)
    outcomes = await asyncio.wait_for(waiting, 10)
    for future, outcome in zip(records.futures, outcomes, strict=True):
        if future._batch is first:
            assert isinstance(outcome, KafkaError) and str(outcome) == "batch failed"
        else:
            assert isinstance(outcome, RecordMetadata)
    # Each record hands out one copy of the batch's error, the same every time it is asked.
    failed = records.futures[0]
    assert failed._batch is first
    assert outcomes[0] is failed.exception() is not first.error


async def test_cancelling_a_gather_detaches_its_records_and_delivers_them() -> None:
    records = Records(40, partitions=2)
    bystander = records.futures[0]  # not gathered: its result must not change
    gathered = records.futures[1:]
    waiting = asyncio.ensure_future(asyncio.gather(*gathered))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert all(f.cancelled() for f in gathered)
    # The records stay in their batches, and the batches are delivered whole.
    assert sum(batch.record_count for batch in records.batches) == 40
    records.acknowledge_all()
    await asyncio.sleep(0)
    assert bystander.result().offset == 0
    # A record's metadata is still there for whoever sent it by another way (send_many's
    # results, a second future): a new future for the same place reads it.
    second = RecordFuture(gathered[0]._batch, gathered[0].relative_offset, TIMESTAMP, -1, 10)
    assert second.result().offset == records.expected()[1][1]
    with pytest.raises(asyncio.CancelledError):
        gathered[0].result()


async def test_wait_for_a_gather_times_out_and_the_records_are_still_delivered() -> None:
    records = Records(10)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.gather(*records.futures), 0.01)
    assert all(f.cancelled() for f in records.futures)
    records.acknowledge_all()
    assert records.batches[0].final and records.batches[0].error is None


async def test_wait_for_one_record() -> None:
    records = Records(2)
    first, second = records.futures
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(first, 0.01)
    assert first.cancelled() and not second.cancelled()
    asyncio.get_running_loop().call_soon(records.acknowledge_all)
    assert (await asyncio.wait_for(second, 10)).offset == 1


async def test_cancelling_a_task_that_awaits_a_record_detaches_that_future_only() -> None:
    # As a task's cancellation cancels the asyncio future it awaits, on every Python (from
    # 3.12, asyncio.wait_for's timeout cancels the task rather than the awaited future).
    records = Records(2)
    first, second = records.futures

    async def wait(future: RecordFuture) -> object:
        return await future

    task = asyncio.ensure_future(wait(first))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert first.cancelled() and not second.cancelled()
    records.acknowledge_all()  # the record itself is still delivered
    assert records.batches[0].final and records.batches[0].error is None
    assert (await second).offset == 1


async def test_asyncio_wait_returns_done_and_pending_and_leaves_no_callback() -> None:
    records = Records(30, partitions=2)
    first, second = records.batches[:2]
    calls: list[RecordFuture] = []
    records.futures[0].add_done_callback(calls.append)  # the user's own, kept by wait()
    records.acknowledge(first)
    done, pending = await asyncio.wait(records.futures, timeout=0.01)
    assert done == {f for f in records.futures if f._batch is first}
    assert pending == set(records.futures) - done
    # wait() removed its callback from each pending record: finishing them calls nothing
    # of wait's, and the user's callback ran once.
    for future in pending:
        assert future._callbacks is None
    for batch in records.batches[1:]:
        records.acknowledge(batch)
    await asyncio.sleep(0)
    assert calls == [records.futures[0]]
    done, pending = await asyncio.wait(records.futures, return_when=asyncio.FIRST_EXCEPTION)
    assert not pending and second.final


async def test_as_completed_yields_every_record() -> None:
    records = Records(30, partitions=3)
    asyncio.get_running_loop().call_soon(records.acknowledge_all)
    seen = [await next_done for next_done in asyncio.as_completed(records.futures, timeout=10)]
    assert sorted(_places(seen)) == sorted(records.expected())


async def test_shield_keeps_the_record_future_from_a_cancelled_waiter() -> None:
    records = Records(1)
    (future,) = records.futures

    async def wait() -> RecordMetadata:
        return await asyncio.shield(future)

    task = asyncio.ensure_future(wait())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not future.cancelled()  # shielded
    records.acknowledge_all()
    assert (await asyncio.shield(future)).offset == 0
    assert (await future).offset == 0


async def test_a_removed_callback_is_not_called_and_others_are() -> None:
    records = Records(2)
    first, second = records.futures
    calls: list[str] = []

    def only(_: Any) -> None:
        calls.append("only")

    def kept(_: Any) -> None:
        calls.append("kept")

    first.add_done_callback(only)
    assert first.remove_done_callback(only) == 1
    assert first.remove_done_callback(only) == 0
    second.add_done_callback(kept)
    records.acknowledge_all()
    await asyncio.sleep(0)
    assert calls == ["kept"]
    # A callback added again after removal runs (the batch is asked to call back again).
    first.add_done_callback(only)
    await asyncio.sleep(0)
    assert calls == ["kept", "only"]


async def test_gather_and_in_order_await_follow_records_into_split_batches() -> None:
    records = Records(0, batch_size=4096)
    records.futures = [records.append(0, b"%04d" % n * 50) for n in range(15)]
    cluster = Cluster(
        brokers={1: Broker(1, "127.0.0.1", 9001)},
        topics={"t": TopicInfo("t", (PartitionInfo(0, 1),))},
    )
    (batch,) = records.accumulator.drain(cluster, [1], 1 << 20, 0.0)[1]
    gathering = asyncio.ensure_future(asyncio.gather(*records.futures))
    in_order = asyncio.ensure_future(_await_each(records.futures))
    await asyncio.sleep(0)
    # The broker found the batch too large: the sender splits it into 1 KiB batches.
    stored = decode_record_batches(bytes(batch.builder.close()))[0].records
    records.accumulator.batch_size = 1024
    new_batches = records.accumulator.split_and_reenqueue(batch, list(stored), 1.0)[0]
    assert len(new_batches) > 1 and batch.split
    await asyncio.sleep(0)
    assert not gathering.done() and not any(f.done() for f in records.futures)
    base = 100
    for new in new_batches:
        records.acknowledge(new, base)
        base += new.record_count
    assert [m.offset for m in await asyncio.wait_for(gathering, 10)] == list(range(100, 115))
    assert [m.offset for m in await asyncio.wait_for(in_order, 10)] == list(range(100, 115))
    assert all(f.get_loop() is asyncio.get_running_loop() for f in records.futures)


async def _await_each(futures: list[RecordFuture]) -> list[RecordMetadata]:
    return [await future for future in futures]
