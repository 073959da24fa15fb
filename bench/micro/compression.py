"""Compression of one batch's records, per codec and size; and what moving it to a thread costs.

This is the measurement behind ``compression_offload_bytes`` (where a batch is compressed in
a worker thread instead of on the event loop). It prints, for each codec at Kafka's default
level and each uncompressed size:

- the time to compress on the calling thread (what the event loop stalls for today);
- ``loop keeps``: how fast the calling thread still runs Python while a worker thread
  compresses such blocks back to back, against its speed beside an idle worker (near 1.0: the
  codec releases the GIL, so a worker thread really frees the event loop; near 0.5 or less:
  it holds the GIL and a thread buys nothing);
- the round trip of an empty job through ``loop.run_in_executor`` (the fixed price of
  offloading, paid on the loop).

``python -m bench.micro.compression`` (``--json`` for machine-readable output).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import sys
import threading
import time
from collections.abc import Callable

from bench.micro._timer import Measurement, measure, run_main, skipped

SIZES = (4_096, 16_384, 65_536, 262_144, 1_048_576)
CODECS = ("gzip", "snappy", "lz4", "zstd")


def payload(size: int, seed: int = 7) -> bytes:
    """Records that look like JSON events: compressible, but not trivially."""
    rng = random.Random(seed)
    words = [f"field{i}" for i in range(40)] + ["user", "order", "amount", "status", "region"]
    out = bytearray()
    while len(out) < size:
        parts = [f'"{rng.choice(words)}":{rng.randint(0, 10**rng.randint(1, 9))}' for _ in range(6)]
        out += ("{" + ",".join(parts) + f',"id":"{rng.getrandbits(64):016x}"' + "}").encode()
    return bytes(out[:size])


def _spins_per_second(work: Callable[[], object] | None, seconds: float = 0.15) -> float:
    """Iterations per second of a Python loop while a worker thread runs ``work`` repeatedly."""
    done = threading.Event()

    def worker() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if work is None:
                time.sleep(0.001)
            else:
                work()
        done.set()

    thread = threading.Thread(target=worker)
    spins = 0
    start = time.perf_counter()
    thread.start()
    while not done.is_set():
        spins += 1
    elapsed = time.perf_counter() - start
    thread.join()
    return spins / elapsed


def _loop_keeps(work: Callable[[], object]) -> float:
    """The calling thread's speed beside ``work`` in a thread, over its speed beside an idle one."""
    idle = max(_spins_per_second(None) for _ in range(2))
    busy = max(_spins_per_second(work) for _ in range(2))
    return busy / idle


def _executor_round_trip() -> Measurement:
    """An empty job through run_in_executor and back, timed on the loop."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            await loop.run_in_executor(pool, int)
            count = 2_000
            start = time.perf_counter()
            for _ in range(count):
                await loop.run_in_executor(pool, int)
            return (time.perf_counter() - start) / count

    seconds = asyncio.run(main())
    return Measurement("run_in_executor round trip (empty job)", seconds * 1e9)


def collect() -> list[Measurement]:
    """Run every case."""
    try:
        from aioproducer.protocol.compression import CompressionType, compress
    except Exception as exc:  # pragma: no cover - the code moved
        return [skipped("aioproducer.protocol.compression", exc)]
    results: list[Measurement] = []
    for name in CODECS:
        codec = CompressionType[name.upper()]
        for size in SIZES:
            block = payload(size)
            compressed = compress(codec, block)
            keeps = _loop_keeps(lambda c=codec, b=block: compress(c, b))
            results.append(
                measure(
                    f"{name:<6} {size // 1024:>5} KiB",
                    lambda c=codec, b=block: compress(c, b),
                    repeat=3,
                    min_seconds=0.1,
                    note=f"ratio {size / len(compressed):4.1f}  loop keeps {keeps:.2f}",
                )
            )
    results.append(_executor_round_trip())
    return results


if __name__ == "__main__":
    sys.exit(run_main(__doc__.splitlines()[0], collect))
