"""Struct columns as Avro or JSON Schema records in the Schema Registry wire format.

With ``value.format`` (or ``key.format``) set to ``avro`` or ``json``, the column may be of
any Spark type the format can describe (a struct, usually). The schema is derived from the
column's type on the driver, by Spark's own rules for Avro (``to_avro``'s
``SchemaConverters.toAvroType``: a record named ``topLevelRecord``, nullable fields as
``[type, "null"]`` unions, timestamps as ``timestamp-micros``, decimals as ``fixed``), or as
the JSON Schema of what ``to_json`` writes. On the executors each producer registers it
under the record's subject on first use and keeps the id; a Python worker keeps one registry
client per set of registry options, so its tasks share the ids it learned.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aioproducer.config import names_a_secret
from aioproducer.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

    from aioproducer.schema_registry import RegistrySerializer, SchemaRegistryClient

__all__ = [
    "FORMATS",
    "OPTIONS",
    "RegistryEncoding",
    "arrow_without_timestamps",
    "encoding_options",
    "is_registry_option",
    "masked",
    "row_converter_for",
]

FORMATS = ("avro", "json")
"""The ``key.format`` and ``value.format`` that write the Schema Registry wire format."""

# Spark's default top-level record name (to_avro, the Avro data source's recordName).
_TOP_LEVEL = "topLevelRecord"
# The serializers' options, by confluent-kafka's and the Java serializers' names.
_SERDE_OPTIONS = (
    "auto.register.schemas",
    "use.latest.version",
    "normalize.schemas",
    "subject.name.strategy",
)
#: The options of the Schema Registry encoding, for the hint that names a misspelt one.
OPTIONS = (
    "key.format",
    "value.format",
    "key.schema",
    "value.schema",
    "schema.registry.url",
    "schema.registry.basic.auth.user.info",
    "schema.registry.bearer.auth.token",
    "schema.registry.ssl.ca.location",
    *_SERDE_OPTIONS,
)
# Registry client options that need not carry the schema.registry. prefix (the Java
# serializers' names).
_BARE_REGISTRY_OPTIONS = (
    "basic.auth.user.info",
    "basic.auth.credentials.source",
    "bearer.auth.credentials.source",
    "bearer.auth.token",
)


@dataclass(frozen=True)
class _Column:
    """One column's encoding: the format, the schema's text, and the Spark type (as JSON)."""

    format: str
    schema: str
    spark_type: str
    derived: bool


@dataclass(frozen=True)
class RegistryEncoding:
    """How the key and value columns become Schema Registry records: plain data, pickled to
    the executors and part of the producer cache's key.

    Attributes:
        registry: the registry client's options (``schema.registry.url``, ...).
        serde: the serializers' options (``auto.register.schemas``, ...).
        key: the key column's encoding, or None to send it as bytes.
        value: the value column's encoding, or None to send it as bytes.
    """

    registry: tuple[tuple[str, str], ...]
    serde: tuple[tuple[str, str], ...]
    key: _Column | None
    value: _Column | None

    def __repr__(self) -> str:
        registry = masked(dict(self.registry))
        return f"RegistryEncoding(registry={registry!r}, key={self.key}, value={self.value})"

    def serializers(self, producer: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``key_serializer`` and ``value_serializer`` for a producer, sharing this worker's
        registry client for these registry options. ``producer``'s options (Java or
        snake_case names) lend an ``https`` registry their TLS settings when the registry
        options have none (see ``SchemaRegistryClient.from_config``)."""
        tls = tuple(
            sorted(
                (name, value)
                for name, value in (producer or {}).items()
                if name.startswith(("ssl", "security"))
            )
        )
        client = _client(self.registry, tls=tls)
        serde = dict(self.serde)
        made: dict[str, RegistrySerializer] = {}
        for name, column in (("key", self.key), ("value", self.value)):
            if column is not None:
                made[f"{name}_serializer"] = _serializer(client, column, name == "key", serde)
        return made


def encoding_options(
    options: Mapping[str, str], key_type: DataType | None, value_type: DataType
) -> RegistryEncoding | None:
    """The encoding the options ask for (lower-cased names, without ``kafka.``), given the
    key and value columns' types; None when neither ``key.format`` nor ``value.format`` is
    set.

    Raises:
        ConfigurationError: an unknown format, a registry option without a format, no
            ``schema.registry.url``, a type the format cannot describe, or a schema option
            that is not a valid schema.
    """
    formats = {name: options.get(f"{name}.format") for name in ("key", "value")}
    registry = tuple(
        sorted(
            (name, value)
            for name, value in options.items()
            if name.startswith("schema.registry.") or name in _BARE_REGISTRY_OPTIONS
        )
    )
    serde = tuple(sorted((n, v) for n, v in options.items() if n in _SERDE_OPTIONS))
    schemas = {name: options.get(f"{name}.schema") for name in ("key", "value")}
    if not any(formats.values()):
        stray = [n for n, _ in registry + serde] + [f"{n}.schema" for n, s in schemas.items() if s]
        if stray:
            raise ConfigurationError(
                f"option {stray[0]!r} applies to Schema Registry records only: set option "
                "'value.format' (or 'key.format') to 'avro' or 'json'"
            )
        return None
    for name, chosen in formats.items():
        if chosen is not None and chosen.strip().lower() not in FORMATS:
            raise ConfigurationError(f"option '{name}.format' is {chosen!r}: use 'avro' or 'json'")
    if not any(name == "schema.registry.url" for name, _ in registry):
        # An option misspelt (schema.registry.ur) is the likelier fault: named first.
        _client((*registry, ("schema.registry.url", "http://registry")), check_only=True)
        raise ConfigurationError(
            "option 'schema.registry.url' is required with 'key.format' or 'value.format'"
        )
    _client(registry, check_only=True)
    columns: dict[str, _Column | None] = {}
    for name, data_type in (("key", key_type), ("value", value_type)):
        chosen = formats[name]
        if chosen is None:
            if schemas[name]:
                raise ConfigurationError(
                    f"option '{name}.schema' needs option '{name}.format' ('avro' or 'json')"
                )
            columns[name] = None
            continue
        chosen = chosen.strip().lower()
        if data_type is None:
            raise ConfigurationError(
                f"option '{name}.format' is set, but the DataFrame has no {name!r} column"
            )
        given = schemas[name]
        try:
            schema = given or json.dumps(
                avro_schema(data_type) if chosen == "avro" else json_schema(data_type)
            )
        except TypeError as exc:
            raise ConfigurationError(f"column {name!r}: {exc}") from None
        column = _Column(chosen, schema, data_type.json(), derived=not given)
        _serializer(None, column, name == "key", dict(serde))  # checks schema and options
        columns[name] = column
    return RegistryEncoding(registry, serde, columns["key"], columns["value"])


def is_registry_option(name: str) -> bool:
    """Whether ``name`` (lower-cased) is an option of the Schema Registry encoding."""
    return (
        name in ("key.format", "value.format", "key.schema", "value.schema")
        or name.startswith("schema.registry.")
        or name in _BARE_REGISTRY_OPTIONS
        or name in _SERDE_OPTIONS
    )


def masked(options: Mapping[str, str]) -> dict[str, str]:
    """Registry options fit to show: credentials (``basic.auth.user.info``, tokens, passwords,
    a URL's ``user:password@``) as ``***``."""
    shown = {}
    for name, value in options.items():
        bare = name.removeprefix("schema.registry.")
        if bare in ("basic.auth.user.info", "bearer.auth.token") or names_a_secret(bare):
            value = "***"
        elif bare == "url" and "@" in value:
            value = ",".join(_without_user(url) for url in value.split(","))
        shown[name] = value
    return shown


def _without_user(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


# ---- Spark types as schemas ----------------------------------------------------------------


# Spark's string types: strings in Avro and JSON, and the only keys their maps have.
_STRING_TYPES = ("StringType", "CharType", "VarcharType")


def _type_name(data_type: DataType) -> str:
    return type(data_type).__name__


def _min_bytes_for_precision(precision: int) -> int:
    """The bytes a two's complement decimal of ``precision`` digits needs (Spark's rule)."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def avro_schema(
    data_type: DataType,
    nullable: bool = False,
    record_name: str = _TOP_LEVEL,
    namespace: str = "",
) -> Any:
    """The Avro schema Spark's ``to_avro`` writes ``data_type`` with (as JSON data).

    Raises:
        TypeError: a type Avro cannot describe (a map whose keys are not strings, an
            interval).
    """
    name = _type_name(data_type)
    schema: Any
    if name == "BooleanType":
        schema = "boolean"
    elif name in ("ByteType", "ShortType", "IntegerType"):
        schema = "int"
    elif name == "LongType":
        schema = "long"
    elif name == "FloatType":
        schema = "float"
    elif name == "DoubleType":
        schema = "double"
    elif name in _STRING_TYPES:
        schema = "string"
    elif name == "BinaryType":
        schema = "bytes"
    elif name == "NullType":
        return "null"
    elif name == "DateType":
        schema = {"type": "int", "logicalType": "date"}
    elif name == "TimestampType":
        schema = {"type": "long", "logicalType": "timestamp-micros"}
    elif name == "TimestampNTZType":
        schema = {"type": "long", "logicalType": "local-timestamp-micros"}
    elif name == "DecimalType":
        precision, scale = data_type.precision, data_type.scale  # type: ignore[attr-defined]
        fixed = f"{record_name}.fixed" if not namespace else f"{namespace}.{record_name}.fixed"
        schema = {
            "type": "fixed",
            "name": fixed,
            "size": _min_bytes_for_precision(precision),
            "logicalType": "decimal",
            "precision": precision,
            "scale": scale,
        }
    elif name == "ArrayType":
        schema = {
            "type": "array",
            "items": avro_schema(
                data_type.elementType,  # type: ignore[attr-defined]
                data_type.containsNull,  # type: ignore[attr-defined]
                record_name,
                namespace,
            ),
        }
    elif name == "MapType":
        if _type_name(data_type.keyType) not in _STRING_TYPES:  # type: ignore[attr-defined]
            raise TypeError(
                f"Avro maps have string keys; {data_type.simpleString()} cannot be written"
            )
        schema = {
            "type": "map",
            "values": avro_schema(
                data_type.valueType,  # type: ignore[attr-defined]
                data_type.valueContainsNull,  # type: ignore[attr-defined]
                record_name,
                namespace,
            ),
        }
    elif name == "StructType":
        child = f"{namespace}.{record_name}" if namespace else record_name
        schema = {"type": "record", "name": record_name}
        if namespace:
            schema["namespace"] = namespace
        schema["fields"] = [
            {"name": f.name, "type": avro_schema(f.dataType, f.nullable, f.name, child)}
            for f in data_type.fields  # type: ignore[attr-defined]
        ]
    else:
        raise TypeError(f"{data_type.simpleString()} has no Avro type here")
    return [schema, "null"] if nullable else schema


def json_schema(data_type: DataType, nullable: bool = False, title: str | None = _TOP_LEVEL) -> Any:
    """The JSON Schema of what Spark's ``to_json`` writes for ``data_type``, as JSON data:
    structs as objects (non-nullable fields required), binary as base64 strings, dates and
    timestamps as ISO 8601 strings.

    Raises:
        TypeError: a type JSON cannot describe (a map whose keys are not strings).
    """
    name = _type_name(data_type)
    schema: dict[str, Any]
    if name == "BooleanType":
        schema = {"type": "boolean"}
    elif name in ("ByteType", "ShortType", "IntegerType", "LongType"):
        schema = {"type": "integer"}
    elif name in ("FloatType", "DoubleType", "DecimalType"):
        schema = {"type": "number"}
    elif name in _STRING_TYPES:
        schema = {"type": "string"}
    elif name == "BinaryType":
        schema = {"type": "string", "contentEncoding": "base64"}
    elif name == "NullType":
        return {"type": "null"}
    elif name == "DateType":
        schema = {"type": "string", "format": "date"}
    elif name == "TimestampType":
        schema = {"type": "string", "format": "date-time"}
    elif name == "TimestampNTZType":
        schema = {"type": "string"}
    elif name == "ArrayType":
        schema = {
            "type": "array",
            "items": json_schema(data_type.elementType, data_type.containsNull, None),  # type: ignore[attr-defined]
        }
    elif name == "MapType":
        if _type_name(data_type.keyType) not in _STRING_TYPES:  # type: ignore[attr-defined]
            raise TypeError(
                f"JSON objects have string keys; {data_type.simpleString()} cannot be written"
            )
        schema = {
            "type": "object",
            "additionalProperties": json_schema(
                data_type.valueType,  # type: ignore[attr-defined]
                data_type.valueContainsNull,  # type: ignore[attr-defined]
                None,
            ),
        }
    elif name == "StructType":
        fields = data_type.fields  # type: ignore[attr-defined]
        schema = {"type": "object"}
        if title is not None:
            schema["title"] = title
        schema["properties"] = {f.name: json_schema(f.dataType, f.nullable, None) for f in fields}
        required = [f.name for f in fields if not f.nullable]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
    else:
        raise TypeError(f"{data_type.simpleString()} has no JSON Schema type here")
    return {"anyOf": [schema, {"type": "null"}]} if nullable else schema


# ---- column values as what the serializers take ---------------------------------------------

_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)

_Convert = Callable[[Any], Any]


def _micros(moment: datetime.datetime, local: bool) -> int:
    """Epoch microseconds of a timestamp as a PySpark Row hands it over: aware, naive in the
    worker's local time (a ``timestamp``), or naive wall time (a ``timestamp_ntz``). Arrow
    batches give epoch microseconds already (see :func:`arrow_without_timestamps`)."""
    if moment.tzinfo is not None:
        return (moment - _EPOCH_UTC) // _MICROSECOND
    if local:
        return (moment.astimezone(datetime.timezone.utc) - _EPOCH_UTC) // _MICROSECOND
    return (moment - _EPOCH) // _MICROSECOND


def converter(data_type: DataType, fmt: str) -> _Convert | None:
    """What turns a column value, as an Arrow batch's ``to_pylist`` gives it (timestamps as
    epoch microseconds, see :func:`arrow_without_timestamps`; maps as lists of pairs), into
    what the ``fmt`` serializer takes; None when the value goes as it is. The Row path
    brings its values to that form first (:func:`row_converter`)."""
    name = _type_name(data_type)
    if fmt == "json":
        if name == "TimestampType":
            return lambda v: None if v is None else _iso_utc(v)
        if name == "TimestampNTZType":
            return lambda v: None if v is None else _iso_wall(v)
        if name == "BinaryType":
            return lambda v: None if v is None else base64.b64encode(v).decode("ascii")
        if name == "DateType":
            return lambda v: None if v is None else v.isoformat()
        if name == "DecimalType":
            return lambda v: None if v is None else _json_number(v)
    if name == "MapType":
        value = converter(data_type.valueType, fmt)  # type: ignore[attr-defined]

        def convert_map(v: Any) -> Any:
            if v is None:
                return None
            pairs = v.items() if isinstance(v, dict) else v  # Arrow: a list of pairs
            return {k: (x if value is None else value(x)) for k, x in pairs}

        return convert_map
    return _nested(data_type, lambda t: converter(t, fmt))


def row_converter(data_type: DataType) -> _Convert | None:
    """What brings a column value from a PySpark Row (``asDict(recursive=True)``: maps as
    dicts, timestamps as naive datetimes in the worker's local time, or wall time for
    ``timestamp_ntz``) to the form of the Arrow path (timestamps as epoch microseconds);
    None when they already agree."""
    name = _type_name(data_type)
    if name in ("TimestampType", "TimestampNTZType"):
        local = name == "TimestampType"
        return lambda v: None if v is None else _micros(v, local)
    if name == "MapType":
        value = row_converter(data_type.valueType)  # type: ignore[attr-defined]
        if value is None:
            return None
        return lambda v: None if v is None else {k: value(x) for k, x in v.items()}
    return _nested(data_type, row_converter)


@functools.lru_cache(maxsize=64)
def row_converter_for(spark_type: str) -> _Convert | None:
    """:func:`row_converter` of a Spark type given as JSON (``DataType.json()``)."""
    from pyspark.sql.types import _parse_datatype_json_string

    return row_converter(_parse_datatype_json_string(spark_type))


def _nested(data_type: DataType, inner: Callable[[DataType], _Convert | None]) -> _Convert | None:
    """The converter of an array or a struct from its elements' or fields' (``inner``)."""
    name = _type_name(data_type)
    if name == "ArrayType":
        item = inner(data_type.elementType)  # type: ignore[attr-defined]
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    if name == "StructType":
        fields = [(f.name, inner(f.dataType)) for f in data_type.fields]  # type: ignore[attr-defined]
        changed = [(n, c) for n, c in fields if c is not None]
        if not changed:
            return None

        def convert_struct(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for n, c in changed:
                out[n] = c(out[n])
            return out

        return convert_struct
    return None


def _iso_utc(micros: int) -> str:
    return _iso_wall(micros) + "Z"


def _iso_wall(micros: int) -> str:
    return (_EPOCH + micros * _MICROSECOND).isoformat(timespec="microseconds")


def arrow_without_timestamps(arrow_type: Any) -> Any:
    """``arrow_type`` with every timestamp (nested ones too) as int64: a column cast to it
    gives epoch microseconds (Spark's timestamps are microseconds), and ``to_pylist`` makes
    no datetime objects, which cost ten times what the rest of a row does."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    types = pa.types
    if types.is_timestamp(arrow_type):
        return pa.int64()
    if types.is_struct(arrow_type):
        return pa.struct(
            [pa.field(f.name, arrow_without_timestamps(f.type), f.nullable) for f in arrow_type]
        )
    if types.is_list(arrow_type) or types.is_large_list(arrow_type):
        item = arrow_type.value_field
        field = pa.field(item.name, arrow_without_timestamps(item.type), item.nullable)
        return pa.large_list(field) if types.is_large_list(arrow_type) else pa.list_(field)
    if types.is_map(arrow_type):
        item = arrow_type.item_field
        return pa.map_(
            arrow_type.key_type,
            pa.field(item.name, arrow_without_timestamps(item.type), item.nullable),
        )
    return arrow_type


def _json_number(value: decimal.Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


# ---- the serializers and this worker's registry clients --------------------------------------

_clients: dict[
    tuple[tuple[tuple[str, str], ...], tuple[tuple[str, Any], ...]], SchemaRegistryClient
] = {}


def _client(
    registry: tuple[tuple[str, str], ...],
    check_only: bool = False,
    tls: tuple[tuple[str, Any], ...] = (),
) -> SchemaRegistryClient:
    """This process's registry client for ``registry`` and the producer's TLS options
    ``tls`` (built on first use: its caches of ids are what the worker's tasks share); with
    ``check_only``, a throwaway one, to check the options on the driver."""
    from aioproducer.schema_registry import SchemaRegistryClient

    key = (registry, tls)
    try:
        cached = _clients.get(key) if not check_only else None
    except TypeError:  # an option given as a Python object (an SSLContext): not cached
        cached, check_only = None, True
    if cached is not None:
        return cached
    try:
        client = SchemaRegistryClient.from_config(
            dict(registry), tls_from=dict(tls) if tls else None
        )
    except ConfigurationError as exc:
        raise ConfigurationError(str(exc)) from None
    if not check_only:
        _clients[key] = client
    return client


def _flag(serde: Mapping[str, str], name: str) -> None:
    raw = serde.get(name)
    if raw is not None and raw.strip().lower() not in ("true", "false"):
        raise ConfigurationError(f"option {name!r} is {raw!r}: use 'true' or 'false'")


def _serializer(
    client: SchemaRegistryClient | None, column: _Column, is_key: bool, serde: Mapping[str, str]
) -> RegistrySerializer:
    """The serializer for ``column``; with no client (on the driver), built against a
    throwaway registry to check the schema and options."""
    from pyspark.sql.types import _parse_datatype_json_string

    from aioproducer.schema_registry import (
        AvroSerializer,
        InMemorySchemaRegistry,
        JsonSchemaSerializer,
    )

    for name in ("auto.register.schemas", "use.latest.version", "normalize.schemas"):
        _flag(serde, name)
    conf: dict[str, Any] = {
        name: value if name == "subject.name.strategy" else value.strip().lower() == "true"
        for name, value in serde.items()
    }
    registry = client if client is not None else InMemorySchemaRegistry()
    convert = converter(_parse_datatype_json_string(column.spark_type), column.format)
    use_latest = bool(conf.get("use.latest.version", False))
    # With use.latest.version the registry's schema is written; the derived one only
    # describes the column (a given one must not be passed along with it).
    schema = None if use_latest and column.derived else column.schema
    if use_latest and not column.derived:
        conf.setdefault("auto.register.schemas", False)
    what = "key" if is_key else "value"
    try:
        if column.format == "avro":
            return AvroSerializer(registry, schema, is_key=is_key, to_dict=convert, conf=conf)
        # A derived schema holds every row of the column by construction: validating each
        # record against it would only cost time. A given schema is checked.
        return JsonSchemaSerializer(
            registry,
            schema,
            is_key=is_key,
            to_dict=convert,
            conf=conf,
            validate=not column.derived,
        )
    except ConfigurationError as exc:
        raise ConfigurationError(f"option '{what}.format' {column.format!r}: {exc}") from None
