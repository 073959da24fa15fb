"""Produce errors pushed into librdkafka's mock cluster: retriable, metadata, fatal.

Scenarios and what each proves:

- ``test_retriable_error_is_retried_until_delivered``: for each retriable code, the batches
  the error hit are retried and delivered exactly once, in order, with no record failed;
  ``record-retry-total`` counts the retries.
- ``test_metadata_errors_refresh_metadata_and_others_do_not``: the codes of Java's
  InvalidMetadataException family (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, ...) make
  the producer ask for Metadata; NOT_ENOUGH_REPLICAS and REQUEST_TIMED_OUT do not. Checked
  by the order of requests: a refresh asked for by the third failure goes out before the
  fourth attempt, which waits four times longer than the refresh's backoff.
- ``test_fatal_error_fails_only_its_batch_at_once``: a non-retriable code on one partition
  fails that partition's batch after one attempt, with the code's own error class, while the
  other partition's batch in the *same* request is delivered; the producer keeps working
  for the failed partition afterwards.
- ``test_retries_option_bounds_the_attempts``: with ``retries=2`` a batch is sent three times
  and then fails with the broker's error.
- ``test_backoff_grows_from_retry_backoff_ms``: the gaps between attempts are at least the
  exponential backoff (minus its 20% jitter) and stop growing at ``retry_backoff_max_ms``'s
  lower jitter bound. Only lower bounds are asserted: an upper bound on a gap would be a
  timing threshold on a shared machine.
- ``test_delivery_timeout_ends_endless_retries``: a broker that answers a retriable error
  forever makes the record fail with DeliveryTimeoutError, after several attempts each
  counted as a retry. (That it fails no sooner than ``delivery_timeout_ms`` is checked on a
  fake clock, in tests/unit/test_sender.py.)
- ``test_a_partition_works_again_after_a_batch_expired_waiting_for_its_retry`` (expected
  to fail: a producer bug, see its marker): after a batch expired while queued for a retry,
  the next record of its partition is sent and delivered.
- ``test_a_retriable_answer_after_the_deadline_fails_with_delivery_timeout``: when the
  answer that ends a batch is a retriable error handled after ``delivery_timeout_ms``
  passed, the record fails with DeliveryTimeoutError caused by the broker's error.
- ``test_retry_decision_is_logged_with_broker_topic_partition`` and
  ``test_failure_decision_is_logged_with_broker_topic_partition``: the retry decision and
  the failure decision each name the broker, the topic and the partition.
- ``test_retry_and_failure_counters_match_the_outcomes``: ``record-retry-total`` grows by one
  per record per retry and ``record-error-total`` by one per failed record.

- ``test_retriable_error_on_one_partition_resends_only_that_partition``: a retriable error
  for one partition of a request resends that partition's batch only.
- ``test_message_too_large_splits_an_idempotent_batch``: MESSAGE_TOO_LARGE for a batch of
  many records splits it (with idempotence on, under fresh sequences) and delivers every
  record once, in order, failing none.
- ``test_acks_zero_with_a_broker_that_answers_anyway``: the mock answers Produce even with
  acks=0, which Kafka never does; the unexpected answers are ignored, every record is
  reported sent (offset -1, as for acks=0) and nothing is lost.

Mock quirks and how the checks cope:

- An error pushed with ``push_request_errors`` applies to the next Produce *requests* on any
  broker, and the mock appends nothing for them. So the log is an exactly-once oracle here:
  a retried batch was never written before, and a failed record must be absent.
- ``partition_push_request_errors`` (librdkafka 2.15+) fails one partition of a request,
  which is how "only the batches it concerns" is checked.
- The mock answers acks=0 Produce requests; real Kafka does not. The acks=0 scenario uses
  that quirk on purpose: the client must tolerate answers it did not ask for.
- The mock does not deduplicate a non-transactional idempotent producer's retries, so no
  scenario here lets a request time out after the append (see test_idempotence.py and the
  scripted broker for those).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest

from aioproducer import Producer
from aioproducer import errors as e
from tests.faults.checks import (
    Ledger,
    bounded,
    fast_options,
    mock_log,
    mock_options,
    unique_topic,
    wait_for_watermarks,
)
from tests.support.mock_cluster import ApiKey, ErrorCode, MockCluster

pytestmark = pytest.mark.mock_cluster

RETRIABLE = [
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.CORRUPT_MESSAGE,
]

METADATA_INVALIDATING = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH,
}

FATAL = [
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, e.TopicAuthorizationFailedError),
    (ErrorCode.INVALID_RECORD, e.InvalidRecordError),
    (ErrorCode.RECORD_LIST_TOO_LARGE, e.RecordListTooLargeError),
    (ErrorCode.INVALID_TOPIC_EXCEPTION, e.InvalidTopicError),
    (ErrorCode.MESSAGE_TOO_LARGE, e.RecordTooLargeError),
]


async def _warm_up(producer: Producer, topic: str, partitions: int, ledger: Ledger) -> None:
    for partition in range(partitions):
        await bounded(ledger.send(producer, partition))
    await ledger.wait()


@pytest.mark.parametrize("code", RETRIABLE, ids=lambda c: c.name)
async def test_retriable_error_is_retried_until_delivered(
    mock_cluster: MockCluster, code: ErrorCode
) -> None:
    topic = unique_topic("retriable")
    mock_cluster.create_topic(topic, 2)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers, batch_size=512)) as producer:
        await _warm_up(producer, topic, 2, ledger)
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [code] * 3)
        await ledger.send_many(producer, [0, 1], 40)
        await ledger.wait()
        metrics = producer.metrics()
        assert metrics["record-retry-total"] >= 1
        assert metrics["record-error-total"] == 0
        # The producer still works afterwards.
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.REQUEST_TIMED_OUT,
    ],
    ids=lambda c: c.name,
)
async def test_metadata_errors_refresh_metadata_and_others_do_not(
    mock_cluster: MockCluster, code: ErrorCode
) -> None:
    topic = unique_topic("metadata")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    # The refresh an error asks for waits for retry_backoff_ms since the previous refresh;
    # the batch's retries wait retry_backoff_ms doubling per attempt (plus or minus 20%).
    options = mock_options(
        mock_cluster.bootstrap_servers, retry_backoff_ms=50, retry_backoff_max_ms=1000
    )
    async with Producer(**options) as producer:
        await _warm_up(producer, topic, 1, ledger)
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [code] * 3)
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
        requests = [r.api_key for r in mock_cluster.get_requests()]
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))
    produce = [i for i, key in enumerate(requests) if key == ApiKey.PRODUCE]
    assert len(produce) == 4, requests
    # A refresh asked for by the third failure is due within retry_backoff_ms of it (its
    # backoff runs from the previous refresh, which went out before that failure), while the
    # fourth attempt waits at least 3.2 times retry_backoff_ms (4, less the 20% jitter). So
    # the order of requests tells whether the error asked for a refresh.
    refreshed = ApiKey.METADATA in requests[produce[2] : produce[3]]
    assert refreshed == (code in METADATA_INVALIDATING), requests
    if code not in METADATA_INVALIDATING:
        assert ApiKey.METADATA not in requests[produce[0] :], requests


@pytest.mark.parametrize(("code", "error_class"), FATAL, ids=lambda v: getattr(v, "name", ""))
async def test_fatal_error_fails_only_its_batch_at_once(
    mock_cluster: MockCluster, code: ErrorCode, error_class: type[e.KafkaError]
) -> None:
    topic = unique_topic("fatal")
    mock_cluster.create_topic(topic, 2)
    # One leader for both partitions: both batches travel in the same Produce request.
    mock_cluster.partition_set_leader(topic, 0, 1)
    mock_cluster.partition_set_leader(topic, 1, 1)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers, linger_ms=50)) as producer:
        await _warm_up(producer, topic, 2, ledger)
        mock_cluster.start_request_tracking()
        mock_cluster.partition_push_request_errors(topic, 0, ApiKey.PRODUCE, [code])
        # One record per partition, so MESSAGE_TOO_LARGE cannot be answered by a split.
        doomed = await bounded(ledger.send(producer, 0))
        spared = await bounded(ledger.send(producer, 1))
        await ledger.wait()
        produce_requests = [r for r in mock_cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
        assert isinstance(doomed.future.exception(), error_class)
        assert spared.future.exception() is None
        assert len(produce_requests) == 1, "the fatal error must not be retried"
        metrics = producer.metrics()
        assert metrics["record-retry-total"] == 0
        assert metrics["record-error-total"] == 1
        # The partition works again for later records.
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic), expect_failed=[error_class])


async def test_retries_option_bounds_the_attempts(mock_cluster: MockCluster) -> None:
    topic = unique_topic("retries")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers, retries=2)) as producer:
        await _warm_up(producer, topic, 1, ledger)
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS] * 10)
        record = await bounded(ledger.send(producer, 0))
        await ledger.wait()
        attempts = [r for r in mock_cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
        assert isinstance(record.future.exception(), e.NotEnoughReplicasError)
        assert len(attempts) == 3
        assert producer.metrics()["record-retry-total"] == 2
        mock_cluster.clear_request_errors(ApiKey.PRODUCE)
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
    ledger.check(
        await mock_log(mock_cluster.bootstrap_servers, topic),
        expect_failed=[e.NotEnoughReplicasError],
    )


async def test_backoff_grows_from_retry_backoff_ms(mock_cluster: MockCluster) -> None:
    base_ms, max_ms, errors = 40, 160, 6
    topic = unique_topic("backoff")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    options = fast_options(
        mock_cluster.bootstrap_servers, retry_backoff_ms=base_ms, retry_backoff_max_ms=max_ms
    )
    async with Producer(**options) as producer:
        await _warm_up(producer, topic, 1, ledger)
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS] * errors)
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
        attempts = [r for r in mock_cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))
    assert len(attempts) == errors + 1
    gaps_ms = [
        (later.timestamp_us - earlier.timestamp_us) / 1000
        for earlier, later in itertools.pairwise(attempts)
    ]
    # A 2 ms allowance covers the difference between sending and the mock's arrival stamp.
    floors = [0.8 * min(max_ms, base_ms * 2**attempt) - 2 for attempt in range(errors)]
    assert all(gap >= floor for gap, floor in zip(gaps_ms, floors, strict=True)), (
        gaps_ms,
        floors,
    )


async def test_delivery_timeout_ends_endless_retries(mock_cluster: MockCluster) -> None:
    topic = unique_topic("delivery-timeout")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    options = fast_options(
        mock_cluster.bootstrap_servers,
        request_timeout_ms=1000,
        delivery_timeout_ms=1500,
        retry_backoff_max_ms=50,
    )
    async with Producer(**options) as producer:
        await _warm_up(producer, topic, 1, ledger)
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS] * 5000)
        retries = producer.metrics()["record-retry-total"]
        record = await bounded(ledger.send(producer, 0))
        # The bound (the suite's default, 20 times delivery_timeout_ms) only turns a hang
        # into a failure.
        await ledger.wait()
        attempts = [r for r in mock_cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
        error = record.future.exception()
        # Retries are unbounded, so only the delivery timeout could end them, and it did:
        assert isinstance(error, e.DeliveryTimeoutError)
        # ... after several attempts, each answered NOT_ENOUGH_REPLICAS and retried, but the
        # last (its answer came after the deadline, or it expired in flight or waiting).
        assert len(attempts) >= 2, attempts
        retried = producer.metrics()["record-retry-total"] - retries
        assert len(attempts) - 1 <= retried <= len(attempts), (retried, attempts)
        # Whichever way the deadline found the batch (an answer after it, in flight or
        # waiting for its retry), the error the batch was retried for is the cause.
        assert isinstance(error.__cause__, e.NotEnoughReplicasError), repr(error.__cause__)
        assert "NOT_ENOUGH_REPLICAS" in str(error), str(error)
        assert producer.metrics()["record-error-total"] == 1
        mock_cluster.clear_request_errors(ApiKey.PRODUCE)
    # (What must follow such a failure, the partition taking records again, is
    # test_a_partition_works_again_after_a_batch_expired_waiting_for_its_retry.)
    ledger.check(
        await mock_log(mock_cluster.bootstrap_servers, topic),
        # The deadline may pass while an attempt is in flight (on a loaded machine the mock
        # answers late): the record's fate is then unknown, as in Java, and that attempt may
        # be appended once the pushed errors are cleared. So the failed record may or may
        # not be in the log; every acknowledged one must be, once.
        failed_absent=False,
        expect_failed=[e.DeliveryTimeoutError],
    )


async def test_a_partition_works_again_after_a_batch_expired_waiting_for_its_retry(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("expired-in-backoff")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    # A retry backoff beyond the delivery timeout: after its first (refused) attempt the
    # batch waits in the accumulator for a retry and expires there, for sure.
    options = fast_options(
        mock_cluster.bootstrap_servers,
        request_timeout_ms=1000,
        delivery_timeout_ms=1500,
        retry_backoff_ms=5000,
        retry_backoff_max_ms=5000,
    )
    async with Producer(**options) as producer:
        await _warm_up(producer, topic, 1, ledger)
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS])
        expired = await bounded(ledger.send(producer, 0))
        await ledger.wait()
        error = expired.future.exception()
        assert isinstance(error, e.DeliveryTimeoutError)
        # It expired waiting for its retry: the refusal it waited to retry is the cause.
        assert isinstance(error.__cause__, e.NotEnoughReplicasError), repr(error.__cause__)
        assert "NOT_ENOUGH_REPLICAS" in str(error), str(error)
        assert producer.metrics()["record-retry-total"] == 1
        # The next record of the partition goes out and is delivered (the pushed error was
        # used up by the first attempt).
        later = await bounded(ledger.send(producer, 0))
        await ledger.wait()
        produce = [r for r in mock_cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
        assert later.future.exception() is None, repr(later.future.exception())
        assert len(produce) == 2, produce
    # The refused attempt appended nothing: the expired record is not in the log.
    ledger.check(
        await mock_log(mock_cluster.bootstrap_servers, topic),
        expect_failed=[e.DeliveryTimeoutError],
    )


def _stall_the_event_loop_until(deadline: float) -> None:
    """Block the event loop until ``time.monotonic()`` reads ``deadline``, as a callback that
    hogs the loop (or a long pause of the process) would. This is the fault a scenario
    injects, not a wait for something to happen: nothing else may run meanwhile."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.01))


async def test_a_retriable_answer_after_the_deadline_fails_with_delivery_timeout(
    mock_cluster: MockCluster,
) -> None:
    # The answer to an attempt is a retriable error, and the producer comes to handle it
    # only after delivery_timeout_ms has passed: that answer is what ends the batch, with a
    # DeliveryTimeoutError whose cause is the broker's error. To make the answer, and not
    # the sender's own expiry of the in-flight batch, come first:
    # - broker 1 answers every Produce with NOT_ENOUGH_REPLICAS, 50 ms late (its RTT);
    # - once the mock has read an attempt whose answer the producer has not handled yet,
    #   the event loop is stalled until the delivery deadline has passed. The answer reaches
    #   the socket 50 ms after the request, while the sender, with a request in flight,
    #   next wakes up a quarter of request_timeout_ms (500 ms) after it sent it (no other
    #   timer of its is due sooner: nothing else is buffered, metadata is fresh for 60 s,
    #   and the idle-connection check, which runs every second at its own pace, is off);
    # - the event loop then handles what became ready in the order it did: the answer first,
    #   at a time past the deadline, before the sender's wake-up could expire the batch.
    topic = unique_topic("late-answer")
    mock_cluster.create_topic(topic, 1)
    mock_cluster.partition_set_leader(topic, 0, 1)
    ledger = Ledger(topic)
    timeout_ms = 2000
    options = mock_options(
        mock_cluster.bootstrap_servers,
        request_timeout_ms=timeout_ms,
        delivery_timeout_ms=timeout_ms,
        connections_max_idle_ms=-1,
    )
    async with Producer(**options) as producer:
        await _warm_up(producer, topic, 1, ledger)
        mock_cluster.start_request_tracking()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS] * 1000)
        mock_cluster.broker_set_rtt(1, 50)
        retries = producer.metrics()["record-retry-total"]
        earliest_deadline = time.monotonic() + timeout_ms / 1000
        record = await bounded(ledger.send(producer, 0))
        latest_deadline = time.monotonic() + timeout_ms / 1000

        def attempts() -> int:
            return sum(1 for r in mock_cluster.get_requests() if r.api_key == ApiKey.PRODUCE)

        def answer_pending() -> bool:
            # Each retry waits for the previous answer, so the mock has seen at most one
            # attempt more than the producer retried: that one's answer is not handled yet.
            return attempts() > producer.metrics()["record-retry-total"] - retries

        # Catch an attempt well before the deadline (the first one, unless this poll misses
        # its 50 ms), so that its answer comes before any wake-up of the sender. The check
        # and the stall run without yielding in between: the producer cannot handle the
        # answer in the meantime.
        while not answer_pending():
            assert time.monotonic() < earliest_deadline - 0.6, "no attempt caught in flight"
            await asyncio.sleep(0.005)
        caught = attempts()
        _stall_the_event_loop_until(latest_deadline)
        await ledger.wait()
        error = record.future.exception()
        assert isinstance(error, e.DeliveryTimeoutError), repr(error)
        assert isinstance(error.__cause__, e.NotEnoughReplicasError), repr(error.__cause__)
        assert error.retriable
        # The caught attempt was the last: its answer ended the batch, with no retry.
        assert attempts() == caught
        assert producer.metrics()["record-retry-total"] - retries == caught - 1
        assert producer.metrics()["record-error-total"] == 1
        mock_cluster.clear_request_errors(ApiKey.PRODUCE)
        mock_cluster.broker_set_rtt(1, 0)
        later = await bounded(ledger.send(producer, 0))
        await ledger.wait()
        assert later.future.exception() is None, repr(later.future.exception())
    # The mock appends nothing for an injected error: the failed record is not in the log.
    ledger.check(
        await mock_log(mock_cluster.bootstrap_servers, topic),
        expect_failed=[e.DeliveryTimeoutError],
    )


async def _retry_then_fail(
    mock_cluster: MockCluster, caplog: pytest.LogCaptureFixture
) -> tuple[str, list[logging.LogRecord]]:
    """One batch to broker 2: a retriable error, then a fatal one. Returns the topic and
    what aioproducer logged."""
    topic = unique_topic("logged")
    mock_cluster.create_topic(topic, 1)
    mock_cluster.partition_set_leader(topic, 0, 2)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers)) as producer:
        await _warm_up(producer, topic, 1, ledger)
        caplog.set_level(logging.INFO, logger="aioproducer")
        mock_cluster.push_request_errors(
            ApiKey.PRODUCE,
            [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.TOPIC_AUTHORIZATION_FAILED],
        )
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
    [failed] = ledger.failed
    assert isinstance(failed.future.exception(), e.TopicAuthorizationFailedError)
    return topic, [r for r in caplog.records if r.name.startswith("aioproducer")]


async def test_retry_decision_is_logged_with_broker_topic_partition(
    mock_cluster: MockCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic, records = await _retry_then_fail(mock_cluster, caplog)
    retries = [r.getMessage() for r in records if "NOT_ENOUGH_REPLICAS" in r.getMessage()]
    assert retries, "the retry decision was not logged"
    assert f"{topic}-0" in retries[0]
    assert "broker 2" in retries[0]


async def test_failure_decision_is_logged_with_broker_topic_partition(
    mock_cluster: MockCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic, records = await _retry_then_fail(mock_cluster, caplog)
    failures = [
        r.getMessage()
        for r in records
        if r.levelno >= logging.WARNING
        and "TOPIC_AUTHORIZATION_FAILED" in r.getMessage()
        and f"{topic}-0" in r.getMessage()
    ]
    assert failures, "the failure decision was not logged"
    assert any("broker 2" in message for message in failures), failures


async def test_retry_and_failure_counters_match_the_outcomes(mock_cluster: MockCluster) -> None:
    topic = unique_topic("counters")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers, retries=1)) as producer:
        await _warm_up(producer, topic, 1, ledger)
        before = producer.metrics()
        # First batch: one retriable error then success. Second: two errors, so it fails.
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS])
        first = await bounded(ledger.send_burst(producer, 0, 3))
        await ledger.wait()
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS] * 2)
        second = await bounded(ledger.send_burst(producer, 0, 4))
        await ledger.wait()
        after = producer.metrics()
    assert all(r.future.exception() is None for r in first)
    assert all(isinstance(r.future.exception(), e.NotEnoughReplicasError) for r in second)
    assert after["record-retry-total"] - before["record-retry-total"] == len(first) + len(second)
    assert after["record-error-total"] - before["record-error-total"] == len(second)
    ledger.check(
        await mock_log(mock_cluster.bootstrap_servers, topic),
        expect_failed=[e.NotEnoughReplicasError],
    )


async def test_retriable_error_on_one_partition_resends_only_that_partition(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("partial")
    mock_cluster.create_topic(topic, 2)
    mock_cluster.partition_set_leader(topic, 0, 1)
    mock_cluster.partition_set_leader(topic, 1, 1)
    ledger = Ledger(topic)
    options = mock_options(mock_cluster.bootstrap_servers, linger_ms=50)
    async with Producer(**options) as producer:
        await _warm_up(producer, topic, 2, ledger)
        mock_cluster.partition_push_request_errors(
            topic, 0, ApiKey.PRODUCE, [ErrorCode.NOT_ENOUGH_REPLICAS] * 2
        )
        await bounded(ledger.send_burst(producer, 0, 5))
        await bounded(ledger.send_burst(producer, 1, 5))
        await ledger.wait()
        # Two retries of partition 0's five records; partition 1's were not resent.
        assert producer.metrics()["record-retry-total"] == 10
        assert producer.metrics()["record-error-total"] == 0
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


async def test_message_too_large_splits_an_idempotent_batch(mock_cluster: MockCluster) -> None:
    topic = unique_topic("split")
    mock_cluster.create_topic(topic, 1)
    ledger = Ledger(topic)
    options = mock_options(mock_cluster.bootstrap_servers, batch_size=4096, linger_ms=20)
    async with Producer(**options) as producer:
        await _warm_up(producer, topic, 1, ledger)
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.MESSAGE_TOO_LARGE])
        await bounded(ledger.send_burst(producer, 0, 200))
        await ledger.wait()
        assert producer.metrics()["record-error-total"] == 0
        await bounded(ledger.send_burst(producer, 0, 5))
        await ledger.wait()
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


async def test_acks_zero_with_a_broker_that_answers_anyway(mock_cluster: MockCluster) -> None:
    topic = unique_topic("acks0")
    mock_cluster.create_topic(topic, 2)
    ledger = Ledger(topic)
    options = fast_options(
        mock_cluster.bootstrap_servers, acks=0, enable_idempotence=False, batch_size=512
    )
    async with Producer(**options) as producer:
        await bounded(ledger.send_many(producer, [0, 1], 100))
        await ledger.wait()
        assert all(r.future.result().offset == -1 for r in ledger.records)
        await bounded(producer.flush())
    # acks=0: the producer cannot know when the broker appended, so give the mock time to
    # read the last requests off the socket before reading back.
    await wait_for_watermarks(mock_cluster.bootstrap_servers, topic, len(ledger.records))
    # Nothing was lost even though every answer was unexpected.
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))
