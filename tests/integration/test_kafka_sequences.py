"""Idempotence and transactions on Apache Kafka, the broker whose sequence checks count.

- Batches the broker finds too large (a topic whose ``max.message.bytes`` is about half a
  batch) are split, with five requests in flight to one partition: every record is read
  back once, in the order sent. The parts keep their batch's sequences, so nothing behind
  them overtakes them; a transactional producer commits all the same.
- The fencing direction: a producer that hit an abortable error and bumps its epoch after a
  newer instance with the same ``transactional.id`` started is the one fenced; the newer
  instance goes on. On ``transaction.version`` 1 and 2.

Records are read back with confluent-kafka's consumer (tests.support.readback).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

from aioproducer import Producer, TransactionState
from aioproducer._core.answers import AnswerHandler
from aioproducer.errors import (
    InvalidProducerEpochError,
    ProducerFencedError,
    RecordTooLargeError,
)
from aioproducer.net.connection import BrokerConnection
from aioproducer.protocol.messages import InitProducerIdRequest
from tests.support.kafka import KafkaBroker, older_kafka_params
from tests.support.readback import read_back
from tests.support.wire import Send, intercept_send_for

pytestmark = pytest.mark.kafka

_HANG = 60.0  # only turns a hang into a failure


@pytest.fixture(params=["kafka", "kafka_tv1", *older_kafka_params()])
def any_kafka(request: pytest.FixtureRequest) -> KafkaBroker:
    """Each Kafka node in turn: transaction.version 2 (the default), then 1."""
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return broker


def _topic(broker: KafkaBroker, **configs: object) -> str:
    name = f"seq-{uuid.uuid4().hex[:12]}"
    broker.create_topic(name, 1, **configs)
    return name


def _values(count: int) -> list[bytes]:
    # About 600 bytes each: a 16 KiB batch holds some 26 of them; the topic takes 8 KiB.
    return [b"%06d:" % i + b"x" * 593 for i in range(count)]


_SPLIT_OPTIONS: dict[str, Any] = {
    "linger_ms": 20,
    "batch_size": 16384,
    "max_in_flight_requests_per_connection": 5,
    "compression_type": "none",
}


async def test_split_batches_keep_their_order_with_five_in_flight(
    kafka: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _topic(kafka, max_message_bytes=8192)
    values = _values(600)
    caplog.set_level(logging.INFO, logger="aioproducer.sender")
    async with Producer(bootstrap_servers=kafka.bootstrap_servers, **_SPLIT_OPTIONS) as producer:
        futures = [await producer.send(topic, value, partition=0) for value in values]
        results = await asyncio.wait_for(asyncio.gather(*futures), _HANG)
    assert any("split a too-large batch" in r.getMessage() for r in caplog.records), (
        "no batch was split: the scenario did not happen"
    )
    consumed = read_back(kafka.bootstrap_servers, topic, expected=len(values), extra_wait=1.0)
    assert [r.value for r in consumed] == values, "records were reordered, lost or duplicated"
    assert [m.offset for m in results] == [r.offset for r in consumed]


async def test_a_transaction_with_split_batches_commits(
    any_kafka: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _topic(any_kafka, max_message_bytes=8192)
    values = _values(300)
    caplog.set_level(logging.INFO, logger="aioproducer.sender")
    async with Producer(
        bootstrap_servers=any_kafka.bootstrap_servers,
        transactional_id=f"split-{uuid.uuid4().hex[:8]}",
        **_SPLIT_OPTIONS,
    ) as producer, producer.transaction():
        for value in values:
            await producer.send(topic, value, partition=0)
    assert any("split a too-large batch" in r.getMessage() for r in caplog.records)
    consumed = read_back(
        any_kafka.bootstrap_servers,
        topic,
        expected=len(values),
        isolation_level="read_committed",
        extra_wait=1.0,
    )
    assert [r.value for r in consumed] == values


@pytest.mark.parametrize("broker_name", ["kafka", "kafka_tv1", *older_kafka_params()])
async def test_a_stale_instance_is_the_one_fenced(
    broker_name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stale instance hits an abortable error (a record the topic refuses as too large)
    # and aborts, while a newer instance with the same transactional id starts. With
    # transactions v1 the abort ends with an epoch bump (InitProducerId), held here until
    # the newer instance has committed: naming its id and epoch, the bump is refused
    # (PRODUCER_FENCED), where -1/-1 would have fenced the newer instance instead. With
    # transactions v2 EndTxn bumps the epoch itself, and the stale instance learns it was
    # fenced at its next transaction. Either way the newer instance goes on.
    broker: KafkaBroker = request.getfixturevalue(broker_name)
    topic = _topic(broker, max_message_bytes=2048)
    transactional_id = f"zombie-{uuid.uuid4().hex[:8]}"
    newer_started = asyncio.Event()
    held: list[InitProducerIdRequest] = []

    def hold(conn: BrokerConnection, request: Any, handler: AnswerHandler, send: Send) -> None:
        if (
            isinstance(request, InitProducerIdRequest)
            and request.transactional_id == transactional_id
            and conn._config.client_id == "stale"
            and not held
            and request.producer_id >= 0
        ):
            held.append(request)
            answers = conn._answers
            assert answers is not None

            async def later() -> None:
                await newer_started.wait()
                # Sent now, its answer queued for the waiting sender as a read one is.
                try:
                    answers.push(handler, await conn.request(request), None)
                except BaseException as exc:
                    answers.push(handler, None, exc)
                answers.wake()

            asyncio.get_running_loop().create_task(later())
            return
        send(handler)

    intercept_send_for(monkeypatch, hold)
    bootstrap = broker.bootstrap_servers
    stale = Producer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id, client_id="stale"
    )
    await stale.start()
    try:
        await stale.begin_transaction()
        await stale.send_and_wait(topic, b"from the stale instance")
        too_large = await stale.send(topic, b"x" * 4000)
        with pytest.raises(RecordTooLargeError):
            await asyncio.wait_for(too_large, _HANG)
        aborting = asyncio.get_running_loop().create_task(stale.abort_transaction())
        async with Producer(
            bootstrap_servers=bootstrap, transactional_id=transactional_id, client_id="newer"
        ) as newer:
            async with newer.transaction():
                await newer.send(topic, b"newer-1")
            newer_started.set()
            if broker.finalized_features().get("transaction.version", 0) < 2:
                with pytest.raises(ProducerFencedError):
                    await asyncio.wait_for(aborting, _HANG)
                assert held, "the abort bumped no epoch"
                assert (held[0].producer_id, held[0].producer_epoch) != (-1, -1)
            else:
                await asyncio.wait_for(aborting, _HANG)
                assert not held, "transactions v2 bumps the epoch in EndTxn"
                # The leader refuses the stale epoch (INVALID_PRODUCER_EPOCH, abortable by
                # KIP-588); the abort that follows is fenced by the coordinator.
                with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
                    async with stale.transaction():
                        await stale.send_and_wait(topic, b"from the fenced instance")
                assert stale.transaction_state is TransactionState.FATAL_ERROR
                with pytest.raises(ProducerFencedError):
                    await stale.begin_transaction()
            # The newer instance was not fenced: it goes on.
            async with newer.transaction():
                await newer.send(topic, b"newer-2")
    finally:
        await stale.close()
    consumed = read_back(
        bootstrap, topic, expected=2, isolation_level="read_committed", extra_wait=1.0
    )
    assert [r.value for r in consumed] == [b"newer-1", b"newer-2"]


async def test_records_kafka_refuses_in_a_batch_fail_alone(kafka: KafkaBroker) -> None:
    # KIP-467: a compacted topic refuses records without a key; Kafka names them in the
    # answer, and only they fail, each with its own message. The others are written.
    topic = _topic(kafka, cleanup_policy="compact")
    async with Producer(bootstrap_servers=kafka.bootstrap_servers, linger_ms=50) as producer:
        futures = [
            await producer.send(topic, value, key=key, partition=0)
            for key, value in ((b"k1", b"a"), (None, b"b"), (b"k3", b"c"), (None, b"d"))
        ]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), _HANG
        )
    assert [type(o).__name__ for o in outcomes] == [
        "RecordMetadata",
        "InvalidRecordError",
        "RecordMetadata",
        "InvalidRecordError",
    ]
    assert "record 1 of its batch" in str(outcomes[1])
    consumed = read_back(kafka.bootstrap_servers, topic, expected=2, extra_wait=1.0)
    assert [(r.key, r.value) for r in consumed] == [(b"k1", b"a"), (b"k3", b"c")]


async def test_a_record_too_large_inside_a_transaction_fails_it_and_the_next_commits(
    any_kafka: KafkaBroker,
) -> None:
    # A record over the topic's max.message.bytes batched with small ones: the batch is
    # split until the large record is alone, which fails as too large; the transaction is
    # aborted, and the next one commits.
    topic = _topic(any_kafka, max_message_bytes=2048)
    async with Producer(
        bootstrap_servers=any_kafka.bootstrap_servers,
        transactional_id=f"large-{uuid.uuid4().hex[:8]}",
        linger_ms=50,
    ) as producer:
        with pytest.raises(RecordTooLargeError):
            async with producer.transaction():
                for value in (b"small-1", b"x" * 4000, b"small-2"):
                    await producer.send(topic, value, partition=0)
        async with producer.transaction():
            await producer.send(topic, b"committed", partition=0)
    consumed = read_back(
        any_kafka.bootstrap_servers,
        topic,
        expected=1,
        isolation_level="read_committed",
        extra_wait=1.0,
    )
    assert [r.value for r in consumed] == [b"committed"]
