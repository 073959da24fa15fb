"""The producer's metrics against real brokers, checked against what a consumer reads back:
per topic and per broker (Tansu, librdkafka's mock cluster), and scraped over HTTP by
Prometheus's own parser."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import confluent_kafka.admin
import pytest

from aioproducer import Metric, Producer
from aioproducer.errors import ConfigurationError
from tests.support.readback import read_back

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, start_http_server  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from aioproducer.integrations import prometheus  # noqa: E402

PRODUCE = 0
MESSAGE_TOO_LARGE = 10
NOT_LEADER_OR_FOLLOWER = 6

_counter = iter(range(1_000_000))


def by_key(entries: list[Metric]) -> dict[tuple[str, str, str | None], float]:
    """``(group, name, topic or node-id) -> value``."""
    found: dict[tuple[str, str, str | None], float] = {}
    for entry in entries:
        tag = entry.tags.get("topic") or entry.tags.get("node-id")
        found[(entry.group, entry.name, tag)] = entry.value
    return found


def leaders(bootstrap: str, topic: str) -> set[int]:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return {p.leader for p in partitions.values()}


async def produce_to_two_topics(producer: Producer, orders: str, clicks: str) -> None:
    futures = [await producer.send(orders, f"order {n}".encode()) for n in range(30)]
    futures += [await producer.send(clicks, f"/page/{n}".encode()) for n in range(12)]
    await asyncio.gather(*futures)


async def test_per_topic_and_per_broker_counts_match_what_the_broker_stored(
    tansu: Any, new_topic: Any
) -> None:
    orders, clicks = new_topic(tansu, partitions=3), new_topic(tansu, partitions=1)
    async with Producer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=5) as producer:
        await produce_to_two_topics(producer, orders, clicks)
        metrics = by_key(producer.metrics_detailed())
        client_id = producer.config.client_id
        tags = {m.tags["client-id"] for m in producer.metrics_detailed()}
    stored_orders = read_back(tansu.bootstrap_servers, orders, expected=30)
    stored_clicks = read_back(tansu.bootstrap_servers, clicks, expected=12)
    assert tags == {client_id}
    topic_group = "producer-topic-metrics"
    assert metrics[(topic_group, "record-send-total", orders)] == len(stored_orders) == 30
    assert metrics[(topic_group, "record-send-total", clicks)] == len(stored_clicks) == 12
    assert metrics[(topic_group, "record-error-total", orders)] == 0
    assert metrics[(topic_group, "byte-total", orders)] > 0
    assert metrics[("producer-metrics", "record-send-total", None)] == 42
    led_by = leaders(tansu.bootstrap_servers, orders) | leaders(tansu.bootstrap_servers, clicks)
    for leader in led_by:
        node = f"node-{leader}"
        assert metrics[("producer-node-metrics", "request-total", node)] > 0
        assert metrics[("producer-node-metrics", "response-total", node)] > 0
        assert metrics[("producer-node-metrics", "outgoing-byte-total", node)] > 0
        assert metrics[("producer-node-metrics", "incoming-byte-total", node)] > 0
        assert ("producer-node-metrics", "requests-in-flight", node) in metrics


async def test_splits_and_retries_are_counted_against_their_topic(mock_cluster: Any) -> None:
    topic = f"metrics-{time.time_ns() % 10**9}-{next(_counter)}"
    mock_cluster.create_topic(topic, partitions=1, replication_factor=3)
    values = [f"{i:05d}".encode() * 20 for i in range(400)]
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        linger_ms=50,
        enable_idempotence=False,
        max_in_flight_requests_per_connection=1,
        retry_backoff_ms=10,
    ) as producer:
        mock_cluster.push_request_errors(PRODUCE, [MESSAGE_TOO_LARGE])
        await (await producer.send_many(topic, values))
        mock_cluster.push_request_errors(PRODUCE, [NOT_LEADER_OR_FOLLOWER])
        await producer.send_and_wait(topic, b"after a retry")
        metrics = by_key(producer.metrics_detailed())
    consumed = read_back(mock_cluster.bootstrap_servers, topic, expected=len(values) + 1)
    assert metrics[("producer-metrics", "batch-split-total", None)] >= 1
    assert metrics[("producer-topic-metrics", "record-send-total", topic)] == len(consumed)
    assert metrics[("producer-topic-metrics", "record-retry-total", topic)] >= 1
    assert metrics[("producer-topic-metrics", "record-retry-total", topic)] == (
        metrics[("producer-metrics", "record-retry-total", None)]
    )
    assert metrics[("producer-topic-metrics", "record-error-total", topic)] == 0


# ---- Prometheus ---------------------------------------------------------------------------------


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics as Prometheus does; ``(sample name, sorted labels) -> value``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.fixture
def registry() -> Iterator[tuple[CollectorRegistry, int]]:
    """A registry served over HTTP on a free loopback port."""
    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield registry, server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


async def test_a_prometheus_scrape_reports_what_was_sent(
    tansu: Any, new_topic: Any, registry: tuple[CollectorRegistry, int]
) -> None:
    target, port = registry
    orders, clicks = new_topic(tansu, partitions=3), new_topic(tansu, partitions=1)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, client_id="scraped", linger_ms=5
    ) as producer:
        with prometheus.registered(producer, target):
            await produce_to_two_topics(producer, orders, clicks)
            samples = await asyncio.to_thread(scrape, port)
        after = await asyncio.to_thread(scrape, port)
    stored = len(read_back(tansu.bootstrap_servers, orders, expected=30))
    client = ("client_id", "scraped")
    topic_send = "kafka_producer_topic_record_send_total"
    assert samples[(topic_send, (client, ("topic", orders)))] == stored == 30
    assert samples[(topic_send, (client, ("topic", clicks)))] == 12
    assert samples[("kafka_producer_record_send_total", (client,))] == 42
    assert samples[("kafka_producer_record_error_total", (client,))] == 0
    memory = producer.config.buffer_memory
    assert samples[("kafka_producer_buffer_total_bytes", (client,))] == memory
    for leader in leaders(tansu.bootstrap_servers, orders):
        node = ("node_id", f"node-{leader}")
        assert samples[("kafka_producer_node_request_total", (client, node))] > 0
        assert ("kafka_producer_node_request_latency_max", (client, node)) in samples
    # Unregistered: the producer is gone from the next scrape.
    assert not [key for key in after if key[0].startswith("kafka_producer")]


async def test_producers_in_one_registry_are_told_apart_by_client_id(
    tansu: Any, new_topic: Any, registry: tuple[CollectorRegistry, int]
) -> None:
    target, port = registry
    topic = new_topic(tansu, partitions=1)
    async with (
        Producer(bootstrap_servers=tansu.bootstrap_servers, client_id="first") as first,
        Producer(bootstrap_servers=tansu.bootstrap_servers, client_id="second") as second,
        Producer(bootstrap_servers=tansu.bootstrap_servers, client_id="first") as clash,
    ):
        prometheus.register(first, target)
        prometheus.register(second, target)
        prometheus.register(first, target)  # again: nothing changes
        with pytest.raises(ConfigurationError, match="client_id 'first'"):
            prometheus.register(clash, target)
        await first.send_and_wait(topic, b"1")
        for _ in range(2):
            await second.send_and_wait(topic, b"2")
        samples = await asyncio.to_thread(scrape, port)
        prometheus.unregister(first, target)
        prometheus.unregister(second, target)
    name = "kafka_producer_topic_record_send_total"
    assert samples[(name, (("client_id", "first"), ("topic", topic)))] == 1
    assert samples[(name, (("client_id", "second"), ("topic", topic)))] == 2
    assert len(read_back(tansu.bootstrap_servers, topic, expected=3)) == 3


def test_a_sync_producer_reports_its_metrics_until_it_is_closed(
    tansu: Any, new_topic: Any
) -> None:
    from aioproducer import SyncProducer

    topic = new_topic(tansu, partitions=1)
    producer = SyncProducer(bootstrap_servers=tansu.bootstrap_servers, client_id="blocking")
    collector = prometheus.ProducerCollector([producer])
    try:
        for n in range(3):
            producer.send(topic, f"{n}".encode()).result(timeout=30)
        metrics = by_key(producer.metrics_detailed())
        families = {family.name: family for family in collector.collect()}
    finally:
        producer.close()
    assert metrics[("producer-topic-metrics", "record-send-total", topic)] == 3
    (sample,) = families["kafka_producer_topic_record_send"].samples
    assert sample.labels == {"client_id": "blocking", "topic": topic}
    assert sample.value == 3
    # Closed: a scrape leaves it out instead of failing.
    assert list(collector.collect()) == []
    assert len(read_back(tansu.bootstrap_servers, topic, expected=3)) == 3


async def test_a_closed_producer_leaves_the_scrape_and_its_client_id_free(
    tansu: Any, new_topic: Any
) -> None:
    # A service that restarts its producer (same client_id) keeps one set of series: the
    # closed producer's series end, and the new producer registers without an error.
    topic = new_topic(tansu, partitions=1)
    target = CollectorRegistry()
    async with Producer(bootstrap_servers=tansu.bootstrap_servers, client_id="svc") as old:
        prometheus.register(old, target)
        await old.send_and_wait(topic, b"old")
    name = "kafka_producer_topic_record_send_total"
    assert target.get_sample_value(name, {"client_id": "svc", "topic": topic}) is None
    async with Producer(bootstrap_servers=tansu.bootstrap_servers, client_id="svc") as new:
        prometheus.register(new, target)
        for _ in range(2):
            await new.send_and_wait(topic, b"new")
        assert target.get_sample_value(name, {"client_id": "svc", "topic": topic}) == 2
        prometheus.unregister(new, target)
    assert len(read_back(tansu.bootstrap_servers, topic, expected=3)) == 3
