"""The Spark integration in a local Spark session, writing to Tansu, read back with
confluent-kafka and compared exactly.

What is proved: every Kafka sink column (key, value, topic, partition, headers, timestamp)
reaches Kafka as it was in the DataFrame, through the batch data source, a streaming query
and the foreachPartition fallback; the partitioner places keyed rows where the Java client
would; bad options, columns and modes fail on the driver; a delivery error fails the job.

Spark takes tens of seconds to start, so the session is shared by the module and the tests
are few.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import confluent_kafka
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioproducer.embedded import EmbeddedBroker
from aioproducer.integrations.spark import KafkaDataSource, write_dataframe
from tests.support.readback import ConsumedRecord, read_back

pytestmark = pytest.mark.spark

TopicFactory = Callable[..., str]
_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # Spark's Python workers run PYSPARK_PYTHON, python3 on PATH by default: make them run
    # this interpreter, which has pyarrow and (from the source tree, if not installed)
    # aioproducer.
    saved = {name: os.environ.get(name) for name in
             ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), saved["PYTHONPATH"]]))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aioproducer-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(KafkaDataSource)
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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
    # A partition the topic does not have fails the task, and so the job.
    with pytest.raises(Exception, match="UnknownTopicOrPartitionError"):
        save(small.selectExpr("key", "value", "7 AS partition"), **{"kafka.max.block.ms": "3000"})
