"""The ``"aioproducer"`` data source: what Spark calls to write a DataFrame or a stream.

It validates the options and columns on the driver and hands Spark the writer the delivery
guarantee calls for: :mod:`~aioproducer.integrations.spark.sink`'s at least once, or
:mod:`~aioproducer.integrations.spark.exactly_once`'s transactions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aioproducer.errors import ConfigurationError
from aioproducer.integrations.spark.exactly_once import (
    TransactionalBatchWriter,
    TransactionalStreamWriter,
)
from aioproducer.integrations.spark.options import SOURCE_NAME, SinkOptions, _Layout
from aioproducer.integrations.spark.sink import KafkaBatchWriter, KafkaStreamWriter

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.types import StructType
else:
    try:
        from pyspark.sql.datasource import DataSource
    except ImportError:  # PySpark < 4.0: only write_dataframe can be used.
        DataSource = object

__all__ = ["KafkaDataSource", "register"]


class KafkaDataSource(DataSource):
    """The ``"aioproducer"`` data source: Spark's Kafka sink columns and options, written by
    aioproducer from the Python workers (PySpark 4.0 or later).

    Register it once per session with ``spark.dataSource.register(KafkaDataSource)`` (or
    :func:`register`), then ``df.write.format("aioproducer")...mode("append").save()`` or
    ``df.writeStream.format("aioproducer")...start()``. Only the append mode is supported.
    """

    @classmethod
    def name(cls) -> str:
        """``"aioproducer"``."""
        return SOURCE_NAME

    def _writer_parts(self, schema: StructType, overwrite: bool) -> tuple[SinkOptions, _Layout]:
        if overwrite:
            raise ConfigurationError(
                "Kafka is append-only: use .mode('append'); 'overwrite' cannot remove records"
            )
        return SinkOptions.parse(dict(self.options)).with_columns(schema)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        """The batch writer; validates options and columns on the driver."""
        sink, layout = self._writer_parts(schema, overwrite)
        if sink.delivery_guarantee == "exactly_once":
            writer = TransactionalBatchWriter(sink, layout)
            writer.check_cluster()
            writer.recover()
            return writer
        return KafkaBatchWriter(sink, layout)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        """The streaming writer; validates options and columns on the driver."""
        sink, layout = self._writer_parts(schema, overwrite)
        if sink.delivery_guarantee == "exactly_once":
            # No cluster check here: Spark calls this before every commit too. A cluster
            # before Kafka 3.0 is refused by the first micro-batch's commit, which then
            # commits nothing.
            return TransactionalStreamWriter(sink, layout)
        return KafkaStreamWriter(sink, layout)


def register(spark: Any) -> None:
    """Register :class:`KafkaDataSource` with a SparkSession, as format ``"aioproducer"``."""
    spark.dataSource.register(KafkaDataSource)
