"""Backpressure: under a slow broker, memory held stays within buffer_memory.

Scenarios and what each proves:

- ``test_memory_stays_within_buffer_memory_under_a_slow_broker``: many concurrent senders
  offer 128 times ``buffer_memory`` to a broker whose every answer takes 20 ms. The peak of
  Python memory allocated meanwhile (tracemalloc: every Python allocator domain, so record
  batches, futures and request buffers alike) stays below ``buffer_memory`` plus a fixed
  allowance a quarter of what was offered; senders did wait for memory
  (``bufferpool-wait-time-total`` grows); and every record is delivered once, in order.
  This is a bound on bytes, not on time.
- ``test_a_sender_waits_up_to_max_block_ms_then_gets_buffer_exhausted``: with the broker's
  answers held, a send that finds no memory waits ``max_block_ms`` and then raises
  BufferExhaustedError (retriable); no record already accepted is lost once the broker
  answers again.

Quirks: librdkafka's mock is C code, so its own memory is invisible to tracemalloc, which is
what the bound wants (only the client's memory counts). The senders reuse one value object
and keep no reference to their futures, so the test itself adds no memory per record.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc

from aioproducer import Producer
from aioproducer import errors as e
from tests.faults.checks import Ledger, bounded, fast_options, mock_log, unique_topic
from tests.faults.scripted_broker import PRODUCE, Action, ScriptedCluster
from tests.support.mock_cluster import MockCluster

BUFFER_MEMORY = 64 * 1024
BATCH_SIZE = 4 * 1024
VALUE_SIZE = 512
PARTITIONS = 4
SENDERS = 16
RECORDS_PER_SENDER = 1024  # 16 * 1024 * 512 B = 8 MiB offered, 128 times buffer_memory
#: Room for everything that is not record data: connections, metadata, request headers, a
#: request being encoded, the futures of the records in the buffer, the event loop's own,
#: and garbage the cyclic collector has not reclaimed yet (a record future and its batch
#: refer to each other). Measured at 0.5 to 1 MiB; a quarter of what is offered.
ALLOWANCE = 2 << 20


async def test_memory_stays_within_buffer_memory_under_a_slow_broker(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("memory")
    mock_cluster.create_topic(topic, PARTITIONS)
    options = fast_options(
        mock_cluster.bootstrap_servers,
        buffer_memory=BUFFER_MEMORY,
        batch_size=BATCH_SIZE,
        linger_ms=5,
        max_block_ms=60000,
        request_timeout_ms=10000,
        delivery_timeout_ms=60000,
    )
    delivered = 0
    failures: list[BaseException] = []

    def done(future: object) -> None:
        nonlocal delivered
        error = future.exception()  # type: ignore[attr-defined]
        if error is None:
            delivered += 1
        else:
            failures.append(error)

    async def sender(number: int, value_tail: bytes) -> None:
        partition = number % PARTITIONS
        prefix = b"%02d-" % number
        for index in range(RECORDS_PER_SENDER):
            # The index keeps values unique and ordered; the tail is one shared object.
            future = await producer.send(
                topic, prefix + b"%06d" % index, key=value_tail, partition=partition
            )
            future.add_done_callback(done)

    async with Producer(**options) as producer:
        await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
        mock_cluster.broker_set_rtt(-1, 20)
        tail = b"x" * (VALUE_SIZE - 10)
        wait_before = producer.metrics()["bufferpool-wait-time-total"]
        tracemalloc.start()
        try:
            baseline, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            await bounded(asyncio.gather(*(sender(n, tail) for n in range(SENDERS))), timeout=120)
            await bounded(producer.flush(), timeout=120)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        wait_after = producer.metrics()["bufferpool-wait-time-total"]
        mock_cluster.broker_set_rtt(-1, 0)
    assert not failures, failures[:3]
    assert delivered == SENDERS * RECORDS_PER_SENDER
    assert wait_after > wait_before, "no sender ever waited for memory: nothing was tested"
    grown = peak - baseline
    offered = SENDERS * RECORDS_PER_SENDER * VALUE_SIZE
    assert grown <= BUFFER_MEMORY + ALLOWANCE, (
        f"peak {grown / 2**20:.2f} MiB above the start; buffer_memory is "
        f"{BUFFER_MEMORY / 2**20:.2f} MiB, {offered / 2**20:.0f} MiB were offered"
    )
    log = await mock_log(mock_cluster.bootstrap_servers, topic)
    for number in range(SENDERS):
        prefix = b"%02d-" % number
        mine = [v for v in log[number % PARTITIONS] if v is not None and v.startswith(prefix)]
        assert mine == [prefix + b"%06d" % i for i in range(RECORDS_PER_SENDER)], number


async def test_a_sender_waits_up_to_max_block_ms_then_gets_buffer_exhausted() -> None:
    topic = unique_topic("max-block")
    max_block_ms = 500
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            buffer_memory=4 * 1024,
            batch_size=1024,
            max_block_ms=max_block_ms,
            request_timeout_ms=30000,
            delivery_timeout_ms=60000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            hold = Action.hold()
            cluster.broker(1).default[PRODUCE] = hold
            start = time.monotonic()
            exhausted: e.BufferExhaustedError | None = None
            for _ in range(5000):
                try:
                    await bounded(ledger.send(producer, 0), timeout=10)
                except e.BufferExhaustedError as error:
                    exhausted = error
                    break
            waited = time.monotonic() - start
            assert exhausted is not None, "the buffer never ran out"
            assert exhausted.retriable
            assert waited >= max_block_ms / 1000
            del cluster.broker(1).default[PRODUCE]
            assert hold.release is not None
            hold.release.set()
            await ledger.wait()
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
        ledger.check({0: cluster.values(topic, 0)})


async def test_a_record_that_waits_for_memory_asks_the_partitioner_once(
    mock_cluster: MockCluster,
) -> None:
    # Round robin makes a second question visible: each one moves the turn on. Every record
    # gets a batch of its own (the value nearly fills batch_size) and buffer_memory holds
    # two batches, so with the broker slowed almost every send waits for memory. Asked
    # twice, a waiting record would skip a partition, and the broker's log would show it.
    topic = unique_topic("round-robin")
    partitions = 3
    records = 60
    mock_cluster.create_topic(topic, partitions)
    options = fast_options(
        mock_cluster.bootstrap_servers,
        partitioner="round_robin",
        batch_size=1024,
        buffer_memory=2048,
        linger_ms=0,
    )
    async with Producer(**options) as producer:
        await bounded(producer.send_and_wait(topic, b"warm-up", partition=0))
        mock_cluster.broker_set_rtt(-1, 5)
        wait_before = producer.metrics()["bufferpool-wait-time-total"]
        futures = [
            await bounded(producer.send(topic, b"%04d" % index + b"v" * 800))
            for index in range(records)
        ]
        placed = [(await bounded(future)).partition for future in futures]
        wait_after = producer.metrics()["bufferpool-wait-time-total"]
        mock_cluster.broker_set_rtt(-1, 0)
    assert wait_after > wait_before, "no send waited for memory: nothing was tested"
    # Each record goes to the partition after its predecessor's, waiting or not.
    assert all(
        placed[i + 1] == (placed[i] + 1) % partitions for i in range(records - 1)
    ), placed
    log = await mock_log(mock_cluster.bootstrap_servers, topic)
    stored = sorted(
        (value[:4], partition)
        for partition, values in log.items()
        for value in values
        if value is not None and value != b"warm-up"
    )
    assert stored == sorted((b"%04d" % i, placed[i]) for i in range(records))
