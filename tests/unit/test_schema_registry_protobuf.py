"""ProtobufSerializer without a broker or a registry: InMemorySchemaRegistry and
InMemoryProducer. What is proved: each message carries its place in its file (nested
messages and messages after a map field's entry type included); the imported files are
registered first and referenced, well-known types only when asked; the subject name
strategies name subjects after the message's full name; a value of another type fails alone
with an error naming the expected message; use_latest_version finds the message by name in
the registered file; a missing protobuf is a ConfigurationError naming the extra."""

from __future__ import annotations

import base64
import sys
from typing import Any

import pytest

from aioproducer.errors import ConfigurationError, SerializationError
from aioproducer.schema_registry import (
    InMemorySchemaRegistry,
    ProtobufSerializer,
    Schema,
    SchemaReference,
)
from aioproducer.schema_registry.wire import read_header
from aioproducer.testing import InMemoryProducer
from tests.support.protobuf_messages import ShopMessages, an_order, shop_messages

COMMON = "shop/common.proto"
TIMESTAMP = "google/protobuf/timestamp.proto"


@pytest.fixture(scope="module")
def shop() -> ShopMessages:
    return shop_messages()


def _file_schema(messages: ShopMessages, name: str = "shop/order.proto") -> Schema:
    file = messages.pool.FindFileByName(name)
    return Schema(base64.b64encode(file.serialized_pb).decode(), "PROTOBUF")


async def _produce(serializer: ProtobufSerializer, topic: str, *values: Any) -> list[bytes]:
    async with InMemoryProducer(value_serializer=serializer) as producer:
        for value in values:
            await producer.send_and_wait(topic, value)
    return [record.value for record in producer.records(topic) if record.value is not None]


@pytest.mark.parametrize(
    ("map_before_line", "expected"),
    [
        (False, {"Order": b"\x00", "Line": b"\x04\x00\x00", "Discount": b"\x06\x00\x00\x00"}),
        # The map field's entry type (Order.TagsEntry) declared first: Line is nested type 1.
        (True, {"Order": b"\x00", "Line": b"\x04\x00\x02", "Discount": b"\x06\x00\x02\x00"}),
    ],
)
async def test_each_message_carries_its_place_in_its_file(
    map_before_line: bool, expected: dict[str, bytes]
) -> None:
    shop = shop_messages(map_before_line=map_before_line)
    registry = InMemorySchemaRegistry()
    order = an_order(shop, 5)
    values = {
        "Order": order,
        "Line": order.lines[1],
        "Discount": order.lines[1].discount,
        "Refund": shop.Refund(order_id=5, reason="broken"),
    }
    expected = {**expected, "Refund": b"\x02\x02"}  # [1]: the file's second message
    for name, value in values.items():
        cls = getattr(shop, name)
        [data] = await _produce(ProtobufSerializer(registry, cls), f"t-{name}", value)
        schema_id, rest = read_header(data)
        assert schema_id == 2  # shop/common.proto is 1; one file, one id
        indexes = expected[name]
        assert rest[: len(indexes)] == indexes, name
        assert cls.FromString(rest[len(indexes) :]) == value


async def test_the_imported_files_are_registered_first_and_referenced(
    shop: ShopMessages,
) -> None:
    registry = InMemorySchemaRegistry()
    await _produce(ProtobufSerializer(registry, shop.Order), "orders", an_order(shop, 1))
    assert await registry.subjects() == sorted([COMMON, "orders-value"])
    latest = await registry.latest_version("orders-value")
    assert latest.schema.references == (SchemaReference(COMMON, COMMON, 1),)
    assert latest.schema.schema_str == _file_schema(shop).schema_str
    common = await registry.latest_version(COMMON)
    assert common.schema_id == 1  # registered first
    assert common.schema.schema_str == _file_schema(shop, COMMON).schema_str
    # Another serializer on the same client: every answer from the cache.
    before = registry.requests
    await _produce(ProtobufSerializer(registry, shop.Order), "orders", an_order(shop, 2))
    await _produce(ProtobufSerializer(registry, shop.Refund), "refunds", shop.Refund())
    assert registry.requests == before + 1  # the refunds-value registration only

    # Well-known types too, when asked (confluent-kafka's skip.known.types=False).
    registry = InMemorySchemaRegistry()
    serializer = ProtobufSerializer(registry, shop.Order, skip_known_types=False)
    await _produce(serializer, "orders", an_order(shop, 1))
    assert await registry.subjects() == sorted([COMMON, TIMESTAMP, "orders-value"])
    latest = await registry.latest_version("orders-value")
    assert [r.name for r in latest.schema.references] == [TIMESTAMP, COMMON]


async def test_an_imported_file_missing_fails_the_record_when_nothing_is_registered(
    shop: ShopMessages,
) -> None:
    registry = InMemorySchemaRegistry()
    serializer = ProtobufSerializer(registry, shop.Order, auto_register_schemas=False)
    async with InMemoryProducer(value_serializer=serializer) as producer:
        with pytest.raises(
            SerializationError, match=r"imported file 'shop/common\.proto' is not registered"
        ):
            await producer.send("orders", an_order(shop, 1))
    await registry.register(COMMON, _file_schema(shop, COMMON))
    await registry.register("orders-value", _file_schema(shop))
    [data] = await _produce(
        ProtobufSerializer(registry, shop.Order, auto_register_schemas=False),
        "orders",
        an_order(shop, 1),
    )
    assert read_header(data)[0] == 2


def test_the_subject_is_named_after_the_message_s_full_name(shop: ShopMessages) -> None:
    registry = InMemorySchemaRegistry()

    def subject(cls: Any, strategy: str, **kwargs: Any) -> str:
        serializer = ProtobufSerializer(registry, cls, subject_name_strategy=strategy, **kwargs)
        return serializer.subject("orders")

    assert subject(shop.Order, "topic") == "orders-value"
    assert subject(shop.Order, "topic", is_key=True) == "orders-key"
    assert subject(shop.Order, "record") == "shop.Order"
    assert subject(shop.Line, "RecordNameStrategy") == "shop.Order.Line"
    assert subject(shop.Discount, "topic_record") == "orders-shop.Order.Line.Discount"
    conf = {
        "subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    }
    assert ProtobufSerializer(registry, shop.Refund, conf=conf).subject("r") == "r-shop.Refund"


async def test_a_value_of_another_type_fails_alone_naming_the_expected_message(
    shop: ShopMessages,
) -> None:
    other = shop_messages()  # the same file in another pool: other classes
    async with InMemoryProducer(
        value_serializer=ProtobufSerializer(InMemorySchemaRegistry(), shop.Order)
    ) as producer:
        await producer.send_and_wait("orders", an_order(shop, 1))
        for value, what in [
            ({"id": 2}, "a dict"),
            (shop.Refund(order_id=2), "a shop.Refund message"),
            (other.Order(id=2), "a shop.Order message of another class"),
            (b"\x08\x02", "a bytes"),
        ]:
            with pytest.raises(SerializationError) as failed:
                await producer.send("orders", value)
            assert str(failed.value).startswith(
                "the value does not match the Protobuf schema of subject 'orders-value': "
                f"a shop.Order message is expected, not {what}"
            )
        await producer.send_and_wait("orders", an_order(shop, 3))
    stored = [r.value for r in producer.records("orders") if r.value is not None]
    assert [shop.Order.FromString(v[6:]).id for v in stored] == [1, 3]


async def test_use_latest_version_finds_the_message_by_name_in_the_registered_file(
    shop: ShopMessages,
) -> None:
    registry = InMemorySchemaRegistry()
    # The registered file declares the map entry type before Line: Line is [0, 1] there,
    # [0, 0] in the class's own file.
    evolved = shop_messages(map_before_line=True)
    schema_id = await registry.register("orders-value", _file_schema(evolved))
    serializer = ProtobufSerializer(registry, shop.Line, use_latest_version=True)
    [data] = await _produce(serializer, "orders", an_order(shop, 1).lines[0])
    assert read_header(data) == (
        schema_id,
        b"\x04\x00\x02" + an_order(shop, 1).lines[0].SerializeToString(),
    )
    assert await registry.subjects() == ["orders-value"]  # nothing registered

    # A file that does not declare the message fails the record.
    await registry.register("common-value", _file_schema(shop, COMMON))
    async with InMemoryProducer(
        value_serializer=ProtobufSerializer(registry, shop.Order, use_latest_version=True)
    ) as producer:
        with pytest.raises(SerializationError, match=r"declares no message shop\.Order"):
            await producer.send("common", an_order(shop, 1))

    # A .proto text: the messages are taken in the class's order.
    text = 'syntax = "proto3";\npackage shop;\nmessage Order { int64 id = 1; }\n'
    text_id = await registry.register("text-value", Schema(text, "PROTOBUF"))
    serializer = ProtobufSerializer(
        registry, shop.Refund, conf={"use.latest.version": True, "auto.register.schemas": False}
    )
    [data] = await _produce(serializer, "text", shop.Refund(order_id=1))
    assert read_header(data) == (text_id, b"\x02\x02\x08\x01")


def test_what_is_not_a_message_class_is_refused_when_the_serializer_is_built(
    shop: ShopMessages,
) -> None:
    registry = InMemorySchemaRegistry()
    with pytest.raises(ConfigurationError, match="takes a protobuf message class, not"):
        ProtobufSerializer(registry, an_order(shop, 1))
    with pytest.raises(ConfigurationError, match="takes a protobuf message class, not"):
        ProtobufSerializer(registry, dict)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown ProtobufSerializer options: nope"):
        ProtobufSerializer(registry, shop.Order, conf={"nope": 1})


def test_without_protobuf_the_error_names_the_extra(
    shop: ShopMessages, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "google.protobuf.message", None)
    with pytest.raises(ConfigurationError) as missing:
        ProtobufSerializer(InMemorySchemaRegistry(), shop.Order)
    assert "pip install 'aioproducer[schema-registry]'" in str(missing.value)
