"""Schema Registry support: records in the registry's wire format (a schema id before the
payload), which consumers in any language decode with the schema they look up by that id.

Needs the ``schema-registry`` extra (``pip install 'aioproducer[schema-registry]'``).
"""

from __future__ import annotations

from aioproducer.schema_registry.client import (
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)

__all__ = ["RegisteredSchema", "Schema", "SchemaReference", "SchemaRegistryClient"]
