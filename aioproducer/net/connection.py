"""Connections to brokers: one pipelined :class:`BrokerConnection` per broker, and the
:class:`ConnectionManager` that opens them on demand with reconnect backoff.

:class:`BrokerConnection` moves bytes: it frames requests, writes them (on a plaintext
connection, by handing a copy to a native writer thread, ``aioproducer._sockwriter``; else with
``transport.writelines``, no joining of large buffers), splits the incoming byte stream into
size-prefixed frames and resolves each request's future strictly in the order the requests were
sent, because a Kafka broker answers the requests of one connection in order.

It is an :class:`asyncio.Protocol` (not a stream) because the protocol API costs about half
as much per read as streams, and it runs unchanged on uvloop.

Failure policy, in one place:

- The connection dies (reset, EOF, write error, :meth:`BrokerConnection.close`): every
  in-flight request fails once with a retriable :class:`~aioproducer.errors.KafkaConnectionError`
  that names the broker and the cause.
- A response cannot be decoded: that request fails with
  :class:`~aioproducer.errors.CorruptResponseError`. The byte stream can no longer be trusted
  (a decoder that stopped early or read too far means the framing or the version is wrong), so
  the connection is closed and the other in-flight requests fail as retriable connection errors.
- A frame's size prefix is below 4, above ``max_response_size`` or above what a response to
  the oldest in-flight request can take
  (:meth:`~aioproducer.protocol.api.Request.response_size_limit`: 1 MiB for the APIs whose
  answers have a fixed shape, in proportion to the request for Produce and the
  transactional ones), or a response carries a correlation id that no request explains: the
  connection is closed with :class:`~aioproducer.errors.CorruptResponseError` for the oldest
  in-flight request. Nothing is read, let alone allocated, past the size prefix.
- Bytes arrive while no request awaits a response (nothing in flight): the connection is
  closed with :class:`~aioproducer.errors.CorruptResponseError` as its cause and a warning.
  After requests sent without expecting a response (Produce with ``acks=0``), which some
  brokers answer anyway, the rest of such a frame must come within ``request_timeout_ms``.
- The oldest in-flight request is older than ``request_timeout_ms``
  (:meth:`BrokerConnection.check_request_timeouts`): it fails with
  :class:`~aioproducer.errors.RequestTimedOutError` and the connection is closed, as the Java
  client does, because a late answer would arrive on a pipeline nobody waits on anymore.

All times are seconds of the injected clock (``time.monotonic`` by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import os
import random
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar, Union, cast

from aioproducer.backoff import ExponentialBackoff
from aioproducer.errors import (
    AuthenticationError,
    ConfigurationError,
    CorruptResponseError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    RequestTimedOutError,
    SslError,
    UnsupportedVersionError,
    error_for_code,
)
from aioproducer.net.sasl import create_mechanism
from aioproducer.net.tls import ssl_context_for
from aioproducer.protocol.api import (
    SMALL_RESPONSE_LIMIT,
    ApiKey,
    Request,
    Response,
    response_header_flexible,
)
from aioproducer.protocol.error_codes import (
    ILLEGAL_SASL_STATE,
    UNSUPPORTED_SASL_MECHANISM,
    UNSUPPORTED_VERSION,
)
from aioproducer.protocol.framing import encode_request, read_correlation_id, split_response_header
from aioproducer.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)

try:
    from aioproducer._sockwriter import SocketWriter
except ImportError:  # not Linux, or the pure-Python install: writes go through the transport
    _SOCKET_WRITER_BUILT = False
else:
    _SOCKET_WRITER_BUILT = True

if TYPE_CHECKING:
    from aioproducer.config import ProducerConfig

__all__ = [
    "MIN_FRAME_SIZE",
    "WRITE_BUFFER_HIGH_WATER",
    "WRITE_BUFFER_LOW_WATER",
    "BrokerConnection",
    "ConnectionManager",
    "ConnectionState",
    "ExponentialBackoff",
    "FinalizedFeatures",
]

log = logging.getLogger("aioproducer.net")

#: The smallest legal response frame: a response header is at least its 4-byte correlation id.
MIN_FRAME_SIZE: Final = 4

#: The transport's write buffer size above which :attr:`BrokerConnection.writable` turns False.
#: asyncio's default (64 KiB) is smaller than one typical produce request, which would make the
#: connection look congested after every request; 1 MiB keeps one large request plus headroom.
WRITE_BUFFER_HIGH_WATER: Final = 1 << 20
#: The write buffer size below which :attr:`BrokerConnection.writable` turns True again.
WRITE_BUFFER_LOW_WATER: Final = 256 << 10

# Compacting the receive buffer moves the unread tail to the front; doing it only once the read
# offset is large (and past half the buffer) keeps the total copying linear in the bytes read.
_COMPACT_THRESHOLD: Final = 64 << 10

# How many correlation ids of requests sent without expecting a response (Produce with acks=0)
# are remembered, to recognise the answers some brokers send anyway (Tansu, librdkafka's mock).
# Such answers come back in order, so a short memory is enough.
_UNANSWERED_MEMORY: Final = 1024

_CORRELATION_ID_MASK: Final = 0x7FFFFFFF

#: The first ApiVersions version tried; v3 carries the client's software name and version.
_API_VERSIONS_FIRST_VERSION: Final = 3

_SASL_PROTOCOLS: Final = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
# The protocols whose transport writes the bytes it is given unchanged, so that a native
# writer may write them to the socket itself: Kafka's SASL never wraps the stream after
# authentication (no SASL security layer). Any other protocol (SSL, SASL_SSL) encrypts in
# the transport, and its bytes must never reach the raw socket, whatever the transport says
# about itself.
_RAW_SOCKET_PROTOCOLS: Final = frozenset({"PLAINTEXT", "SASL_PLAINTEXT"})
_SSL_NETWORK_ERRORS: Final = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)

# (correlation id, request, version, future, sent at)
_InFlight = tuple[int, Request[Any], int, "asyncio.Future[Any]", float]

_R = TypeVar("_R", bound=Response)

OnClose = Callable[["BrokerConnection", Union[BaseException, None]], None]  # noqa: UP007
OnCapacity = Callable[["BrokerConnection"], None]


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """The cluster's finalized feature levels, as the latest ApiVersions answer told them.

    Brokers return the finalized features (``transaction.version``, ``metadata.version``,
    ...) with an epoch that grows whenever the controller changes them (KIP-584, ApiVersions
    v3+ tagged fields). As in the Java client's ``ApiVersions``, the answer with the highest
    epoch wins, whichever broker gave it.

    Attributes:
        epoch: the finalized-features epoch, -1 when no broker has reported any.
        levels: ``{feature name: finalized max version level}``.
        api_versions: ``{api_key: (min_version, max_version)}`` of the broker that reported
            these features.
        node_id: that broker's node id (negative for a bootstrap server).
    """

    epoch: int = -1
    levels: Mapping[str, int] = field(default_factory=dict)
    api_versions: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    node_id: int | None = None

    def level(self, feature: str) -> int:
        """The finalized max version level of ``feature``, 0 when it is not finalized."""
        return self.levels.get(feature, 0)


class ConnectionState(enum.Enum):
    """Where a :class:`BrokerConnection` is in its life."""

    CREATED = "created"
    """Built, :meth:`BrokerConnection.connect` not called yet."""
    CONNECTING = "connecting"
    """TCP (and TLS) connection being set up."""
    HANDSHAKING = "handshaking"
    """Connected; ApiVersions (and later SASL) in progress. Only the handshake sends."""
    READY = "ready"
    """Handshake done; the connection takes requests."""
    CLOSED = "closed"
    """Closed for good; every in-flight request has been failed."""


def _byte_count(count: int) -> str:
    return "1 byte" if count == 1 else f"{count} bytes"


def _protocol_name(value: object) -> str:
    # security_protocol may be a str or a str-valued enum.
    return str(getattr(value, "value", value)).upper()


# How a connection the peer closed shows itself.
_HUNG_UP: Final = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


def _tls_failure(description: str, exc: ssl.SSLError) -> SslError:
    """A clear, non-retriable error for a TLS handshake the client or the broker refused."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or str(exc)
        if "hostname" in reason.lower() or "ip address mismatch" in reason.lower():
            hint = (
                "the certificate does not name the host connected to: connect by a name it "
                "lists (the broker's advertised listener should use one), or have it reissued "
                "with this name. ssl_check_hostname=False skips only this check, but then any "
                "certificate the CA signed, for any host, is accepted as this broker's"
            )
        else:
            hint = (
                "the broker's certificate is not signed by a trusted CA; set ssl_cafile to "
                "the CA certificate that signed it"
            )
        return SslError(
            f"TLS certificate verification of {description} failed ({reason}): {hint}"
        )
    reason = getattr(exc, "reason", None) or str(exc)
    hint = ""
    if "CERTIFICATE" in str(reason).upper():
        hint = " (the broker rejected the client certificate: check ssl_certfile/ssl_keyfile)"
    return SslError(f"TLS handshake with {description} failed: {reason}{hint}")


def _decode_unsupported_api_versions(
    request: Request[Any], body: memoryview, version: int
) -> Response:
    """Read an UNSUPPORTED_VERSION answer to ApiVersions, whatever its layout.

    Kafka answers in the v0 layout, listing the ApiVersions range it speaks; librdkafka's mock
    cluster answers in the layout that was asked for, with an array count that does not match
    its entries. Only the error code is essential: without a readable range the handshake
    retries with v0, which every broker speaks.
    """
    for candidate in (0, version):
        try:
            response: Response = request.decode_response(body, candidate)
        except CorruptResponseError:
            continue
        return response
    return ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=[])


class BrokerConnection(asyncio.Protocol):
    """A pipelined connection to one broker, with the ApiVersions handshake.

    Build it, ``await connect()``, then :meth:`send` requests while :meth:`can_send` is true.
    Responses resolve the futures :meth:`send` returns, strictly in send order. The connection
    never reconnects: once closed it stays closed (:class:`ConnectionManager` makes new ones).

    Args:
        node_id: the broker's node id (negative for bootstrap servers, as in the Java client).
        host: the host name or address to connect to.
        port: the TCP port.
        config: the producer configuration (timeouts, limits, TLS, client id).
        on_close: called once, synchronously, when the connection closes, with the cause
            (None for a plain :meth:`close`).
        on_capacity: called when the connection can take more requests after it could not:
            a response freed a slot while the connection was at ``max_in_flight``, or the
            transport's write buffer drained (see :attr:`writable`).
        clock: the monotonic clock (seconds) used to time requests out.

    Attributes:
        node_id: the broker's node id.
        host: the broker's host.
        port: the broker's port.
        api_versions: ``{api_key: (min_version, max_version)}`` the broker supports, filled
            by the ApiVersions handshake.
        finalized_features: ``{feature name: finalized max version level}`` from the same
            answer (ApiVersions v3+; empty before v3 or from brokers without features).
        finalized_features_epoch: the epoch of those features, -1 when none were sent.
    """

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        config: ProducerConfig,
        *,
        on_close: OnClose | None = None,
        on_capacity: OnCapacity | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.finalized_features: dict[str, int] = {}
        self.finalized_features_epoch = -1
        self._config = config
        self._on_close = on_close
        self._on_capacity = on_capacity
        self._clock = clock
        # When the last request went out (clock seconds): connections_max_idle_ms counts
        # from there once nothing is in flight.
        self.last_used = clock()
        self._client_id: str | None = config.client_id
        self._max_in_flight: int = config.max_in_flight_requests_per_connection
        self._max_response_size: int = config.max_response_size
        # A size prefix up to this is accepted whatever the request (the size cap of every
        # API is at least SMALL_RESPONSE_LIMIT): the per-request cap is looked up only above.
        self._always_accepted_size: int = min(SMALL_RESPONSE_LIMIT, config.max_response_size)
        self._request_timeout: float = config.request_timeout_ms / 1000.0
        self._state = ConnectionState.CREATED
        self._transport: asyncio.Transport | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._unanswered_ids: deque[int] = deque(maxlen=_UNANSWERED_MEMORY)
        self._next_correlation_id = 0
        self._recv_buffer = bytearray()
        self._recv_offset = 0
        # Bytes received in all, and where in that stream the incomplete frame buffered with
        # nothing in flight starts and since when (clock seconds) it waits for its rest.
        self._received_bytes = 0
        self._partial_frame_start = -1
        self._partial_frame_since: float | None = None
        self._partial_frame_timer: asyncio.TimerHandle | None = None
        self._writable = True
        # Set once READY on a plaintext connection (socket_writer_thread): the thread that
        # writes our requests, and the eventfd it signals when its queue drains.
        self._writer: SocketWriter | None = None
        self._drain_fd = -1
        self._versions_cache: dict[type[Request[Any]], int] = {}
        # KIP-368: the session lifetime the broker gave at the last authentication (0: none),
        # the timer that starts re-authentication before it ends, and that exchange's task.
        self.session_lifetime_ms = 0
        self.reauthentications = 0
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        self._close_cause: BaseException | None = None
        self._lost: asyncio.Future[None] | None = None
        # Bootstrap servers' ids (-1, -2, ...) mean nothing to a user: name the address.
        self.description = (
            f"node {node_id} ({host}:{port})" if node_id >= 0 else f"bootstrap server {host}:{port}"
        )

    def __repr__(self) -> str:
        return (
            f"<BrokerConnection {self.description} {self._state.value} "
            f"in_flight={len(self._in_flight)}>"
        )

    # ---- state ---------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The connection's :class:`ConnectionState`."""
        return self._state

    @property
    def is_ready(self) -> bool:
        """True once the handshake is done and until the connection closes."""
        return self._state is ConnectionState.READY

    @property
    def closed(self) -> bool:
        """True once the connection is closed."""
        return self._state is ConnectionState.CLOSED

    @property
    def close_cause(self) -> BaseException | None:
        """Why the connection closed (None while open, or after a plain :meth:`close`)."""
        return self._close_cause

    @property
    def writable(self) -> bool:
        """False while the transport's write buffer is above its high-water mark.

        The sender should hold back new produce requests while this is False: the bytes
        would only queue in user space. ``on_capacity`` fires when it turns True again.
        :meth:`can_send` does not look at it, because the in-flight limit already bounds
        what can queue and small requests (Metadata) should not wait behind a full buffer.
        """
        return self._writable

    def can_send(self) -> bool:
        """True when the connection is ready and has fewer than the maximum in flight."""
        return self._state is ConnectionState.READY and len(self._in_flight) < self._max_in_flight

    def in_flight_count(self) -> int:
        """How many requests await a response."""
        return len(self._in_flight)

    def oldest_request_sent_at(self) -> float | None:
        """When the oldest in-flight request was sent (clock seconds), or None."""
        return self._in_flight[0][4] if self._in_flight else None

    def receive_buffer_size(self) -> int:
        """The bytes the connection holds of what it received: the start of a frame whose
        rest has not come yet, and handled bytes not yet compacted away (0 once closed)."""
        return len(self._recv_buffer)

    # ---- connecting --------------------------------------------------------------------------

    async def connect(self, setup_timeout_ms: float | None = None) -> None:
        """Open the connection, run the ApiVersions handshake and :meth:`authenticate`.

        The TCP (and TLS) setup is bounded by ``setup_timeout_ms`` (by default
        ``socket_connection_setup_timeout_ms``; :class:`ConnectionManager` grows it after
        failures); the handshake's requests by ``request_timeout_ms``.

        Raises:
            KafkaConnectionError: the broker is unreachable, did not answer in time or
                dropped the connection (retriable).
            AuthenticationError: the TLS handshake failed (the broker's certificate is not
                trusted or does not match its host name, or the broker refused the client's),
                or SASL authentication failed (see :meth:`authenticate`).
            ConfigurationError: the TLS files cannot be loaded.
            UnsupportedVersionError: the broker speaks no ApiVersions version in common.
            IllegalStateError: :meth:`connect` was already called.
        """
        if self._state is not ConnectionState.CREATED:
            raise IllegalStateError(f"connect() called on a {self._state.value} connection")
        self._state = ConnectionState.CONNECTING
        loop = asyncio.get_running_loop()
        self._lost = loop.create_future()
        config = self._config
        if setup_timeout_ms is None:
            setup_timeout_ms = config.socket_connection_setup_timeout_ms
        try:
            ssl_context = ssl_context_for(config)
        except ConfigurationError as exc:
            self._fail_connect(exc)
            raise
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: self,
                    self.host,
                    self.port,
                    ssl=ssl_context,
                    server_hostname=self.host if ssl_context is not None else None,
                ),
                setup_timeout_ms / 1000.0,
            )
        except asyncio.CancelledError:
            self._fail_connect(KafkaConnectionError(f"connecting to {self.description} cancelled"))
            raise
        except asyncio.TimeoutError as exc:
            hint = ""
            if ssl_context is not None:
                # A plaintext listener takes the ClientHello for the start of a huge request
                # and waits for the rest: the TLS handshake never completes.
                hint = " (a listener that does not speak TLS also ends this way)"
            error = KafkaConnectionError(
                f"could not connect to {self.description} within {setup_timeout_ms:.0f} ms "
                f"(socket_connection_setup_timeout_ms){hint}"
            )
            self._fail_connect(error)
            raise error from exc
        except ssl.SSLError as exc:
            if isinstance(exc, _SSL_NETWORK_ERRORS):
                # The peer went away mid-handshake: a network failure, worth retrying.
                error = KafkaConnectionError(
                    f"TLS handshake with {self.description} was cut off: {exc}"
                )
                self._fail_connect(error)
                raise error from exc
            auth_error = _tls_failure(self.description, exc)
            self._fail_connect(auth_error)
            raise auth_error from exc
        except OSError as exc:
            reason = str(exc) or type(exc).__name__
            if ssl_context is not None and (isinstance(exc, _HUNG_UP) or not str(exc)):
                # A plaintext listener reads the ClientHello as the size of a huge request,
                # refuses it and hangs up: the error then carries no text of its own.
                reason = (
                    f"the connection was closed during the TLS handshake ({reason}); a listener "
                    "that does not speak TLS does this: check that security_protocol "
                    "(SSL or SASL_SSL) matches the listener"
                )
            error = KafkaConnectionError(f"could not connect to {self.description}: {reason}")
            self._fail_connect(error)
            raise error from exc
        if self._state is ConnectionState.CLOSED:
            # Lost between connection_made and here (the broker hung up at once).
            raise self._connection_error("the connection closed during setup")
        self._state = ConnectionState.HANDSHAKING
        try:
            await self._handshake_api_versions()
            await self.authenticate()
        except BaseException as exc:
            if not self.closed:
                self.close(exc)
            rejection = self._tls_rejection()
            if rejection is not None and isinstance(exc, KafkaConnectionError):
                # With TLS 1.3 the broker checks the client certificate after the client's
                # side of the handshake is done, so its refusal arrives as an alert on the
                # first read: not a network failure, and retrying cannot help.
                raise _tls_failure(self.description, rejection) from exc
            if isinstance(exc, (KafkaError, asyncio.CancelledError)):
                raise
            raise self._connection_error(f"handshake failed: {exc!r}") from exc
        if self._state is ConnectionState.CLOSED:
            raise self._connection_error("the connection closed during the handshake")
        self._state = ConnectionState.READY
        self._start_writer()
        self._schedule_reauthentication(loop)
        log.debug("connected to %s; api versions %s", self.description, self.api_versions)

    # ---- re-authentication (KIP-368) -------------------------------------------------------

    def _schedule_reauthentication(self, loop: asyncio.AbstractEventLoop) -> None:
        """Re-authenticate before the session the broker granted ends.

        As the Java client, at a random point between 85% and 95% of the session lifetime,
        so that connections authenticated together do not all re-authenticate at once, and
        the exchange has the rest of the lifetime to finish. A broker closes a connection
        whose session ended at the next request other than re-authentication: a request
        sent with ``acks=0`` would then be lost without a word.
        """
        lifetime_ms = self.session_lifetime_ms
        if lifetime_ms <= 0 or self._state is not ConnectionState.READY:
            return
        delay = lifetime_ms / 1000.0 * (0.85 + 0.1 * random.random())
        self._reauth_timer = loop.call_later(delay, self._begin_reauthentication)

    def _begin_reauthentication(self) -> None:
        self._reauth_timer = None
        if self._state is not ConnectionState.READY or self._lost is None:
            return
        # Not ready while the exchange runs: the sender sends nothing else meanwhile (a
        # broker takes only SASL requests once re-authentication started). Responses to
        # requests already in flight come first, in order, as ever.
        self._state = ConnectionState.HANDSHAKING
        self._reauth_task = self._lost.get_loop().create_task(
            self._reauthenticate(), name=f"aioproducer-reauthenticate-{self.node_id}"
        )

    async def _reauthenticate(self) -> None:
        try:
            await self.authenticate()
        except asyncio.CancelledError:
            self._reauth_task = None
            raise
        except BaseException as exc:
            self._reauth_task = None
            if not self.closed:
                error = exc
                if not isinstance(exc, KafkaError):
                    error = self._connection_error(f"re-authentication failed: {exc!r}")
                    error.__cause__ = exc
                self.close(error)
            return
        self._reauth_task = None
        if self._state is not ConnectionState.HANDSHAKING:
            return  # closed meanwhile
        self.reauthentications += 1
        self._state = ConnectionState.READY
        log.debug("re-authenticated to %s", self.description)
        if self._lost is not None:
            self._schedule_reauthentication(self._lost.get_loop())
        on_capacity = self._on_capacity
        if on_capacity is not None:
            try:
                on_capacity(self)
            except Exception:
                log.exception("on_capacity callback of %s failed", self.description)

    def _start_writer(self) -> None:
        """Hand this connection's writes to a native thread (``socket_writer_thread``).

        On loopback, the write system call also runs the broker's side of TCP and wakes its
        thread: a fifth of the producer's CPU at 1 KiB records, on the event loop's thread.
        :class:`aioproducer._sockwriter.SocketWriter` copies each request and writes it on
        another core. Only on plaintext connections (TLS encrypts in the transport), and
        only when nothing is queued in the transport, so bytes stay in order.

        Plaintext means both: a ``security_protocol`` without TLS (PLAINTEXT or
        SASL_PLAINTEXT), and a transport that reports no ``ssl_object``. Either alone is not
        trusted: an event loop's TLS transport might not report its ``ssl_object``.
        """
        transport = self._transport
        if (
            not _SOCKET_WRITER_BUILT
            or not self._config.socket_writer_thread
            or _protocol_name(self._config.security_protocol) not in _RAW_SOCKET_PROTOCOLS
            or transport is None
            or transport.get_extra_info("ssl_object") is not None
            or transport.get_write_buffer_size() != 0
        ):
            return
        sock = transport.get_extra_info("socket")
        if sock is None:
            return
        drain_fd = -1
        try:
            drain_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._writer = SocketWriter(sock.fileno(), drain_fd)
        except OSError as exc:  # pragma: no cover - out of threads or descriptors
            log.debug("%s writes through the event loop (%s)", self.description, exc)
            if drain_fd >= 0:
                os.close(drain_fd)
            return
        self._drain_fd = drain_fd

    def _stop_writer(self, *, abort: bool, shutdown_write: bool = False) -> None:
        """Let the writer thread flush and close its socket (or drop what is queued)."""
        writer = self._writer
        if writer is None:
            return
        self._writer = None
        if abort:
            writer.abort()
        else:
            writer.close(shutdown_write, self._config.request_timeout_ms)
        # The writer no longer touches the eventfd once told to stop.
        drain_fd, self._drain_fd = self._drain_fd, -1
        if not self._writable and self._lost is not None:
            self._lost.get_loop().remove_reader(drain_fd)
        os.close(drain_fd)

    def _watch_drain(self, writer: SocketWriter) -> None:
        """Above the high-water mark: not writable until the writer's queue drains."""
        if writer.notify_below(WRITE_BUFFER_LOW_WATER) or self._lost is None:
            return
        self._writable = False
        self._lost.get_loop().add_reader(self._drain_fd, self._on_drained)

    def _on_drained(self) -> None:
        drain_fd = self._drain_fd
        if self._lost is not None:
            self._lost.get_loop().remove_reader(drain_fd)
        with contextlib.suppress(OSError):  # a spurious wakeup: the counter was read
            os.eventfd_read(drain_fd)
        self.resume_writing()

    async def authenticate(self) -> None:
        """Authenticate with SASL on the handshaken connection; a no-op without SASL.

        Runs after ApiVersions (the connection is ``HANDSHAKING``): SaslHandshake v1 names the
        mechanism, then SaslAuthenticate requests (KIP-152, v0-2 as negotiated) carry the
        mechanism's messages (:mod:`aioproducer.net.sasl`) until it completes. Each round
        trip is bounded by ``request_timeout_ms``, and so is the OAUTHBEARER token provider.

        Also re-authenticates (KIP-368): when the broker grants a session lifetime
        (``connections.max.reauth.ms``, or an expiring OAUTHBEARER token), the connection
        runs this exchange again before it ends, with fresh credentials from the token
        provider, holding back other requests meanwhile. A refusal then closes the
        connection with the error, as a refused connection attempt.

        Raises:
            UnsupportedSaslMechanismError: the broker does not enable ``sasl_mechanism``; the
                message lists the mechanisms it offers.
            SaslAuthenticationFailedError: the broker rejected the credentials; the message
                carries the broker's reason, with secrets redacted.
            AuthenticationError: another SASL failure (the server's SCRAM signature is wrong,
                the token provider failed, ILLEGAL_SASL_STATE, ...).
            UnsupportedVersionError: the broker does not speak SaslHandshake v1 and
                SaslAuthenticate (it has no SASL listener here, or is older than Kafka 1.0).
        """
        config = self._config
        protocol = _protocol_name(config.security_protocol)
        if protocol not in _SASL_PROTOCOLS:
            return
        mechanism_name = _protocol_name(config.sasl_mechanism)
        try:
            handshake_version = self.negotiate(SaslHandshakeRequest)
            authenticate_version = self.negotiate(SaslAuthenticateRequest)
        except UnsupportedVersionError as exc:
            raise UnsupportedVersionError(
                f"{self.description} does not offer SASL authentication (SaslHandshake and "
                f"SaslAuthenticate); is security_protocol={protocol} right for this listener? "
                f"({exc})"
            ) from exc
        if handshake_version < 1:
            # v0 sends SASL tokens unframed, as Kafka before 1.0 did: not supported.
            raise UnsupportedVersionError(
                f"{self.description} speaks only SaslHandshake v0 (Kafka before 1.0); "
                "aioproducer needs v1 and SaslAuthenticate"
            )
        handshake = await self._handshake_request(
            SaslHandshakeRequest(mechanism=mechanism_name), handshake_version
        )
        assert handshake is not None
        if handshake.error_code == UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(handshake.mechanisms) or "none"
            if mechanism_name in handshake.mechanisms:
                # Seen from brokers whose listener has SASL turned off (Tansu without
                # --authentication): they refuse the mechanism yet echo it back.
                problem = (
                    f"{self.description} refused SASL mechanism {mechanism_name} although it "
                    f"lists it ({offered}); is SASL enabled on this listener?"
                )
            else:
                problem = (
                    f"{self.description} does not enable SASL mechanism {mechanism_name} "
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
                f"SaslHandshake for {mechanism_name} with {self.description} failed{hint}",
            )
        try:
            mechanism = await asyncio.wait_for(
                create_mechanism(
                    mechanism_name,
                    username=config.sasl_plain_username,
                    password=config.sasl_plain_password,
                    token_provider=config.sasl_oauth_token_provider,
                ),
                self._request_timeout,
            )
        except asyncio.TimeoutError:
            raise AuthenticationError(
                f"SASL {mechanism_name}: sasl_oauth_token_provider gave no token within "
                f"{config.request_timeout_ms} ms (request_timeout_ms)"
            ) from None
        message: bytes | None = mechanism.initial_response()
        session_lifetime_ms = 0
        while message is not None:
            response = await self._handshake_request(
                SaslAuthenticateRequest(auth_bytes=message), authenticate_version
            )
            assert response is not None
            if response.error_code != 0:
                reason = mechanism.redact(response.error_message or "")
                detail = mechanism.server_error
                if detail and detail not in reason:
                    reason = f"{reason} ({detail})" if reason else detail
                raise error_for_code(
                    response.error_code,
                    f"SASL {mechanism_name} authentication with {self.description} failed"
                    + (f": {reason}" if reason else ""),
                )
            session_lifetime_ms = response.session_lifetime_ms
            self.session_lifetime_ms = session_lifetime_ms
            try:
                message = mechanism.respond(response.auth_bytes)
            except AuthenticationError as exc:
                raise type(exc)(f"{self.description}: {exc}") from None
        log.debug(
            "authenticated to %s with SASL %s%s",
            self.description,
            mechanism_name,
            f"; session lifetime {session_lifetime_ms} ms" if session_lifetime_ms > 0 else "",
        )

    def _tls_rejection(self) -> ssl.SSLError | None:
        """The TLS alert that closed the connection, if that is what closed it."""
        cause = self._close_cause
        if isinstance(cause, ssl.SSLError) and not isinstance(cause, _SSL_NETWORK_ERRORS):
            return cause
        return None

    def _fail_connect(self, error: KafkaError) -> None:
        if not self.closed:
            self._shutdown(None, error)

    async def _handshake_api_versions(self) -> None:
        config = self._config
        version = min(_API_VERSIONS_FIRST_VERSION, ApiVersionsRequest.MAX_VERSION)
        while True:
            request = ApiVersionsRequest(
                client_software_name=config.client_software_name,
                client_software_version=config.client_software_version,
            )
            response = await self._handshake_request(request, version)
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
                    self.description,
                    version,
                    fallback,
                )
                version = fallback
                continue
            if response.error_code != 0:
                raise error_for_code(
                    response.error_code,
                    f"ApiVersions v{version} to {self.description} failed",
                )
            self.api_versions = {
                k.api_key: (k.min_version, k.max_version) for k in response.api_keys
            }
            self.finalized_features = {
                f.name: f.max_version_level for f in response.finalized_features
            }
            self.finalized_features_epoch = response.finalized_features_epoch
            self._versions_cache.clear()
            return

    async def _handshake_request(self, request: Request[_R], version: int) -> _R | None:
        future = self.send(request, version)
        try:
            return await asyncio.wait_for(future, self._request_timeout)
        except asyncio.TimeoutError as exc:
            error = RequestTimedOutError(
                f"{type(request).__name__} v{version} to {self.description} got no response "
                f"within {self._config.request_timeout_ms} ms (request_timeout_ms)"
            )
            self._shutdown(None, error)
            raise error from exc

    # ---- versions --------------------------------------------------------------------------

    def negotiate(self, request_type: type[Request[Any]], highest: int | None = None) -> int:
        """The highest version of ``request_type`` both this client and the broker support.

        Args:
            request_type: the request class.
            highest: a lower limit than the class's ``MAX_VERSION`` for this request (see
                :meth:`~aioproducer.protocol.api.Request.highest_version`).

        Raises:
            UnsupportedVersionError: the broker does not know the API, or the ranges do not
                overlap (the message gives both ranges).
        """
        cached = self._versions_cache.get(request_type)
        if cached is None:
            cached = self._negotiate(request_type)
        if highest is None or highest >= cached:
            return cached
        broker_min = self.api_versions[request_type.API_KEY][0]
        if highest < max(request_type.MIN_VERSION, broker_min):
            raise UnsupportedVersionError(
                f"{self.description} supports {request_type.__name__} v{broker_min} and up; "
                f"this request may be sent only up to v{highest}"
            )
        return highest

    def _negotiate(self, request_type: type[Request[Any]]) -> int:
        name = request_type.__name__
        broker_range = self.api_versions.get(request_type.API_KEY)
        if broker_range is None:
            raise UnsupportedVersionError(
                f"{self.description} does not support {name} (api key {request_type.API_KEY})"
            )
        broker_min, broker_max = broker_range
        high = min(request_type.MAX_VERSION, broker_max)
        if high < max(request_type.MIN_VERSION, broker_min):
            raise UnsupportedVersionError(
                f"{self.description} supports {name} v{broker_min}-v{broker_max}; "
                f"aioproducer implements v{request_type.MIN_VERSION}-v{request_type.MAX_VERSION}"
            )
        self._versions_cache[request_type] = high
        return high

    # ---- sending ---------------------------------------------------------------------------

    def send(self, request: Request[_R], version: int | None = None) -> asyncio.Future[_R | None]:
        """Write ``request`` and return the future of its response.

        Synchronous: the bytes are handed to the transport before this returns. The future
        resolves, in send order, to the decoded response, or to None at once for a request
        that expects no response (Produce with ``acks=0``). It fails with a retriable
        :class:`~aioproducer.errors.KafkaConnectionError` if the connection dies first.

        Check :meth:`can_send` first. Buffers passed in the request must not be mutated until
        the future is done: the transport may keep references to them.

        Args:
            request: the version-neutral request.
            version: the version to encode; by default :meth:`negotiate` picks it.

        Raises:
            KafkaConnectionError: the connection is not open (not connected yet, or closed).
            IllegalStateError: ``max_in_flight_requests_per_connection`` requests are already
                in flight.
            UnsupportedVersionError: no version in common (from :meth:`negotiate`).
        """
        state = self._state
        if state is not ConnectionState.READY and state is not ConnectionState.HANDSHAKING:
            raise self._connection_error(f"cannot send on a {state.value} connection")
        expects_response = request.expects_response()
        if (
            expects_response
            and len(self._in_flight) >= self._max_in_flight
            and state is ConnectionState.READY
        ):
            raise IllegalStateError(
                f"{self.description} already has {len(self._in_flight)} requests in flight "
                "(max_in_flight_requests_per_connection); check can_send() first"
            )
        if version is None:
            version = self.negotiate(type(request), request.highest_version())
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & _CORRELATION_ID_MASK
        parts = encode_request(request, version, correlation_id, self._client_id)
        transport = self._transport
        assert transport is not None
        writer = self._writer
        try:
            if writer is not None:
                if writer.write(parts) > WRITE_BUFFER_HIGH_WATER and self._writable:
                    self._watch_drain(writer)
            else:
                transport.writelines(parts)
        except (OSError, RuntimeError) as exc:
            # uvloop raises RuntimeError (asyncio an OSError or nothing) when the transport is
            # already closing; either way the connection is gone.
            error = self._connection_error(f"write failed: {exc!r}")
            self._shutdown(None, exc)
            raise error from exc
        # The loop from the connection's own future: asyncio.get_running_loop() makes a
        # getpid() system call each time (its fork check), once per request here.
        lost = self._lost
        loop = lost.get_loop() if lost is not None else asyncio.get_running_loop()
        future: asyncio.Future[_R | None] = loop.create_future()
        now = self.last_used = self._clock()
        if expects_response:
            self._in_flight.append((correlation_id, request, version, future, now))
        else:
            self._unanswered_ids.append(correlation_id)
            future.set_result(None)
        return future

    async def request(self, request: Request[_R], version: int | None = None) -> _R:
        """Send ``request`` and wait for its response: :meth:`send` for one-off requests.

        No timeout of its own: wrap it in :func:`asyncio.wait_for`, or rely on
        :meth:`check_request_timeouts`.

        Raises:
            IllegalStateError: ``request`` expects no response (Produce with ``acks=0``).
            KafkaError: whatever :meth:`send` raises or the future fails with.
        """
        if not request.expects_response():
            raise IllegalStateError(f"{type(request).__name__} expects no response; use send()")
        response = await self.send(request, version)
        assert response is not None  # a request that expects a response gets one
        return response

    # ---- closing -----------------------------------------------------------------------------

    def close(self, exc: BaseException | None = None) -> None:
        """Close the connection and fail every in-flight request, once.

        Each in-flight future fails with a retriable
        :class:`~aioproducer.errors.KafkaConnectionError` naming the broker, with ``exc``
        (if given) as its cause. ``on_close`` is called once. Idempotent.
        """
        if self._state is ConnectionState.CLOSED:
            return
        self._shutdown(None, exc)

    def abort(self) -> None:
        """Close at once, dropping bytes not yet written; fails in-flight requests as close()."""
        self._stop_writer(abort=True)
        self.close()
        transport = self._transport
        if transport is not None and not (self._lost is not None and self._lost.done()):
            transport.abort()

    async def wait_closed(self) -> None:
        """Wait until the transport has closed (returns at once if it never opened)."""
        if self._lost is not None and self._transport is not None:
            await asyncio.shield(self._lost)

    def check_request_timeouts(self, now: float) -> bool:
        """Close the connection if the oldest in-flight request is older than the timeout.

        That request fails with :class:`~aioproducer.errors.RequestTimedOutError`, the others
        with a retriable :class:`~aioproducer.errors.KafkaConnectionError`. With nothing in
        flight, the connection is closed if the start of a frame has waited for its rest for
        ``request_timeout_ms`` (an answer to an ``acks=0`` request that stalled).

        Returns:
            True if the connection was closed.
        """
        if not self._in_flight:
            return self._check_partial_frame(now)
        correlation_id, request, version, _, sent_at = self._in_flight[0]
        if now - sent_at < self._request_timeout:
            return False
        error = RequestTimedOutError(
            f"{type(request).__name__} v{version} (correlation id {correlation_id}) to "
            f"{self.description} got no response within {self._config.request_timeout_ms} ms "
            "(request_timeout_ms); closing the connection"
        )
        self._shutdown(error, error)
        return True

    def _half_close(self, transport: asyncio.Transport) -> None:
        """Close after requests sent without expecting an answer (acks=0) without losing them.

        A broker that answers them anyway (Tansu, librdkafka's mock) may still be sending when
        we close; a socket closed with unread bytes, or that receives bytes after closing,
        sends a TCP reset, and the reset makes the broker's kernel drop the requests it had
        received but not yet read: records reported as sent would be lost. So shut down only
        our side (after the write buffer flushes), keep reading (and ignoring) until the
        broker closes its side on reading our EOF, and abort if it has not within
        ``request_timeout_ms``.
        """
        if self._writer is not None:
            # The writer thread shuts the write side down after what it has queued.
            self._stop_writer(abort=False, shutdown_write=True)
        else:
            transport.write_eof()
        lost = self._lost
        if lost is None or lost.done():
            return
        handle = asyncio.get_running_loop().call_later(self._request_timeout, transport.abort)
        lost.add_done_callback(lambda _: handle.cancel())

    def _connection_error(self, what: str) -> KafkaError:
        return KafkaConnectionError(f"connection to {self.description}: {what}")

    def _shutdown(self, head_error: KafkaError | None, cause: BaseException | None) -> None:
        """Close for good: fail in-flight requests (the oldest with ``head_error`` if given)."""
        if self._state is ConnectionState.CLOSED:
            return
        self._state = ConnectionState.CLOSED
        self._close_cause = cause
        timer, self._reauth_timer = self._reauth_timer, None
        if timer is not None:
            timer.cancel()
        task, self._reauth_task = self._reauth_task, None
        if task is not None and not task.done() and task is not _current_task():
            task.cancel()
        in_flight, self._in_flight = self._in_flight, deque()
        self._recv_buffer = bytearray()
        self._recv_offset = 0
        self._forget_partial_frame()
        reason = f"closed ({type(cause).__name__}: {cause})" if cause is not None else "closed"
        for index, (correlation_id, request, version, future, _) in enumerate(in_flight):
            if future.done():
                continue  # the caller cancelled it
            if index == 0 and head_error is not None:
                error: KafkaError = head_error
            else:
                error = KafkaConnectionError(
                    f"connection to {self.description} {reason} while "
                    f"{type(request).__name__} v{version} (correlation id {correlation_id}) "
                    "was in flight"
                )
                error.__cause__ = cause
            future.set_exception(error)
        transport = self._transport
        if transport is not None:
            if cause is not None:
                self._stop_writer(abort=True)
                transport.abort()
            elif self._unanswered_ids and transport.can_write_eof():
                self._half_close(transport)
            else:
                # Both flush what was written; the socket closes when the writer's copy of
                # the descriptor does.
                self._stop_writer(abort=False)
                transport.close()
        if self._lost is not None and transport is None and not self._lost.done():
            self._lost.set_result(None)
        on_close = self._on_close
        self._on_close = None
        self._on_capacity = None
        if on_close is not None:
            try:
                on_close(self, cause)
            except Exception:
                log.exception("on_close callback of %s failed", self.description)

    # ---- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Called by the event loop when the TCP (and TLS) connection is up."""
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_WATER, low=WRITE_BUFFER_LOW_WATER)
        self._apply_socket_buffer_sizes(transport)
        if self._state is ConnectionState.CLOSED:
            # close() ran while create_connection was finishing (a cancelled connect).
            transport.abort()

    def _apply_socket_buffer_sizes(self, transport: asyncio.Transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is None:
            return
        for option, size in (
            (socket.SO_SNDBUF, self._config.send_buffer_bytes),
            (socket.SO_RCVBUF, self._config.receive_buffer_bytes),
        ):
            if size >= 0:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, option, size)
                except OSError as exc:  # pragma: no cover - depends on the platform
                    log.debug("could not set socket buffer size on %s: %s", self.description, exc)

    def connection_lost(self, exc: Exception | None) -> None:
        """Called by the event loop when the connection is closed or lost."""
        if self._state is not ConnectionState.CLOSED:
            cause: BaseException = (
                exc if exc is not None else ConnectionResetError("the broker closed the connection")
            )
            self._shutdown(None, cause)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def eof_received(self) -> bool | None:
        """Called when the broker half-closes; returning False lets the transport close."""
        return False

    def pause_writing(self) -> None:
        """Called when the transport's write buffer goes above the high-water mark."""
        self._writable = False

    def resume_writing(self) -> None:
        """Called when the transport's write buffer drains below the low-water mark."""
        self._writable = True
        if self._on_capacity is not None and self._state is ConnectionState.READY:
            self._notify_capacity()

    def data_received(self, data: bytes) -> None:
        """Called by the event loop with bytes from the broker: split and dispatch frames."""
        if self._state is ConnectionState.CLOSED:
            return
        was_full = len(self._in_flight) >= self._max_in_flight
        self._received_bytes += len(data)
        buffer = self._recv_buffer
        if len(buffer) > self._recv_offset:
            buffer += data
            self._read_buffered_frames()
        else:
            self._read_frames_from(data)
        if len(self._recv_buffer) > self._recv_offset:
            if not self.closed:  # (a frame just read may have closed the connection)
                self._partial_frame_left()
        elif self._partial_frame_since is not None:
            self._forget_partial_frame()
        if (
            was_full
            and self._on_capacity is not None
            and len(self._in_flight) < self._max_in_flight
            and self._state is ConnectionState.READY
        ):
            self._notify_capacity()

    def _read_frames_from(self, data: bytes) -> None:
        # Fast path with nothing buffered: frames are slices of the immutable chunk, no copy.
        end = len(data)
        view = memoryview(data)
        position = 0
        while end - position >= 4:
            size = int.from_bytes(view[position : position + 4], "big", signed=True)
            if not self._check_frame_size(size):
                return
            frame_end = position + 4 + size
            if frame_end > end:
                break
            self._handle_frame(view[position + 4 : frame_end])
            position = frame_end
            if self._state is ConnectionState.CLOSED:
                return
        if position < end:
            self._recv_buffer = bytearray(view[position:])
            self._recv_offset = 0

    def _read_buffered_frames(self) -> None:
        buffer = self._recv_buffer
        position = self._recv_offset
        end = len(buffer)
        while end - position >= 4:
            size = int.from_bytes(buffer[position : position + 4], "big", signed=True)
            if not self._check_frame_size(size):
                return
            frame_end = position + 4 + size
            if frame_end > end:
                break
            if frame_end == end:
                # The buffer ends with this frame (typical for a large response that came in
                # many chunks): hand the buffer over with the frame instead of copying it.
                self._recv_buffer = bytearray()
                self._recv_offset = 0
                self._handle_frame(memoryview(buffer)[position + 4 :])
                return
            # Copy the frame out (slicing copies): a view into the buffer would pin it, and a
            # pinned bytearray cannot grow or be compacted.
            self._handle_frame(memoryview(buffer[position + 4 : frame_end]))
            position = frame_end
            if self._state is ConnectionState.CLOSED:
                return
        if position == end:
            buffer.clear()
            self._recv_offset = 0
        elif position >= _COMPACT_THRESHOLD and position * 2 >= end:
            del buffer[:position]
            self._recv_offset = 0
        else:
            self._recv_offset = position

    def _partial_frame_left(self) -> None:
        """The start of a frame is buffered after a read: bound the wait for its rest."""
        if self._in_flight:
            # An answer to the oldest request: its request_timeout_ms bounds the wait.
            if self._partial_frame_since is not None:
                self._forget_partial_frame()
            return
        unread = len(self._recv_buffer) - self._recv_offset
        if not self._unanswered_ids:
            # No request awaits an answer: these bytes can never be one.
            self._close_unsolicited(
                f"{_byte_count(unread)} arrived while no request awaited a response"
            )
            return
        # Perhaps an answer to a request sent without expecting one (acks=0), which some
        # brokers send: its rest must come within request_timeout_ms.
        start = self._received_bytes - unread
        if start != self._partial_frame_start or self._partial_frame_since is None:
            self._partial_frame_start = start
            self._partial_frame_since = self._clock()
            if self._partial_frame_timer is None and self._lost is not None:
                self._partial_frame_timer = self._lost.get_loop().call_later(
                    self._request_timeout, self._on_partial_frame_timer
                )

    def _on_partial_frame_timer(self) -> None:
        self._partial_frame_timer = None
        since = self._partial_frame_since
        if since is None or self._state is ConnectionState.CLOSED or self._in_flight:
            return
        if not self._check_partial_frame(self._clock()) and self._lost is not None:
            # The loop's timer may fire a little before the clock says the time is up.
            remaining = max(0.001, since + self._request_timeout - self._clock())
            self._partial_frame_timer = self._lost.get_loop().call_later(
                remaining, self._on_partial_frame_timer
            )

    def _check_partial_frame(self, now: float) -> bool:
        since = self._partial_frame_since
        if since is None or now - since < self._request_timeout:
            return False
        unread = len(self._recv_buffer) - self._recv_offset
        self._close_unsolicited(
            f"{_byte_count(unread)} of a frame arrived while no request awaited a response, "
            f"and not the rest within {self._config.request_timeout_ms} ms (request_timeout_ms)"
        )
        return True

    def _forget_partial_frame(self) -> None:
        self._partial_frame_since = None
        timer, self._partial_frame_timer = self._partial_frame_timer, None
        if timer is not None:
            timer.cancel()

    def _close_unsolicited(self, what: str) -> None:
        # Nothing is in flight to carry the error: say it in the log.
        log.warning("corrupt response from %s: %s; closing the connection", self.description, what)
        self._corrupt(what)

    def _check_frame_size(self, size: int) -> bool:
        if MIN_FRAME_SIZE <= size <= self._always_accepted_size:
            return True
        limit = self._max_response_size
        which = "max_response_size"
        if self._in_flight:
            _, request, version, _, _ = self._in_flight[0]
            request_limit = request.response_size_limit()
            if request_limit is not None and request_limit < limit:
                limit = request_limit
                which = f"the most a response to {type(request).__name__} v{version} may take"
        elif limit > SMALL_RESPONSE_LIMIT:
            # An answer to an acks=0 Produce request, or bytes nobody asked for.
            limit = SMALL_RESPONSE_LIMIT
            which = "the most a response may take with no request in flight"
        if MIN_FRAME_SIZE <= size <= limit:
            return True
        if (size >> 24) & 0xFF in (0x15, 0x16) and (size >> 16) & 0xFF == 0x03:
            # A TLS record header (alert or handshake, version 3.x) where a Kafka size
            # prefix should be: retrying cannot help, so say what is wrong.
            error = ConfigurationError(
                f"{self.description} answered with TLS: its listener expects "
                "security_protocol='SSL' or 'SASL_SSL', not "
                f"{_protocol_name(self._config.security_protocol)!r}"
            )
            self._shutdown(error, error)
            return False
        # Never wait for (or allocate) what an untrusted prefix announces.
        self._corrupt(
            f"response size prefix {size} is outside [{MIN_FRAME_SIZE}, {limit}] ({which})"
        )
        return False

    def _corrupt(self, what: str, cause: BaseException | None = None) -> None:
        error = CorruptResponseError(f"corrupt response from {self.description}: {what}")
        if cause is not None:
            error.__cause__ = cause
        self._shutdown(error, error)

    def _handle_frame(self, frame: memoryview) -> None:
        correlation_id = read_correlation_id(frame)
        in_flight = self._in_flight
        if not in_flight or in_flight[0][0] != correlation_id:
            self._handle_unexpected(correlation_id)
            return
        _, request, version, future, _ = in_flight.popleft()
        api_key = request.API_KEY
        try:
            _, body = split_response_header(frame, response_header_flexible(api_key, version))
            if (
                api_key == ApiKey.API_VERSIONS
                and version > 0
                and body.nbytes >= 2
                and int.from_bytes(body[:2], "big") == UNSUPPORTED_VERSION
            ):
                response = _decode_unsupported_api_versions(request, body, version)
            else:
                response = request.decode_response(body, version)
        except Exception as exc:
            # Not only CorruptResponseError: a decoder bug on hostile bytes must not escape
            # into the event loop's exception handler and leave the future pending.
            error = CorruptResponseError(
                f"could not decode the response to {type(request).__name__} v{version} "
                f"(correlation id {correlation_id}) from {self.description}: {exc}"
            )
            error.__cause__ = exc
            if not future.done():
                future.set_exception(error)
            self._shutdown(None, error)
            return
        if not future.done():
            future.set_result(response)

    def _handle_unexpected(self, correlation_id: int) -> None:
        unanswered = self._unanswered_ids
        if correlation_id in unanswered:
            # An answer to a request sent without expecting one (acks=0): real Kafka sends
            # none, but some brokers do. The ones before it were not answered; forget them.
            while unanswered and unanswered.popleft() != correlation_id:
                pass
            log.debug(
                "%s answered correlation id %d, sent without expecting a response; ignored",
                self.description,
                correlation_id,
            )
            return
        if not self._in_flight:
            self._close_unsolicited(
                f"got correlation id {correlation_id}, expected none (nothing in flight)"
            )
            return
        self._corrupt(
            f"got correlation id {correlation_id}, expected {self._in_flight[0][0]}"
        )

    def _notify_capacity(self) -> None:
        callback = self._on_capacity
        if callback is None:
            return
        try:
            callback(self)
        except Exception:
            log.exception("on_capacity callback of %s failed", self.description)


# ---- the connection manager -------------------------------------------------------------------

_EAI_AGAIN: Final = getattr(socket, "EAI_AGAIN", None)


async def _resolve_error(loop: asyncio.AbstractEventLoop, host: str, port: int) -> Any:
    """The ``socket.gaierror`` resolving ``host`` raises, or None when it resolves."""
    try:
        await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return exc
    except OSError:
        return None  # not a lookup failure: the connection attempt will tell
    return None


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


def _refused(exc: BaseException | None) -> bool:
    """True for a broker's refusal of the client's credentials or certificate."""
    return isinstance(exc, AuthenticationError) and not exc.retriable


@dataclass(eq=False)
class _Node:
    """What the manager knows about one broker (or bootstrap server)."""

    node_id: int
    host: str
    port: int
    connection: BrokerConnection | None = None
    task: asyncio.Task[BrokerConnection | None] | None = None
    failed_attempts: int = 0
    next_attempt_at: float = 0.0
    last_error: BaseException | None = None
    # The broker refused this client's credentials or certificate on the last attempt (or
    # on re-authentication); cleared when a connection succeeds again.
    auth_error: KafkaError | None = None
    auth_failed_at: float = 0.0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class ConnectionManager:
    """One :class:`BrokerConnection` per broker, connected on demand, with reconnect backoff.

    The sender asks :meth:`ready` for a node's connection and calls :meth:`ensure_connecting`
    when there is none; a task per broker then connects (TCP, TLS, ApiVersions). Failed or
    lost connections are retried no sooner than the reconnect backoff (``reconnect_backoff_ms``
    doubling up to ``reconnect_backoff_max_ms``, plus or minus 20%); a successful handshake
    resets it. ``on_state_change`` is called (synchronously, from the event loop) whenever a
    connection becomes ready, fails to connect, closes, or frees capacity, so the sender can
    wake up instead of polling. ``on_disconnect`` is called with the node id whenever an
    attempt to connect fails or a connection is lost (not closed on purpose): the broker may
    be gone for good, and its partitions led elsewhere by now, so the producer refreshes its
    metadata (as the Java client's ``handleServerDisconnect``). ``on_auth_failure`` is called
    with the node id and the error when a broker refuses the client's credentials or
    certificate (while connecting, or when re-authenticating): retrying will not help until
    they change, so :meth:`auth_error` and :meth:`fatal_error` report it to whoever waits.

    Bootstrap servers get negative node ids (-1 for the first server in
    ``bootstrap_servers``, -2 for the next, ...), as in the Java client; their connections
    stay usable for cluster-wide requests through :meth:`least_loaded`.

    Args:
        config: the producer configuration.
        on_state_change: the wake-up callback.
        on_disconnect: called with the node id when connecting to it fails or its
            connection is lost.
        on_auth_failure: called with the node id and the error when the broker refuses
            the client's credentials or certificate.
        clock: the monotonic clock (seconds) shared with the sender.
        rng: the random source for the backoff jitter.
    """

    def __init__(
        self,
        config: ProducerConfig,
        on_state_change: Callable[[], None],
        *,
        on_disconnect: Callable[[int], None] | None = None,
        on_auth_failure: Callable[[int, KafkaError], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._on_state_change = on_state_change
        self._on_disconnect = on_disconnect
        self._on_auth_failure = on_auth_failure
        self._clock = clock
        self._backoff = ExponentialBackoff(
            config.reconnect_backoff_ms, config.reconnect_backoff_max_ms, rng=rng
        )
        # KIP-601: the connection setup timeout grows the same way after failed attempts.
        self._setup_timeout = ExponentialBackoff(
            config.socket_connection_setup_timeout_ms,
            config.socket_connection_setup_timeout_max_ms,
            rng=rng,
        )
        self._nodes: dict[int, _Node] = {}
        self._bootstrap_nodes: list[_Node] = []
        for index, (host, port) in enumerate(config.bootstrap_addresses()):
            node = _Node(-(index + 1), host, port)
            self._nodes[node.node_id] = node
            self._bootstrap_nodes.append(node)
        self._closed = False
        self._closing_done: asyncio.Future[None] | None = None
        self._finalized_features = FinalizedFeatures()
        # Addresses whose failure to connect was logged at WARNING: later failures go to
        # DEBUG until a connection there succeeds again.
        self._warned_addresses: set[str] = set()
        # The last failure to reach each address, kept across attempts for error messages.
        self._failures: dict[str, BaseException] = {}
        # Counts for metrics(): connections set up and closed, SASL authentications and
        # re-authentications that succeeded or were refused.
        self._sasl = _protocol_name(config.security_protocol) in _SASL_PROTOCOLS
        self._created = 0
        self._closed_count = 0
        self._authentications = 0
        self._failed_authentications = 0
        self._reauthentications_closed = 0
        self._failed_reauthentications = 0

    def __repr__(self) -> str:
        ready = sorted(n.node_id for n in self._nodes.values() if self._is_ready(n))
        return f"<ConnectionManager nodes={sorted(self._nodes)} ready={ready}>"

    # ---- queries ---------------------------------------------------------------------------

    def statistics(self) -> dict[str, float]:
        """Connection metrics under the Java client's names (``connection-count``,
        ``connection-creation-total``, ``connection-close-total``,
        ``successful-authentication-total``, ``failed-authentication-total``,
        ``successful-reauthentication-total``, ``failed-reauthentication-total``)."""
        open_count = 0
        reauthentications = self._reauthentications_closed
        for node in self._nodes.values():
            connection = node.connection
            if connection is not None and node.task is None and not connection.closed:
                open_count += 1
                reauthentications += connection.reauthentications
        return {
            "connection-count": float(open_count),
            "connection-creation-total": float(self._created),
            "connection-close-total": float(self._closed_count),
            "successful-authentication-total": float(self._authentications),
            "failed-authentication-total": float(self._failed_authentications),
            "successful-reauthentication-total": float(reauthentications),
            "failed-reauthentication-total": float(self._failed_reauthentications),
        }

    @property
    def finalized_features(self) -> FinalizedFeatures:
        """The finalized features with the highest epoch any connection's ApiVersions answer
        reported so far (kept after that connection closes, as the Java client does)."""
        return self._finalized_features

    def _record_features(self, connection: BrokerConnection) -> None:
        epoch = connection.finalized_features_epoch
        if epoch > self._finalized_features.epoch:
            self._finalized_features = FinalizedFeatures(
                epoch,
                dict(connection.finalized_features),
                dict(connection.api_versions),
                connection.node_id,
            )
            log.debug(
                "finalized features (epoch %d, from %s): %s",
                epoch,
                connection.description,
                connection.finalized_features,
            )

    @staticmethod
    def _is_ready(node: _Node) -> bool:
        connection = node.connection
        return connection is not None and connection.is_ready

    def ready(self, node_id: int) -> BrokerConnection | None:
        """The connected, handshaken connection to ``node_id``, or None."""
        node = self._nodes.get(node_id)
        if node is None:
            return None
        connection = node.connection
        if connection is not None and connection.is_ready:
            return connection
        return None

    def connections(self) -> list[BrokerConnection]:
        """Every ready connection, bootstrap ones included."""
        ready: list[BrokerConnection] = []
        for node in self._nodes.values():
            if node.connection is not None and node.connection.is_ready:
                ready.append(node.connection)
        return ready

    def is_connecting(self, node_id: int) -> bool:
        """True while a connect attempt to ``node_id`` is running."""
        node = self._nodes.get(node_id)
        return node is not None and node.task is not None

    def connection_delay(self, node_id: int, now: float) -> float:
        """Seconds until :meth:`ensure_connecting` would start an attempt to ``node_id``.

        0 when ready or free to connect; ``inf`` while an attempt runs (``on_state_change``
        fires when it ends) or when the node is unknown.
        """
        node = self._nodes.get(node_id)
        if node is None or node.task is not None:
            return math.inf
        connection = node.connection
        if connection is not None and not connection.closed:
            # Ready (0), or re-authenticating: on_state_change fires when that ends.
            return 0.0 if connection.is_ready else math.inf
        return max(0.0, node.next_attempt_at - now)

    def auth_error(self, node_id: int) -> tuple[KafkaError, float] | None:
        """The error with which ``node_id`` refused this client's credentials or certificate
        on the last attempt to connect (or to re-authenticate), and when (the manager's
        clock); None once a connection to it succeeds again, or while one is up."""
        node = self._nodes.get(node_id)
        if node is None or self._is_ready(node):
            return None
        error = node.auth_error
        return None if error is None else (error, node.auth_failed_at)

    def fatal_error(self, since: float = -math.inf) -> KafkaError | None:
        """The latest authentication failure (at ``since`` or later on the manager's clock),
        when no connection is ready to serve a request: whoever waits for metadata would
        otherwise wait in vain (Java's metadata fatal error). None while any connection is
        ready, or when no attempt failed that way."""
        latest: _Node | None = None
        for node in self._nodes.values():
            if self._is_ready(node):
                return None
            if (
                node.auth_error is not None
                and node.auth_failed_at >= since
                and (latest is None or node.auth_failed_at > latest.auth_failed_at)
            ):
                latest = node
        return None if latest is None else latest.auth_error

    def least_loaded(self, now: float) -> BrokerConnection | None:
        """The ready connection with the fewest requests in flight that can take one more.

        Bootstrap connections count, but a broker from the metadata wins a tie. None when no
        connection can send; then :meth:`ensure_any_connecting` starts one.
        """
        best: BrokerConnection | None = None
        best_load = 0
        for node in self._nodes.values():
            connection = node.connection
            if connection is None or not connection.can_send():
                continue
            load = connection.in_flight_count()
            if (
                best is None
                or load < best_load
                or (load == best_load and best.node_id < 0 <= connection.node_id)
            ):
                best = connection
                best_load = load
        return best

    # ---- connecting --------------------------------------------------------------------------

    def ensure_connecting(self, node_id: int, now: float) -> None:
        """Start connecting to ``node_id`` unless connected, connecting or backing off.

        Unknown node ids (not in the metadata given to :meth:`set_brokers`, nor a bootstrap
        id) are ignored.
        """
        if self._closed:
            return
        node = self._nodes.get(node_id)
        if node is None or node.task is not None:
            return
        if node.connection is not None and not node.connection.closed:
            return
        if now < node.next_attempt_at:
            return
        self._start_connect(node)

    def ensure_any_connecting(self, now: float) -> None:
        """Make sure some connection is on its way when none can send.

        Does nothing while an attempt is running; otherwise starts one to the broker (from the
        metadata, else a bootstrap server) with the fewest failed attempts that is not
        backing off.
        """
        if self._closed:
            return
        candidates: list[_Node] = []
        for node in self._nodes.values():
            if node.task is not None:
                return
            connection = node.connection
            if connection is not None and not connection.closed:
                continue
            if now >= node.next_attempt_at:
                candidates.append(node)
        if not candidates:
            return
        known = [n for n in candidates if n.node_id >= 0]
        pool = known or candidates
        self._start_connect(min(pool, key=lambda n: (n.failed_attempts, n.next_attempt_at)))

    def _start_connect(self, node: _Node) -> asyncio.Task[BrokerConnection | None]:
        connection = BrokerConnection(
            node.node_id,
            node.host,
            node.port,
            self._config,
            on_close=lambda conn, cause: self._connection_closed(node, conn, cause),
            on_capacity=lambda conn: self._notify(),
            clock=self._clock,
        )
        node.connection = connection
        setup_timeout_ms = self._setup_timeout.backoff_ms(node.failed_attempts)
        task = asyncio.get_running_loop().create_task(
            self._connect(node, connection, setup_timeout_ms),
            name=f"aioproducer-connect-{node.node_id}",
        )
        node.task = task
        return task

    async def _connect(
        self, node: _Node, connection: BrokerConnection, setup_timeout_ms: float
    ) -> BrokerConnection | None:
        # Returns None on failure (recorded on the node) rather than raising, so a task nobody
        # awaits never logs "exception was never retrieved".
        try:
            await connection.connect(setup_timeout_ms)
        except asyncio.CancelledError:
            node.task = None
            if node.connection is connection:
                node.connection = None
            raise
        except Exception as exc:
            node.task = None
            if node.connection is connection:
                node.connection = None
            node.last_error = exc
            self._failures[node.address] = exc
            self._record_failure(node)
            self._log_connect_failure(node, exc)
            self._disconnected(node)
            if _refused(exc) and self._sasl:
                self._failed_authentications += 1
            self._auth_failed(node, exc)
            self._notify()
            return None
        self._created += 1
        if self._sasl:
            self._authentications += 1
        node.task = None
        node.failed_attempts = 0
        node.next_attempt_at = 0.0
        node.last_error = None
        node.auth_error = None
        self._warned_addresses.discard(node.address)
        self._failures.pop(node.address, None)
        self._record_features(connection)
        self._notify()
        return connection

    def _log_connect_failure(self, node: _Node, exc: BaseException) -> None:
        """The first failure to reach an address at WARNING, the next ones at DEBUG: a
        wrong address or a broker that is down shows at once, without a line per retry."""
        if node.address in self._warned_addresses:
            log.debug("%s%s", exc, "" if _refused(exc) else "; retrying")
            return
        self._warned_addresses.add(node.address)
        if isinstance(exc, KafkaError) and not exc.retriable:
            # Refused credentials or certificates: trying again will not help, so no
            # "retrying" here; whoever waits on the connection gets this error.
            log.error("%s", exc)
            return
        log.warning(
            "%s; retrying every reconnect_backoff_ms (further failures for %s are logged "
            "at DEBUG)",
            exc,
            node.address,
        )

    def _record_failure(self, node: _Node) -> None:
        delay_ms = self._backoff.backoff_ms(node.failed_attempts)
        node.failed_attempts += 1
        node.next_attempt_at = self._clock() + delay_ms / 1000.0

    def _connection_closed(
        self, node: _Node, connection: BrokerConnection, cause: BaseException | None
    ) -> None:
        if node.connection is not connection:
            return  # replaced or dropped already
        if node.task is not None:
            return  # still connecting: _connect records the failure
        node.connection = None
        node.last_error = cause
        self._closed_count += 1
        self._reauthentications_closed += connection.reauthentications
        if _refused(cause):
            self._failed_reauthentications += 1
        if cause is not None:
            # Back off before reconnecting to a broker that dropped us, as after a failed
            # attempt; a clean close (set_brokers, close) does not count.
            self._record_failure(node)
            if _refused(cause):
                # Re-authentication was refused: as a refused connection attempt.
                self._failures[node.address] = cause
                self._log_connect_failure(node, cause)
            else:
                log.debug("connection to %s closed: %s", connection.description, cause)
            self._disconnected(node)
            self._auth_failed(node, cause)
        self._notify()

    def _auth_failed(self, node: _Node, exc: BaseException) -> None:
        if not _refused(exc) or self._closed:
            return
        assert isinstance(exc, KafkaError)
        node.auth_error = exc
        node.auth_failed_at = self._clock()
        callback = self._on_auth_failure
        if callback is None:
            return
        try:
            callback(node.node_id, exc)
        except Exception:
            log.exception("on_auth_failure callback failed")

    def _disconnected(self, node: _Node) -> None:
        callback = self._on_disconnect
        if callback is None or self._closed:
            return
        try:
            callback(node.node_id)
        except Exception:
            log.exception("on_disconnect callback failed")

    def _notify(self) -> None:
        if self._closed:
            return
        try:
            self._on_state_change()
        except Exception:
            log.exception("on_state_change callback failed")

    # ---- bootstrap -----------------------------------------------------------------------------

    async def check_resolvable(self, timeout: float) -> None:
        """Refuse a ``bootstrap_servers`` list in which no host name resolves, as the Java
        client does ("No resolvable bootstrap urls given in bootstrap.servers").

        One ``getaddrinfo`` per server, on the event loop's resolver threads, all within
        ``timeout`` seconds. Servers that do not resolve while others do are logged at
        WARNING and kept (their attempts fail later, as the Java client skips them). A
        resolver that is slow or reports a temporary failure (``EAI_AGAIN``) is no proof
        that a name is wrong: then nothing is refused and the connection attempts report.

        Raises:
            ConfigurationError: not one bootstrap server resolves; the message names them.
        """
        nodes = self._bootstrap_nodes
        if not nodes:
            return
        loop = asyncio.get_running_loop()
        lookups = [loop.create_task(_resolve_error(loop, n.host, n.port)) for n in nodes]
        done, pending = await asyncio.wait(lookups, timeout=max(0.0, timeout))
        for task in pending:
            task.cancel()
        failures: list[tuple[_Node, socket.gaierror]] = []
        for index, node in enumerate(nodes):
            task = lookups[index]
            error = task.result() if task in done else None
            if error is not None:
                failures.append((node, error))
        if not failures:
            return
        if len(failures) < len(nodes) or pending:
            for node, error in failures:
                self._warned_addresses.add(node.address)  # once is enough
                log.warning(
                    "bootstrap server %s: the host name %r does not resolve (%s); trying the "
                    "other bootstrap servers",
                    node.address,
                    node.host,
                    error.strerror or error,
                )
            return
        if any(error.errno == _EAI_AGAIN for _, error in failures):
            return
        raise ConfigurationError(
            "no resolvable bootstrap server in bootstrap_servers: "
            + "; ".join(
                f"{node.address}: {node.host!r} does not resolve ({error.strerror or error})"
                for node, error in failures
            )
        )

    async def bootstrap(self, deadline: float) -> BrokerConnection:
        """Connect to the first bootstrap server that answers.

        Tries the servers of ``bootstrap_servers`` in order, each at least once, then goes
        round again over the failed ones, each no sooner than its reconnect backoff, until
        ``deadline`` (clock seconds). A server that does not answer (a port that accepts and
        stays silent) holds up the others for no more than its share of the time left. With
        a deadline already past, each server still gets one whole attempt (bounded by the
        connection setup and request timeouts).

        Raises:
            KafkaConnectionError: no server answered before the deadline; the message names
                every server and its last error.
            AuthenticationError, ConfigurationError, UnsupportedVersionError: a server answered
                but the failure is not retriable (raised at once).
            IllegalStateError: the manager is closed.
        """
        nodes = self._bootstrap_nodes
        if not nodes:
            raise ConfigurationError("bootstrap_servers is empty")
        index = 0
        full_round = False
        # A deadline already past (max_block_ms=0) still lets each server have one attempt.
        no_time = deadline <= self._clock()
        while True:
            if self._closed:
                raise IllegalStateError("the connection manager is closed")
            for node in nodes:
                if self._is_ready(node):
                    assert node.connection is not None
                    return node.connection
            now = self._clock()
            if full_round and now >= deadline:
                raise self._bootstrap_error()
            node = nodes[index]
            wait = node.next_attempt_at - now
            if wait > 0 and node.task is None:
                if not full_round:
                    # Backing off from an earlier failure: move on, this one had its try.
                    index, full_round = self._next_bootstrap_index(index, full_round)
                    continue
                soonest = min(n.next_attempt_at for n in nodes if n.task is None)
                await asyncio.sleep(max(0.0, min(soonest, deadline) - now))
                index = min(
                    (i for i, n in enumerate(nodes) if n.task is None),
                    key=lambda i: nodes[i].next_attempt_at,
                )
                continue
            task = node.task or self._start_connect(node)
            timeout: float | None = max(0.0, deadline - now)
            if not full_round:
                # Every server is tried once within the deadline: one that does not answer
                # has its share of the time left, then its attempt goes on while the next
                # server is tried (with no time at all, one whole attempt each).
                timeout = None if no_time else max(0.0, deadline - now) / (len(nodes) - index)
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if task in done:
                if task.cancelled():
                    continue  # the node was dropped or the manager closed: look again
                connection = task.result()
                if connection is not None:
                    return connection
                error = node.last_error
                if isinstance(error, KafkaError) and not error.retriable:
                    raise error
                log.debug("bootstrap server %s failed: %s", node.address, error)
            index, full_round = self._next_bootstrap_index(index, full_round)

    def _next_bootstrap_index(self, index: int, full_round: bool) -> tuple[int, bool]:
        index += 1
        if index >= len(self._bootstrap_nodes):
            return 0, True
        return index, full_round

    def _bootstrap_error(self) -> KafkaConnectionError:
        nodes = self._bootstrap_nodes
        error = KafkaConnectionError(
            f"could not connect to any bootstrap server within max_block_ms "
            f"({self._config.max_block_ms} ms); tried {', '.join(n.address for n in nodes)}: "
            f"{self._failure_details(nodes)}. {self.likely_causes()}"
        )
        causes = [n.last_error for n in nodes if n.last_error is not None]
        if causes:
            error.__cause__ = causes[-1]
        return error

    def _failure_details(self, nodes: list[_Node]) -> str:
        # Each error names its address already ("could not connect to bootstrap server ...").
        details = []
        for node in nodes:
            if node.last_error is not None:
                details.append(str(node.last_error))
                continue
            # An attempt still waiting: say how far it got, and how the one before it ended.
            connection = node.connection
            if connection is not None and connection.state is ConnectionState.HANDSHAKING:
                waiting = (
                    "connected, but the first request (ApiVersions) has no answer yet; a "
                    "Kafka broker answers at once"
                )
            else:
                waiting = "no answer yet"
            earlier = self._failures.get(node.address)
            before = f" (the attempt before: {earlier})" if earlier is not None else ""
            details.append(f"{node.address}: {waiting}{before}")
        return "; ".join(details)

    def likely_causes(self) -> str:
        """What usually makes every connection attempt fail, for error messages."""
        protocol = self._config.security_protocol.upper()
        if protocol in ("SSL", "SASL_SSL"):
            tls = (
                f"the listener does not speak TLS while security_protocol is {protocol} (a "
                "PLAINTEXT listener), or the TLS handshake failed"
            )
        else:
            tls = (
                f"the listener expects TLS while security_protocol is {protocol} (set it "
                "to SSL or SASL_SSL for a TLS listener)"
            )
        return (
            "Likely causes: nothing listens at that address (the broker is down, or the host "
            "or port is wrong); the port is not a Kafka listener; or " + tls + "."
        )

    def unreachable_summary(self) -> str | None:
        """When no connection is ready and connecting failed, what was tried and why it
        failed (for the error a send raises after ``max_block_ms``); otherwise None."""
        nodes = list(self._nodes.values())  # the bootstrap servers are among them
        if any(self._is_ready(n) for n in nodes):
            return None
        failed = [n for n in nodes if n.last_error is not None]
        if not failed:
            return None
        return (
            f"no broker could be reached: {self._failure_details(failed)}. "
            f"{self.likely_causes()}"
        )

    # ---- metadata --------------------------------------------------------------------------------

    def set_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        """Adopt the brokers of a Metadata response: ``{node_id: (host, port)}``.

        Connections to brokers that left the cluster, or whose address changed, are closed
        (their in-flight requests fail as retriable). Bootstrap connections are kept.
        """
        for node_id, node in list(self._nodes.items()):
            if node_id < 0:
                continue
            address = brokers.get(node_id)
            if address is not None and (address[0], address[1]) == (node.host, node.port):
                continue
            del self._nodes[node_id]
            reason = (
                "the broker left the cluster metadata"
                if address is None
                else f"the broker moved to {address[0]}:{address[1]}"
            )
            self._drop(node, KafkaConnectionError(f"node {node_id} ({node.address}): {reason}"))
        for node_id, (host, port) in brokers.items():
            if node_id not in self._nodes:
                self._nodes[node_id] = _Node(node_id, host, port)

    def _drop(self, node: _Node, reason: KafkaError) -> None:
        task, node.task = node.task, None
        connection, node.connection = node.connection, None
        if task is not None:
            task.cancel()
        if connection is not None:
            connection.close(reason)

    # ---- timeouts and closing ------------------------------------------------------------------

    def check_request_timeouts(self, now: float) -> None:
        """Close every connection whose oldest in-flight request timed out."""
        for node in list(self._nodes.values()):
            connection = node.connection
            if connection is not None and connection.is_ready:
                connection.check_request_timeouts(now)

    def close_idle(self, now: float) -> None:
        """Close the connections with nothing in flight and no request for
        ``connections_max_idle_ms`` (as the Java client's Selector does); a broker is
        connected to again when there is something to send it."""
        max_idle_ms = self._config.connections_max_idle_ms
        if max_idle_ms < 0:
            return
        limit = max_idle_ms / 1000.0
        for node in [*self._nodes.values(), *self._bootstrap_nodes]:
            connection = node.connection
            if (
                connection is not None
                and connection.is_ready
                and connection.in_flight_count() == 0
                and now - connection.last_used >= limit
            ):
                log.debug(
                    "closing the connection to %s: idle for %.0f s (connections_max_idle_ms)",
                    connection.description,
                    now - connection.last_used,
                )
                connection.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    async def close(self) -> None:
        """Close every connection and cancel connect attempts; wait for both. Idempotent."""
        if self._closing_done is not None:
            await asyncio.shield(self._closing_done)
            return
        self._closed = True
        self._closing_done = asyncio.get_running_loop().create_future()
        try:
            tasks: list[asyncio.Task[BrokerConnection | None]] = []
            connections: list[BrokerConnection] = []
            for node in self._nodes.values():
                if node.task is not None:
                    tasks.append(node.task)
                    node.task.cancel()
                    node.task = None
                if node.connection is not None:
                    connections.append(node.connection)
                    node.connection.close()
                    node.connection = None
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            if connections:
                # A clean close flushes bytes still buffered (acks=0 requests); give that
                # request_timeout_ms, then drop what is left.
                waiters = [asyncio.ensure_future(c.wait_closed()) for c in connections]
                _, pending = await asyncio.wait(
                    waiters, timeout=self._config.request_timeout_ms / 1000.0
                )
                for waiter in pending:
                    waiter.cancel()
                for connection in connections:
                    connection.abort()
        finally:
            self._closing_done.set_result(None)
