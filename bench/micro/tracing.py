"""What OpenTelemetry tracing costs per record: ``send`` and ``send_many`` bursts without
telemetry, and traced through the OpenTelemetry SDK into an exporter that drops every span.

As in :mod:`bench.micro.send_path`, a producer is started against librdkafka's mock cluster
and a burst is sent without yielding to the event loop. "send" times the burst alone;
"send + acknowledge" times the burst and the flush that waits for every record, where a
traced record's span ends. Without the SDK (``opentelemetry-sdk``) only the untraced cases
run, which is also how to time a commit from before tracing existed:
``python -m bench.micro.tracing`` from a copy of that commit's tree.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.micro._timer import Measurement, run_main, skipped

BURST = 20_000
REPEAT = 7
TOPIC = "micro-tracing"


async def _best(run: Callable[[], Awaitable[tuple[float, float]]]) -> tuple[float, float]:
    results = [await run() for _ in range(REPEAT)]
    return min(r[0] for r in results), min(r[1] for r in results)


def _tracer_provider() -> Any:
    """An SDK tracer provider whose spans are all sampled, then dropped; None without the
    SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:
        return None

    class DropSpans(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DropSpans()))
    return provider


async def _cases(producer: Any, label: str) -> list[Measurement]:
    results: list[Measurement] = []
    values = [b"x" * 100] * BURST
    send = producer.send

    async def sends() -> tuple[float, float]:
        started = time.perf_counter_ns()
        for value in values:
            await send(TOPIC, value)
        sent = time.perf_counter_ns()
        await producer.flush()
        done = time.perf_counter_ns()
        return (sent - started) / BURST, (done - started) / BURST

    async def many() -> tuple[float, float]:
        started = time.perf_counter_ns()
        results = await producer.send_many(TOPIC, values)
        sent = time.perf_counter_ns()
        await producer.flush()
        await results
        done = time.perf_counter_ns()
        return (sent - started) / BURST, (done - started) / BURST

    for name, run in (("send 100 B", sends), ("send_many 100 B", many)):
        try:
            buffered, acknowledged = await _best(run)
        except Exception as exc:
            results.append(skipped(f"{name}, {label}", exc))
            continue
        results.append(Measurement(f"{name}, {label}", buffered))
        results.append(Measurement(f"{name} + acknowledge, {label}", acknowledged))
    return results


async def _collect(bootstrap_servers: str) -> list[Measurement]:
    from aioproducer import Producer

    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers, "acks": 1, "linger_ms": 5,
        "batch_size": 16_384, "enable_idempotence": False,
    }
    results: list[Measurement] = []
    async with Producer(**options) as producer:
        await (await producer.send(TOPIC, b"warm-up"))
        results += await _cases(producer, "no tracing")
    provider = _tracer_provider()
    if provider is None:
        results.append(skipped("traced", "opentelemetry-sdk is not installed"))
        return results
    try:
        from aioproducer.integrations.otel import AioproducerInstrumentor
    except ImportError as exc:  # a commit from before tracing existed
        results.append(skipped("traced", exc))
        return results
    producer = AioproducerInstrumentor.instrument_producer(
        Producer(**options), tracer_provider=provider
    )
    async with producer:
        await (await producer.send(TOPIC, b"warm-up"))
        results += await _cases(producer, "traced (SDK, spans dropped)")
    provider.shutdown()
    return results


def collect() -> list[Measurement]:
    """Run every case against an in-process mock cluster."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.append(root)
    try:
        from tests.support.mock_cluster import MockCluster
    except Exception as exc:
        return [skipped("tracing (needs tests/support/mock_cluster.py)", exc)]
    try:
        with MockCluster(num_brokers=1) as cluster:
            cluster.create_topic(TOPIC, 3, 1)
            return asyncio.run(_collect(cluster.bootstrap_servers))
    except Exception as exc:
        return [skipped("tracing", exc)]


def main() -> int:
    """Entry point: ``python -m bench.micro.tracing``."""
    return run_main(
        f"OpenTelemetry tracing per record (integrations/otel.py), bursts of {BURST:,}",
        collect,
    )


if __name__ == "__main__":
    sys.exit(main())
