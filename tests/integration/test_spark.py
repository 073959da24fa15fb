"""The Spark integration in a local Spark session, writing to Tansu, read back with
confluent-kafka and compared exactly.

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

import datetime
import json
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

from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTopicError,
    KafkaError,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from aioproducer.integrations import spark as sink_module
from aioproducer.integrations.spark import (
    SinkOptions,
    write_dataframe,
    write_dataframe_on_driver,
)
from aioproducer.testing import InMemoryProducer
from tests.support.readback import ConsumedRecord, read_back
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

    assert len(records) == len(rows)
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
    layout = sink_module._layout(schema, topic)
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
        find = sink_module._refused_item

        async def without_accepted(producer: Any, layout: Any, items: Any, exc: Any) -> Any:
            exc.accepted = None
            return await find(producer, layout, items, exc)

        monkeypatch.setattr(sink_module, "_refused_item", without_accepted)
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
    monkeypatch.setattr(sink_module, "_ROWS_PER_CHUNK", 2)
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
