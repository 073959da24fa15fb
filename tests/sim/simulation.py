"""One simulated run: the real producer pipeline against the cluster model, on a virtual clock.

A run is a pure function of its seed. :func:`draw_config` picks the producer's options
and the faults from ``random.Random(seed)``; :class:`Simulation` wires the real
:class:`~aioproducer._core.sender.Sender`,
:class:`~aioproducer._core.accumulator.RecordAccumulator`,
:class:`~aioproducer._core.buffer_pool.BufferPool`, :class:`~aioproducer._core.metadata.Metadata`,
:class:`~aioproducer._core.idempotence.IdempotenceManager` /
:class:`~aioproducer._core.transactions.TransactionManager` and
:class:`~aioproducer._core.metrics.ProducerMetrics` as ``tests/unit/test_sender.py``'s
``Harness`` does, with the fakes of :mod:`tests.sim.network` for connections and the model
of :mod:`tests.sim.model` for the brokers. Nothing runs the event loop: futures are made on a
loop the run owns, and the sender is stepped with ``run_once(now)``.

The run is a discrete-event loop. Events (a request reaching a broker, replication
catching up, an answer reaching the client, a workload action, a fault) sit in a heap by
virtual time; the loop jumps to the earliest of them or to the time the sender asked to be
woken, handles what is due, then steps the sender. Faults are drawn up to ``heal_at``; then
every fault is healed (brokers up, partitions led, answers on time) and the run goes on until
everything the workload started has finished ("quiet"), or a deadline says something hangs.
The invariants (:mod:`tests.sim.checks`) are checked on what the run recorded.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aioproducer._core.accumulator import ProducerBatch, RecordAccumulator
from aioproducer._core.answers import AnswerQueue
from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.futures import RecordFuture
from aioproducer._core.idempotence import IdempotenceManager
from aioproducer._core.metadata import Metadata
from aioproducer._core.metrics import ProducerMetrics
from aioproducer._core.sender import Sender
from aioproducer._core.transactions import TRANSACTION_VERSION_FEATURE, TransactionManager
from aioproducer.config import ProducerConfig
from aioproducer.net.connection import FinalizedFeatures
from aioproducer.protocol.api import ApiKey, Request
from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.protocol.messages import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    BatchIndexAndErrorMessage,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderIdAndEpoch,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)
from aioproducer.protocol.messages import (
    Coordinator as CoordinatorEntry,
)
from aioproducer.protocol.record_batch import estimate_record_size
from aioproducer.records import TransactionState
from tests.sim.model import Coordinator, LogBatch, PartitionModel, TxnState, check_append
from tests.sim.network import FakeConnection, FakeConnections, InFlight

TOPIC = "sim"
BROKERS = (1, 2, 3)
PARTITIONS = 3
TRANSACTIONAL_ID = "sim-txn"
T0 = 1000.0
TIMESTAMP = 1_700_000_000_000
# The versions the modelled brokers offer of the APIs whose version changes what they do.
API_VERSIONS: dict[int, tuple[int, int]] = {ApiKey.PRODUCE: (3, 12), ApiKey.END_TXN: (0, 5)}
# How much later the simulation steps a sender that asked to run again at once, in vain.
_SPIN_STEP = 0.005
# An answer to a request that reached a broker which then lost it (lost answers).
NEVER = math.inf


# ---- the configuration of a run ---------------------------------------------------------


@dataclass
class FaultRates:
    """How often each fault happens while faults are on (per virtual second, or a
    probability per request)."""

    drop_connection: float = 0.0
    leader_move: float = 0.0
    broker_restart: float = 0.0
    coordinator_move: float = 0.0
    replication_stall: float = 0.0
    metadata_lag: float = 0.0
    throttle: float = 0.0
    lose_answer: float = 0.0  # per Produce request
    lose_request: float = 0.0  # per Produce request
    slow_answer: float = 0.0  # per request
    fail_write: float = 0.0  # per request: the write fails and closes the connection
    # Losing the answer to a Metadata, FindCoordinator, InitProducerId, AddPartitionsToTxn
    # or EndTxn: off unless asked (see RunOptions.lose_control_answers).
    lose_control_answer: float = 0.0


@dataclass
class SimConfig:
    """Everything drawn for one seed."""

    mode: str  # "plain", "idempotent" or "transactional"
    options: dict[str, Any]
    faults: FaultRates
    records: int
    work_until: float  # virtual seconds after start
    heal_at: float
    max_message_bytes: int
    duplicate_as_error: bool  # answer a duplicate with DUPLICATE_SEQUENCE_NUMBER
    # The cluster's finalized transaction.version (transactional runs): 1 or 2, or 1 until
    # ``upgrade_at`` (virtual seconds after start) and 2 from then on.
    transaction_version: int = 1
    upgrade_at: float | None = None
    # The topic's message.timestamp.before.max.ms (KIP-937), None for no bound: a record
    # whose timestamp is older is refused with INVALID_TIMESTAMP.
    timestamp_before_max_ms: int | None = None

    def describe(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        faults = ", ".join(f"{k}={v:g}" for k, v in vars(self.faults).items() if v)
        version = ""
        if self.mode == "transactional":
            version = f" transaction.version={self.transaction_version}"
            if self.upgrade_at is not None:
                version += f" (2 from {self.upgrade_at:g}s)"
        return (
            f"mode={self.mode} records={self.records} work_until={self.work_until:g}s "
            f"heal_at={self.heal_at:g}s max_message_bytes={self.max_message_bytes}"
            f"{version}"
            + (
                f" message.timestamp.before.max.ms={self.timestamp_before_max_ms}"
                if self.timestamp_before_max_ms is not None
                else ""
            )
            + "\n"
            f"  options: {opts}\n  faults: {faults or 'none'}"
        )


@dataclass
class RunOptions:
    """Choices of the caller that are not drawn from the seed."""

    trace: bool = False
    # Also lose answers to coordinator and metadata requests (each must time out).
    lose_control_answers: bool = False
    # Restrict the modes drawn (None: any).
    modes: tuple[str, ...] | None = None


def draw_config(rng: random.Random, options: RunOptions) -> SimConfig:
    """The producer's options, the workload and the faults of one seed."""
    modes = options.modes or ("plain", "idempotent", "idempotent", "transactional", "transactional")
    mode = rng.choice(modes)
    request_timeout = rng.choice((300, 500, 1000, 2000))
    linger = rng.choice((0, 0, 1, 5, 20))
    delivery_timeout = linger + request_timeout + rng.choice((0, 200, 1000, 3000, 10000))
    opts: dict[str, Any] = {
        "linger_ms": linger,
        "batch_size": rng.choice((100, 160, 256, 512)),
        "request_timeout_ms": request_timeout,
        "delivery_timeout_ms": delivery_timeout,
        "retry_backoff_ms": rng.choice((5, 20, 100)),
        "retry_backoff_max_ms": rng.choice((200, 1000)),
        "max_in_flight_requests_per_connection": rng.randint(1, 5),
        "metadata_max_age_ms": rng.choice((500, 5000, 300000)),
        "buffer_memory": 1 << 20,
    }
    if mode == "plain":
        opts["enable_idempotence"] = False
        opts["acks"] = rng.choice(("all", "all", "all", 1))
        opts["retries"] = rng.choice((0, 3, 2147483647))
    else:
        opts["enable_idempotence"] = True
        opts["acks"] = "all"
        opts["retries"] = rng.choice((3, 10, 2147483647))
    if mode == "transactional":
        opts["transactional_id"] = TRANSACTIONAL_ID
        opts["transaction_timeout_ms"] = rng.choice((2000, 5000, 60000))
    rates = FaultRates()
    if rng.random() < 0.9:
        # Each kind is on in about half the runs, at a rate of its own.
        def maybe(rate: float) -> float:
            return rate * rng.choice((0.5, 1.0, 2.0)) if rng.random() < 0.5 else 0.0

        rates.drop_connection = maybe(0.5)
        rates.leader_move = maybe(0.5)
        rates.broker_restart = maybe(0.2)
        rates.coordinator_move = maybe(0.2) if mode == "transactional" else 0.0
        rates.replication_stall = maybe(0.5)
        rates.metadata_lag = maybe(0.3)
        rates.throttle = maybe(0.3)
        rates.lose_answer = maybe(0.05)
        rates.lose_request = maybe(0.03)
        rates.slow_answer = maybe(0.05)
        rates.fail_write = maybe(0.02)
        if options.lose_control_answers:
            rates.lose_control_answer = maybe(0.05)
    work_until = rng.choice((1.0, 2.0, 4.0))
    config = SimConfig(
        mode=mode,
        options=opts,
        faults=rates,
        records=rng.randint(10, 60),
        work_until=work_until,
        heal_at=work_until + rng.choice((0.0, 0.5, 2.0)),
        max_message_bytes=rng.choice((1 << 20,) * 5 + (300,)),
        duplicate_as_error=rng.random() < 0.2,
    )
    if mode == "transactional":
        # Drawn last, so that the other choices of a seed stay what they were before
        # transactions v2 was modelled.
        kind = rng.choice(("v1", "v2", "v2", "upgrade"))
        config.transaction_version = 2 if kind == "v2" else 1
        if kind == "upgrade":
            config.upgrade_at = rng.uniform(0.0, work_until)
    if rng.random() < 0.2:
        config.timestamp_before_max_ms = rng.choice((300, 1000, 3000))
    return config


# ---- what the run records -------------------------------------------------------------------


@dataclass(eq=False)
class RecordInfo:
    """One record the workload sent, and what became of it."""

    rid: int
    partition: int
    txn: int  # the workload's transaction number, -1 outside transactions
    order: int  # its place among the records sent to its partition
    future: RecordFuture
    sent_at: float
    done_at: float | None = None


@dataclass(eq=False)
class TxnInfo:
    """One transaction of the workload."""

    number: int
    began_at: float
    records: list[RecordInfo] = field(default_factory=list)
    # "commit" or "abort": what the workload asked for last, and its future.
    ending: str | None = None
    end_future: asyncio.Future[None] | None = None
    end_started_at: float = 0.0
    end_done_at: float | None = None
    # "committed", "aborted", or None when neither succeeded.
    outcome: str | None = None
    commit_error: BaseException | None = None


@dataclass(eq=False)
class PendingProduce:
    """A Produce request in the broker's purgatory (``DelayedProduce``): each partition's
    result, or the log position replication must reach first."""

    connection: FakeConnection
    entry: InFlight
    node: int
    # tp -> [error code, base offset, batches replication must reach (0: none), generation]
    results: dict[tuple[str, int], list[int]]
    throttle_ms: int
    # tp -> the indexes of the records that made the broker refuse the batch (KIP-467)
    record_errors: dict[tuple[str, int], list[int]] = field(default_factory=dict)


# ---- the simulation -----------------------------------------------------------------------


class Simulation:
    """One run of one seed; :meth:`run` returns once it is quiet or hung."""

    def __init__(self, seed: int, options: RunOptions | None = None) -> None:
        self.seed = seed
        self.options = options or RunOptions()
        self.rng = random.Random(seed)
        self.config = draw_config(self.rng, self.options)
        self.now = T0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._event_count = 0
        self._request_numbers = 0
        self._trace: list[tuple[float, str]] = []
        self.internal_errors: list[str] = []
        # Requests the producer sent that it should have held (over max in flight, or to a
        # broker throttling it, KIP-219).
        self.protocol_violations: list[str] = []
        self.hung: list[str] = []
        # The highest sequence acknowledged to the client, per partition, producer id and
        # epoch; and the epoch bumps that restarted a partition whose unresolved sequence an
        # answer the client had received already covered (see _watch_sequences).
        self.acknowledged_sequences: dict[tuple[tuple[str, int], int, int], int] = {}
        self.needless_bumps: list[str] = []
        # The records that went out in a Produce request at least once.
        self.sent_rids: set[int] = set()
        self.steps = 0
        # Virtual seconds the sender spent asking to run again at once (a busy loop).
        self.spinning = 0.0
        # -- the cluster
        self.up: set[int] = set(BROKERS)
        self.partitions = [
            PartitionModel(TOPIC, index, [BROKERS[(index + k) % len(BROKERS)] for k in range(3)])
            for index in range(PARTITIONS)
        ]
        self.coordinator = Coordinator(self.config.transaction_version)
        self.coordinator_node = BROKERS[0]
        self.coordinator_loading_until = 0.0
        self.pending: list[PendingProduce] = []
        self.faults_on = True
        self.stalled_until: dict[int, float] = {}  # partition -> replication stalled until
        self.metadata_lag_until = -math.inf
        self.metadata_history: list[tuple[float, list[tuple[int, int]]]] = []
        self.throttled_until: dict[int, float] = {}
        self._record_metadata_view()
        # -- the producer
        self.loop = asyncio.new_event_loop()
        config = self.producer_config = ProducerConfig.from_options(**self.config.options)
        self.acks = config.acks
        self.pool = BufferPool(config.buffer_memory, config.batch_size)
        self.metrics = ProducerMetrics(clock=self.clock)
        self.metadata = Metadata(
            max_age=config.metadata_max_age_ms / 1000.0,
            max_idle=config.metadata_max_idle_ms / 1000.0,
            retry_backoff=config.retry_backoff_ms / 1000.0,
            loop=self.loop,
        )
        self.transactions: TransactionManager | None = None
        if config.transactional_id is not None:
            self.transactions = TransactionManager(
                config.transactional_id,
                transaction_timeout_ms=config.transaction_timeout_ms,
                retry_backoff=config.retry_backoff_ms / 1000.0,
                retry_backoff_max=config.retry_backoff_max_ms / 1000.0,
                request_timeout=config.request_timeout_ms / 1000.0,
                create_future=self.loop.create_future,
                finalized_features=self._finalized_features,
            )
        self.idempotence: IdempotenceManager | None = self.transactions or (
            IdempotenceManager() if config.enable_idempotence else None
        )
        if self.idempotence is not None and self.transactions is None:
            self._watch_sequences(self.idempotence)
        self.accumulator = RecordAccumulator(
            pool=self.pool,
            batch_size=config.batch_size,
            linger=config.linger_ms / 1000.0,
            delivery_timeout=config.delivery_timeout_ms / 1000.0,
            retry_backoff=config.retry_backoff_ms / 1000.0,
            compression=CompressionType.NONE,
            compression_level=None,
            loop=self.loop,
            idempotence=self.idempotence,
            offload_threshold=None,
        )
        # Nothing runs the event loop: the stepping below drains the answers, no wake-up.
        self.answers = AnswerQueue()
        self.connections = FakeConnections(
            self,
            list(BROKERS),
            config.max_in_flight_requests_per_connection,
            config.request_timeout_ms / 1000.0,
            self.answers,
        )
        self._acknowledged = False
        self.sender = Sender(
            config=config,
            accumulator=self.accumulator,
            metadata=self.metadata,
            connections=self.connections,
            idempotence=self.idempotence,
            metrics=self.metrics,
            answers=self.answers,
            on_acknowledgement=self._on_acknowledgement,
            clock=self.clock,
            # The backoff's jitter from the run's seed, so that a run replays exactly.
            rng=random.Random(seed * 7919 + 1),
        )
        self.metadata.add_topic(TOPIC, self.now)
        # -- the workload
        self.records: list[RecordInfo] = []
        self.pending_records: list[RecordInfo] = []
        self.sent_per_partition = [0] * PARTITIONS
        self.txns: list[TxnInfo] = []
        self.current_txn: TxnInfo | None = None
        self.init_future: asyncio.Future[None] | None = None
        self.producer_dead = False  # a fatal error: the workload stops
        self.records_left = self.config.records
        self.last_epoch = -1
        self._txn_budget = 0

    def _watch_sequences(self, idempotence: IdempotenceManager) -> None:
        """Note every epoch bump of an idempotent producer that restarted a partition for an
        unresolved sequence (batches that expired in flight) although the client had already
        been told the broker stored every sequence it had handed out there: a late success
        the producer ignored (Java's ``completeBatch`` resolves the sequence with it)."""
        resolve = idempotence.maybe_resolve_sequences
        request_bump = idempotence.request_epoch_bump
        bumped: list[tuple[str, int]] = []

        def request_epoch_bump(tp: tuple[str, int], reason: str) -> None:
            bumped.append(tp)
            request_bump(tp, reason)

        def maybe_resolve_sequences() -> None:
            # The sequence state is the manager's own; only the simulation reads it so.
            before = {
                tp: (state.producer_id, state.producer_epoch, state.next_sequence - 1)
                for tp, state in idempotence._partitions.items()
                if state.unresolved_sequence is not None
            }
            bumped.clear()
            resolve()
            for tp in bumped:
                if tp not in before:
                    continue
                pid, epoch, last_handed_out = before[tp]
                acknowledged = self.acknowledged_sequences.get((tp, pid, epoch), -1)
                if acknowledged >= last_handed_out:
                    self.needless_bumps.append(
                        f"{tp[0]}-{tp[1]}: the epoch was bumped at {self.now - T0:.4f} for an "
                        f"unresolved sequence (pid {pid}, epoch {epoch}), but the broker had "
                        f"acknowledged every sequence handed out, up to {acknowledged}, to the "
                        f"client"
                    )

        idempotence.request_epoch_bump = request_epoch_bump  # type: ignore[method-assign]
        idempotence.maybe_resolve_sequences = maybe_resolve_sequences  # type: ignore[method-assign]

    # ---- plumbing ------------------------------------------------------------------------

    def clock(self) -> float:
        return self.now

    def trace(self, text: str) -> None:
        if self.options.trace:
            self._trace.append((self.now, text))

    def protocol_violation(self, text: str) -> None:
        self.trace(f"  protocol violation: {text}")
        if len(self.protocol_violations) < 10:
            self.protocol_violations.append(f"at {self.now - T0:.4f}: {text}")

    @property
    def trace_lines(self) -> list[str]:
        return [f"{at - T0:10.4f} {text}" for at, text in self._trace]

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._event_count += 1
        heapq.heappush(self._events, (when, self._event_count, action))

    def _finalized_features(self) -> FinalizedFeatures:
        """What the brokers' ApiVersions answers say of ``transaction.version`` now."""
        upgraded = self.config.upgrade_at is not None and self.now >= T0 + self.config.upgrade_at
        if upgraded and self.coordinator.server_version < 2:
            self.coordinator.server_version = 2
            self.trace("cluster: transaction.version finalized at 2")
        version = 2 if upgraded else self.config.transaction_version
        return FinalizedFeatures(
            epoch=2 if upgraded else 1,
            levels={TRANSACTION_VERSION_FEATURE: version},
            api_versions=dict(API_VERSIONS),
        )

    # Network protocol (tests.sim.network) ----------------------------------------------------

    def next_request_number(self) -> int:
        self._request_numbers += 1
        return self._request_numbers

    def connect_delay(self, node: int) -> float | None:
        if node not in self.up:
            return None
        return self.rng.uniform(0.001, 0.02)

    def on_ready_at(self, connection: FakeConnection, at: float) -> None:
        self.at(at, lambda: None)  # the loop delivers whatever is due at each event

    def on_send(self, connection: FakeConnection, entry: InFlight) -> None:
        request = entry.request
        self.trace(f"send #{entry.number} to {connection.node_id}: {self._describe(entry)}")
        is_produce = isinstance(request, ProduceRequest)
        for batch in entry.batches.values():
            self.sent_rids.update(_rid(record.value) for record in batch.records)
        faults = self.config.faults if self.faults_on else FaultRates()
        if is_produce and self.rng.random() < faults.lose_request:
            self.trace(f"  fault: request #{entry.number} to {connection.node_id} is lost")
            return
        # One TCP connection: requests reach the broker in the order they were sent.
        arrive = max(self.now + self.rng.uniform(0.0002, 0.002), connection.last_arrival)
        connection.last_arrival = arrive
        self.at(arrive, lambda: self._arrive(connection, entry))

    def write_fails(self, connection: FakeConnection, request: Request[Any]) -> bool:
        faults = self.config.faults if self.faults_on else FaultRates()
        if faults.fail_write > 0 and self.rng.random() < faults.fail_write:
            self.trace(
                f"fault: writing {type(request).__name__} to {connection.node_id} fails"
            )
            return True
        return False

    def _describe(self, entry: InFlight) -> str:
        request = entry.request
        if isinstance(request, ProduceRequest):
            parts = []
            for (_, p), batch in sorted(entry.batches.items()):
                rids = [_rid(r.value) for r in batch.records]
                parts.append(
                    f"p{p}[pid={batch.producer_id} e={batch.producer_epoch} "
                    f"seq={batch.base_sequence} n={len(rids)} r{rids[0]}..r{rids[-1]}]"
                )
            return f"Produce v{_version(request)} " + " ".join(parts)
        if isinstance(request, EndTxnRequest):
            return (
                f"EndTxn v{_version(request)} commit={request.committed} "
                f"pid={request.producer_id} e={request.producer_epoch}"
            )
        if isinstance(request, InitProducerIdRequest):
            return (
                f"InitProducerId tid={request.transactional_id} pid={request.producer_id} "
                f"e={request.producer_epoch}"
            )
        if isinstance(request, AddPartitionsToTxnRequest):
            txn = request.transactions[0]
            added = [p for t in txn.topics for p in t.partitions]
            return f"AddPartitionsToTxn pid={txn.producer_id} e={txn.producer_epoch} {added}"
        return type(request).__name__

    # ---- the broker side ------------------------------------------------------------------

    def _arrive(self, connection: FakeConnection, entry: InFlight) -> None:
        node = connection.node_id
        if node not in self.up:
            return
        if not entry.live and self.rng.random() < 0.5:
            # The connection died; the request may or may not have reached the broker.
            return
        request = entry.request
        answer: Any
        if isinstance(request, ProduceRequest):
            self._produce(connection, entry, node, request)
            return
        if isinstance(request, MetadataRequest):
            answer = self._metadata_answer()
        elif isinstance(request, FindCoordinatorRequest):
            answer = FindCoordinatorResponse(
                0,
                [
                    CoordinatorEntry(
                        key, self.coordinator_node, f"broker{self.coordinator_node}", 9092, 0
                    )
                    for key in request.coordinator_keys
                ],
            )
        elif isinstance(request, InitProducerIdRequest):
            answer = self._init_producer_id(node, request)
        elif isinstance(request, AddPartitionsToTxnRequest):
            answer = self._add_partitions(node, request)
        elif isinstance(request, EndTxnRequest):
            answer = self._end_txn(node, request)
        else:
            raise AssertionError(f"the model does not answer {type(request).__name__}")
        self.trace(f"  broker {node} answers #{entry.number}: {_short(answer)}")
        self._send_answer(connection, entry, answer, control=True)

    def _send_answer(
        self, connection: FakeConnection, entry: InFlight, answer: Any, control: bool
    ) -> None:
        faults = self.config.faults if self.faults_on else FaultRates()
        lose = faults.lose_control_answer if control else faults.lose_answer
        if self.rng.random() < lose:
            self.trace(f"  fault: the answer to #{entry.number} from {connection.node_id} is lost")
            return
        delay = self.rng.uniform(0.0002, 0.002)
        if self.rng.random() < faults.slow_answer:
            delay += self.rng.uniform(0.1, 3.0)
            self.trace(f"  fault: the answer to #{entry.number} is slow ({delay:.3f}s)")
        connection.answer(entry, answer, self.now + delay)

    def _coordinator_error(self, node: int) -> int:
        if node != self.coordinator_node:
            return ErrorCode.NOT_COORDINATOR
        if self.now < self.coordinator_loading_until:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return 0

    def _init_producer_id(
        self, node: int, request: InitProducerIdRequest
    ) -> InitProducerIdResponse:
        if request.transactional_id is None:
            # An idempotent producer: a new id at epoch 0 whatever it names.
            return InitProducerIdResponse(0, 0, self.coordinator.new_producer_id(), 0)
        code = self._coordinator_error(node)
        if code:
            return InitProducerIdResponse(0, code, -1, -1)
        code, pid, epoch, markers = self.coordinator.init_producer_id(
            request.transactional_id,
            request.transaction_timeout_ms,
            request.producer_id,
            request.producer_epoch,
        )
        if markers:
            self._write_markers_later(request.transactional_id)
        return InitProducerIdResponse(0, code, pid, epoch)

    def _add_partitions(
        self, node: int, request: AddPartitionsToTxnRequest
    ) -> AddPartitionsToTxnResponse:
        txn = request.transactions[0]
        tps = [(t.name, p) for t in txn.topics for p in t.partitions]
        code = self._coordinator_error(node) or self.coordinator.add_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, tps, self.now
        )
        return AddPartitionsToTxnResponse(
            0,
            0,
            [
                AddPartitionsToTxnResult(
                    txn.transactional_id,
                    [
                        AddPartitionsToTxnTopicResult(
                            t.name,
                            [AddPartitionsToTxnPartitionResult(p, code) for p in t.partitions],
                        )
                        for t in txn.topics
                    ],
                )
            ],
        )

    def _end_txn(self, node: int, request: EndTxnRequest) -> EndTxnResponse:
        code = self._coordinator_error(node)
        if code:
            return EndTxnResponse(0, code)
        code, markers, producer_id, epoch = self.coordinator.end_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            2 if _version(request) >= 5 else 1,
        )
        if markers:
            self._write_markers_later(request.transactional_id)
        return EndTxnResponse(0, code, producer_id, epoch)

    def _write_markers_later(self, tid: str) -> None:
        # TransactionMarkerChannelManager: WriteTxnMarkers to each partition leader, a
        # little after the PrepareCommit/PrepareAbort was logged.
        self.at(self.now + self.rng.uniform(0.001, 0.05), lambda: self._write_markers(tid))

    def _write_markers(self, tid: str) -> None:
        txn = self.coordinator.txns[tid]
        if txn.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return
        if any(self.partitions[p].leader < 0 for _, p in txn.partitions):
            # A partition without a leader: the marker waits for one.
            self.at(self.now + 0.05, lambda: self._write_markers(tid))
            return
        control = "COMMIT" if txn.state is TxnState.PREPARE_COMMIT else "ABORT"
        for _, index in sorted(txn.partitions):
            partition = self.partitions[index]
            # A marker is appended with acks=all: the partition is replicated up to it.
            partition.append(
                LogBatch(
                    partition.end_offset,
                    txn.producer_id,
                    txn.marker_epoch,
                    -1,
                    -1,
                    (),
                    True,
                    control,
                )
            )
            self._replicated(partition, len(partition.log))
        self.trace(
            f"  coordinator: {control} markers (pid={txn.producer_id} e={txn.marker_epoch}) "
            f"written to {sorted(p for _, p in txn.partitions)}"
        )
        self.coordinator.markers_written(tid)

    def _abort_timed_out(self) -> None:
        for tid in self.coordinator.abort_timed_out(self.now):
            self.trace(f"  coordinator: transaction of {tid} timed out; epoch bumped, aborting")
            self._write_markers_later(tid)
        if not self._quiet_coordinator() or self.now < self.deadline:
            self.at(self.now + 0.25, self._abort_timed_out)

    def _produce(
        self, connection: FakeConnection, entry: InFlight, node: int, request: ProduceRequest
    ) -> None:
        """ReplicaManager.appendRecords: each partition appended (or refused) now; the
        answer waits for replication with acks=all (DelayedProduce)."""
        results: dict[tuple[str, int], list[int]] = {}
        record_errors: dict[tuple[str, int], list[int]] = {}
        for topic in request.topics:
            for data in topic.partitions:
                tp = (topic.name, data.index)
                batch = entry.batches[tp]
                partition = self.partitions[data.index]
                code, offset, wait, refused = self._append(
                    node,
                    partition,
                    batch,
                    request.transactional_id,
                    entry.sizes[tp],
                    _version(request) >= 12,
                )
                if refused:
                    record_errors[tp] = refused
                if wait <= partition.hw or self.acks != -1:
                    wait = 0  # replicated already (a duplicate of an older batch), or acks=1
                results[tp] = [code, offset, wait, partition.generation]
        throttle = 0
        if self.now < self.throttled_until.get(node, -math.inf):
            throttle = self.rng.choice((10, 100, 500))
        pending = PendingProduce(connection, entry, node, results, throttle, record_errors)
        self.pending.append(pending)
        timeout = request.timeout_ms / 1000.0
        self.at(self.now + timeout, lambda: self._produce_timed_out(pending))
        self._maybe_answer(pending)

    def _append(
        self,
        node: int,
        partition: PartitionModel,
        batch: Any,
        tid: str | None,
        size: int,
        adds_partition: bool,
    ) -> tuple[int, int, int, list[int]]:
        """(error code, base offset, log batches replication must reach, the indexes of the
        records the batch was refused for). ``adds_partition``: Produce v12+, whose
        transactional batches the leader adds to the transaction."""
        if partition.leader != node:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, 0, []
        if size > self.config.max_message_bytes:
            return ErrorCode.MESSAGE_TOO_LARGE, -1, 0, []
        bound = self.config.timestamp_before_max_ms
        if bound is not None:
            # LogValidator.validateTimestamp, which UnifiedLog.append runs before it looks
            # for a duplicate in the producer state: a retry of a batch that was written
            # can be refused here.
            now_ms = _timestamp_at(self.now)
            too_old = [
                index
                for index, record in enumerate(batch.records)
                if now_ms - (batch.base_timestamp + record.timestamp_delta) > bound
            ]
            if too_old:
                self.trace(f"  p{partition.tp[1]}: records {too_old} of the batch are too old")
                return ErrorCode.INVALID_TIMESTAMP, -1, 0, too_old
        pid, epoch, first = batch.producer_id, batch.producer_epoch, batch.base_sequence
        rids = tuple(_rid(r.value) for r in batch.records)
        last = (first + len(rids) - 1) % (2**31) if first >= 0 else -1
        transactional = batch.is_transactional
        if pid >= 0:
            entry = partition.states.get(pid)
            if entry is not None:
                offset = entry.find_duplicate(epoch, first, last)
                if offset is not None:
                    index = next(i for i, b in enumerate(partition.log) if b.base_offset == offset)
                    code = (
                        ErrorCode.DUPLICATE_SEQUENCE_NUMBER if self.config.duplicate_as_error else 0
                    )
                    self.trace(f"  p{partition.tp[1]}: duplicate of the batch at offset {offset}")
                    return code, offset, index + 1, []
            if (
                transactional
                and tid is not None
                and not (
                    entry is not None
                    and entry.epoch == epoch
                    and entry.txn_first_offset is not None
                )
            ):
                code = self._verify_or_add(tid, pid, epoch, partition.tp, adds_partition)
                if code:
                    return code, -1, 0, []
            code = check_append(entry, epoch, first)
            if code:
                return code, -1, 0, []
        base = partition.end_offset
        partition.append(LogBatch(base, pid, epoch, first, last, rids, transactional))
        self.trace(
            f"  p{partition.tp[1]}: appended r{rids[0]}..r{rids[-1]} at {base} (leader {node})"
        )
        self._schedule_replication(partition)
        return 0, base, len(partition.log), []

    def _verify_or_add(
        self, tid: str, pid: int, epoch: int, tp: tuple[str, int], adds_partition: bool
    ) -> int:
        """The leader asks the coordinator before a producer's first transactional append to
        a partition (KIP-890): to verify that the partition is in the transaction (v1), or to
        add it (Produce v12+, ``AddPartitionsToTxnManager``). Coordinator errors reach the
        client as ``ReplicaManager.appendRecords``' verification callback translates them."""
        if self.coordinator_node not in self.up or self.now < self.coordinator_loading_until:
            # COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS
            return ErrorCode.NOT_ENOUGH_REPLICAS
        if not adds_partition:
            return self.coordinator.verify(tid, pid, epoch, tp)
        code = self.coordinator.add_partitions(tid, pid, epoch, [tp], self.now)
        if code == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if code == ErrorCode.CONCURRENT_TRANSACTIONS:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return code

    def _schedule_replication(self, partition: PartitionModel) -> None:
        upto, generation = len(partition.log), partition.generation
        delay = self.rng.uniform(0.0005, 0.01)
        if self.now < self.stalled_until.get(partition.tp[1], -math.inf):
            delay = self.stalled_until[partition.tp[1]] - self.now + self.rng.uniform(0.0, 0.5)
        self.at(self.now + delay, lambda: self._replicate(partition, upto, generation))

    def _replicate(self, partition: PartitionModel, upto: int, generation: int) -> None:
        if partition.replicate(upto, generation):
            self._replicated(partition, partition.hw)

    def _replicated(self, partition: PartitionModel, hw: int) -> None:
        partition.hw = max(partition.hw, hw)
        for pending in list(self.pending):
            result = pending.results.get(partition.tp)
            if (
                result is not None
                and result[2]
                and result[3] == partition.generation
                and result[2] <= partition.hw
            ):
                result[2] = 0
                self._maybe_answer(pending)

    def _leader_changed(self, partition: PartitionModel) -> None:
        for pending in list(self.pending):
            result = pending.results.get(partition.tp)
            if result is not None and result[2]:
                # DelayedProduce: the partition's leader moved before acks were reached.
                result[0], result[1], result[2] = ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, 0
                self._maybe_answer(pending)

    def _produce_timed_out(self, pending: PendingProduce) -> None:
        if pending not in self.pending:
            return
        for result in pending.results.values():
            if result[2]:
                result[0], result[1], result[2] = ErrorCode.REQUEST_TIMED_OUT, -1, 0
        self._maybe_answer(pending)

    def _maybe_answer(self, pending: PendingProduce) -> None:
        if any(result[2] for result in pending.results.values()):
            return
        self.pending.remove(pending)
        partitions = []
        for (topic, index), (code, offset, _, _) in sorted(pending.results.items()):
            leader = None
            partition = self.partitions[index]
            if (
                code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                and partition.leader >= 0
                and self.rng.random() < 0.5
            ):
                # KIP-951: the answer names the current leader.
                leader = LeaderIdAndEpoch(partition.leader, partition.leader_epoch)
            refused = [
                BatchIndexAndErrorMessage(i, "timestamp out of range")
                for i in pending.record_errors.get((topic, index), [])
            ]
            partitions.append(
                ProducePartitionResponse(
                    index, code, offset, -1, 0, record_errors=refused, current_leader=leader
                )
            )
        answer = ProduceResponse([ProduceTopicResponse(TOPIC, partitions)], pending.throttle_ms)
        self.trace(f"  broker {pending.node} answers #{pending.entry.number}: {_short(answer)}")
        self._send_answer(pending.connection, pending.entry, answer, control=False)

    # ---- metadata -----------------------------------------------------------------------

    def _record_metadata_view(self) -> None:
        view = [(p.leader, p.leader_epoch) for p in self.partitions]
        self.metadata_history.append((self.now, view))

    def _metadata_answer(self) -> MetadataResponse:
        view = [(p.leader, p.leader_epoch) for p in self.partitions]
        if self.now < self.metadata_lag_until and len(self.metadata_history) > 1:
            # A broker whose metadata cache lags: an older view.
            _, view = self.metadata_history[self.rng.randrange(len(self.metadata_history))]
        partitions = [
            MetadataResponsePartition(
                ErrorCode.LEADER_NOT_AVAILABLE if leader < 0 else 0,
                index,
                leader,
                epoch,
                list(self.partitions[index].replicas),
                [r for r in self.partitions[index].replicas if r in self.up],
            )
            for index, (leader, epoch) in enumerate(view)
        ]
        return MetadataResponse(
            0,
            [MetadataResponseBroker(n, f"broker{n}", 9092) for n in BROKERS if n in self.up],
            "sim",
            BROKERS[0],
            [MetadataResponseTopic(0, TOPIC, partitions=partitions)],
        )

    # ---- faults -----------------------------------------------------------------------------

    def _schedule_faults(self) -> None:
        rates = self.config.faults
        start = self.now
        kinds: list[tuple[float, Callable[[], None]]] = [
            (rates.drop_connection, self._fault_drop_connection),
            (rates.leader_move, self._fault_leader_move),
            (rates.broker_restart, self._fault_broker_restart),
            (rates.coordinator_move, self._fault_coordinator_move),
            (rates.replication_stall, self._fault_replication_stall),
            (rates.metadata_lag, self._fault_metadata_lag),
            (rates.throttle, self._fault_throttle),
        ]
        for rate, action in kinds:
            if rate <= 0:
                continue
            when = start
            while True:
                when += self.rng.expovariate(rate)
                if when >= start + self.config.heal_at:
                    break
                self.at(when, action)
        self.at(start + self.config.heal_at, self._heal)

    def _fault_drop_connection(self) -> None:
        if not self.faults_on:
            return
        node = self.rng.choice(BROKERS)
        connection = self.connections.ready(node)
        if connection is not None:
            self.trace(f"fault: drop the connection to broker {node}")
            connection.close(None, "dropped (fault)")

    def _move_leader(self, partition: PartitionModel, leader: int, reason: str) -> None:
        tail = len(partition.log) - partition.hw
        keep = self.rng.randint(0, tail) if tail else 0
        truncated = partition.elect(leader, keep)
        self._record_metadata_view()
        lost = [r for b in truncated for r in b.records]
        self.trace(
            f"fault: p{partition.tp[1]} leader -> {leader} (epoch {partition.leader_epoch}, "
            f"{reason}); kept {keep} of {tail} unreplicated batches, truncated {lost}"
        )
        self._leader_changed(partition)

    def _fault_leader_move(self) -> None:
        if not self.faults_on:
            return
        partition = self.rng.choice(self.partitions)
        candidates = [r for r in partition.replicas if r in self.up and r != partition.leader]
        if partition.leader < 0 or not candidates:
            return
        self._move_leader(partition, self.rng.choice(candidates), "reassigned")

    def _fault_broker_restart(self) -> None:
        if not self.faults_on:
            return
        node = self.rng.choice([n for n in BROKERS if n in self.up] or [0])
        if node == 0 or len(self.up) < 2:
            return
        self.up.discard(node)
        self.trace(f"fault: broker {node} restarts")
        connection = self.connections.ready(node)
        if connection is not None:
            connection.close(None, "broker restarting")
        self.pending = [p for p in self.pending if p.node != node]
        for partition in self.partitions:
            # Its log survives; its producer state will come from a snapshot.
            partition.snapshot_at[node] = len(partition.log)
            if partition.leader == node:
                others = [r for r in partition.replicas if r in self.up]
                if others and self.rng.random() < 0.5:
                    self._move_leader(partition, self.rng.choice(others), f"broker {node} down")
                else:
                    # The leader was alone in the ISR: offline until it is back.
                    partition.leader = -1
                    partition.generation += 1
                    self._record_metadata_view()
                    self.trace(f"fault: p{partition.tp[1]} offline while broker {node} is down")
                    self._leader_changed(partition)
        if self.coordinator_node == node:
            self._fault_coordinator_move()
        self.at(self.now + self.rng.uniform(0.05, 1.0), lambda: self._broker_back(node))

    def _broker_back(self, node: int) -> None:
        if node in self.up:
            return
        self.up.add(node)
        self.trace(f"broker {node} is back")
        for partition in self.partitions:
            if (partition.leader < 0 and partition.replicas[0] == node) or (
                partition.leader < 0 and node in partition.replicas
            ):
                # The restarted broker leads again, its log whole, its producer state from
                # the snapshot (plus nothing replicated since: it was offline).
                partition.elect(node, len(partition.log))
                self._record_metadata_view()
                self.trace(f"p{partition.tp[1]} led by broker {node} again (state from snapshot)")

    def _fault_coordinator_move(self) -> None:
        if not self.faults_on and self.coordinator_node in self.up:
            return
        candidates = [n for n in BROKERS if n in self.up and n != self.coordinator_node]
        if not candidates:
            return
        self.coordinator_node = self.rng.choice(candidates)
        self.coordinator_loading_until = self.now + self.rng.uniform(0.0, 0.3)
        self.trace(f"fault: the coordinator moves to broker {self.coordinator_node}")

    def _fault_replication_stall(self) -> None:
        if not self.faults_on:
            return
        index = self.rng.randrange(PARTITIONS)
        self.stalled_until[index] = self.now + self.rng.uniform(0.2, 4.0)
        self.trace(
            f"fault: replication of p{index} stalls until {self.stalled_until[index] - T0:.3f}"
        )

    def _fault_metadata_lag(self) -> None:
        if not self.faults_on:
            return
        self.metadata_lag_until = self.now + self.rng.uniform(0.2, 2.0)
        self.trace("fault: metadata answers lag")

    def _fault_throttle(self) -> None:
        if not self.faults_on:
            return
        node = self.rng.choice(BROKERS)
        self.throttled_until[node] = self.now + self.rng.uniform(0.1, 1.0)
        self.trace(f"fault: broker {node} throttles")

    def _heal(self) -> None:
        self.faults_on = False
        self.trace("heal: every fault ends")
        self.stalled_until.clear()
        self.metadata_lag_until = -math.inf
        self.throttled_until.clear()
        for node in BROKERS:
            self._broker_back(node)

    # ---- the workload -------------------------------------------------------------------------

    def _on_acknowledgement(self, batch: ProducerBatch, exc: BaseException | None) -> None:
        self._acknowledged = True

    def _note_completions(self) -> None:
        still = []
        for record in self.pending_records:
            if record.future.done():
                record.done_at = self.now
                self.trace(f"  r{record.rid} {_outcome(record.future)}")
            else:
                still.append(record)
        self.pending_records = still

    def append_record(self, partition: int, txn: TxnInfo | None) -> bool:
        """Append one record as the producer does (to the open batch, else a new one); False
        when the pool has no memory for it now."""
        rid = len(self.records)
        value = b"%d|" % rid + b"x" * self.rng.randint(0, 40)
        timestamp = _timestamp_at(self.now)
        bound = self.config.timestamp_before_max_ms
        if bound is not None and self.rng.random() < 0.5:
            # An event time the application set, close to the topic's bound in the past: the
            # record may grow too old while it waits or is retried.
            timestamp -= max(0, bound - self.rng.randint(0, 500))
        future = self.accumulator.try_append(TOPIC, partition, timestamp, None, value, None)
        if future is None:
            size = estimate_record_size(None, value, None)
            buffer = self.pool.allocate_nowait(
                self.accumulator.buffer_size_for(size, TOPIC, partition)
            )
            if buffer is None:
                return False
            future = self.accumulator.append_to_new_batch(
                TOPIC, partition, timestamp, None, value, None, buffer, self.now
            )
            # RecordAppender._batch_started
            self.metadata.touch(TOPIC, self.now)
            if self.transactions is not None:
                self.transactions.maybe_add_partition((TOPIC, partition))
        record = RecordInfo(
            rid,
            partition,
            txn.number if txn else -1,
            self.sent_per_partition[partition],
            future,
            self.now,
        )
        self.sent_per_partition[partition] += 1
        self.records.append(record)
        self.pending_records.append(record)
        if txn is not None:
            txn.records.append(record)
        self.trace(f"append r{rid} to p{partition}" + (f" (txn {txn.number})" if txn else ""))
        return True

    def _schedule_workload(self) -> None:
        if self.transactions is not None:
            self.init_future = self.transactions.initialize()
            self.trace("workload: initialize transactions")
            self.at(self.now, self._txn_tick)
            return
        for _ in range(self.config.records):
            self.at(self.now + self.rng.uniform(0.0, self.config.work_until), self._plain_append)

    def _plain_append(self) -> None:
        # Sometimes a burst to one partition: many batches in flight at once.
        partition = self.rng.randrange(PARTITIONS)
        for _ in range(self.rng.choice((1, 1, 1, 4, 12))):
            if self.records_left <= 0:
                return
            self.records_left -= 1
            self.append_record(partition, None)

    def _txn_tick(self) -> None:
        """The transactional workload: begin, send a few records over time, commit (or
        abort), wait for the outcome, repeat while there is time and records left."""
        transactions = self.transactions
        assert transactions is not None
        if self.producer_dead:
            return
        if self.init_future is not None:
            if not self.init_future.done():
                self.at(self.now + 0.01, self._txn_tick)
                return
            if self.init_future.exception() is not None:
                self.trace(f"workload: initialization failed: {self.init_future.exception()!r}")
                self.producer_dead = True
                return
            self.init_future = None
        txn = self.current_txn
        state = transactions.state
        if state is TransactionState.FATAL_ERROR:
            self.trace(f"workload: fatal error {transactions.last_error!r}; the producer stops")
            self.producer_dead = True
            return
        if txn is None:
            if self.records_left <= 0 or self.now - T0 >= self.config.work_until:
                return
            if state is not TransactionState.READY:
                self.at(self.now + 0.01, self._txn_tick)
                return
            transactions.begin_transaction()
            txn = self.current_txn = TxnInfo(len(self.txns), self.now)
            self.txns.append(txn)
            self.trace(f"workload: begin transaction {txn.number}")
            self._txn_budget = self.rng.randint(1, 12)
            state = transactions.state
        if txn.ending is None:
            if (
                self._txn_budget > 0
                and self.records_left > 0
                and state is TransactionState.IN_TRANSACTION
            ):
                if self.append_record(self.rng.randrange(PARTITIONS), txn):
                    self._txn_budget -= 1
                    self.records_left -= 1
                self.at(self.now + self.rng.choice((0.0, 0.001, 0.01, 0.05)), self._txn_tick)
                return
            self._finish_txn(
                txn,
                "abort"
                if state is TransactionState.ABORTABLE_ERROR or self.rng.random() < 0.15
                else "commit",
            )
            self.at(self.now, self._txn_tick)
            return
        future = txn.end_future
        assert future is not None
        if not future.done():
            self.at(self.now + 0.01, self._txn_tick)
            return
        error = future.exception()
        if error is None:
            txn.outcome = "committed" if txn.ending == "commit" else "aborted"
            txn.end_done_at = self.now
            self.trace(f"workload: transaction {txn.number} {txn.outcome}")
            self.current_txn = None
        else:
            self.trace(f"workload: {txn.ending} of transaction {txn.number} failed: {error!r}")
            if txn.ending == "commit":
                txn.commit_error = error
            if transactions.state is TransactionState.FATAL_ERROR:
                txn.end_done_at = self.now
                self.producer_dead = True
                self.current_txn = None
                return
            # Abort (again) after a failed commit or abort, as an application does.
            self._finish_txn(txn, "abort")
        self.at(self.now, self._txn_tick)

    def _finish_txn(self, txn: TxnInfo, how: str) -> None:
        transactions = self.transactions
        assert transactions is not None
        try:
            txn.end_future = (
                transactions.begin_commit() if how == "commit" else transactions.begin_abort()
            )
        except Exception as exc:  # an IllegalStateError or a fatal error, raised at once
            self.trace(f"workload: {how} of transaction {txn.number} raised {exc!r}")
            txn.end_future = self.loop.create_future()
            txn.end_future.set_exception(exc)
            if transactions.state is TransactionState.FATAL_ERROR:
                self.producer_dead = True
        if txn.ending is None:
            txn.end_started_at = self.now
        txn.ending = how
        self.trace(f"workload: {how} transaction {txn.number}")
        self.sender.wakeup()

    # ---- the run -------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """When a run that is not quiet yet counts as hung."""
        cfg = self.producer_config
        return (
            T0
            + self.config.heal_at
            + 2 * cfg.delivery_timeout_ms / 1000.0
            + 2 * cfg.transaction_timeout_ms / 1000.0 * (self.transactions is not None)
            + 20.0
        )

    def _quiet_coordinator(self) -> bool:
        return all(
            t.state not in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
            for t in self.coordinator.txns.values()
        )

    def quiet(self) -> bool:
        if self.now < T0 + self.config.heal_at or self.faults_on:
            return False
        if self.pending_records:
            return False
        if self.transactions is not None:
            if not self.producer_dead and (
                self.current_txn is not None or self.init_future is not None
            ):
                return False
            if not self._quiet_coordinator():
                return False
        # Requests may still be out (a metadata refresh): the workload is what must be done.
        return not self.pending

    def run(self) -> None:
        logger = logging.getLogger("aioproducer")
        handler = _Capture(self)
        old_level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if self.options.trace else logging.ERROR)
        try:
            self._run()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
            self.loop.close()

    def _run(self) -> None:
        self.trace(f"seed {self.seed}: {self.config.describe()}")
        self._schedule_faults()
        self._schedule_workload()
        if self.transactions is not None:
            self.at(self.now + 0.25, self._abort_timed_out)
        wake = self.now
        quiet_since: float | None = None
        while True:
            next_event = self._events[0][0] if self._events else math.inf
            self.now = max(self.now, min(next_event, wake))
            if self.now > self.deadline:
                self._report_hang()
                return
            while self._events and self._events[0][0] <= self.now:
                _, _, action = heapq.heappop(self._events)
                action()
            self.connections.finish_connecting(self.now)
            self._deliver()
            delay = self._step()
            wake = self.now + delay
            if self._acknowledged:
                self._acknowledged = False
                self._note_completions()
            self._watch_epoch()
            if self.quiet():
                if quiet_since is None:
                    quiet_since = self.now
                    self.trace("quiet")
                # A little more time, for late answers and markers, then stop.
                if self.now - quiet_since >= 1.0 or not self._events:
                    self._note_completions()
                    return
                wake = min(wake, quiet_since + 1.0)

    def _step(self) -> float:
        """Step the sender until it asks to sleep. Steps that send a request and ask to run
        again at once (a backlog going out) go on at the same instant; a sender that keeps
        asking for no sleep without sending anything (four steps in a row) would spin its
        event loop: the simulation then looks again _SPIN_STEP later and counts the time as
        spinning."""
        delay = 0.0
        idle = 0
        while idle < 4:
            self.steps += 1
            sent_before = self._request_numbers
            delay = self.sender.run_once(self.now)
            if delay > 0:
                return delay
            self._deliver()
            idle = idle + 1 if self._request_numbers == sent_before else 0
        self.spinning += _SPIN_STEP
        self.trace("  the sender asked to run again at once, four times, sending nothing")
        return _SPIN_STEP

    def _deliver(self) -> None:
        """Answers reach the client: each success's sequences are noted (for the needless
        bump check), and a success for a batch whose records already failed (expired in
        flight) is traced as a late success."""
        for connection in list(self.connections.connections.values()):
            for entry in connection.deliver(self.now):
                answer = entry.answer
                self.trace(f"deliver #{entry.number} from {connection.node_id}")
                if not isinstance(answer, ProduceResponse):
                    continue
                for topic in answer.topics:
                    for result in topic.partitions:
                        tp = (topic.name, result.index)
                        batch = entry.batches.get(tp)
                        if (
                            result.error_code not in (0, ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
                            or batch is None
                        ):
                            continue
                        if batch.base_sequence >= 0:
                            key = (tp, batch.producer_id, batch.producer_epoch)
                            last = batch.base_sequence + len(batch.records) - 1
                            if last > self.acknowledged_sequences.get(key, -1):
                                self.acknowledged_sequences[key] = last
                        record = self.records[_rid(batch.records[0].value)]
                        error = record.future.exception() if record.future.done() else None
                        if type(error).__name__ == "DeliveryTimeoutError":
                            self.trace(f"  late success for r{record.rid}, which expired in flight")

    def _watch_epoch(self) -> None:
        idempotence = self.idempotence
        if idempotence is None:
            return
        epoch = idempotence.producer_epoch
        if epoch != self.last_epoch:
            if self.last_epoch >= 0:
                self.trace(f"  producer epoch -> {epoch} (pid {idempotence.producer_id})")
            self.last_epoch = epoch

    def _report_hang(self) -> None:
        self.trace("deadline: the run is not quiet")
        waiting = [f"r{r.rid}" for r in self.pending_records[:10]]
        if waiting:
            self.hung.append(f"record futures never completed: {', '.join(waiting)}")
        if self.init_future is not None and not self.init_future.done():
            self.hung.append("initialize() never completed")
        txn = self.current_txn
        if txn is not None and txn.end_future is not None and not txn.end_future.done():
            self.hung.append(f"the {txn.ending} of transaction {txn.number} never completed")
        if not self.hung:
            self.hung.append(
                f"not quiet: in flight {self.connections.in_flight_total()}, purgatory "
                f"{len(self.pending)}, coordinator quiet {self._quiet_coordinator()}, txn state "
                f"{self.transactions.state if self.transactions else None}"
            )


class _Capture(logging.Handler):
    """Logs of the producer: into the trace, and internal errors (a traceback logged by
    the sender's fault boundary) into the run's findings."""

    def __init__(self, simulation: Simulation) -> None:
        super().__init__(logging.DEBUG)
        self.simulation = simulation

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None:
            self.simulation.internal_errors.append(
                f"{record.name}: {record.getMessage()} ({record.exc_info[1]!r})"
            )
        self.simulation.trace(f"  log {record.levelname} {record.name}: {record.getMessage()}")


def _timestamp_at(now: float) -> int:
    """The wall-clock time, in ms, at virtual time ``now``."""
    return TIMESTAMP + round((now - T0) * 1000)


def _version(request: ProduceRequest | EndTxnRequest) -> int:
    """The version the producer sent ``request`` at: its cap, else the highest the brokers
    offer (the fake connections negotiate nothing)."""
    cap = request.version_cap
    return API_VERSIONS[request.API_KEY][1] if cap is None else cap


def _rid(value: bytes | None) -> int:
    assert value is not None
    return int(value.split(b"|", 1)[0])


def _outcome(future: RecordFuture) -> str:
    error = future.exception()
    if error is None:
        return f"acknowledged at offset {future.result().offset}"
    return f"failed: {type(error).__name__}: {error}"


def _short(answer: Any) -> str:
    if isinstance(answer, ProduceResponse):
        parts = [
            f"p{p.index}:{ErrorCode(p.error_code).name if p.error_code else 'OK'}@{p.base_offset}"
            for t in answer.topics
            for p in t.partitions
        ]
        return (
            "Produce "
            + " ".join(parts)
            + (f" throttle={answer.throttle_time_ms}" if answer.throttle_time_ms else "")
        )
    code = getattr(answer, "error_code", 0)
    name = ErrorCode(code).name if code else "OK"
    extra = ""
    if isinstance(answer, InitProducerIdResponse) and not code:
        extra = f" pid={answer.producer_id} e={answer.producer_epoch}"
    if isinstance(answer, AddPartitionsToTxnResponse):
        codes = {
            p.partition_error_code
            for r in answer.results_by_transaction
            for t in r.topic_results
            for p in t.results_by_partition
        }
        name = ",".join(ErrorCode(c).name if c else "OK" for c in sorted(codes))
    return f"{type(answer).__name__} {name}{extra}"
