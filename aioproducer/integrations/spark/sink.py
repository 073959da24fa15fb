"""The sink's at-least-once path: one partition's rows on a cached producer, the batch and
stream writers of the PySpark data source, and the ``foreachPartition`` fallback.

The package docstring (:mod:`aioproducer.integrations.spark`) says what users get from it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aioproducer import Producer
from aioproducer.compiled import warn_if_interpreted
from aioproducer.errors import ConfigurationError
from aioproducer.integrations.spark.options import (
    _CACHE_TIMEOUT_OPTION,
    _DEFAULT_CACHE_TIMEOUT_S,
    SinkOptions,
    _cache_timeout,
    _Layout,
    _layout,
    _with_sink_defaults,
)
from aioproducer.integrations.spark.producers import (
    _cache_key,
    _producers,
    _run,
    _TaskRecords,
)
from aioproducer.integrations.spark.registry import is_registry_option
from aioproducer.integrations.spark.rows import (
    _chunks,
    _items,
    _partition_id,
    _prepend,
    _row_chunks,
    _row_error,
    _RowRefused,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.datasource import (
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
else:
    try:
        from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
    except ImportError:  # PySpark < 4.0: only write_dataframe can be used.
        DataSourceArrowWriter = WriterCommitMessage = object
    try:
        from pyspark.sql.datasource import DataSourceStreamArrowWriter
    except ImportError:  # PySpark 4.0: streaming writers get Rows; write() takes either.
        try:
            from pyspark.sql.datasource import (
                DataSourceStreamWriter as DataSourceStreamArrowWriter,
            )
        except ImportError:
            DataSourceStreamArrowWriter = object

__all__ = [
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaStreamWriter",
    "write_dataframe",
    "write_dataframe_on_driver",
]

log = logging.getLogger("aioproducer.integrations.spark")


# ---- one partition, with a producer of its own ----------------------------------------------


async def _produce(
    sink: SinkOptions,
    layout: _Layout,
    chunks: Iterator[Mapping[str, list[Any]]],
    producer: Producer | None = None,
) -> int:
    """Send every chunk through a producer of the task's own; return the count once all are
    acknowledged, or raise the first delivery error, or the error of the first row that
    cannot be a record. The records go through ``producer`` (not started yet) or, when
    None, a new one with ``sink``'s options; it is closed at the end."""
    position = 0  # rows of the task's input before the chunk at hand
    try:
        first = next(chunks, None)
        if first is None:
            return 0  # an empty partition needs no connection
        if producer is None:
            producer = sink.producer()
        await producer.start()
        task = _TaskRecords(producer, layout)
        try:
            for columns in _prepend(first, chunks):
                topic, items = _items(layout, sink.topic, columns)
                if not items:
                    continue
                await task.send(topic, items)
                position += len(items)
            sent = await task.wait()
        except BaseException:
            # The task fails and Spark may retry it; what is still buffered need not be
            # sent (the retry sends every row again).
            await producer.close(timeout=0)
            raise
        await producer.close()
        return sent
    except _RowRefused as refused:
        raise _row_error(position + refused.index, refused.column, refused.error) from (
            refused.error
        )


def _write_partition(sink: SinkOptions, layout: _Layout, iterator: Iterator[Any]) -> int:
    """One task's write: through this process's cached producer for ``sink``'s options, or
    a producer of the task's own when they must not share one (see :func:`_cache_key`)."""
    warn_if_interpreted(log)  # once per Python worker, in the executor's log
    chunks = _chunks(layout, iterator)
    key = _cache_key(sink)
    if key is None:
        return _run(_produce(sink, layout, chunks))
    return _producers().write(key, sink, layout, chunks)


# ---- the PySpark 4 data source --------------------------------------------------------------


@dataclass(frozen=True)
class KafkaCommitMessage(WriterCommitMessage):
    """What one partition task reports to the driver once its records are acknowledged.

    Attributes:
        partition_id: the Spark partition.
        records: how many records it wrote.
    """

    partition_id: int
    records: int


class KafkaBatchWriter(DataSourceArrowWriter):
    """Writes a DataFrame's partitions to Kafka (made by :class:`KafkaDataSource`).

    ``write`` runs in each partition task on an executor; ``commit`` and ``abort`` run on the
    driver. Kafka cannot roll records back, so ``abort`` only reports what was written.
    """

    def __init__(self, sink: SinkOptions, layout: _Layout) -> None:
        self.sink = sink
        self.layout = layout

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        """Send the partition's rows; return once all are acknowledged.

        Raises:
            KafkaError: a record was not delivered (the task fails).
        """
        records = _write_partition(self.sink, self.layout, iterator)
        return KafkaCommitMessage(partition_id=_partition_id(), records=records)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log how many records the job wrote."""
        total = sum(m.records for m in messages if isinstance(m, KafkaCommitMessage))
        log.info("aioproducer wrote %d records from %d partitions", total, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the tasks that succeeded wrote: those records stay in Kafka."""
        done = [m for m in messages if isinstance(m, KafkaCommitMessage)]
        log.warning(
            "the write failed; %d records from %d successful partition tasks are in Kafka "
            "already (Kafka writes cannot be rolled back)",
            sum(m.records for m in done),
            len(done),
        )


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch of a streaming query to Kafka (made by
    :class:`KafkaDataSource`); at least once, like Spark's own Kafka sink."""

    def __init__(self, sink: SinkOptions, layout: _Layout) -> None:
        self.sink = sink
        self.layout = layout

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        """Send the partition's rows of the micro-batch; return once all are acknowledged."""
        records = _write_partition(self.sink, self.layout, iterator)
        return KafkaCommitMessage(partition_id=_partition_id(), records=records)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log how many records the micro-batch wrote."""
        total = sum(m.records for m in messages if isinstance(m, KafkaCommitMessage))
        log.info("aioproducer wrote %d records in micro-batch %d", total, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the failed micro-batch; records already written stay in Kafka."""
        log.warning("micro-batch %d failed; it will be written again when retried", batchId)


# ---- the foreachPartition fallback -------------------------------------------------------------


def _write_rows(sink: SinkOptions, layout: _Layout, counter: Any, rows: Iterator[Any]) -> None:
    counter.add(_write_partition(sink, layout, rows))


def write_dataframe(
    df: DataFrame,
    topic: str | None = None,
    config: Mapping[str, Any] | None = None,
    *,
    schema_registry: Mapping[str, str] | None = None,
    **options: Any,
) -> int:
    """Write a DataFrame to Kafka with ``foreachPartition``: for Spark without the Python
    data source API (or when you prefer producer options as Python values).

    The DataFrame has the Kafka sink columns (``value``, and optionally ``key``, ``topic``,
    ``partition``, ``headers``, ``timestamp``). Each partition task runs one producer and
    returns once its records are acknowledged; a delivery error fails the job. Needs a
    classic SparkSession (an accumulator counts the records).

    Args:
        df: the DataFrame.
        topic: the topic for every row; None reads each row's ``topic`` column.
        config: producer options by Java or snake_case name.
        schema_registry: the data source's Schema Registry options (``value.format``,
            ``schema.registry.url``, ...): the key or value column written as Avro or JSON
            Schema records in the registry's wire format.
        **options: producer options by snake_case name (``bootstrap_servers=...``).

    Returns:
        How many records were written.

    Raises:
        ConfigurationError: invalid producer options or columns (checked before any task).
    """
    import functools

    timeout = df.sparkSession.conf.get(_CACHE_TIMEOUT_OPTION, None)
    registry = {name.lower(): str(value) for name, value in (schema_registry or {}).items()}
    unknown = sorted(name for name in registry if not is_registry_option(name))
    if unknown:
        raise ConfigurationError(f"unknown schema_registry option(s): {', '.join(unknown)}")
    sink = SinkOptions(
        topic,
        _with_sink_defaults(dict(config or {}), options),
        dict(options),
        _DEFAULT_CACHE_TIMEOUT_S if timeout is None else _cache_timeout(timeout, "Spark conf"),
        registry_options=registry,
    )
    sink.check()
    sink, layout = sink.with_columns(df.schema)
    counter = df.sparkSession.sparkContext.accumulator(0)
    df.foreachPartition(functools.partial(_write_rows, sink, layout, counter))
    written: int = counter.value
    return written


def write_dataframe_on_driver(df: DataFrame, producer: Producer, topic: str | None = None) -> int:
    """Write a DataFrame's rows through ``producer``, from the driver: for tests.

    The rows are brought to the driver (``toLocalIterator``) and become records by the
    sink's own rules: the same columns, the same checks, the same error for a row that
    cannot be a record (naming the row, 0-based, and the column). With an
    :class:`~aioproducer.testing.InMemoryProducer` this tests what a job would write to
    Kafka, without a broker: the data source and :func:`write_dataframe` send from the
    Python workers, other processes (even in local mode), where an in-memory producer's
    records would be out of the test's reach.

    Args:
        df: the DataFrame, with the Kafka sink columns (see the module).
        producer: a producer not started yet; it is started, and closed once every record
            is acknowledged. With no rows it is left as it is.
        topic: the topic for every row; None reads each row's ``topic`` column.

    Returns:
        How many records were written.

    Raises:
        ConfigurationError: the columns do not fit the sink.
        KafkaError: a row that cannot be a record, or a delivery error.
    """
    layout = _layout(df.schema, topic)
    sink = SinkOptions(topic, {})
    return _run(_produce(sink, layout, _row_chunks(layout, df.toLocalIterator()), producer))
