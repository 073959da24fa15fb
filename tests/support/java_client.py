"""Kafka's own Java client as an oracle: which partition the Java producer picks for a
key, and what the Java consumer reads from a topic.

Both run ``tests/support/java/KafkaReference.java`` with the ``kafka-clients`` jar the
broker fixture uses (:func:`tests.support.kafka.kafka_libs`: the broker's version)::

    partitions = java_partitions(kafka.bootstrap_servers, topic, [b"a", b"b"])
    records = java_consume(kafka.bootstrap_servers, topic, expected=2, read_committed=True)

The source is compiled once with ``javac`` into ``~/.cache/aioproducer/java-reference``,
under a name made from the source, the JVM and the jars, so an edit compiles it again;
without ``javac`` it runs through Java's source launcher (a few tenths of a second more a call).
Each call starts a JVM: about a second. Without Java 17+ the calls skip the test, as the
``kafka`` fixture does (and CI turns that skip into a failure).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kafka import _cache_root, _java, _java_version, kafka_available, kafka_libs
from tests.support.passes import refuse_java

__all__ = ["SOURCE", "JavaClientError", "JavaRecord", "java_consume", "java_partitions"]

#: The Java program.
SOURCE = Path(__file__).resolve().with_name("java") / "KafkaReference.java"
_MAIN_CLASS = "KafkaReference"

#: A short-lived client: a small heap, start-up over throughput.
_JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
)
# Only turns a hung JVM into an error; a call takes about a second.
_HANG_GUARD = 120.0


class JavaClientError(RuntimeError):
    """The Java client failed: its exit code and stderr are in the message."""


@dataclass(frozen=True)
class JavaRecord:
    """One record as Kafka's Java consumer read it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    """Milliseconds since the epoch."""
    timestamp_type: str
    """``"CreateTime"``, ``"LogAppendTime"`` or ``"NoTimestampType"`` (Java's names)."""
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    """In wire order; duplicates kept. An empty list when the record had none."""


def java_partitions(bootstrap: str, topic: str, keys: Sequence[bytes]) -> list[int]:
    """Produce each key (as key and value) with the Java ``KafkaProducer``, default
    partitioner and ``acks=all``; return the partition each record's metadata names, in
    the order of ``keys``.

    Raises:
        JavaClientError: the producer failed, or printed something else than a partition
            per key.
    """
    stdin = "".join(f"{key.hex()}\n" for key in keys)
    output = _run(["partition", bootstrap, topic], stdin=stdin)
    lines = output.splitlines()
    if len(lines) != len(keys) or not all(line.isdigit() for line in lines):
        raise JavaClientError(
            f"expected {len(keys)} partitions from the Java producer, got:\n{output[-2000:]}"
        )
    return [int(line) for line in lines]


def java_consume(
    bootstrap: str,
    topic: str,
    expected: int,
    *,
    read_committed: bool = False,
    timeout: float = 30.0,
) -> list[JavaRecord]:
    """Read every partition of ``topic`` from the beginning with the Java
    ``KafkaConsumer`` (``assign()``, ``check.crcs=true``) until ``expected`` records have
    arrived and the consumer reached the end offsets as they were then (so records beyond
    the expected ones are returned too), or until ``timeout`` seconds have passed.

    Returns:
        The records sorted by (partition, offset). Fewer than ``expected`` means the
        timeout ran out; the caller's assertion then shows what did arrive.

    Raises:
        JavaClientError: the consumer failed (a corrupt batch, an unknown topic, ...).
    """
    isolation = "read_committed" if read_committed else "read_uncommitted"
    output = _run(["consume", bootstrap, topic, str(expected), isolation, str(timeout)])
    records = [_record(line) for line in output.splitlines() if line]
    records.sort(key=lambda record: (record.partition, record.offset))
    return records


def _record(line: str) -> JavaRecord:
    fields = json.loads(line)
    return JavaRecord(
        topic=fields["topic"],
        partition=fields["partition"],
        offset=fields["offset"],
        timestamp=fields["timestamp"],
        timestamp_type=fields["timestampType"],
        key=_bytes(fields["key"]),
        value=_bytes(fields["value"]),
        headers=[
            (bytes.fromhex(name).decode(), _bytes(value)) for name, value in fields["headers"]
        ],
    )


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


# -- running the program ---------------------------------------------------------------


def _run(arguments: list[str], stdin: str = "") -> str:
    """Run the program with ``arguments``; its stdout, or JavaClientError."""
    command = [*_launcher(), *arguments]
    try:
        result = subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=_HANG_GUARD,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise JavaClientError(
            f"the Java client did not finish within {_HANG_GUARD:.0f} s: {' '.join(command)}"
        ) from exc
    if result.returncode != 0:
        raise JavaClientError(
            f"the Java client failed (exit code {result.returncode}): {' '.join(command)}\n"
            f"{result.stderr.strip()[-4000:]}"
        )
    return result.stdout


def _launcher() -> list[str]:
    """``java <options> -cp <jars>[:<classes>] <main class or source>``; skips the test
    when Java 17+ (or the jars) cannot be had."""
    refuse_java("Kafka's Java client")
    reason = kafka_available()
    java = _java()
    if reason is not None or java is None:
        pytest.skip(reason or "no `java` on PATH or in JAVA_HOME")
    libs = kafka_libs()
    if not any(libs.glob("kafka-clients-*.jar")):
        raise JavaClientError(f"{libs} holds no kafka-clients jar")
    jars = str(libs / "*")
    classes = _compiled(java, libs)
    if classes is None:  # no javac: the source launcher compiles it on every run
        return [java, *_JVM_OPTIONS, "-cp", jars, str(SOURCE)]
    return [java, *_JVM_OPTIONS, "-cp", os.pathsep.join([jars, str(classes)]), _MAIN_CLASS]


def _compiled(java: str, libs: Path) -> Path | None:
    """The folder holding the compiled program, compiling it on first use; None when
    there is no ``javac`` beside ``java`` or on PATH."""
    real_java = Path(os.path.realpath(java))
    javac_path = real_java.with_name("javac")
    javac = str(javac_path) if javac_path.is_file() else shutil.which("javac")
    if javac is None:
        return None
    source = SOURCE.read_bytes()
    _major, version_text = _java_version(java)
    jars = sorted(path.name for path in libs.glob("*.jar"))
    key = b"\n".join(
        [source, str(real_java).encode(), version_text.encode(), *map(str.encode, jars)]
    )
    target = _cache_root() / "java-reference" / hashlib.sha256(key).hexdigest()[:16]
    if (target / f"{_MAIN_CLASS}.class").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compiled into a staging folder renamed into place: a concurrent or interrupted
    # compilation never leaves a half-written folder behind.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        result = subprocess.run(
            [javac, "-nowarn", "-cp", str(libs / "*"), "-d", str(staging), str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=_HANG_GUARD,
            check=False,
        )
        if result.returncode != 0:
            raise JavaClientError(
                f"javac failed on {SOURCE} (exit code {result.returncode}):\n"
                f"{(result.stdout + result.stderr).strip()[-4000:]}"
            )
        staging.chmod(0o755)  # mkdtemp made it private
        with contextlib.suppress(OSError):  # another run put it there first: keep that
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
