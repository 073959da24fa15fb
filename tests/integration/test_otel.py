"""OpenTelemetry (aioproducer.integrations.otel) against a broker: the spans the SDK
exports, the trace context a third-party consumer reads back from the records' headers, and
the metrics a metric reader collects."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aioproducer import Producer, ProducerRecord, SyncProducer
from aioproducer.errors import InvalidRecordError, UnknownTopicOrPartitionError
from aioproducer.integrations import otel
from aioproducer.integrations.otel import AioproducerInstrumentor
from tests.support.readback import read_back

INVALID_RECORD = 87
PRODUCE = 0


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def traced(producer: Producer, provider: TracerProvider, **options: Any) -> Producer:
    return AioproducerInstrumentor.instrument_producer(
        producer, tracer_provider=provider, **options
    )


def traceparent(headers: list[tuple[str, bytes | None]]) -> tuple[str, str]:
    """The trace id and parent span id of the record's ``traceparent`` header (hex)."""
    values = [value for name, value in headers if name == "traceparent"]
    assert len(values) == 1, headers
    assert values[0] is not None
    version, trace_id, span_id, flags = values[0].decode().split("-")
    assert version == "00"
    assert int(flags, 16) & 1  # sampled
    return trace_id, span_id


def ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


async def test_a_span_per_record_ends_when_the_record_is_acknowledged(
    tansu: Any, new_topic: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    topic = new_topic(tansu, partitions=3)
    servers = tansu.bootstrap_servers
    async with traced(
        Producer(
            bootstrap_servers=servers, client_id="traced", linger_ms=60_000,
            key_serializer=str.encode,
        ),
        provider,
    ) as producer:
        first = await producer.send(topic, b"one", key="order-1")
        second = await producer.send(topic, None, key=None, partition=2)  # a tombstone
        # Buffered (linger_ms is long): no span has ended yet.
        assert exporter.get_finished_spans() == ()
        await producer.flush()
        metadata = [await first, await second]
    spans = exporter.get_finished_spans()
    assert len(spans) == 2
    host, port = servers.split(",")[0].rsplit(":", 1)
    for span, record in zip(spans, metadata, strict=True):
        assert span.name == f"send {topic}"
        assert span.kind is SpanKind.PRODUCER
        assert span.status.status_code is StatusCode.UNSET
        attributes = dict(span.attributes or {})
        assert attributes.pop("messaging.kafka.message.key", None) == (
            "order-1" if record is metadata[0] else None
        )
        assert attributes.pop("messaging.kafka.message.tombstone", None) == (
            None if record is metadata[0] else True
        )
        assert attributes == {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": topic,
            "messaging.client.id": "traced",
            "server.address": host,
            "server.port": int(port),
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
        }
    assert metadata[1].partition == 2


async def test_records_carry_the_span_context_to_consumers(
    tansu: Any, new_topic: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    topic = new_topic(tansu)
    user_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with traced(
        Producer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=5), provider
    ) as producer:
        with provider.get_tracer("app").start_as_current_span("handle-request") as parent:
            pairs = [("source", b"list")]
            mapping = {"source": b"dict"}
            futures = [
                await producer.send(topic, b"no headers"),
                await producer.send(topic, b"list", headers=pairs),
                await producer.send(topic, b"tuple", headers=(("source", b"tuple"),)),
                await producer.send(topic, b"dict", headers=mapping),  # type: ignore[arg-type]
                await producer.send(
                    topic, b"own", headers=[("traceparent", user_parent.encode())]
                ),
            ]
        await asyncio.gather(*futures)
    # The caller's header containers are left as they were.
    assert pairs == [("source", b"list")]
    assert mapping == {"source": b"dict"}
    spans = {span.name: span for span in exporter.get_finished_spans()}
    sends = [s for s in exporter.get_finished_spans() if s.name == f"send {topic}"]
    assert len(sends) == 5
    trace_id = f"{parent.get_span_context().trace_id:032x}"
    assert all(s.parent is not None and s.parent.span_id == spans["handle-request"].context.span_id
               for s in sends)
    records = read_back(tansu.bootstrap_servers, topic, expected=5)
    by_value = {r.value: r for r in records}
    # Spans end in the order the records were acknowledged: the offsets tell which is which.
    span_of = {
        dict(s.attributes or {})["messaging.kafka.offset"]: s for s in sends
    }
    for value in (b"no headers", b"list", b"tuple", b"dict"):
        record = by_value[value]
        assert traceparent(record.headers) == ids(span_of[record.offset])
        assert traceparent(record.headers)[0] == trace_id
        if value != b"no headers":
            assert record.headers[0] == ("source", value)
    # A traceparent the caller set is kept, and no second one added.
    assert by_value[b"own"].headers == [("traceparent", user_parent.encode())]


async def test_send_many_makes_one_span_whose_context_every_record_carries(
    tansu: Any, new_topic: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    topic = new_topic(tansu, partitions=2)
    own = ProducerRecord(topic, value=b"record", headers=[("unit", b"C")])
    items: list[Any] = [b"plain", (b"key", b"pair"), own, *[b"bulk"] * 50]
    async with traced(
        Producer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=60_000), provider
    ) as producer:
        results = await producer.send_many(topic, items)
        assert exporter.get_finished_spans() == ()
        await producer.flush()
        metadata = await results
        await asyncio.gather(*otel._pending)  # the call's span ends in a task
        (span,) = exporter.get_finished_spans()
    assert own.headers == [("unit", b"C")]  # the caller's record is not changed
    assert span.name == f"send {topic}"
    assert span.kind is SpanKind.PRODUCER
    attributes = dict(span.attributes or {})
    assert attributes["messaging.batch.message_count"] == len(items)
    assert attributes["messaging.destination.name"] == topic
    assert "messaging.kafka.offset" not in attributes
    records = read_back(tansu.bootstrap_servers, topic, expected=len(items))
    assert len(records) == len(metadata) == len(items)
    for record in records:
        assert traceparent(record.headers) == ids(span)
    by_value = {r.value: r for r in records}
    assert by_value[b"pair"].key == b"key"
    assert by_value[b"record"].headers[0] == ("unit", b"C")


async def test_a_send_that_raises_ends_its_span_as_failed(
    tansu: Any, new_topic: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    topic = new_topic(tansu, partitions=1)
    async with traced(
        Producer(bootstrap_servers=tansu.bootstrap_servers, max_block_ms=5000), provider
    ) as producer:
        with pytest.raises(UnknownTopicOrPartitionError):
            await producer.send(topic, b"nowhere", partition=7)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "aioproducer.errors.UnknownTopicOrPartitionError"
    assert attributes["messaging.destination.partition.id"] == "7"
    assert [event.name for event in span.events] == ["exception"]


async def test_a_record_the_broker_refuses_ends_its_span_as_failed(
    mock_cluster: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    topic = "otel-refused"
    mock_cluster.create_topic(topic, partitions=1)
    async with traced(
        Producer(bootstrap_servers=mock_cluster.bootstrap_servers, enable_idempotence=False),
        provider,
    ) as producer:
        await producer.partitions_for(topic)
        mock_cluster.push_request_errors(PRODUCE, [INVALID_RECORD])
        future = await producer.send(topic, b"refused")
        with pytest.raises(InvalidRecordError):
            await future
        accepted = await (await producer.send(topic, b"accepted"))
        # One send_many call whose records the broker refuses: its span fails too.
        mock_cluster.push_request_errors(PRODUCE, [INVALID_RECORD])
        results = await producer.send_many(topic, [b"a", b"b"])
        with pytest.raises(InvalidRecordError):
            await results
        # The call's span ends in a task that awaits the records, as the caller did.
        await asyncio.gather(*otel._pending)
    refused, ok, many = exporter.get_finished_spans()
    for span in (refused, many):
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == (
            "aioproducer.errors.InvalidRecordError"
        )
        assert "messaging.kafka.offset" not in dict(span.attributes or {})
    assert ok.status.status_code is StatusCode.UNSET
    assert dict(ok.attributes or {})["messaging.kafka.offset"] == accepted.offset
    assert dict(many.attributes or {})["messaging.batch.message_count"] == 2


async def test_metrics_are_the_producers_metrics(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu)
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    try:
        producer = AioproducerInstrumentor.instrument_producer(
            Producer(bootstrap_servers=tansu.bootstrap_servers, client_id="metered"),
            meter_provider=meter_provider,
        )
        async with producer:
            await asyncio.gather(*[await producer.send(topic, b"x") for _ in range(7)])
            data = reader.get_metrics_data()
            expected = producer.metrics_detailed()
    finally:
        meter_provider.shutdown()
    assert data is not None
    collected: dict[tuple[str, str | None], tuple[float, dict[str, Any], bool]] = {}
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            assert scope_metrics.scope.name == "aioproducer"
            for metric in scope_metrics.metrics:
                monotonic = getattr(metric.data, "is_monotonic", False)
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    where = attributes.get("messaging.destination.name") or attributes.get(
                        "kafka.node.id"
                    )
                    collected[(metric.name, where)] = (point.value, attributes, monotonic)
    prefixes = {
        "producer-metrics": "kafka.producer.",
        "producer-topic-metrics": "kafka.producer.topic.",
        "producer-node-metrics": "kafka.producer.node.",
    }
    names = {
        (
            prefixes[e.group] + e.name.replace("-", "_"),
            e.tags.get("topic") or e.tags.get("node-id"),
        ): e
        for e in expected
    }
    assert set(collected) == set(names)
    for key, entry in names.items():
        value, attributes, monotonic = collected[key]
        assert attributes["messaging.client.id"] == "metered"
        assert monotonic == entry.name.endswith("-total")
        if entry.name.endswith("-total") or entry.name.startswith("buffer-total"):
            assert value == entry.value, key
    assert collected[("kafka.producer.record_send_total", None)][0] == 7
    assert collected[("kafka.producer.topic.record_send_total", topic)][0] == 7


async def test_without_instrumentation_no_header_is_added(
    tansu: Any, new_topic: Any
) -> None:
    topic = new_topic(tansu)
    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        await (await producer.send(topic, b"plain"))
        await (await producer.send_many(topic, [b"bulk"]))
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert [r.headers for r in records] == [[], []]


async def test_tracing_a_running_producer_starts_and_stops_with_its_next_send(
    tansu: Any, new_topic: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    # Instrumented and uninstrumented while it runs: send() and try_send() follow at once.
    topic = new_topic(tansu)
    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        await (await producer.send(topic, b"before"))
        traced(producer, provider)
        await (await producer.send(topic, b"traced"))
        await (await producer.try_send(topic, b"traced too"))
        AioproducerInstrumentor.uninstrument_producer(producer)
        await (await producer.send(topic, b"after"))
    sends = [s for s in exporter.get_finished_spans() if s.name == f"send {topic}"]
    assert len(sends) == 2
    records = read_back(tansu.bootstrap_servers, topic, expected=4)
    assert [r.value for r in records] == [b"before", b"traced", b"traced too", b"after"]
    assert [bool(r.headers) for r in records] == [False, True, True, False]


def test_sync_producer_records_are_children_of_the_calling_threads_span(
    tansu: Any, new_topic: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    topic = new_topic(tansu)
    instrumentor = AioproducerInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with SyncProducer(bootstrap_servers=tansu.bootstrap_servers) as producer:
            with provider.get_tracer("app").start_as_current_span("request") as parent:
                future = producer.send(topic, b"one")
                many = producer.send_many(topic, [b"two", b"three"])  # waits for them
            future.result(timeout=30)
            assert len(many) == 2
    finally:
        instrumentor.uninstrument()
    sends = [s for s in exporter.get_finished_spans() if s.name == f"send {topic}"]
    assert len(sends) == 2
    for span in sends:
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    assert {traceparent(r.headers)[0] for r in records} == {
        f"{parent.get_span_context().trace_id:032x}"
    }


async def test_a_collection_in_another_thread_reads_the_metrics_on_the_loop(
    tansu: Any, new_topic: Any
) -> None:
    # A periodic exporter collects in its own thread; the metrics change on the loop's.
    topic = new_topic(tansu)
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    readers: list[int] = []
    try:
        producer = AioproducerInstrumentor.instrument_producer(
            Producer(bootstrap_servers=tansu.bootstrap_servers), meter_provider=meter_provider
        )
        async with producer:
            await (await producer.send(topic, b"x"))
            metrics = producer.metrics_detailed

            def watched() -> list[Any]:
                readers.append(threading.get_ident())
                return metrics()

            producer.metrics_detailed = watched  # type: ignore[method-assign]
            data = await asyncio.to_thread(reader.get_metrics_data)
    finally:
        meter_provider.shutdown()
    assert data is not None
    names = {
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert "kafka.producer.record_send_total" in names
    assert readers and set(readers) == {threading.get_ident()}
