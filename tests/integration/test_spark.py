"""The Spark integration in a local Spark session, writing to Tansu (to Apache Kafka where
several tasks write one partition at once), read back with confluent-kafka and compared
exactly.

What is proved: every Kafka sink column (key, value, topic, partition, headers, timestamp)
reaches Kafka as it was in the DataFrame, through the batch data source, a streaming query
and the foreachPartition fallback; the partitioner places keyed rows where the Java client
would; bad options, columns and modes fail on the driver; a delivery error fails the job; a
row that cannot be a record fails its task with an error naming the row and the column,
whichever path (Arrow batches or Rows) brought it.

Spark takes tens of seconds to start, so the session is shared by the module and the tests
are few. The many kinds of bad row are tried on one task's write called directly (Arrow
batches and Rows as Spark hands them over), without a Spark job each.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import itertools
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import confluent_kafka
import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioproducer import ProducerState
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaError,
    ProducerFencedError,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from aioproducer.integrations.spark import (
    SinkOptions,
    write_dataframe,
    write_dataframe_on_driver,
)
from aioproducer.integrations.spark import producers as producers_module
from aioproducer.integrations.spark import rows as rows_module
from aioproducer.integrations.spark import sink as sink_module
from aioproducer.integrations.spark.options import _layout
from aioproducer.testing import InMemoryProducer
from tests.support.kafka import KafkaBroker
from tests.support.mock_cluster import ApiKey, ErrorCode, MockCluster
from tests.support.readback import ConsumedRecord, read_back, unread_offsets
from tests.support.spark import local_spark

pytestmark = pytest.mark.spark

TopicFactory = Callable[..., str]
_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_spark("aioproducer-tests", **{"spark.sql.shuffle.partitions": "2"}) as session:
        yield session


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_BASE_MS = 1_700_000_000_000


def _row(i: int) -> dict[str, Any]:
    """Row i of the test DataFrame: every column, with nulls and empties mixed in."""
    return {
        "key": None if i % 10 == 0 else f"key-{i % 97}",
        "value": None if i % 250 == 7 else f"value-{i}".encode() * (1 + i % 3),
        # Every fifth row names its partition; the rest leave it to the partitioner.
        "partition": i % 3 if i % 5 == 0 else None,
        "headers": (
            []
            if i % 4 == 0
            else [{"key": "row", "value": str(i).encode()}, {"key": "empty", "value": b""}]
        ),
        "timestamp": _EPOCH + datetime.timedelta(milliseconds=_BASE_MS + i),
    }


_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [StructField("key", StringType()), StructField("value", BinaryType())]
                )
            ),
        ),
        StructField("timestamp", TimestampType()),
    ]
)


def _check_round_trip(
    rows: list[dict[str, Any]], records: list[ConsumedRecord], partitions: int
) -> None:
    """Each row arrived once, every field exact; rows are told apart by their timestamps."""

    def expected(row: dict[str, Any]) -> tuple[Any, ...]:
        key = None if row["key"] is None else row["key"].encode()
        if row["partition"] is not None:
            partition = row["partition"]
        elif key is not None:
            partition = confluent_kafka.murmur2(key, partitions)  # the Java client's choice
        else:
            partition = None  # the sticky partitioner may pick any
        headers = [(h["key"], h["value"]) for h in row["headers"]]
        millis = (row["timestamp"] - _EPOCH) // datetime.timedelta(milliseconds=1)
        return millis, key, row["value"], headers, partition

    def got(record: ConsumedRecord) -> tuple[Any, ...]:
        row = rows[record.timestamp_ms - _BASE_MS]
        free = row["key"] is None and row["partition"] is None
        partition = None if free else record.partition
        return record.timestamp_ms, record.key, record.value, record.headers, partition

    seen = {record.timestamp_ms - _BASE_MS for record in records}
    missing = [i for i in range(len(rows)) if i not in seen]
    assert len(records) == len(rows), f"rows missing (first 30 of {len(missing)}): {missing[:30]}"
    assert all(r.timestamp_type == 1 for r in records)  # CreateTime, as given
    assert sorted(map(got, records), key=repr) == sorted(map(expected, rows), key=repr)


def test_batch_write_every_column(
    spark: SparkSession, tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=3)
    rows = [_row(i) for i in range(3000)]
    df = spark.createDataFrame(rows, _SCHEMA).repartition(4)
    (
        df.write.format("aioproducer")
        .option("kafka.bootstrap.servers", tansu.bootstrap_servers)
        .option("topic", topic)
        .option("kafka.linger.ms", "5")
        .option("kafka.compression.type", "zstd")
        .mode("append")
        .save()
    )
    records = read_back(tansu.bootstrap_servers, topic, expected=len(rows), extra_wait=0.5)
    _check_round_trip(rows, records, partitions=3)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "no key column"])
def test_rows_of_keys_and_values_land_where_the_java_client_puts_them(
    spark: SparkSession, kafka: KafkaBroker, new_topic: TopicFactory, keyed: bool
) -> None:
    # A DataFrame of a key and a value only (or a value only): each Arrow batch goes to
    # send_many as its columns' buffers (BinaryPairs, where the C helper is built), several
    # batches per task. Keyed rows go where the Java client's murmur2 puts them, key-less
    # ones where the sticky partitioner does (moving on as batches fill); null keys and
    # null values (tombstones) arrive as nulls; every row once.
    #
    # On Apache Kafka: three tasks write each partition at once, and Tansu's memory store
    # moves a partition's end past a batch before it stores it; a reader there once skipped
    # one batch's offsets without a word.
    topic = new_topic(kafka, partitions=5)
    rows = [
        {
            "key": None if i % 101 == 3 or not keyed else f"user-{i % 997}",
            "value": None if i % 83 == 5 else f"{i:06d}".encode() + b"." * (i % 300),
        }
        for i in range(25_000)
    ]
    fields = [StructField("key", StringType())] if keyed else []
    schema = StructType([*fields, StructField("value", BinaryType())])
    df = spark.createDataFrame(
        [row if keyed else {"value": row["value"]} for row in rows], schema
    ).repartition(3)
    (
        df.write.format("aioproducer")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .option("kafka.batch.size", "8192")
        .mode("append")
        .save()
    )
    records = read_back(kafka.bootstrap_servers, topic, expected=len(rows), extra_wait=0.5)
    got = sorted((r.key is None, r.key or b"", r.value is None, r.value or b"") for r in records)
    sent = sorted(
        (
            row["key"] is None,
            (row["key"] or "").encode(),
            row["value"] is None,
            row["value"] or b"",
        )
        for row in rows
    )
    if got != sent:
        missing = collections.Counter(sent) - collections.Counter(got)
        extra = collections.Counter(got) - collections.Counter(sent)
        pytest.fail(
            f"{sum(missing.values())} rows missing, {sum(extra.values())} extra; missing rows: "
            f"{sorted((v[:6], k) for _, k, _, v in missing)[:60]}; "
            f"extra: {sorted((v[:6], k) for _, k, _, v in extra)[:60]}; "
            f"offsets not read, per partition: {unread_offsets(records)}"
        )
    for record in records:
        if record.key is not None:
            assert record.partition == confluent_kafka.murmur2(record.key, 5), record.key
    if not keyed:
        assert len({record.partition for record in records}) > 1


def test_streaming_write_routes_rows_by_topic_column(
    spark: SparkSession, tansu: EmbeddedBroker, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topics = [new_topic(tansu, partitions=2), new_topic(tansu, partitions=1)]
    source = tmp_path / "in"
    source.mkdir()
    expected: dict[str, list[tuple[bytes, bytes, int]]] = {t: [] for t in topics}
    for file_number in range(3):
        lines = []
        for i in range(file_number * 400, (file_number + 1) * 400):
            topic = topics[i % 2]
            lines.append(json.dumps({"topic": topic, "key": f"k{i}", "value": f"v{i}",
                                     "timestamp": _BASE_MS + i}))
            expected[topic].append((f"k{i}".encode(), f"v{i}".encode(), _BASE_MS + i))
        (source / f"part-{file_number}.json").write_text("\n".join(lines))
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("key", StringType()),
            StructField("value", StringType()),
            StructField("timestamp", LongType()),  # epoch milliseconds
        ]
    )
    query = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)  # three micro-batches
        .json(str(source))
        .writeStream.format("aioproducer")
        .option("kafka.bootstrap.servers", tansu.bootstrap_servers)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    assert len(query.recentProgress) >= 3
    for topic in topics:
        records = read_back(tansu.bootstrap_servers, topic, expected=600, extra_wait=0.5)
        got = sorted((r.key, r.value, r.timestamp_ms) for r in records)
        assert got == sorted(expected[topic])


def test_foreach_partition_fallback_and_driver_side_errors(
    spark: SparkSession, tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=3)
    rows = [_row(i) for i in range(2000)]
    df = spark.createDataFrame(rows, _SCHEMA).repartition(3)
    written = write_dataframe(
        df, topic, {"bootstrap.servers": tansu.bootstrap_servers}, linger_ms=5
    )
    assert written == len(rows)
    records = read_back(tansu.bootstrap_servers, topic, expected=len(rows), extra_wait=0.5)
    _check_round_trip(rows, records, partitions=3)

    def save(frame: Any, mode: str = "append", **options: str) -> None:
        writer = frame.write.format("aioproducer").mode(mode)
        for name, value in {"kafka.bootstrap.servers": tansu.bootstrap_servers,
                            "topic": topic, **options}.items():
            writer = writer.option(name, value)
        writer.save()

    small = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    with pytest.raises(PySparkException, match="append"):
        save(small, mode="overwrite")
    with pytest.raises(PySparkException, match="value"):
        save(small.selectExpr("key"))
    with pytest.raises(PySparkException, match=r"kafka\.linger\.ms"):
        save(small, **{"linger.ms": "5"})
    with pytest.raises(PySparkException, match=r"key\.serializer"):
        save(small, **{"kafka.key.serializer": "org.apache.kafka.StringSerializer"})
    with pytest.raises(PySparkException, match=r"option 'topic': topic name 'no way' is illegal"):
        save(small, topic="no way")
    # A partition the topic does not have fails the task, and so the job, naming the row.
    with pytest.raises(
        Exception,
        match=r"UnknownTopicOrPartitionError: row 0 of Spark partition \d+, column 'partition': "
        r"partition 7 is out of range",
    ):
        save(small.selectExpr("key", "value", "7 AS partition"), **{"kafka.max.block.ms": "3000"})


def test_what_a_job_writes_is_tested_without_a_broker(spark: SparkSession) -> None:
    rows = [_row(i) for i in range(300)]
    df = spark.createDataFrame(rows, _SCHEMA).repartition(3)
    producer = InMemoryProducer(topics={"events": 3})
    assert write_dataframe_on_driver(df, producer, "events") == len(rows)
    stored = [
        ConsumedRecord(
            r.topic, r.partition, r.offset, r.key, r.value, list(r.headers), (1, r.timestamp)
        )
        for r in producer.records("events")
    ]
    _check_round_trip(rows, stored, partitions=3)

    bad = spark.createDataFrame(
        [(b"k", b"v", 1), (b"k", b"v", 7)], "key binary, value binary, partition int"
    )
    with pytest.raises(
        UnknownTopicOrPartitionError,
        match=r"^row 1, column 'partition': partition 7 is out of range",
    ):
        write_dataframe_on_driver(bad, InMemoryProducer(topics={"events": 3}), "events")


# ---- rows that cannot be records ----------------------------------------------------------------


def test_a_row_that_cannot_be_a_record_fails_the_job_naming_row_and_column(
    spark: SparkSession, tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=2)

    def save(frame: Any) -> None:
        (
            frame.coalesce(1)  # one task: Spark partition 0, rows in the order given
            .write.format("aioproducer")
            .option("kafka.bootstrap.servers", tansu.bootstrap_servers)
            .option("topic", topic)
            .option("kafka.max.block.ms", "3000")
            .mode("append")
            .save()
        )

    # Epoch milliseconds before 1970, through the data source (Arrow batches).
    millis = spark.createDataFrame(
        [(b"a", _BASE_MS), (b"b", _BASE_MS + 1), (b"c", -1)], "value binary, timestamp long"
    )
    with pytest.raises(
        PySparkException,
        match=r"InvalidArgumentError: row 2 of Spark partition 0: column 'timestamp'=-1 is "
        r"out of range",
    ):
        save(millis)
    # A timestamp column before 1970, through write_dataframe (Rows).
    before_1970 = spark.createDataFrame(
        [(b"a", _EPOCH + datetime.timedelta(days=1)),
         (b"b", _EPOCH - datetime.timedelta(seconds=1))],
        "value binary, timestamp timestamp",
    ).coalesce(1)
    with pytest.raises(
        Exception,
        match=r"row 1 of Spark partition 0: column 'timestamp'=-1000 is out of range: .*"
        r"that is 1969-12-31 23:59:59 UTC",
    ):
        write_dataframe(before_1970, topic, bootstrap_servers=tansu.bootstrap_servers)
    # A partition the topic does not have, after rows it does have.
    partitions = spark.createDataFrame(
        [(b"a", 0), (b"b", 1), (b"c", 7)], "value binary, partition int"
    )
    with pytest.raises(
        PySparkException,
        match=r"UnknownTopicOrPartitionError: row 2 of Spark partition 0, column 'partition': "
        r"partition 7 is out of range: topic '[^']+' has 2 partition\(s\)",
    ):
        save(partitions)


_HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
_ARROW_TYPES: dict[str, Any] = {
    "binary": pa.binary(),
    "string": pa.string(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "array<struct<key:string,value:binary>>": pa.list_(
        pa.struct([("key", pa.string()), ("value", pa.binary())])
    ),
}
_TOPIC = "<the test's topic>"
_BEFORE_1970 = datetime.datetime(1969, 12, 31, 23, 59, 59)


def _refusal_cases() -> list[Any]:
    ok_header = [{"key": "k", "value": b"x"}]
    cases = [
        # (rows, topic from a column, error, message); each row's columns in schema order
        ("millis before 1970",
         [{"value": b"a", "timestamp": 5}, {"value": b"b", "timestamp": -1}], False,
         InvalidArgumentError, r"^row 1: column 'timestamp'=-1 is out of range"),
        ("datetime before 1970",
         [{"value": b"a", "timestamp": _BEFORE_1970 + datetime.timedelta(days=2)},
          {"value": b"b", "timestamp": _BEFORE_1970}], False,
         InvalidArgumentError,
         r"^row 1: column 'timestamp'=-1000 is out of range: .* 1969-12-31 23:59:59 UTC"),
        ("negative partition",
         [{"value": b"a", "partition": 0}, {"value": b"b", "partition": -3}], False,
         InvalidArgumentError, r"^row 1: column 'partition'=-3 is out of range"),
        ("partition beyond the topic",
         [{"value": b"a", "partition": 0}, {"value": b"b", "partition": 1},
          {"value": b"c", "partition": 7}], False,
         UnknownTopicOrPartitionError,
         r"^row 2, column 'partition': partition 7 is out of range: topic '[^']+' has 2"),
        ("null topic",
         [{"value": b"a", "topic": _TOPIC}, {"value": b"b", "topic": None}], True,
         InvalidArgumentError, r"^row 1: column 'topic' is null"),
        ("illegal topic",
         [{"value": b"a", "topic": _TOPIC}, {"value": b"b", "topic": "no way"}], True,
         InvalidTopicError, r"^row 1, column 'topic': topic name 'no way' is illegal"),
        ("null header",
         [{"value": b"a", "headers": ok_header}, {"value": b"b", "headers": [None]}], False,
         InvalidArgumentTypeError, r"^row 1: column 'headers' holds a null header"),
        ("null header key",
         [{"value": b"a", "headers": ok_header},
          {"value": b"b", "headers": [{"key": None, "value": b"x"}]}], False,
         SerializationError, r"^row 1, column 'headers': a header name must be a str"),
        ("value beyond max.request.size",
         [{"value": b"a"}, {"value": b"b" * 1_100_000}], False,
         RecordTooLargeError, r"^row 1: the record is \d+ bytes when serialized, larger than "
         r"max_request_size"),
    ]
    params = [
        pytest.param(rows, from_column, error, message, arrow, False, id=f"{name}, {path}")
        for name, rows, from_column, error, message in cases
        for arrow, path in ((False, "rows"), (True, "arrow"))
    ]
    # Rows send_many refuses: found again by the sink when the error does not say which
    # item it was (no ``accepted``).
    params += [
        pytest.param(rows, from_column, error, message, False, True, id=f"{name}, sink finds it")
        for name, rows, from_column, error, message in cases
        if error in (UnknownTopicOrPartitionError, InvalidTopicError, SerializationError,
                     RecordTooLargeError)
    ]
    return params


def _schema_of(rows: list[dict[str, Any]]) -> StructType:
    types: dict[str, DataType] = {"value": BinaryType(), "topic": StringType(),
                                  "partition": IntegerType(), "headers": _HEADERS}
    first = rows[0]
    fields = [StructField(name, types.get(name, LongType())) for name in first]
    if "timestamp" in first and isinstance(first["timestamp"], datetime.datetime):
        fields[-1] = StructField("timestamp", TimestampType())
    return StructType(fields)


def _arrow_batch(schema: StructType, rows: list[dict[str, Any]]) -> Any:
    """Rows as Spark hands them to the data source: an Arrow batch (timestamps in UTC)."""
    arrow_schema = pa.schema(
        [(f.name, _ARROW_TYPES[f.dataType.simpleString()]) for f in schema.fields]
    )
    utc = [
        {name: value.replace(tzinfo=datetime.timezone.utc)
         if isinstance(value, datetime.datetime) else value for name, value in row.items()}
        for row in rows
    ]
    return pa.RecordBatch.from_pylist(utc, schema=arrow_schema)


def _write(
    tansu: EmbeddedBroker, topic: str | None, schema: StructType, rows: list[Any]
) -> int:
    """One partition task's write, run here rather than in a Spark job (no TaskContext: the
    message names no Spark partition)."""
    sink = SinkOptions(
        topic, {"bootstrap.servers": tansu.bootstrap_servers, "max.block.ms": "3000"}
    )
    layout = _layout(schema, topic)
    return sink_module._write_partition(sink, layout, iter(rows))


@pytest.mark.parametrize(
    ("rows", "from_column", "error", "message", "arrow", "hide_accepted"), _refusal_cases()
)
def test_each_kind_of_bad_row_is_named_by_row_and_column(
    tansu: EmbeddedBroker,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    rows: list[dict[str, Any]],
    from_column: bool,
    error: type[KafkaError],
    message: str,
    arrow: bool,
    hide_accepted: bool,
) -> None:
    if hide_accepted:
        find = rows_module._refused_item

        async def without_accepted(producer: Any, layout: Any, items: Any, exc: Any) -> Any:
            exc.accepted = None
            return await find(producer, layout, items, exc)

        monkeypatch.setattr(rows_module, "_refused_item", without_accepted)
    topic = new_topic(tansu, partitions=2)
    rows = [{k: topic if v == _TOPIC else v for k, v in row.items()} for row in rows]
    schema = _schema_of(rows)
    if "timestamp" in rows[0] and not arrow:
        # On the Row path PySpark hands timestamps over as naive datetimes in local time.
        rows = [
            {k: v.replace(tzinfo=datetime.timezone.utc).astimezone().replace(tzinfo=None)
             if isinstance(v, datetime.datetime) else v for k, v in row.items()}
            for row in rows
        ]
    batches = [_arrow_batch(schema, rows)] if arrow else rows
    with pytest.raises(error, match=message) as raised:
        _write(tansu, None if from_column else topic, schema, batches)
    assert raised.value.__cause__ is not None  # the producer's own error, or the check's


def test_bad_rows_beyond_the_first_chunk_and_unreadable_strings(
    tansu: EmbeddedBroker, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic(tansu, partitions=2)
    # The position counts rows across chunks: row 5 is the second row of the third chunk.
    monkeypatch.setattr(rows_module, "_ROWS_PER_CHUNK", 2)
    rows = [{"value": b"v", "partition": n % 2} for n in range(5)]
    rows.append({"value": b"v", "partition": 7})
    with pytest.raises(UnknownTopicOrPartitionError, match=r"^row 5, column 'partition'"):
        _write(tansu, topic, _schema_of(rows), rows)
    # A time before year 1 in local time cannot even become epoch milliseconds.
    rows = [{"value": b"v", "timestamp": datetime.datetime(2024, 1, 1)}] * 3
    rows.append({"value": b"v", "timestamp": datetime.datetime(1, 1, 1)})
    with pytest.raises(
        InvalidArgumentError, match=r"^row 3: column 'timestamp'=0001-01-01 00:00:00 cannot be"
    ):
        _write(tansu, topic, _schema_of(rows), rows)
    # Spark strings are bytes that need not be UTF-8: a key or value is sent as it is; a
    # topic cannot be.
    strings = pa.array([b"k", b"\xffk"], pa.binary()).view(pa.string())
    batch = pa.RecordBatch.from_arrays(
        [strings, pa.array([b"v1", b"v2"])], names=["key", "value"]
    )
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    keyed = new_topic(tansu)
    assert _write(tansu, keyed, schema, [batch]) == 2
    records = read_back(tansu.bootstrap_servers, keyed, expected=2)
    assert sorted(r.key or b"" for r in records) == [b"k", b"\xffk"]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"v1", b"v2"]), pa.array([topic.encode(), b"\xff"], pa.binary()).view(
            pa.string())],
        names=["value", "topic"],
    )
    schema = StructType([StructField("value", BinaryType()), StructField("topic", StringType())])
    with pytest.raises(
        InvalidArgumentError, match=r"^row 1: column 'topic' holds a string that is not valid UTF-8"
    ):
        _write(tansu, None, schema, [batch])


def test_the_sink_batches_256_kib_unless_told_otherwise() -> None:
    from aioproducer.integrations.spark import SINK_BATCH_SIZE

    base = {"kafka.bootstrap.servers": "k:9092", "topic": "t"}
    assert SinkOptions.parse(base).producer().config.batch_size == SINK_BATCH_SIZE == 262_144
    given = SinkOptions.parse({**base, "kafka.batch.size": "16384"})
    assert given.producer().config.batch_size == 16_384


def test_sink_options_never_show_a_secret() -> None:
    sink = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": "k:9092",
            "topic": "t",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "alice",
            "kafka.sasl.password": "hunter2",
            "kafka.ssl.certificate.location": "/c.pem",
            "kafka.ssl.key.password": "keypass",
        }
    )
    text = repr(sink) + str(sink) + f"{sink!r}"
    assert "hunter2" not in text and "keypass" not in text
    assert "alice" in text and "'sasl.password': '***'" in text
    assert sink.config["sasl.password"] == "hunter2"  # masked when shown, not when used


def test_sink_options_never_show_a_jaas_line() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="hunter2";'
    )
    sink = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": "k:9092",
            "topic": "t",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
        }
    )
    text = repr(sink)
    assert "hunter2" not in text and "'sasl.jaas.config': '***'" in text
    assert "hunter2" not in repr(sink.producer().config)


# ---- one producer per Python worker -------------------------------------------------------------


@pytest.fixture
def producers(monkeypatch: pytest.MonkeyPatch) -> Iterator[producers_module._ProducerCache]:
    """A fresh producer cache for this process, as a Python worker starts with."""
    cache = producers_module._ProducerCache()
    monkeypatch.setattr(producers_module, "_cache", cache)
    monkeypatch.setattr(producers_module, "_cache_pid", os.getpid())
    yield cache
    cache.close()


_VALUES = StructType([StructField("value", BinaryType())])


def _values_batch(start: int, count: int) -> Any:
    return pa.RecordBatch.from_pydict(
        {"value": [f"v{i}".encode() for i in range(start, start + count)]}
    )


def _task(sink: SinkOptions, *batches: Any) -> int:
    """One partition task's write in this process, as a Python worker runs it."""
    layout = _layout(_VALUES, sink.topic)
    return sink_module._write_partition(sink, layout, iter(batches))


def _stored_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return sorted(r.value or b"" for r in read_back(bootstrap, topic, expected=expected))


def _expected_values(*ranges: range) -> list[bytes]:
    return sorted(f"v{i}".encode() for r in ranges for i in r)


def test_tasks_of_a_worker_share_one_producer_per_set_of_options(
    tansu: EmbeddedBroker, new_topic: TopicFactory, producers: producers_module._ProducerCache
) -> None:
    topic = new_topic(tansu, partitions=2)
    options = {"kafka.bootstrap.servers": tansu.bootstrap_servers, "topic": topic}
    sink = SinkOptions.parse(options)
    assert _task(sink, _values_batch(0, 300), _values_batch(300, 200)) == 500
    assert _task(SinkOptions.parse(options), _values_batch(500, 100)) == 100
    assert _task(sink) == 0  # an empty partition takes no producer
    assert producers.statistics() == producers_module._CacheStatistics(built=1, cached=1, in_use=0)
    # Other options get a producer of their own.
    other = SinkOptions.parse({**options, "kafka.client.id": "another"})
    assert _task(other, _values_batch(600, 10)) == 10
    assert producers.statistics() == producers_module._CacheStatistics(built=2, cached=2, in_use=0)
    assert _stored_values(tansu.bootstrap_servers, topic, 610) == _expected_values(range(610))
    # The key holds the passwords, to tell the producers apart, and never shows them.
    secured = {**options, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
               "kafka.sasl.username": "alice", "kafka.sasl.password": "hunter2"}
    key = producers_module._cache_key(SinkOptions.parse(secured))
    assert key is not None
    other = SinkOptions.parse({**secured, "kafka.sasl.password": "x"})
    assert key != producers_module._cache_key(other)
    assert "hunter2" not in repr(key) + str(key) and "'sasl.password': '***'" in repr(key)
    # A transactional id is never shared: each task keeps a producer of its own.
    assert producers_module._cache_key(
        SinkOptions.parse({**options, "kafka.transactional.id": "spark-job"})
    ) is None
    # Neither are options that are Python objects, which each task unpickles anew.
    with_callable = SinkOptions(topic, {}, {"partitioner": lambda *a: 0})
    assert producers_module._cache_key(with_callable) is None


@pytest.mark.mock_cluster
def test_a_delivery_error_fails_its_task_and_the_next_task_reuses_the_producer(
    mock_cluster: MockCluster, producers: producers_module._ProducerCache
) -> None:
    topic = f"cache-delivery-{uuid.uuid4().hex[:8]}"
    mock_cluster.create_topic(topic, 1)
    sink = SinkOptions.parse({"kafka.bootstrap.servers": mock_cluster.bootstrap_servers,
                              "topic": topic,
                              "kafka.max.in.flight.requests.per.connection": "1"})
    assert _task(sink, _values_batch(0, 50)) == 50
    mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.INVALID_RECORD])
    with pytest.raises(InvalidRecordError):
        _task(sink, _values_batch(1000, 50))
    # The error was that task's: the producer goes on, for the next task.
    assert _task(sink, _values_batch(50, 50)) == 50
    assert producers.statistics() == producers_module._CacheStatistics(built=1, cached=1, in_use=0)
    stored = _stored_values(mock_cluster.bootstrap_servers, topic, 100)
    assert stored == _expected_values(range(100))


def test_a_producer_that_failed_for_good_is_replaced(
    tansu: EmbeddedBroker,
    new_topic: TopicFactory,
    producers: producers_module._ProducerCache,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic(tansu, partitions=2)
    sink = SinkOptions.parse({"kafka.bootstrap.servers": tansu.bootstrap_servers,
                              "topic": topic})
    key = producers_module._cache_key(sink)
    assert key is not None
    assert _task(sink, _values_batch(0, 10)) == 10
    # Fenced while a task sends its second chunk: the task fails with it, and the producer
    # leaves the cache and is closed.
    entry = producers.acquire(key, sink)
    producers.release(key, entry)
    first = entry.producer
    send_many = first.send_many
    calls = itertools.count()

    async def fenced_on_the_second_chunk(topic: str, items: Any, **kwargs: Any) -> Any:
        if next(calls) == 1:
            raise ProducerFencedError("fenced by a newer producer with the same id")
        return await send_many(topic, items, **kwargs)

    monkeypatch.setattr(first, "send_many", fenced_on_the_second_chunk)
    with pytest.raises(ProducerFencedError):
        _task(sink, _values_batch(10, 10), _values_batch(20, 10))
    assert producers.statistics() == producers_module._CacheStatistics(built=1, cached=0, in_use=0)
    producers.run(asyncio.sleep(0.1))  # its close, scheduled on the loop, runs
    assert first.state is ProducerState.CLOSED
    # The next task builds a new producer.
    assert _task(sink, _values_batch(30, 10)) == 10
    assert producers.statistics().built == 2
    # A cached producer that failed for good while idle (fenced, with nothing to send) is
    # replaced by the next task, which finds it so before any of its rows is taken.
    entry = producers.acquire(key, sink)
    producers.release(key, entry)

    async def fenced(topic: str, items: Any, **kwargs: Any) -> Any:
        raise ProducerFencedError("fenced by a newer producer with the same id")

    monkeypatch.setattr(entry.producer, "send_many", fenced)
    assert _task(sink, _values_batch(40, 5)) == 5
    assert producers.statistics() == producers_module._CacheStatistics(built=3, cached=1, in_use=0)
    # So is one closed while idle.
    entry = producers.acquire(key, sink)
    producers.release(key, entry)
    producers.run(entry.producer.close())
    assert _task(sink, _values_batch(45, 5)) == 5
    assert producers.statistics() == producers_module._CacheStatistics(built=4, cached=1, in_use=0)
    stored = sorted(
        r.value or b""
        for r in read_back(tansu.bootstrap_servers, topic, expected=30, extra_wait=0.5)
    )
    # The fenced task's first chunk was buffered before the fence; the fenced producer was
    # closed at once, so it may or may not have reached Kafka.
    assert set(_expected_values(range(10), range(30, 50))) <= set(stored)
    assert set(stored) <= set(_expected_values(range(50)))


def test_idle_producers_expire_and_all_are_closed_at_exit(
    tansu: EmbeddedBroker, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    cache = producers_module._ProducerCache(clock=lambda: now[0])
    monkeypatch.setattr(producers_module, "_cache", cache)
    monkeypatch.setattr(producers_module, "_cache_pid", os.getpid())
    topic = new_topic(tansu)
    options = {"kafka.bootstrap.servers": tansu.bootstrap_servers, "topic": topic,
               "spark.kafka.producer.cache.timeout": "5m"}
    sink = SinkOptions.parse(options)
    assert sink.cache_timeout == 300
    assert _task(sink, _values_batch(0, 10)) == 10
    now[0] += 299
    assert cache.expire_idle() == []
    assert _task(sink, _values_batch(10, 10)) == 10  # used again: idle from now on
    now[0] += 299
    assert cache.expire_idle() == []
    assert cache.statistics().cached == 1
    now[0] += 1
    closing = cache.expire_idle()
    assert len(closing) == 1
    closing[0].result(timeout=30)
    assert cache.statistics() == producers_module._CacheStatistics(built=1, cached=0, in_use=0)
    # At exit every cached producer delivers what it holds and closes: here, what a task
    # that failed left in the buffer (linger.ms keeps it there).
    lingering = SinkOptions.parse({**options, "kafka.linger.ms": "60000"})
    monkeypatch.setattr(rows_module, "_ROWS_PER_CHUNK", 2)
    rows = [{"value": b"v20", "partition": 0}, {"value": b"v21", "partition": 0},
            {"value": b"v22", "partition": 7}]
    schema = _schema_of(rows)
    with pytest.raises(UnknownTopicOrPartitionError, match=r"^row 2, column 'partition'"):
        sink_module._write_partition(lingering, _layout(schema, topic), iter(rows))
    assert cache.statistics().cached == 1  # a row's fault is not the producer's
    cache.close()
    assert _stored_values(tansu.bootstrap_servers, topic, 22) == _expected_values(range(22))


def test_the_cache_timeout_takes_spark_time_strings() -> None:
    def timeout(value: str) -> float:
        return SinkOptions.parse({"kafka.bootstrap.servers": "k:9092", "topic": "t",
                                  "spark.kafka.producer.cache.timeout": value}).cache_timeout

    assert SinkOptions.parse({"kafka.bootstrap.servers": "k:9092"}).cache_timeout == 600
    assert [timeout(v) for v in ("10m", "90s", "2h", "1500", "250ms", "1d")] == [
        600, 90, 7200, 1.5, 0.25, 86400
    ]
    with pytest.raises(ConfigurationError, match=r"cache\.timeout'='soon' is not a time"):
        timeout("soon")


@pytest.mark.mock_cluster
def test_consecutive_spark_writes_share_a_producer_per_python_worker(
    spark: SparkSession, mock_cluster: MockCluster
) -> None:
    topics = [f"cache-spark-{n}-{uuid.uuid4().hex[:8]}" for n in range(4)]
    for topic in topics:
        mock_cluster.create_topic(topic, 2)
    df = spark.range(4000, numPartitions=4).selectExpr("CAST(CONCAT('v', id) AS BINARY) AS value")

    def save(topic: str) -> None:
        (df.write.format("aioproducer")
         .option("kafka.bootstrap.servers", mock_cluster.bootstrap_servers)
         .option("topic", topic)
         .option("kafka.max.in.flight.requests.per.connection", "1")
         .mode("append")
         .save())  # fmt: skip

    def producer_ids_asked() -> int:
        requests = mock_cluster.get_requests()
        return sum(1 for r in requests if r.api_key == ApiKey.INIT_PRODUCER_ID)

    mock_cluster.start_request_tracking()
    save(topics[0])
    save(topics[1])
    # Eight tasks on local[2]'s two Python workers: one producer (one producer id) each.
    assert 1 <= producer_ids_asked() <= 2
    # A delivery error fails its task, and so the job; the next write succeeds. (How many
    # producer ids it takes is not the point: the producer that failed a batch bumps its
    # epoch, and Spark may kill the worker of a task cancelled with the job.)
    mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.INVALID_RECORD])
    with pytest.raises(Exception, match="InvalidRecordError"):
        save(topics[2])
    save(topics[3])
    expected = sorted(f"v{i}".encode() for i in range(4000))
    for topic in (topics[0], topics[1], topics[3]):
        assert _stored_values(mock_cluster.bootstrap_servers, topic, 4000) == expected


def test_a_key_column_of_nulls_sends_records_without_keys(
    tansu: EmbeddedBroker, new_topic: TopicFactory, producers: producers_module._ProducerCache
) -> None:
    # Spark's sink writes a null key for a null cell; a chunk whose keys are all null takes
    # send_many's path for plain values, with the same records.
    topic = new_topic(tansu, partitions=3)
    sink = SinkOptions(topic, {"bootstrap.servers": tansu.bootstrap_servers})
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    layout = _layout(schema, topic)
    nulls = pa.RecordBatch.from_pydict(
        {"key": pa.array([None] * 3, pa.string()), "value": [b"a0", b"a1", b"a2"]}
    )
    mixed = pa.RecordBatch.from_pydict(
        {"key": pa.array([None, "k"], pa.string()), "value": [b"b0", b"b1"]}
    )
    assert sink_module._write_partition(sink, layout, iter([nulls, mixed])) == 5
    rows = [{"key": None, "value": b"c0"}, {"key": None, "value": b"c1"}]
    assert sink_module._write_partition(sink, layout, iter(rows)) == 2
    records = read_back(tansu.bootstrap_servers, topic, expected=7)
    assert sorted((r.value, r.key) for r in records) == [
        (b"a0", None), (b"a1", None), (b"a2", None), (b"b0", None), (b"b1", b"k"),
        (b"c0", None), (b"c1", None),
    ]
