"""A real Apache Kafka broker for the tests: the reference for how a broker behaves.

:class:`KafkaBroker` runs one KRaft node (broker and controller in one JVM) on free
loopback ports, from the Kafka jars that :func:`kafka_libs` fetches with Maven::

    from tests.support.kafka import KafkaBroker

    with KafkaBroker() as kafka:
        kafka.create_topic("events", partitions=3, max_message_bytes=65536)
        print(kafka.bootstrap_servers)   # "127.0.0.1:<port>"

:class:`KafkaCluster` runs three such nodes as one KRaft quorum (replication 3, two
replicas in sync), and can pause, kill, stop and restart them, move leaders and set
client quotas::

    from tests.support.kafka import KafkaCluster

    with KafkaCluster() as cluster:
        cluster.create_topic("events", replica_assignment={0: [1, 2, 3], 1: [2, 3, 1]})
        cluster.pause(cluster.leader_of("events", 0))

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
import dataclasses
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
    "CLUSTER_JVM_OPTIONS",
    "LIBS_ENV",
    "POM",
    "PROXIED_LISTENER",
    "KafkaBroker",
    "KafkaBrokerError",
    "KafkaCluster",
    "KafkaUnavailableError",
    "Listener",
    "NodeLayout",
    "cluster_node_properties",
    "cluster_properties",
    "kafka_available",
    "kafka_libs",
    "kafka_version",
    "run_kafka_tool",
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
#: The client listener of a :class:`KafkaBroker` made with ``proxy_port``: it advertises
#: the proxy's port instead of its own.
PROXIED_LISTENER = "PROXIED"

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
#: A broker that moves data (the benchmarks): Kafka's own defaults (kafka-server-start.sh's
#: G1 settings, the full JIT), with a 1 GiB heap.
THROUGHPUT_JVM_OPTIONS = (
    "-Xmx1g",
    "-Xms1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
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


#: The older Kafka versions the end-to-end, idempotence and transaction suites also run
#: against, by the name of their session fixture (tests/conftest.py): the last 3.x with
#: KRaft, a 3.x whose KRaft quorum is a static voters list, and a 2.x on ZooKeeper.
OLDER_KAFKA: Mapping[str, str] = {
    "kafka_3_9": "3.9.1",
    "kafka_3_6": "3.6.2",
    "kafka_2_8": "2.8.2",
}


def older_kafka_params() -> list[Any]:
    """``pytest.param`` for each fixture of :data:`OLDER_KAFKA`, run in the compiled pass
    only (the protocol spoken to a broker is the same in both builds)."""
    import pytest

    from tests.support.passes import compiled_pass_only

    mark = compiled_pass_only("older brokers are spoken to the same way by both builds")
    return [pytest.param(name, marks=mark) for name in OLDER_KAFKA]


_LOG4J1_PROPERTIES = """\
# Kafka before 4.0 logs through log4j 1 (reload4j): everything to stdout, as above.
log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
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


def _pom_digest(version: str | None = None) -> str:
    digest = hashlib.sha256(POM.read_bytes())
    if version is not None:
        digest.update(f"\nkafka.version={version}".encode())
    return digest.hexdigest()


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "aioproducer"


def _libs_dir(version: str | None = None) -> Path:
    override = os.environ.get(LIBS_ENV)
    if override and version is None:
        return Path(override).expanduser().resolve()
    return _cache_root() / f"kafka-{version or kafka_version()}"


def version_tuple(version: str) -> tuple[int, ...]:
    """``"3.9.1"`` as ``(3, 9, 1)``, for comparing versions."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _has_kafka_jars(folder: Path) -> bool:
    return any(folder.glob("kafka_2.1*.jar"))


def _libs_ready(folder: Path, version: str | None = None) -> bool:
    """Whether ``folder`` holds the jars: fetched from this very pom, or put there by hand
    (no stamp, but Kafka's jars)."""
    stamp = folder / _STAMP
    if stamp.is_file():
        return stamp.read_text().strip() == _pom_digest(version)
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


def kafka_libs(version: str | None = None) -> Path:
    """The folder holding the broker's jars, fetched with Maven on first use: those of
    ``version`` (the pom's ``kafka.version`` overridden), or by default of the pom's.

    The jars go to ``$AIOPRODUCER_KAFKA_LIBS`` or ``~/.cache/aioproducer/kafka-<version>``:
    into a staging folder first, renamed into place once complete, under a lock, so an
    interrupted or concurrent fetch never leaves a half-filled folder behind. A change
    to ``pom.xml`` fetches again.

    Raises:
        KafkaUnavailableError: Maven is missing or failed (its output is in the message),
            or the folder exists with other files in it.
    """
    target = _libs_dir(version)
    if _libs_ready(target, version):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailableError(
            f"Maven (`mvn`) is needed to fetch the Kafka {version or kafka_version()} jars "
            f"into {target} (or set {LIBS_ENV} to a folder holding them)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _libs_ready(target, version):  # another process fetched them while we waited
            return target
        if target.exists() and not (target / _STAMP).is_file() and any(target.iterdir()):
            raise KafkaUnavailableError(
                f"{target} holds files but no Kafka jars: empty it or point {LIBS_ENV} elsewhere"
            )
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _maven_copy_dependencies(mvn, staging, version)
            (staging / _STAMP).write_text(_pom_digest(version) + "\n")
            if target.exists():
                # Ours (stamped by an older pom) or empty: safe to replace.
                shutil.rmtree(target)
            staging.chmod(0o755)  # mkdtemp made it private
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _maven_copy_dependencies(mvn: str, output: Path, version: str | None = None) -> None:
    command = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        "-f",
        str(POM),
        *([f"-Dkafka.version={version}"] if version is not None else []),
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
            f"Maven could not fetch the Kafka {version or kafka_version()} jars "
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
    """One listener of a node: ``name://host:port`` speaking ``security_protocol``.

    It advertises the address it binds, unless ``advertised_port`` names another port on
    ``host``: a proxy's in front of it (:mod:`tests.support.kafka_proxy`), so that clients
    told where the broker is by a Metadata answer from this listener connect to the proxy.
    """

    name: str
    port: int
    security_protocol: str = "PLAINTEXT"
    host: str = HOST
    advertised_port: int | None = None

    @property
    def address(self) -> str:
        """``host:port``: where the listener binds."""
        return f"{self.host}:{self.port}"

    @property
    def endpoint(self) -> str:
        """``NAME://host:port``, as ``listeners`` spells it."""
        return f"{self.name}://{self.address}"

    @property
    def advertised_endpoint(self) -> str:
        """``NAME://host:port`` as ``advertised.listeners`` spells it: :attr:`endpoint`,
        with ``advertised_port`` for the port when one is set."""
        if self.advertised_port is None:
            return self.endpoint
        return f"{self.name}://{self.host}:{self.advertised_port}"


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
                listener.advertised_endpoint
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
        # Look for transactions open past their timeout twice a second, not every 10 s,
        # so a test can watch the coordinator abort one.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
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


#: The client listeners a secured node adds, by name: (security protocol, TLS certificate).
#: ``SSL_OTHER_HOST`` serves a certificate for another host name, for hostname checks.
SECURE_LISTENERS: Mapping[str, tuple[str, str]] = {
    "SSL": ("SSL", "server"),
    "SSL_OTHER_HOST": ("SSL", "wrong_host"),
    "SASL_PLAINTEXT": ("SASL_PLAINTEXT", ""),
    "SASL_SSL": ("SASL_SSL", "server"),
    "SASL_REAUTH": ("SASL_PLAINTEXT", ""),
}
#: ``SASL_REAUTH`` grants sessions of this many milliseconds (``connections.max.reauth.ms``):
#: a client re-authenticates (KIP-368) before each ends, or the broker closes the connection
#: at its next request after that.
REAUTH_SESSION_MS = 3000
#: The SASL mechanisms a secured node enables on its SASL listeners.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _jaas_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaSecurity:
    """What a secured :class:`KafkaBroker` serves besides its PLAINTEXT listener.

    - TLS on the ``SSL`` and ``SASL_SSL`` listeners with ``certificate`` and ``key``
      (PEM; the key unencrypted PKCS#8), and on ``SSL_OTHER_HOST`` with
      ``other_host_certificate`` / ``other_host_key``, a certificate for another name.
    - SASL on ``SASL_PLAINTEXT`` and ``SASL_SSL``: PLAIN and SCRAM-SHA-256/512 for each of
      ``users`` (name: password; the SCRAM credentials are written when the storage is
      formatted), and OAUTHBEARER with Kafka's unsecured JWT validator (tokens signed with
      ``alg: none``, the principal in ``sub``).
    - Kafka's StandardAuthorizer: nothing is allowed without an ACL, except to
      ``super_users`` and to the PLAINTEXT and controller listeners (whose principal,
      ``ANONYMOUS``, is a super user: the tests administer the broker through them).
      So are the ``SSL`` listeners, which ask for no client certificate.
    """

    certificate: Path
    key: Path
    other_host_certificate: Path
    other_host_key: Path
    users: Mapping[str, str]
    super_users: tuple[str, ...] = ()

    def properties(self, work_dir: Path) -> dict[str, str]:
        """The broker settings; writes the PEM key stores they name into ``work_dir``."""
        stores = {
            "server": self._key_store(work_dir / "server-keystore.pem", self.key, self.certificate),
            "wrong_host": self._key_store(
                work_dir / "other-host-keystore.pem",
                self.other_host_key,
                self.other_host_certificate,
            ),
        }
        supers = ";".join(f"User:{name}" for name in ("ANONYMOUS", *self.super_users))
        properties = {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": supers,
            "allow.everyone.if.no.acl.found": "false",
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            # A refused SASL client is answered at once, not after Kafka's default 1 s delay.
            "connection.failed.authentication.delay.ms": "0",
        }
        plain_users = " ".join(
            f"user_{name}={_jaas_quote(password)}" for name, password in self.users.items()
        )
        for listener, (protocol, store) in SECURE_LISTENERS.items():
            prefix = f"listener.name.{listener.lower()}."
            if store:
                properties[prefix + "ssl.keystore.type"] = "PEM"
                properties[prefix + "ssl.keystore.location"] = str(stores[store])
                properties[prefix + "ssl.client.auth"] = "none"
            if listener == "SASL_REAUTH":
                properties[prefix + "connections.max.reauth.ms"] = str(REAUTH_SESSION_MS)
            if protocol.startswith("SASL"):
                properties[prefix + "plain.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f"{plain_users};"
                )
                for mechanism in _SCRAM_MECHANISMS:
                    properties[prefix + f"{mechanism.lower()}.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    )
                # No server callback handler: Kafka then validates with its unsecured one.
                properties[prefix + "oauthbearer.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                    'required unsecuredLoginStringClaim_sub="broker";'
                )
        return properties

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments adding the users' SCRAM credentials."""
        arguments: list[str] = []
        for name, password in self.users.items():
            for mechanism in _SCRAM_MECHANISMS:
                arguments += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        return arguments

    @staticmethod
    def _key_store(path: Path, key: Path, certificate: Path) -> Path:
        path.write_bytes(key.read_bytes() + certificate.read_bytes())
        return path


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
    # The ZooKeeper server of a broker in ZooKeeper mode (Kafka before 3.3).
    zookeeper: subprocess.Popen[bytes] | None = None


def _release(resources: _Resources) -> None:
    """Last resort when a KafkaBroker is garbage collected, or at interpreter exit."""
    if resources.process is not None:
        _terminate(resources.process, grace=5.0)
    if resources.zookeeper is not None:
        _terminate(resources.zookeeper, grace=5.0)
    if resources.log_file is not None:
        resources.log_file.close()
    if resources.temporary_dir is not None:
        shutil.rmtree(resources.temporary_dir, ignore_errors=True)


def _keep_class_archive(
    process: subprocess.Popen[bytes], pending: tuple[Path, Path] | None
) -> None:
    """Move the class archive a JVM wrote as it exited into place, or drop it.

    ``pending``: (where the exited JVM wrote it, where it goes). The JVM writes the archive
    as it exits: it is kept only after a clean exit (on SIGTERM, Kafka's shutdown hook
    exits with 143)."""
    if pending is None:
        return
    partial, archive = pending
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


class _Administration:
    """What :class:`KafkaBroker` and :class:`KafkaCluster` share: a confluent-kafka
    ``AdminClient`` and the topic commands built on it, each waiting until every broker
    running agrees the change is done."""

    #: The replication factor :meth:`create_topic` uses when none is given.
    DEFAULT_REPLICATION_FACTOR = 1

    _admin: Any

    @property
    def bootstrap_servers(self) -> str:
        raise NotImplementedError

    def _running_brokers(self) -> int:
        """How many brokers must agree on a change before it counts as done."""
        return 1

    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` (made once, then reused until a restart)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    # The brokers are local: retry connections at once while they start.
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
        replication_factor: int | None = None,
        replica_assignment: Mapping[int, Sequence[int]] | None = None,
        *,
        timeout: float = 30.0,
        **configs: object,
    ) -> None:
        """Create ``name`` and wait until every partition has a leader.

        ``replication_factor`` defaults to :attr:`DEFAULT_REPLICATION_FACTOR` (1 on a
        single broker, 3 on a cluster). ``replica_assignment``: ``{partition: [broker
        ids]}`` for every partition, the first broker of each the preferred leader; the
        topic then has as many partitions as the mapping, and the call waits until each
        partition's leader is its preferred one. ``configs`` are topic configs:
        ``max_message_bytes=1024`` and ``**{"max.message.bytes": 1024}`` mean the same
        (Kafka's topic config names have no underscores, so ``_`` stands for ``.``).

        Raises:
            KafkaBrokerError: Kafka refused (the topic exists, a config is invalid, ...),
                or the leaders did not appear in time.
        """
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        config = {key.replace("_", "."): _config_value(value) for key, value in configs.items()}
        if replica_assignment is not None:
            if sorted(replica_assignment) != list(range(len(replica_assignment))):
                raise ValueError("replica_assignment must name partitions 0, 1, ... in full")
            topic = NewTopic(
                name,
                # librdkafka wants the count with an assignment, and no replication factor.
                num_partitions=len(replica_assignment),
                replica_assignment=[
                    list(replica_assignment[p]) for p in range(len(replica_assignment))
                ],
                config=config,
            )
        else:
            topic = NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=(
                    self.DEFAULT_REPLICATION_FACTOR
                    if replication_factor is None
                    else replication_factor
                ),
                config=config,
            )
        futures = self.admin().create_topics(
            [topic], operation_timeout=timeout, request_timeout=timeout
        )
        try:
            futures[name].result(timeout=timeout)
        except KafkaException as exc:
            raise KafkaBrokerError(f"creating topic {name!r} failed: {exc.args[0]}") from exc
        deadline = time.monotonic() + timeout
        if replica_assignment is None:
            self._wait_until(
                name, deadline, lambda state: all(p.leader >= 0 for p in state.values())
            )
        else:
            self.wait_for_preferred_leaders(name, timeout=max(0.0, deadline - time.monotonic()))

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

    def partitions(self, topic: str, *, timeout: float = 10.0) -> dict[int, Any]:
        """``{partition: PartitionMetadata}`` (``leader``, ``replicas``, ``isrs``) from a
        fresh Metadata request."""
        from confluent_kafka import KafkaException

        try:
            entry = self.admin().list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise KafkaBrokerError(f"no metadata for {topic!r}: {exc.args[0]}") from exc
        if entry is None or entry.error is not None:
            error = "missing" if entry is None else entry.error
            raise KafkaBrokerError(f"no metadata for {topic!r}: {error}")
        return dict(entry.partitions)

    def _wait_until(
        self, topic: str, deadline: float, done: Callable[[dict[int, Any]], bool]
    ) -> dict[int, Any]:
        """Wait until ``done`` holds in as many successive Metadata answers as there are
        brokers running. Each broker applies a change when it reads it from the metadata
        log, a little apart from the others, and the admin client asks any of them: one
        answer may come from a broker a change behind."""
        wanted = max(1, self._running_brokers())
        last: dict[int, Any] = {}
        agreeing = 0
        while True:
            try:
                last = self.partitions(topic, timeout=5.0)
                agreeing = agreeing + 1 if last and done(last) else 0
            except KafkaBrokerError:
                agreeing = 0
            if agreeing >= wanted:
                return last
            if time.monotonic() >= deadline:
                described = {
                    p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in sorted(last.items())
                }
                raise KafkaBrokerError(
                    f"topic {topic!r} did not reach the state waited for; "
                    f"(leader, replicas, isr) by partition: {described}"
                )
            time.sleep(0.02 if agreeing else 0.05)

    def wait_for_preferred_leaders(
        self, topic: str, partitions: Sequence[int] | None = None, *, timeout: float = 30.0
    ) -> None:
        """Wait until each partition (all by default) is led by its first replica."""
        self._wait_until(
            topic,
            time.monotonic() + timeout,
            lambda state: all(
                m.replicas and m.leader == m.replicas[0]
                for p, m in state.items()
                if partitions is None or p in partitions
            ),
        )


class KafkaBroker(_Administration):
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
        security: TLS and SASL listeners and an ACL authorizer besides the PLAINTEXT
            listener (:class:`KafkaSecurity`); :meth:`address` names their ports.
        jvm_options: the broker JVM's options: :data:`BROKER_JVM_OPTIONS` (a quick start)
            by default, :data:`THROUGHPUT_JVM_OPTIONS` for a broker that moves data.
        client_host: The loopback address the PLAINTEXT listener binds and advertises
            (``127.0.0.2``, say); :meth:`relocate` moves it. The controller listener
            stays on ``127.0.0.1``.
        proxy_port: The port a test's proxy listens on, on :attr:`host`
            (:class:`tests.support.kafka_proxy.KafkaProxy`). The node then has one more
            client listener, :data:`PROXIED_LISTENER`, which binds a port of its own
            (``address("PROXIED")``, where the proxy forwards to) and advertises
            ``proxy_port``: a client bootstrapping through the proxy is sent back to it
            for the partition leaders and the coordinators, so every byte it exchanges
            with the broker passes the proxy. The PLAINTEXT listener, which the
            administration and read-back clients use, stays direct.
        version: The Kafka version to run (``"3.9.1"``, say): the pom's jars of that
            version. Before 3.9 the KRaft quorum is a static voters list; before 3.3 the
            node runs on ZooKeeper, which it starts too. By default, the pom's version.
        extra_listeners: More client listeners, by name: ``(security protocol, host)``,
            each on a port of its own (:meth:`address`); ``config`` holds their settings
            (``listener.name.<name>.…``).

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
        security: KafkaSecurity | None = None,
        jvm_options: Sequence[str] = BROKER_JVM_OPTIONS,
        proxy_port: int | None = None,
        client_host: str = HOST,
        version: str | None = None,
        extra_listeners: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self._extra_listeners = dict(extra_listeners or {})
        self._version = version
        if version is not None and transaction_version is not None:
            raise ValueError("transaction_version is for the default Kafka version only")
        self._client_host = client_host
        self._broker_command: list[str] = []
        self._jvm_options = tuple(jvm_options)
        self._proxy_port = proxy_port
        self._transaction_version = transaction_version
        self._security = security
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
    def version(self) -> str:
        """The Kafka version this broker runs."""
        return self._version or kafka_version()

    @property
    def mode(self) -> str:
        """How the node keeps its metadata: ``"kraft"`` (3.9 on: a quorum found through
        ``controller.quorum.bootstrap.servers``, storage formatted ``--standalone``),
        ``"kraft-voters"`` (3.3 to 3.8: a static ``controller.quorum.voters``) or
        ``"zookeeper"`` (before 3.3: a ZooKeeper server the fixture starts too)."""
        version = version_tuple(self.version)
        if version >= (3, 9):
            return "kraft"
        if version >= (3, 3):
            return "kraft-voters"
        return "zookeeper"

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

    def address(self, listener: str) -> str:
        """``"127.0.0.1:<port>"`` of the listener called ``listener`` (``PLAINTEXT``, one
        of :data:`SECURE_LISTENERS` on a secured node, :data:`PROXIED_LISTENER` on a node
        made with ``proxy_port``): where it binds."""
        return self.node.listener(listener).address

    @property
    def proxy_port(self) -> int | None:
        """The port the :data:`PROXIED_LISTENER` advertises (None: no such listener)."""
        return self._proxy_port

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
        libs = self._libs if self._libs is not None else kafka_libs(self._version)
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
        security = self._security
        secure_listeners = SECURE_LISTENERS if security is not None else {}
        proxied = self._proxy_port is not None
        extra = self._extra_listeners
        client_port, controller_port, *other_ports = _free_ports(
            2 + len(secure_listeners) + (1 if proxied else 0) + len(extra)
        )
        split = len(other_ports) - len(extra)
        extra_ports, other_ports = other_ports[split:], other_ports[:split]
        listeners = [
            Listener("PLAINTEXT", client_port, host=self._client_host),
            Listener("CONTROLLER", controller_port),
            *(
                Listener(name, port, protocol)
                for (name, (protocol, _)), port in zip(
                    secure_listeners.items(), other_ports[: len(secure_listeners)], strict=True
                )
            ),
        ]
        if proxied:
            listeners.append(
                Listener(PROXIED_LISTENER, other_ports[-1], advertised_port=self._proxy_port)
            )
        listeners += [
            Listener(name, port, protocol, host=host)
            for (name, (protocol, host)), port in zip(extra.items(), extra_ports, strict=True)
        ]
        node = NodeLayout(
            node_id=self.NODE_ID,
            roles=("broker", "controller"),
            listeners=tuple(listeners),
            log_dir=work_dir / f"data-{attempt}",
        )
        self._node = node
        server_properties = self._write_properties()
        log4j = work_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_PROPERTIES.format(level=self._log_level))
        common = [f"-Dlog4j2.configurationFile={log4j}", "-cp", str(libs / "*")]
        if self._version is not None:
            # Kafka before 4.0 logs through log4j 1 (reload4j): give it the same setup.
            log4j1 = work_dir / "log4j.properties"
            log4j1.write_text(_LOG4J1_PROPERTIES.format(level=self._log_level))
            common.insert(0, f"-Dlog4j.configuration=file:{log4j1}")

        # Class-data sharing: map the archive if there is one, else have this JVM
        # write one as it exits (kept by _kill() if it exits cleanly). Only for the
        # default version: the others start a few times per run.
        archive = _class_archive(java, libs) if self._version is None else None
        share: list[str] = []
        dump: list[str] = []
        if archive is not None and archive.is_file():
            share = [f"-XX:SharedArchiveFile={archive}"]
        elif archive is not None:
            archive.parent.mkdir(parents=True, exist_ok=True)
            partial = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
            self._archive_pending = (partial, archive)
            dump = [f"-XX:ArchiveClassesAtExit={partial}"]

        if self.mode == "zookeeper":
            self._start_zookeeper(java, libs, common, controller_port)
        else:
            self._format(java, [*share, *common], server_properties)

        self._broker_command = [
            java,
            *self._jvm_options,
            *share,
            *dump,
            *common,
            "kafka.Kafka",
            str(server_properties),
        ]
        self._start_jvm()

    def _format(self, java: str, common: list[str], server_properties: Path) -> None:
        log_file = self._resources.log_file
        assert log_file is not None
        security = self._security
        format_command = [
            java,
            *TOOL_JVM_OPTIONS,
            *common,
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            _cluster_id(),
            "--config",
            str(server_properties),
        ]
        if self.mode == "kraft":
            format_command.append("--standalone")
        if self._transaction_version is not None:
            format_command += ["--feature", f"transaction.version={self._transaction_version}"]
        if security is not None:
            format_command += security.format_arguments()
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

    def _start_zookeeper(self, java: str, libs: Path, common: list[str], port: int) -> None:
        """Start a standalone ZooKeeper server on ``port`` (from the jars Kafka depends
        on) and wait until it takes connections."""
        work_dir, log_file = self._work_dir, self._resources.log_file
        assert work_dir is not None and log_file is not None
        if self._resources.zookeeper is not None:
            _terminate(self._resources.zookeeper, grace=5.0)
        data = work_dir / f"zookeeper-{port}"
        data.mkdir(parents=True, exist_ok=True)
        command = [
            java,
            *TOOL_JVM_OPTIONS,
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=*",
            *common,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(port),
            str(data),
        ]
        _log_command(log_file, command)
        process = self._resources.zookeeper = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )
        deadline = time.monotonic() + 60.0
        while True:
            if process.poll() is not None:
                raise KafkaBrokerError(
                    f"ZooKeeper exited with code {process.returncode}; log {self._log_path}:\n"
                    f"{self.log_tail()}"
                )
            try:
                with socket.create_connection((HOST, port), timeout=1.0) as probe:
                    probe.sendall(b"ruok")
                    if probe.recv(4) == b"imok":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise KafkaBrokerError(f"ZooKeeper did not start on port {port} within 60 s")
            time.sleep(0.2)

    def _write_properties(self) -> Path:
        work_dir = self._work_dir
        assert work_dir is not None
        node = self.node
        security = self._security
        controller = node.listener(node.controller_listener)
        own = node.properties(quorum=[controller])
        if self.mode != "kraft":
            del own["controller.quorum.bootstrap.servers"]
        if self.mode == "kraft-voters":
            own["controller.quorum.voters"] = f"{node.node_id}@{controller.address}"
        if self.mode == "zookeeper":
            # The controller listener's port is ZooKeeper's; the broker has no such listener.
            for key in ("process.roles", "node.id", "controller.listener.names"):
                del own[key]
            clients = [listener for listener in node.listeners if listener is not controller]
            own["listeners"] = ",".join(listener.endpoint for listener in clients)
            own["listener.security.protocol.map"] = ",".join(
                f"{listener.name}:{listener.security_protocol}" for listener in clients
            )
            own["broker.id"] = str(node.node_id)
            own["zookeeper.connect"] = controller.address
        properties = {
            **own,
            **cluster_properties(brokers=1),
            **(security.properties(work_dir) if security is not None else {}),
            **self._config,
        }
        server_properties = work_dir / "server.properties"
        server_properties.write_text(_java_properties(properties))
        return server_properties

    def _start_jvm(self) -> None:
        log_file = self._resources.log_file
        assert log_file is not None
        _log_command(log_file, self._broker_command)
        self._resources.process = subprocess.Popen(
            self._broker_command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # Ctrl-C reaches the test run only, whose teardown then stops the broker.
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )

    def relocate(
        self,
        client_host: str,
        *,
        grace: float = 20.0,
        while_stopped: Callable[[], None] | None = None,
    ) -> None:
        """Stop the node and start it again with its PLAINTEXT listener on
        ``client_host`` (the same port, the same data: the same cluster, elsewhere), then
        wait until it answers there. ``while_stopped`` runs between the two (with the old
        address free, before the new one listens).

        Raises:
            KafkaBrokerError: the node did not come back within ``startup_timeout``.
        """
        self._kill(grace)
        if while_stopped is not None:
            while_stopped()
        node = self.node
        self._client_host = client_host
        self._node = dataclasses.replace(
            node,
            listeners=tuple(
                dataclasses.replace(listener, host=client_host)
                if listener.name == "PLAINTEXT"
                else listener
                for listener in node.listeners
            ),
        )
        self._write_properties()
        # The class archive is written by the first JVM only.
        self._broker_command = [
            arg for arg in self._broker_command if not arg.startswith("-XX:ArchiveClassesAtExit")
        ]
        self._start_jvm()
        self._wait_until_ready(time.monotonic() + self._startup_timeout)

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
        zookeeper, self._resources.zookeeper = self._resources.zookeeper, None
        if process is not None:
            _terminate(process, grace)
        if zookeeper is not None:
            _terminate(zookeeper, grace)
        if process is None:
            return
        pending, self._archive_pending = self._archive_pending, None
        _keep_class_archive(process, pending)

    # -- administration -----------------------------------------------------------------

    def finalized_features(self, timeout: float = 10.0) -> dict[str, int]:
        """The cluster's finalized feature levels (``transaction.version``,
        ``metadata.version``, ...), from an ApiVersions v3 response."""
        return _finalized_features((HOST, self.port), timeout)

    def set_client_quota(self, client_id: str, **quotas: float | None) -> None:
        """Set client quotas for ``client_id`` (``producer_byte_rate=1024``; None removes
        one) with Kafka's ``kafka-configs``, as :meth:`KafkaCluster.set_client_quota` does."""
        java = _java()
        assert java is not None and self._work_dir is not None
        run_kafka_tool(
            java,
            self._libs if self._libs is not None else kafka_libs(),
            self._work_dir,
            "org.apache.kafka.tools.ConfigCommand",
            *_client_quota_arguments(self.bootstrap_servers, client_id, quotas),
        )


class SecureKafka:
    """A Kafka node (``.broker``, a :class:`KafkaBroker`) with :class:`KafkaSecurity`'s
    listeners, the TLS files it was made with, and its users, for the security tests.
    It starts and stops as the broker does: :meth:`start` / :meth:`stop`, or ``with``.

    - ``tls``: the test CA, the broker's certificate (for ``localhost`` and ``127.0.0.1``)
      and one for another host name (:func:`tests.support.tls.make_certificates`);
      ``untrusted_ca``: a CA that signed neither.
    - :data:`SUPER_USER` may do anything; :data:`LIMITED_USER` only what :meth:`allow`
      grants. Both log in with PLAIN and SCRAM-SHA-256/512 using :attr:`passwords`; an
      OAUTHBEARER token's ``sub`` names the principal the same way.

    Administration (topics, ACLs) goes through the PLAINTEXT listener, a super user's.
    """

    SUPER_USER = "alice"
    LIMITED_USER = "writer"
    #: A user no ACL names: it may log in, and do nothing else.
    GUEST_USER = "guest"

    def __init__(self, directory: Path) -> None:
        from tests.support.tls import make_certificates

        self.tls = make_certificates(directory / "ca")
        self.untrusted_ca = make_certificates(directory / "other-ca").ca_cert
        self.passwords = {
            self.SUPER_USER: "alice-secret-password",
            self.LIMITED_USER: "writer-secret-password",
            self.GUEST_USER: "guest-secret-password",
        }
        self.broker = KafkaBroker(
            security=KafkaSecurity(
                certificate=self.tls.server_cert,
                key=self.tls.server_key,
                other_host_certificate=self.tls.wrong_host_cert,
                other_host_key=self.tls.wrong_host_key,
                users=self.passwords,
                super_users=(self.SUPER_USER,),
            )
        )

    def start(self) -> SecureKafka:
        """Start the node (see :meth:`KafkaBroker.start`)."""
        self.broker.start()
        return self

    def stop(self) -> None:
        """Stop the node and remove its folder."""
        self.broker.stop()

    def __enter__(self) -> SecureKafka:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def address(self, listener: str) -> str:
        """``host:port`` of ``listener`` (``SSL``, ``SASL_SSL``, ...)."""
        return self.broker.address(listener)

    def create_topic(self, name: str, partitions: int = 1, **configs: object) -> None:
        """Create ``name`` (through the PLAINTEXT listener)."""
        self.broker.create_topic(name, partitions, **configs)

    def allow(
        self,
        user: str,
        operations: Sequence[str],
        *,
        topic_prefix: str | None = None,
        transactional_id_prefix: str | None = None,
    ) -> None:
        """Grant ``user`` the ACL ``operations`` (``"WRITE"``, ``"DESCRIBE"``, ...) on the
        topics, or the transactional ids, whose names start with the prefix given."""
        from confluent_kafka.admin import (
            AclBinding,
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        if (topic_prefix is None) == (transactional_id_prefix is None):
            raise ValueError("give one of topic_prefix and transactional_id_prefix")
        resource, name = (
            (ResourceType.TOPIC, topic_prefix)
            if topic_prefix is not None
            else (ResourceType.TRANSACTIONAL_ID, transactional_id_prefix)
        )
        bindings = [
            AclBinding(
                resource,
                name,
                ResourcePatternType.PREFIXED,
                f"User:{user}",
                "*",
                getattr(AclOperation, operation),
                AclPermissionType.ALLOW,
            )
            for operation in operations
        ]
        admin = self.broker.admin()
        for future in admin.create_acls(bindings, request_timeout=30.0).values():
            future.result(timeout=30.0)
        # The broker answers DescribeAcls from its own authorizer: once it lists the
        # bindings, it enforces them.
        deadline = time.monotonic() + 30.0
        while True:
            listed = admin.describe_acls(
                AclBindingFilter(
                    resource,
                    name,
                    ResourcePatternType.PREFIXED,
                    f"User:{user}",
                    "*",
                    AclOperation.ANY,
                    AclPermissionType.ALLOW,
                ),
                request_timeout=30.0,
            ).result(timeout=30.0)
            if all(binding in listed for binding in bindings):
                return
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(f"the broker does not list the ACLs {bindings} yet")
            time.sleep(0.05)

    def failed_authentications(self) -> int:
        """How many failed SASL authentications the broker has logged so far."""
        path = self.broker.log_path
        if path is None or not path.exists():
            return 0
        return path.read_text(errors="replace").count("Failed authentication with")


# -- a cluster -------------------------------------------------------------------------

#: A cluster node's JVM: three of them share a CI machine (2 cores), so a smaller heap
#: than the single node's, and the same flags for a fast start.
CLUSTER_JVM_OPTIONS = (
    "-Xmx384m",
    "-Xms128m",
    *(option for option in BROKER_JVM_OPTIONS if not option.startswith("-Xm")),
)
#: The JVM of Kafka's command-line tools (:meth:`KafkaCluster.run_tool`): a short-lived
#: admin client.
ADMIN_TOOL_JVM_OPTIONS = (*TOOL_JVM_OPTIONS, "-Djava.net.preferIPv4Stack=true")

# Kafka's tools log through log4j 2 as well: warnings only, to stderr.
_TOOL_LOG4J2_PROPERTIES = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""

def _client_quota_arguments(
    bootstrap_servers: str, client_id: str, quotas: Mapping[str, float | None]
) -> list[str]:
    """``kafka-configs`` arguments setting (or, for None, removing) ``client_id``'s quotas."""
    added = ",".join(f"{k}={v}" for k, v in quotas.items() if v is not None)
    deleted = ",".join(k for k, v in quotas.items() if v is None)
    arguments = ["--bootstrap-server", bootstrap_servers, "--alter"]
    if added:
        arguments += ["--add-config", added]
    if deleted:
        arguments += ["--delete-config", deleted]
    return [*arguments, "--entity-type", "clients", "--entity-name", client_id]


def run_kafka_tool(
    java: str, libs: Path, work_dir: Path, main_class: str, *arguments: str, timeout: float = 120.0
) -> str:
    """Run one of Kafka's command-line tools by its main class with ``java`` and the jars
    in ``libs`` (its log configuration goes to ``work_dir``); return its standard output.

    Raises:
        KafkaBrokerError: the tool exited with an error (its output is in the message),
            or ran longer than ``timeout`` seconds.
    """
    log4j = work_dir / "tools-log4j2.properties"
    if not log4j.is_file():
        log4j.write_text(_TOOL_LOG4J2_PROPERTIES)
    archive = _class_archive(java, libs)
    share = [f"-XX:SharedArchiveFile={archive}"] if archive and archive.is_file() else []
    command = [
        java,
        *ADMIN_TOOL_JVM_OPTIONS,
        *share,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        str(libs / "*"),
        main_class,
        *arguments,
    ]
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaBrokerError(
            f"{main_class} ran longer than {timeout:.0f} s: {' '.join(arguments)}"
        ) from exc
    if result.returncode != 0:
        raise KafkaBrokerError(
            f"{main_class} {' '.join(arguments)} failed (exit code {result.returncode}):\n"
            f"{(result.stdout + result.stderr).strip()[-3000:]}"
        )
    return result.stdout


# Logged by a combined node once its broker is unfenced and serving (KafkaRaftServer's
# startup waits for the unfencing).
_SERVER_STARTED = "Kafka Server started"


def cluster_node_properties() -> dict[str, str]:
    """What a :class:`KafkaCluster` sets on top of :func:`cluster_properties`."""
    return {
        # acks=all needs two replicas in sync, as a production cluster would.
        "min.insync.replicas": "2",
        # A clean stop hands leadership over first (the single node has no one to hand to).
        "controlled.shutdown.enable": "true",
        # Leaders move only when a test moves them.
        "auto.leader.rebalance.enable": "false",
        # Client quotas measured over two 1-second windows rather than eleven: a quota
        # throttles within a second or two, where Kafka's default lets a new client send
        # about ten seconds' worth of its quota before the first throttle.
        "quota.window.num": "2",
    }


class _ClusterNode:
    """One combined node of a :class:`KafkaCluster`: its layout, files and JVM."""

    def __init__(self, layout: NodeLayout, folder: Path) -> None:
        self.layout = layout
        self.folder = folder
        self.properties_path = folder / "server.properties"
        self.log_path = folder / "kafka.log"
        self.log_file: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.archive_pending: tuple[Path, Path] | None = None
        self.launched_at = 0  # the log's size when the JVM was last started

    @property
    def node_id(self) -> int:
        return self.layout.node_id

    @property
    def address(self) -> str:
        return self.layout.listener("PLAINTEXT").address

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> IO[bytes]:
        if self.log_file is None or self.log_file.closed:
            self.log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed by close())
        return self.log_file

    def signal(self, number: signal.Signals) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            raise KafkaBrokerError(f"node {self.node_id} is not running")
        os.kill(process.pid, number)

    def close(self) -> None:
        if self.log_file is not None:
            self.log_file.close()


@dataclass
class _ClusterResources:
    """What a running cluster holds, for a finalizer to free after the cluster is gone."""

    nodes: list[_ClusterNode]
    temporary_dir: Path | None = None


def _release_cluster(resources: _ClusterResources) -> None:
    """Kill whatever still runs (a paused JVM is woken first), close the logs, remove the
    temporary folder."""
    for node in resources.nodes:
        process = node.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.wait()
        node.close()
    if resources.temporary_dir is not None:
        shutil.rmtree(resources.temporary_dir, ignore_errors=True)


class KafkaCluster(_Administration):
    """Apache Kafka nodes forming one KRaft quorum: each runs a broker and a controller in
    one JVM, on loopback. Three by default.

    The nodes' storage is formatted with one cluster id and a dynamic quorum of all the
    nodes (``kafka-storage format --initial-controllers``). Topics get three replicas and
    need two in sync (``min.insync.replicas=2``), the internal topics too; topics are never
    created on the fly, a clean stop hands leadership over, and leaders never move back to
    the preferred replica on their own (``auto.leader.rebalance.enable=false``)::

        with KafkaCluster() as cluster:
            cluster.create_topic("events", 2, replica_assignment={0: [1, 2, 3], 1: [2, 3, 1]})
            assert cluster.leader_of("events", 1) == 2
            cluster.pause(3)    # SIGSTOP: the node neither answers nor replicates
            cluster.resume(3)
            cluster.stop(2)     # a clean shutdown; cluster.restart(2) starts it again

    Each node has a 384 MiB heap (:data:`CLUSTER_JVM_OPTIONS`). A paused node keeps its
    place in the in-sync replicas for ``replica.lag.time.max.ms`` (30 s) and its
    registration until its heartbeats are 9 s overdue: pause for less than 9 s to leave
    the cluster's view of it unchanged. Client quotas (:meth:`set_client_quota`) are measured
    over two 1-second windows, so they throttle from the first seconds
    (:func:`cluster_node_properties` has every setting added to :func:`cluster_properties`).
    Kafka's own tools run with :meth:`run_tool`.

    Args:
        nodes: How many nodes (each broker and controller).
        transaction_version: The ``transaction.version`` to format with; None for the
            format tool's default.
        config: More settings for every node, overriding the defaults.
        startup_timeout: Seconds for the whole cluster to answer, after the jars are there.
        libs: The folder holding the jars; by default :func:`kafka_libs`.
        work_dir: The folder for configuration, data and logs (a folder per node). By
            default a temporary folder that :meth:`stop` removes.
        log_level: The nodes' root log4j level.
    """

    #: Topics get three replicas unless told otherwise.
    DEFAULT_REPLICATION_FACTOR = 3

    def __init__(
        self,
        nodes: int = 3,
        *,
        transaction_version: int | None = None,
        config: Mapping[str, object] | None = None,
        startup_timeout: float = 180.0,
        libs: str | os.PathLike[str] | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        log_level: str = "INFO",
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self._size = nodes
        self._transaction_version = transaction_version
        self._config = {key: _config_value(value) for key, value in (config or {}).items()}
        self._startup_timeout = startup_timeout
        self._libs = Path(libs) if libs is not None else None
        self._work_dir: Path | None = Path(work_dir) if work_dir is not None else None
        self._log_level = log_level
        self._resources = _ClusterResources(nodes=[])
        self._finalizer = weakref.finalize(self, _release_cluster, self._resources)
        self._nodes: dict[int, _ClusterNode] = {}
        self._java: str | None = None
        self._libs_dir: Path | None = None
        self._admin: Any = None
        self._started = False
        self.startup_seconds: float | None = None
        """Seconds :meth:`start` took, from formatting the storage to every node listed in
        a Metadata answer (fetching the jars not included)."""

    # -- properties ---------------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        """The nodes' ids: 1, 2, 3, ..."""
        return list(range(1, self._size + 1))

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client listener, ``"127.0.0.1:<port>,..."``."""
        return ",".join(node.address for node in self._started_nodes())

    @property
    def work_dir(self) -> Path | None:
        """The folder holding a folder per node (``node-<id>``)."""
        return self._work_dir

    def address(self, node_id: int) -> str:
        """``host:port`` of the node's client listener."""
        return self._node(node_id).address

    def layout(self, node_id: int) -> NodeLayout:
        """The node's listeners and log folder."""
        return self._node(node_id).layout

    def running(self, node_id: int) -> bool:
        """Whether the node's JVM is alive (paused counts as alive)."""
        return self._node(node_id).running

    def paused(self, node_id: int) -> bool:
        """Whether the node is stopped by :meth:`pause`."""
        return self._node(node_id).paused

    def log_path(self, node_id: int) -> Path:
        """The node's log: the formatter's and the JVM's output, log4j's included."""
        return self._node(node_id).log_path

    def log_tail(self, node_id: int, max_bytes: int = 6000) -> str:
        """The last ``max_bytes`` of the node's log."""
        return _tail(self._node(node_id).log_path, max_bytes)

    def _started_nodes(self) -> list[_ClusterNode]:
        if not self._nodes:
            raise KafkaBrokerError("the Kafka cluster has not been started")
        return [self._nodes[node_id] for node_id in sorted(self._nodes)]

    def _node(self, node_id: int) -> _ClusterNode:
        self._started_nodes()
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KafkaBrokerError(
                f"no node {node_id}: the nodes are {sorted(self._nodes)}"
            ) from None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        """Fetch the jars if needed, format every node's storage, start the nodes and wait
        until a Metadata answer lists every broker.

        Raises:
            KafkaUnavailableError: Java or Maven is missing, or the jars cannot be fetched.
            KafkaBrokerError: formatting failed, or a node exited or the cluster did not
                answer within ``startup_timeout`` (the message ends with the logs' tails).
        """
        if self._started:
            raise KafkaBrokerError("a KafkaCluster starts once; create a new one")
        self._started = True
        reason = kafka_available()
        if reason is not None:
            raise KafkaUnavailableError(reason)
        java = _java()
        assert java is not None  # kafka_available() checked
        self._java = java
        self._libs_dir = self._libs if self._libs is not None else kafka_libs()
        began = time.monotonic()
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="aioproducer-kafka-cluster-"))
            self._resources.temporary_dir = self._work_dir
        else:
            self._work_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self._lay_out(attempt)
            try:
                self._format_all()
                for node in self._started_nodes():
                    self._launch(node)
                self._wait_until_ready(began + self._startup_timeout)
                break
            except KafkaBrokerError:
                port_taken = any(
                    _BIND_FAILURE.search(_read_from(node.log_path, node.launched_at))
                    for node in self._started_nodes()
                )
                self._kill_all()
                if port_taken and attempt < _PORT_ATTEMPTS:
                    continue
                raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self, node_id: int | None = None, grace: float = 30.0) -> None:
        """Stop one node cleanly, or the whole cluster when ``node_id`` is None.

        One node: SIGTERM, so that it hands its leaderships over (a controlled shutdown)
        and closes its logs; SIGKILL after ``grace`` seconds. The node keeps its storage
        and ports: :meth:`restart` starts it again.

        The cluster: every node at once with SIGKILL (their data is thrown away, so no
        handing over is waited for), and the temporary folder is removed. Safe to call
        more than once, and on a cluster that never started.
        """
        if node_id is not None:
            node = self._node(node_id)
            self._stop_node(node, grace)
            return
        self._kill_all(grace=min(grace, 10.0))
        self._admin = None
        self._finalizer()

    def kill(self, node_id: int) -> None:
        """SIGKILL the node: no controlled shutdown, its logs are left unflushed. The
        cluster fences it once its heartbeats are 9 s overdue; :meth:`restart` starts it
        again."""
        node = self._node(node_id)
        process = node.process
        if process is None or process.poll() is not None:
            raise KafkaBrokerError(f"node {node_id} is not running")
        process.kill()
        process.wait()
        node.paused = False
        _keep_class_archive(process, node.archive_pending)
        node.archive_pending = None

    def restart(self, node_id: int, *, timeout: float = 60.0, unregister: bool = True) -> None:
        """Start the node again on its storage and ports, cleanly stopping it first if it
        runs, and wait until its broker is serving again (unfenced). It then catches up
        as a follower: :meth:`wait_in_sync` waits for that.

        ``unregister``: first drop the stopped broker's registration (``kafka-cluster
        unregister``). The controller otherwise refuses the new registration
        (DUPLICATE_BROKER_REGISTRATION) until the old one's heartbeats are 9 s overdue, even
        after a clean stop. Unregistering does
        what that timeout would do: the broker leaves the in-sync replicas and leads
        nothing (already so after :meth:`stop`).
        """
        node = self._node(node_id)
        if node.running:
            self._stop_node(node, grace=30.0)
        if unregister:
            self.run_tool(
                "org.apache.kafka.tools.ClusterTool",
                "unregister",
                "--bootstrap-server",
                self.bootstrap_servers,
                "--id",
                str(node_id),
                timeout=timeout,
            )
        self._launch(node)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(node)
            if _SERVER_STARTED in _read_from(node.log_path, node.launched_at):
                break
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(
                    f"node {node_id} did not start again within {timeout:.0f} s; "
                    f"log {node.log_path}:\n{self.log_tail(node_id)}"
                )
            time.sleep(0.05)
        self._wait_for_brokers({node_id}, deadline)

    def pause(self, node_id: int) -> None:
        """SIGSTOP the node's JVM: it neither answers, nor replicates, nor heartbeats,
        but its connections stay open."""
        node = self._node(node_id)
        node.signal(signal.SIGSTOP)
        node.paused = True

    def resume(self, node_id: int) -> None:
        """SIGCONT a node :meth:`pause` stopped."""
        node = self._node(node_id)
        node.signal(signal.SIGCONT)
        node.paused = False

    def __enter__(self) -> KafkaCluster:
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

    def _lay_out(self, attempt: int) -> None:
        """Pick fresh ports and write every node's server.properties."""
        work_dir = self._work_dir
        assert work_dir is not None
        for node in self._nodes.values():
            node.close()
        ports = _free_ports(2 * self._size)
        layouts = [
            NodeLayout(
                node_id=node_id,
                roles=("broker", "controller"),
                listeners=(
                    Listener("PLAINTEXT", ports[2 * index]),
                    Listener("CONTROLLER", ports[2 * index + 1]),
                ),
                log_dir=work_dir / f"node-{node_id}" / f"data-{attempt}",
            )
            for index, node_id in enumerate(self.node_ids)
        ]
        quorum = [layout.listener(layout.controller_listener) for layout in layouts]
        self._nodes = {}
        for layout in layouts:
            folder = work_dir / f"node-{layout.node_id}"
            folder.mkdir(parents=True, exist_ok=True)
            node = _ClusterNode(layout, folder)
            properties = {
                **layout.properties(quorum=quorum),
                **cluster_properties(brokers=self._size),
                **cluster_node_properties(),
                **self._config,
            }
            node.properties_path.write_text(_java_properties(properties))
            (folder / "log4j2.properties").write_text(
                _LOG4J2_PROPERTIES.format(level=self._log_level)
            )
            self._nodes[layout.node_id] = node
        self._resources.nodes[:] = list(self._nodes.values())

    def _jvm_common(self, node: _ClusterNode) -> list[str]:
        assert self._libs_dir is not None
        return [
            f"-Dlog4j2.configurationFile={node.folder / 'log4j2.properties'}",
            "-cp",
            str(self._libs_dir / "*"),
        ]

    def _share_archive(self, node: _ClusterNode, *, may_dump: bool) -> list[str]:
        """JVM options to map the class archive, or (``may_dump``, when there is none
        yet) to write it at exit."""
        assert self._java is not None and self._libs_dir is not None
        archive = _class_archive(self._java, self._libs_dir)
        if archive is None:
            return []
        if archive.is_file():
            return [f"-XX:SharedArchiveFile={archive}"]
        if not may_dump or node.archive_pending is not None:
            return []
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
        node.archive_pending = (partial, archive)
        return [f"-XX:ArchiveClassesAtExit={partial}"]

    def _format_all(self) -> None:
        """Format every node's storage with one cluster id and the same initial
        controllers, the formatters running side by side."""
        assert self._java is not None
        cluster_id = _cluster_id()
        directory_ids = {node_id: _cluster_id() for node_id in self._nodes}
        initial_controllers = ",".join(
            f"{node_id}@{node.layout.listener('CONTROLLER').address}:{directory_ids[node_id]}"
            for node_id, node in sorted(self._nodes.items())
        )
        running: list[tuple[_ClusterNode, subprocess.Popen[bytes]]] = []
        try:
            for node in self._started_nodes():
                command = [
                    self._java,
                    *TOOL_JVM_OPTIONS,
                    *self._share_archive(node, may_dump=False),
                    *self._jvm_common(node),
                    "kafka.tools.StorageTool",
                    "format",
                    "--cluster-id",
                    cluster_id,
                    "--config",
                    str(node.properties_path),
                    "--initial-controllers",
                    initial_controllers,
                ]
                if self._transaction_version is not None:
                    command += ["--feature", f"transaction.version={self._transaction_version}"]
                log_file = node.log()
                _log_command(log_file, command)
                process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
                )
                running.append((node, process))
            for node, process in running:
                code = process.wait(timeout=120)
                if code != 0:
                    raise KafkaBrokerError(
                        f"formatting node {node.node_id}'s storage failed (exit code {code}); "
                        f"log {node.log_path}:\n{self.log_tail(node.node_id)}"
                    )
        finally:
            for _node, process in running:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    def _launch(self, node: _ClusterNode) -> None:
        """Start the node's JVM on its storage (formatted already)."""
        assert self._java is not None
        command = [
            self._java,
            *CLUSTER_JVM_OPTIONS,
            # One node writes the class archive if there is none yet.
            *self._share_archive(node, may_dump=node.node_id == 1),
            *self._jvm_common(node),
            "kafka.Kafka",
            str(node.properties_path),
        ]
        log_file = node.log()
        log_file.flush()
        node.launched_at = log_file.tell()
        _log_command(log_file, command)
        node.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # Ctrl-C reaches the test run only, whose teardown then stops the nodes.
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )
        node.paused = False

    def _check_alive(self, node: _ClusterNode) -> None:
        process = node.process
        code = None if process is None else process.poll()
        if process is None or code is not None:
            raise KafkaBrokerError(
                f"node {node.node_id} exited with code {code}; "
                f"log {node.log_path}:\n{self.log_tail(node.node_id)}"
            )

    def _wait_until_ready(self, deadline: float) -> None:
        """Wait until a Metadata answer lists every broker: each has joined the quorum,
        caught up with the metadata log and been unfenced."""
        try:
            self._wait_for_brokers(set(self._nodes), deadline)
        except KafkaBrokerError as exc:
            tails = "\n".join(
                f"--- node {node_id} ({self.log_path(node_id)}):\n{self.log_tail(node_id, 3000)}"
                for node_id in sorted(self._nodes)
            )
            raise KafkaBrokerError(f"{exc}\n{tails}") from exc

    def _wait_for_brokers(self, node_ids: set[int], deadline: float) -> None:
        from confluent_kafka import KafkaException

        admin = self.admin()
        while True:
            for node_id in node_ids:
                self._check_alive(self._nodes[node_id])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaBrokerError(
                    f"the Kafka cluster did not list broker(s) {sorted(node_ids)} in time"
                )
            try:
                metadata = admin.list_topics(timeout=min(1.0, remaining))
            except KafkaException:
                time.sleep(0.05)
                continue
            if node_ids <= set(metadata.brokers):
                return
            time.sleep(0.05)

    def _stop_node(self, node: _ClusterNode, grace: float) -> None:
        process = node.process
        if process is None or process.poll() is not None:
            return
        if node.paused:
            os.kill(process.pid, signal.SIGCONT)
            node.paused = False
        _terminate(process, grace)
        _keep_class_archive(process, node.archive_pending)
        node.archive_pending = None

    def _kill_all(self, grace: float = 10.0) -> None:
        """Stop every node: the data is thrown away, so SIGKILL, which takes no time (all
        nodes stopping cleanly at once would wait on each other's controlled shutdowns).
        A node writing the class archive first stops cleanly (SIGTERM, SIGKILL after
        ``grace`` seconds), while the others still form a quorum."""
        self._admin = None
        nodes = list(self._nodes.values())
        writing = [node for node in nodes if node.archive_pending is not None]
        for node in writing:
            self._stop_node(node, grace)
        for node in nodes:
            process = node.process
            if process is not None and process.poll() is None:
                with contextlib.suppress(OSError):
                    if node.paused:
                        os.kill(process.pid, signal.SIGCONT)
                process.kill()
                process.wait()
            if process is not None:
                _keep_class_archive(process, node.archive_pending)
            node.archive_pending = None
            node.process = None
            node.paused = False

    # -- administration -----------------------------------------------------------------

    def _running_brokers(self) -> int:
        return sum(1 for node in self._nodes.values() if node.running)

    def leader_of(self, topic: str, partition: int, *, timeout: float = 10.0) -> int:
        """The id of the broker leading ``topic``'s ``partition`` (-1: none), as the broker
        asked knows it: right after a change, one broker may still tell the leader before
        (:meth:`wait_for_leaders` waits until they agree)."""
        state = self.partitions(topic, timeout=timeout)
        if partition not in state:
            raise KafkaBrokerError(f"{topic!r} has no partition {partition}")
        return int(state[partition].leader)

    def wait_for_leaders(
        self, topic: str, leaders: Mapping[int, int], *, timeout: float = 30.0
    ) -> None:
        """Wait until each partition in ``leaders`` (``{partition: broker id}``) is led by
        that broker, in as many successive Metadata answers as there are nodes running."""
        self._wait_until(
            topic,
            time.monotonic() + timeout,
            lambda state: all(
                p in state and state[p].leader == leader for p, leader in leaders.items()
            ),
        )

    def wait_in_sync(
        self, topic: str, partitions: Sequence[int] | None = None, *, timeout: float = 60.0
    ) -> None:
        """Wait until every replica of each partition (all by default) is in sync."""
        self._wait_until(
            topic,
            time.monotonic() + timeout,
            lambda state: all(
                m.leader >= 0 and set(m.replicas) == set(m.isrs)
                for p, m in state.items()
                if partitions is None or p in partitions
            ),
        )

    def elect_preferred_leaders(
        self, topic: str, partitions: Sequence[int] | None = None, *, timeout: float = 30.0
    ) -> None:
        """A preferred-leader election (``kafka-leader-election --election-type
        preferred``) for the partitions (all by default), then wait until each is led by
        its first replica. A partition already led by it is fine.

        Raises:
            KafkaBrokerError: the election failed (the preferred replica is not in sync,
                say: :meth:`wait_in_sync` first).
        """
        from confluent_kafka import ElectionType, KafkaException, TopicPartition

        if partitions is None:
            partitions = sorted(self.partitions(topic))
        future = self.admin().elect_leaders(
            ElectionType.PREFERRED,
            [TopicPartition(topic, partition) for partition in partitions],
        )  # no timeouts: confluent-kafka 2.16's elect_leaders fails on keyword arguments
        try:
            results = future.result(timeout=timeout)
        except KafkaException as exc:
            raise KafkaBrokerError(f"the leader election failed: {exc.args[0]}") from exc
        failed = {
            f"{tp.topic}-{tp.partition}": error.name()
            for tp, error in results.items()
            if error is not None and error.name() != "ELECTION_NOT_NEEDED"
        }
        if failed:
            raise KafkaBrokerError(f"the leader election failed: {failed}")
        self.wait_for_preferred_leaders(topic, partitions, timeout=timeout)

    def reassign_partitions(
        self,
        topic: str,
        assignment: Mapping[int, Sequence[int]],
        *,
        timeout: float = 60.0,
    ) -> None:
        """Reassign ``topic``'s partitions (``{partition: [broker ids]}``, the first one
        the new preferred leader) with Kafka's ``kafka-reassign-partitions --execute``,
        then wait until each partition has exactly those replicas, all in sync. Leaders
        move only if the current one leaves the replicas: a preferred-leader election
        (:meth:`elect_preferred_leaders`) moves the others."""
        import json

        plan = {
            "version": 1,
            "partitions": [
                {"topic": topic, "partition": partition, "replicas": list(replicas)}
                for partition, replicas in sorted(assignment.items())
            ],
        }
        work_dir = self._work_dir
        assert work_dir is not None
        plan_path = work_dir / f"reassign-{uuid.uuid4().hex[:8]}.json"
        plan_path.write_text(json.dumps(plan))
        self.run_tool(
            "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
            "--bootstrap-server",
            self.bootstrap_servers,
            "--reassignment-json-file",
            str(plan_path),
            "--execute",
            timeout=timeout,
        )
        self._wait_until(
            topic,
            time.monotonic() + timeout,
            lambda state: all(
                list(state[p].replicas) == list(replicas) and set(state[p].isrs) == set(replicas)
                for p, replicas in assignment.items()
            ),
        )

    def set_client_quota(self, client_id: str, **quotas: float | None) -> None:
        """Set client quotas for ``client_id`` with Kafka's ``kafka-configs --alter
        --entity-type clients``: ``producer_byte_rate=200000``, ``request_percentage=...``
        (Kafka's names). ``None`` as a value removes that quota. Every broker applies it
        once it has read the change from the metadata log (within milliseconds here)."""
        self.run_tool(
            "org.apache.kafka.tools.ConfigCommand",
            *_client_quota_arguments(self.bootstrap_servers, client_id, quotas),
        )

    def run_tool(self, main_class: str, *arguments: str, timeout: float = 120.0) -> str:
        """Run one of Kafka's command-line tools by its main class, e.g.
        ``org.apache.kafka.tools.LeaderElectionCommand`` (``kafka-leader-election``),
        ``org.apache.kafka.tools.reassign.ReassignPartitionsCommand``,
        ``org.apache.kafka.tools.ConfigCommand`` (``kafka-configs``) or
        ``org.apache.kafka.tools.MetadataQuorumCommand``, and return its standard output.
        Pass ``--bootstrap-server``, :attr:`bootstrap_servers`, yourself.

        Raises:
            KafkaBrokerError: the tool exited with an error (its output is in the message),
                or ran longer than ``timeout`` seconds.
        """
        assert self._java is not None and self._libs_dir is not None and self._work_dir
        return run_kafka_tool(
            self._java, self._libs_dir, self._work_dir, main_class, *arguments, timeout=timeout
        )

    def active_controller(self, *, timeout: float = 60.0) -> int:
        """The id of the quorum's active controller (``kafka-metadata-quorum describe
        --status``: its ``LeaderId``), once the quorum has one.

        Raises:
            KafkaBrokerError: no controller was elected within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                output = self.run_tool(
                    "org.apache.kafka.tools.MetadataQuorumCommand",
                    "--bootstrap-server",
                    self.bootstrap_servers,
                    "describe",
                    "--status",
                    timeout=max(1.0, deadline - time.monotonic()),
                )
            except KafkaBrokerError as exc:
                last = str(exc)
            else:
                match = re.search(r"^LeaderId:\s*(-?\d+)", output, re.MULTILINE)
                if match is not None and int(match.group(1)) >= 0:
                    return int(match.group(1))
                last = output
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(f"the quorum has no active controller: {last[-2000:]}")
            time.sleep(0.2)
