"""Real Apache Kafka: the ``kafka`` and ``kafka_tv1`` fixtures work, and aioproducer's
records, idempotence and transactions hold up against the reference broker.

Records are read back with confluent-kafka's consumer (tests.support.readback), an
independent client.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from aioproducer import Producer, RecordMetadata
from tests.support.kafka import KafkaBroker, KafkaBrokerError, older_kafka_params
from tests.support.readback import ConsumedRecord, read_back

pytestmark = pytest.mark.kafka

T = TypeVar("T")
#: The ``new_topic`` fixture: ``new_topic(broker, partitions=1, **configs) -> name``.
NewTopic = Callable[..., str]

# Every test ends well before this; it only turns a hang into a failure.
_HANG = 60.0


async def _within_limit(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, _HANG)


@pytest.fixture(params=["kafka", "kafka_tv1", *older_kafka_params()])
def any_kafka(request: pytest.FixtureRequest) -> KafkaBroker:
    """Each Kafka node in turn: transaction.version 2 (the default), then 1."""
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return broker


@pytest.fixture(params=["kafka", *older_kafka_params()])
def each_version(request: pytest.FixtureRequest) -> KafkaBroker:
    """Each Kafka version in turn: 4.4 (the session's ``kafka``), then the older ones."""
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return broker


def _values_by_partition(records: list[ConsumedRecord]) -> dict[int, list[bytes | None]]:
    by_partition: dict[int, list[bytes | None]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record.value)
    return by_partition


# -- the fixture -------------------------------------------------------------------------


def test_broker_answers_and_creates_topics(kafka: KafkaBroker, new_topic: NewTopic) -> None:
    assert kafka.running
    assert kafka.bootstrap_servers.startswith("127.0.0.1:")
    assert kafka.startup_seconds is not None
    assert kafka.log_path is not None and "Kafka Server started" in kafka.log_path.read_text()

    topic = new_topic(kafka, partitions=2, max_message_bytes=2048)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = kafka.admin().describe_configs([resource], request_timeout=10)
    entries = futures[resource].result(timeout=10)
    assert entries["max.message.bytes"].value == "2048"

    with pytest.raises(KafkaBrokerError, match="TOPIC_ALREADY_EXISTS"):
        kafka.create_topic(topic, partitions=2)


def test_transaction_versions(kafka: KafkaBroker, kafka_tv1: KafkaBroker) -> None:
    assert kafka.finalized_features()["transaction.version"] == 2
    assert kafka_tv1.finalized_features()["transaction.version"] == 1
    assert kafka.bootstrap_servers != kafka_tv1.bootstrap_servers


# -- aioproducer on Kafka ----------------------------------------------------------------


async def test_round_trip(each_version: KafkaBroker, new_topic: NewTopic) -> None:
    """Keys, values (empty, None, binary), headers (repeated, None, non-ASCII names) and
    timestamps (given or not) come back exactly as sent, where the metadata said."""
    kafka = each_version
    topic = new_topic(kafka, partitions=3)
    day_ago = int(time.time() * 1000) - 86_400_000
    # (partition, key, value, headers, timestamp_ms)
    sent: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]]
    sent = [
        (0, b"k", b"v", [("h", b"1")], None),
        (0, None, b"no key", [], day_ago),
        (1, b"empty value", b"", [("dup", b"a"), ("dup", b"b"), ("none", None)], day_ago + 1),
        (1, b"tombstone", None, [("\u00e9t\u00e9", b"\x00\xff")], None),
        (2, b"\x00\x01", bytes(range(256)) * 40, [("h", b"")], None),
    ]

    async def produce() -> list[RecordMetadata]:
        async with Producer(bootstrap_servers=kafka.bootstrap_servers, linger_ms=5) as producer:
            return [
                await producer.send_and_wait(
                    topic, value, key=key, partition=partition, timestamp_ms=ts, headers=headers
                )
                for partition, key, value, headers, ts in sent
            ]

    before = int(time.time() * 1000)
    metadata = await _within_limit(produce())
    after = int(time.time() * 1000)

    records = read_back(kafka.bootstrap_servers, topic, expected=len(sent), extra_wait=0.3)
    assert len(records) == len(sent)
    by_position = {(record.partition, record.offset): record for record in records}
    for (partition, key, value, headers, ts), meta in zip(sent, metadata, strict=True):
        assert (meta.topic, meta.partition) == (topic, partition)
        record = by_position[(partition, meta.offset)]
        assert (record.key, record.value, record.headers) == (key, value, headers)
        assert record.timestamp_type == 1  # CreateTime
        assert record.timestamp_ms == meta.timestamp
        if ts is None:
            assert before <= record.timestamp_ms <= after
        else:
            assert record.timestamp_ms == ts


async def test_idempotent_producer_five_in_flight(
    each_version: KafkaBroker, new_topic: NewTopic
) -> None:
    """The default (idempotent) producer with 5 requests in flight and small batches:
    every record is written exactly once, in order, at consecutive offsets."""
    kafka = each_version
    topic = new_topic(kafka, partitions=3)
    count = 3000

    async def produce() -> list[RecordMetadata]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers,
            linger_ms=5,
            batch_size=2048,  # ~20 records a batch: many batches, many requests in flight
            max_in_flight_requests_per_connection=5,
        ) as producer:
            assert producer.config.enable_idempotence
            futures = [
                await producer.send(topic, b"%05d" % i + b"." * 80, key=b"%d" % i, partition=i % 3)
                for i in range(count)
            ]
            return list(await asyncio.gather(*futures))

    metadata = await _within_limit(produce())

    for partition in range(3):
        offsets = [meta.offset for i, meta in enumerate(metadata) if i % 3 == partition]
        assert offsets == list(range(count // 3))
    records = read_back(kafka.bootstrap_servers, topic, expected=count, extra_wait=0.5)
    assert len(records) == count
    by_partition = _values_by_partition(records)
    for partition in range(3):
        expected = [b"%05d" % i + b"." * 80 for i in range(partition, count, 3)]
        assert by_partition[partition] == expected
        assert [r.offset for r in records if r.partition == partition] == list(range(count // 3))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_round_trips(
    each_version: KafkaBroker, new_topic: NewTopic, codec: str
) -> None:
    """Each compression codec, with keys and headers, is stored as sent (zstd needs Kafka
    2.1 or later, Produce v7), in order, read back by another client."""
    kafka = each_version
    topic = new_topic(kafka, partitions=1)
    sent = [
        (b"k%03d" % i, b"value %03d " % i + b"x" * (i * 7), [("n", b"%d" % i)]) for i in range(60)
    ]

    async def produce() -> None:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers, compression_type=codec, linger_ms=20
        ) as producer:
            futures = [
                await producer.send(topic, value, key=key, headers=headers)
                for key, value, headers in sent
            ]
            await asyncio.gather(*futures)

    await _within_limit(produce())
    records = read_back(kafka.bootstrap_servers, topic, expected=len(sent), extra_wait=0.3)
    assert [(r.key, r.value, r.headers) for r in records] == sent
    assert [r.offset for r in records] == list(range(len(sent)))


async def test_transactions_commit_and_abort(any_kafka: KafkaBroker, new_topic: NewTopic) -> None:
    """Committed records are visible to read_committed consumers and aborted ones are
    not, though they were written (read_uncommitted sees them), on both transaction
    protocols."""
    topic = new_topic(any_kafka, partitions=2)

    def batch(label: str) -> list[tuple[int, bytes]]:
        return [(i % 2, f"{label}-{i}".encode()) for i in range(6)]

    first, aborted, second = batch("committed-1"), batch("aborted"), batch("committed-2")

    async def produce() -> None:
        async with Producer(
            bootstrap_servers=any_kafka.bootstrap_servers,
            transactional_id=f"t1-{uuid.uuid4().hex[:8]}",
            linger_ms=5,
        ) as producer:
            async with producer.transaction():
                for partition, value in first:
                    await producer.send(topic, value, partition=partition)
            await producer.begin_transaction()
            for partition, value in aborted:
                await producer.send(topic, value, partition=partition)
            await producer.flush()  # the aborted records reach the log
            await producer.abort_transaction()
            async with producer.transaction():
                for partition, value in second:
                    await producer.send(topic, value, partition=partition)

    await _within_limit(produce())

    committed = read_back(
        any_kafka.bootstrap_servers,
        topic,
        expected=len(first) + len(second),
        isolation_level="read_committed",
        extra_wait=0.3,  # an aborted record shown would also push a committed one out
    )
    expected = {
        partition: [value for p, value in first + second if p == partition] for partition in (0, 1)
    }
    assert _values_by_partition(committed) == expected

    everything = read_back(
        any_kafka.bootstrap_servers, topic, expected=3 * len(first), extra_wait=0.3
    )
    expected = {
        partition: [value for p, value in first + aborted + second if p == partition]
        for partition in (0, 1)
    }
    assert _values_by_partition(everything) == expected
