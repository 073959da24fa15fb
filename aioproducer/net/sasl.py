"""SASL client mechanisms: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER, as sans-I/O state machines
(GSSAPI, Kerberos, is in :mod:`aioproducer.net.kerberos`).

Each mechanism only turns the server's bytes into the client's next bytes; the connection
moves them in SaslAuthenticate requests (KIP-152) and maps broker error codes to exceptions.
The exchange, for every mechanism::

    mechanism = ScramMechanism("SCRAM-SHA-256", "alice", "secret")
    message: bytes | None = mechanism.initial_response()
    while message is not None:
        server_bytes = ...  # send ``message``, receive the server's answer
        message = mechanism.respond(server_bytes)
    assert mechanism.complete

Written from the RFCs: PLAIN from RFC 4616, SCRAM from RFC 5802 and RFC 7677, OAUTHBEARER's
client initial response from RFC 7628 (section 3.1) with the token syntax of RFC 6750.

Secrets (passwords, tokens, derived keys) are never put in a ``repr()``, a log line or an
exception message. A broker's error text is passed through :meth:`SaslMechanism.redact` before it
is shown, in case a broker echoes what it was sent.

Like the Java client, SCRAM sends the user name and password as UTF-8 without SASLprep
normalisation; both sides must agree on the bytes, and Kafka brokers do not normalise either.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import inspect
import json
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Protocol, cast

from aioproducer.errors import (
    AuthenticationError,
    ConfigurationError,
    IllegalStateError,
    KafkaError,
)

__all__ = [
    "MAX_SCRAM_ITERATIONS",
    "MIN_SCRAM_ITERATIONS",
    "SASL_MECHANISMS",
    "OAuthBearerMechanism",
    "PlainMechanism",
    "SaslMechanism",
    "ScramMechanism",
    "TokenProvider",
    "create_mechanism",
    "fetch_oauth_token",
]

#: The mechanism names :func:`create_mechanism` accepts, as ``sasl_mechanism`` spells them.
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")

#: The fewest PBKDF2 iterations a SCRAM server may ask for. RFC 7677 recommends at least 4096,
#: and a server asking for fewer makes a stolen exchange cheap to brute-force (or is not the
#: server it claims to be); Kafka's own minimum is 4096 too.
MIN_SCRAM_ITERATIONS: Final = 4096

#: The most PBKDF2 iterations a SCRAM server may ask for: Kafka's own maximum (a broker
#: refuses to store credentials with more). The key derivation runs on the event loop; without
#: a cap a hostile server could stall the producer with an absurd count.
MAX_SCRAM_ITERATIONS: Final = 16_384

# Digits an iteration count may have before it is refused unread: far more than any count
# this client accepts (those get a message naming the maximum), far fewer than a flood.
_MAX_ITERATION_DIGITS: Final = 10
# An RFC 7628 error status is a small JSON object; anything longer is not decoded.
_MAX_OAUTH_ERROR_BYTES: Final = 4096

_REDACTED: Final = "***"

# RFC 5802 section 7: printable ASCII except ",".
_SCRAM_NONCE_RE: Final = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
# RFC 6750 section 2.1: b64token.
_BEARER_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# RFC 7628 section 3.1: key = 1*(ALPHA); value = *(VCHAR / SP / HTAB / CR / LF).
_EXTENSION_KEY_RE: Final = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE_RE: Final = re.compile(r"[\x21-\x7e \t\r\n]*")

# The digest each SCRAM mechanism uses. SCRAM-SHA-1 is not a Kafka mechanism; it is here so
# the RFC 5802 test vector can be checked against the same code.
_SCRAM_DIGESTS: Final[Mapping[str, str]] = {
    "SCRAM-SHA-1": "sha1",
    "SCRAM-SHA-256": "sha256",
    "SCRAM-SHA-512": "sha512",
}

# GS2 header (RFC 5801): "n" = the client does not support channel binding; no authzid.
_GS2_HEADER: Final = "n,,"


class SaslMechanism(ABC):
    """The client side of one SASL exchange, without I/O.

    Call :meth:`initial_response` once, then feed each server answer to :meth:`respond` until
    it returns None; :attr:`complete` is then True. Any violation of the mechanism by the
    server raises :class:`~aioproducer.errors.AuthenticationError`. A mechanism object serves
    one exchange: make a new one per connection.
    """

    #: The mechanism name sent in SaslHandshake (``"SCRAM-SHA-256"``).
    name: str

    def __init__(self) -> None:
        self._secrets: list[str] = []
        self._complete = False
        self._started = False
        self._server_error: str | None = None

    @property
    def complete(self) -> bool:
        """True once the exchange succeeded on the client's side."""
        return self._complete

    @property
    def server_error(self) -> str | None:
        """The error the server reported inside the exchange (SCRAM ``e=``, OAUTHBEARER's JSON
        status), redacted; None if it reported none."""
        return self._server_error

    def initial_response(self) -> bytes:
        """The client's first message, sent in the first SaslAuthenticate request.

        Raises:
            IllegalStateError: called twice.
        """
        if self._started:
            raise IllegalStateError(f"{self.name}: initial_response() called twice")
        self._started = True
        return self._initial_response()

    def respond(self, challenge: bytes) -> bytes | None:
        """Take the server's bytes; return the client's next message, or None when done.

        Raises:
            AuthenticationError: the server's message is malformed, unexpected, or proves the
                server does not know the credentials (SCRAM's server signature).
            IllegalStateError: called before :meth:`initial_response` or after completion.
        """
        if not self._started:
            raise IllegalStateError(f"{self.name}: respond() before initial_response()")
        if self._complete:
            raise IllegalStateError(f"{self.name}: respond() after the exchange completed")
        return self._respond(bytes(challenge))

    def redact(self, text: str) -> str:
        """``text`` with every secret of this exchange replaced by ``***``.

        For broker error messages, which are shown to the user and may echo what was sent.
        """
        for secret in self._secrets:
            if secret:
                text = text.replace(secret, _REDACTED)
        return text

    def _add_secret(self, *values: str) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self._secrets.extend(v for v in values if v)
        self._secrets.sort(key=len, reverse=True)

    def _fail(self, problem: str) -> AuthenticationError:
        return AuthenticationError(f"SASL {self.name}: {self.redact(problem)}")

    @abstractmethod
    def _initial_response(self) -> bytes: ...

    @abstractmethod
    def _respond(self, challenge: bytes) -> bytes | None: ...


# ---- PLAIN (RFC 4616) ------------------------------------------------------------------------


class PlainMechanism(SaslMechanism):
    """SASL PLAIN (RFC 4616): the user name and password in the clear.

    Only safe over TLS (``SASL_SSL``). The server answers the single message with an empty
    challenge on success.

    Args:
        username: the authentication identity.
        password: the password.
        authorization_id: the identity to act as; empty (the default) means the user itself,
            which is what Kafka expects.
    """

    name = "PLAIN"

    def __init__(self, username: str, password: str, *, authorization_id: str = "") -> None:
        super().__init__()
        for label, value in (("username", username), ("authorization_id", authorization_id)):
            if "\0" in value:
                raise ConfigurationError(f"SASL PLAIN {label} must not contain NUL characters")
        if "\0" in password:
            raise ConfigurationError("SASL PLAIN password must not contain NUL characters")
        self.username = username
        self._authorization_id = authorization_id
        self._password = password
        self._add_secret(password)

    def __repr__(self) -> str:
        return f"<PlainMechanism username={self.username!r} complete={self._complete}>"

    def _initial_response(self) -> bytes:
        # message = [authzid] NUL authcid NUL passwd
        return f"{self._authorization_id}\0{self.username}\0{self._password}".encode()

    def _respond(self, challenge: bytes) -> bytes | None:
        if challenge:
            # PLAIN has no server data; a server that sends some is not speaking PLAIN.
            raise self._fail("the server sent data after the PLAIN message; expected none")
        self._complete = True
        return None


# ---- SCRAM (RFC 5802, RFC 7677) ------------------------------------------------------------


class _ScramState(enum.Enum):
    INITIAL = "initial"
    SENT_CLIENT_FIRST = "sent client-first"
    SENT_CLIENT_FINAL = "sent client-final"


def _scram_escape_username(username: str) -> str:
    # RFC 5802 section 5.1: "=" and "," are escaped in saslname.
    return username.replace("=", "=3D").replace(",", "=2C")


def _scram_attributes(message: str) -> list[tuple[str, str]]:
    """``"a=1,b=2"`` -> ``[("a", "1"), ("b", "2")]``; raises ValueError if malformed."""
    attributes: list[tuple[str, str]] = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ValueError("not an attribute=value list")
        attributes.append((part[0], part[2:]))
    return attributes


def _b64decode(value: str) -> bytes:
    return base64.b64decode(value.encode("ascii"), validate=True)


class ScramMechanism(SaslMechanism):
    """SCRAM (RFC 5802) with SHA-256 or SHA-512 (RFC 7677), without channel binding.

    Three messages: client-first (user name and a random nonce), client-final (the proof
    that the client knows the password, computed from the server's salt and iteration
    count), then the server's signature is checked, proving the server knows the password
    too. A server signature that does not match raises
    :class:`~aioproducer.errors.AuthenticationError`.

    Args:
        mechanism: ``"SCRAM-SHA-256"`` or ``"SCRAM-SHA-512"`` (``"SCRAM-SHA-1"`` exists for
            the RFC 5802 test vector; Kafka does not offer it).
        username: the user name.
        password: the password.
        nonce: the client nonce; random (32 bytes of entropy) by default. Only tests should
            pass one.
        min_iterations: the fewest iterations the server may ask for.
        max_iterations: the most iterations the server may ask for.
    """

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        min_iterations: int = MIN_SCRAM_ITERATIONS,
        max_iterations: int = MAX_SCRAM_ITERATIONS,
    ) -> None:
        super().__init__()
        digest = _SCRAM_DIGESTS.get(mechanism.upper())
        if digest is None:
            raise ConfigurationError(
                f"unknown SCRAM mechanism {mechanism!r}; use SCRAM-SHA-256 or SCRAM-SHA-512"
            )
        if nonce is None:
            nonce = secrets.token_urlsafe(32)
        elif not _SCRAM_NONCE_RE.fullmatch(nonce):
            raise ConfigurationError("a SCRAM nonce must be printable ASCII without ','")
        self.name = mechanism.upper()
        self.username = username
        self._digest = digest
        self._password = password
        self._client_nonce = nonce
        self._min_iterations = min_iterations
        self._max_iterations = max_iterations
        self._state = _ScramState.INITIAL
        self._client_first_bare = ""
        self._expected_server_signature = b""
        self._add_secret(password)

    def __repr__(self) -> str:
        return (
            f"<ScramMechanism {self.name} username={self.username!r} "
            f"state={self._state.value!r} complete={self._complete}>"
        )

    def _initial_response(self) -> bytes:
        self._client_first_bare = (
            f"n={_scram_escape_username(self.username)},r={self._client_nonce}"
        )
        self._state = _ScramState.SENT_CLIENT_FIRST
        return (_GS2_HEADER + self._client_first_bare).encode()

    def _respond(self, challenge: bytes) -> bytes | None:
        if self._state is _ScramState.SENT_CLIENT_FIRST:
            return self._client_final(challenge)
        self._verify_server_final(challenge)
        return None

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._digest).digest()

    def _client_final(self, challenge: bytes) -> bytes:
        try:
            server_first = challenge.decode("utf-8")
            attributes = _scram_attributes(server_first)
        except (UnicodeDecodeError, ValueError):
            raise self._fail("malformed server-first message") from None
        if attributes and attributes[0][0] == "m":
            raise self._fail("the server requires a SCRAM extension this client does not know")
        if len(attributes) < 3 or [name for name, _ in attributes[:3]] != ["r", "s", "i"]:
            raise self._fail("the server-first message lacks r=, s= and i= in that order")
        server_nonce, salt_b64, iterations_text = (value for _, value in attributes[:3])
        if (
            not server_nonce.startswith(self._client_nonce)
            or len(server_nonce) <= len(self._client_nonce)
            or not _SCRAM_NONCE_RE.fullmatch(server_nonce)
        ):
            raise self._fail("the server's nonce does not extend the client's nonce")
        try:
            salt = _b64decode(salt_b64)
        except (binascii.Error, ValueError):
            raise self._fail("the server's salt is not valid base64") from None
        if not salt:
            raise self._fail("the server sent an empty salt")
        if not (iterations_text.isascii() and iterations_text.isdigit()):
            raise self._fail("the server's iteration count is not a number")
        if len(iterations_text) > _MAX_ITERATION_DIGITS:
            # Checked before int(): a megabyte of digits is a hostile server, not a count.
            raise self._fail("the server's iteration count is absurdly long")
        iterations = int(iterations_text)
        if iterations < self._min_iterations:
            raise self._fail(
                f"the server asked for {iterations} iterations, fewer than the minimum "
                f"{self._min_iterations}; refusing to weaken the password hash"
            )
        if iterations > self._max_iterations:
            raise self._fail(
                f"the server asked for {iterations} iterations, more than the maximum "
                f"{self._max_iterations}"
            )

        channel_binding = base64.b64encode(_GS2_HEADER.encode()).decode("ascii")
        client_final_without_proof = f"c={channel_binding},r={server_nonce}"
        auth_message = ",".join(
            (self._client_first_bare, server_first, client_final_without_proof)
        ).encode("utf-8")
        salted_password = hashlib.pbkdf2_hmac(
            self._digest, self._password.encode("utf-8"), salt, iterations
        )
        client_key = self._hmac(salted_password, b"Client Key")
        stored_key = hashlib.new(self._digest, client_key).digest()
        client_signature = self._hmac(stored_key, auth_message)
        proof = (
            int.from_bytes(client_key, "big") ^ int.from_bytes(client_signature, "big")
        ).to_bytes(len(client_key), "big")
        server_key = self._hmac(salted_password, b"Server Key")
        self._expected_server_signature = self._hmac(server_key, auth_message)
        self._state = _ScramState.SENT_CLIENT_FINAL
        proof_b64 = base64.b64encode(proof).decode("ascii")
        return f"{client_final_without_proof},p={proof_b64}".encode()

    def _verify_server_final(self, challenge: bytes) -> None:
        try:
            attributes = _scram_attributes(challenge.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise self._fail("malformed server-final message") from None
        name, value = attributes[0]
        if name == "e":
            self._server_error = self.redact(value)
            raise self._fail(f"the server reported an error: {self._server_error}")
        if name != "v":
            raise self._fail("the server-final message has neither v= nor e=")
        try:
            signature = _b64decode(value)
        except (binascii.Error, ValueError):
            raise self._fail("the server signature is not valid base64") from None
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise self._fail(
                "the server's signature does not match: the server does not know this "
                "user's credentials (it may not be the broker it claims to be)"
            )
        self._complete = True


# ---- OAUTHBEARER (RFC 7628) ----------------------------------------------------------------


class TokenProvider(Protocol):
    """What ``sasl_oauth_token_provider`` may be: an object with a ``token()`` method.

    ``token()`` returns the bearer token (a str), or an awaitable of it; it is called for each
    new connection, so it can refresh tokens. An optional ``extensions()`` method (sync or
    async) returns a mapping of SASL extensions (RFC 7628 section 3.1) sent with the token,
    such as Confluent Cloud's ``logicalCluster``. A plain callable returning the token (or an
    awaitable of it) is accepted too. A :class:`~aioproducer.errors.KafkaError` it raises is
    passed on as it is, retriable or not; any other exception becomes a non-retriable
    :class:`~aioproducer.errors.AuthenticationError`.
    """

    def token(self) -> str | Awaitable[str]:
        """The bearer token, or an awaitable of it."""
        ...


class _OAuthState(enum.Enum):
    INITIAL = "initial"
    SENT_TOKEN = "sent token"
    SENT_ERROR_ACK = "acknowledged a server error"


class OAuthBearerMechanism(SaslMechanism):
    """SASL OAUTHBEARER (RFC 7628): a bearer token, plus optional extensions.

    The client sends ``n,,\\x01auth=Bearer <token>\\x01[key=value\\x01...]\\x01``. On success
    the server answers with nothing. On failure it sends a JSON error status; RFC 7628
    section 3.2.3 has the client answer with a lone ``\\x01``, after which the server fails the
    exchange (Kafka: SASL_AUTHENTICATION_FAILED). :attr:`server_error` keeps the status.

    Args:
        token: the bearer token (RFC 6750 ``b64token`` syntax; a JWT fits).
        extensions: SASL extensions; keys are letters only and ``auth`` is reserved.

    Raises:
        AuthenticationError: the token or an extension is not valid (the message never
            shows the token).
    """

    name = "OAUTHBEARER"

    def __init__(self, token: str, extensions: Mapping[str, str] | None = None) -> None:
        super().__init__()
        if not isinstance(token, str) or not _BEARER_TOKEN_RE.fullmatch(token):
            raise AuthenticationError(
                "SASL OAUTHBEARER: the token from sasl_oauth_token_provider is not a valid "
                "bearer token (RFC 6750 b64token characters, not empty)"
            )
        checked: dict[str, str] = {}
        for key, value in (extensions or {}).items():
            if not isinstance(key, str) or not _EXTENSION_KEY_RE.fullmatch(key):
                raise AuthenticationError(
                    f"SASL OAUTHBEARER: extension name {key!r} must be ASCII letters only"
                )
            if key == "auth":
                raise AuthenticationError(
                    "SASL OAUTHBEARER: 'auth' is reserved and cannot be an extension"
                )
            if not isinstance(value, str) or not _EXTENSION_VALUE_RE.fullmatch(value):
                raise AuthenticationError(
                    f"SASL OAUTHBEARER: the value of extension {key!r} must be printable ASCII"
                )
            checked[key] = value
        self._token = token
        self.extensions: Mapping[str, str] = checked
        self._state = _OAuthState.INITIAL
        self._add_secret(token)

    def __repr__(self) -> str:
        return (
            f"<OAuthBearerMechanism extensions={sorted(self.extensions)} "
            f"state={self._state.value!r} complete={self._complete}>"
        )

    def _initial_response(self) -> bytes:
        self._state = _OAuthState.SENT_TOKEN
        parts = [f"{_GS2_HEADER}\x01auth=Bearer {self._token}\x01"]
        parts.extend(f"{key}={value}\x01" for key, value in self.extensions.items())
        parts.append("\x01")
        return "".join(parts).encode("ascii")

    def _respond(self, challenge: bytes) -> bytes | None:
        if self._state is _OAuthState.SENT_TOKEN:
            if not challenge:
                self._complete = True
                return None
            self._server_error = self.redact(_oauth_error_status(challenge))
            self._state = _OAuthState.SENT_ERROR_ACK
            return b"\x01"
        # The server reported an error and then did not fail the exchange: treat it as failed
        # rather than believe the second answer.
        raise self._fail(f"the server rejected the token: {self._server_error}")


def _oauth_error_status(challenge: bytes) -> str:
    """A short description of an RFC 7628 error challenge (a JSON object)."""
    text = challenge.decode("utf-8", "replace")
    if len(challenge) > _MAX_OAUTH_ERROR_BYTES:
        # Not parsed: an error status is a few hundred bytes, not a document to decode.
        return text[:200]
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):  # deeply nested arrays exhaust the parser's stack
        return text[:200]
    if isinstance(document, dict):
        fields = ("status", "scope", "openid-configuration")
        described = ", ".join(f"{k}={document[k]}" for k in fields if k in document)
        if described:
            return described[:200]
    return text[:200]


async def _maybe_await(value: object) -> object:
    if inspect.isawaitable(value):
        return await value
    return value


async def fetch_oauth_token(provider: object) -> tuple[str, dict[str, str]]:
    """Get a token and extensions from ``provider`` (see :class:`TokenProvider`).

    Returns:
        ``(token, extensions)``; extensions are empty when the provider has no
        ``extensions()`` method.

    Raises:
        ConfigurationError: ``provider`` has no ``token()`` method and is not callable.
        AuthenticationError: the provider failed (its exception is the cause) or returned
            something that is not a str, or extensions that are not a str-to-str mapping.
        KafkaError: the provider raised one; it is passed on as it is (a retriable one, such
            as a token endpoint that cannot be reached, lets the connection be retried).
    """
    token_method = getattr(provider, "token", None)
    if callable(token_method):
        get_token = cast("Callable[[], object]", token_method)
    elif callable(provider):
        get_token = cast("Callable[[], object]", provider)
    else:
        raise ConfigurationError(
            "sasl_oauth_token_provider must have a token() method or be callable"
        )
    try:
        token = await _maybe_await(get_token())
    except KafkaError:
        # The provider said what failed and whether trying again may help (the token
        # endpoint providers of aioproducer.oauth do): keep that.
        raise
    except Exception as exc:
        raise AuthenticationError(
            f"SASL OAUTHBEARER: sasl_oauth_token_provider failed: {type(exc).__name__}"
        ) from exc
    if not isinstance(token, str):
        raise AuthenticationError(
            "SASL OAUTHBEARER: sasl_oauth_token_provider returned "
            f"{type(token).__name__}, not a str"
        )
    extensions: dict[str, str] = {}
    extensions_method = getattr(provider, "extensions", None)
    if callable(extensions_method):
        try:
            raw = await _maybe_await(extensions_method())
        except Exception as exc:
            raise AuthenticationError(
                "SASL OAUTHBEARER: the extensions() of sasl_oauth_token_provider failed: "
                f"{type(exc).__name__}"
            ) from exc
        if raw is not None:
            if not isinstance(raw, Mapping):
                raise AuthenticationError(
                    "SASL OAUTHBEARER: extensions() must return a mapping of str to str, got "
                    f"{type(raw).__name__}"
                )
            for key, value in raw.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    raise AuthenticationError(
                        "SASL OAUTHBEARER: extensions() must return a mapping of str to str"
                    )
                extensions[key] = value
    return token, extensions


async def create_mechanism(
    mechanism: str,
    *,
    username: str | None = None,
    password: str | None = None,
    token_provider: object = None,
    host: str = "",
    kerberos: Mapping[str, str | None] | None = None,
) -> SaslMechanism:
    """A fresh mechanism for one exchange, from the ``sasl_*`` options.

    For OAUTHBEARER this calls (and awaits) the token provider. For GSSAPI
    (:mod:`aioproducer.net.kerberos`) it gets the credentials and the first token for the
    broker at ``host``; ``kerberos`` holds ``service_name``, ``principal``, ``keytab``,
    ``ccache`` and ``domain_name`` (the ``sasl_kerberos_*`` options).

    Raises:
        ConfigurationError: an unknown mechanism, or a missing user name, password or
            token provider.
        AuthenticationError: the token provider failed or gave an invalid token.
    """
    name = mechanism.upper()
    if name == "GSSAPI":
        from aioproducer.net.kerberos import create_gssapi_mechanism

        options = dict(kerberos or {})
        return await create_gssapi_mechanism(
            service_name=options.get("service_name") or "kafka",
            host=options.get("domain_name") or host,
            principal=options.get("principal"),
            keytab=options.get("keytab"),
            ccache=options.get("ccache"),
        )
    if name == "OAUTHBEARER":
        if token_provider is None:
            raise ConfigurationError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider")
        token, extensions = await fetch_oauth_token(token_provider)
        return OAuthBearerMechanism(token, extensions)
    if name not in SASL_MECHANISMS:
        raise ConfigurationError(
            f"unknown sasl_mechanism {mechanism!r}; use one of {', '.join(SASL_MECHANISMS)}"
        )
    if username is None or password is None:
        raise ConfigurationError(
            f"sasl_mechanism {name} needs sasl_plain_username and sasl_plain_password"
        )
    if name == "PLAIN":
        return PlainMechanism(username, password)
    return ScramMechanism(name, username, password)
