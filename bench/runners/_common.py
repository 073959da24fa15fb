"""What every runner shares: the run spec, payloads, the meter, pacing and the JSON result.

A runner is ``python -m bench.runners.<client> --spec '<json>'`` (or individual flags, for
a human). It connects, sends ``warmup`` records and waits for them (so connections and
metadata exist before the clock starts), then measures one of two things:

- ``throughput``: ``records`` records as fast as the client takes them; the clock runs from
  the first send to the last acknowledgement.
- ``latency``: ``rate`` records per second for ``duration`` seconds; each record's latency
  is its acknowledgement time minus the time its send was called (as Kafka's
  ``ProducerPerformance`` measures it).

It prints one JSON object on one line of stdout (see :func:`result`) and nothing else
there; client libraries log to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import random
import resource
import sys
import time
import traceback
from array import array
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LatencyRecorder",
    "Meter",
    "Pacer",
    "RunData",
    "RunSpec",
    "cpu_seconds",
    "gather_acks",
    "latency_result",
    "paced_async",
    "paced_sync",
    "peak_rss_bytes",
    "result",
    "run_async",
    "runner_main",
    "track",
]

#: How many distinct keys the keyed scenarios cycle through.
KEY_COUNT = 10_000
#: Upper bound on the bytes of distinct payloads prepared per run.
PAYLOAD_POOL_BYTES = 8 << 20
#: The shortest idle between paced sends, in seconds (see paced_async).
MIN_TICK = 0.001
#: Seconds a latency run waits for its last outcomes before counting the rest as lost.
FINISH_TIMEOUT = 120.0
#: Error messages kept in a result (the count is always exact).
MAX_ERROR_SAMPLES = 5


@dataclass
class RunSpec:
    """One run of one client: what to send, where, and how to measure it.

    The harness builds it and passes it as JSON; every field also has a command-line flag
    (``--linger-ms 5``) so a runner can be started by hand.
    """

    client: str = ""
    scenario: str = "manual"
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "bench"
    partitions: int = 1
    records: int = 100_000
    size: int = 100
    keyed: bool = False
    acks: str = "1"
    compression: str = "none"
    linger_ms: float = 5.0
    batch_size: int = 16_384
    idempotence: bool = False
    mode: str = "throughput"
    rate: float = 20_000.0
    duration: float = 5.0
    warmup: int = 1_000
    loop: str = "auto"
    chunk: int = 10_000
    seed: int = 0
    dump: str = ""

    @property
    def acks_int(self) -> int:
        """``acks`` as the wire value: -1 for ``all``."""
        return -1 if self.acks in ("all", "-1") else int(self.acks)

    @property
    def timed_records(self) -> int:
        """How many records the measured part sends."""
        if self.mode == "latency":
            return max(1, round(self.rate * self.duration))
        return self.records

    @property
    def compression_or_none(self) -> str | None:
        """``compression`` as the peers spell "no compression": None."""
        return None if self.compression == "none" else self.compression


class RunData:
    """Payloads and keys, prepared before the clock starts.

    Values are uppercase ASCII letters drawn at random, like the payloads of Kafka's
    ``ProducerPerformance``: about as compressible as text (zstd shrinks them, lz4 barely).
    A pool of distinct values is cycled so that memory does not grow with ``records``.
    """

    def __init__(self, spec: RunSpec) -> None:
        rng = random.Random(spec.seed)
        size = spec.size
        count = max(16, min(1024, PAYLOAD_POOL_BYTES // max(1, size)))
        letters = bytes(65 + i % 26 for i in range(256))
        block = rng.randbytes(count * size).translate(letters)
        self.values: list[bytes] = [block[i * size : (i + 1) * size] for i in range(count)]
        self.keys: list[bytes] | None = (
            [b"key-%08d" % i for i in range(KEY_COUNT)] if spec.keyed else None
        )

    def value(self, index: int) -> bytes:
        """The value of record ``index``."""
        values = self.values
        return values[index % len(values)]

    def key(self, index: int) -> bytes | None:
        """The key of record ``index``, None when the scenario is keyless."""
        keys = self.keys
        return None if keys is None else keys[index % len(keys)]

    def value_list(self, start: int, stop: int) -> list[bytes]:
        """Values of records ``start`` to ``stop - 1``, as one list."""
        return [self.value(i) for i in range(start, stop)]

    def key_list(self, start: int, stop: int) -> list[bytes | None]:
        """Keys of records ``start`` to ``stop - 1``, as one list."""
        return [self.key(i) for i in range(start, stop)]


def cpu_seconds() -> float:
    """User plus system CPU time of this process, all threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_bytes() -> int:
    """The peak resident set size of this process so far.

    On Linux, ``VmHWM`` of ``/proc/self/status``: the high-water mark of this program's own
    memory. ``ru_maxrss`` would do only elsewhere: Linux carries it over from the parent
    through fork and exec, so every runner would report at least the harness's peak.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak if sys.platform == "darwin" else peak * 1024)


class Meter:
    """Wall clock and CPU time of the measured part of a run."""

    def __init__(self) -> None:
        self.wall_start = 0.0
        self.wall_stop = 0.0
        self.cpu_start = 0.0
        self.cpu_stop = 0.0
        self.sent_at = 0.0
        self.rss_before = 0

    def start(self) -> None:
        """Start measuring (after the warm-up)."""
        self.rss_before = peak_rss_bytes()
        self.cpu_start = cpu_seconds()
        self.wall_start = time.perf_counter()

    def mark_sent(self) -> None:
        """Note when the last record was handed to the client (latency mode)."""
        self.sent_at = time.perf_counter()

    def stop(self) -> None:
        """Stop measuring (after the last acknowledgement)."""
        self.wall_stop = time.perf_counter()
        self.cpu_stop = cpu_seconds()

    @property
    def seconds(self) -> float:
        """Wall-clock seconds measured."""
        return self.wall_stop - self.wall_start

    @property
    def cpu(self) -> float:
        """CPU seconds measured."""
        return self.cpu_stop - self.cpu_start


class Pacer:
    """Which records are due at a fixed rate, counted from :meth:`start`.

    Records are due at ``start + i / rate``; a caller that falls behind gets every overdue
    record at once, so the offered load stays the same and the latencies show the delay.
    """

    def __init__(self, rate: float, total: int) -> None:
        self.rate = rate
        self.total = total
        self.next_index = 0
        self.started = 0.0

    def start(self) -> None:
        """Start the schedule now."""
        self.started = time.perf_counter()
        self.next_index = 0

    @property
    def done(self) -> bool:
        """Whether every record was handed out."""
        return self.next_index >= self.total

    def due(self) -> range:
        """The records due by now that were not handed out yet (maybe none)."""
        elapsed = time.perf_counter() - self.started
        stop = min(self.total, math.floor(elapsed * self.rate) + 1)
        start = self.next_index
        if stop <= start:
            return range(start, start)
        self.next_index = stop
        return range(start, stop)

    def delay(self) -> float:
        """Seconds until the next record is due (zero or negative when one is due now)."""
        return self.started + self.next_index / self.rate - time.perf_counter()


class LatencyRecorder:
    """Send and acknowledgement times per record, and the error count."""

    def __init__(self, total: int) -> None:
        self.sent = array("d", bytes(8 * total))
        self.acked = array("d", bytes(8 * total))
        self.errors = 0
        self.acknowledged = 0
        self.error_samples: list[str] = []

    def ok(self, index: int) -> None:
        """Record ``index`` was acknowledged now."""
        self.acked[index] = time.perf_counter()
        self.acknowledged += 1

    def failed(self, index: int, error: object) -> None:
        """Record ``index`` failed."""
        self.errors += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(repr(error))

    def acked_count(self) -> int:
        """How many records have an acknowledgement time."""
        return sum(1 for t in self.acked if t > 0.0)

    @property
    def outcomes(self) -> int:
        """How many records were acknowledged or failed so far."""
        return self.acknowledged + self.errors

    def percentiles(self) -> dict[str, float]:
        """Latency percentiles in milliseconds over the acknowledged records."""
        latencies = sorted(
            (ack - sent) * 1000.0
            for sent, ack in zip(self.sent, self.acked, strict=True)
            if ack > 0.0
        )
        return latency_summary(latencies)


def latency_summary(sorted_ms: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99, p99.9, max and mean of sorted latencies (nearest rank)."""
    n = len(sorted_ms)
    if n == 0:
        return {}

    def rank(p: float) -> float:
        return float(sorted_ms[min(n - 1, max(0, math.ceil(p * n) - 1))])

    return {
        "p50": rank(0.50),
        "p95": rank(0.95),
        "p99": rank(0.99),
        "p99_9": rank(0.999),
        "max": float(sorted_ms[-1]),
        "mean": float(sum(sorted_ms) / n),
    }


def track(recorder: LatencyRecorder, index: int) -> Callable[[Any], None]:
    """A done-callback for a future-like object that records ``index``'s outcome."""

    def callback(future: Any) -> None:
        try:
            error = future.exception()
        except BaseException as exc:  # cancelled
            error = exc
        if error is None:
            recorder.ok(index)
        else:
            recorder.failed(index, error)

    return callback


async def paced_async(
    spec: RunSpec,
    send_range: Callable[[range, LatencyRecorder], Awaitable[None]],
) -> tuple[Meter, LatencyRecorder]:
    """Drive ``send_range`` at ``spec.rate`` for ``spec.duration``; wait for every outcome.

    ``send_range(indices, recorder)`` sends those records, sets ``recorder.sent[i]`` just
    before each send and arranges for ``recorder.ok(i)`` / ``recorder.failed(i, error)``
    (see :func:`track`). The futures are not kept or awaited here: awaiting thousands of
    finished futures in a row holds the event loop (tens of milliseconds for some clients),
    which would delay the acknowledgements still in flight and charge that to the client.
    """
    total = spec.timed_records
    recorder = LatencyRecorder(total)
    pacer = Pacer(spec.rate, total)
    meter = Meter()
    meter.start()
    pacer.start()
    while not pacer.done:
        due = pacer.due()
        if due:
            await send_range(due, recorder)
        delay = pacer.delay()
        # Event loops time in whole milliseconds: a shorter sleep spins the CPU.
        await asyncio.sleep(max(delay, MIN_TICK) if delay > 0 else 0)
    meter.mark_sent()
    deadline = time.perf_counter() + FINISH_TIMEOUT
    while recorder.outcomes < total and time.perf_counter() < deadline:
        await asyncio.sleep(MIN_TICK)
    meter.stop()
    return meter, recorder


def paced_sync(
    spec: RunSpec,
    send_range: Callable[[range, LatencyRecorder], None],
    wait: Callable[[float], object],
    finish: Callable[[], object],
) -> tuple[Meter, LatencyRecorder]:
    """:func:`paced_async` for blocking clients: ``wait(seconds)`` idles (or polls) until
    the next record is due, ``finish()`` blocks until every record is acknowledged."""
    total = spec.timed_records
    recorder = LatencyRecorder(total)
    pacer = Pacer(spec.rate, total)
    meter = Meter()
    meter.start()
    pacer.start()
    while not pacer.done:
        due = pacer.due()
        if due:
            send_range(due, recorder)
        delay = pacer.delay()
        wait(max(delay, MIN_TICK) if delay > 0 else 0.0)
    meter.mark_sent()
    finish()
    meter.stop()
    return meter, recorder


def latency_result(
    spec: RunSpec, meter: Meter, recorder: LatencyRecorder, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """:func:`result` for a latency run (and the raw latencies to ``spec.dump``, if set:
    a JSON list of ``[seconds since start, latency ms or null]`` per record)."""
    if spec.dump:
        start = meter.wall_start
        rows = [
            [sent - start, (ack - sent) * 1000.0 if ack > 0.0 else None]
            for sent, ack in zip(recorder.sent, recorder.acked, strict=True)
        ]
        with open(spec.dump, "w", encoding="utf-8") as out:
            json.dump(rows, out)
    return result(
        spec,
        meter,
        acked=recorder.acknowledged,
        errors=recorder.errors,
        error_samples=recorder.error_samples,
        latency=recorder.percentiles(),
        extra=extra,
    )


def result(
    spec: RunSpec,
    meter: Meter,
    *,
    acked: int,
    errors: int = 0,
    error_samples: Sequence[str] = (),
    latency: dict[str, float] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON object a runner prints.

    ``errors`` counts records that failed or were never acknowledged; a run with errors is
    reported but its numbers are not used by the harness.
    """
    sent = spec.timed_records
    lost = max(0, sent - acked - errors)
    seconds = meter.seconds
    out: dict[str, Any] = {
        "client": spec.client,
        "scenario": spec.scenario,
        "mode": spec.mode,
        "size": spec.size,
        "keyed": spec.keyed,
        "acks": spec.acks,
        "compression": spec.compression,
        "records": sent,
        "acked": acked,
        "errors": errors + lost,
        "error_samples": list(error_samples)[:MAX_ERROR_SAMPLES],
        "warmup": spec.warmup,
        "seconds": seconds,
        "msgs_per_s": acked / seconds if seconds > 0 else 0.0,
        "mb_per_s": acked * spec.size / seconds / 1e6 if seconds > 0 else 0.0,
        "cpu_s": meter.cpu,
        "cpu_s_per_million": meter.cpu / sent * 1e6 if sent else 0.0,
        "rss_before_bytes": meter.rss_before,
        "peak_rss_bytes": peak_rss_bytes(),
        "pid": os.getpid(),
    }
    if lost:
        out["error_samples"].append(f"{lost} record(s) never acknowledged nor failed")
    if latency is not None:
        out["latency_ms"] = latency
        out["rate"] = spec.rate
        sending = (meter.sent_at - meter.wall_start) if meter.sent_at else seconds
        # The schedule hands out the first record at once, so n records span (n - 1) / rate.
        out["achieved_rate"] = (sent - 1) / sending if sending > 0 and sent > 1 else 0.0
    if extra:
        out.update(extra)
    return out


def _add_flags(parser: argparse.ArgumentParser) -> None:
    for field in dataclasses.fields(RunSpec):
        flag = "--" + field.name.replace("_", "-")
        default = field.default
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            parser.add_argument(flag, type=type(default), default=None)


def parse_spec(client: str, argv: Sequence[str] | None = None) -> RunSpec:
    """A :class:`RunSpec` from ``--spec JSON`` and flags (flags win)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.runners.{client}")
    parser.add_argument("--spec", default="{}", help="the run spec as a JSON object")
    _add_flags(parser)
    options = parser.parse_args(list(argv) if argv is not None else None)
    values: dict[str, Any] = json.loads(options.spec)
    for field in dataclasses.fields(RunSpec):
        given = getattr(options, field.name)
        if given is not None:
            values[field.name] = given
    values["client"] = client
    spec = RunSpec(**values)
    if spec.mode not in ("throughput", "latency"):
        parser.error(f"mode must be throughput or latency, not {spec.mode!r}")
    return spec


def run_async(
    factory: Callable[[], Coroutine[Any, Any, dict[str, Any]]], loop: str
) -> dict[str, Any]:
    """Run a coroutine on asyncio's loop or uvloop (``auto``: uvloop when installed)."""
    use_uvloop = loop == "uvloop"
    if loop == "auto":
        try:
            import uvloop
        except ImportError:
            use_uvloop = False
        else:
            use_uvloop = True
    if use_uvloop:
        import uvloop

        if sys.version_info >= (3, 11):
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                out = runner.run(factory())
        else:
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            out = asyncio.run(factory())
        out["loop"] = "uvloop"
        return out
    out = asyncio.run(factory())
    out["loop"] = "asyncio"
    return out


async def gather_acks(awaitables: Sequence[Awaitable[Any]]) -> tuple[int, int, list[str]]:
    """Await each in order; return (acknowledged, failed, error samples)."""
    acked = 0
    failed = 0
    samples: list[str] = []
    for awaitable in awaitables:
        try:
            await awaitable
        except Exception as exc:
            failed += 1
            if len(samples) < MAX_ERROR_SAMPLES:
                samples.append(repr(exc))
        else:
            acked += 1
    return acked, failed, samples


def runner_main(client: str, body: Callable[[RunSpec, RunData], dict[str, Any]]) -> None:
    """Parse the spec, prepare the data, run ``body`` and print its result as one line.

    A crash still prints a result (with ``fatal`` set and every record counted as an
    error) so the harness can report it, then exits non-zero.
    """
    spec = parse_spec(client)
    data = RunData(spec)
    try:
        out = body(spec, data)
    except BaseException as exc:
        traceback.print_exc()
        out = {
            "client": client,
            "scenario": spec.scenario,
            "mode": spec.mode,
            "records": spec.timed_records,
            "acked": 0,
            "errors": spec.timed_records,
            "error_samples": [repr(exc)],
            "fatal": True,
        }
        print(json.dumps(out), flush=True)
        sys.exit(1)
    print(json.dumps(out), flush=True)
