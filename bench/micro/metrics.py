"""What the metrics cost the send path (``metrics.py``): counted per batch and per request,
never per record.

- per batch, as the sender counts one: its bytes into a request (``batch_sent``: the
  topic's bytes and compression ratio) and its acknowledgement (``records_sent``: the
  producer-wide and the topic's record counts), for a topic already seen;
- per request, as a broker connection counts one: the frame written (``request_sent``) and
  the read that brings its response (``data_received``).
"""

from __future__ import annotations

import sys

from bench.micro._timer import Measurement, measure, run_main, skipped

TOPIC = "events"
RECORDS_PER_BATCH = 100


def collect() -> list[Measurement]:
    """Run every case."""
    try:
        from aioproducer._core.metrics import ProducerMetrics
    except Exception as exc:
        return [skipped("metrics", exc)]
    metrics = ProducerMetrics()
    node = metrics.node(1)
    metrics.records_sent(TOPIC, 1)  # the topic's counters exist, as in steady state

    def per_batch() -> None:
        metrics.batch_sent(TOPIC, 16_000, 16_384, 1000.0)
        metrics.records_sent(TOPIC, RECORDS_PER_BATCH)

    def per_request() -> None:
        node.request_sent(16_100)
        node.data_received(90, 1)

    return [
        measure("per batch: batch_sent + records_sent", per_batch),
        measure("per request: request_sent + data_received", per_request),
    ]


def main() -> int:
    """Entry point: ``python -m bench.micro.metrics``."""
    return run_main("Metrics (metrics.py)", collect)


if __name__ == "__main__":
    sys.exit(main())
