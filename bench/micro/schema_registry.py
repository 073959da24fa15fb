"""Schema Registry serialization per record, beside confluent-kafka's serializers on the
same data (fastavro both for Avro), once each schema's id is cached: what a record costs in
``send()`` after the first of its subject. Both talk to the same Apicurio Registry, started
here (``tests/support/registry.py``: Java, and Maven to fetch it once)::

    python -m bench.micro.schema_registry

Prints ns per record for each serializer and the ratio (ours / confluent-kafka's: below 1
is faster), and how many requests each made to the registry.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.micro._timer import Measurement, measure, report, skipped

ROOT = Path(__file__).resolve().parents[2]
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
JSON_ORDER = {
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "price": {"type": "number"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["id", "item", "price"],
}
RECORD = {"id": 123456, "item": "a book about Kafka", "price": 12.5, "note": None}


async def _warm(serializer: Any, topic: str) -> None:
    from aioproducer.serialization import SerializerNotReady

    try:
        serializer.serialize(topic, [], RECORD)
    except SerializerNotReady as not_ready:
        await not_ready.wait()


def collect() -> list[Measurement]:
    """Run every case against a registry started for it."""
    sys.path.insert(0, str(ROOT))
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
        from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentAvro
        from confluent_kafka.schema_registry.json_schema import JSONSerializer as ConfluentJson
        from confluent_kafka.serialization import MessageField, SerializationContext

        from aioproducer.schema_registry import (
            AvroSerializer,
            JsonSchemaSerializer,
            SchemaRegistryClient,
        )
        from tests.support.registry import ApicurioRegistry
    except Exception as exc:
        return [skipped("schema registry serializers", exc)]
    import json

    with tempfile.TemporaryDirectory() as logs:
        registry = ApicurioRegistry(Path(logs))
        try:
            ours = SchemaRegistryClient(registry.url)
            avro = AvroSerializer(ours, ORDER)
            json_schema = JsonSchemaSerializer(ours, JSON_ORDER)

            async def warm() -> None:
                await _warm(avro, "bench-avro")
                await _warm(json_schema, "bench-json")
                await ours.close()

            asyncio.run(warm())
            theirs = ConfluentClient({"url": registry.url})
            confluent_avro = ConfluentAvro(theirs, json.dumps(ORDER))
            confluent_json = ConfluentJson(json.dumps(JSON_ORDER), theirs)
            avro_context = SerializationContext("bench-avro", MessageField.VALUE, [])
            json_context = SerializationContext("bench-json", MessageField.VALUE, [])
            assert (
                confluent_avro(RECORD, avro_context)[5:]
                == avro.serialize("bench-avro", [], RECORD)[5:]
            )
            results = [
                measure(
                    "Avro: aioproducer AvroSerializer",
                    lambda: avro.serialize("bench-avro", [], RECORD),
                ),
                measure(
                    "Avro: confluent-kafka AvroSerializer",
                    lambda: confluent_avro(RECORD, avro_context),
                ),
                measure(
                    "JSON Schema: aioproducer JsonSchemaSerializer",
                    lambda: json_schema.serialize("bench-json", [], RECORD),
                ),
                measure(
                    "JSON Schema: confluent-kafka JSONSerializer",
                    lambda: confluent_json(RECORD, json_context),
                ),
            ]
            results.append(
                Measurement(
                    "registry requests: aioproducer (all serializers)",
                    None,
                    note=f"{ours.requests} for two subjects",
                )
            )
            return results
        finally:
            registry.stop()


def main() -> int:
    """Entry point: ``python -m bench.micro.schema_registry``."""
    results = collect()
    print(report(results, "Schema Registry serializers, per record (schema ids cached)"))
    timed = {r.name: r.ns_per_op for r in results if r.ns_per_op}
    for fmt, ours, theirs in (
        ("Avro", "Avro: aioproducer AvroSerializer", "Avro: confluent-kafka AvroSerializer"),
        (
            "JSON Schema",
            "JSON Schema: aioproducer JsonSchemaSerializer",
            "JSON Schema: confluent-kafka JSONSerializer",
        ),
    ):
        if ours in timed and theirs in timed:
            print(f"{fmt}: aioproducer / confluent-kafka = {timed[ours] / timed[theirs]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
