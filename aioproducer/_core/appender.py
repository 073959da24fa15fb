"""The synchronous half of ``Producer.send``: check, intercept, serialize, partition, append.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

``Producer.send`` is a thin coroutine over :meth:`RecordAppender.append`, which does every
step that needs no waiting and runs compiled with the rest of the hot path (see
:mod:`aioproducer.compiled`). :class:`RecordPreparer` prepares the record (interceptors,
checks, serializers): the one preparation, which ``SyncProducer`` and ``InMemoryProducer``
use too. ``append`` returns what happened, as the Java client's ``RecordAppendResult``
does: the record's future when it was appended, or a :class:`PendingRecord` when it must
wait (for the topic's metadata, or for buffer memory). The pending record is prepared
already, so serializers and interceptors run once per record whatever happens, and it says
what it waits for. :meth:`RecordAppender.append_pending` waits for it and appends it: with
``buffer_memory`` full, that is once per batch.

Its coroutines await with no ``try`` around the await: mypyc-compiled coroutines mishandle
an exception being handled across an await (see ``tests/unit/test_compiled.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from threading import get_ident
from time import time as _wall_clock  # a global, not a module attribute, per record
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, cast, final

from aioproducer._core.accumulator import (
    MAX_COMPRESSED_BATCH_FACTOR,
    ProducerBatch,
    RecordAccumulator,
)
from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.delivery import (
    DeliveryReports,
    ProduceLater,
    check_delivery_callback,
    confluent_arguments,
)
from aioproducer._core.futures import BatchResults, RecordFuture, error_copy
from aioproducer._core.metadata import TopicInfo, validate_topic
from aioproducer._core.partitioner import DefaultPartitioner, Partitioner
from aioproducer.errors import (
    BufferExhaustedError,
    KafkaError,
    PartitionerError,
    RecordTooLargeError,
    SerializationError,
)
from aioproducer.protocol.record_batch import RECORD_BATCH_OVERHEAD
from aioproducer.protocol.record_batch import estimate_record_size as record_size
from aioproducer.records import (
    MAX_TIMESTAMP_MS,
    ProducerRecord,
    check_partition,
    check_timestamp,
)
from aioproducer.serialization import (
    SerializerNotReady,
    call_in_context,
    refuse_coroutine,
    serializer_name,
    with_context,
)

if TYPE_CHECKING:
    from aioproducer._core.metadata import Cluster

__all__ = [
    "CheckedHeaders",
    "ConnectionHealth",
    "MetadataView",
    "PartitionRegistry",
    "PendingRecord",
    "PreparedRecord",
    "RecordAppender",
    "RecordPreparer",
    "Waker",
    "check_headers",
    "check_record_size",
    "name_send_many_item",
    "partitioner_error",
    "record_size",
    "send_many_item",
    "serialize",
    "to_bytes",
]

CheckedHeaders = list[tuple[str, bytes | None]]
"""Headers after :func:`check_headers`: a list of ``(str, bytes or None)`` pairs."""


# send_many's keyed bulk path takes its records this many at a time (see append_pairs): few
# enough that each one's place in the chunk is a small int, which Python does not allocate.
_PAIR_CHUNK: Final = 256
# The most bytes a header-less record takes beyond its key and value: its length, attributes,
# timestamp and offset deltas, key and value lengths and header count, each at its longest.
_PAIR_RECORD_OVERHEAD: Final = 32


def _pairs_fitting(
    batch: ProducerBatch | None,
    timestamp: int,
    items: list[Any],
    rows: Any,
    base: int,
    places: list[int],
    first: int,
    largest: int,
) -> int:
    """How far ``places`` (from ``first`` on) of the pairs ``items[base + place]`` (or of the
    rows of ``rows``, a BinaryPairs, when it is not None) go into ``batch`` (an index of
    ``places``); ``first`` when there is no batch."""
    if batch is None:
        return first
    builder = batch.builder
    if builder.remaining >= (len(places) - first) * (largest + _PAIR_RECORD_OVERHEAD):
        return len(places)
    if rows is not None:
        return builder.append_rows(timestamp, rows, base, places, first, len(places), write=False)
    return builder.append_pairs(timestamp, items, base, places, first, len(places), write=False)


class MetadataView(Protocol):
    """What the appender needs of the producer's :class:`~aioproducer._core.metadata.Metadata`."""

    @property
    def cluster(self) -> Cluster:
        """The current cluster snapshot (replaced, never changed, on every update)."""
        ...

    @property
    def refusal(self) -> KafkaError | None:
        """Why the last Metadata answers were refused (another cluster's), if they were."""
        ...

    def touch(self, topic: str, now: float) -> None:
        """``topic`` was used at ``now`` (it stays in the metadata while it is used)."""
        ...

    def add_topic(self, topic: str, now: float) -> bool:
        """Track ``topic``; True when it is new (its metadata is to be fetched)."""
        ...

    def check_topic(self, topic: str) -> None:
        """Raise the error the brokers gave for ``topic`` in the last update, if any."""
        ...

    def request_update(self) -> None:
        """Ask for new metadata at the sender's next step."""
        ...

    async def wait_for_update(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the next update; whether one came."""
        ...

    def unknown_topic_error(
        self, topic: str, waited_ms: float, partition: int | None
    ) -> KafkaError:
        """The error for a topic (or partition) missing from the metadata after a wait."""
        ...

    def partition_out_of_range_error(self, topic: str, partition: int, count: int) -> KafkaError:
        """The error for ``partition`` out of ``topic``'s range."""
        ...


class ConnectionHealth(Protocol):
    """What the appender asks of the :class:`~aioproducer.net.manager.ConnectionManager`
    while a record waits for its topic's metadata."""

    def fatal_error(self, since: float) -> KafkaError | None:
        """The error of refused credentials (or certificate) since ``since``, if any."""
        ...

    def unreachable_summary(self) -> str | None:
        """What was tried and why it failed, when no broker could be reached."""
        ...


class PartitionRegistry(Protocol):
    """What the appender needs of a :class:`~aioproducer._core.transactions.TransactionManager`."""

    def maybe_add_partition(self, tp: tuple[str, int]) -> None:
        """A batch for ``tp`` was started: add the partition to the open transaction."""
        ...


class Waker(Protocol):
    """What the appender needs of the :class:`~aioproducer._core.sender.Sender`."""

    def wakeup(self) -> None:
        """Look at the accumulator again now: a batch was started."""
        ...


class PendingRecord:
    """A prepared record that :meth:`RecordAppender.append` could not append without
    waiting, and what it waits for.

    Attributes:
        topic: the record's topic, checked.
        partition: the partition asked for; None when the partitioner picks.
        timestamp: the record's timestamp (ms).
        key: the key bytes.
        value: the value bytes.
        headers: the checked headers.
        target: the partition the record goes to once the buffer pool has memory for a new
            batch, when that is all it waits for; -1 when the topic's metadata must be
            waited for first (the topic is unknown, or ``partition`` out of range).
        sticky: the sticky partitioner chose ``target``, and is told of the record once it
            is appended.

    A pending record is false, and a record future true, so ``if not result:`` tells what
    :meth:`RecordAppender.append` returned apart: a test as cheap as ``is None`` for the
    interpreted ``Producer.send``, where an ``isinstance`` costs the hot path.
    """

    def __init__(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: CheckedHeaders | None,
        target: int,
        sticky: bool,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.target = target
        self.sticky = sticky

    def __bool__(self) -> Literal[False]:
        return False

    @property
    def needs_memory(self) -> bool:
        """True when the record waits only for buffer memory (:attr:`target` is known)."""
        return self.target >= 0


def to_bytes(obj: Any, role: str) -> bytes | None:
    """``obj`` as bytes (None stays None); SerializationError when it is not bytes-like."""
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, bytes | bytearray | memoryview):
        return bytes(obj)
    raise SerializationError(
        f"the record {role} is of type {type(obj).__name__}, not bytes-like or None; set "
        f"{role}_serializer to send other types"
    )


def check_headers(headers: Any) -> CheckedHeaders | None:
    """Headers as ``(str, bytes or None)`` pairs; SerializationError for anything else."""
    if headers is None:
        return None
    if isinstance(headers, str | bytes | bytearray | memoryview):
        raise SerializationError(
            "headers must be a sequence of (str, bytes) pairs or a mapping of str to bytes, "
            f"not {type(headers).__name__}"
        )
    checked: CheckedHeaders = []
    try:
        pairs: list[Any] = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    except TypeError:
        raise SerializationError(
            f"headers must be a sequence of (str, bytes) pairs, not {type(headers).__name__}"
        ) from None
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise SerializationError(f"a header must be a (str, bytes) pair, not {pair!r}")
        name: Any = pair[0]
        value: Any = pair[1]
        if not isinstance(name, str):
            raise SerializationError(f"a header name must be a str, not {type(name).__name__}")
        if not name.isascii():
            try:
                name.encode()
            except UnicodeEncodeError:
                raise SerializationError(
                    f"the header name {name!r} is not valid UTF-8 text (it holds a lone surrogate)"
                ) from None
        if value is not None and type(value) is not bytes:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise SerializationError(
                    f"the value of header {name!r} must be bytes-like or None, not "
                    f"{type(value).__name__}"
                )
            value = bytes(value)
        checked.append((name, value))
    return checked


def serialize(serializer: Any, obj: Any, role: str, topic: str) -> bytes | None:
    """``obj`` (the record's ``role``: "key" or "value") through ``serializer``, or
    :func:`to_bytes` when it is None; SerializationError naming the serializer when it
    raises or returns something not bytes-like.

    A None ``obj`` stays None and never reaches the serializer, as the Java client's own
    serializers treat null: a record with no key, or a tombstone (no value). A serializer
    such as ``str.encode`` need not handle None itself.
    """
    if obj is None:
        return None
    if serializer is None:
        return to_bytes(obj, role)
    try:
        data: Any = serializer(obj)
    except SerializationError:
        raise
    except Exception as exc:
        raise _serializer_failed(serializer, role, topic, exc) from exc
    return _serialized(data, serializer, role)


def serialize_in_context(
    serializer: Any,
    in_context: bool,
    obj: Any,
    role: str,
    topic: str,
    headers: CheckedHeaders,
) -> bytes | None:
    """:func:`serialize` where some serializer sees the record: this one does when
    ``in_context`` (:func:`aioproducer.serialization.with_context`, decided once per
    producer), and then gets the topic and ``headers``, which it may append to."""
    if obj is None:
        return None
    if not in_context:
        return serialize(serializer, obj, role, topic)
    try:
        data: Any = call_in_context(serializer, obj, role, topic, headers)
    except (SerializationError, SerializerNotReady):
        raise
    except Exception as exc:
        raise _serializer_failed(serializer, role, topic, exc) from exc
    return _serialized(data, serializer, role)


def _serializer_failed(
    serializer: Any, role: str, topic: str, exc: Exception
) -> SerializationError:
    return SerializationError(
        f"{role}_serializer {serializer_name(serializer)} failed for a record to topic "
        f"{topic!r}: {exc!r}"
    )


def _serialized(data: Any, serializer: Any, role: str) -> bytes | None:
    """What a serializer returned, as bytes or None; SerializationError for anything else."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    refuse_coroutine(data, serializer, role)
    raise SerializationError(
        f"{role}_serializer {serializer_name(serializer)} returned an object of type "
        f"{type(data).__name__}; it must return bytes-like or None"
    )


def check_record_size(size: int, max_request_size: int, buffer_memory: int) -> None:
    """RecordTooLargeError when a record of ``size`` bytes (:func:`record_size`) can never be
    sent: its batch would exceed ``max_request_size`` or ``buffer_memory``."""
    total = size + RECORD_BATCH_OVERHEAD
    if total > max_request_size:
        raise RecordTooLargeError(
            f"the record is {total} bytes when serialized, larger than max_request_size "
            f"({max_request_size})"
        )
    if total > buffer_memory:
        raise RecordTooLargeError(
            f"the record is {total} bytes when serialized, larger than buffer_memory "
            f"({buffer_memory})"
        )


def partitioner_error(chosen: Any, topic: str, count: int) -> PartitionerError:
    """The error for a partitioner that returned ``chosen``, not a partition of ``topic``
    (which has ``count`` partitions)."""
    return PartitionerError(
        f"the partitioner returned {chosen!r} for topic {topic!r}, which has {count} "
        f"partition(s): it must return an int from 0 to {count - 1}"
    )


def _checked_timestamp(timestamp_ms: Any) -> int:
    """A timestamp that is not None, checked (:func:`~aioproducer.records.check_timestamp`)."""
    checked = check_timestamp(timestamp_ms)
    assert checked is not None
    return checked


PreparedRecord = tuple[str, int | None, int, bytes | None, bytes | None, CheckedHeaders | None]
"""A record ready to append (:meth:`RecordPreparer.prepare`): its topic (a legal name), the
partition asked for (None: the partitioner picks), its timestamp (ms), key and value bytes
and checked headers."""


def send_many_item(topic: str, partition: int | None, item: Any) -> tuple[Any, ...]:
    """What a ``send_many`` item stands for, as ``send()``'s arguments: ``(topic, value, key,
    partition, timestamp_ms, headers)``. ``item`` is a value, a ``(key, value)`` tuple or a
    :class:`~aioproducer.ProducerRecord` (whose topic and partition win over the call's)."""
    if isinstance(item, ProducerRecord):
        # Read through Any: a record's fields can be reassigned to anything.
        fields: Any = item
        chosen: Any = partition if fields.partition is None else fields.partition
        return (fields.topic, fields.value, fields.key, chosen, fields.timestamp_ms, fields.headers)
    if type(item) is tuple and len(item) == 2:
        return (topic, item[1], item[0], partition, None, None)
    return (topic, item, None, partition, None, None)


def name_send_many_item(error: KafkaError, index: int) -> None:
    """Start ``error``'s message with the ``send_many`` item it is about."""
    error.args = (f"send_many item {index}: {error.message}", *error.args[1:])


class RecordPreparer:
    """Prepares a record for appending: the one place that does, for the producer, for
    :class:`~aioproducer.SyncProducer` (in the calling thread) and for
    :class:`~aioproducer.testing.InMemoryProducer`.

    As the Java client: the interceptors' ``on_send`` first, then the checks of the
    timestamp and the partition, the topic name, the serializers, the headers. The record's
    size is checked where it is appended (:meth:`RecordAppender.take`).

    :meth:`prepare` hands the prepared record to :meth:`take` and returns what that returns:
    here the record itself, as a :data:`PreparedRecord`; :class:`RecordAppender` takes it
    by appending it. (Handing it on, rather than returning it to be unpacked, keeps the
    send path as short as when it was written out in one function.)

    Args:
        key_serializer: turns keys into bytes, or None for bytes-like keys only.
        value_serializer: turns values into bytes, or None for bytes-like values only.
        intercept: runs the interceptors' ``on_send`` on a record, or None without
            interceptors.
    """

    def __init__(
        self,
        *,
        key_serializer: Any,
        value_serializer: Any,
        intercept: Callable[[ProducerRecord], ProducerRecord] | None,
    ) -> None:
        # Final: read straight from the object, not through the getters a subclassed
        # compiled class otherwise reads its attributes with.
        self.key_serializer: Final = key_serializer
        self.value_serializer: Final = value_serializer
        # A serializer that sees the topic and headers (aioproducer.serialization): the
        # records go through the slower preparation that gives it them.
        self._key_in_context: Final = with_context(key_serializer)
        self._value_in_context: Final = with_context(value_serializer)
        self._in_context: Final = self._key_in_context or self._value_in_context
        self.intercept: Final = intercept
        self._valid_topics: Final[set[str]] = set()

    @final
    def validate_topic(self, topic: Any) -> str:
        """``topic`` if it is a legal topic name (each name is checked once)."""
        if type(topic) is str and topic in self._valid_topics:
            return topic
        checked = validate_topic(topic)
        self._valid_topics.add(checked)
        return checked

    @final
    def prepare(
        self,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        timestamp_ms: Any,
        headers: Any,
        now_ms: int = -1,
        results: BatchResults | None = None,
    ) -> Any:
        """Prepare a record from ``send()``'s arguments (a missing timestamp is ``now_ms``,
        the clock's when -1) and return what :meth:`take` returns for it (``results``
        handed on).

        Raises:
            KafkaError: what makes the record unsendable before its partition is known
                (see ``Producer.send``).
        """
        intercept = self.intercept
        if intercept is not None:
            # Read through Any: an interceptor may have put anything in the fields, and a
            # compiled read of a typed field would raise a bare TypeError before the checks.
            record: Any = intercept(
                ProducerRecord(topic, value, key, partition, timestamp_ms, headers)
            )
            topic, value, key = record.topic, record.value, record.key
            partition, timestamp_ms, headers = record.partition, record.timestamp_ms, record.headers
        # The arguments are checked before anything runs on them (serializers included).
        if timestamp_ms is None:
            timestamp = int(_wall_clock() * 1000) if now_ms < 0 else now_ms
        elif type(timestamp_ms) is int and 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            timestamp = timestamp_ms
        else:
            timestamp = _checked_timestamp(timestamp_ms)
        if partition is not None and (type(partition) is not int or partition < 0):
            partition = check_partition(partition)
        name = self.validate_topic(topic)
        if self._in_context:
            return self._prepare_in_context(
                name, partition, timestamp, key, value, headers, results
            )
        key_bytes = serialize(self.key_serializer, key, "key", name)
        value_bytes = serialize(self.value_serializer, value, "value", name)
        checked_headers = check_headers(headers) if headers is not None else None
        return self.take(
            name, partition, timestamp, key_bytes, value_bytes, checked_headers, results
        )

    @final
    def _prepare_in_context(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Any,
        results: BatchResults | None,
    ) -> Any:
        """The end of :meth:`prepare` when a serializer sees the record: both get the
        topic and the record's headers (checked first), and what they add is checked."""
        record_headers = check_headers(headers) if headers is not None else None
        given = record_headers if record_headers is not None else []
        try:
            key_bytes = serialize_in_context(
                self.key_serializer, self._key_in_context, key, "key", topic, given
            )
            value_bytes = serialize_in_context(
                self.value_serializer, self._value_in_context, value, "value", topic, given
            )
        except SerializerNotReady as not_ready:
            # What resume() starts from once the wait is over: the record as the
            # interceptors left it, the headers as given (not what a serializer added).
            not_ready.record = (topic, partition, timestamp, key, value, headers, results)
            raise
        checked_headers = check_headers(given) if given else None
        return self.take(
            topic, partition, timestamp, key_bytes, value_bytes, checked_headers, results
        )

    @final
    def resume(self, not_ready: SerializerNotReady) -> Any:
        """:meth:`prepare` again from its serializers, for a record whose serializer was not
        ready (``not_ready``, once its wait is over): the interceptors do not run twice."""
        topic, partition, timestamp, key, value, headers, results = not_ready.record
        return self._prepare_in_context(topic, partition, timestamp, key, value, headers, results)

    @final
    def prepare_item(
        self,
        topic: str,
        partition: int | None,
        item: Any,
        now_ms: int,
        results: BatchResults | None = None,
    ) -> Any:
        """:meth:`prepare` for a ``send_many`` item (:func:`send_many_item`), stamped
        ``now_ms`` unless it has a timestamp of its own."""
        fields = send_many_item(topic, partition, item)
        return self.prepare(
            fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], now_ms, results
        )

    def take(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: CheckedHeaders | None,
        results: BatchResults | None,
    ) -> Any:
        """What becomes of a prepared record: here it is returned, as a
        :data:`PreparedRecord`."""
        prepared: PreparedRecord = (topic, partition, timestamp, key, value, headers)
        return prepared


def _nothing() -> None:
    pass


def _always() -> bool:
    return True


class RecordAppender(RecordPreparer):
    """Appends records to the accumulator without waiting, for one producer: a
    :class:`RecordPreparer` that takes each record it prepares by appending it.

    Args:
        metadata: the producer's :class:`~aioproducer._core.metadata.Metadata`: the topics'
            partitions, and told of each topic a batch is started for.
        accumulator: where records go.
        pool: the buffer pool new batches take their buffer from.
        partitioner: picks the partition of records sent without one.
        sender: woken when a batch is started, or when metadata is needed.
        connections: asked, while a record waits for metadata, whether every broker refused
            the credentials, and why none could be reached.
        transactions: the transaction manager, told of each partition a batch is started
            for; None without a ``transactional_id``.
        key_serializer: turns keys into bytes, or None for bytes-like keys only.
        value_serializer: turns values into bytes, or None for bytes-like values only.
        intercept: runs the interceptors' ``on_send`` on a record, or None without
            interceptors.
        check_sendable: raises why the producer cannot send now; called when
            :attr:`open` is False.
        loop: the producer's event loop.
        check_loop: called by :meth:`send_now` outside the thread running the producer's
            loop (for a loop that does not say which thread runs it, uvloop's: outside the
            thread it was last seen running in, or while it is not running): raises why a
            send outside the producer's loop cannot run, or sets :attr:`loop_thread` (the
            loop runs in this thread now), or returns for a closed producer (whose state
            check then says so).
        check_running: raises when the producer stopped running (closed, or failed); called
            after a wait for memory.
        max_request_size: the ``max_request_size`` option.
        buffer_memory: the ``buffer_memory`` option.

    Attributes:
        open: True while the producer runs with no transaction and no fatal error: then a
            record needs no further state check. The producer sets it, and clears it on
            close, on a sender crash and on the sender's fatal error.
        loop_thread: the thread (``threading.get_ident()``) the producer's loop was last
            seen running in.
        traced: True while the producer traces its sends: :meth:`send_now` then leaves the
            record to the producer's traced path.
        reports: the producer's delivery reports, where :meth:`produce_now` leaves each
            record's report.
    """

    def __init__(
        self,
        *,
        metadata: MetadataView,
        accumulator: RecordAccumulator,
        pool: BufferPool,
        partitioner: Partitioner,
        sender: Waker,
        connections: ConnectionHealth,
        transactions: PartitionRegistry | None,
        key_serializer: Any,
        value_serializer: Any,
        intercept: Callable[[ProducerRecord], ProducerRecord] | None,
        check_sendable: Callable[[], None],
        check_running: Callable[[], None],
        max_request_size: int,
        buffer_memory: int,
        loop: Any = None,
        check_loop: Callable[[], None] | None = None,
    ) -> None:
        self.open = False
        self.traced = False
        self.reports = DeliveryReports()
        self.loop_thread = get_ident()
        self._loop: Any = loop
        # asyncio's loops say which thread runs them now (None when stopped); uvloop's do
        # not, so for them the thread the loop was last seen running in stands in.
        self._loop_says_its_thread = loop is not None and hasattr(loop, "_thread_id")
        self._loop_running: Callable[[], bool] = (
            loop.is_running if loop is not None else _always
        )
        self._check_loop: Callable[[], None] = check_loop or _nothing
        self._metadata = metadata
        self._accumulator = accumulator
        self._pool = pool
        self._partitioner = partitioner
        self._sender = sender
        self._connections = connections
        self._transactions = transactions
        # An optional hook of the partitioner (KIP-794's sticky partitioners have it).
        self._record_appended: Any = getattr(partitioner, "record_appended", None)
        # The built-in partitioners, called natively when compiled: a call through ``Any``
        # parses its arguments (and keywords) anew for every record.
        self._default_partitioner: DefaultPartitioner | None = (
            partitioner if isinstance(partitioner, DefaultPartitioner) else None
        )
        # Keyed records too go where the sticky partitioner says (partitioner_ignore_keys):
        # it hears of each of them, as of key-less ones.
        self._keys_ignored = (
            self._default_partitioner is not None and self._default_partitioner.ignores_keys
        )
        # Whether key-less records may go a run per batch (send_many's bulk paths): the
        # built-in sticky choice, which a subclass's own partition() (possible where nothing
        # is compiled) would not make.
        self._sticky_runs = (
            self._default_partitioner is not None
            and type(self._default_partitioner).partition is DefaultPartitioner.partition
        )
        super().__init__(
            key_serializer=key_serializer, value_serializer=value_serializer, intercept=intercept
        )
        self._check_sendable = check_sendable
        self._check_running = check_running
        self._max_request_size = max_request_size
        # A record that joins an open batch is checked against max_request_size only where
        # a batch can hold more than that (max_request_size below batch_size): elsewhere
        # such a record never fits an open batch, and starting a batch checks it.
        largest_batch = accumulator.batch_size * (
            MAX_COMPRESSED_BATCH_FACTOR if accumulator.compressed else 1
        )
        self._check_each_record = max_request_size < largest_batch
        self._buffer_memory = buffer_memory
        # Partition count and available partitions per topic, for the cluster snapshot
        # ``_cluster`` (metadata replaces the snapshot on every update).
        self._cluster: Any = None
        self._topic_cache: dict[str, tuple[int, Any]] = {}

    # ---- the steps ---------------------------------------------------------------------------

    def check_sendable(self) -> None:
        """Raise if the producer cannot take a record now (closed, failed, no transaction)."""
        if not self.open:
            self._check_sendable()

    def topic_layout(self, topic: str) -> tuple[int, Any] | None:
        """The partition count and available partitions of ``topic`` in the current
        metadata; None when the metadata does not know the topic."""
        cluster: Any = self._metadata.cluster
        cache = self._topic_cache
        if cluster is not self._cluster:
            self._cluster = cluster
            cache.clear()
        else:
            layout = cache.get(topic)
            if layout is not None:
                return layout
        info: Any = cluster.topics.get(topic)
        if info is None:
            return None
        layout = (len(info.partitions), info.available_partitions)
        cache[topic] = layout
        return layout

    def check_record_size(self, size: int) -> None:
        """RecordTooLargeError when a record of ``size`` bytes can never be sent."""
        check_record_size(size, self._max_request_size, self._buffer_memory)

    def choose_partition(self, topic: str, key: bytes | None, count: int, available: Any) -> int:
        """The partitioner's pick for a record with ``key``, checked against ``count``."""
        default = self._default_partitioner
        chosen: Any
        if default is not None:
            chosen = default.partition(topic, key, count, available)
        else:
            chosen = self._partitioner.partition(topic, key, count, available)
        if type(chosen) is not int or not 0 <= chosen < count:
            raise partitioner_error(chosen, topic, count)
        return chosen

    def note_sticky_append(
        self, topic: str, partition: int, value: bytes | None, batch: ProducerBatch
    ) -> None:
        """Tell a sticky partitioner how many bytes a key-less record added (KIP-794); a
        partitioner without the ``record_appended`` hook is not told."""
        if self._record_appended is None:
            return
        # It may switch early only once the partition's open batch is full.
        size = (0 if value is None else len(value)) + 10
        self._tell_record_appended(
            topic, partition, size, batch.full or batch.builder.remaining < size, batch
        )

    def _tell_record_appended(
        self, topic: str, partition: int, size: int, switch_allowed: bool, batch: ProducerBatch
    ) -> None:
        batch_size = self._accumulator.batch_size
        buffer_size = batch.buffer_size
        if buffer_size > batch_size and self._accumulator.compressed:
            # A compressed batch sized to compress to batch_size (RecordAccumulator.
            # buffer_size_for): its records count in that proportion, as Java counts the
            # batch's estimated compressed size, so its partition is left once it is full.
            size = -(-size * batch_size // buffer_size)
        # The hook exists (checked by the caller); the built-in partitioner gets a native call.
        default = self._default_partitioner
        if default is not None:
            default.record_appended(topic, partition, size, switch_allowed=switch_allowed)
        else:
            self._record_appended(topic, partition, size, switch_allowed=switch_allowed)

    # ---- appending ---------------------------------------------------------------------------

    def send_now(
        self,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        timestamp_ms: Any,
        headers: Any,
    ) -> RecordFuture | PendingRecord | None:
        """``Producer.send()``'s part that never waits, run natively: the loop check, then
        :meth:`append`. None when the producer traces its sends (:attr:`traced`): the
        producer's traced path takes the record instead.

        Raises:
            KafkaError: whatever makes the record unsendable (see ``Producer.send``).
        """
        # The producer's loop is running, in this thread: then it is the loop running the
        # caller (a thread runs one loop at a time). Cheaper than get_running_loop(), which
        # asks the system for the process id on every call.
        if self._loop_says_its_thread:
            if self._loop._thread_id != get_ident():
                self._check_loop()
        elif get_ident() != self.loop_thread or not self._loop_running():
            self._check_loop()
        if self.traced:
            return None
        if not self.open:
            self._check_sendable()
        taken: RecordFuture | PendingRecord = self.prepare(
            topic, value, key, partition, timestamp_ms, headers, -1, None
        )
        return taken

    def produce_now(
        self,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        on_delivery: Any,
        timestamp: Any,
        headers: Any,
        callback: Any,
    ) -> ProduceLater | None:
        """``Producer.produce()``'s part that never waits, run natively: its arguments
        checked and converted as confluent-kafka takes them, then :meth:`send_now`, and the
        record's report left with :attr:`reports`. None when that is all: else what is left
        for the producer to do.

        Raises:
            KafkaError: whatever makes the record unsendable (see ``Producer.produce``).
        """
        report = check_delivery_callback(on_delivery, callback)
        key, value, partition, timestamp, headers = confluent_arguments(
            key, value, partition, timestamp, headers, self.key_serializer, self.value_serializer
        )
        try:
            result = self.send_now(topic, value, key, partition, timestamp, headers)
        except SerializerNotReady as not_ready:
            return ProduceLater(
                report, topic, value, key, partition, timestamp, headers, None, not_ready
            )
        if isinstance(result, RecordFuture):
            if report is not None:
                self.reports.pend_record(result, report, key, value, headers)
            return None
        return ProduceLater(report, topic, value, key, partition, timestamp, headers, result, None)

    def append(
        self,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        timestamp_ms: Any,
        headers: Any,
    ) -> RecordFuture | PendingRecord:
        """Prepare a record and append it if that needs no waiting.

        Returns its future, or a :class:`PendingRecord` when it must wait for metadata or
        memory, which :meth:`append_pending` takes.

        Raises:
            KafkaError: whatever makes the record unsendable (see ``Producer.send``).
        """
        self.check_sendable()
        taken: RecordFuture | PendingRecord = self.prepare(
            topic, value, key, partition, timestamp_ms, headers, -1, None
        )
        return taken

    async def append_pending(
        self, pending: PendingRecord, max_block: float, wait_for_memory: bool = True
    ) -> RecordFuture:
        """Append ``pending`` once what it waits for is there (its topic's metadata, then
        memory), waiting up to ``max_block`` seconds in all: the slow path of ``send``.

        A record that waits only for memory (:attr:`PendingRecord.needs_memory`) keeps the
        partition chosen before the wait, so the partitioner is asked once per record (a
        round-robin partitioner asked twice would skip a partition); with ``buffer_memory``
        full, that is once per batch. Without ``wait_for_memory`` (``try_send``), no memory
        free at once raises at once.

        Raises:
            BufferExhaustedError: no memory within ``max_block`` (at once without
                ``wait_for_memory``).
            UnknownTopicOrPartitionError: no metadata for the topic (or the partition)
                within ``max_block``.
            ProducerClosedError: the producer closed while the record waited.
            KafkaError: what else makes the record unsendable once its topic is known.
        """
        if pending.target < 0:
            return await self._append_after_metadata(pending, max_block, wait_for_memory)
        return await self.append_to_partition(
            pending.topic,
            pending.target,
            pending.sticky,
            pending.timestamp,
            pending.key,
            pending.value,
            pending.headers,
            max_block,
            wait_for_memory,
        )

    async def _append_after_metadata(
        self, pending: PendingRecord, max_block: float, wait_for_memory: bool
    ) -> RecordFuture:
        deadline = time.monotonic() + max_block
        topic, partition, key = pending.topic, pending.partition, pending.key
        self.check_record_size(record_size(key, pending.value, pending.headers))
        # The topic's metadata is missing, or the partition is out of range and the metadata
        # must be refreshed to know.
        info = await self.wait_for_topic(topic, partition, deadline)
        sticky = False
        if partition is None:
            partition = self.choose_partition(
                topic, key, info.partition_count, info.available_partitions
            )
            sticky = key is None or self._keys_ignored
        self._check_sendable()
        return await self.append_to_partition(
            topic,
            partition,
            sticky,
            pending.timestamp,
            key,
            pending.value,
            pending.headers,
            max(0.0, deadline - time.monotonic()),
            wait_for_memory,
        )

    async def wait_for_topic(self, topic: str, partition: int | None, deadline: float) -> TopicInfo:
        """``topic``'s metadata (with ``partition`` in range, when given), waiting until
        ``deadline`` (``time.monotonic()``) for it.

        Raises:
            UnknownTopicOrPartitionError: not there by ``deadline`` (or ``partition`` out
                of range after a refresh); the message says why when no broker could be
                reached.
            KafkaError: the brokers' error for the topic, or refused credentials.
            ProducerClosedError: the producer stopped running meanwhile.
        """
        metadata = self._metadata
        sender = self._sender
        start = time.monotonic()
        if metadata.add_topic(topic, start):
            sender.wakeup()
        refreshed_for_partition = False
        while True:
            self._check_running()
            metadata.check_topic(topic)
            info = metadata.cluster.topic(topic)
            if info is not None:
                if partition is None:
                    return info
                if 0 <= partition < info.partition_count:
                    return info
                if refreshed_for_partition or partition < 0:
                    raise metadata.partition_out_of_range_error(
                        topic, partition, info.partition_count
                    )
            refused = self._connections.fatal_error(start)
            if refused is not None:
                # No broker takes our credentials (or certificate) now: say so at once
                # rather than "not present in metadata" after max_block_ms.
                raise error_copy(refused)
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                error = metadata.unknown_topic_error(topic, (now - start) * 1000, partition)
                unreachable = self._connections.unreachable_summary()
                if unreachable is not None:
                    # Not the topic's fault: say what was tried and why it failed.
                    error.args = (f"{error.message}; {unreachable}", *error.args[1:])
                elif metadata.refusal is not None:
                    # Brokers answered, but for another cluster.
                    error.args = (f"{error.message}; {metadata.refusal}", *error.args[1:])
                raise error
            metadata.request_update()
            sender.wakeup()
            updated = await metadata.wait_for_update(remaining)
            if updated and info is not None:
                refreshed_for_partition = True

    async def append_to_partition(
        self,
        topic: str,
        partition: int,
        sticky: bool,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: CheckedHeaders | None,
        max_block: float,
        wait_for_memory: bool = True,
    ) -> RecordFuture:
        """Append a prepared record to ``partition``, waiting up to ``max_block`` seconds for
        memory if its open batch has no room (not at all without ``wait_for_memory``);
        ``sticky``: the sticky partitioner chose the partition and is told of the record.

        Raises:
            BufferExhaustedError: no memory within ``max_block``, or none free at once
                without ``wait_for_memory``.
            ProducerClosedError: the producer closed while the record waited.
        """
        accumulator = self._accumulator
        future = accumulator.try_append(topic, partition, timestamp, key, value, headers)
        if future is None:
            pool = self._pool
            buffer_size = accumulator.buffer_size_for(
                record_size(key, value, headers), topic, partition
            )
            if wait_for_memory:
                buffer = await pool.allocate(buffer_size, max_block)
            else:
                free = pool.allocate_nowait(buffer_size)
                if free is None:
                    raise BufferExhaustedError(
                        f"the buffer is full: a new batch for {topic}-{partition} needs "
                        f"{buffer_size} bytes and {pool.available_memory()} of buffer_memory's "
                        f"{pool.total_memory} bytes are free, {pool.queued()} send(s) wait for "
                        "memory; "
                        "try_send() does not wait for memory (send() waits up to max_block_ms)"
                    )
                buffer = free
            try:
                self._check_running()
            except BaseException:
                pool.deallocate(buffer, buffer_size)
                raise
            future = accumulator.try_append(topic, partition, timestamp, key, value, headers)
            if future is None:
                future = accumulator.append_to_new_batch(
                    topic, partition, timestamp, key, value, headers, buffer, time.monotonic()
                )
                self._batch_started(topic, partition)
            else:
                # Another coroutine opened a batch with room while this one waited: use it.
                pool.deallocate(buffer, buffer_size)
        if sticky:
            self.note_sticky_append(topic, partition, value, future._batch)
        return future

    def take(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: CheckedHeaders | None,
        results: BatchResults | None,
    ) -> RecordFuture | PendingRecord | None:
        """Append a prepared record without waiting: its future, or a
        :class:`PendingRecord` when metadata or memory must be waited for. With
        ``results`` (``send_many``), :meth:`append_prepared_lazy`."""
        if results is not None:
            return self.append_prepared_lazy(
                topic, partition, timestamp, key, value, headers, results
            )
        if self._check_each_record:
            self.check_record_size(record_size(key, value, headers))
        chosen = self._target_partition(topic, key, partition)
        if chosen < 0:
            return PendingRecord(topic, partition, timestamp, key, value, headers, -1, False)
        sticky = partition is None and (key is None or self._keys_ignored)
        future = self._accumulator.try_append(topic, chosen, timestamp, key, value, headers)
        if future is None:
            future = self._start_batch(topic, chosen, timestamp, key, value, headers)
            if future is None:
                return PendingRecord(
                    topic, partition, timestamp, key, value, headers, chosen, sticky
                )
        if sticky:
            self.note_sticky_append(topic, chosen, value, future._batch)
        return future

    def append_prepared_lazy(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: CheckedHeaders | None,
        results: BatchResults,
    ) -> PendingRecord | None:
        """:meth:`take` for ``send_many``: the record joins ``results``, without
        a future of its own when it fits an open batch. None once appended; a
        :class:`PendingRecord` when metadata or memory must be waited for."""
        if self._check_each_record:
            self.check_record_size(record_size(key, value, headers))
        chosen = self._target_partition(topic, key, partition)
        if chosen < 0:
            return PendingRecord(topic, partition, timestamp, key, value, headers, -1, False)
        sticky = partition is None and (key is None or self._keys_ignored)
        batch = self._accumulator.append_lazy(
            topic, chosen, timestamp, key, value, headers, results
        )
        if batch is None:
            future = self._start_batch(topic, chosen, timestamp, key, value, headers)
            if future is None:
                return PendingRecord(
                    topic, partition, timestamp, key, value, headers, chosen, sticky
                )
            results.add_future(future)
            batch = future._batch
        if sticky:
            self.note_sticky_append(topic, chosen, value, batch)
        return None

    def _target_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """Where a prepared record goes: ``partition``, or the partitioner's pick when None.
        -1 when the topic's metadata is missing or ``partition`` is out of range (the slow
        path refreshes metadata, then waits or raises)."""
        layout = self.topic_layout(topic)
        if layout is None:
            return -1
        count, available = layout
        if partition is None:
            return self.choose_partition(topic, key, count, available)
        return partition if 0 <= partition < count else -1

    def _start_batch(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: CheckedHeaders | None,
    ) -> RecordFuture | None:
        """Start a batch with the record if the pool has memory now; None when it has not."""
        accumulator = self._accumulator
        size = record_size(key, value, headers)
        self.check_record_size(size)
        buffer = self._pool.allocate_nowait(accumulator.buffer_size_for(size, topic, partition))
        if buffer is None:
            return None
        future = accumulator.append_to_new_batch(
            topic, partition, timestamp, key, value, headers, buffer, time.monotonic()
        )
        self._batch_started(topic, partition)
        return future

    def _batch_started(self, topic: str, partition: int) -> None:
        """Tell the collaborators of a batch started for ``topic``'s ``partition``."""
        self._metadata.touch(topic, time.monotonic())
        transactions = self._transactions
        if transactions is not None:
            # A transaction's first batch for a partition: AddPartitionsToTxn goes out now,
            # while the batch lingers.
            transactions.maybe_add_partition((topic, partition))
        self._sender.wakeup()

    # ---- send_many -----------------------------------------------------------------------------

    def append_many(
        self,
        topic: str,
        partition: int | None,
        now_ms: int,
        items: list[Any],
        start: int,
        run_end: int,
        results: BatchResults,
    ) -> tuple[int, int, PendingRecord | None]:
        """Append ``items[start:]`` for ``send_many`` until one must wait; return the index
        of the next item to take, where the run of plain values found so far ends (pass it
        back in as ``run_end``, starting from 0, so no run is scanned twice), and the item
        that must wait, prepared, if one does (its future belongs next in ``results``; the
        index returned is the one after it).

        ``items`` holds values, ``(key, value)`` tuples or :class:`ProducerRecord` objects;
        ``topic`` is checked already. Each appended record joins ``results``.
        """
        self.check_sendable()
        # The bulk paths below check no record's size: not taken where each record must be.
        plain_values_ok = (
            self.intercept is None and self.value_serializer is None and not self._check_each_record
        )
        plain_pairs_ok = plain_values_ok and self.key_serializer is None
        if partition is None and not self._sticky_runs:
            # A run of plain values goes to one partition chosen per batch, as the built-in
            # sticky partitioner chooses; any other partitioner (round robin, a callable)
            # is asked once per record, as send() asks it: the general path.
            plain_values_ok = plain_pairs_ok = False
        total = len(items)
        index = start
        # Where the keyed bulk path last stopped: that item goes the general way.
        pairs_stopped = -1
        while index < total:
            item: Any = items[index]
            if plain_pairs_ok and type(item) is tuple and index != pairs_stopped:
                # (key, value) pairs of bytes take the keyed bulk path while they last.
                reached = self.append_pairs(topic, partition, now_ms, items, index, results)
                pairs_stopped = reached
                if reached > index:
                    index = reached
                    continue
            if plain_values_ok and type(item) is bytes:
                # A run of plain values takes the bulk path: whole runs per batch. The end of
                # the run is found once, not again after every batch it fills.
                if run_end <= index:
                    run_end = index + 1
                    while run_end < total and type(items[run_end]) is bytes:
                        run_end += 1
                reached, pending = self.append_values(
                    topic, partition, now_ms, items, index, run_end, results
                )
                if reached > index:
                    index = reached
                    continue
                if pending is None:
                    pending = PendingRecord(topic, partition, now_ms, None, item, None, -1, False)
                return index + 1, run_end, pending
            index += 1
            waiting: PendingRecord | None = self.prepare_item(
                topic, partition, item, now_ms, results
            )
            if waiting is not None:
                return index, run_end, waiting
        return index, run_end, None

    def append_pairs(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        items: list[Any],
        start: int,
        results: BatchResults,
    ) -> int:
        """Append the ``(key, value)`` tuples of bytes from ``items[start:]``, until an item
        is anything else or needs a new batch while the pool has no memory free; return the
        index reached.

        The keyed bulk path of ``send_many`` (no serializers, no interceptors): the topic is
        looked up once, not per record, and the records join ``results`` without futures
        (but the first of each new batch). Records are taken a chunk at a time: the chunk
        is split by partition, and each partition's records are appended to its open batch
        together (see :meth:`_append_chunk`). The items from the returned index on are
        untouched.
        """
        layout = self.topic_layout(topic)
        if layout is None:
            return start
        count = layout[0]
        default = self._default_partitioner
        if partition is None:
            if default is None or default.ignores_keys:
                # A custom partitioner may choose differently when asked twice (as for a
                # record that needs a new batch), and a sticky choice must hear of each
                # record: records go one by one, asked once each.
                return start
        elif not 0 <= partition < count:
            return start
        total = len(items)
        index = start
        while index < total:
            size = min(total - index, _PAIR_CHUNK)
            # Split the chunk by partition: each partition's places in the chunk, in order.
            groups: dict[int, list[int]] = {}
            largest = 0
            place = 0
            while place < size:
                item: Any = items[index + place]
                if type(item) is not tuple or len(item) != 2:
                    break
                key, value = item
                if type(key) is not bytes or type(value) is not bytes:
                    break
                if partition is None:
                    assert default is not None
                    chosen = default.key_hash(key) % count
                else:
                    chosen = partition
                group = groups.get(chosen)
                if group is None:
                    groups[chosen] = [place]
                else:
                    group.append(place)
                length = len(key) + len(value)
                if length > largest:
                    largest = length
                place += 1
            if place == 0:
                break
            stopped = self._append_chunk(
                topic, timestamp, items, None, index, place, groups, largest, results
            )
            if stopped < place:
                # A record needing a new batch while the pool has no memory free: the
                # general path takes it, and waits.
                return index + stopped
            index += place
            if place < size:
                break  # an item that is not a pair of bytes: the general path takes it
        return index

    def takes_rows(self, partition: int | None, keyless: bool) -> bool:
        """Whether :meth:`append_rows` takes a BinaryPairs for ``send_many`` with
        ``partition``: no interceptor or serializer, records that need no size check each,
        and a partition given, or the built-in partitioner: sticky for ``keyless`` rows
        (those without a key column), hashing keys for keyed ones (the rows' murmur2 is the
        Java client's, as :class:`DefaultPartitioner` uses, not a subclass's)."""
        if not (
            self.intercept is None
            and self.value_serializer is None
            and self.key_serializer is None
            and not self._check_each_record
        ):
            return False
        if partition is not None:
            return True
        if keyless:
            return self._sticky_runs
        default = self._default_partitioner
        return (
            default is not None and type(default) is DefaultPartitioner and not self._keys_ignored
        )

    def append_rows(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        rows: Any,
        start: int,
        results: BatchResults,
    ) -> int:
        """Append the rows of ``rows`` (a BinaryPairs, from ``aioproducer._native.arrowcols``:
        the keys and values of an Arrow batch) from ``start`` on, until a row of a keyed
        batch has no key (with no ``partition`` given), a row of a key-less one needs a new
        batch, or a row needs a new batch while the pool has no memory free; return the
        index reached. Only where :meth:`takes_rows` says so.

        :meth:`append_pairs` over the columns' buffers: the same chunks and rounds, each
        chunk grouped by partition (``rows.group``: the murmur2 of each key, taken modulo
        the partition count) and each partition's rows written into its open batch as one
        piece (``rows.encode``). Rows without a key column (``rows.keyless()``) go as
        :meth:`append_values` takes plain values, when no partition is given. The rows from
        the returned index on are untouched; the one there goes the general way (as a
        ``(key, value)`` tuple).
        """
        self.check_sendable()
        layout = self.topic_layout(topic)
        if layout is None:
            return start
        count = layout[0]
        if partition is not None and not 0 <= partition < count:
            return start
        if partition is None and rows.keyless():
            return self._append_keyless_rows(topic, timestamp, rows, start, results, layout)
        chosen = -1 if partition is None else partition
        empty: list[Any] = []
        total = len(rows)
        index = start
        while index < total:
            size = min(total - index, _PAIR_CHUNK)
            grouped = rows.group(index, size, count, chosen)
            groups: dict[int, list[int]] = grouped[0]
            largest: int = grouped[1]
            taken: int = grouped[2]
            if taken == 0:
                break
            stopped = self._append_chunk(
                topic, timestamp, empty, rows, index, taken, groups, largest, results
            )
            if stopped < taken:
                return index + stopped
            index += taken
            if taken < size:
                break  # a row without a key: the general path takes it
        return index

    def _append_keyless_rows(
        self,
        topic: str,
        timestamp: int,
        rows: Any,
        start: int,
        results: BatchResults,
        layout: tuple[int, Any],
    ) -> int:
        """:meth:`append_values` for the rows of ``rows``, which have no key column: each run
        goes to the partition the sticky partitioner picks, into its open batch, and the
        partitioner hears of the bytes added. Returns the index of the row that needs a new
        batch: the general path starts it (asking the partitioner, then telling it), and the
        caller comes back for the rest."""
        count, available = layout
        accumulator = self._accumulator
        total = len(rows)
        index = start
        while index < total:
            chosen = self.choose_partition(topic, None, count, available)
            reached = accumulator.append_value_rows(
                topic, chosen, timestamp, rows, index, total, results
            )
            if reached == index:
                break
            if self._record_appended is not None:
                size = 10 * (reached - index) + rows.value_bytes(index, reached)
                last = results.last_batch
                assert last is not None
                self._tell_record_appended(topic, chosen, size, last.full, last)
            index = reached
        return index

    def _append_chunk(
        self,
        topic: str,
        timestamp: int,
        items: list[Any],
        rows: Any,
        base: int,
        size: int,
        groups: dict[int, list[int]],
        largest: int,
        results: BatchResults,
    ) -> int:
        """Append the pairs ``items[base:base + size]`` (or those rows of ``rows``, a
        BinaryPairs, when it is not None), whose places in the chunk ``groups`` holds by
        partition (no key and value longer together than ``largest``); return the place of
        the first that must wait for memory (``size`` when none must).

        Rounds: every partition's records that fit its open batch go in, up to the first
        record (in the chunk's order) that does not fit its partition's; that one starts a
        new batch, and the next round goes on from it. So nothing after a record that must
        wait is taken, and each partition's records keep their order.
        """
        accumulator = self._accumulator
        first_position = len(results)
        partitions = list(groups)
        members = list(groups.values())
        count = len(partitions)
        batches: list[ProducerBatch | None] = []
        # Per partition: how many of its records are appended, and how many fit its batch.
        appended = [0] * count
        fitting = [0] * count
        for number in range(count):
            batch = accumulator.open_batch(topic, partitions[number])
            batches.append(batch)
            fitting[number] = _pairs_fitting(
                batch, timestamp, items, rows, base, members[number], 0, largest
            )
        while True:
            cutoff = size
            stalled = -1
            for number in range(count):
                group = members[number]
                end = fitting[number]
                if end < len(group) and group[end] < cutoff:
                    cutoff = group[end]
                    stalled = number
            for number in range(count):
                group = members[number]
                first = appended[number]
                end = fitting[number]
                if cutoff == size:
                    stop = end  # every place in the chunk is below its size
                else:
                    stop = first
                    while stop < end and group[stop] < cutoff:
                        stop += 1
                if stop > first:
                    batch = batches[number]
                    assert batch is not None
                    accumulator.append_pairs(
                        batch,
                        timestamp,
                        items,
                        base,
                        group,
                        first,
                        stop,
                        results,
                        first_position,
                        rows,
                    )
                    appended[number] = stop
            results.count_to(first_position + cutoff)
            if stalled < 0:
                return size
            # The record at the cutoff starts a new batch, if the pool has memory now.
            if rows is not None:
                key, value = cast("tuple[bytes | None, bytes | None]", rows[base + cutoff])
            else:
                key, value = cast("tuple[bytes, bytes]", items[base + cutoff])
            future = self._start_batch(topic, partitions[stalled], timestamp, key, value, None)
            if future is None:
                return cutoff
            results.add_future(future)
            batch = future._batch
            batches[stalled] = batch
            first = appended[stalled] + 1
            appended[stalled] = first
            fitting[stalled] = _pairs_fitting(
                batch, timestamp, items, rows, base, members[stalled], first, largest
            )

    def append_values(
        self,
        topic: str,
        partition: int | None,
        timestamp: int,
        values: list[Any] | tuple[Any, ...],
        start: int,
        stop: int,
        results: BatchResults,
    ) -> tuple[int, PendingRecord | None]:
        """Append ``values[start:stop]`` (plain bytes, no key) without waiting; return the
        index reached, and the record there prepared when it must wait for memory (None
        when it must wait for metadata, or no record waits)."""
        layout = self.topic_layout(topic)
        if layout is None:
            return start, None
        count, available = layout
        accumulator = self._accumulator
        record_appended = self._record_appended
        index = start
        while index < stop:
            if partition is None:
                chosen = self.choose_partition(topic, None, count, available)
            elif 0 <= partition < count:
                chosen = partition
            else:
                return index, None
            reached = accumulator.append_values(
                topic, chosen, timestamp, values, index, stop, results
            )
            if reached == index:
                # No open batch with room: start one with the next value.
                value = values[index]
                appended = self.take(topic, chosen, timestamp, None, value, None, None)
                if isinstance(appended, PendingRecord):
                    # The partition asked for, and whether the partitioner chose (then it is
                    # told of the record once appended).
                    appended.partition = partition
                    appended.sticky = partition is None
                    return index, appended
                future = appended
                assert future is not None  # without results, a future or a pending record
                results.add_future(future)
                if partition is None:
                    # As send() does for a key-less record: the sticky partitioner counts
                    # the bytes of a batch's first record too (uncounted, records as big as
                    # half a batch never moved it to another partition).
                    self.note_sticky_append(topic, chosen, value, future._batch)
                reached = index + 1
            elif partition is None and record_appended is not None:
                size = 10 * (reached - index)
                for position in range(index, reached):
                    size += len(values[position])
                last = results.last_batch
                assert last is not None
                self._tell_record_appended(topic, chosen, size, last.full, last)
            index = reached
        return index, None
