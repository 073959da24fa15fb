"""The command line: the subcommands, their options and ``--version``."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from aioproducer.cli.common import (
    _EXIT_USAGE,
    CONSOLE_SHORTCUTS,
    DEFAULT_PARTITIONS,
    DEFAULT_TRANSACTION_DURATION_MS,
    PROG,
    TRANSACTIONAL_ID_PREFIX,
)
from aioproducer.cli.perf import _cmd_perf
from aioproducer.cli.produce import _cmd_produce
from aioproducer.cli.topics import _cmd_topics

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


def _common_options(embedded: bool = True) -> _Parser:
    """The options every command takes; ``embedded``: the command starts an embedded broker
    when no cluster is given (and takes ``--partitions`` for its topic)."""
    common = _Parser(add_help=False, allow_abbrev=False)
    group = common.add_argument_group("cluster and producer")
    without = (
        "without it (and without bootstrap.servers in the producer configs) an embedded "
        "Tansu broker is started for the run"
        if embedded
        else "required, here or as bootstrap.servers in the producer configs"
    )
    group.add_argument(
        "--bootstrap-server",
        dest="bootstrap_servers",
        metavar="HOST:PORT[,...]",
        help="the Kafka cluster to use (also --bootstrap-servers, or Kafka's old "
        f"--broker-list); {without}",
    )
    for alias in ("--bootstrap-servers", "--broker-list"):  # in the help of --bootstrap-server
        group.add_argument(alias, dest="bootstrap_servers", help=argparse.SUPPRESS)
    if embedded:
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
    """The ``aioproducer`` argument parser with its ``produce``, ``perf``, ``demo`` and
    ``topics`` commands."""
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
        "--create-topic",
        metavar="PARTITIONS[:REPLICATION]",
        help="make sure --topic exists before sending: create it with PARTITIONS partitions "
        "and REPLICATION replicas (the broker's default replication factor without "
        ":REPLICATION) unless it exists; a topic that exists is used as it is",
    )
    produce.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a config of the topic --create-topic creates (cleanup.policy=compact); repeat "
        "for more",
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
    topics = commands.add_parser(
        "topics",
        parents=[_common_options(embedded=False)],
        allow_abbrev=False,
        help="create, describe or delete topics, like kafka-topics",
        description="Create, describe or delete topics on the cluster, over a producer's "
        "connections, with kafka-topics' options. Exits 1 if a topic could not be created, "
        "described or deleted.",
    )
    _add_topics_options(topics)
    topics.set_defaults(handler=_cmd_topics)
    parser.commands = {"produce": produce, "perf": perf, "demo": demo, "topics": topics}
    return parser


def _add_topics_options(topics: argparse.ArgumentParser) -> None:
    action = topics.add_mutually_exclusive_group(required=True)
    for name, meaning in (
        ("create", "create the topics"),
        ("describe", "print each topic's id, partitions, leaders, replicas and in-sync replicas"),
        ("delete", "delete the topics and their records"),
    ):
        action.add_argument(
            f"--{name}", dest="action", action="store_const", const=name, help=meaning
        )
    topics.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC",
        help="a topic to act on; repeat for more",
    )
    topics.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="with --create: the partition count (default: the broker's num.partitions)",
    )
    topics.add_argument(
        "--replication-factor",
        type=int,
        metavar="N",
        help="with --create: the replication factor (default: the broker's "
        "default.replication.factor)",
    )
    topics.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --create: a topic config (cleanup.policy=compact); repeat for more",
    )
    topics.add_argument(
        "--if-not-exists",
        action="store_true",
        help="with --create: a topic that exists already is no error",
    )
    topics.add_argument(
        "--validate-only",
        action="store_true",
        help="with --create: have the broker check the topics without creating them",
    )
    topics.add_argument(
        "--include-configs",
        action="store_true",
        help="with --describe: also print every config of each topic",
    )


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
        lines.append(
            "compiled core: not in use; the hot path runs as plain Python, about half as fast"
        )
    else:
        lines.append(
            f"compiled core: partly in use; {len(interpreted)} of {total} hot-path "
            "modules run as plain Python"
        )
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
