"""TLS, SASL and ACLs on Apache Kafka's own listeners.

The ``kafka_secure`` node (tests.support.kafka.SecureKafka) serves SSL, SASL_PLAINTEXT and
SASL_SSL with PLAIN, SCRAM-SHA-256/512 (credentials written at format time) and OAUTHBEARER
(Kafka's unsecured JWT validator), and enforces ACLs with the StandardAuthorizer. What the
producer wrote is read back by confluent-kafka through the node's PLAINTEXT listener.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from aioproducer import Producer
from aioproducer.errors import (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailedError,
    SslError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tests.support.kafka import SecureKafka
from tests.support.readback import read_back

pytestmark = pytest.mark.kafka

T = TypeVar("T")

# Every test ends well before this; it only turns a hang into a failure.
_HANG = 60.0
# Far longer than _HANG: a start() that waited out max_block_ms would hang instead.
_NEVER = 600_000

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


async def _within_limit(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, _HANG)


def _unsecured_jwt(subject: str, *, lifetime: float = 3600.0) -> str:
    """A JWT with ``alg: none``, as Kafka's unsecured validator accepts."""

    def part(claims: dict[str, Any]) -> str:
        raw = json.dumps(claims, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    # Whole seconds, as JWT NumericDates usually are: Kafka's unsecured validator allows no
    # clock skew, and reads "now" a little before it validates, so a fractional iat from
    # this very millisecond can be "in the future" to it.
    now = int(time.time()) - 1
    claims = {"sub": subject, "iat": now, "exp": now + round(lifetime)}
    return f"{part({'alg': 'none'})}.{part(claims)}."


class TokenSource:
    """An OAUTHBEARER token provider: a coroutine ``token()``, counting its calls."""

    def __init__(self, subject: str, *, lifetime: float = 3600.0) -> None:
        self.subject = subject
        self.lifetime = lifetime
        self.calls = 0

    async def token(self) -> str:
        self.calls += 1
        return _unsecured_jwt(self.subject, lifetime=self.lifetime)


def _sasl(mechanism: str, user: str, password: str) -> dict[str, Any]:
    if mechanism == "OAUTHBEARER":
        return {"sasl_mechanism": mechanism, "sasl_oauth_token_provider": TokenSource(user)}
    return {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def _topic(secure: SecureKafka, prefix: str, partitions: int = 1) -> str:
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    secure.create_topic(name, partitions)
    return name


async def _produce_and_read_back(secure: SecureKafka, producer: Producer, topic: str) -> None:
    """Send ten keyed records, then check what the broker stored."""
    sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(10)]
    async with producer:
        futures = [await producer.send(topic, value, key=key) for key, value in sent]
        await _within_limit(asyncio.gather(*futures))
    records = read_back(secure.broker.bootstrap_servers, topic, expected=len(sent))
    assert [(record.key, record.value) for record in records] == sent


# -- re-authentication (KIP-368) -------------------------------------------------------


@pytest.mark.parametrize(("mechanism", "acks"), [("SCRAM-SHA-256", 0), ("OAUTHBEARER", 1)])
async def test_sessions_are_renewed_before_the_broker_ends_them(
    kafka_secure: SecureKafka, mechanism: str, acks: int
) -> None:
    """The SASL_REAUTH listener grants sessions of REAUTH_SESSION_MS: the producer
    re-authenticates on the same connections before each ends, so the broker never closes
    one under it, and no record is lost, even with acks=0 (where a closed connection would
    drop the request without a word)."""
    user = SecureKafka.SUPER_USER
    topic = _topic(kafka_secure, "reauth-")
    options = _sasl(mechanism, user, kafka_secure.passwords[user])
    producer = Producer(
        bootstrap_servers=kafka_secure.address("SASL_REAUTH"),
        security_protocol="SASL_PLAINTEXT",
        acks=acks,
        enable_idempotence=False,
        linger_ms=2,
        **options,
    )
    sent: list[bytes] = []
    async with producer:

        async def produce_through_sessions() -> dict[str, float]:
            # Every connection renews its session at least twice while records flow.
            while True:
                metrics = producer.metrics()
                if metrics["successful-reauthentication-total"] >= 2 * max(
                    metrics["connection-count"], 1
                ):
                    return metrics
                value = f"record-{len(sent)}".encode()
                sent.append(value)
                await producer.send(topic, value)
                await asyncio.sleep(0.01)

        metrics = await _within_limit(produce_through_sessions())
        await _within_limit(producer.flush())
    assert metrics["failed-reauthentication-total"] == 0
    # Renewed, never dropped and set up again.
    assert metrics["connection-close-total"] == 0, metrics
    assert metrics["connection-creation-total"] == metrics["connection-count"], metrics
    records = read_back(kafka_secure.broker.bootstrap_servers, topic, expected=len(sent))
    assert [record.value for record in records] == sent
    if mechanism == "OAUTHBEARER":
        # A fresh token for each session.
        assert options["sasl_oauth_token_provider"].calls >= 3


def _set_scram_password(secure: SecureKafka, user: str, password: str) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode()
    )
    admin = secure.broker.admin()
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(timeout=30.0)


async def test_a_password_changed_while_producing_fails_records_at_the_next_session(
    kafka_secure: SecureKafka,
) -> None:
    """The user's password changes on the broker while the producer runs on the
    SASL_REAUTH listener: the next re-authentication is refused, and the records waiting
    then fail with the broker's SaslAuthenticationFailedError (not retriable), well within
    delivery_timeout_ms; the ones acknowledged before stay stored."""
    user = f"rotating-{uuid.uuid4().hex[:8]}"
    password = "first-secret-password"
    _set_scram_password(kafka_secure, user, password)
    kafka_secure.allow(user, ["WRITE", "DESCRIBE"], topic_prefix="rotate-")
    topic = _topic(kafka_secure, "rotate-")

    def make() -> Producer:
        return Producer(
            bootstrap_servers=kafka_secure.address("SASL_REAUTH"),
            security_protocol="SASL_PLAINTEXT",
            acks=1,
            enable_idempotence=False,
            delivery_timeout_ms=_NEVER,
            max_block_ms=_NEVER,
            request_timeout_ms=_NEVER // 2,
            **_sasl("SCRAM-SHA-256", user, password),
        )

    async def started() -> Producer:
        # The new user reaches the broker through the metadata log: until then, refused.
        while True:
            producer = make()
            try:
                await producer.start()
                return producer
            except SaslAuthenticationFailedError:
                await producer.close()
                await asyncio.sleep(0.1)

    producer = await _within_limit(started())
    delivered: list[bytes] = []
    try:
        await _within_limit(await producer.send(topic, b"before"))
        delivered.append(b"before")
        _set_scram_password(kafka_secure, user, "second-secret-password")

        async def until_refused() -> SaslAuthenticationFailedError:
            index = 0
            while True:
                value = f"after-{index}".encode()
                index += 1
                future = await producer.send(topic, value)
                try:
                    await future
                except SaslAuthenticationFailedError as exc:
                    return exc
                delivered.append(value)
                await asyncio.sleep(0.01)

        refused = await _within_limit(until_refused())
        assert not refused.retriable
        assert "secret-password" not in str(refused)
        assert producer.metrics()["failed-reauthentication-total"] >= 1
    finally:
        await producer.close(timeout=0)
    records = read_back(kafka_secure.broker.bootstrap_servers, topic, expected=len(delivered))
    assert [record.value for record in records] == delivered


# -- TLS -------------------------------------------------------------------------------


async def test_tls_with_a_trusted_ca(kafka_secure: SecureKafka) -> None:
    topic = _topic(kafka_secure, "tls-")
    producer = Producer(
        bootstrap_servers=kafka_secure.address("SSL"),
        security_protocol="SSL",
        ssl_cafile=str(kafka_secure.tls.ca_cert),
    )
    await _produce_and_read_back(kafka_secure, producer, topic)


async def test_an_untrusted_ca_fails_start_at_once(kafka_secure: SecureKafka) -> None:
    producer = Producer(
        bootstrap_servers=kafka_secure.address("SSL"),
        security_protocol="SSL",
        ssl_cafile=str(kafka_secure.untrusted_ca),
        max_block_ms=_NEVER,
    )
    with pytest.raises(SslError) as caught:
        await _within_limit(producer.start())
    message = str(caught.value)
    assert "certificate" in message and "TLS" in message, message
    assert kafka_secure.address("SSL") in message
    assert not caught.value.retriable
    await producer.close()


async def test_plaintext_to_a_tls_listener_fails_start_at_once(
    kafka_secure: SecureKafka,
) -> None:
    producer = Producer(bootstrap_servers=kafka_secure.address("SSL"), max_block_ms=_NEVER)
    with pytest.raises(KafkaError) as caught:
        await _within_limit(producer.start())
    assert "SSL" in str(caught.value)
    await producer.close()


async def test_tls_to_a_plaintext_listener_says_so(kafka_secure: SecureKafka) -> None:
    """Kafka reads the ClientHello as a request size, refuses it and hangs up: the error
    says the handshake was cut off and what to check, not an empty reason."""
    producer = Producer(
        bootstrap_servers=kafka_secure.address("PLAINTEXT"),
        security_protocol="SSL",
        ssl_cafile=str(kafka_secure.tls.ca_cert),
        max_block_ms=1500,
    )
    with pytest.raises(KafkaConnectionError) as caught:
        await _within_limit(producer.start())
    message = str(caught.value)
    assert "TLS handshake" in message and "security_protocol" in message, message
    await producer.close()


async def test_the_host_name_is_verified_unless_the_check_is_off(
    kafka_secure: SecureKafka,
) -> None:
    """The SSL_OTHER_HOST listener's certificate, signed by the trusted CA, names another
    host: refused while the host name is checked, accepted once it is not."""
    address = kafka_secure.address("SSL_OTHER_HOST")
    options: dict[str, Any] = {
        "bootstrap_servers": address,
        "security_protocol": "SSL",
        "ssl_cafile": str(kafka_secure.tls.ca_cert),
        "max_block_ms": _NEVER,
    }
    producer = Producer(**options)
    with pytest.raises(AuthenticationError) as caught:
        await _within_limit(producer.start())
    assert "ssl_check_hostname" in str(caught.value) and address in str(caught.value)
    await producer.close()

    topic = _topic(kafka_secure, "tls-other-host-")
    await _produce_and_read_back(kafka_secure, Producer(ssl_check_hostname=False, **options), topic)


# -- SASL ------------------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_sasl_mechanisms(kafka_secure: SecureKafka, listener: str, mechanism: str) -> None:
    user = SecureKafka.SUPER_USER
    topic = _topic(kafka_secure, "sasl-")
    tls = {"ssl_cafile": str(kafka_secure.tls.ca_cert)} if listener == "SASL_SSL" else {}
    options = _sasl(mechanism, user, kafka_secure.passwords[user])
    producer = Producer(
        bootstrap_servers=kafka_secure.address(listener),
        security_protocol=listener,
        **tls,
        **options,
    )
    await _produce_and_read_back(kafka_secure, producer, topic)
    if mechanism == "OAUTHBEARER":
        assert options["sasl_oauth_token_provider"].calls >= 1


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_wrong_password_fails_start_once_with_no_retries(
    kafka_secure: SecureKafka, mechanism: str
) -> None:
    """The broker refuses the credentials once: start() raises at once (not after
    max_block_ms), and the broker saw exactly one failed authentication."""
    user = SecureKafka.SUPER_USER
    wrong = "not-" + kafka_secure.passwords[user]
    failed_before = kafka_secure.failed_authentications()
    producer = Producer(
        bootstrap_servers=kafka_secure.address("SASL_SSL"),
        security_protocol="SASL_SSL",
        ssl_cafile=str(kafka_secure.tls.ca_cert),
        max_block_ms=_NEVER,
        **_sasl(mechanism, user, wrong),
    )
    with pytest.raises(SaslAuthenticationFailedError) as caught:
        await _within_limit(producer.start())
    assert not caught.value.retriable
    assert wrong not in str(caught.value) and wrong not in repr(producer)
    await producer.close()
    # The broker logs each refusal as it answers it: wait for ours, then count them all.
    deadline = time.monotonic() + _HANG
    while kafka_secure.failed_authentications() == failed_before:
        assert time.monotonic() < deadline, "the broker never logged the failed login"
        await asyncio.sleep(0.05)
    assert kafka_secure.failed_authentications() == failed_before + 1


async def test_an_expired_oauth_token_is_refused(kafka_secure: SecureKafka) -> None:
    tokens = TokenSource(SecureKafka.SUPER_USER, lifetime=-60.0)
    producer = Producer(
        bootstrap_servers=kafka_secure.address("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=tokens,
        max_block_ms=_NEVER,
    )
    with pytest.raises(AuthenticationError) as caught:
        await _within_limit(producer.start())
    assert not caught.value.retriable
    assert tokens.calls == 1
    await producer.close()


# -- ACLs ------------------------------------------------------------------------------


def _limited_producer(secure: SecureKafka, **options: Any) -> Producer:
    user = SecureKafka.LIMITED_USER
    return Producer(
        bootstrap_servers=secure.address("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        **_sasl("SCRAM-SHA-256", user, secure.passwords[user]),
        **options,
    )


@pytest.fixture(scope="module")
def granted(kafka_secure: SecureKafka) -> str:
    """A topic prefix on which the limited user may write and describe; also the prefix of
    the transactional ids it may use. On topics starting with ``described-`` it may only
    describe; everything else is denied to it."""
    prefix = f"granted-{uuid.uuid4().hex[:6]}-"
    user = SecureKafka.LIMITED_USER
    kafka_secure.allow(user, ["WRITE", "DESCRIBE"], topic_prefix=prefix)
    kafka_secure.allow(user, ["DESCRIBE"], topic_prefix="described-")
    kafka_secure.allow(user, ["WRITE", "DESCRIBE"], transactional_id_prefix=prefix)
    return prefix


@pytest.mark.parametrize("denied_prefix", ["hidden-", "described-"])
async def test_a_topic_without_write_permission_fails_alone(
    kafka_secure: SecureKafka, granted: str, denied_prefix: str
) -> None:
    """``hidden-``: the user may not even describe it (Metadata says so);
    ``described-``: it may describe it but not write (the Produce answer says so).
    Either way the send fails with TopicAuthorizationFailedError naming the topic, and
    the same producer goes on writing to the topic it may write."""
    allowed = _topic(kafka_secure, granted)
    denied = _topic(kafka_secure, denied_prefix)
    async with _limited_producer(kafka_secure, max_block_ms=5000) as producer:
        before = await _within_limit(producer.send_and_wait(allowed, b"before"))
        with pytest.raises(TopicAuthorizationFailedError) as caught:
            future = await _within_limit(producer.send(denied, b"denied"))
            await _within_limit(future)
        assert denied in str(caught.value)
        assert not caught.value.retriable
        after = await _within_limit(producer.send_and_wait(allowed, b"after"))
    assert (before.offset, after.offset) == (0, 1)
    records = read_back(kafka_secure.broker.bootstrap_servers, allowed, expected=2)
    assert [record.value for record in records] == [b"before", b"after"]
    nothing = read_back(kafka_secure.broker.bootstrap_servers, denied, expected=0, extra_wait=0.3)
    assert nothing == []


async def test_a_transactional_id_without_permission_is_refused(
    kafka_secure: SecureKafka, granted: str
) -> None:
    topic = _topic(kafka_secure, granted)
    refused = _limited_producer(kafka_secure, transactional_id=f"other-{uuid.uuid4().hex[:8]}")
    with pytest.raises(TransactionalIdAuthorizationFailedError) as caught:
        await _within_limit(refused.start())
    assert not caught.value.retriable
    await refused.close()

    allowed = _limited_producer(kafka_secure, transactional_id=f"{granted}{uuid.uuid4().hex[:8]}")
    async with allowed, allowed.transaction():
        await allowed.send(topic, b"committed")
    records = read_back(
        kafka_secure.broker.bootstrap_servers,
        topic,
        expected=1,
        isolation_level="read_committed",
    )
    assert [record.value for record in records] == [b"committed"]


async def test_sasl_to_a_plaintext_listener_says_so(kafka_secure: SecureKafka) -> None:
    user = SecureKafka.SUPER_USER
    producer = Producer(
        bootstrap_servers=kafka_secure.address("PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        max_block_ms=_NEVER,
        **_sasl("SCRAM-SHA-256", user, kafka_secure.passwords[user]),
    )
    with pytest.raises(IllegalSaslStateError) as caught:
        await _within_limit(producer.start())
    assert "SASL listener" in str(caught.value) and "security_protocol" in str(caught.value)
    await producer.close()


async def test_a_principal_without_any_acl_is_told_what_idempotence_needs(
    kafka_secure: SecureKafka,
) -> None:
    """Kafka lets an idempotent producer in with WRITE on some topic (KIP-679): a user
    with no ACL is refused InitProducerId, and the error says what to grant or turn off.
    Without idempotence the same user gets as far as the topic, and is refused there."""
    topic = _topic(kafka_secure, "guest-")
    user = SecureKafka.GUEST_USER
    options = _sasl("PLAIN", user, kafka_secure.passwords[user])
    address = kafka_secure.address("SASL_PLAINTEXT")
    idempotent = Producer(
        bootstrap_servers=address, security_protocol="SASL_PLAINTEXT", max_block_ms=5000, **options
    )
    with pytest.raises(ClusterAuthorizationFailedError) as caught:
        await _within_limit(idempotent.start())
    assert "WRITE" in str(caught.value) and "enable_idempotence=False" in str(caught.value)
    await idempotent.close()

    plain = Producer(
        bootstrap_servers=address,
        security_protocol="SASL_PLAINTEXT",
        enable_idempotence=False,
        max_block_ms=5000,
        **options,
    )
    async with plain:
        with pytest.raises(TopicAuthorizationFailedError) as refused:
            await _within_limit(plain.send_and_wait(topic, b"x"))
        assert topic in str(refused.value)
