"""Connections to brokers: one pipelined :class:`BrokerConnection` per broker
(:class:`~aioproducer.net.manager.ConnectionManager` opens them on demand).

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

:class:`BrokerConnection` moves bytes: it writes the requests its
:class:`~aioproducer.protocol.session.Session` frames (through a writer of
:mod:`aioproducer.net.writers`: on a plaintext connection, a native writer thread, else
``transport.writelines``), feeds the bytes it reads to the session, and hands each
outcome the session matched to a request to whoever sent it, strictly in the order the
requests were sent, because a Kafka broker answers the requests of one connection in order:
the sender's requests (:meth:`BrokerConnection.send_for`) go with a handler onto the
sender's :class:`~aioproducer._core.answers.AnswerQueue`, drained by its next step; a
one-off request (:meth:`BrokerConnection.send`, the handshake's) resolves a future.
The handshake (ApiVersions, SASL) runs as coroutines of :mod:`aioproducer.net.handshake`.

It is an :class:`asyncio.Protocol` (not a stream) because the protocol API costs about half
as much per read as streams, and it runs unchanged on uvloop.

Failure policy, in one place (the session finds the corrupt and late responses; the
connection closes):

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
import enum
import logging
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar, Union, cast

from aioproducer._core.answers import AnswerHandler, AnswerQueue
from aioproducer._core.metrics import NodeMetrics
from aioproducer.errors import (
    ConfigurationError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    SslError,
)
from aioproducer.net import handshake
from aioproducer.net.handshake import security_protocol_name
from aioproducer.net.tls import ssl_context_for
from aioproducer.net.writers import (
    WRITE_BUFFER_HIGH_WATER,
    WRITE_BUFFER_LOW_WATER,
    LoopWriter,
    native_writer_for,
)
from aioproducer.protocol.api import Request, Response
from aioproducer.protocol.framing import SIZE_PREFIX_LENGTH, read_frame_size
from aioproducer.protocol.session import MIN_FRAME_SIZE, Session

if TYPE_CHECKING:
    from aioproducer.config import ProducerConfig

__all__ = [
    "MIN_FRAME_SIZE",
    "WRITE_BUFFER_HIGH_WATER",
    "WRITE_BUFFER_LOW_WATER",
    "BrokerConnection",
    "ConnectionState",
    "FinalizedFeatures",
]

log = logging.getLogger("aioproducer.net")

_SSL_NETWORK_ERRORS: Final = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)

_R = TypeVar("_R", bound=Response)

OnClose = Callable[["BrokerConnection", Union[BaseException, None]], None]  # noqa: UP007
OnCapacity = Callable[["BrokerConnection"], None]
# What the session keeps per request: the future of a one-off request, or the handler of
# one whose answer goes to the answer queue.
_Waiter = Union["asyncio.Future[Any]", AnswerHandler]


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



def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


#: Resolves ``(host, port)`` to ``(address family, address)`` pairs, in the order to try.
Resolver = Callable[[str, int], Awaitable[list[tuple[int, str]]]]


async def _resolve(host: str, port: int) -> list[tuple[int, str]]:
    """Every address ``host`` resolves to, through the event loop's resolver."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        if family == socket.AF_INET6 and len(sockaddr) >= 4 and sockaddr[3] and "%" not in address:
            # A link-local address is reachable only through its interface (scope id).
            address = f"{address}%{sockaddr[3]}"
        found.append((int(family), address))
    return found


class ResolvedAddresses:
    """The addresses a broker's host name resolves to, in the resolver's order, and the one
    the next connection attempt starts from (``client.dns.lookup=use_all_dns_ips``).

    An attempt tries the addresses in turn from its start, all within one
    ``socket_connection_setup_timeout_ms``. One that refuses, does not answer in time or
    fails the handshake moves the start past it: an address that drops packets costs one
    attempt, not every attempt. Once the last address failed, the next attempt resolves
    the name again; so does the first attempt after an established connection is lost
    (the broker may have moved), and after a rebootstrap.
    """

    def __init__(self, host: str, port: int, resolver: Resolver | None = None) -> None:
        self.host = host
        self.port = port
        self._resolver = resolver if resolver is not None else _resolve
        # (address family, address) in the resolver's order; empty: resolve at next use.
        self._addresses: list[tuple[int, str]] = []
        self._start = 0

    @property
    def start(self) -> str | None:
        """The address the next attempt tries first (None: the name is resolved first)."""
        return self._addresses[self._start][1] if self._addresses else None

    async def candidates(self) -> list[tuple[int, str]]:
        """The addresses the next attempt tries, in order, resolving the name if needed.

        Raises:
            OSError: the name does not resolve (``socket.gaierror``), or to no address.
        """
        if not self._addresses:
            found: list[tuple[int, str]] = []
            for entry in await self._resolver(self.host, self.port):
                if entry not in found:
                    found.append(entry)
            if not found:
                raise OSError(f"{self.host} resolves to no address")
            self._addresses = found
            self._start = 0
        return self._addresses[self._start :]

    def failed(self, address: str) -> None:
        """``address`` refused or did not answer in time: start after it next time (past
        the last address: resolve again)."""
        index = self._index(address)
        if index < 0:
            return
        self._start = index + 1
        if self._start >= len(self._addresses):
            self.forget()

    def connected(self, address: str) -> None:
        """``address`` took the connection: the next attempt starts from it."""
        index = self._index(address)
        if index >= 0:
            self._start = index

    def forget(self) -> None:
        """Resolve the name again at the next attempt."""
        self._addresses = []
        self._start = 0

    def _index(self, address: str) -> int:
        for index, (_, known) in enumerate(self._addresses):
            if known == address:
                return index
        return -1


class BrokerConnection(asyncio.Protocol):
    """A pipelined connection to one broker, with the ApiVersions handshake.

    Build it, ``await connect()``, then send requests while :meth:`can_send` is true: with
    :meth:`send_for`, each answer goes with its handler onto ``answers``; with :meth:`send`,
    it resolves the future returned. Either way, strictly in send order. The connection
    never reconnects: once closed it stays closed
    (:class:`~aioproducer.net.manager.ConnectionManager` makes new ones).

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
        metrics: the broker's counters (requests, responses and bytes each way); None
            counts nothing.
        answers: where the answers to :meth:`send_for` requests go (the sender's queue);
            None when only :meth:`send` is used.

    Attributes:
        node_id: the broker's node id.
        host: the broker's host.
        port: the broker's port.
        address: the address (of those ``host`` resolves to) the connection reached;
            ``host`` before that.
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
        metrics: NodeMetrics | None = None,
        answers: AnswerQueue | None = None,
    ) -> None:
        self.node_id = node_id
        self._metrics = metrics
        self._answers = answers
        self.host = host
        self.port = port
        self.finalized_features: dict[str, int] = {}
        self.finalized_features_epoch = -1
        self._config = config
        self._on_close = on_close
        self._on_capacity = on_capacity
        self._clock = clock
        # When the last request went out (clock seconds): connections_max_idle_ms counts
        # from there once nothing is in flight.
        self.last_used = clock()
        self._max_in_flight: int = config.max_in_flight_requests_per_connection
        self._request_timeout: float = config.request_timeout_ms / 1000.0
        self._state = ConnectionState.CREATED
        self._transport: asyncio.Transport | None = None
        # Bootstrap servers' ids (-1, -2, ...) mean nothing to a user: name the address.
        self.description = (
            f"node {node_id} ({host}:{port})" if node_id >= 0 else f"bootstrap server {host}:{port}"
        )
        # What the connection knows between reads and writes: versions, correlation ids,
        # the in-flight requests (each with its future or handler), the unread bytes of a frame.
        self._session: Session[_Waiter] = Session(
            self.description,
            client_id=config.client_id,
            max_in_flight=config.max_in_flight_requests_per_connection,
            max_response_size=config.max_response_size,
            request_timeout_ms=config.request_timeout_ms,
            security_protocol=security_protocol_name(config.security_protocol),
            clock=clock,
        )
        # Wakes the connection up when the start of a frame nobody awaits waited too long.
        self._partial_frame_timer: asyncio.TimerHandle | None = None
        self._writable = True
        # Set in connection_made: writes through the transport, or (once READY on a
        # plaintext connection, socket_writer_thread) on a native thread.
        self._writer: LoopWriter | None = None
        # KIP-368: the session lifetime the broker gave at the last authentication (0: none),
        # the timer that starts re-authentication before it ends, and that exchange's task.
        self.session_lifetime_ms = 0
        self.reauthentications = 0
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        self._close_cause: BaseException | None = None
        self._failed_at_close = 0
        # What the handshake waits for (set by it), for the error after max_block_ms.
        self.waiting_for = ""
        self._lost: asyncio.Future[None] | None = None
        # The address the connection attempt is trying (None once connected).
        self._trying: str | None = None
        #: The address (of those ``host`` resolves to) the connection reached; ``host``
        #: until then.
        self.address: str = host

    def __repr__(self) -> str:
        return (
            f"<BrokerConnection {self.description} {self._state.value} "
            f"in_flight={self._session.in_flight_count()}>"
        )

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        """``{api_key: (min_version, max_version)}`` the broker supports, from the
        ApiVersions handshake (empty before it)."""
        return self._session.api_versions

    @api_versions.setter
    def api_versions(self, value: dict[int, tuple[int, int]]) -> None:
        self._session.set_api_versions(value)

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
    def failed_at_close(self) -> int:
        """How many requests awaiting an answer the close failed (0 while open)."""
        return self._failed_at_close

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
        """True when the connection is ready, has fewer than the maximum in flight, and the
        broker did not ask to be left alone for now (KIP-219, see :meth:`throttle_delay`)."""
        session = self._session
        return (
            self._state is ConnectionState.READY
            and session.in_flight_count() < self._max_in_flight
            and (session.throttled_until == 0.0 or session.throttled_until <= self._clock())
        )

    def throttle_delay(self, now: float) -> float:
        """Seconds until the broker may be sent requests again: an answer over a quota
        (KIP-219, at the versions where the broker expects the client to wait) holds every
        request to it, as Java's ``NetworkClient`` does; 0 when not throttled."""
        return max(0.0, self._session.throttled_until - now)

    def in_flight_count(self) -> int:
        """How many requests await a response."""
        return self._session.in_flight_count()

    def oldest_request_sent_at(self) -> float | None:
        """When the oldest in-flight request was sent (clock seconds), or None."""
        return self._session.oldest_request_sent_at()

    def receive_buffer_size(self) -> int:
        """The bytes the connection holds of what it received: the start of a frame whose
        rest has not come yet, and handled bytes not yet compacted away (0 once closed)."""
        return self._session.receive_buffer_size()

    # ---- connecting --------------------------------------------------------------------------

    async def connect(
        self, setup_timeout_ms: float | None = None, addresses: ResolvedAddresses | None = None
    ) -> None:
        """Open the connection, run the ApiVersions handshake and :meth:`authenticate`.

        The name resolution and TCP (and TLS) setup are bounded by ``setup_timeout_ms`` (by
        default ``socket_connection_setup_timeout_ms``; the connection manager grows it
        after failures); the handshake's requests by ``request_timeout_ms``. The host's
        addresses are tried in turn from where ``addresses`` (which the caller keeps from
        one attempt to the next) says to start; without it, from the first.

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
        if addresses is None:
            addresses = ResolvedAddresses(self.host, self.port)
        try:
            await asyncio.wait_for(
                self._open(loop, addresses, ssl_context), setup_timeout_ms / 1000.0
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
            tried = self._trying
            if tried is not None:
                # The next attempt starts after the address that did not answer.
                addresses.failed(tried)
            where = f" at {tried}" if tried is not None and tried != self.host else ""
            error = KafkaConnectionError(
                f"could not connect to {self.description}{where} within "
                f"{setup_timeout_ms:.0f} ms (socket_connection_setup_timeout_ms){hint}"
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
        # Reached over TCP; it counts as connected once the handshake is done too.
        reached = self.address
        if self._state is ConnectionState.CLOSED:
            # Lost between connection_made and here (the broker hung up at once).
            addresses.failed(reached)
            raise self._connection_error("the connection closed during setup")
        self._state = ConnectionState.HANDSHAKING
        self.waiting_for = "the broker's answer to the first request (ApiVersions)"
        try:
            versions = await handshake.negotiate_api_versions(self, config)
            self.api_versions = {
                k.api_key: (k.min_version, k.max_version) for k in versions.api_keys
            }
            self.finalized_features = {
                f.name: f.max_version_level for f in versions.finalized_features
            }
            self.finalized_features_epoch = versions.finalized_features_epoch
            await self.authenticate()
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                # An address that takes connections but fails the handshake (a load
                # balancer with nothing behind it, a broker going down) costs one attempt.
                addresses.failed(reached)
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
            addresses.failed(reached)
            raise self._connection_error("the connection closed during the handshake")
        addresses.connected(reached)
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
        """Hand this connection's writes to a native thread where it may (see
        :func:`~aioproducer.net.writers.native_writer_for`)."""
        transport = self._transport
        if transport is None:
            return
        writer = native_writer_for(
            transport,
            self._config,
            self,
            self._lost.get_loop() if self._lost is not None else None,
            self.description,
        )
        if writer is not None:
            self._writer = writer

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
        await handshake.authenticate(self, self._config)

    def _tls_rejection(self) -> ssl.SSLError | None:
        """The TLS alert that closed the connection, if that is what closed it."""
        cause = self._close_cause
        if isinstance(cause, ssl.SSLError) and not isinstance(cause, _SSL_NETWORK_ERRORS):
            return cause
        return None

    async def _open(
        self,
        loop: asyncio.AbstractEventLoop,
        addresses: ResolvedAddresses,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        """Connect to the first of the host's addresses that takes the connection, from
        where ``addresses`` starts (setting :attr:`address`); a TLS failure ends the
        attempt at that address. When every address refused, the error names each."""
        self._trying = None
        errors: list[tuple[str, OSError]] = []
        for family, address in await addresses.candidates():
            self._trying = address
            try:
                await loop.create_connection(
                    lambda: self,
                    address,
                    self.port,
                    family=family,
                    ssl=ssl_context,
                    server_hostname=self.host if ssl_context is not None else None,
                )
            except ssl.SSLError:
                addresses.failed(address)
                raise
            except OSError as exc:
                addresses.failed(address)
                if self._state is ConnectionState.CLOSED:
                    raise
                errors.append((address, exc))
                continue
            self._trying = None
            self.address = address
            return
        if len(errors) == 1:
            raise errors[0][1]
        raise OSError(
            "every address failed: " + "; ".join(f"{where}: {exc}" for where, exc in errors)
        ) from errors[-1][1]

    def _fail_connect(self, error: KafkaError) -> None:
        if not self.closed:
            self._shutdown(None, error)

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
        return self._session.negotiate(request_type, highest)

    # ---- sending ---------------------------------------------------------------------------

    def send_for(
        self, request: Request[Any], handler: AnswerHandler, version: int | None = None
    ) -> None:
        """Write ``request``; its answer goes onto the answer queue with ``handler``.

        Synchronous: the bytes are handed to the transport before this returns. The answer
        is queued, in send order, as the decoded response, or as a retriable
        :class:`~aioproducer.errors.KafkaConnectionError` if the connection dies first
        (:class:`~aioproducer.errors.RequestTimedOutError` or
        :class:`~aioproducer.errors.CorruptResponseError` for the request that caused it).
        A request that expects no response (Produce with ``acks=0``) queues nothing.
        Exactly one of these happens to a request that expects a response, unless this
        raises: then nothing is queued for it.

        Check :meth:`can_send` first. Buffers passed in the request must not be mutated until
        its answer is queued: the transport may keep references to them.

        Args:
            request: the version-neutral request.
            handler: called by the queue's owner with the response, the error and its time.
            version: the version to encode; by default :meth:`negotiate` picks it.

        Raises:
            KafkaConnectionError: the connection is not open (not connected yet, or closed),
                or the write failed (the connection is closed then).
            IllegalStateError: ``max_in_flight_requests_per_connection`` requests are already
                in flight, or the connection has no answer queue.
            UnsupportedVersionError: no version in common (from :meth:`negotiate`).
        """
        if self._answers is None:
            raise IllegalStateError(f"{self.description} has no answer queue; use send()")
        self._write(request, version, handler)

    def send(self, request: Request[_R], version: int | None = None) -> asyncio.Future[_R | None]:
        """Write ``request`` and return the future of its response: for one-off requests
        (the sender uses :meth:`send_for`).

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
        # The loop from the connection's own future: asyncio.get_running_loop() makes a
        # getpid() system call each time (its fork check).
        lost = self._lost
        loop = lost.get_loop() if lost is not None else asyncio.get_running_loop()
        future: asyncio.Future[_R | None] = loop.create_future()
        try:
            expects_response = self._write(request, version, future)
        except BaseException:
            future.cancel()  # nobody has it
            raise
        if not expects_response:
            future.set_result(None)
        return future

    def _write(self, request: Request[Any], version: int | None, waiter: _Waiter) -> bool:
        """Frame ``request`` with ``waiter`` in the session and write it; return whether a
        response is expected (else ``waiter`` is not kept)."""
        state = self._state
        if state is not ConnectionState.READY and state is not ConnectionState.HANDSHAKING:
            raise self._connection_error(f"cannot send on a {state.value} connection")
        now = self._clock()
        parts, expects_response = self._session.send(
            request, version, now, waiter, state is ConnectionState.READY
        )
        writer = self._writer
        assert writer is not None
        try:
            writer.write(parts)
        except (OSError, RuntimeError) as exc:
            # uvloop raises RuntimeError (asyncio an OSError or nothing) when the transport is
            # already closing; either way the connection is gone. The caller hears of it from
            # the error raised here, so the request gets no answer besides.
            error = self._connection_error(f"write failed: {exc!r}")
            self._shutdown(None, exc, unsent=waiter)
            raise error from exc
        self.last_used = now
        metrics = self._metrics
        if metrics is not None:
            # Nothing may raise once the request is out: a caller told of an error takes it
            # that nothing went out, yet the request would be answered.
            try:
                metrics.request_sent(read_frame_size(parts[0]) + SIZE_PREFIX_LENGTH, now)
            except Exception:
                log.exception("counting a request to %s failed", self.description)
        return expects_response

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

        Each in-flight request fails with a retriable
        :class:`~aioproducer.errors.KafkaConnectionError` naming the broker, with ``exc``
        (if given) as its cause: queued with its handler (:meth:`send_for`), or set on its
        future (:meth:`send`). ``on_close`` is called once. Idempotent.
        """
        if self._state is ConnectionState.CLOSED:
            return
        self._shutdown(None, exc)

    def abort(self) -> None:
        """Close at once, dropping bytes not yet written; fails in-flight requests as close()."""
        if self._writer is not None:
            self._writer.drop_queued()
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
        failure = self._session.timed_out(now)
        if failure is None:
            return False
        self._shutdown(failure.head_error, failure.cause)
        return True

    def _half_close(self, transport: asyncio.Transport, writer: LoopWriter) -> None:
        """Close after requests sent without expecting an answer (acks=0) without losing them.

        A broker that answers them anyway (Tansu, librdkafka's mock) may still be sending when
        we close; a socket closed with unread bytes, or that receives bytes after closing,
        sends a TCP reset, and the reset makes the broker's kernel drop the requests it had
        received but not yet read: records reported as sent would be lost. So shut down only
        our side (after the write buffer flushes), keep reading (and ignoring) until the
        broker closes its side on reading our EOF, and abort if it has not within
        ``request_timeout_ms``.
        """
        writer.half_close()
        lost = self._lost
        if lost is None or lost.done():
            return
        handle = asyncio.get_running_loop().call_later(self._request_timeout, transport.abort)
        lost.add_done_callback(lambda _: handle.cancel())

    def _connection_error(self, what: str) -> KafkaError:
        return KafkaConnectionError(f"connection to {self.description}: {what}")

    def _shutdown(
        self,
        head_error: KafkaError | None,
        cause: BaseException | None,
        unsent: _Waiter | None = None,
    ) -> None:
        """Close for good: fail in-flight requests (the oldest with ``head_error`` if given),
        except ``unsent``'s (its write failed, and its sender was told so)."""
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
        unanswered = self._session.has_unanswered()
        failed = self._session.close(head_error, cause)
        self._failed_at_close = len(failed)
        self._forget_partial_frame()
        self._hand_over(failed, True, unsent)
        transport = self._transport
        writer = self._writer
        if transport is not None and writer is not None:
            if cause is not None:
                writer.abort()
            elif unanswered and transport.can_write_eof():
                self._half_close(transport, writer)
            else:
                # Both flush what was written; the socket closes when the writer's copy of
                # the descriptor does.
                writer.close()
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
        self._writer = LoopWriter(transport)
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
        session = self._session
        was_full = session.in_flight_count() >= self._max_in_flight
        outcomes, failure = session.receive_data(data)
        metrics = self._metrics
        if metrics is not None:
            metrics.data_received(len(data), len(outcomes))
        if outcomes:
            self._hand_over(outcomes, False)
        if failure is not None:
            self._shutdown(failure.head_error, failure.cause)
            return
        if session.partial_frame_since is not None:
            if self._partial_frame_timer is None and self._lost is not None:
                self._partial_frame_timer = self._lost.get_loop().call_later(
                    self._request_timeout, self._on_partial_frame_timer
                )
        elif self._partial_frame_timer is not None:
            self._forget_partial_frame()
        if (
            was_full
            and self._on_capacity is not None
            and session.in_flight_count() < self._max_in_flight
            and self._state is ConnectionState.READY
        ):
            self._notify_capacity()

    def _hand_over(
        self, outcomes: list[tuple[_Waiter, Any]], failed: bool, unsent: _Waiter | None = None
    ) -> None:
        """Give each request its outcome, in send order: its response, or (``failed``) the
        error the connection failed it with. A future is resolved, a handler's answer
        queued. ``unsent`` gets nothing: its write failed, and its sender was told so."""
        answers = self._answers
        queued = False
        for waiter, outcome in outcomes:
            if waiter is unsent:
                continue
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():  # else the caller cancelled it
                    if failed:
                        waiter.set_exception(outcome)
                    else:
                        waiter.set_result(outcome)
            elif answers is not None:
                if failed:
                    answers.push(waiter, None, outcome)
                else:
                    answers.push(waiter, outcome, None)
                queued = True
        if queued and answers is not None:
            answers.wake()

    def _on_partial_frame_timer(self) -> None:
        self._partial_frame_timer = None
        session = self._session
        since = session.partial_frame_since
        if since is None or self._state is ConnectionState.CLOSED or session.in_flight_count():
            return
        if not self.check_request_timeouts(self._clock()) and self._lost is not None:
            # The loop's timer may fire a little before the clock says the time is up.
            remaining = max(0.001, since + self._request_timeout - self._clock())
            self._partial_frame_timer = self._lost.get_loop().call_later(
                remaining, self._on_partial_frame_timer
            )

    def _forget_partial_frame(self) -> None:
        timer, self._partial_frame_timer = self._partial_frame_timer, None
        if timer is not None:
            timer.cancel()

    def _notify_capacity(self) -> None:
        callback = self._on_capacity
        if callback is None:
            return
        try:
            callback(self)
        except Exception:
            log.exception("on_capacity callback of %s failed", self.description)
