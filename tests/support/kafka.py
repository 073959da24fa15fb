"""A real Apache Kafka broker for the tests: the reference for how a broker behaves.

:class:`KafkaBroker` runs one KRaft node (broker and controller in one JVM) on free
loopback ports, from the Kafka jars that :func:`kafka_libs` fetches with Maven::

    from tests.support.kafka import KafkaBroker

    with KafkaBroker() as kafka:
        kafka.create_topic("events", partitions=3, max_message_bytes=65536)
        print(kafka.bootstrap_servers)   # "127.0.0.1:<port>"

Requirements: Java 17 or later, and Maven the first time (to fetch the jars).
:func:`kafka_available` says what is missing.

The jars
    ``tests/support/kafka/pom.xml`` lists them; :func:`kafka_libs` copies them with
    ``mvn dependency:copy-dependencies`` into ``~/.cache/aioproducer/kafka-<version>``
    (``$XDG_CACHE_HOME`` is honoured), or into ``$AIOPRODUCER_KAFKA_LIBS`` when set, and
    reuses them on later runs. A folder already holding Kafka's jars (a Kafka
    distribution's ``libs``, say) is used as is.

Start-up
    Each broker formats fresh storage (``kafka.tools.StorageTool format --standalone``)
    in a temporary folder, then runs ``kafka.Kafka`` with a small heap and JVM flags for
    a fast start. The first broker started with a given JVM and jars also writes the
    classes it loaded to a class-data-sharing archive (``~/.cache/aioproducer/jvm``),
    which later brokers map instead of loading those classes again: about 1.3 s from
    format to a broker answering instead of 2 s. ``AIOPRODUCER_KAFKA_CDS=0`` turns
    that off.

Layout
    A node is a :class:`NodeLayout`: an id, its roles, its :class:`Listener` objects
    and a log folder, from which :meth:`NodeLayout.properties` writes the node's part of
    ``server.properties``; :func:`cluster_properties` holds the settings every node of a
    cluster shares. More listeners (TLS, SASL) are more ``Listener`` entries, and a
    cluster is more ``NodeLayout`` objects sharing one quorum.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = [
    "CDS_ENV",
    "LIBS_ENV",
    "POM",
    "KafkaBroker",
    "KafkaBrokerError",
    "KafkaUnavailableError",
    "Listener",
    "NodeLayout",
    "cluster_properties",
    "kafka_available",
    "kafka_libs",
    "kafka_version",
]

#: The Maven project listing the broker's jars.
POM = Path(__file__).resolve().with_name("kafka") / "pom.xml"
#: Environment variable naming the folder the jars are fetched into (or already sit in).
LIBS_ENV = "AIOPRODUCER_KAFKA_LIBS"
#: Environment variable turning class-data sharing off when ``0``.
CDS_ENV = "AIOPRODUCER_KAFKA_CDS"

#: Kafka 4 brokers need Java 17.
MIN_JAVA = 17
#: Every listener binds and advertises this address: the broker never leaves the machine.
HOST = "127.0.0.1"

#: The broker's JVM: a small heap, and start-up over throughput (a test broker moves
#: little data): the serial collector, and the C1 compiler only.
BROKER_JVM_OPTIONS = (
    "-Xmx512m",
    "-Xms256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)
#: The storage formatter's JVM: a short-lived command.
TOOL_JVM_OPTIONS = (
    "-Xmx128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)

# Written once the jars are complete: the digest of the pom they came from.
_STAMP = ".aioproducer-pom-sha256"
_MAVEN_TIMEOUT = 900.0
# How many times to pick fresh ports when one was taken between picking and binding.
_PORT_ATTEMPTS = 3
_BIND_FAILURE = re.compile(r"BindException|Address already in use")

_LOG4J2_PROPERTIES = """\
# Everything goes to stdout, which the fixture appends to the node's log file.
status = error
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
# Per-request and state-change chatter that says nothing a test needs.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaUnavailableError(RuntimeError):
    """Kafka cannot run here: Java or Maven is missing, or the jars cannot be fetched."""


class KafkaBrokerError(RuntimeError):
    """The broker failed to start, or to do what a test asked of it."""


# -- the jars --------------------------------------------------------------------------


def kafka_version() -> str:
    """The Kafka version ``pom.xml`` names (its ``kafka.version`` property)."""
    return _pom_version()


@functools.cache
def _pom_version() -> str:
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ElementTree.parse(POM).getroot().find("m:properties/m:kafka.version", namespace)
    if node is None or not (node.text or "").strip():
        raise KafkaUnavailableError(f"{POM} has no kafka.version property")
    return (node.text or "").strip()


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "aioproducer"


def _libs_dir() -> Path:
    override = os.environ.get(LIBS_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return _cache_root() / f"kafka-{kafka_version()}"


def _has_kafka_jars(folder: Path) -> bool:
    return any(folder.glob("kafka_2.1*.jar"))


def _libs_ready(folder: Path) -> bool:
    """Whether ``folder`` holds the jars: fetched from this very pom, or put there by hand
    (no stamp, but Kafka's jars)."""
    stamp = folder / _STAMP
    if stamp.is_file():
        return stamp.read_text().strip() == _pom_digest()
    return _has_kafka_jars(folder)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (two test runs fetching at once)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, the staging folder still keeps it safe
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def kafka_libs() -> Path:
    """The folder holding the broker's jars, fetched with Maven on first use.

    The jars go to ``$AIOPRODUCER_KAFKA_LIBS`` or ``~/.cache/aioproducer/kafka-<version>``:
    into a staging folder first, renamed into place once complete, under a lock, so an
    interrupted or concurrent fetch never leaves a half-filled folder behind. A change
    to ``pom.xml`` fetches again.

    Raises:
        KafkaUnavailableError: Maven is missing or failed (its output is in the message),
            or the folder exists with other files in it.
    """
    target = _libs_dir()
    if _libs_ready(target):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailableError(
            f"Maven (`mvn`) is needed to fetch the Kafka {kafka_version()} jars into {target} "
            f"(or set {LIBS_ENV} to a folder holding them)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _libs_ready(target):  # another process fetched them while we waited
            return target
        if target.exists() and not (target / _STAMP).is_file() and any(target.iterdir()):
            raise KafkaUnavailableError(
                f"{target} holds files but no Kafka jars: empty it or point {LIBS_ENV} elsewhere"
            )
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _maven_copy_dependencies(mvn, staging)
            (staging / _STAMP).write_text(_pom_digest() + "\n")
            if target.exists():
                # Ours (stamped by an older pom) or empty: safe to replace.
                shutil.rmtree(target)
            staging.chmod(0o755)  # mkdtemp made it private
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _maven_copy_dependencies(mvn: str, output: Path) -> None:
    command = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={output}",
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaUnavailableError(
            f"Maven did not fetch the Kafka jars within {_MAVEN_TIMEOUT:.0f} s"
        ) from exc
    if result.returncode != 0 or not _has_kafka_jars(output):
        output_tail = (result.stdout + result.stderr).strip()[-3000:]
        raise KafkaUnavailableError(
            f"Maven could not fetch the Kafka {kafka_version()} jars "
            f"(exit code {result.returncode}): {' '.join(command)}\n{output_tail}"
        )


# -- Java ------------------------------------------------------------------------------


def _java() -> str | None:
    """The ``java`` launcher: ``$JAVA_HOME/bin/java`` if there is one, else from PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / ("java.exe" if os.name == "nt" else "java")
        if candidate.is_file():
            return str(candidate)
    return shutil.which("java")


@functools.cache
def _java_version(java: str) -> tuple[int, str]:
    """(major version, the ``java -version`` text); major 0 when it cannot be told."""
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, str(exc)
    text = (result.stderr or result.stdout).strip()
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match is None:
        return 0, text
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    return major, text


def kafka_available() -> str | None:
    """Why a Kafka broker cannot run here, or None when it can.

    Checks for Java 17+ and, unless the jars are already there, for Maven. It does not
    fetch anything (:func:`kafka_libs` does), so a network failure shows up later.
    """
    java = _java()
    if java is None:
        return (
            f"Java {MIN_JAVA}+ is needed to run the Kafka broker: no `java` on PATH or in JAVA_HOME"
        )
    major, text = _java_version(java)
    if major < MIN_JAVA:
        first_line = text.splitlines()[0] if text else "no version output"
        return f"Java {MIN_JAVA}+ is needed to run the Kafka broker; {java} is: {first_line}"
    if not _libs_ready(_libs_dir()) and shutil.which("mvn") is None:
        return (
            f"Maven (`mvn`) is needed to fetch the Kafka {kafka_version()} jars "
            f"(or set {LIBS_ENV} to a folder holding them)"
        )
    return None


def _class_archive(java: str, libs: Path) -> Path | None:
    """Where the class-data-sharing archive for this JVM and these jars lives, or None
    when sharing is off. A new JVM or new jars give a new name, so a stale archive is
    never used (and the JVM would ignore a mismatched one anyway)."""
    if os.environ.get(CDS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    _major, version_text = _java_version(java)
    jars = sorted(path.name for path in libs.glob("*.jar"))
    key = "\n".join(
        [os.path.realpath(java), version_text, str(libs), str(libs.stat().st_mtime_ns), *jars]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    archive = _cache_root() / "jvm" / f"kafka-{kafka_version()}-{digest}.jsa"
    if archive.is_file() or _can_write_class_archive(java):
        return archive
    return None


@functools.cache
def _can_write_class_archive(java: str) -> bool:
    """Whether this JVM can write a dynamic class archive: it refuses to start with
    ``-XX:ArchiveClassesAtExit`` when its own base archive is missing."""
    with tempfile.TemporaryDirectory(prefix="aioproducer-cds-") as folder:
        try:
            result = subprocess.run(
                [java, f"-XX:ArchiveClassesAtExit={Path(folder) / 'probe.jsa'}", "-version"],
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return result.returncode == 0


# -- server.properties -----------------------------------------------------------------


@dataclass(frozen=True)
class Listener:
    """One listener of a node: ``name://host:port`` speaking ``security_protocol``."""

    name: str
    port: int
    security_protocol: str = "PLAINTEXT"
    host: str = HOST

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    @property
    def endpoint(self) -> str:
        """``NAME://host:port``, as ``listeners`` spells it."""
        return f"{self.name}://{self.address}"


@dataclass(frozen=True)
class NodeLayout:
    """One KRaft node: its id, roles, listeners and log folder.

    ``properties()`` gives the node's own settings; the settings a cluster shares come
    from :func:`cluster_properties`. The controller listener serves the quorum; the
    others serve clients (and, for ``inter_broker_listener``, the other brokers).
    """

    node_id: int
    roles: tuple[str, ...]
    listeners: tuple[Listener, ...]
    log_dir: Path
    controller_listener: str = "CONTROLLER"
    inter_broker_listener: str = "PLAINTEXT"

    def listener(self, name: str) -> Listener:
        """The listener called ``name``."""
        for listener in self.listeners:
            if listener.name == name:
                return listener
        raise KeyError(f"node {self.node_id} has no {name} listener")

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    def properties(self, quorum: Sequence[Listener]) -> dict[str, str]:
        """This node's ``server.properties`` entries; ``quorum``: the controllers'
        listeners, for ``controller.quorum.bootstrap.servers``."""
        properties = {
            "process.roles": ",".join(self.roles),
            "node.id": str(self.node_id),
            "listeners": ",".join(listener.endpoint for listener in self.listeners),
            "listener.security.protocol.map": ",".join(
                f"{listener.name}:{listener.security_protocol}" for listener in self.listeners
            ),
            "controller.listener.names": self.controller_listener,
            "controller.quorum.bootstrap.servers": ",".join(
                controller.address for controller in quorum
            ),
            "log.dirs": str(self.log_dir),
        }
        if self.is_broker:
            properties["inter.broker.listener.name"] = self.inter_broker_listener
            properties["advertised.listeners"] = ",".join(
                listener.endpoint
                for listener in self.listeners
                if listener.name != self.controller_listener
            )
        return properties


def cluster_properties(brokers: int = 1) -> dict[str, str]:
    """The settings every node of a test cluster with ``brokers`` brokers shares."""
    replication = min(3, brokers)
    return {
        # Internal topics fit the cluster, and get one partition: fewer to create and load.
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min(2, replication)),
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min(2, replication)),
        "share.coordinator.state.topic.num.partitions": "1",
        "default.replication.factor": str(replication),
        # Tests create every topic they use, with the partitions they want.
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Small files: a test broker holds little data and starts again from scratch.
        "log.segment.bytes": str(16 * 1024 * 1024),
        "log.index.size.max.bytes": str(1024 * 1024),
        "metadata.log.segment.bytes": str(8 * 1024 * 1024),
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        # Shut down at once: there is nothing to hand over.
        "controlled.shutdown.enable": "false",
    }


def _java_properties(entries: Mapping[str, str]) -> str:
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"{key}={escape(value)}\n" for key, value in entries.items())


def _config_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (all held open until all are picked)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(sock.getsockname()[1])
        return ports


def _cluster_id() -> str:
    """A random cluster id as Kafka spells one: 16 bytes in URL-safe base64, unpadded,
    not starting with ``-`` (command lines would take it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


# -- the finalized feature levels, from ApiVersions v3 --------------------------------


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def _finalized_features(address: tuple[str, int], timeout: float) -> dict[str, int]:
    """The cluster's finalized feature levels, as ApiVersions v3 reports them.

    Spoken by hand, not by the client under test, so that a check of the fixture does
    not rest on the code it exists to check.
    """
    client_id = b"aioproducer-tests"
    header = struct.pack(">hhih", 18, 3, 1, len(client_id)) + client_id + b"\x00"
    body = b"".join(  # client software name and version (compact strings), no tagged fields
        bytes([len(text) + 1]) + text for text in (b"aioproducer-tests", b"1")
    )
    body += b"\x00"
    request = header + body
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise KafkaBrokerError("the broker closed the connection during ApiVersions")
            data += chunk
    pos = 8  # size, correlation id (response header v0)
    (error_code,) = struct.unpack_from(">h", data, pos)
    if error_code:
        raise KafkaBrokerError(f"ApiVersions v3 failed with error code {error_code}")
    pos += 2
    count, pos = _uvarint(data, pos)
    for _ in range(count - 1):
        pos = _skip_tagged_fields(data, pos + 6)  # api key, min, max
    pos += 4  # throttle time
    features: dict[str, int] = {}
    tags, pos = _uvarint(data, pos)
    for _ in range(tags):
        tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        end = pos + size
        if tag == 2:  # FinalizedFeatures: [name, max version level, min version level]
            count, pos = _uvarint(data, pos)
            for _ in range(count - 1):
                length, pos = _uvarint(data, pos)
                name = data[pos : pos + length - 1].decode()
                pos += length - 1
                (max_level, _min_level) = struct.unpack_from(">hh", data, pos)
                pos = _skip_tagged_fields(data, pos + 4)
                features[name] = max_level
        pos = end
    return features


# -- processes -------------------------------------------------------------------------


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a ``preexec_fn`` that makes the child get SIGTERM when this process
    dies, so that a killed test run leaves no broker behind. Only from the main thread:
    the signal fires when the thread that started the child exits."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    set_parent_death_signal = 1  # PR_SET_PDEATHSIG

    def preexec() -> None:
        prctl(set_parent_death_signal, signal.SIGTERM)

    return preexec


def _terminate(process: subprocess.Popen[bytes], grace: float) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class _Resources:
    """What a running node holds; :func:`_release` frees it. Kept apart from the
    KafkaBroker so that a finalizer can free it after the broker is gone."""

    process: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    temporary_dir: Path | None = None


def _release(resources: _Resources) -> None:
    """Last resort when a KafkaBroker is garbage collected, or at interpreter exit."""
    if resources.process is not None:
        _terminate(resources.process, grace=5.0)
    if resources.log_file is not None:
        resources.log_file.close()
    if resources.temporary_dir is not None:
        shutil.rmtree(resources.temporary_dir, ignore_errors=True)


def _log_command(log_file: IO[bytes], command: Sequence[str]) -> None:
    log_file.write(f"$ {' '.join(command)}\n".encode())
    log_file.flush()


def _read_from(path: Path | None, offset: int) -> str:
    if path is None:
        return ""
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _tail(path: Path | None, max_bytes: int) -> str:
    if path is None:
        return ""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - max_bytes))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


class KafkaBroker:
    """One Apache Kafka node, broker and KRaft controller in one JVM, on loopback.

    Args:
        transaction_version: The ``transaction.version`` feature level to format the
            cluster with: 1 for the original transaction protocol, 2 for KIP-890's
            (the broker adds partitions to the transaction itself). None keeps the
            format tool's default, 2 on Kafka 4.
        config: More broker settings, overriding the defaults (values are turned
            into strings; booleans into ``true``/``false``).
        startup_timeout: Seconds to wait for the broker to answer, after the jars are
            there.
        libs: The folder holding the jars; by default :func:`kafka_libs`.
        work_dir: The folder for the configuration, data and log. By default a
            temporary folder that :meth:`stop` removes; a folder given here is kept.
        log_level: The broker's root log4j level.

    The broker starts on :meth:`start` or on entering the ``with`` block, and stops on
    :meth:`stop` or on leaving it. An instance runs once.
    """

    #: The node id of the single node.
    NODE_ID = 1

    def __init__(
        self,
        *,
        transaction_version: int | None = None,
        config: Mapping[str, object] | None = None,
        startup_timeout: float = 120.0,
        libs: str | os.PathLike[str] | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        log_level: str = "INFO",
    ) -> None:
        self._transaction_version = transaction_version
        self._config = {key: _config_value(value) for key, value in (config or {}).items()}
        self._startup_timeout = startup_timeout
        self._libs = Path(libs) if libs is not None else None
        self._work_dir: Path | None = Path(work_dir) if work_dir is not None else None
        self._log_level = log_level
        self._node: NodeLayout | None = None
        self._log_path: Path | None = None
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, _release, self._resources)
        self._admin: Any = None
        # (where the JVM writes a class archive as it exits, where it goes if complete)
        self._archive_pending: tuple[Path, Path] | None = None
        self._started = False
        self.startup_seconds: float | None = None
        """Seconds :meth:`start` took, from formatting the storage to the node's first
        Metadata answer (fetching the jars not included)."""

    # -- properties ---------------------------------------------------------------------

    @property
    def node(self) -> NodeLayout:
        """The node's layout; raises before :meth:`start`."""
        if self._node is None:
            raise KafkaBrokerError("the Kafka broker has not been started")
        return self._node

    @property
    def host(self) -> str:
        """The address every listener binds and advertises."""
        return HOST

    @property
    def port(self) -> int:
        """The client (PLAINTEXT) listener's port."""
        return self.node.listener("PLAINTEXT").port

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:<port>"``, for a client's ``bootstrap_servers``."""
        return self.node.listener("PLAINTEXT").address

    @property
    def transaction_version(self) -> int | None:
        """The ``transaction.version`` asked of the formatter (None: its default);
        :meth:`finalized_features` has the level in force."""
        return self._transaction_version

    @property
    def running(self) -> bool:
        """Whether the broker's JVM is alive."""
        process = self._resources.process
        return process is not None and process.poll() is None

    @property
    def work_dir(self) -> Path | None:
        """The folder holding ``server.properties``, the data and the log."""
        return self._work_dir

    @property
    def log_path(self) -> Path | None:
        """The node's log: the formatter's and the JVM's output, log4j's included."""
        return self._log_path

    def log_tail(self, max_bytes: int = 6000) -> str:
        """The last ``max_bytes`` of the node's log, for error messages."""
        return _tail(self._log_path, max_bytes)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> KafkaBroker:
        """Fetch the jars if needed, format the storage, start the node, and wait until
        it answers a Metadata request listing itself.

        Raises:
            KafkaUnavailableError: Java or Maven is missing, or the jars cannot be fetched.
            KafkaBrokerError: formatting failed, or the broker exited or did not answer
                within ``startup_timeout`` (the message ends with the log's tail). The
                log stays until :meth:`stop`.
        """
        if self._started:
            raise KafkaBrokerError("a KafkaBroker starts once; create a new one")
        self._started = True
        reason = kafka_available()
        if reason is not None:
            raise KafkaUnavailableError(reason)
        java = _java()
        assert java is not None  # kafka_available() checked
        libs = self._libs if self._libs is not None else kafka_libs()
        began = time.monotonic()
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="aioproducer-kafka-"))
            self._resources.temporary_dir = self._work_dir
        else:
            self._work_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = self._work_dir / "kafka.log"
        log_file = open(self._log_path, "ab")  # noqa: SIM115 (closed by stop())
        self._resources.log_file = log_file
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            attempt_began = log_file.tell()
            try:
                self._launch(java, libs, attempt)
                self._wait_until_ready(began + self._startup_timeout)
                break
            except KafkaBrokerError:
                self._kill()
                port_taken = _BIND_FAILURE.search(_read_from(self._log_path, attempt_began))
                if port_taken and attempt < _PORT_ATTEMPTS:
                    continue
                raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self, grace: float = 20.0) -> None:
        """Stop the node (SIGTERM, then SIGKILL after ``grace`` seconds) and remove its
        temporary folder. Safe to call more than once, and on a node that never started."""
        self._kill(grace)
        self._finalizer()  # closes the log and removes the temporary folder

    def __enter__(self) -> KafkaBroker:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _launch(self, java: str, libs: Path, attempt: int) -> None:
        """Lay out the node on fresh ports, format its storage, and start its JVM."""
        work_dir, log_file = self._work_dir, self._resources.log_file
        assert work_dir is not None and log_file is not None
        client_port, controller_port = _free_ports(2)
        node = NodeLayout(
            node_id=self.NODE_ID,
            roles=("broker", "controller"),
            listeners=(
                Listener("PLAINTEXT", client_port),
                Listener("CONTROLLER", controller_port),
            ),
            log_dir=work_dir / f"data-{attempt}",
        )
        self._node = node
        properties = {
            **node.properties(quorum=[node.listener(node.controller_listener)]),
            **cluster_properties(brokers=1),
            **self._config,
        }
        server_properties = work_dir / "server.properties"
        server_properties.write_text(_java_properties(properties))
        log4j = work_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_PROPERTIES.format(level=self._log_level))
        common = [f"-Dlog4j2.configurationFile={log4j}", "-cp", str(libs / "*")]

        # Class-data sharing: map the archive if there is one, else have this JVM
        # write one as it exits (kept by _kill() if it exits cleanly).
        archive = _class_archive(java, libs)
        share: list[str] = []
        dump: list[str] = []
        if archive is not None and archive.is_file():
            share = [f"-XX:SharedArchiveFile={archive}"]
        elif archive is not None:
            archive.parent.mkdir(parents=True, exist_ok=True)
            partial = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
            self._archive_pending = (partial, archive)
            dump = [f"-XX:ArchiveClassesAtExit={partial}"]

        format_command = [
            java,
            *TOOL_JVM_OPTIONS,
            *share,
            *common,
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            _cluster_id(),
            "--config",
            str(server_properties),
            "--standalone",
        ]
        if self._transaction_version is not None:
            format_command += ["--feature", f"transaction.version={self._transaction_version}"]
        _log_command(log_file, format_command)
        result = subprocess.run(
            format_command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise KafkaBrokerError(
                f"formatting the storage failed (exit code {result.returncode}); "
                f"log {self._log_path}:\n{self.log_tail()}"
            )

        broker_command = [
            java,
            *BROKER_JVM_OPTIONS,
            *share,
            *dump,
            *common,
            "kafka.Kafka",
            str(server_properties),
        ]
        _log_command(log_file, broker_command)
        self._resources.process = subprocess.Popen(
            broker_command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # Ctrl-C reaches the test run only, whose teardown then stops the broker.
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )

    def _wait_until_ready(self, deadline: float) -> None:
        """Wait until a Metadata response lists this node: it has joined the quorum,
        caught up with the metadata log and been unfenced."""
        from confluent_kafka import KafkaException

        process = self._resources.process
        assert process is not None
        admin = self.admin()
        while True:
            code = process.poll()
            if code is not None:
                raise KafkaBrokerError(
                    f"the Kafka broker exited with code {code} while starting; "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaBrokerError(
                    f"the Kafka broker did not answer within {self._startup_timeout:.0f} s; "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            try:
                metadata = admin.list_topics(timeout=min(1.0, remaining))
            except KafkaException:
                time.sleep(0.05)
                continue
            if self.NODE_ID in metadata.brokers:
                return
            time.sleep(0.05)

    def _kill(self, grace: float = 20.0) -> None:
        self._admin = None  # it knows the old ports
        process, self._resources.process = self._resources.process, None
        if process is None:
            return
        _terminate(process, grace)
        pending, self._archive_pending = self._archive_pending, None
        if pending is None:
            return
        partial, archive = pending
        # The JVM writes the archive as it exits: keep it only after a clean exit (on
        # SIGTERM, Kafka's shutdown hook exits with 143).
        if process.returncode in (0, 143) and partial.is_file():
            os.replace(partial, archive)
            # Archives for another JVM or other jars are of no more use.
            for other in archive.parent.glob("kafka-*.jsa"):
                if other != archive:
                    with contextlib.suppress(OSError):
                        other.unlink()
        else:
            with contextlib.suppress(OSError):
                partial.unlink()

    # -- administration -----------------------------------------------------------------

    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` for this node (made once, then reused)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    # The broker is local: retry connections at once while it starts.
                    "reconnect.backoff.ms": 20,
                    "reconnect.backoff.max.ms": 200,
                    "log_level": 0,
                }
            )
        return self._admin

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        *,
        timeout: float = 30.0,
        **configs: object,
    ) -> None:
        """Create ``name`` and wait until every partition has a leader.

        ``configs`` are topic configs: ``max_message_bytes=1024`` and
        ``**{"max.message.bytes": 1024}`` mean the same (Kafka's topic config names have
        no underscores, so ``_`` stands for ``.``).

        Raises:
            KafkaBrokerError: Kafka refused (the topic exists, a config is invalid, ...).
        """
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        config = {key.replace("_", "."): _config_value(value) for key, value in configs.items()}
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=replication_factor, config=config
        )
        admin = self.admin()
        futures = admin.create_topics([topic], operation_timeout=timeout, request_timeout=timeout)
        try:
            futures[name].result(timeout=timeout)
        except KafkaException as exc:
            raise KafkaBrokerError(f"creating topic {name!r} failed: {exc.args[0]}") from exc
        self._wait_for_leaders(name, time.monotonic() + timeout)

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete ``name``.

        Raises:
            KafkaBrokerError: Kafka refused (no such topic, ...).
        """
        from confluent_kafka import KafkaException

        futures = self.admin().delete_topics(
            [name], operation_timeout=timeout, request_timeout=timeout
        )
        try:
            futures[name].result(timeout=timeout)
        except KafkaException as exc:
            raise KafkaBrokerError(f"deleting topic {name!r} failed: {exc.args[0]}") from exc

    def _wait_for_leaders(self, name: str, deadline: float) -> None:
        from confluent_kafka import KafkaException

        admin = self.admin()
        while True:
            try:
                topic = admin.list_topics(name, timeout=5.0).topics.get(name)
            except KafkaException:
                topic = None
            if (
                topic is not None
                and topic.error is None
                and topic.partitions
                and all(partition.leader >= 0 for partition in topic.partitions.values())
            ):
                return
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(f"topic {name!r} has no leader for every partition yet")
            time.sleep(0.05)

    def finalized_features(self, timeout: float = 10.0) -> dict[str, int]:
        """The cluster's finalized feature levels (``transaction.version``,
        ``metadata.version``, ...), from an ApiVersions v3 response."""
        return _finalized_features((HOST, self.port), timeout)
