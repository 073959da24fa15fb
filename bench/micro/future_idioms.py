"""Waiting for many record futures: asyncio's functions over ``RecordFuture`` and over
asyncio's own futures, per future, without network I/O.

``COUNT`` records are appended to an accumulator (100 B values, 16 KiB batches, one
partition), then every batch is acknowledged, in one callback on the loop, while the idiom
waits (``pending``: what a caller who just sent them sees) or before it starts (``done``).
The same idioms over as many ``asyncio.Future`` objects, resolved the same way, are
asyncio's own cost per future: the floor for a future-like object that asyncio's Python code
(``gather``, ``wait``, ``as_completed``) handles one by one.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.micro._timer import Measurement, run_main, skipped

COUNT = 50_000
REPEAT = 3
IDIOMS = ("in order", "gather", "wait", "as_completed", "add_done_callback")


async def _wait_with(idiom: str, futures: list[Any]) -> None:
    if idiom == "in order":
        for future in futures:
            await future
    elif idiom == "gather":
        await asyncio.gather(*futures)
    elif idiom == "wait":
        await asyncio.wait(futures)
    elif idiom == "as_completed":
        for next_done in asyncio.as_completed(futures):
            await next_done
    else:
        finished = asyncio.Event()
        seen = 0

        def on_done(_: Any) -> None:
            nonlocal seen
            seen += 1
            if seen == len(futures):
                finished.set()

        for future in futures:
            future.add_done_callback(on_done)
        await finished.wait()


def _record_futures(loop: asyncio.AbstractEventLoop) -> tuple[list[Any], Callable[[], None]]:
    from aioproducer._core.accumulator import RecordAccumulator
    from aioproducer._core.buffer_pool import BufferPool
    from aioproducer.protocol.compression import CompressionType

    pool = BufferPool(64 << 20, 16_384)
    accumulator = RecordAccumulator(
        pool=pool, loop=loop, batch_size=16_384, linger=0.005, delivery_timeout=120.0,
        retry_backoff=0.1, compression=CompressionType.NONE, compression_level=None,
    )
    value = b"x" * 100
    futures = []
    for _ in range(COUNT):
        future = accumulator.try_append("t", 0, 0, None, value, None)
        if future is None:
            buffer = pool.allocate_nowait(accumulator.buffer_size_for(130, "t", 0))
            future = accumulator.append_to_new_batch("t", 0, 0, None, value, None, buffer, 0.0)
        futures.append(future)
    batches = list({id(f._batch): f._batch for f in futures}.values())

    def acknowledge() -> None:
        offset = 0
        for batch in batches:
            batch.builder.close()
            batch.complete(offset, -1)
            offset += batch.record_count

    return futures, acknowledge


def _asyncio_futures(loop: asyncio.AbstractEventLoop) -> tuple[list[Any], Callable[[], None]]:
    futures = [loop.create_future() for _ in range(COUNT)]

    def resolve() -> None:
        for future in futures:
            future.set_result(None)

    return futures, resolve


async def _per_future(
    make: Callable[[asyncio.AbstractEventLoop], tuple[list[Any], Callable[[], None]]],
    idiom: str, pending: bool,
) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        loop = asyncio.get_running_loop()
        futures, finish = make(loop)
        if pending:
            loop.call_soon(finish)
        else:
            finish()
        started = time.perf_counter_ns()
        await _wait_with(idiom, futures)
        best = min(best, (time.perf_counter_ns() - started) / COUNT)
    return best


def collect() -> list[Measurement]:
    """Run every case (on uvloop when installed, as the harness's runners do)."""
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    except ImportError:
        loop_factory = asyncio.new_event_loop
    results: list[Measurement] = []
    for pending in (True, False):
        state = "pending" if pending else "done"
        for idiom in IDIOMS:
            for label, make in (("RecordFuture", _record_futures),
                                ("asyncio.Future", _asyncio_futures)):
                name = f"{idiom}, {state}, {label}"
                loop = loop_factory()
                try:
                    run: Awaitable[float] = _per_future(make, idiom, pending)
                    results.append(Measurement(name, loop.run_until_complete(run)))
                except Exception as exc:
                    results.append(skipped(name, exc))
                finally:
                    loop.close()
    return results


def main() -> int:
    """Entry point: ``python -m bench.micro.future_idioms``."""
    return run_main(
        f"Waiting for {COUNT:,} futures: RecordFuture against asyncio.Future, per future",
        collect,
    )


if __name__ == "__main__":
    sys.exit(main())
