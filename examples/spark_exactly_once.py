"""Write a Spark DataFrame to Kafka exactly once, even though a task fails and is retried.

    python examples/spark_exactly_once.py [--bootstrap-servers HOST:PORT] [--topic NAME]

Needs PySpark 4 (``pip install -e '.[spark]'`` in a clone), Java 17 or newer, and Apache
Kafka 3.0 or later (``--bootstrap-servers``): ``exactly_once`` lists and describes the
write's transactions (KIP-664), which the embedded broker cannot, so this example does not
run there.

It starts a local Spark session that tries a failed task again (``local[2,3]``), and
writes orders with ``delivery.guarantee`` ``exactly_once``: each partition task writes in
a Kafka transaction, which the driver commits once every task succeeded. The task of
partition 1 fails on its first attempt, in the middle of its rows (whether its writer sent
some of them first depends on how far it got); Spark runs it again, the driver aborts
what the failed attempt left open, and a consumer reading committed data
(``isolation.level=read_committed``) gets every order once.
"""

from __future__ import annotations

import os
import sys
import time

from _broker import cluster

from aioproducer.integrations.spark import KafkaDataSource

# Rows to write (the test runs a small job through the same code).
ROWS = int(os.environ.get("SPARK_EXAMPLE_ROWS", "100000"))


def fail_first_attempt_once(order: int) -> int:
    """Raise on the first attempt of the task that holds the middle of partition 1."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if order == ROWS // 4 + ROWS // 8 and context is not None and context.attemptNumber() == 0:
        raise RuntimeError("an executor failure, for the example")
    return order


def main(bootstrap_servers: str, topic: str) -> None:
    # Spark's Python workers must run an interpreter that has aioproducer and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import LongType

    spark = (
        SparkSession.builder.master("local[2,3]")  # up to 3 attempts per task
        .appName("spark_exactly_once")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")  # the failed attempt is expected
    spark.dataSource.register(KafkaDataSource)
    try:
        checked = udf(fail_first_attempt_once, LongType())
        orders = (
            spark.range(ROWS, numPartitions=4)
            .select(checked(col("id")).alias("id"))
            .selectExpr(
                "CAST(id AS STRING) AS key",
                "to_json(named_struct('order', id, 'amount_cents', id * 7 % 10000)) AS value",
            )
        )
        started = time.perf_counter()
        (
            orders.write.format("aioproducer")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("topic", topic)
            .option("delivery.guarantee", "exactly_once")
            .option("kafka.linger.ms", "10")
            .mode("append")
            .save()
        )
        elapsed = time.perf_counter() - started
        print(f"exactly once: {ROWS} rows committed in {elapsed:.1f} s; consumers must read "
              "with isolation.level=read_committed")
    finally:
        spark.stop()


if __name__ == "__main__":
    needs = (
        "this example needs Apache Kafka 3.0 or later (--bootstrap-servers HOST:PORT): "
        "delivery.guarantee exactly_once lists and describes the write's transactions, "
        "which the embedded broker cannot"
    )
    with cluster(
        "orders", "Write a Spark DataFrame to Kafka exactly once.", needs_kafka=needs
    ) as (servers, name):
        main(servers, name)
