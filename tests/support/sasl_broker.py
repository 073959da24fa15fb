"""A scripted Kafka broker that speaks SASL, to test the client's side of SaslHandshake and
SaslAuthenticate against an independent server.

:class:`ScriptedSaslBroker` is an asyncio server. Before authentication it answers only
ApiVersions, SaslHandshake (v0-1) and SaslAuthenticate (v0-2), decoding requests and encoding
responses by hand, so it does not trust the codec under test. The server side of SCRAM is the
`scramp <https://pypi.org/project/scramp/>`_ library, an implementation independent of
aioproducer's; PLAIN (RFC 4616) and OAUTHBEARER (RFC 7628) are checked here by hand.

After a successful exchange it either pipes the connection, byte for byte, to a real
broker (``upstream``: a Tansu broker, for full produce round trips over SASL), or closes
the connection on the next request. It behaves like Kafka where it matters: a failed
exchange gets SASL_AUTHENTICATION_FAILED (58) and the connection is closed; a mechanism the
broker does not enable gets UNSUPPORTED_SASL_MECHANISM (33) with the enabled list; an
OAUTHBEARER token it rejects gets an RFC 7628 error challenge first.

Pass ``ssl_context`` to serve SASL_SSL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import scramp

from tests.support.stream_server import StreamServer

__all__ = ["AuthAttempt", "ScriptedSaslBroker", "fetch_api_versions"]

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
SASL_AUTHENTICATION_FAILED = 58

ALL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass
class AuthAttempt:
    """One SASL exchange the broker saw."""

    mechanism: str
    username: str | None
    """The user (PLAIN, SCRAM) or the principal the token maps to (OAUTHBEARER)."""
    succeeded: bool
    extensions: dict[str, str] = field(default_factory=dict)
    """OAUTHBEARER extensions the client sent."""


# ---- hand-written wire helpers ------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Body:
    """A cursor over a request."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, count: int) -> bytes:
        if count < 0 or self.position + count > len(self.data):
            raise ValueError("request truncated")
        chunk = self.data[self.position : self.position + count]
        self.position += count
        return chunk

    def int16(self) -> int:
        value: int = struct.unpack(">h", self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def _request_header_flexible(api_key: int, version: int) -> bool:
    return (api_key == API_VERSIONS and version >= 3) or (
        api_key == SASL_AUTHENTICATE and version >= 2
    )


def _api_versions_body(
    version: int, error_code: int, ranges: Mapping[int, tuple[int, int]]
) -> bytes:
    keys = sorted(ranges.items())
    if version >= 3:
        body = struct.pack(">h", error_code) + _uvarint(len(keys) + 1)
        for key, (low, high) in keys:
            body += struct.pack(">hhh", key, low, high) + b"\x00"
        return body + struct.pack(">i", 0) + b"\x00"
    body = struct.pack(">hi", error_code, len(keys))
    for key, (low, high) in keys:
        body += struct.pack(">hhh", key, low, high)
    if version >= 1:
        body += struct.pack(">i", 0)
    return body


def fetch_api_versions(host: str, port: int, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """The ``{api_key: (min, max)}`` a broker reports to ApiVersions v0 (blocking)."""
    client_id = b"sasl-broker"
    request = struct.pack(">hhih", API_VERSIONS, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
    body = _Body(data[4:])
    body.int32()  # correlation id
    if body.int16() != 0:
        raise ConnectionError("ApiVersions v0 failed")
    ranges: dict[int, tuple[int, int]] = {}
    for _ in range(body.int32()):
        key, low, high = body.int16(), body.int16(), body.int16()
        ranges[key] = (low, high)
    return ranges


class _Exchange:
    """The server side of one connection's SASL exchange."""

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.step = 0
        self.scram: Any = None
        self.oauth_rejected = False
        self.username: str | None = None
        self.extensions: dict[str, str] = {}


class _AuthFailed(Exception):
    def __init__(self, message: str, *, close: bool = True) -> None:
        super().__init__(message)
        self.close = close


class ScriptedSaslBroker(StreamServer):
    """A scripted SASL broker on ``host:port``.

    Args:
        users: user name to password, for PLAIN and SCRAM.
        tokens: valid OAUTHBEARER tokens, mapped to the principal each stands for.
        mechanisms: the mechanisms enabled (listed in SaslHandshake answers).
        upstream: ``(host, port)`` of a real broker to pipe authenticated connections to; its
            ApiVersions ranges are advertised (plus the SASL ones).
        ssl_context: serve TLS (SASL_SSL) with this server context.
        host, port: where to listen (port 0 picks one).
        scram_iterations: the iteration count given to SCRAM clients.
        sasl_authenticate_max_version: the highest SaslAuthenticate version advertised.
        tamper_server_signature: send a wrong SCRAM server signature (a broker that does not
            know the password, or a man in the middle).
        scram_error_in_server_final: answer a bad SCRAM proof with ``e=invalid-proof`` in a
            successful SaslAuthenticate response instead of error 58.
        echo_credentials: put the password or token the client sent into the error message of
            a failed exchange, as a careless broker might.
        session_lifetime_ms: reported in SaslAuthenticate v1+ responses.
    """

    def __init__(
        self,
        *,
        users: Mapping[str, str] | None = None,
        tokens: Mapping[str, str] | None = None,
        mechanisms: Sequence[str] = ALL_MECHANISMS,
        upstream: tuple[str, int] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        scram_iterations: int = 4096,
        sasl_authenticate_max_version: int = 2,
        tamper_server_signature: bool = False,
        scram_error_in_server_final: bool = False,
        echo_credentials: bool = False,
        session_lifetime_ms: int = 0,
    ) -> None:
        self.users = dict(users or {})
        self.tokens = dict(tokens or {})
        self.mechanisms = list(mechanisms)
        super().__init__(host, port)
        self.upstream = upstream
        self._ssl_context = ssl_context
        self.tamper_server_signature = tamper_server_signature
        self.scram_error_in_server_final = scram_error_in_server_final
        self.echo_credentials = echo_credentials
        self.session_lifetime_ms = session_lifetime_ms
        self._scram_iterations = scram_iterations
        self._scram_credentials: dict[tuple[str, str], tuple[bytes, bytes, bytes, int]] = {}
        for name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            mechanism = scramp.ScramMechanism(name)
            for user, password in self.users.items():
                self._scram_credentials[(name, user)] = mechanism.make_auth_info(
                    password, iteration_count=scram_iterations
                )
        self._ranges: dict[int, tuple[int, int]] = {}
        self._sasl_authenticate_max_version = sasl_authenticate_max_version
        #: Every SASL exchange, in order.
        self.attempts: list[AuthAttempt] = []
        #: ``(api_key, version)`` of every request answered here (not the piped ones).
        self.requests: list[tuple[int, int]] = []
        #: TCP connections accepted.
        self.connections = 0

    async def start(self) -> None:
        """Listen; with an upstream, learn its ApiVersions ranges first."""
        ranges: dict[int, tuple[int, int]] = {}
        if self.upstream is not None:
            ranges = await asyncio.get_running_loop().run_in_executor(
                None, fetch_api_versions, *self.upstream
            )
        ranges[API_VERSIONS] = (0, 3)
        ranges[SASL_HANDSHAKE] = (0, 1)
        ranges[SASL_AUTHENTICATE] = (0, self._sasl_authenticate_max_version)
        self._ranges = ranges
        await self._listen(self._ssl_context)

    # ---- serving ------------------------------------------------------------------------

    # A malformed frame from the client (ValueError) ends its connection too.
    _ignored_errors = (*StreamServer._ignored_errors, ValueError)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self._converse(reader, writer)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        exchange: _Exchange | None = None
        authenticated = False
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            body = _Body(frame)
            api_key, version, correlation_id = body.int16(), body.int16(), body.int32()
            client_id_length = body.int16()
            if client_id_length > 0:
                body.take(client_id_length)
            if _request_header_flexible(api_key, version):
                body.skip_tags()
            if authenticated and api_key not in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
                if self.upstream is None:
                    return
                await self._pipe_upstream(struct.pack(">i", size) + frame, reader, writer)
                return
            self.requests.append((api_key, version))
            if api_key == API_VERSIONS:
                self._answer_api_versions(writer, correlation_id, version)
            elif api_key == SASL_HANDSHAKE:
                mechanism = body.take(body.int16()).decode()
                if mechanism in self.mechanisms:
                    exchange = _Exchange(mechanism)
                    error = 0
                else:
                    exchange = None
                    error = UNSUPPORTED_SASL_MECHANISM
                payload = struct.pack(">hi", error, len(self.mechanisms))
                for name in self.mechanisms:
                    payload += struct.pack(">h", len(name)) + name.encode()
                self._respond(writer, correlation_id, payload)
                if error:
                    await writer.drain()
                    return
            elif api_key == SASL_AUTHENTICATE:
                if version >= 2:
                    auth_bytes = body.take(body.uvarint() - 1)
                else:
                    auth_bytes = body.take(body.int32())
                if exchange is None or authenticated:
                    self._answer_authenticate(
                        writer,
                        correlation_id,
                        version,
                        ILLEGAL_SASL_STATE,
                        "SaslAuthenticate before a successful SaslHandshake",
                        b"",
                    )
                    await writer.drain()
                    return
                try:
                    reply, done = self._step(exchange, auth_bytes)
                except _AuthFailed as failure:
                    self.attempts.append(
                        AuthAttempt(
                            exchange.mechanism, exchange.username, False, exchange.extensions
                        )
                    )
                    self._answer_authenticate(
                        writer,
                        correlation_id,
                        version,
                        SASL_AUTHENTICATION_FAILED,
                        str(failure),
                        b"",
                    )
                    await writer.drain()
                    return
                self._answer_authenticate(writer, correlation_id, version, 0, None, reply)
                if done:
                    authenticated = True
                    self.attempts.append(
                        AuthAttempt(
                            exchange.mechanism, exchange.username, True, exchange.extensions
                        )
                    )
            else:
                # Kafka closes a connection that sends other requests before authenticating.
                return
            await writer.drain()

    def _respond(
        self,
        writer: asyncio.StreamWriter,
        correlation_id: int,
        body: bytes,
        *,
        flexible: bool = False,
    ) -> None:
        header = struct.pack(">i", correlation_id) + (b"\x00" if flexible else b"")
        writer.write(struct.pack(">i", len(header) + len(body)) + header + body)

    def _answer_api_versions(
        self, writer: asyncio.StreamWriter, correlation_id: int, version: int
    ) -> None:
        if version > self._ranges[API_VERSIONS][1]:
            body = _api_versions_body(0, UNSUPPORTED_VERSION, self._ranges)
        else:
            body = _api_versions_body(version, 0, self._ranges)
        self._respond(writer, correlation_id, body)  # ApiVersions: response header v0 always

    def _answer_authenticate(
        self,
        writer: asyncio.StreamWriter,
        correlation_id: int,
        version: int,
        error_code: int,
        message: str | None,
        auth_bytes: bytes,
    ) -> None:
        body = struct.pack(">h", error_code)
        encoded = message.encode() if message is not None else None
        if version >= 2:
            body += _uvarint(0) if encoded is None else _uvarint(len(encoded) + 1) + encoded
            body += _uvarint(len(auth_bytes) + 1) + auth_bytes
        else:
            body += (
                struct.pack(">h", -1)
                if encoded is None
                else struct.pack(">h", len(encoded)) + encoded
            )
            body += struct.pack(">i", len(auth_bytes)) + auth_bytes
        if version >= 1:
            body += struct.pack(">q", self.session_lifetime_ms)
        if version >= 2:
            body += b"\x00"
        self._respond(writer, correlation_id, body, flexible=version >= 2)

    # ---- mechanisms ---------------------------------------------------------------------

    def _step(self, exchange: _Exchange, data: bytes) -> tuple[bytes, bool]:
        """The server's answer to the client's bytes, and whether authentication is done."""
        exchange.step += 1
        if exchange.mechanism == "PLAIN":
            return self._plain(exchange, data)
        if exchange.mechanism == "OAUTHBEARER":
            return self._oauthbearer(exchange, data)
        return self._scram(exchange, data)

    def _plain(self, exchange: _Exchange, data: bytes) -> tuple[bytes, bool]:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise _AuthFailed("Authentication failed: malformed PLAIN message")
        authzid, authcid, password = (part.decode("utf-8") for part in parts)
        exchange.username = authcid
        if self.users.get(authcid) != password or authzid not in ("", authcid):
            detail = f" (got password {password!r})" if self.echo_credentials else ""
            raise _AuthFailed(f"Authentication failed: Invalid username or password{detail}")
        return b"", True

    def _oauthbearer(self, exchange: _Exchange, data: bytes) -> tuple[bytes, bool]:
        if exchange.oauth_rejected:
            # RFC 7628 3.2.3: after the error challenge the client sends a lone %x01.
            if data != b"\x01":
                raise _AuthFailed("Authentication failed: expected %x01 after the error")
            raise _AuthFailed("Authentication failed: invalid token")
        text = data.decode("ascii")
        gs2_end = text.find(",", text.find(",") + 1)
        if not text.startswith(("n,", "y,")) or gs2_end < 0:
            raise _AuthFailed("Authentication failed: malformed OAUTHBEARER message")
        fields = text[gs2_end + 1 :]
        if not fields.startswith("\x01") or not fields.endswith("\x01\x01"):
            raise _AuthFailed("Authentication failed: malformed OAUTHBEARER message")
        token: str | None = None
        for item in fields[1:-2].split("\x01"):
            key, _, value = item.partition("=")
            if key == "auth":
                scheme, _, token = value.partition(" ")
                if scheme.lower() != "bearer":
                    raise _AuthFailed("Authentication failed: not a bearer token")
            else:
                exchange.extensions[key] = value
        principal = self.tokens.get(token or "")
        if principal is None:
            exchange.oauth_rejected = True
            status: dict[str, str] = {"status": "invalid_token"}
            if self.echo_credentials:
                status["token"] = token or ""
            return json.dumps(status).encode(), False
        exchange.username = principal
        return b"", True

    def _scram(self, exchange: _Exchange, data: bytes) -> tuple[bytes, bool]:
        name = exchange.mechanism
        if exchange.step == 1:

            def auth_fn(username: str) -> tuple[bytes, bytes, bytes, int]:
                exchange.username = username
                credentials = self._scram_credentials.get((name, username))
                if credentials is None:
                    raise scramp.ScramException("unknown user")
                return credentials

            exchange.scram = scramp.ScramMechanism(name).make_server(auth_fn)
            try:
                exchange.scram.set_client_first(data.decode("utf-8"))
            except scramp.ScramException:
                raise _AuthFailed(
                    f"Authentication failed during authentication due to invalid credentials "
                    f"with SASL mechanism {name}"
                ) from None
            return str(exchange.scram.get_server_first()).encode(), False
        try:
            exchange.scram.set_client_final(data.decode("utf-8"))
        except scramp.ScramException:
            if self.scram_error_in_server_final:
                return str(exchange.scram.get_server_final()).encode(), False
            raise _AuthFailed(
                f"Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {name}"
            ) from None
        server_final = str(exchange.scram.get_server_final())
        if self.tamper_server_signature:
            signature = server_final[2:]
            server_final = "v=" + ("A" * (len(signature) - 1)) + "="
        return server_final.encode(), True

    # ---- piping ---------------------------------------------------------------------------

    async def _pipe_upstream(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        assert self.upstream is not None
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        try:
            up_writer.write(first)
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            up_writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
        writer.close()
