"""InMemoryProducer against the real Producer: the same calls, the same outcomes.

The real producer sends to librdkafka's mock cluster; the in-memory one to nothing. For
every call below both must agree: a refused record is refused with the same error class
and message, a keyed record lands on the same partition, a send_many refusal names the
same item with the same records accepted, and transaction calls out of order are refused
alike. A test that passes against the in-memory
producer then fails in production only for what a broker adds.
"""

from __future__ import annotations

import json
import time
from typing import Any

import confluent_kafka
import pytest

from aioproducer import Producer, ProducerRecord
from aioproducer.errors import KafkaError
from aioproducer.testing import InMemoryProducer

PARTITIONS = 3

_counter = iter(range(1_000_000))


def _topic(cluster: Any) -> str:
    name = f"parity-{time.time_ns() % 10**9}-{next(_counter)}"
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    return name


def _serialize(value: Any) -> Any:
    if isinstance(value, dict):
        return json.dumps(value).encode()
    return value  # anything else goes through as is, to be checked


# (arguments of send after the topic) -> one call each; "{topic}" is replaced.
CASES: list[dict[str, Any]] = [
    {"value": b"v", "key": b"user-1"},
    {"value": b"v", "key": b"user-2", "headers": [("h", b"1"), ("empty", None)]},
    {"value": {"a": 1}, "key": {"k": 2}},
    {"value": None, "key": b"tombstone"},
    {"value": b"v", "partition": 2},
    {"value": "text"},
    {"value": 3.5},
    {"value": b"v", "key": ["not", "bytes"]},
    {"value": b"v", "timestamp_ms": -5},
    {"value": b"v", "timestamp_ms": 2**63},
    {"value": b"v", "timestamp_ms": "now"},
    {"value": b"v", "partition": -1},
    {"value": b"v", "partition": 1.0},
    {"value": b"v", "partition": PARTITIONS},
    {"value": b"v", "headers": [("h", "str")]},
    {"value": b"v", "headers": [(1, b"x")]},
    {"value": b"v", "headers": [("a", b"1", "extra")]},
    {"value": b"v", "headers": "h=1"},
    {"value": b"x" * 5000},
    {"value": b"v", "topic": "bad name!"},
    {"value": b"v", "topic": "x" * 250},
    {"value": b"v", "topic": None},
]


async def _outcome(producer: Producer, topic: str, case: dict[str, Any]) -> tuple[Any, ...]:
    arguments = dict(case)
    target = arguments.pop("topic", topic)
    try:
        metadata = await producer.send_and_wait(target, **arguments)
    except KafkaError as exc:
        return ("refused", type(exc), str(exc))
    keyed = case.get("key") is not None or "partition" in case
    return ("sent", metadata.partition if keyed else None, metadata.serialized_key_size,
            metadata.serialized_value_size)


async def test_the_same_calls_have_the_same_outcomes(mock_cluster: Any) -> None:
    topic = _topic(mock_cluster)
    options: dict[str, Any] = {
        "key_serializer": _serialize,
        "value_serializer": _serialize,
        "max_request_size": 4096,
        "max_block_ms": 10_000,
    }
    async with Producer(bootstrap_servers=mock_cluster.bootstrap_servers, **options) as real:
        expected = [await _outcome(real, topic, case) for case in CASES]
    async with InMemoryProducer(topics={topic: PARTITIONS}, **options) as memory:
        actual = [await _outcome(memory, topic, case) for case in CASES]
    for case, want, got in zip(CASES, expected, actual, strict=True):
        assert got == want, case
    # The cases do cover both outcomes.
    assert {outcome[0] for outcome in expected} == {"sent", "refused"}


@pytest.mark.parametrize(
    "items",
    [
        [b"a", (b"k", b"b"), 7, b"d"],
        [ProducerRecord("{topic}", b"a"), ProducerRecord("bad topic", b"b")],
        [b"a", ProducerRecord("{topic}", b"b", partition=PARTITIONS)],
        [(b"k", b"a"), ("key", b"b")],
    ],
    ids=["value", "record-topic", "record-partition", "pair-key"],
)
async def test_send_many_refuses_the_same_item(mock_cluster: Any, items: list[Any]) -> None:
    topic = _topic(mock_cluster)
    items = [
        ProducerRecord(topic, item.value, partition=item.partition)
        if isinstance(item, ProducerRecord) and item.topic == "{topic}"
        else item
        for item in items
    ]
    outcomes = []
    real = Producer(bootstrap_servers=mock_cluster.bootstrap_servers, max_block_ms=10_000)
    for producer in (real, InMemoryProducer(topics={topic: PARTITIONS})):
        async with producer:
            with pytest.raises(KafkaError) as raised:
                await producer.send_many(topic, items)
            accepted = raised.value.accepted
            assert accepted is not None
            outcomes.append((type(raised.value), str(raised.value), len(await accepted)))
    assert outcomes[0] == outcomes[1]


async def _transaction_calls(producer: Producer) -> list[tuple[str, ...]]:
    """Transaction calls in and out of order, and what each gave."""
    outcomes: list[tuple[str, ...]] = []
    calls: list[tuple[str, Any]] = [
        ("send", lambda: producer.send("t", b"v")),
        ("commit", producer.commit_transaction),
        ("abort", producer.abort_transaction),
        ("offsets", lambda: producer.send_offsets_to_transaction({("in", 0): 1}, "group")),
        ("begin", producer.begin_transaction),
        ("begin again", producer.begin_transaction),
        ("send", lambda: producer.send_and_wait("t", b"v")),
        ("commit", producer.commit_transaction),
        ("commit again", producer.commit_transaction),
        ("begin", producer.begin_transaction),
        ("send", lambda: producer.send_and_wait("t", b"v")),
        ("abort", producer.abort_transaction),
        ("abort again", producer.abort_transaction),
    ]
    for name, call in calls:
        try:
            await call()
        except KafkaError as exc:
            outcomes.append((name, type(exc).__name__, str(exc)))
        else:
            outcomes.append((name, "ok"))
    return outcomes


async def test_transaction_calls_have_the_same_outcomes(mock_cluster: Any) -> None:
    mock_cluster.create_topic("t", partitions=1, replication_factor=3)
    real = Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        transactional_id="parity",
        max_block_ms=30_000,
    )
    outcomes = []
    for producer in (real, InMemoryProducer(transactional_id="parity")):
        async with producer:
            outcomes.append(await _transaction_calls(producer))
    assert outcomes[1] == outcomes[0]
    assert {outcome[1] for outcome in outcomes[0]} == {"ok", "IllegalStateError"}


async def test_acks_0_reports_no_offset_in_both(mock_cluster: Any) -> None:
    topic = _topic(mock_cluster)
    options: dict[str, Any] = {"acks": 0, "enable_idempotence": False}
    offsets = []
    real = Producer(bootstrap_servers=mock_cluster.bootstrap_servers, **options)
    for producer in (real, InMemoryProducer(topics={topic: PARTITIONS}, **options)):
        async with producer:
            metadata = await producer.send_and_wait(topic, b"v", key=b"k")
            offsets.append((metadata.partition, metadata.offset))
    assert offsets[0] == offsets[1] == (confluent_kafka.murmur2(b"k", PARTITIONS), -1)
