"""PySpark integration: write DataFrames to Kafka from the executors, without the JVM connector.

On PySpark 4.x, register the data source and write as with Spark's own Kafka sink (same
columns, same options)::

    from aioproducer.integrations.spark import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    (df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value")
       .write.format("aioproducer")
       .option("kafka.bootstrap.servers", "host:9092")
       .option("topic", "events")
       .option("kafka.linger.ms", "20")
       .mode("append")
       .save())

Streaming queries work the same way with ``df.writeStream.format("aioproducer")``. On Spark
versions without the Python data source API, :func:`write_dataframe` does the same job with
``foreachPartition``. To test what a job writes without a broker,
:func:`write_dataframe_on_driver` sends a DataFrame's rows through an
:class:`~aioproducer.testing.InMemoryProducer`.

Columns, as in Spark's Kafka sink (others are ignored):

- ``value`` (binary or string, required): the value; null makes a tombstone.
- ``key`` (binary or string): the key.
- ``topic`` (string): the topic, unless the ``topic`` option is set.
- ``partition`` (int): a partition; null lets the partitioner choose.
- ``headers`` (``array<struct<key:string,value:binary>>``): the record headers.
- ``timestamp`` (timestamp, or long in epoch milliseconds): the record's create time.

Options: ``kafka.bootstrap.servers`` (or ``bootstrap.servers``), ``topic`` (overrides the
column), and any producer option by its Java name behind ``kafka.`` (``kafka.acks``,
``kafka.compression.type``, ``kafka.enable.idempotence``...). ``kafka.key.serializer`` and
``kafka.value.serializer`` are refused, as Spark refuses them: keys and values are bytes.
``spark.kafka.producer.cache.timeout`` (Spark's name and time format, ``"10m"`` by default)
is how long a Python worker keeps a producer no task uses.

Like Spark's own sink, which keeps one producer per executor and set of producer options,
each Python worker process keeps one :class:`~aioproducer.Producer` per set of options,
running on an event loop (uvloop when installed) in a daemon thread of its own; Spark runs
one task at a time in a worker and reuses workers (``spark.python.worker.reuse``, true by
default), so consecutive tasks and jobs share its connections, metadata and producer id.
Each task reads its input in its own thread, hands every chunk to ``send_many`` on that
loop, and returns only once its own records are acknowledged (it does not wait for records
other tasks sent); the first delivery error of its records fails it. After a task fails,
the producer goes on serving the next tasks, and what the failed task had buffered is still
sent; a producer that failed for good (fenced, refused credentials, closed, its sender
crashed) is closed at once, dropping what it held, and the next task builds a new one. A
producer no task used for the cache timeout is closed, after delivering what it holds, and so
is every cached producer at interpreter exit (a worker Spark stops with ``os._exit`` or a
kill skips that; every task has had its records acknowledged by then anyway).

A ``kafka.transactional.id`` is never shared between tasks (a producer holds one
transaction at a time): each task builds a producer of its own, closed when it ends. The
sink opens no transactions, so such a write fails in its tasks with
:class:`~aioproducer.errors.IllegalStateError`, as Spark's sink fails without
``initTransactions``. Options given as Python objects to :func:`write_dataframe` (a
callable, an ``ssl.SSLContext``), which each task unpickles anew and which cannot be
compared, also give each task a producer of its own.

Kafka cannot take records back, so delivery is at least once: a task that Spark retries
sends its records again.

A row that cannot be a record (a timestamp before 1970, a negative partition or one the topic
does not have, a null topic, a null header) fails its task with an aioproducer
:class:`~aioproducer.errors.KafkaError` whose message names the row's position in the task's
input (0-based), the Spark partition and the column; the producer's own error is its
``__cause__``.
"""

from __future__ import annotations

from aioproducer.integrations.spark.options import SINK_BATCH_SIZE, SOURCE_NAME, SinkOptions
from aioproducer.integrations.spark.sink import (
    KafkaBatchWriter,
    KafkaCommitMessage,
    KafkaStreamWriter,
    write_dataframe,
    write_dataframe_on_driver,
)
from aioproducer.integrations.spark.source import KafkaDataSource, register

__all__ = [
    "SINK_BATCH_SIZE",
    "SOURCE_NAME",
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaDataSource",
    "KafkaStreamWriter",
    "SinkOptions",
    "register",
    "write_dataframe",
    "write_dataframe_on_driver",
]
