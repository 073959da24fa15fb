"""Avro records in the Schema Registry wire format, written by the producer and read back by
confluent-kafka's AvroDeserializer against the same registry (Apicurio), field for field."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import ConfigurationError, SchemaRegistryError
from aioproducer.schema_registry import AvroSerializer, Schema, SchemaRegistryClient
from aioproducer.schema_registry.wire import read_header
from tests.support.readback import read_back

TopicFactory = Callable[..., str]

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def _deserialize(url: str, topic: str, values: list[bytes | None]) -> list[Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = AvroDeserializer(ConfluentClient({"url": url}))
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(value, context) for value in values]


async def test_avro_values_are_read_back_by_confluent_kafka_field_for_field(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    orders = [{"id": i, "item": f"item-{i}", "note": None if i % 2 else "gift"} for i in range(50)]
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        key_serializer=str.encode,
        value_serializer=AvroSerializer(registry, ORDER),
    ) as producer:
        futures = [await producer.send(topic, order, key=str(order["id"])) for order in orders]
        for future in futures:
            await future
    # One registration for the subject, then every record from the cache.
    assert registry.requests == 1
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=50)
    schema_ids = {read_header(record.value)[0] for record in records if record.value}
    assert len(schema_ids) == 1
    decoded = _deserialize(schema_registry.url, topic, [record.value for record in records])
    assert decoded == orders
    assert [record.key for record in records] == [str(i).encode() for i in range(50)]


async def test_a_value_that_does_not_match_the_schema_fails_alone(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    from aioproducer.errors import SerializationError

    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, value_serializer=AvroSerializer(registry, ORDER)
    ) as producer:
        await producer.send_and_wait(topic, {"id": 1, "item": "a"})
        with pytest.raises(SerializationError, match="does not match the Avro schema"):
            await producer.send(topic, {"id": "not a long", "item": "b"})
        await producer.send_and_wait(topic, {"id": 2, "item": "c"})
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert [
        r["id"] for r in _deserialize(schema_registry.url, topic, [x.value for x in records])
    ] == [1, 2]


async def test_an_incompatible_schema_is_refused_with_the_registry_message(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    await registry.register(
        f"{topic}-value",
        Schema(json.dumps(ORDER)),
    )
    await registry.set_compatibility(f"{topic}-value", "BACKWARD")
    changed = {**ORDER, "fields": [{"name": "id", "type": "string"}]}
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=AvroSerializer(SchemaRegistryClient(schema_registry.url), changed),
    ) as producer:
        with pytest.raises(SchemaRegistryError) as refused:
            await producer.send(topic, {"id": "x"})
    assert refused.value.http_status == 409
    assert f"{topic}-value" in str(refused.value)
    await registry.close()


def test_a_key_serializer_set_for_values_is_refused() -> None:
    serializer = AvroSerializer(
        SchemaRegistryClient(f"http://127.0.0.1:1/{uuid.uuid4().hex}"), ORDER, is_key=True
    )
    with pytest.raises(ConfigurationError, match="made for keys"):
        Producer(bootstrap_servers="localhost:9092", value_serializer=serializer)


async def test_send_many_waits_for_the_schema_once_and_keeps_the_order(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    orders = [{"id": i, "item": f"i{i}", "note": None} for i in range(30)]
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, value_serializer=AvroSerializer(registry, ORDER)
    ) as producer:
        results = await producer.send_many(topic, orders)
        metadata = await results
    assert [m.offset for m in metadata] == list(range(30))
    assert registry.requests == 1
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=30)
    assert _deserialize(schema_registry.url, topic, [r.value for r in records]) == orders


def test_sync_producer_waits_for_the_schema_in_the_calling_thread(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    from aioproducer import SyncProducer

    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    orders = [{"id": i, "item": "x", "note": "y"} for i in range(5)]
    with SyncProducer(
        bootstrap_servers=tansu.bootstrap_servers, value_serializer=AvroSerializer(registry, ORDER)
    ) as producer:
        producer.send(topic, orders[0]).result(30)
        producer.send_many(topic, orders[1:], timeout=30)
    records = read_back(tansu.bootstrap_servers, topic, expected=5)
    assert _deserialize(schema_registry.url, topic, [r.value for r in records]) == orders


async def test_the_in_memory_producer_takes_the_same_serializer(schema_registry: Any) -> None:
    from aioproducer.testing import InMemoryProducer

    registry = SchemaRegistryClient(schema_registry.url)
    topic = f"memory-{uuid.uuid4().hex[:8]}"
    async with InMemoryProducer(value_serializer=AvroSerializer(registry, ORDER)) as producer:
        await producer.send_and_wait(topic, {"id": 7, "item": "a", "note": None})
        await producer.send_many(topic, [{"id": 8, "item": "b", "note": None}])
    await registry.close()
    values = [record.value for record in producer.records(topic)]
    assert [read_header(v)[0] for v in values if v] == [read_header(values[0])[0]] * 2
    assert [d["id"] for d in _deserialize(schema_registry.url, topic, values)] == [7, 8]


async def test_a_pydantic_model_as_the_schema_is_read_back_by_confluent_kafka(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    import datetime

    from pydantic import BaseModel

    class Signup(BaseModel):
        email: str
        plan: str = "free"
        age: int | None = None
        at: datetime.datetime

    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    at = datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.timezone.utc)
    signups = [Signup(email=f"u{i}@example.com", age=i or None, at=at) for i in range(5)]
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=AvroSerializer.for_model(registry, Signup, namespace="shop"),
    ) as producer:
        for signup in signups:
            await producer.send_and_wait(topic, signup)
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=len(signups))
    decoded = _deserialize(schema_registry.url, topic, [r.value for r in records])
    assert decoded == [signup.model_dump() for signup in signups]


async def test_a_schema_that_references_another_subject(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    """The Address record is registered under a subject of its own; the Customer schema
    names it and references it: registered with the reference, written with both, and read
    back by confluent-kafka's AvroDeserializer, which follows the reference."""
    from aioproducer.schema_registry import SchemaReference

    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "shop",
        "fields": [{"name": "city", "type": "string"}],
    }
    address_subject = f"shop.Address-{uuid.uuid4().hex[:8]}"
    await registry.register(address_subject, Schema(json.dumps(address)))
    customer = {
        "type": "record",
        "name": "Customer",
        "namespace": "shop",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "home", "type": "shop.Address"},
            {"name": "work", "type": ["null", "shop.Address"], "default": None},
        ],
    }
    serializer = AvroSerializer(
        registry, customer, references=[SchemaReference("shop.Address", address_subject, 1)]
    )
    customers = [
        {"name": "ada", "home": {"city": "London"}, "work": None},
        {"name": "grace", "home": {"city": "Arlington"}, "work": {"city": "Washington"}},
    ]
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, value_serializer=serializer
    ) as producer:
        for value in customers:
            await producer.send_and_wait(topic, value)
    latest = await registry.latest_version(f"{topic}-value")
    assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [
        ("shop.Address", address_subject, 1)
    ]
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=len(customers))
    assert _deserialize(schema_registry.url, topic, [r.value for r in records]) == customers
    # A reference the registry does not have fails the record, naming it.
    broken = AvroSerializer(
        SchemaRegistryClient(schema_registry.url),
        customer,
        references=[SchemaReference("shop.Address", f"missing-{uuid.uuid4().hex[:6]}", 1)],
    )
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, value_serializer=broken, max_block_ms=5000
    ) as producer:
        with pytest.raises(SchemaRegistryError, match=r"reading version 1 of subject 'missing-"):
            await producer.send(topic, customers[0])
