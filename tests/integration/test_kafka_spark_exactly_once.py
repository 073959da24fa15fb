"""Exactly once from Spark to Apache Kafka (``delivery.guarantee`` ``exactly_once``).

A batch write of many rows in which one task fails once, mid-partition (a UDF raises on
its first attempt), and Spark runs it again: a consumer reading committed data gets every
row exactly once, while a read_uncommitted consumer also sees the rows of the failed
attempt, written and then aborted: the transactions did the work. With the default
(at least once), the same job leaves those rows twice in what every consumer reads.

``examples/spark_exactly_once.py`` (a task that fails once, retried) writes every order
once, as read by a consumer reading committed data.

A failed attempt whose Python worker outlives its task and prepares a transaction after the
retry prepared its own (what Spark does when the input of a writer stops short) can neither
fence the retry nor leave its transaction open once the driver committed. Neither can a
speculative copy that lost, nor a Spark partition that a restarted query no longer has: the
driver's commit lists what is left open under the query's prefix and aborts it, and leaves
another query's transactions alone.

A streaming query (its own process) is killed in the middle of committing a micro-batch,
after one partition's transaction was committed, and restarted from its checkpoint: Spark
replays the micro-batch, the committed partition is not written again (its marker offset
says so), the others are, and every row is read exactly once, in order per key.

A batch write whose driver dies after committing one partition's transaction (its
decision to commit on record) is completed by the next write under its
``transactional.id.prefix``, even one to another topic; a write of other rows to the
topic is written; a rerun of the interrupted write after them (the same rows, split
otherwise) writes them no second time.

A batch write whose first wave of tasks outlives ``transaction.timeout.ms`` while the
second wave runs commits nothing and says why: the driver checks every prepared
transaction (DescribeTransactions) before committing any.

Records are read back with confluent-kafka's consumer (tests.support.readback).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import KafkaBroker, older_kafka_params
from tests.support.readback import read_back
from tests.support.spark import ONCE_PER_CI_RUN, ROOT, local_spark
from tests.support.spark_crash import CRASH_FLAG, KEYS

pytestmark = pytest.mark.kafka

pyspark = pytest.importorskip("pyspark")

NewTopic = Callable[..., str]

_ROWS = 250_000
_SPARK_PARTITIONS = 4
# Partition 1 fails on its first attempt at this row, after most of its rows went out.
_FAIL_AT = 62_500 + 50_000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # local[2,4]: a failed task is tried again (plain local mode never retries a task).
    with local_spark(
        "aioproducer-exactly-once",
        master="local[2,4]",
        **{"spark.sql.execution.arrow.maxRecordsPerBatch": "2000"},
    ) as session:
        yield session


def _failing_once(spark: Any, bootstrap_servers: str, topic: str) -> Any:
    """``_ROWS`` rows in ``_SPARK_PARTITIONS`` partitions, keyed and valued by their id; the
    task of Spark partition 1 raises at row ``_FAIL_AT`` on its first attempt, once the
    topic's end offsets have stopped moving (the rows before it are in Kafka)."""
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import LongType

    fail_at = _FAIL_AT

    def wait_until_written(bootstrap_servers: str, topic: str) -> None:
        # Once the end offsets of the topic's partitions stayed the same for 2 s, or after
        # 15 s: the other tasks' writers may keep them moving that long (the assertions hold
        # however much the failed attempt wrote). Defined here, so that Spark ships it with
        # the UDF (by value).
        from confluent_kafka import Consumer, TopicPartition

        # read_uncommitted: the high watermarks, which move while transactions are open
        # (a read_committed consumer gets the last stable offsets, which do not).
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": "watermarks",
                "isolation.level": "read_uncommitted",
            }
        )
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            last: list[int] = []
            still_since = time.monotonic()
            deadline = still_since + 15.0
            while time.monotonic() < deadline:
                ends = [
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in sorted(partitions)
                ]
                if ends != last:
                    last, still_since = ends, time.monotonic()
                elif sum(ends) > 0 and time.monotonic() - still_since >= 2.0:
                    return
                time.sleep(0.2)
        finally:
            consumer.close()

    def fail_once(value: int) -> int:
        from pyspark import TaskContext

        context = TaskContext.get()
        if value == fail_at and context is not None and context.attemptNumber() == 0:
            # The writer (another Python worker) sends the rows before this one while this
            # task waits: what the failed attempt wrote must be in Kafka for the test to see
            # it. Wait until the end offsets stay put for two seconds (15 s at most).
            wait_until_written(bootstrap_servers, topic)
            raise RuntimeError("injected failure on the task's first attempt")
        return value

    ids = udf(fail_once, LongType())
    return (
        spark.range(0, _ROWS, 1, _SPARK_PARTITIONS)
        .select(ids(col("id")).alias("id"))
        .selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    )


def _write(df: Any, broker: KafkaBroker, topic: str, guarantee: str) -> None:
    (
        df.write.format("aioproducer")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic)
        .option("delivery.guarantee", guarantee)
        .option("kafka.linger.ms", "5")
        .mode("append")
        .save()
    )


def _counts(broker: KafkaBroker, topic: str, isolation_level: str) -> collections.Counter[bytes]:
    records = read_back(
        broker.bootstrap_servers,
        topic,
        expected=_ROWS,
        isolation_level=isolation_level,
        extra_wait=1.0,
        timeout=120.0,
    )
    return collections.Counter(r.value for r in records if r.value is not None)


@pytest.fixture(params=["kafka", "kafka_tv1"])
def any_kafka(request: pytest.FixtureRequest) -> KafkaBroker:
    """Each Kafka node in turn: transaction.version 2 (the default), then 1."""
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return broker


@ONCE_PER_CI_RUN
def test_a_task_that_fails_once_leaves_every_row_exactly_once(
    spark: Any, any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    kafka = any_kafka
    topic = new_topic(kafka, partitions=3)
    _write(_failing_once(spark, kafka.bootstrap_servers, topic), kafka, topic, "exactly_once")
    committed = _counts(kafka, topic, "read_committed")
    expected = {str(i).encode() for i in range(_ROWS)}
    assert set(committed) == expected
    duplicated = [value for value, count in committed.items() if count > 1]
    assert not duplicated, f"{len(duplicated)} rows were committed more than once"
    # A reader of uncommitted data sees every row too, and the rows the failed attempt wrote
    # before the retry fenced it (in an aborted transaction). How many that is depends on
    # how far its writer got first (the plain-Python writer on a busy machine may not have
    # begun): test_at_least_once_duplicates_what_the_failed_attempt_sent shows that the
    # same job duplicates rows without exactly_once.
    everything = _counts(kafka, topic, "read_uncommitted")
    assert sum(everything.values()) >= _ROWS
    assert set(everything) == expected


@pytest.mark.parametrize("older", older_kafka_params()[-1:])
def test_exactly_once_refuses_kafka_before_3_0_and_at_least_once_writes(
    spark: Any, older: str, request: pytest.FixtureRequest, new_topic: NewTopic
) -> None:
    # Kafka 2.8 cannot list or describe transactions: the driver could not check that
    # every partition's transaction is still open before committing any, so a write whose
    # first transactions outlived their timeout would commit the others (half the rows).
    from pyspark.errors import PySparkException

    kafka: KafkaBroker = request.getfixturevalue(older)
    topic = new_topic(kafka, partitions=2)
    df = spark.range(0, 1000, 1, 2).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(PySparkException) as caught:
        _write(df, kafka, topic, "exactly_once")
    message = str(caught.value)
    assert "exactly_once needs Kafka 3.0 or later" in message, message
    assert "at_least_once" in message
    assert read_back(kafka.bootstrap_servers, topic, expected=1, timeout=3.0) == []
    _write(df, kafka, topic, "at_least_once")
    records = read_back(kafka.bootstrap_servers, topic, expected=1000, extra_wait=0.5)
    assert {r.value for r in records} == {b"%d" % i for i in range(1000)}


@ONCE_PER_CI_RUN
def test_at_least_once_duplicates_what_the_failed_attempt_sent(
    spark: Any, kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    # What exactly_once prevents: the same job with the default guarantee.
    topic = new_topic(kafka, partitions=3)
    _write(_failing_once(spark, kafka.bootstrap_servers, topic), kafka, topic, "at_least_once")
    committed = _counts(kafka, topic, "read_committed")
    assert set(committed) == {str(i).encode() for i in range(_ROWS)}
    assert sum(committed.values()) > _ROWS


@ONCE_PER_CI_RUN
def test_a_write_whose_first_wave_outlives_the_transaction_timeout_commits_nothing(
    spark: Any, any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    # Two cores, four partitions: partitions 0 and 1 (the first wave) prepare at once;
    # 2 and 3 wait 10 s for their first row. The first wave's transactions outlive their
    # 4 s timeout, and the coordinator aborts them while the second wave runs: committing
    # the second wave's would write half the DataFrame.
    from pyspark.errors import PySparkException
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import LongType

    kafka = any_kafka
    topic = new_topic(kafka, partitions=2)

    def late_for_the_second_wave(value: int) -> int:
        if value in (2000, 3000):
            time.sleep(10.0)
        return value

    late = udf(late_for_the_second_wave, LongType())
    df = (
        spark.range(0, 4000, 1, 4)
        .select(late(col("id")).alias("id"))
        .selectExpr("CAST(id AS STRING) AS value")
    )
    with pytest.raises(PySparkException) as caught:
        (
            df.write.format("aioproducer")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", topic)
            .option("delivery.guarantee", "exactly_once")
            .option("kafka.transaction.timeout.ms", "4000")
            .mode("append")
            .save()
        )
    message = str(caught.value)
    assert "nothing was committed" in message
    assert "transaction.timeout.ms" in message
    # Every record the tasks sent is decided, and none is committed.
    for partition in (0, 1):
        committed, everything = _end_offsets(kafka, topic, partition)
        assert committed == everything
    assert (
        read_back(
            kafka.bootstrap_servers,
            topic,
            expected=1,
            timeout=3.0,
            isolation_level="read_committed",
        )
        == []
    )
    assert len(read_back(kafka.bootstrap_servers, topic, expected=4000, timeout=30.0)) == 4000


def test_exactly_once_options_are_checked_on_the_driver(spark: Any, kafka: KafkaBroker) -> None:
    from pyspark.errors import PySparkException

    df = spark.range(3).selectExpr("CAST(id AS STRING) AS value")

    def save(**options: str) -> None:
        writer = df.write.format("aioproducer").option(
            "kafka.bootstrap.servers", kafka.bootstrap_servers
        )
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.mode("append").save()

    with pytest.raises(PySparkException, match=r"'at_least_once' \(the default\) or"):
        save(topic="t", **{"delivery.guarantee": "twice"})
    with pytest.raises(PySparkException, match=r"kafka\.transactional\.id"):
        save(
            topic="t",
            **{"delivery.guarantee": "exactly_once", "kafka.transactional.id": str(uuid.uuid4())},
        )


# Only turns a hang into a failure.
_QUERY_HANG = 600.0

#: The streaming queries run, killed and run again as processes of their own take minutes
#: each: CI runs them once, in the pass over the compiled build.
_ONCE_PER_CI_RUN = ONCE_PER_CI_RUN


def _run_query(
    args: list[str], env: dict[str, str], log: Path, module: str = "tests.support.spark_crash"
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the test kills all of it
        )


def _input_files(source: Path, first: int, files: int, per_file: int) -> None:
    """JSON files of ids, one micro-batch each: ids ``first * per_file`` on."""
    source.mkdir(exist_ok=True)
    for number in range(first, first + files):
        lines = (json.dumps({"id": number * per_file + i}) for i in range(per_file))
        (source / f"part-{number}.json").write_text("\n".join(lines) + "\n")


def _run_to_end(args: list[str], env: dict[str, str], log: Path) -> int:
    query = _run_query(args, env, log)
    try:
        return query.wait(_QUERY_HANG)
    finally:
        if query.poll() is None:
            os.killpg(query.pid, signal.SIGKILL)
            query.wait()


def _crash_while_committing(
    args: list[str],
    env: dict[str, str],
    log: Path,
    flag: Path,
    module: str = "tests.support.spark_crash",
) -> None:
    """Run the query (or the write of ``module``) until its driver committed one partition
    (of micro-batch 1), then kill it (see tests.support.spark_crash)."""
    first = _run_query(args, {**env, CRASH_FLAG: str(flag)}, log, module)
    try:
        deadline = time.monotonic() + _QUERY_HANG
        while not flag.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert flag.exists(), f"the query did not reach its commit:\n{log.read_text()[-3000:]}"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


def _query_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(CRASH_FLAG, None)
    return env


def _committed_values(kafka: KafkaBroker, topic: str, expected: int) -> collections.Counter[int]:
    records = read_back(
        kafka.bootstrap_servers,
        topic,
        expected=expected,
        isolation_level="read_committed",
        extra_wait=1.0,
        timeout=120.0,
    )
    return collections.Counter(int(r.value) for r in records if r.value is not None)


@_ONCE_PER_CI_RUN
def test_a_streaming_query_killed_while_committing_writes_every_row_once_after_restart(
    kafka: KafkaBroker, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = new_topic(kafka, partitions=3)
    files, per_file = 4, 3000
    source = tmp_path / "input"
    _input_files(source, 0, files, per_file)
    checkpoint = tmp_path / "checkpoint"
    args = [str(source), str(checkpoint), topic, kafka.bootstrap_servers]
    env = _query_env()
    log = tmp_path / "query.log"
    _crash_while_committing(args, env, log, tmp_path / "crashed")

    # The same checkpoint, spelled otherwise: the same query (its id is in the checkpoint),
    # so its markers are found and the replay writes nothing twice.
    respelled = [str(source), f"file://{checkpoint}/", topic, kafka.bootstrap_servers]
    assert _run_to_end(respelled, env, log) == 0, log.read_text()[-3000:]
    total = files * per_file
    records = read_back(
        kafka.bootstrap_servers,
        topic,
        expected=total,
        isolation_level="read_committed",
        extra_wait=1.0,
        timeout=120.0,
    )
    committed = collections.Counter(r.value for r in records if r.value is not None)
    assert set(committed) == {str(i).encode() for i in range(total)}
    duplicated = [value for value, count in committed.items() if count > 1]
    assert not duplicated, f"{len(duplicated)} rows were committed more than once"
    # In order per key: a key's rows are in one Kafka partition, in the order of the files
    # (micro-batches) and of the lines within each, replayed micro-batch included.
    by_key: dict[bytes, list[int]] = collections.defaultdict(list)
    for record in records:  # sorted by (partition, offset)
        assert record.key is not None and record.value is not None
        by_key[record.key].append(int(record.value))
    assert sorted(by_key) == sorted(str(k).encode() for k in range(KEYS))
    for key, ids in by_key.items():
        assert ids == sorted(ids), f"key {key!r} is out of order"
        assert all(i % KEYS == int(key) for i in ids)


@_ONCE_PER_CI_RUN
def test_a_query_started_again_after_its_checkpoint_was_deleted_writes_its_rows(
    kafka: KafkaBroker, new_topic: NewTopic, tmp_path: Path
) -> None:
    # A new checkpoint is a new query (a new id): the markers the old one left under the
    # same prefix and path must not make it skip its micro-batches 0 and 1.
    topic = new_topic(kafka, partitions=3)
    per_file = 300
    first_input, second_input = tmp_path / "first", tmp_path / "second"
    _input_files(first_input, 0, 3, per_file)
    _input_files(second_input, 3, 2, per_file)
    checkpoint = tmp_path / "checkpoint"
    prefix = f"orders-{uuid.uuid4().hex[:8]}"
    env = _query_env()
    log = tmp_path / "query.log"
    first = [str(first_input), str(checkpoint), topic, kafka.bootstrap_servers, "3", prefix]
    assert _run_to_end(first, env, log) == 0, log.read_text()[-3000:]
    shutil.rmtree(checkpoint)
    second = [str(second_input), str(checkpoint), topic, kafka.bootstrap_servers, "3", prefix]
    assert _run_to_end(second, env, log) == 0, log.read_text()[-3000:]
    committed = _committed_values(kafka, topic, 5 * per_file)
    assert set(committed) == set(range(5 * per_file)), (
        f"{5 * per_file - len(committed)} rows never reached Kafka"
    )
    assert max(committed.values()) == 1


@_ONCE_PER_CI_RUN
def test_a_replay_split_otherwise_fails_loudly_and_writes_nothing_twice(
    kafka: KafkaBroker, new_topic: NewTopic, tmp_path: Path
) -> None:
    # Micro-batch 1 is committed in part by a run with 3 Spark partitions; the restart
    # splits it into 2 (as a file source does after a change of parallelism). The markers
    # are per partition: skipping or writing by them would lose rows or write them twice.
    topic = new_topic(kafka, partitions=3)
    files, per_file = 3, 700
    source = tmp_path / "input"
    _input_files(source, 0, files, per_file)
    checkpoint = str(tmp_path / "checkpoint")
    env = _query_env()
    log = tmp_path / "query.log"
    three = [str(source), checkpoint, topic, kafka.bootstrap_servers, "3"]
    _crash_while_committing(three, env, log, tmp_path / "crashed")
    mark = len(log.read_text())

    two = [str(source), checkpoint, topic, kafka.bootstrap_servers, "2"]
    assert _run_to_end(two, env, log) != 0, "the replay split otherwise was written"
    refused = log.read_text()[mark:]
    assert "replayed" in refused and "partition" in refused, refused[-3000:]
    partial = _committed_values(kafka, topic, per_file)
    assert max(partial.values()) == 1, "a row was committed twice"

    # Restarted with the partitioning of the run that began committing it, it completes.
    assert _run_to_end(three, env, log) == 0, log.read_text()[-3000:]
    committed = _committed_values(kafka, topic, files * per_file)
    assert set(committed) == set(range(files * per_file))
    assert max(committed.values()) == 1


@ONCE_PER_CI_RUN
def test_the_example_writes_every_order_once(kafka: KafkaBroker, new_topic: NewTopic) -> None:
    topic = new_topic(kafka, partitions=3)
    rows = 2000
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPARK_EXAMPLE_ROWS=str(rows))
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "spark_exactly_once.py"),
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--topic",
            topic,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=_QUERY_HANG,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"exactly once: {rows} rows committed" in result.stdout
    records = read_back(
        kafka.bootstrap_servers,
        topic,
        expected=rows,
        isolation_level="read_committed",
        extra_wait=1.0,
    )
    orders = collections.Counter(json.loads(r.value)["order"] for r in records if r.value)
    assert sorted(orders) == list(range(rows))
    assert set(orders.values()) == {1}


def test_a_failed_attempt_that_prepares_late_neither_fences_the_retry_nor_lingers(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    import asyncio

    from aioproducer.integrations.spark.exactly_once import (
        TransactionalBatchWriter,
        TransactionalCommitMessage,
        _produce_prepared,
        _transactional_id,
    )
    from aioproducer.integrations.spark.options import SinkOptions, _Layout

    topic = new_topic(any_kafka)
    sink = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": any_kafka.bootstrap_servers,
            "topic": topic,
            "delivery.guarantee": "exactly_once",
        }
    )
    layout = _Layout(
        key=None, value="binary", topic=False, partition=False, headers=None, timestamp=None
    )
    writer = TransactionalBatchWriter(sink, layout)

    def attempt(number: int, values: list[bytes]) -> Any:
        return asyncio.run(
            _produce_prepared(
                sink,
                layout,
                iter([{"value": values}]),
                _transactional_id(writer.prefix, 0, number),
                None,
            )
        )

    # The retry (attempt 1) writes the whole partition and prepares...
    prepared, records, _ = attempt(1, [b"a", b"b", b"c"])
    # ...then the failed attempt's worker, still running, prepares what it had read.
    attempt(0, [b"a"])
    writer.commit([TransactionalCommitMessage(0, records, prepared, attempt=1)])
    committed = read_back(
        any_kafka.bootstrap_servers,
        topic,
        expected=3,
        isolation_level="read_committed",
        extra_wait=1.0,
    )
    assert sorted(r.value for r in committed) == [b"a", b"b", b"c"]
    # The late attempt's transaction was aborted by the commit: nothing holds consumers back.
    everything = read_back(any_kafka.bootstrap_servers, topic, expected=4, extra_wait=0.5)
    assert len(everything) == 4
    committed_end, end = _end_offsets(any_kafka, topic, 0)
    assert committed_end == end, "a transaction is still open"


def _end_offsets(broker: KafkaBroker, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of a partition: equal when no transaction is
    open on it."""
    import confluent_kafka
    from confluent_kafka.admin import OffsetSpec

    admin = broker.admin()
    tp = confluent_kafka.TopicPartition(topic, partition)
    committed, everything = (
        admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp]
        .result(timeout=10)
        .offset
        for level in (
            confluent_kafka.IsolationLevel.READ_COMMITTED,
            confluent_kafka.IsolationLevel.READ_UNCOMMITTED,
        )
    )
    return committed, everything


def test_the_commit_aborts_what_lost_attempts_and_dropped_partitions_left_open(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    import asyncio

    from aioproducer import Producer, list_transactions
    from aioproducer.integrations.spark.exactly_once import (
        TransactionalCommitMessage,
        TransactionalStreamWriter,
        _fence,
        _Marker,
        _produce_prepared,
        _transactional_id,
    )
    from aioproducer.integrations.spark.options import SinkOptions, _Layout

    topic = new_topic(any_kafka)
    prefix = f"query-{uuid.uuid4().hex[:8]}"
    sink = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": any_kafka.bootstrap_servers,
            "topic": topic,
            "delivery.guarantee": "exactly_once",
            "transactional.id.prefix": prefix,
        }
    )
    layout = _Layout(
        key=None, value="binary", topic=False, partition=False, headers=None, timestamp=None
    )
    writer = TransactionalStreamWriter(sink, layout)

    def prepare(partition: int, attempt: int, chunks: Iterator[Any], batch: int) -> Any:
        marker = _Marker(f"{prefix}-{partition}", topic, batch + 1, "query-id")
        return asyncio.run(
            _produce_prepared(
                sink,
                layout,
                chunks,
                _transactional_id(prefix, partition, attempt),
                marker,
            )
        )

    async def open_elsewhere() -> None:
        # Another query, whose prefix starts with this one's: not this query's to abort.
        async with Producer(
            bootstrap_servers=any_kafka.bootstrap_servers,
            transactional_id=f"{prefix}-other-0",
        ) as producer:
            await producer.begin_transaction()
            await producer.send(topic, b"elsewhere", partition=0)
            await producer.prepare_transaction()

    def speculative_copy() -> None:
        # A speculative copy (attempt 1) of partition 0, started while attempt 0 writes,
        # prepares before it; Spark keeps attempt 0, which the copy must not have fenced
        # (it goes through what write() runs: nothing of another attempt is fenced).
        prepare(0, 1, iter([{"value": [b"loser"]}]), batch=4)
        asyncio.run(open_elsewhere())

    def kept_attempt() -> Iterator[Any]:
        yield {"value": [b"a"]}
        thread = threading.Thread(target=speculative_copy)
        thread.start()
        thread.join()
        yield {"value": [b"b", b"c"]}

    # Left by an earlier run of the query, which had a Spark partition 5.
    prepare(5, 0, iter([{"value": [b"dropped"]}]), batch=3)
    prepared, records, _ = prepare(0, 0, kept_attempt(), batch=4)
    message = TransactionalCommitMessage(0, records, prepared, query_id="query-id", digest="3:0")
    writer.commit([message], 4)

    open_now = {
        t.transactional_id
        for t in asyncio.run(
            list_transactions(
                states=["Ongoing"],
                transactional_id_prefix=prefix,
                bootstrap_servers=any_kafka.bootstrap_servers,
            )
        )
    }
    assert open_now == {f"{prefix}-other-0"}
    # Still held back by the other query's transaction, which began before the batch's...
    committed, everything = _end_offsets(any_kafka, topic, 0)
    assert committed < everything
    assert asyncio.run(_fence(sink, [f"{prefix}-other-0"])) == []
    # ...and once it ends, every record is decided and the batch's three are committed.
    committed, everything = _end_offsets(any_kafka, topic, 0)
    assert committed == everything
    rows = read_back(
        any_kafka.bootstrap_servers,
        topic,
        expected=3,
        isolation_level="read_committed",
        extra_wait=1.0,
    )
    assert sorted(r.value for r in rows) == [b"a", b"b", b"c"]


def _save_under(df: Any, kafka: KafkaBroker, topic: str, prefix: str) -> None:
    (
        df.write.format("aioproducer")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .option("delivery.guarantee", "exactly_once")
        .option("transactional.id.prefix", prefix)
        .mode("append")
        .save()
    )


@_ONCE_PER_CI_RUN
def test_a_batch_write_whose_driver_died_mid_commit_is_completed_by_the_next_run(
    spark: Any, any_kafka: KafkaBroker, new_topic: NewTopic, tmp_path: Path
) -> None:
    from tests.support.spark_batch_crash import rows

    kafka = any_kafka
    topic = new_topic(kafka, partitions=3)
    prefix = f"nightly-{uuid.uuid4().hex[:8]}"
    flag = tmp_path / "committed-one"
    args = [topic, kafka.bootstrap_servers, prefix, "4000", "4"]
    _crash_while_committing(
        args, _query_env(), tmp_path / "write.log", flag, "tests.support.spark_batch_crash"
    )
    # The driver died after committing one Spark partition's transaction: the write is in
    # Kafka in part (consumers reading committed data wait behind the open ones).
    import asyncio

    from aioproducer import describe_transactions

    partition = int(flag.read_text())
    described = asyncio.run(
        describe_transactions(
            [f"{prefix}-{p}" for p in range(4)], bootstrap_servers=kafka.bootstrap_servers
        )
    )
    states = {int(i.rsplit("-", 1)[1]): d.state for i, d in described.items()}
    assert states[partition] in {"PrepareCommit", "CompleteCommit"}
    assert {p: states[p] for p in range(4) if p != partition} == {
        p: "Ongoing" for p in range(4) if p != partition
    }

    # Another write under the prefix, to another topic, before the rerun: its driver
    # completes the interrupted write first (its tasks would abort what it left open).
    other_topic = new_topic(kafka, partitions=1)
    _save_under(rows(spark, 10_000, 500, 2), kafka, other_topic, prefix)
    assert _committed_values(kafka, topic, 4000) == collections.Counter(range(4000))
    assert _committed_values(kafka, other_topic, 500) == collections.Counter(range(10_000, 10_500))

    # A write of other rows to the same topic is written as usual...
    _save_under(rows(spark, 20_000, 500, 2), kafka, topic, prefix)
    expected = collections.Counter([*range(4000), *range(20_000, 20_500)])
    assert _committed_values(kafka, topic, 4500) == expected

    # ...and the interrupted write run again after it, the same rows split otherwise (in
    # more partitions than a connection takes requests at once), is still recognised: its
    # rows are in Kafka already, and nothing is written twice.
    _save_under(rows(spark, 0, 4000, 7), kafka, topic, prefix)
    assert _committed_values(kafka, topic, 4500) == expected
