"""aioproducer against Kafka's own Java client (kafka-clients of the broker's version),
on a real Apache Kafka broker.

- Partitioning: every keyed record lands on the partition the Java producer's default
  partitioner picks for its key (empty, binary, UTF-8 keys of many lengths; 3, 7 and 12
  partitions), through ``send`` and ``send_many``, and ``DefaultPartitioner`` says the same.
- Records aioproducer writes with each codec (keys, None and empty values, repeated and
  None-valued headers, given and default timestamps, one batch big enough to be compressed
  off the event loop) are what Kafka's Java consumer reads, field for field; the broker
  keeps every batch with that codec.
- Transactions: a Java consumer reading committed data sees exactly the committed records,
  in the order sent; reading uncommitted, the aborted ones as well.

The Java side is tests/support/java/KafkaReference.java, run by tests.support.java_client.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pytest

from aioproducer import Producer, ProducerRecord, RecordFuture, RecordMetadata
from aioproducer._core.partitioner import DefaultPartitioner
from tests.support.java_client import JavaRecord, java_consume, java_partitions
from tests.support.kafka import KafkaBroker

pytestmark = pytest.mark.kafka

T = TypeVar("T")
#: The ``new_topic`` fixture: ``new_topic(broker, partitions=1, **configs) -> name``.
NewTopic = Callable[..., str]
Headers = list[tuple[str, bytes | None]]

# Every test ends well before this; it only turns a hang into a failure.
_HANG = 60.0


async def _within_limit(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, _HANG)


@dataclass(frozen=True)
class _Sent:
    """One record as aioproducer was asked to send it."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int | None = None
    partition: int | None = None


def _expected(
    topic: str, sent: Sequence[_Sent], metadata: Sequence[RecordMetadata]
) -> list[JavaRecord]:
    """What a consumer must read: each record where its metadata says, grouped by
    partition in the order sent (so offsets out of send order show up as a difference)."""
    records = [
        JavaRecord(
            topic=topic,
            partition=meta.partition,
            offset=meta.offset,
            timestamp=meta.timestamp,
            timestamp_type="CreateTime",
            key=record.key,
            value=record.value,
            headers=record.headers,
        )
        for record, meta in zip(sent, metadata, strict=True)
    ]
    return sorted(records, key=lambda record: record.partition)  # stable: send order kept


# -- partitioning ------------------------------------------------------------------------


def _keys() -> list[bytes]:
    """About 250 keys: empty, every tail length murmur2 has (0-3 bytes past a 4-byte
    word) many times over, random binary bytes (high bit set included), long keys, and
    UTF-8 text."""
    rng = random.Random(794)
    keys = [b""]
    keys += [bytes([byte]) for byte in (0x00, 0x01, 0x7F, 0x80, 0xFF)]
    keys += [b"\x00" * length for length in (2, 3, 4, 5, 8)]
    keys += [b"\xff" * length for length in (2, 3, 4, 5, 8)]
    keys += [rng.randbytes(length) for length in range(1, 41) for _ in range(3)]
    keys += [rng.randbytes(length) for length in (63, 64, 65, 255, 256, 1000, 4099)]
    keys += [f"user-{i}".encode() for i in range(100)]
    keys += [
        text.encode()
        for text in ("clé", "ключ", "鍵", "🔑", "naïve café", "Ünïcödé-" * 5, "\u0000nul", "ℵ₀")
    ]
    return keys


@pytest.mark.parametrize("partitions", [3, 7, 12])
async def test_keyed_records_land_where_the_java_producer_puts_them(
    kafka: KafkaBroker, new_topic: NewTopic, partitions: int
) -> None:
    keys = _keys()
    java_topic = new_topic(kafka, partitions=partitions)
    java = java_partitions(kafka.bootstrap_servers, java_topic, keys)
    assert set(java) == set(range(partitions))  # the keys spread over every partition

    topic = new_topic(kafka, partitions=partitions)

    async def produce() -> tuple[list[int], list[int]]:
        async with Producer(bootstrap_servers=kafka.bootstrap_servers, linger_ms=5) as producer:
            futures = [await producer.send(topic, key, key=key) for key in keys]
            one_by_one = [meta.partition for meta in await asyncio.gather(*futures)]
            results = await producer.send_many(topic, [(key, key) for key in keys])
            bulk = [meta.partition for meta in await results]
            return one_by_one, bulk

    one_by_one, bulk = await _within_limit(produce())
    assert one_by_one == java
    assert bulk == java
    partitioner = DefaultPartitioner()
    available = list(range(partitions))
    assert [partitioner.partition(topic, key, partitions, available) for key in keys] == java


# -- records, every codec ----------------------------------------------------------------


def _records(now_ms: int) -> list[_Sent]:
    """Small records in multi-record batches, over three partitions (some by key hash),
    then one compressible value of 300 KiB: a batch every codec compresses in a worker
    thread (above each codec's compression_offload_bytes), and 20 KiB of random bytes."""
    rng = random.Random(390)
    day_ago = now_ms - 86_400_000
    sent: list[_Sent] = []
    for i in range(90):
        headers: Headers = [("seq", b"%d" % i)]
        if i % 4 == 1:
            headers += [("dup", b"a"), ("dup", None), ("dup", b"")]
        if i % 5 == 2:
            headers += [("", b"empty name"), ("été", bytes(range(256)))]
        sent.append(
            _Sent(
                key=None if i % 6 == 5 else f"key-{i}".encode(),
                value=_value(i),
                headers=headers if i % 9 else [],
                # Given ones go backwards within a batch: negative timestamp deltas.
                timestamp_ms=None if i % 3 else day_ago - i * 1000,
                partition=i % 3 if i % 2 else None,  # the others by key hash or sticky
            )
        )
    sent.append(
        _Sent(b"big", b"compressible " * 24_000, [("size", b"large")], now_ms - 5, partition=1)
    )
    sent.append(_Sent(b"random", rng.randbytes(20_480), [], partition=2))
    sent.append(_Sent(None, None, [("last", None)], 0, partition=0))  # the epoch itself
    return sent


def _value(i: int) -> bytes | None:
    if i % 7 == 3:
        return None  # a tombstone
    if i % 11 == 4:
        return b""
    return f"value {i} ".encode() * (i % 13 + 1)


#: The codecs and the id each one has in a record batch's attributes.
_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _stored_batches(kafka: KafkaBroker, topic: str, partition: int) -> list[tuple[int, int]]:
    """(codec id, record count) of each record batch in the partition's log files, read
    from the broker's data folder."""
    batches = []
    for segment in sorted((kafka.node.log_dir / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 61 <= len(data):  # a batch header is 61 bytes
            (length,) = struct.unpack_from(">i", data, position + 8)
            (attributes,) = struct.unpack_from(">h", data, position + 21)
            (count,) = struct.unpack_from(">i", data, position + 57)
            batches.append((attributes & 0x07, count))
            position += 12 + length
    return batches


@pytest.mark.parametrize("codec", list(_CODECS))
async def test_the_java_consumer_reads_every_codec(
    kafka: KafkaBroker, new_topic: NewTopic, codec: str
) -> None:
    # No retention: old timestamps must not get the records deleted while the test runs.
    topic = new_topic(kafka, partitions=3, retention_ms=-1)
    now_ms = int(time.time() * 1000)
    sent = _records(now_ms)
    half = len(sent) // 2

    async def produce() -> list[RecordMetadata]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers, compression_type=codec, linger_ms=20
        ) as producer:
            futures = [
                await producer.send(
                    topic,
                    record.value,
                    key=record.key,
                    partition=record.partition,
                    timestamp_ms=record.timestamp_ms,
                    headers=record.headers,
                )
                for record in sent[:half]
            ]
            results = await producer.send_many(
                topic,
                [
                    ProducerRecord(
                        topic,
                        record.value,
                        key=record.key,
                        partition=record.partition,
                        timestamp_ms=record.timestamp_ms,
                        headers=record.headers,
                    )
                    for record in sent[half:]
                ],
            )
            return [*await asyncio.gather(*futures), *await results]

    before = int(time.time() * 1000)
    metadata = await _within_limit(produce())
    after = int(time.time() * 1000)

    for record, meta in zip(sent, metadata, strict=True):
        if record.timestamp_ms is None:
            assert before <= meta.timestamp <= after
        else:
            assert meta.timestamp == record.timestamp_ms
    read = java_consume(kafka.bootstrap_servers, topic, expected=len(sent))
    assert read == _expected(topic, sent, metadata)
    # The broker kept the batches as aioproducer compressed them, many records a batch.
    batches = [
        batch for partition in range(3) for batch in _stored_batches(kafka, topic, partition)
    ]
    assert {codec_id for codec_id, _count in batches} == {_CODECS[codec]}
    assert sum(count for _codec_id, count in batches) == len(sent)
    assert max(count for _codec_id, count in batches) > 1


# -- transactions ------------------------------------------------------------------------


async def test_the_java_consumer_reads_only_committed_transactions(
    kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(kafka, partitions=2)

    def batch(label: str, count: int) -> list[_Sent]:
        return [
            _Sent(
                key=f"{label}-{i}".encode(),
                value=f"{label} value {i}".encode() * (i % 5 + 1),
                headers=[("txn", label.encode()), ("i", b"%d" % i)],
                partition=i % 2,
            )
            for i in range(count)
        ]

    first, aborted, second = batch("first", 40), batch("aborted", 30), batch("second", 25)

    async def produce() -> list[RecordMetadata]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers,
            transactional_id=f"java-read-{uuid.uuid4().hex[:8]}",
            linger_ms=5,
            batch_size=1024,  # a few batches per partition and transaction
        ) as producer:

            async def send(records: list[_Sent]) -> list[RecordFuture]:
                return [
                    await producer.send(
                        topic, r.value, key=r.key, partition=r.partition, headers=r.headers
                    )
                    for r in records
                ]

            async with producer.transaction():
                first_futures = await send(first)
            await producer.begin_transaction()
            aborted_futures = await send(aborted)
            await producer.flush()  # the aborted records reach the log
            aborted_metadata = list(await asyncio.gather(*aborted_futures))
            await producer.abort_transaction()
            async with producer.transaction():
                second_futures = await send(second)
            return [
                *await asyncio.gather(*first_futures),
                *aborted_metadata,
                *await asyncio.gather(*second_futures),
            ]

    metadata = await _within_limit(produce())
    everything = [*first, *aborted, *second]
    expected_all = _expected(topic, everything, metadata)
    committed_metadata = metadata[: len(first)] + metadata[len(first) + len(aborted) :]
    expected_committed = _expected(topic, [*first, *second], committed_metadata)

    committed = java_consume(
        kafka.bootstrap_servers, topic, expected=len(expected_committed), read_committed=True
    )
    assert committed == expected_committed
    # The aborted records were written: reading uncommitted data shows them in place.
    assert java_consume(kafka.bootstrap_servers, topic, expected=len(everything)) == expected_all
