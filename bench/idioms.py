"""Waiting for many records: the idioms users write, measured side by side.

::

    python -m bench.idioms [--broker instant|tansu] [--records 200000] [--size 100]
        [--rounds 2] [--idioms gather,in_order,...] [--sequential-records 1000]

Each idiom sends the same records (values of ``--size`` bytes, no key, acks=1, linger 5 ms,
16 KiB batches, idempotence off: the harness's ``plain`` scenario) to a new topic, in a
process of its own, and waits until every record has an outcome:

- ``sequential``: ``await producer.send_and_wait(topic, value)``, one record at a time (the
  slow baseline: each record waits for its batch's answer, linger included, so it runs
  ``--sequential-records`` records, not ``--records``);
- ``gather``: ``futures.append(await producer.send(topic, value))`` for every record, then
  ``await asyncio.gather(*futures)``;
- ``in_order``: the same futures, then ``for future in futures: await future``;
- ``wait``: the same futures, then ``await asyncio.wait(futures)`` and each one's
  ``exception()``;
- ``as_completed``: the same futures, then ``for next in asyncio.as_completed(futures):
  await next``;
- ``callback``: ``(await producer.send(topic, value)).add_done_callback(on_done)`` for every
  record, keeping no future, then waiting until ``on_done`` has seen them all;
- ``flush``: the same futures, then ``await producer.flush()`` and each one's ``result()``
  (no callback per record: flush waits batch by batch);
- ``produce``: confluent-kafka's way, ``await producer.produce(topic, value,
  on_delivery=report)`` for every record, then ``await producer.flush()`` (which serves the
  reports);
- ``send_many``: ``await producer.send_many(topic, chunk)`` for chunks of ``--chunk``
  values, then ``await`` each call's ``BatchResults``;
- ``task_group``: an ``asyncio.TaskGroup`` with a task per record running
  ``producer.send_and_wait(topic, value)``.

The clock runs from the first send to the last outcome, after a warm-up of 1,000 records
(connections and metadata exist). CPU is the process's user plus system time over the same
span, split at the moment the last send returned: ``send_cpu_us`` (handing the records over)
and ``wait_cpu_us`` (everything after: the sender task encoding and writing the batches, and
the idiom's own waiting). Each record's outcome is counted by the idiom, and the broker's
count of the topic is checked against it (Tansu: read back with confluent-kafka; the instant
broker: the records of the Produce requests it answered): a run that loses or fails a
record does not count.

Runs take turns in rounds (the order rotated each round); the table shows each idiom's
median, and ``vs in_order``, the CPU per record over that of ``in_order``. The result goes
to ``bench/results/<UTC time>-idioms-<broker>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from bench._results import save

ROOT = Path(__file__).resolve().parent.parent

IDIOMS = (
    "sequential",
    "gather",
    "in_order",
    "wait",
    "as_completed",
    "callback",
    "flush",
    "produce",
    "send_many",
    # asyncio.TaskGroup is new in Python 3.11: left out of the default list before it.
    *(("task_group",) if sys.version_info >= (3, 11) else ()),
)
#: What each idiom is, for the table.
DESCRIPTIONS = {
    "sequential": "await producer.send_and_wait(...) per record",
    "gather": "futures from await producer.send(...), then await asyncio.gather(*futures)",
    "in_order": "the same futures, then for future in futures: await future",
    "wait": "the same futures, then await asyncio.wait(futures)",
    "as_completed": "the same futures, then for next in asyncio.as_completed(futures)",
    "callback": "future.add_done_callback(on_done) per record, no future kept",
    "flush": "the same futures, then await producer.flush() and each future.result()",
    "produce": "await producer.produce(..., on_delivery=report), then flush()",
    "send_many": "await producer.send_many(topic, chunk), then await each result",
    "task_group": "asyncio.TaskGroup, a task per record running send_and_wait(...)",
}
#: Seconds a run may take before it is ended and reported as failed.
RUN_TIMEOUT = 600.0
WARMUP = 1_000
PARTITIONS = 3


# -- one run, in its own process ------------------------------------------------------------


def _cpu() -> float:
    # User plus system CPU of this process, every thread, in nanosecond units (os.times()
    # counts in clock ticks of 10 ms).
    return time.process_time()


class _Counts:
    """Outcomes seen by an idiom."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.samples: list[str] = []

    def error(self, exc: BaseException) -> None:
        self.failed += 1
        if len(self.samples) < 5:
            self.samples.append(repr(exc))


async def _futures(producer: Any, topic: str, values: Sequence[bytes]) -> list[Any]:
    send = producer.send
    return [await send(topic, value) for value in values]


async def _count_each(futures: Sequence[Any], counts: _Counts) -> None:
    # Await each future in order, counting: the "in_order" idiom itself, and the fallback
    # after a failure made a waiting idiom raise.
    counts.acked = counts.failed = 0
    for future in futures:
        try:
            await future
        except Exception as exc:
            counts.error(exc)
        else:
            counts.acked += 1


async def _idiom(
    name: str, producer: Any, topic: str, values: Sequence[bytes], chunk: int,
    counts: _Counts, sent: Callable[[], None],
) -> None:
    if name == "sequential":
        send_and_wait = producer.send_and_wait
        for value in values:
            try:
                await send_and_wait(topic, value)
            except Exception as exc:
                counts.error(exc)
            else:
                counts.acked += 1
        sent()
    elif name == "gather":
        futures = await _futures(producer, topic, values)
        sent()
        try:
            counts.acked = len(await asyncio.gather(*futures))
        except Exception:
            await _count_each(futures, counts)
    elif name == "in_order":
        futures = await _futures(producer, topic, values)
        sent()
        await _count_each(futures, counts)
    elif name == "wait":
        futures = await _futures(producer, topic, values)
        sent()
        done, _pending = await asyncio.wait(futures)
        for future in done:
            error = future.exception()
            if error is None:
                counts.acked += 1
            else:
                counts.error(error)
    elif name == "as_completed":
        futures = await _futures(producer, topic, values)
        sent()
        for next_done in asyncio.as_completed(futures):
            try:
                await next_done
            except Exception as exc:
                counts.error(exc)
            else:
                counts.acked += 1
    elif name == "flush":
        futures = await _futures(producer, topic, values)
        sent()
        await producer.flush()
        for future in futures:
            try:
                future.result()
            except Exception as exc:
                counts.error(exc)
            else:
                counts.acked += 1
    elif name in ("callback", "produce"):
        total = len(values)
        finished = asyncio.Event()

        def on_done(future: Any) -> None:
            error = future.exception()
            if error is None:
                counts.acked += 1
            else:
                counts.error(error)
            if counts.acked + counts.failed == total:
                finished.set()

        def report(error: Any, _message: Any) -> None:
            if error is None:
                counts.acked += 1
            else:
                counts.error(error)

        if name == "callback":
            send = producer.send
            for value in values:
                (await send(topic, value)).add_done_callback(on_done)
            sent()
            await finished.wait()
        else:
            produce = producer.produce
            for value in values:
                await produce(topic, value, on_delivery=report)
            sent()
            await producer.flush()
    elif name == "send_many":
        send_many = producer.send_many
        results = [
            await send_many(topic, values[start : start + chunk])
            for start in range(0, len(values), chunk)
        ]
        sent()
        for result in results:
            try:
                counts.acked += len(await result)
            except Exception:
                await _count_each(result.futures, counts)
    elif name == "task_group":
        send_and_wait = producer.send_and_wait
        task_group: Any = getattr(asyncio, "TaskGroup", None)  # Python 3.11+
        if task_group is None:
            raise SystemExit("task_group needs Python 3.11 or later")
        try:
            async with task_group() as group:
                tasks = [group.create_task(send_and_wait(topic, value)) for value in values]
                sent()
        except Exception as exc:  # an ExceptionGroup of the failed sends
            counts.error(exc)
        else:
            counts.acked = sum(1 for task in tasks if task.exception() is None)
    else:
        raise SystemExit(f"unknown idiom {name!r}: one of {', '.join(IDIOMS)}")


async def _run(spec: dict[str, Any]) -> dict[str, Any]:
    from aioproducer import Producer
    from aioproducer.compiled import compiled_modules

    size = spec["size"]
    count = spec["records"]
    pool = [bytes([65 + (i * 7 + j) % 26 for j in range(size)]) for i in range(256)]
    values = [pool[i & 255] for i in range(count)]
    topic = spec["topic"]
    producer = Producer(
        bootstrap_servers=spec["bootstrap_servers"], acks=1, linger_ms=5, batch_size=16_384,
        enable_idempotence=False,
    )
    await producer.start()
    try:
        warm_up = [await producer.send(topic, pool[i & 255]) for i in range(WARMUP)]
        for future in warm_up:
            await future
        del warm_up
        counts = _Counts()
        marks: dict[str, float] = {}

        def sent() -> None:
            marks["wall"] = time.perf_counter()
            marks["cpu"] = _cpu()

        cpu_start = _cpu()
        wall_start = time.perf_counter()
        await _idiom(spec["idiom"], producer, topic, values, spec["chunk"], counts, sent)
        wall = time.perf_counter() - wall_start
        cpu = _cpu() - cpu_start
    finally:
        await producer.close()
    return {
        "idiom": spec["idiom"],
        "records": count,
        "size": size,
        "acked": counts.acked,
        "failed": counts.failed,
        "error_samples": counts.samples,
        "seconds": wall,
        "records_per_s": counts.acked / wall if wall > 0 else 0.0,
        "cpu_s": cpu,
        "cpu_us_per_record": cpu / count * 1e6,
        "send_cpu_us": (marks["cpu"] - cpu_start) / count * 1e6,
        "wait_cpu_us": (cpu_start + cpu - marks["cpu"]) / count * 1e6,
        "wait_seconds": wall_start + wall - marks["wall"],
        "compiled": list(compiled_modules()),
    }


def _run_on_loop(factory: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
                 loop: str) -> dict[str, Any]:
    from bench.runners._common import run_async

    return run_async(factory, loop)


# -- the driver ---------------------------------------------------------------------------


def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    )
    try:
        child = subprocess.run(
            [sys.executable, "-m", "bench.idioms", "--child", json.dumps(spec)],
            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=RUN_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"idiom": spec["idiom"], "fatal": f"no result within {RUN_TIMEOUT:.0f} s"}
    lines = child.stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        return {"idiom": spec["idiom"], "fatal": child.stderr.strip()[-2000:]}
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def _broker_count(broker: Any, topic: str) -> int | None:
    if broker.name == "instant":
        return int(broker.acknowledged_records(topic))
    from bench.harness import records_on_broker

    return records_on_broker(broker.bootstrap_servers, topic, PARTITIONS)


def _table(rows: Sequence[dict[str, Any]], idioms: Sequence[str]) -> str:
    medians: dict[str, dict[str, float]] = {}
    for idiom in idioms:
        good = [row for row in rows if row["idiom"] == idiom and row.get("ok")]
        if good:
            medians[idiom] = {
                key: statistics.median(row[key] for row in good)
                for key in ("records_per_s", "cpu_us_per_record", "send_cpu_us", "wait_cpu_us")
            }
    base = medians.get("in_order", {}).get("cpu_us_per_record")
    lines = [
        "| idiom | what the caller writes | records/s | CPU us/record | send | wait "
        "| vs in_order |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for idiom in idioms:
        cell = medians.get(idiom)
        if cell is None:
            lines.append(f"| `{idiom}` | {DESCRIPTIONS[idiom]} | failed | | | | |")
            continue
        ratio = f"{cell['cpu_us_per_record'] / base:.2f}x" if base else ""
        lines.append(
            f"| `{idiom}` | {DESCRIPTIONS[idiom]} | {cell['records_per_s']:,.0f} | "
            f"{cell['cpu_us_per_record']:.2f} | {cell['send_cpu_us']:.2f} | "
            f"{cell['wait_cpu_us']:.2f} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.idioms``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.idioms", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--broker", default="instant", choices=("instant", "tansu"))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idioms", default=",".join(IDIOMS))
    parser.add_argument("--sequential-records", type=int, default=1_000,
                        help="records of the sequential idiom (each waits for its answer)")
    parser.add_argument("--chunk", type=int, default=10_000, help="values per send_many call")
    parser.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"))
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")
    parser.add_argument("--out", type=Path, help="write the result here instead")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        spec = json.loads(options.child)
        print(json.dumps(_run_on_loop(lambda: _run(spec), spec["loop"])), flush=True)
        return 0
    idioms = [name.strip() for name in options.idioms.split(",") if name.strip()]
    unknown = sorted(set(idioms) - set(IDIOMS))
    if unknown:
        parser.error(f"unknown idioms {unknown}: choose from {', '.join(IDIOMS)}")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.harness import _machine, start_broker

    machine = _machine()
    broker = start_broker(options.broker, 1, PARTITIONS)
    rows: list[dict[str, Any]] = []
    failures = 0
    try:
        for round_index in range(options.rounds):
            turn = round_index % len(idioms)
            for idiom in idioms[turn:] + idioms[:turn]:
                topic = f"idioms-{idiom.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, PARTITIONS)
                records = options.records
                if idiom == "sequential":
                    records = min(records, options.sequential_records)
                spec = {
                    "idiom": idiom, "topic": topic, "records": records, "size": options.size,
                    "chunk": options.chunk, "loop": options.loop,
                    "bootstrap_servers": broker.bootstrap_servers,
                }
                row = _run_child(spec)
                row.update(round=round_index + 1, broker=options.broker, topic=topic)
                if "fatal" not in row:
                    on_broker = _broker_count(broker, topic)
                    row["records_on_broker"] = on_broker
                    row["ok"] = (
                        row["acked"] == records
                        and row["failed"] == 0
                        and on_broker == records + WARMUP
                    )
                else:
                    row["ok"] = False
                broker.delete_topic(topic)
                row["git_rev"] = machine.get("git_rev")
                row["python"] = machine["python"]
                rows.append(row)
                failures += not row["ok"]
                if row["ok"]:
                    print(
                        f"round {round_index + 1} {idiom:>12}: {row['records_per_s']:>10,.0f} "
                        f"records/s, {row['cpu_us_per_record']:6.2f} us CPU/record (send "
                        f"{row['send_cpu_us']:.2f}, wait {row['wait_cpu_us']:.2f}), "
                        f"{row['records_on_broker']:,} on the broker, {row['loop']}",
                        flush=True,
                    )
                else:
                    print(f"round {round_index + 1} {idiom:>12}: FAILED {row}", flush=True)
    finally:
        broker.close()
    print()
    print(f"{options.broker} broker, {options.records:,} records of {options.size} B "
          f"(sequential: {min(options.records, options.sequential_records):,}), median of "
          f"{options.rounds} rounds, at {machine.get('git_rev')}:")
    print(_table(rows, idioms))
    if options.out is not None:
        options.out.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))
    elif not options.no_save:
        save(f"idioms-{options.broker}", rows)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
