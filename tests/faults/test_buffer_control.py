"""Buffer control: ``len(producer)``, ``purge()`` and ``try_send()`` against a scripted broker
that holds its answers, so what is buffered and what is in flight is known exactly.

Scenarios and what each proves:

- ``test_len_and_poll_see_purged_produce_reports_at_once``: ``produce()`` records purged
  count as reports not yet served, at once, so ``while len(producer): await
  producer.poll(0.1)`` runs every delivery callback (each with PurgedError).
- ``test_len_counts_buffered_and_in_flight_records``: with one request held in flight and
  more records buffered behind it, ``len()`` counts both; once the broker answers and the
  records are delivered it is 0. A producer with records is still true.
- ``test_purge_fails_buffered_records_and_the_producer_goes_on``: ``purge()`` fails the
  buffered records with PurgedError (``maybe_written`` False) and leaves the one in flight;
  the broker's log then holds the in-flight record and later ones, in order, none of the
  purged, and the idempotent sequences go on without a gap.
- ``test_purge_in_flight_frees_the_caller_and_keeps_sequences_right``: ``purge(in_flight=
  True)`` fails the in-flight record too (``maybe_written`` True, and indeed the broker
  wrote it); records sent after the purge are delivered once each, in order, both when the
  held request is answered and when its connection drops unanswered.
- ``test_purge_in_a_transaction_leaves_only_abort``: in a transaction, a purge makes commit
  raise the purge's error; abort works and a new transaction commits.
- ``test_try_send_fails_at_once_when_the_buffer_is_full``: with the broker's answers held and
  ``max_block_ms`` at 60 s, ``try_send`` raises BufferExhaustedError well before that (a
  liveness bound with slack, not a speed figure), says why, and buffers nothing; the
  records it accepted are all delivered once the broker answers.
- ``test_sync_producer_len_and_purge``: the same through ``SyncProducer``.
- ``test_in_memory_producer_len_and_purge``: ``InMemoryProducer`` counts and purges its
  pending records as the producer does.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from aioproducer import Producer, SyncProducer
from aioproducer import errors as e
from aioproducer.testing import InMemoryProducer
from tests.faults.checks import Ledger, bounded, fast_options, unique_topic
from tests.faults.scripted_broker import (
    PRODUCE,
    TRANSACTION_API_VERSIONS,
    Action,
    ScriptedCluster,
)


async def _held_in_flight(cluster: ScriptedCluster) -> Action:
    """Hold every Produce answer of broker 1 from now on."""
    hold = Action.hold()
    cluster.broker(1).default[PRODUCE] = hold
    return hold


def _release(cluster: ScriptedCluster, hold: Action) -> None:
    del cluster.broker(1).default[PRODUCE]
    assert hold.release is not None
    hold.release.set()


async def _until_in_flight(cluster: ScriptedCluster, count: int) -> None:
    """Until broker 1 has read ``count`` Produce requests."""
    for _ in range(500):
        if len(cluster.requests_of(PRODUCE, 1)) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"broker 1 never read {count} Produce request(s)")


def _options(cluster: ScriptedCluster, **overrides: object) -> dict[str, object]:
    # One request in flight: what is buffered behind it stays buffered while it is held.
    return fast_options(
        cluster.bootstrap_servers,
        max_in_flight_requests_per_connection=1,
        request_timeout_ms=30000,
        delivery_timeout_ms=60000,
        **overrides,
    )


async def test_len_counts_buffered_and_in_flight_records() -> None:
    topic = unique_topic("len")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_options(cluster)) as producer:
            assert len(producer) == 0
            await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
            hold = await _held_in_flight(cluster)
            produced = len(cluster.requests_of(PRODUCE, 1))
            await ledger.send(producer, 0)
            await _until_in_flight(cluster, produced + 1)
            await ledger.send_burst(producer, 0, 4)
            assert len(producer) == 5
            assert producer, "a producer with records must still be true"
            _release(cluster, hold)
            await ledger.wait()
            assert len(producer) == 0
        assert len(producer) == 0
        ledger.check({0: cluster.values(topic, 0)[1:]})


async def test_len_and_poll_see_purged_produce_reports_at_once() -> None:
    topic = unique_topic("len-produce")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        reports: list[BaseException | None] = []
        options = {**_options(cluster), "linger_ms": 20000}
        async with Producer(**options) as producer:
            await bounded(producer.partitions_for(topic))
            for index in range(3):
                await producer.produce(
                    topic,
                    b"p%d" % index,
                    partition=0,
                    on_delivery=lambda err, msg: reports.append(err),
                )
            assert len(producer) == 3
            assert producer.purge() == 3
            # The confluent-kafka idiom: nothing is skipped between purge() and poll().
            assert len(producer) == 3
            while len(producer):
                await producer.poll(0.1)
            assert len(reports) == 3
            assert all(isinstance(error, e.PurgedError) for error in reports), reports
        assert cluster.values(topic, 0) == []


async def test_purge_fails_buffered_records_and_the_producer_goes_on() -> None:
    topic = unique_topic("purge")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_options(cluster, enable_idempotence=True)) as producer:
            await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
            hold = await _held_in_flight(cluster)
            produced = len(cluster.requests_of(PRODUCE, 1))
            in_flight = await ledger.send(producer, 0)
            await _until_in_flight(cluster, produced + 1)
            buffered = await ledger.send_burst(producer, 0, 3)
            assert producer.purge() == 3
            assert len(producer) == 1
            for record in buffered:
                assert record.future.done()
                error = record.future.exception()
                assert isinstance(error, e.PurgedError), error
                assert error.maybe_written is False
                assert not error.retriable
                assert "before they were sent" in str(error)
            assert not in_flight.future.done()
            _release(cluster, hold)
            await ledger.wait()
            assert in_flight.future.exception() is None
            after = [await ledger.send(producer, 0) for _ in range(3)]
            await ledger.wait()
            assert all(r.future.exception() is None for r in after)
        values = cluster.values(topic, 0)[1:]
        assert values == [in_flight.value] + [r.value for r in after]
        ledger.check({0: values}, expect_failed=[e.PurgedError])
        sequences = [r.sequence for r in cluster.records(topic, 0)]
        assert sequences == list(range(len(sequences))), sequences


@pytest.mark.parametrize("outcome", ["answered", "dropped"])
async def test_purge_in_flight_frees_the_caller_and_keeps_sequences_right(outcome: str) -> None:
    topic = unique_topic("purge-in-flight")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_options(cluster, enable_idempotence=True)) as producer:
            await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
            produced = len(cluster.requests_of(PRODUCE, 1))
            hold = await _held_in_flight(cluster)
            in_flight = await ledger.send(producer, 0)
            await _until_in_flight(cluster, produced + 1)
            buffered = await ledger.send(producer, 0)
            assert producer.purge(in_flight=True) == 2
            assert len(producer) == 0
            written = in_flight.future.exception()
            assert isinstance(written, e.PurgedError)
            assert written.maybe_written is True
            assert "may have written" in str(written)
            unsent = buffered.future.exception()
            assert isinstance(unsent, e.PurgedError) and unsent.maybe_written is False
            if outcome == "dropped":
                # Written, but the connection closes before the answer: the producer never
                # learns the outcome.
                cluster.broker(1).drop_connections()
            _release(cluster, hold)
            after = [await ledger.send(producer, 0) for _ in range(3)]
            await ledger.wait()
            assert all(r.future.exception() is None for r in after), [
                r.future.exception() for r in after
            ]
        values = cluster.values(topic, 0)[1:]
        # The purged in-flight record was written (the broker appends before it answers);
        # each later one once, in order.
        assert values.count(in_flight.value) == 1
        ledger.check({0: values}, failed_absent=False, expect_failed=[e.PurgedError])
        assert buffered.value not in values


async def test_purge_in_a_transaction_leaves_only_abort() -> None:
    topic = unique_topic("purge-txn")
    cluster = ScriptedCluster(1, topics={topic: 1})
    cluster.broker(1).api_versions = dict(TRANSACTION_API_VERSIONS)
    async with cluster:
        options = _options(cluster, transactional_id=unique_topic("purge-txn-id"))
        async with Producer(**options) as producer:
            await producer.begin_transaction()
            await bounded(producer.send_and_wait(topic, b"first", partition=0))
            hold = await _held_in_flight(cluster)
            produced = len(cluster.requests_of(PRODUCE, 1))
            held = await producer.send(topic, b"held", partition=0)
            await _until_in_flight(cluster, produced + 1)
            purged = await producer.send(topic, b"purged", partition=0)
            assert producer.purge() == 1
            with pytest.raises(e.PurgedError):
                await purged
            _release(cluster, hold)
            await bounded(held)
            with pytest.raises(e.KafkaError) as raised:
                await bounded(producer.commit_transaction())
            assert "purged" in str(raised.value)
            await bounded(producer.abort_transaction())
            await producer.begin_transaction()
            await bounded(producer.send_and_wait(topic, b"next", partition=0))
            await bounded(producer.commit_transaction())
        assert cluster.committed_values(topic, 0) == [b"next"]


async def test_try_send_fails_at_once_when_the_buffer_is_full() -> None:
    topic = unique_topic("try-send")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = _options(cluster, buffer_memory=4 * 1024, batch_size=1024, max_block_ms=60000)
        async with Producer(**options) as producer:
            await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
            hold = await _held_in_flight(cluster)
            accepted: list[bytes] = []
            refused: e.BufferExhaustedError | None = None
            start = time.monotonic()
            for _ in range(1000):
                value = ledger.next_value(0)
                try:
                    future = await bounded(producer.try_send(topic, value, partition=0))
                except e.BufferExhaustedError as error:
                    refused = error
                    break
                accepted.append(value)
                ledger.records.append(_sent(0, value, future))
            elapsed = time.monotonic() - start
            assert refused is not None, "the buffer never filled"
            assert refused.retriable
            assert "the buffer is full" in str(refused) and "try_send()" in str(refused)
            # max_block_ms is 60 s: failing "at once" means well inside it.
            assert elapsed < 20, elapsed
            assert len(producer) == len(accepted)
            _release(cluster, hold)
            await ledger.wait()
        assert cluster.values(topic, 0)[1:] == accepted
        ledger.check({0: cluster.values(topic, 0)[1:]})


def _sent(partition: int, value: bytes, future: object) -> object:
    from tests.faults.checks import SentRecord

    return SentRecord(partition, value, future)  # type: ignore[arg-type]


async def test_sync_producer_len_and_purge() -> None:
    topic = unique_topic("sync-purge")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        hold = await _held_in_flight(cluster)
        producer = await asyncio.to_thread(SyncProducer, **_options(cluster))

        def purge_behind_a_held_request() -> tuple[int, int, int, list[BaseException | None]]:
            held = producer.send(topic, b"held", partition=0)
            deadline = time.monotonic() + 10
            while not cluster.requests_of(PRODUCE, 1):
                assert time.monotonic() < deadline, "the first record never went out"
                time.sleep(0.01)
            futures = [producer.send(topic, b"buffered-%d" % i, partition=0) for i in range(3)]
            counted = len(producer)
            purged = producer.purge()
            errors = [future.exception(timeout=10) for future in futures]
            assert not held.done()
            return counted, purged, len(producer), errors

        try:
            counted, purged, after, errors = await bounded(
                asyncio.to_thread(purge_behind_a_held_request)
            )
            assert (counted, purged, after) == (4, 3, 1)
            assert all(isinstance(error, e.PurgedError) for error in errors), errors
            _release(cluster, hold)
            await bounded(asyncio.to_thread(producer.flush, 10))
            assert len(producer) == 0
        finally:
            await asyncio.to_thread(producer.close)
        assert cluster.values(topic, 0) == [b"held"]


def test_in_memory_producer_len_and_purge() -> None:
    async def scenario() -> None:
        async with InMemoryProducer(auto_complete=False, transactional_id="t") as producer:
            await producer.begin_transaction()
            futures = [await producer.send("orders", b"%d" % i) for i in range(3)]
            assert len(producer) == 3
            assert producer.purge() == 3
            assert len(producer) == 0
            for future in futures:
                error = future.exception()
                assert isinstance(error, e.PurgedError) and error.maybe_written is False
            with pytest.raises(e.PurgedError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            assert producer.records() == []

    asyncio.run(scenario())
