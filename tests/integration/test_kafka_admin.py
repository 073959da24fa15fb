"""``producer.admin`` on Apache Kafka, the reference broker, with topic auto-creation off.

The ``kafka`` node runs with ``auto.create.topics.enable=false`` (the first test checks it,
and that a record to a topic nobody created is refused): every topic the tests produce to
exists because ``producer.admin`` (or the FastAPI lifespan, or the command) created it.
What was produced is read back with confluent-kafka's consumer (assigned partitions), and
what was created is checked with confluent-kafka's admin client too: both are
independent of the code under test.

What is proved: topics are created with their partitions, replication factor and configs
(CreateTopics v7: topic ids and configs in the answer) and described as created;
``validate_only`` creates nothing; TOPIC_ALREADY_EXISTS is an error for ``create_topics``
and a success for ``ensure_topics``; the broker's refusals (a replication factor above the
broker count, a name colliding with another topic's, a config value) arrive as the
library's error classes with Kafka's own message; a deleted topic is described as unknown;
the FastAPI lifespan and ``aioproducer produce --create-topic`` create the topic they then
produce to.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType
from fastapi import FastAPI
from fastapi.testclient import TestClient

from aioproducer import NewTopic, Producer, TopicDescription
from aioproducer import errors as e
from aioproducer.integrations.fastapi import ProducerDep, kafka_lifespan
from tests.support.kafka import KafkaBroker
from tests.support.readback import read_back

pytestmark = pytest.mark.kafka

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]

# Every test ends well before this; it only turns a hang into a failure.
_HANG = 60.0


async def _within_limit(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, _HANG)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _eventually(check: Callable[[], Awaitable[T]], timeout: float = 10.0) -> T:
    """``check()``'s result once it stops raising. A broker learns of a topic the
    controller created (or deleted) from the metadata log a moment after the controller
    answers; the broker that answers Metadata may be that moment behind."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await check()
        except (e.KafkaError, AssertionError):
            if asyncio.get_running_loop().time() >= deadline:
                raise
            await asyncio.sleep(0.05)


def _options(kafka: KafkaBroker, **overrides: Any) -> dict[str, Any]:
    return {"bootstrap_servers": kafka.bootstrap_servers, "max_block_ms": 10_000, **overrides}


def _broker_config(kafka: KafkaBroker, name: str) -> str:
    resource = ConfigResource(ResourceType.BROKER, str(kafka.NODE_ID))
    entries = kafka.admin().describe_configs([resource], request_timeout=10)[resource]
    return str(entries.result(timeout=10)[name].value)


def _topic_configs(kafka: KafkaBroker, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = kafka.admin().describe_configs([resource], request_timeout=10)[resource]
    return {name: entry.value for name, entry in entries.result(timeout=10).items()}


def _listed_topics(kafka: KafkaBroker) -> set[str]:
    return set(kafka.admin().list_topics(timeout=10).topics)


async def test_the_broker_creates_no_topic_on_its_own(kafka: KafkaBroker) -> None:
    assert _broker_config(kafka, "auto.create.topics.enable") == "false"
    topic = _name("never-created")
    async with Producer(**_options(kafka, max_block_ms=1_000)) as producer:
        with pytest.raises(e.UnknownTopicOrPartitionError):
            await _within_limit(producer.send_and_wait(topic, b"lost"))
    assert topic not in _listed_topics(kafka)


async def test_create_describe_produce_and_read_back(kafka: KafkaBroker) -> None:
    topic = _name("created")
    async with Producer(**_options(kafka)) as producer:
        created = await _within_limit(
            producer.admin.create_topics(
                [NewTopic(topic, 3, 1, {"cleanup.policy": "compact", "retention.ms": 3_600_000})]
            )
        )
        result = created[topic]
        assert result.created and result.error is None
        assert (result.num_partitions, result.replication_factor) == (3, 1)
        assert result.topic_id is not None  # CreateTopics v7
        assert result.configs["cleanup.policy"] == "compact"  # v5+: every config comes back
        assert result.configs["retention.ms"] == "3600000"
        assert len(result.configs) > 20

        async def described() -> TopicDescription:
            found = await producer.admin.describe_topics([topic], include_configs=True)
            return found[topic]

        description = await _within_limit(_eventually(described))
        assert description.topic_id == result.topic_id
        assert not description.internal
        assert (description.num_partitions, description.replication_factor) == (3, 1)
        for index, partition in enumerate(description.partitions):
            assert partition.partition == index
            assert partition.leader == kafka.NODE_ID
            assert partition.replicas == partition.isr == (kafka.NODE_ID,)
        assert description.configs["cleanup.policy"] == "compact"
        assert description.configs["retention.ms"] == "3600000"
        assert description.configs["max.message.bytes"] is not None  # a default, listed too

        # Compaction needs keys.
        for i in range(30):
            await producer.send(topic, f"value-{i}".encode(), f"key-{i}".encode())
        await producer.flush()

    # Independent checks: confluent-kafka's admin client and consumer.
    assert _topic_configs(kafka, topic)["cleanup.policy"] == "compact"
    assert len(kafka.partitions(topic)) == 3
    records = read_back(kafka.bootstrap_servers, topic, expected=30)
    assert sorted(r.value or b"" for r in records) == sorted(
        f"value-{i}".encode() for i in range(30)
    )
    assert {r.partition for r in records} <= {0, 1, 2}
    assert all(r.value == b"value-" + (r.key or b"")[4:] for r in records)


async def test_validate_only_creates_nothing(kafka: KafkaBroker) -> None:
    topic = _name("validated")
    async with Producer(**_options(kafka)) as producer:
        checked = await _within_limit(
            producer.admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True)
        )
        assert checked[topic].error is None and not checked[topic].created
        assert checked[topic].num_partitions == 2
        # Kafka answers with a topic id all the same, one no topic has: it is dropped.
        assert checked[topic].topic_id is None
        # What would be refused is refused all the same.
        with pytest.raises(e.InvalidReplicationFactorError):
            await _within_limit(
                producer.admin.create_topics([NewTopic(topic, 2, 3)], validate_only=True)
            )
        await asyncio.sleep(0.5)  # time enough for a creation to reach the broker
        with pytest.raises(e.UnknownTopicOrPartitionError, match="does not exist"):
            await _within_limit(producer.admin.describe_topics([topic]))
    assert topic not in _listed_topics(kafka)


async def test_an_existing_topic_is_an_error_to_create_and_fine_to_ensure(
    kafka: KafkaBroker,
) -> None:
    topic = _name("existing")
    async with Producer(**_options(kafka)) as producer:
        admin = producer.admin
        first = await _within_limit(admin.create_topics([NewTopic(topic, 2, 1)]))
        with pytest.raises(e.TopicAlreadyExistsError) as raised:
            await _within_limit(admin.create_topics([NewTopic(topic, 2, 1)]))
        # Kafka's own message, and the topic it concerns.
        assert f"Topic '{topic}' already exists." in str(raised.value)
        assert raised.value.error_code == 36

        # Right after the creation: the broker that answers Metadata may not know the topic
        # yet; ensure_topics asks again until it does.
        results = await _within_limit(admin.ensure_topics([NewTopic(topic, 2, 1)]))
        found = results[topic]
        assert found.error is None and not found.created
        assert (found.num_partitions, found.replication_factor) == (2, 1)
        assert found.topic_id == first[topic].topic_id
        with pytest.raises(e.InvalidPartitionsError, match="exists with 2 partition"):
            await _within_limit(admin.ensure_topics([NewTopic(topic, 4)], require_partitions=True))
        for _ in range(5):
            fresh = _name("fresh")
            await _within_limit(admin.create_topics([NewTopic(fresh, 3, 1)]))
            again = await _within_limit(admin.ensure_topics([NewTopic(fresh, 3, 1)]))
            assert again[fresh].num_partitions == 3 and again[fresh].topic_id is not None
        # A new one next to it is created by the same call.
        other = _name("ensured")
        both = await _within_limit(admin.ensure_topics([NewTopic(topic, 2), NewTopic(other, 1, 1)]))
        assert both[other].created and not both[topic].created
        await _within_limit(producer.send_and_wait(other, b"ok"))
    assert [r.value for r in read_back(kafka.bootstrap_servers, other, expected=1)] == [b"ok"]


async def test_the_brokers_refusals_are_clear_errors(kafka: KafkaBroker) -> None:
    async with Producer(**_options(kafka)) as producer:
        admin = producer.admin
        wide = _name("wide")
        with pytest.raises(e.InvalidReplicationFactorError) as raised:
            await _within_limit(admin.create_topics([NewTopic(wide, 1, 3)]))
        message = str(raised.value)
        assert "INVALID_REPLICATION_FACTOR" in message and wide in message
        assert "replication factor of 3" in message and "1 broker" in message

        with pytest.raises(e.InvalidConfigError) as bad_config:
            await _within_limit(
                admin.create_topics([NewTopic(_name("config"), 1, 1, {"cleanup.policy": "x"})])
            )
        assert "cleanup.policy" in str(bad_config.value)
        with pytest.raises(e.InvalidConfigError, match=r"Unknown topic config name: no\.such"):
            await _within_limit(
                admin.create_topics([NewTopic(_name("config"), 1, 1, {"no.such": "1"})])
            )
        # Partitions placed by hand: on brokers that exist, or refused.
        placed = _name("placed")
        results = await _within_limit(
            admin.create_topics([NewTopic(placed, replica_assignment={0: [1], 1: [1]})])
        )
        assert (results[placed].num_partitions, results[placed].replication_factor) == (2, 1)
        with pytest.raises(e.InvalidReplicaAssignmentError, match="broker 5"):
            await _within_limit(
                admin.create_topics([NewTopic(_name("placed"), replica_assignment={0: [5]})])
            )

        # An illegal name never leaves the client...
        with pytest.raises(e.InvalidTopicError, match="illegal"):
            NewTopic("no spaces allowed")
        # ... and a legal one the broker refuses comes back as the same class: '.' and '_'
        # collide in metric names, so Kafka refuses a topic that differs from another only
        # there.
        stem = _name("collide")
        await _within_limit(admin.create_topics([NewTopic(f"{stem}.a", 1, 1)]))
        with pytest.raises(e.InvalidTopicError) as collision:
            await _within_limit(admin.create_topics([NewTopic(f"{stem}_a", 1, 1)]))
        assert "collides" in str(collision.value) and collision.value.error_code == 17

        results = await _within_limit(
            admin.create_topics(
                [NewTopic(wide, 1, 3), NewTopic(f"{stem}-ok", 1, 1)], raise_errors=False
            )
        )
        assert isinstance(results[wide].error, e.InvalidReplicationFactorError)
        assert results[f"{stem}-ok"].created
    assert wide not in _listed_topics(kafka)


async def test_a_deleted_topic_is_described_as_unknown(kafka: KafkaBroker) -> None:
    topic = _name("deleted")
    async with Producer(**_options(kafka)) as producer:
        admin = producer.admin
        await _within_limit(admin.create_topics([NewTopic(topic, 2, 1)]))
        await _within_limit(_eventually(lambda: admin.describe_topics([topic])))
        await _within_limit(producer.send_and_wait(topic, b"soon gone"))
        assert await _within_limit(admin.delete_topics([topic])) == {topic: None}

        async def gone() -> None:
            with pytest.raises(e.UnknownTopicOrPartitionError, match="does not exist"):
                await admin.describe_topics([topic])

        await _within_limit(_eventually(gone))
        with pytest.raises(e.UnknownTopicOrPartitionError):
            await _within_limit(admin.delete_topics([topic]))
    assert topic not in _listed_topics(kafka)


def test_the_fastapi_lifespan_ensures_its_topics(kafka: KafkaBroker) -> None:
    topic = _name("lifespan")
    app = FastAPI(
        lifespan=kafka_lifespan(
            bootstrap_servers=kafka.bootstrap_servers,
            topics=[NewTopic(topic, 2, 1, {"retention.ms": 600_000})],
        )
    )

    @app.post("/events/{key}")
    async def event(key: str, producer: ProducerDep) -> dict[str, int]:
        metadata = await producer.send_and_wait(topic, b"event " + key.encode(), key.encode())
        return {"partition": metadata.partition, "offset": metadata.offset}

    with TestClient(app) as client:
        # Created before the first request: auto-creation is off, so the records of the
        # requests below could not be stored otherwise.
        answers = [client.post(f"/events/k{i}").json() for i in range(4)]
    # Started again, the app finds its topic there.
    with TestClient(app) as client:
        answers.append(client.post("/events/k4").json())
    assert len(kafka.partitions(topic)) == 2
    assert _topic_configs(kafka, topic)["retention.ms"] == "600000"
    records = {r.value: r for r in read_back(kafka.bootstrap_servers, topic, expected=5)}
    for i, answer in enumerate(answers):
        record = records[f"event k{i}".encode()]
        assert answer == {"partition": record.partition, "offset": record.offset}


def test_a_lifespan_whose_topic_cannot_be_made_does_not_start(kafka: KafkaBroker) -> None:
    app = FastAPI(
        lifespan=kafka_lifespan(
            bootstrap_servers=kafka.bootstrap_servers, topics=[NewTopic(_name("wide"), 1, 3)]
        )
    )
    with pytest.raises(e.InvalidReplicationFactorError), TestClient(app):
        pass  # pragma: no cover - startup fails


def test_the_command_creates_the_topic_it_produces_to(kafka: KafkaBroker) -> None:
    topic = _name("command")
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }

    def produce(name: str, *args: str, lines: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "aioproducer", "produce", "--bootstrap-server",
             kafka.bootstrap_servers, "--topic", name, "--key-separator", ":", *args],
            input=lines, capture_output=True, text=True, env=environment, timeout=120,
            check=False,
        )  # fmt: skip

    first = produce(
        topic, "--create-topic", "3:1", "--topic-config", "cleanup.policy=compact",
        lines="a:1\nb:2\n",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert f"topic {topic} created with 3 partitions" in first.stderr
    again = produce(topic, "--create-topic", "3", lines="c:3\n")
    assert again.returncode == 0, again.stderr
    assert f"topic {topic} exists already, with 3 partitions" in again.stderr
    assert len(kafka.partitions(topic)) == 3
    assert _topic_configs(kafka, topic)["cleanup.policy"] == "compact"
    records = read_back(kafka.bootstrap_servers, topic, expected=3)
    assert sorted((r.key, r.value) for r in records) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]

    wide = _name("command-wide")
    refused = produce(wide, "--create-topic", "1:3", lines="d:4\n")
    assert refused.returncode == 1
    assert f"cannot create topic {wide}" in refused.stderr
    assert "INVALID_REPLICATION_FACTOR" in refused.stderr
    assert wide not in _listed_topics(kafka)


def test_the_topics_command(kafka: KafkaBroker) -> None:
    topic, checked = _name("topics-command"), _name("topics-validated")
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }

    def topics(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "aioproducer", "topics", "--bootstrap-server",
             kafka.bootstrap_servers, *args],
            capture_output=True, text=True, env=environment, timeout=120, check=False,
        )  # fmt: skip

    created = topics(
        "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1",
        "--config", "cleanup.policy=compact",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"Created topic {topic}.\n"
    assert _topic_configs(kafka, topic)["cleanup.policy"] == "compact"

    again = topics("--create", "--topic", topic, "--partitions", "2")
    assert again.returncode == 1
    assert f"Topic '{topic}' already exists." in again.stderr
    assert topics("--create", "--if-not-exists", "--topic", topic).stdout == (
        f"Topic {topic} exists already.\n"
    )

    validated = topics("--create", "--validate-only", "--topic", checked, "--partitions", "4")
    assert validated.returncode == 0, validated.stderr
    assert "can be created (validated only)" in validated.stdout
    assert checked not in _listed_topics(kafka)

    described = topics("--describe", "--topic", topic, "--include-configs")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0].startswith(f"Topic: {topic}\tTopicId: ")
    assert lines[0].endswith("\tPartitionCount: 2\tReplicationFactor: 1")
    node = kafka.NODE_ID
    for partition in (0, 1):
        assert lines[1 + partition] == (
            f"\tTopic: {topic}\tPartition: {partition}\tLeader: {node}\t"
            f"Replicas: {node}\tIsr: {node}"
        )
    assert "\tcleanup.policy=compact" in lines

    deleted = topics("--delete", "--topic", topic)
    assert deleted.returncode == 0 and deleted.stdout == f"Deleted topic {topic}.\n"
    gone = topics("--delete", "--topic", topic)
    assert gone.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in gone.stderr
    assert topic not in _listed_topics(kafka)
