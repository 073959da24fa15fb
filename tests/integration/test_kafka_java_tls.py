"""Java-style configuration against Apache Kafka's own TLS listener.

The ``kafka_secure`` node serves SSL with a certificate from the test CA. The producer is
configured the way a Java client is, by Java option names only: a PKCS12 trust store made
by ``keytool`` from that CA, ``ssl.endpoint.identification.algorithm`` and ``client.id``.
What it wrote is read back by confluent-kafka through the node's PLAINTEXT listener.

- The trust store is what makes the broker trusted: the same options without it fail.
- ``client.id`` reaches the broker in the request headers: Kafka throttles the produce
  requests of a client id that has a ``producer_byte_rate`` quota, and says so in the
  responses' throttle time, while another client id sending the same bytes is not throttled.
- The Spark data source takes the same options behind ``kafka.``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import SslError
from tests.support.kafka import SecureKafka
from tests.support.readback import read_back
from tests.support.spark import ONCE_PER_CI_RUN, local_spark

pytestmark = pytest.mark.kafka

# Every test ends well before this; it only turns a hang into a failure.
_HANG = 60.0
_STORE_PASSWORD = "trust-store-secret"
_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def truststore(kafka_secure: SecureKafka, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node's CA as a trusted-certificate entry of a PKCS12 store, made by keytool."""
    keytool = shutil.which("keytool")
    if keytool is None:
        pytest.skip("keytool (a JDK) is not installed")
    path = tmp_path_factory.mktemp("stores") / "truststore.p12"
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-storetype", "PKCS12", "-keystore", str(path),
         "-storepass", _STORE_PASSWORD, "-alias", "kafka-ca",
         "-file", str(kafka_secure.tls.ca_cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return path


def _java_options(secure: SecureKafka, truststore: Path, **more: str) -> dict[str, str]:
    return {
        "bootstrap.servers": secure.address("SSL"),
        "security.protocol": "SSL",
        "ssl.truststore.location": str(truststore),
        "ssl.truststore.password": _STORE_PASSWORD,
        "ssl.truststore.type": "PKCS12",
        "ssl.endpoint.identification.algorithm": "https",
        **more,
    }


def _topic(secure: SecureKafka, prefix: str, partitions: int = 1) -> str:
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    secure.create_topic(name, partitions)
    return name


async def test_produce_over_ssl_with_a_pkcs12_truststore_by_java_names(
    kafka_secure: SecureKafka, truststore: Path
) -> None:
    topic = _topic(kafka_secure, "java-tls-")
    sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(10)]
    async with Producer(_java_options(kafka_secure, truststore)) as producer:
        futures = [await producer.send(topic, value, key=key) for key, value in sent]
        await asyncio.wait_for(asyncio.gather(*futures), _HANG)
    records = read_back(kafka_secure.broker.bootstrap_servers, topic, expected=len(sent))
    assert [(r.key, r.value) for r in records] == sent

    # Without the trust store the system's CAs do not know the node's: the store did it.
    options = _java_options(kafka_secure, truststore)
    for name in ("ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type"):
        del options[name]
    untrusting = Producer(options, max_block_ms=600_000)
    with pytest.raises(SslError, match="certificate"):
        await asyncio.wait_for(untrusting.start(), _HANG)
    await untrusting.close()


async def _throttle_after_sending(
    options: dict[str, str], topic: str, *, until_throttled: bool
) -> float:
    """Send 64 KiB in one produce request (again, while ``until_throttled`` and not yet
    throttled) and return the largest throttle time the broker answered with."""
    payload = os.urandom(1024)
    async with Producer(options, linger_ms=60_000, batch_size=1 << 20) as producer:
        async def one_request() -> float:
            futures = [await producer.send(topic, payload) for _ in range(64)]
            await producer.flush()
            await asyncio.gather(*futures)
            return float(producer.metrics()["produce-throttle-time-max"])

        throttle = await asyncio.wait_for(one_request(), _HANG)
        if until_throttled:
            # The quota reaches the broker through its metadata log, within moments.
            while throttle <= 0:
                throttle = await asyncio.wait_for(one_request(), _HANG)
        return throttle


async def test_client_id_reaches_the_broker(kafka_secure: SecureKafka, truststore: Path) -> None:
    """The broker applies a per-client-id quota to this producer's requests, and only to
    them: it read ``client.id`` from every produce request's header."""
    topic = _topic(kafka_secure, "client-id-")
    client_id = f"java-named-{uuid.uuid4().hex[:8]}"
    kafka_secure.broker.set_client_quota(client_id, producer_byte_rate=1024)

    quoted = _java_options(kafka_secure, truststore, **{"client.id": client_id})
    try:
        throttled = await asyncio.wait_for(
            _throttle_after_sending(quoted, topic, until_throttled=True), 2 * _HANG
        )
    except asyncio.TimeoutError:
        pytest.fail(f"the broker never throttled the requests of client id {client_id!r}")
    assert throttled > 0

    other = _java_options(kafka_secure, truststore, **{"client.id": f"{client_id}-other"})
    assert await _throttle_after_sending(other, topic, until_throttled=False) == 0


# -- Spark -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    with local_spark("aioproducer-java-tls") as session:
        yield session


@pytest.mark.spark
@ONCE_PER_CI_RUN
def test_spark_data_source_with_the_java_truststore_options(
    spark: Any, kafka_secure: SecureKafka, truststore: Path
) -> None:
    topic = _topic(kafka_secure, "spark-java-tls-", partitions=2)
    rows = [(f"key-{i}", f"value-{i}") for i in range(200)]
    writer = (
        spark.createDataFrame(rows, "key string, value string")
        .repartition(2)
        .write.format("aioproducer")
        .option("topic", topic)
    )
    for name, value in _java_options(kafka_secure, truststore).items():
        writer = writer.option(f"kafka.{name}", value)
    writer.mode("append").save()
    records = read_back(kafka_secure.broker.bootstrap_servers, topic, expected=len(rows))
    got = sorted((r.key, r.value) for r in records)
    assert got == sorted((k.encode(), v.encode()) for k, v in rows)


def test_perf_verify_reads_back_over_the_same_secured_listener(
    kafka_secure: SecureKafka, truststore: Path, tmp_path: Path
) -> None:
    """`perf --verify` with a Java client.properties for SASL_SSL (a JAAS line, a PKCS12
    trust store): the read-back check reaches the listener with the same settings and
    counts every record; no secret shows in what the command prints."""
    user = SecureKafka.SUPER_USER
    password = kafka_secure.passwords[user]
    topic = _topic(kafka_secure, "perf-verify-")
    options = _java_options(
        kafka_secure,
        truststore,
        **{
            "bootstrap.servers": kafka_secure.address("SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="{user}" password="{password}";',
        },
    )
    properties = tmp_path / "client.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in options.items()), encoding="utf-8")
    properties.chmod(0o600)
    result = subprocess.run(
        [sys.executable, "-m", "aioproducer", "perf", "--topic", topic,
         "--num-records", "50", "--record-size", "20", "--throughput", "-1",
         "--producer.config", str(properties), "--verify"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Verified: a confluent-kafka consumer read back all 50 records" in result.stdout
    for secret in (password, _STORE_PASSWORD):
        assert secret not in output
