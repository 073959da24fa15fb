"""The sink's options and columns: plain data, checked on the driver and pickled to the
executors."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from aioproducer import Producer, ProducerConfig
from aioproducer._core.metadata import validate_topic
from aioproducer.config import names_a_secret
from aioproducer.errors import (
    ConfigurationError,
    InvalidTopicError,
    KafkaError,
)
from aioproducer.integrations.spark.registry import (
    OPTIONS as REGISTRY_OPTIONS,
)
from aioproducer.integrations.spark.registry import (
    RegistryEncoding,
    encoding_options,
    is_registry_option,
    masked,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "AT_LEAST_ONCE",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "EXACTLY_ONCE",
    "SINK_BATCH_SIZE",
    "SOURCE_NAME",
    "SinkOptions",
    "exactly_once_options",
]

log = logging.getLogger("aioproducer.integrations.spark")

SOURCE_NAME = "aioproducer"
"""The format name: ``df.write.format("aioproducer")`` (Spark keeps ``"kafka"`` for its own)."""

# Options a Kafka sink user may pass that mean nothing here; Spark's sink ignores them too.
_IGNORED_OPTIONS = frozenset({"includeheaders", "checkpointlocation", "path"})
_FORBIDDEN = frozenset({"key.serializer", "value.serializer"})
# The delivery guarantee and its settings (aioproducer.integrations.spark.exactly_once).
_EXACTLY_ONCE_OPTIONS = frozenset(
    {
        "delivery.guarantee",
        "transactional.id.prefix",
        "transactional.marker.topic",
        "checkpointlocation",
    }
)


# ---- options and columns: plain data, pickled to the executors --------------------------------

_CACHE_TIMEOUT_OPTION = "spark.kafka.producer.cache.timeout"
_DEFAULT_CACHE_TIMEOUT_S = 600.0  # Spark's default for its own sink's producers: 10 minutes

SINK_BATCH_SIZE = 262_144
"""The sink's ``batch.size`` unless ``kafka.batch.size`` is given: 256 KiB, not the
producer's 16 KiB. A task writes a whole partition at once, so batches fill at once; at 16
KiB a batch holds 15 rows of 1 KiB, and the cost of each batch and request (on the executor
and on the broker) dominates. librdkafka's own default is 1 MB. Each Kafka partition a task
writes to holds a batch of this size while it fills, out of ``buffer.memory`` (32 MiB by
default): with hundreds of partitions per task, lower it or raise ``kafka.buffer.memory``."""


def _with_sink_defaults(config: dict[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the sink's own defaults for what neither names
    (:data:`SINK_BATCH_SIZE`)."""
    if not any(
        name in given for given in (config, options) for name in ("batch.size", "batch_size")
    ):
        return {**config, "batch.size": SINK_BATCH_SIZE}
    return config


# Spark's time strings (JavaUtils.timeStringAs): a number and a unit, milliseconds when none.
_TIME_UNITS = {
    "us": 1e-6, "micros": 1e-6, "ms": 1e-3, "millis": 1e-3, "s": 1.0, "sec": 1.0,
    "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
}  # fmt: skip
_TIME_STRING = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")


def _cache_timeout(value: Any, where: str) -> float:
    """``spark.kafka.producer.cache.timeout`` in seconds, from Spark's spelling ("10m",
    "600s", "600000": milliseconds when no unit is given).

    Raises:
        ConfigurationError: not a time Spark would take.
    """
    match = _TIME_STRING.match(str(value).lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS):
        raise ConfigurationError(
            f"{where} {_CACHE_TIMEOUT_OPTION!r}={value!r} is not a time: give a number and a "
            "unit, as Spark takes it ('10m', '600s', '500ms'; a bare number is milliseconds)"
        )
    number, unit = match.groups()
    return int(number) * _TIME_UNITS[unit or "ms"]


def _masked(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the value of every option whose name speaks of a password, secret,
    token or key (``ssl.key.password``, ``sasl.oauth.token.provider``) shown as ``***``.
    Serializers (``key.serializer``) name no secret and stay as they are."""
    return {
        name: "***" if names_a_secret(name) and value is not None else value
        for name, value in options.items()
    }


AT_LEAST_ONCE = "at_least_once"
"""The ``delivery.guarantee`` by default: a retried task sends its rows again."""

EXACTLY_ONCE = "exactly_once"
"""The ``delivery.guarantee`` that writes each row once, through Kafka transactions."""

DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
"""``transaction.timeout.ms`` in exactly-once mode unless ``kafka.transaction.timeout.ms``
is given: 15 minutes, the brokers' default ``transaction.max.timeout.ms``."""

# Options that mean something with exactly once only.
_EXACTLY_ONCE_ONLY = ("transactional.id.prefix", "transactional.marker.topic")


@dataclass(frozen=True)
class SinkOptions:
    """Where and how to write: the parsed ``.option(...)`` values.

    Attributes:
        topic: the topic for every row, or None to read each row's ``topic`` column.
        config: producer options by Java name (``"bootstrap.servers"``, ``"linger.ms"``).
        options: producer options by snake_case name, from :func:`write_dataframe`.
        cache_timeout: seconds a Python worker keeps a producer no task uses before it
            closes it (``spark.kafka.producer.cache.timeout``, 10 minutes by default).
        delivery_guarantee: ``"at_least_once"`` (the default) or ``"exactly_once"``
            (:mod:`aioproducer.integrations.spark.exactly_once`).
        transactional_id_prefix: the ``transactional.id.prefix`` option (exactly once).
        marker_topic: the ``transactional.marker.topic`` option (exactly once, streaming).
        checkpoint_location: a streaming query's ``checkpointLocation`` option.
    """

    topic: str | None
    config: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    cache_timeout: float = _DEFAULT_CACHE_TIMEOUT_S
    delivery_guarantee: str = "at_least_once"
    transactional_id_prefix: str | None = None
    marker_topic: str | None = None
    checkpoint_location: str | None = None
    registry_options: dict[str, str] = field(default_factory=dict)
    encoding: RegistryEncoding | None = None

    def __repr__(self) -> str:
        # A %r in a log line, a traceback's locals or a debugger must not show a password,
        # a secret, a token or a key.
        shown = (
            f"SinkOptions(topic={self.topic!r}, config={_masked(self.config)!r}, "
            f"options={_masked(self.options)!r}, cache_timeout={self.cache_timeout!r}"
        )
        if self.registry_options:
            shown += f", registry_options={masked(self.registry_options)!r}"
        return shown + ")"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Parse data source options, Spark Kafka sink style, and validate the producer's.

        Raises:
            ConfigurationError: no bootstrap servers, a forbidden or unknown option, or an
                invalid producer option.
        """
        topic: str | None = None
        config: dict[str, Any] = {}
        unknown: list[str] = []
        cache_timeout = _DEFAULT_CACHE_TIMEOUT_S
        # Exactly once (aioproducer.integrations.spark.exactly_once).
        exactly_once: dict[str, str] = {}
        # Schema Registry records (aioproducer.integrations.spark.registry), resolved with
        # the DataFrame's schema in with_columns().
        registry: dict[str, str] = {}
        for raw_name, value in options.items():
            name = raw_name.lower()
            if name == _CACHE_TIMEOUT_OPTION:
                cache_timeout = _cache_timeout(value, "option")
            elif name.startswith("kafka."):
                java = name[len("kafka.") :]
                if java in _FORBIDDEN:
                    raise ConfigurationError(
                        f"option {raw_name!r} is not supported: keys and values are sent as "
                        "bytes; cast the key and value columns to binary or string instead"
                    )
                config[java] = value
            elif name == "bootstrap.servers":
                config.setdefault("bootstrap.servers", value)
            elif name == "topic":
                topic = value
            elif name in _EXACTLY_ONCE_OPTIONS:
                exactly_once[name] = value
            elif is_registry_option(name):
                registry[name] = value
            elif name not in _IGNORED_OPTIONS:
                unknown.append(raw_name)
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(sorted(unknown))}{_did_you_mean(unknown)}: "
                "producer options go behind 'kafka.' with their Java names, as in "
                ".option('kafka.linger.ms', '10')"
            )
        if "bootstrap.servers" not in config:
            raise ConfigurationError(
                "option 'kafka.bootstrap.servers' is required (host:port[,host:port...])"
            )
        sink = cls(
            topic,
            _with_sink_defaults(config, {}),
            cache_timeout=cache_timeout,
            registry_options=registry,
        )
        if exactly_once:
            sink = exactly_once_options(sink, exactly_once)
        sink.check()
        return sink

    def check(self) -> None:
        """Validate the producer options now, on the driver, before any task starts."""
        ProducerConfig.from_options(self.config, **self.options)

    def producer(self, **config: Any) -> Producer:
        """A new producer with these options, and ``config`` over them (not started)."""
        merged = {**self.config, **config}
        serializers: dict[str, Any] = {}
        if self.encoding is not None:
            serializers = self.encoding.serializers({**merged, **self.options})
        return Producer(merged, **self.options, **serializers)

    def with_columns(self, schema: StructType) -> tuple[SinkOptions, _Layout]:
        """These options for a DataFrame of ``schema``, and how to read its columns: the
        Schema Registry encoding of its key and value derived from their types.

        Raises:
            ConfigurationError: columns the sink cannot write, or registry options that do
                not fit them.
        """
        fields = {f.name: f.dataType for f in schema.fields}
        value = fields.get("value")
        encoding = (
            encoding_options(self.registry_options, fields.get("key"), value)
            if value is not None
            else None
        )
        sink = replace(self, encoding=encoding) if encoding is not None else self
        return sink, _layout(schema, self.topic, encoding)


def _did_you_mean(unknown: list[str]) -> str:
    """`` (did you mean 'value.format'?)`` for options close to one of the sink's own."""
    import difflib

    known = [
        "topic",
        "bootstrap.servers",
        _CACHE_TIMEOUT_OPTION,
        *sorted(_EXACTLY_ONCE_OPTIONS),
        *REGISTRY_OPTIONS,
    ]
    close = [
        match
        for name in unknown
        for match in difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.8)
    ]
    return f" (did you mean {', '.join(repr(m) for m in close)}?)" if close else ""


def exactly_once_options(sink: SinkOptions, options: Mapping[str, str]) -> SinkOptions:
    """``sink`` with the delivery-guarantee options (lower-cased names) applied.

    Raises:
        ConfigurationError: an unknown guarantee, a prefix or marker topic without exactly
            once, an empty prefix, an illegal marker topic,
            or ``kafka.transactional.id`` with exactly once (the sink chooses the ids).
    """
    raw = options.get("delivery.guarantee", AT_LEAST_ONCE)
    guarantee = raw.strip().lower().replace("-", "_")
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ConfigurationError(
            f"option 'delivery.guarantee' is {raw!r}: use 'at_least_once' (the default) or "
            "'exactly_once'"
        )
    prefix = options.get("transactional.id.prefix")
    marker = options.get("transactional.marker.topic")
    if guarantee != EXACTLY_ONCE:
        given = [name for name in _EXACTLY_ONCE_ONLY if name in options]
        if given:
            raise ConfigurationError(
                f"option {given[0]!r} applies to delivery.guarantee exactly_once only; set "
                "option 'delivery.guarantee' to 'exactly_once', or drop it"
            )
    if guarantee == EXACTLY_ONCE:
        if "transactional.id" in sink.config:
            raise ConfigurationError(
                "option 'kafka.transactional.id' cannot be set with delivery.guarantee "
                "exactly_once: each task gets its own transactional id; set "
                "'transactional.id.prefix' to choose how they start"
            )
        if prefix is not None and not prefix.strip():
            raise ConfigurationError("option 'transactional.id.prefix' must not be empty")
        if marker is not None:
            try:
                validate_topic(marker)
            except KafkaError as exc:
                raise ConfigurationError(f"option 'transactional.marker.topic': {exc}") from None
    config = sink.config
    if guarantee == EXACTLY_ONCE and "transaction.timeout.ms" not in config:
        config = {**config, "transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS}
    return replace(
        sink,
        config=config,
        delivery_guarantee=guarantee,
        transactional_id_prefix=prefix,
        marker_topic=marker,
        checkpoint_location=options.get("checkpointlocation"),
    )


@dataclass(frozen=True)
class _Layout:
    """Which Kafka sink columns a DataFrame has, and how to read them."""

    key: str | None  # "binary" | "string" | "avro" | "json" | None
    value: str  # "binary" | "string" | "avro" | "json"
    topic: bool
    partition: bool
    headers: str | None  # the header value's type: "binary" | "string" | None
    timestamp: str | None  # "timestamp" | "timestamp_ntz" | "millis" | None
    # The Spark types (as JSON) of a key and value written as Schema Registry records.
    key_type: str | None = None
    value_type: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        names = ["value"]
        names += ["key"] if self.key else []
        names += ["topic"] if self.topic else []
        names += ["partition"] if self.partition else []
        names += ["headers"] if self.headers else []
        names += ["timestamp"] if self.timestamp else []
        return tuple(names)


def _layout(
    schema: StructType, topic: str | None, encoding: RegistryEncoding | None = None
) -> _Layout:
    """Check a DataFrame's schema against the Kafka sink columns; a key or value that
    ``encoding`` writes in the Schema Registry wire format may be of any type."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        ByteType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        StructType,
        TimestampType,
    )

    fields = {f.name: f.dataType for f in schema.fields}
    if topic is not None:
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            raise ConfigurationError(f"option 'topic': {exc}") from None

    def bytes_kind(name: str) -> str | None:
        data_type = fields.get(name)
        if data_type is None:
            return None
        column = getattr(encoding, name, None) if encoding is not None else None
        if column is not None:
            return str(column.format)
        if isinstance(data_type, BinaryType):
            return "binary"
        if isinstance(data_type, StringType):
            return "string"
        raise ConfigurationError(
            f"column {name!r} must be binary or string, not {data_type.simpleString()}"
        )

    value = bytes_kind("value")
    if value is None:
        raise ConfigurationError(
            f"the DataFrame needs a 'value' column (binary or string); it has "
            f"{', '.join(fields) or 'no columns'}"
        )
    key = bytes_kind("key")
    has_topic = "topic" in fields
    if has_topic and not isinstance(fields["topic"], StringType):
        raise ConfigurationError(
            f"column 'topic' must be a string, not {fields['topic'].simpleString()}"
        )
    if topic is None and not has_topic:
        raise ConfigurationError(
            "no topic: set the 'topic' option or give the DataFrame a 'topic' column"
        )
    has_partition = "partition" in fields
    if has_partition and not isinstance(
        fields["partition"], ByteType | ShortType | IntegerType | LongType
    ):
        raise ConfigurationError(
            f"column 'partition' must be an int, not {fields['partition'].simpleString()}"
        )
    headers: str | None = None
    if "headers" in fields:
        data_type = fields["headers"]
        element = data_type.elementType if isinstance(data_type, ArrayType) else None
        names = (
            {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) else {}
        )
        header_value = names.get("value")
        if (
            set(names) != {"key", "value"}
            or not isinstance(names["key"], StringType)
            or not isinstance(header_value, BinaryType | StringType)
        ):
            raise ConfigurationError(
                "column 'headers' must be an array<struct<key:string,value:binary>>, not "
                f"{data_type.simpleString()}"
            )
        headers = "binary" if isinstance(header_value, BinaryType) else "string"
    timestamp: str | None = None
    if "timestamp" in fields:
        data_type = fields["timestamp"]
        if isinstance(data_type, TimestampType):
            timestamp = "timestamp"
        elif type(data_type).__name__ == "TimestampNTZType":  # PySpark 3.4 and later
            timestamp = "timestamp_ntz"
        elif isinstance(data_type, LongType):
            timestamp = "millis"
        else:
            raise ConfigurationError(
                "column 'timestamp' must be a timestamp or a long (epoch milliseconds), not "
                f"{data_type.simpleString()}"
            )
    return _Layout(
        key=key,
        value=value,
        topic=has_topic and topic is None,
        partition=has_partition,
        headers=headers,
        timestamp=timestamp,
        key_type=encoding.key.spark_type if encoding and encoding.key else None,
        value_type=encoding.value.spark_type if encoding and encoding.value else None,
    )
