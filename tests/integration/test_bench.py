"""The benchmark tools of ``bench/`` still measure the code they were written for.

A micro-benchmark whose target moved or changed signature reports ``skipped`` instead of
failing, so nothing else would notice it rot. These run every suite and the harness's
smoke run as a user does, and check what they report: every case measured, and every
client's records acknowledged and counted on the broker. They never look at a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.passes import compiled_pass_only

ROOT = Path(__file__).resolve().parents[2]
# The benchmarks measure what users run: the compiled build.
_COMPILED_PASS_ONLY = compiled_pass_only("a benchmark's smoke run, minutes long")


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )


@_COMPILED_PASS_ONLY
def test_every_micro_benchmark_measures_its_hot_function() -> None:
    done = _run(["-m", "bench.micro", "--json", "--smoke"], timeout=600)
    assert done.returncode == 0, done.stderr
    suites: dict[str, list[dict[str, Any]]] = json.loads(done.stdout)
    titles = " ".join(suites)
    modules = ("record_batch.py", "partitioner.py", "buffer_pool.py", "producer.py", "metrics.py")
    for module in modules:
        assert module in titles
    for title, results in suites.items():
        assert results, title
        for result in results:
            assert "skipped" not in result["note"], (title, result)
            assert result["ns_per_op"] is not None and result["ns_per_op"] > 0, (title, result)


def test_the_idioms_benchmark_counts_every_record_on_the_broker(tmp_path: Path) -> None:
    """bench.idioms: each way of waiting runs, sees every record acknowledged, and the
    instant broker's own count of the records it acknowledged agrees."""
    from bench.idioms import IDIOMS, WARMUP

    out = tmp_path / "idioms.json"
    done = _run(
        ["-m", "bench.idioms", "--broker", "instant", "--records", "3000", "--rounds", "1",
         "--sequential-records", "20", "--chunk", "1000", "--out", str(out)],
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert sorted(row["idiom"] for row in rows) == sorted(IDIOMS)
    for row in rows:
        records = 20 if row["idiom"] == "sequential" else 3000
        assert row["ok"] and row["failed"] == 0, row
        assert row["acked"] == row["records"] == records, row
        assert row["records_on_broker"] == records + WARMUP, row
        assert row["cpu_us_per_record"] > 0, row
    assert "| `gather` |" in done.stdout


def test_harness_smoke_run_counts_every_record_on_the_broker(tmp_path: Path) -> None:
    out = tmp_path / "quick.json"
    clients = (
        "aioproducer_send,aioproducer_send_many,aioproducer_produce,confluent_producer,aiokafka_send"
    )
    done = _run(
        ["-m", "bench.harness", "--quick", "--clients", clients, "--out", str(out)],
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    document = json.loads(out.read_text())
    runs = [run for run in document["runs"] if not run.get("label", "").startswith("pilot")]
    seen = {run["client"] for run in runs}
    assert seen == set(clients.split(","))
    for run in runs:
        assert run["ok"], run
        assert run["errors"] == 0 and not run.get("fatal"), run
        assert run["acked"] >= run["records"] > 0, run
        if run["scenario"].startswith("latency"):
            assert run["latency_ms"]["p99"] > 0, run
        else:
            # The broker holds the timed records and the warm-up, counted by a consumer.
            assert run["records_on_broker"] >= run["records"], run
    medians = document["summary"]["medians"]["mock"]
    assert {"plain-100", "latency20k-100"} <= set(medians)


def test_harness_against_the_instant_broker_reports_cpu_per_record(tmp_path: Path) -> None:
    from bench.runners.java_send import unavailable

    out = tmp_path / "instant.json"
    clients = ["aioproducer_send", "confluent_producer", "aiokafka_send", "kafka_python"]
    if unavailable() is None:  # the Java producer too, where Java 17+ runs
        clients.append("java_send")
    done = _run(
        ["-m", "bench.harness", "--quick", "--broker", "instant", "--clients", ",".join(clients),
         "--out", str(out)],
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "the instant broker stores no records" in done.stdout
    assert "Records per CPU-second, instant broker" in done.stdout
    document = json.loads(out.read_text())
    runs = [run for run in document["runs"] if not run.get("label", "").startswith("pilot")]
    assert {run["client"] for run in runs} == set(clients)
    for run in runs:
        assert run["ok"] and run["errors"] == 0, run
        assert run["acked"] == run["records"] > 0, run
        # No broker-side count: the broker keeps nothing, and the row says so.
        assert run["records_on_broker"] is None and run["broker_count"].startswith("skipped")
        assert run["cpu_us_per_record"] == run["cpu_s"] / run["records"] * 1e6 > 0, run
        if run["scenario"].startswith("latency"):
            assert run["latency_ms"]["p99"] > 0, run
    cells = document["summary"]["medians"]["instant"]["plain-100"]
    assert all(cells[client]["records_per_cpu_s"] > 0 for client in clients)


async def test_the_instant_broker_gives_each_partition_contiguous_offsets() -> None:
    """Offsets grow by each batch's records, per partition, across requests and topics."""
    from aioproducer import Producer
    from bench.instant_broker import listen

    server, address = await listen("127.0.0.1", 0, 2)
    try:
        async with Producer(bootstrap_servers=address, linger_ms=1, batch_size=1024) as producer:
            offsets: dict[tuple[str, int], list[int]] = {}
            for topic in ("a", "b"):
                futures = [
                    await producer.send(topic, b"x" * 100, partition=i % 2) for i in range(300)
                ]
                for future in futures:
                    metadata = await future
                    offsets.setdefault((topic, metadata.partition), []).append(metadata.offset)
        assert sorted(offsets) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
        for found in offsets.values():
            assert found == list(range(150))
    finally:
        server.close()
        await server.wait_closed()


@_COMPILED_PASS_ONLY
@pytest.mark.parametrize("flags", [["--keyed"], ["--keyed", "--lists"], []])
def test_the_spark_rows_benchmark_sees_every_row_acknowledged(flags: list[str]) -> None:
    """bench.spark_rows: Arrow batches (keyed or not) through the sink's functions to the
    instant broker, as their buffers and as lists; it fails unless the broker acknowledged
    every row."""
    pytest.importorskip("pyarrow")
    result = _run(
        ["-m", "bench.spark_rows", "--rows", "25000", "--rounds", "2", "--no-save", *flags],
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    key = "keyed" if flags else "no key"
    assert f"25,000 rows of 100 B, {key}" in result.stdout, result.stdout


@pytest.mark.spark
@_COMPILED_PASS_ONLY
def test_the_spark_sink_yardstick_writes_and_counts_every_row() -> None:
    """bench.spark_sink: the DataFrame goes through format("aioproducer") and the
    mapInArrow + confluent-kafka loop, each write counted on the broker (Spark's own sink is
    left out here: its jars come from Maven)."""
    pytest.importorskip("pyspark")
    result = _run(
        ["-m", "bench.spark_sink", "--broker", "tansu", "--rows", "3000", "--rounds", "1",
         "--partitions", "2", "--writers", "aioproducer,arrow_confluent", "--no-save"],
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "FAILED" not in result.stdout, result.stdout[-3000:]
    table = result.stdout[result.stdout.index("| writer |") :]
    assert "| aioproducer |" in table and "| arrow_confluent |" in table, table
