"""Faults on a three-node Apache Kafka cluster while an idempotent producer streams.

Each test streams small records to a six-partition topic (three replicas, two of them
required in sync, each node the preferred leader of two partitions) with ``acks=all``,
idempotence and five requests in flight per connection. Each record's value names its
partition and its sequence number there. Once a given number of records are
acknowledged, the test breaks the cluster while the stream goes on:

- the leader of a partition is killed (SIGKILL), then started again;
- a broker is stopped cleanly (controlled shutdown), then started again;
- the active controller is killed, then started again;
- a leader is paused (SIGSTOP) for longer than ``request_timeout_ms``, then resumed;
- two of the three nodes stop: ``min.insync.replicas=2`` cannot be met, the survivor
  refuses records with NOT_ENOUGH_REPLICAS, and the producer retries them until a node
  returns, then delivers them; with a ``delivery_timeout_ms`` the outage outlasts, the
  records it outlasts fail with DeliveryTimeoutError, and no others fail.

Then, for every record: each one acknowledged is in the log exactly once, at the offset
its acknowledgement gave; each partition holds its records in the order they were sent,
without duplicates; a record missing from the log failed; a record that failed and is in
the log anyway failed with DeliveryTimeoutError (which does not say the record was not
written); the failed records failed with the error classes expected; and the producer
still delivers a record sent after the fault.

The cluster is the shared ``kafka_cluster`` fixture (tests.support.kafka.KafkaCluster);
the ``cluster`` fixture below leaves every node running, in sync and leading its
preferred partitions, also when a test fails. Records are read back with
confluent-kafka's consumer (tests.support.readback), to the high watermarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from aioproducer import Producer, RecordMetadata
from aioproducer._core.futures import BatchResults
from aioproducer.errors import DeliveryTimeoutError, KafkaError
from tests.support.kafka import KafkaCluster
from tests.support.passes import compiled_pass_only
from tests.support.readback import ConsumedRecord, read_back

pytestmark = [
    pytest.mark.kafka,
    compiled_pass_only("a three-node Kafka cluster's fault scenarios, minutes long"),
]

_T = TypeVar("_T")

_PARTITIONS = 6
#: Each node is the preferred leader of two partitions and a follower of the other four.
_ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 3, 2], 4: [2, 1, 3], 5: [3, 2, 1]}
_VALUE_SIZE = 24
#: Records per send_many call, all to one partition; the stream takes the partitions in turn.
_CHUNK = 250
#: Records a second the stream sends at most, so that it lasts as long as the fault does.
_RATE = 6000
#: Records sent and not yet answered, at most: the stream waits while this many are out.
_WINDOW = 24_000
#: Records acknowledged before the fault.
_FAULT_AT = 12_000
#: Records acknowledged to a partition that show it is served again.
_PROGRESS = 2 * _CHUNK
#: Records acknowledged after the fault before the stream stops.
_TAIL = 6_000
_HANG = 120.0  # only turns a hang into a failure
_FAULT_HANG = 240.0


def _value(partition: int, sequence: int) -> bytes:
    head = b"%d:%08d:" % (partition, sequence)
    return head + b"." * (_VALUE_SIZE - len(head))


def _parse(value: bytes | None) -> tuple[int, int]:
    assert value is not None
    partition, sequence, _ = value.split(b":", 2)
    return int(partition), int(sequence)


def _led_by(node_id: int) -> list[int]:
    """The partitions whose preferred leader is ``node_id``."""
    return [p for p, replicas in _ASSIGNMENT.items() if replicas[0] == node_id]


# -- the cluster, restored after each test -----------------------------------------------


def _restore(cluster: KafkaCluster) -> None:
    """Every node running, every replica in sync, every partition led by its preferred
    leader."""
    for node_id in cluster.node_ids:
        if cluster.paused(node_id):
            cluster.resume(node_id)
    for node_id in cluster.node_ids:
        if not cluster.running(node_id):
            running = sum(1 for n in cluster.node_ids if cluster.running(n))
            # Unregistering asks the active controller, which needs a majority of the
            # nodes; without one, the node registers again once its old registration
            # expires.
            cluster.restart(node_id, unregister=running * 2 > len(cluster.node_ids))
    topics = sorted(cluster.admin().list_topics(timeout=10).topics)
    for topic in topics:
        cluster.wait_in_sync(topic, timeout=120)
    for topic in topics:
        cluster.elect_preferred_leaders(topic)


@pytest.fixture
def cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The shared cluster, restored by :func:`_restore` after the test, pass or fail."""
    try:
        yield kafka_cluster
    finally:
        _restore(kafka_cluster)


# -- the stream --------------------------------------------------------------------------


class Stream:
    """Records streamed to every partition in turn, :data:`_CHUNK` at a time with
    ``send_many``, at most :data:`_RATE` a second and :data:`_WINDOW` unanswered."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.chunks: list[tuple[int, int, BatchResults]] = []
        self.sent = [0] * _PARTITIONS  # per partition: records sent, the next sequence
        self.acked = [0] * _PARTITIONS  # per partition: records of fully acknowledged chunks
        self.answered = 0  # records of chunks done (acknowledged or failed)
        self.failed_chunks = 0  # chunks with at least one failed record
        self._stopping = False
        self._changed = asyncio.Event()
        self._answers: list[asyncio.Future[Any]] = []
        self._runner: asyncio.Task[None] | None = None

    @property
    def total_sent(self) -> int:
        return sum(self.sent)

    @property
    def total_acked(self) -> int:
        return sum(self.acked)

    def start(self) -> None:
        self._runner = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        partition = 0
        while not self._stopping:
            await self.until(
                lambda: self._stopping or self.total_sent - self.answered < _WINDOW,
                "room in the window of unanswered records",
                check_runner=False,
            )
            if self._stopping:
                break
            # Pacing (not synchronization): the stream lasts as long as the fault.
            next_at = max(next_at, loop.time()) + _CHUNK / _RATE
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            first = self.sent[partition]
            values = [_value(partition, n) for n in range(first, first + _CHUNK)]
            results = await self.producer.send_many(self.topic, values, partition=partition)
            self.sent[partition] += _CHUNK
            self.chunks.append((partition, first, results))
            answer = asyncio.ensure_future(results)
            answer.add_done_callback(functools.partial(self._on_answer, partition))
            self._answers.append(answer)
            partition = (partition + 1) % _PARTITIONS

    def _on_answer(self, partition: int, answer: asyncio.Future[Any]) -> None:
        self.answered += _CHUNK
        if answer.cancelled() or answer.exception() is not None:
            self.failed_chunks += 1
        else:
            self.acked[partition] += _CHUNK
        self._changed.set()

    async def until(
        self,
        condition: Callable[[], bool],
        what: str,
        *,
        timeout: float = _HANG,
        check_runner: bool = True,
    ) -> None:
        """Wait until ``condition()`` holds (checked on every answer, and at least every
        50 ms); fail after ``timeout`` seconds or when the stream itself failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            runner = self._runner
            if check_runner and runner is not None and runner.done():
                runner.result()  # raises what stopped the stream
                raise AssertionError(f"the stream stopped while waiting for {what}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"waited {timeout:.0f} s for {what}; {self.describe()}")
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.05))

    async def stop(self, *, wait_for_answers: bool = True) -> None:
        """Stop sending, and wait until every record sent is answered."""
        self._stopping = True
        self._changed.set()
        if self._runner is not None:
            await asyncio.wait_for(asyncio.gather(self._runner, return_exceptions=True), _HANG)
        if wait_for_answers:
            await asyncio.wait_for(asyncio.gather(*self._answers, return_exceptions=True), _HANG)
        if self._runner is not None:
            self._runner.result()  # raises what stopped the stream, if anything did

    def outcomes(self) -> dict[tuple[int, int], RecordMetadata | BaseException]:
        """``{(partition, sequence): metadata or error}`` for every record sent."""
        outcomes: dict[tuple[int, int], RecordMetadata | BaseException] = {}
        for partition, first, results in self.chunks:
            for index, future in enumerate(results.futures):
                error = future.exception()
                outcomes[partition, first + index] = future.result() if error is None else error
        return outcomes

    def describe(self) -> str:
        return (
            f"sent {self.total_sent}, acknowledged {self.total_acked} "
            f"(by partition {self.acked}), answered {self.answered}, "
            f"chunks with failures {self.failed_chunks}"
        )


# -- a fault -----------------------------------------------------------------------------


class Fault:
    """What a fault scenario gets: the cluster, the topic, the stream, the producer's log,
    and a timeline of what happened for the report."""

    def __init__(
        self,
        cluster: KafkaCluster,
        topic: str,
        stream: Stream,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.stream = stream
        self.caplog = caplog
        self.began = time.monotonic()
        self.timeline: list[tuple[str, float, int]] = []
        # At each mark: the records sent to each partition until then.
        self.sent_at: dict[str, list[int]] = {}

    def mark(self, what: str) -> None:
        self.timeline.append(
            (what, round(time.monotonic() - self.began, 2), self.stream.total_acked)
        )
        self.sent_at[what] = list(self.stream.sent)

    def sent_between(self, first: str, last: str, key: tuple[int, int]) -> bool:
        """Whether the record ``(partition, sequence)`` was sent between two marks."""
        partition, sequence = key
        return self.sent_at[first][partition] <= sequence < self.sent_at[last][partition]

    async def call(self, what: str, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a blocking cluster operation in a thread, while the stream goes on."""
        result = await asyncio.wait_for(asyncio.to_thread(function, *args, **kwargs), _HANG)
        self.mark(what)
        return result

    def logged(self, *needles: str) -> list[logging.LogRecord]:
        return [r for r in self.caplog.records if all(n in r.getMessage() for n in needles)]

    async def until_logged(self, what: str, *needles: str) -> None:
        await self.stream.until(lambda: bool(self.logged(*needles)), what)
        self.mark(what)

    async def progress(self, partitions: list[int], what: str) -> None:
        """Wait until each of ``partitions`` has :data:`_PROGRESS` more records
        acknowledged than now."""
        stream = self.stream
        base = {p: stream.acked[p] for p in partitions}
        await stream.until(
            lambda: all(stream.acked[p] >= base[p] + _PROGRESS for p in partitions),
            f"records acknowledged to partitions {partitions} ({what})",
        )
        self.mark(f"partitions {partitions} acknowledged records ({what})")

    async def heal(self) -> None:
        """Every replica of the topic in sync again, and its preferred leaders elected,
        while the stream goes on."""
        await self.call("in sync", self.cluster.wait_in_sync, self.topic, timeout=_HANG)
        await self.call("preferred leaders", self.cluster.elect_preferred_leaders, self.topic)


# -- one scenario: stream, fault, check --------------------------------------------------


async def _run_scenario(
    cluster: KafkaCluster,
    caplog: pytest.LogCaptureFixture,
    stem: str,
    fault: Callable[[Fault], Awaitable[None]],
    *,
    expected_errors: set[type[KafkaError]],
    **options: Any,
) -> tuple[Fault, dict[tuple[int, int], RecordMetadata | BaseException], dict[str, float]]:
    """Stream, break the cluster with ``fault`` once :data:`_FAULT_AT` records are
    acknowledged, go on for :data:`_TAIL` more, then check every record against the log
    (see the module's docstring). Returns what happened, for further checks."""
    caplog.set_level(logging.DEBUG, logger="aioproducer")
    topic = f"{stem}-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(topic, replica_assignment=_ASSIGNMENT)
    settings: dict[str, Any] = {
        "acks": "all",
        "enable_idempotence": True,
        "max_in_flight_requests_per_connection": 5,
        "linger_ms": 5,
        "request_timeout_ms": 3000,
        "delivery_timeout_ms": 120_000,
        **options,
    }
    async with Producer(
        bootstrap_servers=cluster.bootstrap_servers, client_id=topic, **settings
    ) as producer:
        stream = Stream(producer, topic)
        context = Fault(cluster, topic, stream, caplog)
        stream.start()
        try:
            await stream.until(lambda: stream.total_acked >= _FAULT_AT, "the first records")
            context.mark("fault begins")
            await asyncio.wait_for(fault(context), _FAULT_HANG)
            tail_from = stream.total_acked
            await stream.until(
                lambda: stream.total_acked >= tail_from + _TAIL, "records after the fault"
            )
            context.mark("tail acknowledged")
        except BaseException:
            # Failing anyway: no waiting for records the fault may hold up for long.
            with contextlib.suppress(Exception):
                await stream.stop(wait_for_answers=False)
            await producer.close(timeout=5.0)
            raise
        await stream.stop()
        context.mark("every record answered")
        # The producer still sends: one more record to each partition.
        after = [
            await producer.send(topic, _value(p, stream.sent[p]), partition=p)
            for p in range(_PARTITIONS)
        ]
        for p, future in enumerate(after):
            metadata = await asyncio.wait_for(future, _HANG)
            assert isinstance(metadata, RecordMetadata)
            assert metadata.partition == p
        outcomes = stream.outcomes()
        for p, future in enumerate(after):
            outcomes[p, stream.sent[p]] = future.result()
        metrics = producer.metrics()

    acked = {key: o for key, o in outcomes.items() if isinstance(o, RecordMetadata)}
    failed = {key: o for key, o in outcomes.items() if not isinstance(o, RecordMetadata)}
    errors = Counter(type(e).__name__ for e in failed.values())
    report = (
        f"{topic}: timeline (what, at s, records acknowledged): {context.timeline}; "
        f"{len(outcomes)} records, {len(acked)} acknowledged, failed by class {dict(errors)}; "
        f"record-retry-total {metrics['record-retry-total']:.0f}, "
        f"record-error-total {metrics['record-error-total']:.0f}"
    )
    print(report)

    # Every failed record failed with a KafkaError of the expected classes.
    not_kafka = [e for e in failed.values() if not isinstance(e, KafkaError)]
    assert not not_kafka, f"records failed with non-Kafka errors: {not_kafka[:3]!r}; {report}"
    assert {type(e) for e in failed.values()} == expected_errors, (
        f"failed records' errors, by class: {dict(errors)}; the first: "
        f"{next(iter(failed.values()), None)!r}; {report}"
    )

    consumed = await asyncio.to_thread(
        read_back, cluster.bootstrap_servers, topic, expected=len(acked), timeout=60, extra_wait=1.0
    )
    _check_log(consumed, acked, failed, report)
    return context, outcomes, metrics


def _check_log(
    consumed: list[ConsumedRecord],
    acked: dict[tuple[int, int], RecordMetadata],
    failed: dict[tuple[int, int], BaseException],
    report: str,
) -> None:
    by_partition: dict[int, list[tuple[int, int]]] = {p: [] for p in range(_PARTITIONS)}
    for record in consumed:
        partition, sequence = _parse(record.value)
        assert partition == record.partition, f"a record of {partition} in {record.partition}"
        by_partition[record.partition].append((record.offset, sequence))
    for p, stored in by_partition.items():
        sequences = [sequence for _, sequence in stored]
        twice = sorted(s for s, n in Counter(sequences).items() if n > 1)
        assert not twice, (
            f"partition {p}: {len(twice)} record(s) written more than once, sequence numbers "
            f"{twice[:20]}; {report}"
        )
        disorder = [(a, b) for a, b in itertools.pairwise(sequences) if b < a]
        assert not disorder, (
            f"partition {p}: records out of order, (sequence, the one after it) "
            f"{disorder[:10]}; {report}"
        )
        present = set(sequences)
        lost = sorted(s for (q, s) in acked if q == p and s not in present)
        assert not lost, (
            f"partition {p}: {len(lost)} acknowledged record(s) missing from the log, "
            f"sequence numbers {lost[:20]}; {report}"
        )
        misplaced = [
            (s, acked[p, s].offset, offset)
            for offset, s in stored
            if (p, s) in acked and acked[p, s].offset != offset
        ]
        assert not misplaced, (
            f"partition {p}: records at another offset than acknowledged, (sequence, "
            f"acknowledged, stored) {misplaced[:10]}; {report}"
        )
        # A record in the log that was not acknowledged must have failed with an error
        # that leaves open whether it was written.
        unexpected = [
            (s, failed.get((p, s)))
            for s in sequences
            if (p, s) not in acked and not isinstance(failed.get((p, s)), DeliveryTimeoutError)
        ]
        assert not unexpected, (
            f"partition {p}: records in the log that failed for good (or were never sent): "
            f"{unexpected[:5]!r}; {report}"
        )


# -- the scenarios -----------------------------------------------------------------------


async def test_leader_killed_then_restarted(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    # SIGKILL: the connections break at once, and the controller fences the node and
    # moves its leaderships when its heartbeats are 9 s overdue.
    async def fault(context: Fault) -> None:
        victim = await context.call("leader found", cluster.leader_of, context.topic, 0)
        assert victim == _ASSIGNMENT[0][0]
        await context.call(f"node {victim} killed", cluster.kill, victim)
        await context.progress(_led_by(victim), f"led by node {victim} before")
        await context.call(f"node {victim} restarted", cluster.restart, victim)
        await context.heal()

    await _run_scenario(cluster, caplog, "kill-leader", fault, expected_errors=set())


async def test_broker_stopped_cleanly_then_restarted(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    # A controlled shutdown: the node hands its leaderships over before it stops, and
    # the producer learns the new leaders from NOT_LEADER_OR_FOLLOWER answers.
    async def fault(context: Fault) -> None:
        victim = _ASSIGNMENT[1][0]
        await context.call(f"node {victim} stopped", cluster.stop, victim)
        await context.progress(_led_by(victim), f"led by node {victim} before")
        await context.call(f"node {victim} restarted", cluster.restart, victim)
        await context.heal()

    await _run_scenario(cluster, caplog, "stop-broker", fault, expected_errors=set())


async def test_active_controller_killed_then_restarted(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    # The other two nodes elect a new active controller, which fences the dead node's
    # broker and moves its leaderships.
    async def fault(context: Fault) -> None:
        controller = await context.call("controller found", cluster.active_controller)
        await context.call(f"controller {controller} killed", cluster.kill, controller)
        successor = await context.call("new controller", cluster.active_controller)
        assert successor != controller
        await context.progress(_led_by(controller), f"led by node {controller} before")
        await context.call(f"node {controller} restarted", cluster.restart, controller)
        await context.heal()

    await _run_scenario(cluster, caplog, "kill-controller", fault, expected_errors=set())


async def test_leader_paused_past_the_request_timeout(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    # SIGSTOP: the connections stay open and nothing answers. The producer's requests to
    # the node time out (request_timeout_ms 3000) and it closes the connection and retries;
    # the node, resumed, may still write what it had read before the pause, so retries
    # meet batches the leader has already: each record must be written once.
    victim = _ASSIGNMENT[2][0]

    async def fault(context: Fault) -> None:
        await context.call(f"node {victim} paused", cluster.pause, victim)
        try:
            await context.until_logged(
                "a request to the paused node timed out",
                "retrying",
                f"(broker {victim},",
                "request_timeout_ms",
            )
        finally:
            await context.call(f"node {victim} resumed", cluster.resume, victim)
        await context.progress(_led_by(victim), f"led by node {victim}")
        await context.heal()

    await _run_scenario(
        cluster,
        caplog,
        "pause-leader",
        fault,
        expected_errors=set(),
        request_timeout_ms=3000,
        delivery_timeout_ms=120_000,
    )


async def _two_nodes_down(context: Fault, *, wait_for: Callable[[], Awaitable[None]]) -> None:
    """Stop nodes 1 and 2 cleanly, one after the other, leaving node 3 alone; wait for
    ``wait_for``; then start node 1 again (node 2 is restarted by the caller's restore).

    Cleanly, because a controlled shutdown takes each node out of the in-sync replicas
    while a controller can still write that down: node 3 is then the only in-sync
    replica, below ``min.insync.replicas``, and refuses records with NOT_ENOUGH_REPLICAS.
    (Killed nodes would stay in the in-sync replicas once the quorum of controllers is
    lost with them, and node 3 would take records and time out waiting for them.)
    Without a quorum, node 1 cannot be unregistered first: it registers again once its
    old registration expires.
    """
    cluster = context.cluster
    await context.call("node 1 stopped", cluster.stop, 1)
    await context.call("node 2 stopped", cluster.stop, 2)
    await wait_for()
    await context.call("node 1 restarted", cluster.restart, 1, unregister=False)
    await context.progress(list(range(_PARTITIONS)), "with two nodes")
    context.mark("every partition served again")
    await context.call("node 2 restarted", cluster.restart, 2)
    await context.heal()


async def test_two_nodes_down_until_one_returns(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    async def fault(context: Fault) -> None:
        async def refused() -> None:
            await context.until_logged(
                "records refused with NOT_ENOUGH_REPLICAS", "retrying", "NOT_ENOUGH_REPLICAS"
            )

        await _two_nodes_down(context, wait_for=refused)

    context, _, metrics = await _run_scenario(
        cluster, caplog, "two-down", fault, expected_errors=set()
    )
    # Retried, and delivered in the end (checked above: nothing failed).
    assert context.logged("retrying", "NOT_ENOUGH_REPLICAS")
    assert metrics["record-retry-total"] > 0


async def test_two_nodes_down_past_the_delivery_timeout(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    # As above, but no node returns within delivery_timeout_ms: the records sent into the
    # outage fail with DeliveryTimeoutError, and only they; the records after it are
    # delivered.
    delivery_timeout = 8.0

    async def fault(context: Fault) -> None:
        async def expired() -> None:
            # Called once node 2 stopped. Node 1 comes back only when records sent while
            # node 3 was alone have had their whole delivery_timeout_ms (refused with
            # NOT_ENOUGH_REPLICAS meanwhile), whatever the time the first failures took.
            alone_since = time.monotonic()
            await context.stream.until(
                lambda: context.stream.failed_chunks > 0
                and time.monotonic() - alone_since > delivery_timeout + 1.0,
                "records failing with a timeout, some sent while node 3 was alone",
            )
            context.mark("records failed")

        await _two_nodes_down(context, wait_for=expired)

    context, outcomes, _ = await _run_scenario(
        cluster,
        caplog,
        "two-down-expired",
        fault,
        expected_errors={DeliveryTimeoutError},
        request_timeout_ms=3000,
        delivery_timeout_ms=int(delivery_timeout * 1000),
    )
    failed = {key: o for key, o in outcomes.items() if isinstance(o, DeliveryTimeoutError)}
    # Only records sent into the outage failed: none sent before it began, none sent once
    # every partition took records again.
    outside = sorted(
        key
        for key in failed
        if not context.sent_between("node 1 stopped", "every partition served again", key)
    )
    assert not outside, f"records failed outside the outage, (partition, sequence): {outside[:10]}"
    # A record sent while node 3 was alone, refused and retried, has the refusal as the
    # cause of its DeliveryTimeoutError, and says it; one whose batch never got an answer
    # (it waited behind the partition's retried batches) has no cause.
    alone = [
        e
        for key, e in failed.items()
        if context.sent_between("node 2 stopped", "node 1 restarted", key)
    ]
    causes = Counter(type(e.__cause__).__name__ for e in alone)
    assert causes["NotEnoughReplicasError"] > 0, f"causes: {dict(causes)}"
    assert set(causes) <= {"NotEnoughReplicasError", "NoneType"}, f"causes: {dict(causes)}"
    errors = list(failed.values())
    unsaid = [e for e in errors if e.__cause__ is not None and str(e.__cause__) not in str(e)]
    assert not unsaid, f"errors whose message does not name their cause: {unsaid[:2]!r}"
