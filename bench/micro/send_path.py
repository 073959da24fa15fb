"""``Producer.send`` and ``send_many``: the synchronous fast path, without network I/O.

A producer is started against librdkafka's mock cluster (in this process, on its own
threads) so that metadata and connections exist. Then a burst of records is sent without
yielding to the event loop: ``send`` never suspends while metadata is known and buffer
memory is free, so the sender task cannot run during the burst and the clock sees only
serialization, partitioning, the accumulator and the record append. The burst is flushed
outside the clock. The last cases show what awaiting the records' futures costs once the
batches are acknowledged, and what a full collection of the cyclic GC costs per kept future.
"""

from __future__ import annotations

import asyncio
import gc
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.micro._timer import Measurement, run_main, skipped

BURST = 20_000
REPEAT = 5
TOPIC = "micro-send"


def _payloads(size: int, count: int = 1024) -> list[bytes]:
    rng = random.Random(0)
    letters = bytes(65 + i % 26 for i in range(256))
    block = rng.randbytes(size * count).translate(letters)
    return [block[i * size : (i + 1) * size] for i in range(count)]


async def _best(run: Callable[[], Awaitable[float]]) -> float:
    return min([await run() for _ in range(REPEAT)])


async def _collect(bootstrap_servers: str) -> list[Measurement]:
    from aioproducer import Producer

    results: list[Measurement] = []
    producer = Producer(
        bootstrap_servers=bootstrap_servers, acks=1, linger_ms=5, batch_size=16_384,
        enable_idempotence=False,
    )
    await producer.start()
    try:
        await (await producer.send(TOPIC, b"warm-up"))
        send = producer.send

        def burst_of(size: int, keyed: bool) -> Callable[[], Awaitable[float]]:
            values = _payloads(size)
            keys = [b"key-%08d" % i for i in range(1000)] if keyed else [None] * 1000
            records = [(keys[i % 1000], values[i % len(values)]) for i in range(BURST)]

            async def run() -> float:
                started = time.perf_counter_ns()
                for key, value in records:
                    await send(TOPIC, value, key)
                elapsed = time.perf_counter_ns() - started
                await producer.flush()
                return elapsed / BURST

            return run

        for size, keyed in ((10, False), (100, False), (100, True), (1024, False)):
            name = f"send {size} B" + (" keyed" if keyed else "")
            try:
                results.append(Measurement(name, await _best(burst_of(size, keyed))))
            except Exception as exc:
                results.append(skipped(name, exc))

        values = _payloads(100)
        plain = [values[i % len(values)] for i in range(BURST)]
        keyed_items = [(b"key-%08d" % (i % 1000), v) for i, v in enumerate(plain)]
        for name, items in (("send_many 100 B", plain), ("send_many 100 B keyed", keyed_items)):

            async def many(items: list[Any] = items) -> float:
                started = time.perf_counter_ns()
                await producer.send_many(TOPIC, items)
                elapsed = time.perf_counter_ns() - started
                await producer.flush()
                return elapsed / BURST

            try:
                results.append(Measurement(name, await _best(many)))
            except Exception as exc:
                results.append(skipped(name, exc))

        async def await_done() -> float:
            futures = [await send(TOPIC, value) for value in plain]
            await producer.flush()
            started = time.perf_counter_ns()
            for future in futures:
                await future
            return (time.perf_counter_ns() - started) / BURST

        try:
            results.append(
                Measurement("await an acknowledged RecordFuture", await _best(await_done),
                            note="(builds its RecordMetadata)")
            )
        except Exception as exc:
            results.append(skipped("await an acknowledged RecordFuture", exc))

        async def full_collection() -> float:
            # What a caller keeping every future pays at each full collection of the cyclic
            # GC, per future kept (the rest of the heap included: a few ms).
            futures = [await send(TOPIC, value) for value in plain * 10]
            await producer.flush()
            started = time.perf_counter_ns()
            gc.collect()
            elapsed = time.perf_counter_ns() - started
            del futures
            return elapsed / (len(plain) * 10)

        from aioproducer._core import futures as futures_module

        name = "full GC collection, per kept RecordFuture"
        try:
            results.append(
                Measurement(name, await _best(full_collection),
                            note=f"(untracked by the GC: {futures_module._UNTRACKED})")
            )
        except Exception as exc:
            results.append(skipped(name, exc))

        async def await_many() -> float:
            batch = await producer.send_many(TOPIC, plain)
            await producer.flush()
            started = time.perf_counter_ns()
            await batch
            return (time.perf_counter_ns() - started) / BURST

        try:
            results.append(
                Measurement("await send_many results, per record", await _best(await_many))
            )
        except Exception as exc:
            results.append(skipped("await send_many results, per record", exc))
    finally:
        await producer.close()
    return results


def collect() -> list[Measurement]:
    """Run every case (on uvloop when installed, as the harness's runners do)."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        from tests.support.mock_cluster import MockCluster
    except Exception as exc:
        return [skipped("send_path (needs tests/support/mock_cluster.py)", exc)]
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    except ImportError:
        loop_factory = asyncio.new_event_loop
    try:
        with MockCluster(num_brokers=1) as cluster:
            cluster.create_topic(TOPIC, 3, 1)
            loop = loop_factory()
            try:
                return loop.run_until_complete(_collect(cluster.bootstrap_servers))
            finally:
                loop.close()
    except Exception as exc:
        return [skipped("send_path", exc)]


def main() -> int:
    """Entry point: ``python -m bench.micro.send_path``."""
    return run_main(
        f"Producer.send fast path (aioproducer/producer.py), bursts of {BURST:,} records",
        collect,
    )


if __name__ == "__main__":
    sys.exit(main())
