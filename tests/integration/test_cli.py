"""The user-facing surface, run as a user runs it: the ``aioproducer`` command, the examples
and the getting-started snippet, as subprocesses against Tansu, with what a confluent-kafka
consumer reads back as the judge."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aioproducer.cli import PerfStats, build_parser, main
from aioproducer.cli import common as cli_common
from aioproducer.config import names_a_secret
from aioproducer.properties import parse_properties as _parse_properties
from tests.support.readback import high_watermarks, read_back
from tests.support.spark import ONCE_PER_CI_RUN

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

#: Kafka's kafka-producer-perf-test final line.
TOTAL_LINE = re.compile(
    r"^(?P<count>\d+)(?P<steady> steady state)? records sent, (?P<rate>\d+\.\d{6}) records/sec "
    r"\((?P<mb>\d+\.\d{2}) MB/sec\), (?P<avg>\d+\.\d{2}) ms avg latency, "
    r"(?P<max>\d+\.\d{2}) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$",
    re.MULTILINE,
)
#: Kafka's 5-second window line.
WINDOW_LINE = re.compile(
    r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d{2} MB/sec\), \d+\.\d ms avg latency, "
    r"\d+\.\d ms max latency\.$"
)
EMBEDDED_NOTE = re.compile(
    r"started an embedded Tansu broker at 127\.0\.0\.1:(?P<port>\d+); "
    r"topic (?P<topic>\S+) created with (?P<partitions>\d+) partitions?\b"
)


def run(
    args: list[str],
    *,
    stdin: str | None = None,
    timeout: float = 180,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "SPARK_EXAMPLE_ROWS": str(SPARK_EXAMPLE_ROWS),
           **(extra_env or {})}  # fmt: skip
    return subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        check=False,
    )


def aioproducer(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "aioproducer", *args], stdin=stdin)


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


# ---- the examples --------------------------------------------------------------------------


def _check_basic_send(records: list[Any]) -> None:
    assert sorted(r.value for r in records) == sorted(
        [f"order {n} created".encode() for n in range(10)] + [b"the last one"]
    )
    for record in records:
        expected = [] if record.value == b"the last one" else [("source", b"basic_send")]
        assert record.headers == expected
    by_key: dict[bytes, set[int]] = {}
    for record in records:
        by_key.setdefault(record.key, set()).add(record.partition)
    assert set(by_key) == {b"customer-0", b"customer-1", b"customer-2"}
    assert all(len(partitions) == 1 for partitions in by_key.values())


def _check_send_many(records: list[Any]) -> None:
    values = {r.value for r in records}
    assert {f"reading {n}".encode() for n in range(9998)} <= values
    keyed = [r for r in records if r.key == b"sensor-7"]
    assert [r.value for r in keyed] == [b"a keyed reading"]
    with_header = [r for r in records if r.value == b"with a header"]
    assert with_header and with_header[0].headers == [("unit", b"C")]


def _check_serializers_json(records: list[Any]) -> None:
    events = sorted(((r.key, json.loads(r.value)["action"]) for r in records), key=repr)
    # The heartbeat has no key: the key serializer (str.encode) never saw it.
    assert events == [(None, "heartbeat"), (b"ada", "login"), (b"ada", "logout"),
                      (b"grace", "upload")]


def _check_confluent_style(records: list[Any]) -> None:
    values = sorted(r.value for r in records)
    assert values == sorted(
        [f"async event {n}".encode() for n in range(5)]
        + [f"sync event {n}".encode() for n in range(5)]
    )
    assert all(r.key in (b"user-0", b"user-1") for r in records)
    blocking = [r for r in records if r.value.startswith(b"sync")]
    assert all(r.headers == [("source", b"confluent_style")] for r in blocking)


def _check_interceptors(records: list[Any]) -> None:
    traces = sorted(dict(r.headers)["trace-id"] for r in records)
    assert traces == sorted(f"trace-{n}".encode() for n in range(1, 101))


def _check_fastapi_app(records: list[Any]) -> None:
    orders = sorted(json.loads(r.value)["order_id"] for r in records if r.value.startswith(b"{"))
    assert orders == ["o-0", "o-1", "o-2"]
    assert {r.value for r in records if not r.value.startswith(b"{")} == {b"/home", b"hi"}
    clicks = [r for r in records if r.value == b"/home"]
    assert clicks[0].headers == [("kind", b"click")]


def _check_fastapi_prometheus(records: list[Any]) -> None:
    orders = sorted(json.loads(r.value)["order_id"] for r in records)
    assert orders == [f"o-{n}" for n in range(5)]


def _check_spark_to_kafka(records: list[Any]) -> None:
    # The data source and the foreachPartition fallback each write every row once.
    assert len(records) == 2 * SPARK_EXAMPLE_ROWS
    assert all(r.headers == [("source", b"spark")] for r in records[:10])
    keys = {r.key for r in records}
    assert keys == {str(n % 1000).encode() for n in range(SPARK_EXAMPLE_ROWS)}


def _check_transactions(records: list[Any]) -> None:
    by_key: dict[bytes, list[bytes]] = {}
    for record in records:
        by_key.setdefault(record.key, []).append(record.value)
    assert by_key[b"order-1"] == [b"order-1 keyboard", b"order-1 mouse", b"order-1 monitor"]
    assert by_key[b"order-3"] == [b"order-3 headphones"]
    # The aborted record was still buffered (a partition's first batch in a transaction
    # waits for AddPartitionsToTxn), so the abort dropped it before it left: it never
    # reaches the broker. (Had it, Tansu would show it: it does not hide aborted records;
    # tests/integration/test_transactions.py checks aborts on the wire.)
    assert b"order-2" not in by_key


def _check_otel_tracing(records: list[Any]) -> None:
    # Every record carries a W3C traceparent of the one trace the example printed.
    trace_ids = {dict(r.headers)["traceparent"].split(b"-")[1] for r in records}
    assert len(trace_ids) == 1
    assert sorted(r.value for r in records) == [
        b"audit 1", b"audit 2", b"item 0", b"item 1", b"item 2",
    ]


def _check_spark_submit_sync(records: list[Any]) -> None:
    by_key = {r.key: json.loads(r.value) for r in records}
    job = by_key.pop(b"job")
    assert job["orders"] == SPARK_EXAMPLE_ROWS and job["customers"] == 20
    assert set(by_key) == {f"customer-{n}".encode() for n in range(20)}
    assert sum(total["orders"] for total in by_key.values()) == SPARK_EXAMPLE_ROWS
    assert by_key[b"customer-3"]["amount_cents"] == sum(
        n * 7 % 10000 for n in range(3, SPARK_EXAMPLE_ROWS, 20)
    )


def _registry_payload(value: bytes | None) -> tuple[int, bytes]:
    """The schema id and payload of a value in the Schema Registry wire format."""
    assert value is not None and value[0] == 0, value
    return int.from_bytes(value[1:5], "big"), value[5:]


def _check_fastapi_schema_registry(records: list[Any]) -> None:
    decoded = [_registry_payload(r.value) for r in records]
    assert len({schema_id for schema_id, _ in decoded}) == 1  # one schema, registered once
    signups = sorted((json.loads(payload) for _, payload in decoded), key=lambda s: s["email"])
    assert signups == [
        {"email": "user0@example.com", "plan": "free", "seats": 1},
        {"email": "user1@example.com", "plan": "team", "seats": 5},
        {"email": "user2@example.com", "plan": "team", "seats": 9},
    ]
    assert sorted(r.key for r in records) == [f"user{n}@example.com".encode() for n in range(3)]


def _check_spark_schema_registry(records: list[Any]) -> None:
    import io

    import fastavro

    decoded = [_registry_payload(r.value) for r in records]
    assert len({schema_id for schema_id, _ in decoded}) == 1
    # The registered schema is Spark's derivation (checked against Spark's from_avro and
    # confluent-kafka in test_spark_schema_registry.py); here, each row decodes with it.
    schema = fastavro.parse_schema(
        {"type": "record", "name": "topLevelRecord", "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": ["string", "null"]},
            {"name": "amount", "type": [{"type": "fixed", "name": "topLevelRecord.amount.fixed",
                                         "size": 5, "logicalType": "decimal", "precision": 10,
                                         "scale": 2}, "null"]},
            {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ]}
    )  # fmt: skip
    orders = sorted(
        (fastavro.schemaless_reader(io.BytesIO(p), schema) for _, p in decoded),
        key=lambda order: order["id"],
    )
    assert [order["id"] for order in orders] == list(range(SPARK_EXAMPLE_ROWS))
    assert str(orders[1234]["amount"]) == "12.34" and orders[7]["customer"] == "c-7"


SPARK_EXAMPLE_ROWS = 2000

EXAMPLE_CASES: dict[str, tuple[int, Callable[[list[Any]], None], str]] = {
    "fastapi_app.py": (5, _check_fastapi_app, "the producer delivered everything"),
    "fastapi_prometheus.py": (5, _check_fastapi_prometheus, "the scrape says 5 records reached"),
    "spark_to_kafka.py": (2 * SPARK_EXAMPLE_ROWS, _check_spark_to_kafka, "rows/s"),
    "spark_submit_sync.py": (21, _check_spark_submit_sync, "published 20 customer totals"),
    "basic_send.py": (11, _check_basic_send, "last record: partition"),
    "send_many.py": (10_000, _check_send_many, "10000 records acknowledged"),
    "serializers_json.py": (4, _check_serializers_json, "heartbeat: partition"),
    "interceptors.py": (100, _check_interceptors, "failed: 0"),
    "confluent_style.py": (10, _check_confluent_style, "delivered: 10 of 10"),
    "transactions.py": (4, _check_transactions, "order-2: aborted (card declined)"),
    "otel_tracing.py": (5, _check_otel_tracing, "(PRODUCER): 2 records"),
    "fastapi_schema_registry.py": (
        3, _check_fastapi_schema_registry, "published 3 signups as JSON Schema records"
    ),
    "spark_schema_registry.py": (
        SPARK_EXAMPLE_ROWS, _check_spark_schema_registry, "orders as Avro records"
    ),
}

#: Examples that need a Schema Registry (SCHEMA_REGISTRY_URL: the test's Apicurio).
REGISTRY_EXAMPLES = {"fastapi_schema_registry.py", "spark_schema_registry.py"}


#: The examples run with spark-submit (pyspark's own, beside this interpreter), as their
#: docstring says; the others with this interpreter.
SPARK_SUBMITTED = {"spark_submit_sync.py"}


def _example_command(script: str) -> list[str]:
    if script not in SPARK_SUBMITTED:
        return [sys.executable, str(EXAMPLES / script)]
    bin_dirs = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    spark_submit = shutil.which("spark-submit", path=bin_dirs)
    assert spark_submit is not None, "pyspark's spark-submit is not installed"
    # The driver and its Python workers run this interpreter (spark-submit's default is
    # python3 on the PATH).
    return [spark_submit, "--master", "local[2]",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            str(EXAMPLES / script)]


@pytest.mark.parametrize(
    "script",
    [
        # The Spark examples run a Spark job: once per CI run, in its compiled pass.
        pytest.param(
            script,
            marks=([ONCE_PER_CI_RUN, pytest.mark.spark] if script.startswith("spark") else [])
            + ([pytest.mark.registry] if script in REGISTRY_EXAMPLES else []),
        )
        for script in sorted(EXAMPLE_CASES)
    ],
)
def test_example_delivers_what_it_says(
    script: str, tansu: Any, new_topic: Any, request: pytest.FixtureRequest
) -> None:
    expected, check, output = EXAMPLE_CASES[script]
    topic = new_topic(tansu, partitions=3)
    extra_env = {}
    if script in REGISTRY_EXAMPLES:
        extra_env["SCHEMA_REGISTRY_URL"] = request.getfixturevalue("schema_registry").url
    result = run(
        [*_example_command(script), "--bootstrap-servers", tansu.bootstrap_servers,
         "--topic", topic],
        extra_env=extra_env,
    )
    assert result.returncode == 0, explain(result)
    assert output in result.stdout
    records = read_back(tansu.bootstrap_servers, topic, expected=expected)
    assert len(records) == expected
    check(records)


#: Examples that need Apache Kafka itself, each run by a test of its own on the ``kafka``
#: node: spark_exactly_once.py in tests/integration/test_kafka_spark_exactly_once.py.
KAFKA_EXAMPLES = {"spark_exactly_once.py"}


def test_examples_are_all_tested() -> None:
    scripts = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(EXAMPLE_CASES) | KAFKA_EXAMPLES


def test_the_exactly_once_example_says_it_needs_kafka_without_bootstrap_servers() -> None:
    result = run([sys.executable, str(EXAMPLES / "spark_exactly_once.py")])
    assert result.returncode == 2, explain(result)
    assert "needs Apache Kafka 3.0 or later (--bootstrap-servers" in result.stderr
    assert EMBEDDED_NOTE.search(result.stderr) is None  # no broker was started


def test_example_starts_its_own_broker_without_bootstrap_servers() -> None:
    result = run([sys.executable, str(EXAMPLES / "basic_send.py"), "--topic", "own-broker"])
    assert result.returncode == 0, explain(result)
    note = EMBEDDED_NOTE.search(result.stderr)
    assert note is not None, explain(result)
    assert result.stdout.count("@ offset") == 10
    assert port_is_closed(int(note["port"]))


def test_getting_started_snippet_runs_as_written() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    snippet = next(block for block in blocks if "EmbeddedBroker()" in block)
    result = run([sys.executable, "-c", snippet])
    assert result.returncode == 0, explain(result)
    assert "stored in partition" in result.stdout
    assert re.search(r"^\[\d+, \d+, \d+\]$", result.stdout, flags=re.MULTILINE), result.stdout


# ---- aioproducer produce -------------------------------------------------------------------


def test_produce_sends_each_line_with_key_and_headers(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=3)
    lines = ["alice:logged in", "bob:logged out", "alice:bought: a hat", "carol:"]
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-servers", tansu.bootstrap_servers,
        "--key-separator", ":", "--header", "origin=cli", "--header", "v=1",
        stdin="\n".join(lines) + "\n",
    )
    assert result.returncode == 0, explain(result)
    assert re.search(rf"^4 records delivered to topic {re.escape(topic)} \(partitions: ",
                     result.stdout, flags=re.MULTILINE), explain(result)
    summary = {
        int(partition): int(count)
        for partition, count in re.findall(
            r"partition (\d+): offsets \d+\.\.\d+ \((\d+) record", result.stdout
        )
    }
    assert sum(summary.values()) == 4
    records = read_back(tansu.bootstrap_servers, topic, expected=4)
    assert sorted((r.key, r.value) for r in records) == sorted(
        [(b"alice", b"logged in"), (b"bob", b"logged out"), (b"alice", b"bought: a hat"),
         (b"carol", b"")]
    )
    assert all(r.headers == [("origin", b"cli"), ("v", b"1")] for r in records)
    assert {r.partition for r in records} == set(summary)
    # Records with the same key share a partition.
    assert len({r.partition for r in records if r.key == b"alice"}) == 1


def test_produce_reads_files_and_a_fixed_partition(
    tansu: Any, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(tansu, partitions=3)
    first = tmp_path / "first.txt"
    first.write_text("one\r\ntwo\n", encoding="utf-8")
    second = tmp_path / "second.txt"
    second.write_text("three", encoding="utf-8")  # no newline at the end
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-servers", tansu.bootstrap_servers,
        "--key", "k", "--partition", "2", str(first), str(second),
    )
    assert result.returncode == 0, explain(result)
    assert "  partition 2: offsets 0..2 (3 records)" in result.stdout
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    assert [(r.partition, r.offset, r.key, r.value) for r in records] == [
        (2, 0, b"k", b"one"), (2, 1, b"k", b"two"), (2, 2, b"k", b"three")
    ]


def test_produce_exits_1_when_records_cannot_be_delivered(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=3)
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-servers", tansu.bootstrap_servers,
        "--partition", "7", "--producer-props", "max.block.ms=3000", stdin="lost\n",
    )
    assert result.returncode == 1, explain(result)
    assert "error: line 1 was not sent: UnknownTopicOrPartitionError: partition 7 is out of " \
        "range" in result.stderr, explain(result)
    assert "Traceback" not in result.stderr
    assert "0 records delivered" in result.stdout


def test_produce_names_the_line_the_producer_refuses(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=1)
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-servers", tansu.bootstrap_servers,
        # Larger than batch.size too, so that it cannot join the first line's open batch.
        "--producer-props", "max.request.size=1000", stdin="fits\n" + "x" * 20_000 + "\nnever\n",
    )
    assert result.returncode == 1, explain(result)
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, explain(result)
    assert re.search(r"error: line 2 was not sent: RecordTooLargeError: .* larger than "
                     r"max_request_size \(1000\); stopped there$", errors[0]), explain(result)
    assert "1 record delivered" in result.stdout
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [b"fits"]


def test_produce_sends_arguments_that_are_not_utf8_as_their_bytes(
    tansu: Any, new_topic: Any
) -> None:
    # A non-UTF-8 byte in argv reaches Python as a lone surrogate (PEP 383); the key and
    # header values are bytes to Kafka, so the bytes given are sent.
    topic = new_topic(tansu, partitions=1)
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-servers", tansu.bootstrap_servers,
        "--key", "k\udcff", "--header", "h=\udcfe", stdin="v\n",
    )
    assert result.returncode == 0, explain(result)
    [record] = read_back(tansu.bootstrap_servers, topic, expected=1)
    assert (record.key, record.value, record.headers) == (b"k\xff", b"v", [("h", b"\xfe")])


def test_produce_exits_1_on_a_line_without_the_key_separator(
    tansu: Any, new_topic: Any
) -> None:
    topic = new_topic(tansu, partitions=1)
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-servers", tansu.bootstrap_servers,
        "--key-separator", "=", stdin="a=1\nno separator\nb=2\n",
    )
    assert result.returncode == 1, explain(result)
    assert "line 2 has no key separator" in result.stderr
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [b"1"]


def test_produce_without_bootstrap_uses_an_embedded_broker_and_stops_it() -> None:
    result = aioproducer("produce", "--topic", "lines", "--partitions", "2", stdin="x\ny\n")
    assert result.returncode == 0, explain(result)
    note = EMBEDDED_NOTE.search(result.stderr)
    assert note is not None and note["topic"] == "lines" and note["partitions"] == "2"
    assert "2 records delivered to topic lines" in result.stdout
    assert port_is_closed(int(note["port"]))


def test_ctrl_c_stops_the_embedded_broker() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "aioproducer", "produce", "--topic", "interrupted"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT, env=env,
    )
    assert process.stderr is not None and process.stdin is not None
    try:
        seen = ""
        note = None
        while note is None:
            line = process.stderr.readline()
            assert line, f"the command ended before starting the broker: {seen}"
            seen += line
            note = EMBEDDED_NOTE.search(line)
        process.stdin.write("one line\n")
        process.stdin.flush()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert port_is_closed(int(note["port"]))


def test_bootstrap_server_is_an_option_and_the_old_names_are_aliases(
    tansu: Any, new_topic: Any
) -> None:
    topic = new_topic(tansu, partitions=1)
    for option in ("--bootstrap-server", "--bootstrap-servers", "--broker-list"):
        result = aioproducer(
            "produce", "--topic", topic, option, tansu.bootstrap_servers, stdin=f"{option}\n"
        )
        assert result.returncode == 0, explain(result)
        assert "1 record delivered to topic" in result.stdout, explain(result)
        assert EMBEDDED_NOTE.search(result.stderr) is None
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    assert [r.value for r in records] == [b"--bootstrap-server", b"--bootstrap-servers",
                                          b"--broker-list"]


@pytest.mark.parametrize("command", ["produce", "perf", "demo"])
def test_help_names_bootstrap_server(command: str) -> None:
    parser = build_parser()
    text = parser.commands[command].format_help()
    assert "--bootstrap-server HOST:PORT" in text


def test_an_abbreviated_option_is_refused_with_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # argparse would take --bootstrap as --bootstrap-server (or --bootstrap-servers): an
    # accident of prefixes, not an option.
    assert main(["produce", "--topic", "t", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("aioproducer produce: error: unrecognized arguments: --bootstrap"), err
    assert "did you mean --bootstrap-server?" in err


def test_a_misspelt_required_option_is_suggested(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse reports the missing --topic before the unknown --topc: the one line says both.
    assert main(["produce", "--bootstrap-server", "127.0.0.1:1", "--topc", "orders"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "the following arguments are required: --topic; did you mean --topic?" in err


def test_console_producer_properties_parse_headers_key_and_value(
    tansu: Any, new_topic: Any
) -> None:
    topic = new_topic(tansu, partitions=1)
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-server", tansu.bootstrap_servers,
        "--property", "parse.key=true", "--property", "parse.headers=true",
        stdin="h1:v1,h2:v2\tkey\tvalue\n"
              "only:one\tk2\ttabs\tin\tthe value\n"
              "a:1,a:2,\tk3\tduplicate headers, a trailing separator\n"
              "\tk4\tno headers\n",
    )
    assert result.returncode == 0, explain(result)
    records = read_back(tansu.bootstrap_servers, topic, expected=4)
    assert [(r.headers, r.key, r.value) for r in records] == [
        ([("h1", b"v1"), ("h2", b"v2")], b"key", b"value"),
        ([("only", b"one")], b"k2", b"tabs\tin\tthe value"),
        ([("a", b"1"), ("a", b"2")], b"k3", b"duplicate headers, a trailing separator"),
        ([], b"k4", b"no headers"),
    ]


def test_console_producer_separators_null_marker_and_fixed_headers(
    tansu: Any, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(tansu, partitions=1)
    reader_config = tmp_path / "reader.properties"
    # A properties file can hold a TAB as \t; --property wins over the file.
    reader_config.write_text(
        "parse.headers=true\nheaders.delimiter=\\t\nheaders.separator=;\n"
        "headers.key.separator==\nkey.separator=\\t\n",
        encoding="utf-8",
    )
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-server", tansu.bootstrap_servers,
        "--reader-config", str(reader_config), "--property", "key.separator=|",
        "--property", "parse.key=true", "--property", "null.marker=<null>",
        "--header", "origin=cli",
        stdin="trace=1;user=<null>\tk|v\n"
              "<null>\t<null>|a value without key\n"
              "x=1\tkey|<null>\n",
    )
    assert result.returncode == 0, explain(result)
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    assert [(r.headers, r.key, r.value) for r in records] == [
        ([("origin", b"cli"), ("trace", b"1"), ("user", None)], b"k", b"v"),
        ([("origin", b"cli")], None, b"a value without key"),
        ([("origin", b"cli"), ("x", b"1")], b"key", None),
    ]


def test_console_producer_ignore_error_sends_what_it_can(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=1)
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-server", tansu.bootstrap_servers,
        "--property", "parse.key=true", "--property", "parse.headers=true",
        "--property", "ignore.error=true",
        stdin="no separators at all\nflag\tk\tv\n",
    )
    assert result.returncode == 0, explain(result)
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert [(r.headers, r.key, r.value) for r in records] == [
        ([], None, b"no separators at all"),
        ([("flag", None)], b"k", b"v"),
    ]


def test_console_producer_stops_at_a_line_without_headers(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=1)
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-server", tansu.bootstrap_servers,
        "--property", "parse.headers=true",
        stdin="h:1\tfirst\nno headers here\nh:3\tthird\n",
    )
    assert result.returncode == 1, explain(result)
    assert "error: line 2 has no headers delimiter '\\t'; stopped there" in result.stderr
    assert "1 record delivered to topic" in result.stdout
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [
        b"first"
    ]


def test_console_producer_shortcuts_win_over_the_configs(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=1)
    # --request-required-acks 0 wins over acks=all: the broker sends no offsets back.
    unacknowledged = aioproducer(
        "produce", "--topic", topic, "--bootstrap-server", tansu.bootstrap_servers,
        "--producer-property", "acks=all", "--request-required-acks", "0",
        "--compression-codec", "--timeout", "0", "--batch-size", "1000",
        stdin="one\ntwo\n",
    )
    assert unacknowledged.returncode == 0, explain(unacknowledged)
    assert unacknowledged.stdout == (
        f"2 records sent without acknowledgement (acks=0) to topic {topic} (partitions: 0)\n"
        "  partition 0: 2 records, offsets unknown\n"
    )
    acknowledged = aioproducer(
        "produce", "--topic", topic, "--bootstrap-server", tansu.bootstrap_servers,
        "--producer-property", "acks=0", "--request-required-acks", "all",
        "--compression-codec", "zstd", "--max-block-ms", "30000", stdin="three\n",
    )
    assert acknowledged.returncode == 0, explain(acknowledged)
    assert "  partition 0: offsets 2..2 (1 record)" in acknowledged.stdout, explain(acknowledged)
    records = read_back(tansu.bootstrap_servers, topic, expected=3)
    assert [r.value for r in records] == [b"one", b"two", b"three"]


@pytest.mark.parametrize("sync", [False, True])
def test_sync_stops_at_the_first_record_not_delivered(sync: bool, mock_cluster: Any) -> None:
    topic = f"sync-{sync}".lower()
    mock_cluster.create_topic(topic, partitions=1)
    mock_cluster.push_request_errors(0, [87])  # the first Produce request: INVALID_RECORD
    result = aioproducer(
        "produce", "--topic", topic, "--bootstrap-server", mock_cluster.bootstrap_servers,
        "--producer-property", "linger.ms=100", *(["--sync"] if sync else []),
        stdin="one\ntwo\nthree\n",
    )
    assert result.returncode == 1, explain(result)
    if sync:
        # Nothing after the record that failed was sent.
        assert "error: line 1 was not delivered: InvalidRecordError" in result.stderr
        assert result.stdout.startswith("0 records delivered"), explain(result)
    else:
        # The three lines shared the batch that failed.
        assert "3 of 3 records were not delivered:\n  InvalidRecordError" in result.stderr
    assert read_back(mock_cluster.bootstrap_servers, topic, expected=0, timeout=2) == []


def test_producer_property_and_producer_config_file(
    tansu: Any, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(tansu, partitions=1)
    host, port = tansu.bootstrap_servers.rsplit(":", 1)
    config = tmp_path / "producer.properties"
    # The Java format: comments, ':' and ' ' separators, a value continued over lines.
    config.write_text(
        f"# the cluster\n! also a comment\nbootstrap.servers = {host}:\\\n    {port}\n"
        "max.request.size: 1000\nclient.id producer-from-a-file\n",
        encoding="utf-8",
    )
    big = "x" * 5000
    refused = aioproducer(
        "produce", "--topic", topic, "--producer.config", str(config), stdin=big + "\n"
    )
    assert refused.returncode == 1, explain(refused)
    assert "larger than max_request_size (1000)" in refused.stderr, explain(refused)
    assert EMBEDDED_NOTE.search(refused.stderr) is None  # bootstrap.servers came from the file
    accepted = aioproducer(
        "produce", "--topic", topic, "--producer.config", str(config),
        # The snake_case name replaces the file's Java name.
        "--producer-property", "max_request_size=100000", "--producer-property", "linger.ms=0",
        stdin=big + "\n",
    )
    assert accepted.returncode == 0, explain(accepted)
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [
        big.encode()
    ]


def test_java_only_options_in_a_config_file_are_judged_as_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Java option with no counterpart, in a --producer.config file, gets the same
    verdict as from Python: refused with what to do instead (Kerberos), not "unknown"."""
    config = tmp_path / "client.properties"
    config.write_text(
        "client.dns.lookup=use_all_dns_ips\nsasl.login.class=com.example.Login\n",
        encoding="utf-8",
    )
    assert main(["produce", "--topic", "t", "--producer.config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "unknown" not in err, err
    assert "sasl.login.class (Java login and callback classes" in err, err
    assert "client.dns.lookup" not in err, err  # its value changes nothing: dropped


def test_a_trust_store_that_cannot_be_read_is_not_called_a_connection_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JKS trust store (which the producer cannot read) fails start(): the command says
    the producer cannot start, with the store's error, not that it cannot connect."""
    store = tmp_path / "truststore.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)  # the JKS magic
    code = main([
        "produce", "--topic", "t", "--bootstrap-server", "127.0.0.1:1",
        "--producer-property", "security.protocol=SSL",
        "--producer-property", f"ssl.truststore.location={store}",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1, err
    assert "cannot start the producer: ConfigurationError: ssl.truststore.location" in err, err
    assert "keytool -importkeystore" in err and "cannot connect" not in err, err


# ---- usage errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["produce"],  # --topic is required
        ["produce", "--topic", "t", "--header", "no-equals-sign"],
        ["produce", "--topic", "t", "--key", "k", "--key-separator", ":"],
        ["produce", "--topic", "t", "--producer-props", "linger.ms"],
        ["produce", "--topic", "t", "--bootstrap-servers", "127.0.0.1:1", "/no/such/file"],
        ["produce", "--topic", "t", "--bootstrap-servers", "127.0.0.1:1",
         "--producer-props", "linger.mss=5"],
        ["perf", "--topic", "t", "--num-records", "10", "--throughput", "-1"],  # no payload
        ["perf", "--topic", "t", "--num-records", "0", "--record-size", "1", "--throughput", "-1"],
        ["perf", "--topic", "t", "--num-records", "10", "--record-size", "1", "--throughput", "-1",
         "--warmup-records", "10"],
        ["bogus"],
    ],
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["produce", "--topic", "t", "--partition", "-1"],
         "--partition=-1 is out of range: a partition is an int from 0"),
        (["produce", "--topic", "no way"],
         "--topic: topic name 'no way' is illegal: it may contain only ASCII letters"),
        (["produce", "--topic", ""], "--topic: a topic name cannot be empty"),
        (["produce", "--topic", "t" * 250], "--topic: topic name 'tttt"),
        (["produce", "--topic", "t", "--header", "\udcff=v"],
         "--header: the header name '\\udcff' is not valid UTF-8 text"),
        (["perf", "--topic", "..", "--num-records", "10", "--record-size", "1",
          "--throughput", "-1"], "--topic: a topic name cannot be '..'"),
    ],
)
def test_a_record_the_producer_would_refuse_is_a_one_line_usage_error(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Checked by the producer's own rules before any broker is started or reached.
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"aioproducer {args[0]}: error: {message}"), err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["produce", "--topic", "t", "--producer-property", "linger.mss=5"],
         "unknown producer config 'linger.mss'; did you mean 'linger.ms' (linger_ms)?"),
        (["produce", "--topic", "t", "--producer-property", "lingerms=5"],
         "unknown producer config 'lingerms'; did you mean 'linger.ms' (linger_ms)?"),
        (["perf", "--topic", "t", "--num-records", "1", "--record-size", "1",
          "--throughput", "-1", "--producer-props", "acks=all", "batch_sizes=1"],
         "unknown producer config 'batch_sizes'; did you mean 'batch.size' (batch_size)?"),
        (["produce", "--topic", "t", "--producer-property", "linger.ms=soon"],
         "invalid producer config: linger_ms (linger.ms) must be an integer >= 0, got 'soon'"),
        (["produce", "--topic", "t", "--producer-property", "linger.ms"],
         "a producer config: expected NAME=VALUE, got 'linger.ms' (give it a value: "
         "linger.ms=VALUE)"),
        (["produce", "--topic", "t", "--producer-props", "acks=all", "lines.txt"],
         "a producer config: expected NAME=VALUE, got 'lines.txt' (after --producer-props, "
         "FILE arguments go after --)"),
        (["produce", "--topic", "t", "--header", "=v"],
         "--header: expected NAME=VALUE, got '=v'"),
        (["produce", "--topic", "t", "--property", "linger.ms=5"],
         "--property linger.ms: linger.ms is a producer config; give it with "
         "--producer-property linger.ms=VALUE"),
        (["produce", "--topic", "t", "--property", "parse.kye=true"],
         "--property: unknown property 'parse.kye'; did you mean 'parse.key'?"),
        (["produce", "--topic", "t", "--property", "parse.key=yes"],
         "--property parse.key must be true or false, got 'yes'"),
        (["produce", "--topic", "t", "--property", "headers.separator=:"],
         "--property headers.separator and headers.key.separator may not be equal"),
        (["produce", "--topic", "t", "--property", "null.marker=\t"],
         "--property null.marker and key.separator may not be equal"),
        (["produce", "--topic", "t", "--key", "k", "--property", "parse.key=true"],
         "--key gives every record its key, but parse.key=true reads keys"),
        (["produce", "--topic", "t", "--key-separator", ":", "--property", "key.separator=|"],
         "--key-separator ':' and --property key.separator=| disagree"),
        (["perf", "--topic", "t", "--num-records", "1", "--record-size", "1",
          "--throughput", "-1", "--transaction-duration-ms", "0"],
         "--transaction-duration-ms should be greater than zero"),
        (["perf", "--topic", "t", "--num-records", "1", "--record-size", "1",
          "--throughput", "-1", "--transactional-id", "x", "--producer-property", "acks=1"],
         "invalid producer config: transactional_id (transactional.id) needs idempotence"),
        (["produce", "--topic", "t", "--partitions", "0"],
         "--partitions must be at least 1, got 0"),
        (["produce", "--topic", "t", "--timeout", "soon"],
         "--timeout: linger_ms (linger.ms) must be an integer >= 0, got 'soon'"),
        (["produce", "--topic", "t", "--compression-codec", "brotli"],
         "--compression-codec: compression_type (compression.type) must be one of"),
    ],
)
def test_options_are_checked_before_the_embedded_broker_starts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # No --bootstrap-server: a valid command would start a broker; these must not.
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "embedded Tansu broker" not in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"aioproducer {args[0]}: error: {message}"), err


def test_a_bad_key_in_the_producer_config_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "producer.properties"
    config.write_text("acks=all\ncompresion.type=zstd\n", encoding="utf-8")
    assert main(["produce", "--topic", "t", "--producer.config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"aioproducer produce: error: --producer.config {config} line 2: unknown producer "
        "config 'compresion.type'; did you mean 'compression.type' (compression_type)?\n"
    )


def test_a_malformed_jaas_line_in_the_producer_config_file_is_named_not_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "producer.properties"
    # As a Java job's file has it: the line continued with backslashes, a '=' forgotten.
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n    password "hunter2-secret";\n',
        encoding="utf-8",
    )
    assert main(["produce", "--topic", "t", "--producer.config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "aioproducer produce: error: invalid producer config: sasl_jaas_config "
        "(sasl.jaas.config) is malformed at column 92 (a quoted string): expected '=' after "
        "the option name at column 83\n"
    )


def test_an_unreachable_cluster_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    lines = tmp_path / "lines.txt"
    lines.write_text("never sent\n", encoding="utf-8")
    code = main(["produce", str(lines), "--topic", "t", "--bootstrap-servers",
                 f"127.0.0.1:{port}", "--producer-props", "max.block.ms=1000"])
    assert code == 1
    assert "error" in capsys.readouterr().err


# ---- aioproducer perf --------------------------------------------------------------------------


def test_perf_prints_kafkas_lines_and_the_broker_has_every_record(
    tansu: Any, new_topic: Any
) -> None:
    topic = new_topic(tansu, partitions=3)
    result = aioproducer(
        "perf", "--topic", topic, "--num-records", "20000", "--record-size", "100",
        "--throughput", "-1", "--bootstrap-servers", tansu.bootstrap_servers,
        "--producer-props", "linger.ms=5", "acks=all",
    )
    assert result.returncode == 0, explain(result)
    lines = result.stdout.strip().splitlines()
    total = TOTAL_LINE.fullmatch(lines[-1])
    assert total is not None, explain(result)
    assert all(WINDOW_LINE.fullmatch(line) for line in lines[:-1]), explain(result)
    assert int(total["count"]) == 20000
    assert int(total["p50"]) <= int(total["p95"]) <= int(total["p99"]) <= int(total["p999"])
    assert float(total["max"]) >= float(total["avg"])
    records = read_back(tansu.bootstrap_servers, topic, expected=20000)
    assert len(records) == 20000
    assert all(len(r.value) == 100 and r.value.isalpha() and r.value.isupper() for r in records)
    assert {r.partition for r in records} == {0, 1, 2}


def test_perf_batch_mode_with_warmup_prints_steady_state(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=3)
    result = aioproducer(
        "perf", "--topic", topic, "--num-records", "20000", "--payload-monotonic",
        "--throughput", "-1", "--batch", "--chunk-size", "700", "--warmup-records", "5000",
        "--bootstrap-servers", tansu.bootstrap_servers,
    )
    assert result.returncode == 0, explain(result)
    assert result.stdout.startswith("Warmup first 5000 records.")
    totals = list(TOTAL_LINE.finditer(result.stdout))
    assert [(t["count"], bool(t["steady"])) for t in totals] == [
        ("20000", False), ("15000", True)
    ], explain(result)
    records = read_back(tansu.bootstrap_servers, topic, expected=20000)
    assert sorted(int(r.value) for r in records) == list(range(20000))


def test_perf_payload_file_throttled_with_metrics(
    tansu: Any, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(tansu, partitions=1)
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("red|green|blue", encoding="utf-8")
    config = tmp_path / "producer.properties"
    config.write_text(
        f"# a Java properties file\nbootstrap.servers={tansu.bootstrap_servers}\n"
        "linger.ms: 1\n",
        encoding="utf-8",
    )
    result = aioproducer(
        "perf", "--topic", topic, "--num-records", "600", "--payload-file", str(payloads),
        "--payload-delimiter", "|", "--throughput", "2000", "--print-metrics",
        "--producer.config", str(config),
    )
    assert result.returncode == 0, explain(result)
    assert "Number of messages read: 3" in result.stdout
    assert TOTAL_LINE.search(result.stdout), explain(result)
    sent = re.search(
        r"^producer-metrics:record-send-total:\{client-id=perf-producer-client\}\s+: (\S+)$",
        result.stdout, flags=re.MULTILINE,
    )
    assert sent is not None and float(sent[1]) == 600.0, explain(result)
    # As the Java tool, the per-topic and per-broker groups too.
    per_topic = re.search(
        r"^producer-topic-metrics:record-send-total:"
        rf"\{{client-id=perf-producer-client, topic={re.escape(topic)}\}}\s+: (\S+)$",
        result.stdout, flags=re.MULTILINE,
    )
    assert per_topic is not None and float(per_topic[1]) == 600.0, explain(result)
    assert re.search(
        r"^producer-node-metrics:request-total:\{client-id=perf-producer-client, "
        r"node-id=node-\d+\}\s+: [1-9]",
        result.stdout, flags=re.MULTILINE,
    ), explain(result)
    records = read_back(tansu.bootstrap_servers, topic, expected=600)
    assert len(records) == 600
    assert {r.value for r in records} <= {b"red", b"green", b"blue"}


@pytest.mark.parametrize("batch", [False, True])
def test_perf_commits_a_transaction_every_duration(
    batch: bool, tansu: Any, new_topic: Any
) -> None:
    topic = new_topic(tansu, partitions=1)
    # Throttled to 200 records a second, the 300 records take at least 1.5 s: with a
    # 100 ms duration there is more than one transaction whatever the machine's speed.
    result = aioproducer(
        "perf", "--topic", topic, "--num-records", "300", "--payload-monotonic",
        "--throughput", "200", "--transaction-duration-ms", "100",
        *(["--batch", "--chunk-size", "10"] if batch else []),
        "--bootstrap-server", tansu.bootstrap_servers,
    )
    assert result.returncode == 0, explain(result)
    total = TOTAL_LINE.search(result.stdout)
    assert total is not None and total["count"] == "300", explain(result)
    note = re.search(
        r"committed (\d+) transactions \(transactional id (performance-producer-[0-9a-f-]{36})\)",
        result.stderr,
    )
    assert note is not None, explain(result)
    committed = int(note[1])
    records = read_back(tansu.bootstrap_servers, topic, expected=300,
                        isolation_level="read_committed")
    assert sorted(int(r.value) for r in records) == list(range(300))
    # Each commit wrote one marker into the partition's log.
    [end] = high_watermarks(tansu.bootstrap_servers, topic).values()
    assert end - 300 == committed > 1, explain(result)


def test_perf_transactional_id_option_wins_and_the_last_transaction_is_committed(
    tansu: Any, new_topic: Any
) -> None:
    topic = new_topic(tansu, partitions=1)
    # transactional.id in the configs turns transactions on; --transactional-id wins over
    # it; the duration is Kafka's default of 3 s, longer than the run.
    result = aioproducer(
        "perf", "--topic", topic, "--num-records", "50", "--payload-monotonic",
        "--throughput", "-1", "--producer-property", "transactional.id=from-props",
        "--transactional-id", "from-the-option",
        "--bootstrap-server", tansu.bootstrap_servers,
    )
    assert result.returncode == 0, explain(result)
    assert "committed 1 transaction (transactional id from-the-option)" in result.stderr
    records = read_back(tansu.bootstrap_servers, topic, expected=50,
                        isolation_level="read_committed")
    assert sorted(int(r.value) for r in records) == list(range(50))


def test_perf_on_the_embedded_broker_verifies_and_cleans_up() -> None:
    result = aioproducer(
        "perf", "--topic", "embedded-perf", "--num-records", "5000", "--record-size", "50",
        "--throughput", "-1", "--verify",
    )
    assert result.returncode == 0, explain(result)
    note = EMBEDDED_NOTE.search(result.stderr)
    assert note is not None, explain(result)
    assert note["topic"] == "embedded-perf" and note["partitions"] == "3"
    total = TOTAL_LINE.search(result.stdout)
    assert total is not None and total["count"] == "5000", explain(result)
    assert "read back all 5000 records from topic embedded-perf" in result.stdout
    assert port_is_closed(int(note["port"]))


# ---- saying what runs: the compiled core or the plain-Python fallback ---------------------


def _expects_compiled() -> bool:
    """Whether the build under test has its compiled core: AIOPRODUCER_EXPECT_COMPILED where
    set (CI), else what this process finds (the subprocesses import the same package)."""
    from aioproducer.compiled import interpreted_modules

    expected = os.environ.get("AIOPRODUCER_EXPECT_COMPILED")
    return not interpreted_modules() if expected is None else expected == "1"


def test_version_says_whether_the_compiled_core_runs() -> None:
    from aioproducer.compiled import HOT_PATH_MODULES, INSTALL_ADVICE

    result = aioproducer("--version")
    assert result.returncode == 0, explain(result)
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"aioproducer \S+ \(CPython \d+\.\d+\.\d+, /\S+/aioproducer\)",
                        lines[0]), explain(result)
    if _expects_compiled():
        assert lines[1:] == [
            f"compiled core: in use (all {len(HOT_PATH_MODULES)} hot-path modules are compiled)"
        ], explain(result)
    else:
        assert lines[1:] == [
            "compiled core: not in use; the hot path runs as plain Python, about half as fast",
            f"not compiled: {', '.join(HOT_PATH_MODULES)}",
            f"to fix: {INSTALL_ADVICE}",
        ], explain(result)


def test_perf_warns_once_only_on_the_plain_python_fallback(tansu: Any, new_topic: Any) -> None:
    topic = new_topic(tansu, partitions=1)
    result = aioproducer(
        "perf", "--topic", topic, "--num-records", "200", "--record-size", "10",
        "--throughput", "-1", "--bootstrap-servers", tansu.bootstrap_servers,
    )
    assert result.returncode == 0, explain(result)
    warnings = [line for line in result.stderr.splitlines() if "plain-Python fallback" in line]
    if _expects_compiled():
        assert warnings == [], explain(result)
    else:
        # Logged before the run, with the fix in the message.
        assert len(warnings) == 1, explain(result)
        assert result.stderr.startswith(warnings[0]), explain(result)
        assert "install a wheel with the compiled core" in warnings[0]
    assert TOTAL_LINE.search(result.stdout) is not None, explain(result)


# ---- the statistics behind perf (offline) ------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_perf_stats_total_line_matches_kafkas_format() -> None:
    clock = FakeClock()
    stats = PerfStats(4, clock=clock)
    for latency in (1.0, 2.0, 3.0, 10.0):
        stats.record(latency, 1024 * 1024, clock.now)
    clock.now += 2.0
    assert stats.total_line() == (
        "4 records sent, 2.000000 records/sec (2.00 MB/sec), 4.00 ms avg latency, "
        "10.00 ms max latency, 3 ms 50th, 10 ms 95th, 10 ms 99th, 10 ms 99.9th."
    )


def test_perf_stats_speak_of_one_record_in_the_singular() -> None:
    clock = FakeClock()
    stats = PerfStats(1, clock=clock)
    stats.record(2.0, 100, clock.now)
    clock.now += 1.0
    assert stats.total_line().startswith("1 record sent, 1.000000 records/sec")
    assert stats.window_line().startswith("1 record sent, 1.0 records/sec")


def test_perf_stats_print_a_window_every_five_seconds() -> None:
    import io

    clock = FakeClock()
    out = io.StringIO()
    stats = PerfStats(10, out=out, clock=clock)
    stats.record(1.0, 100, clock.now)
    clock.now += 5.0
    stats.record(3.0, 100, clock.now)
    assert out.getvalue() == (
        "2 records sent, 0.4 records/sec (0.00 MB/sec), 2.0 ms avg latency, 3.0 ms max latency.\n"
    )
    stats.record(1.0, 100, clock.now)
    assert out.getvalue().count("\n") == 1  # a new window started


def test_perf_stats_sample_at_most_500000_latencies() -> None:
    stats = PerfStats(2_000_000)
    assert stats.sampling == 4
    stats.record_many(5.0, 1_000_001, 0, stats.start)
    assert len(stats.latencies) == 250_001
    stats.record_many(7.0, 3, 0, stats.start)  # iterations 1_000_001..1_000_003: none sampled
    assert len(stats.latencies) == 250_001
    stats.record(9.0, 0, stats.start)  # iteration 1_000_004
    assert len(stats.latencies) == 250_002


# ---- Java properties files (offline) ------------------------------------------------------------


def test_properties_files_are_read_as_java_reads_them() -> None:
    text = (
        "# comment\n"
        "   ! another comment\n"
        "\n"
        "plain=1\n"
        "  spaced   =   2  \n"
        "colon: 3\n"
        "space 4\n"
        "empty\n"
        "continued = first, \\\n"
        "            second, \\\n"
        "   third\n"
        "escaped\\=name\\:x = a\\tb\\nc\\\\d\n"
        "unicode = caf\\u00e9\n"
        "even.backslashes = ends with one \\\\\n"
        "plain = again\n"
    )
    assert _parse_properties(text) == [
        ("plain", "1", 4),
        ("spaced", "2  ", 5),
        ("colon", "3", 6),
        ("space", "4", 7),
        ("empty", "", 8),
        ("continued", "first, second, third", 9),
        ("escaped=name:x", "a\tb\nc\\d", 12),
        ("unicode", "café", 13),
        ("even.backslashes", "ends with one \\", 14),
        ("plain", "again", 15),
    ]


def test_a_malformed_unicode_escape_names_its_line_and_nothing_of_it() -> None:
    with pytest.raises(ValueError) as raised:
        _parse_properties("a=1\nb=\\u12x\n")
    assert str(raised.value) == "line 2: malformed \\uXXXX escape"
    # On a continuation line, the line named is that one, not the entry's first.
    with pytest.raises(ValueError) as raised:
        _parse_properties("a=1\nsasl.password=first\\\n  half\\\n  s3cr\\u3t\n")
    assert str(raised.value) == "line 4: malformed \\uXXXX escape"
    with pytest.raises(ValueError, match=r"^line 1: "):
        _parse_properties("bad\\u00=x")  # in the name


def test_properties_lines_end_where_java_ends_them() -> None:
    # \r, \n and \r\n end a line; a form feed or NEL inside a value does not.
    text = "a=1\x0c2\x853\rb=x\r\nc=y\\\r  z\n"
    assert _parse_properties(text) == [("a", "1\x0c2\x853", 1), ("b", "x", 2), ("c", "yz", 3)]


SECRET = "s3cr3t-Hunter2-pw"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A malformed escape on the line holding the password.
        (f"acks=all\nsasl.password={SECRET}\\u00zz\n", "line 2: malformed \\uXXXX escape"),
        # A value continued without its backslash: the password's line becomes a name.
        (
            f"sasl.username=alice \\\n    and-more\n    {SECRET}\n",
            "line 3: unknown producer config (its name is not shown, as the line may hold a "
            "secret; a value continued over lines needs a backslash at the end of each line "
            "but the last)",
        ),
        # Only the name, a config's word, is shown; the value never is.
        (
            f'client.id=app\n    password="{SECRET}";\n',
            "line 2: unknown producer config 'password'",
        ),
        (f"{SECRET}\n", "line 1: unknown producer config (its name is not shown"),
        (f"{SECRET.lower().replace('-', '')}\n", "line 1: unknown producer config (its name"),
    ],
)
def test_a_bad_line_in_a_producer_config_file_is_named_by_number_only(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o600)
    assert main(["produce", "--topic", "t", "--producer.config", str(config)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(
        f"aioproducer produce: error: --producer.config {config} {message}"
    ), captured.err
    assert captured.err.count("\n") == 1
    for part in (SECRET, SECRET.lower().replace("-", ""), "Hunter2"):
        assert part not in captured.err + captured.out


def test_a_bad_line_in_a_reader_config_file_is_named_by_number_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reader = tmp_path / "reader.properties"
    reader.write_text(f"parse.key=true\n{SECRET}\n", encoding="utf-8")
    assert main(["produce", "--topic", "t", "--reader-config", str(reader)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aioproducer produce: error: --reader-config {reader} line 2: ")
    assert SECRET not in err


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the files already warned about, as a new process would."""
    monkeypatch.setattr(cli_common, "_WARNED_PERMISSIONS", set())


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.skipif(os.name == "nt", reason="POSIX mode bits")
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_config_file_with_secrets_readable_by_others_is_warned_about_once(
    mode: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        f"sasl.username=alice\nsasl.password={SECRET}\nssl.key.password={SECRET}\n",
        encoding="utf-8",
    )
    config.chmod(mode)
    with caplog.at_level("WARNING", logger="aioproducer.cli"):
        for _ in range(2):
            cli_common._read_properties(str(config), "--producer.config")
    warnings = [r for r in caplog.records if r.name == "aioproducer.cli"]
    assert [r.getMessage() for r in warnings] == [
        f"--producer.config {config} holds secrets (sasl.password, ssl.key.password) and can be "
        f"read by other users (mode {mode:03o}); make it private: chmod 600 {config}"
    ]
    assert SECRET not in caplog.text


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.skipif(os.name == "nt", reason="POSIX mode bits")
@pytest.mark.parametrize(
    ("mode", "text"),
    [
        (0o600, f"sasl.password={SECRET}\n"),  # private
        (0o400, f"sasl.password={SECRET}\n"),
        (0o644, "acks=all\nlinger.ms=5\nkey.serializer=x\n"),  # nothing secret
    ],
)
def test_a_private_file_or_one_without_secrets_is_not_warned_about(
    mode: int, text: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(text, encoding="utf-8")
    config.chmod(mode)
    with caplog.at_level("WARNING", logger="aioproducer.cli"):
        cli_common._read_properties(str(config), "--producer.config")
    assert [r for r in caplog.records if r.name == "aioproducer.cli"] == []


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("sasl.password", True),
        ("sasl_plain_password", True),
        ("ssl.key.password", True),
        ("sasl.jaas.config", True),
        ("sasl.oauthbearer.token", True),
        ("client.secret", True),
        ("ssl.keystore.key", True),
        ("sasl_oauth_token_provider", True),
        ("kafka.sasl.apikey", True),
        ("SSL_KEY_PASSWORD", True),
        ("linger.ms", False),
        ("key.serializer", False),
        ("ssl.keyfile", False),
        ("ssl.keystore.location", False),
    ],
)
def test_names_that_look_like_secrets(name: str, secret: bool) -> None:
    assert names_a_secret(name) is secret


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.skipif(os.name == "nt", reason="POSIX mode bits")
def test_the_command_warns_on_stderr_about_a_readable_config_file(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"sasl.password={SECRET}\nlinger.mss=1\n", encoding="utf-8")
    config.chmod(0o644)
    result = aioproducer("produce", "--topic", "t", "--producer.config", str(config))
    assert result.returncode == 2, explain(result)
    assert (
        f"--producer.config {config} holds secrets (sasl.password) and can be read by other "
        f"users (mode 644); make it private: chmod 600 {config}\n" in result.stderr
    ), explain(result)
    assert SECRET not in result.stderr + result.stdout


# ---- the docs ------------------------------------------------------------------------------------


def test_docs_name_every_option() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    missing = sorted(
        {
            name
            for command in parser.commands.values()
            for action in command._actions
            for name in action.option_strings
            if name.startswith("--") and name != "--help" and f"`{name}" not in doc
        }
    )
    assert not missing, f"docs/cli.md does not document {missing}"


def test_output_piped_into_head_stops_quietly(tansu: Any) -> None:
    """`aioproducer perf ... | head -1`: once head exits, the command stops with 141 and
    no traceback, as Unix tools do."""
    command = (
        f"{sys.executable} -m aioproducer perf --bootstrap-server {tansu.bootstrap_servers} "
        # The window line at 5 s goes to head, which exits; the total line a second later
        # meets the closed pipe.
        "--topic piped --num-records 30000 --record-size 10 --throughput 5000 "
        '--print-metrics | head -1; echo "exit=${PIPESTATUS[0]}" >&2'
    )
    result = run(["bash", "-c", command])
    assert "Traceback" not in result.stderr, explain(result)
    assert "exit=141" in result.stderr, explain(result)
