"""Spark writing a DataFrame to Kafka: ``format("aioproducer")`` against Spark's own sink.

One local Spark session (``local[2]`` by default), one cached DataFrame of ``--rows`` rows
(``key`` and ``value`` columns, ``--size`` bytes of value, keyed or not), written in turn by:

- ``aioproducer``: ``df.write.format("aioproducer")``, this project's data source;
- ``kafka``: ``df.write.format("kafka")``, Spark's JVM sink (``spark-sql-kafka-0-10``, loaded
  with ``spark.jars`` from ``~/.cache/aioproducer/spark-kafka-<version>``, which Maven fills
  from ``bench/spark/pom.xml`` on first use);
- ``arrow_confluent``: ``mapInArrow`` with a confluent-kafka producer per partition, the loop
  users write by hand;
- ``aioproducer_exactly_once`` (only when named in ``--writers``): ``format("aioproducer")``
  with ``delivery.guarantee`` ``exactly_once``, whose rows are counted as a consumer reading
  committed data sees them (transaction markers take offsets too).

With ``--avro``, the value is a struct (an id, a name, a score, a timestamp and ``--size``
bytes of text) written as Avro: by ``aioproducer`` with ``value.format`` ``avro`` in the
Schema Registry wire format against a real registry (Apicurio, started here; the schema is
registered once per subject, ids cached), and by ``kafka`` through Spark's ``to_avro``
(``spark-avro``, from the same Maven cache; no registry header, which Spark's open-source
sink cannot write).

Each writer first writes a slice of the DataFrame once, unmeasured (Python workers started,
the JVM's JIT warm). Each write gets a new topic; the rows on the broker are counted with
confluent-kafka (``bench.harness.records_on_broker``) and a write that does not store every
row is reported as failed (with the broker's view of the topic's leaders); on Kafka the topic
is then deleted, so that ten-million-row runs fit on the disk. The time is the write's wall
time; CPU is the user+system CPU of this process and all its children (the Spark JVM and the
Python workers) over the write, per row::

    python -m bench.spark_sink [--broker kafka|tansu] [--rows 1000000] [--size 100]
        [--keyed] [--avro] [--rounds 3] [--partitions 6] [--master local[2]]
        [--driver-memory 4g]

It prints a markdown table (median rows/s, CPU us per row, ratio to Spark's sink) and
writes ``bench/results/<UTC time>-spark-<broker>.json``.

Spark 4.3's Kafka connector is not on Maven Central yet; the 4.2.0 connector (with
kafka-clients 3.9) is used, which runs under pyspark 4.3.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._results import save
from bench.harness import records_on_broker

ROOT = Path(__file__).resolve().parent.parent
CONNECTOR_VERSION = "4.2.0"
_CACHE = Path.home() / ".cache" / "aioproducer" / f"spark-kafka-{CONNECTOR_VERSION}"
_POM = Path(__file__).with_name("spark") / "pom.xml"
WRITERS = ("aioproducer", "kafka", "arrow_confluent")
#: Writers run only when named in ``--writers``.
OPTIONAL_WRITERS = ("aioproducer_exactly_once",)


def connector_jars(avro: bool = False) -> list[Path]:
    """The jars of Spark's Kafka sink (and ``spark-avro`` with ``avro``), fetched by Maven
    into the cache on first use."""
    jars = sorted(_CACHE.glob("*.jar"))
    needed = ("spark-sql-kafka", "spark-avro")
    if not all(any(jar.name.startswith(name) for jar in jars) for name in needed):
        _CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mvn", "-q", "-f", str(_POM), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={_CACHE}"],
            check=True,
        )  # fmt: skip
        jars = sorted(_CACHE.glob("*.jar"))
    # Spark brings its own Hadoop, Scala and logging jars: only the connector's own.
    wanted = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2")
    if avro:
        wanted += ("spark-avro",)
    return [jar for jar in jars if jar.name.startswith(wanted)]


class _Broker:
    def __init__(self, name: str) -> None:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        self.name = name
        self._node: Any
        if name == "kafka":
            from tests.support.kafka import THROUGHPUT_JVM_OPTIONS, KafkaBroker

            self._node = KafkaBroker(log_level="WARN", jvm_options=THROUGHPUT_JVM_OPTIONS)
        elif name == "tansu":
            from aioproducer.embedded import EmbeddedBroker

            self._node = EmbeddedBroker()
        else:
            raise SystemExit(f"unknown broker {name!r}: kafka or tansu")
        self._node.start()
        self.bootstrap_servers: str = self._node.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        self._node.create_topic(name, partitions)

    def delete_topic(self, name: str) -> None:
        """Free the disk a write took (Kafka only; Tansu keeps topics in memory)."""
        if self.name == "kafka":
            with contextlib.suppress(Exception):
                self._node.delete_topic(name)

    def describe(self, name: str) -> str:
        """The broker's view of ``name``'s partitions: ``{partition: (leader, isr)}``."""
        if self.name != "kafka":
            return "-"
        try:
            state = self._node.partitions(name)
        except Exception as exc:
            return f"no metadata: {exc}"
        return str({p: (m.leader, list(m.isrs)) for p, m in sorted(state.items())})

    def stop(self) -> None:
        self._node.stop()


def committed_records(bootstrap_servers: str, topic: str, partitions: int) -> int | None:
    """How many records a consumer reading committed data gets from ``topic`` (read in
    full with confluent-kafka; transaction markers are not records)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"bench-committed-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        waiting, count = set(range(partitions)), 0
        deadline = time.monotonic() + 300
        while waiting and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is None:
                    count += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    waiting.discard(message.partition())
        return None if waiting else count
    finally:
        consumer.close()


def _cpu_by_role() -> dict[str, float]:
    """CPU seconds so far of this process and its descendants, by role: ``broker`` (the
    Kafka node's JVM), ``spark_jvm`` (Spark's JVM and what it reaped), ``python_workers``
    (the Python workers Spark started) and ``driver`` (this process, and what it
    reaped)."""
    import psutil  # type: ignore[import-untyped,unused-ignore]

    me = psutil.Process()
    own = me.cpu_times()
    # Children that already exited count too, with whoever reaped them.
    roles = {
        "driver": own.user + own.system + own.children_user + own.children_system,
        "spark_jvm": 0.0,
        "python_workers": 0.0,
        "broker": 0.0,
    }
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            name = child.name()
            if name.startswith("python"):
                # PySpark's daemon forks the workers and reaps those that exit.
                roles["python_workers"] += (
                    times.user + times.system + times.children_user + times.children_system
                )
                continue
            command = " ".join(child.cmdline())
            role = "broker" if "kafka.Kafka" in command or "kafka-server" in command else (
                "spark_jvm" if name == "java" else "driver"
            )
            roles[role] += times.user + times.system
            if role == "spark_jvm":
                # The JVM reaps the Python workers it started.
                roles["python_workers"] += times.children_user + times.children_system
    return roles


def _arrow_confluent(bootstrap: str, topic: str) -> Any:
    def write(batches: Any) -> Any:
        import confluent_kafka
        import pyarrow as pa

        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"}
        )
        failures: list[str] = []

        def report(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(str(error))

        rows = 0
        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for key, value in zip(keys, values, strict=True):
                while True:
                    try:
                        producer.produce(topic, value, key, on_delivery=report)
                        break
                    except BufferError:
                        producer.poll(0.01)
                producer.poll(0)
            rows += len(keys)
        producer.flush()
        if failures:
            raise RuntimeError(f"{len(failures)} records failed: {failures[0]}")
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    return write


def _write(
    spark: Any, df: Any, writer: str, bootstrap: str, topic: str, extra: dict[str, str]
) -> None:
    if writer in ("aioproducer", "aioproducer_exactly_once"):
        guarantee = "exactly_once" if writer == "aioproducer_exactly_once" else "at_least_once"
        (df.write.format("aioproducer").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).option("delivery.guarantee", guarantee)
         .options(**extra).mode("append").save())  # fmt: skip
    elif writer == "kafka":
        if dict(df.dtypes)["value"].startswith("struct"):
            from pyspark.sql.avro.functions import to_avro
            from pyspark.sql.functions import col

            df = df.select(col("key"), to_avro(col("value")).alias("value"))
        (df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).save())  # fmt: skip
    else:
        df.mapInArrow(_arrow_confluent(bootstrap, topic), "rows long").collect()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.spark_sink",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--broker", default="kafka", choices=("kafka", "tansu"), help="default: kafka"
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="default: 1000000")
    parser.add_argument("--size", type=int, default=100, help="value bytes per row (100)")
    parser.add_argument("--keyed", action="store_true", help="a distinct key per row")
    parser.add_argument(
        "--avro", action="store_true",
        help="struct values as Avro: aioproducer with a Schema Registry, Spark with to_avro",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="default: 3")
    parser.add_argument("--partitions", type=int, default=6, help="topic partitions (6)")
    parser.add_argument("--master", default="local[2]", help="default: local[2]")
    parser.add_argument(
        "--driver-memory", default="4g",
        help="spark.driver.memory: the local executors' heap, which holds the cached rows (4g)",
    )  # fmt: skip
    parser.add_argument(
        "--writers",
        default=",".join(WRITERS),
        help=f"comma-separated, of {', '.join(WRITERS + OPTIONAL_WRITERS)} "
        f"(default: {','.join(WRITERS)})",
    )
    parser.add_argument("--no-save", action="store_true", help="write no results file")
    parser.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE",
        help="an option of format('aioproducer') (kafka.batch.size=262144); repeatable",
    )  # fmt: skip
    options = parser.parse_args(argv)
    writers = [w for w in options.writers.split(",") if w]
    extra = dict(item.split("=", 1) for item in options.option)
    unknown = set(writers) - set(WRITERS) - set(OPTIONAL_WRITERS)
    if unknown:
        names = ", ".join(WRITERS + OPTIONAL_WRITERS)
        parser.error(f"unknown writers {sorted(unknown)}: use {names}")

    from pyspark.sql import SparkSession

    from aioproducer.integrations.spark import KafkaDataSource

    if options.avro and "arrow_confluent" in writers:
        parser.error("--avro compares aioproducer and kafka: give --writers aioproducer,kafka")
    registry = None
    if options.avro:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        import tempfile

        from tests.support.registry import ApicurioRegistry

        registry = ApicurioRegistry(Path(tempfile.mkdtemp(prefix="bench-registry-")))
        extra = {"value.format": "avro", "schema.registry.url": registry.url, **extra}
    jars = connector_jars(options.avro) if "kafka" in writers else []
    spark = (
        SparkSession.builder.master(options.master)
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", options.driver_memory)
        .config("spark.sql.shuffle.partitions", str(options.partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaDataSource)
    key = "CAST(id AS STRING)" if options.keyed else "CAST(NULL AS STRING)"
    value = f"repeat('x', {options.size})"
    if options.avro:
        value = (
            "named_struct('id', id, 'name', CONCAT('user-', CAST(id % 1000 AS STRING)), "
            "'score', id * 0.5, 'at', TIMESTAMP_MICROS(1700000000000000 + id), "
            f"'text', {value})"
        )
    df = (
        spark.range(options.rows, numPartitions=options.partitions)
        .selectExpr(f"{key} AS key", f"{value} AS value")
        .cache()
    )
    df.count()
    broker = _Broker(options.broker)
    runs: dict[str, list[dict[str, Any]]] = {w: [] for w in writers}
    try:
        # Warm-up, not measured: each writer once on a slice, so that the Python workers
        # are up and the JVM's JIT has seen the sink before the timed writes. The slice
        # keeps every partition (a limit() would be one task, which starts one worker).
        warm = df.sample(fraction=min(1.0, 50_000 / options.rows), seed=1)
        for writer in writers:
            topic = f"spark-warmup-{writer}-{uuid.uuid4().hex[:8]}"
            broker.create_topic(topic, options.partitions)
            _write(spark, warm, writer, broker.bootstrap_servers, topic, extra)
            broker.delete_topic(topic)
        for round_index in range(options.rounds):
            order = writers[round_index % len(writers):] + writers[: round_index % len(writers)]
            for writer in order:
                topic = f"spark-{writer}-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, options.partitions)
                roles_before, start = _cpu_by_role(), time.perf_counter()
                error = None
                try:
                    _write(spark, df, writer, broker.bootstrap_servers, topic, extra)
                except Exception as exc:  # a failed write is reported, not fatal
                    # A Python worker's traceback ends with the error itself.
                    text = str(exc)
                    error = f"{type(exc).__name__}: {text[:200]} ... {text[-600:]}"
                seconds = time.perf_counter() - start
                roles_after = _cpu_by_role()
                by_role = {role: roles_after[role] - roles_before[role] for role in roles_after}
                cpu = sum(by_role.values())
                if writer == "aioproducer_exactly_once":
                    stored = committed_records(broker.bootstrap_servers, topic, options.partitions)
                else:
                    stored = records_on_broker(broker.bootstrap_servers, topic, options.partitions)
                if error is None and stored != options.rows:
                    error = f"the broker holds {stored} of {options.rows} rows"
                run = {
                    "seconds": seconds, "cpu_s": cpu, "cpu_s_by_role": by_role, "stored": stored,
                    "error": error,
                }
                if error is not None:
                    run["partitions_after"] = broker.describe(topic)
                broker.delete_topic(topic)
                runs[writer].append(run)
                print(f"[round {round_index + 1}] {writer:16} {options.rows / seconds:12,.0f} "
                      f"rows/s  cpu {cpu / options.rows * 1e6:6.2f} us/row"
                      + (f"  FAILED: {error}" if error else ""), flush=True)  # fmt: skip
    finally:
        broker.stop()
        spark.stop()
        if registry is not None:
            registry.stop()
    medians: dict[str, dict[str, float]] = {}
    for writer, results in runs.items():
        good = [r for r in results if r["error"] is None]
        if good:
            medians[writer] = {
                "rows_per_s": statistics.median(options.rows / r["seconds"] for r in good),
                "cpu_us_per_row": statistics.median(
                    r["cpu_s"] / options.rows * 1e6 for r in good
                ),
            }
    shape = f"{options.rows:,} rows of {options.size} B, {'keyed' if options.keyed else 'no key'}"
    if options.avro:
        shape += ", Avro struct values"
    print(f"\n### Spark to {options.broker}: {shape} ({options.master})\n")
    print("| writer | rows/s | CPU us/row | vs format(\"kafka\") |")
    print("|---|---:|---:|---:|")
    base = medians.get("kafka", {}).get("rows_per_s")
    for writer, values in medians.items():
        ratio = f"{values['rows_per_s'] / base:.2f}" if base else "-"
        print(f"| {writer} | {values['rows_per_s']:,.0f} | {values['cpu_us_per_row']:.2f} | "
              f"{ratio} |")  # fmt: skip
    if not options.no_save:
        save(
            f"spark-{options.broker}",
            [{"writer": writer, "connector": CONNECTOR_VERSION, "options": vars(options),
              "runs": runs[writer], "median": medians.get(writer)} for writer in writers],
        )  # fmt: skip
    failed = any(r["error"] for results in runs.values() for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
