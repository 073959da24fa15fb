"""A Spark driver whose executors run aioproducer from a packed virtual environment.

    python tests/support/spark_cluster_job.py --bootstrap-servers HOST:PORT --topic NAME
        --archive environment.tar.gz [--master local-cluster[1,1,1024]] [--rows N]

Run by tests/integration/test_spark_cluster.py in a process of its own (a process holds one
SparkContext, and this one needs its own master and Python workers). It ships the archive
with ``spark.archives`` (unpacked as ``./environment`` in each executor's working directory)
and runs the Python workers with ``PYSPARK_PYTHON=./environment/bin/python``, as
docs/spark-cluster.md tells users to. It asks every executor's Python worker what it
imported (a ``mapPartitions`` over as many partitions as the job writes), writes ``--rows``
rows with ``format("aioproducer")``, and prints one JSON line: the executors' reports, the
rows written and the write's wall time.

Without ``--archive`` the workers run this interpreter with this process's ``sys.path``
(the source tree or the installed package): the same job, for comparing throughput.
The driver imports aioproducer from the source tree (``--source``) to register the data
source; the executors are kept from it (no PYTHONPATH reaches them), so what they import
comes from the archive.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any


def executor_report(partition: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """Runs on an executor: what its Python worker imported."""
    import aioproducer
    from aioproducer.compiled import compiled_modules

    yield {
        "file": aioproducer.__file__,
        "compiled": list(compiled_modules()),
        "python": sys.executable,
        "prefix": sys.prefix,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--archive", help="a venv-pack archive for the executors")
    parser.add_argument("--source", help="the source tree the driver imports aioproducer from")
    parser.add_argument("--master", default="local-cluster[1,1,1024]")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()

    if args.source:
        sys.path.insert(0, args.source)
    if args.archive:
        # Relative: the executors unpack the archive into their working directory.
        os.environ["PYSPARK_PYTHON"] = "./environment/bin/python"
    else:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    from pyspark.sql import SparkSession

    from aioproducer.integrations.spark import KafkaDataSource

    builder = (
        SparkSession.builder.master(args.master)
        .appName("aioproducer-spark-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.executor.memory", "768m")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
    )
    if args.archive:
        builder = builder.config("spark.archives", f"{args.archive}#environment")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.dataSource.register(KafkaDataSource)
        reports = (
            spark.sparkContext.parallelize(range(args.partitions), args.partitions)
            .mapPartitions(executor_report)
            .collect()
        )
        rows = spark.range(args.rows, numPartitions=args.partitions).selectExpr(
            "CAST(id AS STRING) AS key", "CAST(id * 7 AS STRING) AS value"
        ).cache()
        rows.count()  # computed before the clock starts
        started = time.perf_counter()
        (
            rows.write.format("aioproducer")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("topic", args.topic)
            .option("kafka.linger.ms", "5")
            .mode("append")
            .save()
        )
        elapsed = time.perf_counter() - started
    finally:
        spark.stop()
    print(json.dumps({"executors": reports, "rows": args.rows, "seconds": elapsed}), flush=True)


if __name__ == "__main__":
    main()
