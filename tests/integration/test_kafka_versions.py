"""Older Apache Kafka brokers: 3.9 (KRaft), 3.6 (KRaft with a static voters list) and 2.8
(on ZooKeeper), beside the suite's 4.4.

The end-to-end, idempotence and transaction suites run on each of them too
(``test_kafka_smoke.py``, ``test_kafka_transactions.py`` and ``test_kafka_sequences.py``
take the older brokers among their parameters). This file holds what differs by version:
the protocol versions the producer speaks to each broker, the transaction protocol it
picks, and what an old broker cannot do, said clearly.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from aioproducer import NewTopic, Producer
from aioproducer.config import ProducerConfig
from aioproducer.errors import UnsupportedVersionError
from aioproducer.net import BrokerConnection
from aioproducer.protocol.messages import (
    AddPartitionsToTxnRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
)
from aioproducer.two_phase import describe_transactions, list_transactions
from tests.support.kafka import KafkaBroker, older_kafka_params

pytestmark = pytest.mark.kafka

_HANG = 60.0

#: What the producer negotiates with each broker, as measured: (Produce, Metadata,
#: InitProducerId, AddPartitionsToTxn). Produce v10 and up carry the new leader's address
#: with NOT_LEADER_OR_FOLLOWER (KIP-951): 3.9 and 4.4 only. AddPartitionsToTxn v4 and up are
#: for brokers only: a producer speaks v3 at most (and none with transactions v2).
NEGOTIATED = {
    "kafka": (12, 13, 5, 3),
    "kafka_3_9": (11, 12, 5, 3),
    "kafka_3_6": (9, 12, 4, 3),
    "kafka_2_8": (9, 11, 4, 3),
}


@pytest.fixture(params=["kafka", *older_kafka_params()])
def each_version(request: pytest.FixtureRequest) -> tuple[str, KafkaBroker]:
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return request.param, broker


async def test_each_broker_is_spoken_to_in_the_versions_it_offers(
    each_version: tuple[str, KafkaBroker],
) -> None:
    name, broker = each_version
    connection = BrokerConnection(
        -1, "127.0.0.1", broker.port, ProducerConfig(bootstrap_servers=broker.bootstrap_servers)
    )
    await asyncio.wait_for(connection.connect(), _HANG)
    try:
        negotiated = tuple(
            connection.negotiate(request)
            for request in (
                ProduceRequest,
                MetadataRequest,
                InitProducerIdRequest,
                AddPartitionsToTxnRequest,
            )
        )
    finally:
        connection.close()
    assert negotiated == NEGOTIATED[name]


async def test_transactions_v2_only_where_the_cluster_finalized_it(
    each_version: tuple[str, KafkaBroker],
) -> None:
    # Brokers before 4.0 finalize no transaction.version: the producer speaks transactions
    # v1 (AddPartitionsToTxn before the first record of each partition, InitProducerId to
    # bump the epoch), and a prepared transaction says so.
    name, broker = each_version
    topic = f"tv-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    async with Producer(
        bootstrap_servers=broker.bootstrap_servers, transactional_id=f"tv-{uuid.uuid4().hex[:8]}"
    ) as producer:
        await producer.begin_transaction()
        await asyncio.wait_for(producer.send_and_wait(topic, b"x"), _HANG)
        prepared = await asyncio.wait_for(producer.prepare_transaction(), _HANG)
        await producer.abort_transaction()
    features = broker.finalized_features()
    assert prepared.transaction_v2 is (features.get("transaction.version", 0) >= 2)
    assert prepared.transaction_v2 is (name == "kafka")


@pytest.mark.parametrize("older", older_kafka_params())
async def test_listing_transactions_needs_kafka_3_0_and_says_so(
    older: str, request: pytest.FixtureRequest
) -> None:
    broker: KafkaBroker = request.getfixturevalue(older)
    listing = list_transactions(bootstrap_servers=broker.bootstrap_servers, timeout=20)
    described = describe_transactions(
        ["none-such"], bootstrap_servers=broker.bootstrap_servers, timeout=20
    )
    if older == "kafka_2_8":
        with pytest.raises(UnsupportedVersionError, match=r"ListTransactions.*Kafka 3\.0"):
            await asyncio.wait_for(listing, _HANG)
        with pytest.raises(UnsupportedVersionError, match=r"DescribeTransactions.*Kafka 3\.0"):
            await asyncio.wait_for(described, _HANG)
    else:
        assert isinstance(await asyncio.wait_for(listing, _HANG), list)
        # An id no coordinator knows is left out.
        assert await asyncio.wait_for(described, _HANG) == {}


async def test_topics_are_created_described_and_deleted_on_each_version(
    each_version: tuple[str, KafkaBroker],
) -> None:
    _, broker = each_version
    name = f"admin-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        created = await asyncio.wait_for(
            producer.admin.create_topics(
                [NewTopic(name, 3, 1, configs={"cleanup.policy": "compact"})]
            ),
            _HANG,
        )
        assert created[name].created
        described = await asyncio.wait_for(
            producer.admin.describe_topics([name], include_configs=True), _HANG
        )
        assert described[name].num_partitions == 3
        assert described[name].configs["cleanup.policy"] == "compact"
        await asyncio.wait_for(producer.admin.delete_topics([name]), _HANG)
