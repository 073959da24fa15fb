"""``RecordBatchBuilder``: appending records (the per-record hot path) and closing a batch.

Each case fills a 16 KiB batch, as the producer does with the default ``batch_size``, and
reports the cost per record; ``close`` is the cost of finishing one full batch (header,
CRC-32C, compression), measured as fill-and-close minus fill.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable

from bench.micro._timer import Measurement, measure, run_main, skipped

BATCH_SIZE = 16_384
TIMESTAMP = 1_700_000_000_000


def _payloads(size: int, count: int = 256, seed: int = 0) -> list[bytes]:
    """Distinct uppercase-letter values, like the harness's (compressible as text is)."""
    rng = random.Random(seed)
    letters = bytes(65 + i % 26 for i in range(256))
    block = rng.randbytes(size * count).translate(letters)
    return [block[i * size : (i + 1) * size] for i in range(count)]


def time_each(prepare: Callable[[], Callable[[], object]], count: int = 100,
              repeat: int = 5) -> float:
    """Best-of-``repeat`` nanoseconds of one call of what ``prepare`` returns (prepared
    ``count`` at a time outside the clock, for operations that cannot run twice)."""
    best = float("inf")
    for _ in range(repeat):
        calls = [prepare() for _ in range(count)]
        started = time.perf_counter_ns()
        for call in calls:
            call()
        best = min(best, (time.perf_counter_ns() - started) / count)
    return best


def collect() -> list[Measurement]:
    """Run every case."""
    try:
        from aioproducer.protocol.compression import CompressionType
        from aioproducer.protocol.record_batch import RecordBatchBuilder
    except Exception as exc:
        return [skipped("record_batch", exc)]
    results: list[Measurement] = []
    buffer = bytearray(BATCH_SIZE)

    def per_batch(append: Callable[[RecordBatchBuilder], object]) -> int:
        builder = RecordBatchBuilder(buffer)
        append(builder)
        return builder.record_count

    headers: list[tuple[str, bytes | None]] = [
        ("trace-id", b"0123456789abcdef"),
        ("source", b"bench"),
    ]
    cases = [
        ("try_append 10 B value", 10, None, None),
        ("try_append 100 B value", 100, None, None),
        ("try_append 100 B value + 12 B key", 100, b"key-00000001", None),
        ("try_append 100 B value + 2 headers", 100, None, headers),
        ("try_append 1 KiB value", 1024, None, None),
        # One record per batch: write_pending's copy into the buffer dominates.
        ("try_append 10 KiB value", 10240, None, None),
    ]
    for name, size, key, record_headers in cases:
        pool = _payloads(size)
        try:

            def fill(
                builder: RecordBatchBuilder,
                pool: list[bytes] = pool,
                key: bytes | None = key,
                record_headers: list[tuple[str, bytes | None]] | None = record_headers,
            ) -> None:
                append = builder.try_append
                for value in pool * 8:
                    if append(TIMESTAMP, key, value, record_headers) < 0:
                        break

            count = per_batch(fill)
            results.append(
                measure(
                    name,
                    lambda fill=fill: fill(RecordBatchBuilder(buffer)),  # type: ignore[misc]
                    ops_per_call=count,
                    note=f"({count} records per 16 KiB batch)",
                )
            )
        except Exception as exc:
            results.append(skipped(name, exc))

    values = _payloads(100) * 4
    try:

        def fill_values(builder: RecordBatchBuilder) -> None:
            builder.append_values(TIMESTAMP, values, 0, len(values))

        count = per_batch(fill_values)
        results.append(
            measure(
                "append_values 100 B values (send_many)",
                lambda: fill_values(RecordBatchBuilder(buffer)),
                ops_per_call=count,
                note=f"({count} records per batch)",
            )
        )
    except Exception as exc:
        results.append(skipped("append_values 100 B values (send_many)", exc))

    for codec in ("NONE", "LZ4", "ZSTD", "GZIP", "SNAPPY"):
        name = f"close a full 100 B-record batch, {codec.lower()}"
        try:
            compression = CompressionType[codec]

            def filled(compression: CompressionType = compression) -> RecordBatchBuilder:
                builder = RecordBatchBuilder(bytearray(BATCH_SIZE), compression)
                builder.append_values(TIMESTAMP, values, 0, len(values))
                return builder

            size = filled().close().nbytes
            ns = time_each(lambda filled=filled: filled().close)  # type: ignore[misc]
            results.append(Measurement(name, ns, note=f"(batch of {size} B on the wire)"))
        except Exception as exc:
            results.append(skipped(name, exc))
    return results


def main() -> int:
    """Entry point: ``python -m bench.micro.record_batch``."""
    return run_main("RecordBatchBuilder (aioproducer/protocol/record_batch.py)", collect)


if __name__ == "__main__":
    sys.exit(main())
