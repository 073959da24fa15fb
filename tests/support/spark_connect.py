"""A Spark Connect server on this machine, and a client session of it.

The server is PySpark's own (the pip ``pyspark`` wheel ships its jars):
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``, the
``SparkConnectServer`` that ``sbin/start-connect-server.sh`` starts, here in the
foreground, in a process group of its own. It is a JVM apart from the tests' process, as a
Connect server is apart from its clients: the client (``SparkSession.builder.remote``) has
no JVM, and every plan runs on the server. The server's Python workers, which run the data
source, run this interpreter with the source tree on their ``PYTHONPATH``, as
:func:`tests.support.spark.local_spark`'s do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.passes import refuse_java

ROOT = Path(__file__).resolve().parents[2]

#: Hang guard only: the server starts in 10 to 20 s on a quiet machine.
_START_TIMEOUT_S = 180.0
_STOP_TIMEOUT_S = 30.0
_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Set by PySpark's builder in the process of a Connect client: it makes pyspark.sql's
# functions build Connect plans (pyspark.sql.utils.is_remote) for the whole process.
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@dataclass(frozen=True)
class ConnectServer:
    """A running Spark Connect server."""

    url: str
    """``sc://127.0.0.1:PORT``, for ``SparkSession.builder.remote``."""
    log: Path
    """The server's output (its driver's log), for a failing test to look at."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(log: Path, chars: int = 4000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError as exc:
        return f"(no log: {exc})"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (its JVM's shutdown hooks stop the Python
    workers), then SIGKILL to whatever is left of it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=_STOP_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def connect_server(
    workdir: Path, master: str = "local[2]", **configs: str
) -> Iterator[ConnectServer]:
    """Run a Spark Connect server with ``master`` and the Spark settings ``configs``
    (Spark's names) on a free loopback port, in ``workdir`` (its log, warehouse and
    metastore); stop it on exit.

    Raises:
        RuntimeError: the server exited, or did not listen within 3 minutes; the message
            has the end of its log.
    """
    refuse_java("the Spark Connect server")
    spark_home = _spark_home()
    submit = spark_home / "bin" / "spark-submit"
    if not submit.exists():
        raise RuntimeError(f"no spark-submit in the installed PySpark ({submit})")
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "spark-connect-server.log"
    port = _free_port()
    env = dict(os.environ)
    for name in ("SPARK_REMOTE", _CONNECT_MODE, "SPARK_LOCAL_REMOTE", "SPARK_CONF_DIR"):
        env.pop(name, None)
    env.update(
        SPARK_HOME=str(spark_home),
        # The Python workers (the data source's planning, tasks and commit) run this
        # interpreter, which has pyarrow and, from the source tree if not installed,
        # aioproducer.
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.warehouse.dir": str(workdir / "warehouse"),
        **configs,
    }
    command = [str(submit), "--class", _SERVER_CLASS, "--master", master]
    command += ["--name", "aioproducer-spark-connect", "--driver-memory", "1g"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not _listening(port):
            if process.poll() is not None:
                raise RuntimeError(
                    f"the Spark Connect server exited with {process.returncode} before it "
                    f"listened on port {port}; the end of {log}:\n{_tail(log)}"
                )
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"the Spark Connect server did not listen on port {port} within "
                    f"{_START_TIMEOUT_S:.0f} s; the end of {log}:\n{_tail(log)}"
                )
            time.sleep(0.5)
        yield ConnectServer(f"sc://127.0.0.1:{port}", log)
    finally:
        _stop(process)


@contextlib.contextmanager
def connect_session(server: ConnectServer) -> Iterator[Any]:
    """A Spark Connect client session of ``server``, stopped on exit (which releases it on
    the server, not the server itself).

    PySpark's builder leaves ``SPARK_CONNECT_MODE_ENABLED`` set in the environment, which
    turns ``pyspark.sql``'s functions to Connect for the whole process: it is restored on
    exit, so that later tests in the process build classic sessions again.
    """
    from pyspark.sql import SparkSession

    saved = os.environ.get(_CONNECT_MODE)
    session = None
    try:
        session = SparkSession.builder.remote(server.url).getOrCreate()
        yield session
    finally:
        if session is not None:
            session.stop()
        if saved is None:
            os.environ.pop(_CONNECT_MODE, None)
        else:
            os.environ[_CONNECT_MODE] = saved
