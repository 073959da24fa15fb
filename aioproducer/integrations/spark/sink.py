"""The sink's at-least-once path: options, columns, rows into records, the per-worker
producer cache, the batch and stream writers, and the ``foreachPartition`` fallback.

The package docstring (:mod:`aioproducer.integrations.spark`) says what users get from it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import copy
import datetime
import logging
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from aioproducer import BatchResults, Producer, ProducerConfig, ProducerRecord, ProducerState
from aioproducer._core.appender import check_headers, record_size
from aioproducer._core.metadata import validate_topic
from aioproducer.compiled import warn_if_interpreted
from aioproducer.config import names_a_secret
from aioproducer.errors import (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    ConfigurationError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidProducerEpochError,
    InvalidTopicError,
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
    RecordTooLargeError,
    SenderCrashedError,
    SerializationError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from aioproducer.protocol.record_batch import RECORD_BATCH_OVERHEAD
from aioproducer.records import check_partition, check_timestamp

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.datasource import (
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
    from pyspark.sql.types import StructType
else:
    try:
        from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
    except ImportError:  # PySpark < 4.0: only write_dataframe can be used.
        DataSourceArrowWriter = WriterCommitMessage = object
    try:
        from pyspark.sql.datasource import DataSourceStreamArrowWriter
    except ImportError:  # PySpark 4.0: streaming writers get Rows; write() takes either.
        try:
            from pyspark.sql.datasource import (
                DataSourceStreamWriter as DataSourceStreamArrowWriter,
            )
        except ImportError:
            DataSourceStreamArrowWriter = object

__all__ = [
    "AT_LEAST_ONCE",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "EXACTLY_ONCE",
    "SINK_BATCH_SIZE",
    "SOURCE_NAME",
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaStreamWriter",
    "SinkOptions",
    "exactly_once_options",
    "write_dataframe",
    "write_dataframe_on_driver",
]

log = logging.getLogger("aioproducer.integrations.spark")

SOURCE_NAME = "aioproducer"
"""The format name: ``df.write.format("aioproducer")`` (Spark keeps ``"kafka"`` for its own)."""

_T = TypeVar("_T")

# Rows handed to send_many at once on the Row path; the Arrow path uses Spark's own batches
# (spark.sql.execution.arrow.maxRecordsPerBatch, 10,000 by default).
_ROWS_PER_CHUNK = 10_000

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

_EPOCH = datetime.datetime(1970, 1, 1)
_MILLISECOND = datetime.timedelta(milliseconds=1)

# How long finding the row the producer refused may wait for a topic's metadata: the
# producer has just looked it up, so it is known at once or not at all.
_LOOKUP_TIMEOUT_S = 1.0

_SEND_MANY_ITEM = re.compile(r"^send_many item \d+: ")


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

    def __repr__(self) -> str:
        # A %r in a log line, a traceback's locals or a debugger must not show a password,
        # a secret, a token or a key.
        return (
            f"SinkOptions(topic={self.topic!r}, config={_masked(self.config)!r}, "
            f"options={_masked(self.options)!r}, cache_timeout={self.cache_timeout!r})"
        )

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
            elif name not in _IGNORED_OPTIONS:
                unknown.append(raw_name)
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(sorted(unknown))}: producer options go behind "
                "'kafka.' with their Java names, as in .option('kafka.linger.ms', '10')"
            )
        if "bootstrap.servers" not in config:
            raise ConfigurationError(
                "option 'kafka.bootstrap.servers' is required (host:port[,host:port...])"
            )
        sink = cls(topic, _with_sink_defaults(config, {}), cache_timeout=cache_timeout)
        if exactly_once:
            sink = exactly_once_options(sink, exactly_once)
        sink.check()
        return sink

    def check(self) -> None:
        """Validate the producer options now, on the driver, before any task starts."""
        ProducerConfig.from_options(self.config, **self.options)

    def producer(self) -> Producer:
        """A new producer with these options (not started)."""
        return Producer(self.config, **self.options)


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

    key: str | None  # "binary" | "string" | None
    value: str  # "binary" | "string"
    topic: bool
    partition: bool
    headers: str | None  # the header value's type: "binary" | "string" | None
    timestamp: str | None  # "timestamp" | "timestamp_ntz" | "millis" | None

    @property
    def columns(self) -> tuple[str, ...]:
        names = ["value"]
        names += ["key"] if self.key else []
        names += ["topic"] if self.topic else []
        names += ["partition"] if self.partition else []
        names += ["headers"] if self.headers else []
        names += ["timestamp"] if self.timestamp else []
        return tuple(names)


def _layout(schema: StructType, topic: str | None) -> _Layout:
    """Check a DataFrame's schema against the Kafka sink columns."""
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
    )


# ---- turning columns into records -----------------------------------------------------------


class _RowRefused(Exception):
    """A row of a chunk cannot be a record: its index in the chunk, the column to blame (None
    when no one column is) and why. :func:`_produce` turns it into the task's error, which
    names the row's position in the task's input (:func:`_row_error`)."""

    def __init__(self, index: int, column: str | None, error: BaseException) -> None:
        super().__init__(index, column, error)
        self.index = index
        self.column = column
        self.error = error


def _row_error(position: int, column: str | None, error: BaseException) -> KafkaError:
    """The error a task fails with for the row at ``position`` (0-based) of its input.

    A :class:`KafkaError` keeps its class (and attributes, such as ``retriable``): a copy of
    it whose message starts with the row, the Spark partition and the column. A TypeError
    becomes an :class:`InvalidArgumentTypeError`, anything else an
    :class:`InvalidArgumentError`. The caller chains ``error`` as the ``__cause__``.
    """
    where = f"row {position}"
    spark_partition = _partition_id()
    if spark_partition >= 0:
        where += f" of Spark partition {spark_partition}"
    # The producer names the refused item of its send_many call; the row says it better.
    text = _SEND_MANY_ITEM.sub("", str(error)) or type(error).__name__
    if column is not None and f"column {column!r}" not in text:
        where += f", column {column!r}"
    message = f"{where}: {text}"
    if isinstance(error, KafkaError):
        try:
            copied = copy.copy(error)
        except Exception:  # an error class that cannot be copied: the generic one will do
            return InvalidArgumentError(message)
        if type(copied) is not type(error):
            return InvalidArgumentError(message)
        copied.args = (message,)
        return copied
    if isinstance(error, TypeError):
        return InvalidArgumentTypeError(message)
    return InvalidArgumentError(message)


def _refused_field(
    layout: _Layout, index: int, partition: Any, timestamp: Any, error: BaseException
) -> _RowRefused:
    """Why ``ProducerRecord`` refused row ``index``: its partition or its timestamp, checked
    again by the same rules with the column named in the message."""
    try:
        check_partition(partition, "column 'partition'")
    except InvalidArgumentError as exc:
        return _RowRefused(index, "partition", exc)
    try:
        check_timestamp(timestamp, "column 'timestamp'")
    except InvalidArgumentError as exc:
        if layout.timestamp in ("timestamp", "timestamp_ntz") and type(timestamp) is int:
            try:
                moment = f"{_EPOCH + timestamp * _MILLISECOND} UTC"
            except OverflowError:
                moment = "out of datetime's range"
            exc = type(exc)(
                f"{exc}; that is {moment}, and Kafka takes no time before 1970-01-01 00:00:00 UTC"
            )
        return _RowRefused(index, "timestamp", exc)
    return _RowRefused(index, None, error)


def _encoded(values: list[Any]) -> list[Any]:
    return [value.encode() if isinstance(value, str) else value for value in values]


def _items(
    layout: _Layout, topic: str | None, columns: Mapping[str, list[Any]]
) -> tuple[str, list[Any]]:
    """The topic to pass ``send_many`` and its items, for one chunk of rows.

    Raises:
        _RowRefused: a row cannot be a record (a null topic or header, a timestamp or a
            partition out of range).
    """
    values = columns["value"]
    if layout.value == "string":
        values = _encoded(values)
    keys = columns.get("key")
    if keys is not None and keys.count(None) == len(keys):
        keys = None  # no row has a key: plain values take send_many's fastest path
    if keys is not None and layout.key == "string":
        keys = _encoded(keys)
    simple = not (layout.topic or layout.partition or layout.headers or layout.timestamp)
    if simple:
        assert topic is not None
        # The fast path of send_many: plain values, or (key, value) pairs.
        return topic, values if keys is None else list(zip(keys, values, strict=True))
    count = len(values)
    topics: list[Any] = columns["topic"] if layout.topic else [topic] * count
    partitions: list[Any] = columns["partition"] if layout.partition else [None] * count
    timestamps: list[Any] = columns["timestamp"] if layout.timestamp else [None] * count
    header_lists: list[Any] = columns["headers"] if layout.headers else [None] * count
    if keys is None:
        keys = [None] * count
    records = []
    for index in range(count):
        record_topic = topics[index]
        if record_topic is None:
            raise _RowRefused(
                index,
                "topic",
                InvalidArgumentError(
                    "column 'topic' is null and no 'topic' option is set; Kafka needs a "
                    "topic for every record"
                ),
            )
        headers = header_lists[index]
        if headers:
            try:
                headers = [
                    (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
                    for h in headers
                ]
            except TypeError:  # None["key"]: a null element of the array
                raise _RowRefused(
                    index,
                    "headers",
                    InvalidArgumentTypeError(
                        "column 'headers' holds a null header; each element needs a key "
                        "(the value may be null)"
                    ),
                ) from None
        try:
            record = ProducerRecord(
                record_topic,
                values[index],
                keys[index],
                partitions[index],
                timestamps[index],
                headers or None,
            )
        except (TypeError, ValueError) as exc:
            raise _refused_field(layout, index, partitions[index], timestamps[index], exc) from None
        records.append(record)
    return (topic or records[0].topic) if records else "", records


def _arrow_chunks(layout: _Layout, batches: Iterable[Any]) -> Iterator[dict[str, list[Any]]]:
    """Columns as Python lists from Arrow record batches (no Row per record)."""
    names = layout.columns
    for batch in batches:
        if batch.num_rows == 0:
            continue
        columns: dict[str, list[Any]] = {}
        for name in names:
            column = batch.column(name)
            if name == "key" and column.null_count == batch.num_rows:
                continue  # no key in the batch: see _items
            if name == "timestamp" and layout.timestamp != "millis":
                micros = column.cast("int64").to_pylist()
                columns[name] = [None if t is None else t // 1000 for t in micros]
            elif name in ("key", "value") and getattr(layout, name) == "string":
                # A Spark string is UTF-8 bytes already (valid or not): sent as they are,
                # as Spark's own sink does, without decoding them first.
                columns[name] = column.cast("binary").to_pylist()
            else:
                columns[name] = _arrow_list(column, name)
        yield columns


def _arrow_list(column: Any, name: str) -> list[Any]:
    """An Arrow column as a list.

    Raises:
        _RowRefused: a string in it (a topic, a header) is not valid UTF-8.
    """
    try:
        values: list[Any] = column.to_pylist()
    except UnicodeDecodeError:
        pass
    else:
        return values
    for index in range(len(column)):
        try:
            column[index].as_py()
        except UnicodeDecodeError as exc:
            raise _RowRefused(
                index,
                name,
                InvalidArgumentError(
                    f"column {name!r} holds a string that is not valid UTF-8 ({exc.reason} "
                    f"at byte {exc.start})"
                ),
            ) from None
    raise AssertionError("unreachable: the conversion failed for no row")


def _millis(value: Any, kind: str | None) -> int | None:
    if value is None:
        return None
    if kind == "millis":
        return int(value)
    moment: datetime.datetime = value
    if kind == "timestamp_ntz" or moment.tzinfo is not None:
        naive = moment.replace(tzinfo=None) - (moment.utcoffset() or datetime.timedelta())
        return (naive - _EPOCH) // _MILLISECOND
    # PySpark hands a timestamp to Python as a naive datetime in the worker's local time.
    return int(moment.replace(microsecond=0).timestamp()) * 1000 + moment.microsecond // 1000


def _timestamps(values: list[Any], kind: str | None) -> list[int | None]:
    """A Row chunk's timestamp column as epoch milliseconds (range checks come later, in
    ``ProducerRecord``).

    Raises:
        _RowRefused: a time the platform cannot convert (year 1 in local time, say).
    """
    try:
        return [_millis(value, kind) for value in values]
    except (ArithmeticError, ValueError, OSError):
        pass
    for index, value in enumerate(values):
        try:
            _millis(value, kind)
        except (ArithmeticError, ValueError, OSError) as exc:
            raise _RowRefused(
                index,
                "timestamp",
                InvalidArgumentError(
                    f"column 'timestamp'={value} cannot be a record's timestamp: Kafka takes "
                    f"times from 1970-01-01 00:00:00 UTC on ({exc})"
                ),
            ) from None
    raise AssertionError("unreachable: the conversion failed for no row")


def _row_chunks(layout: _Layout, rows: Iterable[Any]) -> Iterator[dict[str, list[Any]]]:
    """Columns as Python lists from PySpark Rows, ``_ROWS_PER_CHUNK`` at a time.

    Raises:
        _RowRefused: PySpark could not make the next row (a time before year 1 in the
            worker's time zone, say), or a row's timestamp cannot be converted.
    """
    names = layout.columns
    chunk: list[Any] = []
    iterator = iter(rows)
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            break
        except _UNREADABLE as exc:
            raise _unreadable_row(len(chunk), exc) from None
        chunk.append(row)
        if len(chunk) >= _ROWS_PER_CHUNK:
            yield _columns_of_rows(layout, names, chunk)
            chunk = []
    if chunk:
        yield _columns_of_rows(layout, names, chunk)


def _columns_of_rows(
    layout: _Layout, names: tuple[str, ...], rows: list[Any]
) -> dict[str, list[Any]]:
    columns = {name: [row[name] for row in rows] for name in names}
    for name in ("value", "key"):
        # Binary columns arrive as bytearray on the Row path; bytes take the fast path.
        if name in columns:
            columns[name] = [bytes(v) if type(v) is bytearray else v for v in columns[name]]
    if "timestamp" in columns:
        columns["timestamp"] = _timestamps(columns["timestamp"], layout.timestamp)
    return columns


# What PySpark raises when it cannot turn a row into Python objects (datetime's range
# errors); not OSError, which says the worker's connection broke, not a row.
_UNREADABLE = (ArithmeticError, ValueError)


def _unreadable_row(index: int, exc: BaseException) -> _RowRefused:
    error = InvalidArgumentError(
        f"PySpark could not turn the row into Python objects ({exc!r}); the data source, "
        "which reads Arrow batches, may take it"
    )
    error.__cause__ = exc
    return _RowRefused(index, None, error)


def _chunks(layout: _Layout, iterator: Iterator[Any]) -> Iterator[dict[str, list[Any]]]:
    """Arrow batches or Rows, whichever Spark hands the writer, as column lists."""
    try:
        first = next(iterator, None)
    except _UNREADABLE as exc:
        raise _unreadable_row(0, exc) from None
    if first is None:
        return
    rest = _prepend(first, iterator)
    if hasattr(first, "num_rows") and hasattr(first, "column"):
        yield from _arrow_chunks(layout, rest)
    else:
        yield from _row_chunks(layout, rest)


def _prepend(first: _T, rest: Iterator[_T]) -> Iterator[_T]:
    yield first
    yield from rest


# ---- finding the row the producer refused ---------------------------------------------------


def _item_parts(item: Any) -> tuple[Any, Any, Any]:
    """The key, value and headers of a ``send_many`` item as :func:`_items` makes them."""
    if isinstance(item, ProducerRecord):
        return item.key, item.value, item.headers
    if type(item) is tuple:
        return item[0], item[1], None
    return None, item, None


async def _partition_count(producer: Producer, topic: str) -> int | None:
    """The partition count of ``topic`` in the producer's metadata; None when the metadata
    does not have the topic (without the ``max_block_ms`` wait of a send)."""
    try:
        partitions = await asyncio.wait_for(producer.partitions_for(topic), _LOOKUP_TIMEOUT_S)
    except (KafkaError, asyncio.TimeoutError):
        return None
    return len(partitions)


# What send_many raises for a record it refuses: the record's own fault, which a row can
# be blamed for (unlike, say, buffer memory that did not free up in time).
_ROW_ERRORS = (
    InvalidArgumentError,
    InvalidTopicError,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicOrPartitionError,
)


async def _refusal(
    producer: Producer,
    layout: _Layout,
    item: Any,
    error: BaseException,
    counts: dict[str, int | None],
) -> tuple[bool, str | None]:
    """Whether the producer refuses ``item`` for the reason ``error`` gives, checked again by
    the same rules on the same metadata, and the column to blame (None when no one column
    is). ``counts`` caches partition counts by topic."""
    if isinstance(error, RecordTooLargeError):
        config = producer.config
        limit = min(config.max_request_size, config.buffer_memory)
        key, value, headers = _item_parts(item)
        size = record_size(key, value, check_headers(headers)) + RECORD_BATCH_OVERHEAD
        return size > limit, None
    if not isinstance(item, ProducerRecord):
        return False, None  # the fast path: one topic, from the option, and plain bytes
    if isinstance(error, SerializationError):
        try:
            check_headers(item.headers)
        except SerializationError:
            return True, "headers"
        return False, None
    if isinstance(error, InvalidTopicError):
        try:
            validate_topic(item.topic)
        except InvalidTopicError:
            return layout.topic, "topic"  # a topic option is no row's fault
        return False, None
    if isinstance(error, UnknownTopicOrPartitionError):
        if item.topic not in counts:
            counts[item.topic] = await _partition_count(producer, item.topic)
        count = counts[item.topic]
        if count is None:
            return layout.topic, "topic"
        if item.partition is not None and item.partition >= count:
            return True, "partition"
    return False, None


async def _refused_item(
    producer: Producer, layout: _Layout, items: list[Any], error: BaseException
) -> tuple[int, str | None] | None:
    """Which item a ``send_many`` call that raised ``error`` refused, and the column to blame
    (None when no one column is); None when ``error`` is not about one record (a topic
    option the cluster does not have, a closed producer...).

    When the error says which item it was (``accepted``: the records of the items before
    it), that item; otherwise (an error ``send_many`` raises before it takes any item, such
    as an illegal topic for the call) the first item that fails the check ``error`` comes
    from: ``send_many`` takes its items in order and raises for the first it cannot take.
    """
    if not isinstance(error, _ROW_ERRORS):
        return None
    counts: dict[str, int | None] = {}
    accepted = error.accepted
    if accepted is not None and 0 <= len(accepted) < len(items):
        index = len(accepted)
        refused, column = await _refusal(producer, layout, items[index], error, counts)
        if refused or not isinstance(error, InvalidTopicError | UnknownTopicOrPartitionError):
            return index, column
        return None  # the topic option's fault, not this row's
    for index, item in enumerate(items):
        refused, column = await _refusal(producer, layout, item, error, counts)
        if refused:
            return index, column
    return None


async def _send_chunk(
    producer: Producer, layout: _Layout, topic: str, items: list[Any]
) -> BatchResults:
    """``send_many`` for one chunk of a task's rows.

    Raises:
        _RowRefused: the producer refused an item for a fault of its own row.
        KafkaError, TypeError, ValueError: anything else the producer raised.
    """
    try:
        return await producer.send_many(topic, items)
    except (KafkaError, TypeError, ValueError) as exc:
        try:
            refused = await _refused_item(producer, layout, items, exc)
        except Exception:  # the search must not hide the producer's error
            log.debug("could not find the row send_many refused", exc_info=True)
            refused = None
        if refused is None:
            raise
        raise _RowRefused(*refused, exc) from None


# ---- one task's records on a producer -------------------------------------------------------


class _TaskRecords:
    """The records one task hands a producer, which other tasks may share: each chunk goes
    to ``send_many``, and the task waits for its own records' acknowledgements, not for
    other tasks'. Runs on the producer's event loop."""

    def __init__(self, producer: Producer, layout: _Layout) -> None:
        self.producer = producer
        self.layout = layout
        self.sent = 0
        self._pending: deque[BatchResults] = deque()

    async def send(self, topic: str, items: list[Any]) -> None:
        """Buffer one chunk's records (waiting for buffer memory: the backpressure on
        Spark's input); raise the first delivery error of an earlier chunk once it is known.

        Raises:
            _RowRefused: the producer refused an item for a fault of its own row.
            KafkaError: anything else the producer raised (the producer's error).
        """
        results = await _send_chunk(self.producer, self.layout, topic, items)
        self._pending.append(results)
        self.sent += len(items)
        # Fail early, and let go of the results of acknowledged chunks.
        pending = self._pending
        while pending and pending[0].done():
            await pending.popleft()

    async def wait(self) -> int:
        """Wait until every record of this task is acknowledged; return how many there are.

        The producer sends what it holds now (a flush) rather than after ``linger.ms``, but
        the task waits for its own records only: once they are acknowledged, the flush
        stops waiting for records other tasks may be sending through the same producer.

        Raises:
            KafkaError: the first delivery error of the task's records, in the order sent.
        """
        flushing = asyncio.ensure_future(self.producer.flush())
        try:
            pending = self._pending
            while pending:
                await pending.popleft()
        finally:
            if not flushing.done():
                flushing.cancel()
            # A flush that failed (a closed producer) says nothing the records do not.
            await asyncio.gather(flushing, return_exceptions=True)
        return self.sent


# ---- one producer per Python worker process and set of options ------------------------------

# Errors after which a producer cannot send again: it is replaced, not reused.
_FATAL = (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerEpochError,
    ProducerClosedError,
    ProducerFencedError,
    SenderCrashedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)


def _frozen(value: Any) -> Any:
    """``value`` as a hashable key part, or raise TypeError when it is not plain data."""
    if value is None or type(value) in (str, bytes, int, float, bool):
        return value
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    raise TypeError(type(value).__name__)


class _CacheKey(tuple):  # type: ignore[type-arg]
    """The producer options a cached producer was built with, passwords included: a cached
    producer is reused only with the very same credentials. Shown masked."""

    __slots__ = ()

    def __repr__(self) -> str:
        config, options = self
        return f"_CacheKey(config={_masked(dict(config))!r}, options={_masked(dict(options))!r})"

    __str__ = __repr__


def _cache_key(sink: SinkOptions) -> _CacheKey | None:
    """The key of the producer ``sink``'s tasks share, or None when they must not share one:
    a transactional id (a transaction belongs to one task, and a producer holds one
    transaction at a time), or options that are Python objects rather than plain data (a
    callable, an ``ssl.SSLContext``), which each task unpickles anew and which cannot be
    compared."""
    try:
        key = _CacheKey((_frozen(sink.config), _frozen(sink.options)))
    except TypeError:
        return None
    for given in (sink.config, sink.options):
        if any(given.get(name) is not None for name in ("transactional.id", "transactional_id")):
            return None
    return key


@dataclass(eq=False)
class _Entry:
    """A cached producer, the tasks using it, and since when it has been idle."""

    producer: Producer
    started: concurrent.futures.Future[None]
    timeout: float
    users: int = 0
    idle_since: float = 0.0
    evicted: bool = False


@dataclass(frozen=True)
class _CacheStatistics:
    """What the producer cache of this process holds: for diagnostics and tests."""

    built: int  # producers built since the process started
    cached: int  # producers in the cache now
    in_use: int  # tasks sending through a cached producer now


class _ProducerCache:
    """The producers of one Python worker process, one per set of options, as Spark's
    ``CachedKafkaProducer`` keeps one per executor JVM.

    They run on one event loop (uvloop when installed) in a daemon thread of their own;
    tasks hand it their records from their own threads. A producer idle for its timeout
    (``spark.kafka.producer.cache.timeout``, 10 minutes by default) is closed; one that
    failed for good (fenced, refused credentials, closed) is replaced; at exit every one is
    flushed and closed.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[_CacheKey, _Entry] = {}
        self._built = 0
        self._loop = _new_loop()
        thread = threading.Thread(
            target=self._run_loop, name="aioproducer-spark-producers", daemon=True
        )
        thread.start()
        self._exit_hook = False

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the producers' loop; return its result in this thread."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # this thread was interrupted: so is the coroutine
            raise

    def statistics(self) -> _CacheStatistics:
        """Producers built, cached and in use in this process."""
        with self._lock:
            return _CacheStatistics(
                self._built, len(self._entries), sum(e.users for e in self._entries.values())
            )

    # ---- lending producers to tasks ---------------------------------------------------------

    def acquire(self, key: _CacheKey, sink: SinkOptions) -> _Entry:
        """The producer for ``key``, started (built on first use); the caller must
        :meth:`release` it.

        Raises:
            KafkaError: the producer could not start (it is not cached).
        """
        self.expire_idle()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.producer.state not in (
                ProducerState.CREATED,
                ProducerState.RUNNING,
            ):
                self._evict(key, entry)
                entry = None
            if entry is None:
                producer = sink.producer()
                started = asyncio.run_coroutine_threadsafe(producer.start(), self._loop)
                entry = _Entry(producer, started, sink.cache_timeout)
                self._entries[key] = entry
                self._built += 1
                if not self._exit_hook:
                    atexit.register(self.close)
                    self._exit_hook = True
            entry.timeout = sink.cache_timeout
            entry.users += 1
        try:
            entry.started.result()
        except BaseException:
            self.release(key, entry, failed=True)
            raise
        return entry

    def release(self, key: _CacheKey, entry: _Entry, error: BaseException | None = None,
                failed: bool = False) -> None:  # fmt: skip
        """A task is done with ``entry``'s producer. After ``error``, a fatal error or a
        producer that no longer runs, the producer is evicted: the next task builds a new
        one. What the failed task left in the producer's buffer is still sent."""
        with self._lock:
            entry.users -= 1
            if (
                failed
                or isinstance(error, _FATAL)
                or (entry.producer.state is not ProducerState.RUNNING)
            ):
                self._evict(key, entry)
            if entry.users == 0:
                entry.idle_since = self._clock()
                if entry.evicted:
                    self._close(entry)
                else:
                    self._loop.call_soon_threadsafe(
                        self._loop.call_later, entry.timeout, self.expire_idle
                    )

    def _evict(self, key: _CacheKey, entry: _Entry) -> None:
        if self._entries.get(key) is entry:
            del self._entries[key]
        if not entry.evicted:
            entry.evicted = True
            log.info("aioproducer: a Spark producer was replaced (%r)", entry.producer)
            if entry.users == 0:
                self._close(entry)

    def _close(self, entry: _Entry, timeout: float | None = 0) -> concurrent.futures.Future[None]:
        async def close() -> None:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(entry.started)
            try:
                await entry.producer.close(timeout)
            except Exception as exc:  # it failed already; the tasks saw why
                log.debug("closing a Spark producer: %r", exc)

        return asyncio.run_coroutine_threadsafe(close(), self._loop)

    def expire_idle(self) -> list[concurrent.futures.Future[None]]:
        """Close the producers no task has used for their timeout; they deliver what
        they hold first. Returns the closings under way."""
        now = self._clock()
        closing = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry.users == 0 and now - entry.idle_since >= entry.timeout:
                    del self._entries[key]
                    entry.evicted = True
                    closing.append(self._close(entry, timeout=None))
        return closing

    def close_all(self) -> None:
        """Flush and close every cached producer (at exit)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            for entry in entries:
                entry.evicted = True
            closing = [self._close(entry, timeout=None) for entry in entries]
        for future in closing:
            with contextlib.suppress(Exception):
                future.result()

    def close(self) -> None:
        """Flush and close every cached producer, then stop the loop (at exit)."""
        self.close_all()
        atexit.unregister(self.close)
        self._loop.call_soon_threadsafe(self._loop.stop)

    # ---- one task's write -------------------------------------------------------------------

    def write(
        self,
        key: _CacheKey,
        sink: SinkOptions,
        layout: _Layout,
        chunks: Iterator[Mapping[str, list[Any]]],
    ) -> int:
        """Send every chunk through the cached producer for ``key`` and wait for the
        records' acknowledgements; return their count.

        Raises:
            KafkaError: the first delivery error of this task's records, or the error of
                the first row that cannot be a record.
        """
        position = 0  # rows of the task's input before the chunk at hand
        try:
            first = next(chunks, None)
            if first is None:
                return 0  # an empty partition needs no producer
            entry: _Entry | None = self.acquire(key, sink)
            error: BaseException | None = None
            try:
                assert entry is not None
                task = _TaskRecords(entry.producer, layout)
                for columns in _prepend(first, chunks):
                    topic, items = _items(layout, sink.topic, columns)
                    if not items:
                        continue
                    try:
                        self.run(task.send(topic, items))
                    except _FATAL as exc:
                        if task.sent or (exc.accepted is not None and len(exc.accepted)):
                            raise
                        # The cached producer had failed before this task took it (its
                        # InitProducerId was refused, say): a new one sends instead.
                        log.info("aioproducer: a cached producer failed (%r); using a new one",
                                 exc)  # fmt: skip
                        self.release(key, entry, exc)
                        entry = None
                        entry = self.acquire(key, sink)
                        task = _TaskRecords(entry.producer, layout)
                        self.run(task.send(topic, items))
                    position += len(items)
                return self.run(task.wait())
            except BaseException as exc:
                error = exc
                raise
            finally:
                if entry is not None:
                    self.release(key, entry, error)
        except _RowRefused as refused:
            raise _row_error(position + refused.index, refused.column, refused.error) from (
                refused.error
            )


_cache: _ProducerCache | None = None
_cache_pid = -1
_cache_lock = threading.Lock()


def _producers() -> _ProducerCache:
    """This process's producer cache (a new one in a forked child: threads do not survive
    a fork)."""
    global _cache, _cache_pid
    with _cache_lock:
        if _cache is None or _cache_pid != os.getpid():
            _cache = _ProducerCache()
            _cache_pid = os.getpid()
        return _cache


# ---- one partition, with a producer of its own ----------------------------------------------


async def _produce(
    sink: SinkOptions,
    layout: _Layout,
    chunks: Iterator[Mapping[str, list[Any]]],
    producer: Producer | None = None,
) -> int:
    """Send every chunk through a producer of the task's own; return the count once all are
    acknowledged, or raise the first delivery error, or the error of the first row that
    cannot be a record. The records go through ``producer`` (not started yet) or, when
    None, a new one with ``sink``'s options; it is closed at the end."""
    position = 0  # rows of the task's input before the chunk at hand
    try:
        first = next(chunks, None)
        if first is None:
            return 0  # an empty partition needs no connection
        if producer is None:
            producer = sink.producer()
        await producer.start()
        task = _TaskRecords(producer, layout)
        try:
            for columns in _prepend(first, chunks):
                topic, items = _items(layout, sink.topic, columns)
                if not items:
                    continue
                await task.send(topic, items)
                position += len(items)
            sent = await task.wait()
        except BaseException:
            # The task fails and Spark may retry it; what is still buffered need not be
            # sent (the retry sends every row again).
            await producer.close(timeout=0)
            raise
        await producer.close()
        return sent
    except _RowRefused as refused:
        raise _row_error(position + refused.index, refused.column, refused.error) from (
            refused.error
        )


def _new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when installed."""
    if sys.platform != "win32":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from synchronous code, on a fresh event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if sys.version_info < (3, 11):
            return asyncio.run(coroutine)
        with asyncio.Runner(loop_factory=_new_loop) as runner:
            return runner.run(coroutine)
    # This thread runs an event loop already (a notebook driver, say), where a coroutine
    # cannot be run to completion: give it a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(1, "aioproducer-spark") as pool:
        future: concurrent.futures.Future[_T] = pool.submit(_run, coroutine)
        return future.result()


def _write_partition(sink: SinkOptions, layout: _Layout, iterator: Iterator[Any]) -> int:
    """One task's write: through this process's cached producer for ``sink``'s options, or
    a producer of the task's own when they must not share one (see :func:`_cache_key`)."""
    warn_if_interpreted(log)  # once per Python worker, in the executor's log
    chunks = _chunks(layout, iterator)
    key = _cache_key(sink)
    if key is None:
        return _run(_produce(sink, layout, chunks))
    return _producers().write(key, sink, layout, chunks)


# ---- the PySpark 4 data source --------------------------------------------------------------


@dataclass(frozen=True)
class KafkaCommitMessage(WriterCommitMessage):
    """What one partition task reports to the driver once its records are acknowledged.

    Attributes:
        partition_id: the Spark partition.
        records: how many records it wrote.
    """

    partition_id: int
    records: int


def _partition_id() -> int:
    """The Spark partition of the task running here, or -1 outside a Spark task."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return -1
    context = TaskContext.get()
    return context.partitionId() if context is not None else -1


class KafkaBatchWriter(DataSourceArrowWriter):
    """Writes a DataFrame's partitions to Kafka (made by :class:`KafkaDataSource`).

    ``write`` runs in each partition task on an executor; ``commit`` and ``abort`` run on the
    driver. Kafka cannot roll records back, so ``abort`` only reports what was written.
    """

    def __init__(self, sink: SinkOptions, layout: _Layout) -> None:
        self.sink = sink
        self.layout = layout

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        """Send the partition's rows; return once all are acknowledged.

        Raises:
            KafkaError: a record was not delivered (the task fails).
        """
        records = _write_partition(self.sink, self.layout, iterator)
        return KafkaCommitMessage(partition_id=_partition_id(), records=records)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log how many records the job wrote."""
        total = sum(m.records for m in messages if isinstance(m, KafkaCommitMessage))
        log.info("aioproducer wrote %d records from %d partitions", total, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the tasks that succeeded wrote: those records stay in Kafka."""
        done = [m for m in messages if isinstance(m, KafkaCommitMessage)]
        log.warning(
            "the write failed; %d records from %d successful partition tasks are in Kafka "
            "already (Kafka writes cannot be rolled back)",
            sum(m.records for m in done),
            len(done),
        )


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch of a streaming query to Kafka (made by
    :class:`KafkaDataSource`); at least once, like Spark's own Kafka sink."""

    def __init__(self, sink: SinkOptions, layout: _Layout) -> None:
        self.sink = sink
        self.layout = layout

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        """Send the partition's rows of the micro-batch; return once all are acknowledged."""
        records = _write_partition(self.sink, self.layout, iterator)
        return KafkaCommitMessage(partition_id=_partition_id(), records=records)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log how many records the micro-batch wrote."""
        total = sum(m.records for m in messages if isinstance(m, KafkaCommitMessage))
        log.info("aioproducer wrote %d records in micro-batch %d", total, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the failed micro-batch; records already written stay in Kafka."""
        log.warning("micro-batch %d failed; it will be written again when retried", batchId)


# ---- the foreachPartition fallback -------------------------------------------------------------


def _write_rows(sink: SinkOptions, layout: _Layout, counter: Any, rows: Iterator[Any]) -> None:
    counter.add(_write_partition(sink, layout, rows))


def write_dataframe(
    df: DataFrame,
    topic: str | None = None,
    config: Mapping[str, Any] | None = None,
    **options: Any,
) -> int:
    """Write a DataFrame to Kafka with ``foreachPartition``: for Spark without the Python
    data source API (or when you prefer producer options as Python values).

    The DataFrame has the Kafka sink columns (``value``, and optionally ``key``, ``topic``,
    ``partition``, ``headers``, ``timestamp``). Each partition task runs one producer and
    returns once its records are acknowledged; a delivery error fails the job. Needs a
    classic SparkSession (an accumulator counts the records).

    Args:
        df: the DataFrame.
        topic: the topic for every row; None reads each row's ``topic`` column.
        config: producer options by Java or snake_case name.
        **options: producer options by snake_case name (``bootstrap_servers=...``).

    Returns:
        How many records were written.

    Raises:
        ConfigurationError: invalid producer options or columns (checked before any task).
    """
    import functools

    timeout = df.sparkSession.conf.get(_CACHE_TIMEOUT_OPTION, None)
    sink = SinkOptions(
        topic,
        _with_sink_defaults(dict(config or {}), options),
        dict(options),
        _DEFAULT_CACHE_TIMEOUT_S if timeout is None else _cache_timeout(timeout, "Spark conf"),
    )
    sink.check()
    layout = _layout(df.schema, topic)
    counter = df.sparkSession.sparkContext.accumulator(0)
    df.foreachPartition(functools.partial(_write_rows, sink, layout, counter))
    written: int = counter.value
    return written


def write_dataframe_on_driver(df: DataFrame, producer: Producer, topic: str | None = None) -> int:
    """Write a DataFrame's rows through ``producer``, from the driver: for tests.

    The rows are brought to the driver (``toLocalIterator``) and become records by the
    sink's own rules: the same columns, the same checks, the same error for a row that
    cannot be a record (naming the row, 0-based, and the column). With an
    :class:`~aioproducer.testing.InMemoryProducer` this tests what a job would write to
    Kafka, without a broker: the data source and :func:`write_dataframe` send from the
    Python workers, other processes (even in local mode), where an in-memory producer's
    records would be out of the test's reach.

    Args:
        df: the DataFrame, with the Kafka sink columns (see the module).
        producer: a producer not started yet; it is started, and closed once every record
            is acknowledged. With no rows it is left as it is.
        topic: the topic for every row; None reads each row's ``topic`` column.

    Returns:
        How many records were written.

    Raises:
        ConfigurationError: the columns do not fit the sink.
        KafkaError: a row that cannot be a record, or a delivery error.
    """
    layout = _layout(df.schema, topic)
    sink = SinkOptions(topic, {})
    return _run(_produce(sink, layout, _row_chunks(layout, df.toLocalIterator()), producer))
