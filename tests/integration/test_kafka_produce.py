"""The produce suite on real Apache Kafka, the reference broker.

What the Tansu and mock-cluster suites (test_produce.py) check, checked on Kafka: records
batched many to a request come back exactly as sent, where their metadata says; a
``LogAppendTime`` topic gives the broker's time, in the records and in the metadata; every
codec and level is stored as sent (read from the broker's own log segment); acks 0, 1 and
all; a record the topic refuses as too large fails alone; an unknown topic fails clearly
after ``max_block_ms``; ``partitions_for``; several idempotent producers at once.

Records are read back with confluent-kafka's consumer (tests.support.readback), an
independent client, and compared exactly with what was sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import confluent_kafka
import pytest

from aioproducer import Producer, ProducerRecord, RecordMetadata, TimestampType
from aioproducer.errors import RecordTooLargeError, UnknownTopicOrPartitionError
from tests.support.kafka import KafkaBroker
from tests.support.readback import ConsumedRecord, read_back

pytestmark = pytest.mark.kafka

T = TypeVar("T")
#: The ``new_topic`` fixture: ``new_topic(broker, partitions=1, **configs) -> name``.
NewTopic = Callable[..., str]
Headers = list[tuple[str, bytes | None]]

# Every test ends well before this; it only turns a hang into a failure.
_HANG = 60.0

# The consumer's timestamp types (librdkafka's numbering).
_CONSUMER_CREATE_TIME = 1
_CONSUMER_LOG_APPEND_TIME = 2


async def _within_limit(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, _HANG)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _missing_topic() -> str:
    return f"missing-{uuid.uuid4().hex[:12]}"


def _values_by_partition(records: list[ConsumedRecord]) -> dict[int, list[bytes | None]]:
    by_partition: dict[int, list[bytes | None]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record.value)
    return by_partition


# -- what the broker wrote to its log ----------------------------------------------------


@dataclass(frozen=True)
class StoredBatch:
    """A record batch as the broker stored it in the partition's log segment."""

    base_offset: int
    size: int
    """Bytes of the whole batch in the log."""
    codec: int
    """The attributes' compression bits: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
    record_count: int
    records: bytes
    """The records section as stored (compressed when ``codec`` is not 0)."""


_CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Record batch v2: base offset (int64), batch length (int32), leader epoch (int32), magic
# (int8), CRC (uint32), attributes (int16) ... record count (int32) at byte 57, records at 61.
_BATCH_HEADER = struct.Struct(">qi")
_ATTRIBUTES_AT = 21
_COUNT_AT = 57
_RECORDS_AT = 61


def _stored_batches(broker: KafkaBroker, topic: str, partition: int) -> list[StoredBatch]:
    """Every batch of the partition, read from the broker's log segment files."""
    folder = broker.node.log_dir / f"{topic}-{partition}"
    batches: list[StoredBatch] = []
    for segment in sorted(folder.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + _BATCH_HEADER.size <= len(data):
            base_offset, length = _BATCH_HEADER.unpack_from(data, position)
            end = position + _BATCH_HEADER.size + length
            assert data[position + 16] == 2, "not a v2 record batch"
            (attributes,) = struct.unpack_from(">h", data, position + _ATTRIBUTES_AT)
            (count,) = struct.unpack_from(">i", data, position + _COUNT_AT)
            batches.append(
                StoredBatch(
                    base_offset=base_offset,
                    size=end - position,
                    codec=attributes & 0x07,
                    record_count=count,
                    records=data[position + _RECORDS_AT : end],
                )
            )
            position = end
    return batches


# -- 1. round trips ------------------------------------------------------------------------


def _round_trip_headers(i: int) -> Headers:
    shapes: list[Headers] = [
        [],
        [("h", b"%d" % i)],
        [("dup", b"a"), ("dup", b"b"), ("none", None), ("dup", b"c")],
        [("\u00fcn\u00efc\u00f8d\u00e9-\u540d", "v\u00e4rde \u2713".encode()), ("empty", b"")],
    ]
    return shapes[i % len(shapes)]


async def test_round_trip_of_batched_records(kafka: KafkaBroker, new_topic: NewTopic) -> None:
    """Many records a batch, through send() and send_many(): keys (None, binary), values
    (None, empty, non-ASCII), headers (several, repeated names, None values, non-ASCII) and
    create times (given or not) come back exactly as sent, at the partition and offset their
    metadata reported, each partition in the order sent. Keyed records without a partition
    land where the Java client puts them (murmur2)."""
    topic = new_topic(kafka, partitions=3)
    day_ago = _now_ms() - 86_400_000
    # (key, value, headers, timestamp_ms, partition)
    sent: list[tuple[bytes | None, bytes | None, Headers, int | None, int | None]] = []
    for i in range(120):
        key = None if i % 4 == 0 else b"\xffkey\x00%d" % (i % 9)
        value: bytes | None
        if i % 10 == 3:
            value = None
        elif i % 10 == 7:
            value = b""
        else:
            value = f"value {i} \u00e9t\u00e9 ".encode() * (1 + i % 5)
        timestamp = day_ago + i if i % 3 else None
        partition = i % 3 if i % 5 == 0 else None
        sent.append((key, value, _round_trip_headers(i), timestamp, partition))
    by_send, by_send_many = sent[:60], sent[60:]

    async def produce() -> list[RecordMetadata]:
        async with Producer(bootstrap_servers=kafka.bootstrap_servers, linger_ms=20) as producer:
            futures = [
                await producer.send(topic, v, key=k, partition=p, timestamp_ms=ts, headers=h)
                for k, v, h, ts, p in by_send
            ]
            first = list(await asyncio.gather(*futures))
            items = [ProducerRecord(topic, v, k, p, ts, h) for k, v, h, ts, p in by_send_many]
            second = list(await (await producer.send_many(topic, items)))
            return first + second

    before = _now_ms()
    metadata = await _within_limit(produce())
    after = _now_ms()

    records = read_back(kafka.bootstrap_servers, topic, expected=len(sent), extra_wait=0.3)
    assert len(records) == len(sent)
    by_position = {(record.partition, record.offset): record for record in records}
    for (key, value, headers, ts, partition), meta in zip(sent, metadata, strict=True):
        assert meta.topic == topic
        if partition is not None:
            assert meta.partition == partition
        elif key is not None:
            assert meta.partition == confluent_kafka.murmur2(key, 3)
        assert meta.serialized_key_size == (-1 if key is None else len(key))
        assert meta.serialized_value_size == (-1 if value is None else len(value))
        assert meta.timestamp_type == TimestampType.CREATE_TIME
        record = by_position[(meta.partition, meta.offset)]
        assert (record.key, record.value, record.headers) == (key, value, headers)
        assert record.timestamp == (_CONSUMER_CREATE_TIME, meta.timestamp)
        if ts is None:
            assert before <= record.timestamp_ms <= after
        else:
            assert record.timestamp_ms == ts
    # Each partition holds its records in the order they were sent, at offsets 0, 1, ...
    for partition in range(3):
        offsets = [meta.offset for meta in metadata if meta.partition == partition]
        assert offsets == list(range(len(offsets)))
    assert len({meta.partition for meta in metadata}) == 3


async def test_log_append_time_topic_reports_the_brokers_time(
    kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    """On a topic with ``message.timestamp.type=LogAppendTime`` the broker stamps each batch
    with its own time, whatever the producer set; RecordMetadata reports that time and
    type, as the Java client's does (the log-append time from the Produce response)."""
    topic = new_topic(kafka, partitions=2, message_timestamp_type="LogAppendTime")
    day_ago = _now_ms() - 86_400_000

    async def produce() -> list[RecordMetadata]:
        async with Producer(bootstrap_servers=kafka.bootstrap_servers, linger_ms=20) as producer:
            futures = [
                await producer.send(
                    topic,
                    b"send-%d" % i,
                    partition=i % 2,
                    timestamp_ms=day_ago + i if i % 2 else None,
                )
                for i in range(10)
            ]
            singles = list(await asyncio.gather(*futures))
            plain = await (await producer.send_many(topic, [b"many-%d" % i for i in range(10)]))
            own_times = await (
                await producer.send_many(
                    topic,
                    [
                        ProducerRecord(topic, b"record-%d" % i, timestamp_ms=day_ago)
                        for i in range(4)
                    ],
                    partition=1,
                )
            )
            return singles + list(plain) + list(own_times)

    before = _now_ms()
    metadata = await _within_limit(produce())
    after = _now_ms()
    values = (
        [b"send-%d" % i for i in range(10)]
        + [b"many-%d" % i for i in range(10)]
        + [b"record-%d" % i for i in range(4)]
    )

    records = read_back(kafka.bootstrap_servers, topic, expected=len(values), extra_wait=0.3)
    assert len(records) == len(values)
    by_position = {(record.partition, record.offset): record for record in records}
    for value, meta in zip(values, metadata, strict=True):
        record = by_position[(meta.partition, meta.offset)]
        assert record.value == value
        assert record.timestamp_type == _CONSUMER_LOG_APPEND_TIME
        assert meta.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert meta.timestamp == record.timestamp_ms
        assert before <= meta.timestamp <= after  # the broker's clock, not day_ago


# -- 2. codecs and levels ------------------------------------------------------------------


def _compressible_items() -> list[tuple[bytes, bytes]]:
    """400 (key, value) pairs of JSON orders: about 90 KB that every codec shrinks to a
    third or less, and where each level tried here gives a clearly different size."""
    rng = random.Random(20240611)
    statuses = ["pending", "paid", "packed", "shipped", "delivered", "returned"]
    words = ["fragile", "gift", "express", "leave", "at", "door", "call", "before", "office"]
    items = []
    for i in range(400):
        order = {
            "order": i,
            "user": f"user-{rng.randint(1, 500)}",
            "items": [
                {
                    "sku": f"SKU{rng.randint(1000, 9999)}",
                    "qty": rng.randint(1, 5),
                    "price": round(rng.random() * 100, 2),
                }
                for _ in range(rng.randint(1, 4))
            ],
            "status": rng.choice(statuses),
            "note": " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))),
        }
        items.append((b"order-%03d" % i, json.dumps(order, separators=(",", ":")).encode()))
    return items


async def _one_batch(
    bootstrap: str, topic: str, partition: int, items: list[tuple[bytes, bytes]], **options: Any
) -> list[RecordMetadata]:
    """Send ``items`` to one partition as a single batch: long linger, then flush()."""
    async with Producer(
        bootstrap_servers=bootstrap, linger_ms=60_000, batch_size=512 * 1024, **options
    ) as producer:
        futures = [
            await producer.send(
                topic, value, key=key, partition=partition, headers=[("n", b"%d" % i)]
            )
            for i, (key, value) in enumerate(items)
        ]
        await producer.flush()
        return [future.result() for future in futures]


# The gzip header's XFL byte: zlib writes 4 for level 1, 2 for level 9, 0 for the others.
_GZIP_XFL = {1: 4, 9: 2, None: 0}


@pytest.mark.parametrize(
    ("codec", "level", "versus_default"),
    [
        ("none", None, None),
        ("snappy", None, None),
        ("gzip", 1, "larger"),
        ("gzip", 9, "smaller"),
        ("lz4", 17, "smaller"),
        ("zstd", 19, "smaller"),
        ("zstd", -5, "larger"),
    ],
    ids=["none", "snappy", "gzip-1", "gzip-9", "lz4-17", "zstd-19", "zstd--5"],
)
async def test_every_codec_and_level_is_stored_as_sent(
    kafka: KafkaBroker,
    new_topic: NewTopic,
    codec: str,
    level: int | None,
    versus_default: str | None,
) -> None:
    """The same records as one batch: at the level given to partition 0 and (for a codec
    with levels) at the codec's default level to partition 1. The topic keeps the
    producer's codec (``compression.type=producer``), so the broker's log segment holds the
    batch as the producer compressed it: its codec bits are the codec's, it is much smaller
    than the records, and the level shows in its size (and gzip's header). The consumer
    reads every record back exactly."""
    topic = new_topic(kafka, partitions=2, compression_type="producer")
    items = _compressible_items()
    raw_size = sum(len(key) + len(value) for key, value in items)
    runs = {0: level} if versus_default is None else {0: level, 1: None}

    async def produce() -> dict[int, list[RecordMetadata]]:
        produced = {}
        for partition, run_level in runs.items():
            options: dict[str, Any] = {"compression_type": codec}
            if run_level is not None:
                options["compression_level"] = run_level
            produced[partition] = await _one_batch(
                kafka.bootstrap_servers, topic, partition, items, **options
            )
        return produced

    metadata = await _within_limit(produce())

    stored: dict[int, StoredBatch] = {}
    for partition in runs:
        batches = _stored_batches(kafka, topic, partition)
        assert [(b.base_offset, b.record_count) for b in batches] == [(0, len(items))]
        batch = stored[partition] = batches[0]
        assert batch.codec == _CODEC_IDS[codec]
        if codec == "none":
            assert batch.size > raw_size
        else:
            assert batch.size < raw_size / 2, f"{codec} stored {batch.size} of {raw_size} bytes"
        assert [m.offset for m in metadata[partition]] == list(range(len(items)))
    if codec == "gzip":
        # The records section is one gzip stream; its header's XFL byte tells the level.
        assert stored[0].records[:2] == b"\x1f\x8b"
        assert stored[0].records[8] == _GZIP_XFL[level]
        assert stored[1].records[8] == _GZIP_XFL[None]
    if versus_default == "smaller":
        assert stored[0].size < stored[1].size, (level, stored[0].size, stored[1].size)
    elif versus_default == "larger":
        assert stored[0].size > stored[1].size, (level, stored[0].size, stored[1].size)

    records = read_back(
        kafka.bootstrap_servers, topic, expected=len(items) * len(runs), extra_wait=0.3
    )
    for partition in runs:
        got = [(r.key, r.value, r.headers) for r in records if r.partition == partition]
        assert got == [(k, v, [("n", b"%d" % i)]) for i, (k, v) in enumerate(items)]
    assert len(records) == len(items) * len(runs)


# -- 3. acks -------------------------------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks_store_every_record_once_in_order(
    kafka: KafkaBroker, new_topic: NewTopic, acks: int | str
) -> None:
    """Small batches, several requests in flight: with every acks setting each record is
    stored once, in the order sent. With acks=0 the broker answers nothing, so the metadata
    has offset -1 (as the Java client's), with the partition and create time known; with
    acks 1 and all it has each record's offset. Idempotence is on only with acks=all."""
    topic = new_topic(kafka, partitions=3)
    count = 1500
    base_ts = _now_ms() - 60_000
    values = [b"%05d:" % i + b"." * 60 for i in range(count)]

    async def produce() -> list[RecordMetadata]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers,
            acks=acks,
            linger_ms=2,
            batch_size=1024,
            max_in_flight_requests_per_connection=5,
        ) as producer:
            assert producer.config.enable_idempotence is (acks == "all")
            futures = [
                await producer.send(topic, value, partition=i % 3, timestamp_ms=base_ts + i)
                for i, value in enumerate(values)
            ]
            return list(await asyncio.gather(*futures))

    metadata = await _within_limit(produce())

    assert [(m.partition, m.timestamp) for m in metadata] == [
        (i % 3, base_ts + i) for i in range(count)
    ]
    if acks == 0:
        assert {m.offset for m in metadata} == {-1}
    else:
        for partition in range(3):
            offsets = [m.offset for m in metadata if m.partition == partition]
            assert offsets == list(range(count // 3))
    records = read_back(kafka.bootstrap_servers, topic, expected=count, extra_wait=0.5)
    assert len(records) == count
    assert _values_by_partition(records) == {
        partition: values[partition::3] for partition in range(3)
    }
    for partition in range(3):
        assert [r.offset for r in records if r.partition == partition] == list(range(count // 3))


# -- 4. a record the topic refuses as too large --------------------------------------------


@pytest.mark.parametrize(
    ("linger_ms", "batch_size"),
    [(0, 64), (100, 16384)],
    ids=["small-batches-in-flight", "one-batch-split"],
)
async def test_a_record_over_max_message_bytes_fails_alone(
    kafka: KafkaBroker,
    new_topic: NewTopic,
    caplog: pytest.LogCaptureFixture,
    linger_ms: int,
    batch_size: int,
) -> None:
    """A record over the topic's ``max.message.bytes`` (but under ``max_request_size``) among
    small ones to the same partition of an idempotent producer: in batches of one or two
    records, five requests in flight (the broker refuses the batches behind the failed one
    until their sequences are restarted), or in one batch that the producer splits. Only
    that record fails, with RecordTooLargeError naming the partition; the others are stored
    once, in order, and the producer goes on."""
    topic = new_topic(kafka, partitions=1, max_message_bytes=1024)
    before = [b"before-%02d" % i for i in range(15)]
    after = [b"after-%02d" % i for i in range(15)]
    big = b"x" * 4000
    caplog.set_level(logging.INFO, logger="aioproducer.sender")

    async def produce() -> tuple[list[RecordMetadata | BaseException], RecordMetadata, float]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers,
            linger_ms=linger_ms,
            batch_size=batch_size,
            max_in_flight_requests_per_connection=5,
        ) as producer:
            assert producer.config.enable_idempotence
            futures = [await producer.send(topic, v, partition=0) for v in [*before, big, *after]]
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
            later = await producer.send_and_wait(topic, b"later", partition=0)
            return outcomes, later, producer.metrics()["records-per-request-avg"]

    outcomes, later, records_per_request = await _within_limit(produce())

    split = any("split a too-large batch of 31" in r.getMessage() for r in caplog.records)
    if batch_size == 64:
        assert records_per_request < 3, "the records did not go in small batches"
    else:
        assert split, "the records did not go in one batch"
    failed = outcomes[len(before)]
    assert isinstance(failed, RecordTooLargeError), repr(failed)
    assert not failed.retriable
    assert f"{topic}-0" in str(failed) and "too large" in str(failed)
    assert "max.message.bytes" in str(failed)
    delivered = outcomes[: len(before)] + outcomes[len(before) + 1 :]
    assert all(isinstance(o, RecordMetadata) for o in delivered), delivered
    offsets = [o.offset for o in delivered if isinstance(o, RecordMetadata)] + [later.offset]
    assert offsets == list(range(len(before) + len(after) + 1))
    records = read_back(kafka.bootstrap_servers, topic, expected=len(offsets), extra_wait=0.5)
    assert [r.value for r in records] == [*before, *after, b"later"]


# -- 5. an unknown topic -------------------------------------------------------------------


async def test_an_unknown_topic_fails_after_max_block_ms_and_the_producer_goes_on(
    kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    """The broker does not create topics on use: send() (and send_many()) to a topic that
    does not exist fails after ``max_block_ms`` with UnknownTopicOrPartitionError naming
    the topic and the option. The producer goes on with a topic that exists, and finds the
    unknown one once it is created."""
    existing = new_topic(kafka, partitions=1)
    missing = _missing_topic()

    async def produce() -> tuple[UnknownTopicOrPartitionError, RecordMetadata, RecordMetadata]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers, max_block_ms=1500
        ) as producer:
            with pytest.raises(UnknownTopicOrPartitionError) as info:
                await producer.send(missing, b"nowhere")
            with pytest.raises(UnknownTopicOrPartitionError) as many_info:
                await producer.send_many(missing, [b"nowhere", b"either"])
            assert repr(missing) in str(many_info.value)
            kept = await producer.send_and_wait(existing, b"still sending")
            await asyncio.to_thread(kafka.create_topic, missing, 1)
            found = await producer.send_and_wait(missing, b"created later")
            return info.value, kept, found

    error, kept, found = await _within_limit(produce())

    message = str(error)
    assert repr(missing) in message
    assert "not present in metadata" in message and "max_block_ms" in message
    assert (kept.topic, kept.offset, found.topic, found.offset) == (existing, 0, missing, 0)
    for topic, value in ((existing, b"still sending"), (missing, b"created later")):
        records = read_back(kafka.bootstrap_servers, topic, expected=1, extra_wait=0.3)
        assert [r.value for r in records] == [value]


# -- 6. partitions_for ---------------------------------------------------------------------


async def test_partitions_for(kafka: KafkaBroker, new_topic: NewTopic) -> None:
    """partitions_for() gives the topic's partition ids; a partition beyond them, or a topic
    that does not exist, is UnknownTopicOrPartitionError."""
    topic = new_topic(kafka, partitions=5)
    missing = _missing_topic()

    async def produce() -> tuple[list[int], RecordMetadata]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers, max_block_ms=1500
        ) as producer:
            partitions = await producer.partitions_for(topic)
            with pytest.raises(UnknownTopicOrPartitionError, match=f"'{missing}' not present"):
                await producer.partitions_for(missing)
            with pytest.raises(UnknownTopicOrPartitionError, match="0 to 4"):
                await producer.send(topic, b"x", partition=5)
            return partitions, await producer.send_and_wait(topic, b"last", partition=4)

    partitions, last = await _within_limit(produce())

    assert partitions == [0, 1, 2, 3, 4]
    assert (last.partition, last.offset) == (4, 0)
    records = read_back(kafka.bootstrap_servers, topic, expected=1, extra_wait=0.3)
    assert [(r.partition, r.value) for r in records] == [(4, b"last")]


# -- 7. idempotent producers side by side --------------------------------------------------


async def test_idempotent_producers_side_by_side_write_everything_once(
    kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    """Three idempotent producers (acks=all, 5 requests in flight, small batches) write to
    the same partitions at once: every record is stored exactly once, each producer's
    records in the order it sent them, at the offsets their metadata reported."""
    topic = new_topic(kafka, partitions=3)
    producers, count = 3, 1200

    def value(producer_index: int, i: int) -> bytes:
        return b"p%d-%05d:" % (producer_index, i) + b"." * 50

    async def produce(producer_index: int) -> list[RecordMetadata]:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            batch_size=1024,
            max_in_flight_requests_per_connection=5,
            client_id=f"side-by-side-{producer_index}",
        ) as producer:
            futures = []
            for i in range(count):
                futures.append(
                    await producer.send(topic, value(producer_index, i), partition=i % 3)
                )
                if i % 50 == 49:
                    await asyncio.sleep(0)  # let the other producers append too
            return list(await asyncio.gather(*futures))

    results = await _within_limit(asyncio.gather(*(produce(n) for n in range(producers))))

    total = producers * count
    records = read_back(kafka.bootstrap_servers, topic, expected=total, extra_wait=0.5)
    assert len(records) == total
    assert len({r.value for r in records}) == total, "a record was stored twice"
    stored = {(r.partition, r.offset): r.value for r in records}
    for producer_index, metadata in enumerate(results):
        for i, meta in enumerate(metadata):
            assert meta.partition == i % 3
            assert stored[(meta.partition, meta.offset)] == value(producer_index, i)
    for partition in range(3):
        in_log = [r for r in records if r.partition == partition]
        assert [r.offset for r in in_log] == list(range(len(in_log)))
        for producer_index in range(producers):
            mine = [
                r.value for r in in_log if r.value and r.value.startswith(b"p%d-" % producer_index)
            ]
            assert mine == [value(producer_index, i) for i in range(partition, count, 3)]
