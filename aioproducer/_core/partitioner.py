"""Partitioners: which partition of a topic a record goes to.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

The producer calls :meth:`Partitioner.partition` once per record that has no explicit
partition. The builtin partitioners, picked by name with the ``partitioner`` option:

``"default"`` (or None): :class:`DefaultPartitioner`, the Java client's builtin one. A keyed
    record goes to ``to_positive(murmur2(key)) % partition_count``, the same partition the Java
    client and librdkafka's ``murmur2_random`` choose. Records without a key (or every record,
    with ``partitioner_ignore_keys``) follow KIP-794's uniform sticky partitioning.
``"uniform_sticky"``: the default partitioner with keys ignored.
``"round_robin"``: :class:`RoundRobinPartitioner`, each record to the next available partition.
``"murmur3"``: :class:`Murmur3Partitioner`, keyed records by unsigned 32-bit MurmurHash3.
``"consistent"``: :class:`ConsistentPartitioner`, CRC-32 of the key, like librdkafka.

Any other object with a ``partition()`` method can be given as the partitioner, or a plain
callable ``(topic, key_bytes, partition_count) -> int``.

Sticky partitioning (KIP-794)
-----------------------------
Records without a key stick to one partition until ``batch_size`` bytes have been appended to
it, then a new partition is picked at random. Batches fill up, so fewer and larger requests
are sent than with a partition per record. With adaptive partitioning (the default), the
random choice is weighted: a partition whose queue of waiting batches is shorter is more
likely to be picked, so a slow broker receives less. Partitions whose broker has had ready
batches nobody could drain for ``partitioner_availability_timeout_ms`` are left out.

The sticky partitioners need three calls from the producer's pipeline (all cheap; a
partitioner without the hooks simply does not get them):

* :meth:`DefaultPartitioner.record_appended` after each record appended to a batch, with the
  record's size, so the partitioner knows when to switch;
* :meth:`DefaultPartitioner.update_partition_load` from the accumulator's ``ready()``, with the
  number of batches queued per partition (only when ``wants_partition_load`` is True);
* :class:`BrokerAvailability` tells the accumulator which partitions to leave out of that list:
  the sender reports each broker with ready data and whether it could drain it.
"""

from __future__ import annotations

import abc
import operator
import random
import struct
import zlib
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import mmh3
from mypy_extensions import i64, mypyc_attr

from aioproducer.errors import PartitionerError

__all__ = [
    "PARTITIONER_NAMES",
    "BasePartitioner",
    "BrokerAvailability",
    "CallablePartitioner",
    "ConsistentPartitioner",
    "DefaultPartitioner",
    "Murmur3Partitioner",
    "PartitionFunction",
    "Partitioner",
    "RoundRobinPartitioner",
    "make_partitioner",
    "murmur2",
    "to_positive",
]

PARTITIONER_NAMES: Final = ("default", "uniform_sticky", "round_robin", "murmur3", "consistent")
"""The names the ``partitioner`` option accepts."""

PartitionFunction = Callable[[str, bytes | None, int], int]
"""A plain partitioning function: ``(topic, key_bytes, partition_count) -> partition``."""


# ---- hashes ---------------------------------------------------------------------------------

# True when this module runs as plain Python, False when mypyc compiled it (__file__ is
# then the extension module).
_INTERPRETED: Final = __file__.endswith(".py")
_M: Final = 0x5BD1E995
_M_LOW: Final = _M & 0xFFFF
_M_HIGH: Final = _M >> 16
_MASK32: Final = 0xFFFFFFFF
_SEED: Final = 0x9747B28C
_word_readers: dict[int, Callable[[bytes | bytearray | memoryview], tuple[Any, ...]]] = {}


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """The 32-bit MurmurHash2 of ``data``, exactly as the Java client's ``Utils.murmur2``.

    Returns a signed 32-bit int, like Java. ``to_positive(murmur2(key)) % n`` is the partition
    the Java client picks for ``key`` among ``n`` partitions.
    """
    # The hash is of the bytes: a memoryview of wider items counts its items in len().
    key = data if type(data) is bytes else bytes(data)
    if _INTERPRETED:
        return _murmur2_python(key)
    return _murmur2_bytes(key)


def _murmur2_bytes(data: bytes) -> int:
    # Compiled: i64 locals make this C arithmetic instead of Python ints, and indexing bytes
    # reads a byte without making an object (unpacking the words with struct made a tuple of
    # ints, more than twice as slow: figures in bench/README.md).
    # Products of 32-bit numbers would overflow 64 bits, so each multiplication by _M is
    # split in two halves whose products stay below 2**49.
    length: i64 = len(data)
    h: i64 = (_SEED ^ length) & _MASK32
    end: i64 = length - (length & 3)
    i: i64 = 0
    while i < end:
        k: i64 = (
            i64(data[i])
            | (i64(data[i + 1]) << 8)
            | (i64(data[i + 2]) << 16)
            | (i64(data[i + 3]) << 24)
        )
        k = (k * _M_LOW + (((k * _M_HIGH) & 0xFFFF) << 16)) & _MASK32
        k ^= k >> 24
        k = (k * _M_LOW + (((k * _M_HIGH) & 0xFFFF) << 16)) & _MASK32
        h = ((h * _M_LOW + (((h * _M_HIGH) & 0xFFFF) << 16)) ^ k) & _MASK32
        i += 4
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= i64(data[end + 2]) << 16
        if tail >= 2:
            h ^= i64(data[end + 1]) << 8
        h ^= i64(data[end])
        h = (h * _M_LOW + (((h * _M_HIGH) & 0xFFFF) << 16)) & _MASK32
    h ^= h >> 13
    h = (h * _M_LOW + (((h * _M_HIGH) & 0xFFFF) << 16)) & _MASK32
    h ^= h >> 15
    return int(h - 0x100000000 if h & 0x80000000 else h)


def _murmur2_python(data: bytes | bytearray | memoryview) -> int:
    # The same hash on plain ints, for when this module runs interpreted: there one
    # multiplication and a mask are cheaper than the split multiplications above.
    length = len(data)
    h = _SEED ^ length
    words = length >> 2
    if words:
        read = _word_readers.get(words)
        if read is None:
            read = _word_readers[words] = struct.Struct(f"<{words}I").unpack_from
        for k in read(data):
            k = (k * _M) & _MASK32
            k = ((k ^ (k >> 24)) * _M) & _MASK32
            h = ((h * _M) ^ k) & _MASK32
    tail = length & 3
    if tail:
        i = length - tail
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Clear the sign bit of a 32-bit int, as Java's ``Utils.toPositive`` (not ``abs``)."""
    return number & 0x7FFFFFFF


# ---- the protocol ---------------------------------------------------------------------------


class Partitioner(Protocol):
    """What the producer needs from a partitioner."""

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        partition_count: int,
        available: Sequence[int],
    ) -> int:
        """Pick the partition, from 0 to ``partition_count - 1``, for one record.

        Args:
            topic: the record's topic.
            key_bytes: the serialized key, or None.
            partition_count: how many partitions the topic has.
            available: the partitions that have a leader now (possibly empty).
        """
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass it; the module is compiled
class BasePartitioner(abc.ABC):
    """A convenient base for partitioners: every hook the pipeline may call, doing nothing.

    Attributes:
        wants_partition_load: True when the accumulator should call
            :meth:`update_partition_load`; computing queue sizes costs time, so it is skipped
            otherwise.
    """

    wants_partition_load: bool = False

    @abc.abstractmethod
    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        partition_count: int,
        available: Sequence[int],
    ) -> int:
        """Pick the partition for one record; see :meth:`Partitioner.partition`."""

    def record_appended(  # noqa: B027 - an optional hook: doing nothing is the default
        self, topic: str, partition: int, size_bytes: int, *, switch_allowed: bool = True
    ) -> None:
        """``size_bytes`` were appended to a batch of ``partition``; ignored by default."""

    def update_partition_load(  # noqa: B027 - an optional hook: doing nothing is the default
        self,
        topic: str,
        queue_sizes: Sequence[int],
        partition_ids: Sequence[int],
        *,
        partition_count: int | None = None,
    ) -> None:
        """Batches queued per partition of ``topic``; ignored by default."""


# ---- sticky partitioning --------------------------------------------------------------------


class _StickyTopic:
    """The sticky state of one topic."""

    __slots__ = ("load_partitions", "load_table", "partition", "produced_bytes")

    def __init__(self) -> None:
        # -1 until a partition is picked, and again after a switch: the next partition() call
        # picks, because only it knows the partition count and which partitions are available.
        self.partition = -1
        self.produced_bytes = 0
        # Cumulative weights and their partitions, from update_partition_load; None to pick
        # uniformly among available partitions.
        self.load_table: list[int] | None = None
        self.load_partitions: list[int] = []


# Interpreted only (see DefaultPartitioner.partition), cache the hash of short keys: real
# workloads repeat keys (user ids, device ids), and a dict lookup costs far less than hashing
# in Python (bench/README.md). Long keys are rarely repeated and cost memory.
_CACHE_LIMIT: Final = 8192
_CACHED_KEY_MAX: Final = 128


class DefaultPartitioner(BasePartitioner):
    """Keyed records by murmur2 (Java-compatible), the rest by KIP-794 sticky partitioning.

    Mirrors the Java client's ``BuiltInPartitioner``: a topic's null-key records go to one
    partition until at least ``batch_size`` bytes were appended to it (reported through
    :meth:`record_appended`), then a partition is picked at random: uniformly among the
    available partitions, or, when adaptive partitioning is on and the accumulator reported
    queue sizes (:meth:`update_partition_load`), with a probability that grows as the
    partition's queue shrinks.

    Args:
        batch_size: bytes to append to a partition before switching (``batch_size``; values
            below 1 count as 1).
        ignore_keys: treat keyed records like null-key ones (``partitioner_ignore_keys``).
        adaptive: weight the choice by queue sizes
            (``partitioner_adaptive_partitioning_enable``).
        rng: the random source, for tests; a private ``random.Random`` by default.
    """

    def __init__(
        self,
        batch_size: int = 16384,
        *,
        ignore_keys: bool = False,
        adaptive: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self._batch_size = max(1, batch_size)
        self._ignore_keys = ignore_keys
        self._adaptive = adaptive
        self.wants_partition_load = adaptive
        self._rng = rng if rng is not None else random.Random()
        # The private source's random(), one C call, instead of randrange (several Python
        # calls, about a microsecond, once per batch); an rng given for a test is used as is.
        self._random: Callable[[], float] | None = self._rng.random if rng is None else None
        self._topics: dict[str, _StickyTopic] = {}
        self._hashes: dict[bytes, int] = {}

    @property
    def ignores_keys(self) -> bool:
        """True when keyed records are partitioned as null-key ones
        (``partitioner_ignore_keys``)."""
        return self._ignore_keys

    def key_hash(self, key_bytes: bytes) -> int:
        """The non-negative hash a keyed record's partition is taken modulo the count of."""
        return to_positive(murmur2(key_bytes))

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        partition_count: int,
        available: Sequence[int],
    ) -> int:
        """Hash the key, or return the topic's sticky partition for null keys."""
        if key_bytes is not None and not self._ignore_keys:
            if not _INTERPRETED or type(key_bytes) is not bytes:
                # Compiled, murmur2 of a short key costs about what a dict lookup does
                # (bench/README.md), so no hash is cached: a cache only added its inserts, and
                # cleared itself over and over once more keys came by than it held.
                # bytearray and memoryview keys are not hashable.
                return self.key_hash(key_bytes) % partition_count
            hashes = self._hashes
            value = hashes.get(key_bytes)
            if value is None:
                value = self.key_hash(key_bytes)
                if len(key_bytes) <= _CACHED_KEY_MAX:
                    if len(hashes) >= _CACHE_LIMIT:
                        hashes.clear()
                    hashes[key_bytes] = value
            return value % partition_count
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _StickyTopic()
        current = state.partition
        if 0 <= current < partition_count:
            return current
        return self._pick(state, partition_count, available)

    def sticky_partition(self, topic: str) -> int | None:
        """The partition null-key records of ``topic`` currently stick to, if one is picked."""
        state = self._topics.get(topic)
        return None if state is None or state.partition < 0 else state.partition

    def _below(self, stop: int) -> int:
        # A uniform int in [0, stop).
        fast = self._random
        if fast is not None:
            return min(int(fast() * stop), stop - 1)
        chosen: int = self._rng.randrange(stop)
        return chosen

    def _pick(self, state: _StickyTopic, partition_count: int, available: Sequence[int]) -> int:
        table = state.load_table
        chosen = -1
        if table is not None:
            # The weights were inverted queue sizes, summed up: a uniform number below the
            # total lands in a partition's slot with probability proportional to its weight.
            chosen = state.load_partitions[bisect_right(table, self._below(table[-1]))]
        if not 0 <= chosen < partition_count:
            if available:
                chosen = available[self._below(len(available))]
            else:
                chosen = self._below(partition_count)
        state.partition = chosen
        state.produced_bytes = 0
        return chosen

    def record_appended(
        self, topic: str, partition: int, size_bytes: int, *, switch_allowed: bool = True
    ) -> None:
        """Count ``size_bytes`` appended to ``partition``; switch once ``batch_size`` is reached.

        Call after each record appended to a batch. Bytes for a partition other than the
        topic's sticky one are ignored (keyed records, explicit partitions).

        Args:
            switch_allowed: False while the partition's last batch is not full yet, as Java's
                accumulator does with high ``linger_ms``: the switch then waits so the batch
                can fill, but happens regardless at twice ``batch_size``.
        """
        state = self._topics.get(topic)
        if state is None or state.partition != partition:
            return
        produced = state.produced_bytes + size_bytes
        limit = self._batch_size
        if (produced >= limit and switch_allowed) or produced >= 2 * limit:
            state.partition = -1
            state.produced_bytes = 0
        else:
            state.produced_bytes = produced

    def update_partition_load(
        self,
        topic: str,
        queue_sizes: Sequence[int],
        partition_ids: Sequence[int],
        *,
        partition_count: int | None = None,
    ) -> None:
        """Take the number of batches queued per partition of ``topic``, for adaptive choice.

        The accumulator calls this from ``ready()`` (Java's ``updatePartitionLoadStats``).

        Args:
            queue_sizes: batches waiting in each partition, in the order of ``partition_ids``.
            partition_ids: the partitions to choose among; leave out partitions without a
                leader and those whose broker :class:`BrokerAvailability` says is unavailable.
                Empty sequences drop the statistics.
            partition_count: how many partitions the topic has, when ``partition_ids`` leaves
                some out (default: ``len(partition_ids)``).
        """
        if not self._adaptive:
            return
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _StickyTopic()
        length = len(partition_ids)
        total = length if partition_count is None else partition_count
        if length != len(queue_sizes):
            raise ValueError("queue_sizes and partition_ids differ in length")
        if total < 2 or length == 0:
            state.load_table = None
            return
        largest = max(queue_sizes)
        if length == total and min(queue_sizes) == largest:
            # Equal queues on every partition: a uniform choice is the same, and cheaper.
            state.load_table = None
            return
        # Invert each size against the largest + 1 (so the longest queue keeps weight 1) and
        # accumulate, as Java's cumulative frequency table.
        ceiling = largest + 1
        table = []
        running = 0
        for size in queue_sizes:
            running += ceiling - size
            table.append(running)
        state.load_table = table
        state.load_partitions = list(partition_ids)


class Murmur3Partitioner(DefaultPartitioner):
    """Keyed records by MurmurHash3; null keys sticky, as :class:`DefaultPartitioner`.

    The partition is ``mmh3.hash(key, seed=0, signed=False) % partition_count``: the unsigned
    32-bit MurmurHash3 (x86) of the key with seed 0, so the whole 32-bit range is used rather
    than clearing the sign bit. This is not what the Java client or librdkafka choose; use it
    only where every producer to the topic does the same.
    """

    def key_hash(self, key_bytes: bytes) -> int:
        """The unsigned 32-bit MurmurHash3 of the key, seed 0."""
        return int(mmh3.hash(key_bytes, 0, signed=False))


# ---- other builtins -------------------------------------------------------------------------


class RoundRobinPartitioner(BasePartitioner):
    """Each record of a topic to the next partition in turn, keys ignored.

    As the Java client's ``RoundRobinPartitioner``: a per-topic counter, taken modulo the
    number of available partitions (or of all partitions when none is available).
    """

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        partition_count: int,
        available: Sequence[int],
    ) -> int:
        """The next partition in turn for ``topic``."""
        counters = self._counters
        turn = counters.get(topic, 0)
        counters[topic] = (turn + 1) & 0x7FFFFFFF
        if available:
            return available[turn % len(available)]
        return turn % partition_count


class ConsistentPartitioner(BasePartitioner):
    """``crc32(key) % partition_count``, librdkafka's ``consistent`` partitioner.

    As librdkafka, a null key hashes like an empty key (CRC-32 0), so every null-key record
    goes to partition 0. Records with the same key land on the same partition as with
    librdkafka (and confluent-kafka) configured with ``partitioner=consistent``.
    """

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        partition_count: int,
        available: Sequence[int],
    ) -> int:
        """The CRC-32 of the key modulo the partition count."""
        if key_bytes is None:
            return 0
        return zlib.crc32(key_bytes) % partition_count


class CallablePartitioner(BasePartitioner):
    """Adapts a function ``(topic, key_bytes, partition_count) -> int`` to a partitioner.

    Raises :class:`~aioproducer.errors.PartitionerError` when the function returns something
    that is not a partition of the topic. Exceptions the function raises propagate unchanged.
    """

    def __init__(self, function: PartitionFunction) -> None:
        self.function = function
        # Typed as returning object, not int: this module is compiled, and mypyc would turn a
        # wrong answer into its own TypeError before partition() could explain it.
        self._call: Callable[[str, bytes | None, int], object] = function

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        partition_count: int,
        available: Sequence[int],
    ) -> int:
        """Call the function and check its answer is a partition of the topic."""
        result = self._call(topic, key_bytes, partition_count)
        if type(result) is int and 0 <= result < partition_count:
            return result
        return self._checked(topic, result, partition_count)

    def _checked(self, topic: str, result: Any, partition_count: int) -> int:
        try:
            number = operator.index(result)
        except TypeError:
            number = None
        if isinstance(result, bool) or number is None:
            raise PartitionerError(
                f"the partitioner {self.function!r} returned {result!r} for topic {topic!r}; "
                f"it must return an int"
            )
        if not 0 <= number < partition_count:
            raise PartitionerError(
                f"the partitioner {self.function!r} returned partition {number} for topic "
                f"{topic!r}, which has partitions 0 to {partition_count - 1}"
            )
        return int(number)

    def __repr__(self) -> str:
        return f"CallablePartitioner({self.function!r})"


# ---- broker availability --------------------------------------------------------------------


class BrokerAvailability:
    """Which brokers keep up with the batches ready for them (Java's ``NodeLatencyStats``).

    For ``partitioner_availability_timeout_ms``: each time the sender finds a broker with
    ready batches, it calls :meth:`update` with whether it could drain them (the connection was
    ready). A broker that had ready data but could not take any for longer than the timeout is
    unavailable, and the accumulator leaves its partitions out of
    :meth:`DefaultPartitioner.update_partition_load`. With a timeout of 0 nothing is tracked
    and every broker is available.

    Times are in seconds, on the same clock as the sender's ``now``.
    """

    __slots__ = ("_drained", "_ready", "timeout")

    def __init__(self, timeout_ms: int) -> None:
        self.timeout = timeout_ms / 1000.0
        self._ready: dict[int, float] = {}
        self._drained: dict[int, float] = {}

    @property
    def enabled(self) -> bool:
        """True when a timeout is set, so the sender's reports matter."""
        return self.timeout > 0

    def update(self, node_id: int, now: float, can_drain: bool) -> None:
        """The broker ``node_id`` had ready batches at ``now``; ``can_drain`` if it took them."""
        if self.timeout <= 0:
            return
        if node_id not in self._ready or can_drain:
            self._drained[node_id] = now
        self._ready[node_id] = now

    def is_available(self, node_id: int) -> bool:
        """False when the broker had ready data it could not take for longer than the timeout."""
        ready = self._ready.get(node_id)
        if ready is None:
            return True
        return ready - self._drained[node_id] <= self.timeout

    def forget(self, node_id: int) -> None:
        """Drop what is known about a broker that left the cluster."""
        self._ready.pop(node_id, None)
        self._drained.pop(node_id, None)


# ---- choosing one ---------------------------------------------------------------------------


class PartitionerOptions(Protocol):
    """The options :func:`make_partitioner` reads (a
    :class:`~aioproducer.config.ProducerConfig` has them)."""

    @property
    def partitioner(self) -> str | PartitionFunction | Partitioner | None: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def partitioner_ignore_keys(self) -> bool: ...
    @property
    def partitioner_adaptive_partitioning_enable(self) -> bool: ...


def make_partitioner(config: PartitionerOptions) -> Partitioner:
    """The partitioner ``config.partitioner`` names, set up from ``config``.

    A fresh builtin partitioner per call (their state is per producer). An object with a
    ``partition()`` method is used as it is; any other callable is wrapped in a
    :class:`CallablePartitioner`.
    """
    choice = config.partitioner
    if choice is None or choice == "default":
        return DefaultPartitioner(
            config.batch_size,
            ignore_keys=config.partitioner_ignore_keys,
            adaptive=config.partitioner_adaptive_partitioning_enable,
        )
    if choice == "uniform_sticky":
        return DefaultPartitioner(
            config.batch_size,
            ignore_keys=True,
            adaptive=config.partitioner_adaptive_partitioning_enable,
        )
    if choice == "murmur3":
        return Murmur3Partitioner(
            config.batch_size,
            ignore_keys=config.partitioner_ignore_keys,
            adaptive=config.partitioner_adaptive_partitioning_enable,
        )
    if choice == "round_robin":
        return RoundRobinPartitioner()
    if choice == "consistent":
        return ConsistentPartitioner()
    if isinstance(choice, str):
        raise PartitionerError(f"unknown partitioner {choice!r}")
    if callable(getattr(choice, "partition", None)):
        return choice  # type: ignore[return-value]
    return CallablePartitioner(choice)  # type: ignore[arg-type]
