"""Does compressing in a worker thread keep the event loop responsive? Measured end to end.

For each codec and batch size, one producer sends the same records twice to librdkafka's
mock cluster (in its own process): once with ``compression_offload_bytes=-1`` (every batch
compressed on the event loop) and once with the default (batches above the codec's measured
threshold go to a worker thread). Beside the producer, a ticker coroutine sleeps 1 ms at a
time and records how late it wakes: that lateness is what every other coroutine of the
application (an HTTP handler, a consumer) waits while the loop is busy. It prints the
ticker's p99 and max lateness and the records per second for both modes, and writes
``bench/results/<time>-offload.json``.

    python -m bench.offload [--megabytes 32] [--rounds 2] [--codecs gzip,zstd,lz4,snappy]
                            [--batch-sizes 16384,262144,1048576]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench._results import save


def _records(megabytes: int, size: int = 1024) -> list[bytes]:
    rng = random.Random(11)
    words = [b"user", b"order", b"amount", b"status", b"region", b"sku", b"price", b"ts"]
    distinct = []
    for i in range(512):
        body = b",".join(
            b'"%s":%d' % (rng.choice(words), rng.randint(0, 10 ** rng.randint(1, 9)))
            for _ in range(size // 12)
        )
        distinct.append((b"{%d," % i + body)[:size])
    count = megabytes * 1024 * 1024 // size
    return [distinct[i % len(distinct)] for i in range(count)]


async def _ticker(stop: asyncio.Event, lateness: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(0.001)
        lateness.append(loop.time() - start - 0.001)


async def _one(
    bootstrap: str,
    topic: str,
    codec: str,
    batch_size: int,
    offload: int | None,
    values: list[bytes],
) -> dict[str, Any]:
    from aioproducer import Producer

    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "compression_type": codec,
        "batch_size": batch_size,
        "linger_ms": 5,
        "buffer_memory": max(32 << 20, 8 * batch_size),
        "max_request_size": max(1 << 20, 2 * batch_size),
    }
    if offload is not None:
        options["compression_offload_bytes"] = offload
    async with Producer(**options) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        stop = asyncio.Event()
        lateness: list[float] = []
        ticker = asyncio.create_task(_ticker(stop, lateness))
        await asyncio.sleep(0.05)
        lateness.clear()
        start = time.perf_counter()
        # Chunks of 200 records (about 0.5 ms of appending), yielding between them as a
        # service does between requests: send_many does not suspend while memory is free.
        chunk = 200
        for i in range(0, len(values), chunk):
            await producer.send_many(topic, values[i : i + chunk])
            await asyncio.sleep(0)
        await producer.flush()
        elapsed = time.perf_counter() - start
        stop.set()
        await ticker
        offloaded = producer.metrics()["compression-offload-total"]
    lateness.sort()
    return {
        "records_per_second": len(values) / elapsed,
        "tick_p99_ms": lateness[int(len(lateness) * 0.99)] * 1000 if lateness else None,
        "tick_max_ms": lateness[-1] * 1000 if lateness else None,
        "ticks": len(lateness),
        "batches_offloaded": offloaded,
    }


def main() -> int:
    """Run every case, print a table and write the JSON result."""
    parser = argparse.ArgumentParser(prog="python -m bench.offload", description=__doc__)
    parser.add_argument("--megabytes", type=int, default=32)
    parser.add_argument("--codecs", default="gzip,zstd,lz4,snappy")
    parser.add_argument("--batch-sizes", default="16384,262144,1048576")
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.mock_cluster import MockClusterProcess

    values = _records(options.megabytes)
    rows: list[dict[str, Any]] = []
    with MockClusterProcess(num_brokers=1) as cluster:
        for codec in options.codecs.split(","):
            for batch_size in (int(b) for b in options.batch_sizes.split(",")):
                for round_ in range(options.rounds):
                    for mode, offload in (("on loop", -1), ("default", None)):
                        topic = f"offload-{codec}-{batch_size}-{round_}-{mode[0]}"
                        cluster.create_topic(topic, partitions=4)
                        result = asyncio.run(
                            _one(cluster.bootstrap_servers, topic, codec, batch_size, offload,
                                 values)
                        )
                        row = {"codec": codec, "batch_size": batch_size, "mode": mode,
                               "round": round_, **result}
                        rows.append(row)
                        print(
                            f"{codec:<6} {batch_size // 1024:>5} KiB  {mode:<8}  "
                            f"{row['records_per_second']:>9,.0f} rec/s  tick p99 "
                            f"{row['tick_p99_ms']:7.2f} ms  max {row['tick_max_ms']:7.2f} ms  "
                            f"offloaded {row['batches_offloaded']:.0f}",
                            flush=True,
                        )
    save("offload", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
