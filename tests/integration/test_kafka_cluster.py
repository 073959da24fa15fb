"""The idempotent producer on a three-node Apache Kafka cluster, where replication, leader
moves and quotas are real.

- No duplicate after a reset: a partition whose batch the leader wrote but never answered
  in time is retried while the producer bumps its epoch for another partition (a record
  that partition's leader refused for good). The retry must keep the old epoch and
  sequence, so that the leader recognises it as the batch it has; each record is written
  once, in order.
- Leader moves under a quota: records stream while a leader stops cleanly, comes back and
  leadership moves by a reassignment and a preferred-leader election, the producer
  throttled by a ``producer_byte_rate`` quota all along. Each record is written once, in
  order, and none fails.

The cluster is the shared ``kafka_cluster`` fixture (tests.support.kafka.KafkaCluster);
records are read back with confluent-kafka's consumer (tests.support.readback).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer import Producer, RecordMetadata
from aioproducer._core.futures import RecordFuture
from aioproducer.errors import RecordTooLargeError
from tests.support.kafka import KafkaCluster
from tests.support.passes import compiled_pass_only
from tests.support.readback import read_back

pytestmark = [
    pytest.mark.kafka,
    compiled_pass_only("a three-node Kafka cluster's scenarios, a minute long"),
]

_HANG = 90.0  # only turns a hang into a failure


@pytest.fixture
def cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The shared cluster, every node running and none paused again after the test."""
    try:
        yield kafka_cluster
    finally:
        for node_id in kafka_cluster.node_ids:
            if kafka_cluster.paused(node_id):
                kafka_cluster.resume(node_id)
            if not kafka_cluster.running(node_id):
                kafka_cluster.restart(node_id)


def _name(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:10]}"


def _log_lines(caplog: pytest.LogCaptureFixture, *needles: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if all(n in r.getMessage() for n in needles)]


# -- no duplicate after a reset ----------------------------------------------------------


async def test_no_duplicate_after_a_reset(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    # Partition P (topic A, led by broker 1) and partition Q (topic B, led by broker 2)
    # take a steady stream. Broker 3, a follower of Q only, is paused for longer than
    # the producer's request timeout: broker 2 appends Q's batches at once (it runs), but
    # with acks=all it cannot answer until broker 3 has them, so the requests time out
    # with the batches in Q's log. (Pausing Q's leader instead would leave it to chance
    # whether the batch was appended before the pause.) Broker 3 stays in the in-sync
    # replicas and registered: the pause is shorter than replica.lag.time.max.ms (30 s)
    # and than the controller's broker heartbeat timeout (9 s). Meanwhile P's leader
    # refuses a record for good (larger than A's max.message.bytes, alone in its batch):
    # the producer bumps its epoch and restarts P's sequences. Q's batches go out again
    # after the bump: with the epoch and sequences they were written under, broker 2
    # knows them as duplicates and answers with their offsets. Re-stamped with the new
    # epoch from sequence 0, they would be written a second time.
    caplog.set_level(logging.INFO, logger="aioproducer")
    topic_a, topic_b = _name("reset-a"), _name("reset-b")
    cluster.create_topic(topic_a, replica_assignment={0: [1, 2]}, max_message_bytes=4096)
    cluster.create_topic(topic_b, replica_assignment={0: [2, 3, 1]}, min_insync_replicas=2)
    assert (cluster.leader_of(topic_a, 0), cluster.leader_of(topic_b, 0)) == (1, 2)
    paused_follower = 3

    sent: dict[str, list[tuple[bytes, RecordFuture]]] = {
        topic_a: [],
        topic_b: [],
    }
    stop_streaming = asyncio.Event()
    marks: dict[str, float] = {}

    async with Producer(
        bootstrap_servers=cluster.bootstrap_servers,
        client_id=_name("reset"),
        linger_ms=5,
        request_timeout_ms=3000,
        delivery_timeout_ms=60000,
    ) as producer:
        config = producer.config
        assert config.enable_idempotence and config.acks in ("all", -1)
        assert config.max_in_flight_requests_per_connection == 5

        async def stream() -> None:
            counter = 0
            while not stop_streaming.is_set():
                for topic, label in ((topic_a, b"P"), (topic_b, b"Q")):
                    value = b"%s-%06d" % (label, counter)
                    future = await producer.send(topic, value, key=value[-3:], partition=0)
                    sent[topic].append((value, future))
                counter += 1
                await asyncio.sleep(0.002)

        marks["start"] = time.monotonic()
        streaming = asyncio.get_running_loop().create_task(stream())
        try:
            # A steady state first: everything sent in the first half second acknowledged
            # (the first answers of a new partition wait for its followers to fetch).
            await asyncio.sleep(0.5)
            early = [future for topic in sent for _, future in list(sent[topic])]
            await asyncio.wait_for(asyncio.gather(*early), 30.0)
            marks["steady"] = time.monotonic()
            await asyncio.sleep(0.3)
            cluster.pause(paused_follower)
            marks["paused"] = time.monotonic()
            try:
                await asyncio.sleep(0.3)  # Q's batches are out, written, unanswered
                too_large = await producer.send(topic_a, b"x" * 20000, partition=0)
                marks["too large sent"] = time.monotonic()
                await asyncio.sleep(4.7)  # past request_timeout_ms: Q's batches go again
            finally:
                cluster.resume(paused_follower)
                marks["resumed"] = time.monotonic()
            await asyncio.sleep(1.5)
        finally:
            stop_streaming.set()
            await streaming
        with pytest.raises(RecordTooLargeError):
            await asyncio.wait_for(too_large, _HANG)
        futures = [future for topic in sent for _, future in sent[topic]]
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), _HANG)
        metrics = producer.metrics()
        marks["all answered"] = time.monotonic()

    timeline = {what: round(at - marks["start"], 2) for what, at in marks.items()}
    report = (
        f"at s: {timeline}; records sent: P {len(sent[topic_a])}, Q {len(sent[topic_b])}; "
        f"record-retry-total {metrics['record-retry-total']:.0f}"
    )
    print(report)
    failed = [o for o in outcomes if not isinstance(o, RecordMetadata)]
    assert not failed, f"{len(failed)} record(s) failed, the first: {failed[0]!r}; {report}"
    assert metrics["record-error-total"] == 1, report  # the record too large only

    # The scenario happened: the epoch was bumped for P while Q's batches were out, and
    # they were retried after that.
    bumps = _log_lines(caplog, "epoch bumped to")
    assert bumps, "the producer did not bump its epoch"
    q_retries = _log_lines(caplog, "retrying", f"{topic_b}-0")
    assert q_retries, "Q's batches were not retried: their requests did not time out"
    assert bumps[0].created < q_retries[0].created, "Q was retried before the epoch bump"

    for topic in (topic_a, topic_b):
        values = [value for value, _ in sent[topic]]
        offsets = [future.result().offset for _, future in sent[topic]]
        assert offsets == sorted(offsets), f"{topic}: acknowledged offsets out of order"
        consumed = read_back(cluster.bootstrap_servers, topic, expected=len(values), extra_wait=1.0)
        got = [r.value for r in consumed]
        twice = sorted(v for v, n in Counter(got).items() if v is not None and n > 1)
        assert not twice, f"{topic}: {len(twice)} value(s) written twice: {twice[:10]!r}"
        assert got == values, f"{topic}: records lost or out of order"
        assert [r.offset for r in consumed] == offsets


# -- leader moves under a quota ----------------------------------------------------------


_RECORDS = 20_000
_VALUE_SIZE = 200
_QUOTA = 200_000  # bytes a second, on each broker


def _value(partition: int, counter: int) -> bytes:
    head = b"%d:%06d:" % (partition, counter)
    return head + b"." * (_VALUE_SIZE - len(head))


async def test_leader_moves_under_a_quota(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer")
    topic = _name("moves")
    cluster.create_topic(topic, replica_assignment={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    client_id = _name("quota")
    cluster.set_client_quota(client_id, producer_byte_rate=_QUOTA)
    partitions = 3
    moves: list[tuple[str, float, int, list[int]]] = []

    async with Producer(
        bootstrap_servers=cluster.bootstrap_servers, client_id=client_id, linger_ms=5
    ) as producer:
        assert producer.config.enable_idempotence

        def leaders() -> list[int]:
            return [cluster.leader_of(topic, p) for p in range(partitions)]

        def done() -> int:
            return sum(1 for f in futures if f.done())

        def note(what: str) -> None:
            # For the report: one broker's view of the leaders, maybe a change behind.
            moves.append((what, time.monotonic() - began, done(), leaders()))

        def move_leaders() -> None:
            note("start")
            cluster.stop(2)  # controlled shutdown: partition 1 moves to broker 3
            note("broker 2 stopped")
            cluster.restart(2)
            cluster.wait_in_sync(topic)
            note("broker 2 back in sync")
            # Broker 2 becomes partition 0's preferred leader; an election moves
            # partitions 0 and 1 to it.
            cluster.reassign_partitions(topic, {0: [2, 1, 3]})
            note("partition 0 reassigned")
            cluster.elect_preferred_leaders(topic)
            note("preferred leaders elected")

        began = time.monotonic()
        futures = [
            await producer.send(
                topic, _value(i % partitions, i // partitions), partition=i % partitions
            )
            for i in range(_RECORDS)
        ]
        await asyncio.wait_for(asyncio.to_thread(move_leaders), _HANG)
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), _HANG)
        elapsed = time.monotonic() - began
        metrics = producer.metrics()

    report = (
        f"{elapsed:.1f} s; moves (what, at s, records acknowledged, leaders): {moves}; "
        f"produce-throttle-time-max {metrics['produce-throttle-time-max']:.0f} ms, "
        f"record-retry-total {metrics['record-retry-total']:.0f}, "
        f"record-error-total {metrics['record-error-total']:.0f}"
    )
    print(report)
    # Broker 2 leads partitions 0 and 1 now, broker 3 partition 2 (as every broker says).
    await asyncio.to_thread(cluster.wait_for_leaders, topic, {0: 2, 1: 2, 2: 3}, timeout=10)
    assert moves[-1][2] < _RECORDS, f"the records were all written before the last move: {report}"
    failed = [o for o in outcomes if not isinstance(o, RecordMetadata)]
    assert not failed, f"{len(failed)} record(s) failed, the first: {failed[0]!r}; {report}"
    assert metrics["record-error-total"] == 0, report
    assert metrics["produce-throttle-time-max"] > 0, f"the quota never throttled: {report}"
    assert metrics["record-retry-total"] < _RECORDS, report

    consumed = read_back(cluster.bootstrap_servers, topic, expected=_RECORDS, extra_wait=1.0)
    by_partition: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    for record in consumed:
        by_partition[record.partition].append(record.value)
    for p in range(partitions):
        expected = [
            _value(p, n) for n in range(_RECORDS // partitions + (p < _RECORDS % partitions))
        ]
        got = by_partition[p]
        assert len(got) == len(set(got)), f"partition {p}: records written twice"
        assert got == expected, f"partition {p}: records lost or out of order"
    for i, outcome in enumerate(outcomes):
        assert isinstance(outcome, RecordMetadata)
        assert outcome.offset == i // partitions
