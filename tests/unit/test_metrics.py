"""The producer's metrics, counted per batch and per request: per topic
(``producer-topic-metrics``) and per broker (``producer-node-metrics``) as the Java client
reports them, and the producer-wide ones they add to.

The sender is stepped with the fake clock and connections of tests/unit/test_sender.py; the
per-broker request and byte counts come from a real BrokerConnection talking to the scripted
broker of tests/unit/test_connection.py.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from aioproducer._core.metadata import Broker, PartitionInfo, TopicInfo
from aioproducer._core.metrics import CONNECTION_METRICS, NodeMetrics, ProducerMetrics, TopicMetrics
from aioproducer.metric_catalog import (
    DEFINITIONS,
    NODE_GROUP,
    PRODUCER_GROUP,
    TOPIC_GROUP,
    prometheus_name,
)
from aioproducer.net import BrokerConnection
from aioproducer.protocol.messages import (
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopicResponse,
)
from aioproducer.protocol.record_batch import estimate_record_size
from aioproducer.testing import InMemoryProducer
from tests.support.echo import EchoRequest
from tests.unit.test_connection import (
    FLEXIBLE_FROM,
    HOST,
    FakeBroker,
    api_versions_body,
    frame,
    make_config,
)
from tests.unit.test_sender import (
    MESSAGE_TOO_LARGE,
    NODES,
    NOT_ENOUGH_REPLICAS,
    T0,
    TIMESTAMP,
    TOPIC_AUTHORIZATION_FAILED,
    Harness,
    Sent,
    error,
    ok,
)

ROOT = Path(__file__).resolve().parents[2]
ORDERS = "orders"
CLICKS = "clicks"


class TwoTopics(Harness):
    """The sender harness with two topics: orders (partition 0 on broker 1, 1 on broker 2)
    and clicks (partition 0 on broker 1)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for topic in (ORDERS, CLICKS):
            self.metadata.add_topic(topic, self.now)
        self.metadata.update(
            [Broker(n, f"broker{n}", 9092) for n in NODES],
            [
                TopicInfo(ORDERS, (PartitionInfo(0, 1), PartitionInfo(1, 2))),
                TopicInfo(CLICKS, (PartitionInfo(0, 1),)),
            ],
            self.now,
        )

    def add(self, topic: str, partition: int, value: bytes) -> None:
        future = self.accumulator.try_append(topic, partition, TIMESTAMP, None, value, None)
        if future is not None:
            return
        size = estimate_record_size(None, value, None)
        buffer = self.pool.allocate_nowait(self.accumulator.buffer_size_for(size, topic, partition))
        assert buffer is not None
        self.accumulator.append_to_new_batch(
            topic, partition, TIMESTAMP, None, value, None, buffer, self.now
        )

    async def answer(
        self, sent: Sent, results: dict[str, list[ProducePartitionResponse]], throttle: int = 0
    ) -> None:
        sent.reply.set_result(
            ProduceResponse(
                topics=[ProduceTopicResponse(t, parts) for t, parts in results.items()],
                throttle_time_ms=throttle,
            )
        )
        self.sender.handle_responses(self.now)

    def topic(self, name: str) -> dict[str, float]:
        return self.metrics.topic_snapshots()[name]

    def wide(self) -> dict[str, float]:
        return self.metrics.snapshot(0, 0, 0.0, 0)


def batch_bytes(sent: Sent, topic: str) -> int:
    """The bytes of ``topic``'s record batches in a Produce request (read before it is
    answered: the batch's buffer goes back to the pool then)."""
    return sum(
        len(p.records) for t in sent.produce.topics if t.name == topic for p in t.partitions
    )


# ---- per topic --------------------------------------------------------------------------------


async def test_records_acknowledged_are_counted_per_topic() -> None:
    h = TwoTopics(linger_ms=0)
    for n in range(3):
        h.add(ORDERS, 0, f"order {n}".encode())
    h.add(ORDERS, 1, b"order on broker 2")
    h.add(CLICKS, 0, b"/home")
    h.add(CLICKS, 0, b"/cart")
    h.step()
    to_1, to_2 = h.last_produce(1), h.last_produce(2)
    orders_bytes = batch_bytes(to_1, ORDERS) + batch_bytes(to_2, ORDERS)
    clicks_bytes = batch_bytes(to_1, CLICKS)
    await h.answer(to_1, {ORDERS: [ok(0, 0)], CLICKS: [ok(0, 0)]})
    await h.answer(to_2, {ORDERS: [ok(1, 0)]})
    orders, clicks = h.topic(ORDERS), h.topic(CLICKS)
    assert orders["record-send-total"] == 4
    assert clicks["record-send-total"] == 2
    assert orders["record-error-total"] == clicks["record-error-total"] == 0
    assert orders["record-send-rate"] > 0
    # The bytes of the batches as they went out, and no compression (ratio 1).
    assert orders["byte-total"] == orders_bytes
    assert clicks["byte-total"] == clicks_bytes
    assert orders["compression-rate"] == clicks["compression-rate"] == 1.0
    # The producer-wide totals are the sums.
    assert h.wide()["record-send-total"] == 6


async def test_retries_and_errors_are_counted_against_their_topic() -> None:
    h = TwoTopics(linger_ms=0)
    h.add(ORDERS, 0, b"a")
    h.add(ORDERS, 0, b"b")
    h.add(CLICKS, 0, b"/home")
    h.step()
    first = h.last_produce(1)
    first_bytes = batch_bytes(first, ORDERS)
    # Orders may retry (NOT_ENOUGH_REPLICAS); clicks are refused for good.
    answers = {
        ORDERS: [error(0, NOT_ENOUGH_REPLICAS)],
        CLICKS: [error(0, TOPIC_AUTHORIZATION_FAILED)],
    }
    await h.answer(first, answers)
    orders, clicks = h.topic(ORDERS), h.topic(CLICKS)
    assert (orders["record-retry-total"], orders["record-error-total"]) == (2, 0)
    assert (clicks["record-retry-total"], clicks["record-error-total"]) == (0, 1)
    assert clicks["record-error-rate"] > 0
    h.step(T0 + 5)
    retry = h.last_produce(1)
    assert retry is not first
    retry_bytes = batch_bytes(retry, ORDERS)
    await h.answer(retry, {ORDERS: [ok(0, 0)]})
    orders = h.topic(ORDERS)
    assert orders["record-send-total"] == 2
    # A retried batch's bytes count again, as in the Java client.
    assert orders["byte-total"] == first_bytes + retry_bytes
    wide = h.wide()
    assert (wide["record-retry-total"], wide["record-error-total"]) == (2, 1)


async def test_a_split_batch_is_counted_once_and_its_records_as_sent() -> None:
    h = TwoTopics(batch_size=1024, linger_ms=0)
    values = [f"{i:03d}".encode() * 20 for i in range(10)]
    for value in values:
        h.add(ORDERS, 0, value)
    h.step()
    sent = h.last_produce(1)
    await h.answer(sent, {ORDERS: [error(0, MESSAGE_TOO_LARGE)]})
    assert h.wide()["batch-split-total"] == 1
    assert h.wide()["batch-split-rate"] > 0
    base = 0
    for _ in range(10):
        h.step()
        request = h.last_produce(1)
        if request.reply.done():
            break
        (part,) = request.batches.values()
        await h.answer(request, {ORDERS: [ok(0, base)]})
        base += len(part.records)
    assert h.topic(ORDERS)["record-send-total"] == 10
    assert h.wide()["batch-split-total"] == 1
    assert h.topic(ORDERS)["record-error-total"] == 0


# ---- per broker, from the sender: latency; producer-wide: throttle and queue time ---------------


async def test_produce_latency_is_timed_per_broker_with_the_clock() -> None:
    h = TwoTopics(linger_ms=0)
    h.add(ORDERS, 0, b"to broker 1")
    h.add(ORDERS, 1, b"to broker 2")
    h.step()
    h.now = T0 + 0.25
    await h.answer(h.last_produce(1), {ORDERS: [ok(0, 0)]})
    h.now = T0 + 0.75
    await h.answer(h.last_produce(2), {ORDERS: [ok(1, 0)]}, throttle=40)
    nodes = h.metrics.node_snapshots()
    assert nodes[1]["request-latency-max"] == pytest.approx(250.0)
    assert nodes[2]["request-latency-max"] == pytest.approx(750.0)
    assert nodes[2]["request-latency-avg"] == pytest.approx(750.0)
    assert 3 not in nodes, "a broker never sent to has no metrics"
    wide = h.wide()
    assert wide["request-latency-max"] == pytest.approx(750.0)
    assert wide["request-latency-avg"] == pytest.approx(500.0)
    assert wide["produce-throttle-time-max"] == 40
    assert wide["produce-throttle-time-avg"] == 40


async def test_record_queue_time_is_the_wait_in_the_accumulator() -> None:
    h = TwoTopics(linger_ms=100)
    h.add(CLICKS, 0, b"/home")
    h.step()
    assert h.produce_requests() == []
    h.step(T0 + 0.1)
    await h.answer(h.last_produce(1), {CLICKS: [ok(0, 0)]})
    wide = h.wide()
    assert wide["record-queue-time-max"] == pytest.approx(100.0)
    assert wide["record-queue-time-avg"] == pytest.approx(100.0)


# ---- per broker, from the connection: requests, responses, bytes --------------------------------


def _request_frame_size(version: int, api_key: int, body: bytes) -> int:
    client = len("test-client")
    flexible = 1 if version >= FLEXIBLE_FROM.get(api_key, 1 << 15) else 0
    return 4 + 8 + 2 + client + flexible + len(body)


async def test_a_connection_counts_requests_responses_and_bytes_of_its_broker() -> None:
    clock = [T0]
    metrics = ProducerMetrics(clock=lambda: clock[0])
    node = metrics.node(7)
    async with FakeBroker() as broker:
        connection = BrokerConnection(
            7, HOST, broker.port, make_config(broker.port), metrics=node
        )
        await connection.connect()
        # The ApiVersions handshake is a request and a response, as in the Java client.
        assert (node.request_total, node.response_total) == (1, 1)
        futures = [connection.send(EchoRequest(p)) for p in (b"one", b"two" * 50)]
        assert node.request_total == 3
        assert node.response_total == 1
        requests = [await broker.next_request() for _ in futures]
        replies = [frame(r.correlation_id, b"re:" + r.body) for r in requests]
        for reply in replies:
            requests[0].writer.write(reply)
        await asyncio.gather(*futures)
        connection.close()
    assert (node.request_total, node.response_total) == (3, 3)
    sent = sum(_request_frame_size(r.version, r.api_key, r.body) for r in broker.received)
    assert node.outgoing_byte_total == sent
    handshake = broker.received[0]
    api_versions_reply = frame(0, api_versions_body(handshake.version, 0, broker.ranges))
    assert node.incoming_byte_total == len(api_versions_reply) + sum(len(r) for r in replies)
    snapshot = metrics.node_snapshots()[7]
    assert snapshot["request-total"] == 3
    assert snapshot["response-total"] == 3
    assert snapshot["outgoing-byte-total"] == sent
    assert snapshot["incoming-byte-rate"] > 0


async def test_node_counts_outlive_a_reconnect() -> None:
    metrics = ProducerMetrics()
    async with FakeBroker() as broker:
        for _ in range(2):
            connection = BrokerConnection(
                3, HOST, broker.port, make_config(broker.port), metrics=metrics.node(3)
            )
            await connection.connect()
            connection.close()
    assert metrics.node_snapshots()[3]["request-total"] == 2


# ---- the catalogue, the docs and the in-memory producer -----------------------------------------


def test_every_reported_metric_is_defined_and_every_definition_reported() -> None:
    now = 0.0
    defined: dict[str, set[str]] = {}
    for definition in DEFINITIONS:
        defined.setdefault(definition.group, set()).add(definition.name)
    wide = set(ProducerMetrics().snapshot(0, 0, 0.0, 0)) | set(CONNECTION_METRICS)
    assert defined[PRODUCER_GROUP] == wide
    assert defined[TOPIC_GROUP] == set(TopicMetrics(30.0, now).snapshot(now))
    node = set(NodeMetrics(30.0, lambda: now).snapshot(now)) | {"requests-in-flight"}
    assert defined[NODE_GROUP] == node


@pytest.mark.parametrize(
    ("group", "name", "expected"),
    [
        (PRODUCER_GROUP, "record-send-total", "kafka_producer_record_send_total"),
        (TOPIC_GROUP, "record-send-total", "kafka_producer_topic_record_send_total"),
        (NODE_GROUP, "request-latency-avg", "kafka_producer_node_request_latency_avg"),
        (
            PRODUCER_GROUP,
            "bufferpool-wait-time-ns-total",
            "kafka_producer_bufferpool_wait_time_ns_total",
        ),
    ],
)
def test_prometheus_names_follow_micrometer(group: str, name: str, expected: str) -> None:
    assert prometheus_name(group, name) == expected


def test_the_metrics_page_documents_each_group_in_its_own_section() -> None:
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", page, flags=re.MULTILINE)
    for group in (PRODUCER_GROUP, TOPIC_GROUP, NODE_GROUP):
        (section,) = [s for s in sections if s.splitlines()[0].endswith(f"`{group}`")]
        documented = set(re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.MULTILINE))
        assert documented == {d.name for d in DEFINITIONS if d.group == group}


async def test_the_in_memory_producer_counts_per_topic_too() -> None:
    producer = InMemoryProducer()
    assert producer.metrics_detailed() == []
    await producer.start()
    await producer.send_and_wait(ORDERS, b"a")
    await producer.send_and_wait(ORDERS, b"b")
    await producer.send_and_wait(CLICKS, b"c")
    entries = {
        (m.group, m.name, m.tags.get("topic")): m for m in producer.metrics_detailed()
    }
    assert entries[(TOPIC_GROUP, "record-send-total", ORDERS)].value == 2
    assert entries[(TOPIC_GROUP, "record-send-total", CLICKS)].value == 1
    total = entries[(PRODUCER_GROUP, "record-send-total", None)]
    assert total.value == 3
    assert total.kind == "counter" and total.unit == "records"
    assert total.tags == {"client-id": producer.config.client_id}
    await producer.close()

