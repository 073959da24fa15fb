"""AvroSerializer.for_model: a Pydantic model class as the Avro schema, its instances as the
records, through an InMemoryProducer and the in-process registry."""

from __future__ import annotations

import datetime
import enum
import io
import json
import uuid
from typing import Any

import pytest

pydantic = pytest.importorskip("pydantic")
fastavro = pytest.importorskip("fastavro")

from pydantic import BaseModel, Field  # noqa: E402

from aioproducer.errors import ConfigurationError, SerializationError  # noqa: E402
from aioproducer.schema_registry import AvroSerializer, InMemorySchemaRegistry  # noqa: E402
from aioproducer.schema_registry.wire import read_header  # noqa: E402
from aioproducer.testing import InMemoryProducer  # noqa: E402


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


class Address(BaseModel):
    city: str
    zip: str | None = None


class Signup(BaseModel):
    email: str
    plan: Plan = Plan.FREE
    age: int | None = None
    at: datetime.datetime
    tags: list[str] = []
    scores: dict[str, float] = {}
    home: Address
    work: Address | None = None
    id: uuid.UUID = Field(default_factory=uuid.uuid4)


def _schema(serializer: AvroSerializer) -> Any:
    assert serializer._schema is not None
    return json.loads(serializer._schema.schema_str)


def test_the_schema_follows_the_fields() -> None:
    schema = _schema(AvroSerializer.for_model(InMemorySchemaRegistry(), Signup, namespace="shop"))
    assert schema["name"] == "Signup" and schema["namespace"] == "shop"
    fields = {field["name"]: field for field in schema["fields"]}
    assert list(fields) == ["email", "plan", "age", "at", "tags", "scores", "home", "work", "id"]
    assert fields["email"] == {"name": "email", "type": "string"}
    assert fields["plan"]["type"] == {"type": "enum", "name": "Plan", "symbols": ["free", "pro"]}
    assert fields["plan"]["default"] == "free"
    assert fields["age"] == {"name": "age", "type": ["null", "long"], "default": None}
    assert fields["at"]["type"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert fields["tags"] == {"name": "tags", "type": {"type": "array", "items": "string"},
                              "default": []}  # fmt: skip
    assert fields["scores"]["type"] == {"type": "map", "values": "double"}
    assert fields["home"]["type"]["type"] == "record"
    # Address is defined once, then named.
    assert fields["work"] == {"name": "work", "type": ["null", "shop.Address"], "default": None}
    # A default that differs for each instance is none of the schema's.
    assert fields["id"] == {"name": "id", "type": {"type": "string", "logicalType": "uuid"}}


async def test_instances_are_written_and_read_back_field_for_field() -> None:
    registry = InMemorySchemaRegistry()
    serializer = AvroSerializer.for_model(registry, Signup)
    naive = datetime.datetime(2024, 3, 1, 12, 0, 0, 250)
    signups = [
        Signup(email="a@example.com", at=naive, home=Address(city="Oslo")),
        Signup(email="b@example.com", plan=Plan.PRO, age=41, tags=["x", "y"],
               scores={"q": 0.5}, at=naive.replace(tzinfo=datetime.timezone.utc),
               home=Address(city="Rome", zip="00100"), work=Address(city="Turin")),
    ]  # fmt: skip
    async with InMemoryProducer(value_serializer=serializer) as producer:
        for signup in signups:
            await producer.send_and_wait("signups", signup)
        # A dict that fits the schema is taken too.
        await producer.send_and_wait("signups", signups[0].model_dump())
    parsed = fastavro.parse_schema(_schema(serializer))
    decoded = []
    for record in producer.records("signups"):
        assert record.value is not None
        _, payload = read_header(record.value)
        decoded.append(fastavro.schemaless_reader(io.BytesIO(payload), parsed))
    for got, signup in zip(decoded, [*signups, signups[0]], strict=True):
        assert got["email"] == signup.email and got["plan"] == signup.plan.value
        # A naive datetime is taken as UTC.
        assert got["at"] == naive.replace(tzinfo=datetime.timezone.utc)
        assert got["home"] == signup.home.model_dump()
        assert got["id"] == signup.id
        assert got["tags"] == signup.tags and got["scores"] == signup.scores


async def test_what_does_not_fit_fails_alone() -> None:
    serializer = AvroSerializer.for_model(InMemorySchemaRegistry(), Address)
    async with InMemoryProducer(value_serializer=serializer) as producer:
        with pytest.raises(SerializationError, match="does not match the Avro schema"):
            await producer.send("addresses", {"zip": "1"})
        await producer.send_and_wait("addresses", Address(city="Oslo"))
    assert len(producer.records("addresses")) == 1


def test_types_without_an_avro_form_are_refused() -> None:
    class Either(BaseModel):
        value: int | str

    class Keys(BaseModel):
        counts: dict[int, int]

    registry = InMemorySchemaRegistry()
    with pytest.raises(ConfigurationError, match=r"field Either\.value: .* has no Avro form"):
        AvroSerializer.for_model(registry, Either)
    with pytest.raises(ConfigurationError, match=r"field Keys\.counts: Avro maps have str keys"):
        AvroSerializer.for_model(registry, Keys)
    with pytest.raises(ConfigurationError, match="takes a Pydantic model class"):
        AvroSerializer.for_model(registry, dict)


async def test_a_record_from_something_not_a_dict_is_refused_saying_so() -> None:
    serializer = AvroSerializer.for_model(InMemorySchemaRegistry(), Address, namespace="shop")
    async with InMemoryProducer(value_serializer=serializer) as producer:
        with pytest.raises(
            SerializationError,
            match=r"a record \(shop\.Address\) is written from a dict, not a str",
        ):
            await producer.send("addresses", "notadict")
