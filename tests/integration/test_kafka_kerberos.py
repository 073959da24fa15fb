"""Kerberos (SASL GSSAPI) against a real MIT KDC and Apache Kafka.

The module's fixture starts a throwaway realm (:class:`tests.support.kdc.KerberosRealm`:
Debian's ``krb5kdc``, its database in a temporary folder) with the broker's service
principal ``kafka/localhost`` and users with keytabs, then one Kafka node whose listeners
``GSSAPI`` (SASL_PLAINTEXT) and ``GSSAPI_SSL`` (SASL_SSL) take only GSSAPI, with the
broker's own keytab in its JAAS line, and ``GSSAPI_REAUTH``, which grants sessions of a few
seconds (``connections.max.reauth.ms``) so that clients re-authenticate (KIP-368). Clients
reach the broker as ``localhost``: the service principal is built from that name.

What the producer wrote is read back through the PLAINTEXT listener with confluent-kafka
(whose wheel has no GSSAPI).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import AuthenticationError, KafkaError
from tests.support.kafka import BROKER_JVM_OPTIONS, KafkaBroker
from tests.support.passes import compiled_pass_only, refuse_java
from tests.support.readback import read_back
from tests.support.tls import make_certificates

pytestmark = [
    pytest.mark.kafka,
    compiled_pass_only("the GSSAPI exchange is the same Python code in both builds"),
]

_HANG = 90.0
REAUTH_MS = 4000


class Kerberized:
    """The realm, the broker and the users' keytabs."""

    def __init__(self, realm: Any, broker: KafkaBroker, ca: Path, keytabs: dict[str, Path]):
        self.realm = realm
        self.broker = broker
        self.ca = ca
        self.keytabs = keytabs

    def principal(self, user: str) -> str:
        return str(self.realm.principal(user))

    def options(self, user: str = "alice", listener: str = "GSSAPI", **extra: Any) -> Any:
        secure = listener == "GSSAPI_SSL"
        options: dict[str, Any] = {
            "bootstrap_servers": self.broker.address(listener),
            "security_protocol": "SASL_SSL" if secure else "SASL_PLAINTEXT",
            "sasl_mechanism": "GSSAPI",
            "sasl_kerberos_principal": self.principal(user),
            "sasl_kerberos_keytab": str(self.keytabs[user]),
            "max_block_ms": 30000,
        }
        if secure:
            options["ssl_cafile"] = str(self.ca)
        options.update(extra)
        return options


@pytest.fixture(scope="module")
def kerberized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kerberized]:
    from tests.support.kdc import KdcUnavailableError, KerberosRealm, kdc_available

    refuse_java("the Kerberized Kafka broker")
    reason = kdc_available()
    if reason is not None:
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI is set, so the Kerberos tests must run: {reason}", pytrace=False)
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("kerberos")
    certificates = make_certificates(directory / "tls")
    keystore = directory / "broker-keystore.pem"
    keystore.write_bytes(
        certificates.server_key.read_bytes() + certificates.server_cert.read_bytes()
    )
    try:
        realm = KerberosRealm(directory / "realm").start()
    except KdcUnavailableError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        service_keytab = realm.add_principal("kafka/localhost")
        keytabs = {user: realm.add_principal(user) for user in ("alice", "bob")}
        # A user whose tickets live 20 s: renewal shows within a test.
        realm.kadmin(f'addprinc -randkey -maxlife "20 seconds" shortlived@{realm.realm}')
        keytabs["shortlived"] = realm.directory / "shortlived.keytab"
        realm.kadmin(f"ktadd -k {keytabs['shortlived']} shortlived@{realm.realm}")
        # The same, with tickets that can be renewed for ten minutes.
        realm.kadmin(
            f'addprinc -randkey -maxlife "20 seconds" -maxrenewlife "10 minutes" '
            f"renewable@{realm.realm}"
        )
        keytabs["renewable"] = realm.directory / "renewable.keytab"
        realm.kadmin(f"ktadd -k {keytabs['renewable']} renewable@{realm.realm}")
        previous = os.environ.get("KRB5_CONFIG")
        os.environ["KRB5_CONFIG"] = str(realm.krb5_conf)
        service = realm.principal("kafka/localhost")
        jaas = (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            f'storeKey=true keyTab="{service_keytab}" principal="{service}";'
        )
        config: dict[str, object] = {
            "sasl.enabled.mechanisms": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "connection.failed.authentication.delay.ms": 0,
        }
        listeners = {
            "GSSAPI": ("SASL_PLAINTEXT", "localhost"),
            "GSSAPI_SSL": ("SASL_SSL", "localhost"),
            "GSSAPI_REAUTH": ("SASL_PLAINTEXT", "localhost"),
        }
        for name in listeners:
            prefix = f"listener.name.{name.lower()}."
            config[prefix + "gssapi.sasl.jaas.config"] = jaas
        config["listener.name.gssapi_ssl.ssl.keystore.type"] = "PEM"
        config["listener.name.gssapi_ssl.ssl.keystore.location"] = str(keystore)
        config["listener.name.gssapi_reauth.connections.max.reauth.ms"] = REAUTH_MS
        broker = KafkaBroker(
            extra_listeners=listeners,
            jvm_options=(*BROKER_JVM_OPTIONS, f"-Djava.security.krb5.conf={realm.krb5_conf}"),
            config=config,
        )
        try:
            broker.start()
            yield Kerberized(realm, broker, certificates.ca_cert, keytabs)
        finally:
            broker.stop()
            if previous is None:
                os.environ.pop("KRB5_CONFIG", None)
            else:
                os.environ["KRB5_CONFIG"] = previous
    finally:
        realm.stop()


def _topic(kerberized: Kerberized) -> str:
    name = f"krb-{uuid.uuid4().hex[:8]}"
    kerberized.broker.create_topic(name, 1)
    return name


async def _produce(options: dict[str, Any], topic: str, values: list[bytes]) -> None:
    async with Producer(**options) as producer:
        futures = [await producer.send(topic, value) for value in values]
        await asyncio.wait_for(asyncio.gather(*futures), _HANG)


@pytest.mark.parametrize("listener", ["GSSAPI", "GSSAPI_SSL"])
async def test_a_keytab_login_writes_through_both_listeners(
    kerberized: Kerberized, listener: str
) -> None:
    topic = _topic(kerberized)
    values = [b"kerberos-%d" % i for i in range(50)]
    await _produce(kerberized.options(listener=listener), topic, values)
    records = read_back(kerberized.broker.bootstrap_servers, topic, expected=len(values))
    assert [r.value for r in records] == values


async def test_a_ticket_cache_filled_by_kinit_is_used(
    kerberized: Kerberized, tmp_path: Path
) -> None:
    cache = tmp_path / "krb5cc_alice"
    kerberized.realm.kinit("alice", kerberized.keytabs["alice"], cache)
    topic = _topic(kerberized)
    options = kerberized.options(sasl_kerberos_ccache=f"FILE:{cache}")
    del options["sasl_kerberos_keytab"]
    del options["sasl_kerberos_principal"]  # the cache's own principal
    await _produce(options, topic, [b"from the ticket cache"])
    records = read_back(kerberized.broker.bootstrap_servers, topic, expected=1)
    assert [r.value for r in records] == [b"from the ticket cache"]


async def test_the_java_clients_jaas_line_works_unchanged(kerberized: Kerberized) -> None:
    topic = _topic(kerberized)
    keytab = kerberized.keytabs["bob"]
    java = {
        "bootstrap.servers": kerberized.broker.address("GSSAPI"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        "sasl.jaas.config": (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            f'storeKey=true keyTab="{keytab}" principal="{kerberized.principal("bob")}";'
        ),
    }
    async with Producer(java) as producer:
        assert producer.config.sasl_kerberos_keytab == str(keytab)
        await asyncio.wait_for(producer.send_and_wait(topic, b"from a Java line"), _HANG)
    records = read_back(kerberized.broker.bootstrap_servers, topic, expected=1)
    assert [r.value for r in records] == [b"from a Java line"]


@pytest.mark.parametrize("case", ["keytab of another principal", "unknown principal"])
async def test_a_wrong_keytab_or_principal_fails_at_once_saying_what_to_check(
    kerberized: Kerberized, case: str
) -> None:
    if case == "keytab of another principal":
        options = kerberized.options(sasl_kerberos_keytab=str(kerberized.keytabs["bob"]))
    else:
        options = kerberized.options(sasl_kerberos_principal=f"nobody@{kerberized.realm.realm}")
    producer = Producer(**options)
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as caught:
        await asyncio.wait_for(producer.start(), _HANG)
    await producer.close()
    # Refused credentials are not retried until max_block_ms.
    assert time.monotonic() - started < 20.0
    message = str(caught.value)
    assert message.startswith("SASL GSSAPI: could not log in to Kerberos as ")
    assert options["sasl_kerberos_principal"] in message
    assert options["sasl_kerberos_keytab"] in message
    assert "Check the principal and the keytab" in message
    assert not caught.value.retriable


async def test_a_wrong_service_name_is_named_as_such(kerberized: Kerberized) -> None:
    producer = Producer(**kerberized.options(sasl_kerberos_service_name="kakfa"))
    with pytest.raises(AuthenticationError) as caught:
        await asyncio.wait_for(producer.start(), _HANG)
    await producer.close()
    message = str(caught.value)
    assert "knows no service principal kakfa/localhost" in message, message
    assert "Check sasl_kerberos_service_name" in message


async def test_tickets_that_expire_are_got_again_and_reauthentication_goes_on(
    kerberized: Kerberized,
) -> None:
    # shortlived's tickets last 20 s, and the GSSAPI_REAUTH listener's sessions 4 s: over
    # 30 s the producer re-authenticates (KIP-368) several times, past the expiry of its
    # first ticket, and every record is delivered.
    topic = _topic(kerberized)
    options = kerberized.options("shortlived", listener="GSSAPI_REAUTH")
    sent: list[bytes] = []
    async with Producer(**options) as producer:
        deadline = time.monotonic() + 30.0
        number = 0
        while time.monotonic() < deadline:
            value = b"r-%05d" % number
            await asyncio.wait_for(producer.send_and_wait(topic, value), _HANG)
            sent.append(value)
            number += 1
            await asyncio.sleep(0.25)
        metrics = producer.metrics()
    assert metrics["successful-reauthentication-total"] >= 3, metrics
    assert metrics["failed-reauthentication-total"] == 0
    records = read_back(kerberized.broker.bootstrap_servers, topic, expected=len(sent))
    assert [r.value for r in records] == sent


async def test_a_ticket_cache_is_renewed_while_the_producer_writes(
    kerberized: Kerberized, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A ticket that lives 20 s and may be renewed for 10 minutes, in a cache filled by
    # kinit; the GSSAPI_REAUTH listener asks for re-authentication every 4 s. Over 30 s the
    # producer renews the cache (kinit -R) before the ticket expires, and re-authenticates
    # with the renewed ticket past the first one's expiry: every record is delivered.
    caplog.set_level(logging.INFO, logger="aioproducer.net")
    cache = tmp_path / "krb5cc_renewable"
    kerberized.realm.kinit(
        "renewable", kerberized.keytabs["renewable"], cache, lifetime="20s", renewable="10m"
    )
    topic = _topic(kerberized)
    options = kerberized.options(
        listener="GSSAPI_REAUTH",
        sasl_kerberos_ccache=f"FILE:{cache}",
        sasl_kerberos_min_time_before_relogin=1000,
    )
    del options["sasl_kerberos_keytab"]
    del options["sasl_kerberos_principal"]
    sent: list[bytes] = []
    async with Producer(**options) as producer:
        deadline = time.monotonic() + 30.0
        number = 0
        while time.monotonic() < deadline:
            value = b"c-%05d" % number
            await asyncio.wait_for(producer.send_and_wait(topic, value), _HANG)
            sent.append(value)
            number += 1
            await asyncio.sleep(0.25)
        metrics = producer.metrics()
    assert metrics["successful-reauthentication-total"] >= 3, metrics
    assert metrics["failed-reauthentication-total"] == 0
    renewed = [r.getMessage() for r in caplog.records if "renewed the Kerberos" in r.getMessage()]
    assert renewed and renewed[0].startswith(f"renewed the Kerberos ticket in FILE:{cache};")
    records = read_back(kerberized.broker.bootstrap_servers, topic, expected=len(sent))
    assert [r.value for r in records] == sent


@pytest.mark.spark
def test_a_spark_jobs_kerberos_jaas_line_works_unchanged(kerberized: Kerberized) -> None:
    import subprocess
    import sys

    topic = _topic(kerberized)
    keytab = kerberized.keytabs["alice"]
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        f'storeKey=true keyTab="{keytab}" principal="{kerberized.principal("alice")}";'
    )
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.spark_kerberos_job",
         kerberized.broker.address("GSSAPI"), topic, jaas, "2000"],
        env={**os.environ, "PYTHONPATH": path, "PYSPARK_PYTHON": sys.executable,
             "KRB5_CONFIG": str(kerberized.realm.krb5_conf)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_back(kerberized.broker.bootstrap_servers, topic, expected=2000)
    assert sorted(int(r.value or b"-1") for r in records) == list(range(2000))


@pytest.mark.parametrize("kdc", ["refuses connections", "never answers"])
async def test_a_kdc_that_cannot_be_reached_is_retried_until_max_block_ms(
    kerberized: Kerberized, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kdc: str
) -> None:
    # The realm's KDC at a port where nothing listens, or where a listener takes
    # connections and never answers: a KDC outage, not a refusal.
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        if kdc == "never answers":
            bound.listen(8)
        dead = bound.getsockname()[1]
        conf = tmp_path / "krb5.conf"
        conf.write_text(
            kerberized.realm.krb5_conf.read_text().replace(
                f"127.0.0.1:{kerberized.realm.port}", f"127.0.0.1:{dead}"
            )
        )
        monkeypatch.setenv("KRB5_CONFIG", str(conf))
        # A principal whose tickets no process has yet: the KDC must be asked.
        keytab = kerberized.realm.add_principal(f"carol{uuid.uuid4().hex[:6]}")
        options = kerberized.options(max_block_ms=3000)
        options["sasl_kerberos_principal"] = kerberized.principal(keytab.stem)
        options["sasl_kerberos_keytab"] = str(keytab)
        producer = Producer(**options)
        started = time.monotonic()
        with pytest.raises(KafkaError) as caught:
            await asyncio.wait_for(producer.start(), _HANG)
        waited = time.monotonic() - started
        await producer.close()
    if kdc == "refuses connections":
        assert "Kerberos KDC could not be reached" in str(caught.value), str(caught.value)
    else:
        # max_block_ms ends while the KDC is still asked (within request_timeout_ms).
        assert "still waiting for the Kerberos KDC" in str(caught.value), str(caught.value)
    # What to check is the KDC, not the broker (which answered).
    assert "the Kerberos KDC that krb5.conf" in str(caught.value), str(caught.value)
    assert "nothing listens at that address" not in str(caught.value)
    assert not isinstance(caught.value, AuthenticationError)
    assert 2.5 <= waited < 30.0, waited  # retried until max_block_ms, not refused at once
