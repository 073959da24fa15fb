"""Idempotence under faults: producer id, sequences, five in flight, ambiguous outcomes.

Most scenarios run on :class:`~tests.faults.scripted_broker.ScriptedCluster`, which checks
sequence numbers as Kafka does (gaps are OUT_OF_ORDER_SEQUENCE_NUMBER, a retry of one of the
last five batches is answered with its original offset and not appended again). That makes
its log an exactly-once oracle even when the client cannot know whether a request was
appended, which librdkafka's mock is not for a producer without a transactional id.

Scenarios and what each proves:

- ``test_init_producer_id_comes_before_the_first_produce`` (mock): idempotence is on by
  default and the producer gets its id before it sends a batch.
- ``test_sequence_errors_restart_the_partition_and_deliver`` (mock): an
  OUT_OF_ORDER_SEQUENCE_NUMBER answer to the head batch makes the producer bump its epoch
  locally and restart that partition's sequences (logged), an UNKNOWN_PRODUCER_ID without
  a log start offset is retried as it is (both as the Java client), no new producer id is
  asked for, and every record is delivered once, in order. The mock appends nothing for
  the injected error, so it is an oracle here.
- ``test_five_in_flight_keep_order_when_a_middle_request_fails``: five requests in flight
  to one partition; the second fails with a retriable error, the broker rejects the three
  after it as out of sequence; all are retried and land once, in order.
- ``test_a_backlog_goes_out_five_requests_back_to_back``: with batches waiting and nothing
  answered yet, the producer fills its five in-flight slots at once: within turns of the
  event loop in which no time-driven wake-up can happen.
- ``test_a_fatal_error_mid_pipeline_fails_only_its_batch``: the same with a non-retriable
  error on the second request: that batch fails with its own class, the later in-flight
  batches (rejected as out of sequence) are still delivered, in order, sent again in answer
  to those refusals rather than after a request or delivery timeout.
- ``test_append_then_disconnect_is_deduplicated``: the broker appends a batch and drops the
  connection before answering; the retry is recognised as a duplicate, so every record is
  in the log once.
- ``test_request_timeout_closes_and_retries_without_duplicates``: the broker appends a
  batch and never answers; after request_timeout_ms the connection is closed, the in-flight
  requests are retried on a new connection, and the log still holds each record once.
- ``test_a_sequence_gap_bumps_the_epoch_locally``: after OUT_OF_ORDER_SEQUENCE_NUMBER the
  broker sees the same producer id with the next epoch, sequences from 0, and no second
  InitProducerId, as the Java client sends.
- ``test_an_in_flight_retry_fails_at_delivery_timeout``: a retry still in flight when
  delivery_timeout_ms passes fails then, with DeliveryTimeoutError, instead of waiting for
  its request_timeout_ms.
- ``test_duplicate_sequence_number_counts_as_delivered``: a broker that answers a retried
  batch with DUPLICATE_SEQUENCE_NUMBER (older Kafka, Tansu) has that batch's records
  reported delivered, not failed, and later batches still go through.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer import errors as e
from tests.faults.checks import Ledger, bounded, fast_options, mock_log, mock_options, unique_topic
from tests.faults.scripted_broker import (
    INIT_PRODUCER_ID,
    PRODUCE,
    Action,
    ActionKind,
    ScriptedCluster,
)
from tests.support.mock_cluster import ApiKey, ErrorCode, MockCluster

NOT_ENOUGH_REPLICAS = 19
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_RECORD = 87


def _log(cluster: ScriptedCluster, topic: str, partitions: int) -> dict[int, list[bytes | None]]:
    return {p: cluster.values(topic, p) for p in range(partitions)}


@pytest.mark.mock_cluster
async def test_init_producer_id_comes_before_the_first_produce(mock_cluster: MockCluster) -> None:
    topic = unique_topic("init-pid")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    mock_cluster.start_request_tracking()
    async with Producer(**mock_options(mock_cluster.bootstrap_servers)) as producer:
        assert producer.config.enable_idempotence
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
        keys = [r.api_key for r in mock_cluster.get_requests()]
    assert ApiKey.INIT_PRODUCER_ID in keys
    assert keys.index(ApiKey.INIT_PRODUCER_ID) < keys.index(ApiKey.PRODUCE)
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


@pytest.mark.mock_cluster
@pytest.mark.parametrize(
    "code",
    [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID],
    ids=lambda c: c.name,
)
async def test_sequence_errors_restart_the_partition_and_deliver(
    mock_cluster: MockCluster, code: ErrorCode, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("sequence")
    mock_cluster.create_topic(topic, 2)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers)) as producer:
        await bounded(ledger.send_burst(producer, 0, 5))
        await ledger.wait()
        caplog.set_level(logging.INFO, logger="aioproducer")
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [code])
        await bounded(ledger.send_burst(producer, 0, 5))
        await bounded(ledger.send_burst(producer, 1, 5))
        await ledger.wait()
        keys = [r.api_key for r in mock_cluster.get_requests()]
        assert producer.metrics()["record-error-total"] == 0
        # The producer goes on working.
        await bounded(ledger.send_burst(producer, 0, 3))
        await ledger.wait()
    # As the Java client: the epoch is bumped locally (no InitProducerId); and the mock's
    # UNKNOWN_PRODUCER_ID carries no log start offset, which Java answers with a plain retry.
    assert ApiKey.INIT_PRODUCER_ID not in keys, "an idempotent producer asked for a new id"
    if code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
        assert any(
            r.levelno >= logging.WARNING and "bumping the epoch" in r.getMessage()
            for r in caplog.records
        ), "the epoch bump was not logged"
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


def _pipeline_options(bootstrap_servers: str) -> dict[str, Any]:
    # Small batches, so that each request carries one; request and delivery timeouts beyond
    # every bound the scenarios wait with, so that only the scripted broker decides when an
    # answer comes, and a batch left waiting for one of those timeouts is a hang the bound
    # turns into a failure.
    return fast_options(
        bootstrap_servers, batch_size=128, request_timeout_ms=60000, delivery_timeout_ms=120000
    )


async def _fill_pipeline(
    cluster: ScriptedCluster, producer: Producer, ledger: Ledger, second: Action
) -> Action:
    """Send a burst to partition 0 with the first request's answer held and ``second`` for
    the next; return once five requests are in flight (the limit), the first still held."""
    first = Action.hold()
    cluster.broker(1).push(PRODUCE, first, second)
    start = len(cluster.requests_of(PRODUCE))
    await bounded(ledger.send_burst(producer, 0, 60))
    await cluster.wait_for(lambda: len(cluster.requests_of(PRODUCE)) >= start + 5, timeout=15)
    assert len(cluster.requests_of(PRODUCE)) == start + 5, "more than 5 requests in flight"
    return first


async def test_five_in_flight_keep_order_when_a_middle_request_fails() -> None:
    topic = unique_topic("pipeline")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_pipeline_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            first = await _fill_pipeline(
                cluster, producer, ledger, Action.error_code(NOT_ENOUGH_REPLICAS)
            )
            assert first.release is not None
            first.release.set()
            await ledger.wait()
            assert producer.metrics()["record-retry-total"] > 0
            assert producer.metrics()["record-error-total"] == 0
        ledger.check(_log(cluster, topic, 1))
        kinds = [r.action for r in cluster.requests_of(PRODUCE)]
        assert ActionKind.ERROR in kinds


async def test_a_backlog_goes_out_five_requests_back_to_back() -> None:
    topic = unique_topic("back-to-back")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_pipeline_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            first = Action.hold()
            cluster.broker(1).push(PRODUCE, first)
            start = len(cluster.requests_of(PRODUCE))
            sent = producer.metrics()["request-total"]
            await bounded(ledger.send_burst(producer, 0, 60))
            try:
                # Nothing is answered meanwhile and no clock-driven wake-up can come while
                # the test only yields (asyncio.sleep(0) lets the loop turn without time
                # passing): what makes the sender send the next request can only be the one
                # it just sent. A sender that waited for its poll interval (1 s) or for an
                # answer between requests would send one, then nothing here.
                for _ in range(200):
                    if producer.metrics()["request-total"] >= sent + 5:
                        break
                    await asyncio.sleep(0)
                assert producer.metrics()["request-total"] == sent + 5
                # And the broker has them: five in flight, the limit, and no more.
                await cluster.wait_for(lambda: len(cluster.requests_of(PRODUCE)) >= start + 5)
                assert len(cluster.requests_of(PRODUCE)) == start + 5
            finally:
                assert first.release is not None
                first.release.set()
                await ledger.wait()
        ledger.check(_log(cluster, topic, 1))


async def test_a_fatal_error_mid_pipeline_fails_only_its_batch() -> None:
    topic = unique_topic("pipeline-fatal")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**_pipeline_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            connections = cluster.broker(1).connections_accepted
            burst_start = len(ledger.records)
            first = await _fill_pipeline(
                cluster, producer, ledger, Action.error_code(INVALID_RECORD)
            )
            assert first.release is not None
            first.release.set()
            # The suite's bound (30 s) is below the request and delivery timeouts, so a batch
            # left waiting for either would hang, and the bound turns that into a failure.
            await ledger.wait()
            failed = {r.value for r in ledger.failed}
            assert failed, "the batch with the fatal error did not fail"
            assert failed < {r.value for r in ledger.records[burst_start:]}
            assert producer.metrics()["record-error-total"] == len(failed)
            # The batches after it, refused as out of sequence, were sent again on the same
            # connection in answer to those refusals (no request timed out and closed it).
            kinds = [r.action for r in cluster.requests_of(PRODUCE)]
            assert ActionKind.ERROR in kinds
            assert cluster.broker(1).connections_accepted == connections
        # Only the fatal error's class: none failed at a timeout.
        ledger.check(_log(cluster, topic, 1), expect_failed=[e.InvalidRecordError])


async def test_append_then_disconnect_is_deduplicated() -> None:
    topic = unique_topic("append-drop")
    async with ScriptedCluster(2, topics={topic: 2}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**fast_options(cluster.bootstrap_servers, batch_size=256)) as producer:
            await bounded(ledger.send_many(producer, [0, 1], 1))
            await ledger.wait()
            cluster.broker(1).push(
                PRODUCE, Action(ActionKind.NORMAL), Action(ActionKind.APPEND_THEN_DROP)
            )
            cluster.broker(2).push(PRODUCE, Action(ActionKind.APPEND_THEN_DROP))
            await bounded(ledger.send_many(producer, [0, 1], 40))
            await ledger.wait()
            assert producer.metrics()["record-retry-total"] > 0
        ledger.check(_log(cluster, topic, 2))
        assert cluster.broker(1).connections_accepted >= 2


async def test_request_timeout_closes_and_retries_without_duplicates() -> None:
    topic = unique_topic("request-timeout")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            batch_size=256,
            request_timeout_ms=500,
            delivery_timeout_ms=10000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            connections = cluster.broker(1).connections_accepted
            # Appended, never answered: only request_timeout_ms can end the wait.
            cluster.broker(1).push(PRODUCE, Action.hold())
            await bounded(ledger.send_burst(producer, 0, 30))
            await ledger.wait()
            assert producer.metrics()["record-retry-total"] > 0
            assert producer.metrics()["record-error-total"] == 0
        ledger.check(_log(cluster, topic, 1))
        assert cluster.broker(1).connections_accepted > connections, "no new connection"


async def test_duplicate_sequence_number_counts_as_delivered() -> None:
    topic = unique_topic("duplicate")
    async with ScriptedCluster(1, topics={topic: 1}, duplicate_answer="error") as cluster:
        ledger = Ledger(topic)
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            cluster.broker(1).push(PRODUCE, Action(ActionKind.APPEND_THEN_DROP))
            duplicated = await bounded(ledger.send_burst(producer, 0, 5))
            await ledger.wait()
            assert all(r.future.exception() is None for r in duplicated)
            assert producer.metrics()["record-error-total"] == 0
            await bounded(ledger.send_burst(producer, 0, 5))
            await ledger.wait()
        ledger.check(_log(cluster, topic, 1))
        answered = [r.action for r in cluster.requests_of(PRODUCE)]
        assert ActionKind.APPEND_THEN_DROP in answered
        assert len(cluster.requests_of(INIT_PRODUCER_ID)) == 1, "the duplicate reset the id"


async def test_a_sequence_gap_bumps_the_epoch_locally() -> None:
    topic = unique_topic("epoch-bump")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
            await bounded(ledger.send_burst(producer, 0, 5))
            await ledger.wait()
            cluster.broker(1).push(PRODUCE, Action.error_code(OUT_OF_ORDER_SEQUENCE_NUMBER))
            await bounded(ledger.send_burst(producer, 0, 5))
            await ledger.wait()
        ledger.check(_log(cluster, topic, 1))
        records = cluster.records(topic, 0)
        before, after = records[0], records[-1]
        # The same producer id under the next epoch, the partition's sequences from 0, and
        # no InitProducerId beyond the first: the bump is the client's own, as Java's.
        assert (after.producer_id, after.producer_epoch) == (
            before.producer_id,
            before.producer_epoch + 1,
        )
        assert after.sequence == 4, "sequences restart at 0 under the new epoch"
        assert len(cluster.requests_of(INIT_PRODUCER_ID)) == 1


async def test_an_in_flight_retry_fails_at_delivery_timeout() -> None:
    topic = unique_topic("in-flight-expiry")
    request_timeout_ms, delivery_timeout_ms = 3000, 3200
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            # The first attempt is answered with a retriable error after 2.5 s; the retry is
            # never answered. Its request timeout would end it at about 5.5 s, the delivery
            # timeout must end it at 3.2 s.
            cluster.broker(1).push(
                PRODUCE,
                Action.error_code(NOT_ENOUGH_REPLICAS, delay=2.5),
                Action(ActionKind.HANG),
            )
            record = await bounded(ledger.send(producer, 0))
            await ledger.wait()
            error = record.future.exception()
            assert isinstance(error, e.DeliveryTimeoutError), repr(error)
            # Not failed at the first answer: the retry was sent...
            assert len(cluster.requests_of(PRODUCE)) == 3, "the retry was not sent"
            # ... and the delivery timeout ended it while it was in flight: had the retry's
            # request timeout (3 s after it was sent) come first, the batch would have failed
            # with that RequestTimedOutError as the cause of its DeliveryTimeoutError. The
            # cause is the error the batch was retried for.
            assert "in flight" in str(error), str(error)
            assert isinstance(error.__cause__, e.NotEnoughReplicasError), repr(error.__cause__)
            assert "NOT_ENOUGH_REPLICAS" in str(error), str(error)
