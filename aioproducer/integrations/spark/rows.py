"""Rows into records: a DataFrame's columns (Arrow batches or Rows) in chunks for
``send_many``, and the row to blame when the producer refuses one."""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, TypeVar

from aioproducer import BatchResults, Producer, ProducerRecord
from aioproducer._core.appender import check_headers, record_size
from aioproducer._core.metadata import validate_topic
from aioproducer.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTopicError,
    KafkaError,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from aioproducer.integrations.spark.options import _Layout
from aioproducer.integrations.spark.registry import arrow_without_timestamps, row_converter_for
from aioproducer.protocol.record_batch import RECORD_BATCH_OVERHEAD
from aioproducer.records import check_partition, check_timestamp


def _load_binary_pairs() -> Callable[[int, Any, Any], Any] | None:
    try:
        from aioproducer._native.arrowcols import BinaryPairs
    except ImportError:  # the pure-Python install: chunks go as the columns' lists
        return None
    return BinaryPairs


_BINARY_PAIRS: Final = _load_binary_pairs()

__all__ = []

log = logging.getLogger("aioproducer.integrations.spark")

_T = TypeVar("_T")

# Rows handed to send_many at once on the Row path; the Arrow path uses Spark's own batches
# (spark.sql.execution.arrow.maxRecordsPerBatch, 10,000 by default).
_ROWS_PER_CHUNK = 10_000

_EPOCH = datetime.datetime(1970, 1, 1)
_MILLISECOND = datetime.timedelta(milliseconds=1)

# How long finding the row the producer refused may wait for a topic's metadata: the
# producer has just looked it up, so it is known at once or not at all.
_LOOKUP_TIMEOUT_S = 1.0

_SEND_MANY_ITEM = re.compile(r"^send_many item \d+: ")


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
    pairs = columns.get("pairs")
    if pairs is not None:
        assert topic is not None
        return topic, pairs  # made from the Arrow buffers (see _arrow_chunks)
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


# The Arrow types of a key or value column that _arrow_pairs reads, and whether their
# offsets are 64-bit. A Spark string column's bytes are sent as they are (see _arrow_chunks).
_BINARY_KINDS: Final = {
    "binary": False,
    "string": False,
    "large_binary": True,
    "large_string": True,
}


def _arrow_pairs(layout: _Layout, batch: Any) -> Any:
    """A chunk's ``send_many`` items as a BinaryPairs (``aioproducer._native.arrowcols``): the
    ``(key, value)`` rows of the batch, which the producer encodes from the Arrow buffers
    without a Python object per row (a batch without keys, or whose keys are all null, as
    key-less rows). None where that does not apply: no C helper, a layout with columns
    other than a key and a value, or a key or value of a type other than binary or
    string."""
    if _BINARY_PAIRS is None or layout.key not in (None, "binary", "string"):
        return None
    if layout.value not in ("binary", "string") or set(layout.columns) - {"key", "value"}:
        return None
    keys = batch.column("key") if layout.key is not None else None
    if keys is not None and keys.null_count == batch.num_rows:
        keys = None  # no key in the batch: key-less rows, for the sticky partitioner
    specs: list[Any] = []
    for column in (keys, batch.column("value")):
        if column is None:
            specs.append(None)
            continue
        wide = _BINARY_KINDS.get(str(column.type))
        if wide is None or not hasattr(column, "buffers"):
            return None  # not binary or string, or not an Array (a Table's ChunkedArray)
        buffers = column.buffers()
        if len(buffers) != 3:
            return None
        validity, offsets, data = buffers
        specs.append((validity, offsets, data, column.offset, wide))
    return _BINARY_PAIRS(batch.num_rows, specs[0], specs[1])


def _arrow_chunks(layout: _Layout, batches: Iterable[Any]) -> Iterator[dict[str, list[Any]]]:
    """Columns as Python lists from Arrow record batches (no Row per record); for a chunk of
    keys and values only, the ``send_many`` items themselves, a BinaryPairs, under
    ``"pairs"`` (see :func:`_arrow_pairs`)."""
    names = layout.columns
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pairs = _arrow_pairs(layout, batch)
        if pairs is not None:
            yield {"pairs": pairs}
            continue
        columns: dict[str, list[Any]] = {}
        for name in names:
            column = batch.column(name)
            if name == "key" and column.null_count == batch.num_rows:
                continue  # no key in the batch: see _items
            if name == "timestamp" and layout.timestamp != "millis":
                micros = column.cast("int64").to_pylist()
                columns[name] = [None if t is None else t // 1000 for t in micros]
            elif name in ("key", "value") and getattr(layout, name) in ("avro", "json"):
                # For the registry's serializers: timestamps as epoch microseconds.
                target = arrow_without_timestamps(column.type)
                if target != column.type:
                    column = column.cast(target)
                columns[name] = _arrow_list(column, name)
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
        if name not in columns:
            continue
        if getattr(layout, name) in ("avro", "json"):
            # For the registry's serializers, in the Arrow path's form: nested Rows as
            # dicts, timestamps as epoch microseconds.
            spark_type = layout.key_type if name == "key" else layout.value_type
            convert = row_converter_for(spark_type) if spark_type is not None else None
            values = [_as_dict(v) for v in columns[name]]
            columns[name] = values if convert is None else [convert(v) for v in values]
        else:
            # Binary columns arrive as bytearray on the Row path; bytes take the fast path.
            columns[name] = [bytes(v) if type(v) is bytearray else v for v in columns[name]]
    if "timestamp" in columns:
        columns["timestamp"] = _timestamps(columns["timestamp"], layout.timestamp)
    return columns


def _as_dict(value: Any) -> Any:
    """A Row (a struct column's value) as a dict, nested Rows too; anything else as it is."""
    as_dict = getattr(value, "asDict", None)
    return as_dict(recursive=True) if as_dict is not None else value


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


def _partition_id() -> int:
    """The Spark partition of the task running here, or -1 outside a Spark task."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return -1
    context = TaskContext.get()
    return context.partitionId() if context is not None else -1
