"""Run every micro-benchmark: ``python -m bench.micro [--json] [--smoke]``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from bench.micro import (
    _timer,
    buffer_pool,
    crc,
    future_idioms,
    metrics,
    partitioner,
    produce_request,
    record_batch,
    send_path,
)
from bench.micro._timer import report

SUITES = (
    ("RecordBatchBuilder (protocol/record_batch.py)", record_batch.collect),
    ("CRC-32C over 16 KiB", crc.collect),
    ("Partitioners (partitioner.py)", partitioner.collect),
    ("Buffer pool (buffer_pool.py)", buffer_pool.collect),
    ("Produce request encoding / response decoding (protocol/)", produce_request.collect),
    ("Producer.send fast path (producer.py)", send_path.collect),
    ("Waiting for many record futures (futures.py)", future_idioms.collect),
    ("Metrics (metrics.py)", metrics.collect),
)


def main() -> int:
    """Run the suites in turn and print their tables (or one JSON document)."""
    parser = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--smoke", action="store_true",
                        help="run each benchmark once, briefly: that it runs, not what it costs")
    options = parser.parse_args()
    _timer.SMOKE = options.smoke
    collected = {title: collect() for title, collect in SUITES}
    if options.json:
        print(json.dumps({t: [asdict(r) for r in rs] for t, rs in collected.items()}, indent=1))
    else:
        print("\n\n".join(report(results, title) for title, results in collected.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
