"""SASL: the sans-I/O mechanisms against the RFC test vectors and scramp, and the connection's
SaslHandshake/SaslAuthenticate exchange against a scripted broker (tests/support/sasl_broker.py)
whose SCRAM side is the independent ``scramp`` library.

No real broker: these run offline. Produce round trips over SASL are in
tests/integration/test_security.py.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import scramp
import uvloop

from aioproducer import Producer
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    AuthenticationError,
    ConfigurationError,
    IllegalStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from aioproducer.net import BrokerConnection, ConnectionState
from aioproducer.net.sasl import (
    MIN_SCRAM_ITERATIONS,
    OAuthBearerMechanism,
    PlainMechanism,
    SaslMechanism,
    ScramMechanism,
    create_mechanism,
    fetch_oauth_token,
)
from tests.support.sasl_broker import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    ScriptedSaslBroker,
)

T = TypeVar("T")
Runner = Callable[[Coroutine[Any, Any, T]], T]

# A safety net so that a broken test fails instead of hanging; never a measured threshold.
PATIENCE = 10.0
USER = "alice"
PASSWORD = "pa55-w0rd-do-not-show"
TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJib2IifQ.c2VjcmV0LXRva2Vu"


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Iterator[Runner[Any]]:
    """Run a coroutine to completion on a fresh loop of each kind."""
    factory = asyncio.new_event_loop if request.param == "asyncio" else uvloop.new_event_loop

    def runner(coroutine: Coroutine[Any, Any, T]) -> T:
        loop = factory()
        try:
            return loop.run_until_complete(asyncio.wait_for(coroutine, PATIENCE * 3))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    yield runner


def drive(mechanism: SaslMechanism, server: Callable[[bytes], bytes]) -> None:
    """Run an exchange in memory: ``server`` maps each client message to its answer."""
    message: bytes | None = mechanism.initial_response()
    while message is not None:
        message = mechanism.respond(server(message))


# ---- SCRAM: RFC test vectors -------------------------------------------------------------


def test_scram_sha_256_matches_the_rfc_7677_example() -> None:
    mechanism = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert mechanism.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    client_final = mechanism.respond(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client_final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert not mechanism.complete
    assert mechanism.respond(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert mechanism.complete


def test_scram_sha_1_matches_the_rfc_5802_example() -> None:
    mechanism = ScramMechanism("SCRAM-SHA-1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert mechanism.initial_response() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    client_final = mechanism.respond(
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    )
    assert client_final == (
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    assert mechanism.respond(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=") is None
    assert mechanism.complete


def rfc7677_after_client_final() -> ScramMechanism:
    mechanism = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    mechanism.initial_response()
    mechanism.respond(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    return mechanism


def test_a_wrong_server_signature_is_an_authentication_error() -> None:
    mechanism = rfc7677_after_client_final()
    wrong = base64.b64encode(bytes(32)).decode()
    with pytest.raises(AuthenticationError, match="signature does not match"):
        mechanism.respond(f"v={wrong}".encode())
    assert not mechanism.complete


def test_a_server_final_error_is_an_authentication_error() -> None:
    mechanism = rfc7677_after_client_final()
    with pytest.raises(AuthenticationError, match="invalid-proof"):
        mechanism.respond(b"e=invalid-proof")
    assert mechanism.server_error == "invalid-proof"


@pytest.mark.parametrize(
    ("server_first", "problem"),
    [
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "4095 iterations"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1", "fewer than the minimum"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=999999999", "maximum"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=16385", "maximum 16384"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=" + b"9" * 100_000, "long"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4k", "not a number"),
        (b"r=someoneElsesNonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=not*base64,i=4096", "base64"),
        (b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "extension"),
        (b"s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "in that order"),
        (b"garbage", "malformed"),
        (b"\xff\xfe", "malformed"),
    ],
)
def test_bad_server_first_messages_are_rejected(server_first: bytes, problem: str) -> None:
    mechanism = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    mechanism.initial_response()
    with pytest.raises(AuthenticationError, match=problem):
        mechanism.respond(server_first)


def test_the_minimum_iteration_count_is_accepted() -> None:
    mechanism = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    mechanism.initial_response()
    salt = base64.b64encode(b"salt").decode()
    reply = mechanism.respond(f"r=abcdef,s={salt},i={MIN_SCRAM_ITERATIONS}".encode())
    assert reply is not None and reply.startswith(b"c=biws,r=abcdef,p=")


# ---- SCRAM against scramp's server -------------------------------------------------------


def scramp_server(mechanism_name: str, users: dict[str, str], iterations: int = 4096) -> Any:
    mechanism = scramp.ScramMechanism(mechanism_name)
    credentials = {
        user: mechanism.make_auth_info(password, iteration_count=iterations)
        for user, password in users.items()
    }
    return mechanism.make_server(lambda user: credentials[user])


def scramp_exchange(server: Any) -> Callable[[bytes], bytes]:
    """The server side of a SCRAM exchange, one message at a time."""
    step = iter(range(2))

    def answer(message: bytes) -> bytes:
        if next(step) == 0:
            server.set_client_first(message.decode())
            return str(server.get_server_first()).encode()
        server.set_client_final(message.decode())
        return str(server.get_server_final()).encode()

    return answer


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("username", ["alice", "a=b,c", "ünïcode"])
def test_scram_agrees_with_scramp(name: str, username: str) -> None:
    server = scramp_server(name, {username: PASSWORD}, iterations=8192)
    mechanism = ScramMechanism(name, username, PASSWORD)
    drive(mechanism, scramp_exchange(server))
    assert mechanism.complete


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scramp_rejects_a_wrong_password(name: str) -> None:
    server = scramp_server(name, {USER: PASSWORD})
    mechanism = ScramMechanism(name, USER, "not-the-password")
    with pytest.raises(scramp.ScramException):
        drive(mechanism, scramp_exchange(server))
    assert not mechanism.complete


def test_scram_nonces_are_random() -> None:
    first = ScramMechanism("SCRAM-SHA-512", USER, PASSWORD).initial_response()
    second = ScramMechanism("SCRAM-SHA-512", USER, PASSWORD).initial_response()
    assert first != second
    assert first.startswith(b"n,,n=alice,r=")


# ---- PLAIN and OAUTHBEARER ---------------------------------------------------------------


def test_plain_sends_the_rfc_4616_message() -> None:
    mechanism = PlainMechanism("tim", "tanstaaftanstaaf")
    assert mechanism.initial_response() == b"\0tim\0tanstaaftanstaaf"
    assert mechanism.respond(b"") is None
    assert mechanism.complete


def test_plain_rejects_server_data() -> None:
    mechanism = PlainMechanism("tim", "secret")
    mechanism.initial_response()
    with pytest.raises(AuthenticationError):
        mechanism.respond(b"unexpected")


def test_oauthbearer_sends_the_rfc_7628_initial_response() -> None:
    mechanism = OAuthBearerMechanism(TOKEN)
    assert mechanism.initial_response() == f"n,,\x01auth=Bearer {TOKEN}\x01\x01".encode()
    assert mechanism.respond(b"") is None
    assert mechanism.complete


def test_oauthbearer_sends_extensions() -> None:
    mechanism = OAuthBearerMechanism(TOKEN, {"logicalCluster": "lkc-1", "identityPoolId": "p"})
    assert mechanism.initial_response() == (
        f"n,,\x01auth=Bearer {TOKEN}\x01logicalCluster=lkc-1\x01identityPoolId=p\x01\x01".encode()
    )


def test_oauthbearer_acknowledges_an_error_challenge_then_fails() -> None:
    mechanism = OAuthBearerMechanism(TOKEN)
    mechanism.initial_response()
    assert mechanism.respond(b'{"status":"invalid_token"}') == b"\x01"
    assert mechanism.server_error == "status=invalid_token"
    # A server that then claims success is not believed.
    with pytest.raises(AuthenticationError, match="invalid_token"):
        mechanism.respond(b"")
    assert not mechanism.complete


@pytest.mark.parametrize(
    "challenge",
    [
        b"[" * 2000 + b"]" * 2000,
        b"[" * 100_000 + b"]" * 100_000,
        b'{"status":"' + b"x" * 100_000 + b'"}',
    ],
    ids=["nested-past-the-recursion-limit", "deeply-nested-and-huge", "huge"],
)
def test_a_hostile_oauthbearer_error_challenge_is_an_authentication_error(
    challenge: bytes,
) -> None:
    """Nesting that would exhaust the JSON parser's stack, or a huge document, ends the
    exchange as a failed authentication, not as an error that escapes the state machine."""
    mechanism = OAuthBearerMechanism(TOKEN)
    mechanism.initial_response()
    assert mechanism.respond(challenge) == b"\x01"
    assert mechanism.server_error is not None and len(mechanism.server_error) <= 200
    with pytest.raises(AuthenticationError):
        mechanism.respond(b"")


@pytest.mark.parametrize(
    ("token", "extensions"),
    [
        ("has space", {}),
        ("", {}),
        (TOKEN, {"auth": "x"}),
        (TOKEN, {"bad-key": "x"}),
        (TOKEN, {"key": "bad\x01value"}),
    ],
)
def test_oauthbearer_rejects_invalid_tokens_and_extensions(
    token: str, extensions: dict[str, str]
) -> None:
    with pytest.raises(AuthenticationError) as caught:
        OAuthBearerMechanism(token, extensions)
    assert token.strip() == "" or token not in str(caught.value)


class SyncProvider:
    def token(self) -> str:
        return TOKEN

    def extensions(self) -> dict[str, str]:
        return {"logicalCluster": "lkc-sync"}


class AsyncProvider:
    async def token(self) -> str:
        await asyncio.sleep(0)
        return TOKEN

    async def extensions(self) -> dict[str, str]:
        return {"logicalCluster": "lkc-async"}


async def async_token_function() -> str:
    return TOKEN


@pytest.mark.parametrize(
    ("provider", "expected_extensions"),
    [
        (SyncProvider(), {"logicalCluster": "lkc-sync"}),
        (AsyncProvider(), {"logicalCluster": "lkc-async"}),
        (lambda: TOKEN, {}),
        (async_token_function, {}),
    ],
    ids=["sync-object", "async-object", "sync-callable", "async-callable"],
)
def test_token_providers_sync_and_async(
    provider: object, expected_extensions: dict[str, str]
) -> None:
    token, extensions = asyncio.run(fetch_oauth_token(provider))
    assert token == TOKEN
    assert extensions == expected_extensions


def test_a_failing_token_provider_is_an_authentication_error() -> None:
    class Broken:
        def token(self) -> str:
            raise RuntimeError("identity provider down")

    with pytest.raises(AuthenticationError, match="RuntimeError") as caught:
        asyncio.run(fetch_oauth_token(Broken()))
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_token_provider_must_return_a_str() -> None:
    with pytest.raises(AuthenticationError, match="bytes"):
        asyncio.run(fetch_oauth_token(lambda: b"bytes-token"))
    with pytest.raises(ConfigurationError):
        asyncio.run(fetch_oauth_token(object()))


# ---- secrets and state -----------------------------------------------------------------------


def test_secrets_never_appear_in_reprs_and_are_redacted() -> None:
    mechanisms: list[SaslMechanism] = [
        PlainMechanism(USER, PASSWORD),
        ScramMechanism("SCRAM-SHA-512", USER, PASSWORD),
        OAuthBearerMechanism(TOKEN),
    ]
    for mechanism in mechanisms:
        assert PASSWORD not in repr(mechanism) and TOKEN not in repr(mechanism)
        mechanism.initial_response()
        assert PASSWORD not in repr(mechanism) and TOKEN not in repr(mechanism)
    assert mechanisms[0].redact(f"bad password {PASSWORD}!") == "bad password ***!"
    assert mechanisms[2].redact(f"token {TOKEN} expired") == "token *** expired"


def test_misuse_of_a_mechanism_is_an_illegal_state() -> None:
    mechanism = PlainMechanism(USER, PASSWORD)
    with pytest.raises(IllegalStateError):
        mechanism.respond(b"")
    mechanism.initial_response()
    with pytest.raises(IllegalStateError):
        mechanism.initial_response()
    mechanism.respond(b"")
    with pytest.raises(IllegalStateError):
        mechanism.respond(b"")


def test_create_mechanism_picks_the_configured_one() -> None:
    async def create(name: str) -> SaslMechanism:
        return await create_mechanism(
            name, username=USER, password=PASSWORD, token_provider=SyncProvider()
        )

    assert isinstance(asyncio.run(create("plain")), PlainMechanism)
    scram = asyncio.run(create("SCRAM-SHA-512"))
    assert isinstance(scram, ScramMechanism) and scram.name == "SCRAM-SHA-512"
    oauth = asyncio.run(create("OAUTHBEARER"))
    assert isinstance(oauth, OAuthBearerMechanism)
    assert oauth.extensions == {"logicalCluster": "lkc-sync"}
    with pytest.raises(ConfigurationError):
        asyncio.run(create("NTLM"))


# ---- the connection's exchange against the scripted broker ----------------------------------


def sasl_config(broker: ScriptedSaslBroker, mechanism: str, **options: Any) -> ProducerConfig:
    if mechanism != "OAUTHBEARER":
        options.setdefault("sasl_plain_username", USER)
        options.setdefault("sasl_plain_password", PASSWORD)
    return ProducerConfig.from_options(
        bootstrap_servers=broker.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        **options,
    )


async def connect(broker: ScriptedSaslBroker, config: ProducerConfig) -> BrokerConnection:
    connection = BrokerConnection(-1, broker.host, broker.port, config)
    await asyncio.wait_for(connection.connect(), PATIENCE)
    return connection


def a_broker(**options: Any) -> ScriptedSaslBroker:
    options.setdefault("users", {USER: PASSWORD})
    options.setdefault("tokens", {TOKEN: "bob"})
    return ScriptedSaslBroker(**options)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("authenticate_version", [0, 1, 2])
def test_connection_authenticates_with_each_mechanism_and_version(
    run: Runner[None], mechanism: str, authenticate_version: int
) -> None:
    async def scenario() -> None:
        async with a_broker(sasl_authenticate_max_version=authenticate_version) as broker:
            connection = await connect(broker, sasl_config(broker, mechanism))
            assert connection.state is ConnectionState.READY
            connection.close()
            [attempt] = broker.attempts
            assert (attempt.mechanism, attempt.username, attempt.succeeded) == (
                mechanism,
                USER,
                True,
            )
            assert (SASL_HANDSHAKE, 1) in broker.requests
            used = {v for key, v in broker.requests if key == SASL_AUTHENTICATE}
            assert used == {authenticate_version}

    run(scenario())


@pytest.mark.parametrize("provider", [SyncProvider(), AsyncProvider()], ids=["sync", "async"])
def test_connection_authenticates_with_oauthbearer(run: Runner[None], provider: object) -> None:
    async def scenario() -> None:
        async with a_broker() as broker:
            config = sasl_config(broker, "OAUTHBEARER", sasl_oauth_token_provider=provider)
            connection = await connect(broker, config)
            assert connection.is_ready
            connection.close()
            [attempt] = broker.attempts
            assert attempt.succeeded and attempt.username == "bob"
            expected = provider.extensions()  # type: ignore[attr-defined]
            if asyncio.iscoroutine(expected):
                expected = await expected
            assert attempt.extensions == expected

    run(scenario())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_wrong_credentials_fail_start_at_once_without_leaking_them(
    run: Runner[None], mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioproducer")

    class WrongToken:
        def token(self) -> str:
            return "wrong.token.value"

    async def scenario() -> None:
        # echo_credentials: the broker even puts what it got into its error message.
        async with a_broker(echo_credentials=True) as broker:
            secret = "wrong.token.value" if mechanism == "OAUTHBEARER" else "wrong-password-xyz"
            options: dict[str, Any] = (
                {"sasl_oauth_token_provider": WrongToken()}
                if mechanism == "OAUTHBEARER"
                else {"sasl_plain_username": USER, "sasl_plain_password": secret}
            )
            producer = Producer(
                bootstrap_servers=broker.bootstrap_servers,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism,
                # Far longer than PATIENCE: a retrying bootstrap would show as a timeout.
                max_block_ms=600_000,
                reconnect_backoff_ms=10,
                reconnect_backoff_max_ms=10,
                **options,
            )
            with pytest.raises(SaslAuthenticationFailedError) as caught:
                await asyncio.wait_for(producer.start(), PATIENCE)
            error = caught.value
            assert not error.retriable
            assert isinstance(error, AuthenticationError)
            assert mechanism in str(error) and broker.bootstrap_servers in str(error)
            assert "Authentication failed" in str(error)  # the broker's own reason
            for text in (str(error), repr(error), repr(producer), caplog.text):
                assert secret not in text
            # One connection, one exchange: start() did not retry.
            assert broker.connections == 1
            assert [a.succeeded for a in broker.attempts] == [False]
            await producer.close()

    run(scenario())


def test_a_broker_echoing_the_password_has_it_redacted(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with a_broker(echo_credentials=True, users={USER: "other"}) as broker:
            with pytest.raises(SaslAuthenticationFailedError) as caught:
                await connect(broker, sasl_config(broker, "PLAIN"))
            assert PASSWORD not in str(caught.value)
            assert "got password '***'" in str(caught.value)

    run(scenario())


def test_an_unsupported_mechanism_lists_what_the_broker_offers(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with a_broker(mechanisms=["SCRAM-SHA-512", "OAUTHBEARER"]) as broker:
            with pytest.raises(UnsupportedSaslMechanismError) as caught:
                await connect(broker, sasl_config(broker, "PLAIN"))
            message = str(caught.value)
            assert "PLAIN" in message
            assert "SCRAM-SHA-512, OAUTHBEARER" in message
            assert not caught.value.retriable
            assert broker.attempts == []

    run(scenario())


def test_a_server_that_does_not_know_the_password_is_rejected(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with a_broker(tamper_server_signature=True) as broker:
            with pytest.raises(AuthenticationError, match="signature does not match") as caught:
                await connect(broker, sasl_config(broker, "SCRAM-SHA-256"))
            assert broker.bootstrap_servers in str(caught.value)
            # The broker believed the client; the client did not believe the broker.
            assert [a.succeeded for a in broker.attempts] == [True]

    run(scenario())


def test_a_scram_error_in_the_server_final_message(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with a_broker(scram_error_in_server_final=True, users={USER: "other"}) as broker:
            with pytest.raises(AuthenticationError, match="invalid-proof"):
                await connect(broker, sasl_config(broker, "SCRAM-SHA-512"))

    run(scenario())


def test_too_many_scram_iterations_are_refused(run: Runner[None]) -> None:
    async def scenario() -> None:
        # (Too few cannot be scripted: scramp refuses to go below 4096 itself; the sans-I/O
        # tests above cover it.)
        async with a_broker(scram_iterations=200_000) as broker:
            with pytest.raises(AuthenticationError, match="more than the maximum"):
                await connect(broker, sasl_config(broker, "SCRAM-SHA-256"))

    run(scenario())


def test_oauthbearer_provider_failures_fail_fast(run: Runner[None]) -> None:
    class Hanging:
        async def token(self) -> str:
            await asyncio.Event().wait()
            return TOKEN

    class Broken:
        def token(self) -> str:
            raise RuntimeError("identity provider down")

    async def scenario() -> None:
        async with a_broker() as broker:
            config = sasl_config(
                broker, "OAUTHBEARER", sasl_oauth_token_provider=Hanging(), request_timeout_ms=200
            )
            with pytest.raises(AuthenticationError, match="no token within 200 ms"):
                await connect(broker, config)
            config = sasl_config(broker, "OAUTHBEARER", sasl_oauth_token_provider=Broken())
            with pytest.raises(AuthenticationError, match="provider failed"):
                await connect(broker, config)

    run(scenario())


def test_session_lifetime_is_accepted(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with a_broker(session_lifetime_ms=3_600_000) as broker:
            connection = await connect(broker, sasl_config(broker, "SCRAM-SHA-512"))
            assert connection.is_ready
            connection.close()

    run(scenario())
