"""Outages: brokers down and up, leaders moving mid-stream, slow brokers, a lost cluster.

Scenarios and what each proves:

- ``test_leaders_move_mid_stream``: while records stream to three partitions, their leaders
  move between brokers several times. NOT_LEADER_OR_FOLLOWER makes the producer refresh its
  metadata and resend to the new leader: every record lands once, in order, none fails, and
  the new leaders do receive Produce requests.
- ``test_a_down_broker_holds_only_its_partitions``: with one broker down, records for the
  partitions it leads wait while the others are delivered; once it is back, the waiting
  records are delivered, once and in order.
- ``test_all_brokers_down_then_up``: with every broker down, records wait through several
  failed reconnect attempts to every broker (no failure before delivery_timeout_ms), then
  go through when the cluster returns.
- ``test_unreachable_leader_fails_at_delivery_timeout``: a leader that stays down makes its
  records fail with DeliveryTimeoutError, while the producer keeps asking for metadata in
  search of a leader; the producer then works again for that partition once the broker
  returns.
- ``test_rebootstrap_when_every_known_broker_is_gone`` (scripted brokers): the whole cluster
  the producer knows moves to other addresses (the same cluster id); the producer goes back
  to ``bootstrap_servers``, finds it there and delivers to it, every record once, in order.
  With ``metadata_recovery_strategy="none"`` it keeps to the brokers it knew, and the
  records fail at their delivery timeout.
- ``test_rebootstrap_refuses_another_cluster``: the cluster the producer knows disappears and
  another cluster (another cluster id) answers at a bootstrap address: the producer refuses
  its metadata, logs an ERROR naming both ids, delivers nothing there, and the records'
  errors say why.
- ``test_rebootstrap_when_the_cluster_asks_for_it``: the known broker answers Metadata v13
  with REBOOTSTRAP_REQUIRED: the producer asks the bootstrap servers at once (not after
  the 5-minute trigger time) and delivers through them.
- ``test_rebootstrap_after_the_trigger_time``: the known broker still accepts connections
  but gives no metadata (a top-level error in every answer, logged once); after
  ``metadata_recovery_rebootstrap_trigger_ms`` the producer asks the bootstrap servers,
  which answer, and delivers there.
- ``test_a_rebootstrap_that_finds_another_cluster_goes_back_to_the_known_brokers``: after
  the trigger time, the bootstrap address (a proxy, now leading to another cluster) is
  asked; its answer is refused once, the rebootstrap ends, and when the known brokers give
  metadata again a new topic's records are delivered: the producer is not left asking the
  other cluster only.
- ``test_a_healthy_producer_with_a_zero_trigger_does_not_rebootstrap``: with
  ``metadata_recovery_rebootstrap_trigger_ms=0`` and refreshes every 50 ms, a producer
  whose refreshes succeed never rebootstraps.
- ``test_reconnects_back_off``: a broker that accepts connections and drops them at once is
  retried again and again, no faster than ``reconnect_backoff_ms`` doubling (lower bounds
  only), and the record waiting for it is delivered once it behaves. (How soon an attempt
  follows the end of its backoff is a latency: it belongs in bench/, as a ratio, not in an
  assertion here.)
- ``test_slow_broker_within_request_timeout``: a round-trip delay below request_timeout_ms
  slows delivery down but causes no retry and no duplicate.
- ``test_round_trip_beyond_request_timeout_is_retried``: an answer later than
  request_timeout_ms closes the connection and the request is retried; no acknowledged
  record is lost and order is kept.

- ``test_connections_dropped_mid_stream``: the mock drops the connection instead of
  answering, several times while records stream to three partitions: every in-flight
  request is retried and every record lands once, in order.

- ``test_a_leader_error_during_a_refresh_is_not_forgotten`` (scripted broker): a leader
  error that arrives while an older Metadata request is out must still be followed by a
  fresh refresh; the older answer, which predates the leader move, must not satisfy it.

Mock quirks and how the checks cope:

- Moving a leader, setting a broker down or up, and answering a request are serialised on
  the mock's thread, so a request is either appended (and answered) or rejected whole.
  Scenarios flush before taking a broker down, so no request is in flight at that moment
  and the log stays an exactly-once oracle.
- ``ErrorCode.TRANSPORT`` makes the mock close the connection *instead of* handling the
  request, so a request dropped that way was not appended and the log stays an oracle.
- ``broker_set_down`` does not move leadership: the down broker's partitions have no
  reachable leader until it is up again, which is what these scenarios want.
- The mock appends a request before delaying its answer, and does not deduplicate a
  non-transactional idempotent producer's retry. So in
  ``test_round_trip_beyond_request_timeout_is_retried`` the retried batch is in the log
  twice: the check there is "no acknowledged record lost, first copies in order"; the
  exactly-once version of that scenario runs on the scripted broker
  (test_idempotence.py::test_request_timeout_closes_and_retries_without_duplicates).
- The mock reports its own host:port in Metadata, so a proxy cannot stand in for a broker;
  the rebootstrap scenario uses two mock clusters instead.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from aioproducer import Producer
from aioproducer import errors as e
from tests.faults.checks import (
    Ledger,
    SentRecord,
    bounded,
    fast_options,
    mock_log,
    mock_options,
    unique_topic,
    wait_records,
    wait_until,
)
from tests.faults.scripted_broker import METADATA, PRODUCE, Action, ScriptedCluster
from tests.support.kafka_proxy import KafkaProxy
from tests.support.mock_cluster import ApiKey, ErrorCode, MockCluster

pytestmark = pytest.mark.mock_cluster


async def _stream(
    producer: Producer, ledger: Ledger, partitions: list[int], count: int, pause: float
) -> None:
    """Send ``count`` records to each partition, pausing between rounds."""
    for _ in range(count):
        for partition in partitions:
            await ledger.send(producer, partition)
        await asyncio.sleep(pause)


async def test_leaders_move_mid_stream(mock_cluster: MockCluster) -> None:
    topic = unique_topic("leader-move")
    mock_cluster.create_topic(topic, 3)
    for partition in range(3):
        mock_cluster.partition_set_leader(topic, partition, 1 + partition)
    ledger = Ledger(topic)
    options = mock_options(mock_cluster.bootstrap_servers, batch_size=512)
    async with Producer(**options) as producer:
        await bounded(ledger.send_many(producer, [0, 1, 2], 1))
        await ledger.wait()
        mock_cluster.start_request_tracking()
        stream = asyncio.ensure_future(_stream(producer, ledger, [0, 1, 2], 150, 0.005))
        for shift in (1, 2, 1):
            await asyncio.sleep(0.15)
            for partition in range(3):
                mock_cluster.partition_set_leader(topic, partition, 1 + (partition + shift) % 3)
        await bounded(stream)
        await ledger.wait()
        requests = mock_cluster.get_requests()
        assert producer.metrics()["record-error-total"] == 0
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))
    produce_brokers = {r.broker_id for r in requests if r.api_key == ApiKey.PRODUCE}
    assert produce_brokers == {1, 2, 3}
    assert any(r.api_key == ApiKey.METADATA for r in requests)


async def test_a_down_broker_holds_only_its_partitions(mock_cluster: MockCluster) -> None:
    topic = unique_topic("one-down")
    mock_cluster.create_topic(topic, 2)
    mock_cluster.partition_set_leader(topic, 0, 1)
    mock_cluster.partition_set_leader(topic, 1, 2)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers)) as producer:
        await bounded(ledger.send_many(producer, [0, 1], 3))
        await ledger.wait()
        mock_cluster.broker_set_down(1)
        waiting = [await bounded(ledger.send(producer, 0)) for _ in range(10)]
        flowing = [await bounded(ledger.send(producer, 1)) for _ in range(10)]
        await wait_records(flowing)
        assert not any(r.future.done() for r in waiting)
        mock_cluster.broker_set_up(1)
        await ledger.wait()
        assert producer.metrics()["record-error-total"] == 0
        # Still works afterwards, on both partitions.
        await bounded(ledger.send_many(producer, [0, 1], 2))
        await ledger.wait()
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


def _failed_connects(caplog: pytest.LogCaptureFixture, node: int) -> int:
    """How many attempts to connect to broker ``node`` the producer logged as failed."""
    # The first failure to an address is logged at WARNING, the next ones at DEBUG; each
    # names the node and says the producer goes on trying.
    name = f"node {node} ("
    return sum(
        1
        for r in caplog.records
        if r.name == "aioproducer.net" and name in r.getMessage() and "; retrying" in r.getMessage()
    )


async def test_all_brokers_down_then_up(
    mock_cluster: MockCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("all-down")
    mock_cluster.create_topic(topic, 3)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers)) as producer:
        await bounded(ledger.send_many(producer, [0, 1, 2], 2))
        await ledger.wait()
        caplog.set_level(logging.DEBUG, logger="aioproducer.net")
        mock_cluster.broker_set_down(-1)
        await bounded(ledger.send_many(producer, [0, 1, 2], 10))
        # Several reconnect attempts to every broker fail, as the producer logs them; the
        # records wait through all of them.
        await wait_until(lambda: all(_failed_connects(caplog, node) >= 3 for node in (1, 2, 3)))
        assert not any(r.future.done() for r in ledger.records[6:])
        mock_cluster.broker_set_up(-1)
        await ledger.wait()
        assert producer.metrics()["record-error-total"] == 0
        await bounded(ledger.send_many(producer, [0, 1, 2], 2))
        await ledger.wait()
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


async def test_unreachable_leader_fails_at_delivery_timeout(mock_cluster: MockCluster) -> None:
    topic = unique_topic("unreachable")
    mock_cluster.create_topic(topic, 2)
    mock_cluster.partition_set_leader(topic, 0, 1)
    mock_cluster.partition_set_leader(topic, 1, 2)
    ledger = Ledger(topic)
    delivery_timeout_ms = 2000
    options = fast_options(
        mock_cluster.bootstrap_servers,
        request_timeout_ms=1000,
        delivery_timeout_ms=delivery_timeout_ms,
    )
    async with Producer(**options) as producer:
        await bounded(ledger.send_many(producer, [0, 1], 2))
        await ledger.wait()
        mock_cluster.start_request_tracking()
        mock_cluster.broker_set_down(1)
        doomed = [await bounded(ledger.send(producer, 0)) for _ in range(5)]
        spared = [await bounded(ledger.send(producer, 1)) for _ in range(5)]
        # The bound (the suite's default, 15 times delivery_timeout_ms) only turns a hang
        # into a failure; the error class says what ended the wait: nothing but the delivery
        # timeout fails a record with DeliveryTimeoutError.
        await ledger.wait()
        assert all(isinstance(r.future.exception(), e.DeliveryTimeoutError) for r in doomed)
        assert all(r.future.exception() is None for r in spared)
        assert producer.metrics()["record-error-total"] == len(doomed)
        # Meanwhile the producer kept looking for a reachable leader (the mock leaves a down
        # broker out of Metadata, so broker 1 has no address until it is back).
        refreshes = [r for r in mock_cluster.get_requests() if r.api_key == ApiKey.METADATA]
        assert len(refreshes) >= 2, refreshes
        mock_cluster.broker_set_up(1)
        await bounded(ledger.send_many(producer, [0, 1], 3))
        await ledger.wait()
    ledger.check(
        await mock_log(mock_cluster.bootstrap_servers, topic),
        expect_failed=[e.DeliveryTimeoutError],
    )


@pytest.mark.parametrize("strategy", ["rebootstrap", "none"])
async def test_rebootstrap_when_every_known_broker_is_gone(strategy: str) -> None:
    topic = unique_topic("rebootstrap")
    first = ScriptedCluster(2, topics={topic: 2})
    # The same cluster (the same id) at other addresses: only in bootstrap_servers.
    moved = ScriptedCluster(2, topics={topic: 2})
    async with first, moved:
        bootstrap = f"{first.bootstrap_servers},{moved.broker(1).address}"
        before = Ledger(topic, tag="before")
        after = Ledger(topic, tag="after")
        options = fast_options(
            bootstrap,
            enable_idempotence=False,
            delivery_timeout_ms=8000 if strategy == "none" else 30000,
            metadata_recovery_strategy=strategy,
        )
        async with Producer(**options) as producer:
            await bounded(before.send_many(producer, [0, 1], 5))
            await before.wait()
            await first.close()
            await bounded(after.send_many(producer, [0, 1], 5))
            await after.wait()
        before.check({p: first.values(topic, p) for p in (0, 1)})
        if strategy == "none":
            errors = [r.future.exception() for r in after.records]
            assert all(isinstance(error, e.DeliveryTimeoutError) for error in errors), errors
            assert all(moved.values(topic, p) == [] for p in (0, 1))
        else:
            after.check({p: moved.values(topic, p) for p in (0, 1)})
            assert all(r.future.exception() is None for r in after.records)


async def test_rebootstrap_refuses_another_cluster(caplog: pytest.LogCaptureFixture) -> None:
    topic = unique_topic("rebootstrap-other")
    first = ScriptedCluster(2, topics={topic: 1})
    other = ScriptedCluster(2, topics={topic: 1})
    other.cluster_id = "another-cluster"
    async with first, other:
        ledger = Ledger(topic)
        options = fast_options(
            f"{first.bootstrap_servers},{other.broker(1).address}",
            enable_idempotence=False,
            delivery_timeout_ms=6000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            await first.close()
            stranded = [await bounded(ledger.send(producer, 0)) for _ in range(3)]
            await ledger.wait()
            with pytest.raises(e.UnknownTopicOrPartitionError, match="another-cluster"):
                await bounded(producer.partitions_for(unique_topic("new-topic")))
        for record in stranded:
            error = record.future.exception()
            assert isinstance(error, e.DeliveryTimeoutError), error
            assert "answered for cluster another-cluster" in str(error), error
        assert other.values(topic, 0) == []
        assert other.requests_of(PRODUCE) == []
        refusals = [
            r for r in caplog.records
            if r.levelname == "ERROR" and "answered for cluster another-cluster" in r.message
        ]
        assert len(refusals) == 1, [r.message for r in refusals]
        assert "this producer works with cluster scripted" in refusals[0].message


async def test_rebootstrap_when_the_cluster_asks_for_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer")
    topic = unique_topic("rebootstrap-required")
    cluster = ScriptedCluster(2, topics={topic: 1})
    cluster.leaders[(topic, 0)] = 2
    for broker in cluster.brokers.values():
        broker.api_versions[METADATA] = (1, 13)
    async with cluster:
        ledger = Ledger(topic)
        cluster.advertised = {1}  # refreshes go to broker 1, which does not lead partition 0
        options = fast_options(
            cluster.broker(2).address, enable_idempotence=False, metadata_max_age_ms=100
        )
        async with Producer(**options) as producer:
            await bounded(producer.partitions_for(topic))
            cluster.broker(1).metadata_error = 129  # REBOOTSTRAP_REQUIRED
            cluster.advertised = None
            cluster.broker(2).drop_connections()
            asked = len(cluster.requests_of(METADATA, 2))
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            assert len(cluster.requests_of(METADATA, 2)) > asked
        ledger.check({0: cluster.values(topic, 0)})
        versions = {version for key, version, _ in cluster.decoded if key == METADATA}
        assert 13 in versions, versions
    assert any(
        "answered REBOOTSTRAP_REQUIRED" in r.message for r in caplog.records
    ), [r.message for r in caplog.records]


async def test_rebootstrap_after_the_trigger_time(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer")
    topic = unique_topic("rebootstrap-trigger")
    cluster = ScriptedCluster(2, topics={topic: 1})
    cluster.leaders[(topic, 0)] = 2
    for broker in cluster.brokers.values():
        broker.api_versions[METADATA] = (1, 13)
    async with cluster:
        ledger = Ledger(topic)
        # Bootstrap through broker 2; the metadata names broker 1 only, so that later
        # refreshes go to broker 1.
        cluster.advertised = {1}
        options = fast_options(
            cluster.broker(2).address,
            enable_idempotence=False,
            metadata_max_age_ms=100,
            metadata_recovery_rebootstrap_trigger_ms=2000,
            delivery_timeout_ms=30000,
        )
        async with Producer(**options) as producer:
            await bounded(producer.partitions_for(topic))
            # Broker 1 can be connected to but gives no metadata (a top-level error in every
            # answer); broker 2, the bootstrap server, would, once asked again.
            cluster.broker(1).metadata_error = 15  # COORDINATOR_NOT_AVAILABLE, say
            cluster.advertised = None
            cluster.broker(2).drop_connections()
            failing_since = asyncio.get_running_loop().time()
            refreshes = len(cluster.requests_of(METADATA, 1))
            await cluster.wait_for(
                lambda: len(cluster.requests_of(METADATA, 1)) >= refreshes + 3, timeout=10
            )
            asked_2 = len(cluster.requests_of(METADATA, 2))
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            # Broker 2 was asked again, and not before the trigger time had passed.
            again = cluster.requests_of(METADATA, 2)[asked_2:]
            assert again, "the bootstrap server was never asked again"
            assert again[0].at - failing_since >= 2.0 - 0.05, again[0].at - failing_since
        ledger.check({0: cluster.values(topic, 0)})
        assert any(
            "rebootstrapping: no metadata for" in r.message
            and "metadata_recovery_rebootstrap_trigger_ms" in r.message
            for r in caplog.records
        ), [r.message for r in caplog.records]
        warned = [r for r in caplog.records if "COORDINATOR_NOT_AVAILABLE" in r.message]
        assert len(warned) == 1, "the same metadata error is logged once"


async def test_a_rebootstrap_that_finds_another_cluster_goes_back_to_the_known_brokers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer")
    topic = unique_topic("rebootstrap-back")
    later = unique_topic("rebootstrap-later")
    known = ScriptedCluster(2, topics={topic: 1})
    other = ScriptedCluster(1, topics={topic: 1})
    other.cluster_id = "other"
    for broker in known.brokers.values():
        broker.api_versions[METADATA] = (1, 13)
    async with known, other:
        # The bootstrap address is a proxy: it leads to the known cluster, then to another.
        async with KafkaProxy(("127.0.0.1", known.broker(1).port)) as proxy:
            options = fast_options(
                proxy.bootstrap_servers,
                enable_idempotence=False,
                metadata_max_age_ms=100,
                metadata_recovery_rebootstrap_trigger_ms=1000,
            )
            async with Producer(**options) as producer:
                await bounded(producer.partitions_for(topic))
                proxy.upstream = ("127.0.0.1", other.broker(1).port)
                await proxy.drop_connections()
                # The known brokers give no metadata for a while: the trigger time passes,
                # the bootstrap address is asked, and answers for another cluster.
                for broker in known.brokers.values():
                    broker.metadata_error = 15  # COORDINATOR_NOT_AVAILABLE, say
                await known.wait_for(
                    lambda: "rebootstrap ended: a bootstrap server answered for another cluster"
                    in caplog.text,
                    timeout=20,
                )
                # The known brokers recover: the producer asks them again, not only the
                # address that leads elsewhere, and a new topic's metadata comes.
                for broker in known.brokers.values():
                    broker.metadata_error = 0
                known.topics[later] = 1
                ledger = Ledger(later)
                await bounded(ledger.send(producer, 0))
                await ledger.wait()
        ledger.check({0: known.values(later, 0)})
        assert other.requests_of(PRODUCE) == []
        refused = [r for r in caplog.records if "answered for cluster other" in r.message]
        assert len(refused) == 1, [r.message for r in refused]


async def test_a_healthy_producer_with_a_zero_trigger_does_not_rebootstrap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer")
    topic = unique_topic("rebootstrap-zero")
    async with ScriptedCluster(2, topics={topic: 2}) as cluster:
        ledger = Ledger(topic)
        options = fast_options(
            cluster.bootstrap_servers,
            metadata_max_age_ms=50,
            metadata_recovery_rebootstrap_trigger_ms=0,
        )
        async with Producer(**options) as producer:
            for _ in range(10):
                await bounded(ledger.send_many(producer, [0, 1], 5))
                await asyncio.sleep(0.05)
            await ledger.wait()
        ledger.check({p: cluster.values(topic, p) for p in (0, 1)})
    assert not [r for r in caplog.records if "rebootstrapping" in r.message]


async def test_reconnects_back_off() -> None:
    base_ms, max_ms = 40, 160
    topic = unique_topic("reconnect")
    async with ScriptedCluster(2, topics={topic: 1}) as cluster:
        cluster.leaders[(topic, 0)] = 1
        ledger = Ledger(topic)
        # Bootstrap through broker 2 only, so that every connection to broker 1 is node 1's.
        options = fast_options(
            cluster.broker(2).address,
            reconnect_backoff_ms=base_ms,
            reconnect_backoff_max_ms=max_ms,
            delivery_timeout_ms=30000,
        )
        async with Producer(**options) as producer:
            await bounded(ledger.send(producer, 0))
            await ledger.wait()
            broker = cluster.broker(1)
            broker.refuse = True
            broker.drop_connections()
            seen = len(broker.connection_times)
            record = await bounded(ledger.send(producer, 0))
            await cluster.wait_for(lambda: len(broker.connection_times) >= seen + 6, timeout=20)
            attempts = broker.connection_times[seen:]
            broker.refuse = False
            await ledger.wait()
            assert record.future.exception() is None
        ledger.check({0: cluster.values(topic, 0)})
    gaps_ms = [(b - a) * 1000 for a, b in itertools.pairwise(attempts)]
    # reconnect_backoff_ms doubling per failure up to the maximum, less the 20% jitter, less
    # 2 ms for the difference between connecting and the broker's accept.
    floors = [0.8 * min(max_ms, base_ms * 2**failure) - 2 for failure in range(len(gaps_ms))]
    assert all(gap >= floor for gap, floor in zip(gaps_ms, floors, strict=True)), (
        gaps_ms,
        floors,
    )


async def test_slow_broker_within_request_timeout(mock_cluster: MockCluster) -> None:
    topic = unique_topic("slow")
    mock_cluster.create_topic(topic, 2)
    ledger = Ledger(topic)
    async with Producer(**mock_options(mock_cluster.bootstrap_servers)) as producer:
        await bounded(ledger.send_many(producer, [0, 1], 1))
        await ledger.wait()
        mock_cluster.broker_set_rtt(-1, 300)
        await bounded(_stream(producer, ledger, [0, 1], 20, 0.01))
        await ledger.wait()
        metrics = producer.metrics()
        assert metrics["record-retry-total"] == 0
        assert metrics["record-error-total"] == 0
        mock_cluster.broker_set_rtt(-1, 0)
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


async def test_round_trip_beyond_request_timeout_is_retried(mock_cluster: MockCluster) -> None:
    topic = unique_topic("late")
    mock_cluster.create_topic(topic, 1)
    mock_cluster.partition_set_leader(topic, 0, 1)
    ledger = Ledger(topic)
    options = fast_options(
        mock_cluster.bootstrap_servers, request_timeout_ms=800, delivery_timeout_ms=10000
    )
    async with Producer(**options) as producer:
        await bounded(ledger.send(producer, 0))
        await ledger.wait()
        mock_cluster.start_request_tracking()
        mock_cluster.broker_push_request_error_rtts(1, ApiKey.PRODUCE, [(0, 2000)])
        late = await bounded(ledger.send_burst(producer, 0, 5))
        await ledger.wait()
        produce = [r for r in mock_cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
        assert all(r.future.exception() is None for r in late)
        assert producer.metrics()["record-retry-total"] >= len(late)
        assert len(produce) >= 2
        await bounded(ledger.send_burst(producer, 0, 3))
        await ledger.wait()
    log = await mock_log(mock_cluster.bootstrap_servers, topic)
    _check_at_least_once_in_order(ledger.acknowledged, log[0])


def _check_at_least_once_in_order(acked: list[SentRecord], values: list[bytes | None]) -> None:
    """No acknowledged record lost; their first copies in send order (duplicates allowed:
    the mock does not deduplicate, see the module docstring)."""
    first_copies: list[bytes] = []
    seen: set[bytes | None] = set()
    for value in values:
        if value not in seen and value is not None:
            seen.add(value)
            first_copies.append(value)
    expected = [r.value for r in acked]
    assert [v for v in first_copies if v in set(expected)] == expected


async def test_connections_dropped_mid_stream(mock_cluster: MockCluster) -> None:
    topic = unique_topic("dropped")
    mock_cluster.create_topic(topic, 3)
    ledger = Ledger(topic)
    options = mock_options(mock_cluster.bootstrap_servers, batch_size=512)
    async with Producer(**options) as producer:
        await bounded(ledger.send_many(producer, [0, 1, 2], 1))
        await ledger.wait()
        stream = asyncio.ensure_future(_stream(producer, ledger, [0, 1, 2], 100, 0.005))
        for _ in range(3):
            await asyncio.sleep(0.1)
            mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.TRANSPORT] * 2)
        await bounded(stream)
        await ledger.wait()
        assert producer.metrics()["record-retry-total"] > 0
        assert producer.metrics()["record-error-total"] == 0
    ledger.check(await mock_log(mock_cluster.bootstrap_servers, topic))


async def test_a_leader_error_during_a_refresh_is_not_forgotten() -> None:
    topic = unique_topic("refresh-race")
    other = unique_topic("refresh-race-other")
    async with ScriptedCluster(2, topics={topic: 2, other: 1}) as cluster:
        cluster.leaders[(topic, 0)] = 2
        cluster.leaders[(topic, 1)] = 2
        cluster.leaders[(other, 0)] = 1
        broker1, broker2 = cluster.broker(1), cluster.broker(2)
        ledger = Ledger(topic)
        # Bootstrap through broker 1 only. A long retry backoff gives a refresh asked for by
        # the leader error ample time to come back before the retry goes out.
        options = fast_options(broker1.address, retry_backoff_ms=300, retry_backoff_max_ms=300)
        async with Producer(**options) as producer:
            await bounded(ledger.send_many(producer, [0, 1], 1))
            await ledger.wait()
            # Keep broker 2's connection busy, so that the next refresh goes to broker 1
            # (the bootstrap connection), where its answer is held: an answer describing the
            # cluster before the leader move below. Each broker answers in order, so the
            # leader error must come from the other broker to overtake it.
            busy = Action.hold()
            broker2.push(PRODUCE, busy)
            produced = len(cluster.requests_of(PRODUCE, broker_id=2))
            await bounded(ledger.send(producer, 1))
            await cluster.wait_for(
                lambda: len(cluster.requests_of(PRODUCE, broker_id=2)) > produced
            )
            stale = Action.hold()
            broker1.push(METADATA, stale)
            refreshes = len(cluster.requests_of(METADATA, broker_id=1))
            pending = asyncio.ensure_future(producer.send(other, b"other", partition=0))
            await cluster.wait_for(
                lambda: len(cluster.requests_of(METADATA, broker_id=1)) > refreshes
            )
            assert busy.release is not None
            busy.release.set()
            await ledger.wait()
            # Refreshes are spaced by retry_backoff_ms from the last attempt: let that pass,
            # so that only a forgotten request could delay the next one.
            await asyncio.sleep(0.4)
            cluster.leaders[(topic, 0)] = 1
            misdirected_before = len(cluster.requests_of(PRODUCE, broker_id=2))
            retries = producer.metrics()["record-retry-total"]
            record = await bounded(ledger.send(producer, 0))
            # The leader error has been handled while the stale refresh is still out.
            await cluster.wait_for(lambda: producer.metrics()["record-retry-total"] > retries)
            assert stale.release is not None
            stale.release.set()
            await ledger.wait()
            await bounded(bounded(pending))
            assert record.future.result().offset >= 0
        misdirected = len(cluster.requests_of(PRODUCE, broker_id=2)) - misdirected_before
        assert misdirected == 1, (
            f"the batch went to the old leader {misdirected} times: the refresh the leader "
            "error asked for was dropped when the older answer came back"
        )
        ledger.check({p: cluster.values(topic, p) for p in (0, 1)})
