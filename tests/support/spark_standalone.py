"""A Spark standalone cluster on this machine: a master and workers, each worker on a
loopback address of its own (127.0.0.2, 127.0.0.3, ...), so that Spark takes them for
different hosts.

Spark launches a speculative copy of a task only on another host than the attempts
already running (``TaskSetManager.hasAttemptOnHost``): in ``local`` and ``local-cluster``
mode every executor is on one host, and no task is ever speculated. Workers on distinct
addresses make speculation happen on one machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

# Hang guard only: a master or worker JVM starts in a few seconds.
_START_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(_spark_home() / "bin" / "spark-class"), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for(log: Path, text: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not start:\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def standalone_cluster(workdir: Path, workers: int = 2, memory: str = "1g") -> Iterator[str]:
    """Run a master and ``workers`` workers of one core each; yields the master's URL."""
    env = dict(os.environ, SPARK_HOME=str(_spark_home()), SPARK_NO_DAEMONIZE="1")
    env.pop("SPARK_LOCAL_IP", None)
    workdir.mkdir(parents=True, exist_ok=True)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        port = _free_port()
        master_log = workdir / "master.log"
        master = _start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(_free_port()),
            ],
            master_log,
            env,
        )
        processes.append(master)
        _wait_for(master_log, "I have been elected leader", master, "the Spark master")
        url = f"spark://127.0.0.1:{port}"
        for number in range(workers):
            host = f"127.0.0.{number + 2}"
            log = workdir / f"worker-{number}.log"
            worker_env = dict(env, SPARK_LOCAL_IP=host)
            worker = _start(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    host,
                    "--webui-port",
                    str(_free_port()),
                    "--cores",
                    "1",
                    "--memory",
                    memory,
                    "--work-dir",
                    str(workdir / f"work-{number}"),
                    url,
                ],
                log,
                worker_env,
            )
            processes.append(worker)
            _wait_for(log, "Successfully registered with master", worker, f"Spark worker {host}")
        yield url
    finally:
        for process in reversed(processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
