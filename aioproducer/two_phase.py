"""Completing a prepared transaction from another process, and reading committed offsets.

A transactional producer can stop short of committing: :meth:`Producer.prepare_transaction`
flushes the transaction and returns a :class:`~aioproducer.PreparedTransaction` (the
transactional id, producer id and epoch), and the producer may then be closed with the
transaction still open. :func:`complete_prepared_transaction` commits or aborts it later,
from any process, as the Java client's ``commitTransaction`` does after Flink's
``resumeTransaction``: it finds the transaction coordinator (FindCoordinator) and sends
EndTxn with the carried producer id and epoch. This is the second phase of a two-phase
commit in which Kafka is a participant: a coordinator elsewhere (a Spark driver) decides,
the producers only prepare.

The coordinator ends the transaction only for the epoch it was written under: once a newer
producer with the same transactional id started (which aborts what was open), or the
coordinator aborted the transaction itself because it stayed open longer than the
producer's ``transaction_timeout_ms``, completing it fails with
:class:`~aioproducer.errors.ProducerFencedError` (or
:class:`~aioproducer.errors.InvalidProducerEpochError` /
:class:`~aioproducer.errors.InvalidTxnStateError`), never with a silent success.
``transaction_timeout_ms`` must therefore cover the time from the first record to the
completion.

KIP-939 (``transaction.two.phase.commit.enable``, InitProducerId v6 with
``keepPreparedTxn``) would let a prepared transaction outlive the timeout; Kafka 4.4 still
marks InitProducerId v6 unstable (brokers advertise v5 unless
``unstable.api.versions.enable``), so this module does not use it.

:func:`fetch_committed_offsets` reads a consumer group's committed offsets (OffsetFetch),
waiting for offsets an open transaction committed to be decided (``require_stable``).

:func:`list_transactions` lists the transactional ids the cluster's coordinators hold, with
the state of each one's transaction (ListTransactions, asked of every broker): how a
coordinator of two-phase commits finds the prepared transactions nobody will complete (an
attempt that lost, a run that crashed) and aborts them, by starting a producer with each
of their transactional ids. :func:`describe_transactions` tells, for given transactional
ids, what each one's coordinator holds (DescribeTransactions): whether a prepared
transaction is still open under its producer id and epoch, and how long its timeout leaves
it, before anything is committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aioproducer._core.backoff import ExponentialBackoff
from aioproducer._core.transactions import CoordinatorType
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    ConfigurationError,
    KafkaConnectionError,
    KafkaError,
    RequestTimedOutError,
    error_for_code,
)
from aioproducer.net.connection import BrokerConnection
from aioproducer.net.manager import ConnectionManager
from aioproducer.protocol.api import Request, Response
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.protocol.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    OffsetFetchRequest,
)
from aioproducer.records import PreparedTransaction

__all__ = [
    "TransactionDescription",
    "TransactionListing",
    "complete_prepared_transaction",
    "describe_transactions",
    "fetch_committed_offsets",
    "list_transactions",
]

log = logging.getLogger("aioproducer.two_phase")

_R = TypeVar("_R", bound=Response)

# The last EndTxn version of transactions v1 (a higher one tells the coordinator the client
# follows transactions v2), as in aioproducer._core.transactions.
_END_TXN_V1_MAX_VERSION = 4

_COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
# Answers that mean "ask again shortly": the coordinator is loading its state, or is still
# writing the markers of this (or the previous) transaction.
_RETRY = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
)
_FENCED = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.INVALID_TXN_STATE,
    }
)


#: The states a transaction coordinator reports (ListTransactions, DescribeTransactions).
TRANSACTION_STATES: frozenset[str] = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)


class _CoordinatorClient:
    """Connections to a cluster for a few coordinator requests, with their retries."""

    def __init__(self, config: ProducerConfig, deadline: float) -> None:
        self._config = config
        self.deadline = deadline
        self._changed = asyncio.Event()
        self._manager = ConnectionManager(config, self._changed.set)
        self._backoff = ExponentialBackoff(
            config.retry_backoff_ms, config.retry_backoff_max_ms, jitter=0.0
        )
        self._brokers: dict[int, tuple[str, int]] = {}
        # Requests that went out and got no answer (a lost connection, a timeout): the
        # broker may have acted on them.
        self.unanswered = 0
        # Callers ask concurrently (a coordinator per transactional id); each connection
        # takes at most max_in_flight_requests_per_connection requests at a time.
        self._slots: dict[int, asyncio.Semaphore] = {}

    async def close(self) -> None:
        await self._manager.close()

    def _remaining(self, what: str) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimedOutError(
                f"{what} did not complete within the time given (timeout, or max_block_ms)"
            )
        return remaining

    async def _any(self) -> BrokerConnection:
        attempts = 0
        while True:
            connection = await self._manager.bootstrap(self.deadline)
            if self._brokers:
                return connection
            metadata = await self.request(connection, MetadataRequest([], False), "Metadata")
            if metadata.error_code == 0:
                self._brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
                self._manager.set_brokers(self._brokers)
                return connection
            # A top-level error (v13+; REBOOTSTRAP_REQUIRED among them): this broker's view
            # is of no use; ask again, on another connection, until the deadline.
            error = error_for_code(
                metadata.error_code, f"metadata from {connection.description}"
            )
            connection.close(KafkaConnectionError(str(error)))
            if time.monotonic() >= self.deadline:
                raise KafkaConnectionError(f"no usable metadata in the time given: {error}")
            log.debug("%s; asking again", error)
            attempts = await self.backoff(attempts, "Metadata")

    async def brokers(self) -> list[int]:
        """The node ids of the cluster's brokers (from one Metadata answer)."""
        await self._any()
        return sorted(self._brokers)

    async def _node(self, node_id: int, what: str) -> BrokerConnection:
        while True:
            connection = self._manager.ready(node_id)
            if connection is not None:
                return connection
            self._changed.clear()
            self._manager.ensure_connecting(node_id, time.monotonic())
            delay = self._manager.connection_delay(node_id, time.monotonic())
            wait = min(self._remaining(what), delay if 0 < delay < float("inf") else 1.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)

    async def request(self, connection: BrokerConnection, request: Request[_R], what: str) -> _R:
        slots = self._slots.get(id(connection))
        if slots is None:
            limit = max(1, self._config.max_in_flight_requests_per_connection)
            slots = self._slots[id(connection)] = asyncio.Semaphore(limit)
        # The time left first: the acquire coroutine, made and then dropped when it raises,
        # would never be awaited.
        remaining = self._remaining(what)
        try:
            await asyncio.wait_for(slots.acquire(), remaining)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(
                f"{what} did not complete within the time given (timeout, or max_block_ms)"
            ) from None
        try:
            timeout = min(self._remaining(what), self._config.request_timeout_ms / 1000.0)
            return await asyncio.wait_for(connection.request(request), timeout)
        except asyncio.TimeoutError:
            connection.close(RequestTimedOutError(f"{what} timed out"))
            raise RequestTimedOutError(f"{what} got no answer in time") from None
        finally:
            slots.release()

    async def coordinator(self, key_type: CoordinatorType, key: str) -> BrokerConnection:
        """A connection to the coordinator of ``key``."""
        what = f"FindCoordinator for {key!r}"
        attempts = 0
        while True:
            connection = await self._any()
            response = await self.request(
                connection, FindCoordinatorRequest([key], int(key_type)), what
            )
            entry = next((c for c in response.coordinators if c.key == key), None)
            if entry is None and response.coordinators:
                entry = response.coordinators[0]
            code = entry.error_code if entry is not None else ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == 0 and entry is not None:
                if entry.node_id not in self._brokers:
                    self._brokers[entry.node_id] = (entry.host, entry.port)
                    self._manager.set_brokers(self._brokers)
                return await self._node(entry.node_id, what)
            error = error_for_code(code, entry.error_message if entry is not None else None)
            if not error.retriable:
                raise error
            attempts = await self.backoff(attempts, what)

    async def ask_coordinator(
        self,
        key_type: CoordinatorType,
        key: str,
        request: Request[_R],
        what: str,
        attempts: int,
    ) -> tuple[_R, int]:
        """``request`` answered by the coordinator of ``key``. A lost connection or a request
        that timed out is tried again after a backoff, until the deadline. Returns the answer
        and the attempts counted so far (the caller's retries of error codes go on from it)."""
        return await self._ask(lambda: self.coordinator(key_type, key), request, what, attempts)

    async def ask_node(
        self, node_id: int, request: Request[_R], what: str, attempts: int
    ) -> tuple[_R, int]:
        """``request`` answered by broker ``node_id``, retried as :meth:`ask_coordinator`."""
        return await self._ask(lambda: self._node(node_id, what), request, what, attempts)

    async def _ask(
        self,
        connect: Callable[[], Awaitable[BrokerConnection]],
        request: Request[_R],
        what: str,
        attempts: int,
    ) -> tuple[_R, int]:
        while True:
            sent = False
            try:
                connection = await connect()
                sent = True
                return await self.request(connection, request, what), attempts
            except KafkaError as exc:
                if sent:
                    self.unanswered += 1
                if not exc.retriable or time.monotonic() >= self.deadline:
                    raise
                log.debug("%s: %s; retrying", what, exc)
                attempts = await self.backoff(attempts, what)

    async def backoff(self, attempts: int, what: str) -> int:
        delay = self._backoff.backoff_ms(attempts) / 1000.0
        await asyncio.sleep(min(delay, self._remaining(what)))
        return attempts + 1


def _config(
    config: Mapping[str, Any] | ProducerConfig | None, options: dict[str, Any]
) -> ProducerConfig:
    if isinstance(config, ProducerConfig):
        if options:
            raise ConfigurationError(
                "give the connection options either as a ProducerConfig or as keywords, not both"
            )
        return config
    return ProducerConfig.from_options(config, **options)


def _completion_error(
    prepared: PreparedTransaction, commit: bool, code: int, unanswered: bool
) -> KafkaError:
    action = "commit" if commit else "abort"
    error = error_for_code(code)
    if unanswered:
        # The first EndTxn may have completed it (and, with transactions v2, bumped the
        # epoch): the retry is then refused this very way.
        error.args = (
            f"cannot tell whether the prepared transaction of transactional id "
            f"{prepared.transactional_id!r} (producer id {prepared.producer_id}, epoch "
            f"{prepared.producer_epoch}) was {action}ed: an EndTxn({action}) sent earlier got "
            f"no answer and may have completed it, and the retry was answered "
            f"{error.error_name} (it is not open under that epoch any more). It may also "
            "have been aborted by a newer producer with this transactional id or after "
            "transaction_timeout_ms; a consumer reading committed data shows which",
        )
        return error
    error.args = (
        f"cannot {action} the prepared transaction of transactional id "
        f"{prepared.transactional_id!r} (producer id {prepared.producer_id}, epoch "
        f"{prepared.producer_epoch}): the coordinator answered {error.error_name}, it no "
        "longer has it open under that epoch. A newer producer with this transactional id "
        "started (which aborted it), the coordinator aborted it because it stayed open "
        "longer than transaction_timeout_ms, or it was completed already"
        f"{' with the other outcome' if commit else ''}",
    )
    return error


async def complete_prepared_transaction(
    prepared: PreparedTransaction,
    *,
    commit: bool = True,
    config: Mapping[str, Any] | ProducerConfig | None = None,
    timeout: float | None = None,
    **options: Any,
) -> None:
    """Commit (or abort) a transaction another producer prepared, from any process.

    Finds the transaction coordinator of ``prepared.transactional_id`` and sends it EndTxn
    with the prepared producer id and epoch (EndTxn v5 for a transactions v2 transaction,
    v4 at most otherwise), retrying while the coordinator moves, loads, or is still
    writing markers. Completing again with the same outcome after a success is harmless
    while no newer transaction of that transactional id has begun (the coordinator
    recognises the retry). An ``empty`` prepared transaction needs no request.

    Args:
        prepared: what :meth:`Producer.prepare_transaction` returned.
        commit: True to commit, False to abort.
        config: connection options (``bootstrap_servers``, security settings), as for
            :class:`~aioproducer.Producer`, or a :class:`~aioproducer.ProducerConfig`.
        timeout: seconds for the whole completion; ``max_block_ms`` by default.
        **options: connection options by snake_case name.

    Raises:
        ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError: the
            coordinator no longer has the transaction open under that epoch: a newer
            producer with the transactional id started, or the coordinator aborted it
            after ``transaction_timeout_ms``, or it was completed with the other outcome.
            The message says so; nothing was committed, unless an earlier EndTxn of this
            call went unanswered (it may have completed the transaction): the message then
            says the outcome is unknown.
        RequestTimedOutError: no answer within ``timeout``; the outcome is unknown, and
            completing again (with the same outcome) is safe.
        KafkaConnectionError: no bootstrap server answered.
    """
    if prepared.empty:
        return
    cfg = _config(config, options)
    seconds = cfg.max_block_ms / 1000.0 if timeout is None else timeout
    client = _CoordinatorClient(cfg, time.monotonic() + seconds)
    action = "commit" if commit else "abort"
    what = f"EndTxn({action}) for transactional id {prepared.transactional_id!r}"
    request = EndTxnRequest(
        prepared.transactional_id,
        prepared.producer_id,
        prepared.producer_epoch,
        commit,
        version_cap=None if prepared.transaction_v2 else _END_TXN_V1_MAX_VERSION,
    )
    attempts = 0
    try:
        while True:
            response: EndTxnResponse
            response, attempts = await client.ask_coordinator(
                CoordinatorType.TRANSACTION, prepared.transactional_id, request, what, attempts
            )
            code = response.error_code
            if code == 0:
                log.info(
                    "transactional id %r: prepared transaction (producer id %d, epoch %d) %s",
                    prepared.transactional_id,
                    prepared.producer_id,
                    prepared.producer_epoch,
                    "committed" if commit else "aborted",
                )
                return
            if code in _COORDINATOR_MOVED or code in _RETRY:
                attempts = await client.backoff(attempts, what)
                continue
            if code in _FENCED:
                raise _completion_error(prepared, commit, code, client.unanswered > 0)
            raise error_for_code(code, where=what)
    finally:
        await client.close()


async def fetch_committed_offsets(
    group_id: str,
    partitions: Iterable[tuple[str, int]],
    *,
    config: Mapping[str, Any] | ProducerConfig | None = None,
    timeout: float | None = None,
    **options: Any,
) -> dict[tuple[str, int], int]:
    """The offsets consumer group ``group_id`` committed for ``partitions`` (OffsetFetch).

    Offsets that an open transaction committed are waited for until the transaction ends
    (``require_stable``, KIP-447), so the answer reflects committed transactions only.

    Args:
        group_id: the consumer group.
        partitions: ``(topic, partition)`` pairs.
        config: connection options, as for :func:`complete_prepared_transaction`.
        timeout: seconds for the whole request; ``max_block_ms`` by default.
        **options: connection options by snake_case name.

    Returns:
        ``{(topic, partition): offset}`` for every partition asked for; -1 where the group
        has no committed offset.

    Raises:
        KafkaError: the group coordinator refused (for example GROUP_AUTHORIZATION_FAILED).
        RequestTimedOutError: no answer within ``timeout``.
    """
    found = await _fetch_committed(group_id, partitions, config=config, timeout=timeout, **options)
    return {tp: offset for tp, (offset, _) in found.items()}


async def _fetch_committed(
    group_id: str,
    partitions: Iterable[tuple[str, int]] | None,
    *,
    config: Mapping[str, Any] | ProducerConfig | None = None,
    timeout: float | None = None,
    require_stable: bool = True,
    **options: Any,
) -> dict[tuple[str, int], tuple[int, str | None]]:
    """As :func:`fetch_committed_offsets`, with the metadata committed with each offset:
    ``{(topic, partition): (offset, metadata)}``, ``(-1, None)`` where nothing is
    committed; ``partitions`` None: every partition the group has an offset for.
    ``require_stable`` False answers at once with what is committed, leaving out the
    offsets of open transactions."""
    wanted: dict[str, list[int]] | None = None
    if partitions is not None:
        wanted = {}
        for topic, partition in partitions:
            wanted.setdefault(topic, []).append(partition)
        if not wanted:
            return {}
    cfg = _config(config, options)
    seconds = cfg.max_block_ms / 1000.0 if timeout is None else timeout
    client = _CoordinatorClient(cfg, time.monotonic() + seconds)
    what = f"OffsetFetch for group {group_id!r}"
    request = OffsetFetchRequest(group_id, wanted, require_stable=require_stable)
    attempts = 0
    try:
        while True:
            response, attempts = await client.ask_coordinator(
                CoordinatorType.GROUP, group_id, request, what, attempts
            )
            codes = [response.error_code] + [
                p.error_code for t in response.topics for p in t.partitions
            ]
            code = next((c for c in codes if c), 0)
            if code == ErrorCode.GROUP_ID_NOT_FOUND:
                code = 0  # no such group: nothing committed
            if code in _COORDINATOR_MOVED or code in _RETRY:
                attempts = await client.backoff(attempts, what)
                continue
            if code:
                raise error_for_code(code, where=what)
            found = {
                (t.name, p.partition_index): (p.committed_offset, p.metadata)
                for t in response.topics
                for p in t.partitions
            }
            if wanted is None:
                return {key: value for key, value in found.items() if value[0] >= 0}
            return {
                (topic, p): found.get((topic, p), (-1, None))
                for topic, indexes in wanted.items()
                for p in indexes
            }
    finally:
        await client.close()


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """A transactional id held by a transaction coordinator, as :func:`list_transactions`
    returns it (Java's ``TransactionListing``).

    Attributes:
        transactional_id: the transactional id.
        producer_id: the producer id it has now.
        state: the coordinator's state of its transaction: ``"Ongoing"`` (begun, or
            prepared, and not yet ended), ``"PrepareCommit"``, ``"PrepareAbort"``,
            ``"CompleteCommit"``, ``"CompleteAbort"``, ``"Empty"`` (no transaction since
            the last one ended), ``"Dead"`` or ``"PrepareEpochFence"``.
    """

    transactional_id: str
    producer_id: int
    state: str


# ListTransactions answers to ask the same broker again after a backoff.
_LIST_RETRY = frozenset(
    {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE}
)


async def list_transactions(
    *,
    states: Iterable[str] = (),
    transactional_id_prefix: str | None = None,
    config: Mapping[str, Any] | ProducerConfig | None = None,
    timeout: float | None = None,
    **options: Any,
) -> list[TransactionListing]:
    """The transactional ids the cluster's transaction coordinators hold (ListTransactions).

    Every broker is asked for the transactional ids it coordinates, as the Java admin
    client's ``listTransactions`` does; brokers still loading their transaction state are
    asked again. The answer includes only the ids the client may describe (the
    ``DESCRIBE`` ACL on the transactional id, which ``WRITE`` implies).

    Args:
        states: keep only these states (``"Ongoing"`` for transactions begun or prepared
            and not ended); all by default.
        transactional_id_prefix: keep only the transactional ids that start with it (the
            brokers filter too where they can, from Kafka 4.1).
        config: connection options, as for :func:`complete_prepared_transaction`.
        timeout: seconds for the whole listing; ``max_block_ms`` by default.
        **options: connection options by snake_case name.

    Returns:
        The matching ids, sorted by transactional id.

    Raises:
        ConfigurationError: ``states`` names a state Kafka does not have (they are
            spelled as Kafka spells them: ``"Ongoing"``), or is a string.
        UnsupportedVersionError: a broker older than Kafka 3.0 (no ListTransactions).
        RequestTimedOutError: a broker did not answer within ``timeout``.
        KafkaError: a broker refused with another error.
    """
    if isinstance(states, str):
        raise ConfigurationError(
            f"states must be a collection of states, not the string {states!r}"
        )
    wanted = frozenset(states)
    unknown = sorted(wanted - TRANSACTION_STATES)
    if unknown:
        raise ConfigurationError(
            f"unknown transaction state(s) {', '.join(map(repr, unknown))}; Kafka's are "
            f"{', '.join(sorted(TRANSACTION_STATES))}"
        )
    cfg = _config(config, options)
    seconds = cfg.max_block_ms / 1000.0 if timeout is None else timeout
    client = _CoordinatorClient(cfg, time.monotonic() + seconds)
    pattern = None
    if transactional_id_prefix is not None:
        # A Java regular expression: backslashes before every non-alphanumeric character
        # stand for the character itself there as in Python.
        pattern = re.escape(transactional_id_prefix) + ".*"
    request = ListTransactionsRequest(sorted(wanted), [], -1, pattern)

    async def ask(node_id: int) -> ListTransactionsResponse:
        what = f"ListTransactions of broker {node_id}"
        attempts = 0
        while True:
            response, attempts = await client.ask_node(node_id, request, what, attempts)
            if response.error_code in _LIST_RETRY:
                attempts = await client.backoff(attempts, what)
                continue
            if response.error_code:
                raise error_for_code(response.error_code, where=what)
            return response

    try:
        answers = await asyncio.gather(*(ask(node) for node in await client.brokers()))
    finally:
        await client.close()
    found = {
        entry.transactional_id: TransactionListing(
            entry.transactional_id, entry.producer_id, entry.transaction_state
        )
        for answer in answers
        for entry in answer.transaction_states
        if (not wanted or entry.transaction_state in wanted)
        and (
            transactional_id_prefix is None
            or entry.transactional_id.startswith(transactional_id_prefix)
        )
    }
    return [found[key] for key in sorted(found)]


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """What a transaction coordinator holds for a transactional id, as
    :func:`describe_transactions` returns it (Java's ``TransactionDescription``).

    Attributes:
        transactional_id: the transactional id.
        state: the state of its transaction, as in :class:`TransactionListing`
            (``"Ongoing"`` for a transaction begun, or prepared, and not yet ended).
        producer_id: the producer id it has now.
        producer_epoch: the epoch it has now (a prepared transaction is still open only
            under the epoch it was prepared with).
        timeout_ms: the transaction's ``transaction_timeout_ms``.
        start_time_ms: when the open transaction began, by the coordinator's clock (ms
            since the Unix epoch); -1 when no transaction is open.
        partitions: the topic partitions of the open transaction that have no
            transaction marker yet.
    """

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: dict[str, list[int]]

    def matches(self, prepared: PreparedTransaction) -> bool:
        """Whether ``prepared`` is this transactional id's open transaction (``Ongoing``
        under its producer id and epoch): committing it would succeed, unless its timeout
        runs out first."""
        return (
            self.state == "Ongoing"
            and self.transactional_id == prepared.transactional_id
            and self.producer_id == prepared.producer_id
            and self.producer_epoch == prepared.producer_epoch
        )

    def time_left_ms(self, now_ms: float | None = None) -> float:
        """How long the coordinator still lets the open transaction run before it aborts
        it (``start_time_ms + timeout_ms - now``; the local clock stands in for the
        coordinator's). Infinite with no transaction open."""
        if self.start_time_ms < 0:
            return float("inf")
        now = time.time() * 1000.0 if now_ms is None else now_ms
        return self.start_time_ms + self.timeout_ms - now


async def describe_transactions(
    transactional_ids: Iterable[str],
    *,
    config: Mapping[str, Any] | ProducerConfig | None = None,
    timeout: float | None = None,
    **options: Any,
) -> dict[str, TransactionDescription]:
    """What the transaction coordinators hold for ``transactional_ids``
    (DescribeTransactions, asked of each id's coordinator, as the Java admin client's
    ``describeTransactions`` does).

    Args:
        transactional_ids: the ids to describe.
        config: connection options, as for :func:`complete_prepared_transaction`.
        timeout: seconds for the whole call; ``max_block_ms`` by default.
        **options: connection options by snake_case name.

    Returns:
        A description per transactional id the coordinators know; an id no coordinator
        knows (never used, or expired after ``transactional.id.expiration.ms``) is left
        out.

    Raises:
        ConfigurationError: ``transactional_ids`` is a string, not a collection of ids.
        UnsupportedVersionError: a broker older than Kafka 3.0 (no DescribeTransactions).
        RequestTimedOutError: no answer within ``timeout``.
        KafkaError: a coordinator refused with another error (an authorization error
            without the ``DESCRIBE`` ACL on the transactional id, for one).
    """
    if isinstance(transactional_ids, str):
        raise ConfigurationError(
            f"transactional_ids must be a collection of ids, not the string {transactional_ids!r}"
        )
    ids = sorted(set(transactional_ids))
    cfg = _config(config, options)
    seconds = cfg.max_block_ms / 1000.0 if timeout is None else timeout
    client = _CoordinatorClient(cfg, time.monotonic() + seconds)

    async def describe(transactional_id: str) -> TransactionDescription | None:
        what = f"DescribeTransactions for {transactional_id!r}"
        request = DescribeTransactionsRequest([transactional_id])
        attempts = 0
        while True:
            response: DescribeTransactionsResponse
            response, attempts = await client.ask_coordinator(
                CoordinatorType.TRANSACTION, transactional_id, request, what, attempts
            )
            entry = next(
                (e for e in response.transaction_states if e.transactional_id == transactional_id),
                None,
            )
            code = entry.error_code if entry is not None else ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                return None
            if code in _COORDINATOR_MOVED or code in _LIST_RETRY:
                attempts = await client.backoff(attempts, what)
                continue
            if code or entry is None:
                raise error_for_code(code, where=what)
            return TransactionDescription(
                entry.transactional_id,
                entry.transaction_state,
                entry.producer_id,
                entry.producer_epoch,
                entry.transaction_timeout_ms,
                entry.transaction_start_time_ms,
                entry.topics,
            )

    try:
        found = await asyncio.gather(*(describe(transactional_id) for transactional_id in ids))
    finally:
        await client.close()
    return {d.transactional_id: d for d in found if d is not None}
