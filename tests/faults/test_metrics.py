"""Per-broker metrics on :class:`~tests.faults.scripted_broker.ScriptedCluster`, which records
every request it reads: the producer's count of requests per broker is the brokers' own, and
``requests-in-flight`` shows a request a broker holds back.

- ``test_requests_in_flight_show_the_broker_that_holds_an_answer``: broker 1 holds its
  Produce answer; its ``requests-in-flight`` is 1 (the producer-wide count too) while broker
  2's is 0, and both drop to 0 once the answer comes.
- ``test_every_request_the_brokers_read_is_counted_once``: the requests of every kind
  (ApiVersions, Metadata, InitProducerId, Produce), summed over the brokers, are the
  requests the brokers read; the Produce requests per broker are its own count.
"""

from __future__ import annotations

from aioproducer import Metric, Producer
from tests.faults.checks import bounded, fast_options
from tests.faults.scripted_broker import PRODUCE, Action, ScriptedCluster

NODE_GROUP = "producer-node-metrics"


def node_values(entries: list[Metric], name: str) -> dict[str, float]:
    """``node-id -> value`` of the per-broker metric ``name``."""
    return {e.tags["node-id"]: e.value for e in entries if e.group == NODE_GROUP and e.name == name}


def wide(entries: list[Metric], name: str) -> float:
    (value,) = [e.value for e in entries if e.group == "producer-metrics" and e.name == name]
    return value


async def test_requests_in_flight_show_the_broker_that_holds_an_answer() -> None:
    topic = "held"
    async with ScriptedCluster(2, topics={topic: 2}) as cluster:
        assert (cluster.leader_for(topic, 0), cluster.leader_for(topic, 1)) == (1, 2)
        hold = Action.hold()
        cluster.broker(1).push(PRODUCE, hold)
        assert hold.release is not None
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            held = await producer.send(topic, b"to broker 1", partition=0)
            await bounded(producer.send_and_wait(topic, b"to broker 2", partition=1))
            await bounded(cluster.wait_for(lambda: bool(cluster.requests_of(PRODUCE, 1))))
            entries = producer.metrics_detailed()
            in_flight = node_values(entries, "requests-in-flight")
            assert (in_flight["node-1"], in_flight["node-2"]) == (1, 0)
            assert wide(entries, "requests-in-flight") == 1
            assert not held.done()
            hold.release.set()
            await bounded(held)
            entries = producer.metrics_detailed()
            assert node_values(entries, "requests-in-flight")["node-1"] == 0
            sent = {
                e.tags["topic"]: e.value
                for e in entries
                if e.group == "producer-topic-metrics" and e.name == "record-send-total"
            }
            assert sent == {topic: 2}
        assert cluster.values(topic, 0) == [b"to broker 1"]


async def test_every_request_the_brokers_read_is_counted_once() -> None:
    topic = "counted"
    async with ScriptedCluster(2, topics={topic: 4}) as cluster:
        async with Producer(
            **fast_options(cluster.bootstrap_servers, enable_idempotence=True)
        ) as producer:
            for n in range(20):
                await bounded(producer.send_and_wait(topic, f"{n}".encode(), partition=n % 4))
        # Closed: nothing more goes out, so the counts are final.
        entries = producer.metrics_detailed()
        requests = node_values(entries, "request-total")
        await bounded(cluster.wait_for(lambda: len(cluster.requests) >= sum(requests.values())))
        assert sum(requests.values()) == len(cluster.requests)
        assert sum(node_values(entries, "response-total").values()) == len(cluster.requests)
        for broker in (1, 2):
            produce = cluster.requests_of(PRODUCE, broker)
            assert len(produce) == 10
            assert requests[f"node-{broker}"] >= len(produce)
        assert wide(entries, "request-total") == 20  # Produce requests only, producer-wide
