"""A batch write exactly once to Kafka whose driver dies in the middle of its commit, run as
its own process so a test can kill it:
``python -m tests.support.spark_batch_crash <topic> <bootstrap> <prefix> <rows>
<partitions>``, with ``AIOPRODUCER_TEST_CRASH_FLAG`` set to a path ``<flag>``.

It writes the ids ``0`` to ``rows - 1`` (keyed ``id % KEYS``, in ``partitions`` Spark
partitions) with ``delivery.guarantee`` ``exactly_once`` and ``transactional.id.prefix``
``<prefix>``. Its driver's commit does what the real one does up to its first EndTxn (checks
every prepared transaction, puts its decision on record), commits one partition's
transaction only, creates the file ``<flag>`` (holding that partition's id) and waits to be
killed: the write is then committed in part, and its decision is on record as
``committing``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from aioproducer.integrations.spark import KafkaDataSource
from aioproducer.integrations.spark.exactly_once import (
    TransactionalBatchWriter,
    TransactionalCommitMessage,
    _check_prepared,
    _complete_all,
    _put_decision,
)
from aioproducer.integrations.spark.producers import _run
from tests.support.spark_crash import CRASH_FLAG

KEYS = 7


class _CrashingBatchWriter(TransactionalBatchWriter):
    flag = ""

    def commit(self, messages: list[Any]) -> None:
        prepared = [m for m in messages if isinstance(m, TransactionalCommitMessage) and m.prepared]
        assert self.decision_topic is not None
        _run(_check_prepared(self.sink, messages, "the crashing write"))
        _run(_put_decision(self.sink, self.prefix, self.decision(messages)))
        failures = _run(_complete_all(self.sink, prepared[:1], True, "the crashing write"))
        assert not failures, failures
        Path(self.flag).write_text(str(prepared[0].partition_id))
        while True:  # the driver "dies" here: the test kills the process group
            time.sleep(0.2)


class CrashingBatchSource(KafkaDataSource):
    """The aioproducer data source whose batch commit stops after one partition."""

    @classmethod
    def name(cls) -> str:
        """``"aioproducer_batch_crash"``."""
        return "aioproducer_batch_crash"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        """The exactly-once batch writer that stops half way through its commit."""
        sink, layout = self._writer_parts(schema, overwrite)
        writer = _CrashingBatchWriter(sink, layout)
        writer.flag = os.environ[CRASH_FLAG]
        writer.recover()
        return writer


def rows(spark: Any, first: int, count: int, partitions: int) -> Any:
    """The ids ``first`` to ``first + count - 1`` as (key, value) rows in ``partitions``
    Spark partitions."""
    return spark.range(first, first + count, 1, partitions).selectExpr(
        f"CAST(id % {KEYS} AS STRING) AS key", "CAST(id AS STRING) AS value"
    )


def main(topic: str, bootstrap: str, prefix: str, count: str, partitions: str) -> None:
    from tests.support.spark import local_spark

    with local_spark("aioproducer-exactly-once-batch-crash") as spark:
        spark.dataSource.register(CrashingBatchSource)
        (
            rows(spark, 0, int(count), int(partitions))
            .write.format("aioproducer_batch_crash")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("delivery.guarantee", "exactly_once")
            .option("transactional.id.prefix", prefix)
            .mode("append")
            .save()
        )


if __name__ == "__main__":
    main(*sys.argv[1:6])
