"""Kafka's Java client, ``KafkaProducer.send(record, callback)`` per record, then ``flush()``;
acknowledgements are counted in the callback.

The producer itself is ``bench/java/ProducerRunner.java``. This module compiles it once with
``javac`` against the ``kafka-clients`` jar of the test suite's Kafka jars
(:func:`tests.support.kafka.kafka_libs`: ``~/.cache/aioproducer/kafka-<version>``, fetched
with Maven on first use) into ``~/.cache/aioproducer/bench-java/<hash>``, the hash taken over
the source, the JVM and the jars, so an edit compiles again. Then it writes the run's payload
pool (:class:`~bench.runners._common.RunData`, the very values the Python runners send) to a
file and replaces its own process with the JVM (``os.execv``): the process the harness
started, and whose CPU the result reports, is the JVM alone.

``AIOPRODUCER_BENCH_JAVA_OPTS`` adds JVM options (``-Xmx1g -XX:+UseParallelGC``, say); by
default the JVM runs with its own defaults, as an application would.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.runners._common import RunData, RunSpec, runner_main

CLIENT = "java_send"
ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "bench" / "java" / "ProducerRunner.java"
MAIN_CLASS = "ProducerRunner"
#: Extra JVM options, split like a shell would.
OPTIONS_ENV = "AIOPRODUCER_BENCH_JAVA_OPTS"
#: The jars the producer needs from the Kafka jars folder: the client, its codecs, and
#: SLF4J's API (with no binding it logs nothing; the broker's log4j stays off the path).
_JARS = ("kafka-clients-", "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-")
_COMPILE_TIMEOUT = 300.0


def _kafka_support() -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tests.support.kafka as support

    return support


def unavailable() -> str | None:
    """Why the Java runner cannot run here (no Java 17+, no jars and no Maven), or None."""
    try:
        support = _kafka_support()
    except ImportError as exc:
        return f"the test suite's Kafka support does not import: {exc}"
    reason: str | None = support.kafka_available()
    return reason


def prepare() -> str | None:
    """Fetch the jars and compile the program now (the harness does, before any run is
    timed out); None when ready, else why the Java runner cannot run here."""
    reason = unavailable()
    if reason is not None:
        return reason
    support = _kafka_support()
    try:
        jars = classpath(support.kafka_libs())
        compiled(support._java(), jars)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None


def classpath(libs: Path) -> list[Path]:
    """The client's jars in ``libs``.

    Raises:
        RuntimeError: ``libs`` holds no kafka-clients jar.
    """
    jars = [jar for prefix in _JARS for jar in sorted(libs.glob(f"{prefix}*.jar"))]
    if not any(jar.name.startswith("kafka-clients-") for jar in jars):
        raise RuntimeError(f"{libs} holds no kafka-clients jar")
    return jars


def compiled(java: str, jars: list[Path]) -> Path | None:
    """The folder holding ``ProducerRunner.class``, compiled on first use; None when there
    is no ``javac`` (the source launcher then compiles it at every start).

    Raises:
        RuntimeError: javac failed (its output is in the message).
    """
    real_java = Path(os.path.realpath(java))
    beside = real_java.with_name("javac")
    javac = str(beside) if beside.is_file() else shutil.which("javac")
    if javac is None:
        return None
    support = _kafka_support()
    _major, version_text = support._java_version(java)
    key = b"\n".join(
        [SOURCE.read_bytes(), str(real_java).encode(), version_text.encode(),
         *(jar.name.encode() for jar in jars)]
    )
    target: Path = support._cache_root() / "bench-java" / hashlib.sha256(key).hexdigest()[:16]
    if (target / f"{MAIN_CLASS}.class").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compiled into a staging folder renamed into place: a concurrent or interrupted
    # compilation never leaves a half-written folder behind.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        result = subprocess.run(
            [javac, "-nowarn", "-cp", os.pathsep.join(map(str, jars)), "-d", str(staging),
             str(SOURCE)],
            capture_output=True, text=True, timeout=_COMPILE_TIMEOUT, check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"javac failed on {SOURCE} (exit code {result.returncode}):\n"
                f"{(result.stdout + result.stderr).strip()[-4000:]}"
            )
        staging.chmod(0o755)  # mkdtemp made it private
        with contextlib.suppress(OSError):  # another run put it there first: keep that
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def command(spec: RunSpec, payloads: Path) -> list[str]:
    """``java <options> -cp <jars>[:<classes>] ProducerRunner key=value ...``.

    Raises:
        RuntimeError: Java or the jars cannot be had, or the compilation failed.
    """
    reason = unavailable()
    support = _kafka_support()
    java = support._java()
    if reason is not None or java is None:
        raise RuntimeError(reason or "no `java` on PATH or in JAVA_HOME")
    jars = classpath(support.kafka_libs())
    classes = compiled(java, jars)
    options = shlex.split(os.environ.get(OPTIONS_ENV, ""))
    arguments = [f"{name}={value}" for name, value in asdict(spec).items()]
    arguments.append(f"payloads={payloads}")
    path = os.pathsep.join(map(str, jars))
    if classes is None:
        return [java, *options, "-cp", path, str(SOURCE), *arguments]
    return [java, *options, "-cp", os.pathsep.join([path, str(classes)]), MAIN_CLASS,
            *arguments]


def write_payloads(data: RunData) -> Path:
    """The payload pool as the Java program reads it: int32 count, int32 size, the values.
    The program deletes the file once read."""
    size = len(data.values[0])
    handle, name = tempfile.mkstemp(prefix="bench-java-payloads-")
    with os.fdopen(handle, "wb") as out:
        out.write(struct.pack(">ii", len(data.values), size))
        for value in data.values:
            out.write(value)
    return Path(name)


def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    payloads = write_payloads(data)
    try:
        argv = command(spec, payloads)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(argv[0], argv)
    finally:  # only reached when the JVM did not take over the process
        payloads.unlink(missing_ok=True)
    raise AssertionError("unreachable")  # pragma: no cover


def main() -> None:
    """Entry point: ``python -m bench.runners.java_send --spec JSON``."""
    runner_main(CLIENT, _run)


if __name__ == "__main__":
    main()
