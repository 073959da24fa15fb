"""Instructions per record under callgrind: a measure of the send path that noise cannot move.

On a shared VM, CPU time per record moves by 10% or more between identical runs, which hides
the change a single optimisation makes. Counting instructions does not: callgrind (valgrind)
runs the producer on a simulated CPU and counts every instruction it executes, the same
from one run to the next within a fraction of a percent.

Each case sends records with ``await producer.send()`` against librdkafka's mock cluster
(in another process), keeps every future and awaits them at the end, as the harness's
``aioproducer_send`` runner does, with ``buffer_memory`` small enough that sending waits for
memory once per batch (the steady state of a producer that outpaces its broker). Only the
instructions inside the event loop are counted (``--toggle-collect=uv_run``, so uvloop is
needed), and two runs of different lengths are subtracted, which leaves out start-up and
warm-up::

    python -m bench.instructions [--sizes 100,1024] [--records 10000,40000]
        [--buffer-memory 1048576] [--code DIR] [--one-per-request] [--produce] [--keyed]

``--one-per-request`` awaits each record before sending the next, with ``linger_ms=0``: every
record is a Produce request of its own, so the count is the cost of one request and its
answer (the sender's step, the connection, the codec) plus one record's.

``--produce`` calls ``await producer.produce(topic, value, on_delivery=report)`` per record
instead, then ``flush()``, which runs every delivery callback: the confluent-kafka idiom,
to set against ``send()``'s count.

``--keyed`` gives each record a key, 10,000 distinct keys in turn as the harness's keyed
scenario does, so records are partitioned by key hash.

``--code DIR`` measures the ``aioproducer`` package found in ``DIR`` instead of this
checkout's (a ``git worktree`` of another commit, built with
``python setup.py build_ext --inplace``), so two commits can be compared. It prints one line
per size and writes ``bench/results/<time>-instructions.json``.

Caveats: instructions are not time. A ``memcpy`` of n bytes counts about n instructions
(``rep movsb``) though it takes far less time than that many instructions elsewhere, and
cache misses (the cyclic GC walking kept futures) cost time that no count shows. Use it to
compare two versions of the same path, and the harness for speed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._results import save

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "instructions"


async def _child(
    bootstrap: str,
    count: int,
    size: int,
    buffer_memory: int,
    one_per_request: bool,
    produce: bool = False,
    keyed: bool = False,
) -> None:
    from aioproducer import Producer

    value = os.urandom(size)
    # As the harness's keyed scenario: 10,000 distinct keys in turn (None: no key).
    keys: list[bytes | None] = (
        [b"key-%08d" % i for i in range(10_000)] if keyed else [None]
    )
    key_count = len(keys)
    async with Producer(
        bootstrap_servers=bootstrap,
        linger_ms=0 if one_per_request else 5,
        acks=1,
        buffer_memory=buffer_memory,
    ) as producer:
        for future in [await producer.send(TOPIC, value) for _ in range(100)]:
            await future
        if produce:
            reported = 0

            def report(err: Any, msg: Any) -> None:
                nonlocal reported
                reported += 1

            produce_one = producer.produce
            for index in range(count):
                await produce_one(TOPIC, value, keys[index % key_count], on_delivery=report)
            await producer.flush()
            if reported != count:
                raise RuntimeError(f"{reported} delivery reports for {count} records")
            return
        send = producer.send
        if one_per_request:
            for index in range(count):
                await (await send(TOPIC, value, keys[index % key_count]))
            return
        futures = [await send(TOPIC, value, keys[index % key_count]) for index in range(count)]
        for future in futures:
            await future


def _counted(
    code: Path | None,
    bootstrap: str,
    count: int,
    size: int,
    buffer_memory: int,
    one_per_request: bool,
    produce: bool = False,
    keyed: bool = False,
) -> int:
    """Instructions executed inside the event loop by one child sending ``count`` records."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        command = [
            "valgrind", "--tool=callgrind", "--toggle-collect=uv_run",
            f"--callgrind-out-file={out}",
            sys.executable, "-m", "bench.instructions", "--child", bootstrap, str(count),
            "--sizes", str(size), "--buffer-memory", str(buffer_memory),
        ]
        if code is not None:
            command += ["--code", str(code)]
        if one_per_request:
            command.append("--one-per-request")
        if produce:
            command.append("--produce")
        if keyed:
            command.append("--keyed")
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the child failed ({done.returncode}):\n{done.stderr[-2000:]}")
        match = re.search(r"Collected : (\d+)", done.stderr)
        if match is None:
            raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
        return int(match.group(1))


def main() -> int:
    """Measure each size; print and save the results."""
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--sizes", default="100,1024", help="record sizes in bytes")
    parser.add_argument("--records", default="10000,40000", help="the two run lengths")
    parser.add_argument("--buffer-memory", type=int, default=1 << 20)
    parser.add_argument("--code", type=Path, help="measure the aioproducer package in DIR")
    parser.add_argument(
        "--one-per-request",
        action="store_true",
        help="await each record before the next (linger_ms=0): one request per record",
    )
    parser.add_argument(
        "--produce",
        action="store_true",
        help="produce(on_delivery=...) per record, then flush(), instead of send()",
    )
    parser.add_argument(
        "--keyed",
        action="store_true",
        help="a key per record, 10,000 distinct keys in turn (partition by key hash)",
    )
    parser.add_argument("--child", nargs=2, metavar=("BOOTSTRAP", "COUNT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.code is not None:
        sys.path.insert(0, str(options.code.resolve()))
    if options.child:
        import uvloop

        bootstrap, count = options.child
        uvloop.run(
            _child(
                bootstrap,
                int(count),
                int(options.sizes),
                options.buffer_memory,
                options.one_per_request,
                options.produce,
                options.keyed,
            )
        )
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing to count with", file=sys.stderr)
        return 2
    short, long = (int(n) for n in options.records.split(","))
    sys.path.insert(0, str(ROOT))
    from tests.support.mock_cluster import MockClusterProcess

    code = options.code.resolve() if options.code is not None else None
    import aioproducer

    where = str(code) if code is not None else str(Path(aioproducer.__file__).parent.parent)
    rows: list[dict[str, Any]] = []
    with MockClusterProcess(num_brokers=1) as cluster:
        cluster.create_topic(TOPIC, 3, 1)
        for size in (int(s) for s in options.sizes.split(",")):
            counts = [
                _counted(
                    code,
                    cluster.bootstrap_servers,
                    n,
                    size,
                    options.buffer_memory,
                    options.one_per_request,
                    options.produce,
                    options.keyed,
                )
                for n in (short, long)
            ]
            per_record = (counts[1] - counts[0]) / (long - short)
            rows.append({
                "size": size, "records": [short, long], "instructions": counts,
                "per_record": per_record, "buffer_memory": options.buffer_memory,
                "one_per_request": options.one_per_request, "produce": options.produce,
                "keyed": options.keyed, "code": where,
            })
            unit = "request (one record each)" if options.one_per_request else "record"
            if options.produce:
                unit += " with produce()"
            if options.keyed:
                unit += ", keyed"
            print(f"{size:>6} B: {per_record:,.0f} instructions per {unit} ({where})", flush=True)
    save("instructions", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
