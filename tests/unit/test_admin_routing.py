"""Where ``producer.admin`` sends its requests, and how it retries, on the scripted cluster
(tests/faults/scripted_broker.py, which follows Kafka and decodes every request with
kafka-python's codec).

- CreateTopics and DeleteTopics go to the broker the Metadata answer names as controller,
  over the producer's own connections (no connection of their own).
- A broker that answers NOT_CONTROLLER makes the call ask for the metadata again and send
  to the controller it names (Java's Admin does the same).
- With no controller named, the least loaded broker takes the request.
- A request whose answer is lost is tried again; a topic the lost attempt created is then
  reported as existing, with a note saying so (``ensure_topics`` takes it as a success).
- Describing asks for metadata with ``allow_auto_topic_creation`` false: it never creates.
- A controller that stops answering fails the call at its timeout, not later; one that
  cannot be connected to is passed over for the least loaded broker (which, in KRaft
  mode, forwards to the active controller).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from aioproducer import NewTopic, Producer
from aioproducer import errors as e
from tests.faults.checks import bounded, fast_options
from tests.faults.scripted_broker import (
    ADMIN_API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    METADATA,
    Action,
    ActionKind,
    ScriptedCluster,
)

NOT_CONTROLLER = 41


@pytest.fixture
async def cluster() -> AsyncIterator[ScriptedCluster]:
    cluster = ScriptedCluster(3, topics={"existing": 2})
    for broker in cluster.brokers.values():
        broker.api_versions = dict(ADMIN_API_VERSIONS)
    async with cluster:
        yield cluster


def _admin_brokers(cluster: ScriptedCluster, api_key: int) -> list[int]:
    return [request.broker_id for request in cluster.requests_of(api_key)]


async def test_create_and_delete_go_to_the_controller(cluster: ScriptedCluster) -> None:
    cluster.controller = 2
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        connections = sum(b.connections_accepted for b in cluster.brokers.values())
        results = await bounded(
            producer.admin.create_topics(
                [NewTopic("orders", 3, 1, {"cleanup.policy": "compact"})], timeout=5
            )
        )
        created = results["orders"]
        assert created.created and created.error is None
        assert (created.num_partitions, created.replication_factor) == (3, 1)
        assert dict(created.configs) == {"cleanup.policy": "compact"}
        assert created.topic_id is not None
        assert cluster.topics["orders"] == 3
        assert _admin_brokers(cluster, CREATE_TOPICS) == [2]
        # The highest version both sides speak, with the topic as given.
        [(version, request)] = cluster.decoded_of(CREATE_TOPICS)
        assert version == 7
        [topic] = request.topics
        assert (topic.name, topic.num_partitions, topic.replication_factor) == ("orders", 3, 1)
        assert [(c.name, c.value) for c in topic.configs] == [("cleanup.policy", "compact")]
        assert request.validate_only is False

        assert await bounded(producer.admin.delete_topics(["orders"])) == {"orders": None}
        assert "orders" not in cluster.topics
        assert _admin_brokers(cluster, DELETE_TOPICS) == [2]
        # Over the producer's connections: at most the controller's was new.
        assert sum(b.connections_accepted for b in cluster.brokers.values()) <= connections + 1


async def test_not_controller_refreshes_the_metadata_and_retries(cluster: ScriptedCluster) -> None:
    cluster.controller = 1
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        # The controller moves; the producer's view still names broker 1.
        cluster.controller = 3
        cluster.active_controller = 3
        metadata_before = len(cluster.requests_of(METADATA))
        results = await bounded(producer.admin.create_topics([NewTopic("orders", 2)]))
        assert results["orders"].created
        assert _admin_brokers(cluster, CREATE_TOPICS) == [1, 3]
        first, second = cluster.requests_of(CREATE_TOPICS)
        # Between the two, the metadata was asked for again.
        assert any(
            first.at <= r.at <= second.at for r in cluster.requests_of(METADATA)[metadata_before:]
        )
        assert cluster.topics["orders"] == 2

        cluster.controller = 2
        cluster.active_controller = 2
        await bounded(producer.admin.delete_topics(["orders"]))
        assert _admin_brokers(cluster, DELETE_TOPICS)[-1] == 2
        assert "orders" not in cluster.topics


async def test_a_broker_that_keeps_answering_not_controller_fails_at_the_timeout(
    cluster: ScriptedCluster,
) -> None:
    cluster.active_controller = 99  # no broker creates topics
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        started = time.monotonic()
        with pytest.raises(e.RequestTimedOutError, match="NOT_CONTROLLER"):
            await bounded(producer.admin.create_topics([NewTopic("orders")], timeout=1.0))
        assert time.monotonic() - started < 3.0
        assert len(cluster.requests_of(CREATE_TOPICS)) >= 2
        assert "orders" not in cluster.topics


async def test_without_a_controller_the_least_loaded_broker_takes_it(
    cluster: ScriptedCluster,
) -> None:
    cluster.controller = -1
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        await bounded(producer.admin.create_topics([NewTopic("orders")]))
        assert len(_admin_brokers(cluster, CREATE_TOPICS)) == 1
        assert cluster.topics["orders"] == 1  # the broker's default partition count


async def test_a_lost_answer_is_retried_and_says_the_topic_may_be_its_own(
    cluster: ScriptedCluster,
) -> None:
    cluster.controller = 1
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        # Broker 1 creates the topic, then drops the connection without answering.
        cluster.broker(1).push(CREATE_TOPICS, Action(ActionKind.APPEND_THEN_DROP))
        with pytest.raises(e.TopicAlreadyExistsError, match="may have created it"):
            await bounded(producer.admin.create_topics([NewTopic("orders", 2)]))
        assert len(cluster.requests_of(CREATE_TOPICS)) == 2
        assert cluster.topics["orders"] == 2

        cluster.broker(1).push(CREATE_TOPICS, Action(ActionKind.APPEND_THEN_DROP))
        ensured = await bounded(producer.admin.ensure_topics([NewTopic("audit", 2)]))
        assert ensured["audit"].error is None and not ensured["audit"].created
        assert ensured["audit"].num_partitions == 2
        # The producer works on: a record to the new topic is delivered.
        metadata = await bounded(producer.send_and_wait("audit", b"x", partition=1))
        assert metadata.offset == 0


async def test_errors_for_each_topic_carry_the_brokers_message(cluster: ScriptedCluster) -> None:
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        admin = producer.admin
        with pytest.raises(e.InvalidReplicationFactorError) as raised:
            await bounded(admin.create_topics([NewTopic("wide", replication_factor=4)]))
        message = str(raised.value)
        assert "only 3 broker(s) are registered" in message and "'wide'" in message
        assert raised.value.error_code == 38
        results = await bounded(
            admin.create_topics(
                [NewTopic("existing"), NewTopic("wide", replication_factor=4), NewTopic("ok")],
                raise_errors=False,
            )
        )
        assert isinstance(results["existing"].error, e.TopicAlreadyExistsError)
        assert isinstance(results["wide"].error, e.InvalidReplicationFactorError)
        assert results["ok"].created
        # A broker-wide refusal (scripted) reaches every topic of the request.
        cluster.broker(1).push(CREATE_TOPICS, Action.error_code(44))
        cluster.broker(1).push(DELETE_TOPICS, Action.error_code(44))
        with pytest.raises(e.PolicyViolationError, match=r"POLICY_VIOLATION.*'t1'"):
            await bounded(admin.create_topics([NewTopic("t1"), NewTopic("t2")]))
        with pytest.raises(e.PolicyViolationError):
            await bounded(admin.delete_topics(["ok"]))
        assert "ok" in cluster.topics


async def test_describe_never_creates_and_names_unknown_topics(cluster: ScriptedCluster) -> None:
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        described = await bounded(producer.admin.describe_topics(["existing"]))
        existing = described["existing"]
        assert existing.num_partitions == 2
        assert [p.leader for p in existing.partitions] == [1, 2]
        assert existing.partitions[1].replicas == (2,)
        with pytest.raises(e.UnknownTopicOrPartitionError, match="'missing' does not exist"):
            await bounded(producer.admin.describe_topics(["existing", "missing"]))
        asked = [
            request
            for _, request in cluster.decoded_of(METADATA)
            if request.topics and "missing" in [t.name for t in request.topics]
        ]
        assert asked and all(r.allow_auto_topic_creation is False for r in asked)
        assert "missing" not in cluster.topics


async def test_a_silent_controller_fails_the_call_at_its_timeout(cluster: ScriptedCluster) -> None:
    cluster.controller = 2
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        cluster.broker(2).push(CREATE_TOPICS, Action(ActionKind.HANG))
        started = time.monotonic()
        with pytest.raises(e.RequestTimedOutError, match="within the call's timeout"):
            await bounded(producer.admin.create_topics([NewTopic("orders")], timeout=0.5))
        assert time.monotonic() - started < 2.0


async def test_a_controller_that_cannot_be_reached_is_passed_over(
    cluster: ScriptedCluster,
) -> None:
    cluster.controller = 2
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        # Broker 2, named controller, accepts connections and closes them at once.
        cluster.broker(2).refuse = True
        cluster.broker(2).drop_connections()
        results = await bounded(producer.admin.create_topics([NewTopic("orders")], timeout=5))
        assert results["orders"].created
        brokers = _admin_brokers(cluster, CREATE_TOPICS)
        assert len(brokers) == 1 and brokers[0] != 2
        assert cluster.topics["orders"] == 1


async def test_describe_refuses_another_clusters_answer(cluster: ScriptedCluster) -> None:
    options = fast_options(cluster.bootstrap_servers, metadata_recovery_rebootstrap_trigger_ms=500)
    async with Producer(**options) as producer:
        await bounded(producer.partitions_for("existing"))
        # Every broker now answers for another cluster (its addresses were given to one).
        for broker in cluster.brokers.values():
            broker.cluster_id = "another-cluster"
        started = time.monotonic()
        with pytest.raises(e.RequestTimedOutError, match="another-cluster") as caught:
            await bounded(producer.admin.describe_topics(["existing"], timeout=1.0))
        assert time.monotonic() - started < 3.0
        assert "works with cluster scripted" in str(caught.value)
        # The same brokers answering for this cluster again are believed again, once the
        # producer goes back to its bootstrap servers (no metadata for the trigger time).
        for broker in cluster.brokers.values():
            broker.cluster_id = None
        described = await bounded(producer.admin.describe_topics(["existing"], timeout=10.0))
        assert described["existing"].num_partitions == 2


async def test_describe_retries_a_metadata_answer_with_a_top_level_error(
    cluster: ScriptedCluster,
) -> None:
    for broker in cluster.brokers.values():
        broker.api_versions[METADATA] = (1, 13)
    async with Producer(**fast_options(cluster.bootstrap_servers)) as producer:
        await bounded(producer.partitions_for("existing"))
        for broker in cluster.brokers.values():
            broker.metadata_error = 15  # COORDINATOR_NOT_AVAILABLE, say
        with pytest.raises(e.RequestTimedOutError, match="COORDINATOR_NOT_AVAILABLE"):
            await bounded(producer.admin.describe_topics(["existing"], timeout=1.0))
        for broker in cluster.brokers.values():
            broker.metadata_error = 0
        described = await bounded(producer.admin.describe_topics(["existing"], timeout=10.0))
        assert described["existing"].num_partitions == 2
