"""OpenTelemetry without a broker: how it is turned on and off, what a producer without it
imports, how the trace context joins each form of headers, and metrics that appear late."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from aioproducer import Producer, ProducerState, telemetry
from aioproducer.integrations import otel
from aioproducer.integrations.otel import AioproducerInstrumentor

CARRIER = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
ADDED = ("traceparent", CARRIER["traceparent"].encode())


@pytest.fixture
def instrumentor() -> Iterator[AioproducerInstrumentor]:
    instrumentor = AioproducerInstrumentor()
    yield instrumentor
    instrumentor.uninstrument()


def test_a_producer_without_tracing_imports_no_opentelemetry() -> None:
    code = (
        "import sys, aioproducer\n"
        "producer = aioproducer.Producer(bootstrap_servers='localhost:9092')\n"
        "print(producer._telemetry is None)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == ["True", "[]"], result.stderr


def test_instrument_traces_the_producers_built_afterwards(
    instrumentor: AioproducerInstrumentor,
) -> None:
    before = Producer(bootstrap_servers="localhost:9092")
    instrumentor.instrument(tracer_provider=TracerProvider())
    assert instrumentor.is_instrumented_by_opentelemetry
    assert AioproducerInstrumentor() is instrumentor
    after = Producer(bootstrap_servers="localhost:9092")
    assert telemetry.attached(before) is None
    assert telemetry.attached(after) is not None
    instrumentor.instrument()  # a second time does nothing
    instrumentor.uninstrument()
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert telemetry.attached(after) is None
    assert telemetry.attached(Producer(bootstrap_servers="localhost:9092")) is None


def test_one_producer_is_instrumented_and_uninstrumented() -> None:
    producer = Producer(bootstrap_servers="localhost:9092")
    assert AioproducerInstrumentor.instrument_producer(producer) is producer
    assert telemetry.attached(producer) is not None
    assert AioproducerInstrumentor.uninstrument_producer(producer) is producer
    assert telemetry.attached(producer) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, [ADDED]),
        ([("a", b"1")], [("a", b"1"), ADDED]),
        ((("a", b"1"),), [("a", b"1"), ADDED]),
        ({"a": b"1"}, [("a", b"1"), ADDED]),
        ((pair for pair in [("a", b"1")]), [("a", b"1"), ADDED]),
        ([("a", b"1"), ("traceparent", b"mine")], [("a", b"1"), ("traceparent", b"mine")]),
    ],
    ids=["none", "list", "tuple", "dict", "iterator", "own-traceparent"],
)
def test_the_context_joins_every_form_of_headers(headers: Any, expected: Any) -> None:
    original = json.dumps(headers, default=repr) if isinstance(headers, list | dict) else None
    assert otel._with_context(headers, CARRIER) == expected
    if original is not None:
        assert json.dumps(headers, default=repr) == original  # not changed in place


@pytest.mark.parametrize("headers", ["text", b"bytes", 42])
def test_headers_send_refuses_are_left_for_it_to_refuse(headers: Any) -> None:
    assert otel._with_context(headers, CARRIER) is headers


def test_topic_and_broker_metrics_are_instruments_with_their_attributes() -> None:
    from aioproducer.metric_catalog import NODE_GROUP, PRODUCER_GROUP, TOPIC_GROUP, Metric

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    def entry(group: str, name: str, value: float, **tags: str) -> Metric:
        return Metric(name, group, {"client-id": "seen", **tags}, value, "", "records", "counter")

    entries = [
        entry(PRODUCER_GROUP, "record-send-total", 5.0),
        entry(TOPIC_GROUP, "record-send-total", 3.0, topic="orders"),
        entry(TOPIC_GROUP, "record-send-total", 2.0, topic="clicks"),
        entry(NODE_GROUP, "request-total", 4.0, **{"node-id": "node-1"}),
    ]

    class StandIn:
        # What the bridge reads of a producer (a class: the bridge keeps weak references).
        state = ProducerState.CREATED
        config = SimpleNamespace(client_id="seen")

        def metrics_detailed(self) -> list[Metric]:
            return list(entries)

    stand_in: Any = StandIn()
    bridge = otel._MetricsBridge(otel._meter(provider))
    bridge.add(stand_in)
    data = reader.get_metrics_data()
    assert data is not None
    collected = {
        (metric.name, tuple(sorted((point.attributes or {}).items()))): point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }
    client = ("messaging.client.id", "seen")
    assert collected == {
        ("kafka.producer.record_send_total", (client,)): 5.0,
        (
            "kafka.producer.topic.record_send_total",
            (client, ("messaging.destination.name", "orders")),
        ): 3.0,
        (
            "kafka.producer.topic.record_send_total",
            (client, ("messaging.destination.name", "clicks")),
        ): 2.0,
        ("kafka.producer.node.request_total", (("kafka.node.id", "node-1"), client)): 4.0,
    }
    provider.shutdown()
