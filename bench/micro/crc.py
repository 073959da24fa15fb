"""CRC-32C over a 16 KiB batch: what ``RecordBatchBuilder.close`` pays per batch."""

from __future__ import annotations

import os
import sys

from bench.micro._timer import Measurement, measure, run_main, skipped

SIZE = 16_384


def collect() -> list[Measurement]:
    """Run every case."""
    data = os.urandom(SIZE)
    buffer = bytearray(data)
    results: list[Measurement] = []
    try:
        import crc32c

        results.append(measure("crc32c.crc32c(16 KiB bytes)", lambda: crc32c.crc32c(data),
                               note=_rate_note(SIZE)))
        view = memoryview(buffer)
        results.append(
            measure("crc32c.crc32c(memoryview[21:] of 16 KiB)",
                    lambda: crc32c.crc32c(view[21:]), note="(as close() calls it)")
        )
    except Exception as exc:
        results.append(skipped("crc32c package", exc))
    try:
        from aioproducer.protocol import record_batch

        crc = record_batch._crc
        results.append(measure("aioproducer record_batch._crc(16 KiB)", lambda: crc(data)))
    except Exception as exc:
        results.append(skipped("aioproducer record_batch._crc", exc))
    _annotate(results)
    return results


def _rate_note(size: int) -> str:
    return f"({size} B)"


def _annotate(results: list[Measurement]) -> None:
    for result in results:
        if result.ns_per_op:
            result.note = f"{result.note} {SIZE / result.ns_per_op:.2f} GB/s".strip()


def main() -> int:
    """Entry point: ``python -m bench.micro.crc``."""
    return run_main("CRC-32C over 16 KiB", collect)


if __name__ == "__main__":
    sys.exit(main())
