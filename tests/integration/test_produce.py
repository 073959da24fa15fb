"""Round trips on real brokers (Tansu and librdkafka's 3-broker mock cluster), read back with
confluent-kafka's consumer: keys, values (empty and None), headers, timestamps, partitions and
per-partition order exactly as sent."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import pytest

from aioproducer import Producer, ProducerRecord, RecordMetadata, RecordMetadataSequence
from aioproducer._core.answers import AnswerHandler
from aioproducer.errors import (
    InvalidTopicError,
    PartitionerError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from aioproducer.net.connection import BrokerConnection
from aioproducer.protocol.messages import ProduceRequest
from aioproducer.protocol.record_reader import decode_record_batches
from tests.support.readback import read_back
from tests.support.wire import Send, intercept_send_for


@dataclass
class Target:
    """A broker to produce to, and how to make a topic on it."""

    name: str
    bootstrap: str
    make_topic: Callable[[int], str]


_counter = iter(range(1_000_000))


def _name(prefix: str) -> str:
    return f"{prefix}-{time.time_ns() % 10**9}-{next(_counter)}"


@pytest.fixture(params=["tansu", "mock"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "tansu":
        broker = request.getfixturevalue("tansu")

        def make_tansu(partitions: int) -> str:
            topic = _name("t")
            broker.create_topic(topic, partitions=partitions)
            return topic

        yield Target("tansu", broker.bootstrap_servers, make_tansu)
    else:
        cluster = request.getfixturevalue("mock_cluster")

        def make_mock(partitions: int) -> str:
            topic = _name("m")
            cluster.create_topic(topic, partitions=partitions, replication_factor=3)
            return topic

        yield Target("mock", cluster.bootstrap_servers, make_mock)


def _by_partition(records: list[Any]) -> dict[int, list[Any]]:
    grouped: dict[int, list[Any]] = defaultdict(list)
    for record in records:
        grouped[record.partition].append(record)
    return grouped


async def test_round_trip_every_field(target: Target) -> None:
    topic = target.make_topic(3)
    sent: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int, int]] = []
    async with Producer(bootstrap_servers=target.bootstrap, linger_ms=2) as producer:
        futures = []
        base_ts = 1_700_000_000_000
        for i in range(60):
            key = None if i % 5 == 0 else f"key-{i % 7}".encode()
            if i % 11 == 0:
                value: bytes | None = None
            elif i % 13 == 0:
                value = b""
            else:
                value = f"value-{i}".encode() * (1 + i % 3)
            headers: list[tuple[str, bytes | None]] = (
                [("h1", f"{i}".encode()), ("empty", b"")] if i % 2 else []
            )
            partition = 2 if i % 17 == 0 else None
            futures.append(
                await producer.send(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp_ms=base_ts + i,
                    headers=headers,
                )
            )
            sent.append((key, value, headers, base_ts + i, -1 if partition is None else partition))
        metadata = [await future for future in futures]
    assert all(isinstance(m, RecordMetadata) for m in metadata)
    for (key, value, _, ts, partition), meta in zip(sent, metadata, strict=True):
        assert meta.topic == topic
        assert meta.serialized_key_size == (-1 if key is None else len(key))
        assert meta.serialized_value_size == (-1 if value is None else len(value))
        if partition >= 0:
            assert meta.partition == partition
        if target.name == "tansu":
            assert meta.timestamp == ts

    consumed = read_back(target.bootstrap, topic, expected=len(sent))
    assert len(consumed) == len(sent)
    by_position = {(r.partition, r.offset): r for r in consumed}
    for (key, value, headers, ts, _), meta in zip(sent, metadata, strict=True):
        record = by_position[(meta.partition, meta.offset)]
        assert record.key == key
        assert record.value == value
        assert list(record.headers or []) == headers
        assert record.timestamp[1] == ts
    # Per-partition order is the order of sending: the log of each partition, in offset
    # order, holds what was sent to it in the order it was sent (timestamps are unique).
    by_partition = _by_partition(consumed)
    assert set(by_partition) == {m.partition for m in metadata}
    for partition, records in by_partition.items():
        offsets_in_send_order = [m.offset for m in metadata if m.partition == partition]
        assert offsets_in_send_order == sorted(offsets_in_send_order)
        sent_here = [
            (key, value, ts)
            for (key, value, _, ts, _), meta in zip(sent, metadata, strict=True)
            if meta.partition == partition
        ]
        assert [(r.key, r.value, r.timestamp[1]) for r in records] == sent_here


async def test_keys_land_where_the_java_client_puts_them(target: Target) -> None:
    topic = target.make_topic(5)
    keys = [f"user-{i}".encode() for i in range(200)]
    async with Producer(bootstrap_servers=target.bootstrap) as producer:
        results = await producer.send_many(topic, [(k, b"v") for k in keys])
        metadata = await results
    # librdkafka's murmur2 partitioner is the Java client's algorithm.
    for key, meta in zip(keys, metadata, strict=True):
        assert meta.partition == confluent_kafka.murmur2(key, 5)
    consumed = read_back(target.bootstrap, topic, expected=len(keys))
    assert {(r.key, r.partition) for r in consumed} == {
        (k, confluent_kafka.murmur2(k, 5)) for k in keys
    }


async def test_send_many_keeps_order_and_returns_metadata(target: Target) -> None:
    topic = target.make_topic(1)
    values = [f"{i:06d}".encode() for i in range(5000)]
    async with Producer(bootstrap_servers=target.bootstrap, batch_size=4096) as producer:
        results = await producer.send_many(topic, values)
        metadata = await results
    first = metadata[0].offset
    assert [m.offset for m in metadata] == list(range(first, first + 5000))
    consumed = read_back(target.bootstrap, topic, expected=5000)
    assert [r.value for r in consumed] == values


async def test_send_many_metadata_is_a_sequence_matching_each_records_future(
    target: Target,
) -> None:
    # What awaiting send_many gives: a read-only sequence whose items are the metadata the
    # per-record futures report, in the order given, across batches and partitions.
    topic = target.make_topic(3)
    items = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(600)]
    async with Producer(bootstrap_servers=target.bootstrap, batch_size=1024) as producer:
        results = await producer.send_many(topic, items)
        metadata = await results
        from_futures = [await future for future in results.futures]
    assert isinstance(metadata, RecordMetadataSequence)
    assert len(metadata) == 600
    assert metadata == from_futures
    assert list(metadata) == from_futures
    assert metadata[5] == from_futures[5] and metadata[-1] == from_futures[-1]
    assert metadata[10:20] == from_futures[10:20]
    assert metadata.index(from_futures[42]) == 42
    assert metadata != from_futures[:-1]
    with pytest.raises(TypeError):
        hash(metadata)
    # Each record's offset is where the consumer finds that record.
    consumed = read_back(target.bootstrap, topic, expected=600)
    stored = {(r.partition, r.offset): r.value for r in consumed}
    for meta, (_, value) in zip(metadata, items, strict=True):
        assert meta.topic == topic
        assert stored[(meta.partition, meta.offset)] == value
        assert meta.serialized_key_size == 2 and meta.serialized_value_size == len(value)


async def test_send_many_waits_for_memory_mid_run_and_keeps_order(target: Target) -> None:
    # 2,000 records of 1 KiB through 64 KiB of buffer memory: send_many waits for memory
    # about every fourth batch, in runs of plain values and between (key, value) pairs.
    topic = target.make_topic(1)
    items: list[Any] = []
    for i in range(2000):
        value = f"{i:06d}".encode() + b"." * 1018
        items.append((b"k%d" % i, value) if i % 500 < 50 else value)
    async with Producer(
        bootstrap_servers=target.bootstrap, batch_size=4096, buffer_memory=64 * 1024
    ) as producer:
        metadata = await (await producer.send_many(topic, items))
    first = metadata[0].offset
    assert [m.offset for m in metadata] == list(range(first, first + 2000))
    consumed = read_back(target.bootstrap, topic, expected=2000)
    expected = [item[1] if isinstance(item, tuple) else item for item in items]
    assert [r.value for r in consumed] == expected
    assert [r.key for r in consumed] == [
        item[0] if isinstance(item, tuple) else None for item in items
    ]


@pytest.mark.parametrize("buffer_memory", [1 << 20, 8192], ids=["room", "waits-for-memory"])
async def test_send_many_spreads_big_key_less_records_like_send(
    target: Target, buffer_memory: int
) -> None:
    # Each value takes over half a batch, so every record starts a batch of its own. The
    # sticky partitioner must count those first records, or it never moves on: send() and
    # send_many() alike must move 60 such records on from partition to partition. (Not
    # necessarily to all three: adaptive partitioning (KIP-794) weighs each switch against
    # the queue sizes the sender last saw, and may avoid a partition whose queue was long.)
    topic = target.make_topic(3)
    values = [b"%04d" % i + b"." * 2300 for i in range(60)]
    async with Producer(
        bootstrap_servers=target.bootstrap, batch_size=4096, buffer_memory=buffer_memory
    ) as producer:
        many = await (await producer.send_many(topic, values))
        single = [await producer.send(topic, value) for value in values]
        one_by_one = [await future for future in single]
    for metadata in (many, one_by_one):
        used = {m.partition for m in metadata}
        assert len(used) >= 2, [m.partition for m in metadata]
    consumed = read_back(target.bootstrap, topic, expected=120)
    assert sorted(r.value for r in consumed) == sorted(values * 2)


async def test_send_many_accepts_records_and_pairs(target: Target) -> None:
    topic = target.make_topic(2)
    items: list[Any] = [
        ProducerRecord(topic, b"r0", b"k0", partition=1, headers=[("a", b"1")], timestamp_ms=5),
        (b"k1", b"r1"),
        b"r2",
    ]
    async with Producer(bootstrap_servers=target.bootstrap) as producer:
        metadata = await (await producer.send_many(topic, items))
    assert metadata[0].partition == 1
    consumed = read_back(target.bootstrap, topic, expected=3)
    by_value = {r.value: r for r in consumed}
    assert by_value[b"r0"].key == b"k0" and by_value[b"r0"].headers == [("a", b"1")]
    assert by_value[b"r0"].timestamp[1] == 5
    assert by_value[b"r1"].key == b"k1"
    assert by_value[b"r2"].key is None


@pytest.mark.parametrize("keys", ["keyed", "no key column"])
@pytest.mark.parametrize("buffer_memory", [1 << 20, 16384], ids=["room", "waits-for-memory"])
async def test_send_many_sends_arrow_rows_as_the_pairs_they_hold(
    target: Target, buffer_memory: int, keys: str
) -> None:
    # The Spark data source hands send_many an Arrow batch as a BinaryPairs, encoded from
    # the columns' buffers. The broker must store what the same (key, value) tuples give:
    # keyed rows where the Java client puts them, in order; rows without a key (the general
    # path, sticky; or a whole batch without a key column, a run per batch) and null values
    # (tombstones) too; and with little buffer memory the rows that wait for it in their
    # place.
    arrowcols = pytest.importorskip(
        "aioproducer._native.arrowcols", reason="the C helper is built with the compiled hot path"
    )
    pa = pytest.importorskip("pyarrow")
    rng = random.Random(11)
    keyed = keys == "keyed"
    pairs: list[tuple[bytes | None, bytes | None]] = [
        (
            None if i % 97 == 5 or not keyed else b"user-%d" % rng.randrange(300),
            None if i % 89 == 7 else b"%05d." % i + rng.randbytes(rng.randrange(400)),
        )
        for i in range(3000)
    ]

    def spec(array: Any) -> tuple[Any, Any, Any, int, bool]:
        validity, offsets, data = array.buffers()
        return (validity, offsets, data, array.offset, False)

    rows = arrowcols.BinaryPairs(
        len(pairs),
        spec(pa.array([k for k, _ in pairs], pa.binary())) if keyed else None,
        spec(pa.array([v for _, v in pairs], pa.binary())),
    )
    topic = target.make_topic(4)
    async with Producer(
        bootstrap_servers=target.bootstrap, batch_size=4096, buffer_memory=buffer_memory
    ) as producer:
        results = await producer.send_many(topic, rows)
        metadata = await results
    assert len(metadata) == len(pairs)
    for (key, value), meta in zip(pairs, metadata, strict=True):
        if key is not None:
            assert meta.partition == confluent_kafka.murmur2(key, 4)
        assert meta.serialized_key_size == (-1 if key is None else len(key))
        assert meta.serialized_value_size == (-1 if value is None else len(value))
    consumed = read_back(target.bootstrap, topic, expected=len(pairs))
    by_partition: dict[int, list[Any]] = defaultdict(list)
    for record in consumed:
        by_partition[record.partition].append((record.offset, record.key, record.value))
    for partition, stored in by_partition.items():
        sent_here = [
            (meta.offset, key, value)
            for (key, value), meta in zip(pairs, metadata, strict=True)
            if meta.partition == partition
        ]
        assert sorted(stored) == sent_here, f"partition {partition}"
    assert sum(map(len, by_partition.values())) == len(pairs)
    if not keyed:
        assert len(by_partition) > 1, "the sticky partitioner never moved on"


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks(target: Target, acks: Any) -> None:
    if acks == 0 and target.name == "mock":
        pytest.skip("the mock cluster answers acks=0 requests; covered on Tansu")
    topic = target.make_topic(1)
    async with Producer(bootstrap_servers=target.bootstrap, acks=acks) as producer:
        futures = [await producer.send(topic, f"{i}".encode()) for i in range(100)]
        metadata = [await f for f in futures]
    if acks == 0:
        assert all(m.offset == -1 for m in metadata)
    else:
        assert [m.offset for m in metadata] == list(range(100))
    consumed = read_back(target.bootstrap, topic, expected=100)
    assert [r.value for r in consumed] == [f"{i}".encode() for i in range(100)]


async def test_serializers_and_interceptors(target: Target) -> None:
    topic = target.make_topic(1)
    acknowledged: list[tuple[Any, Any]] = []

    class Tag:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            record.headers = [*(record.headers or []), ("tag", b"yes")]
            return record

        def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
            acknowledged.append((metadata.offset, error))

    class Broken:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            raise RuntimeError("interceptor bug")

        def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
            raise RuntimeError("interceptor bug")

    async with Producer(
        bootstrap_servers=target.bootstrap,
        key_serializer=lambda k: k.encode(),
        value_serializer=lambda v: repr(v).encode(),
        interceptors=[Broken(), Tag()],
    ) as producer:
        await producer.send_and_wait(topic, {"n": 1}, key="a")
        await producer.send_and_wait(topic, [2], key="b")
    consumed = read_back(target.bootstrap, topic, expected=2)
    assert [(r.key, r.value) for r in consumed] == [(b"a", b"{'n': 1}"), (b"b", b"[2]")]
    assert all(("tag", b"yes") in r.headers for r in consumed)
    assert acknowledged == [(0, None), (1, None)]


async def test_interceptors_hear_of_a_record_whose_caller_gave_up_waiting(
    target: Target,
) -> None:
    # The caller's wait is cancelled (a timeout) before the broker answers: its future is
    # detached, the record is still delivered, the interceptors hear of it with its offset,
    # and the producer goes on.
    topic = target.make_topic(1)
    acknowledged: list[tuple[int, BaseException | None]] = []

    class Count:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            return record

        def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
            acknowledged.append((metadata.offset, error))

    async with Producer(
        bootstrap_servers=target.bootstrap, linger_ms=200, interceptors=[Count()]
    ) as producer:
        future = await producer.send(topic, b"given up on")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(future, 0.01)
        assert future.cancelled()
        second = await producer.send_and_wait(topic, b"waited for")
        assert second.offset == 1
    assert acknowledged == [(0, None), (1, None)]
    consumed = read_back(target.bootstrap, topic, expected=2)
    assert [r.value for r in consumed] == [b"given up on", b"waited for"]


async def test_bad_inputs_fail_clearly_and_lose_nothing_else(target: Target) -> None:
    topic = target.make_topic(2)
    async with Producer(
        bootstrap_servers=target.bootstrap, max_request_size=10_000, max_block_ms=3000
    ) as producer:
        good = [await producer.send(topic, b"before")]
        with pytest.raises(InvalidTopicError):
            await producer.send("bad topic!", b"x")
        with pytest.raises(SerializationError, match="value_serializer") as info:
            await producer.send(topic, "a str")
        assert isinstance(info.value, TypeError)
        with pytest.raises(SerializationError, match="key_serializer"):
            await producer.send(topic, b"x", key=123)
        with pytest.raises(SerializationError):
            await producer.send(topic, b"x", headers=[("h", "not bytes")])  # type: ignore[list-item]
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            await producer.send(topic, b"x" * 20_000)
        with pytest.raises(UnknownTopicOrPartitionError, match="out of range"):
            await producer.send(topic, b"x", partition=7)
        good.append(await producer.send(topic, b"after"))
        metadata = [await f for f in good]
    with pytest.raises(ProducerClosedError):
        await producer.send(topic, b"late")

    class OffByOne:
        def partition(self, topic: str, key: bytes | None, count: int, available: Any) -> int:
            return count  # one past the last partition

    async with Producer(bootstrap_servers=target.bootstrap, partitioner=OffByOne()) as producer:
        with pytest.raises(PartitionerError, match="from 0 to 1"):
            await producer.send(topic, b"nowhere")
        with pytest.raises(PartitionerError, match="from 0 to 1"):
            await producer.send_many(topic, [b"nowhere"])
        good.append(await producer.send(topic, b"explicit", partition=1))
        await good[-1]
    consumed = read_back(target.bootstrap, topic, expected=3)
    assert sorted(r.value for r in consumed) == [b"after", b"before", b"explicit"]
    assert {m.topic for m in metadata} == {topic}


async def test_partitions_for_and_metrics(target: Target) -> None:
    topic = target.make_topic(4)
    async with Producer(bootstrap_servers=target.bootstrap) as producer:
        assert await producer.partitions_for(topic) == [0, 1, 2, 3]
        await (await producer.send_many(topic, [b"x" * 100] * 1000))
        metrics = producer.metrics()
    assert metrics["record-send-total"] == 1000
    assert metrics["record-error-total"] == 0
    assert metrics["batch-size-avg"] > 100
    assert metrics["records-per-request-avg"] >= 1
    assert metrics["request-latency-avg"] > 0
    assert metrics["buffer-total-bytes"] == 32 * 1024 * 1024
    assert metrics["buffer-available-bytes"] == metrics["buffer-total-bytes"]
    for name in (
        "record-send-rate",
        "record-retry-total",
        "compression-rate-avg",
        "request-latency-max",
        "record-queue-time-avg",
        "bufferpool-wait-time-total",
    ):
        assert name in metrics


async def test_large_records_get_their_own_batch(target: Target) -> None:
    topic = target.make_topic(1)
    big = bytes(range(256)) * 400  # 100 KiB, far above batch_size
    async with Producer(bootstrap_servers=target.bootstrap, batch_size=16384) as producer:
        futures = [await producer.send(topic, v) for v in (b"small", big, b"small2")]
        await asyncio.gather(*futures)
    consumed = read_back(target.bootstrap, topic, expected=3)
    assert [r.value for r in consumed] == [b"small", big, b"small2"]


async def test_close_delivers_everything_buffered(target: Target) -> None:
    topic = target.make_topic(3)
    producer = Producer(bootstrap_servers=target.bootstrap, linger_ms=10_000)
    await producer.start()
    futures = [await producer.send(topic, f"{i}".encode()) for i in range(300)]
    assert not any(f.done() for f in futures)  # linger holds them
    await producer.close()
    assert all(f.done() for f in futures)
    assert all(f.exception() is None for f in futures)
    consumed = read_back(target.bootstrap, topic, expected=300)
    assert len(consumed) == 300


async def test_flush_sends_lingering_batches(target: Target) -> None:
    topic = target.make_topic(1)
    values = [b"x%d" % i for i in range(10)]
    async with Producer(bootstrap_servers=target.bootstrap, linger_ms=60_000) as producer:
        futures = [await producer.send(topic, value) for value in values]
        assert not any(f.done() for f in futures)  # linger holds them
        await producer.flush(timeout=20)
        assert all(f.done() and f.exception() is None for f in futures)
        metadata = [f.result() for f in futures]
        # What the broker holds once flush returns, where the futures say it is.
        consumed = read_back(target.bootstrap, topic, expected=len(values))
    assert [r.value for r in consumed] == values
    assert [r.offset for r in consumed] == [m.offset for m in metadata]


async def test_the_ways_of_waiting_agree_and_a_cancelled_gather_loses_nothing(
    target: Target,
) -> None:
    # gather, awaiting in order, asyncio.wait and as_completed over record futures see the
    # same metadata, where the broker stored each record; a gather cancelled while its
    # records linger only detaches their futures: the broker still gets every record, once.
    topic = target.make_topic(3)
    values = [b"value-%04d" % n for n in range(400)]
    async with Producer(bootstrap_servers=target.bootstrap, linger_ms=60_000) as producer:
        first = [await producer.send(topic, value) for value in values[:100]]
        gathering = asyncio.ensure_future(asyncio.gather(*first))
        await producer.flush(timeout=20)
        gathered = list(await gathering)
        assert gathered == [await future for future in first]
        second = [await producer.send(topic, value) for value in values[100:200]]
        flushing = asyncio.ensure_future(producer.flush(timeout=20))
        done, pending = await asyncio.wait(second, timeout=30)
        assert done == set(second) and not pending
        await flushing
        third = [await producer.send(topic, value) for value in values[200:300]]
        flushing = asyncio.ensure_future(producer.flush(timeout=20))
        completed = [await next_done for next_done in asyncio.as_completed(third, timeout=30)]
        await flushing
        cancelled = [await producer.send(topic, value) for value in values[300:]]
        waiting = asyncio.ensure_future(asyncio.gather(*cancelled))
        await asyncio.sleep(0)
        waiting.cancel()  # linger_ms holds the records: nothing was answered yet
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert all(future.cancelled() for future in cancelled)
        await producer.flush(timeout=20)
    metadata = gathered + [f.result() for f in second] + [f.result() for f in third]
    assert sorted(completed) == sorted(f.result() for f in third)
    consumed = read_back(target.bootstrap, topic, expected=len(values), extra_wait=0.5)
    assert sorted(r.value or b"" for r in consumed) == values  # each record once
    where = {(r.partition, r.offset): r.value for r in consumed}
    assert [where[(m.partition, m.offset)] for m in metadata] == values[:300]


def test_round_trip_under_uvloop(tansu: Any) -> None:
    uvloop = pytest.importorskip("uvloop")
    topic = f"uv-{next(_counter)}"
    tansu.create_topic(topic, partitions=2)

    async def main() -> list[RecordMetadata]:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
            futures = [await producer.send(topic, f"{i}".encode(), key=b"k") for i in range(500)]
            return list(await asyncio.gather(*futures))

    metadata = uvloop.run(main())
    assert [m.offset for m in metadata] == list(range(500))
    consumed = read_back(tansu.bootstrap_servers, topic, expected=500)
    assert [r.value for r in consumed] == [f"{i}".encode() for i in range(500)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_reads_back_with_librdkafka(target: Target, codec: str) -> None:
    topic = target.make_topic(2)
    # Compressible and incompressible values, and batches of several 32 KiB snappy blocks.
    values = [f"record {i} ".encode() * (1 + i % 50) for i in range(3000)]
    values += [bytes(range(256)) * 40 for _ in range(20)]
    async with Producer(
        bootstrap_servers=target.bootstrap, compression_type=codec, batch_size=128 * 1024
    ) as producer:
        futures = [
            await producer.send(topic, value, key=f"k{i % 10}".encode())
            for i, value in enumerate(values)
        ]
        await asyncio.gather(*futures)
        ratio = producer.metrics()["compression-rate-avg"]
    assert 0 < ratio < 1  # the real compressed/uncompressed ratio
    consumed = read_back(target.bootstrap, topic, expected=len(values))
    assert sorted(r.value for r in consumed) == sorted(values)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_batches_compressed_in_worker_threads_read_back_in_order(
    target: Target, codec: str
) -> None:
    topic = target.make_topic(3)
    values = [f"{i:06d} ".encode() + b"event payload " * (1 + i % 40) for i in range(4000)]
    async with Producer(
        bootstrap_servers=target.bootstrap,
        compression_type=codec,
        compression_offload_bytes=0,  # every batch goes to a worker thread
        batch_size=32 * 1024,
        linger_ms=20,
    ) as producer:
        futures = [
            await producer.send(topic, value, key=f"k{i % 7}".encode())
            for i, value in enumerate(values)
        ]
        metadata = await asyncio.gather(*futures)
        offloaded = producer.metrics()["compression-offload-total"]
    assert offloaded > 0
    assert len(metadata) == len(values)
    consumed = read_back(target.bootstrap, topic, expected=len(values))
    assert sorted(r.value for r in consumed) == sorted(values)
    # Per key (so per partition) the records arrive in the order they were sent.
    for key in {f"k{i}".encode() for i in range(7)}:
        got = [r.value for r in consumed if r.key == key]
        assert got == [v for i, v in enumerate(values) if f"k{i % 7}".encode() == key]


#: How many records a steady stream runs ahead of its acknowledgements (see _send_steadily).
_STEADY_LAG = 200


async def _send_steadily(
    target: Target, topic: str, values: list[bytes], codec: str, batch_size: int
) -> list[RecordMetadata]:
    """Send key-less ``values`` with long linger as a steady stream whose full batches the
    sender takes as they fill (the compression estimate follows the batches sent); return
    their metadata.

    Every 20 records, wait until the record sent ``_STEADY_LAG`` records earlier is
    acknowledged: a few batches' worth here, so later batches have long closed its batch and
    it is normally on its way already (at worst it goes when linger_ms ends). The stream
    then runs that far ahead of the sender and no further, whatever the machine's speed."""
    async with Producer(
        bootstrap_servers=target.bootstrap,
        compression_type=codec,
        batch_size=batch_size,
        linger_ms=100,
    ) as producer:
        futures = []
        for i, value in enumerate(values):
            futures.append(await producer.send(topic, value))
            if i % 20 == 0 and i >= _STEADY_LAG:
                await futures[i - _STEADY_LAG]
        return list(await asyncio.gather(*futures))


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
async def test_compressed_batches_fill_batch_size_once_compressed_like_javas(
    target: Target, codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a codec, ``batch_size`` bounds a batch's expected compressed size (the Java
    client's compression ratio estimate), so batches of records that compress well hold
    more than ``batch_size`` of them, and what goes on the wire stays about ``batch_size``."""
    topic = target.make_topic(1)
    sent: list[bytes] = []

    def record(conn: BrokerConnection, request: Any, handler: AnswerHandler, send: Send) -> None:
        if isinstance(request, ProduceRequest):
            sent.extend(bytes(p.records) for t in request.topics for p in t.partitions)
        send(handler)

    intercept_send_for(monkeypatch, record)
    # Four letters at random: about 2 bits of information a byte.
    letters = bytes(b"abcd"[i % 4] for i in range(256))
    rng = random.Random(7)
    values = [f"{i:06d}".encode() + rng.randbytes(1018).translate(letters) for i in range(5000)]
    batch_size = 16384
    await _send_steadily(target, topic, values, codec, batch_size)
    # (bytes on the wire, bytes of the records' values) of every batch, in order.
    batches = [
        (len(data), sum(len(r.value) for r in batch.records))
        for data in sent
        for batch in decode_record_batches(data)
    ]
    # The first batch: no estimate yet, so batch_size of records, as without a codec.
    assert batches[0][1] <= batch_size
    # Once the estimate has settled, more than batch_size of records per batch (these
    # compress about 0.57:1 with lz4 and 0.33:1 with zstd: 1.66 and 2.9 times batch_size)...
    settled = batches[len(batches) // 2 :]
    assert min(count for _, count in settled[:-1]) > 1.3 * batch_size
    # ... that compress to about batch_size.
    assert max(size for size, _ in settled) <= 1.1 * batch_size
    consumed = read_back(target.bootstrap, topic, expected=len(values))
    assert [r.value for r in consumed] == values


async def test_key_less_compressed_records_stick_to_a_partition_until_its_batch_is_full(
    target: Target,
) -> None:
    """The sticky partitioner counts a compressed batch's records as they are expected to
    weigh compressed (Java counts the batch's estimated size): it leaves a partition once
    the batch there is full, not after ``2 * batch_size`` of uncompressed records."""
    topic = target.make_topic(3)
    letters = bytes(b"abcd"[i % 4] for i in range(256))
    rng = random.Random(11)
    values = [rng.randbytes(1024).translate(letters) for _ in range(6000)]
    metadata = await _send_steadily(target, topic, values, "zstd", 16384)
    # Runs of consecutive records that went to one partition, once the estimate settled.
    runs: list[int] = []
    previous = -1
    for m in metadata[len(metadata) // 2 :]:
        if m.partition == previous:
            runs[-1] += 1
        else:
            runs.append(1)
            previous = m.partition
    runs = runs[1:-1]  # the first and last runs are cut short by the halving and the end
    # zstd keeps about a third of these records: a batch takes about 2.9 * 16 KiB of them,
    # 46 records. Counted uncompressed, 32 records (2 * batch_size) would force a switch.
    assert sorted(runs)[len(runs) // 2] >= 40
    consumed = read_back(target.bootstrap, topic, expected=len(values))
    assert sorted(r.value for r in consumed) == sorted(values)


async def test_a_broker_without_idempotence_fails_start_clearly(mock_cluster: Any) -> None:
    mock_cluster.set_apiversion(22, -1, -1)  # InitProducerId unsupported
    producer = Producer(bootstrap_servers=mock_cluster.bootstrap_servers, max_block_ms=5000)
    with pytest.raises(UnsupportedVersionError, match="enable_idempotence=False"):
        await producer.start()
    await producer.close()
    # With idempotence off the same broker takes records.
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers, enable_idempotence=False
    ) as producer:
        topic = f"noidem-{next(_counter)}"
        mock_cluster.create_topic(topic, partitions=1)
        await producer.send_and_wait(topic, b"x")


@pytest.mark.tansu
async def test_tansu_fencing_a_local_epoch_bump_falls_back_to_a_new_producer_id(
    tansu: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An answer OUT_OF_ORDER_SEQUENCE_NUMBER (made up here, the request is not sent) makes
    # the idempotent producer bump its epoch locally, as the Java client does. Tansu fences
    # such an epoch (PRODUCER_FENCED, where Kafka takes it): the producer then asks for a
    # new producer id, and every record still arrives once, in order.
    from aioproducer.protocol.messages import (
        ProducePartitionResponse,
        ProduceResponse,
        ProduceTopicResponse,
    )

    topic = _name("fenced-bump")
    tansu.create_topic(topic, partitions=1)
    made_up: list[int] = []

    def answer(conn: BrokerConnection, request: Any, handler: AnswerHandler, send: Send) -> None:
        if isinstance(request, ProduceRequest) and armed and not made_up:
            made_up.append(1)
            topics = [
                ProduceTopicResponse(
                    t.name, [ProducePartitionResponse(p.index, 45, -1) for p in t.partitions]
                )
                for t in request.topics
            ]
            # Queued as the connection queues an answer it read.
            answers = conn._answers
            assert answers is not None
            answers.push(handler, ProduceResponse(topics=topics), None)
            answers.wake()
            return
        send(handler)

    armed = False
    intercept_send_for(monkeypatch, answer)
    caplog.set_level(logging.WARNING, logger="aioproducer")
    async with Producer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=0) as producer:
        first = [await producer.send_and_wait(topic, b"%02d" % i, partition=0) for i in range(3)]
        armed = True
        rest = [await producer.send(topic, b"%02d" % i, partition=0) for i in range(3, 8)]
        await asyncio.wait_for(asyncio.gather(*rest), 30)
    assert made_up, "no answer was made up"
    assert any("refused the locally bumped epoch" in r.getMessage() for r in caplog.records)
    records = read_back(tansu.bootstrap_servers, topic, expected=8)
    assert [r.value for r in records] == [b"%02d" % i for i in range(8)]
    assert [m.offset for m in first] == [0, 1, 2]
