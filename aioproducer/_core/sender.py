"""The sender task: drains the accumulator into Produce requests and handles the responses.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

One step is ``run_once(now)``, plain synchronous code that decides what to send and returns
how long to sleep; the task around it only awaits a wake-up (new data, a response, a
connection change) or that timeout. A step starts by handling the answers that arrived since
the last one, with the step's ``now`` (as Java's ``poll`` completes its requests' handlers):
acknowledge, retry with exponential backoff and jitter, split a batch the broker found too
large, or fail. Every request goes out with its handler; the connection that reads the answer
(or fails the request when it closes) queues the two on the sender's
:class:`~aioproducer._core.answers.AnswerQueue` and wakes the task. Nothing is handled
outside a step, so the clock is read once per step and a test drives the sender by queueing
answers and calling ``run_once``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from aioproducer._core.accumulator import ProducerBatch, RecordAccumulator
from aioproducer._core.answers import AnswerHandler, AnswerQueue
from aioproducer._core.backoff import ExponentialBackoff
from aioproducer._core.futures import error_copy, with_maybe_written
from aioproducer._core.idempotence import (
    IdempotenceManager,
    SequenceVerdict,
    init_producer_id_error,
)
from aioproducer._core.metadata import Broker, Cluster, Metadata, PartitionInfo, TopicInfo
from aioproducer._core.metrics import ProducerMetrics
from aioproducer._core.partitioner import BrokerAvailability, Partitioner
from aioproducer._core.timer import WakeTimer
from aioproducer._core.transactions import TransactionalRequest, TransactionManager
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    BatchEncodingError,
    BatchOvertakenError,
    DeliveryTimeoutError,
    KafkaConnectionError,
    KafkaError,
    ProducerClosedError,
    PurgedError,
    RecordTooLargeError,
    SenderCrashedError,
    UnsupportedVersionError,
    error_for_code,
)
from aioproducer.protocol.api import Request
from aioproducer.protocol.error_codes import (
    DUPLICATE_SEQUENCE_NUMBER,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    MESSAGE_TOO_LARGE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    PRODUCER_FENCED,
    UNKNOWN_PRODUCER_ID,
    ErrorCode,
)
from aioproducer.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    ProducePartitionData,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
)
from aioproducer.protocol.record_reader import decode_record_batches

__all__ = ["Sender", "metadata_from_response"]


class _Connection(Protocol):
    """What the sender uses of a :class:`~aioproducer.net.connection.BrokerConnection`.

    The sender and the connection module are both compiled: typed as the class itself, the
    sender would check every connection it is handed is exactly that class, and the unit
    tests' fakes could not stand in for it.
    """

    api_versions: dict[int, tuple[int, int]]
    description: str
    node_id: int

    def can_send(self) -> bool: ...

    def throttle_delay(self, now: float) -> float: ...

    def send_for(
        self, request: Request[Any], handler: AnswerHandler, version: int | None = None
    ) -> None: ...


class _Connections(Protocol):
    """What the sender uses of the :class:`~aioproducer.net.connection.ConnectionManager`."""

    def ready(self, node_id: int) -> _Connection | None: ...

    def ensure_connecting(self, node_id: int, now: float) -> None: ...

    def is_connecting(self, node_id: int) -> bool: ...

    def connection_delay(self, node_id: int, now: float) -> float: ...

    def auth_error(self, node_id: int) -> tuple[KafkaError, float] | None: ...

    def least_loaded(self, now: float, for_metadata: bool = False) -> _Connection | None: ...

    def ensure_any_connecting(self, now: float) -> None: ...

    def check_request_timeouts(self, now: float) -> None: ...

    def close_idle(self, now: float) -> None: ...

    def set_brokers(
        self, brokers: Mapping[int, tuple[str, int]], *, from_metadata: bool = True
    ) -> None: ...

    def rebootstrap(self, reason: str, now: float) -> None: ...

    def distrust(self, node_id: int) -> None: ...

    @property
    def bootstrap_only(self) -> bool: ...


log = logging.getLogger("aioproducer.sender")

# The shortest wait of a step that found no broker to send to (retry_backoff_ms and
# reconnect_backoff_ms may both be 0).
_NO_CONNECTION_WAIT_MIN: Final = 0.005

# What a broker that takes no locally bumped epoch answers it with (Tansu: PRODUCER_FENCED).
_FENCED_EPOCH: Final = frozenset({INVALID_PRODUCER_EPOCH, PRODUCER_FENCED})
# The errors a broker names single records for (KIP-467): INVALID_TIMESTAMP, INVALID_RECORD.
_RECORD_ERROR_CODES: Final = frozenset({INVALID_TIMESTAMP, INVALID_RECORD})
# Produce errors Kafka answers before appending anything (ReplicaManager, Partition and
# UnifiedLog check them first): a batch refused with one of these was not written. Every
# other outcome of an attempt (a lost connection, a timeout, NOT_LEADER_OR_FOLLOWER, which
# Kafka also answers when leadership moved after the append) leaves the batch maybe written.
_REFUSED_BEFORE_APPEND: Final = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.INVALID_REQUIRED_ACKS,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TIMESTAMP,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.INVALID_RECORD,
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.TRANSACTION_ABORTABLE,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)
# Never sleep longer than this, so a lost wake-up costs at most this much latency.
_MAX_POLL: Final = 1.0
# Steps of the sender that fail one after another (each after a backoff) before the task
# gives up: a fault that every step meets again cannot be recovered from by stepping.
_MAX_FAILED_STEPS: Final = 10
# How often adaptive partitioning gets fresh queue sizes.
_LOAD_UPDATE_INTERVAL: Final = 0.005
# Worker threads for compressing big batches (bench/micro/compression.py: every codec releases
# the GIL, so each thread is a core's worth of compression beside the event loop).
_OFFLOAD_THREADS: Final = max(1, min(4, os.cpu_count() or 1))


def _expiry_error(batch: ProducerBatch, message: str) -> DeliveryTimeoutError:
    """The error of a batch that ``delivery_timeout_ms`` ended: after a retry, it names the
    error the batch was last retried for, and has it as its cause."""
    last = batch.last_error
    if last is None:
        return DeliveryTimeoutError(message)
    error = DeliveryTimeoutError(f"{message}; the last error was {last}")
    error.__cause__ = last
    return error


def _outcome_error(batch: ProducerBatch, exc: BaseException) -> BaseException:
    """``exc`` as the error of ``batch``'s records, its ``maybe_written`` the batch's: True
    when an attempt of the batch may have been written (the broker checks some refusals,
    such as INVALID_TIMESTAMP, before it recognises a retried batch), always for
    :class:`BatchOvertakenError`."""
    if not isinstance(exc, KafkaError) or isinstance(exc, BatchOvertakenError):
        return exc
    written = batch.maybe_written
    note = None
    if written and exc.error_code in _REFUSED_BEFORE_APPEND:
        note = "an earlier attempt of the batch may have been written"
    return with_maybe_written(exc, written, note)


def metadata_from_response(response: MetadataResponse) -> tuple[list[Broker], list[TopicInfo]]:
    """Turn a decoded Metadata response into the cluster view's types."""
    brokers = [Broker(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
    topics: list[TopicInfo] = []
    for topic in response.topics:
        if topic.name is None:
            continue
        partitions = tuple(
            sorted(
                (
                    PartitionInfo(
                        p.partition_index,
                        p.leader_id,
                        p.leader_epoch,
                        tuple(p.replica_nodes),
                        tuple(p.isr_nodes),
                        p.error_code,
                    )
                    for p in topic.partitions
                ),
                key=lambda info: info.partition,
            )
        )
        topic_id = topic.topic_id.bytes if topic.topic_id is not None else None
        topics.append(TopicInfo(topic.name, partitions, topic.error_code, topic_id))
    return brokers, topics


# InitProducerId answers that only say the transaction coordinator is not ready yet.
_COORDINATOR_NOT_READY: Final = frozenset(
    (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    )
)


def _no_answer(response: Any, error: BaseException | None, now: float) -> None:
    """The handler of a request that gets no answer (Produce with ``acks=0``)."""


class Sender:
    """Moves batches from the accumulator to the brokers; one asyncio task.

    The only threads are the workers that compress big batches (``compression_offload_bytes``);
    they read a batch's buffer and hand back bytes, and touch no other state.

    Args:
        config: the producer's options.
        accumulator: where batches wait; built with the same ``idempotence`` manager.
        metadata: the cluster view; refreshed from here.
        connections: the broker connections.
        idempotence: the idempotence (or transaction) manager; None without idempotence.
        metrics: updated per request and batch.
        partitioner: told of each partition's queue (adaptive partitioning) when its
            ``wants_partition_load`` is True.
        on_acknowledgement: called with each finished batch and its error (None when
            stored).
        on_abandoned: told how many records were dropped when the task is cancelled or
            destroyed unfinished.
        on_fatal: called once :attr:`fatal_error` is set (the producer stops taking records).
        offload: compresses a big batch off the event loop and hands it back with
            ``accumulator.offload_done``; None for a pool of worker threads. Used only for
            the batches the accumulator's ``offload_threshold`` picks.
        clock: the monotonic clock, in seconds.
        rng: the random source of the retry backoff's jitter (seed one to replay a run
            exactly, as the simulation in ``tests/sim`` does); None for a fresh one.
    """

    def __init__(
        self,
        *,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        metadata: Metadata,
        connections: _Connections,
        idempotence: IdempotenceManager | None,
        metrics: ProducerMetrics,
        answers: AnswerQueue,
        partitioner: Partitioner | None = None,
        on_acknowledgement: Callable[[ProducerBatch, BaseException | None], None] | None = None,
        on_abandoned: Callable[[int], None] | None = None,
        on_fatal: Callable[[], None] | None = None,
        offload: Callable[[ProducerBatch], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        # Told how many records were dropped when the task is cancelled or destroyed
        # unfinished (its event loop stopped without the producer being closed).
        self._on_abandoned = on_abandoned
        self._accumulator = accumulator
        self._metadata = metadata
        self._connections = connections
        self._idempotence = idempotence
        self._metrics = metrics
        self._on_acknowledgement = on_acknowledgement
        self._clock = clock
        self._acks = config.acks
        self._request_timeout_ms = config.request_timeout_ms
        self._max_request_size = config.max_request_size
        self._retries = config.retries
        # As Java: a retry_backoff_ms above retry_backoff_max_ms makes the backoff fixed.
        retry_backoff_ms = min(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._backoff_base = retry_backoff_ms / 1000.0
        # How long to wait when no broker can take a request (Java waits reconnectBackoffMs):
        # never 0, or a step would follow at once while every connection is down.
        self._no_connection_wait = max(
            config.reconnect_backoff_ms / 1000.0, self._backoff_base, _NO_CONNECTION_WAIT_MIN
        )
        # The top-level Metadata error last logged (0: none since an answer was accepted).
        self._metadata_error_logged = 0
        # KIP-1102: how long the known brokers may give no metadata before the bootstrap
        # servers are asked again (None: never, metadata_recovery_strategy "none").
        self._rebootstrap_after: float | None = (
            config.metadata_recovery_rebootstrap_trigger_ms / 1000.0
            if config.metadata_recovery_strategy == "rebootstrap"
            else None
        )
        # Retries of a batch wait longer each time (KIP-580), plus or minus 20%.
        self._retry_backoff = ExponentialBackoff(
            retry_backoff_ms, config.retry_backoff_max_ms, rng=rng
        )
        self._in_flight: dict[int, list[list[ProducerBatch]]] = {}
        self._in_flight_batches = 0
        # The answers the connections queued for the next step, and how many requests sent
        # (with a response expected) have not had theirs handled yet.
        self._answers = answers
        self._unanswered = 0
        self._running = True
        self._force_close = False
        self._force_close_error: BaseException | None = None
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # Resolved by _check_ready for wait_ready().
        self._ready_waiter: asyncio.Future[None] | None = None
        # The last failure of a Metadata or InitProducerId request (see not_ready_reason).
        self._last_metadata_error: BaseException | None = None
        self._last_init_error: BaseException | None = None
        self._init_backoff_until = 0.0
        self._transactions = idempotence if isinstance(idempotence, TransactionManager) else None
        self._transaction_flush = False
        self.crashed: BaseException | None = None
        self.fatal_error: KafkaError | None = None
        self._on_fatal = on_fatal
        self._prepare: Callable[[ProducerBatch], None] = (
            idempotence.prepare if idempotence is not None else self._close_batch
        )
        self._offload_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._offload_batch: Callable[[ProducerBatch], None] = (
            offload if offload is not None else self._offload
        )
        self._partitioner: Any = (
            partitioner if getattr(partitioner, "wants_partition_load", False) else None
        )
        self._availability = BrokerAvailability(config.partitioner_availability_timeout_ms)
        self._next_load_update = 0.0
        # connections_max_idle_ms: idle connections are looked for at most this often.
        max_idle = config.connections_max_idle_ms / 1000.0
        self._idle_check_interval = min(1.0, max_idle / 4) if max_idle >= 0 else float("inf")
        self._next_idle_check = 0.0
        # As the Java client: one request in flight means strict order, idempotent or not.
        # A partition stays muted until its request's response is processed, so a newer batch
        # cannot slip out in the moment between the connection freeing its slot (response
        # read) and the sender handling that response (a retry to be re-enqueued first).
        self._guarantee_order = config.max_in_flight_requests_per_connection == 1

    # ---- the task ---------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        """Start the sender task."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="aioproducer-sender")
        return self._task

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The sender task, once started."""
        return self._task

    def wakeup(self) -> None:
        """Make the sender look at its state again now."""
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def initiate_close(self) -> None:
        """Stop after everything buffered and in flight is done."""
        self._running = False
        self._accumulator.close()
        if self._transactions is not None:
            self._transactions.begin_close(self._clock())
        self.wakeup()

    def force_close(self, exc: BaseException) -> None:
        """Stop now: fail what is buffered with ``exc``."""
        self._running = False
        self._force_close = True
        self._force_close_error = exc
        self.wakeup()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # Sub-millisecond wake-ups where the OS allows (see aioproducer._core.timer): a lingering
        # batch leaves when its linger ends, not up to a millisecond later.
        timer = WakeTimer(loop, self.wakeup)
        clock = self._clock
        failed_steps = 0
        try:
            while True:
                if self._force_close:
                    break
                if not self._running and not self._has_pending_work():
                    break
                now = clock()
                try:
                    delay = self.run_once(now)
                except Exception as step_error:
                    # As Java's Sender.run: a step that fails is logged and tried again
                    # (faults of one batch or request are caught closer, and fail only
                    # those records). One that keeps failing ends the task below.
                    failed_steps += 1
                    if failed_steps >= _MAX_FAILED_STEPS:
                        raise
                    log.error(
                        "a step of the aioproducer sender failed (%d in a row); trying again",
                        failed_steps,
                        exc_info=step_error,
                    )
                    delay = -1.0
                else:
                    failed_steps = 0
                if delay < 0:
                    # After a failed step: a backoff that wake-ups do not cut short.
                    await asyncio.sleep(self._backoff(failed_steps - 1))
                    continue
                if delay <= 0:
                    # Yield once so callbacks (answers arriving, appends) run between steps.
                    await asyncio.sleep(0)
                    continue
                wake = loop.create_future()
                self._wake = wake
                timer.arm(min(delay, _MAX_POLL), now)
                try:
                    await wake
                finally:
                    self._wake = None
            if self._force_close:
                exc = self._force_close_error or ProducerClosedError(
                    "the producer was closed before the record was delivered"
                )
                self._handle_arrived_answers()
                self._abort_all(exc)
        except asyncio.CancelledError:
            self._handle_arrived_answers()
            dropped = self._abort_all(
                ProducerClosedError("the producer's sender task was cancelled")
            )
            self._tell_abandoned(dropped)
            raise
        except GeneratorExit:
            # The task was destroyed unfinished: its event loop closed without cancelling
            # it. The loop is gone, so failing the records may not reach their callbacks.
            dropped = sum(batch.record_count for batch in self._accumulator.pending_batches())
            with contextlib.suppress(Exception):
                self._abort_all(
                    ProducerClosedError("the producer's event loop closed before delivery")
                )
            self._tell_abandoned(dropped)
            raise
        except BaseException as exc:
            log.exception("the aioproducer sender task crashed; failing every pending record")
            self.crashed = exc
            error = SenderCrashedError(f"the sender task crashed: {exc!r}")
            error.__cause__ = exc
            self._check_ready(error)
            self._handle_arrived_answers()
            self._abort_all(error)
            raise
        finally:
            # Nothing handles answers any more: let go of those queued and of any a
            # connection queues later (a request still out fails when it closes).
            self._answers.close()
            # A loop closing under a destroyed task refuses new callbacks: nobody waits then.
            with contextlib.suppress(RuntimeError):
                self._check_ready(ProducerClosedError("the producer closed before it was ready"))
            timer.close()
            if self._offload_pool is not None:
                # A job still running finishes on its own; its buffer is returned then.
                self._offload_pool.shutdown(wait=False)
                self._offload_pool = None

    def _handle_arrived_answers(self) -> None:
        """Before failing what is left: answers that arrived but no step handled yet
        (acknowledged records keep their metadata rather than a close or cancel error)."""
        with contextlib.suppress(Exception):
            self.handle_responses(self._clock())

    def _has_pending_work(self) -> bool:
        if self._transactions is not None and self._transactions.has_pending_work():
            return True
        return self._accumulator.has_undrained() or self._in_flight_batches > 0

    def _tell_abandoned(self, dropped: int) -> None:
        on_abandoned = self._on_abandoned
        if on_abandoned is not None:
            try:
                on_abandoned(dropped)
            except Exception:
                log.exception("on_abandoned callback failed")

    def _abort_all(self, exc: BaseException) -> int:
        """Fail every record not yet acknowledged with ``exc``; return how many."""
        failed = 0
        if self._transactions is not None:
            # A copy: commit and abort raise it in the caller's frame, and ``exc`` itself
            # stays with the failed batches (see futures.error_copy).
            self._transactions.fail_all(error_copy(exc))
        for batch in self._accumulator.abort_undrained(exc):
            failed += self._report_failed(batch)
            self._accumulator.deallocate(batch)
        for requests in self._in_flight.values():
            for batches in requests:
                for batch in batches:
                    # In flight: the broker may have written it.
                    if batch.fail(with_maybe_written(exc, True)):
                        failed += self._report_failed(batch)
                    # In-flight buffers are returned here, also for batches that expired
                    # while in flight (their buffer was kept for the transport).
                    self._accumulator.deallocate(batch)
        self._in_flight.clear()
        self._in_flight_batches = 0
        # Batches between the accumulator and a request (e.g. a send that raised) are in
        # neither place above: fail them too so no record waits forever.
        for batch in self._accumulator.pending_batches():
            if batch.fail(_outcome_error(batch, exc)):
                failed += self._report_failed(batch)
                self._accumulator.deallocate(batch)
        return failed

    def purge(self, in_flight: bool) -> int:
        """Fail every batch still buffered (not yet in a request) with
        :class:`~aioproducer.errors.PurgedError`, and with ``in_flight`` those whose
        request is out too; return how many records failed.

        A buffered batch fails as one that expired in its queue, and one in flight as one
        that expired in flight (its request still completes; its buffer is returned then,
        and an idempotent producer learns from its answer where the partition's sequence
        stands): the paths that keep sequences and transactions right when a batch fails
        for good before its answer.
        """
        if in_flight:
            # Answers that arrived but no step handled yet: acknowledged records keep their
            # metadata rather than a purge error.
            self._handle_arrived_answers()
        now = self._clock()
        failed = 0
        for batch in self._accumulator.purge_queued():
            failed += batch.record_count
            where = f"{batch.record_count} buffered record(s) for {batch.topic}-{batch.partition}"
            self._fail_batch(
                batch,
                PurgedError(
                    f"purged {where} queued for a retry: an earlier attempt may have been "
                    "written"
                    if batch.attempts > 0 or batch.maybe_written
                    else f"purged {where} before they were sent"
                ),
                now,
                logged=True,
                answered=False,
            )
        if in_flight:
            for node, requests in self._in_flight.items():
                for batches in requests:
                    for batch in batches:
                        if batch.final:
                            continue
                        batch.maybe_written = True
                        error = _outcome_error(
                            batch,
                            PurgedError(
                                f"purged {batch.record_count} record(s) for {batch.topic}-"
                                f"{batch.partition} while their request to broker {node} was "
                                "out: the broker may have written them"
                            ),
                        )
                        if self._transactions is not None:
                            self._transactions.on_batch_failed(batch, error)
                        if self._idempotence is not None:
                            self._idempotence.on_final_failure(batch, str(error), answered=False)
                        if batch.fail(error):
                            failed += self._report_failed(batch)
        if failed:
            log.warning(
                "purged %d record(s)%s", failed, " (buffered and in flight)" if in_flight else ""
            )
        self.wakeup()
        return failed

    def _report_failed(self, batch: ProducerBatch) -> int:
        """Count ``batch``, just failed, in the metrics and tell the acknowledgement
        callback (interceptors); return its number of records."""
        self._metrics.records_failed(batch.topic, batch.record_count)
        self._notify(batch, batch.error)
        return batch.record_count

    # ---- one step ---------------------------------------------------------------------------

    def run_once(self, now: float) -> float:
        """Handle the answers that arrived, send what is ready; return seconds until the
        next step is needed."""
        if len(self._answers):
            self.handle_responses(now)
        delay = self._maybe_update_metadata(now)
        idempotence = self._idempotence
        transactions = self._transactions
        if idempotence is not None:
            idempotence.maybe_resolve_sequences()
            if transactions is None:
                idempotence.bump_epoch_if_needed()
                if idempotence.needs_producer_id and self.fatal_error is None:
                    delay = min(delay, self._maybe_init_producer_id(now))
            for batch in idempotence.restart_partitions():
                self._fail_stranded(batch, now)
        accumulator = self._accumulator
        cluster = self._metadata.cluster
        result = accumulator.ready(cluster, now)
        if transactions is not None:
            # After ready(): it may have registered partitions that must be added first.
            delay = min(delay, self._run_transactions(transactions, now))
        if result.unknown_leader_topics:
            for topic in result.unknown_leader_topics:
                self._metadata.add_topic(topic, now)
            self._metadata.request_update()
            # Sent now if a broker can take it; else look again after the backoff (a
            # connection that becomes ready wakes the sender), never at once: that would
            # spin the event loop while every broker reconnects.
            delay = min(delay, self._maybe_update_metadata(now))
        delay = min(delay, result.next_ready_check_delay)
        # One lookup per broker per step: the connections found ready here take the requests.
        sendable: dict[int, _Connection] = {}
        availability = self._availability
        for node in result.ready_nodes:
            connection = self._connections.ready(node)
            if connection is None:
                refused = self._connections.auth_error(node)
                if refused is not None:
                    # The broker refused our credentials or certificate: retrying until
                    # delivery_timeout_ms would only hide why (Java fails the metadata wait
                    # the same way). Batches that were waiting when it did fail with that
                    # error now; later ones wait for the next attempt.
                    self._fail_refused(node, refused[0], refused[1], cluster, now)
                self._connections.ensure_connecting(node, now)
                # Look again when the reconnect backoff allows (inf while connecting: the
                # connection manager wakes us when the attempt ends).
                delay = min(delay, self._connections.connection_delay(node, now))
                availability.update(node, now, False)
                continue
            if connection.can_send():
                sendable[node] = connection
            else:
                # KIP-219: a throttled broker gets nothing until its throttle ends (at most
                # in flight: the connection calls back when an answer frees a slot).
                throttle = connection.throttle_delay(now)
                if throttle > 0:
                    delay = min(delay, throttle)
            availability.update(node, now, True)
        if self._partitioner is not None and now >= self._next_load_update:
            self._update_partition_load(cluster)
            self._next_load_update = now + _LOAD_UPDATE_INTERVAL
        sent_any = False
        if sendable:
            drained = accumulator.drain(
                cluster,
                sendable,
                self._max_request_size,
                now,
                self._prepare_batch,
                self._offload_batch,
            )
            sent_any = bool(drained)
            for node, batches in drained.items():
                try:
                    self._send_produce(node, sendable[node], batches, now)
                except Exception as exc:
                    # Before the request went out (_send_produce handles the rest).
                    self._fail_request(
                        node, batches, exc, "send a Produce request", now, sent=False
                    )
        for batch in accumulator.expired_batches(now):
            refusal = self._metadata.refusal
            self._fail_batch(
                batch,
                _expiry_error(
                    batch,
                    f"expiring {batch.record_count} record(s) for {batch.topic}-"
                    f"{batch.partition}: {now - batch.created:.3f} s passed since the batch was "
                    f"created, more than delivery_timeout_ms ({self._config.delivery_timeout_ms} "
                    "ms)" + (f"; {refusal}" if refusal is not None else ""),
                ),
                now,
                answered=False,
            )
        delay = min(delay, accumulator.next_expiry() - now)
        if self._in_flight_batches:
            delay = min(delay, self._expire_in_flight(now) - now)
        if self._unanswered:
            # Every request out, not only Produce (Java's NetworkClient checks them all at
            # each poll): a coordinator or metadata answer that never comes must fail its
            # request at request_timeout_ms, or a commit would wait for it for good.
            self._connections.check_request_timeouts(now)
            delay = min(delay, self._request_timeout_ms / 1000.0 / 4)
        if now >= self._next_idle_check:
            self._connections.close_idle(now)
            self._next_idle_check = now + self._idle_check_interval
        delay = min(delay, self._next_idle_check - now)
        if sent_any or len(self._answers):
            # More may be ready behind what just went out (a backlog, up to the in-flight
            # limit): look again at once rather than after a timeout, as Java's pollTimeout 0.
            # Likewise for answers queued during the step (a write that failed closes its
            # connection, which fails the requests in flight on it).
            return 0.0
        return max(0.0, delay) if delay != float("inf") else _MAX_POLL

    # ---- answers -------------------------------------------------------------------------------

    def _sent(
        self, connection: _Connection, request: Request[Any], handler: AnswerHandler
    ) -> None:
        """Send ``request`` (expecting a response) on ``connection``; ``handler`` gets its
        answer in the first step after it arrives."""
        connection.send_for(request, handler)
        self._unanswered += 1

    def handle_responses(self, now: float) -> None:
        """Handle every answer the connections queued, in the order they arrived (each
        connection's in the order its requests were sent), as of ``now``. :meth:`run_once`
        starts with this; each handler's own faults are caught, so one cannot stop the
        others."""
        answers = self._answers.take()
        handled = 0
        try:
            for handler, response, error in answers:
                handled += 1
                try:
                    handler(response, error, now)
                except Exception:
                    log.exception("handling an answer failed")
        finally:
            self._unanswered -= handled
            if handled < len(answers):
                # A BaseException left the loop (from a user callback): the answers after
                # it go back, so the step that handles the crash still acknowledges them.
                self._answers.put_back(answers[handled:])

    def _fail_refused(
        self, node: int, error: KafkaError, failed_at: float, cluster: Cluster, now: float
    ) -> None:
        batches = self._accumulator.take_batches_led_by(cluster, node, failed_at)
        if not batches:
            return
        records = sum(batch.record_count for batch in batches)
        log.error(
            "failing %d record(s) in %d batch(es) for broker %d: %s",
            records,
            len(batches),
            node,
            error,
        )
        for batch in batches:
            # Each batch its own copy: one error instance raised in many tasks would grow
            # one traceback across all of them.
            self._fail_batch(batch, error_copy(error), now, node=node, logged=True, answered=False)

    def _update_partition_load(self, cluster: Cluster) -> None:
        # KIP-794 adaptive partitioning: tell the partitioner how many batches wait in each
        # partition, leaving out partitions whose broker has not kept up for
        # partitioner_availability_timeout_ms.
        availability = self._availability
        accumulator = self._accumulator
        partitioner = self._partitioner
        assert partitioner is not None
        for topic in self._metadata.topics:
            info = cluster.topic(topic)
            if info is None:
                continue
            ids = [
                p.partition
                for p in info.partitions
                if p.leader >= 0 and availability.is_available(p.leader)
            ]
            partitioner.update_partition_load(
                topic,
                accumulator.queue_sizes(topic, ids),
                ids,
                partition_count=info.partition_count,
            )

    def _expire_in_flight(self, now: float) -> float:
        """Fail in-flight batches past delivery_timeout_ms, as Java does; return the next
        in-flight deadline. Their buffers stay allocated until the request completes, since
        the transport may still be writing them."""
        next_deadline = float("inf")
        for node, requests in self._in_flight.items():
            for batches in requests:
                for batch in batches:
                    if batch.final:
                        continue
                    if batch.delivery_deadline <= now:
                        # In flight: the broker may have it (its records' errors say so).
                        batch.maybe_written = True
                        error = _outcome_error(
                            batch,
                            _expiry_error(
                                batch,
                                f"expiring {batch.record_count} record(s) for {batch.topic}-"
                                f"{batch.partition}: delivery_timeout_ms passed while the "
                                f"batch was in flight to broker {node}",
                            ),
                        )
                        if self._transactions is not None:
                            # The transaction cannot commit without it (Java's
                            # failBatch -> handleFailedBatch makes it abortable).
                            self._transactions.on_batch_failed(batch, error)
                        if self._idempotence is not None:
                            self._idempotence.on_final_failure(batch, str(error), answered=False)
                        log.warning("%s", error)
                        if batch.fail(error):
                            self._report_failed(batch)
                    elif batch.delivery_deadline < next_deadline:
                        next_deadline = batch.delivery_deadline
        return next_deadline

    # ---- ready to send ------------------------------------------------------------------------

    async def wait_ready(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until the sender has the cluster's metadata
        and, when idempotent without a transactional id, a producer id: what ``start()``
        waits for. The first Metadata and InitProducerId requests are the sender's own,
        sent and answered as every later one.

        Raises:
            asyncio.TimeoutError: not ready in time (the sender goes on trying).
            KafkaError: a copy of :attr:`fatal_error` (InitProducerId refused for good).
            SenderCrashedError, ProducerClosedError: the task ended first.
        """
        waiter = self._ready_waiter
        if waiter is None:
            waiter = self._ready_waiter = asyncio.get_running_loop().create_future()
            self._check_ready()
        self.wakeup()
        await asyncio.wait_for(asyncio.shield(waiter), max(0.0, timeout))

    def not_ready_reason(self) -> tuple[str, BaseException | None]:
        """What :meth:`wait_ready` still waits for ("metadata" or "a producer id") and the
        last error of that request, if one failed."""
        if not self._metadata.cluster.brokers:
            return "metadata", self._last_metadata_error
        return "a producer id", self._last_init_error

    def _is_ready(self) -> bool:
        if not self._metadata.cluster.brokers:
            return False
        idempotence = self._idempotence
        return idempotence is None or self._transactions is not None or idempotence.has_producer_id

    def _check_ready(self, ended: BaseException | None = None) -> None:
        waiter = self._ready_waiter
        if waiter is None or waiter.done():
            return
        error = self.fatal_error if self.fatal_error is not None else ended
        if error is not None:
            waiter.set_exception(error_copy(error))
            # Nobody may be waiting any more (start() timed out): no "never retrieved" log.
            waiter.exception()
        elif self._is_ready():
            waiter.set_result(None)

    # ---- metadata and producer id -------------------------------------------------------------

    def _maybe_update_metadata(self, now: float) -> float:
        metadata = self._metadata
        wait = metadata.time_to_next_update(now)
        if wait > 0:
            return wait
        if (
            self._rebootstrap_after is not None
            and metadata.cluster.brokers
            and not self._connections.bootstrap_only
            and metadata.failing_for(now) > self._rebootstrap_after
        ):
            # KIP-1102: the known brokers gave no metadata for that long, though some can
            # still be connected to (they may be another cluster's now, or half gone).
            self._connections.rebootstrap(
                f"no metadata for {metadata.failing_for(now):.0f} s "
                f"(metadata_recovery_rebootstrap_trigger_ms)",
                now,
            )
            metadata.restart_failure_clock(now)
        connection = self._connections.least_loaded(now, for_metadata=True)
        if connection is None:
            metadata.no_broker(now)
            self._connections.ensure_any_connecting(now)
            return self._no_connection_wait
        request = MetadataRequest(topics=metadata.topics, allow_auto_topic_creation=True)
        metadata.update_started(now)
        try:
            self._sent(
                connection,
                request,
                functools.partial(
                    self._on_metadata_response, connection.description, connection.node_id
                ),
            )
        except KafkaError as exc:
            self._last_metadata_error = exc
            metadata.update_failed(now, exc)
            return self._backoff_base
        return _MAX_POLL

    def _on_metadata_response(
        self,
        source: str,
        node_id: int,
        response: MetadataResponse | None,
        error: BaseException | None,
        now: float,
    ) -> None:
        if response is None:
            failure = error or KafkaConnectionError("metadata request without an answer")
            self._last_metadata_error = failure
            self._metadata.update_failed(now, failure)
            return
        if response.error_code:
            self._metadata_refused(source, response.error_code, now)
            return
        brokers, topics = metadata_from_response(response)
        if not brokers:
            self._last_metadata_error = KafkaConnectionError("metadata without brokers")
            self._metadata.update_failed(now, self._last_metadata_error)
            return
        refused = self._metadata.check_cluster(response.cluster_id, source)
        if refused is not None:
            self._last_metadata_error = refused
            self._metadata.update_failed(now, refused)
            self._connections.distrust(node_id)
            return
        self._metadata_error_logged = 0
        self._metadata.update(
            brokers,
            topics,
            now,
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
        )
        self._connections.set_brokers({b.node_id: (b.host, b.port) for b in brokers})
        self._check_ready()

    def _metadata_refused(self, source: str, code: int, now: float) -> None:
        """A Metadata answer with a top-level error (v13+): REBOOTSTRAP_REQUIRED sends the
        next request to the bootstrap servers (KIP-1102); any other is a failed refresh."""
        error = error_for_code(code, f"metadata from {source}")
        self._last_metadata_error = error
        self._metadata.update_failed(now, error)
        if code == ErrorCode.REBOOTSTRAP_REQUIRED and self._rebootstrap_after is not None:
            self._connections.rebootstrap(f"{source} answered REBOOTSTRAP_REQUIRED", now)
            self._metadata.restart_failure_clock(now)
        elif code != self._metadata_error_logged:
            # Once per error until an answer is accepted: refreshes come every backoff.
            self._metadata_error_logged = code
            log.warning("%s; asking again (further answers with it are not logged)", error)

    def _maybe_init_producer_id(self, now: float) -> float:
        idempotence = self._idempotence
        assert idempotence is not None
        if idempotence.init_in_flight:
            return _MAX_POLL
        if self._in_flight_batches:
            # The new id applies once nothing sent under the old one is outstanding.
            return _MAX_POLL
        if now < self._init_backoff_until:
            return self._init_backoff_until - now
        connection = self._connections.least_loaded(now)
        if connection is None:
            self._connections.ensure_any_connecting(now)
            return self._no_connection_wait
        # A new producer id (the first, or after the epoch ran out): an idempotent producer
        # bumps its epoch locally otherwise (IdempotenceManager.bump_epoch_if_needed), as
        # Java's does. Without a transactional id, Kafka gives a new id at epoch 0 whatever
        # id and epoch the request names, so it names none.
        request = InitProducerIdRequest(
            transactional_id=idempotence.transactional_id,
            transaction_timeout_ms=self._config.transaction_timeout_ms,
            producer_id=-1,
            producer_epoch=-1,
        )
        try:
            self._sent(connection, request, self._on_init_producer_id)
        except KafkaError as exc:
            if not exc.retriable:
                # The broker knows no InitProducerId (or no version of it we speak).
                error = UnsupportedVersionError(
                    f"{exc}: the broker cannot do idempotence; set enable_idempotence=False "
                    "(and acks as needed)"
                )
                error.__cause__ = exc
                self._init_producer_id_failed(error, now)
                return 0.0
            log.debug("InitProducerId could not be sent: %s", exc)
            self._last_init_error = exc
            self._init_backoff_until = now + self._backoff_base
            return self._backoff_base
        idempotence.init_in_flight = True
        return _MAX_POLL

    def _on_init_producer_id(
        self, response: InitProducerIdResponse | None, error: BaseException | None, now: float
    ) -> None:
        idempotence = self._idempotence
        assert idempotence is not None
        idempotence.init_in_flight = False
        exc = error
        if response is not None:
            if response.error_code == 0:
                idempotence.set_producer_id(response.producer_id, response.producer_epoch)
                log.info("producer id %d, epoch %d", response.producer_id, response.producer_epoch)
                self._check_ready()
                return
            exc = init_producer_id_error(response.error_code)
        self._init_producer_id_failed(exc, now)

    def _init_producer_id_failed(self, exc: BaseException | None, now: float) -> None:
        if isinstance(exc, KafkaError) and not exc.retriable:
            log.error("InitProducerId failed: %s; the producer cannot send", exc)
            self.fatal_error = exc
            if self._on_fatal is not None:
                self._on_fatal()
            self._abort_all(exc)
            self._check_ready()
        else:
            if isinstance(exc, KafkaError) and exc.error_code in _COORDINATOR_NOT_READY:
                # What a cluster that just started answers for a while: not worth a warning.
                log.info("InitProducerId: %s; asking again", exc)
            else:
                log.warning("InitProducerId failed, retrying: %s", exc)
            self._last_init_error = exc
            self._init_backoff_until = now + self._backoff_base

    # ---- transactions -------------------------------------------------------------------------

    def _run_transactions(self, transactions: TransactionManager, now: float) -> float:
        """Drop batches a failed or aborting transaction will not send, flush while it
        completes, and send the next coordinator request (one at a time)."""
        accumulator = self._accumulator
        if accumulator.has_undrained():
            error = transactions.undrained_batch_error()
            if error is not None:
                self._abort_undrained_batches(error)
        completing = transactions.is_completing
        if completing != self._transaction_flush:
            # A commit or abort sends what is buffered at once, without waiting for linger_ms.
            if completing:
                accumulator.begin_flush()
            else:
                accumulator.end_flush()
            self._transaction_flush = completing
        if transactions.has_in_flight_request():
            return _MAX_POLL
        item = transactions.next_request(now, accumulator.has_incomplete())
        if item is None:
            return transactions.time_to_next_request(now, accumulator.has_incomplete())
        return self._send_transactional(transactions, item, now)

    def _abort_undrained_batches(self, exc: KafkaError) -> None:
        for batch in self._accumulator.abort_undrained(exc):
            if self._idempotence is not None:
                self._idempotence.on_final_failure(batch, str(exc))
            self._report_failed(batch)
            self._accumulator.deallocate(batch)

    def _send_transactional(
        self, transactions: TransactionManager, item: TransactionalRequest, now: float
    ) -> float:
        connections = self._connections
        node = transactions.coordinator_node(item)
        if node is None:
            connection = connections.least_loaded(now)
            if connection is None:
                connections.ensure_any_connecting(now)
                return self._no_connection_wait
            request: Any = transactions.find_coordinator_request(item)
            finding = True
        else:
            ready = connections.ready(node)
            if ready is None:
                if connections.is_connecting(node):
                    return _MAX_POLL  # on_state_change wakes the sender
                refused = connections.auth_error(node)
                if refused is not None:
                    # The coordinator refused our credentials: fatal to the transactional
                    # producer, as Java's authenticationFailed makes it.
                    transactions.request_not_sent(item, refused[0], now)
                    return 0.0
                if connections.connection_delay(node, now) > 0:
                    # Unknown to the metadata, or failing to connect: the coordinator may
                    # have moved, so look it up again after a backoff.
                    self._metadata.request_update()
                    transactions.coordinator_unreachable(item, now)
                    return self._backoff_base
                connections.ensure_connecting(node, now)
                return _MAX_POLL
            if not ready.can_send():
                throttle = ready.throttle_delay(now)
                return throttle if throttle > 0 else _MAX_POLL
            connection = ready
            request = transactions.build_request(item)
            finding = False
        if finding:
            handler: AnswerHandler = lambda response, error, at: (  # noqa: E731
                transactions.handle_find_coordinator(item, response, error, at)
            )
        else:
            handler = lambda response, error, at: (  # noqa: E731
                transactions.handle_response(item, response, error, at)
            )
        try:
            self._sent(connection, request, handler)
        except KafkaError as exc:
            transactions.request_not_sent(item, exc, now)
            return self._backoff_base
        transactions.request_sent(item, finding_coordinator=finding)
        return _MAX_POLL

    # ---- compression off the loop -----------------------------------------------------------

    def _offload(self, batch: ProducerBatch) -> None:
        """Compress ``batch`` in a worker thread; the accumulator holds it back meanwhile."""
        pool = self._offload_pool
        if pool is None:
            pool = self._offload_pool = concurrent.futures.ThreadPoolExecutor(
                _OFFLOAD_THREADS, thread_name_prefix="aioproducer-compress"
            )
        loop = asyncio.get_running_loop()
        job = pool.submit(batch.builder.compress_records)
        self._metrics.batch_offloaded()

        def done(job: concurrent.futures.Future[bytes]) -> None:  # in the worker thread
            # A closed loop raises RuntimeError: nobody waits for the batch any more then.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._offload_finished, batch, job)

        job.add_done_callback(done)

    def _offload_finished(
        self, batch: ProducerBatch, job: concurrent.futures.Future[bytes]
    ) -> None:
        block: bytes | None
        try:
            block = job.result()
        except Exception:
            log.warning(
                "compressing a batch for %s-%d in a worker thread failed; compressing it on "
                "the event loop instead",
                batch.topic,
                batch.partition,
                exc_info=True,
            )
            block = None
        self._accumulator.offload_done(batch, block)
        self.wakeup()

    # ---- produce ----------------------------------------------------------------------------

    def _close_batch(self, batch: ProducerBatch) -> None:
        batch.builder.seal()

    def _prepare_batch(self, batch: ProducerBatch) -> bool:
        """Close a drained batch for sending (with its producer id and sequence when
        idempotent). A batch that cannot be built (a codec error, a fault of ours) fails
        alone: False, and its records have the error."""
        try:
            self._prepare(batch)
        except Exception as exc:
            self._fail_on_fault([batch], exc, "build the batch", self._clock())
            return False
        return True

    # ---- the fault boundary -----------------------------------------------------------------

    def _fail_request(
        self,
        node: int,
        batches: list[ProducerBatch],
        exc: Exception,
        what: str,
        now: float,
        *,
        sent: bool,
    ) -> None:
        """``exc`` broke the handling of one Produce request (not a broker's answer): take
        its batches out of flight and fail those still pending with it. ``sent``: the
        request went out (or may have), so the broker may have written its batches."""
        if sent:
            for batch in batches:
                batch.maybe_written = True
        self._take_in_flight(node, batches)
        if self._guarantee_order:
            for batch in batches:
                self._accumulator.unmute(batch.tp)
        self._fail_on_fault(batches, exc, what, now, node=node)

    def _take_in_flight(self, node: int, batches: list[ProducerBatch]) -> bool:
        """Take the request of ``batches`` (that very list) out of flight to ``node``;
        False when it is not there (aborted already: a force close, a crash)."""
        requests = self._in_flight.get(node)
        if requests is None:
            return False
        for index, entry in enumerate(requests):
            if entry is batches:
                del requests[index]
                self._in_flight_batches -= len(batches)
                self._attempts_ended(batches)
                return True
        return False

    def _fail_on_fault(
        self,
        batches: list[ProducerBatch],
        exc: Exception,
        what: str,
        now: float,
        *,
        node: int | None = None,
    ) -> None:
        """Fail the records of ``batches`` that are still pending with a
        :class:`~aioproducer.errors.BatchEncodingError` caused by ``exc``, logged once; the
        sender, the other batches and the producer go on, as the Java sender fails a batch."""
        accumulator = self._accumulator
        pending = [
            batch
            for batch in batches
            # Done already, or queued again for a retry (it goes on from there).
            if not batch.done() and batch not in accumulator.deque_for(batch.tp)
        ]
        if not pending:
            log.error("the producer could not %s", what, exc_info=exc)
            return
        records = sum(batch.record_count for batch in pending)
        where = ", ".join(sorted({f"{batch.topic}-{batch.partition}" for batch in pending}))
        log.error(
            "the producer could not %s; failing its %d record(s) for %s",
            what,
            records,
            where,
            exc_info=exc,
        )
        for batch in pending:
            error = BatchEncodingError(
                f"the producer could not {what} for {batch.record_count} record(s) of "
                f"{batch.topic}-{batch.partition}: {exc!r}"
            )
            error.__cause__ = exc
            self._fail_batch(batch, error, now, node=node, logged=True)

    def _send_produce(
        self, node: int, connection: _Connection, batches: list[ProducerBatch], now: float
    ) -> None:
        by_topic: dict[str, list[ProducePartitionData]] = {}
        acks_zero = self._acks == 0
        accumulator = self._accumulator
        compressed = accumulator.compressed
        for batch in batches:
            # drain() closed every batch it returned (_prepare_batch).
            view = batch.builder.closed_view
            if view is None:  # pragma: no cover - a fault of ours, failed at the boundary
                raise RuntimeError(f"{batch!r} was drained without being closed")
            data: bytes | memoryview = bytes(view) if acks_zero else view
            partitions = by_topic.get(batch.topic)
            if partitions is None:
                partitions = by_topic[batch.topic] = []
            partitions.append(ProducePartitionData(batch.partition, data))
            if compressed and batch.attempts == 0:
                # The estimate that sizes the topic's next batches (as Java's).
                accumulator.observe_compression(batch.topic, batch.builder.compression_ratio)
            if self._guarantee_order:
                self._accumulator.mute(batch.tp)
        idempotence = self._idempotence
        request = ProduceRequest(
            transactional_id=idempotence.transactional_id if idempotence else None,
            acks=self._acks,
            timeout_ms=self._request_timeout_ms,
            topics=[ProduceTopicData(name, parts) for name, parts in by_topic.items()],
            # Transactions v1 stops at Produce v11 (v12 means KIP-890 implicit adding).
            version_cap=idempotence.produce_version_cap if idempotence else None,
        )
        self._metrics.produce_sent(batches, now)
        try:
            if acks_zero:
                connection.send_for(request, _no_answer)
            else:
                self._sent(
                    connection,
                    request,
                    lambda response, error, at: self._on_produce_response(
                        node, batches, now, response, error, at
                    ),
                )
        except KafkaError as exc:
            # Refused at once (the transport closed under us): nothing went out, nothing is
            # in flight, so the partitions muted above must be drainable again for the
            # retries.
            for batch in batches:
                if self._guarantee_order:
                    self._accumulator.unmute(batch.tp)
                self._retry_or_fail(batch, exc, now, sent=False)
            return
        except Exception as exc:
            # A fault of ours inside send(): part of the request may have gone out.
            self._fail_request(node, batches, exc, "send a Produce request", now, sent=True)
            return
        try:
            self._request_out(node, batches, now, acks_zero)
        except Exception as exc:
            # The request is on the wire: the broker may write it.
            self._fail_request(node, batches, exc, "send a Produce request", now, sent=True)

    def _request_out(
        self,
        node: int,
        batches: list[ProducerBatch],
        now: float,
        acks_zero: bool,
    ) -> None:
        """``batches`` went out in one Produce request: in flight until its answer is
        handled (acknowledged at once with ``acks=0``)."""
        idempotence = self._idempotence
        if acks_zero:
            for batch in batches:
                if self._guarantee_order:
                    self._accumulator.unmute(batch.tp)
                self._complete_batch(batch, -1, -1, now)
            return
        if idempotence is not None:
            for batch in batches:
                idempotence.attempt_sent(batch, node)
        self._in_flight.setdefault(node, []).append(batches)
        self._in_flight_batches += len(batches)

    def _on_produce_response(
        self,
        node: int,
        batches: list[ProducerBatch],
        sent_at: float,
        response: ProduceResponse | None,
        error: BaseException | None,
        now: float,
    ) -> None:
        try:
            self._handle_produce_response(node, batches, sent_at, response, error, now)
        except Exception as exc:
            self._fail_request(node, batches, exc, "handle a Produce response", now, sent=True)

    def _handle_produce_response(
        self,
        node: int,
        batches: list[ProducerBatch],
        sent_at: float,
        response: ProduceResponse | None,
        error: BaseException | None,
        now: float,
    ) -> None:
        if not self._take_in_flight(node, batches):
            return  # aborted already: nothing left to do
        if self._guarantee_order:
            for batch in batches:
                self._accumulator.unmute(batch.tp)
        # KIP-219: a throttled broker's connection holds every request to it until the
        # throttle ends (see BrokerConnection.throttle_delay); here it is only counted.
        self._metrics.produce_answered(
            node, now - sent_at, response.throttle_time_ms if response is not None else 0, now
        )
        if response is None:
            exc = error or KafkaConnectionError(f"the request to broker {node} had no answer")
            if not isinstance(exc, KafkaError):
                # A bug below us, not a broker answer: fail these records with it, loudly.
                log.error("the request to broker %s failed unexpectedly: %r", node, exc)
                wrapped = KafkaError(f"the request to broker {node} failed: {exc!r}")
                wrapped.__cause__ = exc
                exc = wrapped
            if exc.invalid_metadata or isinstance(exc, KafkaConnectionError):
                self._metadata.request_update()
            for batch in batches:
                if batch.final:
                    self._late_answer(batch, None, node)
                    continue
                self._retry_or_fail(batch, exc, now, node=node)
            return
        results: dict[tuple[str, int], Any] = {}
        leaders: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in response.topics:
            for partition in topic.partitions:
                tp = (topic.name, partition.index)
                results[tp] = partition
                current = partition.current_leader
                if partition.error_code and current is not None and current.leader_id >= 0:
                    leaders[tp] = (current.leader_id, current.leader_epoch)
        moved: set[tuple[str, int]] = set()
        if leaders:
            # KIP-951: the new leader named in the answer takes over now, without waiting
            # for a metadata refresh; a retry to it goes without a backoff.
            endpoints = [Broker(e.node_id, e.host, e.port, e.rack) for e in response.node_endpoints]
            moved = self._metadata.update_leaders(leaders, endpoints)
            if moved and endpoints:
                self._connections.set_brokers(
                    {b.node_id: (b.host, b.port) for b in self._metadata.cluster.brokers.values()},
                    from_metadata=False,
                )
        for batch in batches:
            if batch.final:
                # Failed while in flight (it expired): what the broker did still tells the
                # partition's sequences, and only its buffer is left to return.
                self._late_answer(batch, results.get(batch.tp), node)
                continue
            partition_response = results.get(batch.tp)
            if partition_response is None:
                self._retry_or_fail(
                    batch,
                    KafkaError(
                        f"broker {node} sent no result for {batch.topic}-{batch.partition}",
                        retriable=True,
                    ),
                    now,
                    node=node,
                )
                continue
            code = partition_response.error_code
            if code == 0 or code == DUPLICATE_SEQUENCE_NUMBER:
                # DUPLICATE_SEQUENCE_NUMBER: the broker has this batch already (a retry of a
                # write that succeeded), so it counts as delivered.
                self._complete_batch(
                    batch,
                    partition_response.base_offset,
                    partition_response.log_append_time_ms,
                    now,
                )
                continue
            message = partition_response.error_message
            if (
                partition_response.record_errors
                and code in _RECORD_ERROR_CODES
                and self._transactions is None
                and self._resend_valid_records(batch, partition_response, now, node)
            ):
                continue
            if partition_response.record_errors:
                details = "; ".join(
                    f"record {e.batch_index}: {e.batch_index_error_message}"
                    for e in partition_response.record_errors
                )
                message = f"{message} ({details})" if message else details
            error = error_for_code(
                code, message, where=f"topic-partition {batch.topic}-{batch.partition}"
            )
            if error.invalid_metadata:
                self._metadata.request_update()
            self._retry_or_fail(
                batch,
                error,
                now,
                node=node,
                log_start_offset=partition_response.log_start_offset,
                leader_moved=batch.tp in moved,
            )

    # ---- outcomes ---------------------------------------------------------------------------

    def _attempts_ended(self, batches: list[ProducerBatch]) -> None:
        idempotence = self._idempotence
        if idempotence is not None:
            for batch in batches:
                idempotence.attempt_ended(batch)

    def _late_answer(self, batch: ProducerBatch, answer: Any, node: int) -> None:
        """The request of a batch that already failed (it expired in flight) ended, with the
        partition's ``answer`` (None: no answer). A success resolves the partition's
        sequence at once and is logged: the application was told the records failed."""
        idempotence = self._idempotence
        code = -1 if answer is None else answer.error_code
        if code == 0 or code == DUPLICATE_SEQUENCE_NUMBER:
            log.warning(
                "%d record(s) for %s-%d that had failed before the broker answered (a delivery "
                "timeout, or a purge) were written by broker %d after all, at offset %d",
                batch.record_count,
                batch.topic,
                batch.partition,
                node,
                answer.base_offset,
            )
            if idempotence is not None:
                idempotence.on_success(batch, answer.base_offset)
        elif idempotence is not None:
            idempotence.on_late_failure(batch)
        self._accumulator.deallocate(batch)

    def _fail_stranded(self, batch: ProducerBatch, now: float) -> None:
        """A batch whose partition restarted its sequences under a new epoch while an earlier
        attempt of it may have been written: sending it again could write it twice. No
        request of its partition is out (see IdempotenceManager.restart_partitions), so it
        waits in its queue for a retry."""
        self._accumulator.remove_queued(batch)
        self._fail_overtaken(
            batch,
            "an earlier attempt's outcome is unknown and the partition's sequences restarted "
            "under a new epoch",
            batch.last_error,
            now,
        )

    def _fail_overtaken(
        self,
        batch: ProducerBatch,
        why: str,
        cause: BaseException | None,
        now: float,
        node: int | None = None,
    ) -> None:
        """Fail ``batch`` with :class:`BatchOvertakenError` (whether it was written is
        unknown, and sending it again could write it twice), counted in
        ``batch-overtaken-total``."""
        self._metrics.batch_overtaken()
        error = BatchOvertakenError(
            f"{batch.record_count} record(s) for {batch.topic}-{batch.partition} may or may not "
            f"have been written: {why}; the producer does not send them again"
        )
        error.__cause__ = cause
        self._fail_batch(batch, error, now, node=node)

    def _complete_batch(
        self, batch: ProducerBatch, base_offset: int, log_append_time: int, now: float
    ) -> None:
        if self._idempotence is not None:
            self._idempotence.on_success(batch, base_offset)
        if batch.complete(base_offset, log_append_time):
            self._metrics.records_sent(batch.topic, batch.record_count, now)
            self._notify(batch, None)
        self._accumulator.deallocate(batch)

    def _fail_batch(
        self,
        batch: ProducerBatch,
        exc: BaseException,
        now: float,
        *,
        node: int | None = None,
        logged: bool = False,
        answered: bool = True,
    ) -> None:
        """Fail ``batch`` for good. ``answered`` False: it expired, and whether the broker
        has it is unknown (see IdempotenceManager.on_final_failure)."""
        exc = _outcome_error(batch, exc)
        if self._transactions is not None:
            # First, so the transaction's error is this one, not the sequence gap it leaves.
            self._transactions.on_batch_failed(batch, exc)
        if self._idempotence is not None:
            self._idempotence.on_final_failure(batch, str(exc), answered=answered)
        if not logged:
            if node is None:
                leader = self._metadata.cluster.leader_for(batch.topic, batch.partition)
                where = f"leader {leader}" if leader >= 0 else "no known leader"
            else:
                where = f"broker {node}"
            log.warning(
                "failed to deliver %d record(s) to %s-%d (%s) %s: %s",
                batch.record_count,
                batch.topic,
                batch.partition,
                where,
                f"after {batch.attempts + 1} attempt(s)" if batch.drained else "before it was sent",
                exc,
            )
        if batch.fail(exc):
            self._report_failed(batch)
        self._accumulator.deallocate(batch)

    def _notify(self, batch: ProducerBatch, exc: BaseException | None) -> None:
        if self._on_acknowledgement is not None:
            self._on_acknowledgement(batch, exc)

    def _backoff(self, attempts: int) -> float:
        return self._retry_backoff.backoff_ms(attempts) / 1000.0

    def _retry_or_fail(
        self,
        batch: ProducerBatch,
        exc: BaseException,
        now: float,
        *,
        node: int | None = None,
        log_start_offset: int = -1,
        leader_moved: bool = False,
        sent: bool = True,
    ) -> None:
        """Send ``batch`` again after ``exc`` ended an attempt, if it may be; else fail it.
        ``sent`` False: the attempt never left (the connection refused the request)."""
        code = getattr(exc, "error_code", None)
        if code == MESSAGE_TOO_LARGE and batch.record_count > 1 and self._split(batch, now):
            return
        if code == MESSAGE_TOO_LARGE:
            exc = RecordTooLargeError(
                f"the broker rejected a batch of {batch.record_count} record(s) "
                f"({batch.size_in_bytes} bytes) for {batch.topic}-{batch.partition} as too large: "
                "larger than the topic's max.message.bytes (or the broker's message.max.bytes)"
            )
        if sent and code not in _REFUSED_BEFORE_APPEND:
            batch.maybe_written = True
        verdict = self._can_retry(batch, exc, now, log_start_offset)
        if verdict is SequenceVerdict.OVERTAKEN:
            self._fail_overtaken(
                batch,
                f"broker {node} refused them as out of order after its sequence for the "
                "partition had moved past them (it acknowledged later batches, or lost track "
                "of earlier ones)",
                exc,
                now,
                node,
            )
            return
        if verdict is SequenceVerdict.RETRY:
            log.info(
                "retrying %d record(s) for %s-%d (broker %s, attempt %d): %s",
                batch.record_count,
                batch.topic,
                batch.partition,
                node,
                batch.attempts + 1,
                exc,
            )
            self._metrics.records_retried(batch.topic, batch.record_count)
            if batch.last_error is None or code not in (
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                UNKNOWN_PRODUCER_ID,
            ):
                # A sequence error the producer settles itself (the gap an expired batch
                # before this one left) says less about why the batch is late than the
                # error it was retried for before.
                batch.last_error = exc
            if self._idempotence is not None:
                self._idempotence.mark_retrying(batch)
            backoff = 0.0 if leader_moved else self._backoff(batch.attempts)
            self._accumulator.reenqueue(batch, now, backoff)
            return
        if isinstance(exc, KafkaError) and exc.retriable and now >= batch.delivery_deadline:
            timeout = DeliveryTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
                f"delivery_timeout_ms passed; the last error was {exc}"
            )
            timeout.__cause__ = exc
            exc = timeout
        self._fail_batch(batch, exc, now, node=node)

    def _can_retry(
        self, batch: ProducerBatch, exc: BaseException, now: float, log_start_offset: int
    ) -> SequenceVerdict:
        # Java's Sender.canRetry, with TransactionManager.canRetry for sequence errors.
        if not isinstance(exc, KafkaError) or (not self._running and self._force_close):
            return SequenceVerdict.FAIL
        code = exc.error_code
        idempotence = self._idempotence
        if now >= batch.delivery_deadline or batch.attempts >= self._retries:
            if (
                idempotence is not None
                and code == OUT_OF_ORDER_SEQUENCE_NUMBER
                and idempotence.can_retry(batch, code, log_start_offset)
                is SequenceVerdict.OVERTAKEN
            ):
                # Out of time, but still not to be reported as a plain refusal.
                return SequenceVerdict.OVERTAKEN
            return SequenceVerdict.FAIL
        if idempotence is not None and code in (
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            UNKNOWN_PRODUCER_ID,
        ):
            return idempotence.can_retry(batch, code, log_start_offset)
        if (
            idempotence is not None
            and code in _FENCED_EPOCH
            and idempotence.local_bump_refused(batch, str(exc.error_name))
        ):
            return SequenceVerdict.RETRY
        return SequenceVerdict.RETRY if exc.retriable else SequenceVerdict.FAIL

    def _records_of(self, batch: ProducerBatch) -> list[Any] | None:
        """The records of a sent batch, decoded from its bytes; None if they cannot be."""
        view = batch.builder.closed_view
        if view is None:
            return None
        try:
            decoded = decode_record_batches(bytes(view))
        except KafkaError:
            return None
        records: list[Any] = [record for part in decoded for record in part.records]
        return records if len(records) == batch.record_count else None

    def _split(self, batch: ProducerBatch, now: float) -> bool:
        records = self._records_of(batch)
        if records is None:
            return False
        # Halve the batch: the broker's limit is below what we sent. The parts carry the
        # batch's sequence range, so an idempotent or transactional producer goes on
        # without a gap (Java's splitAndReenqueue).
        parts, _ = self._accumulator.split_and_reenqueue(
            batch, records, now, target_size=max(1, batch.size_in_bytes // 2)
        )
        if self._idempotence is not None:
            self._idempotence.split(batch, parts)
        self._metrics.batch_split()
        log.info(
            "split a too-large batch of %d records for %s-%d into %d batches",
            len(records),
            batch.topic,
            batch.partition,
            len(parts),
        )
        return True

    def _resend_valid_records(
        self, batch: ProducerBatch, answer: Any, now: float, node: int
    ) -> bool:
        """KIP-467: the broker refused ``batch`` for the records ``answer.record_errors``
        names. Those fail, each with its own message; the others go again in new batches in
        their place (an idempotent producer restarts the partition's sequences, as the
        refused batch took none). False when every record was named, or the batch cannot
        be read back: it then fails whole. Not for a transactional producer, whose
        transaction must be aborted either way, nor for a batch an earlier attempt of which
        may have been written: the broker checks timestamps and records before it
        recognises a retried batch, so the other records may be in the log already, and
        sending them again could write them twice (the batch fails whole, maybe_written)."""
        if batch.maybe_written:
            return False
        records = self._records_of(batch)
        if records is None:
            return False
        named: dict[int, str | None] = {}
        for record_error in answer.record_errors:
            if 0 <= record_error.batch_index < len(records):
                named[record_error.batch_index] = record_error.batch_index_error_message
        if not named or len(named) == len(records):
            return False
        refused: dict[int, BaseException] = {
            index: error_for_code(
                answer.error_code,
                f"record {index} of its batch to {batch.topic}-{batch.partition}: "
                f"{message or answer.error_message or 'refused by the broker'}",
            )
            for index, message in named.items()
        }
        parts, refused_batches = self._accumulator.split_and_reenqueue(
            batch, records, now, refused=refused
        )
        idempotence = self._idempotence
        if idempotence is not None:
            idempotence.split(batch, parts)
            idempotence.request_epoch_bump(
                batch.tp, f"the broker refused {len(named)} record(s) of a batch"
            )
        log.warning(
            "broker %d refused %d of %d record(s) of a batch for %s-%d (%s); sending the "
            "other %d again",
            node,
            len(named),
            len(records),
            batch.topic,
            batch.partition,
            "; ".join(f"record {i}: {m or answer.error_message}" for i, m in sorted(named.items())),
            len(records) - len(named),
        )
        for lone, error in refused_batches:
            self._fail_batch(lone, error, now, node=node, logged=True)
        return True

    async def wait_closed(self) -> None:
        """Wait for the task to finish."""
        if self._task is not None:
            await asyncio.shield(self._task)
