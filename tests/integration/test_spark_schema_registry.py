"""Struct columns written by ``format("aioproducer")`` as Avro and JSON Schema records in the
Schema Registry wire format (a real Apicurio registry), read back by confluent-kafka's
AvroDeserializer and JSONDeserializer against the same registry, field for field; the
schemas registered are the ones Spark's own Avro conversion derives from the column types.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aioproducer.embedded import EmbeddedBroker
from aioproducer.schema_registry import SchemaRegistryClient
from aioproducer.schema_registry.wire import read_header
from tests.support.passes import compiled_pass_only
from tests.support.readback import read_back
from tests.support.spark import local_spark

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioproducer.integrations.spark import write_dataframe  # noqa: E402

TopicFactory = Callable[..., str]

# The derivation and conversions are plain Python, unit-tested in both passes; the Spark jobs
# (a session of their own) run once, in the compiled pass.
pytestmark = compiled_pass_only("Spark jobs with a Schema Registry, a minute and a half")
_UTC = datetime.timezone.utc

_ADDRESS = StructType([StructField("city", StringType()), StructField("zip", StringType())])
_ORDER = StructType(
    [
        StructField("id", LongType(), False),
        StructField("name", StringType()),
        StructField("score", DoubleType()),
        StructField("small", IntegerType()),
        StructField("active", BooleanType()),
        StructField("blob", BinaryType()),
        StructField("day", DateType()),
        StructField("at", TimestampType()),
        StructField("price", DecimalType(10, 2)),
        StructField("tags", ArrayType(StringType())),
        StructField("counts", MapType(StringType(), IntegerType())),
        StructField("address", _ADDRESS),
    ]
)
_SCHEMA = StructType([StructField("key", StringType()), StructField("value", _ORDER, False)])

# What Spark's SchemaConverters.toAvroType makes of _ORDER (to_avro's schema): a record named
# topLevelRecord, nullable fields as [type, "null"], nested names in the parent's namespace.
_EXPECTED_AVRO = {
    "type": "record",
    "name": "topLevelRecord",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["string", "null"]},
        {"name": "score", "type": ["double", "null"]},
        {"name": "small", "type": ["int", "null"]},
        {"name": "active", "type": ["boolean", "null"]},
        {"name": "blob", "type": ["bytes", "null"]},
        {"name": "day", "type": [{"type": "int", "logicalType": "date"}, "null"]},
        {"name": "at", "type": [{"type": "long", "logicalType": "timestamp-micros"}, "null"]},
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
        {"name": "tags", "type": [{"type": "array", "items": ["string", "null"]}, "null"]},
        {"name": "counts", "type": [{"type": "map", "values": ["int", "null"]}, "null"]},
        {
            "name": "address",
            "type": [
                {
                    "type": "record",
                    "name": "address",
                    "namespace": "topLevelRecord",
                    "fields": [
                        {"name": "city", "type": ["string", "null"]},
                        {"name": "zip", "type": ["string", "null"]},
                    ],
                },
                "null",
            ],
        },
    ],
}


def _order(i: int) -> dict[str, Any]:
    """Order i: every type, with nulls mixed in."""
    return {
        "id": i,
        "name": None if i % 7 == 3 else f"order-{i}",
        "score": i / 4,
        "small": None if i % 5 == 0 else -i,
        "active": i % 2 == 0,
        "blob": bytes([i % 256, 0, 255]),
        "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=i),
        "at": datetime.datetime(2024, 3, 1, 12, 0, tzinfo=_UTC)
        + datetime.timedelta(seconds=i, microseconds=i),
        "price": decimal.Decimal(i * 101) / 100,
        "tags": [f"t{i}", None] if i % 3 == 0 else [],
        "counts": {"a": i, "b": None} if i % 4 == 1 else {},
        "address": None if i % 6 == 5 else {"city": f"city-{i % 9}", "zip": None},
    }


_ROWS = 600


# Spark's own Avro functions (from_avro), to read what the sink wrote with Spark's decoder;
# 4.2.0 is the newest spark-avro on Maven Central (it runs under pyspark 4.3, whose jars
# include Avro itself).
_SPARK_AVRO = "org.apache.spark:spark-avro_2.13:4.2.0"


def _spark_avro_jar() -> Path:
    """spark-avro's jar, fetched with Maven into the user's cache on first use."""
    import shutil
    import subprocess

    target = Path.home() / ".cache" / "aioproducer" / "spark-avro-4.2.0"
    jar = target / "spark-avro_2.13-4.2.0.jar"
    if not jar.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            pytest.fail("Maven (mvn) is needed to fetch spark-avro", pytrace=False)
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [mvn, "-q", "dependency:copy", f"-Dartifact={_SPARK_AVRO}",
             f"-DoutputDirectory={target}"],
            check=True,
        )  # fmt: skip
    return jar


def _from_avro(payloads: list[bytes], schema: str, directory: Path) -> list[dict[str, Any]]:
    """``payloads`` decoded by Spark's ``from_avro`` with ``schema``, in a Spark process of
    its own (tests/support/spark_from_avro.py), whose JVM has spark-avro on its classpath."""
    import os
    import pickle
    import subprocess
    import sys

    (directory / "schema.avsc").write_text(schema)
    (directory / "payloads.pickle").write_bytes(pickle.dumps(payloads))
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.spark_from_avro", str(_spark_avro_jar()),
         str(directory / "schema.avsc"), str(directory / "payloads.pickle"),
         str(directory / "decoded.pickle")],
        env={**os.environ, "PYTHONPATH": path, "PYSPARK_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    decoded: list[dict[str, Any]] = pickle.loads((directory / "decoded.pickle").read_bytes())
    return decoded


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_spark("aioproducer-schema-registry") as session:
        from aioproducer.integrations.spark import KafkaDataSource

        session.dataSource.register(KafkaDataSource)
        yield session


def _frame(spark: Any) -> Any:
    rows = [(f"k{i}", _order(i)) for i in range(_ROWS)]
    return spark.createDataFrame(rows, _SCHEMA).repartition(3)


def _save(frame: Any, bootstrap: str, topic: str, **options: str) -> None:
    writer = frame.write.format("aioproducer").mode("append")
    for name, value in {"kafka.bootstrap.servers": bootstrap, "topic": topic, **options}.items():
        writer = writer.option(name, value)
    writer.save()


def _values(url: str, topic: str, values: list[bytes | None], fmt: str) -> list[Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = ConfluentClient({"url": url})
    deserializer: Any
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        deserializer = AvroDeserializer(client)
    else:
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        deserializer = JSONDeserializer(None, schema_registry_client=client)
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(value, context) for value in values]


def _latest_schema(url: str, subject: str) -> tuple[int, str]:
    async def fetch() -> tuple[int, str]:
        client = SchemaRegistryClient(url)
        try:
            latest = await client.latest_version(subject)
            return latest.version, latest.schema.schema_str
        finally:
            await client.close()

    return asyncio.run(fetch())


def _as_row(order: dict[str, Any]) -> dict[str, Any]:
    """An order as PySpark gives it back: timestamps as naive local times."""
    return {**order, "at": order["at"].astimezone().replace(tzinfo=None)}


def _as_json(order: dict[str, Any]) -> dict[str, Any]:
    """What the JSON records hold for an order: to_json's spelling of each field."""
    import base64

    at = order["at"].astimezone(_UTC).replace(tzinfo=None)
    price: decimal.Decimal = order["price"]
    return {
        **order,
        "blob": base64.b64encode(order["blob"]).decode(),
        "day": order["day"].isoformat(),
        "at": at.isoformat(timespec="microseconds") + "Z",
        "price": int(price) if price == price.to_integral_value() else float(price),
    }


def test_struct_values_as_avro_are_read_back_by_confluent_kafka_field_for_field(
    spark: Any,
    tansu: EmbeddedBroker,
    new_topic: TopicFactory,
    schema_registry: Any,
    tmp_path: Path,
) -> None:
    import json

    topic = new_topic(tansu, partitions=3)
    options = {"value.format": "avro", "schema.registry.url": schema_registry.url}
    _save(_frame(spark), tansu.bootstrap_servers, topic, **options)
    records = read_back(tansu.bootstrap_servers, topic, expected=_ROWS, extra_wait=0.5)
    assert len(records) == _ROWS
    decoded = _values(schema_registry.url, topic, [r.value for r in records], "avro")
    by_key = {r.key: v for r, v in zip(records, decoded, strict=True)}
    assert by_key == {f"k{i}".encode(): _order(i) for i in range(_ROWS)}
    # Every record carries the id of the one schema registered, Spark's derivation of it.
    ids = {read_header(r.value)[0] for r in records if r.value is not None}
    version, text = _latest_schema(schema_registry.url, f"{topic}-value")
    assert json.loads(text) == _EXPECTED_AVRO
    assert len(ids) == 1 and version == 1

    # Spark's own decoder reads the payload after the 5-byte header with the schema the
    # registry holds, into the column's type, row for row.
    decoded_by_spark = _from_avro(
        [read_header(r.value)[1] for r in records if r.value is not None], text, tmp_path
    )
    as_rows = sorted(decoded_by_spark, key=lambda order: order["id"])
    assert as_rows == [_as_row(_order(i)) for i in range(_ROWS)]

    # A second job with the same columns writes with the same schema: no new version.
    _save(_frame(spark).limit(10), tansu.bootstrap_servers, topic, **options)
    assert _latest_schema(schema_registry.url, f"{topic}-value")[0] == 1


def test_struct_keys_and_values_as_json_schema_with_write_dataframe(
    spark: Any, tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    """The Row path (foreachPartition) and JSON Schema, keys as well as values."""
    import json

    import jsonschema

    topic = new_topic(tansu, partitions=2)
    frame = _frame(spark).selectExpr("named_struct('k', key, 'n', length(key)) AS key", "value")
    written = write_dataframe(
        frame,
        topic,
        {"bootstrap.servers": tansu.bootstrap_servers},
        schema_registry={
            "key.format": "json",
            "value.format": "JSON",
            "schema.registry.url": schema_registry.url,
        },
    )
    assert written == _ROWS
    records = read_back(tansu.bootstrap_servers, topic, expected=_ROWS, extra_wait=0.5)
    assert len(records) == _ROWS
    decoded = _values(schema_registry.url, topic, [r.value for r in records], "json")
    got = {}
    for record, value in zip(records, decoded, strict=True):
        _, key = read_header(record.key or b"")
        got[json.loads(key)["k"]] = value
    assert got == {f"k{i}": _as_json(_order(i)) for i in range(_ROWS)}
    # The registered schemas describe what was written (a validator agrees, and refuses a
    # record without the required id).
    _, text = _latest_schema(schema_registry.url, f"{topic}-value")
    validator = jsonschema.Draft7Validator(json.loads(text))
    assert all(validator.is_valid(value) for value in decoded)
    assert not validator.is_valid({"name": "no id"})
    _, key_text = _latest_schema(schema_registry.url, f"{topic}-key")
    assert json.loads(key_text) == {
        "type": "object",
        "title": "topLevelRecord",
        "properties": {
            "k": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "additionalProperties": False,
    }


def test_registry_options_are_checked_on_the_driver(
    spark: Any, tansu: EmbeddedBroker, new_topic: TopicFactory, schema_registry: Any
) -> None:
    topic = new_topic(tansu)
    frame = _frame(spark).limit(2)
    url = schema_registry.url
    with pytest.raises(PySparkException, match=r"'schema\.registry\.url' is required"):
        _save(frame, tansu.bootstrap_servers, topic, **{"value.format": "avro"})
    with pytest.raises(PySparkException, match=r"'value\.format' is 'xml': use 'avro' or 'json'"):
        _save(frame, tansu.bootstrap_servers, topic, **{"value.format": "xml"})
    with pytest.raises(PySparkException, match=r"applies to Schema Registry records only"):
        _save(frame, tansu.bootstrap_servers, topic, **{"schema.registry.url": url})
    with pytest.raises(PySparkException, match=r"column 'value' must be binary or string"):
        _save(frame, tansu.bootstrap_servers, topic)
    with pytest.raises(PySparkException, match=r"Avro maps have string keys"):
        _save(
            frame.selectExpr("map(1, 'a') AS value"),
            tansu.bootstrap_servers,
            topic,
            **{"value.format": "avro", "schema.registry.url": url},
        )
    with pytest.raises(PySparkException, match=r"'auto\.register\.schemas' is 'yes'"):
        _save(
            frame,
            tansu.bootstrap_servers,
            topic,
            **{"value.format": "avro", "schema.registry.url": url, "auto.register.schemas": "yes"},
        )
    # A schema the registry does not have, with auto-registration off, fails the job naming
    # the subject; nothing is written.
    with pytest.raises(Exception, match=rf"not registered under subject '{topic}-value'"):
        _save(
            frame,
            tansu.bootstrap_servers,
            topic,
            **{
                "value.format": "avro",
                "schema.registry.url": url,
                "auto.register.schemas": "false",
                "kafka.max.block.ms": "10000",
            },
        )
    assert read_back(tansu.bootstrap_servers, topic, expected=1, timeout=2.0) == []


@pytest.mark.kafka
def test_avro_values_exactly_once_on_apache_kafka(
    spark: Any, kafka: Any, new_topic: TopicFactory, schema_registry: Any
) -> None:
    """Through transactions, read committed: each row once, decoded field for field."""
    topic = new_topic(kafka, partitions=2)
    _save(
        _frame(spark),
        kafka.bootstrap_servers,
        topic,
        **{
            "value.format": "avro",
            "schema.registry.url": schema_registry.url,
            "delivery.guarantee": "exactly_once",
        },
    )
    records = read_back(
        kafka.bootstrap_servers,
        topic,
        expected=_ROWS,
        isolation_level="read_committed",
        extra_wait=0.5,
    )
    assert len(records) == _ROWS
    decoded = _values(schema_registry.url, topic, [r.value for r in records], "avro")
    by_key = {r.key: v for r, v in zip(records, decoded, strict=True)}
    assert by_key == {f"k{i}".encode(): _order(i) for i in range(_ROWS)}
