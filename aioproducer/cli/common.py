"""What the subcommands share: constants, exit codes, producer options from the command
line and properties files, the throwaway broker, running on an event loop, failures."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import functools
import logging
import os
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from aioproducer._core.metadata import validate_topic
from aioproducer.config import (
    ProducerConfig,
    is_java_only,
    names_a_secret,
    option_field_name,
    options_table,
)
from aioproducer.errors import (
    ConfigurationError,
    InvalidTopicError,
    KafkaError,
)
from aioproducer.producer import Producer
from aioproducer.properties import read_entries

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
    secrets = {name for name in names if names_a_secret(name)}
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
    if is_java_only(name):
        return  # the config check drops it (a value that changes nothing) or refuses it
    try:
        option_field_name(name)
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
def _cluster(
    props: dict[str, str], topic: str, partitions: int, *, create: bool = True
) -> Iterator[tuple[str, bool]]:
    """Yield ``(bootstrap_servers, embedded)``, starting an embedded broker when none is set.

    On the embedded broker, ``topic`` is created with ``partitions`` unless ``create`` is
    False (the command creates it itself). The broker is stopped when the block exits,
    whatever the reason (errors, Ctrl+C, and SIGTERM, which :func:`main` turns into
    ``SystemExit``).
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
            if create:
                broker.create_topic(topic, partitions=partitions)
        except EmbeddedBrokerError as exc:
            raise DeliveryError(f"could not start the embedded broker: {exc}") from None
        if create:
            _note(
                f"started an embedded Tansu broker at {broker.bootstrap_servers}; "
                f"topic {topic} created with {_count(partitions, 'partition')}"
            )
        else:
            _note(f"started an embedded Tansu broker at {broker.bootstrap_servers}")
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


async def _close_quietly(producer: Producer, timeout: float | None) -> None:
    with contextlib.suppress(Exception):
        await producer.close(timeout=timeout)
