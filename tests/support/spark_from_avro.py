"""Decode Avro payloads with Spark's own ``from_avro``, in a Spark of its own.

``python -m tests.support.spark_from_avro JAR SCHEMA_FILE PAYLOADS_FILE OUT_FILE``: a local
Spark whose JVM starts with ``JAR`` (spark-avro) on its classpath reads the payloads (a
pickled list of bytes), decodes each with ``from_avro`` and the Avro schema in
``SCHEMA_FILE``, and pickles the decoded structs (dicts, nested ones too) to ``OUT_FILE``.
A process of its own because a Python process starts Spark's JVM once: a session made
later in a test run cannot add spark-avro to the driver's classpath.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def main() -> int:
    jar, schema_file, payloads_file, out_file = sys.argv[1:5]
    from pyspark.sql import SparkSession
    from pyspark.sql.avro.functions import from_avro

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("from_avro")
        .config("spark.ui.enabled", "false")
        .config("spark.jars", jar)
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        payloads = pickle.loads(Path(payloads_file).read_bytes())
        schema = Path(schema_file).read_text()
        raw = spark.createDataFrame([(p,) for p in payloads], "value binary")
        rows = raw.select(from_avro(raw.value, schema).alias("decoded")).collect()
        decoded = [row.decoded.asDict(recursive=True) for row in rows]
    finally:
        spark.stop()
    Path(out_file).write_bytes(pickle.dumps(decoded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
