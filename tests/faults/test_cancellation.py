"""Cancellation and closing while work is in flight; bounded flush and close.

Every scenario runs on :class:`~tests.faults.scripted_broker.ScriptedCluster` with Produce
answers held back until the test lets them go, so "in flight" and "blocked on memory" are
states the test sets up exactly instead of racing a timer.

Scenarios and what each proves:

- ``test_cancelling_a_send_blocked_on_memory_loses_nothing``: a send waiting for buffer
  memory is cancelled; the sender queued behind it is served, every other record is
  delivered once and in order, the cancelled record is not in the log, and all of
  ``buffer_memory`` is free again at the end (the cancelled wait leaked nothing).
- ``test_cancelling_send_and_wait_still_delivers_the_record``: cancelling a task awaiting
  ``send_and_wait`` once the record is buffered detaches the waiter only: the record is
  still delivered, once.
- ``test_cancelling_a_flush_leaves_the_producer_working``: a cancelled ``flush`` does not
  leave the producer flushing forever (``linger_ms`` applies again) and a later flush
  delivers everything.
- ``test_cancelling_a_send_waiting_for_metadata``: a send waiting for an unknown topic is
  cancelled; the topic appears later and sends to it work.
- ``test_close_while_sends_are_in_flight_delivers_them``: ``close()`` without a timeout
  waits for the in-flight and buffered records and delivers all of them, once.
- ``test_close_with_a_timeout_is_bounded``: with answers that never come, ``close(timeout)``
  returns within its bound and every record's future is done: delivered, or failed with
  ProducerClosedError. (Held requests were appended by the broker: a record failed by close
  may be in the log, as in the Java client, so only acknowledged ones are checked.)
- ``test_close_wakes_a_send_blocked_on_memory``: closing fails a send waiting for buffer
  memory at once with ProducerClosedError, not after ``max_block_ms``.
- ``test_flush_with_a_timeout_is_bounded``: ``flush(timeout)`` raises FlushTimeoutError within
  its bound while answers are held, and the records are delivered afterwards.
- ``test_cancelling_close_leaves_no_record_pending``: a task awaiting ``close()`` is
  cancelled while answers are held; closing again is bounded and every record then has an
  outcome (ProducerClosedError), not one only delivery_timeout_ms would give.
- ``test_a_gather_of_record_futures_can_time_out``: record futures are accepted by
  ``asyncio.gather``, so ``wait_for(gather(...), timeout)`` must raise TimeoutError at its
  timeout rather than hang when gather cancels them.
- ``test_concurrent_closes``: two ``close()`` calls at once both return once the producer is
  closed; sending afterwards raises ProducerClosedError.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from aioproducer import Producer, ProducerState
from aioproducer import errors as e
from tests.faults.checks import (
    Ledger,
    bounded,
    fast_options,
    unique_topic,
    wait_records,
    wait_until,
)
from tests.faults.scripted_broker import METADATA, PRODUCE, Action, ScriptedCluster

BATCH_SIZE = 1024
BUFFER_MEMORY = 4 * BATCH_SIZE
VALUE_SIZE = 600  # one record per batch: two do not fit in batch_size


def _held(cluster: ScriptedCluster) -> asyncio.Event:
    """Hold every Produce answer of every broker until the returned event is set."""
    hold = Action.hold()
    for broker in cluster.brokers.values():
        broker.default[PRODUCE] = hold
    assert hold.release is not None
    return hold.release


def _release(cluster: ScriptedCluster, release: asyncio.Event) -> None:
    for broker in cluster.brokers.values():
        broker.default.pop(PRODUCE, None)
    release.set()


def _memory_waiters(producer: Producer) -> int:
    """How many sends wait for buffer memory (the Java client's ``waiting-threads``)."""
    return int(producer.metrics()["waiting-threads"])


async def _waits_for_memory(producer: Producer, send: asyncio.Future[Any], waiters: int) -> bool:
    """Wait until ``send`` either appended its record (False) or joined the sends waiting for
    buffer memory, the ``waiters``-th of them (True)."""
    await wait_until(lambda: send.done() or _memory_waiters(producer) >= waiters)
    return not send.done()


async def _closing(producer: Producer, close: asyncio.Future[Any]) -> None:
    """Wait until ``close`` has begun closing the producer (and, with answers held, cannot
    be done)."""
    await wait_until(lambda: producer.state is ProducerState.CLOSING)
    assert not close.done()


async def _fill_buffer(producer: Producer, topic: str, values: list[bytes]) -> None:
    """Send until a send blocks on buffer memory; leave that send pending (cancelled)."""
    for index in range(100):
        value = b"%06d" % index + b"x" * (VALUE_SIZE - 6)
        task = asyncio.ensure_future(producer.send(topic, value, partition=0))
        if await _waits_for_memory(producer, task, 1):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bounded(task)
            assert _memory_waiters(producer) == 0
            return
        values.append(value)
    raise AssertionError("the buffer never filled up")


def _memory_options(bootstrap_servers: str, **overrides: object) -> dict[str, Any]:
    return fast_options(
        bootstrap_servers,
        batch_size=BATCH_SIZE,
        buffer_memory=BUFFER_MEMORY,
        request_timeout_ms=30000,
        delivery_timeout_ms=60000,
        max_block_ms=30000,
        **overrides,
    )


async def test_cancelling_a_send_blocked_on_memory_loses_nothing() -> None:
    topic = unique_topic("cancel-blocked")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_memory_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            release = _held(cluster)
            accepted: list[bytes] = []
            await bounded(_fill_buffer(producer, topic, accepted))
            blocked = asyncio.ensure_future(producer.send(topic, b"cancelled", partition=0))
            assert await _waits_for_memory(producer, blocked, 1)
            queued = asyncio.ensure_future(producer.send(topic, b"queued", partition=0))
            assert await _waits_for_memory(producer, queued, 2)
            blocked.cancel()
            _release(cluster, release)
            with pytest.raises(asyncio.CancelledError):
                await bounded(blocked)
            queued_future = await bounded(queued)
            await bounded(queued_future)
            await bounded(producer.flush())
            after = await bounded(producer.send_and_wait(topic, b"after", partition=0))
            assert after.offset >= 0
            assert producer.metrics()["record-error-total"] == 0
            assert producer.metrics()["buffer-available-bytes"] == BUFFER_MEMORY
        values = cluster.values(topic, 0)
        assert b"cancelled" not in values
        assert values == [ledger.records[0].value, *accepted, b"queued", b"after"]


async def test_cancelling_send_and_wait_still_delivers_the_record() -> None:
    topic = unique_topic("cancel-send-and-wait")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_memory_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            release = _held(cluster)
            waiting = asyncio.ensure_future(producer.send_and_wait(topic, b"detached", partition=0))
            before = len(cluster.requests_of(PRODUCE))
            await cluster.wait_for(lambda: len(cluster.requests_of(PRODUCE)) > before)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await bounded(waiting)
            await bounded(ledger.send_burst(producer, 0, 3))
            _release(cluster, release)
            await ledger.wait()
            await bounded(producer.flush())
            assert producer.metrics()["record-error-total"] == 0
        values = cluster.values(topic, 0)
        assert values.count(b"detached") == 1
        ledger.check({0: [v for v in values if v != b"detached"]})


async def test_cancelling_a_flush_leaves_the_producer_working() -> None:
    topic = unique_topic("cancel-flush")
    # Partition 0 is led by broker 1, partition 1 by broker 2.
    async with ScriptedCluster(2, topics={topic: 2}) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            linger_ms=60000,
            delivery_timeout_ms=120000,
            batch_size=BATCH_SIZE,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await bounded(producer.flush())
            release = _held(cluster)
            sent = len(cluster.requests_of(PRODUCE))
            await bounded(ledger.send_burst(producer, 0, 3))
            flushing = asyncio.ensure_future(producer.flush())
            # The flush sent the lingering batch, whose answer is held: it is in progress.
            await cluster.wait_for(lambda: len(cluster.requests_of(PRODUCE)) > sent)
            assert not flushing.done()
            flushing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await bounded(flushing)
            _release(cluster, release)
            await ledger.wait()
            # With no flush in progress any more, a new record waits for linger_ms. Seen
            # without waiting for time to pass: a full batch for partition 1, appended after
            # it, goes out at once (to broker 2) and is acknowledged. Were the producer still
            # flushing, the lingering batch would have been ready in that same step of the
            # sender, and gone out to broker 1 then.
            sent_to_1 = len(cluster.requests_of(PRODUCE, broker_id=1))
            lingering = await bounded(ledger.send(producer, 0))
            # Small records: 100 of them fill more than one batch of BATCH_SIZE.
            full = await bounded(ledger.send_burst(producer, 1, 100))
            await wait_records(full[:1])
            assert not lingering.future.done()
            assert len(cluster.requests_of(PRODUCE, broker_id=1)) == sent_to_1
            assert lingering.value not in cluster.values(topic, 0)
            await bounded(producer.flush())
            assert lingering.future.done()
        ledger.check({p: cluster.values(topic, p) for p in (0, 1)})


async def test_cancelling_a_send_waiting_for_metadata() -> None:
    topic = unique_topic("cancel-metadata")
    async with ScriptedCluster(1) as cluster:
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            refreshes = len(cluster.requests_of(METADATA))
            waiting = asyncio.ensure_future(producer.send(topic, b"never", partition=0))
            # It asked for the topic and learned it is unknown (the send waits max_block_ms,
            # 10 s, for it to appear): two Metadata requests, the second after the answer to
            # the first.
            await cluster.wait_for(lambda: len(cluster.requests_of(METADATA)) >= refreshes + 2)
            assert not waiting.done()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await bounded(waiting)
            cluster.topics[topic] = 1
            ledger = Ledger(topic)
            await bounded(ledger.send_burst(producer, 0, 3))
            await ledger.wait()
        assert b"never" not in cluster.values(topic, 0)
        ledger.check({0: cluster.values(topic, 0)})


async def test_close_while_sends_are_in_flight_delivers_them() -> None:
    topic = unique_topic("close-in-flight")
    async with ScriptedCluster(2, topics={topic: 2}) as cluster:
        ledger = Ledger(topic)
        producer = Producer(**fast_options(cluster.bootstrap_servers, batch_size=256))
        await bounded(producer.start())
        await bounded(ledger.send_many(producer, [0, 1], 1))
        await ledger.wait()
        release = _held(cluster)
        await bounded(ledger.send_many(producer, [0, 1], 30))
        closing = asyncio.ensure_future(producer.close())
        await _closing(producer, closing)
        _release(cluster, release)
        await bounded(closing)
        assert all(r.future.done() for r in ledger.records)
        ledger.check({p: cluster.values(topic, p) for p in (0, 1)})
        with pytest.raises(e.ProducerClosedError):
            await producer.send(topic, b"late", partition=0)


async def test_close_with_a_timeout_is_bounded() -> None:
    topic = unique_topic("close-timeout")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        producer = Producer(
            **fast_options(
                cluster.bootstrap_servers,
                batch_size=256,
                request_timeout_ms=30000,
                delivery_timeout_ms=60000,
            )
        )
        await bounded(producer.start())
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
        _held(cluster)  # never released
        await bounded(ledger.send_burst(producer, 0, 20))
        await bounded(producer.close(timeout=0.5), timeout=10)
        assert all(r.future.done() for r in ledger.records)
        assert ledger.failed, "nothing could have been acknowledged"
        # What ended them is the close timeout, not an early return or another error.
        assert all("timeout of 0.5 s" in str(r.future.exception()) for r in ledger.failed)
        ledger.check(
            {0: cluster.values(topic, 0)},
            failed_absent=False,
            expect_failed=[e.ProducerClosedError],
        )


async def test_close_wakes_a_send_blocked_on_memory() -> None:
    topic = unique_topic("close-blocked")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        producer = Producer(**_memory_options(cluster.bootstrap_servers))
        await bounded(producer.start())
        await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
        _held(cluster)  # never released
        accepted: list[bytes] = []
        await bounded(_fill_buffer(producer, topic, accepted))
        blocked = asyncio.ensure_future(producer.send(topic, b"blocked", partition=0))
        assert await _waits_for_memory(producer, blocked, 1)
        # max_block_ms is 30 s, beyond the bounds here (which only turn a hang into a
        # failure): what ends the wait shows in the error, ProducerClosedError rather than
        # the BufferExhaustedError of max_block_ms.
        await bounded(producer.close(timeout=0.2), timeout=10)
        with pytest.raises(e.ProducerClosedError):
            await bounded(blocked, timeout=10)


async def test_flush_with_a_timeout_is_bounded() -> None:
    topic = unique_topic("flush-timeout")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            release = _held(cluster)
            await bounded(ledger.send_burst(producer, 0, 5))
            with pytest.raises(e.FlushTimeoutError, match=r"after 0\.3 s"):
                await bounded(producer.flush(timeout=0.3), timeout=10)
            _release(cluster, release)
            await bounded(producer.flush())
            await ledger.wait()
        ledger.check({0: cluster.values(topic, 0)})


async def test_concurrent_closes() -> None:
    topic = unique_topic("concurrent-close")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        producer = Producer(**fast_options(cluster.bootstrap_servers))
        await bounded(producer.start())
        release = _held(cluster)
        await bounded(ledger.send_burst(producer, 0, 5))
        called: list[str] = []

        async def close(name: str) -> None:
            called.append(name)
            await producer.close()

        first = asyncio.ensure_future(close("first"))
        second = asyncio.ensure_future(close("second"))
        # Both called close() (which runs to its first wait without yielding) and neither
        # can return while the answers are held.
        await wait_until(lambda: len(called) == 2)
        await _closing(producer, first)
        assert not second.done()
        _release(cluster, release)
        await bounded(asyncio.gather(first, second))
        ledger.check({0: cluster.values(topic, 0)})
        with pytest.raises(e.ProducerClosedError):
            await producer.send(topic, b"late", partition=0)


async def test_cancelling_close_leaves_no_record_pending() -> None:
    topic = unique_topic("cancel-close")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers, request_timeout_ms=30000, delivery_timeout_ms=60000
        )
        producer = Producer(**options)
        await bounded(producer.start())
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
        _held(cluster)  # never released
        await bounded(ledger.send_burst(producer, 0, 5))
        closing = asyncio.ensure_future(producer.close())
        await _closing(producer, closing)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await bounded(closing)
        # Closing again returns (the bound only turns a hang into a failure), and then no
        # record is left without an outcome: every one failed with ProducerClosedError, not
        # with what delivery_timeout_ms (60 s) would give.
        await bounded(producer.close(timeout=0.5), timeout=10)
        assert all(r.future.done() for r in ledger.records)
        assert all(
            isinstance(r.future.exception(), e.ProducerClosedError) for r in ledger.records[1:]
        )
        with pytest.raises(e.ProducerClosedError):
            await producer.send(topic, b"late", partition=0)


async def test_a_gather_of_record_futures_can_time_out() -> None:
    topic = unique_topic("gather-timeout")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            release = _held(cluster)
            await bounded(ledger.send_burst(producer, 0, 3))
            futures = [r.future for r in ledger.records[1:]]
            waiter = asyncio.ensure_future(asyncio.wait_for(asyncio.gather(*futures), timeout=0.2))
            # asyncio.wait does not cancel the waiter, so a hang cannot hang the test.
            done, _ = await asyncio.wait({waiter}, timeout=5)
            _release(cluster, release)
            await ledger.wait()
            if waiter not in done:
                waiter.cancel()
            assert waiter in done, "wait_for(gather(record futures)) hung past its timeout"
            with pytest.raises(asyncio.TimeoutError):
                waiter.result()
        ledger.check({0: cluster.values(topic, 0)})


async def test_cancelling_close_as_the_sender_finishes_is_not_lost() -> None:
    # Ctrl+C in `aioproducer produce` cancels the task that is closing the producer; when the
    # cancellation lands just after the sender task ended, close() must still raise it, or
    # the program runs on as if nothing happened (it exited 0 instead of 130).
    topic = unique_topic("cancel-close-late")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        producer = Producer(**fast_options(cluster.bootstrap_servers))
        await bounded(producer.start())
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
        closing = asyncio.ensure_future(producer.close())
        sender = producer._sender
        assert sender is not None and sender.task is not None

        async def sender_ended() -> None:
            while not sender.task.done():
                await asyncio.sleep(0)

        await bounded(sender_ended())
        assert not closing.done()
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await bounded(closing)
        # Closed all the same: nothing is left to deliver, and nothing more is taken.
        assert producer.state is ProducerState.CLOSED
        with pytest.raises(e.ProducerClosedError):
            await producer.send(topic, b"late", partition=0)
