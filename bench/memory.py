"""Peak memory of a producer against the record count: bounded by ``buffer_memory``?

Each case runs in a fresh process against librdkafka's mock cluster (in another process):
start a producer with the given ``buffer_memory``, note the resident set (RSS), then send
``count`` records of ``size`` bytes as fast as ``send()`` takes them, keeping no future (a
done-callback counts the acknowledgements, as a service that does not wait for each record
does), flush, and report the peak RSS above the level after start. The record values come
from a fixed pool of 1,024 payloads so the benchmark's own data does not grow with the count.

    python -m bench.memory [--counts 250000,1000000,4000000] [--buffer-memory 8388608]

It prints one line per case and writes ``bench/results/<time>-memory.json``. The claim to
check: the growth stays within ``buffer_memory`` plus a constant, whatever the count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench._results import save
from bench.runners._common import peak_rss_bytes

ROOT = Path(__file__).resolve().parent.parent


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    # This program's own high-water mark (ru_maxrss would carry the parent's over).
    return peak_rss_bytes()


async def _child(
    bootstrap: str, topic: str, count: int, size: int, buffer_memory: int
) -> dict[str, Any]:
    from aioproducer import Producer

    payloads = [bytes([65 + i % 26]) * size for i in range(1024)]
    acked = 0
    failed = 0

    def on_done(future: Any) -> None:
        nonlocal acked, failed
        if future.exception() is None:
            acked += 1
        else:
            failed += 1

    async with Producer(
        bootstrap_servers=bootstrap, buffer_memory=buffer_memory, linger_ms=5
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        base_rss = _rss_bytes()
        send = producer.send
        for i in range(count):
            future = await send(topic, payloads[i & 1023])
            future.add_done_callback(on_done)
        await producer.flush()
    peak = _peak_rss_bytes()
    return {
        "count": count,
        "size": size,
        "buffer_memory": buffer_memory,
        "rss_after_start": base_rss,
        # The peak is a high-water mark of the whole process; start-up stays below it here
        # (the start-up RSS is the lower figure), so peak - base is the growth while sending.
        "peak_growth": peak - base_rss,
        "peak_rss": peak,
        "acked": acked,
        "failed": failed,
    }


def main() -> int:
    """Run each count in its own process; print and save the results."""
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--counts", default="250000,1000000,4000000")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--buffer-memory", type=int, default=8 << 20)
    parser.add_argument("--child", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "COUNT"))
    options = parser.parse_args()
    if options.child:
        bootstrap, topic, count = options.child
        out = asyncio.run(_child(bootstrap, topic, int(count), options.size, options.buffer_memory))
        print(json.dumps(out))
        return 0
    sys.path.insert(0, str(ROOT))
    from tests.support.mock_cluster import MockClusterProcess

    rows = []
    with MockClusterProcess(num_brokers=1) as cluster:
        for count in (int(c) for c in options.counts.split(",")):
            topic = f"memory-{count}"
            cluster.create_topic(topic, partitions=3)
            child = subprocess.run(
                [sys.executable, "-m", "bench.memory", "--size", str(options.size),
                 "--buffer-memory", str(options.buffer_memory),
                 "--child", cluster.bootstrap_servers, topic, str(count)],
                cwd=ROOT, capture_output=True, text=True, check=True,
            )
            row = json.loads(child.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{count:>9,} records of {options.size} B: peak RSS {row['peak_rss'] / 2**20:7.1f} "
                f"MiB, growth while sending {row['peak_growth'] / 2**20:6.1f} MiB "
                f"(buffer_memory {options.buffer_memory / 2**20:.0f} MiB); "
                f"acked {row['acked']:,}, failed {row['failed']}",
                flush=True,
            )
    save("memory", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
