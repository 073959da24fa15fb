"""The brokers and helpers the other integration tests rely on actually work.

Records are produced with confluent-kafka (an independent client) and read back
with tests.support.readback, so these tests check the fixtures, not aioproducer.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from aioproducer.embedded import EmbeddedBroker, EmbeddedBrokerError
from aioproducer.errors import ConfigurationError
from tests.support.mock_cluster import (
    ApiKey,
    ErrorCode,
    MockCluster,
    MockClusterError,
    MockClusterProcess,
)
from tests.support.readback import ConsumedRecord, high_watermarks, partitions_of, read_back

Header = tuple[str, bytes | None]
#: (partition, key, value, headers, timestamp_ms), as given to Producer.produce.
Record = tuple[int, bytes | None, bytes | None, list[Header], int]

# Fast reconnects so a broker brought back up is used again without a long backoff.
_PRODUCER_DEFAULTS = {
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "log_level": 0,
}


def _produce(
    bootstrap: str, topic: str, records: Sequence[Record], **config: Any
) -> list[confluent_kafka.KafkaError | None]:
    """Produce with confluent-kafka and return one delivery error (or None) per record."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, **_PRODUCER_DEFAULTS, **config}
    )
    reports: list[confluent_kafka.KafkaError | None] = []
    for partition, key, value, headers, timestamp in records:
        wire_headers: list[tuple[str, str | bytes | None]] = list(headers)
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=partition,
            headers=wire_headers,
            timestamp=timestamp,
            on_delivery=lambda error, _message: reports.append(error),
        )
    assert producer.flush(30) == 0, "confluent-kafka could not deliver within 30 s"
    return reports


def _sample_records(partitions: int) -> list[Record]:
    base_ms = 1_700_000_000_000
    records: list[Record] = [
        (
            i % partitions,
            f"key-{i}".encode(),
            f"value-{i}".encode() * (i + 1),
            [("index", str(i).encode()), ("empty", None), ("index", b"again")],
            base_ms + i,
        )
        for i in range(9)
    ]
    records.append((0, None, b"no key, no headers", [], base_ms + 100))
    records.append((partitions - 1, b"tombstone", None, [], base_ms + 101))
    return records


def _as_sent(records: Sequence[Record]) -> dict[int, list[tuple[Any, ...]]]:
    by_partition: dict[int, list[tuple[Any, ...]]] = {}
    for partition, key, value, headers, timestamp in records:
        by_partition.setdefault(partition, []).append((key, value, headers, timestamp))
    return by_partition


def _as_read(records: Sequence[ConsumedRecord]) -> dict[int, list[tuple[Any, ...]]]:
    by_partition: dict[int, list[tuple[Any, ...]]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(
            (record.key, record.value, record.headers, record.timestamp_ms)
        )
    return by_partition


def _produce_requests(cluster: MockCluster | MockClusterProcess) -> list[int]:
    """The broker ids that received each tracked Produce request."""
    return [r.broker_id for r in cluster.get_requests() if r.api_key == ApiKey.PRODUCE]


def _broker_address(cluster: MockCluster, broker_id: int) -> tuple[str, int]:
    # The mock lists its brokers in id order, 1 first.
    host, port = cluster.bootstrap_servers.split(",")[broker_id - 1].rsplit(":", 1)
    return host, int(port)


# -- both brokers: a round trip ---------------------------------------------------


@pytest.mark.parametrize(
    "broker_fixture",
    [
        pytest.param("tansu", marks=pytest.mark.tansu),
        pytest.param("mock_cluster", marks=pytest.mark.mock_cluster),
    ],
)
def test_round_trip_keeps_keys_values_headers_timestamps_and_partitions(
    request: pytest.FixtureRequest, broker_fixture: str, new_topic: Callable[..., str]
) -> None:
    broker = request.getfixturevalue(broker_fixture)
    topic = new_topic(broker, partitions=3)
    records = _sample_records(3)

    reports = _produce(broker.bootstrap_servers, topic, records)
    read = read_back(broker.bootstrap_servers, topic, expected=len(records))

    assert reports == [None] * len(records)
    assert _as_read(read) == _as_sent(records)
    for partition, rows in _as_read(read).items():
        offsets = [r.offset for r in read if r.partition == partition]
        assert offsets == list(range(len(rows)))
    assert {r.topic for r in read} == {topic}
    assert {r.timestamp_type for r in read} == {1}  # CreateTime, as sent


# -- Tansu ------------------------------------------------------------------------


def test_tansu_topic_gets_the_requested_partitions(
    tansu: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(tansu, partitions=4)

    assert partitions_of(tansu.bootstrap_servers, topic) == [0, 1, 2, 3]
    assert tansu.list_topics()[topic] == 4
    with pytest.raises(EmbeddedBrokerError, match="already exists"):
        tansu.create_topic(topic, partitions=4)
    tansu.create_topic(topic, partitions=4, exist_ok=True)


def test_tansu_reads_back_only_the_partitions_asked_for(
    tansu: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(tansu, partitions=2)
    records: list[Record] = [(i % 2, None, f"v{i}".encode(), [], 1_000 + i) for i in range(6)]
    _produce(tansu.bootstrap_servers, topic, records)

    read = read_back(tansu.bootstrap_servers, topic, [1], expected=3)

    assert [(r.partition, r.value) for r in read] == [(1, b"v1"), (1, b"v3"), (1, b"v5")]


def test_embedded_broker_stops_once_and_frees_its_port() -> None:
    broker = EmbeddedBroker()
    broker.start()
    address = (broker.host, broker.port)
    log_path = broker.log_path
    assert broker.running
    socket.create_connection(address, timeout=5).close()

    broker.stop()
    broker.stop()

    assert not broker.running
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=5)
    assert log_path is not None and not log_path.exists()
    with pytest.raises(EmbeddedBrokerError, match="stopped"):
        broker.start()


def test_embedded_broker_reports_a_broker_that_exits_at_startup() -> None:
    false = shutil.which("false")
    assert false is not None

    broker = EmbeddedBroker(binary=false)
    with pytest.raises(EmbeddedBrokerError, match="exited with code 1") as raised:
        broker.start()

    assert not broker.running
    # The log outlives a failed start so the path in the message can be opened...
    log_path = broker.log_path
    assert log_path is not None and log_path.exists() and str(log_path) in str(raised.value)
    broker.stop()
    assert not log_path.exists()  # ...until stop() cleans up.


def test_embedded_broker_gives_up_on_a_broker_that_never_answers(tmp_path: Path) -> None:
    silent = tmp_path / "silent-broker"
    silent.write_text("#!/bin/sh\necho 'pretending to start'\nexec sleep 60\n")
    silent.chmod(0o755)

    broker = EmbeddedBroker(binary=silent, startup_timeout=0.5)
    with pytest.raises(EmbeddedBrokerError, match="did not answer") as raised:
        broker.start()

    assert "pretending to start" in str(raised.value)
    assert not broker.running
    broker.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "2001:db8::1", "example.com"])
def test_embedded_broker_refuses_an_address_that_is_not_loopback(host: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        EmbeddedBroker(host=host)
    message = str(raised.value)
    assert f"EmbeddedBroker(host={host!r}): not a loopback address" in message
    assert "no authentication" in message
    assert "allow_remote=True" in message
    assert not raised.value.retriable


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "localhost", "::1", "[::1]"])
def test_embedded_broker_takes_a_loopback_address(host: str) -> None:
    assert EmbeddedBroker(host=host).host == host.strip("[]")


def test_embedded_broker_listens_everywhere_only_when_allowed() -> None:
    with EmbeddedBroker(host="0.0.0.0", allow_remote=True) as broker:
        assert broker.bootstrap_servers.startswith("0.0.0.0:")
        broker.create_topic("everywhere", partitions=2)
        assert broker.list_topics() == {"everywhere": 2}
        # Bound to every interface, so the broker answers on loopback too.
        socket.create_connection(("127.0.0.1", broker.port), timeout=5).close()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_embedded_broker_on_the_ipv6_loopback() -> None:
    with EmbeddedBroker(host="::1") as broker:
        assert broker.bootstrap_servers == f"[::1]:{broker.port}"
        socket.create_connection(("::1", broker.port), timeout=5).close()
        # Tansu's topic command cannot reach an IPv6 listener: said plainly, not Tansu's
        # "no network connection" advice.
        with pytest.raises(EmbeddedBrokerError, match="cannot reach a broker on the IPv6"):
            broker.create_topic("v6")


def _environment_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as environ:
        entries = environ.read().decode("utf-8", "replace").split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/environ")
def test_embedded_broker_does_not_see_the_callers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-marker-7f3a")
    monkeypatch.setenv("KAFKA_PASSWORD", "kafka-marker-91c2")
    monkeypatch.setenv("STORAGE_ENGINE", "postgres://marker")  # a Tansu flag's default
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    with EmbeddedBroker(environment={"RUST_LOG": "warn", "AWS_REGION": "eu-marker-1"}) as broker:
        assert broker.pid is not None
        environment = _environment_of(broker.pid)
        broker.create_topic("still-works")
    assert broker.pid is None
    assert environment["PATH"] == os.environ["PATH"]
    assert environment["LC_ALL"] == "C.UTF-8"
    assert environment["RUST_LOG"] == "warn"  # given explicitly
    assert environment["AWS_REGION"] == "eu-marker-1"
    for name in ("AWS_SECRET_ACCESS_KEY", "KAFKA_PASSWORD", "STORAGE_ENGINE"):
        assert name not in environment
    assert not any("marker-" in value for value in environment.values() if "eu-marker" not in value)
    allowed = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
               "SSL_CERT_FILE", "SSL_CERT_DIR", "RUST_LOG", "RUST_BACKTRACE", "AWS_REGION"}
    assert {n for n in environment if not n.startswith("LC_")} <= allowed


def test_embedded_broker_environment_values_must_be_strings() -> None:
    with pytest.raises(ConfigurationError, match="must be strings"):
        EmbeddedBroker(environment={"RUST_LOG": 1})  # type: ignore[dict-item]


async def test_embedded_broker_async_variants() -> None:
    async with EmbeddedBroker() as broker:
        await broker.acreate_topic("async-topic", partitions=2)
        assert broker.list_topics() == {"async-topic": 2}
    assert not broker.running


# -- the mock cluster: fault injection ----------------------------------------------


def test_mock_retries_injected_retriable_produce_errors(
    mock_cluster: MockCluster, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(mock_cluster, partitions=1)
    mock_cluster.start_request_tracking()
    mock_cluster.push_request_errors(
        ApiKey.PRODUCE, [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS]
    )

    reports = _produce(mock_cluster.bootstrap_servers, topic, [(0, b"k", b"v", [], 1)])

    assert reports == [None]
    assert len(_produce_requests(mock_cluster)) == 3  # two rejected, one accepted
    read = read_back(mock_cluster.bootstrap_servers, topic, expected=1, extra_wait=0.2)
    assert [(r.key, r.value) for r in read] == [(b"k", b"v")]


def test_mock_delivers_injected_permanent_produce_error(
    mock_cluster: MockCluster, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(mock_cluster, partitions=1)
    mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.TOPIC_AUTHORIZATION_FAILED])

    first = _produce(mock_cluster.bootstrap_servers, topic, [(0, None, b"a", [], 1)])
    second = _produce(mock_cluster.bootstrap_servers, topic, [(0, None, b"b", [], 2)])

    assert first[0] is not None and first[0].code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert second == [None]  # the stack held one error
    read = read_back(mock_cluster.bootstrap_servers, topic, expected=1, extra_wait=0.2)
    assert [r.value for r in read] == [b"b"]


def test_mock_broker_error_stack_is_consumed_by_that_broker_only(
    mock_cluster: MockCluster, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(mock_cluster, partitions=1)
    mock_cluster.partition_set_leader(topic, 0, 2)
    mock_cluster.broker_push_request_error_rtts(1, ApiKey.PRODUCE, [(ErrorCode.NONE, 0)])
    mock_cluster.broker_push_request_error_rtts(
        2, ApiKey.PRODUCE, [(ErrorCode.NOT_ENOUGH_REPLICAS, 50)]
    )
    assert mock_cluster.broker_error_stack_count(2, ApiKey.PRODUCE) == 1
    mock_cluster.start_request_tracking()

    reports = _produce(mock_cluster.bootstrap_servers, topic, [(0, None, b"v", [], 1)])

    assert reports == [None]
    assert _produce_requests(mock_cluster) == [2, 2]
    assert mock_cluster.broker_error_stack_count(2, ApiKey.PRODUCE) == 0
    assert mock_cluster.broker_error_stack_count(1, ApiKey.PRODUCE) == 1


def test_mock_broker_down_refuses_connections_until_up(
    mock_cluster: MockCluster, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(mock_cluster, partitions=1)
    mock_cluster.partition_set_leader(topic, 0, 1)
    mock_cluster.start_request_tracking()

    mock_cluster.broker_set_down(1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(_broker_address(mock_cluster, 1), timeout=5)
    while_down = _produce(
        mock_cluster.bootstrap_servers,
        topic,
        [(0, None, b"lost", [], 1)],
        **{"message.timeout.ms": 1000},
    )
    assert while_down[0] is not None
    assert while_down[0].code() == confluent_kafka.KafkaError._MSG_TIMED_OUT
    assert _produce_requests(mock_cluster) == []

    mock_cluster.broker_set_up(1)
    socket.create_connection(_broker_address(mock_cluster, 1), timeout=5).close()
    after_up = _produce(mock_cluster.bootstrap_servers, topic, [(0, None, b"kept", [], 2)])
    assert after_up == [None]
    assert _produce_requests(mock_cluster) == [1]


def test_mock_request_tracking_sees_produce_requests_to_the_leader(
    mock_cluster: MockCluster, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(mock_cluster, partitions=2)
    mock_cluster.partition_set_leader(topic, 0, 3)
    mock_cluster.partition_set_leader(topic, 1, 2)
    mock_cluster.start_request_tracking()

    _produce(mock_cluster.bootstrap_servers, topic, [(0, None, b"a", [], 1)])
    _produce(mock_cluster.bootstrap_servers, topic, [(1, None, b"b", [], 2)])
    requests = mock_cluster.get_requests()

    assert [r.broker_id for r in requests if r.api_key == ApiKey.PRODUCE] == [3, 2]
    assert {r.api_key for r in requests} >= {ApiKey.API_VERSIONS, ApiKey.METADATA}
    timestamps = [r.timestamp_us for r in requests]
    assert timestamps == sorted(timestamps)

    # librdkafka 2.16 drops what was recorded on both stop and (re)start.
    mock_cluster.stop_request_tracking()
    _produce(mock_cluster.bootstrap_servers, topic, [(0, None, b"untracked", [], 3)])
    mock_cluster.start_request_tracking()
    assert mock_cluster.get_requests() == []
    _produce(mock_cluster.bootstrap_servers, topic, [(1, None, b"tracked", [], 4)])
    assert _produce_requests(mock_cluster) == [2]
    mock_cluster.clear_requests()
    assert mock_cluster.get_requests() == []


def test_mock_errors_carry_librdkafka_codes(mock_cluster: MockCluster) -> None:
    with pytest.raises(MockClusterError) as raised:
        mock_cluster.broker_set_down(99)
    assert raised.value.code == ErrorCode.BROKER_NOT_AVAILABLE

    mock_cluster.close()
    with pytest.raises(MockClusterError, match="closed"):
        mock_cluster.create_topic("after-close")


def test_mock_high_watermarks_count_records(
    mock_cluster: MockCluster, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(mock_cluster, partitions=2)
    _produce(
        mock_cluster.bootstrap_servers,
        topic,
        [(0, None, b"a", [], 1), (0, None, b"b", [], 2), (1, None, b"c", [], 3)],
    )

    assert high_watermarks(mock_cluster.bootstrap_servers, topic) == {0: 2, 1: 1}


# -- the mock cluster in a child process -------------------------------------------


def test_mock_cluster_process_proxies_the_controls(
    mock_cluster_process: MockClusterProcess, new_topic: Callable[..., str]
) -> None:
    cluster = mock_cluster_process
    topic = new_topic(cluster, partitions=2)
    cluster.partition_set_leader(topic, 1, 3)
    cluster.start_request_tracking()
    cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.TOPIC_AUTHORIZATION_FAILED])

    rejected = _produce(cluster.bootstrap_servers, topic, [(1, b"k", b"no", [], 1)])
    accepted = _produce(cluster.bootstrap_servers, topic, [(1, b"k", b"yes", [("h", b"1")], 2)])

    assert rejected[0] is not None
    assert rejected[0].code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert accepted == [None]
    assert _produce_requests(cluster) == [3, 3]
    read = read_back(cluster.bootstrap_servers, topic, [1], expected=1, extra_wait=0.2)
    assert [(r.key, r.value, r.headers) for r in read] == [(b"k", b"yes", [("h", b"1")])]
    with pytest.raises(MockClusterError) as raised:
        cluster.broker_set_down(99)
    assert raised.value.code == ErrorCode.BROKER_NOT_AVAILABLE


def test_mock_cluster_process_exits_on_close() -> None:
    cluster = MockClusterProcess(num_brokers=1)
    address = cluster.bootstrap_servers.rsplit(":", 1)

    cluster.close()
    cluster.close()

    assert cluster.closed
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address[0], int(address[1])), timeout=5)
    with pytest.raises(MockClusterError, match="closed"):
        cluster.start_request_tracking()
