"""TLS and SASL end to end: the public Producer against Tansu behind a TLS terminator and behind
a scripted SASL broker, read back with confluent-kafka (librdkafka's own TLS and SASL clients).

Tansu's packaged build cannot serve TLS or SASL itself, so:

- TLS: :class:`~tests.support.tls.TlsProxy` terminates TLS in front of Tansu, with a CA and
  certificates made at test time. The broker advertises the proxy's port, so every connection
  the producer makes after bootstrapping goes through TLS too.
- SASL: :class:`~tests.support.sasl_broker.ScriptedSaslBroker` (scramp on the SCRAM server
  side) authenticates, then pipes the connection to Tansu; it can also serve TLS (SASL_SSL).

The proxies run on an event loop in a background thread, so the blocking read-back consumer
and the producer's own loop can both use them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import confluent_kafka
import pytest

from aioproducer import Producer
from aioproducer.errors import (
    AuthenticationError,
    ConfigurationError,
    SaslAuthenticationFailedError,
    SslError,
)
from tests.support.sasl_broker import ScriptedSaslBroker
from tests.support.tls import (
    BackgroundLoop,
    TlsFiles,
    TlsProxy,
    advertising_broker,
    client_context,
    free_port,
    make_certificates,
    server_context,
)

if TYPE_CHECKING:
    from aioproducer.embedded import EmbeddedBroker

pytestmark = pytest.mark.tansu

# A safety net so that a broken test fails instead of hanging; never a measured threshold.
PATIENCE = 20.0
# Far longer than PATIENCE: a start() that retried a refused handshake would time out.
NEVER = 600_000
USER = "alice"
PASSWORD = "alice-secret-password"
TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJib2IifQ.dG9rZW4"


@dataclass
class Front:
    """A Tansu broker reachable only through ``front``, which it advertises."""

    bootstrap_servers: str
    broker: EmbeddedBroker
    front: Any

    def new_topic(self) -> str:
        name = f"security-{uuid.uuid4().hex[:12]}"
        self.broker.create_topic(name, partitions=1)
        return name


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def background() -> Iterator[BackgroundLoop]:
    with BackgroundLoop() as loop:
        yield loop


def _front(
    directory: Path, background: BackgroundLoop, make: Any
) -> Iterator[tuple[EmbeddedBroker, Any]]:
    port = free_port()
    broker = advertising_broker(directory, ("127.0.0.1", port))
    broker.start()
    try:
        front = make(broker, port)
        background.run(front.start())
        try:
            yield broker, front
        finally:
            background.run(front.close())
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def tls_front(
    certs: TlsFiles, background: BackgroundLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Front]:
    """Tansu behind a TLS proxy with a certificate signed by the test CA."""

    def make(broker: EmbeddedBroker, port: int) -> TlsProxy:
        return TlsProxy((broker.host, broker.port), server_context(certs), port=port)

    for broker, proxy in _front(tmp_path_factory.mktemp("tls"), background, make):
        yield Front(proxy.bootstrap_servers, broker, proxy)


def _sasl_front(
    certs: TlsFiles | None, background: BackgroundLoop, directory: Path
) -> Iterator[Front]:
    def make(broker: EmbeddedBroker, port: int) -> ScriptedSaslBroker:
        return ScriptedSaslBroker(
            users={USER: PASSWORD},
            tokens={TOKEN: "bob"},
            upstream=(broker.host, broker.port),
            ssl_context=server_context(certs) if certs is not None else None,
            port=port,
        )

    for broker, sasl in _front(directory, background, make):
        yield Front(sasl.bootstrap_servers, broker, sasl)


@pytest.fixture(scope="module")
def sasl_ssl_front(
    certs: TlsFiles, background: BackgroundLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Front]:
    """Tansu behind the scripted SASL broker, serving TLS."""
    yield from _sasl_front(certs, background, tmp_path_factory.mktemp("sasl-ssl"))


@pytest.fixture(scope="module")
def sasl_plaintext_front(
    background: BackgroundLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Front]:
    """Tansu behind the scripted SASL broker, without TLS."""
    yield from _sasl_front(None, background, tmp_path_factory.mktemp("sasl-plain"))


@pytest.fixture
def proxy_to_tansu(
    tansu: EmbeddedBroker, background: BackgroundLoop, certs: TlsFiles
) -> Iterator[Any]:
    """``proxy_to_tansu(**server_context_options) -> TlsProxy`` in front of the shared Tansu.

    Tansu advertises its own plaintext port, so these serve bootstrapping only: enough for
    Producer.start() (ApiVersions, Metadata, InitProducerId on the bootstrap connection).
    """
    proxies: list[TlsProxy] = []

    def make(**options: Any) -> TlsProxy:
        proxy = TlsProxy((tansu.host, tansu.port), server_context(certs, **options))
        background.run(proxy.start())
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        background.run(proxy.close())


def read_back(bootstrap: str, topic: str, expected: int, **config: Any) -> list[tuple[Any, Any]]:
    """``(key, value)`` of the records of partition 0, read with confluent-kafka."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"security-readback-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 3,
            "fetch.wait.max.ms": 100,
            **config,
        }
    )
    records: list[tuple[Any, Any]] = []
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        deadline = time.monotonic() + 30.0
        while len(records) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.2):
                error = message.error()
                if error is not None:
                    assert not error.fatal(), error
                    continue
                records.append((message.key(), message.value()))
    finally:
        consumer.close()
    return records


async def produce(producer: Producer, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(count)]
    await asyncio.wait_for(producer.start(), PATIENCE)
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in sent]
        await asyncio.wait_for(asyncio.gather(*futures), PATIENCE)
    except BaseException:
        await producer.close(timeout=0)  # do not wait out delivery_timeout_ms on failure
        raise
    await producer.close()
    return sent


# ---- TLS ---------------------------------------------------------------------------------


async def test_produce_over_tls_and_read_back(tls_front: Front, certs: TlsFiles) -> None:
    topic = tls_front.new_topic()
    accepted_before = tls_front.front.accepted
    producer = Producer(
        bootstrap_servers=tls_front.bootstrap_servers,
        security_protocol="SSL",
        ssl_cafile=str(certs.ca_cert),
    )
    sent = await produce(producer, topic, 25)
    # The bootstrap connection and the leader's (the advertised proxy) both went through TLS.
    assert tls_front.front.accepted - accepted_before >= 2
    records = read_back(
        tls_front.bootstrap_servers,
        topic,
        len(sent),
        **{"security.protocol": "SSL", "ssl.ca.location": str(certs.ca_cert)},
    )
    assert records == sent


async def test_verification_off_with_a_cert_none_context(tls_front: Front, certs: TlsFiles) -> None:
    topic = tls_front.new_topic()
    producer = Producer(
        bootstrap_servers=tls_front.bootstrap_servers,
        security_protocol="SSL",
        ssl_context=client_context(verify=False),
    )
    sent = await produce(producer, topic, 3)
    records = read_back(
        tls_front.bootstrap_servers,
        topic,
        len(sent),
        **{"security.protocol": "SSL", "ssl.ca.location": str(certs.ca_cert)},
    )
    assert records == sent


async def test_a_context_that_does_not_verify_is_warned_about_once(
    tls_front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    unverified = client_context(verify=False)
    with caplog.at_level(logging.WARNING, logger="aioproducer"):
        for _ in range(2):
            producer = Producer(
                bootstrap_servers=tls_front.bootstrap_servers,
                security_protocol="SSL",
                ssl_context=unverified,
            )
            await asyncio.wait_for(producer.start(), PATIENCE)
            await producer.close()
    warnings = [r.getMessage() for r in caught_records(caplog) if "ssl_context" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "CERT_NONE" in warnings[0] and "pose as the broker" in warnings[0]


async def test_a_changed_ca_file_is_read_again(
    tls_front: Front, certs: TlsFiles, tmp_path: Path
) -> None:
    """TLS contexts built from the ssl_* files are shared, until a file changes: a CA
    removed from the file (here: replaced by another CA) is no longer trusted."""
    cafile = tmp_path / "ca.pem"
    cafile.write_bytes(certs.ca_cert.read_bytes())
    options: dict[str, Any] = {
        "bootstrap_servers": tls_front.bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_cafile": str(cafile),
        "max_block_ms": NEVER,
    }
    trusted = Producer(**options)
    await asyncio.wait_for(trusted.start(), PATIENCE)
    await trusted.close()

    cafile.write_bytes(make_certificates(tmp_path / "other").ca_cert.read_bytes())
    distrusted = Producer(**options)
    with pytest.raises(SslError, match="certificate"):
        await asyncio.wait_for(distrusted.start(), PATIENCE)
    await distrusted.close()


async def test_an_untrusted_certificate_fails_start_at_once(tls_front: Front) -> None:
    # No ssl_cafile: the system's CAs do not know the test CA.
    producer = Producer(
        bootstrap_servers=tls_front.bootstrap_servers, security_protocol="SSL", max_block_ms=NEVER
    )
    with pytest.raises(SslError) as caught:
        await asyncio.wait_for(producer.start(), PATIENCE)
    assert isinstance(caught.value, AuthenticationError)
    message = str(caught.value)
    assert tls_front.bootstrap_servers in message
    assert "certificate" in message and "ssl_cafile" in message
    assert not caught.value.retriable
    await producer.close()


async def test_plaintext_to_a_tls_listener_fails_start_at_once() -> None:
    # A TLS server answering plaintext bytes with a fatal alert (protocol_version): the
    # alert's record header arrives where a Kafka size prefix should be.
    async def tls_listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(64)
        writer.write(b"\x15\x03\x03\x00\x02\x02\x46")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(tls_listener, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    producer = Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=NEVER)
    try:
        with pytest.raises(ConfigurationError, match="expects security_protocol='SSL'") as caught:
            await asyncio.wait_for(producer.start(), PATIENCE)
        assert not caught.value.retriable
    finally:
        await producer.close()
        server.close()
        await server.wait_closed()


async def test_a_host_name_mismatch_is_refused_unless_the_check_is_off(
    proxy_to_tansu: Any, certs: TlsFiles
) -> None:
    proxy = proxy_to_tansu(wrong_host=True)  # a certificate for broker.invalid only
    options: dict[str, Any] = {
        "bootstrap_servers": proxy.bootstrap_servers,
        "security_protocol": "SSL",
        "max_block_ms": NEVER,
    }
    producer = Producer(ssl_cafile=str(certs.ca_cert), **options)
    with pytest.raises(AuthenticationError, match="ssl_check_hostname") as caught:
        await asyncio.wait_for(producer.start(), PATIENCE)
    assert proxy.bootstrap_servers in str(caught.value)
    await producer.close()

    # Only the host name check goes: the chain must still lead to a trusted CA.
    producer = Producer(ssl_check_hostname=False, **options)
    with pytest.raises(AuthenticationError, match="ssl_cafile"):
        await asyncio.wait_for(producer.start(), PATIENCE)
    await producer.close()

    accepted_before = proxy.accepted
    producer = Producer(ssl_cafile=str(certs.ca_cert), ssl_check_hostname=False, **options)
    await asyncio.wait_for(producer.start(), PATIENCE)
    await producer.close()
    assert proxy.accepted > accepted_before


async def test_client_certificates(proxy_to_tansu: Any, certs: TlsFiles) -> None:
    proxy = proxy_to_tansu(require_client_cert=True)
    options: dict[str, Any] = {
        "bootstrap_servers": proxy.bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca_cert),
        "max_block_ms": NEVER,
    }
    producer = Producer(
        ssl_certfile=str(certs.client_cert),
        ssl_keyfile=str(certs.client_key),
        ssl_password=certs.client_key_password,
        **options,
    )
    await asyncio.wait_for(producer.start(), PATIENCE)
    await producer.close()

    # Without one the broker refuses the handshake; TLS 1.3 reports it after the client's
    # side is done, and that must not pass for a network failure worth retrying.
    producer = Producer(**options)
    with pytest.raises(AuthenticationError, match="client certificate") as caught:
        await asyncio.wait_for(producer.start(), PATIENCE)
    assert certs.client_key_password not in repr(producer)
    assert not caught.value.retriable
    await producer.close()


# ---- SASL ---------------------------------------------------------------------------------


class AsyncTokenProvider:
    async def token(self) -> str:
        await asyncio.sleep(0)
        return TOKEN


def _sasl_options(mechanism: str) -> dict[str, Any]:
    if mechanism == "OAUTHBEARER":
        return {"sasl_mechanism": mechanism, "sasl_oauth_token_provider": AsyncTokenProvider()}
    return {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
async def test_produce_over_sasl_ssl_and_read_back(
    sasl_ssl_front: Front, certs: TlsFiles, mechanism: str
) -> None:
    topic = sasl_ssl_front.new_topic()
    sasl: ScriptedSaslBroker = sasl_ssl_front.front
    attempts_before = len(sasl.attempts)
    producer = Producer(
        bootstrap_servers=sasl_ssl_front.bootstrap_servers,
        security_protocol="SASL_SSL",
        ssl_cafile=str(certs.ca_cert),
        **_sasl_options(mechanism),
    )
    sent = await produce(producer, topic, 10)
    ours = sasl.attempts[attempts_before:]
    assert ours and all(a.mechanism == mechanism and a.succeeded for a in ours)
    # librdkafka authenticates against the same scripted broker: an independent client.
    records = read_back(
        sasl_ssl_front.bootstrap_servers,
        topic,
        len(sent),
        **{
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca_cert),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        },
    )
    assert records == sent


async def test_produce_over_sasl_plaintext_and_read_back(sasl_plaintext_front: Front) -> None:
    topic = sasl_plaintext_front.new_topic()
    producer = Producer(
        bootstrap_servers=sasl_plaintext_front.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        **_sasl_options("SCRAM-SHA-256"),
    )
    sent = await produce(producer, topic, 10)
    records = read_back(
        sasl_plaintext_front.bootstrap_servers,
        topic,
        len(sent),
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        },
    )
    assert records == sent


async def test_a_wrong_password_over_sasl_ssl_fails_start_at_once(
    sasl_ssl_front: Front, certs: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    producer = Producer(
        bootstrap_servers=sasl_ssl_front.bootstrap_servers,
        security_protocol="SASL_SSL",
        ssl_cafile=str(certs.ca_cert),
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=USER,
        sasl_plain_password="not-" + PASSWORD,
        max_block_ms=NEVER,
    )
    with (
        caplog.at_level(logging.DEBUG, logger="aioproducer"),
        pytest.raises(SaslAuthenticationFailedError) as caught,
    ):
        await asyncio.wait_for(producer.start(), PATIENCE)
    assert PASSWORD not in str(caught.value) and PASSWORD not in repr(producer)
    await producer.close()
    # Logged once, as an error that retrying will not fix: not a warning that says
    # "retrying", and never the password.
    failures = [r for r in caught_records(caplog) if "authentication" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.ERROR], [r.getMessage() for r in failures]
    assert "retrying" not in failures[0].getMessage()
    assert PASSWORD not in caplog.text


async def test_credentials_refused_after_start_fail_the_waiting_sends_with_the_cause(
    sasl_plaintext_front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker stops taking the producer's password while it runs (rotated on the server
    side): the next connection is refused, and records waiting for that broker fail with
    the broker's refusal, not a DeliveryTimeoutError minutes later; a send that waits for
    metadata does too, not "not present in metadata" after max_block_ms. Each broker's
    refusal is logged once, at ERROR; once the password is taken again, sending works."""
    sasl: ScriptedSaslBroker = sasl_plaintext_front.front
    topic = sasl_plaintext_front.new_topic()
    producer = Producer(
        bootstrap_servers=sasl_plaintext_front.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        delivery_timeout_ms=NEVER,
        max_block_ms=NEVER,
        request_timeout_ms=NEVER // 2,
        **_sasl_options("PLAIN"),
    )
    await asyncio.wait_for(producer.start(), PATIENCE)
    try:
        await asyncio.wait_for(await producer.send(topic, b"before"), PATIENCE)
        sasl.users[USER] = "rotated-" + PASSWORD
        await _drop(sasl)
        # Created now, so the producer's metadata cannot know it yet.
        other_topic = sasl_plaintext_front.new_topic()
        with caplog.at_level(logging.DEBUG, logger="aioproducer"):
            future = await producer.send(topic, b"refused")
            with pytest.raises(SaslAuthenticationFailedError) as refused:
                await asyncio.wait_for(future, PATIENCE)
            assert not refused.value.retriable
            with pytest.raises(SaslAuthenticationFailedError):
                await asyncio.wait_for(producer.send(other_topic, b"refused too"), PATIENCE)
        errors = [
            r.getMessage()
            for r in caught_records(caplog)
            if r.levelno >= logging.ERROR and "authentication" in r.getMessage()
        ]
        refusals = [
            m for m in errors if "SASL PLAIN authentication with" in m and "record(s)" not in m
        ]
        # One line per broker address refused (the bootstrap server and node 0 are the
        # same address here), however many attempts the sends made.
        assert len(refusals) == 1, errors
        assert "retrying" not in refusals[0]
        # The records it failed are named too, at ERROR.
        assert any(m.startswith("failing 1 record(s)") for m in errors), errors
        assert PASSWORD not in caplog.text
    finally:
        sasl.users[USER] = PASSWORD
    try:
        # Taken again: the producer connects anew and delivers.
        metadata = await asyncio.wait_for(await producer.send(topic, b"after"), PATIENCE)
        assert metadata.offset == 1
    finally:
        await producer.close(timeout=0)
    records = read_back(
        sasl_plaintext_front.bootstrap_servers,
        topic,
        2,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        },
    )
    assert [value for _, value in records] == [b"before", b"after"]


async def _drop(server: ScriptedSaslBroker) -> None:
    """End every connection to ``server`` (which runs on the background loop)."""
    loop = server._server.get_loop() if server._server is not None else None
    assert loop is not None
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(server.drop_connections(), loop))


def caught_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records aioproducer logged at WARNING or above."""
    return [
        r
        for r in caplog.records
        if r.name.startswith("aioproducer") and r.levelno >= logging.WARNING
    ]
