"""Write a DataFrame's struct column to Kafka as Avro records a Schema Registry knows.

    SCHEMA_REGISTRY_URL=http://localhost:8081 \\
        python examples/spark_schema_registry.py [--bootstrap-servers HOST:PORT] [--topic NAME]

Needs PySpark 4 and Java 17 or newer, a registry (Confluent Schema Registry, Apicurio,
Karapace) at ``SCHEMA_REGISTRY_URL`` (``http://localhost:8081`` by default), and
``pip install 'aioproducer[spark,schema-registry]'``. The ``value`` column is a struct; the
data source derives its Avro schema by Spark's own rules (``to_avro``'s), registers it
under ``{topic}-value`` and writes each row in the registry's wire format, which
confluent-kafka's, the Java client's and other tools' deserializers read.
``SPARK_EXAMPLE_ROWS`` sets how many orders it writes (100,000 by default).
"""

from __future__ import annotations

import os
import sys

from _broker import cluster

from aioproducer.integrations.spark import KafkaDataSource

# Rows to write (the test runs a small job through the same code).
ROWS = int(os.environ.get("SPARK_EXAMPLE_ROWS", "100000"))


def main(bootstrap_servers: str, topic: str) -> None:
    # Spark's Python workers must run an interpreter that has aioproducer and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    registry = os.environ.get("SCHEMA_REGISTRY_URL", "http://localhost:8081")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark_schema_registry")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaDataSource)
    orders = spark.range(ROWS, numPartitions=2).selectExpr(
        "CAST(id % 1000 AS STRING) AS key",
        "named_struct('id', id, 'customer', CONCAT('c-', CAST(id % 1000 AS STRING)), "
        "'amount', CAST((id % 10000) / 100 AS DECIMAL(10, 2)), "
        "'placed_at', TIMESTAMP_MICROS(1700000000000000 + id)) AS value",
    )
    (
        orders.write.format("aioproducer")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .option("value.format", "avro")
        .option("schema.registry.url", registry)
        .mode("append")
        .save()
    )
    spark.stop()
    print(f"wrote {ROWS} orders as Avro records under subject {topic}-value")


if __name__ == "__main__":
    with cluster("orders", "Spark to Kafka, Avro with a Schema Registry.") as (servers, name):
        main(servers, name)
