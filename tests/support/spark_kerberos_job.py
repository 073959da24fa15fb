"""Write a DataFrame with ``format("aioproducer")`` and a Java job's Kerberos options, in a
Spark of its own.

``python -m tests.support.spark_kerberos_job BOOTSTRAP TOPIC JAAS_LINE ROWS``: a local Spark
writes ROWS rows (values ``"0"`` to ``"ROWS-1"``) to TOPIC through a SASL_PLAINTEXT GSSAPI
listener, with ``kafka.sasl.mechanism``, ``kafka.sasl.kerberos.service.name`` and
``kafka.sasl.jaas.config`` (a ``Krb5LoginModule`` line) exactly as a Java Spark job gives
them. A process of its own so that Spark's Python workers start with the test realm's
``KRB5_CONFIG`` in their environment, as a cluster's have its ``/etc/krb5.conf``.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    bootstrap, topic, jaas, rows = sys.argv[1:5]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aioproducer.integrations.spark import KafkaDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kerberos")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(KafkaDataSource)
        (
            spark.range(0, int(rows), 1, 2)
            .selectExpr("CAST(id AS STRING) AS value")
            .write.format("aioproducer")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("kafka.security.protocol", "SASL_PLAINTEXT")
            .option("kafka.sasl.mechanism", "GSSAPI")
            .option("kafka.sasl.kerberos.service.name", "kafka")
            .option("kafka.sasl.jaas.config", jaas)
            .mode("append")
            .save()
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
