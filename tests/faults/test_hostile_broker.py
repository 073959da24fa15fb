"""Hostile network input: garbage, truncated, oversized or missing answers to Produce.

Broker 1 of a :class:`~tests.faults.scripted_broker.ScriptedCluster` answers ApiVersions,
Metadata and InitProducerId correctly and then answers Produce in a hostile way; broker 2
stays healthy. Partition 0 is led by broker 1, partition 1 by broker 2. The hostile
answers append nothing, so the log is an exactly-once oracle.

Scenarios and what each proves:

- ``test_hostile_answer_fails_only_its_request``: with retries off, the one record whose
  request got a garbage / truncated / cut / oversized (past max_response_size, or past the
  cap of a Produce response, which grows with its request) / negative-size /
  unknown-correlation / never-completed / never-coming answer fails with a clear error
  class (CorruptResponseError,
  KafkaConnectionError or RequestTimedOutError) naming the broker, within a bound; the
  record sent at the same time to the healthy broker is delivered; and the producer then
  delivers to the hostile broker's partition again.
- ``test_hostile_answer_once_is_retried_and_delivered``: with the default retries, the same
  answers cost one retry and nothing else: every record is delivered once, in order.
- ``test_always_hostile_broker_fails_its_records_at_delivery_timeout``: a broker that never
  answers Produce sensibly makes only its partition's records fail, with
  DeliveryTimeoutError, within their bound; the sender task survives all of it (the healthy
  partition keeps flowing and the hostile one recovers once the broker behaves).
- ``test_announced_sizes_are_not_allocated``: a size prefix announcing 2 GiB, or 50 MB that
  never arrive, costs no more than a few MiB of memory (traced with tracemalloc).
- ``test_bytes_after_an_answer_close_the_connection_and_lose_nothing``: bytes that follow
  an answer, when no request awaits another, close the connection with a warning (they are
  not kept waiting for a rest); the answered record stands, nothing is lost or doubled, and
  the producer reconnects for the next records.
- ``test_answer_about_another_partition_is_retried``: a well-formed answer that does not
  mention the partition that was sent is a retriable error, not a success.
- ``test_garbage_metadata_answer_is_survived``: a garbage answer to Metadata fails that
  refresh only; the next one succeeds and records for a new topic are delivered.
"""

from __future__ import annotations

import logging
import struct
import tracemalloc

import pytest
from kafka.protocol.producer import (  # type: ignore[import-untyped]
    ProduceResponse as KProduceResponse,
)

from aioproducer import Producer
from aioproducer import errors as e
from tests.faults.checks import Ledger, bounded, fast_options, unique_topic, wait_until
from tests.faults.scripted_broker import (
    METADATA,
    PRODUCE,
    Action,
    ActionKind,
    ScriptedCluster,
)

ANNOUNCED_2_GIB = struct.pack(">i", 0x7FFFFFFF) + b"\0" * 16
NEVER_COMPLETED_50_MB = struct.pack(">i", 50_000_000) + b"\0" * 64
# Under any response's cap: the connection waits for the rest, until request_timeout_ms.
NEVER_COMPLETED_512_KIB = struct.pack(">i", 512 << 10) + b"\0" * 64
# Under max_response_size (32 MiB) but over what a Produce response to one small batch may
# take (1 MiB and a little).
OVER_THE_PRODUCE_CAP = struct.pack(">i", 2 << 20) + b"\0" * 64

HOSTILE = [
    pytest.param(Action(ActionKind.GARBAGE), e.CorruptResponseError, id="garbage-body"),
    pytest.param(Action(ActionKind.TRUNCATED), e.CorruptResponseError, id="truncated-body"),
    pytest.param(Action(ActionKind.CUT_MID_FRAME), e.KafkaConnectionError, id="cut-mid-frame"),
    pytest.param(
        Action(ActionKind.RAW, payload=ANNOUNCED_2_GIB),
        e.CorruptResponseError,
        id="oversized-size-prefix",
    ),
    pytest.param(
        Action(ActionKind.RAW, payload=OVER_THE_PRODUCE_CAP),
        e.CorruptResponseError,
        id="over-the-produce-cap",
    ),
    pytest.param(
        Action(ActionKind.RAW, payload=struct.pack(">i", -2) + b"\0" * 8),
        e.CorruptResponseError,
        id="negative-size-prefix",
    ),
    pytest.param(
        Action(ActionKind.RAW, payload=struct.pack(">ii", 8, 0x7FFFFFF0) + b"\0" * 4),
        e.CorruptResponseError,
        id="unknown-correlation-id",
    ),
    pytest.param(
        Action(ActionKind.RAW, payload=NEVER_COMPLETED_512_KIB),
        e.RequestTimedOutError,
        id="frame-never-completed",
    ),
    pytest.param(Action(ActionKind.HANG), e.RequestTimedOutError, id="never-answers"),
]


def _hostile_cluster(topic: str) -> ScriptedCluster:
    cluster = ScriptedCluster(2, topics={topic: 2})
    cluster.leaders[(topic, 0)] = 1
    cluster.leaders[(topic, 1)] = 2
    return cluster


def _log(cluster: ScriptedCluster, topic: str) -> dict[int, list[bytes | None]]:
    return {p: cluster.values(topic, p) for p in (0, 1)}


@pytest.mark.parametrize(("action", "error_class"), HOSTILE)
async def test_hostile_answer_fails_only_its_request(
    action: Action, error_class: type[e.KafkaError]
) -> None:
    topic = unique_topic("hostile-once")
    async with _hostile_cluster(topic) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            enable_idempotence=False,
            retries=0,
            request_timeout_ms=1000,
            delivery_timeout_ms=5000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send_many(producer, [0, 1], 1))
            await ledger.wait()
            cluster.broker(1).push(PRODUCE, action)
            victim = await bounded(ledger.send(producer, 0))
            bystander = await bounded(ledger.send(producer, 1))
            # The wait's bound (the suite's default, six times delivery_timeout_ms) only turns
            # a hang into a failure. What ended the wait shows in the error class: the hostile
            # answer itself, or request_timeout_ms for an answer that never completes; the
            # delivery timeout would be a DeliveryTimeoutError.
            await ledger.wait()
            error = victim.future.exception()
            assert isinstance(error, error_class), repr(error)
            assert "node 1" in str(error), str(error)
            assert bystander.future.exception() is None
            # One attempt (retries=0), the one the fault met.
            hostile = [
                r for r in cluster.requests_of(PRODUCE, broker_id=1) if r.action is action.kind
            ]
            assert len(hostile) == 1, hostile
            # The producer goes on, for both brokers.
            await bounded(ledger.send_many(producer, [0, 1], 3))
            await ledger.wait()
        ledger.check(_log(cluster, topic), expect_failed=[error_class])
        assert len(ledger.failed) == 1


@pytest.mark.parametrize(("action", "error_class"), HOSTILE)
async def test_hostile_answer_once_is_retried_and_delivered(
    action: Action, error_class: type[e.KafkaError], caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("hostile-retried")
    async with _hostile_cluster(topic) as cluster:
        ledger = Ledger(topic)
        options = fast_options(cluster.bootstrap_servers, request_timeout_ms=1000)
        async with Producer(**options) as producer:
            await bounded(ledger.send_many(producer, [0, 1], 1))
            await ledger.wait()
            caplog.set_level(logging.INFO, logger="aioproducer")
            cluster.broker(1).push(PRODUCE, action)
            await bounded(ledger.send_many(producer, [0, 1], 10))
            await ledger.wait()
            metrics = producer.metrics()
            assert metrics["record-retry-total"] >= 1
            assert metrics["record-error-total"] == 0
        ledger.check(_log(cluster, topic))
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retries, "the retry was not logged"
    assert "broker 1" in retries[0]


@pytest.mark.parametrize(
    "action",
    [
        pytest.param(Action(ActionKind.GARBAGE), id="garbage-body"),
        pytest.param(Action(ActionKind.TRUNCATED), id="truncated-body"),
        pytest.param(Action(ActionKind.RAW, payload=ANNOUNCED_2_GIB), id="oversized-size-prefix"),
        pytest.param(Action(ActionKind.HANG), id="never-answers"),
    ],
)
async def test_always_hostile_broker_fails_its_records_at_delivery_timeout(
    action: Action,
) -> None:
    topic = unique_topic("hostile-always")
    delivery_timeout_ms = 2000
    async with _hostile_cluster(topic) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            request_timeout_ms=500,
            delivery_timeout_ms=delivery_timeout_ms,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send_many(producer, [0, 1], 1))
            await ledger.wait()
            cluster.broker(1).default[PRODUCE] = action
            attempts_before = len(cluster.requests_of(PRODUCE, broker_id=1))
            doomed = await bounded(ledger.send_burst(producer, 0, 3))
            flowing = [await bounded(ledger.send(producer, 1)) for _ in range(20)]
            # The bound (the suite's default, 15 times delivery_timeout_ms) only turns a hang
            # into a failure; the error class says what ended the wait.
            await ledger.wait()
            # Retried, not failed at the first hostile answer (retries are unbounded here,
            # and each attempt ends within request_timeout_ms, a quarter of the delivery
            # timeout)...
            attempts = cluster.requests_of(PRODUCE, broker_id=1)[attempts_before:]
            assert len(attempts) >= 2, attempts
            assert all(r.action is action.kind for r in attempts)
            # ... until delivery_timeout_ms ended it: nothing else fails a record with
            # DeliveryTimeoutError.
            assert all(isinstance(r.future.exception(), e.DeliveryTimeoutError) for r in doomed)
            assert all(r.future.exception() is None for r in flowing)
            # The broker behaves again: so does its partition.
            del cluster.broker(1).default[PRODUCE]
            await bounded(ledger.send_many(producer, [0, 1], 3))
            await ledger.wait()
        # A batch whose request was still in flight at its deadline fails with
        # DeliveryTimeoutError, as in Java, although the broker may have appended it (a
        # truncated answer comes after the append): its outcome is unknown, so only the
        # acknowledged records are held to exactly-once and order.
        ledger.check(
            _log(cluster, topic), expect_failed=[e.DeliveryTimeoutError], failed_absent=False
        )


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(ANNOUNCED_2_GIB, id="announces-2-GiB"),
        pytest.param(NEVER_COMPLETED_50_MB, id="announces-50-MB-never-sent"),
    ],
)
async def test_announced_sizes_are_not_allocated(payload: bytes) -> None:
    topic = unique_topic("announced")
    async with _hostile_cluster(topic) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            enable_idempotence=False,
            retries=0,
            request_timeout_ms=500,
            delivery_timeout_ms=5000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            cluster.broker(1).push(PRODUCE, Action(ActionKind.RAW, payload=payload))
            tracemalloc.start()
            try:
                tracemalloc.reset_peak()
                baseline, _ = tracemalloc.get_traced_memory()
                record = await bounded(ledger.send(producer, 0))
                await ledger.wait()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert isinstance(record.future.exception(), e.KafkaError)
            assert peak - baseline < 4 << 20, f"{(peak - baseline) / 2**20:.1f} MiB allocated"


async def test_answer_about_another_partition_is_retried() -> None:
    topic = unique_topic("wrong-partition")
    async with _hostile_cluster(topic) as cluster:
        # Produce v9 everywhere, so the answer can be written for that version.
        for broker in cluster.brokers.values():
            broker.api_versions[PRODUCE] = (3, 9)
        R = KProduceResponse
        P = R.TopicProduceResponse.PartitionProduceResponse
        elsewhere = R(
            responses=[
                R.TopicProduceResponse(
                    name=topic,
                    partition_responses=[
                        P(
                            index=7,
                            error_code=0,
                            base_offset=42,
                            log_append_time_ms=-1,
                            log_start_offset=0,
                            record_errors=[],
                            error_message=None,
                        )
                    ],
                )
            ],
            throttle_time_ms=0,
        )
        # Produce v9 has a flexible response header: an empty tagged-field section first.
        body = b"\0" + bytes(elsewhere.encode(version=9))
        ledger = Ledger(topic)
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            cluster.broker(1).push(PRODUCE, Action(ActionKind.GARBAGE, payload=body))
            await bounded(ledger.send_burst(producer, 0, 5))
            await ledger.wait()
            assert producer.metrics()["record-retry-total"] >= 5
        ledger.check(_log(cluster, topic))
        assert all(r.future.result().offset != 42 for r in ledger.acknowledged)


async def test_garbage_metadata_answer_is_survived() -> None:
    topic = unique_topic("metadata-garbage")
    async with _hostile_cluster(topic) as cluster:
        later = unique_topic("metadata-garbage-later")
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            first = Ledger(topic)
            await bounded(first.send_many(producer, [0, 1], 2))
            await first.wait()
            for broker in cluster.brokers.values():
                broker.push(METADATA, Action(ActionKind.GARBAGE))
            cluster.topics[later] = 1
            ledger = Ledger(later)
            await bounded(ledger.send_burst(producer, 0, 3))
            await ledger.wait()
            garbage = [r for r in cluster.requests_of(METADATA) if r.action is ActionKind.GARBAGE]
            assert garbage, "no Metadata request met the garbage"
        ledger.check({0: cluster.values(later, 0)})
        first.check(_log(cluster, topic))


@pytest.mark.parametrize(
    "trailing",
    [
        pytest.param(b"\0\0", id="part-of-a-size"),
        pytest.param(struct.pack(">ii", 64, 0x7FFFFFF0) + b"\0" * 8, id="part-of-a-frame"),
    ],
)
async def test_bytes_after_an_answer_close_the_connection_and_lose_nothing(
    trailing: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("trailing")
    async with _hostile_cluster(topic) as cluster:
        ledger = Ledger(topic)
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send_many(producer, [0, 1], 1))
            await ledger.wait()
            accepted = cluster.broker(1).connections_accepted
            caplog.set_level(logging.WARNING, logger="aioproducer")
            cluster.broker(1).push(PRODUCE, Action(ActionKind.TRAILING, payload=trailing))
            answered = await bounded(ledger.send(producer, 0))
            await ledger.wait()
            assert answered.future.exception() is None
            await wait_until(
                lambda: any(
                    "no request awaited a response" in r.getMessage() for r in caplog.records
                )
            )
            warning = next(
                r for r in caplog.records if "no request awaited a response" in r.getMessage()
            )
            assert warning.levelno == logging.WARNING and "node 1" in warning.getMessage()
            # The producer connects again for what comes next.
            await bounded(ledger.send_many(producer, [0, 1], 3))
            await ledger.wait()
            assert cluster.broker(1).connections_accepted > accepted
        ledger.check(_log(cluster, topic))
        assert not ledger.failed
