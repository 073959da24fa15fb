"""Partitioners: Java-compatible hashing, KIP-794 sticky partitioning and the other builtins."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from aioproducer._core.partitioner import (
    BrokerAvailability,
    CallablePartitioner,
    ConsistentPartitioner,
    DefaultPartitioner,
    Murmur3Partitioner,
    Partitioner,
    RoundRobinPartitioner,
    make_partitioner,
    murmur2,
    to_positive,
)
from aioproducer.config import ProducerConfig
from aioproducer.errors import PartitionerError

# Kafka's UtilsTest.testMurmur2: the values the Java client computes.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def random_keys(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(0, 64)) for _ in range(count)]


class Cycle(random.Random):
    """A random source whose randrange(n) returns 0, 1, ..., n-1, 0, ... in turn."""

    def __init__(self) -> None:
        super().__init__(0)
        self.calls = 0

    def randrange(self, start: int, stop: Any = None, step: int = 1) -> int:
        assert stop is None and step == 1
        value = self.calls % start
        self.calls += 1
        return value


# ---- hashes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_the_java_client(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_takes_any_bytes_like() -> None:
    for key in JAVA_MURMUR2:
        assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == JAVA_MURMUR2[key]
    # A view of wider items hashes its bytes, as the bytes themselves do.
    wide = memoryview(b"a-little-bit-long-string").cast("H")
    assert murmur2(wide) == JAVA_MURMUR2[b"a-little-bit-long-string"]


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_murmur2_partition_matches_librdkafka() -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    if not hasattr(confluent_kafka, "murmur2"):
        pytest.skip("confluent-kafka < 2.13 has no murmur2 helper")
    rng = random.Random(3)
    for key in random_keys(3000):
        count = rng.choice([1, 2, 3, 7, 12, 64, 1000, 2**31 - 1])
        assert to_positive(murmur2(key)) % count == confluent_kafka.murmur2(key, count), key


def test_default_partitioner_places_keys_like_librdkafka() -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    if not hasattr(confluent_kafka, "murmur2"):
        pytest.skip("confluent-kafka < 2.13 has no murmur2 helper")
    partitioner = DefaultPartitioner()
    for _ in range(2):  # interpreted, the second round is served from the hash cache
        for key in random_keys(500, seed=11):
            chosen = partitioner.partition("t", key, 24, range(24))
            assert chosen == confluent_kafka.murmur2(key, 24)


def test_consistent_matches_librdkafka() -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    if not hasattr(confluent_kafka, "consistent"):
        pytest.skip("confluent-kafka < 2.13 has no consistent helper")
    partitioner = ConsistentPartitioner()
    for key in random_keys(2000):
        assert partitioner.partition("t", key, 13, range(13)) == confluent_kafka.consistent(key, 13)
    # librdkafka hashes a null key as an empty one: CRC-32 0, partition 0.
    assert partitioner.partition("t", None, 13, [4, 5]) == confluent_kafka.consistent(b"", 13) == 0


def test_murmur3_uses_unsigned_murmurhash3_seed_0() -> None:
    partitioner = Murmur3Partitioner()
    # Published MurmurHash3_x86_32 vectors, seed 0.
    fox = b"The quick brown fox jumps over the lazy dog"
    assert partitioner.key_hash(fox) == 0x2E4FF723
    assert partitioner.key_hash(b"hello") == 0x248BFA47
    assert partitioner.partition("t", fox, 1000, range(1000)) == 0x2E4FF723 % 1000


# ---- sticky partitioning --------------------------------------------------------------------


def test_null_keys_stick_until_batch_size_bytes_were_appended() -> None:
    partitioner = DefaultPartitioner(batch_size=1000, rng=random.Random(1))
    first = partitioner.partition("t", None, 50, range(50))
    for _ in range(9):
        partitioner.record_appended("t", first, 100)
        assert partitioner.partition("t", None, 50, range(50)) == first
    assert partitioner.sticky_partition("t") == first
    partitioner.record_appended("t", first, 100)  # 1000 bytes: switch
    assert partitioner.sticky_partition("t") is None
    second = partitioner.partition("t", None, 50, range(50))
    assert partitioner.partition("t", None, 50, range(50)) == second


def test_switches_spread_over_the_available_partitions() -> None:
    partitioner = DefaultPartitioner(batch_size=10, rng=random.Random(5))
    seen: Counter[int] = Counter()
    for _ in range(3000):
        chosen = partitioner.partition("t", None, 6, [1, 3, 4])
        seen[chosen] += 1
        partitioner.record_appended("t", chosen, 10)
    assert set(seen) == {1, 3, 4}
    assert min(seen.values()) > 800  # about 1000 each


def test_no_available_partition_falls_back_to_all() -> None:
    partitioner = DefaultPartitioner(batch_size=1, rng=Cycle())
    chosen = []
    for _ in range(4):
        chosen.append(partitioner.partition("t", None, 4, []))
        partitioner.record_appended("t", chosen[-1], 1)
    assert chosen == [0, 1, 2, 3]


def test_bytes_for_other_partitions_do_not_count() -> None:
    partitioner = DefaultPartitioner(batch_size=100, rng=random.Random(2))
    sticky = partitioner.partition("t", None, 10, range(10))
    partitioner.record_appended("t", (sticky + 1) % 10, 500)
    partitioner.record_appended("other-topic", sticky, 500)
    assert partitioner.sticky_partition("t") == sticky


def test_switch_waits_for_a_full_batch_but_not_beyond_twice_batch_size() -> None:
    partitioner = DefaultPartitioner(batch_size=100, rng=random.Random(4))
    sticky = partitioner.partition("t", None, 10, range(10))
    partitioner.record_appended("t", sticky, 150, switch_allowed=False)
    assert partitioner.sticky_partition("t") == sticky
    partitioner.record_appended("t", sticky, 49, switch_allowed=False)
    assert partitioner.sticky_partition("t") == sticky
    partitioner.record_appended("t", sticky, 1, switch_allowed=False)  # 200 = 2 * batch_size
    assert partitioner.sticky_partition("t") is None


def test_topics_stick_independently() -> None:
    partitioner = DefaultPartitioner(batch_size=10, rng=Cycle())
    a = partitioner.partition("a", None, 8, range(8))
    b = partitioner.partition("b", None, 8, range(8))
    partitioner.record_appended("a", a, 10)
    assert partitioner.partition("b", None, 8, range(8)) == b
    assert partitioner.partition("a", None, 8, range(8)) != a


def test_ignore_keys_makes_keyed_records_sticky() -> None:
    partitioner = DefaultPartitioner(ignore_keys=True, rng=random.Random(9))
    chosen = {partitioner.partition("t", key, 100, range(100)) for key in random_keys(50)}
    assert len(chosen) == 1


class TestAdaptive:
    def switch_counts(
        self, partitioner: DefaultPartitioner, switches: int, count: int = 4
    ) -> Counter[int]:
        seen: Counter[int] = Counter()
        for _ in range(switches):
            chosen = partitioner.partition("t", None, count, range(count))
            seen[chosen] += 1
            partitioner.record_appended("t", chosen, 16384)
        return seen

    def test_weights_are_inverted_queue_sizes(self) -> None:
        partitioner = DefaultPartitioner(rng=Cycle())
        partitioner.update_partition_load("t", [0, 3, 1, 4], [0, 1, 2, 3])
        # Weights are (largest + 1) - size = 5, 2, 4, 1; a full cycle of the random source
        # over the 12 slots hits each partition exactly its weight's number of times.
        assert self.switch_counts(partitioner, 12) == {0: 5, 1: 2, 2: 4, 3: 1}

    def test_less_loaded_partitions_are_preferred(self) -> None:
        partitioner = DefaultPartitioner(rng=random.Random(8))
        partitioner.update_partition_load("t", [0, 10, 10, 10], [0, 1, 2, 3])
        seen = self.switch_counts(partitioner, 1400)
        assert seen[0] > 3 * max(seen[1], seen[2], seen[3])

    def test_partitions_left_out_are_never_chosen(self) -> None:
        partitioner = DefaultPartitioner(rng=random.Random(8))
        partitioner.update_partition_load("t", [2, 2], [1, 3], partition_count=4)
        assert set(self.switch_counts(partitioner, 200)) == {1, 3}

    def test_equal_queues_everywhere_mean_a_uniform_choice(self) -> None:
        partitioner = DefaultPartitioner(rng=Cycle())
        partitioner.update_partition_load("t", [3, 3, 3, 3], [0, 1, 2, 3])
        assert self.switch_counts(partitioner, 8) == {0: 2, 1: 2, 2: 2, 3: 2}

    def test_empty_statistics_drop_the_weights(self) -> None:
        partitioner = DefaultPartitioner(rng=random.Random(8))
        partitioner.update_partition_load("t", [0, 50, 50, 50], [0, 1, 2, 3])
        partitioner.update_partition_load("t", [], [])
        seen = self.switch_counts(partitioner, 2000)
        assert min(seen.values()) > 400  # about 500 each again

    def test_disabled_adaptive_ignores_the_load(self) -> None:
        partitioner = DefaultPartitioner(adaptive=False, rng=Cycle())
        assert not partitioner.wants_partition_load
        partitioner.update_partition_load("t", [0, 3, 1, 4], [0, 1, 2, 3])
        assert self.switch_counts(partitioner, 8) == {0: 2, 1: 2, 2: 2, 3: 2}

    def test_mismatched_lengths_are_rejected(self) -> None:
        with pytest.raises(ValueError):
            DefaultPartitioner().update_partition_load("t", [1, 2], [0])


def test_broker_availability() -> None:
    disabled = BrokerAvailability(0)
    disabled.update(1, 0.0, False)
    disabled.update(1, 100.0, False)
    assert not disabled.enabled and disabled.is_available(1)

    availability = BrokerAvailability(500)
    assert availability.enabled and availability.is_available(1)
    availability.update(1, 10.0, False)  # first report: counts as just drained
    availability.update(1, 10.5, False)
    assert availability.is_available(1)  # exactly the timeout
    availability.update(1, 10.6, False)
    assert not availability.is_available(1)
    assert availability.is_available(2)
    availability.update(1, 11.0, True)
    assert availability.is_available(1)
    availability.update(1, 20.0, False)
    availability.forget(1)
    assert availability.is_available(1)


# ---- round robin, callables, choosing -------------------------------------------------------


def test_round_robin_cycles_over_available_partitions_per_topic() -> None:
    partitioner = RoundRobinPartitioner()
    picks = [partitioner.partition("a", b"key", 5, [0, 2, 3]) for _ in range(6)]
    assert picks == [0, 2, 3, 0, 2, 3]
    assert [partitioner.partition("b", None, 2, []) for _ in range(3)] == [0, 1, 0]


def test_callable_partitioner_checks_the_answer() -> None:
    def by_length(topic: str, key: bytes | None, count: int) -> int:
        return len(key or b"")

    partitioner = CallablePartitioner(by_length)
    assert partitioner.partition("t", b"abc", 4, range(4)) == 3
    with pytest.raises(PartitionerError, match="partition 4"):
        partitioner.partition("t", b"abcd", 4, range(4))
    with pytest.raises(PartitionerError):
        CallablePartitioner(lambda t, k, n: -1).partition("t", None, 4, range(4))
    with pytest.raises(PartitionerError, match="int"):
        CallablePartitioner(lambda t, k, n: "1").partition("t", None, 4, range(4))  # type: ignore[arg-type,return-value]
    with pytest.raises(PartitionerError):
        CallablePartitioner(lambda t, k, n: True).partition("t", None, 4, range(4))

    class Index:
        def __index__(self) -> int:
            return 2

    assert CallablePartitioner(lambda t, k, n: Index()).partition("t", None, 4, []) == 2  # type: ignore[arg-type,return-value]


def test_callable_errors_propagate() -> None:
    def broken(topic: str, key: bytes | None, count: int) -> int:
        raise KeyError("mine")

    with pytest.raises(KeyError):
        CallablePartitioner(broken).partition("t", None, 4, range(4))


def test_make_partitioner_builds_what_the_config_names() -> None:
    def config(**options: Any) -> ProducerConfig:
        return ProducerConfig.from_options(**options)

    default = make_partitioner(config(batch_size=100))
    assert type(default) is DefaultPartitioner
    assert default.wants_partition_load
    assert type(make_partitioner(config(partitioner="murmur3"))) is Murmur3Partitioner
    assert type(make_partitioner(config(partitioner="round_robin"))) is RoundRobinPartitioner
    assert type(make_partitioner(config(partitioner="consistent"))) is ConsistentPartitioner
    assert make_partitioner(config()) is not make_partitioner(config())

    uniform = make_partitioner(config(partitioner="uniform_sticky"))
    assert len({uniform.partition("t", key, 64, range(64)) for key in random_keys(20)}) == 1

    no_adaptive = make_partitioner(config(partitioner_adaptive_partitioning_enable=False))
    assert isinstance(no_adaptive, DefaultPartitioner)
    assert not no_adaptive.wants_partition_load

    def pick(topic: str, key: bytes | None, count: int) -> int:
        return count - 1

    wrapped = make_partitioner(config(partitioner=pick))
    assert isinstance(wrapped, CallablePartitioner)
    assert wrapped.partition("t", None, 9, []) == 8
    instance = RoundRobinPartitioner()
    assert make_partitioner(config(partitioner=instance)) is instance


def test_a_user_class_following_the_protocol_is_used_as_is() -> None:
    class Fixed:
        def partition(
            self, topic: str, key: bytes | None, partition_count: int, available: Sequence[int]
        ) -> int:
            return 1

    fixed: Partitioner = Fixed()
    config = ProducerConfig.from_options(partitioner=fixed)
    assert make_partitioner(config) is fixed
