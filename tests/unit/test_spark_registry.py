"""The Spark sink's Schema Registry encoding without Spark running: schemas derived from
column types by Spark's rules, values brought to what the serializers take, and the options
checked on the driver."""

from __future__ import annotations

import datetime
import decimal
import io
import json

import pytest

pytest.importorskip("pyspark")
fastavro = pytest.importorskip("fastavro")

from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from aioproducer.errors import ConfigurationError  # noqa: E402
from aioproducer.integrations.spark.registry import (  # noqa: E402
    avro_schema,
    converter,
    encoding_options,
    json_schema,
    masked,
    row_converter,
)

_UTC = datetime.timezone.utc


def test_decimals_take_the_bytes_spark_gives_them_and_nested_names_follow_the_fields() -> None:
    inner = StructType([StructField("amount", DecimalType(38, 10), False)])
    outer = StructType(
        [StructField("price", DecimalType(10, 2)), StructField("line", inner, False)]
    )
    assert avro_schema(outer) == {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [
            {
                "name": "price",
                "type": [
                    {
                        "type": "fixed",
                        "name": "topLevelRecord.price.fixed",
                        "size": 5,
                        "logicalType": "decimal",
                        "precision": 10,
                        "scale": 2,
                    },
                    "null",
                ],
            },
            {
                "name": "line",
                "type": {
                    "type": "record",
                    "name": "line",
                    "namespace": "topLevelRecord",
                    "fields": [
                        {
                            "name": "amount",
                            "type": {
                                "type": "fixed",
                                "name": "topLevelRecord.line.amount.fixed",
                                "size": 16,
                                "logicalType": "decimal",
                                "precision": 38,
                                "scale": 10,
                            },
                        }
                    ],
                },
            },
        ],
    }
    fastavro.parse_schema(avro_schema(outer))  # a valid Avro schema


def test_types_without_an_avro_or_json_form_are_refused() -> None:
    with pytest.raises(TypeError, match="Avro maps have string keys"):
        avro_schema(MapType(IntegerType(), StringType()))
    with pytest.raises(TypeError, match="JSON objects have string keys"):
        json_schema(MapType(LongType(), StringType()))


def test_arrow_values_and_row_values_encode_alike() -> None:
    kind = StructType(
        [
            StructField("at", TimestampType()),
            StructField("wall", TimestampNTZType()),
            StructField("counts", MapType(StringType(), TimestampType())),
            StructField("blob", BinaryType()),
            StructField("tags", ArrayType(TimestampType())),
        ]
    )
    moment = datetime.datetime(2024, 3, 1, 12, 0, 0, 123456, tzinfo=_UTC)
    micros = (moment - datetime.datetime(1970, 1, 1, tzinfo=_UTC)) // datetime.timedelta(
        microseconds=1
    )
    # The Arrow path: timestamps as epoch microseconds, maps as pairs.
    arrow = {"at": micros, "wall": micros, "counts": [("a", micros)], "blob": b"\x00\xff",
             "tags": [micros, None]}  # fmt: skip
    # The Row path: naive local times (naive wall time for timestamp_ntz), maps as dicts.
    local = moment.astimezone().replace(tzinfo=None)
    row = {"at": local, "wall": moment.replace(tzinfo=None), "counts": {"a": local},
           "blob": bytearray(b"\x00\xff"), "tags": [local, None]}  # fmt: skip
    brought = row_converter(kind)
    assert brought is not None
    assert brought(row) == {**arrow, "counts": {"a": micros}, "blob": bytearray(b"\x00\xff")}

    schema = fastavro.parse_schema(avro_schema(kind))
    to_avro = converter(kind, "avro")
    assert to_avro is not None
    encoded = []
    for value in (arrow, brought(row)):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, to_avro(value))
        encoded.append(out.getvalue())
    assert encoded[0] == encoded[1]
    decoded = fastavro.schemaless_reader(io.BytesIO(encoded[0]), schema)
    assert decoded["at"] == moment and decoded["counts"] == {"a": moment}

    to_json = converter(kind, "json")
    assert to_json is not None
    assert to_json(arrow) == {
        "at": "2024-03-01T12:00:00.123456Z",
        "wall": "2024-03-01T12:00:00.123456",
        "counts": {"a": "2024-03-01T12:00:00.123456Z"},
        "blob": "AP8=",
        "tags": ["2024-03-01T12:00:00.123456Z", None],
    }
    assert to_json(brought(row)) == to_json(arrow)


def test_a_plain_struct_needs_no_conversion_on_the_arrow_path() -> None:
    kind = StructType([StructField("id", LongType()), StructField("at", TimestampType())])
    assert converter(kind, "avro") is None


def test_json_decimals_are_numbers() -> None:
    kind = StructType([StructField("price", DecimalType(10, 2))])
    to_json = converter(kind, "json")
    assert to_json is not None
    assert to_json({"price": decimal.Decimal("12.50")}) == {"price": 12.5}
    assert to_json({"price": decimal.Decimal("12.00")}) == {"price": 12}
    assert json_schema(kind)["properties"]["price"] == {
        "anyOf": [{"type": "number"}, {"type": "null"}]
    }


def test_options_are_checked_before_any_task() -> None:
    struct = StructType([StructField("id", LongType())])
    url = {"schema.registry.url": "http://registry:8081"}
    assert encoding_options({}, None, struct) is None
    with pytest.raises(ConfigurationError, match=r"'schema\.registry\.url' is required"):
        encoding_options({"value.format": "avro"}, None, struct)
    with pytest.raises(ConfigurationError, match="applies to Schema Registry records only"):
        encoding_options({"auto.register.schemas": "false"}, None, struct)
    with pytest.raises(ConfigurationError, match=r"'key\.format' is set, but the DataFrame has"):
        encoding_options({"key.format": "avro", **url}, None, struct)
    with pytest.raises(ConfigurationError, match=r"'value\.schema' needs option 'value\.format'"):
        encoding_options({"key.format": "avro", "value.schema": "{}", **url}, struct, struct)
    with pytest.raises(ConfigurationError, match="not a valid Avro schema"):
        encoding_options({"value.format": "avro", "value.schema": '{"type": "nope"}', **url},
                         None, struct)  # fmt: skip
    with pytest.raises(
        ConfigurationError, match=r"unknown Schema Registry options: schema\.registry\.colour"
    ):
        encoding_options({"value.format": "avro", "schema.registry.colour": "red", **url},
                         None, struct)  # fmt: skip
    # A misspelt URL option is named, rather than the URL said to be missing.
    with pytest.raises(ConfigurationError, match=r"options: schema\.registry\.ur$"):
        encoding_options({"value.format": "avro", "schema.registry.ur": "http://r"}, None, struct)
    encoding = encoding_options({"value.format": "json", **url}, None, struct)
    assert encoding is not None and encoding.key is None and encoding.value is not None
    assert json.loads(encoding.value.schema)["title"] == "topLevelRecord"


def test_credentials_never_show() -> None:
    shown = masked(
        {
            "schema.registry.url": "https://alice:s3cret@registry:8081/",
            "schema.registry.basic.auth.user.info": "alice:s3cret",
            "basic.auth.user.info": "alice:s3cret",
            "schema.registry.bearer.auth.token": "tok-9f8e",
            "schema.registry.ssl.key.password": "pw",
            "value.format": "avro",
        }
    )
    assert "s3cret" not in repr(shown) and "tok-9f8e" not in repr(shown)
    assert shown["schema.registry.url"] == "https://***@registry:8081/"
    assert shown["value.format"] == "avro"
    struct = StructType([StructField("id", LongType())])
    encoding = encoding_options(
        {"value.format": "avro", "schema.registry.url": "https://alice:s3cret@registry:8081"},
        None,
        struct,
    )
    assert "s3cret" not in repr(encoding)


def test_a_misspelt_sink_option_is_named_with_the_one_meant() -> None:
    from aioproducer.integrations.spark import SinkOptions

    with pytest.raises(
        ConfigurationError, match=r"value\.fromat \(did you mean 'value\.format'\?\)"
    ):
        SinkOptions.parse({"kafka.bootstrap.servers": "k:9092", "value.fromat": "avro"})
