"""Mutual TLS configured with the Java client's store options only, end to end.

Tansu sits behind a TLS terminator (:class:`~tests.support.tls.TlsProxy`) that asks for a
client certificate signed by the test CA and refuses the handshake without one; the broker
advertises the proxy, so every connection goes through it. The producer gets a PKCS12 trust
store made by Java's ``keytool`` and a PKCS12 key store, by their Java names, and what it
wrote is read back with confluent-kafka through the same proxy. Apache Kafka's own SSL
listener (which asks for no client certificate) is covered in
``test_kafka_java_tls.py``.
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
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    load_pem_private_key,
    pkcs12,
)

from aioproducer import Producer
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import AuthenticationError, ConfigurationError
from tests.integration.test_security import read_back as read_back_over_tls
from tests.support.tls import (
    BackgroundLoop,
    TlsFiles,
    TlsProxy,
    advertising_broker,
    free_port,
    make_certificates,
    server_context,
)

pytestmark = pytest.mark.tansu

# A safety net so that a broken test fails instead of hanging; never a measured threshold.
PATIENCE = 30.0
TRUST_PASSWORD = "trust-store-pass"
KEY_STORE_PASSWORD = "key-store-pass"


def keytool_truststore(ca_cert: Path, path: Path, password: str) -> Path:
    """A PKCS12 trust store holding ``ca_cert`` as a trusted-certificate entry (keytool)."""
    keytool = shutil.which("keytool")
    if keytool is None:
        pytest.skip("keytool (a JDK) is not installed")
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-storetype", "PKCS12", "-keystore", str(path),
         "-storepass", password, "-alias", "ca", "-file", str(ca_cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return path


def pkcs12_keystore(certs: TlsFiles, path: Path, password: str) -> Path:
    """A PKCS12 key store with the client's key, its certificate and the CA."""
    key = load_pem_private_key(certs.client_key.read_bytes(), certs.client_key_password.encode())
    certificate = x509.load_pem_x509_certificate(certs.client_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"client", key, certificate, [ca], BestAvailableEncryption(password.encode())  # type: ignore[arg-type]
        )
    )
    return path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def mutual_tls(
    certs: TlsFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EmbeddedBroker, TlsProxy]]:
    """Tansu reachable only through a TLS proxy that requires a client certificate."""
    port = free_port()
    broker = advertising_broker(tmp_path_factory.mktemp("mtls"), ("127.0.0.1", port))
    broker.start()
    try:
        with BackgroundLoop() as background:
            proxy = TlsProxy(
                (broker.host, broker.port),
                server_context(certs, require_client_cert=True),
                port=port,
            )
            background.run(proxy.start())
            try:
                yield broker, proxy
            finally:
                background.run(proxy.close())
    finally:
        broker.stop()


async def test_mutual_tls_with_pkcs12_stores_by_java_names(
    mutual_tls: tuple[EmbeddedBroker, TlsProxy], certs: TlsFiles, tmp_path: Path
) -> None:
    broker, proxy = mutual_tls
    topic = f"java-stores-{uuid.uuid4().hex[:10]}"
    broker.create_topic(topic, partitions=1)
    stores: dict[str, Any] = {
        "bootstrap.servers": proxy.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.truststore.location": str(
            keytool_truststore(certs.ca_cert, tmp_path / "trust.p12", TRUST_PASSWORD)
        ),
        "ssl.truststore.password": TRUST_PASSWORD,
        "ssl.truststore.type": "PKCS12",
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.keystore.location": str(
            pkcs12_keystore(certs, tmp_path / "client.p12", KEY_STORE_PASSWORD)
        ),
        "ssl.keystore.password": KEY_STORE_PASSWORD,
        "ssl.keystore.type": "PKCS12",
    }
    sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(20)]
    accepted_before = proxy.accepted
    async with Producer(stores) as producer:
        futures = [await producer.send(topic, value, key=key) for key, value in sent]
        await asyncio.wait_for(asyncio.gather(*futures), PATIENCE)
    assert proxy.accepted - accepted_before >= 2  # bootstrap and the leader, both mutual TLS

    # A wrong store password fails start() at once, naming the option, not the password.
    wrong = Producer({**stores, "ssl.keystore.password": "not-the-password"}, max_block_ms=600_000)
    with pytest.raises(ConfigurationError) as caught:
        await asyncio.wait_for(wrong.start(), PATIENCE)
    assert "ssl.keystore.password is wrong" in str(caught.value)
    assert "not-the-password" not in str(caught.value) + repr(wrong)
    await wrong.close()

    # Without the key store the same proxy refuses the handshake: the store did the work.
    no_key = {k: v for k, v in stores.items() if not k.startswith("ssl.keystore.")}
    refused = Producer(no_key, max_block_ms=600_000)
    with pytest.raises(AuthenticationError, match="client certificate"):
        await asyncio.wait_for(refused.start(), PATIENCE)
    await refused.close()

    records = read_back_over_tls(
        proxy.bootstrap_servers,
        topic,
        len(sent),
        **{
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca_cert),
            "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key),
            "ssl.key.password": certs.client_key_password,
        },
    )
    assert records == sent


def test_spark_sink_options_never_show_store_secrets() -> None:
    pytest.importorskip("pyspark")
    from aioproducer.integrations.spark import SinkOptions

    secrets = {
        "kafka.ssl.truststore.password": "trust-SECRET",
        "kafka.ssl.keystore.password": "keystore-SECRET",
        "kafka.ssl.key.password": "key-SECRET",
    }
    sink = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": "k:9093",
            "topic": "t",
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": "/etc/kafka/trust.p12",
            "kafka.ssl.keystore.location": "/etc/kafka/client.p12",
            **secrets,
        }
    )
    text = repr(sink) + str(sink) + repr(sink.producer().config)
    for secret in secrets.values():
        assert secret not in text
    assert "/etc/kafka/trust.p12" in text
    assert sink.config["ssl.truststore.password"] == "trust-SECRET"  # masked when shown only


def test_the_command_line_reads_java_store_options_from_a_properties_file(
    mutual_tls: tuple[EmbeddedBroker, TlsProxy], certs: TlsFiles, tmp_path: Path
) -> None:
    """A client.properties written for Java clients, harmless Java-only settings included,
    works unchanged with --producer.config."""
    broker, proxy = mutual_tls
    topic = f"java-stores-cli-{uuid.uuid4().hex[:10]}"
    broker.create_topic(topic, partitions=1)
    truststore = keytool_truststore(certs.ca_cert, tmp_path / "trust.p12", TRUST_PASSWORD)
    keystore = pkcs12_keystore(certs, tmp_path / "client.p12", KEY_STORE_PASSWORD)
    properties = tmp_path / "client.properties"
    properties.write_text(
        f"bootstrap.servers={proxy.bootstrap_servers}\n"
        "security.protocol=SSL\n"
        f"ssl.truststore.location={truststore}\n"
        f"ssl.truststore.password={TRUST_PASSWORD}\n"
        "ssl.truststore.type=PKCS12\n"
        f"ssl.keystore.location={keystore}\n"
        f"ssl.keystore.password={KEY_STORE_PASSWORD}\n"
        "ssl.keystore.type=PKCS12\n"
        "ssl.keymanager.algorithm=SunX509\n"
        "ssl.enabled.protocols=TLSv1.2,TLSv1.3\n",
        encoding="utf-8",
    )
    root = Path(__file__).resolve().parents[2]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-m", "aioproducer", "produce", "--topic", topic,
         "--producer.config", str(properties)],
        input="first\nsecond\n", capture_output=True, text=True, timeout=120, env=environment,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for secret in (TRUST_PASSWORD, KEY_STORE_PASSWORD):
        assert secret not in result.stdout + result.stderr
    records = read_back_over_tls(
        proxy.bootstrap_servers,
        topic,
        2,
        **{
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca_cert),
            "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key),
            "ssl.key.password": certs.client_key_password,
        },
    )
    assert [value for _, value in records] == [b"first", b"second"]


def test_the_command_line_refuses_java_only_options_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from aioproducer.cli import main

    args = [
        "produce", "--topic", "t",
        "--producer-property", "security.protocol=SASL_SSL",
        "--producer-property", "sasl.login.refresh.window.factor=0.5",
        "--producer-property", "sasl.login.class=com.example.Login",
        "--producer-property", "ssl.truststore.password=cli-SECRET",
    ]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Java client options not supported by aioproducer: sasl.login.refresh.window" in err
    assert "sasl.login.class" in err and "cli-SECRET" not in err
