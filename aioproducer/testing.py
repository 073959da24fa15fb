"""Test your own code without a Kafka broker: :class:`InMemoryProducer`.

``InMemoryProducer`` is a :class:`~aioproducer.Producer` that keeps what it is sent in
memory instead of sending it to a cluster. Code that takes a ``Producer`` takes it as is::

    from aioproducer.testing import InMemoryProducer

    async def test_publishes_an_order() -> None:
        async with InMemoryProducer(topics={"orders": 3}) as producer:
            await publish_order(producer, order_id="o-1")        # your code
        [record] = producer.records("orders")
        assert record.key == b"o-1"

What it shares with the real producer, so that a test fails where production would:

- the configuration: the same options, validated the same way (an unknown option is a
  :class:`~aioproducer.errors.ConfigurationError` here too), with the same serializers,
  interceptors and partitioner;
- the checks of each record (topic name, partition, timestamp, headers, serializer output,
  ``max_request_size``), raising the same errors with the same messages;
- the partitioner: keyed records land on the partition Kafka's default partitioner (murmur2)
  picks for the topic's partition count;
- the lifecycle (sending before ``start()`` or after ``close()`` raises) and the transaction
  state machine (sending outside a transaction, committing after a failed record, ...);
- what comes back: :class:`~aioproducer.RecordFuture` per record, a
  :class:`~aioproducer.BatchResults` from ``send_many``, :class:`~aioproducer.RecordMetadata`
  with offsets counted per partition from 0.

What it does not do: connect, batch, linger, compress, retry or time out. Each record is
acknowledged as soon as it is sent (its future is done when ``send`` returns), unless the
producer is made with ``auto_complete=False``: records then wait for the test to
acknowledge or fail them (:meth:`InMemoryProducer.complete_next`,
:meth:`InMemoryProducer.fail_pending`). Failures happen only when a test asks for them, with
those or with :meth:`InMemoryProducer.fail_next`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aioproducer._core.accumulator import ProducerBatch
from aioproducer._core.appender import (
    PreparedRecord,
    RecordPreparer,
    check_record_size,
    name_send_many_item,
    partitioner_error,
    record_size,
)
from aioproducer._core.delivery import DeliveryCallback
from aioproducer._core.futures import BatchResults, RecordFuture, error_copy
from aioproducer._core.metadata import Metadata, validate_topic
from aioproducer._core.metrics import CONNECTION_METRICS, ProducerMetrics
from aioproducer._core.transactions import (
    _FATAL_BATCH_ERRORS,
    TransactionStates,
    consumer_group_metadata,
    normalize_offsets,
)
from aioproducer.admin import (
    NewTopic,
    PartitionDescription,
    TopicAdmin,
    TopicCreation,
    TopicDescription,
)
from aioproducer.errors import (
    ConfigurationError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    KafkaError,
    ProducerClosedError,
    PurgedError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from aioproducer.metric_catalog import PRODUCER_GROUP, TOPIC_GROUP, Metric, metric_entries
from aioproducer.producer import Producer, ProducerState
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.protocol.record_batch import RECORD_BATCH_OVERHEAD, RecordBatchBuilder
from aioproducer.records import (
    ConsumerGroupMetadata,
    Header,
    PreparedTransaction,
    RecordMetadata,
    TransactionState,
    check_partition,
)
from aioproducer.serialization import SerializerNotReady, wait_for_serializer

__all__ = ["InMemoryProducer", "StoredRecord"]

log = logging.getLogger("aioproducer.testing")

TopicPartition = tuple[str, int]

# What a record of a transactional producer is, in the log of its partition.
_COMMITTED = "committed"
_OPEN = "open"
_ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as an :class:`InMemoryProducer` stored it: what a consumer would read.

    Attributes:
        topic: the topic.
        partition: the partition (the one Kafka's partitioner would pick, for a keyed
            record sent without one).
        offset: its offset in the partition, counted from 0.
        timestamp: the create time in milliseconds (the producer's clock when the record
            was sent without one).
        key: the serialized key, or None.
        value: the serialized value, or None (a tombstone).
        headers: the headers as ``(name, value)`` pairs, in order.
        transactional: True when it was sent inside a transaction.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    transactional: bool = False


class _Entry:
    """A stored record and where its transaction is (committed, open or aborted)."""

    __slots__ = ("record", "status")

    def __init__(self, record: StoredRecord, status: str) -> None:
        self.record = record
        self.status = status


class _Pending:
    """A record sent and not acknowledged yet: its batch (which its future reads), the record
    to store (its offset still -1), and the failure :meth:`InMemoryProducer.fail_next` set
    for it."""

    __slots__ = ("batch", "error", "record")

    def __init__(self, batch: ProducerBatch, record: StoredRecord, error: KafkaError | None):
        self.batch = batch
        self.record = record
        self.error = error

    @property
    def key_size(self) -> int:
        return -1 if self.record.key is None else len(self.record.key)

    @property
    def value_size(self) -> int:
        return -1 if self.record.value is None else len(self.record.value)


@dataclass
class _Fault:
    """Fail the next ``remaining`` records (to ``topic``, or to any topic) with ``error``:
    from ``send`` itself when ``on_send``, else through their futures. ``origin`` names
    the method that asked for it."""

    error: KafkaError | type[KafkaError]
    remaining: int
    topic: str | None
    on_send: bool
    origin: str = "fail_next"

    def make(self) -> KafkaError:
        error = self.error
        if isinstance(error, KafkaError):
            # A copy per record: send_many adds the item's number to the message it raises;
            # it keeps what the given error says of the record (maybe_written).
            copy = error_copy(error, fresh=True)
            copy.maybe_written = error.maybe_written
            return copy
        return error(f"failed by InMemoryProducer.{self.origin}()")


class InMemoryProducer(Producer):
    """A :class:`~aioproducer.Producer` that keeps records in memory: for tests, no broker.

    It takes the producer's options (``bootstrap_servers`` among them, unused) and validates
    them as the producer does; serializers, interceptors, ``partitioner``,
    ``max_request_size`` and ``transactional_id`` work as they do there. Records are
    checked as ``send`` checks them, stored with offsets counted per partition, and their
    futures are done at once (unless ``auto_complete=False``). Read them back with
    :meth:`records`.

    Args:
        config: producer options by snake_case or Java name, as for ``Producer``.
        topics: the topics that exist: a mapping of name to partition count, or names
            (each with ``default_partitions``).
        default_partitions: the partition count of a topic created on first use.
        auto_create_topics: create a topic the first time a record is sent to it (as a
            broker with ``auto.create.topics.enable`` does); when False, sending to a topic
            not in ``topics`` (nor made with :meth:`create_topic`) raises
            :class:`~aioproducer.errors.UnknownTopicOrPartitionError`.
        auto_complete: acknowledge each record as it is sent. When False, records stay
            pending (their futures not done, nothing stored) until the test calls
            :meth:`complete_next` or :meth:`fail_pending`, or until ``flush()``,
            ``commit_transaction()`` or ``close()``, which deliver them as the producer
            would.
        **options: producer options by snake_case name; they win over ``config``.

    Raises:
        ConfigurationError: an invalid producer option, or a partition count below 1.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        topics: Mapping[str, int] | Iterable[str] | None = None,
        default_partitions: int = 1,
        auto_create_topics: bool = True,
        auto_complete: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(config, **options)
        # The producer's own preparation of a record: interceptors, checks, serializers.
        self._preparer = RecordPreparer(
            key_serializer=self._key_serializer,
            value_serializer=self._value_serializer,
            intercept=self._intercept if self._interceptors else None,
        )
        self._auto_complete = auto_complete
        self._pending: deque[_Pending] = deque()
        self._default_partitions = _partition_count(default_partitions, "default_partitions")
        self._auto_create = auto_create_topics
        self._topics: dict[str, int] = {}
        # What topics made through `admin` were made with (ids, replication, configs).
        self._topic_details: dict[str, _TopicDetails] = {}
        if isinstance(topics, str):
            raise ConfigurationError(
                f"topics must be a mapping of names to partition counts or a list of names, "
                f"not the str {topics!r}"
            )
        if isinstance(topics, Mapping):
            for name, count in topics.items():
                self.create_topic(name, count)
        elif topics is not None:
            for name in topics:
                self.create_topic(name)
        self._next_offsets: dict[TopicPartition, int] = {}
        self._entries: list[_Entry] = []
        self._faults: list[_Fault] = []
        self._metrics = ProducerMetrics(self._config.metrics_sample_window_ms / 1000.0)
        self._running_loop: asyncio.AbstractEventLoop | None = None
        # The producer's own transaction state machine, driven without a coordinator.
        transactional_id = self._config.transactional_id
        self._txn: TransactionStates | None = (
            None if transactional_id is None else TransactionStates(transactional_id)
        )
        self._txn_partitions: set[TopicPartition] = set()
        self._txn_offsets: dict[str, dict[TopicPartition, int]] = {}
        self._committed_offsets: dict[str, dict[TopicPartition, int]] = {}
        self._transactions_committed = 0
        self._transactions_aborted = 0

    def __repr__(self) -> str:
        return (
            f"<InMemoryProducer client_id={self._config.client_id!r} "
            f"topics={len(self._topics)} records={len(self._entries)} "
            f"state={self._state.value}>"
        )

    # ---- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions (``default_partitions`` when None).

        Raises:
            InvalidTopicError: an illegal topic name.
            ConfigurationError: a partition count below 1.
            IllegalStateError: the topic exists with another partition count.
        """
        topic = validate_topic(name)
        count = (
            self._default_partitions
            if partitions is None
            else _partition_count(partitions, f"the partition count of topic {topic!r}")
        )
        existing = self._topics.get(topic)
        if existing is not None and existing != count:
            raise IllegalStateError(
                f"topic {topic!r} exists already with {existing} partition(s), not {count}"
            )
        self._topics[topic] = count

    @property
    def topics(self) -> dict[str, int]:
        """The topics that exist, with their partition counts (a copy)."""
        return dict(self._topics)

    @property
    def admin(self) -> TopicAdmin:
        """A :class:`~aioproducer.TopicAdmin` over this producer's topics, as the real
        producer's is over its cluster's: ``create_topics``, ``ensure_topics``,
        ``describe_topics`` and ``delete_topics`` work on :attr:`topics`, with Kafka's
        errors (``TOPIC_ALREADY_EXISTS``, ``UNKNOWN_TOPIC_OR_PARTITION``).

        A topic made without a partition count gets ``default_partitions``. One broker,
        id 0, leads every partition; the replication factor asked for is only recorded
        (no broker count limits it). Deleting a topic forgets its offsets (a topic made
        again starts at 0); the records already stored stay readable.

        Raises:
            IllegalStateError: the producer is not started.
            ProducerClosedError: the producer is closed.
        """
        self._check_running()
        return TopicAdmin(
            _InMemoryTopics(self), timeout=self._max_block, check_running=self._check_running
        )

    def _partitions_of(self, topic: str) -> int:
        count = self._topics.get(topic)
        if count is not None:
            return count
        if not self._auto_create:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist in this InMemoryProducer: create it with "
                "topics= or create_topic(), or pass auto_create_topics=True"
            )
        self._topics[topic] = self._default_partitions
        return self._default_partitions

    # ---- what was sent ----------------------------------------------------------------------

    def records(self, topic: str | None = None, partition: int | None = None) -> list[StoredRecord]:
        """The records a consumer reading committed data would see, in the order sent.

        Records sent outside transactions, and those of committed transactions; not those
        of the open transaction (:meth:`uncommitted_records`) nor of aborted ones
        (:meth:`aborted_records`). ``topic`` and ``partition`` narrow the list.
        """
        return self._select(_COMMITTED, topic, partition)

    def uncommitted_records(
        self, topic: str | None = None, partition: int | None = None
    ) -> list[StoredRecord]:
        """The records of the transaction still open, in the order sent."""
        return self._select(_OPEN, topic, partition)

    def aborted_records(
        self, topic: str | None = None, partition: int | None = None
    ) -> list[StoredRecord]:
        """The records of aborted transactions: written, but never seen by a consumer
        reading committed data."""
        return self._select(_ABORTED, topic, partition)

    def history(self) -> list[StoredRecord]:
        """Every record stored, in the order sent, whatever became of its transaction."""
        return [entry.record for entry in self._entries]

    def _select(self, status: str, topic: str | None, partition: int | None) -> list[StoredRecord]:
        return [
            entry.record
            for entry in self._entries
            if entry.status == status
            and (topic is None or entry.record.topic == topic)
            and (partition is None or entry.record.partition == partition)
        ]

    @property
    def committed_offsets(self) -> dict[str, dict[TopicPartition, int]]:
        """The consumer offsets committed by transactions, by group id: ``{group_id:
        {(topic, partition): offset}}`` (a copy; a later commit replaces an offset)."""
        return {group: dict(offsets) for group, offsets in self._committed_offsets.items()}

    @property
    def transactions_committed(self) -> int:
        """How many transactions were committed."""
        return self._transactions_committed

    @property
    def transactions_aborted(self) -> int:
        """How many transactions were aborted (by ``abort_transaction()`` or by ``close()``)."""
        return self._transactions_aborted

    def clear(self) -> None:
        """Forget the records and committed offsets (topics and offsets already given out
        stay: the next record of a partition gets the next offset)."""
        self._entries.clear()
        self._committed_offsets.clear()

    # ---- faults -----------------------------------------------------------------------------

    def fail_next(
        self,
        error: KafkaError | type[KafkaError],
        count: int = 1,
        *,
        topic: str | None = None,
        on_send: bool = False,
    ) -> None:
        """Make the next ``count`` records sent (to ``topic``, or to any topic) fail.

        By default the failure is a delivery failure, as a broker's error would be: ``send``
        returns the record's future and the future raises ``error``; the record is not
        stored, and inside a transaction the transaction must then be aborted (a
        :class:`~aioproducer.errors.ProducerFencedError` is fatal, as it is for the real
        producer). With ``on_send=True``, ``send`` itself raises ``error``, as it does for a
        record it cannot buffer (:class:`~aioproducer.errors.BufferExhaustedError`, say).

        Rules made by several calls apply in the order they were made; a record is failed
        by the first rule that matches its topic.

        Args:
            error: an error instance, or a :class:`~aioproducer.errors.KafkaError` subclass
                (made with a message that says it was injected).
            count: how many records fail, at least 1.
            topic: only records to this topic fail; None for every topic.
            on_send: raise from ``send`` instead of failing the record's future.
        """
        _checked_error(error)
        if type(count) is not int or count < 1:
            raise InvalidArgumentError(f"count must be an int from 1, not {count!r}")
        checked_topic = None if topic is None else validate_topic(topic)
        self._faults.append(_Fault(error, count, checked_topic, on_send))

    def _take_fault(self, topic: str, on_send: bool) -> KafkaError | None:
        for fault in self._faults:
            if fault.on_send is on_send and (fault.topic is None or fault.topic == topic):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault.make()
        return None

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the producer; connects to nothing.

        Raises:
            IllegalStateError: the producer was started already.
        """
        if self._state is not ProducerState.CREATED:
            raise IllegalStateError(f"start() on a producer that is {self._state.value}")
        self._running_loop = asyncio.get_running_loop()
        self._state = ProducerState.RUNNING
        if self._txn is not None:
            # The producer id and epoch come at once: there is no coordinator to ask.
            self._txn.transition(TransactionState.INITIALIZING)
            self._txn.transition(TransactionState.READY)

    async def close(self, timeout: float | None = None) -> None:
        """Close the producer, as the real one does: an open transaction is aborted, and the
        pending records (``auto_complete=False``) are delivered, or with a ``timeout`` of 0
        or less fail with :class:`~aioproducer.errors.ProducerClosedError`. Calling close
        again is harmless.

        The records stay readable after closing.
        """
        if self._state is ProducerState.RUNNING:
            if self._txn is not None and self._txn.state in (
                TransactionState.IN_TRANSACTION,
                TransactionState.ABORTABLE_ERROR,
            ):
                log.info(
                    "transactional id %r: aborting the open transaction because the producer "
                    "is closing",
                    self._config.transactional_id,
                )
                self._abort(
                    TransactionAbortedError(
                        "the producer was closed with the transaction open, so it was aborted"
                    )
                )
            if timeout is not None and timeout <= 0:
                self._fail_all_pending(
                    ProducerClosedError("the producer was closed with timeout 0 before delivery")
                )
            self.complete_next(len(self._pending))
        self._state = ProducerState.CLOSED
        await self._serve_reports()

    async def stop(self, timeout: float | None = None) -> None:
        """:meth:`close` under aiokafka's name."""
        await self.close(timeout)

    async def __aenter__(self) -> InMemoryProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- sending ----------------------------------------------------------------------------

    def _check_sendable(self) -> None:
        self._check_running()
        if self._txn is not None:
            self._txn.check_send_allowed()

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """Check and store a record; return its future, done already.

        Raises what ``Producer.send`` raises for the same record (see
        :meth:`aioproducer.Producer.send`), and what :meth:`fail_next` asks for with
        ``on_send=True``.
        """
        self._check_sendable()
        try:
            prepared = self._preparer.prepare(topic, value, key, partition, timestamp_ms, headers)
        except SerializerNotReady as not_ready:
            prepared = await self._when_serializable(not_ready)
        return self._append(prepared)

    async def _when_serializable(self, not_ready: SerializerNotReady) -> PreparedRecord:
        # As Producer.send: the serializer's fetch is awaited within max_block_ms.
        deadline = time.monotonic() + self._config.max_block_ms / 1000.0
        while True:
            await wait_for_serializer(not_ready, deadline - time.monotonic())
            try:
                prepared: PreparedRecord = self._preparer.resume(not_ready)
                return prepared
            except SerializerNotReady as again:
                not_ready = again

    async def try_send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """As :meth:`send`: memory is never short here, so nothing differs."""
        return await self.send(topic, value, key, partition, timestamp_ms, headers)

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """Send a record and return its :class:`~aioproducer.RecordMetadata` (or raise the
        error :meth:`fail_next` set up)."""
        future = await self.send(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        return await future

    async def send_many(
        self, topic: str, items: Iterable[Any], *, partition: int | None = None
    ) -> BatchResults:
        """Store many records, as :meth:`aioproducer.Producer.send_many` takes them (values,
        ``(key, value)`` tuples, or :class:`~aioproducer.ProducerRecord` objects).

        Raises:
            KafkaError: as ``Producer.send_many``: for the first item that cannot be sent,
                with a message that starts with ``send_many item N:`` and the records of the
                items before it as its ``accepted`` attribute.
        """
        self._check_sendable()
        preparer = self._preparer
        topic = preparer.validate_topic(topic)
        partition = check_partition(partition)
        sequence = items if isinstance(items, list | tuple) else list(items)
        results = BatchResults()
        now_ms = int(time.time() * 1000)
        for index, item in enumerate(sequence):
            try:
                # Refused before its interceptors and serializers run, as by send().
                self._check_sendable()
                try:
                    prepared = preparer.prepare_item(topic, partition, item, now_ms)
                except SerializerNotReady as not_ready:
                    prepared = await self._when_serializable(not_ready)
                future = self._append(prepared)
            except KafkaError as exc:
                name_send_many_item(exc, index)
                exc.accepted = results
                raise
            results.add_future(future)
        return results

    def _append(self, prepared: PreparedRecord) -> RecordFuture:
        # The callers checked the state before preparing the record, as send() does.
        name, partition, timestamp, key_bytes, value_bytes, checked_headers = prepared
        check_record_size(
            record_size(key_bytes, value_bytes, checked_headers),
            self._config.max_request_size,
            self._config.buffer_memory,
        )
        count = self._partitions_of(name)
        sticky = False
        if partition is None:
            partition = self._choose_partition(name, key_bytes, count)
            sticky = key_bytes is None
        elif partition >= count:
            raise Metadata.partition_out_of_range_error(name, partition, count)
        # Where the producer would wait for buffer memory: its partition is known, and the
        # sticky partitioner is told of the record only once it is appended.
        fault = self._take_fault(name, on_send=True)
        if fault is not None:
            raise fault
        if sticky:
            self._tell_partitioner(name, partition, value_bytes)
        return self._deliver(name, partition, timestamp, key_bytes, value_bytes, checked_headers)

    def _choose_partition(self, topic: str, key: bytes | None, count: int) -> int:
        available = list(range(count))
        chosen: Any = self._partitioner.partition(topic, key, count, available)
        if type(chosen) is not int or not 0 <= chosen < count:
            raise partitioner_error(chosen, topic, count)
        return chosen

    def _tell_partitioner(self, topic: str, partition: int, value: bytes | None) -> None:
        # The sticky partitioner moves on once batch_size bytes went to its partition, as the
        # real producer tells it (RecordAppender.note_sticky_append); here no batch is ever
        # open, so the switch is always allowed.
        record_appended = getattr(self._partitioner, "record_appended", None)
        if record_appended is not None:
            size = (0 if value is None else len(value)) + 10
            record_appended(topic, partition, size, switch_allowed=True)

    def _deliver(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> RecordFuture:
        loop = self._running_loop
        assert loop is not None
        batch = ProducerBatch(
            topic,
            partition,
            RecordBatchBuilder(bytearray(RECORD_BATCH_OVERHEAD)),
            0,
            time.monotonic(),
            self._config.delivery_timeout_ms / 1000.0,
            loop,
        )
        record = _Pending(
            batch,
            StoredRecord(
                topic,
                partition,
                -1,
                timestamp,
                key,
                value,
                tuple(headers or ()),
                self._txn is not None,
            ),
            self._take_fault(topic, on_send=False),
        )
        future = RecordFuture(batch, 0, timestamp, record.key_size, record.value_size)
        if self._auto_complete:
            self._complete(record)
        else:
            self._pending.append(record)
        return future

    def _complete(self, pending: _Pending, error: KafkaError | None = None) -> None:
        """Acknowledge a record (store it, give it its offset) or fail it with ``error``
        or the failure :meth:`fail_next` set for it."""
        error = error or pending.error
        record = pending.record
        if error is not None:
            self._record_failed(error)
            self._drop(pending, error)
            return
        txn = self._txn
        if (
            record.transactional
            and txn is not None
            and txn.state in (TransactionState.ABORTABLE_ERROR, TransactionState.FATAL_ERROR)
        ):
            # As the sender drops the batches of a transaction that failed.
            assert txn.last_error is not None
            self._drop(pending, error_copy(txn.last_error, "the record was not sent", fresh=True))
            return
        tp = (record.topic, record.partition)
        offset = self._next_offsets.get(tp, 0)
        self._next_offsets[tp] = offset + 1
        stored = dataclasses.replace(record, offset=offset)
        self._entries.append(_Entry(stored, _OPEN if stored.transactional else _COMMITTED))
        if stored.transactional:
            self._txn_partitions.add(tp)
        # With acks=0 no broker says where the record went: the producer reports offset -1.
        reported = -1 if self._config.acks == 0 else offset
        pending.batch.complete(reported, -1)
        self._metrics.records_sent(stored.topic, 1, time.monotonic())
        self._acknowledge(
            RecordMetadata(
                stored.topic,
                stored.partition,
                reported,
                stored.timestamp,
                pending.key_size,
                pending.value_size,
            ),
            None,
        )

    def _drop(self, pending: _Pending, error: KafkaError) -> None:
        """Fail a record with ``error``; it is not stored."""
        record = pending.record
        pending.batch.fail(error)
        self._metrics.records_failed(record.topic, 1)
        self._acknowledge(
            RecordMetadata(
                record.topic,
                record.partition,
                -1,
                record.timestamp,
                pending.key_size,
                pending.value_size,
            ),
            error,
        )

    # ---- records not acknowledged yet (auto_complete=False) ------------------------------------

    @property
    def pending_count(self) -> int:
        """How many records were sent and are neither acknowledged nor failed yet (always 0
        with ``auto_complete``)."""
        return len(self._pending)

    def complete_next(self, count: int = 1) -> int:
        """Acknowledge the ``count`` oldest pending records, in the order sent: they are
        stored, get their offsets, and their futures resolve (or fail, if :meth:`fail_next`
        said so when they were sent). Returns how many there were.
        """
        done = 0
        while self._pending and done < count:
            self._complete(self._pending.popleft())
            done += 1
        return done

    def fail_pending(self, error: KafkaError | type[KafkaError], count: int = 1) -> int:
        """Fail the ``count`` oldest pending records with ``error`` (an instance or a
        :class:`~aioproducer.errors.KafkaError` subclass), as a broker's error would: they
        are not stored, and a transaction they belong to must be aborted. Returns how many
        there were."""
        fault = _Fault(_checked_error(error), 1, None, False, "fail_pending")
        done = 0
        while self._pending and done < count:
            self._complete(self._pending.popleft(), fault.make())
            done += 1
        return done

    def __len__(self) -> int:
        """As ``len()`` of a :class:`~aioproducer.Producer`: the pending records (with
        ``auto_complete=False``) plus the delivery reports :meth:`poll` has not served."""
        return len(self._pending) + self._reports.ready

    def purge(self, *, in_flight: bool = False) -> int:
        """As :meth:`Producer.purge <aioproducer.Producer.purge>`: the pending records fail
        with :class:`~aioproducer.errors.PurgedError` (``maybe_written`` False: here none is
        in flight, whatever ``in_flight`` says) and are not stored; a transaction they
        belong to can then only be aborted. Returns how many there were."""
        self._check_running_state()
        done = 0
        while self._pending:
            pending = self._pending.popleft()
            record = pending.record
            self._complete(
                pending,
                PurgedError(
                    f"purged a buffered record for {record.topic}-{record.partition} before "
                    "it was sent"
                ),
            )
            done += 1
        return done

    def _fail_all_pending(self, error: KafkaError, transactional_only: bool = False) -> None:
        kept: deque[_Pending] = deque()
        while self._pending:
            pending = self._pending.popleft()
            if transactional_only and not pending.record.transactional:
                kept.append(pending)
            else:
                self._drop(pending, error_copy(error, fresh=True))
        self._pending = kept

    def _acknowledge(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        for interceptor in self._interceptors:
            try:
                interceptor.on_acknowledgement(metadata, error)
            except Exception:
                log.exception("interceptor %r raised in on_acknowledgement", interceptor)

    def _record_failed(self, error: KafkaError) -> None:
        txn = self._txn
        if txn is None:
            return
        if isinstance(error, _FATAL_BATCH_ERRORS):
            txn.enter_fatal(error)
        elif txn.state is TransactionState.IN_TRANSACTION:
            txn.enter_abortable(error)

    # ---- flush, partitions, metrics ---------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:
        """Acknowledge every pending record (with ``auto_complete``, there are none), then
        return: once it returns, each record sent is acknowledged or failed.

        Raises:
            IllegalStateError: the producer is not started.
            ProducerClosedError: the producer is closed.
        """
        self._check_running()
        self.complete_next(len(self._pending))
        await self._serve_reports()

    # ---- confluent-kafka style ------------------------------------------------------------

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
        """:meth:`aioproducer.Producer.produce`: store the record; its delivery callback
        runs in :meth:`poll`, :meth:`flush` or :meth:`close`."""
        await Producer.produce(
            self, topic, value, key, partition, on_delivery, timestamp, headers, callback=callback
        )

    async def poll(self, timeout: float | None = 0.0) -> int:
        """:meth:`aioproducer.Producer.poll`: run the delivery callbacks of the records
        :meth:`produce` stored that are done; return how many ran."""
        # The records are acknowledged as they are stored, before their futures' callbacks
        # (which queue the reports) had a turn of the loop: queue the reports now.
        self._reports.collect()
        return await Producer.poll(self, timeout)

    async def init_transactions(self) -> None:
        """:meth:`aioproducer.Producer.init_transactions`: start a transactional producer
        that is not started yet.

        Raises:
            IllegalStateError: no ``transactional_id`` is set.
        """
        if self._config.transactional_id is None:
            raise IllegalStateError(
                "init_transactions() needs a transactional producer: set transactional_id"
            )
        if self._state is ProducerState.CREATED:
            await self.start()
            return
        self._transactional("init_transactions()")

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (created with ``default_partitions`` if
        ``auto_create_topics`` allows, as a broker creates a topic it is asked about).

        Raises:
            UnknownTopicOrPartitionError: the topic does not exist and is not auto-created.
        """
        self._check_running()
        return list(range(self._partitions_of(validate_topic(topic))))

    def metrics(self) -> dict[str, float]:
        """The producer's metric names; only the record counts move (``record-send-total``,
        ``record-error-total`` and their rates): nothing is batched or sent on a wire."""
        if self._state is ProducerState.CREATED:
            return {}
        memory = self._config.buffer_memory
        metrics = self._metrics.snapshot(memory, memory, 0.0, 0)
        metrics.update(dict.fromkeys(CONNECTION_METRICS, 0.0))
        return metrics

    def metrics_detailed(self) -> list[Metric]:
        """:meth:`metrics` as :class:`~aioproducer.metric_catalog.Metric` entries, plus the
        per-topic record counts (``producer-topic-metrics``), as
        :meth:`Producer.metrics_detailed <aioproducer.Producer.metrics_detailed>`; there
        are no brokers, so no ``producer-node-metrics``."""
        if self._state is ProducerState.CREATED:
            return []
        client_id = self._config.client_id
        entries = metric_entries(PRODUCER_GROUP, {"client-id": client_id}, self.metrics())
        for topic, values in sorted(self._metrics.topic_snapshots().items()):
            tags = {"client-id": client_id, "topic": topic}
            entries += metric_entries(TOPIC_GROUP, tags, values)
        return entries

    # ---- transactions -----------------------------------------------------------------------

    @property
    def transaction_state(self) -> TransactionState | None:
        """Where the transaction state machine is; None without a ``transactional_id``."""
        return None if self._txn is None else self._txn.state

    def _transactional(self, operation: str) -> TransactionStates:
        self._check_running()
        if self._txn is None:
            raise IllegalStateError(
                f"{operation} needs a transactional producer: set transactional_id"
            )
        return self._txn

    async def begin_transaction(self) -> None:
        """Open a transaction: the records sent until the commit are stored, but
        :meth:`records` shows them only once it commits.

        Raises:
            IllegalStateError: no ``transactional_id``, or a transaction is open already.
            KafkaError: the producer hit a fatal error (a
                :class:`~aioproducer.errors.ProducerFencedError` from :meth:`fail_next`).
        """
        txn = self._transactional("begin_transaction()")
        txn.check_begin_allowed()
        txn.transition(TransactionState.IN_TRANSACTION)
        self._txn_partitions = set()
        self._txn_offsets = {}

    async def commit_transaction(self) -> None:
        """Commit the open transaction: its records and offsets become visible.

        Raises:
            KafkaError: a record of the transaction failed (:meth:`fail_next`): abort it.
            IllegalStateError: no transaction is open.
        """
        txn = self._transactional("commit_transaction()")
        if txn.state is TransactionState.IN_TRANSACTION:
            # The producer delivers the transaction's records before it commits.
            self.complete_next(len(self._pending))
        txn.check_commit_allowed()
        txn.transition(TransactionState.COMMITTING_TRANSACTION)
        for group, offsets in self._txn_offsets.items():
            self._committed_offsets.setdefault(group, {}).update(offsets)
        self._end_transaction(_COMMITTED)

    async def prepare_transaction(self) -> PreparedTransaction:
        """:meth:`aioproducer.Producer.prepare_transaction`: deliver the transaction's
        records and stop short of committing. The transaction may then only be committed or
        aborted (by this producer); :meth:`close` leaves it open, its records in
        :meth:`uncommitted_records`. The :class:`~aioproducer.PreparedTransaction` has
        producer id and epoch 0: nothing outside this object can complete it.

        Raises:
            KafkaError: a record of the transaction failed (:meth:`fail_next`): abort it.
            IllegalStateError: no transaction is open.
        """
        txn = self._transactional("prepare_transaction()")
        if txn.state is TransactionState.IN_TRANSACTION:
            self.complete_next(len(self._pending))
        txn.check_prepare_allowed()
        txn.transition(TransactionState.PREPARED_TRANSACTION)
        transactional_id = self._config.transactional_id
        assert transactional_id is not None
        return PreparedTransaction(
            transactional_id, 0, 0, empty=not (self._txn_partitions or self._txn_offsets)
        )

    async def abort_transaction(self) -> None:
        """Abort the open transaction: its records go to :meth:`aborted_records` and its
        offsets are dropped. Works after a failed record; then a new transaction can begin.

        Raises:
            IllegalStateError: no transaction is open.
            KafkaError: the producer hit a fatal error.
        """
        self._transactional("abort_transaction()").check_abort_allowed()
        self._abort(None)

    def _abort(self, reason: KafkaError | None) -> None:
        # The records not sent yet fail, as the producer fails the batches it still holds.
        txn = self._txn
        assert txn is not None
        cause = txn.last_error or reason
        txn.transition(TransactionState.ABORTING_TRANSACTION)
        message = "the transaction was aborted before the record was sent"
        self._fail_all_pending(
            TransactionAbortedError(message)
            if cause is None
            else error_copy(cause, message, fresh=True),
            transactional_only=True,
        )
        self._end_transaction(_ABORTED)

    def _end_transaction(self, outcome: str) -> None:
        for entry in self._entries:
            if entry.status == _OPEN:
                entry.status = outcome
        # Kafka writes a commit or abort marker into each partition of the transaction: it
        # takes an offset, so the next record's offset is one further.
        for tp in self._txn_partitions:
            self._next_offsets[tp] += 1
        self._txn_partitions = set()
        self._txn_offsets = {}
        assert self._txn is not None
        self._txn.transaction_ended()
        if outcome == _COMMITTED:
            self._transactions_committed += 1
        else:
            self._transactions_aborted += 1

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[Any, Any],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Add consumer offsets to the transaction (checked as the producer checks them);
        :attr:`committed_offsets` has them once it commits.

        Raises:
            IllegalStateError: no transaction is open.
        """
        txn = self._transactional("send_offsets_to_transaction()")
        normalized = normalize_offsets(offsets)
        group = consumer_group_metadata(group_metadata)
        txn.check_send_offsets_allowed()
        pending = self._txn_offsets.setdefault(group.group_id, {})
        for tp, (offset, _metadata, _epoch) in normalized.items():
            pending[tp] = offset

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[InMemoryProducer]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, and aborts it (then re-raises) when the block or the commit raises."""
        await self.begin_transaction()
        try:
            yield self
        except BaseException:
            if self._state is ProducerState.RUNNING and self.transaction_state in (
                TransactionState.IN_TRANSACTION,
                TransactionState.ABORTABLE_ERROR,
            ):
                await self.abort_transaction()
            raise
        try:
            await self.commit_transaction()
        except KafkaError:
            if self.transaction_state is TransactionState.ABORTABLE_ERROR:
                await self.abort_transaction()
            raise


def _checked_error(error: Any) -> KafkaError | type[KafkaError]:
    if isinstance(error, KafkaError) or (
        isinstance(error, type) and issubclass(error, KafkaError)
    ):
        return error
    raise InvalidArgumentTypeError(
        f"error must be a KafkaError instance or subclass, not {error!r}"
    )


@dataclass(frozen=True, slots=True)
class _TopicDetails:
    topic_id: uuid.UUID
    replication_factor: int
    configs: Mapping[str, str]


class _InMemoryTopics:
    """The :class:`~aioproducer.admin.TopicBackend` of an :class:`InMemoryProducer`: its
    topic table, checked as a broker checks a topic."""

    def __init__(self, producer: InMemoryProducer) -> None:
        self._producer = producer

    def __repr__(self) -> str:
        return f"the topics of {self._producer!r}"

    def _details(self, name: str) -> _TopicDetails:
        details = self._producer._topic_details.get(name)
        if details is None:  # made by create_topic(), topics= or a first record
            details = self._producer._topic_details[name] = _TopicDetails(uuid.uuid4(), 1, {})
        return details

    async def create(
        self, topics: Sequence[NewTopic], validate_only: bool, deadline: float
    ) -> dict[str, TopicCreation]:
        producer = self._producer
        results: dict[str, TopicCreation] = {}
        for topic in topics:
            name = topic.name
            if name in producer._topics:
                error = error_for_code(
                    ErrorCode.TOPIC_ALREADY_EXISTS,
                    f"Topic '{name}' already exists.",
                    where=f"topic {name!r}",
                )
                results[name] = TopicCreation(name, False, error)
                continue
            assignment = topic.replica_assignment
            if assignment is not None:
                partitions = len(assignment)
                replication = len(assignment[0])
            else:
                partitions = topic.num_partitions or producer._default_partitions
                replication = topic.replication_factor or 1
            details = _TopicDetails(uuid.uuid4(), replication, dict(topic.configs))
            if not validate_only:
                producer._topics[name] = partitions
                producer._topic_details[name] = details
            results[name] = TopicCreation(
                name,
                not validate_only,
                None,
                None if validate_only else details.topic_id,
                partitions,
                replication,
                dict(topic.configs),
            )
        return results

    async def describe(
        self, names: Sequence[str], include_configs: bool, deadline: float
    ) -> dict[str, TopicDescription | KafkaError]:
        found: dict[str, TopicDescription | KafkaError] = {}
        for name in names:
            count = self._producer._topics.get(name)
            if count is None:
                found[name] = _unknown_topic(name)
                continue
            details = self._details(name)
            replicas = tuple(range(details.replication_factor))
            found[name] = TopicDescription(
                name,
                details.topic_id,
                False,
                tuple(PartitionDescription(p, 0, replicas, replicas, (), 0) for p in range(count)),
                dict(details.configs) if include_configs else {},
            )
        return found

    async def delete(self, names: Sequence[str], deadline: float) -> dict[str, KafkaError | None]:
        producer = self._producer
        results: dict[str, KafkaError | None] = {}
        for name in names:
            count = producer._topics.pop(name, None)
            if count is None:
                results[name] = _unknown_topic(name)
                continue
            producer._topic_details.pop(name, None)
            for partition in range(count):
                producer._next_offsets.pop((name, partition), None)
            results[name] = None
        return results


def _unknown_topic(name: str) -> KafkaError:
    return error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")


def _partition_count(count: Any, what: str) -> int:
    if type(count) is not int or count < 1:
        raise ConfigurationError(f"{what} must be an int from 1, not {count!r}")
    return count
