"""Schema Registry support: records in the registry's wire format (a schema id before the
payload), which consumers in any language decode with the schema they look up by that id.

Needs the ``schema-registry`` extra (``pip install 'aioproducer[schema-registry]'``).
"""

from __future__ import annotations

from aioproducer.schema_registry.avro import AvroSerializer
from aioproducer.schema_registry.client import (
    InMemorySchemaRegistry,
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)
from aioproducer.schema_registry.json_schema import JsonSchemaSerializer
from aioproducer.schema_registry.protobuf import ProtobufSerializer
from aioproducer.schema_registry.serde import SUBJECT_NAME_STRATEGIES, RegistrySerializer

__all__ = [
    "SUBJECT_NAME_STRATEGIES",
    "AvroSerializer",
    "InMemorySchemaRegistry",
    "JsonSchemaSerializer",
    "ProtobufSerializer",
    "RegisteredSchema",
    "RegistrySerializer",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
]
