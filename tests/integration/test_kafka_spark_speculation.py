"""Speculative execution with the exactly-once Spark sink, on a Spark standalone cluster of
two workers (on 127.0.0.2 and 127.0.0.3: Spark speculates a task only onto another host)
and Apache Kafka.

A batch write of 4,000 rows in 4 partitions, ``spark.speculation`` on, partition 1 slow;
Spark starts a speculative copy of it on the other worker. Either the copy wins (the
first attempt sent its rows in its transaction, then stalls before preparing it) or the
original does (it prepared, then takes a while to finish; the copy sends its rows and
stalls). Each way the job succeeds; a consumer reading committed data gets every row once,
while one reading uncommitted data also sees what the losing attempt sent; no transaction
of the write is left open (the loser's was aborted by the driver's sweep). Each attempt
has its own transactional id, so the copy fences nobody: when the original wins, a copy
that fenced it would make the driver's commit fail.

Records are read back with confluent-kafka's consumer (tests.support.readback).
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from aioproducer import list_transactions
from tests.support.kafka import KafkaBroker
from tests.support.readback import read_back
from tests.support.spark import ONCE_PER_CI_RUN
from tests.support.spark_speculation_job import ROWS, SLOW_PARTITION, STALL_S
from tests.support.spark_standalone import standalone_cluster

pytestmark = pytest.mark.kafka

pytest.importorskip("pyspark")

NewTopic = Callable[..., str]
ROOT = Path(__file__).resolve().parents[2]

# Hang guard only (longer than the stall, so that a job that waited for the stalled
# attempt fails on the assertion that says so): the cluster starts in about 20 s and the
# job takes well under a minute.
_JOB_HANG_S = 600.0


@ONCE_PER_CI_RUN
@pytest.mark.parametrize("winner", ["copy", "original"])
def test_speculation_commits_the_attempt_spark_keeps_and_aborts_the_other(
    kafka: KafkaBroker, new_topic: NewTopic, tmp_path: Path, winner: str
) -> None:
    topic = new_topic(kafka, partitions=3)
    prefix = f"speculated-{uuid.uuid4().hex[:8]}"
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    log = tmp_path / "job.log"
    with standalone_cluster(tmp_path / "cluster") as master:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        started = time.monotonic()
        with log.open("ab") as out:
            job = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.spark_speculation_job",
                    master,
                    kafka.bootstrap_servers,
                    topic,
                    prefix,
                    str(attempts),
                    winner,
                ],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            code = job.wait(_JOB_HANG_S)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        elapsed = time.monotonic() - started
    assert code == 0, log.read_text(errors="replace")[-4000:]
    # The copy ran (attempt 1 of the slow partition; no attempt failed), and the job did
    # not wait for the stalled attempt.
    ran = {p.name for p in attempts.iterdir()}
    assert f"{SLOW_PARTITION}-1" in ran, sorted(ran)
    assert elapsed < STALL_S, f"the job waited for the stalled attempt ({elapsed:.0f} s)"

    records = read_back(
        kafka.bootstrap_servers,
        topic,
        expected=ROWS,
        isolation_level="read_committed",
        extra_wait=1.0,
        timeout=120.0,
    )
    committed = collections.Counter(int(r.value) for r in records if r.value is not None)
    assert committed == collections.Counter(range(ROWS))
    # The losing attempt had begun its transaction: its records are in the log, aborted.
    everything = read_back(kafka.bootstrap_servers, topic, expected=ROWS + 1, timeout=15.0)
    assert len(everything) > ROWS
    left_open = asyncio.run(
        list_transactions(
            states=["Ongoing"],
            transactional_id_prefix=prefix,
            bootstrap_servers=kafka.bootstrap_servers,
        )
    )
    assert left_open == []
