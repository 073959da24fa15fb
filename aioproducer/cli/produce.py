"""``aioproducer produce``: lines of text from stdin or a file, one record each, as
``kafka-console-producer`` sends them."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Final

from aioproducer._core.appender import check_headers
from aioproducer._core.futures import RecordFuture
from aioproducer.admin import NewTopic
from aioproducer.cli.common import (
    _CONFIG_NAME_SHAPE,
    _EXIT_DELIVERY,
    _EXIT_OK,
    CONSOLE_CLIENT_ID,
    PROG,
    DeliveryError,
    UsageError,
    _apply_shortcuts,
    _argument_bytes,
    _check_config,
    _check_partitions,
    _check_topic,
    _close_quietly,
    _cluster,
    _count,
    _default_client_id,
    _describe,
    _Failures,
    _make_producer,
    _note,
    _option_names,
    _parse_pairs,
    _producer_props,
    _read_properties,
    _run,
    _start_failure,
)
from aioproducer.errors import (
    InvalidArgumentError,
    KafkaError,
    SerializationError,
)
from aioproducer.producer import Producer
from aioproducer.records import check_partition

# ---- produce -------------------------------------------------------------------------------


class _LineReader:
    """Lines from files or stdin, read in a daemon thread so the event loop keeps sending.

    A daemon thread rather than the loop's executor: a thread blocked on an idle terminal
    must not keep the process alive after Ctrl+C.
    """

    def __init__(self, sources: Sequence[str], chunk_size: int = 1 << 16) -> None:
        self._sources = list(sources) or ["-"]
        self._chunk_size = chunk_size

    def _open(self, source: str) -> IO[bytes]:
        if source == "-":
            return sys.stdin.buffer
        return open(source, "rb")

    @staticmethod
    def _reader(stream: IO[bytes]) -> Callable[[int], bytes]:
        if stream is sys.stdin.buffer:
            # stdin by its file descriptor, not through its buffered reader: the thread may
            # still be reading when the command ends on an error, and a daemon thread that
            # holds the reader's lock at interpreter shutdown is a fatal error (Python 3.13
            # aborts the process).
            try:
                fd = sys.stdin.fileno()
            except (AttributeError, OSError, ValueError):  # a stdin without a descriptor
                pass
            else:
                return lambda size: os.read(fd, size)
        read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
        return read

    async def lines(self) -> AsyncIterator[bytes]:
        """Each line without its line ending, across all sources in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        credit = threading.Semaphore(8)  # chunks read ahead of the sender, at most

        def put(item: bytes | BaseException | None) -> bool:
            credit.acquire()
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                return False
            return True

        def read_all() -> None:
            for source in self._sources:
                try:
                    stream = self._open(source)
                except OSError as exc:
                    put(exc)
                    return
                try:
                    read = self._reader(stream)
                    while chunk := read(self._chunk_size):
                        if not put(chunk):
                            return
                    if not put(b""):  # end of this source: its last line needs no newline
                        return
                except OSError as exc:
                    put(exc)
                    return
                finally:
                    if stream is not sys.stdin.buffer:
                        stream.close()
            put(None)

        threading.Thread(target=read_all, name="aioproducer-stdin", daemon=True).start()
        pending = b""
        while True:
            item = await queue.get()
            credit.release()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise UsageError(f"cannot read input: {item}")
            if not item:
                if pending:
                    yield pending[:-1] if pending.endswith(b"\r") else pending
                pending = b""
                continue
            pending += item
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line[:-1] if line.endswith(b"\r") else line


#: kafka-console-producer's --property names, with their defaults.
_READER_DEFAULTS: Final[dict[str, str]] = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.marker": "",
    "ignore.error": "false",
}


class _LineError(Exception):
    """A line that cannot be read as a record."""


@dataclass(frozen=True)
class _LineFormat:
    """How ``produce`` reads a line, as kafka-console-producer's line reader does.

    ``[headers <headers.delimiter>][key <key.separator>]value``, the headers being
    ``name<headers.key.separator>value`` pairs joined by ``headers.separator``.
    """

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    def parse(
        self, line: bytes, number: int
    ) -> tuple[list[tuple[str, bytes | None]], bytes | None, bytes | None]:
        """``(headers, key, value)`` of line ``number``; _LineError if it does not fit."""
        rest = line
        headers: list[tuple[str, bytes | None]] = []
        if self.parse_headers:
            found, rest = self._cut(rest, self.headers_delimiter, "headers delimiter", number)
            if found is not None and found != self.null_marker:
                headers = self._headers(found, number)
        key: bytes | None = None
        if self.parse_key:
            key, rest = self._cut(rest, self.key_separator, "key separator", number)
            if key == self.null_marker:
                key = None
        value: bytes | None = None if rest == self.null_marker else rest
        return headers, key, value

    def _cut(
        self, line: bytes, separator: bytes, what: str, number: int
    ) -> tuple[bytes | None, bytes]:
        head, sep, tail = line.partition(separator)
        if sep:
            return head, tail
        if self.ignore_error:  # the whole rest is what comes next
            return None, line
        raise _LineError(f"line {number} has no {what} {_shown(separator)}")

    def _headers(self, text: bytes, number: int) -> list[tuple[str, bytes | None]]:
        pairs = text.split(self.headers_separator)
        while pairs and not pairs[-1]:  # as Java's String.split drops trailing empty ones
            pairs.pop()
        headers: list[tuple[str, bytes | None]] = []
        for pair in pairs:
            name, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if not self.ignore_error:
                    raise _LineError(
                        f"line {number}: header {_shown(pair)} has no header key separator "
                        f"{_shown(self.headers_key_separator)}"
                    )
                headers.append((self._header_name(name, number), None))
                continue
            if name == self.null_marker:
                raise _LineError(
                    f"line {number}: a header name cannot be the null marker "
                    f"{_shown(name)} (header names cannot be null)"
                )
            headers.append(
                (self._header_name(name, number), None if value == self.null_marker else value)
            )
        return headers

    @staticmethod
    def _header_name(name: bytes, number: int) -> str:
        try:
            return name.decode("utf-8")
        except UnicodeDecodeError:
            raise _LineError(f"line {number}: header name {name!r} is not UTF-8 text") from None


def _shown(separator: bytes) -> str:
    return repr(separator.decode("utf-8", "backslashreplace"))


def _reader_props(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    if args.reader_config_file:
        path = args.reader_config_file
        for name, value, line in _read_properties(path, "--reader-config"):
            if name not in _READER_DEFAULTS and not _CONFIG_NAME_SHAPE.fullmatch(name):
                raise UsageError(
                    f"--reader-config {path} line {line}: not a --property name (it is not "
                    "shown, as the line may hold a secret)"
                )
            props[name] = value
    props.update(_parse_pairs(args.reader_props, "--property"))
    for name in props:
        if name in _READER_DEFAULTS:
            continue
        if name in _option_names():
            raise UsageError(
                f"--property {name}: {name} is a producer config; give it with "
                f"--producer-property {name}=VALUE"
            )
        close = difflib.get_close_matches(name, list(_READER_DEFAULTS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known = ", ".join(_READER_DEFAULTS)
        raise UsageError(f"--property: unknown property {name!r}{hint} (known: {known})")
    return props


def _flag(props: dict[str, str], name: str) -> bool:
    value = props.get(name, _READER_DEFAULTS[name]).strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"--property {name} must be true or false, got {props[name]!r}")
    return value == "true"


def _line_format(args: argparse.Namespace) -> _LineFormat:
    """The line format of ``--property``, ``--reader-config``, ``--key`` and
    ``--key-separator``, checked as Kafka's line reader checks it."""
    props = _reader_props(args)
    if args.key_separator is not None:
        if args.key_separator == "":
            raise UsageError("--key-separator must not be empty")
        given = props.get("key.separator")
        if given is not None and given != args.key_separator:
            raise UsageError(
                f"--key-separator {args.key_separator!r} and --property "
                f"key.separator={given} disagree"
            )
        if "parse.key" in props and not _flag(props, "parse.key"):
            raise UsageError("--key-separator parses keys, but --property parse.key=false")
        props["parse.key"] = "true"
        props["key.separator"] = args.key_separator
    parse_key = _flag(props, "parse.key")
    if parse_key and args.key is not None:
        raise UsageError("--key gives every record its key, but parse.key=true reads keys")
    separators = {
        name: props.get(name, _READER_DEFAULTS[name])
        for name in (
            "key.separator",
            "headers.delimiter",
            "headers.separator",
            "headers.key.separator",
        )
    }
    for name, value in separators.items():
        if not value:
            raise UsageError(f"--property {name} must not be empty")
    for first, second in (
        ("headers.delimiter", "headers.separator"),
        ("headers.delimiter", "headers.key.separator"),
        ("headers.separator", "headers.key.separator"),
    ):
        if separators[first] == separators[second]:
            raise UsageError(f"--property {first} and {second} may not be equal")
    null_marker = props.get("null.marker")  # an empty one makes empty fields None
    if null_marker is not None:
        for name, value in separators.items():
            if value == null_marker:
                raise UsageError(f"--property null.marker and {name} may not be equal")
    return _LineFormat(
        parse_key=parse_key,
        key_separator=_argument_bytes(separators["key.separator"]),
        parse_headers=_flag(props, "parse.headers"),
        headers_delimiter=_argument_bytes(separators["headers.delimiter"]),
        headers_separator=_argument_bytes(separators["headers.separator"]),
        headers_key_separator=_argument_bytes(separators["headers.key.separator"]),
        null_marker=None if null_marker is None else _argument_bytes(null_marker),
        ignore_error=_flag(props, "ignore.error"),
    )


@dataclass
class _ProduceReport:
    topic: str
    sent: int = 0
    delivered: int = 0
    offsets: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    unacknowledged: dict[int, int] = field(default_factory=dict)
    """Records per partition sent with acks=0: the broker gives no offsets back."""
    failures: _Failures = field(default_factory=_Failures)

    def on_done(self, future: RecordFuture) -> None:
        exc = future.exception()
        if exc is not None:
            self.failures.add(exc)
            return
        metadata = future.result()
        self.delivered += 1
        if metadata.offset < 0:
            self.unacknowledged[metadata.partition] = (
                self.unacknowledged.get(metadata.partition, 0) + 1
            )
            return
        low, high, count = self.offsets.get(metadata.partition, (metadata.offset, -1, 0))
        self.offsets[metadata.partition] = (
            min(low, metadata.offset),
            max(high, metadata.offset),
            count + 1,
        )

    def summary(self) -> str:
        partitions = sorted(set(self.offsets) | set(self.unacknowledged))
        parts = ", ".join(str(p) for p in partitions) or "none"
        verb = "sent without acknowledgement (acks=0)" if self.unacknowledged else "delivered"
        lines = [
            f"{_count(self.delivered, 'record')} {verb} to topic {self.topic} (partitions: {parts})"
        ]
        for partition in partitions:
            if partition in self.offsets:
                low, high, count = self.offsets[partition]
                lines.append(
                    f"  partition {partition}: offsets {low}..{high} ({_count(count, 'record')})"
                )
            if partition in self.unacknowledged:
                count = self.unacknowledged[partition]
                lines.append(f"  partition {partition}: {_count(count, 'record')}, offsets unknown")
        return "\n".join(lines)


def _new_topic(args: argparse.Namespace) -> NewTopic | None:
    """The topic ``--create-topic`` and ``--topic-config`` ask for, or None."""
    spec = args.create_topic
    if spec is None:
        if args.topic_config:
            raise UsageError("--topic-config configures the topic --create-topic creates")
        return None
    counts = spec.split(":")
    try:
        if len(counts) > 2 or not all(part.strip().isdigit() for part in counts):
            raise ValueError
        partitions = int(counts[0])
        replication = int(counts[1]) if len(counts) == 2 else None
    except ValueError:
        raise UsageError(
            f"--create-topic: expected PARTITIONS or PARTITIONS:REPLICATION (6, 6:3), got {spec!r}"
        ) from None
    configs = dict(_parse_pairs(args.topic_config, "--topic-config"))
    try:
        return NewTopic(args.topic, partitions, replication, configs)
    except KafkaError as exc:
        raise UsageError(f"--create-topic: {exc}") from None


async def _ensure_topic(producer: Producer, topic: NewTopic) -> None:
    """Make sure ``topic`` exists, saying on stderr whether it was created."""
    try:
        results = await producer.admin.ensure_topics([topic])
    except KafkaError as exc:
        raise DeliveryError(f"cannot create topic {topic.name}: {_describe(exc)}") from None
    result = results[topic.name]
    partitions = _count(result.num_partitions, "partition")
    if result.created:
        _note(f"topic {topic.name} created with {partitions}")
    elif result.num_partitions < 0:  # not described in time: it exists all the same
        _note(f"topic {topic.name} exists already; used as it is")
    else:
        _note(f"topic {topic.name} exists already, with {partitions}; used as it is")


def _cmd_produce(args: argparse.Namespace) -> int:
    # Everything is checked before a broker is started or reached.
    _check_topic(args.topic)
    props = _producer_props(args)
    _apply_shortcuts(args, props)
    _default_client_id(props, CONSOLE_CLIENT_ID)
    _check_config(props)
    line_format = _line_format(args)
    headers: list[tuple[str, bytes | None]] = [
        (name, _argument_bytes(value)) for name, value in _parse_pairs(args.header, "--header")
    ]
    try:
        check_headers(headers)  # what send() would refuse for every line
    except SerializationError as exc:
        raise UsageError(f"--header: {exc}") from None
    try:
        check_partition(args.partition, "--partition")
    except InvalidArgumentError as exc:
        raise UsageError(str(exc)) from None
    _check_partitions(props, args.partitions)
    new_topic = _new_topic(args)
    for path in args.files:
        if path != "-" and not os.path.isfile(path):
            raise UsageError(f"no such file: {path}")
    # With --create-topic, the command creates the topic, on an embedded broker too.
    with _cluster(props, args.topic, args.partitions, create=new_topic is None) as (
        bootstrap,
        _embedded,
    ):
        producer = _make_producer(props, bootstrap)
        report = _ProduceReport(args.topic)
        error = _run(
            lambda: _produce(producer, args, line_format, headers, report, new_topic),
            not args.no_uvloop,
        )
    print(report.summary(), flush=True)
    if error is not None:
        print(f"{PROG} produce: error: {error}", file=sys.stderr)
    if report.failures.count:
        print(f"{PROG} produce: error: {report.failures.report(report.sent)}", file=sys.stderr)
    return _EXIT_DELIVERY if error is not None or report.failures.count else _EXIT_OK


async def _produce(
    producer: Producer,
    args: argparse.Namespace,
    line_format: _LineFormat,
    fixed_headers: list[tuple[str, bytes | None]],
    report: _ProduceReport,
    new_topic: NewTopic | None = None,
) -> str | None:
    """Send every line (after making sure ``new_topic`` exists, when given); return why
    sending stopped early, or None."""
    fixed_key = _argument_bytes(args.key) if args.key is not None else None
    try:
        await producer.start()
    except KafkaError as exc:
        raise DeliveryError(_start_failure(producer, exc)) from None
    if new_topic is not None:
        try:
            await _ensure_topic(producer, new_topic)
        except BaseException:
            await _close_quietly(producer, timeout=0)
            raise
    stopped: str | None = None
    try:
        number = 0
        async for line in _LineReader(args.files).lines():
            number += 1
            try:
                parsed, key, value = line_format.parse(line, number)
            except _LineError as exc:
                stopped = f"{exc}; stopped there"
                break
            if not line_format.parse_key:
                key = fixed_key
            headers = fixed_headers + parsed
            try:
                future = await producer.send(
                    args.topic, value, key, partition=args.partition, headers=headers or None
                )
            except KafkaError as exc:  # refused, or no metadata or memory in time
                stopped = f"line {number} was not sent: {_describe(exc)}; stopped there"
                break
            report.sent += 1
            if not args.sync:
                future.add_done_callback(report.on_done)
                continue
            with contextlib.suppress(Exception):  # read below
                await future
            failure = future.exception()
            if failure is not None:
                stopped = f"line {number} was not delivered: {_describe(failure)}; stopped there"
                break
            report.on_done(future)
        await producer.flush()
    except KafkaError as exc:
        stopped = f"sending stopped after {_count(report.sent, 'record')}: {_describe(exc)}"
    except BaseException:  # Ctrl+C: a last, bounded chance for the lines already read
        await _close_quietly(producer, timeout=5.0)
        raise
    await producer.close()
    return stopped
