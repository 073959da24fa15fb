"""Buffer control on Apache Kafka: ``len(producer)``, ``purge()`` and ``try_send()``, read
back with confluent-kafka's consumer.

- ``test_purge_drops_what_is_buffered_and_the_producer_goes_on``: records held back by a long
  ``linger_ms`` are counted by ``len()``, purged (their futures fail with PurgedError, not
  written), and the records sent after the purge are the only ones the topic holds, in
  order, under idempotence.
- ``test_try_send_refuses_at_once_and_loses_nothing_accepted``: with a small
  ``buffer_memory`` filled by lingering batches, ``try_send`` raises BufferExhaustedError
  at once (``max_block_ms`` is a minute; the bound checked has generous slack), and every
  record it accepted is in the topic after a flush.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from aioproducer import Producer
from aioproducer import errors as e
from tests.support.kafka import KafkaBroker
from tests.support.readback import read_back

pytestmark = pytest.mark.kafka

NewTopic = Callable[..., str]


async def test_purge_drops_what_is_buffered_and_the_producer_goes_on(
    kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(kafka, partitions=2)
    async with Producer(
        bootstrap_servers=kafka.bootstrap_servers, linger_ms=60000, enable_idempotence=True
    ) as producer:
        await asyncio.wait_for(producer.partitions_for(topic), 30)
        lingering = [
            await producer.send(topic, b"purged-%d" % i, partition=i % 2) for i in range(20)
        ]
        assert len(producer) == 20
        assert producer.purge() == 20
        assert len(producer) == 0
        for future in lingering:
            error = future.exception()
            assert isinstance(error, e.PurgedError) and error.maybe_written is False
        kept = [await producer.send(topic, b"kept-%d" % i, partition=i % 2) for i in range(10)]
        await asyncio.wait_for(producer.flush(), 60)
        assert all(future.exception() is None for future in kept)
    records = await asyncio.to_thread(
        read_back, kafka.bootstrap_servers, topic, expected=10, extra_wait=1.0
    )
    by_partition: dict[int, list[bytes | None]] = {0: [], 1: []}
    for record in records:
        by_partition[record.partition].append(record.value)
    assert by_partition == {
        0: [b"kept-%d" % i for i in range(0, 10, 2)],
        1: [b"kept-%d" % i for i in range(1, 10, 2)],
    }


async def test_try_send_refuses_at_once_and_loses_nothing_accepted(
    kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(kafka, partitions=4)
    async with Producer(
        bootstrap_servers=kafka.bootstrap_servers,
        linger_ms=60000,
        batch_size=16384,
        buffer_memory=65536,
        max_block_ms=60000,
    ) as producer:
        await asyncio.wait_for(producer.partitions_for(topic), 30)
        accepted: list[tuple[int, bytes]] = []
        refused: e.BufferExhaustedError | None = None
        start = time.monotonic()
        for index in range(10000):
            value = b"%06d" % index + b"x" * 1000
            partition = index % 4
            try:
                await producer.try_send(topic, value, partition=partition)
            except e.BufferExhaustedError as error:
                refused = error
                break
            accepted.append((partition, value))
        elapsed = time.monotonic() - start
        assert refused is not None, "the buffer never filled"
        assert "the buffer is full" in str(refused)
        assert elapsed < 30, f"try_send waited {elapsed:.1f} s; max_block_ms is 60 s"
        assert len(producer) == len(accepted)
        await asyncio.wait_for(producer.flush(), 60)
    records = await asyncio.to_thread(
        read_back, kafka.bootstrap_servers, topic, expected=len(accepted), extra_wait=1.0
    )
    got: dict[int, list[bytes | None]] = {}
    for record in records:
        got.setdefault(record.partition, []).append(record.value)
    want: dict[int, list[bytes | None]] = {}
    for partition, value in accepted:
        want.setdefault(partition, []).append(value)
    assert got == want
