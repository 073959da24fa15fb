"""The oracle side of the fault suite: what was sent, what was acknowledged, what the log holds.

A :class:`Ledger` remembers every record a scenario sends (partition and value, in send
order) and the future ``send`` returned. Once the futures are done, :meth:`Ledger.check`
compares the outcome with a partition's log as a third party read it back:

- every acknowledged record is in the log exactly once;
- per partition, the acknowledged records appear in the order they were sent;
- failed records are absent, where the scenario says the broker can be trusted on that (an
  error injected *before* the append), and failed with the expected error class;
- nothing else is in the log (no record the scenario did not send).

Values are unique per scenario (``b"<tag>-<partition>-<index>"``), so a value identifies a
record.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aioproducer import Producer
from aioproducer._core.futures import RecordFuture
from tests.support.readback import high_watermarks, read_back

__all__ = [
    "Ledger",
    "SentRecord",
    "bounded",
    "fast_options",
    "mock_log",
    "unique_topic",
    "wait_records",
    "wait_until",
]

T = TypeVar("T")

_counter = itertools.count()

#: Every await in the suite is bounded by this unless a scenario says otherwise (seconds).
DEFAULT_BOUND = 30.0


def unique_topic(stem: str) -> str:
    """A topic name no other scenario uses."""
    return f"faults-{stem}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


async def bounded(awaitable: Awaitable[T], timeout: float = DEFAULT_BOUND) -> T:
    """``asyncio.wait_for`` with the suite's default bound: no scenario can hang."""
    return await asyncio.wait_for(awaitable, timeout)


async def wait_until(predicate: Callable[[], bool], timeout: float = DEFAULT_BOUND) -> None:
    """Wait until ``predicate()`` holds (an observable state: a request count, a log line, a
    future's state), looking every few milliseconds; as ``ScriptedCluster.wait_for``, for
    scenarios on librdkafka's mock.

    Raises:
        TimeoutError: not within ``timeout`` seconds (a bound against hangs, not a check).
    """

    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), timeout)


async def wait_records(records: Iterable[SentRecord], timeout: float = DEFAULT_BOUND) -> None:
    """Wait until the records' futures are done, within ``timeout``.

    ``asyncio.wait`` rather than ``wait_for(gather(...))``: on timeout gather cancels its
    children, and a cancelled record future breaks gather on Python 3.11 (see
    test_cancellation.py::test_a_gather_of_record_futures_can_time_out), which would turn
    the bound into a hang.

    Raises:
        TimeoutError: some futures are still pending after ``timeout`` seconds.
    """
    futures = [record.future for record in records if not record.future.done()]
    if not futures:
        return
    _, pending = await asyncio.wait(futures, timeout=timeout)
    if pending:
        raise TimeoutError(f"{len(pending)} record(s) still pending after {timeout} s")


def fast_options(bootstrap_servers: str, **overrides: Any) -> dict[str, Any]:
    """Producer options that keep every wait of a scenario short, with ``overrides``."""
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers,
        "linger_ms": 0,
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 100,
        "reconnect_backoff_ms": 10,
        "reconnect_backoff_max_ms": 100,
        "request_timeout_ms": 3000,
        "delivery_timeout_ms": 20000,
        "max_block_ms": 10000,
        "socket_connection_setup_timeout_ms": 1000,
        "socket_connection_setup_timeout_max_ms": 2000,
        "metadata_max_age_ms": 60000,
    }
    options.update(overrides)
    return options


def mock_options(bootstrap_servers: str, **overrides: Any) -> dict[str, Any]:
    """``fast_options`` for librdkafka's mock cluster: one request in flight per connection.

    The mock checks no sequence numbers for an idempotent producer without a transactional
    id, so a request pipelined behind one that failed is appended ahead of the retry, where
    Kafka would answer OUT_OF_ORDER_SEQUENCE_NUMBER and the client would resend in order.
    Order under five requests in flight is proven on the scripted broker, which checks
    sequences as Kafka does (test_idempotence.py).
    """
    return fast_options(
        bootstrap_servers, **{"max_in_flight_requests_per_connection": 1, **overrides}
    )


@dataclass
class SentRecord:
    """One record a scenario handed to the producer."""

    partition: int
    value: bytes
    future: RecordFuture


@dataclass
class Ledger:
    """Everything a scenario sent, in send order; see the module docstring."""

    topic: str
    tag: str = "r"
    records: list[SentRecord] = field(default_factory=list)
    _next_index: dict[int, int] = field(default_factory=dict)

    def next_value(self, partition: int) -> bytes:
        """The next unique value for ``partition``."""
        index = self._next_index.get(partition, 0)
        self._next_index[partition] = index + 1
        return f"{self.tag}-{partition}-{index:06d}".encode()

    async def send(self, producer: Producer, partition: int) -> SentRecord:
        """Send the next record of ``partition`` and remember it."""
        value = self.next_value(partition)
        future = await producer.send(self.topic, value, partition=partition)
        record = SentRecord(partition, value, future)
        self.records.append(record)
        return record

    async def send_burst(self, producer: Producer, partition: int, count: int) -> list[SentRecord]:
        """Send ``count`` records to ``partition`` without yielding to the event loop in
        between (when the buffer has room), so that they share one batch."""
        return [await self.send(producer, partition) for _ in range(count)]

    async def send_many(self, producer: Producer, partitions: Sequence[int], count: int) -> None:
        """Send ``count`` records to each of ``partitions``, interleaved."""
        for _ in range(count):
            for partition in partitions:
                await self.send(producer, partition)

    async def wait(self, timeout: float = DEFAULT_BOUND) -> None:
        """Wait until every future is done (acknowledged or failed), within ``timeout``.

        Raises:
            TimeoutError: some futures are still pending after ``timeout`` seconds.
        """
        await wait_records(self.records, timeout)

    @property
    def acknowledged(self) -> list[SentRecord]:
        """Records whose future holds metadata."""
        return [
            r
            for r in self.records
            if r.future.done() and not r.future.cancelled() and r.future.exception() is None
        ]

    @property
    def failed(self) -> list[SentRecord]:
        """Records whose future holds an error."""
        return [
            r
            for r in self.records
            if r.future.done() and not r.future.cancelled() and r.future.exception() is not None
        ]

    def errors(self) -> Counter[type[BaseException]]:
        """How many records failed with each error class."""
        errors: Counter[type[BaseException]] = Counter()
        for record in self.failed:
            error = record.future.exception()
            if error is not None:
                errors[type(error)] += 1
        return errors

    def check(
        self,
        log: Mapping[int, Sequence[bytes | None]],
        *,
        failed_absent: bool = True,
        expect_failed: Iterable[type[BaseException]] | None = None,
    ) -> None:
        """Assert the delivery guarantees against ``log`` (values per partition, in offset
        order); see the module docstring.

        Args:
            log: what each partition of the topic holds.
            failed_absent: also require failed records to be absent from the log. Only
                where the broker is an oracle for it: a request that failed *before* the
                append, not one whose outcome the client could not know.
            expect_failed: the error classes allowed for failed records (each failed
                record's error must be an instance of one); None allows no failure at all.
        """
        assert all(r.future.done() for r in self.records), "some records are still pending"
        allowed = tuple(expect_failed) if expect_failed is not None else ()
        for record in self.failed:
            error = record.future.exception()
            assert allowed and isinstance(error, allowed), (
                f"{record.value!r} failed with {error!r}; allowed: {allowed}"
            )
        sent_values = {r.value for r in self.records}
        acked_values = {r.value for r in self.acknowledged}
        failed_values = {r.value for r in self.failed}
        for partition, values in log.items():
            counts = Counter(values)
            strangers = [v for v in counts if v not in sent_values]
            assert not strangers, f"partition {partition} holds records never sent: {strangers[:5]}"
            duplicates = {v: n for v, n in counts.items() if n > 1 and v in acked_values}
            assert not duplicates, f"partition {partition} holds duplicates: {duplicates}"
            if failed_absent:
                present = [v for v in values if v in failed_values]
                assert not present, (
                    f"partition {partition} holds records reported failed: {present[:5]}"
                )
        by_partition: dict[int, list[bytes]] = {}
        for record in self.acknowledged:
            by_partition.setdefault(record.partition, []).append(record.value)
        for partition, expected in by_partition.items():
            values = log.get(partition, [])
            present = [v for v in values if v in acked_values]
            missing = set(expected) - set(present)
            assert not missing, (
                f"partition {partition} lost {len(missing)} acknowledged record(s), "
                f"e.g. {sorted(missing)[:5]}"
            )
            assert present == expected, f"partition {partition} is out of order"


async def wait_for_watermarks(
    bootstrap_servers: str, topic: str, total: int, timeout: float = 30.0
) -> None:
    """Wait until the topic's high watermarks add up to ``total`` (or ``timeout`` passes).

    For acks=0, where the producer cannot know when the broker appended: the mock's own
    threads may still be reading the last requests off the socket after the producer closed.
    A shortfall after ``timeout`` is left for the ledger's check to report.
    """

    def wait() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(high_watermarks(bootstrap_servers, topic).values()) >= total:
                return
            time.sleep(0.05)

    await asyncio.to_thread(wait)


async def mock_log(bootstrap_servers: str, topic: str) -> dict[int, list[bytes | None]]:
    """Every partition's values as confluent-kafka's consumer reads them back.

    The mock's high watermark counts records exactly, so the read stops at the last record
    instead of waiting for duplicates that may or may not come.
    """

    def read() -> dict[int, list[bytes | None]]:
        watermarks = high_watermarks(bootstrap_servers, topic)
        total = sum(watermarks.values())
        consumed = read_back(bootstrap_servers, topic, expected=total, timeout=30)
        log: dict[int, list[bytes | None]] = {p: [] for p in watermarks}
        for record in consumed:
            log[record.partition].append(record.value)
        assert sum(len(v) for v in log.values()) == total, (
            f"read {sum(len(v) for v in log.values())} records back, the high watermarks "
            f"say {total}"
        )
        return log

    return await asyncio.to_thread(read)
