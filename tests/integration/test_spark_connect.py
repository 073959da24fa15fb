"""The ``"aioproducer"`` data source through Spark Connect, read back with confluent-kafka.

A Spark Connect server (PySpark's own, a JVM of its own: the ``spark_connect`` fixture,
tests/support/spark_connect.py) runs the plans; this process is only its client
(``SparkSession.builder.remote("sc://...")``), with no JVM. The client registers the data
source with ``spark.dataSource.register`` (by aioproducer's ``register``); the class
travels pickled by reference, and the server's Python workers, which import aioproducer,
plan, run and commit the writes.

What is proved, all through the client:

- a batch write of every Kafka sink column reaches the broker exactly as it was in the
  DataFrame; an option the sink refuses fails ``save()`` on the client, with the sink's
  message;
- a streaming query (a file source, three micro-batches, ``availableNow``) writes every
  row to the topic its ``topic`` column names;
- ``write_dataframe_on_driver`` tests what a job writes without a broker (its rows come
  to the client), while ``write_dataframe`` (``foreachPartition`` with an accumulator)
  needs a classic session and says so;
- ``delivery.guarantee`` ``exactly_once`` on Apache Kafka: a task that fails once is
  retried, a consumer reading committed data gets every row exactly once, and every
  partition's log holds the marker of a committed transaction after its rows.

The server takes 10 to 20 s to start, once per run; each write takes a few seconds more.
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
pytest.importorskip("grpc", reason="Spark Connect's client needs grpcio (the spark extra)")

import confluent_kafka
from pyspark.errors import PySparkException
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
from aioproducer.integrations.spark import (
    register,
    write_dataframe,
    write_dataframe_on_driver,
)
from aioproducer.testing import InMemoryProducer
from tests.support.kafka import KafkaBroker
from tests.support.readback import ConsumedRecord, high_watermarks, read_back
from tests.support.spark import ONCE_PER_CI_RUN
from tests.support.spark_connect import ConnectServer, connect_session

# A Spark Connect server (a JVM) and its jobs: the Connect plumbing is the same in every
# build, and the sink's own code runs in both passes in test_spark.py.
pytestmark = [pytest.mark.spark, ONCE_PER_CI_RUN]

TopicFactory = Callable[..., str]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark(spark_connect: ConnectServer) -> Iterator[Any]:
    """A Connect client session of the server, with the data source registered."""
    from pyspark.core.context import SparkContext
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    with connect_session(spark_connect) as session:
        # A client, not a classic session: no JVM in this process.
        assert isinstance(session, ConnectSession)
        assert SparkContext._active_spark_context is None
        register(session)
        yield session


def _row(i: int) -> dict[str, Any]:
    """Row i: every sink column, with nulls and empties mixed in."""
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
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
        StructField("timestamp", TimestampType()),
    ]
)


def _expected(row: dict[str, Any], partitions: int) -> tuple[Any, ...]:
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


def _got(rows: list[dict[str, Any]], record: ConsumedRecord) -> tuple[Any, ...]:
    row = rows[record.timestamp_ms - _BASE_MS]
    free = row["key"] is None and row["partition"] is None
    partition = None if free else record.partition
    return record.timestamp_ms, record.key, record.value, record.headers, partition


def test_batch_write_through_spark_connect(
    spark: Any, tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=3)
    rows = [_row(i) for i in range(2000)]
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
    assert len(records) == len(rows)
    assert all(r.timestamp_type == 1 for r in records)  # CreateTime, as given
    got = sorted((_got(rows, r) for r in records), key=repr)
    assert got == sorted((_expected(row, 3) for row in rows), key=repr)

    # The sink's checks run on the server's driver; their message reaches the client.
    small = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    with pytest.raises(PySparkException, match=r"kafka\.linger\.ms"):
        (
            small.write.format("aioproducer")
            .option("kafka.bootstrap.servers", tansu.bootstrap_servers)
            .option("topic", topic)
            .option("linger.ms", "5")
            .mode("append")
            .save()
        )
    with pytest.raises(PySparkException, match="append"):
        (
            small.write.format("aioproducer")
            .option("kafka.bootstrap.servers", tansu.bootstrap_servers)
            .option("topic", topic)
            .mode("overwrite")
            .save()
        )


def test_streaming_write_through_spark_connect(
    spark: Any, tansu: EmbeddedBroker, new_topic: TopicFactory, tmp_path: Path
) -> None:
    # The server runs on this machine: it reads the files and keeps the checkpoint here.
    topics = [new_topic(tansu, partitions=2), new_topic(tansu, partitions=1)]
    source = tmp_path / "in"
    source.mkdir()
    expected: dict[str, list[tuple[bytes, bytes, int]]] = {t: [] for t in topics}
    for file_number in range(3):
        lines = []
        for i in range(file_number * 300, (file_number + 1) * 300):
            topic = topics[i % 2]
            lines.append(
                json.dumps(
                    {"topic": topic, "key": f"k{i}", "value": f"v{i}", "timestamp": _BASE_MS + i}
                )
            )
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
    try:
        assert query.awaitTermination(240), "the query did not end within 240 s"
    finally:
        query.stop()
    assert query.exception() is None
    assert len(query.recentProgress) >= 3
    for topic in topics:
        records = read_back(tansu.bootstrap_servers, topic, expected=450, extra_wait=0.5)
        got = sorted((r.key, r.value, r.timestamp_ms) for r in records)
        assert got == sorted(expected[topic])


def test_testing_a_job_without_a_broker_through_spark_connect(spark: Any) -> None:
    # write_dataframe_on_driver brings the rows to the client (toLocalIterator works over
    # Connect) and writes them through the producer given, here an in-memory one.
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
    got = sorted((_got(rows, r) for r in stored), key=repr)
    assert got == sorted((_expected(row, 3) for row in rows), key=repr)
    # write_dataframe counts records with an accumulator, which needs a classic session.
    with pytest.raises(PySparkException, match=r"JVM_ATTRIBUTE_NOT_SUPPORTED.*`sparkContext`"):
        write_dataframe(df, "events", bootstrap_servers="localhost:9092")


_ROWS = 20_000
_HALF = _ROWS // 2
# Spark partition 1 (ids _HALF and up, written to Kafka partition 1) fails on its first
# attempt at this row.
_FAIL_AT = _HALF + 6_000


def test_exactly_once_through_spark_connect(
    spark: Any, kafka: KafkaBroker, new_topic: TopicFactory, tmp_path: Path
) -> None:
    from pyspark.sql.functions import col, expr, udf

    topic = new_topic(kafka, partitions=2)
    fail_at = _FAIL_AT
    failed = tmp_path / "failed-once"  # the server runs on this machine

    def fail_once(value: int) -> int:
        # Runs in the server's Python workers (pickled by value, as a closure).
        from pyspark import TaskContext

        context = TaskContext.get()
        if value == fail_at and context is not None and context.attemptNumber() == 0:
            failed.write_text(f"Spark partition {context.partitionId()}")
            raise RuntimeError("injected failure on the task's first attempt")
        return value

    ids = udf(fail_once, LongType(), useArrow=False)
    df = (
        spark.range(0, _ROWS, 1, 2)  # Spark partition 0: ids below _HALF; 1: the rest
        .select(ids(col("id")).alias("id"))
        .select(
            col("id").cast("string").alias("key"),
            col("id").cast("string").alias("value"),
            expr(f"IF(id >= {_HALF}, 1, 0)").alias("partition"),
        )
    )
    (
        df.write.format("aioproducer")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .option("delivery.guarantee", "exactly_once")
        .option("kafka.linger.ms", "5")
        .mode("append")
        .save()
    )
    # The task failed once, and its retry's transaction is the one that was committed.
    assert failed.read_text() == "Spark partition 1"
    committed = read_back(
        kafka.bootstrap_servers,
        topic,
        expected=_ROWS,
        isolation_level="read_committed",
        extra_wait=1.0,
        timeout=120.0,
    )
    got = sorted((int(r.value or b"-1"), r.key, r.partition) for r in committed)
    want = [(i, str(i).encode(), int(i >= _HALF)) for i in range(_ROWS)]
    assert got == want, "the committed data is not every row exactly once"
    # Written in transactions: each partition's log holds a commit marker (a control
    # record, which no consumer gets) after its rows. Partition 1 also holds what the
    # failed attempt's writer sent before the failure reached it, aborted, if anything.
    for partition, end in high_watermarks(kafka.bootstrap_servers, topic).items():
        assert end > _HALF, f"partition {partition}: no transaction marker ({end} offsets)"
