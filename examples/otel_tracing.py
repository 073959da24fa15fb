"""OpenTelemetry tracing: a span per record, its context in the record's headers.

    pip install "aioproducer[otel]" opentelemetry-sdk
    python examples/otel_tracing.py [--bootstrap-servers HOST:PORT] [--topic NAME]

The spans go to an in-memory exporter here, so the script can print them; an application
gives the tracer provider its real exporter (OTLP, say) instead.
"""

from __future__ import annotations

import asyncio

from _broker import cluster
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aioproducer import Producer
from aioproducer.integrations.otel import AioproducerInstrumentor

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


async def main(bootstrap_servers: str, topic: str) -> None:
    # Every Producer built from now on is traced, with the global tracer provider.
    AioproducerInstrumentor().instrument()
    tracer = trace.get_tracer("checkout")
    async with Producer(bootstrap_servers=bootstrap_servers, key_serializer=str.encode) as producer:
        # The send spans are children of the span current when send() is called.
        with tracer.start_as_current_span("place-order") as order:
            futures = [
                await producer.send(topic, f"item {n}".encode(), key="order-42")
                for n in range(3)
            ]
            # One span for the whole call; each record carries its context.
            many = await producer.send_many(topic, [b"audit 1", b"audit 2"])
        for future in futures:
            await future  # each record's span ended when the broker acknowledged it
        await many
    AioproducerInstrumentor().uninstrument()

    trace_id = f"{order.get_span_context().trace_id:032x}"
    print(f"trace {trace_id}")
    for span in exporter.get_finished_spans():
        attributes = span.attributes or {}
        where = ""
        if "messaging.kafka.offset" in attributes:
            partition = attributes["messaging.destination.partition.id"]
            where = f": partition {partition} @ offset {attributes['messaging.kafka.offset']}"
        elif "messaging.batch.message_count" in attributes:
            where = f": {attributes['messaging.batch.message_count']} records"
        print(f"  span {span.name!r} ({span.kind.name}){where}")


if __name__ == "__main__":
    with cluster("otel-tracing", "Trace records with OpenTelemetry.") as (servers, topic):
        asyncio.run(main(servers, topic))
