"""The partitioners: what every record pays to learn its partition (``partitioner.py``).

- ``murmur2`` of a key, the hash Java's client uses, in the compiled module (and the pure
  Python reference it is checked against in the tests);
- ``DefaultPartitioner.partition`` for keyed records: the first sight of a key (a cache
  miss: murmur2 and a dict store) and a key seen before (a dict lookup), over 10,000
  distinct keys as in the harness's keyed scenarios;
- the sticky (KIP-794) partition of a null-key record, with ``record_appended`` after it, as
  the appender calls them; a new partition is picked every ``batch_size`` bytes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench.micro._timer import Measurement, measure, run_main, skipped

KEYS = 10_000
PARTITIONS = 12


def collect() -> list[Measurement]:
    """Run every case."""
    try:
        from aioproducer._core import partitioner as module
        from aioproducer._core.partitioner import DefaultPartitioner
    except Exception as exc:
        return [skipped("partitioner", exc)]
    results: list[Measurement] = []
    keys = [f"key-{i:08d}".encode() for i in range(KEYS)]
    available = list(range(PARTITIONS))

    def hash_all(function: Callable[[bytes], int]) -> Callable[[], None]:
        def run() -> None:
            for key in keys:
                function(key)

        return run

    results.append(measure("murmur2(12 B key)", hash_all(module.murmur2), ops_per_call=KEYS))
    reference = getattr(module, "_murmur2_python", None)
    if reference is not None:
        results.append(
            measure("murmur2, pure Python reference", hash_all(reference), ops_per_call=KEYS)
        )

    def keyed_miss() -> None:
        # A new partitioner each call: every key is a cache miss.
        partition = DefaultPartitioner().partition
        for key in keys:
            partition("t", key, PARTITIONS, available)

    warm = DefaultPartitioner()
    warm_partition = warm.partition
    for key in keys:
        warm_partition("t", key, PARTITIONS, available)

    def keyed_hit() -> None:
        for key in keys:
            warm_partition("t", key, PARTITIONS, available)

    results.append(
        measure("partition(keyed, first sight of the key)", keyed_miss, ops_per_call=KEYS)
    )
    results.append(measure("partition(keyed, key seen before)", keyed_hit, ops_per_call=KEYS))

    sticky = DefaultPartitioner(batch_size=16_384)
    sticky_partition = sticky.partition
    appended = sticky.record_appended

    def null_key() -> None:
        for _ in range(KEYS):
            chosen = sticky_partition("t", None, PARTITIONS, available)
            appended("t", chosen, 100)

    try:
        results.append(
            measure(
                "partition(null key) + record_appended(100 B)",
                null_key,
                ops_per_call=KEYS,
                note="(a new sticky partition every 164 records)",
            )
        )
    except Exception as exc:
        results.append(skipped("sticky partition", exc))
    return results


def main() -> int:
    """Entry point: ``python -m bench.micro.partitioner``."""
    return run_main("Partitioners (partitioner.py)", collect)


if __name__ == "__main__":
    sys.exit(main())
