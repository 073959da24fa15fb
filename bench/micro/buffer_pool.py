"""The buffer pool: what each batch pays for its memory (``buffer_pool.py``).

- ``allocate_nowait`` + ``deallocate`` of a poolable (``batch_size``) buffer, the path of
  every batch while memory is free: a pooled buffer is reused, never zeroed again;
- the same for a larger-than-poolable size (a record bigger than ``batch_size``): a new
  ``bytearray`` each time;
- a full pool: ``allocate`` waits on a future, and ``deallocate`` hands the buffer to that
  waiter, first come first served. Measured per hand-over, on a running event loop.
"""

from __future__ import annotations

import asyncio
import sys

from bench.micro._timer import Measurement, measure, run_main, skipped

BATCH_SIZE = 16_384
HANDOVERS = 2_000


def collect() -> list[Measurement]:
    """Run every case."""
    try:
        from aioproducer._core.buffer_pool import BufferPool
    except Exception as exc:
        return [skipped("buffer_pool", exc)]
    results: list[Measurement] = []
    pool = BufferPool(32 << 20, BATCH_SIZE)
    # Fill the free list once, as a producer in steady state has it.
    for buffer in [pool.allocate_nowait(BATCH_SIZE) for _ in range(8)]:
        pool.deallocate(buffer, BATCH_SIZE)
    allocate_nowait = pool.allocate_nowait
    deallocate = pool.deallocate

    def pooled() -> None:
        buffer = allocate_nowait(BATCH_SIZE)
        deallocate(buffer, BATCH_SIZE)

    def unpooled() -> None:
        buffer = allocate_nowait(4 * BATCH_SIZE)
        deallocate(buffer, 4 * BATCH_SIZE)

    results.append(measure("allocate_nowait + deallocate, 16 KiB (pooled)", pooled))
    results.append(measure("allocate_nowait + deallocate, 64 KiB (not pooled)", unpooled))
    try:
        results.append(_handover(BufferPool))
    except Exception as exc:
        results.append(skipped("allocate waiting on a full pool", exc))
    return results


def _handover(pool_type: type) -> Measurement:
    """A full pool: each ``deallocate`` wakes the waiting ``allocate``; best of 5 runs."""
    import time

    async def run() -> float:
        pool = pool_type(BATCH_SIZE, BATCH_SIZE)
        held = pool.allocate_nowait(BATCH_SIZE)
        started = time.perf_counter_ns()
        for _ in range(HANDOVERS):
            waiter = asyncio.ensure_future(pool.allocate(BATCH_SIZE, 10.0))
            await asyncio.sleep(0)  # the allocate is now queued on its future
            pool.deallocate(held, BATCH_SIZE)
            held = await waiter
        elapsed = time.perf_counter_ns() - started
        pool.deallocate(held, BATCH_SIZE)
        return elapsed / HANDOVERS

    best = min(asyncio.run(run()) for _ in range(5))
    return Measurement(
        "allocate waits on a full pool, deallocate hands over",
        best,
        note="(with the task and loop steps around it)",
    )


def main() -> int:
    """Entry point: ``python -m bench.micro.buffer_pool``."""
    return run_main("Buffer pool (buffer_pool.py)", collect)


if __name__ == "__main__":
    sys.exit(main())
