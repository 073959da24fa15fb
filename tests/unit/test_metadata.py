"""The cluster view: which leader metadata is believed (KIP-320) and leaders named in Produce
responses (KIP-951)."""

from __future__ import annotations

import asyncio

from aioproducer._core.metadata import Broker, Metadata, PartitionInfo, TopicInfo

BROKERS = [Broker(n, f"broker{n}", 9092) for n in (1, 2, 3)]


async def _metadata() -> Metadata:
    loop = asyncio.get_running_loop()
    return Metadata(max_age=300.0, max_idle=300.0, retry_backoff=0.1, loop=loop)


def _topic(leaders: dict[int, tuple[int, int]], topic_id: bytes | None = b"id-1") -> TopicInfo:
    return TopicInfo(
        "t",
        tuple(PartitionInfo(p, leader, epoch) for p, (leader, epoch) in sorted(leaders.items())),
        topic_id=topic_id,
    )


async def test_metadata_with_an_older_leader_epoch_does_not_move_a_leader_back() -> None:
    # Java's Metadata.updateLatestMetadata: a broker behind on metadata answers with the
    # leader of an older epoch; the newer one known stays.
    metadata = await _metadata()
    metadata.update(BROKERS, [_topic({0: (1, 5), 1: (2, 3)})], 0.0)
    metadata.update(BROKERS, [_topic({0: (3, 4), 1: (3, 4)})], 1.0)
    assert metadata.cluster.leader_for("t", 0) == 1, "a stale leader replaced a newer one"
    assert metadata.cluster.leader_for("t", 1) == 3, "a newer leader was not taken"


async def test_a_recreated_topic_takes_its_new_metadata_whole() -> None:
    metadata = await _metadata()
    metadata.update(BROKERS, [_topic({0: (1, 5)})], 0.0)
    metadata.update(BROKERS, [_topic({0: (2, 0)}, topic_id=b"id-2")], 1.0)
    assert metadata.cluster.leader_for("t", 0) == 2


async def test_a_leader_named_in_a_produce_response_takes_over_when_newer() -> None:
    metadata = await _metadata()
    metadata.update(BROKERS[:2], [_topic({0: (1, 5), 1: (1, 5)})], 0.0)
    version = metadata.version
    moved = metadata.update_leaders(
        {("t", 0): (3, 6), ("t", 1): (2, 4)}, [Broker(3, "broker3", 9093)]
    )
    assert moved == {("t", 0)}
    assert metadata.cluster.leader_for("t", 0) == 3
    assert metadata.cluster.broker(3) == Broker(3, "broker3", 9093)
    assert metadata.cluster.leader_for("t", 1) == 1, "an older epoch moved a leader"
    assert metadata.version == version + 1
    # A leader the cluster view cannot reach (no endpoint) is not installed.
    assert metadata.update_leaders({("t", 1): (9, 7)}) == set()


async def test_a_topic_that_does_not_exist_is_asked_about_again_only_for_a_waiting_send() -> None:
    # A topic deleted under an idle producer (or one named wrongly) stays in the metadata
    # set until it has been idle for max_idle: asking again every retry_backoff meanwhile
    # would send the broker ten Metadata requests a second for nothing. A send waiting for
    # the topic asks before each wait (as Java's waitOnMetadata); a leader being elected is
    # still asked about again soon.
    from aioproducer.protocol.error_codes import ErrorCode

    metadata = await _metadata()
    metadata.add_topic("t", 0.0)
    metadata.update_started(0.0)
    gone = TopicInfo("t", (), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    metadata.update(BROKERS, [gone], 0.0)
    assert not metadata.update_requested
    assert metadata.time_to_next_update(1.0) > 100.0, "refreshed before max_age"
    metadata.request_update()  # what a waiting send does
    assert metadata.time_to_next_update(1.0) == 0.0
    metadata.update_started(1.0)
    electing = TopicInfo("t", (), ErrorCode.LEADER_NOT_AVAILABLE)
    metadata.update(BROKERS, [electing], 1.0)
    assert metadata.update_requested


async def test_an_answer_without_a_cluster_id_keeps_the_one_known() -> None:
    # A broker that sends no cluster id must not turn the check of later answers off.
    metadata = await _metadata()
    metadata.update(BROKERS, [], 0.0, cluster_id="A")
    assert metadata.check_cluster("B", "node 1") is not None
    metadata.update(BROKERS, [], 1.0, cluster_id=None)
    assert metadata.cluster.cluster_id == "A"
    refused = metadata.check_cluster("B", "node 2")
    assert refused is not None and "cluster B" in str(refused) and "cluster A" in str(refused)
    assert metadata.check_cluster("A", "node 2") is None


async def test_the_failure_clock_runs_only_while_refreshes_fail() -> None:
    # KIP-1102's trigger counts from the first failed refresh, and an accepted answer stops
    # it: a healthy producer is never 'failing' (a trigger of 0 must not rebootstrap it).
    metadata = await _metadata()
    metadata.update(BROKERS, [], 0.0, cluster_id="A")
    assert metadata.failing_for(100.0) == 0.0
    metadata.update_started(10.0)
    metadata.update_failed(10.5, RuntimeError("lost"))
    assert metadata.failing_for(12.0) == 2.0
    metadata.update_started(13.0)
    metadata.update_failed(13.5, RuntimeError("lost"))
    assert metadata.failing_for(14.0) == 4.0  # still from the first failure
    metadata.update(BROKERS, [], 15.0, cluster_id="A")
    assert metadata.failing_for(20.0) == 0.0
