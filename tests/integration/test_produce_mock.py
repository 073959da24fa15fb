"""Behaviour the librdkafka mock cluster lets us provoke: errors the broker returns, slow and
dead brokers, unknown topics. Each scenario reads back what the broker stored."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import (
    BufferExhaustedError,
    DeliveryTimeoutError,
    InvalidTopicError,
    KafkaError,
    ProducerClosedError,
    UnknownTopicOrPartitionError,
)
from tests.support.readback import read_back

PRODUCE = 0
MESSAGE_TOO_LARGE = 10
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PART = 3
INVALID_TOPIC_EXCEPTION = 17
METADATA = 3

_counter = iter(range(1_000_000))


async def _outcome(future: Any) -> Any:
    """Await a record future (so ``asyncio.wait_for`` can bound it)."""
    return await future


def _topic(cluster: Any, partitions: int = 1) -> str:
    name = f"mock-{time.time_ns() % 10**9}-{next(_counter)}"
    cluster.create_topic(name, partitions=partitions, replication_factor=3)
    return name


async def test_message_too_large_splits_the_batch(mock_cluster: Any) -> None:
    topic = _topic(mock_cluster)
    values = [f"{i:05d}".encode() * 20 for i in range(400)]
    # Without idempotence, order across a retry holds with one request in flight (as Java).
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        linger_ms=50,
        enable_idempotence=False,
        max_in_flight_requests_per_connection=1,
    ) as producer:
        mock_cluster.push_request_errors(PRODUCE, [MESSAGE_TOO_LARGE])
        metadata = await (await producer.send_many(topic, values))
        assert producer.metrics()["record-error-total"] == 0
    assert [m.offset for m in metadata] == sorted(m.offset for m in metadata)
    consumed = read_back(mock_cluster.bootstrap_servers, topic, expected=len(values))
    assert [r.value for r in consumed] == values


async def test_retriable_errors_are_retried_in_order(mock_cluster: Any) -> None:
    topic = _topic(mock_cluster)
    # The mock checks no sequences for a producer without a transactional id, so a request
    # pipelined behind a failed one would land first; Kafka would reject it. One in flight.
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        retry_backoff_ms=10,
        max_in_flight_requests_per_connection=1,
    ) as producer:
        mock_cluster.push_request_errors(PRODUCE, [NOT_LEADER_OR_FOLLOWER, NOT_LEADER_OR_FOLLOWER])
        futures = [await producer.send(topic, f"{i}".encode()) for i in range(50)]
        await asyncio.gather(*futures)
        assert producer.metrics()["record-retry-total"] >= 1
    consumed = read_back(mock_cluster.bootstrap_servers, topic, expected=50)
    assert [r.value for r in consumed] == [f"{i}".encode() for i in range(50)]


async def test_unknown_topic_waits_max_block_then_fails(mock_cluster: Any) -> None:
    topic = f"absent-{next(_counter)}"
    # The mock creates topics on demand; make this one report UNKNOWN_TOPIC_OR_PARTITION.
    mock_cluster.topic_set_error(topic, UNKNOWN_TOPIC_OR_PART)
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers, max_block_ms=500, retry_backoff_ms=10
    ) as producer:
        mock_cluster.start_request_tracking()
        with pytest.raises(UnknownTopicOrPartitionError, match="max_block_ms"):
            # 40 times max_block_ms: only there to turn a hang into a failure.
            await asyncio.wait_for(producer.send(topic, b"x"), timeout=20)
        metadata_requests = [r for r in mock_cluster.get_requests() if r.api_key == METADATA]
        # It waited: the first UNKNOWN_TOPIC_OR_PARTITION answer did not end the send, the
        # producer asked again (every retry_backoff_ms) until max_block_ms ran out.
        assert len(metadata_requests) >= 2, metadata_requests
        # The producer still works for other topics.
        good = _topic(mock_cluster)
        await producer.send_and_wait(good, b"ok")


async def test_topic_the_broker_calls_invalid(mock_cluster: Any) -> None:
    topic = f"rejected-{next(_counter)}"
    mock_cluster.topic_set_error(topic, INVALID_TOPIC_EXCEPTION)
    async with Producer(bootstrap_servers=mock_cluster.bootstrap_servers) as producer:
        with pytest.raises(InvalidTopicError):
            await producer.send(topic, b"x")


async def test_full_buffer_blocks_then_raises(mock_cluster: Any) -> None:
    topic = _topic(mock_cluster)
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        buffer_memory=64 * 1024,
        batch_size=16 * 1024,
        max_block_ms=300,
        linger_ms=0,
        request_timeout_ms=30_000,
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        for broker in (1, 2, 3):
            mock_cluster.broker_set_rtt(broker, 3000)
        accepted = []
        with pytest.raises(BufferExhaustedError) as info:
            for _ in range(10_000):
                accepted.append(await producer.send(topic, b"x" * 1000))
        assert info.value.retriable
        # Every byte of buffer_memory is held by batches waiting for the slow broker (batches
        # take batch_size each: four of them), none is overdrawn, and the send that raised
        # no longer waits for memory.
        metrics = producer.metrics()
        assert metrics["buffer-available-bytes"] == 0
        assert metrics["waiting-threads"] == 0
        assert len(accepted) * 1000 <= 64 * 1024
        for broker in (1, 2, 3):
            mock_cluster.broker_set_rtt(broker, 0)
        await asyncio.gather(*accepted)
        # Delivered: all of it is free again.
        assert producer.metrics()["buffer-available-bytes"] == 64 * 1024
    consumed = read_back(mock_cluster.bootstrap_servers, topic, expected=len(accepted) + 1)
    assert len(consumed) == len(accepted) + 1


async def test_delivery_timeout_when_the_leader_is_down(mock_cluster: Any) -> None:
    topic = _topic(mock_cluster)
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        delivery_timeout_ms=1500,
        request_timeout_ms=500,
        linger_ms=0,
        enable_idempotence=False,
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        for broker in (1, 2, 3):
            mock_cluster.broker_set_down(broker)
        future = await producer.send(topic, b"lost")
        with pytest.raises(DeliveryTimeoutError) as info:
            # A bound 20 times delivery_timeout_ms, only to turn a hang into a failure. What
            # ended the wait is in the error class: the delivery timeout (request_timeout_ms
            # would be a RequestTimedOutError, and nothing else fails a retriable record).
            await asyncio.wait_for(_outcome(future), timeout=30)
        assert info.value.retriable
        assert producer.metrics()["record-error-total"] == 1
        for broker in (1, 2, 3):
            mock_cluster.broker_set_up(broker)
        await producer.send_and_wait(topic, b"after")
    consumed = read_back(mock_cluster.bootstrap_servers, topic, expected=2)
    assert [r.value for r in consumed] == [b"warm-up", b"after"]


async def test_close_with_timeout_fails_what_is_left(mock_cluster: Any) -> None:
    topic = _topic(mock_cluster)
    producer = Producer(bootstrap_servers=mock_cluster.bootstrap_servers, linger_ms=0)
    await producer.start()
    await producer.send_and_wait(topic, b"first")
    for broker in (1, 2, 3):
        mock_cluster.broker_set_down(broker)
    futures = [await producer.send(topic, b"stuck") for _ in range(5)]
    # 40 times the close timeout, only to turn a hang into a failure. That the timeout ended
    # the wait shows in the errors: ProducerClosedError, not the DeliveryTimeoutError that
    # delivery_timeout_ms (two minutes by default) would give.
    await asyncio.wait_for(producer.close(timeout=0.5), timeout=20)
    for future in futures:
        assert future.done()
        assert isinstance(future.exception(), ProducerClosedError)
        assert isinstance(future.exception(), KafkaError)


async def test_send_many_asks_a_round_robin_partitioner_once_per_value(mock_cluster: Any) -> None:
    # Plain values too: their bulk path picks a partition per batch, as the built-in sticky
    # partitioner does, so any other partitioner is asked once per record instead.
    topic = _topic(mock_cluster, partitions=3)
    values = [b"%04d" % i * 10 for i in range(60)]
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers, partitioner="round_robin"
    ) as producer:
        metadata = await (await producer.send_many(topic, values))
    assert [m.partition for m in metadata] == [i % 3 for i in range(60)]
    consumed = read_back(mock_cluster.bootstrap_servers, topic, expected=len(values))
    assert sorted((r.partition, r.value) for r in consumed) == sorted(
        (i % 3, value) for i, value in enumerate(values)
    )


async def test_send_many_asks_a_round_robin_partitioner_once_per_pair(mock_cluster: Any) -> None:
    # (key, value) pairs take send_many's keyed bulk path; a partitioner that may answer
    # differently when asked twice (round robin) must still be asked once per record, also
    # for the records that start a new batch (two 400-byte records fill one here).
    topic = _topic(mock_cluster, partitions=3)
    items = [(b"k%d" % i, b"%04d" % i * 100) for i in range(60)]
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        partitioner="round_robin",
        batch_size=1024,
    ) as producer:
        metadata = await (await producer.send_many(topic, items))
    assert [m.partition for m in metadata] == [i % 3 for i in range(60)]
    consumed = read_back(mock_cluster.bootstrap_servers, topic, expected=len(items))
    assert sorted((r.key, r.value) for r in consumed) == sorted(items)
