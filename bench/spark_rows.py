"""The Spark data source's work per row in a Python worker, without Spark: Arrow record
batches of a key and a value (or a value only) through the sink's own functions (the
chunking of ``aioproducer.integrations.spark.rows`` and ``send_many``) to the instant broker,
in one process, as a task's Python worker runs them. Reports the process's CPU per row;
every row is counted among the broker's acknowledged records.

``--lists`` turns off the path that hands ``send_many`` a keyed batch's buffers
(``aioproducer._native.arrowcols``), so each batch goes as lists of ``bytes`` (and
``(key, value)`` tuples), as in the pure-Python install::

    python -m bench.spark_rows [--rows 2000000] [--size 100] [--keyed] [--lists] [--rounds 3]

The whole local Spark (its JVM's hand-over of the rows, the broker) is what
``bench.spark_sink`` measures; this is the Python worker's share of it that the producer
decides.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "spark-rows"
PARTITIONS = 6
#: Rows per Arrow batch: Spark's spark.sql.execution.arrow.maxRecordsPerBatch default.
BATCH_ROWS = 10_000


def _batches(rows: int, size: int, keyed: bool) -> list[Any]:
    """``rows`` rows as Arrow batches of ``BATCH_ROWS``: distinct values (one batch's worth,
    reused), a distinct key per row when ``keyed``."""
    import pyarrow as pa

    values = pa.array([os.urandom(size) for _ in range(BATCH_ROWS)], pa.binary())
    batches = []
    for first in range(0, rows, BATCH_ROWS):
        count = min(BATCH_ROWS, rows - first)
        columns = [values.slice(0, count)]
        names = ["value"]
        if keyed:
            columns.insert(0, pa.array([b"key-%d" % (first + i) for i in range(count)]))
            names.insert(0, "key")
        batches.append(pa.record_batch(columns, names=names))
    return batches


async def _one_round(bootstrap: str, batches: list[Any], keyed: bool) -> float:
    """Send every batch as a task does; return the process's CPU seconds."""
    from aioproducer import Producer
    from aioproducer.integrations.spark import rows
    from aioproducer.integrations.spark.options import SINK_BATCH_SIZE, _Layout

    layout = _Layout(
        key="binary" if keyed else None, value="binary", topic=False, partition=False,
        headers=None, timestamp=None,
    )  # fmt: skip
    async with Producer(
        bootstrap_servers=bootstrap, linger_ms=5, batch_size=SINK_BATCH_SIZE, acks=1
    ) as producer:
        await producer.send_and_wait(TOPIC, b"warm-up")
        started = time.process_time()
        pending = []
        for columns in rows._chunks(layout, iter(batches)):
            topic, items = rows._items(layout, TOPIC, columns)
            pending.append(await producer.send_many(topic, items))
        await producer.flush()
        for results in pending:
            await results
        return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    """Measure and print; write ``bench/results/<time>-spark-rows.json``."""
    parser = argparse.ArgumentParser(prog="python -m bench.spark_rows", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per round (2000000)")
    parser.add_argument("--size", type=int, default=100, help="value bytes per row (100)")
    parser.add_argument("--keyed", action="store_true", help="a distinct key per row")
    parser.add_argument("--lists", action="store_true", help="send lists, not the buffers")
    parser.add_argument("--rounds", type=int, default=3, help="default: 3")
    parser.add_argument("--no-save", action="store_true", help="write no results file")
    options = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import uvloop

    from aioproducer.integrations.spark import rows
    from bench._results import save
    from bench.harness import InstantBroker

    if options.lists:
        rows._BINARY_PAIRS = None  # type: ignore[misc]
    path = "lists" if rows._BINARY_PAIRS is None else "buffers"
    batches = _batches(options.rows, options.size, options.keyed)
    broker = InstantBroker(PARTITIONS)
    try:
        seconds = []
        for round_index in range(options.rounds):
            seconds.append(uvloop.run(_one_round(broker.bootstrap_servers, batches, options.keyed)))
            acknowledged = broker.acknowledged_records(TOPIC)
            expected = (round_index + 1) * (options.rows + 1)  # each round's warm-up record too
            if acknowledged != expected:
                print(f"the broker acknowledged {acknowledged} records, not {expected}")
                return 1
    finally:
        broker.close()
    per_row = [s / options.rows * 1e6 for s in seconds]
    key = "keyed" if options.keyed else "no key"
    print(f"{options.rows:,} rows of {options.size} B, {key}, {path}: "
          f"{statistics.median(per_row):.3f} us CPU per row (rounds: "
          + ", ".join(f"{p:.3f}" for p in per_row) + ")")  # fmt: skip
    if not options.no_save:
        save("spark-rows", [{
            "rows": options.rows, "size": options.size, "keyed": options.keyed, "path": path,
            "cpu_us_per_row": per_row, "median": statistics.median(per_row),
        }])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
