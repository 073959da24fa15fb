"""Protobuf records in the Schema Registry wire format, written by the producer and read back by
confluent-kafka's ProtobufDeserializer against the same registry (Apicurio), field for field;
the schemas registered are those confluent-kafka's ProtobufSerializer registers."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import SerializationError
from aioproducer.schema_registry import ProtobufSerializer, SchemaReference, SchemaRegistryClient
from aioproducer.schema_registry.wire import read_header
from tests.support.protobuf_messages import ShopMessages, an_order, shop_messages
from tests.support.readback import read_back

TopicFactory = Callable[..., str]

COMMON = "shop/common.proto"
TIMESTAMP = "google/protobuf/timestamp.proto"


@pytest.fixture(scope="module")
def shop() -> ShopMessages:
    return shop_messages()


def _confluent(url: str) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient

    return ConfluentClient({"url": url})


def _deserialize(url: str, topic: str, cls: Any, values: list[bytes | None]) -> list[Any]:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = ProtobufDeserializer(cls, {}, _confluent(url))
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(value, context) for value in values]


def _writer_message(url: str, value: bytes) -> str:
    """The full name of the message ``value`` says it is: its header and message indexes as
    confluent-kafka reads them, resolved in the file registered under its schema id."""
    from confluent_kafka.schema_registry.serde import SchemaId
    from google.protobuf import descriptor_pb2

    schema_id = SchemaId("PROTOBUF")
    schema_id.from_bytes(io.BytesIO(value))
    schema = _confluent(url).get_schema(schema_id.id, fmt="serialized")
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema.schema_str))
    names, declared = [], file.message_type
    for index in schema_id.message_indexes or []:
        names.append(declared[index].name)
        declared = declared[index].nested_type
    return ".".join([file.package, *names])


def _as_dict(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)


async def test_protobuf_values_are_read_back_by_confluent_kafka_field_for_field(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any, shop: ShopMessages
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    orders = [an_order(shop, i) for i in range(30)]
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        key_serializer=str.encode,
        value_serializer=ProtobufSerializer(registry, shop.Order),
    ) as producer:
        futures = [await producer.send(topic, order, key=str(order.id)) for order in orders]
        for future in futures:
            await future
    # shop/common.proto registered and looked up (for its version), then the order file:
    # three requests, and every record after the first from the cache.
    assert registry.requests == 3
    subjects = await registry.subjects()
    assert {COMMON, f"{topic}-value"} <= set(subjects)
    assert TIMESTAMP not in subjects  # a well-known type: neither registered nor referenced
    common = await registry.latest_version(COMMON)
    latest = await registry.latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert latest.schema.references == (SchemaReference(COMMON, COMMON, common.version),)

    records = read_back(tansu.bootstrap_servers, topic, expected=30)
    assert [record.key for record in records] == [str(i).encode() for i in range(30)]
    values = [record.value for record in records]
    assert {read_header(value)[0] for value in values if value} == {latest.schema_id}
    assert all(value and value[5:6] == b"\x00" for value in values)  # message indexes [0]
    decoded = _deserialize(schema_registry.url, topic, shop.Order, values)
    assert [_as_dict(d) for d in decoded] == [_as_dict(o) for o in orders]
    for got, sent in zip(decoded, orders, strict=True):
        assert (got.id, got.customer, got.status) == (sent.id, sent.customer, sent.status)
        assert [(x.sku, x.quantity, x.price.units, x.discount.percent) for x in got.lines] == [
            (x.sku, x.quantity, x.price.units, x.discount.percent) for x in sent.lines
        ]
        assert dict(got.tags) == dict(sent.tags)
        assert (got.placed_at.seconds, got.placed_at.nanos) == (
            sent.placed_at.seconds,
            sent.placed_at.nanos,
        )
        assert (got.total.units, got.total.currency) == (sent.total.units, sent.total.currency)

    # A second serializer on the same client costs no request, and writes the same bytes.
    before = registry.requests
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=ProtobufSerializer(registry, shop.Order),
    ) as producer:
        await producer.send_and_wait(topic, orders[0])
    assert registry.requests == before
    await registry.close()
    again = read_back(tansu.bootstrap_servers, topic, expected=31)[-1].value
    assert again == values[0]


async def test_the_bytes_are_those_confluent_kafka_writes_under_the_same_schema_id(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any, shop: ShopMessages
) -> None:
    """confluent-kafka's ProtobufSerializer registers the same schemas (Apicurio gives the same
    content and references the same id) and writes the same bytes, nested messages too."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as Confluent
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    order, line = an_order(shop, 4), an_order(shop, 4).lines[1]
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=ProtobufSerializer(registry, shop.Order),
    ) as producer:
        await producer.send_and_wait(topic, order)
    await registry.close()
    ours = read_back(tansu.bootstrap_servers, topic, expected=1)[0].value
    context = SerializationContext(topic, MessageField.VALUE)
    theirs = Confluent(shop.Order, _confluent(schema_registry.url), {})(order, context)
    assert ours == theirs

    from confluent_kafka.schema_registry import topic_record_subject_name_strategy

    line_topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=ProtobufSerializer(
            registry, shop.Line, subject_name_strategy="topic_record"
        ),
    ) as producer:
        await producer.send_and_wait(line_topic, line)
    await registry.close()
    ours = read_back(tansu.bootstrap_servers, line_topic, expected=1)[0].value
    confluent = Confluent(
        shop.Line,
        _confluent(schema_registry.url),
        {"subject.name.strategy": topic_record_subject_name_strategy},
    )
    assert ours == confluent(line, SerializationContext(line_topic, MessageField.VALUE))


async def test_nested_messages_carry_their_place_in_the_file(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any, shop: ShopMessages
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    order = an_order(shop, 7)
    sent = [
        (shop.Line, order.lines[0], b"\x04\x00\x00"),  # [0, 0]
        (shop.Discount, order.lines[1].discount, b"\x06\x00\x00\x00"),  # [0, 0, 0]
        (shop.Refund, shop.Refund(order_id=7, reason="late"), b"\x02\x02"),  # [1]
    ]
    for cls, value, _ in sent:
        serializer = ProtobufSerializer(registry, cls, subject_name_strategy="topic_record")
        async with Producer(
            bootstrap_servers=tansu.bootstrap_servers, value_serializer=serializer
        ) as producer:
            await producer.send_and_wait(topic, value)
    subjects = set(await registry.subjects())
    for name in ("shop.Order.Line", "shop.Order.Line.Discount", "shop.Refund"):
        assert f"{topic}-{name}" in subjects
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    for record, (cls, value, indexes) in zip(records, sent, strict=True):
        assert record.value is not None
        assert record.value[5 : 5 + len(indexes)] == indexes
        assert _writer_message(schema_registry.url, record.value) == cls.DESCRIPTOR.full_name
        [decoded] = _deserialize(schema_registry.url, topic, cls, [record.value])
        assert _as_dict(decoded) == _as_dict(value)


async def test_known_types_are_registered_and_referenced_when_not_skipped(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any, shop: ShopMessages
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    order = an_order(shop, 3)
    serializer = ProtobufSerializer(registry, shop.Order, conf={"skip.known.types": False})
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, value_serializer=serializer
    ) as producer:
        await producer.send_and_wait(topic, order)
    assert {TIMESTAMP, COMMON, f"{topic}-value"} <= set(await registry.subjects())
    latest = await registry.latest_version(f"{topic}-value")
    timestamp = await registry.latest_version(TIMESTAMP)
    assert [(r.name, r.subject) for r in latest.schema.references] == [
        (TIMESTAMP, TIMESTAMP),
        (COMMON, COMMON),
    ]
    assert latest.schema.references[0].version == timestamp.version
    await registry.close()
    [record] = read_back(tansu.bootstrap_servers, topic, expected=1)
    assert record.value is not None and read_header(record.value)[0] == latest.schema_id
    [decoded] = _deserialize(schema_registry.url, topic, shop.Order, [record.value])
    assert _as_dict(decoded) == _as_dict(order)


async def test_a_value_of_another_type_fails_alone(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any, shop: ShopMessages
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=ProtobufSerializer(registry, shop.Order),
    ) as producer:
        await producer.send_and_wait(topic, an_order(shop, 1))
        with pytest.raises(
            SerializationError,
            match=r"does not match the Protobuf schema of subject '.*-value': a shop\.Order "
            r"message is expected, not a dict",
        ):
            await producer.send(topic, {"id": 2})
        with pytest.raises(SerializationError, match=r"not a shop\.Refund message"):
            await producer.send(topic, shop.Refund(order_id=2))
        await producer.send_and_wait(topic, an_order(shop, 3))
    await registry.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    decoded = _deserialize(schema_registry.url, topic, shop.Order, [r.value for r in records])
    assert [d.id for d in decoded] == [1, 3]


async def test_the_latest_version_or_a_lookup_instead_of_registering(
    tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any, shop: ShopMessages
) -> None:
    topic = new_topic(tansu)
    registry = SchemaRegistryClient(schema_registry.url)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=ProtobufSerializer(registry, shop.Order),
    ) as producer:
        await producer.send_and_wait(topic, an_order(shop, 0))
    order_id = (await registry.latest_version(f"{topic}-value")).schema_id
    await registry.close()

    # Looked up: the same id; the file must be registered under the subject already.
    lookup = SchemaRegistryClient(schema_registry.url)
    latest = SchemaRegistryClient(schema_registry.url)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=ProtobufSerializer(lookup, shop.Order, auto_register_schemas=False),
    ) as producer:
        await producer.send_and_wait(topic, an_order(shop, 1))
        with pytest.raises(SerializationError, match="not registered under subject"):
            await producer.send(f"{topic}-nowhere", an_order(shop, 2))
    # The latest version: a nested message of the registered file, found there by name.
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        value_serializer=ProtobufSerializer(latest, shop.Line, use_latest_version=True),
    ) as producer:
        await producer.send_and_wait(topic, an_order(shop, 2).lines[0])
    assert latest.requests == 1  # the latest version, nothing registered
    await lookup.close()
    await latest.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    values = [r.value for r in records]
    assert [read_header(v)[0] for v in values if v] == [order_id] * 3
    assert [_writer_message(schema_registry.url, v) for v in values if v] == [
        "shop.Order",
        "shop.Order",
        "shop.Order.Line",
    ]
    [decoded] = _deserialize(schema_registry.url, topic, shop.Line, values[2:])
    assert decoded.sku == "sku-2-0"
