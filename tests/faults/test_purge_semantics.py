"""Purge and delivery semantics, on scripted brokers (Kafka's sequence rules, held and dropped
answers): what ``Producer.purge`` and ``SyncProducer.purge`` must never do to the records
around the ones they fail.

Scenarios and what each proves:

- ``test_purging_queued_split_parts_leaves_no_sequence_gap``: MESSAGE_TOO_LARGE splits an
  idempotent batch; its first part goes out (held), the second waits queued with a
  sequence of its own but no attempt. Purging it leaves no gap: the next batch is
  delivered, not refused out of order until its delivery timeout.
- ``test_purge_in_flight_split_part_answered_late_leaves_no_gap``: the same with
  ``purge(in_flight=True)``, the first part's request succeeding after the purge.
- ``test_purging_split_parts_in_a_transaction_then_abort_next_transaction_commits``: the
  same in a transaction (v1): after the abort, the next transaction commits.
- ``test_a_record_sent_after_purge_in_flight_is_not_failed_for_the_purged_one``: records
  sent after ``purge(in_flight=True)`` wait for the purged request's outcome instead of
  being pipelined behind it; when its connection drops unanswered, they are delivered,
  not failed as overtaken or stranded.
- ``test_a_purged_retry_that_was_written_is_not_reported_as_never_sent``: a batch queued
  for a retry after an attempt that was written fails with ``maybe_written`` True and a
  message that says an earlier attempt may have been written.
- ``test_sync_producer_purge_in_a_transaction_leaves_only_abort``: a record purged from
  the SyncProducer's queue (behind an in-line transaction call) makes the transaction it
  was meant for abortable: the commit raises instead of committing without it.
- ``test_sync_producer_purge_fails_what_was_sent_before_it``: SyncProducer.purge() fails
  the records its loop thread took from the queue but had not handed over yet, not only
  those still queued.
- ``test_v1_purge_before_anything_was_sent_then_abort``: a purge before any record of the
  transaction went out, then abort: the next transaction commits.
- ``test_purging_a_queued_retry_with_a_later_request_in_flight``: with five requests in
  flight, purging a retry queued behind later requests: the later batch is refused out of
  order, the epoch is bumped, and everything after is delivered once, in order.
- ``test_purge_in_flight_in_a_transaction_then_abort_waits_for_the_request``: the abort
  waits until the purged request has ended; the next transaction commits only its records.
- ``test_purge_while_a_batch_compresses_in_a_worker_thread_frees_its_memory``: the buffer
  of a batch being compressed on a worker thread goes back to the pool when the worker is
  done; ``len()`` is 0 at once and the producer goes on.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aioproducer import ConsumerGroupMetadata, Producer, SyncProducer
from aioproducer import errors as e
from tests.faults.checks import Ledger, bounded, fast_options, unique_topic
from tests.faults.scripted_broker import (
    ADD_OFFSETS_TO_TXN,
    PRODUCE,
    TRANSACTION_API_VERSIONS,
    Action,
    ActionKind,
    ScriptedCluster,
)

MESSAGE_TOO_LARGE = 10


def _options(cluster: ScriptedCluster, **overrides: object) -> dict[str, object]:
    options: dict[str, object] = {
        "max_in_flight_requests_per_connection": 1,
        "request_timeout_ms": 3000,
        # Short enough for the stuck record to fail inside the test's bound.
        "delivery_timeout_ms": 4000,
    }
    options.update(overrides)
    return fast_options(cluster.bootstrap_servers, **options)


async def _until_produce_requests(cluster: ScriptedCluster, count: int) -> None:
    for _ in range(1000):
        if len(cluster.requests_of(PRODUCE, 1)) >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"broker 1 never read {count} Produce request(s)")


async def _split_with_first_part_held(
    cluster: ScriptedCluster, producer: Producer, ledger: Ledger
) -> tuple[Action, list]:
    """Send one batch of 8 records that the broker refuses as too large; the producer splits
    it, the first part goes out and is held, the rest waits queued behind it. Returns the
    hold and the batch's records."""
    broker = cluster.broker(1)
    produced = len(cluster.requests_of(PRODUCE, 1))
    broker.push(PRODUCE, Action.error_code(MESSAGE_TOO_LARGE))
    hold = Action.hold()
    broker.default[PRODUCE] = hold
    records = await ledger.send_burst(producer, 0, 8)
    # The refused batch, then its first part.
    await _until_produce_requests(cluster, produced + 2)
    await asyncio.sleep(0.05)
    # One request in flight: the later part(s) are still queued, with their sequences.
    assert len(cluster.requests_of(PRODUCE, 1)) == produced + 2
    return hold, records


def _release(cluster: ScriptedCluster, hold: Action) -> None:
    del cluster.broker(1).default[PRODUCE]
    assert hold.release is not None
    hold.release.set()


async def test_purging_queued_split_parts_leaves_no_sequence_gap() -> None:
    topic = unique_topic("purge-split")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_options(cluster, enable_idempotence=True)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            hold, records = await _split_with_first_part_held(cluster, producer, ledger)
            purged = producer.purge()
            assert 0 < purged < len(records), purged
            _release(cluster, hold)
            await ledger.wait()
            failed = [r for r in records if r.future.exception() is not None]
            assert len(failed) == purged
            assert all(isinstance(r.future.exception(), e.PurgedError) for r in failed)
            # Nothing is wrong with the records sent now: they must be delivered.
            after = [await ledger.send(producer, 0) for _ in range(3)]
            await ledger.wait(timeout=15)
            errors = [r.future.exception() for r in after]
            assert errors == [None, None, None], errors
        values = cluster.values(topic, 0)
        ledger.check({0: values}, expect_failed=[e.PurgedError])


async def test_purge_in_flight_split_part_answered_late_leaves_no_gap() -> None:
    topic = unique_topic("purge-split-in-flight")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_options(cluster, enable_idempotence=True)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            hold, records = await _split_with_first_part_held(cluster, producer, ledger)
            assert producer.purge(in_flight=True) == len(records)
            # The held part was written: its request completes after the purge.
            _release(cluster, hold)
            await asyncio.sleep(0.1)
            after = [await ledger.send(producer, 0) for _ in range(3)]
            await ledger.wait(timeout=15)
            errors = [r.future.exception() for r in after]
            assert errors == [None, None, None], errors
        values = cluster.values(topic, 0)
        ledger.check({0: values}, failed_absent=False, expect_failed=[e.PurgedError])


async def test_purging_split_parts_in_a_transaction_then_abort_next_transaction_commits() -> None:
    topic = unique_topic("purge-split-txn")
    cluster = ScriptedCluster(1, topics={topic: 1})
    cluster.broker(1).api_versions = dict(TRANSACTION_API_VERSIONS)
    async with cluster:
        ledger = Ledger(topic)
        options = _options(cluster, transactional_id=unique_topic("purge-split-txn-id"))
        async with Producer(**options) as producer:
            await producer.begin_transaction()
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            hold, _ = await _split_with_first_part_held(cluster, producer, ledger)
            assert producer.purge() > 0
            _release(cluster, hold)
            await ledger.wait()
            await bounded(producer.abort_transaction())
            await producer.begin_transaction()
            nxt = await producer.send(topic, b"next", partition=0)
            await asyncio.wait([nxt], timeout=15)
            assert nxt.done() and nxt.exception() is None, nxt.exception() if nxt.done() else None
            await bounded(producer.commit_transaction())
        assert cluster.committed_values(topic, 0) == [b"next"]


async def test_sync_producer_purge_fails_what_was_sent_before_it() -> None:
    """SyncProducer.purge() fails what is queued for the loop thread and what the Producer
    buffers, but not the items the loop thread already took from its queue and has not
    handed over yet: the pump takes the whole queue at once and, with buffer_memory full,
    waits for memory at one item with the rest still in hand. The purge frees memory, and
    those records (sent, from the caller's view, before purge()) are delivered after it.
    The docstring allows for "a record the loop thread is handing to the producer at that
    moment"; here it is nearly all of them."""
    topic = unique_topic("sync-purge-in-hand")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        hold = Action.hold()
        cluster.broker(1).default[PRODUCE] = hold
        options = _options(
            cluster,
            buffer_memory=4 * 1024,
            batch_size=1024,
            max_block_ms=60000,
            delivery_timeout_ms=60000,
        )
        producer = await asyncio.to_thread(SyncProducer, **options)

        def send_then_purge() -> tuple[int, list[Any]]:
            futures = [
                producer.send(topic, b"x" * 200 + b"-%04d" % i, partition=0) for i in range(200)
            ]
            deadline = time.monotonic() + 10
            while not cluster.requests_of(PRODUCE, 1):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(0.2)  # the loop thread now waits for memory, items in hand
            return producer.purge(), futures

        try:
            purged, futures = await bounded(asyncio.to_thread(send_then_purge))
            # The held request was appended: the log holds what was in flight at the purge.
            in_flight_at_purge = len(cluster.values(topic, 0))
            _release(cluster, hold)
            await bounded(asyncio.to_thread(producer.flush, 10))
            delivered = [f for f in futures if f.exception(timeout=10) is None]
        finally:
            await asyncio.to_thread(producer.close)
        # In flight at the purge, plus the one record being handed over.
        assert len(delivered) <= in_flight_at_purge + 1, (
            f"purge() returned {purged}; {len(delivered)} of the 200 records sent before it "
            f"were delivered after it, though only {in_flight_at_purge} were in flight"
        )


async def test_v1_purge_before_anything_was_sent_then_abort() -> None:
    topic = unique_topic("purge-v1-unsent")
    cluster = ScriptedCluster(1, topics={topic: 1})
    cluster.broker(1).api_versions = dict(TRANSACTION_API_VERSIONS)
    async with cluster:
        options = _options(
            cluster, transactional_id=unique_topic("purge-v1-id"), linger_ms=60000,
            delivery_timeout_ms=120000,
        )
        async with Producer(**options) as producer:
            await producer.begin_transaction()
            purged = await producer.send(topic, b"purged", partition=0)
            assert producer.purge() == 1
            assert isinstance(purged.exception(), e.PurgedError)
            await bounded(producer.abort_transaction())
            await producer.begin_transaction()
            nxt = await producer.send(topic, b"next", partition=0)
            await bounded(producer.commit_transaction())
            assert nxt.exception() is None
        assert cluster.committed_values(topic, 0) == [b"next"]


NOT_ENOUGH_REPLICAS = 19


async def test_purging_a_queued_retry_with_a_later_request_in_flight() -> None:
    """Holds: five in flight; the first request is refused (retriable) and its batch waits
    for its backoff while the second request of the partition is out; purge() fails the
    retry; the second is refused out of order, restarts under a bumped epoch, and every
    record sent later is delivered once, in order."""
    topic = unique_topic("purge-retry-pipeline")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = _options(
            cluster,
            enable_idempotence=True,
            max_in_flight_requests_per_connection=5,
            retry_backoff_ms=3000,
            retry_backoff_max_ms=3000,
            delivery_timeout_ms=20000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            broker = cluster.broker(1)
            produced = len(cluster.requests_of(PRODUCE, 1))
            # The first batch is refused after a moment, so the second is out behind it.
            hold = Action.hold()
            broker.push(PRODUCE, Action.error_code(NOT_ENOUGH_REPLICAS, delay=0.3), hold)
            first = await ledger.send(producer, 0)
            await _until_produce_requests(cluster, produced + 1)
            second = await ledger.send(producer, 0)
            await _until_produce_requests(cluster, produced + 2)
            # Wait for the first's refusal: it is queued for its 3 s backoff.
            for _ in range(200):
                if producer._accumulator.queued_records():
                    break
                await asyncio.sleep(0.01)
            assert not second.future.done()
            assert producer.purge() == 1
            assert isinstance(first.future.exception(), e.PurgedError)
            assert hold.release is not None
            hold.release.set()
            await ledger.wait()
            after = [await ledger.send(producer, 0) for _ in range(3)]
            await ledger.wait()
            assert second.future.exception() is None, second.future.exception()
            assert all(r.future.exception() is None for r in after)
        ledger.check({0: cluster.values(topic, 0)}, expect_failed=[e.PurgedError])


async def test_purge_in_flight_in_a_transaction_then_abort_waits_for_the_request() -> None:
    """Holds: purge(in_flight=True) in a transaction; the abort's EndTxn waits until the
    purged request has ended (it was written: the abort must cover it), and the next
    transaction commits only its own records."""
    topic = unique_topic("purge-txn-in-flight")
    cluster = ScriptedCluster(1, topics={topic: 1})
    cluster.broker(1).api_versions = dict(TRANSACTION_API_VERSIONS)
    async with cluster:
        options = _options(
            cluster, transactional_id=unique_topic("purge-txn-if-id"), delivery_timeout_ms=20000
        )
        async with Producer(**options) as producer:
            await producer.begin_transaction()
            await bounded(producer.send_and_wait(topic, b"first", partition=0))
            hold = Action.hold()
            cluster.broker(1).default[PRODUCE] = hold
            produced = len(cluster.requests_of(PRODUCE, 1))
            held = await producer.send(topic, b"held", partition=0)
            await _until_produce_requests(cluster, produced + 1)
            assert producer.purge(in_flight=True) == 1
            assert isinstance(held.exception(), e.PurgedError)
            abort = asyncio.ensure_future(producer.abort_transaction())
            await asyncio.sleep(0.3)
            assert not abort.done(), "EndTxn went out while a Produce of the transaction was out"
            _release(cluster, hold)
            await bounded(abort)
            await producer.begin_transaction()
            nxt = await producer.send(topic, b"next", partition=0)
            await bounded(producer.commit_transaction())
            assert nxt.exception() is None
        assert cluster.committed_values(topic, 0) == [b"next"]


async def test_a_purged_retry_that_was_written_is_not_reported_as_never_sent() -> None:
    """A batch whose first attempt was written (the connection dropped before the answer)
    waits queued for its retry; purge() fails it. Its error rightly says maybe_written,
    but the message (and Producer.purge's docstring: "Buffered records were never sent:
    their error says maybe_written False") says it was purged "before they were sent"."""
    topic = unique_topic("purge-written-retry")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = _options(
            cluster,
            enable_idempotence=True,
            retry_backoff_ms=3000,
            retry_backoff_max_ms=3000,
            reconnect_backoff_ms=10,
            delivery_timeout_ms=20000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            cluster.broker(1).push(PRODUCE, Action(ActionKind.APPEND_THEN_DROP))
            produced = len(cluster.requests_of(PRODUCE, 1))
            record = await ledger.send(producer, 0)
            await _until_produce_requests(cluster, produced + 1)
            for _ in range(300):
                if producer._accumulator.queued_records():
                    break
                await asyncio.sleep(0.01)
            assert producer.purge() == 1
            error = record.future.exception()
            assert isinstance(error, e.PurgedError)
            assert record.value in cluster.values(topic, 0)
            assert error.maybe_written is True
            assert "before they were sent" not in str(error), str(error)


async def test_sync_producer_purge_in_a_transaction_leaves_only_abort() -> None:
    """SyncProducer.purge() fails a record still queued for the loop thread (behind a
    send_offsets_to_transaction() that another thread waits in: transaction control runs
    in line) with PurgedError, but the Producer never hears of it, so its transaction stays
    committable: commit_transaction() succeeds without the purged record, where
    Producer.purge's contract says "commit_transaction() raises the purge's error"."""
    topic = unique_topic("sync-purge-txn")
    cluster = ScriptedCluster(1, topics={topic: 1})
    cluster.broker(1).api_versions = dict(TRANSACTION_API_VERSIONS)
    async with cluster:
        options = _options(
            cluster, transactional_id=unique_topic("sync-purge-txn-id"), delivery_timeout_ms=20000
        )
        producer = await asyncio.to_thread(SyncProducer, **options)
        try:
            await asyncio.to_thread(producer.begin_transaction)
            kept = producer.send(topic, b"kept", partition=0)
            await bounded(asyncio.to_thread(kept.result, 10))
            hold = Action.hold()
            cluster.broker(1).default[ADD_OFFSETS_TO_TXN] = hold
            group = ConsumerGroupMetadata("group-1", generation_id=1, member_id="member-1")
            offsets = asyncio.ensure_future(
                asyncio.to_thread(producer.send_offsets_to_transaction, {("in", 0): 5}, group)
            )
            await cluster.wait_for(lambda: bool(cluster.requests_of(ADD_OFFSETS_TO_TXN)))
            queued = producer.send(topic, b"purged", partition=0)
            purged = await asyncio.to_thread(producer.purge)
            del cluster.broker(1).default[ADD_OFFSETS_TO_TXN]
            assert hold.release is not None
            hold.release.set()
            await bounded(offsets)
            assert purged == 1, purged
            assert isinstance(queued.exception(timeout=10), e.PurgedError)
            commit_error: BaseException | None = None
            try:
                await bounded(asyncio.to_thread(producer.commit_transaction))
            except Exception as exc:
                commit_error = exc
        finally:
            await asyncio.to_thread(producer.close)
        assert commit_error is not None, (
            "a record of the transaction was purged, yet it committed: "
            f"{cluster.committed_values(topic, 0)}"
        )


async def test_purge_while_a_batch_compresses_in_a_worker_thread_frees_its_memory() -> None:
    """Holds: a batch being compressed off the loop is purged; its buffer goes back to the
    pool when the worker is done, len() is 0 at once, and the producer goes on."""
    import os

    topic = unique_topic("purge-offload")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        options = _options(
            cluster,
            enable_idempotence=True,
            compression_type="gzip",
            compression_level=9,
            compression_offload_bytes=0,
            batch_size=1 << 20,
            max_request_size=4 << 20,
            linger_ms=0,
            delivery_timeout_ms=20000,
        )
        async with Producer(**options) as producer:
            await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
            pool = producer._pool
            total = pool.total_memory
            blob = os.urandom(4096)
            futures = [await producer.send(topic, blob, partition=0) for _ in range(200)]
            batches = producer._accumulator._batches[(topic, 0)]
            for _ in range(2000):
                if batches and batches[0].compressing:
                    break
                await asyncio.sleep(0)
            assert batches and batches[0].compressing, "never caught the batch compressing"
            assert producer.purge() == 200
            assert len(producer) == 0
            assert all(isinstance(f.exception(), e.PurgedError) for f in futures)
            for _ in range(500):
                if pool.available_memory() == total:
                    break
                await asyncio.sleep(0.01)
            assert pool.available_memory() == total
            await bounded(producer.send_and_wait(topic, b"after", partition=0))
        assert cluster.values(topic, 0) == [b"warm-up", b"after"]


async def test_a_record_sent_after_purge_in_flight_is_not_failed_for_the_purged_one() -> None:
    """purge(in_flight=True) fails batch A, whose request is out (the broker never reads
    on). A record sent after the purge is drained at once, pipelined behind A's request (the
    partition had acknowledged batches, A's outcome is not yet known). The connection then
    drops: A was not written, and neither was the new record. The new record goes again
    with the sequence after A's, is refused out of order and fails with
    BatchOvertakenError, "may or may not have been written", although it was never written
    and nothing about it went wrong: the purge cost a record sent after it."""
    topic = unique_topic("purge-pipelined-behind")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = _options(
            cluster,
            enable_idempotence=True,
            max_in_flight_requests_per_connection=5,
            delivery_timeout_ms=20000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            produced = len(cluster.requests_of(PRODUCE, 1))
            cluster.broker(1).push(PRODUCE, Action(ActionKind.HANG))
            purged = await ledger.send(producer, 0)
            await _until_produce_requests(cluster, produced + 1)
            assert producer.purge(in_flight=True) == 1
            assert isinstance(purged.future.exception(), e.PurgedError)
            after = await ledger.send(producer, 0)
            await _until_produce_requests(cluster, produced + 2)
            cluster.broker(1).drop_connections()
            more = [await ledger.send(producer, 0) for _ in range(2)]
            await ledger.wait()
            errors = [r.future.exception() for r in [after, *more]]
            assert errors == [None, None, None], errors
        ledger.check({0: cluster.values(topic, 0)}, expect_failed=[e.PurgedError])
