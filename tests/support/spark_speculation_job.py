"""A batch write exactly once to Kafka with ``spark.speculation`` on and one slow task, on
a Spark standalone cluster (tests.support.spark_standalone), as its own process:
``python -m tests.support.spark_speculation_job <master> <bootstrap> <topic> <prefix>
<attempts dir> <winner>``.

It writes the ids 0 to 3999 in 4 Spark partitions, and partition 1 is slow. With winner
``copy``, the writer of its first attempt sends its rows in its transaction and then
stalls for ``STALL_S`` seconds before preparing it; speculation starts a copy on the other
worker, which finishes first, and Spark keeps the copy. With winner ``original``, its first
attempt prepares its transaction and then takes ``ORIGINAL_DELAY_S`` seconds more to
finish: speculation starts a copy meanwhile, which sends its rows and stalls before
preparing; Spark keeps the original. Each task attempt leaves an empty file
``<partition>-<attempt>`` in ``<attempts dir>``, so the test can tell that the copy ran.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aioproducer import Producer
from aioproducer.integrations.spark import KafkaDataSource
from aioproducer.integrations.spark.exactly_once import (
    TransactionalBatchWriter,
    TransactionalCommitMessage,
)

ROWS = 4000
PARTITIONS = 4
SLOW_PARTITION = 1
# Far longer than the job takes (under a minute), so that a job that waited for the
# stalled attempt cannot be mistaken for a slow one.
STALL_S = 300.0
ORIGINAL_DELAY_S = 12.0


class _StallingBatchWriter(TransactionalBatchWriter):
    attempts_dir = ""
    winner = "copy"

    def write(self, iterator: Iterator[Any]) -> TransactionalCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        partition, attempt = context.partitionId(), context.attemptNumber()
        Path(self.attempts_dir, f"{partition}-{attempt}").touch()
        if partition != SLOW_PARTITION or attempt > 1:
            return super().write(iterator)
        # The Python worker runs one task at a time: the patch is this task's.
        prepare = Producer.prepare_transaction
        stall_before = (attempt == 0) == (self.winner == "copy")

        async def slow(producer: Producer) -> Any:
            if stall_before:
                # Every row sent and acknowledged in the transaction; the stall comes
                # before it is prepared.
                await asyncio.sleep(STALL_S)
                return await prepare(producer)
            prepared = await prepare(producer)
            await asyncio.sleep(ORIGINAL_DELAY_S)
            return prepared

        if attempt == 1 and self.winner == "copy":
            return super().write(iterator)
        Producer.prepare_transaction = slow  # type: ignore[method-assign]
        try:
            return super().write(iterator)
        finally:
            Producer.prepare_transaction = prepare  # type: ignore[method-assign]


class StallingBatchSource(KafkaDataSource):
    """The aioproducer data source whose writer stalls in one task's first attempt."""

    @classmethod
    def name(cls) -> str:
        """``"aioproducer_stalling"``."""
        return "aioproducer_stalling"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        """The exactly-once batch writer, stalling as the module says."""
        sink, layout = self._writer_parts(schema, overwrite)
        writer = _StallingBatchWriter(sink, layout)
        writer.attempts_dir = os.environ["AIOPRODUCER_TEST_ATTEMPTS_DIR"]
        writer.winner = os.environ["AIOPRODUCER_TEST_WINNER"]
        writer.recover()
        return writer


def main(
    master: str, bootstrap: str, topic: str, prefix: str, attempts_dir: str, winner: str
) -> None:
    from pyspark.sql import SparkSession

    os.environ["AIOPRODUCER_TEST_ATTEMPTS_DIR"] = attempts_dir
    os.environ["AIOPRODUCER_TEST_WINNER"] = winner
    root = str(Path(__file__).resolve().parents[2])
    spark = (
        SparkSession.builder.master(master)
        .appName("aioproducer-speculation")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "768m")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", root)
        .config("spark.speculation", "true")
        .config("spark.speculation.interval", "200ms")
        .config("spark.speculation.multiplier", "1.5")
        .config("spark.speculation.quantile", "0.5")
        .config("spark.speculation.minTaskRuntime", "1s")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .getOrCreate()
    )
    try:
        spark.dataSource.register(StallingBatchSource)
        (
            spark.range(0, ROWS, 1, PARTITIONS)
            .selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
            .write.format("aioproducer_stalling")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("delivery.guarantee", "exactly_once")
            .option("transactional.id.prefix", prefix)
            .option("kafka.linger.ms", "5")
            .mode("append")
            .save()
        )
    finally:
        spark.stop()
    os._exit(0)  # a stalled Python worker must not keep the driver's process alive


if __name__ == "__main__":
    main(*sys.argv[1:7])
