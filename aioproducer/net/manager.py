"""The :class:`ConnectionManager`: one :class:`~aioproducer.net.connection.BrokerConnection`
per broker, opened on demand, with reconnect backoff and the bootstrap sequence.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from aioproducer._core.answers import AnswerQueue
from aioproducer._core.backoff import ExponentialBackoff
from aioproducer._core.metrics import ProducerMetrics
from aioproducer.errors import (
    AuthenticationError,
    ConfigurationError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
)
from aioproducer.net.connection import (
    BrokerConnection,
    ConnectionState,
    FinalizedFeatures,
    ResolvedAddresses,
)
from aioproducer.net.handshake import SASL_PROTOCOLS, security_protocol_name
from aioproducer.net.kerberos import KdcUnreachableError, RenewalHold

if TYPE_CHECKING:
    from aioproducer.config import ProducerConfig

__all__ = ["ConnectionManager"]

log = logging.getLogger("aioproducer.net")

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
    # The host's addresses and where the next attempt starts (use_all_dns_ips).
    resolved: ResolvedAddresses | None = None
    # When a connection to it was lost (clock seconds), until one is up again.
    lost_at: float = -1.0

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
        metrics: where each broker's connections count their requests, responses and
            bytes (:meth:`ProducerMetrics.node`); None counts nothing.
        answers: the sender's queue, where every connection puts the answers to the
            requests sent with :meth:`BrokerConnection.send_for`.
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
        metrics: ProducerMetrics | None = None,
        answers: AnswerQueue | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._answers = answers
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
        # Brokers whose connection was lost and that then left the metadata: node id ->
        # (host, port, when lost), so that one coming back at the same address is said to be
        # back, as if it had never left (a refresh while it is down often drops it).
        self._lost_and_left: dict[int, tuple[str, int, float]] = {}
        self._bootstrap_nodes: list[_Node] = []
        # KIP-899: with "rebootstrap", the bootstrap servers are asked again when no known
        # broker can be reached; with "none", only the brokers of the metadata are, once
        # there is metadata.
        self._may_rebootstrap = config.metadata_recovery_strategy == "rebootstrap"
        self._metadata_known = False
        # Between rebootstrap() and the next metadata: only the bootstrap servers are asked
        # for metadata (unless each of them failed, or answered for another cluster).
        self._bootstrap_only = False
        self._rebootstrap_failed: set[int] = set()
        # Nodes whose Metadata answer was refused (another cluster's): asked nothing until the
        # next accepted metadata (or, for a bootstrap server, the next rebootstrap).
        self._distrusted: set[int] = set()
        # Whether the fallback to the bootstrap servers was logged since the last metadata.
        self._rebootstrap_logged = False
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
        self._sasl = security_protocol_name(config.security_protocol) in SASL_PROTOCOLS
        self._created = 0
        self._closed_count = 0
        self._authentications = 0
        self._failed_authentications = 0
        self._reauthentications_closed = 0
        self._failed_reauthentications = 0
        # GSSAPI from a ticket cache: the cache is renewed while the manager is open.
        self._renewal: RenewalHold | None = None
        if (
            self._sasl
            and config.sasl_mechanism == "GSSAPI"
            and config.sasl_kerberos_keytab is None
        ):
            from aioproducer.net.kerberos import hold_ticket_renewal

            self._renewal = hold_ticket_renewal(config)

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
        for node in list(self._nodes.values()):
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

    def in_flight_by_node(self) -> dict[int, int]:
        """Requests awaiting a response on each open connection, by node id."""
        counts: dict[int, int] = {}
        # A copy: metrics may be read from another thread while the loop changes the nodes.
        for node in list(self._nodes.values()):
            connection = node.connection
            if connection is not None and not connection.closed:
                counts[node.node_id] = connection.in_flight_count()
        return counts

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

    def least_loaded(self, now: float, for_metadata: bool = False) -> BrokerConnection | None:
        """The ready connection with the fewest requests in flight that can take one more.

        Bootstrap connections count, but a broker from the metadata wins a tie. None when no
        connection can send; then :meth:`ensure_any_connecting` starts one. ``for_metadata``:
        for a Metadata request, which after :meth:`rebootstrap` goes to a bootstrap server
        (other requests keep to the brokers they know).
        """
        best: BrokerConnection | None = None
        best_load = 0
        for node in self._nodes.values():
            if not self._may_ask(node, for_metadata):
                continue
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
            if not self._may_ask(node, True):
                continue
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
        if not known and self._metadata_known and not self._rebootstrap_logged:
            # KIP-899: no broker of the metadata can be reached (each failed and backs off).
            self._rebootstrap_logged = True
            log.info(
                "rebootstrapping: no broker of the cluster's metadata can be reached; "
                "resolving and contacting the bootstrap servers (%s) again",
                ", ".join(n.address for n in self._bootstrap_nodes),
            )
        self._start_connect(min(pool, key=lambda n: (n.failed_attempts, n.next_attempt_at)))

    def _may_ask(self, node: _Node, for_metadata: bool) -> bool:
        """Whether ``node`` may be asked a cluster-wide request now: never one whose
        metadata was refused; with ``metadata_recovery_strategy`` "none" and metadata known,
        only the brokers; after :meth:`rebootstrap`, for metadata, only the bootstrap
        servers."""
        node_id = node.node_id
        if node_id in self._distrusted:
            return False
        if node_id < 0:
            return self._may_rebootstrap or not self._metadata_known
        return not (for_metadata and self._bootstrap_only)

    @property
    def bootstrap_only(self) -> bool:
        """Whether metadata is asked of the bootstrap servers only (after
        :meth:`rebootstrap`, until an answer is accepted or every one of them failed)."""
        return self._bootstrap_only

    def rebootstrap(self, reason: str, now: float) -> None:
        """Ask the bootstrap servers, and only them, for the next metadata (KIP-1102): the
        known brokers gave none for too long, or one asked for it. Their connections are
        closed so that each host name is resolved again (an attempt under way resolved it
        already, and goes on). An accepted Metadata answer ends this; so does every
        bootstrap server failing, or answering for another cluster."""
        if self._closed or not self._may_rebootstrap:
            return
        log.info(
            "rebootstrapping: %s; resolving and contacting the bootstrap servers (%s) again",
            reason,
            ", ".join(n.address for n in self._bootstrap_nodes),
        )
        self._bootstrap_only = True
        self._rebootstrap_logged = True
        self._rebootstrap_failed.clear()
        for node in self._bootstrap_nodes:
            self._distrusted.discard(node.node_id)
            if node.resolved is not None:
                node.resolved.forget()
            if node.task is None:
                self._drop(node, KafkaConnectionError(f"{node.address}: rebootstrapping"))
                node.failed_attempts = 0
                node.next_attempt_at = now
        self._notify()

    def distrust(self, node_id: int) -> None:
        """``node_id`` answered a Metadata request for another cluster: ask it nothing more
        until metadata is accepted again (a bootstrap server: until the next rebootstrap).
        A rebootstrap that finds another cluster at a bootstrap address ends there: the
        known brokers may be asked again."""
        self._distrusted.add(node_id)
        if node_id < 0 and self._bootstrap_only:
            self._end_bootstrap_only("a bootstrap server answered for another cluster")

    def _end_bootstrap_only(self, why: str) -> None:
        self._bootstrap_only = False
        log.info("rebootstrap ended: %s; the known brokers are asked again", why)
        self._notify()

    def _start_connect(self, node: _Node) -> asyncio.Task[BrokerConnection | None]:
        connection = BrokerConnection(
            node.node_id,
            node.host,
            node.port,
            self._config,
            on_close=lambda conn, cause: self._connection_closed(node, conn, cause),
            on_capacity=lambda conn: self._notify(),
            clock=self._clock,
            metrics=self._metrics.node(node.node_id) if self._metrics is not None else None,
            answers=self._answers,
        )
        node.connection = connection
        setup_timeout_ms = self._setup_timeout.backoff_ms(node.failed_attempts)
        if node.resolved is None:
            node.resolved = ResolvedAddresses(node.host, node.port)
        task = asyncio.get_running_loop().create_task(
            self._connect(node, connection, setup_timeout_ms, node.resolved),
            name=f"aioproducer-connect-{node.node_id}",
        )
        node.task = task
        return task

    async def _connect(
        self,
        node: _Node,
        connection: BrokerConnection,
        setup_timeout_ms: float,
        addresses: ResolvedAddresses,
    ) -> BrokerConnection | None:
        # Returns None on failure (recorded on the node) rather than raising, so a task nobody
        # awaits never logs "exception was never retrieved".
        try:
            await connection.connect(setup_timeout_ms, addresses)
        except asyncio.CancelledError:
            # The node may have a new attempt already (a rebootstrap dropped this one and
            # started another on the same node): only this attempt's traces go.
            if node.task is asyncio.current_task():
                node.task = None
            if node.connection is connection:
                node.connection = None
            raise
        except Exception as exc:
            if node.task is asyncio.current_task():
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
        if node.lost_at >= 0:
            log.info(
                "connection to %s is back, %.1f s after it was lost",
                connection.description,
                self._clock() - node.lost_at,
            )
            node.lost_at = -1.0
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
        if self._bootstrap_only and node.node_id < 0:
            self._rebootstrap_failed.add(node.node_id)
            if len(self._rebootstrap_failed) >= len(self._bootstrap_nodes):
                # Not one bootstrap server could be reached since the rebootstrap: the known
                # brokers may be back, so they may be asked again too.
                self._end_bootstrap_only("no bootstrap server could be reached")

    def _connection_closed(
        self, node: _Node, connection: BrokerConnection, cause: BaseException | None
    ) -> None:
        if node.connection is not connection:
            return  # replaced or dropped already
        if node.task is not None:
            return  # still connecting: _connect records the failure
        node.connection = None
        node.last_error = cause
        if node.resolved is not None:
            # An established connection ended: the broker may have moved, so the next
            # attempt resolves its name again.
            node.resolved.forget()
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
                # Once per loss; the reconnect attempts log as connect failures do (the
                # first at WARNING, later ones at DEBUG) and the return at INFO.
                _log_lost(connection, cause, "reconnecting")
                if node.lost_at < 0:
                    node.lost_at = self._clock()
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
            f"{self._failure_details(nodes)}. {self.likely_causes(nodes)}"
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
                if "(ApiVersions)" in connection.waiting_for or not connection.waiting_for:
                    waiting = (
                        "connected, but the first request (ApiVersions) has no answer yet; a "
                        "Kafka broker answers at once"
                    )
                else:
                    waiting = f"connected, still waiting for {connection.waiting_for}"
            else:
                waiting = "no answer yet"
            earlier = self._failures.get(node.address)
            before = f" (the attempt before: {earlier})" if earlier is not None else ""
            details.append(f"{node.address}: {waiting}{before}")
        return "; ".join(details)

    def _waits_for_the_kdc(self, node: _Node) -> bool:
        """Whether ``node``'s last attempt failed, or its current one waits, at the KDC."""
        connection = node.connection
        if (
            node.last_error is None
            and connection is not None
            and connection.state is ConnectionState.HANDSHAKING
        ):
            return connection.waiting_for.startswith("the Kerberos KDC")
        error = node.last_error or self._failures.get(node.address)
        return isinstance(error, KdcUnreachableError)

    def likely_causes(self, nodes: list[_Node] | None = None) -> str:
        """What usually makes every connection attempt fail, for error messages; when
        each of ``nodes`` failed (or waits) at the Kerberos KDC, that."""
        if nodes and all(self._waits_for_the_kdc(n) for n in nodes):
            return (
                "Likely causes: the brokers answered, but the Kerberos KDC that krb5.conf (or "
                "the file KRB5_CONFIG names) lists for the realm is down, too slow, cannot be "
                "reached from this machine, or is not the realm's KDC."
            )
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
            f"{self.likely_causes(failed)}"
        )

    # ---- metadata --------------------------------------------------------------------------------

    def set_brokers(
        self, brokers: Mapping[int, tuple[str, int]], *, from_metadata: bool = True
    ) -> None:
        """Adopt the brokers of a Metadata response: ``{node_id: (host, port)}``.

        Connections to brokers that left the cluster, or whose address changed, are closed
        (their in-flight requests fail as retriable). Bootstrap connections are kept. An
        accepted Metadata answer (``from_metadata``; not the endpoints a Produce answer
        names, KIP-951) ends a :meth:`rebootstrap`.
        """
        if from_metadata:
            self._metadata_known = True
            self._bootstrap_only = False
            self._rebootstrap_logged = False
            self._distrusted.clear()
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
            connection = node.connection
            live = connection is not None and not connection.closed
            self._drop(node, KafkaConnectionError(f"node {node_id} ({node.address}): {reason}"))
            if address is None and live and connection is not None and node.lost_at < 0:
                # A broker that stops answering may leave the metadata before its sockets
                # report it: the same loss, logged once, and its return logged as one.
                _log_lost(connection, reason, "reconnecting when it returns")
                node.lost_at = self._clock()
            if node.lost_at >= 0:
                self._lost_and_left[node_id] = (node.host, node.port, node.lost_at)
        for node_id, (host, port) in brokers.items():
            if node_id not in self._nodes:
                node = self._nodes[node_id] = _Node(node_id, host, port)
                left = self._lost_and_left.pop(node_id, None)
                if left is not None and (left[0], left[1]) == (host, port):
                    node.lost_at = left[2]

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
        renewal, self._renewal = self._renewal, None
        if renewal is not None:
            renewal.release()
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


def _log_lost(connection: BrokerConnection, cause: object, then: str) -> None:
    """A connection lost, once per loss: at WARNING when it had requests in flight (they
    are retried), else at INFO."""
    in_flight = connection.failed_at_close
    log.log(
        logging.WARNING if in_flight else logging.INFO,
        "connection to %s lost%s: %s; %s",
        connection.description,
        f" with {in_flight} request(s) in flight (retried)" if in_flight else "",
        cause,
        then,
    )
