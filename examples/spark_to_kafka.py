"""Write a Spark DataFrame to Kafka from the executors, then report from the driver.

    python examples/spark_to_kafka.py [--bootstrap-servers HOST:PORT] [--topic NAME]

Needs PySpark 4 (``pip install -e '.[spark]'`` in a clone) and Java 17 or newer. It starts a
local Spark session (about half a minute on a small machine), writes 100,000 orders with
the ``"aioproducer"`` data source (one producer per partition task, on the executors),
writes them again with the ``foreachPartition`` fallback, and publishes a summary from the
driver with the blocking ``SyncProducer``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from _broker import cluster

from aioproducer.integrations.spark import KafkaDataSource, write_dataframe
from aioproducer.sync import SyncProducer

# Rows to write (the test runs a small job through the same code).
ROWS = int(os.environ.get("SPARK_EXAMPLE_ROWS", "100000"))


def main(bootstrap_servers: str, topic: str) -> None:
    # Spark's Python workers must run an interpreter that has aioproducer and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark_to_kafka")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaDataSource)  # once per session
    try:
        orders = spark.range(ROWS, numPartitions=4).selectExpr(
            "CAST(id % 1000 AS STRING) AS key",  # the customer: one partition per customer
            "to_json(named_struct('order', id, 'amount_cents', id * 7 % 10000)) AS value",
            "array(named_struct('key', 'source', 'value', CAST('spark' AS BINARY))) AS headers",
        )

        started = time.perf_counter()
        (
            orders.write.format("aioproducer")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("topic", topic)
            .option("kafka.linger.ms", "10")
            .option("kafka.compression.type", "lz4")
            .mode("append")
            .save()
        )
        elapsed = time.perf_counter() - started
        print(f"data source: {ROWS} rows in {elapsed:.1f} s ({ROWS / elapsed:,.0f} rows/s)")

        # The same, for a Spark without the Python data source API.
        written = write_dataframe(orders, topic, bootstrap_servers=bootstrap_servers)
        print(f"foreachPartition fallback: {written} rows")

        # The driver is synchronous code: SyncProducer runs the async producer on a thread.
        with SyncProducer(bootstrap_servers=bootstrap_servers) as producer:
            summary = {"job": "spark_to_kafka", "rows": ROWS + written}
            metadata = producer.send_and_wait(f"{topic}-jobs", json.dumps(summary).encode())
            print(f"summary at {metadata.topic}[{metadata.partition}] @ {metadata.offset}")
    finally:
        spark.stop()


if __name__ == "__main__":
    with cluster("orders", "Write a Spark DataFrame to Kafka.") as (servers, topic_name):
        main(servers, topic_name)
