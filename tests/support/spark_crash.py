"""A streaming query writing exactly once to Kafka, run as its own process so a test can
kill it: ``python -m tests.support.spark_crash <input dir> <checkpoint> <topic> <bootstrap>``.

It reads the JSON files of ``<input dir>`` one per micro-batch (``maxFilesPerTrigger`` 1,
``availableNow``), keys each row by ``id % KEYS``, hash-partitions the rows by key into 3
Spark partitions (each key's rows of a micro-batch in one task, in file order) and writes
them with ``delivery.guarantee`` ``exactly_once``, then exits.

With ``AIOPRODUCER_TEST_CRASH_FLAG`` set to a path, the driver's commit of micro-batch 1
commits the transaction of one partition only, creates that file and stops there (until
its parent process dies): the test then kills the query, which leaves micro-batch 1 partly
committed in Kafka and not recorded as done in the checkpoint. Run again without it, the
query replays micro-batch 1.

Two more arguments may follow: how many Spark partitions the rows are split into (3 by
default; a restart with another number replays a micro-batch split otherwise, as a file
source does after a change of parallelism), and a ``transactional.id.prefix`` (``-``, the
default, for the one derived from the query's id).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from aioproducer.integrations.spark import KafkaDataSource
from aioproducer.integrations.spark.exactly_once import (
    TransactionalCommitMessage,
    TransactionalStreamWriter,
    _complete_all,
    _query_of,
    _record_batch,
)
from aioproducer.integrations.spark.producers import _run

CRASH_FLAG = "AIOPRODUCER_TEST_CRASH_FLAG"
CRASH_BATCH = 1
KEYS = 7
"""Rows are keyed ``id % KEYS``: every key has rows in every micro-batch."""


class _CrashingStreamWriter(TransactionalStreamWriter):
    def commit(self, messages: list[Any], batchId: int) -> None:
        flag = os.environ.get(CRASH_FLAG)
        if flag is None or batchId != CRASH_BATCH:
            super().commit(messages, batchId)
            return
        prepared = [
            m for m in messages if isinstance(m, TransactionalCommitMessage) and m.prepared
        ]
        # As the real commit: the micro-batch's layout goes on record first. Then one
        # partition's transaction is committed, and the driver "dies": before the sweep of
        # a full commit, so the others stay open for the restarted query.
        prefix, query_id = _query_of(messages, self.prefix)
        assert prefix is not None and query_id is not None
        _run(_record_batch(self.sink, prefix, self.marker_topic, query_id, batchId, messages))
        failures = _run(_complete_all(self.sink, prepared[:1], True, f"micro-batch {batchId}"))
        assert not failures, failures
        Path(flag).write_text(str(prepared[0].partition_id))
        parent = os.getppid()
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)


class CrashingDataSource(KafkaDataSource):
    """The aioproducer data source whose streaming commit can stop half done."""

    @classmethod
    def name(cls) -> str:
        """``"aioproducer_crash"``."""
        return "aioproducer_crash"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """The exactly-once streaming writer, with the crash of :data:`CRASH_FLAG`."""
        sink, layout = self._writer_parts(schema, overwrite)
        return _CrashingStreamWriter(sink, layout)


def main(
    input_dir: str,
    checkpoint: str,
    topic: str,
    bootstrap: str,
    partitions: str = "3",
    prefix: str = "-",
) -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    from tests.support.spark import local_spark

    with local_spark("aioproducer-exactly-once-stream") as spark:
        spark.dataSource.register(CrashingDataSource)
        schema = StructType([StructField("id", LongType())])
        rows = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .json(input_dir)
            .selectExpr(f"CAST(id % {KEYS} AS STRING) AS key", "CAST(id AS STRING) AS value")
            .repartition(int(partitions), "key")
        )
        writer = rows.writeStream.format("aioproducer_crash")
        if prefix != "-":
            writer = writer.option("transactional.id.prefix", prefix)
        query = (
            writer
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("delivery.guarantee", "exactly_once")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:7])
