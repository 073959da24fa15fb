"""JSON Schema keys and values in the Schema Registry wire format, validated with
``jsonschema``."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any, ClassVar

from aioproducer.errors import ConfigurationError
from aioproducer.schema_registry.client import SchemaRegistryClient
from aioproducer.schema_registry.serde import RegistrySerializer

__all__ = ["JsonSchemaSerializer"]


class JsonSchemaSerializer(RegistrySerializer):
    """JSON in the Schema Registry wire format, each value validated against the schema
    first (``jsonschema``; ``validate=False`` skips it). See :class:`RegistrySerializer` for
    the arguments; ``schema`` is a JSON Schema, as text or a dict, whose ``title`` is its
    name for the ``record`` and ``topic_record`` subject name strategies."""

    schema_type: ClassVar[str] = "JSON"
    format_name: ClassVar[str] = "JSON"

    def __init__(self, *args: Any, validate: bool = True, **kwargs: Any) -> None:
        self._validate = validate
        super().__init__(*args, **kwargs)

    @classmethod
    def for_model(
        cls, registry: SchemaRegistryClient, model: type[Any], **kwargs: Any
    ) -> JsonSchemaSerializer:
        """A serializer of ``model``'s instances (a Pydantic model class): the schema is the
        model's JSON Schema (``model_json_schema()``, titled with the model's name), each
        instance dumped in JSON mode (``model_dump(mode="json")``) and validated against
        it. Dicts that fit the schema are taken too. ``kwargs`` as for the constructor."""
        schema = model.model_json_schema()
        dump: Callable[[Any], Any] = lambda value: (  # noqa: E731
            value.model_dump(mode="json") if isinstance(value, model) else value
        )
        return cls(registry, schema, to_dict=dump, **kwargs)

    def parse(self, text: str) -> tuple[Any, str | None]:
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"not a valid JSON Schema: {exc}") from exc
        validator = None
        if self._validate:
            try:
                import jsonschema
            except ImportError as exc:
                raise ConfigurationError(
                    "JsonSchemaSerializer needs jsonschema to validate: pip install "
                    "'aioproducer[schema-registry]' (or validate=False)"
                ) from exc
            cls = jsonschema.validators.validator_for(document)
            try:
                cls.check_schema(document)
            except jsonschema.SchemaError as exc:
                raise ConfigurationError(f"not a valid JSON Schema: {exc.message}") from exc
            validator = cls(document)
        title = document.get("title") if isinstance(document, dict) else None
        return validator, title if isinstance(title, str) else None

    def encode(self, parsed: Any, record: Any, out: io.BytesIO) -> None:
        if parsed is not None:
            error = next(iter(parsed.iter_errors(record)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "the document"
                raise ValueError(f"{error.message} (at {where})")
        out.write(json.dumps(record, separators=(",", ":")).encode())
