"""Serializers: a None key or value never reaches them, it stays None (no key, a tombstone),
as with the Java client's serializers; everything else goes through them, checked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aioproducer._core.appender import serialize
from aioproducer.config import ProducerConfig
from aioproducer.errors import ConfigurationError, SerializationError
from aioproducer.records import Header
from aioproducer.testing import InMemoryProducer


class Recording:
    """A serializer that records what it was given."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, obj: Any) -> bytes:
        self.calls.append(obj)
        return repr(obj).encode()


@pytest.mark.parametrize("role", ["key", "value"])
def test_none_is_not_passed_to_the_serializer(role: str) -> None:
    serializer = Recording()
    assert serialize(serializer, None, role, "events") is None
    assert serializer.calls == []


def test_str_encode_as_key_serializer_takes_records_without_a_key() -> None:
    # The recipe on the getting-started page: str.encode(None) would raise TypeError.
    assert serialize(str.encode, None, "key", "events") is None
    assert serialize(str.encode, "user-1", "key", "events") == b"user-1"


def test_a_json_value_serializer_leaves_a_tombstone_a_tombstone() -> None:
    # json.dumps(None) is "null": passed through, a tombstone would become a value.
    def to_json(value: Any) -> bytes:
        return json.dumps(value).encode()

    assert serialize(to_json, None, "value", "users") is None
    assert serialize(to_json, {"id": 1}, "value", "users") == b'{"id": 1}'


def test_values_other_than_none_still_go_through_the_serializer_and_its_checks() -> None:
    serializer = Recording()
    assert serialize(serializer, 0, "value", "t") == b"0"
    assert serialize(serializer, b"", "value", "t") == b"b''"
    assert serializer.calls == [0, b""]
    with pytest.raises(SerializationError, match="key_serializer"):
        serialize(str.encode, 5, "key", "t")
    with pytest.raises(SerializationError, match="not bytes-like"):
        serialize(None, "text", "value", "t")
    assert serialize(None, None, "value", "t") is None


DOCS = Path(__file__).resolve().parents[2] / "docs"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_getting_started_serializer_snippet_runs_as_written() -> None:
    block = next(
        block
        for block in _python_blocks(DOCS / "getting-started.md")
        if "key_serializer=str.encode" in block
    )
    namespace: dict[str, Any] = {}
    exec(compile(block, "getting-started.md", "exec"), namespace)  # makes no connection
    config = namespace["producer"].config
    assert serialize(config.value_serializer, {"id": 1}, "value", "t") == b'{"id": 1}'
    assert serialize(config.key_serializer, "user-1", "key", "t") == b"user-1"
    assert serialize(config.key_serializer, None, "key", "t") is None
    assert serialize(config.value_serializer, None, "value", "t") is None


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda page: page.name)
def test_doc_snippets_that_use_json_import_it(page: Path) -> None:
    for block in _python_blocks(page):
        if "json." in block:
            assert "import json" in block, f"{page.name}: a snippet uses json without importing it"


# ---- serializers that see the record ------------------------------------------------------------


class Tagging:
    """A Serializer (aioproducer.serialization): sees the topic and headers, adds one."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.seen: list[tuple[str, list[Header], Any]] = []

    def serialize(self, topic: str, headers: list[Header], data: Any) -> bytes:
        self.seen.append((topic, list(headers), data))
        headers.append((f"{self.role}-topic", topic.encode()))
        return f"{topic}:{data}".encode()


async def test_a_serializer_sees_the_topic_and_headers_and_what_it_adds_is_sent() -> None:
    key_serializer, value_serializer = Tagging("key"), Tagging("value")
    async with InMemoryProducer(
        key_serializer=key_serializer, value_serializer=value_serializer
    ) as producer:
        await (await producer.send("orders", 7, key="k", headers=[("trace", b"t1")]))
        await (await producer.send("clicks", 8))  # no key, no headers of its own
    first, second = producer.records()
    assert (first.key, first.value) == (b"orders:k", b"orders:7")
    # The key serializer runs first, and the value serializer sees what it added.
    assert key_serializer.seen == [("orders", [("trace", b"t1")], "k")]
    assert value_serializer.seen[0] == ("orders", [("trace", b"t1"), ("key-topic", b"orders")], 7)
    assert list(first.headers) == [
        ("trace", b"t1"),
        ("key-topic", b"orders"),
        ("value-topic", b"orders"),
    ]
    assert (second.key, second.value) == (None, b"clicks:8")
    assert list(second.headers) == [("value-topic", b"clicks")]


async def test_a_plain_serializer_beside_one_that_sees_the_record_is_called_as_before() -> None:
    async with InMemoryProducer(
        key_serializer=str.encode, value_serializer=Tagging("value")
    ) as producer:
        await (await producer.send("orders", 1, key="k"))
    (record,) = producer.records()
    assert (record.key, record.value, list(record.headers)) == (
        b"k",
        b"orders:1",
        [("value-topic", b"orders")],
    )


class AddsABadHeader:
    def serialize(self, topic: str, headers: list[Any], data: Any) -> bytes:
        headers.append(("n", 5))
        return b"x"


async def test_a_header_a_serializer_adds_is_checked_and_fails_only_its_record() -> None:
    async with InMemoryProducer(value_serializer=AddsABadHeader()) as producer:
        with pytest.raises(SerializationError, match="header 'n' must be bytes-like or None"):
            await producer.send("orders", 1)
        await (await producer.send("orders", None))  # a tombstone never reaches it
    assert [record.value for record in producer.records()] == [None]


class Async:
    async def serialize(self, topic: str, headers: list[Header], data: Any) -> bytes:
        return b"x"


async def test_an_async_serializer_is_refused_with_a_clear_error() -> None:
    async with InMemoryProducer(value_serializer=Async()) as producer:
        with pytest.raises(SerializationError, match="returned a coroutine"):
            await producer.send("orders", 1)
    assert producer.records() == []


async def test_confluent_kafka_serializers_get_their_serialization_context() -> None:
    from confluent_kafka.serialization import (
        MessageField,
        SerializationContext,
        StringSerializer,
    )
    from confluent_kafka.serialization import (
        Serializer as ConfluentSerializer,
    )

    class Recording(ConfluentSerializer):  # type: ignore[misc]
        def __init__(self) -> None:
            self.contexts: list[SerializationContext] = []

        def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes:
            assert ctx is not None
            self.contexts.append(ctx)
            assert ctx.headers is not None
            ctx.headers.append(("schema", b"1"))
            return str(obj).encode()

    value_serializer = Recording()
    async with InMemoryProducer(
        key_serializer=StringSerializer("utf_8"), value_serializer=value_serializer
    ) as producer:
        await (await producer.send("orders", 42, key="k"))
    (record,) = producer.records()
    assert (record.key, record.value, list(record.headers)) == (b"k", b"42", [("schema", b"1")])
    (context,) = value_serializer.contexts
    assert (context.topic, context.field) == ("orders", MessageField.VALUE)


def test_an_object_that_is_no_serializer_is_refused_when_configured() -> None:
    with pytest.raises(
        ConfigurationError, match="must be a callable of one argument, a Serializer"
    ):
        ProducerConfig.from_options(value_serializer=object())


# ---- Schema Registry serializers on the in-memory producer and registry -------------------------


async def test_avro_records_on_the_in_memory_producer_with_the_in_memory_registry() -> None:
    import io

    import fastavro

    from aioproducer.schema_registry import AvroSerializer, InMemorySchemaRegistry
    from aioproducer.schema_registry.wire import read_header

    schema = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
    }
    registry = InMemorySchemaRegistry()
    async with InMemoryProducer(value_serializer=AvroSerializer(registry, schema)) as producer:
        await producer.send_and_wait("orders", {"id": 1, "item": "a"})
        await producer.send_many("orders", [{"id": 2, "item": "b"}])
        await producer.send_and_wait("returns", {"id": 3, "item": "c"})
    assert await registry.subjects() == ["orders-value", "returns-value"]
    decoded = []
    for record in producer.records():
        assert record.value is not None
        schema_id, payload = read_header(record.value)
        assert schema_id == 1  # one schema, one id, under both subjects
        decoded.append(
            fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(schema))
        )
    assert decoded == [{"id": 1, "item": "a"}, {"id": 2, "item": "b"}, {"id": 3, "item": "c"}]
    latest = await registry.latest_version("orders-value")
    assert (latest.schema_id, latest.version) == (1, 1)


async def test_the_in_memory_registry_refuses_what_is_not_there_as_a_registry_does() -> None:
    from aioproducer.errors import SchemaRegistryError
    from aioproducer.schema_registry import AvroSerializer, InMemorySchemaRegistry, Schema

    registry = InMemorySchemaRegistry()
    assert await registry.lookup("orders-value", Schema('"string"')) is None
    with pytest.raises(SchemaRegistryError) as missing:
        await registry.latest_version("orders-value")
    assert missing.value.registry_error_code == 40401
    serializer = AvroSerializer(registry, '"string"', auto_register_schemas=False)
    async with InMemoryProducer(value_serializer=serializer) as producer:
        with pytest.raises(SerializationError, match="not registered under subject 'orders-value'"):
            await producer.send("orders", "x")
    assert producer.records() == []


async def test_a_schema_found_by_lookup_is_kept_with_its_version() -> None:
    from aioproducer.schema_registry import InMemorySchemaRegistry, Schema

    registry = InMemorySchemaRegistry()
    await registry.register("orders-value", Schema('"string"'))
    await registry.register("orders-value", Schema('"long"'))
    before = registry.requests
    found = await registry.lookup("orders-value", Schema('"long"'))
    assert found is not None and (found.schema_id, found.version) == (2, 2)
    assert await registry.lookup("orders-value", Schema('"long"')) == found
    assert registry.requests == before + 1  # the second answer from the cache
    # What is not there is asked again (it may be registered since).
    assert await registry.lookup("returns-value", Schema('"long"')) is None
    await registry.register("returns-value", Schema('"long"'))
    again = await registry.lookup("returns-value", Schema('"long"'))
    assert again is not None and (again.schema_id, again.version) == (2, 1)


async def test_a_wait_that_fails_for_a_while_is_tried_again_within_max_block_ms() -> None:
    import time

    from aioproducer.errors import SchemaRegistryError
    from aioproducer.serialization import SerializerNotReady, wait_for_serializer

    tries: list[float] = []

    def flaky(fail_first: int, retriable: bool = True) -> SerializerNotReady:
        async def wait() -> None:
            tries.append(time.monotonic())
            if len(tries) <= fail_first:
                raise SchemaRegistryError("the registry could not be reached", retriable=retriable)

        return SerializerNotReady(wait, "the id of its schema")

    # Two failures, then the registry answers: the wait succeeds.
    await wait_for_serializer(flaky(2), timeout=5.0)
    assert len(tries) == 3
    # A refusal that is not retriable fails at once.
    tries.clear()
    with pytest.raises(SchemaRegistryError, match="could not be reached"):
        await wait_for_serializer(flaky(1, retriable=False), timeout=5.0)
    assert len(tries) == 1
    # Failing to the end: the registry's last error once the time is out (not before).
    tries.clear()
    started = time.monotonic()
    with pytest.raises(SchemaRegistryError, match="could not be reached"):
        await wait_for_serializer(flaky(1000), timeout=0.5)
    assert len(tries) >= 3 and time.monotonic() - started >= 0.45


async def test_a_wait_that_is_never_answered_fails_with_a_serialization_error() -> None:
    # Not asyncio's TimeoutError (a class of its own before Python 3.11): the library's.
    import asyncio

    from aioproducer.errors import SerializationError
    from aioproducer.serialization import SerializerNotReady, wait_for_serializer

    async def never() -> None:
        await asyncio.Event().wait()

    with pytest.raises(SerializationError, match="max_block_ms passed") as caught:
        await wait_for_serializer(SerializerNotReady(never, "the id of its schema"), 0.05)
    assert caught.value.retriable
