"""The public asyncio producer: lifecycle, ``send`` and friends. Thin: it delegates.

``send`` runs synchronously whenever it can (metadata known, buffer free): it validates,
serializes, partitions and appends into the accumulator without suspending. It awaits only to
wait for metadata or buffer memory, bounded together by ``max_block_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from threading import get_ident
from typing import Any, cast

from aioproducer._core.accumulator import ProducerBatch, RecordAccumulator
from aioproducer._core.answers import AnswerQueue
from aioproducer._core.appender import PendingRecord, RecordAppender
from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.delivery import (
    DeliveredMessage,
    DeliveryCallback,
    DeliveryReports,
    ProduceLater,
    check_delivery_callback,
    confluent_arguments,
)
from aioproducer._core.futures import BatchResults, RecordFuture, error_copy
from aioproducer._core.idempotence import IdempotenceManager
from aioproducer._core.metadata import Metadata, validate_topic
from aioproducer._core.metrics import ProducerMetrics
from aioproducer._core.partitioner import make_partitioner
from aioproducer._core.sender import Sender
from aioproducer._core.transactions import (
    TransactionManager,
    consumer_group_metadata,
    normalize_offsets,
)
from aioproducer.admin import TopicAdmin, broker_topics
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    FlushTimeoutError,
    IllegalStateError,
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
    PurgedError,
    RequestTimedOutError,
    SenderCrashedError,
)
from aioproducer.metric_catalog import (
    NODE_GROUP,
    PRODUCER_GROUP,
    TOPIC_GROUP,
    Metric,
    metric_entries,
    node_tag,
)
from aioproducer.net.manager import ConnectionManager
from aioproducer.protocol.compression import CompressionType, offload_threshold
from aioproducer.records import (
    ConsumerGroupMetadata,
    PreparedTransaction,
    ProducerRecord,
    RecordMetadata,
    TransactionState,
    check_partition,
)
from aioproducer.serialization import SerializerNotReady, wait_for_serializer
from aioproducer.telemetry import SendSpan, SendTelemetry, default_for

__all__ = ["Producer", "ProducerState"]

# RecordAppender.send_now's signature: (topic, value, key, partition, timestamp_ms, headers).
_SendNow = Callable[..., "RecordFuture | PendingRecord | None"]

log = logging.getLogger("aioproducer.producer")


class ProducerState(enum.Enum):
    """Where a producer is in its life."""

    CREATED = "created"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class Producer:
    """An asyncio Kafka producer.

    Options are the Java producer's configs in snake_case (``linger_ms``), given as keyword
    arguments or in ``config`` under either spelling (``{"linger.ms": 5}``); keywords win.
    See the configuration page for every option.

    Keys and values are bytes-like, or whatever ``key_serializer`` / ``value_serializer``
    turn into bytes. A None key or value is never passed to a serializer: it stays None
    (a record without a key; a tombstone, without a value).

    Use it as ``async with Producer(bootstrap_servers="host:9092") as producer:`` or call
    ``await producer.start()`` and ``await producer.close()``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **options: Any) -> None:
        self._config = ProducerConfig.from_options(config, **options)
        self._state = ProducerState.CREATED
        cfg = self._config
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        self._interceptors = tuple(cfg.interceptors)
        self._partitioner = make_partitioner(cfg)
        self._max_block = cfg.max_block_ms / 1000.0
        self._appender: RecordAppender | None = None
        self._sender: Sender | None = None
        self._fatal: BaseException | None = None
        self._closed_event: asyncio.Event | None = None
        self._transactions: TransactionManager | None = None
        # The loop start() ran on: the producer's tasks, futures and connections belong to it.
        self._loop: asyncio.AbstractEventLoop | None = None
        # send()'s part that never waits: the appender's, once started.
        self._send_now: _SendNow = self._send_unstarted
        self._produce_now: Callable[..., ProduceLater | None] = self._produce_unstarted
        self._reports = DeliveryReports()
        self._drop_reported = False
        # Tracing (aioproducer.telemetry): None, the default, costs send() one check.
        self._telemetry: SendTelemetry | None = default_for(self)

    # ---- properties -----------------------------------------------------------------------

    @property
    def config(self) -> ProducerConfig:
        """The validated configuration."""
        return self._config

    @property
    def state(self) -> ProducerState:
        """The lifecycle state."""
        return self._state

    def __repr__(self) -> str:
        return (
            f"<Producer client_id={self._config.client_id!r} "
            f"bootstrap_servers={self._config.bootstrap_servers!r} state={self._state.value}>"
        )

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster, fetch metadata and (when idempotent) a producer id.

        A ``bootstrap_servers`` list in which no host name resolves is refused here, at
        once, with :class:`~aioproducer.errors.ConfigurationError` (the Java client refuses
        it in its constructor). It is checked here rather than in ``Producer(...)`` so that
        building a producer does no I/O: it can be built at import time or in a web app's
        setup without a blocking DNS lookup, and ``start()`` resolves the names on the
        event loop's resolver threads instead of blocking the loop.

        Raises:
            ConfigurationError: no bootstrap server's host name resolves.
            KafkaConnectionError: no bootstrap server answered within ``max_block_ms``; the
                message names each address tried, its last error and the likely causes.
            UnsupportedVersionError: the broker cannot do what the configuration asks
                (e.g. idempotence).
            IllegalStateError: the producer was started already.
        """
        if self._state is not ProducerState.CREATED:
            raise IllegalStateError(f"start() on a producer that is {self._state.value}")
        cfg = self._config
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._pool = BufferPool(cfg.buffer_memory, cfg.batch_size)
        self._metrics = ProducerMetrics(cfg.metrics_sample_window_ms / 1000.0)
        self._metadata = Metadata(
            max_age=cfg.metadata_max_age_ms / 1000.0,
            max_idle=cfg.metadata_max_idle_ms / 1000.0,
            retry_backoff=cfg.retry_backoff_ms / 1000.0,
            loop=loop,
        )
        self._transactions = self._make_transaction_manager(loop)
        self._idempotence = self._transactions or (
            IdempotenceManager() if cfg.enable_idempotence else None
        )
        compression = CompressionType[cfg.compression_type.upper()]
        self._accumulator = RecordAccumulator(
            pool=self._pool,
            batch_size=cfg.batch_size,
            linger=cfg.linger_ms / 1000.0,
            delivery_timeout=cfg.delivery_timeout_ms / 1000.0,
            retry_backoff=cfg.retry_backoff_ms / 1000.0,
            compression=compression,
            compression_level=cfg.compression_level,
            loop=loop,
            idempotence=self._idempotence,
            offload_threshold=offload_threshold(compression, cfg.compression_offload_bytes),
            # on_acknowledgement reads every record of a finished batch.
            keep_record_futures=bool(self._interceptors),
        )
        self._closed_event = asyncio.Event()
        metadata = self._metadata
        # The answers to the sender's requests: queued by the connections, handled by the
        # sender's next step.
        answers = AnswerQueue(wake=self._wake_sender)
        self._connections = ConnectionManager(
            cfg,
            on_state_change=self._wake_sender,
            # A broker that cannot be reached may have lost its leaderships: refresh.
            on_disconnect=lambda node_id: metadata.request_update(),
            # Refused credentials: sends waiting for metadata look at fatal_error() now.
            on_auth_failure=lambda node_id, exc: metadata.wake_waiters(updated=False),
            metrics=self._metrics,
            answers=answers,
        )
        self._sender = Sender(
            config=cfg,
            accumulator=self._accumulator,
            metadata=self._metadata,
            connections=self._connections,
            idempotence=self._idempotence,
            metrics=self._metrics,
            answers=answers,
            partitioner=self._partitioner,
            on_acknowledgement=self._on_batch_done if self._interceptors else None,
            on_abandoned=self._on_sender_abandoned,
            on_fatal=self._close_appender,
        )
        self._appender = RecordAppender(
            metadata=self._metadata,
            accumulator=self._accumulator,
            pool=self._pool,
            partitioner=self._partitioner,
            sender=self._sender,
            connections=self._connections,
            transactions=self._transactions,
            key_serializer=self._key_serializer,
            value_serializer=self._value_serializer,
            intercept=self._intercept if self._interceptors else None,
            check_sendable=self._check_sendable,
            check_running=self._check_running,
            max_request_size=cfg.max_request_size,
            buffer_memory=cfg.buffer_memory,
            loop=loop,
            check_loop=self._check_loop,
        )
        self._appender.traced = self._telemetry is not None
        self._appender.reports = self._reports
        self._send_now = self._appender.send_now
        self._produce_now = self._appender.produce_now
        deadline = time.monotonic() + self._max_block
        try:
            # A first connection now, so that an address no server answers on is reported
            # at once with every server's error; the sender then asks that server for the
            # metadata (and the producer id) as it asks for every later refresh.
            await self._connections.check_resolvable(deadline - time.monotonic())
            await self._connections.bootstrap(deadline)
        except BaseException:
            await self._connections.close()
            self._state = ProducerState.CLOSED
            raise
        task = self._sender.start()
        task.add_done_callback(self._on_sender_done)
        self._state = ProducerState.RUNNING
        # Without a transaction to check, a running producer needs no state check per record.
        self._appender.open = self._transactions is None
        # With no time left (max_block_ms=0, or a slow bootstrap), the first answers still
        # get one request's time, as each bootstrap server got one whole attempt.
        remaining = deadline - time.monotonic()
        try:
            await self._sender.wait_ready(
                remaining if remaining > 0 else cfg.request_timeout_ms / 1000.0
            )
        except asyncio.TimeoutError:
            missing, cause = self._sender.not_ready_reason()
            await self.close(timeout=0)
            error = RequestTimedOutError(
                f"start() did not get {missing} from {', '.join(cfg.bootstrap_servers)} within "
                f"max_block_ms ({cfg.max_block_ms} ms)"
                + (f"; the last attempt failed: {cause}" if cause is not None else "")
            )
            raise error from cause
        except BaseException:
            with contextlib.suppress(Exception):
                await self.close(timeout=0)
            raise
        if self._transactions is not None:
            await self._initialize_transactions()
        if self._telemetry is not None:
            self._telemetry.started(self)

    def _on_sender_abandoned(self, dropped: int) -> None:
        # The sender task was cancelled (asyncio.run() cancels what is left when the main
        # coroutine returns) or destroyed with its loop, without close().
        if self._state is not ProducerState.CLOSED:
            self._report_dropped(dropped, "its event loop stopped before it was closed")

    def _report_dropped(self, dropped: int, why: str) -> None:
        if dropped <= 0 or self._drop_reported:
            return
        self._drop_reported = True
        message = (
            f"{dropped} {'record' if dropped == 1 else 'records'} buffered in {self!r} "
            f"{'was' if dropped == 1 else 'were'} dropped undelivered: {why}. "
            "`await producer.close()` (or `async with Producer(...)`) delivers buffered "
            "records before the program goes on"
        )
        log.warning("%s", message)
        warnings.warn(message, ResourceWarning, source=self, stacklevel=2)

    def __del__(self) -> None:
        # An unclosed file warns when it is collected; a producer that still holds records
        # must too, or they vanish without a word. One that was closed, or never held a
        # record, is silent.
        state = getattr(self, "_state", None)
        if state not in (ProducerState.RUNNING, ProducerState.CLOSING) or self._drop_reported:
            return
        accumulator = getattr(self, "_accumulator", None)
        if accumulator is None:
            return
        dropped = sum(batch.record_count for batch in accumulator.pending_batches())
        self._report_dropped(dropped, "it was garbage-collected without being closed")

    def _wake_sender(self) -> None:
        # A connection changed state (connected, failed, freed a request slot), or queued
        # answers. The connections are built before the sender, which takes them.
        if self._sender is not None:
            self._sender.wakeup()

    def _close_appender(self) -> None:
        if self._appender is not None:
            self._appender.open = False  # every record goes through _check_sendable() now

    def _on_sender_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            error = SenderCrashedError(f"the sender task crashed: {exc!r}")
            error.__cause__ = exc
            self._fatal = error
            self._close_appender()
            log.error("aioproducer's sender task crashed: %r; the producer cannot send", exc)

    async def close(self, timeout: float | None = None) -> None:
        """Deliver everything buffered, then close.

        With a ``timeout`` (seconds), records still undelivered when it runs out fail with
        :class:`~aioproducer.errors.ProducerClosedError`, and a warning on the
        ``aioproducer`` logger says how many, buffered and in flight. Calling close again is
        harmless.

        A transactional producer closing with a transaction open (not prepared) aborts it:
        EndTxn goes to the coordinator within the timeout. ``timeout=0`` sends nothing more,
        as Java's ``close(Duration.ZERO)``: the transaction stays open until the coordinator
        aborts it after ``transaction_timeout_ms``, or a new producer with the same
        ``transactional_id`` starts.

        Raises:
            SenderCrashedError: the sender task had died of a fault it could not recover
                from (its cause chained); the producer is closed all the same, and the
                records it held failed with this error.
        """
        if self._state is ProducerState.CREATED:
            self._state = ProducerState.CLOSED
            return
        if self._state is ProducerState.CLOSED:
            return
        self._check_loop()
        if self._state is ProducerState.CLOSING:
            assert self._closed_event is not None
            await self._closed_event.wait()
            return
        self._state = ProducerState.CLOSING
        self._close_appender()
        sender = self._sender
        assert sender is not None and sender.task is not None
        try:
            sender.initiate_close()
            if timeout is not None and timeout <= 0:
                self._report_undelivered(timeout)
                sender.force_close(
                    ProducerClosedError("the producer was closed with timeout 0 before delivery")
                )
            try:
                await asyncio.wait_for(asyncio.shield(sender.task), timeout)
            except asyncio.TimeoutError:
                self._report_undelivered(timeout)
                sender.force_close(
                    ProducerClosedError(
                        f"the producer was closed with a timeout of {timeout} s before the "
                        "record was delivered"
                    )
                )
                await asyncio.gather(sender.task, return_exceptions=True)
            except BaseException as exc:
                # The sender crashed: _on_sender_done recorded it; closing still completes.
                if not sender.task.done():
                    # close() itself was cancelled: stop the sender now, so no record stays
                    # pending after the connections close, then let the cancellation through.
                    sender.force_close(
                        ProducerClosedError("close() was cancelled before the record was delivered")
                    )
                    await asyncio.gather(sender.task, return_exceptions=True)
                    raise
                if isinstance(exc, asyncio.CancelledError) and _cancelling(sender.task):
                    # close() was cancelled just as the sender finished: the cancellation
                    # is the caller's (Ctrl+C, a timeout), not the sender's; let it through.
                    raise
        finally:
            try:
                self._pool.close()
                self._metadata.wake_waiters()
                await self._connections.close()
            finally:
                # Closed even when close() is cancelled while the connections close: a later
                # close() waits for this event, and no send is taken any more.
                self._state = ProducerState.CLOSED
                assert self._closed_event is not None
                self._closed_event.set()
        # As confluent-kafka's close() (which flushes), the delivery callbacks of produce()
        # records run now, in the caller's task: failed records' too.
        await self._serve_reports()
        if self._fatal is not None:
            raise error_copy(self._fatal)

    def _report_undelivered(self, timeout: float | None) -> None:
        # What close(timeout) is about to fail, said once where an operator looks: a
        # service stopped by its platform learns what it dropped.
        accumulator = self._accumulator
        total = accumulator.undelivered_records()
        if total == 0:
            return
        queued = accumulator.queued_records()
        log.warning(
            "close(timeout=%s): %d record(s) not delivered in time fail with "
            "ProducerClosedError: %d buffered, never sent; %d in flight, which the brokers "
            "may have written",
            timeout,
            total,
            queued,
            total - queued,
        )

    async def stop(self, timeout: float | None = None) -> None:
        """:meth:`close` under aiokafka's name: deliver everything buffered, then close."""
        await self.close(timeout)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            await self.close()
            return
        # The block's own error is what propagates; a crash of the sender was logged.
        with contextlib.suppress(SenderCrashedError):
            await self.close()

    # ---- transactions -------------------------------------------------------------------------

    def _make_transaction_manager(
        self, loop: asyncio.AbstractEventLoop
    ) -> TransactionManager | None:
        cfg = self._config
        if cfg.transactional_id is None:
            return None
        return TransactionManager(
            cfg.transactional_id,
            transaction_timeout_ms=cfg.transaction_timeout_ms,
            retry_backoff=cfg.retry_backoff_ms / 1000.0,
            retry_backoff_max=cfg.retry_backoff_max_ms / 1000.0,
            request_timeout=cfg.request_timeout_ms / 1000.0,
            create_future=loop.create_future,
            # KIP-890: transactions v2 where the cluster finalized transaction.version 2.
            finalized_features=lambda: self._connections.finalized_features,
        )

    async def _initialize_transactions(self) -> None:
        # Java's initTransactions(), done by start(): find the coordinator and get the
        # producer id and epoch, fencing older producers with the same transactional id.
        transactions = self._transactions
        sender = self._sender
        assert transactions is not None and sender is not None
        try:
            future = transactions.initialize()
            sender.wakeup()
            await self._wait_transactional(
                future, "start() initializing transactions (FindCoordinator, InitProducerId)"
            )
        except BaseException:
            await self.close(timeout=0)
            raise

    async def _wait_transactional(self, future: asyncio.Future[None], what: str) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(future), self._max_block)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(
                f"{what} did not complete within max_block_ms ({self._config.max_block_ms} ms); "
                "it goes on in the background: call it again to keep waiting"
            ) from None

    def _require_transactions(self, operation: str) -> TransactionManager:
        self._check_running()
        transactions = self._transactions
        if transactions is None:
            raise IllegalStateError(
                f"{operation} needs a transactional producer: set transactional_id"
            )
        return transactions

    def _check_sendable(self) -> None:
        self._check_running()
        transactions = self._transactions
        if transactions is not None and transactions.state is not TransactionState.IN_TRANSACTION:
            transactions.check_send_allowed()

    @property
    def transaction_state(self) -> TransactionState | None:
        """Where the transaction state machine is; None without a ``transactional_id``."""
        return None if self._transactions is None else self._transactions.state

    async def begin_transaction(self) -> None:
        """Open a transaction: records sent until the commit or abort belong to it.

        Raises:
            IllegalStateError: no ``transactional_id``, a transaction is open already, or the
                previous one has not finished committing or aborting.
            ProducerFencedError: another producer with the same transactional id took over
                (fatal: only ``close()`` is left).
        """
        self._require_transactions("begin_transaction()").begin_transaction()

    async def commit_transaction(self) -> None:
        """Send every buffered record of the transaction, then commit it (EndTxn).

        Waits up to ``max_block_ms``; on a :class:`~aioproducer.errors.RequestTimedOutError`
        the commit goes on, and calling ``commit_transaction()`` again waits for it.

        Raises:
            KafkaError: a record of the transaction failed, or the coordinator refused it: the
                transaction must be aborted with :meth:`abort_transaction`.
            ProducerFencedError: another producer with the same transactional id took over
                (fatal: only ``close()`` is left).
            IllegalStateError: no transaction is open.
        """
        transactions = self._require_transactions("commit_transaction()")
        future = transactions.begin_commit()
        assert self._sender is not None
        self._sender.wakeup()
        await self._wait_transactional(future, "commit_transaction()")

    async def prepare_transaction(self) -> PreparedTransaction:
        """Flush the open transaction and stop short of committing it: the first phase of a
        two-phase commit (Java's ``prepareTransaction``, KIP-939).

        Every record of the transaction is sent and acknowledged, every partition and offset
        added to it; it is then neither committed nor aborted. The producer may still
        :meth:`commit_transaction` or :meth:`abort_transaction` it, or be closed with the
        transaction left open (:meth:`close` aborts an open transaction, not a prepared
        one), so that another process completes it from the returned
        :class:`~aioproducer.PreparedTransaction` with
        :func:`~aioproducer.complete_prepared_transaction`.

        Limits: the transaction coordinator aborts a transaction open longer than
        ``transaction_timeout_ms`` (counted from its first record), prepared or not, and a
        producer started later with the same ``transactional_id`` aborts it too (that is
        how a retry fences a failed attempt). Completing it after either fails with a clear
        error; nothing is committed. Kafka's own prepared state that survives the timeout
        (KIP-939, ``transaction.two.phase.commit.enable``) is not used: Kafka 4.4 still
        marks the InitProducerId version it needs (v6) unstable.

        Raises:
            IllegalStateError: no transaction is open, or an offset commit of it was not
                awaited.
            KafkaError: a record of the transaction failed: abort it.
            ProducerFencedError: a newer producer with the same transactional id took over.
        """
        transactions = self._require_transactions("prepare_transaction()")
        transactions.check_prepare_allowed()
        await self.flush()
        # The records are done, but a batch that expired in flight may still be on the wire
        # (the broker may yet write it): prepared means nothing of the transaction is out.
        await self._wait_transactional(
            self._accumulator.wait_until_complete(),
            "prepare_transaction() waiting for the transaction's requests still in flight",
        )
        return transactions.prepare_transaction(
            has_incomplete_batches=self._accumulator.has_incomplete()
        )

    async def abort_transaction(self) -> None:
        """Abort the open transaction: records not yet sent fail with
        :class:`~aioproducer.errors.TransactionAbortedError`, records already written
        are never seen by consumers reading committed data.

        Works after an abortable error (which makes a commit raise); afterwards the producer
        can begin a new transaction. Waits up to ``max_block_ms`` like
        :meth:`commit_transaction`.

        Raises:
            ProducerFencedError: another producer with the same transactional id took over.
            IllegalStateError: no transaction is open.
        """
        transactions = self._require_transactions("abort_transaction()")
        future = transactions.begin_abort()
        assert self._sender is not None
        self._sender.wakeup()
        await self._wait_transactional(future, "abort_transaction()")

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[Any, Any],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit a consumer group's offsets as part of the transaction (consume-transform-
        produce): they take effect only if the transaction commits.

        Args:
            offsets: ``{(topic, partition): offset}``, the offset of the next record to
                consume from each input partition; keys may also be objects with ``topic``
                and ``partition`` attributes (confluent-kafka's ``TopicPartition``), values
                ``(offset, metadata)`` pairs, ``(offset, metadata, leader_epoch)`` triples or
                objects with ``offset``, ``metadata`` and ``leader_epoch`` attributes. The
                leader epoch the consumer saw (from a key or a value) is committed with the
                offset, as the Java client's ``OffsetAndMetadata`` does.
            group_metadata: the consumer's :class:`~aioproducer.ConsumerGroupMetadata`
                (KIP-447: the coordinator then rejects a commit from a member fenced by a
                rebalance), or a plain group id. Objects with a ``group_id`` attribute (and
                ``generation_id``, ``member_id``, ``group_instance_id``) work too.

        Raises:
            IllegalStateError: no transaction is open.
            KafkaError: the coordinator refused the offsets (for example, the member was
                fenced by a rebalance): the transaction must be aborted.
            ProducerFencedError: another producer with the same transactional id took over.
        """
        transactions = self._require_transactions("send_offsets_to_transaction()")
        normalized = normalize_offsets(offsets)
        group = consumer_group_metadata(group_metadata)
        future = transactions.send_offsets(normalized, group)
        assert self._sender is not None
        self._sender.wakeup()
        await self._wait_transactional(future, "send_offsets_to_transaction()")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Producer]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, and aborts it (then re-raises) when the block raises.

        A commit that fails with an abortable error is aborted too, and its error raised.
        """
        await self.begin_transaction()
        try:
            yield self
        except BaseException as exc:
            await self._abort_after(exc)
            raise
        try:
            await self.commit_transaction()
        except KafkaError as exc:
            if self.transaction_state is TransactionState.ABORTABLE_ERROR:
                await self._abort_after(exc)
            raise

    async def _abort_after(self, exc: BaseException) -> None:
        transactions = self._transactions
        if (
            transactions is None
            or self._state is not ProducerState.RUNNING
            or transactions.state is TransactionState.FATAL_ERROR
            or not transactions.in_transaction
        ):
            return
        try:
            await self.abort_transaction()
        except ProducerFencedError as fenced:
            # The caller needs to know first that this producer is done for: a newer one
            # with the same transactional id took over (the leader's INVALID_PRODUCER_EPOCH
            # that failed a record, KIP-588, says no more than that).
            raise fenced from exc
        except Exception as abort_error:
            # The original error is what the caller needs; this one is logged.
            log.warning("aborting the transaction after %r failed as well: %s", exc, abort_error)

    # ---- sending ----------------------------------------------------------------------------

    def _check_loop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if loop is asyncio.get_running_loop():
            # The loop may run in another thread than it started in: send() tests this one.
            if self._appender is not None:
                self._appender.loop_thread = get_ident()
        elif self._state is not ProducerState.CLOSED:
            # (A closed producer says that it is closed, whatever the loop.)
            raise _other_loop_error(loop)

    def _check_running(self) -> None:
        self._check_loop()
        if self._state is not ProducerState.RUNNING:
            if self._state is ProducerState.CREATED:
                raise IllegalStateError("the producer is not started: call `await start()` first")
            raise ProducerClosedError("cannot send: the producer is closed")
        # Copies: the sender's fatal error also failed the pending batches, and raised here
        # as is, it would take the caller's frame (and the record futures it holds) into its
        # traceback, a cycle through futures the GC does not track (aioproducer._core.gc).
        if self._fatal is not None:
            raise error_copy(self._fatal)
        sender = self._sender
        if sender is not None and sender.fatal_error is not None:
            raise error_copy(sender.fatal_error)

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """Add a record to the buffer; return a future of its :class:`RecordMetadata`.

        Returns as soon as the record is buffered: await the returned future for the broker's
        acknowledgement. Waits (up to ``max_block_ms``) only for topic metadata or buffer
        memory. The arguments are aiokafka's ``send()``'s, in its order. A None ``key`` or
        ``value`` stays None, whatever the serializers.

        Raises:
            SerializationError: key or value not bytes-like and no serializer set, a
                serializer failed or returned something not bytes-like, or the headers are
                not ``(str, bytes-like or None)`` pairs.
            InvalidArgumentTypeError: ``timestamp_ms`` or ``partition`` not an int (or None).
            InvalidArgumentError: ``timestamp_ms`` outside 0 to 2**63-1, or a negative
                ``partition``.
            InvalidTopicError: illegal topic name (nothing is sent).
            RecordTooLargeError: the record exceeds ``max_request_size`` or ``buffer_memory``.
            BufferExhaustedError: no buffer memory within ``max_block_ms``.
            UnknownTopicOrPartitionError: no metadata for the topic within ``max_block_ms``,
                or the partition is out of range.
            ProducerClosedError: the producer is closing or closed.
            IllegalStateError: a transactional producer with no open transaction.
        """
        # Everything that needs no waiting runs natively in the appender (send_now); this
        # coroutine only waits when the record must (or when sends are traced).
        try:
            result = self._send_now(topic, value, key, partition, timestamp_ms, headers)
        except SerializerNotReady as not_ready:
            return await self._append_when_serializable(self._appender, not_ready)
        if result:
            return result
        return await self._send_later(result, topic, value, key, partition, timestamp_ms, headers)

    async def try_send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """:meth:`send`, except that a full buffer fails at once instead of waiting.

        When ``buffer_memory`` has no room for the record (and other sends already wait for
        it), this raises :class:`~aioproducer.errors.BufferExhaustedError` at once, where
        ``send()`` would wait up to ``max_block_ms`` for memory to free up: for a service
        that would rather shed load (answer 503, drop a metric) than make its caller wait.
        It still waits, up to ``max_block_ms``, for a topic's metadata the first time the
        topic is used, as franz-go's ``TryProduce`` does. ``max_block_ms=0`` makes every
        send fail at once instead, metadata waits included.

        Raises:
            BufferExhaustedError: no buffer memory free now; nothing was buffered.
            KafkaError: anything else :meth:`send` raises.
        """
        try:
            result = self._send_now(topic, value, key, partition, timestamp_ms, headers)
        except SerializerNotReady as not_ready:
            return await self._append_when_serializable(self._appender, not_ready, False)
        if result:
            return result
        return await self._send_later(
            result, topic, value, key, partition, timestamp_ms, headers, wait_for_memory=False
        )

    def _send_unstarted(self, *args: Any) -> RecordFuture | PendingRecord | None:
        self._check_sendable()  # not started: raises
        raise AssertionError("unreachable: a started producer has an appender")

    def _produce_unstarted(self, *args: Any) -> ProduceLater | None:
        self._check_sendable()  # not started: raises
        raise AssertionError("unreachable: a started producer has an appender")

    def _telemetry_changed(self) -> None:
        # aioproducer.telemetry.attach() gave or took this producer's telemetry.
        if self._appender is not None:
            self._appender.traced = self._telemetry is not None

    async def _send_later(
        self,
        result: RecordFuture | PendingRecord | None,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        timestamp_ms: Any,
        headers: Any,
        wait_for_memory: bool = True,
    ) -> RecordFuture:
        # send()'s slow path: a record that waits for metadata or memory, or a traced send.
        appender = self._appender
        assert appender is not None
        if result is None:  # send_now leaves the record to tracing
            telemetry = self._telemetry
            if telemetry is not None:
                return await self._send_traced(
                    telemetry, appender, topic, value, key, partition, timestamp_ms, headers,
                    wait_for_memory,
                )
            # Tracing was taken away meanwhile (from another thread): send untraced.
            try:
                result = appender.append(topic, value, key, partition, timestamp_ms, headers)
            except SerializerNotReady as not_ready:
                return await self._append_when_serializable(appender, not_ready, wait_for_memory)
            if result:
                return result
        return await self._append_pending(result, wait_for_memory)

    async def _append_when_serializable(
        self,
        appender: RecordAppender | None,
        not_ready: SerializerNotReady,
        wait_for_memory: bool = True,
    ) -> RecordFuture:
        # send()'s slow path for a serializer that must fetch first (a schema's id).
        assert appender is not None  # only a started producer's serializers run
        deadline = time.monotonic() + self._max_block
        result = await self._resume_when_serializable(appender, not_ready, deadline)
        if result:
            return cast(RecordFuture, result)
        remaining = max(0.0, deadline - time.monotonic())
        return await appender.append_pending(result, remaining, wait_for_memory)

    async def _resume_when_serializable(
        self, appender: RecordAppender, not_ready: SerializerNotReady, deadline: float
    ) -> Any:
        """Wait for what the serializer must fetch (by ``deadline``, monotonic seconds), then
        take the record again from its serializers: what the appender's take returns."""
        while True:
            await wait_for_serializer(not_ready, deadline - time.monotonic())
            try:
                return appender.resume(not_ready)
            except SerializerNotReady as again:
                not_ready = again

    async def _append_pending(
        self, result: RecordFuture | PendingRecord, wait_for_memory: bool = True
    ) -> RecordFuture:
        # send()'s slow path: the record waits for memory or metadata.
        appender = self._appender
        assert appender is not None
        assert isinstance(result, PendingRecord)  # a record future is true (see PendingRecord)
        return await appender.append_pending(result, self._max_block, wait_for_memory)

    async def _send_traced(
        self,
        telemetry: SendTelemetry,
        appender: RecordAppender,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        timestamp_ms: Any,
        headers: Any,
        wait_for_memory: bool = True,
    ) -> RecordFuture:
        # send() with a span: it starts here, carries its context in the record's headers
        # and ends when the record is acknowledged or failed (or now, if send() raises).
        span = telemetry.start_send(topic, key, value, partition)
        try:
            headers = span.inject(headers)
            try:
                result = appender.append(topic, value, key, partition, timestamp_ms, headers)
            except SerializerNotReady as not_ready:
                result = await self._append_when_serializable(
                    appender, not_ready, wait_for_memory
                )
            future = result if result else await self._append_pending(result, wait_for_memory)
        except BaseException as exc:
            span.failed(exc)
            raise
        assert isinstance(future, RecordFuture)
        span.record_appended(future)
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """Send a record and wait for the broker's acknowledgement."""
        future = await self.send(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        return await future

    async def send_many(
        self, topic: str, items: Iterable[Any], *, partition: int | None = None
    ) -> BatchResults:
        """Buffer many records at once: the bulk path.

        ``items`` holds values, ``(key, value)`` tuples, or :class:`ProducerRecord` objects
        (whose own topic, partition, timestamp and headers are used). Returns a
        :class:`BatchResults`: await it for a :class:`~aioproducer.RecordMetadataSequence` of each
        record's :class:`RecordMetadata`, in order; its ``futures`` attribute has each
        record's future.

        Raises:
            KafkaError: what :meth:`send` raises, for the first item that cannot be
                buffered (a negative ``partition`` argument is refused before any item).
                Its message starts with ``send_many item N:``, and its ``accepted``
                attribute is the :class:`BatchResults` of the items before it, which were
                buffered and are being sent; the items after it were not taken.
        """
        return await self._send_many(topic, items, partition, int(time.time() * 1000))

    async def _send_many(
        self, topic: str, items: Iterable[Any], partition: int | None, now_ms: int
    ) -> BatchResults:
        # send_many() with the time that stamps the items without a timestamp of their own
        # (SyncProducer passes the time of the call, in its thread).
        appender = self._appender
        if appender is None:
            self._check_sendable()  # not started: raises
            raise AssertionError("unreachable: a started producer has an appender")
        self._check_loop()
        appender.check_sendable()
        topic = appender.validate_topic(topic)
        partition = check_partition(partition)
        rows: Any = items if type(items) is _BINARY_PAIRS and self._telemetry is None else None
        if rows is not None and appender.takes_rows(partition, rows.keyless()):
            # The Spark data source's chunk: the keys (if any) and values of an Arrow batch,
            # encoded from its buffers (see aioproducer/_native/arrowcols.c).
            sequence: list[Any] = []
        else:
            rows = None
            # A list (a tuple too is copied): the bulk paths index it natively when compiled.
            sequence = items if type(items) is list else list(items)
        span: SendSpan | None = None
        if self._telemetry is not None:
            # One span for the call; each record carries its context (see telemetry.py).
            span = self._telemetry.start_send_many(topic, len(sequence), partition)
            sequence = span.inject_items(topic, sequence)
        results = BatchResults()
        index = run_end = 0
        total = len(sequence) if rows is None else len(rows)
        try:
            while index < total:
                if rows is not None:
                    index = appender.append_rows(topic, partition, now_ms, rows, index, results)
                    if index >= total:
                        break
                    # A keyed batch's row without a key, a row that starts a batch of
                    # key-less rows, or one that waits for metadata or memory: the general
                    # path, as a (key, value) tuple.
                    pending = appender.prepare_item(topic, partition, rows[index], now_ms, results)
                    index += 1
                else:
                    try:
                        index, run_end, pending = appender.append_many(
                            topic, partition, now_ms, sequence, index, run_end, results
                        )
                    except SerializerNotReady as not_ready:
                        # The item after those in results waits for its serializer; then it
                        # joins them (or waits for metadata or memory), and the next one goes.
                        index = run_end = len(results) + 1
                        deadline = time.monotonic() + self._max_block
                        pending = await self._resume_when_serializable(
                            appender, not_ready, deadline
                        )
                if pending is not None:
                    future = await appender.append_pending(pending, self._max_block)
                    results.add_future(future)
        except BaseException as exc:
            if isinstance(exc, KafkaError):
                # The items before the refused one are buffered: say which item it was, and
                # hand the caller those records' results.
                refused = len(results)
                exc.args = (f"send_many item {refused}: {exc.message}", *exc.args[1:])
                exc.accepted = results
            if span is not None:
                span.failed(exc)
            raise
        if span is not None:
            span.records_appended(results)
        return results

    # ---- confluent-kafka style: produce, poll, init_transactions -------------------------------

    async def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Mapping[str, bytes | str | None] | Sequence[tuple[str, Any]] | None = None,
        *,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Buffer a record the way confluent-kafka's ``produce()`` does; its delivery
        callback runs later, in :meth:`poll`, :meth:`flush` or :meth:`close`.

        The arguments are confluent-kafka's: ``partition=-1`` lets the partitioner choose,
        ``timestamp=0`` means now (milliseconds since the epoch otherwise), ``headers`` is a
        dict or a list of ``(name, value)`` pairs, and ``callback`` is another name for
        ``on_delivery``. As there, a str key, value or header value is encoded as UTF-8
        (a key or value only when no serializer is set for it).

        ``on_delivery(err, msg)`` is called once per record: ``err`` is None when the broker
        stored it, else the :class:`~aioproducer.errors.KafkaError` that failed it; ``msg``
        is a :class:`~aioproducer.DeliveredMessage` (``topic()``, ``partition()``,
        ``offset()``, ``key()``, ``value()``, ``error()``...). A callback that returns an
        awaitable (an ``async def`` callback) is awaited.

        Unlike confluent-kafka's, this is a coroutine, as ``confluent_kafka.aio``'s is:
        ``await producer.produce(...)``. It returns as soon as the record is buffered,
        waiting only for topic metadata or buffer memory, up to ``max_block_ms``, where
        confluent-kafka would raise ``BufferError`` at once. It returns nothing: the
        callback is how the outcome is told (:meth:`send` returns a future to await
        instead).

        Raises:
            KafkaError: what :meth:`send` raises (then no callback is called).
            InvalidArgumentTypeError: ``on_delivery`` is not callable, or both
                ``on_delivery`` and ``callback`` are given.
        """
        if type(self).send is _PRODUCER_SEND and "send" not in self.__dict__:
            # Not for a subclass with its own send() (InMemoryProducer), nor a send()
            # wrapped or patched in (an APM tool's, a test's mock): those are called.
            # send()'s steps, without a coroutine of its own: the argument checks, the loop
            # and state checks and the append run natively in produce_now, which also
            # leaves the record's report with the batch it joined.
            later = self._produce_now(
                topic, value, key, partition, on_delivery, timestamp, headers, callback
            )
            if later is None:
                return
            await self._produce_later(later)
            return
        report = check_delivery_callback(on_delivery, callback)
        key, value, chosen, timestamp_ms, checked = confluent_arguments(
            key, value, partition, timestamp, headers, self._key_serializer, self._value_serializer
        )
        future = await self.send(
            topic, value, key, partition=chosen, timestamp_ms=timestamp_ms, headers=checked
        )
        if report is not None:
            # The future stays here: only the callback tells the outcome (a future handed
            # out could be cancelled, which would detach it from the record's delivery).
            message = DeliveredMessage(topic, value, key, chosen, checked)
            self._reports.track(message, report, future)

    async def _produce_later(self, later: ProduceLater) -> None:
        # produce()'s slow path: a record that waits for metadata, memory or its
        # serializer, or a traced one; its report then waits for its future.
        if later.not_ready is not None:
            future = await self._append_when_serializable(self._appender, later.not_ready)
        else:
            future = later.result or await self._send_later(
                later.result, later.topic, later.value, later.key, later.partition,
                later.timestamp_ms, later.headers,
            )
        if later.report is None:
            return
        batch = future._batch
        if not (batch.final or batch.split):
            # Appended just now, with no wait since: its report joins the batch's others,
            # in the order of the batch's records. Waiting on its future instead would
            # report it after every record of a batch whose reports were watched first,
            # those appended after it included.
            self._reports.pend_record(future, later.report, later.key, later.value, later.headers)
            return
        message = DeliveredMessage(
            later.topic, later.value, later.key, later.partition, later.headers
        )
        self._reports.track(message, later.report, future)

    async def poll(self, timeout: float | None = 0.0) -> int:
        """Run the delivery callbacks of :meth:`produce` records that are done; return how
        many ran.

        As confluent-kafka's ``poll()``: with nothing to report it waits up to ``timeout``
        seconds for a report (0, the default, does not wait; None or a negative number
        waits as long as it takes), and returns 0 at once when no ``produce()`` record is
        awaiting its report. The callbacks run here, in the calling task, one after the
        other; if one raises, its exception propagates and the reports after it wait for the
        next call.
        """
        self._check_loop()
        reports = self._reports
        if timeout is None or timeout < 0:
            await reports.wait(None)
        elif timeout > 0:
            await reports.wait(timeout)
        return await reports.serve_async()

    async def _serve_reports(self) -> int:
        # After flush() or close(): every record they waited for is done, but its future's
        # callbacks (which queue its report) may not have run yet.
        reports = self._reports
        reports.collect()
        return await reports.serve_async()

    async def init_transactions(self) -> None:
        """Initialize the transactional producer, under the Java and confluent-kafka name.

        :meth:`start` already does what Java's ``initTransactions()`` does (find the
        transaction coordinator, get the producer id and epoch, fence older producers with
        the same ``transactional_id``): on a producer not started yet this starts it; on a
        started one it has nothing left to do and returns.

        Raises:
            IllegalStateError: no ``transactional_id`` is set.
            KafkaError: what :meth:`start` raises.
        """
        if self._config.transactional_id is None:
            raise IllegalStateError(
                "init_transactions() needs a transactional producer: set transactional_id"
            )
        if self._state is ProducerState.CREATED:
            await self.start()
            return
        self._require_transactions("init_transactions()")

    def _intercept(self, record: ProducerRecord) -> ProducerRecord:
        return run_on_send(self._interceptors, record)

    def _on_batch_done(self, batch: ProducerBatch, exc: BaseException | None) -> None:
        for record in batch.record_futures():
            if exc is None:
                # Not result(): a future its caller cancelled (detached) raises there, yet
                # its record was delivered.
                metadata = record._acknowledged()
            else:
                metadata = RecordMetadata(
                    batch.topic,
                    batch.partition,
                    -1,
                    record.timestamp,
                    record.key_size,
                    record.value_size,
                )
            for interceptor in self._interceptors:
                try:
                    interceptor.on_acknowledgement(metadata, exc)
                except Exception:
                    log.exception("interceptor %r raised in on_acknowledgement", interceptor)

    # ---- flush, partitions, metrics -----------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until each record is acknowledged or failed.

        Then runs the delivery callbacks of :meth:`produce` records that are done, as
        confluent-kafka's ``flush()`` does (also when it times out).

        Raises:
            FlushTimeoutError: ``timeout`` seconds passed first (the records stay buffered).
        """
        self._check_loop()
        try:
            await self._flush(timeout)
        finally:
            if self._state is ProducerState.RUNNING:
                await self._serve_reports()

    async def _flush(self, timeout: float | None) -> None:
        self._check_running()
        accumulator = self._accumulator
        sender = self._sender
        assert sender is not None
        accumulator.begin_flush()
        sender.wakeup()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            pending = set(accumulator.pending_batches())
            while pending:
                futures = {batch.future for batch in pending}
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                _, not_done = await asyncio.wait(futures, timeout=remaining)
                if not_done:
                    raise FlushTimeoutError(
                        f"flush timed out after {timeout} s with {len(not_done)} batch(es) "
                        "not yet acknowledged"
                    )
                # Batches split because they were too large live on in smaller ones.
                pending = {b for b in accumulator.pending_batches() if b.split_from in pending}
        finally:
            accumulator.end_flush()

    def __len__(self) -> int:
        """The records not yet delivered, as confluent-kafka's ``len(producer)``: those
        buffered or in flight (sent, not yet acknowledged or failed), plus the delivery
        reports of :meth:`produce` records that :meth:`poll` has not served yet.

        So ``while len(producer): await producer.poll(0.1)`` waits until every record is
        done and its callback has run. A ``send()`` still waiting for metadata or for buffer
        memory has not handed its record over yet and is not counted. Read it on the
        producer's event loop. A producer is true whatever its length (``if producer:``
        does not test for records).
        """
        if self._state is ProducerState.CREATED:
            return 0
        reports = self._reports
        if reports.outstanding:
            # produce() records just done, whose futures' callbacks have not queued their
            # reports yet: counted as reports now, not dropped between the two counts.
            reports.collect()
        return self._accumulator.undelivered_records() + reports.ready

    def __bool__(self) -> bool:
        return True

    def purge(self, *, in_flight: bool = False) -> int:
        """Fail the records not yet sent with :class:`~aioproducer.errors.PurgedError`, at
        once, without closing the producer; return how many failed.

        Buffered records were never sent: their error says ``maybe_written`` False, except
        for those queued for a retry after an attempt whose outcome is unknown (``True``:
        that attempt may be in the topic). With ``in_flight=True``, records whose request is
        out fail too, with ``maybe_written`` True: the broker may still write them (the
        request completes in the background, and its buffer is freed then). The producer
        goes on taking records. Their buffer memory is free at once for ``send()`` calls
        that wait for it. Delivery callbacks of purged :meth:`produce` records run at the
        next :meth:`poll` or :meth:`flush`.

        An idempotent producer keeps its guarantees for later records: records sent after
        the purge to a partition that had purged records wait until that partition's
        requests still out have ended (at most ``request_timeout_ms``), and its sequences
        start afresh if the purge left a gap, as after a delivery timeout. In a
        transaction, the transaction can only be aborted afterwards
        (:meth:`commit_transaction` raises the purge's error).

        Raises:
            IllegalStateError: the producer is not started.
            ProducerClosedError: the producer is closed.
        """
        self._check_running_state()
        sender = self._sender
        assert sender is not None
        purged = sender.purge(in_flight)
        # The purged produce() records' reports are ready for the next poll() at once.
        self._reports.collect()
        return purged

    def _dropped_before_append(self, error: BaseException | None) -> None:
        # A record meant for this producer failed before it was appended (purged from a
        # SyncProducer's queue): the open transaction cannot commit without it.
        transactions = self._transactions
        if transactions is not None and transactions.in_transaction:
            transactions.transition_to_abortable(
                error if isinstance(error, KafkaError) else PurgedError("a record was purged")
            )

    def _check_running_state(self) -> None:
        self._check_loop()
        if self._state is ProducerState.CREATED:
            raise IllegalStateError("the producer is not started: call `await start()` first")
        if self._state is ProducerState.CLOSED:
            raise ProducerClosedError("the producer is closed")

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic``, waiting up to ``max_block_ms`` for its metadata."""
        self._check_running()
        validate_topic(topic)
        appender = self._appender
        assert appender is not None  # a running producer has one
        info = await appender.wait_for_topic(topic, None, time.monotonic() + self._max_block)
        return [p.partition for p in info.partitions]

    def metrics(self) -> dict[str, float]:
        """Producer-wide metrics (the ``producer-metrics`` group) by their Java names (see the
        metrics page); :meth:`metrics_detailed` adds the per-topic and per-broker ones.
        Empty before :meth:`start`."""
        if self._state is ProducerState.CREATED:
            return {}
        return self._producer_metrics(self._connections.in_flight_by_node())

    def _producer_metrics(self, in_flight: dict[int, int]) -> dict[str, float]:
        stats = self._pool.statistics()
        metrics = self._metrics.snapshot(
            stats.available_bytes,
            stats.total_bytes,
            stats.wait_time_total_s,
            stats.waiters,
            sum(in_flight.values()),
        )
        metrics.update(self._connections.statistics())
        return metrics

    def metrics_detailed(self) -> list[Metric]:
        """Every metric as a :class:`~aioproducer.metric_catalog.Metric`: its Java name,
        group, tags, value, unit, kind and meaning, as the Java client's ``metrics()``.

        The producer-wide metrics of :meth:`metrics` (group ``producer-metrics``), then one
        set per topic the producer sent to (``producer-topic-metrics``, tag ``topic``) and
        per broker it talked to (``producer-node-metrics``, tag ``node-id``: ``node-<id>``).
        Every entry carries the ``client-id`` tag. Reading them costs nothing on the send
        path: the counters are kept per batch and per request. Empty before :meth:`start`.
        Like :meth:`metrics`, it may be called from another thread (a Prometheus server's).
        """
        if self._state is ProducerState.CREATED:
            return []
        client_id = self._config.client_id
        in_flight = self._connections.in_flight_by_node()
        entries = metric_entries(
            PRODUCER_GROUP, {"client-id": client_id}, self._producer_metrics(in_flight)
        )
        for topic, values in sorted(self._metrics.topic_snapshots().items()):
            tags = {"client-id": client_id, "topic": topic}
            entries += metric_entries(TOPIC_GROUP, tags, values)
        for node, values in sorted(self._metrics.node_snapshots().items()):
            values["requests-in-flight"] = float(in_flight.get(node, 0))
            tags = {"client-id": client_id, "node-id": node_tag(node)}
            entries += metric_entries(NODE_GROUP, tags, values)
        return entries

    # ---- topics -----------------------------------------------------------------------------

    @property
    def admin(self) -> TopicAdmin:
        """Create, describe and delete topics over this producer's connections: a
        :class:`~aioproducer.TopicAdmin`, such as ``await
        producer.admin.ensure_topics([NewTopic("orders", num_partitions=6)])``.

        Raises:
            IllegalStateError: the producer is not started, or runs on another event loop.
            ProducerClosedError: the producer is closed.
        """
        self._check_running()
        return TopicAdmin(
            broker_topics(self._connections, self._metadata, self._config, self._wake_sender),
            timeout=self._max_block,
            check_running=self._check_running,
        )


def _other_loop_error(loop: asyncio.AbstractEventLoop) -> IllegalStateError:
    """The error for a producer used from an event loop other than the one it started on."""
    if loop.is_closed():
        return IllegalStateError(
            "this producer belongs to an event loop that is closed now (each asyncio.run() "
            "makes a new loop): create and start the producer inside the loop that uses it, "
            "for example in the same asyncio.run()"
        )
    return IllegalStateError(
        "this producer belongs to another event loop (the one its start() ran on): its "
        "connections, tasks and futures live there. From another thread, use "
        "aioproducer.SyncProducer, which any thread may call; or create one Producer per "
        "event loop"
    )


def run_on_send(interceptors: Sequence[Any], record: ProducerRecord) -> ProducerRecord:
    """``record`` through each interceptor's ``on_send``, in order. One that raises is
    logged and skipped; one that returns something other than a ProducerRecord leaves the
    record as it was."""
    for interceptor in interceptors:
        try:
            result = interceptor.on_send(record)
        except Exception:
            log.exception("interceptor %r raised in on_send; the record goes on", interceptor)
            continue
        if isinstance(result, ProducerRecord):
            record = result
    return record


def _cancelling(sender_task: asyncio.Task[Any]) -> bool:
    """True when a CancelledError that reached close() is a cancellation of close() itself
    rather than the finished sender's own."""
    current = asyncio.current_task()
    cancelling = getattr(current, "cancelling", None)  # Python 3.11+
    if cancelling is not None:
        return bool(cancelling())
    # Python 3.10: a sender that was not cancelled itself cannot have raised it.
    return not sender_task.cancelled()


# produce() takes send()'s steps itself only while send() is this one (see produce()).
_PRODUCER_SEND = Producer.send


def _load_binary_pairs() -> type | None:
    try:
        from aioproducer._native.arrowcols import BinaryPairs
    except ImportError:  # the pure-Python install: no Spark chunk comes as BinaryPairs
        return None
    return BinaryPairs


_BINARY_PAIRS = _load_binary_pairs()
