"""Avro keys and values in the Schema Registry wire format, encoded with fastavro."""

from __future__ import annotations

import datetime
import decimal
import enum
import io
import json
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from aioproducer.errors import ConfigurationError, SerializationError
from aioproducer.schema_registry.client import Schema, SchemaReference, SchemaRegistryClient
from aioproducer.schema_registry.serde import RegistrySerializer

__all__ = ["AvroSerializer"]


class AvroSerializer(RegistrySerializer):
    """Avro (written with ``fastavro``) in the Schema Registry wire format: dicts, or
    objects through ``to_dict``. See :class:`RegistrySerializer` for the arguments;
    ``schema`` is an Avro schema, as JSON text or a dict."""

    schema_type: ClassVar[str] = "AVRO"
    format_name: ClassVar[str] = "Avro"

    def __init__(
        self,
        registry: SchemaRegistryClient,
        schema: str | Mapping[str, Any] | None = None,
        *,
        references: Sequence[SchemaReference] = (),
        **kwargs: Any,
    ) -> None:
        """``references`` name the registered schemas that define the named types
        ``schema`` uses (``SchemaReference("shop.Address", "shop.Address", 1)``: the
        type's full name, the subject and version it is registered under). They are
        fetched from the registry with the first record, and the schema is registered with
        them; until then it is only checked to be JSON. Other arguments as for
        :class:`RegistrySerializer`."""
        self._references = tuple(references)
        # Named types the references define, by full name (fastavro's named_schemas), once
        # fetched; None before.
        self._named: dict[str, Any] | None = None if self._references else {}
        super().__init__(registry, schema, **kwargs)

    def parse(self, text: str) -> tuple[Any, str | None]:
        try:
            import fastavro
        except ImportError as exc:
            raise ConfigurationError(
                "AvroSerializer needs fastavro: pip install 'aioproducer[schema-registry]'"
            ) from exc
        self._write = fastavro.schemaless_writer
        if self._named is None:
            # Its named types come with the references: checked once they are fetched.
            try:
                document = json.loads(text)
            except ValueError as exc:
                raise ConfigurationError(f"not a valid Avro schema: {exc}") from exc
            return None, _full_name(document)
        try:
            parsed = fastavro.parse_schema(json.loads(text), named_schemas=dict(self._named))
        except Exception as exc:
            raise ConfigurationError(f"not a valid Avro schema: {exc}") from exc
        name = parsed.get("name") if isinstance(parsed, dict) else None
        return parsed, name if isinstance(name, str) else None

    async def _prepare(self, schema: Schema) -> None:
        named: dict[str, Any] = dict(self._named or {})
        await self._fetch(schema.references, named, set())
        self._named = named

    async def _fetch(
        self, references: Sequence[SchemaReference], named: dict[str, Any], seen: set[str]
    ) -> None:
        """Parse the schemas ``references`` name (theirs first) into ``named``."""
        import fastavro

        for reference in references:
            key = f"{reference.subject}/{reference.version}"
            if key in seen:
                continue
            seen.add(key)
            registered = await self.registry.version(reference.subject, reference.version)
            await self._fetch(registered.schema.references, named, seen)
            try:
                fastavro.parse_schema(json.loads(registered.schema.schema_str), named_schemas=named)
            except Exception as exc:
                raise SerializationError(
                    f"the schema referenced as {reference.name!r} (subject "
                    f"{reference.subject!r}, version {reference.version}) is not a valid "
                    f"Avro schema: {exc}"
                ) from exc

    async def _schema_to_register(self) -> Schema:
        if not self._references:
            return await super()._schema_to_register()
        assert self._schema is not None
        schema = Schema(self._schema.schema_str, self.schema_type, self._references)
        if self._parsed is None:
            await self._prepare(schema)
            self._parsed, _ = self.parse(schema.schema_str)
        return schema

    def encode(self, parsed: Any, record: Any, out: io.BytesIO) -> None:
        if (
            not isinstance(record, Mapping)
            and isinstance(parsed, dict)
            and parsed.get("type") == "record"
        ):
            raise TypeError(
                f"a record ({parsed.get('name')}) is written from a dict, not a "
                f"{type(record).__qualname__}; give to_dict to turn your objects into dicts"
            )
        self._write(out, parsed, record)

    @classmethod
    def for_model(
        cls,
        registry: SchemaRegistryClient,
        model: type[Any],
        *,
        namespace: str | None = None,
        **kwargs: Any,
    ) -> AvroSerializer:
        """A serializer of ``model``'s instances (a Pydantic model class), with an Avro
        schema derived from its fields: a record named after the class (in ``namespace``,
        by default the model's module), fields in declaration order.

        ``int`` is ``long``, ``float`` ``double``, ``str`` ``string``, ``bool``
        ``boolean``, ``bytes`` ``bytes``; ``datetime`` is ``timestamp-micros`` (a naive one
        is taken as UTC), ``date`` ``date``, ``UUID`` a ``uuid`` string, ``Decimal`` a
        string; ``list[X]``, ``set[X]`` and ``tuple[X, ...]`` are arrays, ``dict[str, X]``
        maps, an ``Enum`` of strings an Avro enum, a nested model a nested record; ``X |
        None`` is ``["null", X]``. A default that Avro can hold (a literal, None, an empty
        list or dict) becomes the field's default. Each instance is dumped
        (``model_dump()``) and written; dicts that fit the schema are taken too.
        ``kwargs`` as for the constructor.

        Raises:
            ConfigurationError: a field of a type with no Avro form (say, a union of two
                types other than None), or ``model`` is not a Pydantic model class.
        """
        if not hasattr(model, "model_fields") or not hasattr(model, "model_dump"):
            raise ConfigurationError(f"for_model takes a Pydantic model class, not {model!r}")
        schema = _ModelSchemas().record(model, namespace)

        def dump(value: Any) -> Any:
            data = value.model_dump() if isinstance(value, model) else value
            return _naive_as_utc(data)

        return cls(registry, schema, to_dict=dump, **kwargs)


def _full_name(document: Any) -> str | None:
    """The full name of a named Avro schema given as JSON data; None when unnamed."""
    if not isinstance(document, dict) or not isinstance(document.get("name"), str):
        return None
    name: str = document["name"]
    space = document.get("namespace")
    return f"{space}.{name}" if isinstance(space, str) and space and "." not in name else name


# ---- Pydantic models as Avro schemas --------------------------------------------------------

_PRIMITIVES: dict[type[Any], Any] = {
    bool: "boolean",
    int: "long",
    float: "double",
    str: "string",
    bytes: "bytes",
    datetime.datetime: {"type": "long", "logicalType": "timestamp-micros"},
    datetime.date: {"type": "int", "logicalType": "date"},
    uuid.UUID: {"type": "string", "logicalType": "uuid"},
    decimal.Decimal: "string",
}


class _ModelSchemas:
    """Avro schemas of Pydantic models; a named type (record, enum) is defined once and
    named wherever it appears again, as Avro requires."""

    def __init__(self) -> None:
        self._defined: set[str] = set()

    def record(self, model: type[Any], namespace: str | None) -> Any:
        space = namespace if namespace is not None else model.__module__
        full = f"{space}.{model.__name__}" if space else model.__name__
        if full in self._defined:
            return full
        self._defined.add(full)
        fields = []
        for name, info in model.model_fields.items():
            avro = self.of(info.annotation, space, f"{model.__name__}.{name}")
            field: dict[str, Any] = {"name": info.alias or name, "type": avro}
            if not info.is_required():
                default = info.get_default(call_default_factory=True)
                if _avro_default(default, avro):
                    field["default"] = _json_default(default)
            fields.append(field)
        record: dict[str, Any] = {"type": "record", "name": model.__name__, "fields": fields}
        if space:
            record["namespace"] = space
        return record

    def of(self, annotation: Any, space: str, where: str) -> Any:
        origin = typing.get_origin(annotation)
        arguments = typing.get_args(annotation)
        if origin is typing.Annotated:
            return self.of(arguments[0], space, where)
        if origin in (typing.Union, types.UnionType):
            others = [a for a in arguments if a is not type(None)]
            if len(others) == 1 and len(arguments) == 2:
                inner = self.of(others[0], space, where)
                return ["null", *(inner if isinstance(inner, list) else [inner])]
            raise ConfigurationError(
                f"field {where}: {annotation} has no Avro form here (a union other than X | None)"
            )
        if origin in (list, set, frozenset) or (
            origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis
        ):
            return {"type": "array", "items": self.of(arguments[0], space, where)}
        if origin is dict:
            if arguments[0] is not str:
                raise ConfigurationError(
                    f"field {where}: Avro maps have str keys, not {annotation}"
                )
            return {"type": "map", "values": self.of(arguments[1], space, where)}
        if isinstance(annotation, type):
            if issubclass(annotation, enum.Enum):
                full = f"{space}.{annotation.__name__}" if space else annotation.__name__
                if full in self._defined:
                    return full
                symbols = [member.value for member in annotation]
                if not all(isinstance(s, str) for s in symbols):
                    raise ConfigurationError(
                        f"field {where}: an Avro enum's symbols are strings; "
                        f"{annotation.__name__} has others"
                    )
                self._defined.add(full)
                return {"type": "enum", "name": annotation.__name__, "symbols": symbols}
            if hasattr(annotation, "model_fields"):
                return self.record(annotation, space)
            for kind, avro in _PRIMITIVES.items():
                if annotation is kind:
                    return avro
            if issubclass(annotation, datetime.datetime):
                return _PRIMITIVES[datetime.datetime]
        raise ConfigurationError(f"field {where}: {annotation} has no Avro form here")


def _avro_default(default: Any, avro: Any) -> bool:
    """Whether ``default`` can be the default of a field of type ``avro`` (for a union, a
    default of its first branch: None for ``["null", X]``)."""
    if isinstance(avro, list):
        return default is None
    if isinstance(default, enum.Enum):
        return isinstance(avro, dict) and avro.get("type") == "enum"
    if isinstance(default, bool):
        return bool(avro == "boolean")
    if isinstance(default, int):
        return bool(avro == "long")
    if isinstance(default, float):
        return bool(avro == "double")
    if isinstance(default, str):
        return bool(avro == "string")
    if isinstance(default, list | dict):
        return not default and isinstance(avro, dict) and avro.get("type") in ("array", "map")
    return False


def _json_default(default: Any) -> Any:
    return default.value if isinstance(default, enum.Enum) else default


def _naive_as_utc(data: Any) -> Any:
    """``data`` (a model's dump) with naive datetimes as UTC ones, nested ones too; Enum
    members as their values."""
    if isinstance(data, dict):
        return {key: _naive_as_utc(value) for key, value in data.items()}
    if isinstance(data, list | tuple | set | frozenset):
        return [_naive_as_utc(value) for value in data]
    if isinstance(data, datetime.datetime) and data.tzinfo is None:
        return data.replace(tzinfo=datetime.timezone.utc)
    if isinstance(data, enum.Enum):
        return data.value
    if isinstance(data, uuid.UUID | decimal.Decimal):
        return str(data)
    return data
