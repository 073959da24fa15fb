"""The topic administration API offline: ``NewTopic``'s checks, the arguments ``TopicAdmin``
refuses, and ``InMemoryProducer.admin``, which follows a broker's rules on its own topics.

Requests on the wire are in test_admin_protocol.py; their routing over a producer's
connections (the controller, NOT_CONTROLLER, lost answers) in test_admin_routing.py; a real
Kafka broker in tests/integration/test_kafka_admin.py.
"""

from __future__ import annotations

import uuid

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from aioproducer import (
    NewTopic,
    PartitionDescription,
    Producer,
    TopicAdmin,
    TopicCreation,
    TopicDescription,
)
from aioproducer import errors as e
from aioproducer.cli import main
from aioproducer.integrations.fastapi import ProducerDep, get_producer, kafka_lifespan
from aioproducer.testing import InMemoryProducer

# ---- NewTopic ----------------------------------------------------------------------------


def test_a_new_topic_keeps_what_it_was_given() -> None:
    topic = NewTopic(
        "orders",
        num_partitions=6,
        replication_factor=3,
        configs={"cleanup.policy": "compact", "retention.ms": 86_400_000, "preallocate": True},
    )
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("orders", 6, 3)
    # Ints and bools are written as Kafka reads them.
    assert dict(topic.configs) == {
        "cleanup.policy": "compact",
        "retention.ms": "86400000",
        "preallocate": "true",
    }
    creatable = topic._creatable()
    assert (creatable.num_partitions, creatable.replication_factor) == (6, 3)
    # The broker's defaults travel as -1.
    defaults = NewTopic("orders")._creatable()
    assert (defaults.num_partitions, defaults.replication_factor) == (-1, -1)


def test_a_new_topic_cannot_be_changed_through_its_configs() -> None:
    given = {"cleanup.policy": "compact"}
    topic = NewTopic("orders", configs=given)
    given["cleanup.policy"] = "delete"
    assert topic.configs["cleanup.policy"] == "compact"
    with pytest.raises(TypeError):
        topic.configs["cleanup.policy"] = "delete"  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "empty"),
        ("has space", "illegal"),
        ("..", "cannot be"),
        ("x" * 250, "249"),
        (b"bytes", "must be a str"),
    ],
)
def test_an_illegal_name_is_refused_before_anything_is_sent(name: object, match: str) -> None:
    with pytest.raises(e.InvalidTopicError, match=match):
        NewTopic(name)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"num_partitions": 0}, e.InvalidPartitionsError, "from 1 to"),
        ({"num_partitions": -1}, e.InvalidPartitionsError, "or None for the broker's default"),
        ({"num_partitions": 1 << 31}, e.InvalidPartitionsError, "from 1 to 2147483647"),
        ({"num_partitions": "3"}, e.InvalidPartitionsError, "must be an int or None, not str"),
        ({"num_partitions": True}, e.InvalidPartitionsError, "not bool"),
        ({"replication_factor": 0}, e.InvalidReplicationFactorError, "from 1 to 32767"),
        ({"replication_factor": 1 << 15}, e.InvalidReplicationFactorError, "from 1 to"),
        ({"replication_factor": 1.0}, e.InvalidReplicationFactorError, "not float"),
        ({"configs": [("a", "b")]}, e.InvalidConfigError, "must be a mapping"),
        ({"configs": {"a": 1.5}}, e.InvalidConfigError, "config 'a' must be a str"),
        ({"configs": {"a": None}}, e.InvalidConfigError, "not NoneType"),
        ({"configs": {"": "x"}}, e.InvalidConfigError, "non-empty str"),
        ({"replica_assignment": {}}, e.InvalidReplicaAssignmentError, "non-empty mapping"),
        (
            {"replica_assignment": {0: [1]}, "num_partitions": 1},
            e.InvalidReplicaAssignmentError,
            "not both",
        ),
        ({"replica_assignment": {1: [1]}}, e.InvalidReplicaAssignmentError, "partitions 0 to 0"),
        ({"replica_assignment": {0: [1, 1]}}, e.InvalidReplicaAssignmentError, "broker twice"),
        ({"replica_assignment": {0: []}}, e.InvalidReplicaAssignmentError, "one or more"),
        ({"replica_assignment": {0: "12"}}, e.InvalidReplicaAssignmentError, "list of broker"),
        ({"replica_assignment": {0: [-1]}}, e.InvalidReplicaAssignmentError, "ints from 0"),
    ],
)
def test_bad_counts_configs_and_assignments_are_refused_clearly(
    options: dict[str, object], error: type[e.KafkaError], match: str
) -> None:
    with pytest.raises(error, match=match) as raised:
        NewTopic("orders", **options)  # type: ignore[arg-type]
    assert (
        "orders" in str(raised.value)
        or "num_partitions" in str(raised.value)
        or ("replication_factor" in str(raised.value))
    )


def test_a_replica_assignment_sets_the_counts() -> None:
    topic = NewTopic("orders", replica_assignment={1: [2, 3], 0: [1, 2]})
    creatable = topic._creatable()
    assert (creatable.num_partitions, creatable.replication_factor) == (-1, -1)
    assert [(a.partition_index, a.broker_ids) for a in creatable.assignments] == [
        (0, [1, 2]),
        (1, [2, 3]),
    ]


# ---- what TopicAdmin refuses --------------------------------------------------------------


async def test_the_admin_needs_a_running_producer() -> None:
    producer = Producer(bootstrap_servers="localhost:9092")
    with pytest.raises(e.IllegalStateError, match="not started"):
        _ = producer.admin
    memory = InMemoryProducer()
    with pytest.raises(e.IllegalStateError, match="not started"):
        _ = memory.admin
    await memory.start()
    admin = memory.admin
    await memory.close()
    with pytest.raises(e.ProducerClosedError, match="cannot administer topics"):
        await admin.create_topics([NewTopic("orders")])
    with pytest.raises(e.ProducerClosedError):
        _ = memory.admin


async def test_arguments_that_are_not_lists_of_topics_are_refused() -> None:
    async with InMemoryProducer() as producer:
        admin = producer.admin
        with pytest.raises(e.InvalidArgumentTypeError, match=r"write \['orders'\]"):
            await admin.describe_topics("orders")
        with pytest.raises(e.InvalidArgumentTypeError, match=r"write \['orders'\]"):
            await admin.delete_topics("orders")
        with pytest.raises(e.InvalidArgumentTypeError, match="not a single NewTopic"):
            await admin.create_topics(NewTopic("orders"))  # type: ignore[arg-type]
        with pytest.raises(e.InvalidArgumentTypeError, match="takes NewTopic objects, not str"):
            await admin.ensure_topics(["orders"])  # type: ignore[list-item]
        with pytest.raises(e.InvalidArgumentError, match="'orders' is named more than once"):
            await admin.create_topics([NewTopic("orders"), NewTopic("orders", 3)])
        with pytest.raises(e.InvalidArgumentError, match="named more than once"):
            await admin.delete_topics(["orders", "orders"])
        with pytest.raises(e.InvalidTopicError):
            await admin.describe_topics(["not a topic"])
        with pytest.raises(e.InvalidArgumentError, match="positive number of seconds"):
            await admin.describe_topics(["orders"], timeout=0)
        with pytest.raises(e.InvalidArgumentTypeError, match="timeout must be"):
            await admin.describe_topics(["orders"], timeout="5")  # type: ignore[arg-type]
        # Nothing asked, nothing done.
        assert await admin.create_topics([]) == {}
        assert await admin.describe_topics([]) == {}
        assert producer.topics == {}


# ---- InMemoryProducer.admin --------------------------------------------------------------


async def test_in_memory_topics_are_created_described_and_deleted() -> None:
    async with InMemoryProducer(auto_create_topics=False, default_partitions=2) as producer:
        admin = producer.admin
        assert isinstance(admin, TopicAdmin)
        created = await admin.create_topics(
            [NewTopic("orders", 3, 2, {"cleanup.policy": "compact"}), NewTopic("audit")]
        )
        assert list(created) == ["orders", "audit"]
        orders = created["orders"]
        assert isinstance(orders, TopicCreation)
        assert (orders.created, orders.error, orders.num_partitions) == (True, None, 3)
        assert orders.replication_factor == 2
        assert isinstance(orders.topic_id, uuid.UUID)
        assert dict(orders.configs) == {"cleanup.policy": "compact"}
        assert created["audit"].num_partitions == 2  # default_partitions
        assert producer.topics == {"orders": 3, "audit": 2}

        described = await admin.describe_topics(["orders"], include_configs=True)
        description = described["orders"]
        assert isinstance(description, TopicDescription)
        assert description.topic_id == orders.topic_id
        assert (description.num_partitions, description.replication_factor) == (3, 2)
        assert description.partitions[2] == PartitionDescription(2, 0, (0, 1), (0, 1), (), 0)
        assert dict(description.configs) == {"cleanup.policy": "compact"}
        assert not description.internal

        metadata = await producer.send_and_wait("orders", b"x", partition=2)
        assert metadata.offset == 0
        assert await admin.delete_topics(["orders"]) == {"orders": None}
        assert producer.topics == {"audit": 2}
        with pytest.raises(e.UnknownTopicOrPartitionError):
            await producer.send("orders", b"y")
        with pytest.raises(e.UnknownTopicOrPartitionError, match="'orders' does not exist"):
            await admin.describe_topics(["orders"])
        # Made again, the topic starts from offset 0; the records stored stay readable.
        await admin.create_topics([NewTopic("orders", 3)])
        assert (await producer.send_and_wait("orders", b"z", partition=2)).offset == 0
        assert [r.value for r in producer.records("orders")] == [b"x", b"z"]


async def test_in_memory_errors_are_kafkas() -> None:
    async with InMemoryProducer(topics={"orders": 3}) as producer:
        admin = producer.admin
        with pytest.raises(e.TopicAlreadyExistsError, match="Topic 'orders' already exists"):
            await admin.create_topics([NewTopic("orders", 3)])
        # Each topic's own outcome, when asked not to raise.
        results = await admin.create_topics(
            [NewTopic("orders"), NewTopic("fresh")], raise_errors=False
        )
        assert isinstance(results["orders"].error, e.TopicAlreadyExistsError)
        assert not results["orders"].created
        assert results["fresh"].created and results["fresh"].error is None
        # Raised, the first error names how the others fared.
        with pytest.raises(e.TopicAlreadyExistsError, match=r"created: other"):
            await admin.create_topics([NewTopic("orders"), NewTopic("other")])
        with pytest.raises(e.UnknownTopicOrPartitionError, match="'gone' does not exist"):
            await admin.delete_topics(["gone"])
        outcome = await admin.delete_topics(["gone", "other"], raise_errors=False)
        assert isinstance(outcome["gone"], e.UnknownTopicOrPartitionError)
        assert outcome["other"] is None


async def test_in_memory_validate_only_creates_nothing() -> None:
    async with InMemoryProducer(auto_create_topics=False) as producer:
        result = await producer.admin.create_topics([NewTopic("orders", 4)], validate_only=True)
        assert not result["orders"].created and result["orders"].error is None
        assert result["orders"].num_partitions == 4
        assert result["orders"].topic_id is None
        assert producer.topics == {}


async def test_in_memory_ensure_topics_accepts_what_exists() -> None:
    async with InMemoryProducer(topics={"orders": 3}, auto_create_topics=False) as producer:
        admin = producer.admin
        results = await admin.ensure_topics([NewTopic("orders", 3), NewTopic("audit", 1)])
        assert not results["orders"].created and results["orders"].error is None
        assert results["orders"].num_partitions == 3
        assert results["audit"].created
        # Partition counts that differ: a warning, or an error when required.
        again = await admin.ensure_topics([NewTopic("orders", 6)])
        assert again["orders"].num_partitions == 3
        with pytest.raises(e.InvalidPartitionsError, match="exists with 3 partition"):
            await admin.ensure_topics([NewTopic("orders", 6)], require_partitions=True)
        assert producer.topics == {"orders": 3, "audit": 1}


# ---- the FastAPI lifespan and the command, without a broker ---------------------------------


def test_the_lifespan_creates_its_topics_on_an_in_memory_producer() -> None:
    app = FastAPI(
        lifespan=kafka_lifespan(
            bootstrap_servers="localhost:9092",
            producer_factory=InMemoryProducer,
            auto_create_topics=False,  # an InMemoryProducer option: no topic on first use
            topics=[NewTopic("orders", num_partitions=3)],
        )
    )

    @app.post("/orders/{key}")
    async def order(key: str, producer: ProducerDep) -> dict[str, int]:
        metadata = await producer.send_and_wait("orders", b"order", key.encode())
        return {"partition": metadata.partition}

    with TestClient(app) as client:
        producer = app.state.producer
        assert isinstance(producer, InMemoryProducer)
        assert producer.topics == {"orders": 3}
        assert 0 <= client.post("/orders/o-1").json()["partition"] < 3

    # On a replacement producer too; a topic it has already is left as it is.
    replacement = InMemoryProducer(topics={"orders": 5}, auto_create_topics=False)
    app.dependency_overrides[get_producer] = lambda: replacement
    with TestClient(app):
        assert replacement.topics == {"orders": 5}


def test_the_lifespan_takes_only_new_topics() -> None:
    with pytest.raises(e.InvalidArgumentTypeError, match="NewTopic objects, not str"):
        kafka_lifespan(bootstrap_servers="localhost:9092", topics=["orders"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--create-topic", "3:x"], "expected PARTITIONS or PARTITIONS:REPLICATION"),
        (["--create-topic", "3:1:1"], "expected PARTITIONS or PARTITIONS:REPLICATION"),
        (["--create-topic", "-1"], "expected PARTITIONS or PARTITIONS:REPLICATION"),
        (["--create-topic", "0"], "num_partitions must be from 1"),
        (["--create-topic", "1:0"], "replication_factor must be from 1"),
        (["--topic-config", "cleanup.policy=compact"], "configures the topic --create-topic"),
        (["--create-topic", "1", "--topic-config", "cleanup.policy"], "expected NAME=VALUE"),
    ],
)
def test_the_commands_topic_options_are_checked_before_anything_starts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # An address nothing listens on: a usage error must come before any connection.
    assert main(["produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--describe", "--topic", "t"], "topics needs a cluster"),
        (["--bootstrap-server", "127.0.0.1:1", "--topic", "t"], "one of the arguments"),
        (["--bootstrap-server", "127.0.0.1:1", "--describe", "--topic", "a b"], "illegal"),
        (
            ["--bootstrap-server", "127.0.0.1:1", "--delete", "--topic", "t", "--topic", "t"],
            "more than once",
        ),
        (
            ["--bootstrap-server", "127.0.0.1:1", "--delete", "--topic", "t", "--partitions", "2"],
            "--partitions goes with --create",
        ),
        (
            ["--bootstrap-server", "127.0.0.1:1", "--create", "--topic", "t", "--partitions", "0"],
            "num_partitions must be from 1",
        ),
        (
            ["--bootstrap-server", "127.0.0.1:1", "--create", "--topic", "t", "--config", "x"],
            "expected NAME=VALUE",
        ),
        (
            [
                "--bootstrap-server",
                "127.0.0.1:1",
                "--create",
                "--topic",
                "t",
                "--if-not-exists",
                "--validate-only",
            ],
            "do not go together",
        ),
        (
            ["--bootstrap-server", "127.0.0.1:1", "--create", "--topic", "t", "--include-configs"],
            "goes with --describe",
        ),
    ],
)
def test_the_topics_commands_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topics", *args]) == 2
    assert message in capsys.readouterr().err
