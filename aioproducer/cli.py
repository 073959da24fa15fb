"""The ``aioproducer`` command: produce lines of text, measure throughput, run the demo.

Every subcommand talks to the cluster named by ``--bootstrap-servers`` (or
``bootstrap.servers`` in ``--producer-props`` / ``--producer.config``). When none is given,
it starts a throwaway Tansu broker (:class:`aioproducer.embedded.EmbeddedBroker`), creates
the topic on it, and stops the broker on exit, so every command works on a fresh machine.

Exit codes: 0 on success, 1 when a record was not delivered (or the broker could not be
reached), 2 for usage errors, 130 on Ctrl+C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import functools
import logging
import math
import os
import random
import re
import shlex
import signal
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, NoReturn, TypeVar

from aioproducer._core.appender import check_headers
from aioproducer._core.futures import BatchResults, RecordFuture
from aioproducer._core.metadata import validate_topic
from aioproducer.compiled import warn_if_interpreted
from aioproducer.config import (
    _JAVA_ONLY,
    ProducerConfig,
    _field_name,
    _names_a_secret,
    options_table,
)
from aioproducer.errors import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidTopicError,
    KafkaError,
    SerializationError,
)
from aioproducer.metric_catalog import Metric
from aioproducer.producer import Producer
from aioproducer.properties import read_entries
from aioproducer.records import check_partition

__all__ = [
    "DeliveryError",
    "PerfStats",
    "UsageError",
    "build_parser",
    "count_records",
    "main",
    "version_text",
]

_T = TypeVar("_T")

PROG = "aioproducer"
DEFAULT_PARTITIONS = 3
PERF_CLIENT_ID = "perf-producer-client"
CONSOLE_CLIENT_ID = "console-producer"
#: kafka-console-producer's options that set one producer config: (option, config, metavar).
CONSOLE_SHORTCUTS: Final = (
    ("--request-required-acks", "acks", "ACKS"),
    ("--timeout", "linger.ms", "MS"),
    ("--batch-size", "batch.size", "BYTES"),
    ("--max-partition-memory-bytes", "batch.size", "BYTES"),
    ("--max-memory-bytes", "buffer.memory", "BYTES"),
    ("--max-block-ms", "max.block.ms", "MS"),
    ("--message-send-max-retries", "retries", "N"),
    ("--retry-backoff-ms", "retry.backoff.ms", "MS"),
    ("--request-timeout-ms", "request.timeout.ms", "MS"),
    ("--metadata-expiry-ms", "metadata.max.age.ms", "MS"),
    ("--socket-buffer-size", "send.buffer.bytes", "BYTES"),
)
#: kafka-producer-perf-test's transactional id when only a transaction duration is given.
TRANSACTIONAL_ID_PREFIX = "performance-producer-"
#: kafka-producer-perf-test's transaction duration when only a transactional id is given.
DEFAULT_TRANSACTION_DURATION_MS = 3000
#: Kafka's perf tool prints a window line every five seconds.
REPORTING_INTERVAL_S = 5.0
#: At most this many latencies are kept for the percentiles, as in Kafka's perf tool.
MAX_LATENCY_SAMPLES = 500_000
#: How many distinct random payloads ``perf --record-size`` cycles through.
PAYLOAD_POOL_SIZE = 64

_EXIT_OK = 0
_EXIT_DELIVERY = 1
_EXIT_USAGE = 2
_EXIT_INTERRUPTED = 130
#: Exit code when stdout's reader closed the pipe (128 + SIGPIPE, as a shell reports it).
_EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """The command line asks for something impossible; exit code 2."""


class DeliveryError(Exception):
    """A record was not delivered, or the cluster could not be used; exit code 1."""


# ---- argument parsing ----------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors that suggest the option meant."""

    commands: dict[str, argparse.ArgumentParser]
    #: The command line being parsed: argparse reports a missing required option before an
    #: unknown one, so the error for the first looks among the second for a misspelling.
    raw_args: Sequence[str] = ()

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required"):
            known = {name for action in self._actions for name in action.option_strings}
            unknown = [a for a in _Parser.raw_args if a.partition("=")[0] not in known]
            message += _suggest(self, unknown)
        self.exit(_EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        _Parser.raw_args = tuple(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(self, "commands", {}).get(getattr(parsed, "command", None))
            target = command or self
            target.error(f"unrecognized arguments: {' '.join(extras)}{_suggest(target, extras)}")
        return parsed


def _suggest(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """``; did you mean --bootstrap-server?`` for the first unknown option close to a known one."""
    known = [name for action in parser._actions for name in action.option_strings]
    for extra in extras:
        if extra.startswith("--"):
            close = difflib.get_close_matches(extra.partition("=")[0], known, n=1)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


def _common_options() -> _Parser:
    common = _Parser(add_help=False, allow_abbrev=False)
    group = common.add_argument_group("cluster and producer")
    group.add_argument(
        "--bootstrap-server",
        dest="bootstrap_servers",
        metavar="HOST:PORT[,...]",
        help="the Kafka cluster to use (also --bootstrap-servers, or Kafka's old "
        "--broker-list); without it (and without bootstrap.servers in the producer configs) "
        "an embedded Tansu broker is started for the run",
    )
    for alias in ("--bootstrap-servers", "--broker-list"):  # in the help of --bootstrap-server
        group.add_argument(alias, dest="bootstrap_servers", help=argparse.SUPPRESS)
    group.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        metavar="N",
        help="partitions of the topic created on the embedded broker "
        f"(default: {DEFAULT_PARTITIONS}; ignored with --bootstrap-server)",
    )
    group.add_argument(
        "--producer-property",
        dest="producer_props",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a producer config by its Java name (linger.ms=5) or snake_case name; repeat "
        "for more; wins over --producer.config",
    )
    group.add_argument(
        "--producer-props",
        dest="producer_props",
        nargs="+",
        action="extend",
        metavar="NAME=VALUE",
        help="producer configs, several after one option (linger.ms=5 acks=all), as "
        "kafka-producer-perf-test takes them; win over --producer.config",
    )
    group.add_argument(
        "--producer.config",
        dest="producer_config_file",
        metavar="FILE",
        help="a Java properties file of producer configs",
    )
    group.add_argument(
        "--no-uvloop",
        action="store_true",
        help="run on the standard asyncio event loop even when uvloop is installed",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    """The ``aioproducer`` argument parser with its ``produce``, ``perf`` and ``demo`` commands."""
    parser = _Parser(
        prog=PROG,
        description="An asyncio-native Apache Kafka producer. Without --bootstrap-server, "
        "each command runs against an embedded Tansu broker started for the run.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="show the version, and whether the compiled core or plain Python runs, then exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = _common_options()

    produce = commands.add_parser(
        "produce",
        parents=[common],
        allow_abbrev=False,
        help="send each line of the files (or stdin) as a record, like kafka-console-producer",
        description="Send each line of the FILEs (or of stdin) as one record, then print "
        "where the records went. Lines are read as kafka-console-producer reads them "
        "(see --property). Exits 1 if any record was not delivered.",
    )
    produce.add_argument("--topic", required=True, help="the topic to produce to")
    keys = produce.add_mutually_exclusive_group()
    keys.add_argument("--key", help="the key of every record (UTF-8)")
    keys.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (the same as --property "
        "parse.key=true --property key.separator=SEP)",
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header for every record; repeat for more",
    )
    produce.add_argument(
        "--partition", type=int, metavar="N", help="send every record to this partition"
    )
    produce.add_argument(
        "--property",
        dest="reader_props",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="how lines are read, as kafka-console-producer's --property: parse.key, "
        "key.separator (default TAB), parse.headers, headers.delimiter (default TAB), "
        "headers.separator (default ','), headers.key.separator (default ':'), null.marker, "
        "ignore.error; repeat for more",
    )
    produce.add_argument(
        "--reader-config",
        dest="reader_config_file",
        metavar="FILE",
        help="a Java properties file of --property settings; --property wins over it",
    )
    produce.add_argument(
        "--sync",
        action="store_true",
        help="send one record at a time: wait for each to be acknowledged before reading the "
        "next line, and stop at the first that is not",
    )
    shortcuts = produce.add_argument_group(
        "kafka-console-producer's shortcuts for producer configs (they win over the configs)"
    )
    shortcuts.add_argument(
        "--compression-codec",
        nargs="?",
        const="gzip",
        metavar="CODEC",
        help="compression.type: none, gzip, snappy, lz4 or zstd (gzip when no CODEC is given)",
    )
    for option, config, metavar in CONSOLE_SHORTCUTS:
        shortcuts.add_argument(option, metavar=metavar, help=f"sets {config}")
    produce.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="files to read; '-' or none means stdin",
    )
    produce.set_defaults(handler=_cmd_produce)

    perf = commands.add_parser(
        "perf",
        parents=[common],
        allow_abbrev=False,
        help="measure throughput and latency like kafka-producer-perf-test",
        description="Send --num-records records as fast as --throughput allows and print "
        "Kafka's kafka-producer-perf-test lines: one per 5-second window, then the total.",
    )
    _add_perf_options(perf)
    perf.set_defaults(handler=_cmd_perf)

    demo = commands.add_parser(
        "demo",
        parents=[common],
        allow_abbrev=False,
        help="perf with defaults, then read the records back (the README's first command)",
        description="Send 200,000 records of 100 bytes unthrottled (to an embedded broker "
        "unless --bootstrap-server is given), print the perf lines, then read the records "
        "back with a confluent-kafka consumer and check that every one arrived.",
    )
    demo.add_argument("--topic", default="demo", help="the topic (default: demo)")
    demo.add_argument("--num-records", type=int, default=200_000, metavar="N")
    demo.add_argument("--record-size", type=int, default=100, metavar="BYTES")
    demo.add_argument("--batch", action="store_true", help="use send_many in chunks")
    demo.set_defaults(
        handler=_cmd_perf,
        throughput=-1.0,
        payload_file=None,
        payload_delimiter="\\n",
        payload_monotonic=False,
        print_metrics=False,
        warmup_records=0,
        chunk_size=1000,
        verify=True,
        transactional_id=None,
        transaction_duration_ms=None,
    )
    parser.commands = {"produce": produce, "perf": perf, "demo": demo}
    return parser


def _add_perf_options(perf: argparse.ArgumentParser) -> None:
    perf.add_argument("--topic", required=True, help="produce messages to this topic")
    perf.add_argument(
        "--num-records", type=int, required=True, metavar="N", help="number of records to send"
    )
    payload = perf.add_mutually_exclusive_group(required=True)
    payload.add_argument(
        "--record-size", type=int, metavar="BYTES", help="size of each record's value"
    )
    payload.add_argument(
        "--payload-file",
        metavar="FILE",
        help="a UTF-8 file of payloads; each record takes one of them at random",
    )
    payload.add_argument(
        "--payload-monotonic",
        action="store_true",
        help="each value is the record's number as decimal text",
    )
    perf.add_argument(
        "--payload-delimiter",
        default="\\n",
        metavar="DELIMITER",
        help="what separates payloads in --payload-file (default: \\n)",
    )
    perf.add_argument(
        "--throughput",
        type=float,
        required=True,
        metavar="RECORDS_PER_SEC",
        help="cap the send rate at about this many records per second; -1 for no cap",
    )
    perf.add_argument(
        "--print-metrics", action="store_true", help="print the producer's metrics at the end"
    )
    perf.add_argument(
        "--warmup-records",
        type=int,
        default=0,
        metavar="N",
        help="also print a 'steady state' summary of the records after the first N",
    )
    perf.add_argument(
        "--batch",
        action="store_true",
        help="send with send_many in chunks of --chunk-size records (the bulk path); "
        "a record's latency is then its chunk's",
    )
    perf.add_argument(
        "--chunk-size",
        type=int,
        default=1000,
        metavar="N",
        help="records per send_many call with --batch (default: 1000)",
    )
    perf.add_argument(
        "--transactional-id",
        metavar="ID",
        help="send in transactions with this transactional id (wins over transactional.id "
        "in the producer configs); with only --transaction-duration-ms, the id is "
        f"{TRANSACTIONAL_ID_PREFIX!r} and a random UUID",
    )
    perf.add_argument(
        "--transaction-duration-ms",
        type=int,
        metavar="MS",
        help="commit the open transaction once it is this old (checked after each send); "
        f"turns transactions on; default {DEFAULT_TRANSACTION_DURATION_MS} when a "
        "transactional id is given",
    )
    perf.add_argument(
        "--verify",
        action="store_true",
        help="afterwards, read the topic back with a confluent-kafka consumer and check "
        "that the broker stored every acknowledged record",
    )


def _version() -> str:
    try:
        from aioproducer import __version__
    except Exception:  # the command should still say something with a half-broken install
        return "unknown"
    return __version__


def version_text() -> str:
    """What ``aioproducer --version`` prints: the version, the interpreter, where the package
    is, and whether its compiled core runs (naming the hot-path modules that do not)."""
    import platform

    import aioproducer
    from aioproducer.compiled import HOT_PATH_MODULES, INSTALL_ADVICE, interpreted_modules

    interpreter = f"{platform.python_implementation()} {platform.python_version()}"
    lines = [f"{PROG} {_version()} ({interpreter}, {os.path.dirname(aioproducer.__file__)})"]
    interpreted = interpreted_modules()
    total = len(HOT_PATH_MODULES)
    if not interpreted:
        lines.append(f"compiled core: in use (all {total} hot-path modules are compiled)")
        return "\n".join(lines)
    if len(interpreted) == total:
        lines.append("compiled core: not in use; the hot path runs as plain Python, about "
                     "half as fast")
    else:
        lines.append(f"compiled core: partly in use; {len(interpreted)} of {total} hot-path "
                     "modules run as plain Python")
    lines.append(f"not compiled: {', '.join(interpreted)}")
    lines.append(f"to fix: {INSTALL_ADVICE}")
    return "\n".join(lines)


class _VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` as it is (argparse's own action would wrap
    it into one paragraph) and exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(version_text(), flush=True)
        parser.exit()


# ---- shared plumbing ---------------------------------------------------------------------


def _parse_pairs(pairs: Sequence[str], option: str, hint: str = "") -> list[tuple[str, str]]:
    parsed: list[tuple[str, str]] = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            known = {o.name for o in options_table()} | {o.java_name for o in options_table()}
            if not sep and pair.strip() in known:
                # A config name alone: its value is missing, whatever option gave it.
                raise UsageError(
                    f"{option}: expected NAME=VALUE, got {pair!r} (give it a value: "
                    f"{pair.strip()}=VALUE)"
                )
            raise UsageError(f"{option}: expected NAME=VALUE, got {pair!r}{hint}")
        parsed.append((name.strip(), value))
    return parsed


def _argument_bytes(text: str) -> bytes:
    """A command-line argument as UTF-8, or as the bytes it was given in when those were not
    UTF-8 (Python keeps them as lone surrogates)."""
    return text.encode("utf-8", "surrogateescape")


def _check_topic(topic: str) -> str:
    """``--topic`` if it is a legal topic name (the producer's rule); UsageError if not."""
    try:
        return validate_topic(topic)
    except InvalidTopicError as exc:
        raise UsageError(f"--topic: {exc}") from None



#: A name from a file that may be echoed: the shape of a config name (``linger.ms``,
#: ``batch_size``: lower case, in parts, short), not of a secret. A line of another shape
#: (quotes, ``=``, mixed case, one long word) is most likely a continued value gone astray.
_CONFIG_NAME_SHAPE: Final = re.compile(r"(?=.{1,64}$)[a-z][a-z0-9]*(?:[._-][a-z0-9]+)+")

#: The properties files already warned about for their permissions, by real path.
_WARNED_PERMISSIONS: set[str] = set()

_logger = logging.getLogger("aioproducer.cli")


def _warn_if_readable(path: str, option: str, names: Sequence[str]) -> None:
    """Warn once per file when one holding secrets can be read by others than its owner."""
    secrets = {name for name in names if _names_a_secret(name)}
    if not secrets or os.name == "nt":  # Windows has no group/other mode bits to check
        return
    try:
        real = os.path.realpath(path)
        mode = os.stat(real).st_mode
    except OSError:
        return
    if not mode & 0o077 or real in _WARNED_PERMISSIONS:
        return
    _WARNED_PERMISSIONS.add(real)
    # Only names of a config's shape are shown: another may be a secret's own text.
    shown = sorted(name for name in secrets if _CONFIG_NAME_SHAPE.fullmatch(name))
    _logger.warning(
        "%s %s holds secrets (%s) and can be read by other users (mode %03o); "
        "make it private: chmod 600 %s",
        option,
        path,
        ", ".join(shown) if shown else "by the look of its names",
        mode & 0o777,
        shlex.quote(path),
    )


def _read_properties(path: str, option: str) -> list[tuple[str, str, int]]:
    """The ``name, value, line`` entries of a Java properties file given to ``option``.

    Read as UTF-8, or as ISO-8859-1 (what Java reads) when it is not valid UTF-8. An
    error names the file and a line number, never the text of a line. A file holding a
    secret-looking config that group or others may read is warned about, once.
    """
    try:
        entries = read_entries(path)
    except OSError as exc:
        raise UsageError(f"cannot read {option} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{option} {path} {exc}") from None
    _warn_if_readable(path, option, [name for name, _, _ in entries])
    return entries


def _producer_props(args: argparse.Namespace) -> dict[str, str]:
    """The producer configs in force: the file's, then the command line's (later wins),
    then ``--bootstrap-server``."""
    pairs: list[tuple[str, str]] = []
    if args.producer_config_file:
        path = args.producer_config_file
        entries = _read_properties(path, "--producer.config")
        for name, _, line in entries:
            _check_file_name(name, f"--producer.config {path} line {line}")
        pairs += [(name, value) for name, value, _ in entries]
    pairs += _parse_pairs(
        args.producer_props,
        "a producer config",
        # --producer-props takes every argument up to the next option.
        " (after --producer-props, FILE arguments go after --)",
    )
    if args.bootstrap_servers:
        pairs.append(("bootstrap.servers", args.bootstrap_servers))
    props: dict[str, str] = {}
    for name, value in pairs:
        _put(props, name, value)
    return props


_HIDDEN_NAME: Final = (
    "unknown producer config (its name is not shown, as the line may hold a secret; "
    "a value continued over lines needs a backslash at the end of each line but the last)"
)


def _check_file_name(name: str, where: str) -> None:
    """Refuse a name from a properties file that is no producer config, naming ``where``
    (file and line). The name is shown only when it has the shape of a config name, or is
    one word close to one (``ack``): a line of another shape may be part of a secret."""
    if name in _JAVA_ONLY:
        return  # the config check drops it (a value that changes nothing) or refuses it
    try:
        _field_name(name)
    except ConfigurationError as exc:
        text = str(exc)
        one_close_word = re.fullmatch(r"[a-z]{1,32}", name) is not None and _java_hint(name)
        if not (_CONFIG_NAME_SHAPE.fullmatch(name) or one_close_word):
            raise UsageError(f"{where}: {_HIDDEN_NAME}") from None
        if "another client's name" in text:
            raise UsageError(f"{where}: {text.replace('option', 'producer config', 1)}") from None
        raise UsageError(f"{where}: unknown producer config {name!r}{_java_hint(name)}") from None


def _put(props: dict[str, str], name: str, value: str) -> None:
    """Set ``name``, replacing the config of the same meaning under its other name
    (``linger_ms`` replaces ``linger.ms``)."""
    option = _option_names().get(name)
    if option is not None:
        for key in _keys_for(props, option):
            del props[key]
    props[name] = value


@functools.cache
def _option_names() -> dict[str, str]:
    """Each config's Java name and snake_case name, mapped to its snake_case name."""
    names: dict[str, str] = {}
    for option in options_table():
        names[option.name] = option.name
        if option.java_name:
            names[option.java_name] = option.name
    return names


def _keys_for(props: dict[str, str], option: str) -> list[str]:
    """The keys of ``props`` that name the config ``option`` (by either of its names)."""
    names = _option_names()
    return [key for key in props if names.get(key) == option]


def _value_of(props: dict[str, str], option: str) -> str | None:
    keys = _keys_for(props, option)
    return props[keys[-1]] if keys else None


def _java_hint(key: str) -> str:
    """``; did you mean 'linger.ms' (linger_ms)?``, naming the Java name first."""
    names = _option_names()
    close = difflib.get_close_matches(key, list(names), n=1)
    if not close:
        return ""
    name = names[close[0]]
    java = next((o.java_name for o in options_table() if o.name == name), None)
    shown = f"{java!r} ({name})" if java else repr(name)
    return f"; did you mean {shown}?"


def _check_config(props: dict[str, str]) -> ProducerConfig:
    """``props`` validated by the producer's own rules, before any broker is started.

    Without a bootstrap server (the embedded broker's comes later) a stand-in is checked.
    """
    config: dict[str, Any] = dict(props)
    if not _value_of(props, "bootstrap_servers"):
        for key in _keys_for(props, "bootstrap_servers"):
            del config[key]
        config["bootstrap.servers"] = "localhost:9092"
    try:
        return ProducerConfig.from_options(config)
    except ConfigurationError as exc:
        text = str(exc)
        for key in props:
            if text.startswith(f"unknown option {key!r}"):
                raise UsageError(f"unknown producer config {key!r}{_java_hint(key)}") from None
        raise UsageError(f"invalid producer config: {text}") from None


def _bootstrap_of(props: dict[str, str]) -> str | None:
    return _value_of(props, "bootstrap_servers") or None


def _apply_shortcuts(args: argparse.Namespace, props: dict[str, str]) -> None:
    """Set the configs of kafka-console-producer's shortcut options that were given, each
    checked on its own so that an error names the option."""
    given = [("--compression-codec", "compression.type", args.compression_codec)]
    for option, config, _ in CONSOLE_SHORTCUTS:
        given.append((option, config, getattr(args, option[2:].replace("-", "_"))))
    for option, config, value in given:
        if value is None:
            continue
        try:
            ProducerConfig.from_options({"bootstrap.servers": "localhost:9092", config: value})
        except ConfigurationError as exc:
            raise UsageError(f"{option}: {exc}") from None
        _put(props, config, value)


def _default_client_id(props: dict[str, str], client_id: str) -> None:
    """Name the client as Kafka's tool does, unless the configs name it."""
    if not _keys_for(props, "client_id"):
        props["client.id"] = client_id


def _check_partitions(props: dict[str, str], partitions: int) -> None:
    if _bootstrap_of(props) is None and partitions < 1:
        raise UsageError(f"--partitions must be at least 1, got {partitions}")


def _count(number: int, noun: str) -> str:
    """``1 record``, ``2 records``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


@contextlib.contextmanager
def _cluster(props: dict[str, str], topic: str, partitions: int) -> Iterator[tuple[str, bool]]:
    """Yield ``(bootstrap_servers, embedded)``, starting an embedded broker when none is set.

    The broker is stopped when the block exits, whatever the reason (errors, Ctrl+C, and
    SIGTERM, which :func:`main` turns into ``SystemExit``).
    """
    bootstrap = _bootstrap_of(props)
    if bootstrap is not None:
        yield bootstrap, False
        return
    from aioproducer.embedded import EmbeddedBroker, EmbeddedBrokerError

    _check_partitions(props, partitions)
    broker = EmbeddedBroker()
    try:
        try:
            broker.start()
            broker.create_topic(topic, partitions=partitions)
        except EmbeddedBrokerError as exc:
            raise DeliveryError(f"could not start the embedded broker: {exc}") from None
        _note(
            f"started an embedded Tansu broker at {broker.bootstrap_servers}; "
            f"topic {topic} created with {_count(partitions, 'partition')}"
        )
        yield broker.bootstrap_servers, True
    finally:
        broker.stop()


def _note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _run(main_coroutine: Callable[[], Awaitable[_T]], use_uvloop: bool) -> _T:
    async def runner() -> _T:
        return await main_coroutine()

    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(runner())
    return asyncio.run(runner())


def _make_producer(props: dict[str, str], bootstrap: str) -> Producer:
    config: dict[str, Any] = dict(props)
    for key in _keys_for(props, "bootstrap_servers"):
        del config[key]
    config["bootstrap.servers"] = bootstrap
    try:
        return Producer(config)
    except ConfigurationError as exc:  # checked before already: only a stand-in could differ
        raise UsageError(f"invalid producer config: {exc}") from None


def _servers(producer: Producer) -> str:
    return ",".join(producer.config.bootstrap_servers)


def _start_failure(producer: Producer, exc: KafkaError) -> str:
    """Why ``start()`` failed: a connection to the brokers, or (a ConfigurationError, such as
    a trust store that cannot be read) the producer's own settings."""
    if isinstance(exc, ConfigurationError):
        return f"cannot start the producer: {_describe(exc)}"
    return f"cannot connect to {_servers(producer)}: {_describe(exc)}"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class _Failures:
    """Failed records: a count and the first few distinct messages."""

    count: int = 0
    messages: list[str] = field(default_factory=list)

    def add(self, exc: BaseException) -> None:
        self.count += 1
        message = _describe(exc)
        if len(self.messages) < 5 and message not in self.messages:
            self.messages.append(message)

    def report(self, total: int) -> str:
        verb = "was" if self.count == 1 else "were"
        lines = [f"{self.count} of {_count(total, 'record')} {verb} not delivered:"]
        lines += [f"  {message}" for message in self.messages]
        return "\n".join(lines)


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
                    read = getattr(stream, "read1", stream.read)
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
        for name in ("key.separator", "headers.delimiter", "headers.separator",
                     "headers.key.separator")
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
            f"{_count(self.delivered, 'record')} {verb} to topic {self.topic} "
            f"(partitions: {parts})"
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
    for path in args.files:
        if path != "-" and not os.path.isfile(path):
            raise UsageError(f"no such file: {path}")
    with _cluster(props, args.topic, args.partitions) as (bootstrap, _embedded):
        producer = _make_producer(props, bootstrap)
        report = _ProduceReport(args.topic)
        error = _run(
            lambda: _produce(producer, args, line_format, headers, report), not args.no_uvloop
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
) -> str | None:
    """Send every line; return why sending stopped early, or None."""
    fixed_key = _argument_bytes(args.key) if args.key is not None else None
    try:
        await producer.start()
    except KafkaError as exc:
        raise DeliveryError(_start_failure(producer, exc)) from None
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


# ---- perf ----------------------------------------------------------------------------------


class PerfStats:
    """Kafka's perf-test statistics: totals, 5-second windows and sampled latencies.

    Latencies are milliseconds from the send call to the acknowledgement. At most
    :data:`MAX_LATENCY_SAMPLES` of them are kept (every ``sampling``-th record), and the
    percentiles are read off the sorted sample at index ``int(p * size)``, as the Java tool does.
    """

    def __init__(
        self,
        num_records: int,
        *,
        steady_state: bool = False,
        out: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.start = self.window_start = clock()
        self.sampling = max(1, num_records // max(1, min(num_records, MAX_LATENCY_SAMPLES)))
        self.latencies: list[float] = []
        self.iteration = 0
        self.count = 0
        self.bytes = 0
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.window_count = 0
        self.window_bytes = 0
        self.window_total_latency = 0.0
        self.window_max_latency = 0.0
        self.steady_state = steady_state
        self.suppress_printing = False
        self._out = out

    def record(self, latency_ms: float, size: int, now: float) -> None:
        """One record of ``size`` bytes was acknowledged ``latency_ms`` after it was sent."""
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        if latency_ms > self.max_latency:
            self.max_latency = latency_ms
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        if latency_ms > self.window_max_latency:
            self.window_max_latency = latency_ms
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        self.iteration += 1
        if now - self.window_start >= REPORTING_INTERVAL_S:
            self._end_window(now)

    def record_many(self, latency_ms: float, count: int, size: int, now: float) -> None:
        """``count`` records of ``size`` bytes in total, each acknowledged after ``latency_ms``."""
        if count <= 0:
            return
        self.count += count
        self.bytes += size
        self.total_latency += latency_ms * count
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += count
        self.window_bytes += size
        self.window_total_latency += latency_ms * count
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        first = (-self.iteration) % self.sampling
        if first < count:
            self.latencies.extend([latency_ms] * ((count - 1 - first) // self.sampling + 1))
        self.iteration += count
        if now - self.window_start >= REPORTING_INTERVAL_S:
            self._end_window(now)

    def _end_window(self, now: float) -> None:
        if self.steady_state and self.count == self.window_count:
            self._print("In steady state.")
        if not self.suppress_printing:
            self._print(self.window_line(now))
        self.window_start = now
        self.window_count = self.window_bytes = 0
        self.window_total_latency = self.window_max_latency = 0.0

    def _print(self, line: str) -> None:
        print(line, file=self._out or sys.stdout, flush=True)

    def window_line(self, now: float | None = None) -> str:
        """The 5-second line: ``N records sent, R records/sec (M MB/sec), ...``."""
        elapsed = max((self._clock() if now is None else now) - self.window_start, 1e-9)
        count = self.window_count
        average = self.window_total_latency / count if count else 0.0
        return (
            f"{_count(count, 'record')} sent, {count / elapsed:.1f} records/sec "
            f"({self.window_bytes / elapsed / (1024.0 * 1024.0):.2f} MB/sec), "
            f"{average:.1f} ms avg latency, {self.window_max_latency:.1f} ms max latency."
        )

    def percentiles(self, *quantiles: float) -> list[int]:
        """Whole-millisecond latencies at ``quantiles`` of the sample (0 when empty)."""
        sample = sorted(self.latencies)
        if not sample:
            return [0 for _ in quantiles]
        return [int(sample[min(int(q * len(sample)), len(sample) - 1)]) for q in quantiles]

    def total_line(self, now: float | None = None) -> str:
        """The final line, in the format of Kafka's ``kafka-producer-perf-test``."""
        elapsed = max((self._clock() if now is None else now) - self.start, 1e-9)
        p50, p95, p99, p999 = self.percentiles(0.5, 0.95, 0.99, 0.999)
        count = self.count
        label = " steady state" if self.steady_state else ""
        average = self.total_latency / count if count else 0.0
        return (
            f"{count}{label} {'record' if count == 1 else 'records'} sent, "
            f"{count / elapsed:f} records/sec "
            f"({self.bytes / elapsed / (1024.0 * 1024.0):.2f} MB/sec), "
            f"{average:.2f} ms avg latency, {self.max_latency:.2f} ms max latency, "
            f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th."
        )


class _Throttler:
    """Keeps the send rate near ``target`` records per second (no cap when ``target`` < 0)."""

    def __init__(self, target: float, start: float) -> None:
        self.target = target
        self.start = start

    def should_throttle(self, sent: int, now: float) -> bool:
        elapsed = now - self.start
        return self.target > 0 and elapsed > 0 and sent / elapsed > self.target

    async def throttle(self, sent: int, now: float) -> None:
        await asyncio.sleep(max(0.0, self.start + sent / self.target - now))


def _random_payloads(size: int, count: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [bytes(rng.choices(letters, k=size)) for _ in range(count)]


def _file_payloads(path: str, delimiter: str) -> list[bytes]:
    print(f"Reading payloads from: {Path(path).resolve()}", flush=True)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --payload-file {path}: {exc}") from None
    payloads = [piece.encode() for piece in text.split(delimiter) if piece]
    if not payloads:
        raise UsageError(f"--payload-file {path} holds no payloads")
    print(f"Number of messages read: {len(payloads)}", flush=True)
    return payloads


@dataclass
class _PerfPlan:
    topic: str
    num_records: int
    payloads: list[bytes]
    monotonic: bool
    throughput: float
    warmup: int
    batch: bool
    chunk_size: int
    print_metrics: bool
    transaction_duration: float | None = None
    """Seconds after which the open transaction is committed; None without transactions."""


@dataclass
class _PerfResult:
    stats: PerfStats | None = None
    transactions: int = 0
    """Transactions committed."""
    steady: PerfStats | None = None
    failures: _Failures = field(default_factory=_Failures)
    sent: int = 0
    stopped: str | None = None


def _perf_plan(args: argparse.Namespace) -> _PerfPlan:
    _check_topic(args.topic)
    if args.num_records <= 0:
        raise UsageError("--num-records should be greater than zero")
    if args.warmup_records < 0 or args.warmup_records >= args.num_records:
        raise UsageError(
            "--warmup-records must be 0 or more and strictly fewer than --num-records"
        )
    if args.record_size is not None and args.record_size <= 0:
        raise UsageError("--record-size should be greater than zero")
    if args.throughput == 0 or math.isnan(args.throughput):
        raise UsageError("--throughput must be positive, or -1 for no cap")
    if args.chunk_size <= 0:
        raise UsageError("--chunk-size should be greater than zero")
    if args.transaction_duration_ms is not None and args.transaction_duration_ms <= 0:
        raise UsageError("--transaction-duration-ms should be greater than zero")
    if args.transactional_id == "":
        raise UsageError("--transactional-id must not be empty")
    if args.verify:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise UsageError(
                "--verify reads the topic back with confluent-kafka: pip install confluent-kafka"
            ) from None
    if args.record_size is not None:
        payloads = _random_payloads(args.record_size, PAYLOAD_POOL_SIZE)
    elif args.payload_file is not None:
        delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
        choices = _file_payloads(args.payload_file, delimiter)
        # Random picks made now, outside the timed loop, then cycled through.
        rng = random.Random(0)
        payloads = [rng.choice(choices) for _ in range(min(args.num_records, 4096))]
    else:
        payloads = []
    return _PerfPlan(
        topic=args.topic,
        num_records=args.num_records,
        payloads=payloads,
        monotonic=bool(args.payload_monotonic),
        throughput=args.throughput,
        warmup=args.warmup_records,
        batch=bool(args.batch),
        chunk_size=args.chunk_size,
        print_metrics=bool(args.print_metrics),
    )


def _transactions(args: argparse.Namespace, props: dict[str, str]) -> float | None:
    """Turn transactions on as kafka-producer-perf-test does: with --transactional-id,
    --transaction-duration-ms, or transactional.id in the configs. Returns the duration in
    seconds (None without transactions) and sets transactional.id in ``props``."""
    configured = _value_of(props, "transactional_id")
    if args.transactional_id is None and args.transaction_duration_ms is None and not configured:
        return None
    transactional_id = (
        args.transactional_id or configured or f"{TRANSACTIONAL_ID_PREFIX}{uuid.uuid4()}"
    )
    _put(props, "transactional.id", transactional_id)
    duration = args.transaction_duration_ms or DEFAULT_TRANSACTION_DURATION_MS
    return duration / 1000.0


def _cmd_perf(args: argparse.Namespace) -> int:
    # A measurement of the plain-Python fallback says so, once, before anything else.
    warn_if_interpreted(_logger)
    # Everything is checked before a broker is started or reached.
    props = _producer_props(args)
    _default_client_id(props, PERF_CLIENT_ID)
    transaction_duration = _transactions(args, props)
    checked = _check_config(props)
    _check_partitions(props, args.partitions)
    plan = _perf_plan(args)
    plan.transaction_duration = transaction_duration
    security = _reader_security(checked) if args.verify else {}
    with _cluster(props, plan.topic, args.partitions) as (bootstrap, embedded):
        start_offsets: dict[int, int] | None = None
        if args.verify and not embedded:
            start_offsets = _end_offsets(bootstrap, plan.topic, security)
        producer = _make_producer(props, bootstrap)
        if plan.warmup > 0:
            print(
                f"Warmup first {_count(plan.warmup, 'record')}. Steady state results will print "
                "after the complete test summary.",
                flush=True,
            )
        result = _run(lambda: _perf(producer, plan), not args.no_uvloop)
        verify_error: str | None = None
        if args.verify and result.stats is not None and not result.stopped:
            verify_error = _verify(
                bootstrap, plan.topic, result.stats.count, start_offsets, security
            )
    if transaction_duration is not None:
        _note(
            f"committed {_count(result.transactions, 'transaction')} "
            f"(transactional id {props['transactional.id']})"
        )
    if result.stopped:
        print(f"{PROG} perf: error: {result.stopped}", file=sys.stderr)
    if result.failures.count:
        print(f"{PROG} perf: error: {result.failures.report(result.sent)}", file=sys.stderr)
    if verify_error:
        print(f"{PROG} perf: error: {verify_error}", file=sys.stderr)
    failed = result.stopped or result.failures.count or verify_error
    return _EXIT_DELIVERY if failed else _EXIT_OK


async def _perf(producer: Producer, plan: _PerfPlan) -> _PerfResult:
    result = _PerfResult()
    try:
        await producer.start()
    except KafkaError as exc:
        raise DeliveryError(_start_failure(producer, exc)) from None
    try:
        # Metadata first, so the first records are not timed waiting for it (as in Java,
        # where the producer is created before the clock starts and send() blocks on it).
        await producer.partitions_for(plan.topic)
        result.stats = PerfStats(plan.num_records)
        if plan.batch:
            await _perf_bulk(producer, plan, result)
        else:
            await _perf_each(producer, plan, result)
    except KafkaError as exc:
        result.stopped = (
            f"sending stopped after {_count(result.sent, 'record')}: {_describe(exc)}"
        )
    except BaseException:  # Ctrl+C: leave now, without delivering what is buffered
        await _close_quietly(producer, timeout=0)
        raise
    if result.stats is not None:
        result.stats._print(result.stats.total_line())
    if result.steady is not None:
        result.steady._print(result.steady.total_line())
    if plan.print_metrics:
        _print_metrics(producer.metrics_detailed())
    await producer.close()
    return result


async def _close_quietly(producer: Producer, timeout: float | None) -> None:
    with contextlib.suppress(Exception):
        await producer.close(timeout=timeout)


class _AckCollector:
    """Turns acknowledgements into latencies, in send order, without a callback per record.

    The send loop appends ``(future, send_time, size)``; this task awaits the oldest pending
    future and, once it is done, takes every done future off the front of the queue, stamping
    them with the current time. A per-record done-callback would cost about as much as the send
    itself (each is a scheduled event-loop callback); this costs a deque append and two cheap
    checks. Records are acknowledged in send order per broker connection, so a record is
    stamped late only when a request to another broker finished before an older one.
    """

    def __init__(self, result: _PerfResult, warmup: int) -> None:
        self.pending: deque[tuple[RecordFuture, float, int]] = deque()
        self._result = result
        self._warmup = warmup
        self._taken = 0
        self._wake = asyncio.Event()
        self._finished = False

    def wake(self) -> None:
        """Records were appended: look at them (cheap; called at the send loop's yields)."""
        self._wake.set()

    def finish(self) -> None:
        """No more records will be appended."""
        self._finished = True
        self._wake.set()

    async def run(self) -> None:
        pending = self.pending
        clock = time.monotonic
        while True:
            if not pending:
                if self._finished:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            head = pending[0][0]
            if not head.done():
                with contextlib.suppress(Exception):  # read below, per record
                    await head
            self._take_done(clock())

    def _take_done(self, now: float) -> None:
        pending = self.pending
        result = self._result
        stats = result.stats
        assert stats is not None
        record = stats.record
        while pending:
            future, start, size = pending[0]
            if not future.done():
                return
            pending.popleft()
            self._taken += 1
            exc = future.exception()
            if exc is not None:
                result.failures.add(exc)
                continue
            latency = (now - start) * 1000.0
            record(latency, size, now)
            if self._taken > self._warmup and result.steady is not None:
                result.steady.record(latency, size, now)


class _TransactionTimer:
    """kafka-producer-perf-test's transactions: one begins before a record when none is open,
    and is committed after a record sent once it is ``duration`` seconds old."""

    def __init__(self, producer: Producer, duration: float, result: _PerfResult) -> None:
        self._producer = producer
        self._duration = duration
        self._result = result
        self._started: float | None = None

    async def before_send(self, now: float) -> None:
        if self._started is None:
            await self._producer.begin_transaction()
            self._started = now

    async def after_send(self, now: float) -> None:
        if self._started is not None and now - self._started >= self._duration:
            await self.commit()

    async def commit(self) -> None:
        """Commit the open transaction, if any (it waits for its records to be sent)."""
        if self._started is not None:
            await self._producer.commit_transaction()
            self._started = None
            self._result.transactions += 1


def _transaction_timer(
    producer: Producer, plan: _PerfPlan, result: _PerfResult
) -> _TransactionTimer | None:
    if plan.transaction_duration is None:
        return None
    return _TransactionTimer(producer, plan.transaction_duration, result)


async def _perf_each(producer: Producer, plan: _PerfPlan, result: _PerfResult) -> None:
    """One ``send`` per record; each record's latency from its own acknowledgement."""
    stats = result.stats
    assert stats is not None
    collector = _AckCollector(result, plan.warmup)
    collecting = asyncio.ensure_future(collector.run())
    append = collector.pending.append
    clock = time.monotonic
    send = producer.send
    topic = plan.topic
    payloads = plan.payloads
    pool = len(payloads)
    throttler = _Throttler(plan.throughput, clock())
    throttled = plan.throughput > 0
    sleep = asyncio.sleep
    transactions = _transaction_timer(producer, plan, result)
    try:
        for i in range(plan.num_records):
            payload = str(i).encode() if plan.monotonic else payloads[i % pool]
            if i == plan.warmup and i > 0:
                result.steady = PerfStats(plan.num_records - plan.warmup, steady_state=True)
                stats.suppress_printing = True
            start = clock()
            if transactions is not None:
                await transactions.before_send(start)
            future = await send(topic, payload)
            append((future, start, len(payload)))
            result.sent = i + 1
            if transactions is not None:
                collector.wake()
                await transactions.after_send(start)
            if throttled and throttler.should_throttle(i, start):
                collector.wake()
                await throttler.throttle(i, start)
            elif i & 255 == 255:
                # send() returns without suspending while there is buffer space; yielding
                # now and then lets the sender task ship batches while this loop keeps
                # filling them.
                collector.wake()
                await sleep(0)
        if transactions is not None:
            collector.wake()
            await transactions.commit()
    except BaseException:
        collecting.cancel()
        raise
    collector.finish()
    await producer.flush()
    await collecting


async def _perf_bulk(producer: Producer, plan: _PerfPlan, result: _PerfResult) -> None:
    """``send_many`` in chunks; every record of a chunk gets the chunk's latency."""
    stats = result.stats
    assert stats is not None
    clock = time.monotonic
    # One small task per chunk (not per record) waits for the chunk's acknowledgements.
    pending: set[asyncio.Task[None]] = set()

    async def collect(
        results: BatchResults, start: float, count: int, size: int, steady: bool
    ) -> None:
        with contextlib.suppress(Exception):  # each record's own outcome is read below
            await results
        now = clock()
        ok = 0
        for future in results.futures:
            exc = future.exception()
            if exc is None:
                ok += 1
            else:
                result.failures.add(exc)
        ok_bytes = size if ok == count else size * ok // count
        latency = (now - start) * 1000.0
        stats.record_many(latency, ok, ok_bytes, now)
        if steady and result.steady is not None:
            result.steady.record_many(latency, ok, ok_bytes, now)

    try:
        await _send_chunks(producer, plan, result, collect, pending)
    except BaseException:
        for task in pending:
            task.cancel()
        raise
    await producer.flush()
    if pending:
        await asyncio.gather(*pending)


async def _send_chunks(
    producer: Producer,
    plan: _PerfPlan,
    result: _PerfResult,
    collect: Callable[[BatchResults, float, int, int, bool], Awaitable[None]],
    pending: set[asyncio.Task[None]],
) -> None:
    stats = result.stats
    assert stats is not None
    clock = time.monotonic
    pool = len(plan.payloads)
    cycle = plan.payloads * (plan.chunk_size // pool + 2) if pool else []
    throttler = _Throttler(plan.throughput, clock())
    transactions = _transaction_timer(producer, plan, result)
    sent = 0
    while sent < plan.num_records:
        count = min(plan.chunk_size, plan.num_records - sent)
        if plan.warmup > 0 and sent < plan.warmup < sent + count:
            count = plan.warmup - sent
        if sent == plan.warmup and sent > 0 and result.steady is None:
            result.steady = PerfStats(plan.num_records - plan.warmup, steady_state=True)
            stats.suppress_printing = True
        if plan.monotonic:
            items = [str(i).encode() for i in range(sent, sent + count)]
        else:
            offset = sent % pool
            items = cycle[offset : offset + count]
        size = sum(map(len, items))
        start = clock()
        if transactions is not None:
            await transactions.before_send(start)
        results = await producer.send_many(plan.topic, items)
        task = asyncio.ensure_future(
            collect(results, start, count, size, result.steady is not None)
        )
        pending.add(task)
        task.add_done_callback(pending.discard)
        sent += count
        result.sent = sent
        if transactions is not None:
            await transactions.after_send(start)
        now = clock()
        if throttler.should_throttle(sent, now):
            await throttler.throttle(sent, now)
        else:
            await asyncio.sleep(0)
    if transactions is not None:
        await transactions.commit()


def _print_metrics(metrics: list[Metric]) -> None:
    # As the Java tool: "group:name:{tag=value, ...}", sorted, every group (per topic and
    # per broker too).
    rows: dict[str, float] = {}
    for metric in metrics:
        tags = ", ".join(f"{key}={value}" for key, value in metric.tags.items())
        rows[f"{metric.group}:{metric.name}:{{{tags}}}"] = metric.value
    width = max((len(display) for display in rows), default=0)
    print(f"\n{'Metric Name':<{width}} : Value")
    for display in sorted(rows):
        print(f"{display:<{width}} : {rows[display]:.3f}")
    sys.stdout.flush()


# ---- read-back verification ----------------------------------------------------------------


def _consumer(bootstrap: str, security: Mapping[str, str] | None = None) -> Any:
    import confluent_kafka

    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"aioproducer-verify-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
            "log_level": 3,
            **(security or {}),
        }
    )


def _reader_security(config: ProducerConfig) -> dict[str, str]:
    """The producer's TLS and SASL settings in confluent-kafka's (librdkafka's) names, so
    that the read-back check reaches the same listener the same way.

    Raises:
        UsageError: a setting the consumer cannot take (an OAUTHBEARER token provider, a
            Python ``ssl_context``).
    """
    from aioproducer.net.tls import trusted_pem

    protocol = str(getattr(config.security_protocol, "value", config.security_protocol))
    security: dict[str, str] = {"security.protocol": protocol.lower()}
    if protocol.startswith("SASL"):
        mechanism = str(getattr(config.sasl_mechanism, "value", config.sasl_mechanism))
        if mechanism == "OAUTHBEARER":
            raise UsageError(
                "--verify reads back with confluent-kafka, which cannot use aioproducer's "
                "OAUTHBEARER token provider; run without --verify and check the topic with "
                "a consumer of your own"
            )
        security["sasl.mechanism"] = mechanism
        security["sasl.username"] = config.sasl_plain_username or ""
        security["sasl.password"] = config.sasl_plain_password or ""
    if protocol.endswith("SSL"):
        if config.ssl_context is not None:
            raise UsageError("--verify cannot hand a Python ssl_context to confluent-kafka")
        try:
            pem = trusted_pem(config)
        except (ConfigurationError, OSError) as exc:
            raise UsageError(f"--verify: {exc}") from None
        if pem is not None:
            security["ssl.ca.pem"] = pem
        if config.ssl_keystore_location is not None:
            security["ssl.keystore.location"] = config.ssl_keystore_location
            security["ssl.keystore.password"] = config.ssl_keystore_password or ""
        elif config.ssl_certfile is not None:
            security["ssl.certificate.location"] = config.ssl_certfile
            security["ssl.key.location"] = config.ssl_keyfile or config.ssl_certfile
            if config.ssl_password is not None:
                security["ssl.key.password"] = config.ssl_password
        security["ssl.endpoint.identification.algorithm"] = (
            "https" if config.ssl_check_hostname else "none"
        )
    return security


def _partitions(consumer: Any, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=10)
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None:
        return []
    return sorted(entry.partitions)


def _end_offsets(
    bootstrap: str, topic: str, security: Mapping[str, str] | None = None
) -> dict[int, int]:
    """Each partition's end offset before the run, so that only this run's records count."""
    import confluent_kafka

    consumer = _consumer(bootstrap, security)
    try:
        return {
            partition: int(
                consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(topic, partition), timeout=10, cached=False
                )[1]
            )
            for partition in _partitions(consumer, topic)
        }
    except confluent_kafka.KafkaException:
        return {}  # a topic that does not exist yet holds no earlier records
    finally:
        consumer.close()


def count_records(
    bootstrap: str,
    topic: str,
    expected: int,
    start_offsets: dict[int, int] | None = None,
    *,
    idle_timeout: float = 10.0,
    settle: float = 0.5,
    security: Mapping[str, str] | None = None,
) -> int:
    """Read ``topic`` with confluent-kafka and count its records.

    Reading starts at ``start_offsets`` (the beginning for partitions not in it) and stops
    ``settle`` seconds after ``expected`` records arrived (to catch extra ones), or after
    ``idle_timeout`` seconds without a new record. ``security``: confluent-kafka's TLS and
    SASL settings (:func:`_reader_security`).
    """
    import confluent_kafka

    consumer = _consumer(bootstrap, security)
    count = 0
    try:
        partitions = _partitions(consumer, topic)
        offsets = start_offsets or {}
        consumer.assign(
            [
                confluent_kafka.TopicPartition(
                    topic, p, offsets.get(p, confluent_kafka.OFFSET_BEGINNING)
                )
                for p in partitions
            ]
        )
        last_progress = time.monotonic()
        stop_at: float | None = None
        while True:
            now = time.monotonic()
            if stop_at is None and count >= expected:
                stop_at = now + settle
            if (stop_at is not None and now >= stop_at) or now - last_progress > idle_timeout:
                break
            messages = consumer.consume(num_messages=10_000, timeout=0.2)
            for message in messages:
                if message.error() is None:
                    count += 1
            if messages:
                last_progress = time.monotonic()
    finally:
        consumer.close()
    return count


def _verify(
    bootstrap: str,
    topic: str,
    acknowledged: int,
    start_offsets: dict[int, int] | None,
    security: Mapping[str, str],
) -> str | None:
    stored = count_records(bootstrap, topic, acknowledged, start_offsets, security=security)
    if stored != acknowledged:
        return (
            f"verify: the broker acknowledged {_count(acknowledged, 'record')} but a "
            f"consumer read {stored} back from topic {topic}"
        )
    what = "the 1 record" if stored == 1 else f"all {stored} records"
    print(
        f"Verified: a confluent-kafka consumer read back {what} from topic {topic}.",
        flush=True,
    )
    return None


# ---- entry point ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aioproducer`` command; return its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else _EXIT_USAGE
    command = f"{PROG} {args.command}"

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    # SIGTERM becomes SystemExit so that `finally` blocks stop the embedded broker.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, terminate)
    try:
        code: int = args.handler(args)
        return code
    except UsageError as exc:
        print(f"{command}: error: {exc}", file=sys.stderr)
        return _EXIT_USAGE
    except DeliveryError as exc:
        print(f"{command}: error: {exc}", file=sys.stderr)
        return _EXIT_DELIVERY
    except KafkaError as exc:
        print(f"{command}: error: {_describe(exc)}", file=sys.stderr)
        return _EXIT_DELIVERY
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return _EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whatever read the output went away (`| head`): stop quietly, as Unix tools do.
        _discard_stdout()
        return _EXIT_BROKEN_PIPE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(Exception):
            sys.stdout.flush()


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit raises no second error."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
