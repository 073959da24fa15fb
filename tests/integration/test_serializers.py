"""Serializers on Tansu: records without a key, and tombstones, pass the serializers by as
None on every path that serializes (send, send_many's plain values, pairs and
ProducerRecords, SyncProducer's send and send_many); read back with confluent-kafka."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aioproducer import Producer, ProducerRecord
from aioproducer.embedded import EmbeddedBroker
from aioproducer.records import Header
from aioproducer.sync import SyncProducer
from tests.support.readback import read_back

TopicFactory = Callable[..., str]


def to_json(value: Any) -> bytes:
    return json.dumps(value).encode()


SERIALIZERS = {"key_serializer": str.encode, "value_serializer": to_json}


def _stored(tansu: EmbeddedBroker, topic: str, expected: int) -> list[tuple[Any, Any]]:
    records = read_back(tansu.bootstrap_servers, topic, expected=expected)
    assert len(records) == expected
    return [(record.key, record.value) for record in records]


async def test_send_and_send_many_leave_none_keys_and_values_none(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    async with Producer(bootstrap_servers=tansu.bootstrap_servers, **SERIALIZERS) as producer:
        await producer.send_and_wait(topic, {"n": 1})  # no key
        await producer.send_and_wait(topic, None, key="user-1")  # a tombstone
        await producer.send_and_wait(topic, None)  # neither
        results = await producer.send_many(
            topic,
            [
                {"n": 2},  # a plain value
                ("user-2", None),
                (None, {"n": 3}),
                ProducerRecord(topic, {"n": 4}),
                ProducerRecord(topic, None, key="user-3"),
            ],
        )
        await results
    assert _stored(tansu, topic, 8) == [
        (None, b'{"n": 1}'),
        (b"user-1", None),
        (None, None),
        (None, b'{"n": 2}'),
        (b"user-2", None),
        (None, b'{"n": 3}'),
        (None, b'{"n": 4}'),
        (b"user-3", None),
    ]


async def test_send_many_of_plain_values_with_serializers(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    # The recipe the docs give: plain values have no key, which str.encode never sees.
    topic = new_topic(tansu, partitions=2)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        key_serializer=str.encode,
        value_serializer=str.encode,
    ) as producer:
        results = await producer.send_many(topic, [f"{i}" for i in range(50)])
        metadata = await results
    assert {m.serialized_key_size for m in metadata} == {-1}
    stored = _stored(tansu, topic, 50)
    assert {key for key, _ in stored} == {None}
    assert sorted(int(value) for _, value in stored) == list(range(50))


def test_sync_producer_leaves_none_keys_and_values_none(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    with SyncProducer(bootstrap_servers=tansu.bootstrap_servers, **SERIALIZERS) as producer:
        producer.send_and_wait(topic, {"n": 1})
        producer.send_and_wait(topic, None, key="user-1")
        producer.send_many(
            topic, [{"n": 2}, ("user-2", None), ProducerRecord(topic, None, key="user-3")]
        )
    assert _stored(tansu, topic, 5) == [
        (None, b'{"n": 1}'),
        (b"user-1", None),
        (None, b'{"n": 2}'),
        (b"user-2", None),
        (b"user-3", None),
    ]


def test_sync_producer_with_interceptors_leaves_none_keys_none(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    # With interceptors the serializers run on the loop thread, after them.
    topic = new_topic(tansu)

    class PassThrough:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            return record

        def on_acknowledgement(self, metadata: Any, error: BaseException | None) -> None:
            pass

    with SyncProducer(
        bootstrap_servers=tansu.bootstrap_servers, interceptors=[PassThrough()], **SERIALIZERS
    ) as producer:
        producer.send_and_wait(topic, {"n": 1})
        producer.send_many(topic, [{"n": 2}, ("user-2", None)])
    assert _stored(tansu, topic, 3) == [
        (None, b'{"n": 1}'),
        (None, b'{"n": 2}'),
        (b"user-2", None),
    ]


class SchemaTagged:
    """A Serializer that sees the record: the topic in the value, a header added."""

    def serialize(self, topic: str, headers: list[Header], data: Any) -> bytes:
        headers.append(("written-for", topic.encode()))
        return to_json({"topic": topic, "data": data})


async def test_a_serializer_that_sees_the_record_reaches_the_broker_with_its_headers(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        key_serializer=str.encode,
        value_serializer=SchemaTagged(),
    ) as producer:
        await producer.send_and_wait(topic, 1, key="a", headers={"trace": b"t"})
        results = await producer.send_many(topic, [("b", 2), ProducerRecord(topic, None)])
        await results
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    assert [(r.key, r.value, r.headers) for r in records] == [
        (
            b"a",
            to_json({"topic": topic, "data": 1}),
            [("trace", b"t"), ("written-for", topic.encode())],
        ),
        (b"b", to_json({"topic": topic, "data": 2}), [("written-for", topic.encode())]),
        (None, None, []),  # a tombstone never reaches the serializer
    ]


def test_sync_producer_takes_a_serializer_that_sees_the_record(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    with SyncProducer(
        bootstrap_servers=tansu.bootstrap_servers, value_serializer=SchemaTagged()
    ) as producer:
        producer.send(topic, "x").result(30)
    (record,) = read_back(tansu.bootstrap_servers, topic, expected=1)
    assert (record.value, record.headers) == (
        to_json({"topic": topic, "data": "x"}),
        [("written-for", topic.encode())],
    )
