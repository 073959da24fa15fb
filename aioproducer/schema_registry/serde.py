"""What every Schema Registry serializer shares: the subject, the schema's id, the wait."""

from __future__ import annotations

import io
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from aioproducer.errors import ConfigurationError, SerializationError
from aioproducer.records import Header
from aioproducer.schema_registry.client import Schema, SchemaRegistryClient
from aioproducer.schema_registry.wire import header
from aioproducer.serialization import SerializerNotReady

__all__ = ["SUBJECT_NAME_STRATEGIES", "RegistrySerializer"]

SUBJECT_NAME_STRATEGIES = ("topic", "record", "topic_record")
"""How a subject is named: ``topic`` (``{topic}-key`` / ``{topic}-value``, the default),
``record`` (the schema's full name) or ``topic_record`` (``{topic}-{full name}``). The Java
class names (``io.confluent.kafka.serializers.subject.TopicNameStrategy``, ...) are taken
too."""

_JAVA_STRATEGIES = {
    "TopicNameStrategy": "topic",
    "RecordNameStrategy": "record",
    "TopicRecordNameStrategy": "topic_record",
}
_CONF = (
    "auto.register.schemas",
    "use.latest.version",
    "normalize.schemas",
    "subject.name.strategy",
)


def _strategy(name: str) -> str:
    short = name.rsplit(".", 1)[-1]
    chosen = _JAVA_STRATEGIES.get(short, name.lower().replace("-", "_"))
    if chosen not in SUBJECT_NAME_STRATEGIES:
        raise ConfigurationError(
            f"subject name strategy {name!r}: must be one of {', '.join(SUBJECT_NAME_STRATEGIES)}"
        )
    return chosen


class RegistrySerializer(ABC):
    """Keys or values in the Schema Registry wire format, in the format a subclass writes:
    a :class:`~aioproducer.Serializer` for ``key_serializer`` or ``value_serializer``.

    The schema's id under the record's subject comes from the registry once (registered
    there with ``auto_register_schemas``, the default; looked up otherwise); the first
    record of each subject waits for it in ``send()``'s slow path, within ``max_block_ms``,
    and the others cost no request.

    Args:
        registry: the Schema Registry client (shared by serializers, it shares its caches).
        schema: the schema (text or a dict). None with ``use_latest_version``: the
            subject's latest schema is used.
        is_key: True for a ``key_serializer`` (subjects ``{topic}-key``).
        to_dict: turns a record key or value into what the schema describes (a dict for a
            record); None takes it as it is.
        auto_register_schemas: register the schema under the subject when it is not there;
            False looks it up and fails the record when it is missing.
        use_latest_version: write with the subject's latest registered schema (kept for
            the registry client's ``latest_ttl``), not ``schema``.
        normalize_schemas: have the registry normalize the schema before comparing it.
        subject_name_strategy: one of :data:`SUBJECT_NAME_STRATEGIES` (or a Java class name).
        conf: confluent-kafka's serializer options instead of the keywords
            (``auto.register.schemas``, ``use.latest.version``, ``normalize.schemas``,
            ``subject.name.strategy`` as a name).
    """

    #: The registry's name for the format (``schemaType``).
    schema_type: ClassVar[str] = ""
    #: The format's name in errors.
    format_name: ClassVar[str] = ""

    def __init__(
        self,
        registry: SchemaRegistryClient,
        schema: str | Mapping[str, Any] | None = None,
        *,
        is_key: bool = False,
        to_dict: Callable[[Any], Any] | None = None,
        auto_register_schemas: bool = True,
        use_latest_version: bool = False,
        normalize_schemas: bool = False,
        subject_name_strategy: str = "topic",
        conf: Mapping[str, Any] | None = None,
    ) -> None:
        name = type(self).__name__
        if conf:
            unknown = sorted(set(conf) - set(_CONF))
            if unknown:
                raise ConfigurationError(f"unknown {name} options: {', '.join(unknown)}")
            auto_register_schemas = bool(conf.get("auto.register.schemas", auto_register_schemas))
            use_latest_version = bool(conf.get("use.latest.version", use_latest_version))
            normalize_schemas = bool(conf.get("normalize.schemas", normalize_schemas))
            subject_name_strategy = str(conf.get("subject.name.strategy", subject_name_strategy))
        own = self._own_schema()
        if own is None:
            if use_latest_version and auto_register_schemas and schema is not None:
                raise ConfigurationError(
                    "use_latest_version writes with the registry's schema: give no schema, or "
                    "set auto_register_schemas=False"
                )
            if schema is None and not use_latest_version:
                raise ConfigurationError(f"{name} needs a schema, or use_latest_version=True")
            if schema is not None:
                text = schema if isinstance(schema, str) else json.dumps(schema)
                own = Schema(text, self.schema_type)
        elif schema is not None:
            raise ConfigurationError(f"{name} builds its schema itself: give no schema")
        self.registry = registry
        self.is_key = is_key
        self._to_dict = to_dict
        self._auto_register = auto_register_schemas
        self._use_latest = use_latest_version
        self._normalize = normalize_schemas
        self._strategy = _strategy(subject_name_strategy)
        self._schema: Schema | None = own
        self._parsed: Any = None
        self._full_name: str | None = None
        if own is not None:
            self._parsed, self._full_name = self.parse(own.schema_str)
        # subject -> (schema id, parsed schema), and topic -> (subject, id, parsed): what a
        # record needs, once known.
        self._by_subject: dict[str, tuple[int, Any]] = {}
        self._by_topic: dict[str, tuple[str, int, Any]] = {}

    # ---- what a format says ----------------------------------------------------------------

    @abstractmethod
    def parse(self, text: str) -> tuple[Any, str | None]:
        """The schema ready for :meth:`encode`, and its full name (None when unnamed);
        ConfigurationError when it is not a valid schema."""

    @abstractmethod
    def encode(self, parsed: Any, record: Any, out: io.BytesIO) -> None:
        """Write ``record`` by ``parsed`` to ``out``; raise when it does not match."""

    def _own_schema(self) -> Schema | None:
        """The schema a format builds itself rather than taking one as ``schema`` (Protobuf:
        the message class's file); None, the default, takes ``schema``."""
        return None

    async def _schema_to_register(self) -> Schema:
        """The schema registered, or looked up, under a subject: the constructor's, unless a
        format completes it first (Protobuf: with the references to the files it imports)."""
        assert self._schema is not None
        return self._schema

    async def _prepare(self, schema: Schema) -> None:
        """Fetch what parsing ``schema`` needs beyond its text, before :meth:`parse` sees it
        (Avro: the schemas its references name); nothing by default."""
        return None

    # ---- the serializer --------------------------------------------------------------------

    def subject(self, topic: str) -> str:
        """The subject a record to ``topic`` is written under."""
        if self._strategy == "topic":
            return f"{topic}-{'key' if self.is_key else 'value'}"
        if self._full_name is None:
            raise SerializationError(
                f"the {self._strategy} subject name strategy needs a named schema"
            )
        if self._strategy == "record":
            return self._full_name
        return f"{topic}-{self._full_name}"

    def serialize(self, topic: str, headers: list[Header], data: Any) -> bytes:
        """``data`` after the 5-byte header (magic byte, schema id)."""
        known = self._by_topic.get(topic)
        if known is None:
            subject = self.subject(topic)
            resolved = self._by_subject.get(subject)
            if resolved is None:
                raise SerializerNotReady(
                    lambda: self._resolve(subject),
                    f"the id of its schema under subject {subject!r}",
                )
            known = self._by_topic[topic] = (subject, *resolved)
        subject, schema_id, parsed = known
        record = self._to_dict(data) if self._to_dict is not None else data
        out = io.BytesIO()
        out.write(header(schema_id))
        try:
            self.encode(parsed, record, out)
        except Exception as exc:
            raise SerializationError(
                f"the {'key' if self.is_key else 'value'} does not match the "
                f"{self.format_name} schema of subject {subject!r}: {exc}"
            ) from exc
        return out.getvalue()

    async def _resolve(self, subject: str) -> None:
        registry = self.registry
        if self._use_latest:
            latest = await registry.latest_version(subject)
            await self._prepare(latest.schema)
            parsed, _ = self.parse(latest.schema.schema_str)
            self._by_subject[subject] = (latest.schema_id, parsed)
            return
        schema = await self._schema_to_register()
        if self._auto_register:
            schema_id = await registry.register(subject, schema, self._normalize)
        else:
            found = await registry.lookup(subject, schema, self._normalize)
            if found is None:
                raise SerializationError(
                    f"the schema is not registered under subject {subject!r}, and "
                    "auto_register_schemas is off"
                )
            schema_id = found.schema_id
        self._by_subject[subject] = (schema_id, self._parsed)
