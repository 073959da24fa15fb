"""``aioproducer perf``: throughput and latency, as ``kafka-producer-perf-test`` measures
them, optionally in transactions."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import sys
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from aioproducer._core.futures import BatchResults, RecordFuture
from aioproducer.cli.common import (
    _EXIT_DELIVERY,
    _EXIT_OK,
    DEFAULT_TRANSACTION_DURATION_MS,
    MAX_LATENCY_SAMPLES,
    PAYLOAD_POOL_SIZE,
    PERF_CLIENT_ID,
    PROG,
    REPORTING_INTERVAL_S,
    TRANSACTIONAL_ID_PREFIX,
    DeliveryError,
    UsageError,
    _check_config,
    _check_partitions,
    _check_topic,
    _close_quietly,
    _cluster,
    _count,
    _default_client_id,
    _describe,
    _Failures,
    _logger,
    _make_producer,
    _note,
    _producer_props,
    _put,
    _run,
    _start_failure,
    _value_of,
)
from aioproducer.cli.verify import _end_offsets, _reader_security, _verify
from aioproducer.compiled import warn_if_interpreted
from aioproducer.errors import (
    KafkaError,
)
from aioproducer.metric_catalog import Metric
from aioproducer.producer import Producer

# ---- perf ----------------------------------------------------------------------------------


class PerfStats:
    """Kafka's perf-test statistics: totals, 5-second windows and sampled latencies.

    Latencies are milliseconds from the send call to the acknowledgement. At most
    :data:`MAX_LATENCY_SAMPLES` of them are kept (every ``sampling``-th record), and the
    percentiles are read off the sorted sample at index ``int(p * size)``, as the Java tool does.
    """

    def __init__(
        self,
        num_records: int,
        *,
        steady_state: bool = False,
        out: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.start = self.window_start = clock()
        self.sampling = max(1, num_records // max(1, min(num_records, MAX_LATENCY_SAMPLES)))
        self.latencies: list[float] = []
        self.iteration = 0
        self.count = 0
        self.bytes = 0
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.window_count = 0
        self.window_bytes = 0
        self.window_total_latency = 0.0
        self.window_max_latency = 0.0
        self.steady_state = steady_state
        self.suppress_printing = False
        self._out = out

    def record(self, latency_ms: float, size: int, now: float) -> None:
        """One record of ``size`` bytes was acknowledged ``latency_ms`` after it was sent."""
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        if latency_ms > self.max_latency:
            self.max_latency = latency_ms
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        if latency_ms > self.window_max_latency:
            self.window_max_latency = latency_ms
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        self.iteration += 1
        if now - self.window_start >= REPORTING_INTERVAL_S:
            self._end_window(now)

    def record_many(self, latency_ms: float, count: int, size: int, now: float) -> None:
        """``count`` records of ``size`` bytes in total, each acknowledged after ``latency_ms``."""
        if count <= 0:
            return
        self.count += count
        self.bytes += size
        self.total_latency += latency_ms * count
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += count
        self.window_bytes += size
        self.window_total_latency += latency_ms * count
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        first = (-self.iteration) % self.sampling
        if first < count:
            self.latencies.extend([latency_ms] * ((count - 1 - first) // self.sampling + 1))
        self.iteration += count
        if now - self.window_start >= REPORTING_INTERVAL_S:
            self._end_window(now)

    def _end_window(self, now: float) -> None:
        if self.steady_state and self.count == self.window_count:
            self._print("In steady state.")
        if not self.suppress_printing:
            self._print(self.window_line(now))
        self.window_start = now
        self.window_count = self.window_bytes = 0
        self.window_total_latency = self.window_max_latency = 0.0

    def _print(self, line: str) -> None:
        print(line, file=self._out or sys.stdout, flush=True)

    def window_line(self, now: float | None = None) -> str:
        """The 5-second line: ``N records sent, R records/sec (M MB/sec), ...``."""
        elapsed = max((self._clock() if now is None else now) - self.window_start, 1e-9)
        count = self.window_count
        average = self.window_total_latency / count if count else 0.0
        return (
            f"{_count(count, 'record')} sent, {count / elapsed:.1f} records/sec "
            f"({self.window_bytes / elapsed / (1024.0 * 1024.0):.2f} MB/sec), "
            f"{average:.1f} ms avg latency, {self.window_max_latency:.1f} ms max latency."
        )

    def percentiles(self, *quantiles: float) -> list[int]:
        """Whole-millisecond latencies at ``quantiles`` of the sample (0 when empty)."""
        sample = sorted(self.latencies)
        if not sample:
            return [0 for _ in quantiles]
        return [int(sample[min(int(q * len(sample)), len(sample) - 1)]) for q in quantiles]

    def total_line(self, now: float | None = None) -> str:
        """The final line, in the format of Kafka's ``kafka-producer-perf-test``."""
        elapsed = max((self._clock() if now is None else now) - self.start, 1e-9)
        p50, p95, p99, p999 = self.percentiles(0.5, 0.95, 0.99, 0.999)
        count = self.count
        label = " steady state" if self.steady_state else ""
        average = self.total_latency / count if count else 0.0
        return (
            f"{count}{label} {'record' if count == 1 else 'records'} sent, "
            f"{count / elapsed:f} records/sec "
            f"({self.bytes / elapsed / (1024.0 * 1024.0):.2f} MB/sec), "
            f"{average:.2f} ms avg latency, {self.max_latency:.2f} ms max latency, "
            f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th."
        )


class _Throttler:
    """Keeps the send rate near ``target`` records per second (no cap when ``target`` < 0)."""

    def __init__(self, target: float, start: float) -> None:
        self.target = target
        self.start = start

    def should_throttle(self, sent: int, now: float) -> bool:
        elapsed = now - self.start
        return self.target > 0 and elapsed > 0 and sent / elapsed > self.target

    async def throttle(self, sent: int, now: float) -> None:
        await asyncio.sleep(max(0.0, self.start + sent / self.target - now))


def _random_payloads(size: int, count: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [bytes(rng.choices(letters, k=size)) for _ in range(count)]


def _file_payloads(path: str, delimiter: str) -> list[bytes]:
    print(f"Reading payloads from: {Path(path).resolve()}", flush=True)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --payload-file {path}: {exc}") from None
    payloads = [piece.encode() for piece in text.split(delimiter) if piece]
    if not payloads:
        raise UsageError(f"--payload-file {path} holds no payloads")
    print(f"Number of messages read: {len(payloads)}", flush=True)
    return payloads


@dataclass
class _PerfPlan:
    topic: str
    num_records: int
    payloads: list[bytes]
    monotonic: bool
    throughput: float
    warmup: int
    batch: bool
    chunk_size: int
    print_metrics: bool
    transaction_duration: float | None = None
    """Seconds after which the open transaction is committed; None without transactions."""


@dataclass
class _PerfResult:
    stats: PerfStats | None = None
    transactions: int = 0
    """Transactions committed."""
    steady: PerfStats | None = None
    failures: _Failures = field(default_factory=_Failures)
    sent: int = 0
    stopped: str | None = None


def _perf_plan(args: argparse.Namespace) -> _PerfPlan:
    _check_topic(args.topic)
    if args.num_records <= 0:
        raise UsageError("--num-records should be greater than zero")
    if args.warmup_records < 0 or args.warmup_records >= args.num_records:
        raise UsageError("--warmup-records must be 0 or more and strictly fewer than --num-records")
    if args.record_size is not None and args.record_size <= 0:
        raise UsageError("--record-size should be greater than zero")
    if args.throughput == 0 or math.isnan(args.throughput):
        raise UsageError("--throughput must be positive, or -1 for no cap")
    if args.chunk_size <= 0:
        raise UsageError("--chunk-size should be greater than zero")
    if args.transaction_duration_ms is not None and args.transaction_duration_ms <= 0:
        raise UsageError("--transaction-duration-ms should be greater than zero")
    if args.transactional_id == "":
        raise UsageError("--transactional-id must not be empty")
    if args.verify:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise UsageError(
                "--verify reads the topic back with confluent-kafka: pip install confluent-kafka"
            ) from None
    if args.record_size is not None:
        payloads = _random_payloads(args.record_size, PAYLOAD_POOL_SIZE)
    elif args.payload_file is not None:
        delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
        choices = _file_payloads(args.payload_file, delimiter)
        # Random picks made now, outside the timed loop, then cycled through.
        rng = random.Random(0)
        payloads = [rng.choice(choices) for _ in range(min(args.num_records, 4096))]
    else:
        payloads = []
    return _PerfPlan(
        topic=args.topic,
        num_records=args.num_records,
        payloads=payloads,
        monotonic=bool(args.payload_monotonic),
        throughput=args.throughput,
        warmup=args.warmup_records,
        batch=bool(args.batch),
        chunk_size=args.chunk_size,
        print_metrics=bool(args.print_metrics),
    )


def _transactions(args: argparse.Namespace, props: dict[str, str]) -> float | None:
    """Turn transactions on as kafka-producer-perf-test does: with --transactional-id,
    --transaction-duration-ms, or transactional.id in the configs. Returns the duration in
    seconds (None without transactions) and sets transactional.id in ``props``."""
    configured = _value_of(props, "transactional_id")
    if args.transactional_id is None and args.transaction_duration_ms is None and not configured:
        return None
    transactional_id = (
        args.transactional_id or configured or f"{TRANSACTIONAL_ID_PREFIX}{uuid.uuid4()}"
    )
    _put(props, "transactional.id", transactional_id)
    duration = args.transaction_duration_ms or DEFAULT_TRANSACTION_DURATION_MS
    return duration / 1000.0


def _cmd_perf(args: argparse.Namespace) -> int:
    # A measurement of the plain-Python fallback says so, once, before anything else.
    warn_if_interpreted(_logger)
    # Everything is checked before a broker is started or reached.
    props = _producer_props(args)
    _default_client_id(props, PERF_CLIENT_ID)
    transaction_duration = _transactions(args, props)
    checked = _check_config(props)
    _check_partitions(props, args.partitions)
    plan = _perf_plan(args)
    plan.transaction_duration = transaction_duration
    security = _reader_security(checked) if args.verify else {}
    with _cluster(props, plan.topic, args.partitions) as (bootstrap, embedded):
        start_offsets: dict[int, int] | None = None
        if args.verify and not embedded:
            start_offsets = _end_offsets(bootstrap, plan.topic, security)
        producer = _make_producer(props, bootstrap)
        if plan.warmup > 0:
            print(
                f"Warmup first {_count(plan.warmup, 'record')}. Steady state results will print "
                "after the complete test summary.",
                flush=True,
            )
        result = _run(lambda: _perf(producer, plan), not args.no_uvloop)
        verify_error: str | None = None
        if args.verify and result.stats is not None and not result.stopped:
            verify_error = _verify(
                bootstrap, plan.topic, result.stats.count, start_offsets, security
            )
    if transaction_duration is not None:
        _note(
            f"committed {_count(result.transactions, 'transaction')} "
            f"(transactional id {props['transactional.id']})"
        )
    if result.stopped:
        print(f"{PROG} perf: error: {result.stopped}", file=sys.stderr)
    if result.failures.count:
        print(f"{PROG} perf: error: {result.failures.report(result.sent)}", file=sys.stderr)
    if verify_error:
        print(f"{PROG} perf: error: {verify_error}", file=sys.stderr)
    failed = result.stopped or result.failures.count or verify_error
    return _EXIT_DELIVERY if failed else _EXIT_OK


async def _perf(producer: Producer, plan: _PerfPlan) -> _PerfResult:
    result = _PerfResult()
    try:
        await producer.start()
    except KafkaError as exc:
        raise DeliveryError(_start_failure(producer, exc)) from None
    try:
        # Metadata first, so the first records are not timed waiting for it (as in Java,
        # where the producer is created before the clock starts and send() blocks on it).
        await producer.partitions_for(plan.topic)
        result.stats = PerfStats(plan.num_records)
        if plan.batch:
            await _perf_bulk(producer, plan, result)
        else:
            await _perf_each(producer, plan, result)
    except KafkaError as exc:
        result.stopped = f"sending stopped after {_count(result.sent, 'record')}: {_describe(exc)}"
    except BaseException:  # Ctrl+C: leave now, without delivering what is buffered
        await _close_quietly(producer, timeout=0)
        raise
    if result.stats is not None:
        result.stats._print(result.stats.total_line())
    if result.steady is not None:
        result.steady._print(result.steady.total_line())
    if plan.print_metrics:
        _print_metrics(producer.metrics_detailed())
    await producer.close()
    return result


class _AckCollector:
    """Turns acknowledgements into latencies, in send order, without a callback per record.

    The send loop appends ``(future, send_time, size)``; this task awaits the oldest pending
    future and, once it is done, takes every done future off the front of the queue, stamping
    them with the current time. A per-record done-callback would cost about as much as the send
    itself (each is a scheduled event-loop callback); this costs a deque append and two cheap
    checks. Records are acknowledged in send order per broker connection, so a record is
    stamped late only when a request to another broker finished before an older one.
    """

    def __init__(self, result: _PerfResult, warmup: int) -> None:
        self.pending: deque[tuple[RecordFuture, float, int]] = deque()
        self._result = result
        self._warmup = warmup
        self._taken = 0
        self._wake = asyncio.Event()
        self._finished = False

    def wake(self) -> None:
        """Records were appended: look at them (cheap; called at the send loop's yields)."""
        self._wake.set()

    def finish(self) -> None:
        """No more records will be appended."""
        self._finished = True
        self._wake.set()

    async def run(self) -> None:
        pending = self.pending
        clock = time.monotonic
        while True:
            if not pending:
                if self._finished:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            head = pending[0][0]
            if not head.done():
                with contextlib.suppress(Exception):  # read below, per record
                    await head
            self._take_done(clock())

    def _take_done(self, now: float) -> None:
        pending = self.pending
        result = self._result
        stats = result.stats
        assert stats is not None
        record = stats.record
        while pending:
            future, start, size = pending[0]
            if not future.done():
                return
            pending.popleft()
            self._taken += 1
            exc = future.exception()
            if exc is not None:
                result.failures.add(exc)
                continue
            latency = (now - start) * 1000.0
            record(latency, size, now)
            if self._taken > self._warmup and result.steady is not None:
                result.steady.record(latency, size, now)


class _TransactionTimer:
    """kafka-producer-perf-test's transactions: one begins before a record when none is open,
    and is committed after a record sent once it is ``duration`` seconds old."""

    def __init__(self, producer: Producer, duration: float, result: _PerfResult) -> None:
        self._producer = producer
        self._duration = duration
        self._result = result
        self._started: float | None = None

    async def before_send(self, now: float) -> None:
        if self._started is None:
            await self._producer.begin_transaction()
            self._started = now

    async def after_send(self, now: float) -> None:
        if self._started is not None and now - self._started >= self._duration:
            await self.commit()

    async def commit(self) -> None:
        """Commit the open transaction, if any (it waits for its records to be sent)."""
        if self._started is not None:
            await self._producer.commit_transaction()
            self._started = None
            self._result.transactions += 1


def _transaction_timer(
    producer: Producer, plan: _PerfPlan, result: _PerfResult
) -> _TransactionTimer | None:
    if plan.transaction_duration is None:
        return None
    return _TransactionTimer(producer, plan.transaction_duration, result)


async def _perf_each(producer: Producer, plan: _PerfPlan, result: _PerfResult) -> None:
    """One ``send`` per record; each record's latency from its own acknowledgement."""
    stats = result.stats
    assert stats is not None
    collector = _AckCollector(result, plan.warmup)
    collecting = asyncio.ensure_future(collector.run())
    append = collector.pending.append
    clock = time.monotonic
    send = producer.send
    topic = plan.topic
    payloads = plan.payloads
    pool = len(payloads)
    throttler = _Throttler(plan.throughput, clock())
    throttled = plan.throughput > 0
    sleep = asyncio.sleep
    transactions = _transaction_timer(producer, plan, result)
    try:
        for i in range(plan.num_records):
            payload = str(i).encode() if plan.monotonic else payloads[i % pool]
            if i == plan.warmup and i > 0:
                result.steady = PerfStats(plan.num_records - plan.warmup, steady_state=True)
                stats.suppress_printing = True
            start = clock()
            if transactions is not None:
                await transactions.before_send(start)
            future = await send(topic, payload)
            append((future, start, len(payload)))
            result.sent = i + 1
            if transactions is not None:
                collector.wake()
                await transactions.after_send(start)
            if throttled and throttler.should_throttle(i, start):
                collector.wake()
                await throttler.throttle(i, start)
            elif i & 255 == 255:
                # send() returns without suspending while there is buffer space; yielding
                # now and then lets the sender task ship batches while this loop keeps
                # filling them.
                collector.wake()
                await sleep(0)
        if transactions is not None:
            collector.wake()
            await transactions.commit()
    except BaseException:
        collecting.cancel()
        raise
    collector.finish()
    await producer.flush()
    await collecting


async def _perf_bulk(producer: Producer, plan: _PerfPlan, result: _PerfResult) -> None:
    """``send_many`` in chunks; every record of a chunk gets the chunk's latency."""
    stats = result.stats
    assert stats is not None
    clock = time.monotonic
    # One small task per chunk (not per record) waits for the chunk's acknowledgements.
    pending: set[asyncio.Task[None]] = set()

    async def collect(
        results: BatchResults, start: float, count: int, size: int, steady: bool
    ) -> None:
        with contextlib.suppress(Exception):  # each record's own outcome is read below
            await results
        now = clock()
        ok = 0
        for future in results.futures:
            exc = future.exception()
            if exc is None:
                ok += 1
            else:
                result.failures.add(exc)
        ok_bytes = size if ok == count else size * ok // count
        latency = (now - start) * 1000.0
        stats.record_many(latency, ok, ok_bytes, now)
        if steady and result.steady is not None:
            result.steady.record_many(latency, ok, ok_bytes, now)

    try:
        await _send_chunks(producer, plan, result, collect, pending)
    except BaseException:
        for task in pending:
            task.cancel()
        raise
    await producer.flush()
    if pending:
        await asyncio.gather(*pending)


async def _send_chunks(
    producer: Producer,
    plan: _PerfPlan,
    result: _PerfResult,
    collect: Callable[[BatchResults, float, int, int, bool], Awaitable[None]],
    pending: set[asyncio.Task[None]],
) -> None:
    stats = result.stats
    assert stats is not None
    clock = time.monotonic
    pool = len(plan.payloads)
    cycle = plan.payloads * (plan.chunk_size // pool + 2) if pool else []
    throttler = _Throttler(plan.throughput, clock())
    transactions = _transaction_timer(producer, plan, result)
    sent = 0
    while sent < plan.num_records:
        count = min(plan.chunk_size, plan.num_records - sent)
        if plan.warmup > 0 and sent < plan.warmup < sent + count:
            count = plan.warmup - sent
        if sent == plan.warmup and sent > 0 and result.steady is None:
            result.steady = PerfStats(plan.num_records - plan.warmup, steady_state=True)
            stats.suppress_printing = True
        if plan.monotonic:
            items = [str(i).encode() for i in range(sent, sent + count)]
        else:
            offset = sent % pool
            items = cycle[offset : offset + count]
        size = sum(map(len, items))
        start = clock()
        if transactions is not None:
            await transactions.before_send(start)
        results = await producer.send_many(plan.topic, items)
        task = asyncio.ensure_future(
            collect(results, start, count, size, result.steady is not None)
        )
        pending.add(task)
        task.add_done_callback(pending.discard)
        sent += count
        result.sent = sent
        if transactions is not None:
            await transactions.after_send(start)
        now = clock()
        if throttler.should_throttle(sent, now):
            await throttler.throttle(sent, now)
        else:
            await asyncio.sleep(0)
    if transactions is not None:
        await transactions.commit()


def _print_metrics(metrics: list[Metric]) -> None:
    # As the Java tool: "group:name:{tag=value, ...}", sorted, every group (per topic and
    # per broker too).
    rows: dict[str, float] = {}
    for metric in metrics:
        tags = ", ".join(f"{key}={value}" for key, value in metric.tags.items())
        rows[f"{metric.group}:{metric.name}:{{{tags}}}"] = metric.value
    width = max((len(display) for display in rows), default=0)
    print(f"\n{'Metric Name':<{width}} : Value")
    for display in sorted(rows):
        print(f"{display:<{width}} : {rows[display]:.3f}")
    sys.stdout.flush()
