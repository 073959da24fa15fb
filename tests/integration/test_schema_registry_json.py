"""JSON Schema records in the Schema Registry wire format, read back by confluent-kafka's
JSONDeserializer against the same registry (Apicurio), field for field."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import ConfigurationError, SerializationError
from aioproducer.schema_registry import JsonSchemaSerializer, SchemaRegistryClient
from tests.support.readback import read_back

TopicFactory = Callable[..., str]

ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id", "item"],
    "additionalProperties": False,
}


def _deserialize(url: str, topic: str, values: list[bytes | None]) -> list[Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = JSONDeserializer(None, schema_registry_client=ConfluentClient({"url": url}))
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(value, context) for value in values]


async def test_json_values_are_validated_and_read_back_by_confluent_kafka(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    orders = [{"id": i, "item": f"item-{i}", "tags": ["a"] * (i % 3)} for i in range(20)]
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=JsonSchemaSerializer(registry, ORDER),
    ) as producer:
        for order in orders[:10]:
            await producer.send_and_wait(topic, order)
        with pytest.raises(SerializationError, match="is not of type 'integer'"):
            await producer.send(topic, {"id": "one", "item": "x"})
        with pytest.raises(SerializationError, match="'item' is a required property"):
            await producer.send(topic, {"id": 1})
        await (await producer.send_many(topic, orders[10:]))
    assert registry.requests == 1
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=20)
    assert _deserialize(schema_registry.url, topic, [r.value for r in records]) == orders


def test_an_invalid_json_schema_is_refused_when_the_serializer_is_built() -> None:
    registry = SchemaRegistryClient("http://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="not a valid JSON Schema"):
        JsonSchemaSerializer(registry, {"type": "no-such-type"})
    with pytest.raises(ConfigurationError, match="not a valid JSON Schema"):
        JsonSchemaSerializer(registry, "{not json")
    # The record strategies name the subject after the title.
    named = JsonSchemaSerializer(registry, ORDER, subject_name_strategy="TopicRecordNameStrategy")
    assert named.subject("orders") == "orders-Order"
    assert json.loads(named._schema.schema_str if named._schema else "{}")["title"] == "Order"


async def test_a_pydantic_model_is_the_schema_of_what_an_endpoint_publishes(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    from pydantic import BaseModel

    class Signup(BaseModel):
        email: str
        plan: str = "free"
        seats: int = 1

    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=JsonSchemaSerializer.for_model(registry, Signup),
    ) as producer:
        await producer.send_and_wait(topic, Signup(email="a@example.com"))
        await producer.send_and_wait(topic, Signup(email="b@example.com", plan="pro", seats=3))
        with pytest.raises(SerializationError, match="'email' is a required property"):
            await producer.send(topic, {"plan": "pro"})
    registered = await registry.latest_version(f"{topic}-value")
    assert json.loads(registered.schema.schema_str)["title"] == "Signup"
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert _deserialize(schema_registry.url, topic, [r.value for r in records]) == [
        {"email": "a@example.com", "plan": "free", "seats": 1},
        {"email": "b@example.com", "plan": "pro", "seats": 3},
    ]
