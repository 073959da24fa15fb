"""The handshake on a new connection, and SASL re-authentication (KIP-368), as coroutines.

Both run over a :class:`~aioproducer.net.connection.BrokerConnection` that is
``HANDSHAKING``: the connection sends their requests (past ``max_in_flight``, as nothing else
is sent meanwhile) and resolves their responses like any other's; each round trip is bounded
by ``request_timeout_ms``, after which the connection is closed.

- :func:`negotiate_api_versions`: ApiVersions, from v3 down to the version the broker speaks.
- :func:`authenticate`: SaslHandshake v1, then SaslAuthenticate requests carrying the
  mechanism's messages (:mod:`aioproducer.net.sasl`) until it completes; the same exchange
  re-authenticates before the session lifetime the broker granted ends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from aioproducer.errors import (
    AuthenticationError,
    RequestTimedOutError,
    UnsupportedVersionError,
    error_for_code,
)
from aioproducer.net.kerberos import KdcUnreachableError
from aioproducer.net.sasl import create_mechanism
from aioproducer.protocol.api import ApiKey, Request, Response
from aioproducer.protocol.error_codes import (
    ILLEGAL_SASL_STATE,
    UNSUPPORTED_SASL_MECHANISM,
    UNSUPPORTED_VERSION,
)
from aioproducer.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)

if TYPE_CHECKING:
    from aioproducer.config import ProducerConfig

__all__ = [
    "SASL_PROTOCOLS",
    "HandshakeConnection",
    "authenticate",
    "negotiate_api_versions",
    "security_protocol_name",
]

log = logging.getLogger("aioproducer.net")

#: The security protocols that authenticate with SASL after ApiVersions.
SASL_PROTOCOLS: Final = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


#: The first ApiVersions version tried; v3 carries the client's software name and version.
_API_VERSIONS_FIRST_VERSION: Final = 3

_R = TypeVar("_R", bound=Response)


class HandshakeConnection(Protocol):
    """What the handshake needs of a :class:`~aioproducer.net.connection.BrokerConnection`
    (which runs it: the connection imports this module, not the other way round)."""

    description: str
    session_lifetime_ms: int
    #: What the handshake waits for now, for error messages ("" before it starts).
    waiting_for: str
    #: The broker's host name as given (GSSAPI builds the service principal from it).
    host: str

    def negotiate(self, request_type: type[Request[Any]], highest: int | None = None) -> int:
        """The version of ``request_type`` to send to this broker."""
        ...

    def send(self, request: Request[_R], version: int | None = None) -> asyncio.Future[_R | None]:
        """Send ``request``; the future of its response."""
        ...

    def close(self, exc: BaseException | None = None) -> None:
        """Close the connection, failing what is in flight with ``exc``."""
        ...


def security_protocol_name(value: object) -> str:
    """The upper-case name of a ``security_protocol`` (or ``sasl_mechanism``) given as a str
    or a str-valued enum."""
    return str(getattr(value, "value", value)).upper()


async def negotiate_api_versions(
    connection: HandshakeConnection, config: ProducerConfig
) -> ApiVersionsResponse:
    """Ask the broker which versions of each API it speaks (ApiVersions).

    Starts with v3 (which carries ``client_software_name`` and ``client_software_version``);
    a broker that does not speak it answers UNSUPPORTED_VERSION with the range it does, and
    the request is sent again in the highest version of that range (else v0).

    Returns:
        The broker's successful answer.

    Raises:
        KafkaError: the broker answered with another error.
        RequestTimedOutError: no answer within ``request_timeout_ms`` (the connection is
            closed).
    """
    version = min(_API_VERSIONS_FIRST_VERSION, ApiVersionsRequest.MAX_VERSION)
    while True:
        request = ApiVersionsRequest(
            client_software_name=config.client_software_name,
            client_software_version=config.client_software_version,
        )
        response = await _handshake_request(connection, config, request, version)
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code == UNSUPPORTED_VERSION and version > 0:
            # The broker answered in v0 and listed the ApiVersions range it does speak.
            broker_max = next(
                (k.max_version for k in response.api_keys if k.api_key == ApiKey.API_VERSIONS),
                0,
            )
            fallback = broker_max if broker_max < version else 0
            log.debug(
                "%s does not support ApiVersions v%d; retrying with v%d",
                connection.description,
                version,
                fallback,
            )
            version = fallback
            continue
        if response.error_code != 0:
            raise error_for_code(
                response.error_code,
                f"ApiVersions v{version} to {connection.description} failed",
            )
        return response


async def authenticate(connection: HandshakeConnection, config: ProducerConfig) -> None:
    """Authenticate with SASL on a handshaken connection; a no-op without SASL.

    Sets ``connection.session_lifetime_ms`` to the lifetime the broker granted (0: none).
    See :meth:`aioproducer.net.connection.BrokerConnection.authenticate` for the errors.
    """
    protocol = security_protocol_name(config.security_protocol)
    if protocol not in SASL_PROTOCOLS:
        return
    mechanism_name = security_protocol_name(config.sasl_mechanism)
    try:
        handshake_version = connection.negotiate(SaslHandshakeRequest)
        authenticate_version = connection.negotiate(SaslAuthenticateRequest)
    except UnsupportedVersionError as exc:
        raise UnsupportedVersionError(
            f"{connection.description} does not offer SASL authentication (SaslHandshake and "
            f"SaslAuthenticate); is security_protocol={protocol} right for this listener? "
            f"({exc})"
        ) from exc
    if handshake_version < 1:
        # v0 sends SASL tokens unframed, as Kafka before 1.0 did: not supported.
        raise UnsupportedVersionError(
            f"{connection.description} speaks only SaslHandshake v0 (Kafka before 1.0); "
            "aioproducer needs v1 and SaslAuthenticate"
        )
    connection.waiting_for = "the broker's answer to SaslHandshake"
    handshake = await _handshake_request(
        connection, config, SaslHandshakeRequest(mechanism=mechanism_name), handshake_version
    )
    assert handshake is not None
    if handshake.error_code == UNSUPPORTED_SASL_MECHANISM:
        offered = ", ".join(handshake.mechanisms) or "none"
        if mechanism_name in handshake.mechanisms:
            # Seen from brokers whose listener has SASL turned off (Tansu without
            # --authentication): they refuse the mechanism yet echo it back.
            problem = (
                f"{connection.description} refused SASL mechanism {mechanism_name} although it "
                f"lists it ({offered}); is SASL enabled on this listener?"
            )
        else:
            problem = (
                f"{connection.description} does not enable SASL mechanism {mechanism_name} "
                f"(sasl_mechanism); it offers: {offered}"
            )
        raise error_for_code(UNSUPPORTED_SASL_MECHANISM, problem)
    if handshake.error_code != 0:
        hint = ""
        if handshake.error_code == ILLEGAL_SASL_STATE:
            # Kafka's answer to SaslHandshake on a listener that is not a SASL one.
            hint = (
                ": is this a SASL listener? A PLAINTEXT or SSL listener answers this way; "
                "check that security_protocol matches the listener"
            )
        raise error_for_code(
            handshake.error_code,
            f"SaslHandshake for {mechanism_name} with {connection.description} failed{hint}",
        )
    connection.waiting_for = (
        "the Kerberos KDC (a service ticket)"
        if mechanism_name == "GSSAPI"
        else f"SASL {mechanism_name} credentials"
    )
    try:
        mechanism = await asyncio.wait_for(
            create_mechanism(
                mechanism_name,
                username=config.sasl_plain_username,
                password=config.sasl_plain_password,
                token_provider=config.sasl_oauth_token_provider,
                host=connection.host,
                kerberos={
                    "service_name": config.sasl_kerberos_service_name,
                    "principal": config.sasl_kerberos_principal,
                    "keytab": config.sasl_kerberos_keytab,
                    "ccache": config.sasl_kerberos_ccache,
                    "domain_name": config.sasl_kerberos_domain_name,
                },
            ),
            config.request_timeout_ms / 1000.0,
        )
    except asyncio.TimeoutError:
        if mechanism_name == "GSSAPI":
            # A slow KDC, as one that cannot be reached: worth another attempt.
            raise KdcUnreachableError(
                f"SASL GSSAPI: the Kerberos KDC gave no ticket within "
                f"{config.request_timeout_ms} ms (request_timeout_ms)"
            ) from None
        raise AuthenticationError(
            f"SASL {mechanism_name}: sasl_oauth_token_provider gave no token within "
            f"{config.request_timeout_ms} ms (request_timeout_ms)"
        ) from None
    connection.waiting_for = f"the broker's answer to SASL {mechanism_name} authentication"
    message: bytes | None = mechanism.initial_response()
    session_lifetime_ms = 0
    while message is not None:
        response = await _handshake_request(
            connection, config, SaslAuthenticateRequest(auth_bytes=message), authenticate_version
        )
        assert response is not None
        if response.error_code != 0:
            reason = mechanism.redact(response.error_message or "")
            detail = mechanism.server_error
            if detail and detail not in reason:
                reason = f"{reason} ({detail})" if reason else detail
            raise error_for_code(
                response.error_code,
                f"SASL {mechanism_name} authentication with {connection.description} failed"
                + (f": {reason}" if reason else ""),
            )
        session_lifetime_ms = response.session_lifetime_ms
        connection.session_lifetime_ms = session_lifetime_ms
        try:
            message = mechanism.respond(response.auth_bytes)
        except AuthenticationError as exc:
            raise type(exc)(f"{connection.description}: {exc}") from None
    log.debug(
        "authenticated to %s with SASL %s%s",
        connection.description,
        mechanism_name,
        f"; session lifetime {session_lifetime_ms} ms" if session_lifetime_ms > 0 else "",
    )


async def _handshake_request(
    connection: HandshakeConnection, config: ProducerConfig, request: Request[_R], version: int
) -> _R | None:
    future = connection.send(request, version)
    try:
        return await asyncio.wait_for(future, config.request_timeout_ms / 1000.0)
    except asyncio.TimeoutError as exc:
        error = RequestTimedOutError(
            f"{type(request).__name__} v{version} to {connection.description} got no response "
            f"within {config.request_timeout_ms} ms (request_timeout_ms)"
        )
        connection.close(error)
        raise error from exc
