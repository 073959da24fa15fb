"""A transactional batch that expires in flight dooms its transaction, on Apache Kafka.

The broker answers a Produce request only after writing its records; a client that has
not heard the answer within ``delivery_timeout_ms`` fails those records with
DeliveryTimeoutError, yet the broker has them in the open transaction. So the
transaction must not commit: the records the application was told failed would be read
as committed. The Java client's TransactionManager moves to an abortable error when a
batch fails, and ``commitTransaction()`` then throws; ``abortTransaction()`` works, and
the producer goes on with the next transaction.

The broker advertises a :class:`~tests.support.kafka_proxy.KafkaProxy` in front of it,
which holds back the broker's Produce answers (and only those: the coordinator's answers
flow). Two ways the held answer ends, after the batch expired:

- ``late answer``: the proxy forwards it; the client hears a success for records it
  already failed.
- ``connection cut``: the proxy closes the connection instead; the answer never comes.

The batch that expires is sent one second after it was made (``max_in_flight 1``: it
waits behind an earlier batch whose answer the proxy holds that long), so it expires
about a second before its request times out and the client cuts the connection itself:
that second is when the late answer arrives.

Records are read back with confluent-kafka's consumer (tests.support.readback), reading
committed data: it must see the second transaction's records and none of the first's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from aioproducer import Producer, TransactionState
from aioproducer.errors import DeliveryTimeoutError, KafkaError
from tests.support.kafka import PROXIED_LISTENER, KafkaBroker, kafka_available
from tests.support.kafka_proxy import KafkaProxy, free_port
from tests.support.readback import read_back

pytestmark = pytest.mark.kafka

#: The ``new_topic`` fixture: ``new_topic(broker, partitions=1, **configs) -> name``.
NewTopic = Callable[..., str]

_DELIVERY_TIMEOUT_MS = 3000
# How long the proxy holds the first batch's answer: the second batch waits that long to
# be sent, so it expires that long before its request times out.
_FIRST_ANSWER_HELD = 1.0
# Generous: the commit must fail about at once (it has nothing left to wait for); this
# only keeps a commit that hangs from passing for one that failed.
_COMMIT_WITHIN = 20.0
# Only turns a hang into a failure.
_HANG = 60.0


@pytest.fixture(scope="module", params=[2, 1], ids=["transactions-v2", "transactions-v1"])
def proxied_kafka(request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    """A Kafka node formatted with ``transaction.version`` 2, then 1, whose
    :data:`PROXIED_LISTENER` advertises a port for a :class:`KafkaProxy` to listen on."""
    reason = kafka_available()
    if reason is not None:
        pytest.skip(reason)
    version: int = request.param
    with KafkaBroker(transaction_version=version, proxy_port=free_port()) as broker:
        assert broker.finalized_features()["transaction.version"] == version
        yield broker


def _proxy(broker: KafkaBroker) -> KafkaProxy:
    host, port = broker.address(PROXIED_LISTENER).rsplit(":", 1)
    assert broker.proxy_port is not None
    return KafkaProxy((host, int(port)), host=broker.host, port=broker.proxy_port)


def _state(producer: Producer) -> TransactionState | None:
    # A call, not the property: mypy would keep the state an assert narrowed it to.
    return producer.transaction_state


@pytest.mark.parametrize("ending", ["late answer", "connection cut"])
async def test_a_batch_expired_in_flight_makes_the_commit_fail(
    proxied_kafka: KafkaBroker, new_topic: NewTopic, ending: str
) -> None:
    topic = new_topic(proxied_kafka)
    transactional_id = f"expired-in-flight-{uuid.uuid4().hex[:8]}"
    async with (
        _proxy(proxied_kafka) as proxy,
        Producer(
            bootstrap_servers=proxy.bootstrap_servers,
            transactional_id=transactional_id,
            client_id=transactional_id,
            linger_ms=0,
            delivery_timeout_ms=_DELIVERY_TIMEOUT_MS,
            request_timeout_ms=_DELIVERY_TIMEOUT_MS,  # the least delivery_timeout_ms allows
            max_in_flight_requests_per_connection=1,
        ) as producer,
    ):
        await producer.begin_transaction()
        proxy.hold_produce_answers()
        first = await producer.send(topic, b"first", partition=0)
        await asyncio.wait_for(proxy.wait_held(1), _HANG)
        # A batch of its own, sent once the first one's answer comes.
        expiring = [await producer.send(topic, b"expiring-%d" % i, partition=0) for i in range(2)]
        await asyncio.sleep(_FIRST_ANSWER_HELD)
        proxy.release()
        proxy.hold_produce_answers()
        await asyncio.wait_for(first, _HANG)
        await asyncio.wait_for(proxy.wait_held(2), _HANG)  # the broker wrote the batch

        outcomes = await asyncio.wait_for(asyncio.gather(*expiring, return_exceptions=True), _HANG)
        assert all(isinstance(outcome, DeliveryTimeoutError) for outcome in outcomes), outcomes
        if ending == "late answer":
            assert proxy.release() >= 1, "the client closed the connection before the answer"
        else:
            assert await proxy.cut() == 1

        began = time.monotonic()
        with pytest.raises(KafkaError) as refused:
            await asyncio.wait_for(producer.commit_transaction(), _COMMIT_WITHIN)
        commit_seconds = time.monotonic() - began
        assert _state(producer) is TransactionState.ABORTABLE_ERROR, (
            f"commit_transaction() raised {refused.value!r} after {commit_seconds:.1f} s, "
            f"leaving the producer {_state(producer)}"
        )
        await asyncio.wait_for(producer.abort_transaction(), _HANG)

        async with producer.transaction():
            for i in range(3):
                await producer.send(topic, b"next-%d" % i, partition=0)
        assert _state(producer) is TransactionState.READY

    committed = read_back(
        proxied_kafka.bootstrap_servers,
        topic,
        expected=3,
        isolation_level="read_committed",
        extra_wait=0.3,
    )
    assert [record.value for record in committed] == [b"next-0", b"next-1", b"next-2"]
    # The broker did write the expired batch: only the abort keeps it from being read.
    written = read_back(
        proxied_kafka.bootstrap_servers,
        topic,
        expected=6,
        isolation_level="read_uncommitted",
        extra_wait=0.3,
    )
    assert [record.value for record in written] == [
        b"first",
        b"expiring-0",
        b"expiring-1",
        b"next-0",
        b"next-1",
        b"next-2",
    ]
