"""Avro keys and values in the Schema Registry wire format, encoded with fastavro."""

from __future__ import annotations

import io
import json
from typing import Any, ClassVar

from aioproducer.errors import ConfigurationError
from aioproducer.schema_registry.serde import RegistrySerializer

__all__ = ["AvroSerializer"]


class AvroSerializer(RegistrySerializer):
    """Avro (written with ``fastavro``) in the Schema Registry wire format: dicts, or
    objects through ``to_dict``. See :class:`RegistrySerializer` for the arguments;
    ``schema`` is an Avro schema, as JSON text or a dict."""

    schema_type: ClassVar[str] = "AVRO"
    format_name: ClassVar[str] = "Avro"

    def parse(self, text: str) -> tuple[Any, str | None]:
        try:
            import fastavro
        except ImportError as exc:
            raise ConfigurationError(
                "AvroSerializer needs fastavro: pip install 'aioproducer[schema-registry]'"
            ) from exc
        try:
            parsed = fastavro.parse_schema(json.loads(text))
        except Exception as exc:
            raise ConfigurationError(f"not a valid Avro schema: {exc}") from exc
        self._write = fastavro.schemaless_writer
        name = parsed.get("name") if isinstance(parsed, dict) else None
        return parsed, name if isinstance(name, str) else None

    def encode(self, parsed: Any, record: Any, out: io.BytesIO) -> None:
        self._write(out, parsed, record)
