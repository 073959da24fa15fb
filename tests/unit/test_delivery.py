"""Delivery reports for produce(): confluent-kafka's arguments, the callbacks served in order
in the thread that serves them, the message accessors, and the wrong-event-loop error."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
from typing import Any

import pytest

from aioproducer import DeliveredMessage, RecordMetadata, TimestampType
from aioproducer._core.delivery import DeliveryReports, check_delivery_callback, confluent_arguments
from aioproducer._core.futures import RecordFuture
from aioproducer.errors import (
    DeliveryTimeoutError,
    IllegalStateError,
    InvalidArgumentTypeError,
    KafkaError,
    UnknownServerError,
)
from aioproducer.producer import _other_loop_error
from tests.unit.test_accumulator import (
    Harness,
    _complete_in_order,
    _finish,
    _split,
    make_cluster,
    untracked_futures,
)


def test_confluent_arguments_become_send_arguments() -> None:
    key, value, partition, timestamp, headers = confluent_arguments(
        "user-1", "hello", -1, 0, {"trace": "abc", "raw": b"\x00", "none": None}, None, None
    )
    assert (key, value, partition, timestamp) == (b"user-1", b"hello", None, None)
    assert headers == [("trace", b"abc"), ("raw", b"\x00"), ("none", None)]
    key, value, partition, timestamp, headers = confluent_arguments(
        "user-1", "hello", 2, 1_700_000_000_000, [("a", "b")], str.upper, str.lower
    )
    # With serializers, they turn str into bytes themselves.
    assert (key, value, partition, timestamp) == ("user-1", "hello", 2, 1_700_000_000_000)
    assert headers == [("a", b"b")]
    # Anything else is left for send() to check and refuse.
    assert confluent_arguments(b"k", 5, "x", 1.5, "h", None, None) == (b"k", 5, "x", 1.5, "h")
    assert confluent_arguments(None, None, True, False, None, None, None)[2:4] == (True, False)


def test_the_delivery_callback_under_either_name() -> None:
    def report(err: Any, msg: Any) -> None:
        pass

    assert check_delivery_callback(report, None) is report
    assert check_delivery_callback(None, report) is report
    assert check_delivery_callback(None, None) is None
    with pytest.raises(InvalidArgumentTypeError, match="not both"):
        check_delivery_callback(report, report)
    with pytest.raises(InvalidArgumentTypeError, match="callable"):
        check_delivery_callback("print", None)  # type: ignore[arg-type]


def _metadata(partition: int, offset: int, log_append: bool = False) -> RecordMetadata:
    kind = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    return RecordMetadata("events", partition, offset, 1_700_000_000_123, 1, 5, kind)


def test_reports_are_served_in_the_order_records_finish_in_the_serving_thread() -> None:
    reports = DeliveryReports()
    calls: list[tuple[Any, DeliveredMessage, str]] = []

    def report(err: Any, msg: DeliveredMessage) -> None:
        calls.append((err, msg, threading.current_thread().name))

    futures: list[concurrent.futures.Future[RecordMetadata]] = []
    for n in range(3):
        future: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        futures.append(future)
        reports.track(DeliveredMessage("events", b"v%d" % n, b"k", None, None), report, future)
    assert reports.outstanding == 3

    def finish() -> None:  # as the loop thread does
        futures[2].set_result(_metadata(1, 7, log_append=True))
        futures[0].set_exception(DeliveryTimeoutError("expired"))

    worker = threading.Thread(target=finish, name="loop-thread")
    worker.start()
    worker.join()
    assert calls == []  # nothing runs until served
    assert reports.serve() == 2
    assert [call[2] for call in calls] == [threading.current_thread().name] * 2
    stored, failed = calls[0][1], calls[1][1]
    assert calls[0][0] is None and stored.error() is None
    assert (stored.topic(), stored.partition(), stored.offset()) == ("events", 1, 7)
    assert (stored.key(), stored.value(), stored.headers()) == (b"k", b"v2", None)
    assert stored.timestamp() == (2, 1_700_000_000_123)  # confluent's LOG_APPEND_TIME
    assert stored.latency() is not None and stored.latency() >= 0
    assert isinstance(calls[1][0], DeliveryTimeoutError) and failed.error() is calls[1][0]
    assert (failed.partition(), failed.offset(), failed.value()) == (-1, -1, b"v0")
    assert "failed" in repr(failed) and "stored" in repr(stored)
    assert reports.outstanding == 1 and reports.serve() == 0
    futures[1].set_result(_metadata(0, 3))
    assert reports.serve() == 1
    assert calls[2][1].timestamp() == (1, 1_700_000_000_123)  # confluent's CREATE_TIME


def test_a_callback_that_raises_stops_serving_and_keeps_the_rest() -> None:
    reports = DeliveryReports()
    seen: list[bytes] = []

    def report(err: Any, msg: DeliveredMessage) -> None:
        seen.append(msg.value())
        if msg.value() == b"bad":
            raise RuntimeError("callback bug")

    for value in (b"one", b"bad", b"three"):
        future: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        reports.track(DeliveredMessage("t", value, None, 0, None), report, future)
        future.set_result(_metadata(0, len(seen)))
    with pytest.raises(RuntimeError, match="callback bug"):
        reports.serve()
    assert seen == [b"one", b"bad"]
    assert reports.ready == 1
    assert reports.serve() == 1
    assert seen == [b"one", b"bad", b"three"]


def test_collect_queues_done_records_whose_callbacks_have_not_run() -> None:
    reports = DeliveryReports()

    class Done:
        """A done future whose done-callbacks are never called (as one whose callbacks
        are scheduled for later)."""

        timestamp = 5

        def add_done_callback(self, callback: Any) -> None:
            pass

        def done(self) -> bool:
            return True

        def cancelled(self) -> bool:
            return False

        def exception(self) -> BaseException | None:
            return None

        def result(self) -> RecordMetadata:
            return _metadata(0, 9)

    got: list[int] = []
    reports.track(
        DeliveredMessage("t", b"v", None, None, None), lambda e, m: got.append(m.offset()), Done()
    )
    assert reports.serve() == 0
    reports.collect()
    assert reports.serve() == 1 and got == [9]
    reports.collect()  # once only
    assert reports.serve() == 0


def test_waiting_with_nothing_outstanding_returns_at_once() -> None:
    reports = DeliveryReports()
    reports.wait_blocking(None)  # would block forever otherwise
    asyncio.run(asyncio.wait_for(reports.wait(None), 60))


async def test_an_async_wait_wakes_when_a_record_finishes_in_another_thread() -> None:
    reports = DeliveryReports()
    future: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
    got: list[Any] = []

    async def report(err: Any, msg: DeliveredMessage) -> None:  # awaited by serve_async
        got.append((asyncio.current_task(), msg.offset()))

    reports.track(DeliveredMessage("t", b"v", None, None, None), report, future)
    waiting = asyncio.ensure_future(reports.wait(None))
    await asyncio.to_thread(future.set_result, _metadata(0, 4))
    await asyncio.wait_for(waiting, 60)
    assert await reports.serve_async() == 1
    assert got == [(asyncio.current_task(), 4)]


def test_the_other_loop_error_says_what_to_do() -> None:
    running = asyncio.new_event_loop()
    try:
        error = _other_loop_error(running)
    finally:
        running.close()
    assert isinstance(error, IllegalStateError) and isinstance(error, KafkaError)
    assert not error.retriable
    assert "another event loop" in str(error) and "SyncProducer" in str(error)
    closed = _other_loop_error(running)
    assert "closed" in str(closed) and "asyncio.run()" in str(closed)


# ---- Reports kept by their batch (DeliveryReports.pend_record) ----------------------------


def _pend(
    reports: DeliveryReports,
    future: RecordFuture,
    callback: Any,
    key: Any = None,
    value: Any = b"v",
    headers: Any = None,
) -> None:
    reports.pend_record(future, callback, key, value, headers)


async def test_pending_reports_are_queued_when_their_batch_is_done() -> None:
    h = Harness(asyncio.get_running_loop())
    reports = DeliveryReports()
    calls: list[tuple[str, Any, int]] = []
    futures = [h.append(0, b"v%d" % n, 0.0) for n in range(5)]
    for n, future in enumerate(futures):
        name = "shared" if n in (0, 1, 4) else f"own-{n}"
        _pend(
            reports,
            future,
            lambda err, msg, name=name: calls.append((name, err, msg.offset())),
            value=b"v%d" % n,
        )
    assert (reports.outstanding, reports.ready) == (5, 0)
    _finish(futures[0]._batch, 40)
    assert reports.ready == 0  # the batch calls back soon, as a future's callbacks
    await asyncio.sleep(0)
    assert (reports.outstanding, reports.ready) == (0, 5)
    assert reports.serve() == 5
    assert calls == [
        ("shared", None, 40),
        ("shared", None, 41),
        ("own-2", None, 42),
        ("own-3", None, 43),
        ("shared", None, 44),
    ]


async def test_pending_reports_of_a_failed_batch_carry_each_its_own_error() -> None:
    h = Harness(asyncio.get_running_loop())
    reports = DeliveryReports()
    got: list[DeliveredMessage] = []
    futures = [h.append(0, b"v%d" % n, 0.0) for n in range(3)]
    for future in futures:
        _pend(reports, future, lambda err, msg: got.append(msg))
    futures[0]._batch.fail(UnknownServerError("boom"))
    reports.collect()  # flush() and close() do not wait for the batch's call
    assert reports.serve() == 3
    errors = [msg.error() for msg in got]
    assert all(isinstance(err, UnknownServerError) for err in errors)
    assert len({id(err) for err in errors}) == 3  # one copy per record, as futures give
    assert [(msg.partition(), msg.offset()) for msg in got] == [(0, -1)] * 3
    assert got[0].timestamp() == (1, futures[0].timestamp)
    await asyncio.sleep(0)  # the batch's own call finds them queued already
    assert reports.serve() == 0


async def test_pending_reports_follow_their_records_into_a_split() -> None:
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    cluster = make_cluster({0: 1})
    reports = DeliveryReports()
    got: list[tuple[bytes, int]] = []
    values = [f"{n:04d}".encode() * 50 for n in range(15)]
    futures = [h.append(0, value, 0.0) for value in values]
    for value, future in zip(values, futures, strict=True):
        _pend(
            reports, future, lambda err, msg: got.append((msg.value(), msg.offset())), value=value
        )
    (batch,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    assert _split(h, batch, 1024) > 1
    await asyncio.sleep(0)
    assert (reports.outstanding, reports.ready) == (15, 0)  # now with the new batches
    _complete_in_order(list(h.acc.deque_for(("t", 0))), 100)
    await asyncio.sleep(0)
    assert reports.serve() == 15
    assert got == [(value, 100 + n) for n, value in enumerate(values)]


@untracked_futures
async def test_pending_reports_leave_the_gc_only_atoms_to_skip() -> None:
    # Keys and values as bytes, no headers: the list holds atoms only, and the collector
    # need not walk it. Anything else (a serializer's input, headers) may lead back to it.
    h = Harness(asyncio.get_running_loop())
    reports = DeliveryReports()
    futures = [h.append(0, b"v", 0.0) for _ in range(3)]
    _pend(reports, futures[0], lambda err, msg: None, key=b"k")
    pending = reports._batches[id(futures[0]._batch)]
    assert not gc.is_tracked(pending.entries) and gc.is_tracked(pending.runs)
    _pend(reports, futures[1], lambda err, msg: None, value={"a": 1})
    assert gc.is_tracked(pending.entries)
    other = Harness(asyncio.get_running_loop())
    future = other.append(0, b"v", 0.0)
    _pend(reports, future, lambda err, msg: None, headers=[("h", b"1")])
    assert gc.is_tracked(reports._batches[id(future._batch)].entries)


async def test_reports_that_follow_a_split_into_failed_batches_are_served() -> None:
    # The parts of a split batch can fail before the old batch's reports follow them (a
    # purge in the same step): those reports are queued at once, and the parts keep no
    # watcher, so a send() record's future in them still calls its callbacks.
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    cluster = make_cluster({0: 1})
    reports = DeliveryReports()
    got: list[tuple[int, str]] = []
    values = [f"{n:04d}".encode() * 50 for n in range(15)]
    futures = [h.append(0, value, 0.0) for value in values]
    for future in futures[0::2]:  # produce() records; the others are send() records
        _pend(reports, future, lambda err, msg: got.append((msg.offset(), type(err).__name__)))
    (batch,) = h.acc.drain(cluster, [1], 1 << 20, 0.0)[1]
    assert _split(h, batch, 1024) > 1
    parts = list(h.acc.deque_for(("t", 0)))
    for part in parts:
        part.fail(UnknownServerError("purged"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert reports.serve() == 8 and reports.outstanding == 0
    assert got == [(-1, "UnknownServerError")] * 8
    assert all(part.watchers is None for part in parts)
    results = await asyncio.wait_for(
        asyncio.gather(*futures[1::2], return_exceptions=True), 10
    )
    assert all(isinstance(result, UnknownServerError) for result in results)


async def test_an_awaited_callback_leaves_the_rest_of_its_batch_to_other_pollers() -> None:
    # While poll() awaits an async callback, a flush() serves the reports after it, in
    # order, before those of a later batch.
    h = Harness(asyncio.get_running_loop(), batch_size=4096)
    reports = DeliveryReports()
    got: list[tuple[int, int]] = []
    gate = asyncio.Event()

    async def report(err: Any, msg: DeliveredMessage) -> None:
        got.append((msg.partition(), msg.offset()))
        if msg.offset() == 100:
            await gate.wait()

    first = [h.append(0, b"x", 0.0) for _ in range(3)]
    later = h.append(1, b"y", 0.0)
    for future in [*first, later]:
        _pend(reports, future, report)
    _finish(first[0]._batch, 100)
    _finish(later._batch, 200)
    await asyncio.sleep(0)
    poller = asyncio.ensure_future(reports.serve_async())
    await asyncio.sleep(0)
    assert got == [(0, 100)]
    reports.collect()
    assert await reports.serve_async() == 3
    assert got == [(0, 100), (0, 101), (0, 102), (1, 200)]
    gate.set()
    assert await poller == 1
