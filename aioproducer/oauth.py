"""OAUTHBEARER token providers that do what the Java client's login callback handlers do.

- :class:`ClientCredentialsTokenProvider`: the OAuth 2 client credentials grant against a
  token endpoint (KIP-768, the Java client's ``OAuthBearerLoginCallbackHandler``).
- :class:`UnsecuredTokenProvider`: an unsigned JWT made here, as Kafka's
  ``OAuthBearerUnsecuredLoginCallbackHandler`` makes them, for brokers that run Kafka's
  unsecured validator (development and tests only).

Both are what ``sasl.jaas.config`` with an ``OAuthBearerLoginModule`` becomes (see
:mod:`aioproducer.jaas`), and both can be passed as ``sasl_oauth_token_provider`` directly.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import http.client
import json
import logging
import math
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final

from aioproducer.errors import (
    AuthenticationError,
    ConfigurationError,
    KafkaConnectionError,
    KafkaError,
    SslError,
)

__all__ = ["ClientCredentialsTokenProvider", "UnsecuredTokenProvider"]

log = logging.getLogger("aioproducer.oauth")

#: HTTP statuses after which asking again cannot help (the Java client's list): the
#: credentials, the scope or the endpoint are wrong.
_FATAL_STATUSES: Final = frozenset(
    {400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413, 414, 415, 501, 505}
)
#: A token endpoint's answer is a small JSON document; more than this is not read.
_MAX_RESPONSE_BYTES: Final = 1 << 20
#: Like the Java client (sasl.login.refresh.window.factor), a token is renewed once this
#: share of its lifetime has passed.
_REFRESH_WINDOW_FACTOR: Final = 0.8
_DEFAULT_CONNECT_TIMEOUT_MS: Final = 10_000

# The tokens of this process by provider settings: (token, renew at, expires at), in clock
# seconds. As the Java client's LoginManager shares one login among the clients of a JVM
# with the same JAAS configuration, producers with the same client credentials (the
# producer of each Spark task, say) share one token instead of each asking the endpoint.
_TOKENS: dict[tuple[Any, ...], tuple[str, float, float]] = {}
_TOKENS_LOCK: Final = threading.Lock()
_DEFAULT_READ_TIMEOUT_MS: Final = 30_000


def _b64url_json(document: Mapping[str, Any]) -> str:
    raw = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT (its middle part), or None if ``token`` is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1]
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        claims = json.loads(raw)
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


def _shown_url(url: str) -> str:
    """``url`` without user information, query or fragment, which may carry secrets."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class ClientCredentialsTokenProvider:
    """Get OAUTHBEARER tokens from an OAuth 2 token endpoint with the client credentials grant.

    Each fetch POSTs ``grant_type=client_credentials`` (and ``scope``) with the client id and
    secret in an HTTP Basic ``Authorization`` header, as the Java client does (KIP-768), and
    reads ``access_token`` from the JSON answer. The token is kept and handed to every new
    connection until 80% of its lifetime has passed (the Java client's default refresh
    window); its lifetime comes from the JWT's ``exp`` claim, or from ``expires_in`` for a
    token that is not a JWT. If renewing fails while the old token is still valid, the old
    one is used and the failure logged. Providers with the same settings (the producers of
    one process configured alike, as the Java client's clients share a login) share the
    token.

    HTTPS endpoints are verified against the system's CAs (or ``ssl_context``).

    Args:
        token_endpoint_url: ``https://...`` (or ``http://``) URL of the token endpoint.
        client_id: the OAuth client id.
        client_secret: the client secret; never shown in a repr, a log line or an error.
        scope: the ``scope`` request parameter, or None to send none.
        extensions: SASL extensions sent with the token (the JAAS ``extension_<name>``
            options), such as Confluent Cloud's ``logicalCluster``.
        connect_timeout_ms: how long connecting may take (``sasl.login.connect.timeout.ms``);
            10 s when None.
        read_timeout_ms: how long each read may wait (``sasl.login.read.timeout.ms``); 30 s
            when None.
        sub_claim_name: the claim of a JWT that names the principal
            (``sasl.oauthbearer.sub.claim.name``); a JWT without it is refused, as the Java
            client refuses it.
        scope_claim_name: the claim holding the scopes (``sasl.oauthbearer.scope.claim.name``),
            logged with each new token.
        urlencode_header: URL-encode the client id and secret before they go into the
            ``Authorization`` header, as RFC 6749 section 2.3.1 asks
            (``sasl.oauthbearer.header.urlencode``; off by default, as in the Java client).
        ssl_context: the TLS context for an ``https`` endpoint; a verifying default one when
            None.
        clock: seconds since the epoch; tests pass a fake one.

    Raises:
        ConfigurationError: the URL is not an http(s) URL, or the id or secret is empty.
    """

    def __init__(
        self,
        token_endpoint_url: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None = None,
        extensions: Mapping[str, str] | None = None,
        connect_timeout_ms: int | None = None,
        read_timeout_ms: int | None = None,
        sub_claim_name: str = "sub",
        scope_claim_name: str = "scope",
        urlencode_header: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts = urllib.parse.urlsplit(token_endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                "sasl_oauthbearer_token_endpoint_url (sasl.oauthbearer.token.endpoint.url) "
                "must be an https:// (or http://) URL with a host"
            )
        if not client_id or not client_secret:
            raise ConfigurationError(
                "the OAuth client credentials need a non-empty clientId and clientSecret"
            )
        self.token_endpoint_url = token_endpoint_url
        self.client_id = client_id
        self._client_secret = client_secret
        self.scope = scope
        self._extensions = dict(extensions or {})
        self._connect_timeout = (connect_timeout_ms or _DEFAULT_CONNECT_TIMEOUT_MS) / 1000
        self._read_timeout = (read_timeout_ms or _DEFAULT_READ_TIMEOUT_MS) / 1000
        self._sub_claim_name = sub_claim_name
        self._scope_claim_name = scope_claim_name
        self._urlencode_header = urlencode_header
        self._ssl_context = ssl_context
        self._clock = clock
        self._pending: asyncio.Future[str] | None = None
        self._pending_loop: asyncio.AbstractEventLoop | None = None
        self.fetches = 0
        """How many tokens were requested from the endpoint so far."""

    def __repr__(self) -> str:
        return (
            f"<ClientCredentialsTokenProvider {_shown_url(self.token_endpoint_url)} "
            f"client_id={self.client_id!r} scope={self.scope!r}>"
        )

    def _settings(self) -> tuple[Any, ...]:
        return (
            self.token_endpoint_url,
            self.client_id,
            self._client_secret,
            self.scope,
            tuple(sorted(self._extensions.items())),
            self._connect_timeout,
            self._read_timeout,
            self._sub_claim_name,
            self._scope_claim_name,
            self._urlencode_header,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClientCredentialsTokenProvider):
            return NotImplemented
        return self._settings() == other._settings()

    def __hash__(self) -> int:
        return hash(repr(self._settings()))

    def extensions(self) -> Mapping[str, str]:
        """The SASL extensions sent with each token."""
        return dict(self._extensions)

    async def token(self) -> str:
        """The current token, fetched from the endpoint when there is none or it is due.

        Concurrent callers on one event loop share one request.

        Raises:
            AuthenticationError: the endpoint refused the credentials (HTTP 400, 401, 403,
                ...) or answered without a usable token; not retriable.
            KafkaConnectionError: the endpoint could not be reached or answered with a
                transient status (5xx, 429); retriable.
        """
        now = self._clock()
        with _TOKENS_LOCK:
            current = _TOKENS.get(self._settings())
        if current is not None and now < current[1]:
            return current[0]
        loop = asyncio.get_running_loop()
        pending = self._pending
        if pending is not None and self._pending_loop is loop and not pending.done():
            return await asyncio.shield(pending)
        pending = self._pending = loop.create_future()
        self._pending_loop = loop
        try:
            token = await self._renew(current)
        except asyncio.CancelledError:
            pending.cancel()
            raise
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: the waiters, if any, get it too
            raise
        pending.set_result(token)
        return token

    async def _renew(self, current: tuple[str, float, float] | None) -> str:
        try:
            token, expires_at = await asyncio.to_thread(self.fetch)
        except KafkaError as exc:
            if current is None or self._clock() >= current[2]:
                raise
            # As the Java client's refresh thread does: keep the token while it is valid.
            log.warning(
                "could not renew the OAuth token from %s (%s); using the current one, valid "
                "for %.0f s more",
                _shown_url(self.token_endpoint_url),
                exc,
                current[2] - self._clock(),
            )
            return current[0]
        issued = self._clock()
        renew_at = issued + (expires_at - issued) * _REFRESH_WINDOW_FACTOR
        with _TOKENS_LOCK:
            _TOKENS[self._settings()] = (token, renew_at, expires_at)
        return token

    def fetch(self) -> tuple[str, float]:
        """Request a new token from the endpoint (blocking: one HTTP request).

        Returns:
            ``(token, expires at)`` in clock seconds.

        Raises:
            AuthenticationError, KafkaConnectionError: as :meth:`token`.
        """
        self.fetches += 1
        shown = _shown_url(self.token_endpoint_url)
        status, body = self._post()
        if status not in (200, 201):
            detail = self._error_detail(body)
            if status in _FATAL_STATUSES:
                raise AuthenticationError(
                    f"the OAuth token endpoint {shown} refused the client credentials of "
                    f"client {self.client_id!r}: HTTP {status}{detail}"
                )
            raise KafkaConnectionError(
                f"the OAuth token endpoint {shown} answered HTTP {status}{detail}",
                retriable=True,
            )
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        token = document.get("access_token") if isinstance(document, dict) else None
        if not isinstance(token, str) or not token:
            raise AuthenticationError(
                f"the OAuth token endpoint {shown} answered without an access_token"
            )
        assert isinstance(document, dict)
        now = self._clock()
        expires_at: float | None = None
        claims = _jwt_claims(token)
        if claims is not None:
            subject = claims.get(self._sub_claim_name)
            if not isinstance(subject, str) or not subject:
                raise AuthenticationError(
                    f"the token from {shown} has no {self._sub_claim_name!r} claim "
                    "(sasl.oauthbearer.sub.claim.name) naming the principal"
                )
            exp = claims.get("exp")
            if isinstance(exp, (int, float)) and not isinstance(exp, bool):
                expires_at = float(exp)
        expires_in = document.get("expires_in")
        if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
            expires_at = min(expires_at or math.inf, now + float(expires_in))
        if expires_at is None:
            raise AuthenticationError(
                f"the token from {shown} has no lifetime: neither an exp claim nor expires_in"
            )
        if expires_at <= now:
            raise AuthenticationError(f"the token from {shown} has already expired")
        log.debug(
            "fetched an OAuth token from %s for client %r, valid for %.0f s%s",
            shown,
            self.client_id,
            expires_at - now,
            f"; scope {claims.get(self._scope_claim_name)!r}"
            if claims and self._scope_claim_name in claims
            else "",
        )
        return token, expires_at

    def _authorization(self) -> str:
        client_id, secret = self.client_id, self._client_secret
        if self._urlencode_header:
            client_id = urllib.parse.quote_plus(client_id)
            secret = urllib.parse.quote_plus(secret)
        pair = f"{client_id}:{secret}".encode()
        # RFC 7617: the standard alphabet, not the URL-safe one.
        return "Basic " + base64.b64encode(pair).decode("ascii")

    def _post(self) -> tuple[int, bytes]:
        parts = urllib.parse.urlsplit(self.token_endpoint_url)
        body = "grant_type=client_credentials"
        if self.scope:
            body += "&scope=" + urllib.parse.quote_plus(self.scope)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        assert parts.hostname is not None
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            context = self._ssl_context or ssl.create_default_context()
            connection = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=self._connect_timeout, context=context
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname, parts.port, timeout=self._connect_timeout
            )
        shown = _shown_url(self.token_endpoint_url)
        try:
            connection.connect()
            if connection.sock is not None:
                connection.sock.settimeout(self._read_timeout)
            connection.request(
                "POST",
                path,
                body=body.encode("ascii"),
                headers={
                    "Accept": "application/json",
                    "Authorization": self._authorization(),
                    "Cache-Control": "no-cache",
                    "Content-Type": "application/x-www-form-urlencoded",
                },
            )
            response = connection.getresponse()
            data = response.read(_MAX_RESPONSE_BYTES + 1)
            if len(data) > _MAX_RESPONSE_BYTES:
                raise AuthenticationError(
                    f"the OAuth token endpoint {shown} answered with more than 1 MiB"
                )
            return response.status, data
        except ssl.SSLCertVerificationError as exc:
            raise SslError(
                f"the OAuth token endpoint {shown} has a certificate that is not trusted: "
                f"{exc.verify_message}"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise KafkaConnectionError(
                f"could not get a token from the OAuth token endpoint {shown}: {reason}",
                retriable=True,
            ) from None
        finally:
            connection.close()

    def _error_detail(self, body: bytes) -> str:
        """RFC 6749 section 5.2's ``error`` and ``error_description``, which carry no
        secrets by design; still cut short and scrubbed of the client secret."""
        try:
            document = json.loads(body[:4096])
        except ValueError:
            return ""
        if not isinstance(document, dict):
            return ""
        words = [str(document[key])[:200] for key in ("error", "error_description")
                 if key in document]
        text = " - ".join(words).replace(self._client_secret, "***")
        return f" ({text})" if text else ""


class UnsecuredTokenProvider:
    """Unsigned JWTs (``alg: none``), made here as Kafka's unsecured login handler makes them.

    Only a broker that runs Kafka's unsecured validator accepts them: for development and
    tests, never production. Built from the ``unsecuredLogin*`` options of an
    ``OAuthBearerLoginModule`` line (:meth:`from_jaas_options`), or directly.

    Args:
        claims: the token's claims besides ``iat`` and ``exp``; must hold the principal claim.
        principal_claim_name: the claim naming the principal (``sub``).
        lifetime_seconds: how long each token is valid (3600, as in Kafka).
        extensions: SASL extensions sent with the token.
        clock: seconds since the epoch.

    Raises:
        ConfigurationError: the principal claim is missing, or ``iat``/``exp`` are given.
    """

    def __init__(
        self,
        claims: Mapping[str, Any],
        *,
        principal_claim_name: str = "sub",
        lifetime_seconds: float = 3600.0,
        extensions: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        subject = claims.get(principal_claim_name)
        if not isinstance(subject, str) or not subject:
            raise ConfigurationError(
                f"an unsecured OAUTHBEARER token needs the {principal_claim_name!r} claim "
                f"(unsecuredLoginStringClaim_{principal_claim_name})"
            )
        reserved = sorted({"iat", "exp"} & set(claims))
        if reserved:
            raise ConfigurationError(
                f"the claim(s) {', '.join(reserved)} of an unsecured token are set from "
                "unsecuredLoginLifetimeSeconds and cannot be given"
            )
        if not lifetime_seconds > 0:
            raise ConfigurationError("unsecuredLoginLifetimeSeconds must be greater than 0")
        self.claims = dict(claims)
        self.principal_claim_name = principal_claim_name
        self.lifetime_seconds = float(lifetime_seconds)
        self._extensions = dict(extensions or {})
        self._clock = clock

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str]) -> UnsecuredTokenProvider:
        """Build from the ``unsecuredLogin*`` options of an ``OAuthBearerLoginModule`` line.

        ``unsecuredLoginStringClaim_<name>``, ``unsecuredLoginNumberClaim_<name>`` and
        ``unsecuredLoginListClaim_<name>`` (the value's first character separates the items)
        set claims; ``unsecuredLoginExtension_<name>`` sets SASL extensions;
        ``unsecuredLoginPrincipalClaimName`` (``sub``), ``unsecuredLoginLifetimeSeconds``
        (3600) and ``unsecuredLoginScopeClaimName`` (``scope``) as in Kafka.

        Raises:
            ConfigurationError: an unknown ``unsecuredLogin`` option or a value of the wrong
                kind (the message names the option, not its value).
        """
        claims: dict[str, Any] = {}
        extensions: dict[str, str] = {}
        principal = "sub"
        lifetime = 3600.0
        for name, value in options.items():
            kind, _, claim = name.partition("_")
            if kind == "unsecuredLoginStringClaim" and claim:
                claims[claim] = value
            elif kind == "unsecuredLoginNumberClaim" and claim:
                try:
                    number = float(value)
                except ValueError:
                    raise ConfigurationError(f"JAAS option {name} must be a number") from None
                claims[claim] = int(number) if number.is_integer() else number
            elif kind == "unsecuredLoginListClaim" and claim:
                claims[claim] = [item for item in value[1:].split(value[:1]) if item] if (
                    value
                ) else []
            elif kind == "unsecuredLoginExtension" and claim:
                extensions[claim] = value
            elif name == "unsecuredLoginPrincipalClaimName":
                principal = value
            elif name == "unsecuredLoginLifetimeSeconds":
                try:
                    lifetime = float(value)
                except ValueError:
                    raise ConfigurationError(f"JAAS option {name} must be a number") from None
            elif name == "unsecuredLoginScopeClaimName":
                pass  # the scope claim is one of the list claims above, under this name
            else:
                raise ConfigurationError(f"unknown JAAS option {name} of OAuthBearerLoginModule")
        return cls(
            claims, principal_claim_name=principal, lifetime_seconds=lifetime,
            extensions=extensions,
        )

    def __repr__(self) -> str:
        return (
            f"<UnsecuredTokenProvider {self.principal_claim_name}="
            f"{self.claims[self.principal_claim_name]!r}>"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UnsecuredTokenProvider):
            return NotImplemented
        return (self.claims, self.principal_claim_name, self.lifetime_seconds,
                self._extensions) == (other.claims, other.principal_claim_name,
                                      other.lifetime_seconds, other._extensions)

    def __hash__(self) -> int:
        return hash((self.principal_claim_name, self.lifetime_seconds))

    def extensions(self) -> Mapping[str, str]:
        """The SASL extensions sent with each token."""
        return dict(self._extensions)

    def token(self) -> str:
        """A new unsigned JWT, valid for ``lifetime_seconds`` from now."""
        # Whole seconds: Kafka's unsecured validator allows no clock skew, so an iat with a
        # fraction of this very millisecond can be "in the future" to a broker that reads
        # the time in whole milliseconds (and iat * 1000 in floating point may not be whole).
        now = math.floor(self._clock())
        claims = {**self.claims, "iat": now, "exp": now + self.lifetime_seconds}
        return f"{_b64url_json({'alg': 'none'})}.{_b64url_json(claims)}."
