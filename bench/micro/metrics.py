"""What the metrics cost the send path (``metrics.py``): counted per batch and per request,
never per record.

- per batch, as the sender counts one: its acknowledgement (``records_sent``: the
  producer-wide and the topic's record counts), for a topic already seen;
- per request, as the sender counts one: the Produce request with its batch
  (``produce_sent``: sizes, compression, queue time, the topic's bytes) and its answer
  (``produce_answered``: latency, throttle);
- per request, as a broker connection counts one: the frame written (``request_sent``) and
  the read that brings its response (``data_received``).
"""

from __future__ import annotations

import asyncio
import sys

from bench.micro._timer import Measurement, measure, run_main, skipped

TOPIC = "events"
RECORDS_PER_BATCH = 100


def collect() -> list[Measurement]:
    """Run every case."""
    try:
        from aioproducer._core.accumulator import ProducerBatch
        from aioproducer._core.metrics import ProducerMetrics
        from aioproducer.protocol.compression import CompressionType
        from aioproducer.protocol.record_batch import RecordBatchBuilder
    except Exception as exc:
        return [skipped("metrics", exc)]
    metrics = ProducerMetrics()
    node = metrics.node(1)
    metrics.records_sent(TOPIC, 1, 1000.0)  # the topic's counters exist, as in steady state
    builder = RecordBatchBuilder(bytearray(16_384), CompressionType.NONE)
    for _ in range(RECORDS_PER_BATCH):
        builder.try_append(0, None, b"x" * 100, None)
    builder.seal()
    loop = asyncio.new_event_loop()
    batches = [ProducerBatch(TOPIC, 0, builder, 16_384, 999.0, 120.0, loop)]

    def per_batch() -> None:
        metrics.records_sent(TOPIC, RECORDS_PER_BATCH, 1000.0)

    def per_produce_request() -> None:
        metrics.produce_sent(batches, 1000.0)
        metrics.produce_answered(1, 0.002, 0, 1000.0)

    def per_request() -> None:
        node.request_sent(16_100, 1000.0)
        node.data_received(90, 1)

    loop.close()
    return [
        measure("per batch: records_sent", per_batch),
        measure(
            "per Produce request of one batch: produce_sent + produce_answered",
            per_produce_request,
        ),
        measure("per request: request_sent + data_received", per_request),
    ]


def main() -> int:
    """Entry point: ``python -m bench.micro.metrics``."""
    return run_main("Metrics (metrics.py)", collect)


if __name__ == "__main__":
    sys.exit(main())
