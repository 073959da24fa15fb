"""Transactions on Apache Kafka, on both transaction protocols: the ``kafka`` node runs
transaction.version 2 (KIP-890: partitions join a transaction with their first Produce
v12, EndTxn v5 bumps the epoch), ``kafka_tv1`` transaction.version 1.

- A transaction over several partitions of two topics commits or aborts as one: consumers
  reading committed data see all of it or none of it, though an aborted transaction's
  records were written (a read_uncommitted consumer sees them), and the transaction after
  an abort is readable on every partition, including one only the aborted transaction used.
- Zombie fencing: a new instance with the same transactional id aborts the open
  transaction of the old one, whose records are then never read as committed; the old
  instance's next call fails as the Java client's does, its transaction ends in
  ProducerFencedError, and the new instance commits.
- send_offsets_to_transaction with a real consumer group (KIP-447 group metadata): the
  offsets are committed with the transaction and dropped with an abort; the group
  coordinator refuses a generation other than the group's.
- A transaction left open past ``transaction_timeout_ms`` is aborted by the coordinator;
  the producer's next call raises what the Java client raises, and on transactions v2 the
  producer goes on after abort_transaction().
- Which protocol the producer spoke, from the requests it wrote: AddPartitionsToTxn and
  AddOffsetsToTxn only on transaction.version 1, Produce v12+ / EndTxn v5+ /
  TxnOffsetCommit v5+ only on 2.

The cases where the Java client (kafka-clients 4.2) reports a particular error were run
with it on the same broker versions; the tests expect the same error classes.

Records are read back with confluent-kafka's consumer (tests.support.readback), an
independent client.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import OffsetSpec

from aioproducer import ConsumerGroupMetadata, Producer, TransactionState
from aioproducer._core.answers import AnswerHandler
from aioproducer.errors import (
    IllegalGenerationError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from aioproducer.net.connection import BrokerConnection
from aioproducer.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from tests.support.kafka import KafkaBroker, older_kafka_params
from tests.support.readback import ConsumedRecord, read_back
from tests.support.wire import Send, intercept_send_for

pytestmark = pytest.mark.kafka

#: The ``new_topic`` fixture: ``new_topic(broker, partitions=1, **configs) -> name``.
NewTopic = Callable[..., str]
TopicPartition = tuple[str, int]

# Only turns a hang into a failure.
_HANG = 60.0
# How long the coordinator may take to abort a timed-out transaction: the timeout, plus
# its scan interval (0.5 s on the test brokers, 10 s by Kafka's default).
_ABORT_DEADLINE = 30.0


@pytest.fixture(params=["kafka", "kafka_tv1", *older_kafka_params()])
def any_kafka(request: pytest.FixtureRequest) -> KafkaBroker:
    """Each Kafka node in turn: transaction.version 2 (the default), then 1."""
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return broker


def _transactions_v2(broker: KafkaBroker) -> bool:
    # Brokers before 4.0 finalize no transaction.version: transactions v1.
    return bool(broker.finalized_features().get("transaction.version", 0) >= 2)


def _transactional_id(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def _by_partition(records: list[ConsumedRecord]) -> dict[TopicPartition, list[bytes | None]]:
    by_partition: dict[TopicPartition, list[bytes | None]] = {}
    for record in records:
        by_partition.setdefault((record.topic, record.partition), []).append(record.value)
    return by_partition


def _read(
    broker: KafkaBroker, expected: dict[str, int], isolation_level: str
) -> dict[TopicPartition, list[bytes | None]]:
    """What a consumer with ``isolation_level`` reads, by partition: ``{topic: records
    expected}`` (a little longer is read, to catch any beyond them)."""
    records: list[ConsumedRecord] = []
    for topic, count in expected.items():
        records += read_back(
            broker.bootstrap_servers,
            topic,
            expected=count,
            isolation_level=isolation_level,
            extra_wait=0.3,
        )
    return _by_partition(records)


# -- what the producer wrote on the wire ---------------------------------------------------


@dataclass(frozen=True)
class _Sent:
    client_id: str | None
    request: Any
    version: int


class _Wire:
    """Every request aioproducer's connections write, with the version it was encoded in."""

    def __init__(self) -> None:
        self.sent: list[_Sent] = []

    def of(self, client_id: str) -> list[_Sent]:
        return [sent for sent in self.sent if sent.client_id == client_id]

    def transactions(self, client_id: str) -> list[list[_Sent]]:
        """The requests of ``client_id`` cut after each EndTxn: one list per transaction."""
        segments: list[list[_Sent]] = [[]]
        for sent in self.of(client_id):
            segments[-1].append(sent)
            if isinstance(sent.request, EndTxnRequest):
                segments.append([])
        return segments[:-1]


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Wire]:
    recorder = _Wire()

    def record(conn: BrokerConnection, request: Any, handler: AnswerHandler, send: Send) -> None:
        send(handler)  # when it raises, nothing went out
        used = conn.negotiate(type(request), request.highest_version())
        recorder.sent.append(_Sent(conn._config.client_id, request, used))

    intercept_send_for(monkeypatch, record)
    yield recorder


def _produced_partitions(segment: list[_Sent]) -> set[TopicPartition]:
    return {
        (topic.name, partition.index)
        for sent in segment
        if isinstance(sent.request, ProduceRequest)
        for topic in sent.request.topics
        for partition in topic.partitions
    }


def _added_partitions(segment: list[_Sent]) -> set[TopicPartition]:
    return {
        (topic.name, partition)
        for sent in segment
        if isinstance(sent.request, AddPartitionsToTxnRequest)
        for transaction in sent.request.transactions
        for topic in transaction.topics
        for partition in topic.partitions
    }


def _versions(segment: list[_Sent], request_type: type) -> list[int]:
    return [sent.version for sent in segment if isinstance(sent.request, request_type)]


def _check_transaction_protocol(
    segment: list[_Sent], partitions: set[TopicPartition], committed: bool, v2: bool
) -> None:
    """One transaction's requests: its partitions were added the way ``v2`` says, and its
    Produce and EndTxn requests went in that protocol's versions."""
    assert _produced_partitions(segment) == partitions
    produce_versions = _versions(segment, ProduceRequest)
    end_txn = [sent for sent in segment if isinstance(sent.request, EndTxnRequest)]
    assert [sent.request.committed for sent in end_txn] == [committed]
    if v2:
        # The partition leaders add the partitions (Produce v12); EndTxn v5 bumps the epoch.
        assert _added_partitions(segment) == set(), "AddPartitionsToTxn sent on transactions v2"
        assert min(produce_versions) >= 12, produce_versions
        assert end_txn[0].version >= 5
    else:
        assert _added_partitions(segment) == partitions
        assert max(produce_versions) <= 11, produce_versions
        assert end_txn[0].version <= 4


# -- atomic over partitions and topics ------------------------------------------------------


async def test_a_transaction_over_two_topics_commits_or_aborts_as_one(
    any_kafka: KafkaBroker, new_topic: NewTopic, wire: _Wire
) -> None:
    first_topic, second_topic = new_topic(any_kafka, partitions=3), new_topic(any_kafka, 2)
    everywhere = [(first_topic, p) for p in range(3)] + [(second_topic, p) for p in range(2)]
    # The first transaction leaves the second topic's partition 1 out: only the aborted
    # transaction writes there before the last one.
    plan: list[tuple[str, list[TopicPartition], bool]] = [
        ("committed-1", everywhere[:4], True),
        ("aborted", everywhere, False),
        ("committed-2", everywhere, True),
    ]

    def records(label: str, partitions: list[TopicPartition]) -> list[tuple[str, int, bytes]]:
        return [
            (t, p, f"{label}-{t[-8:]}-{p}-{i}".encode()) for t, p in partitions for i in range(3)
        ]

    client_id = _transactional_id("atomic")
    async with Producer(
        bootstrap_servers=any_kafka.bootstrap_servers,
        transactional_id=client_id,
        client_id=client_id,
        linger_ms=5,
    ) as producer:
        for label, partitions, commit in plan:
            await producer.begin_transaction()
            for topic, partition, value in records(label, partitions):
                await producer.send(topic, value, partition=partition)
            if commit:
                await asyncio.wait_for(producer.commit_transaction(), _HANG)
            else:
                await asyncio.wait_for(producer.flush(), _HANG)  # in the log before the abort
                await asyncio.wait_for(producer.abort_transaction(), _HANG)

    def expected(labels: set[str]) -> dict[TopicPartition, list[bytes | None]]:
        by_partition: dict[TopicPartition, list[bytes | None]] = {}
        for label, partitions, _commit in plan:
            for topic, partition, value in records(label, partitions):
                if label in labels:
                    by_partition.setdefault((topic, partition), []).append(value)
        return by_partition

    committed = expected({"committed-1", "committed-2"})
    counts = {first_topic: 18, second_topic: 9}
    assert _read(any_kafka, counts, "read_committed") == committed, (
        "a read_committed consumer saw aborted records, or missed committed ones"
    )
    written = expected({"committed-1", "aborted", "committed-2"})
    counts = {first_topic: 27, second_topic: 15}
    assert _read(any_kafka, counts, "read_uncommitted") == written

    transactions = wire.transactions(client_id)
    assert len(transactions) == len(plan)
    v2 = _transactions_v2(any_kafka)
    for segment, (_label, partitions, commit) in zip(transactions, plan, strict=True):
        _check_transaction_protocol(segment, set(partitions), commit, v2)


# -- zombie fencing -------------------------------------------------------------------------


@pytest.mark.parametrize("next_call", ["send", "send to a new partition", "commit"])
async def test_a_new_instance_aborts_the_open_transaction_of_the_old_one(
    any_kafka: KafkaBroker, new_topic: NewTopic, next_call: str
) -> None:
    # The old instance has written records in an open transaction when a new one with the
    # same transactional id starts: InitProducerId bumps the epoch and aborts that
    # transaction. What the old instance hears next is what the Java client hears:
    # - a send to a partition of the transaction: the leader refuses the old epoch
    #   (INVALID_PRODUCER_EPOCH: abortable), then the coordinator the abort
    #   (PRODUCER_FENCED);
    # - a send to a new partition: the same on transactions v2 (the leader adds the
    #   partition); on v1 AddPartitionsToTxn is fenced at once;
    # - a commit: fenced at once.
    # Either way the transaction ends in ProducerFencedError.
    topic = new_topic(any_kafka, partitions=3)
    v2 = _transactions_v2(any_kafka)
    transactional_id = _transactional_id("zombie")
    bootstrap = any_kafka.bootstrap_servers
    old = Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    new = Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    await old.start()
    try:
        with pytest.raises(ProducerFencedError) as fenced:
            async with old.transaction():
                for partition in (0, 1):
                    await asyncio.wait_for(
                        old.send_and_wait(topic, b"old-%d" % partition, partition=partition),
                        _HANG,
                    )
                await asyncio.wait_for(new.start(), _HANG)
                if next_call != "commit":
                    partition = 2 if next_call == "send to a new partition" else 0
                    refused = (
                        ProducerFencedError
                        if partition == 2 and not v2
                        else InvalidProducerEpochError
                    )
                    with pytest.raises(refused):
                        await asyncio.wait_for(
                            old.send_and_wait(topic, b"old-late", partition=partition), _HANG
                        )
                    assert old.transaction_state is (
                        TransactionState.FATAL_ERROR
                        if refused is ProducerFencedError
                        else TransactionState.ABORTABLE_ERROR
                    )
        assert "PRODUCER_FENCED" in str(fenced.value)
        if next_call == "send":
            # The commit at the end of the block failed first (abortable); its abort was
            # fenced.
            assert isinstance(fenced.value.__cause__, InvalidProducerEpochError)
        assert old.transaction_state is TransactionState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            await old.begin_transaction()
        async with new.transaction():
            for partition in (0, 1):
                await new.send(topic, b"new-%d" % partition, partition=partition)
    finally:
        await old.close()
        await new.close()

    committed = _read(any_kafka, {topic: 2}, "read_committed")
    assert committed == {(topic, 0): [b"new-0"], (topic, 1): [b"new-1"]}
    written = _read(any_kafka, {topic: 4}, "read_uncommitted")
    assert written == {(topic, 0): [b"old-0", b"new-0"], (topic, 1): [b"old-1", b"new-1"]}


# -- offsets in the transaction, with a real consumer group ---------------------------------


def _consume_in_group(
    bootstrap: str, topic: str, group: str, count: int
) -> tuple[confluent_kafka.Consumer, list[Any]]:
    """A consumer in ``group`` (classic protocol, subscribed to ``topic``) and the first
    ``count`` records it read; nothing committed."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.monotonic() + 30.0
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            messages.append(message)
    assert len(messages) == count, f"the group consumer read {len(messages)} of {count}"
    return consumer, messages


def _group_metadata(consumer: confluent_kafka.Consumer, group: str) -> ConsumerGroupMetadata:
    """The consumer's group generation and member id. confluent-kafka hands them over only
    as librdkafka's serialized group metadata: ``CGMDv2:``, the generation (int32, native
    byte order), then the group id and member id, each NUL-terminated."""
    data = consumer.consumer_group_metadata()
    assert isinstance(data, bytes) and data.startswith(b"CGMDv2:"), data
    generation = int.from_bytes(data[7:11], sys.byteorder, signed=True)
    group_id, member_id = data[11:].split(b"\x00")[:2]
    assert group_id.decode() == group
    assert member_id.decode() == consumer.memberid() != ""
    assert generation >= 1
    return ConsumerGroupMetadata(group, generation, member_id.decode())


def _committed(consumer: confluent_kafka.Consumer, topic: str) -> dict[TopicPartition, int]:
    """The group's committed offsets of ``topic``'s partitions 0 and 1 (OFFSET_INVALID:
    none), as the group coordinator answers an OffsetFetch."""
    partitions = [confluent_kafka.TopicPartition(topic, p) for p in (0, 1)]
    return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(partitions, 10)}


def _wait_for_committed(
    consumer: confluent_kafka.Consumer, topic: str, offsets: dict[TopicPartition, int]
) -> None:
    """Wait until the group's committed offsets of ``topic`` are ``offsets``: a
    transaction's offsets count once its marker reaches the offsets topic, which the
    coordinator writes after answering the commit."""
    deadline = time.monotonic() + 10.0
    while (committed := _committed(consumer, topic)) != offsets:
        assert time.monotonic() < deadline, f"committed offsets {committed}, not {offsets}"
        time.sleep(0.1)


async def test_offsets_sent_to_a_transaction_commit_with_it(
    any_kafka: KafkaBroker, new_topic: NewTopic, wire: _Wire
) -> None:
    source, sink = new_topic(any_kafka, partitions=2), new_topic(any_kafka, partitions=2)
    bootstrap = any_kafka.bootstrap_servers
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as feeder:
        inputs = [await feeder.send(source, b"in-%d" % i, partition=i % 2) for i in range(6)]
        await asyncio.wait_for(asyncio.gather(*inputs), _HANG)

    group = f"txn-group-{uuid.uuid4().hex[:8]}"
    consumer, messages = await asyncio.to_thread(_consume_in_group, bootstrap, source, group, 6)
    try:
        metadata = _group_metadata(consumer, group)
        offsets: dict[TopicPartition, int] = {}
        for message in messages:
            tp = (message.topic(), message.partition())
            offsets[tp] = max(offsets.get(tp, 0), message.offset() + 1)
        assert offsets == {(source, 0): 3, (source, 1): 3}
        nothing = dict.fromkeys(offsets, confluent_kafka.OFFSET_INVALID)
        assert _committed(consumer, source) == nothing

        client_id = _transactional_id("offsets")
        async with Producer(
            bootstrap_servers=bootstrap, transactional_id=client_id, client_id=client_id
        ) as producer:

            async def transform(label: str) -> None:
                for message in messages:
                    value = b"%s:%s" % (label.encode(), message.value())
                    await producer.send(sink, value, partition=message.partition())

            # Aborted: neither the outputs nor the offsets take effect.
            await producer.begin_transaction()
            await transform("aborted")
            await asyncio.wait_for(producer.send_offsets_to_transaction(offsets, metadata), _HANG)
            await asyncio.wait_for(producer.abort_transaction(), _HANG)
            assert _committed(consumer, source) == nothing

            # The group coordinator checks the generation (KIP-447): another one than the
            # group's is refused, and the transaction must be aborted.
            await producer.begin_transaction()
            stale = ConsumerGroupMetadata(group, metadata.generation_id + 1, metadata.member_id)
            with pytest.raises(IllegalGenerationError):
                await asyncio.wait_for(producer.send_offsets_to_transaction(offsets, stale), _HANG)
            assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
            await asyncio.wait_for(producer.abort_transaction(), _HANG)
            assert _committed(consumer, source) == nothing

            async with producer.transaction():
                await transform("committed")
                await producer.send_offsets_to_transaction(offsets, metadata)
        await asyncio.to_thread(_wait_for_committed, consumer, source, offsets)
    finally:
        await asyncio.to_thread(consumer.close)

    outputs = _read(any_kafka, {sink: 6}, "read_committed")
    assert outputs == {(sink, p): [b"committed:in-%d" % i for i in range(p, 6, 2)] for p in (0, 1)}

    # Per transaction (a TxnOffsetCommit the coordinator asks to retry, with
    # CONCURRENT_TRANSACTIONS while the previous transaction's markers are written, goes
    # again as is).
    transactions = wire.transactions(client_id)
    assert len(transactions) == 3
    v2 = _transactions_v2(any_kafka)
    generation = metadata.generation_id
    for segment, sent_generation in zip(
        transactions, [generation, generation + 1, generation], strict=True
    ):
        kinds = [
            type(sent.request)
            for sent in segment
            if isinstance(sent.request, (AddOffsetsToTxnRequest, TxnOffsetCommitRequest))
        ]
        commits = [sent for sent in segment if isinstance(sent.request, TxnOffsetCommitRequest)]
        assert commits
        for sent in commits:
            request = sent.request
            assert (request.group_id, request.generation_id, request.member_id) == (
                group,
                sent_generation,
                metadata.member_id,
            )
        if v2:
            # TxnOffsetCommit v5 adds the offsets partition to the transaction itself.
            assert AddOffsetsToTxnRequest not in kinds, "AddOffsetsToTxn sent on transactions v2"
            assert min(sent.version for sent in commits) >= 5
        else:
            assert kinds[0] is AddOffsetsToTxnRequest
            assert max(sent.version for sent in commits) <= 4


# -- a transaction the coordinator times out ------------------------------------------------


def _offsets(broker: KafkaBroker, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of the partition."""
    tp = confluent_kafka.TopicPartition(topic, partition)
    found = []
    for level in (
        confluent_kafka.IsolationLevel.READ_COMMITTED,
        confluent_kafka.IsolationLevel.READ_UNCOMMITTED,
    ):
        futures = broker.admin().list_offsets(
            {tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=10
        )
        found.append(futures[tp].result(timeout=10).offset)
    return found[0], found[1]


async def _wait_until_ended(broker: KafkaBroker, topic: str, partitions: list[int]) -> None:
    """Wait until no transaction is open on the partitions: the last stable offset caught up
    with the high watermark."""
    deadline = time.monotonic() + _ABORT_DEADLINE
    while True:
        offsets = [await asyncio.to_thread(_offsets, broker, topic, p) for p in partitions]
        if all(stable == end for stable, end in offsets):
            return
        assert time.monotonic() < deadline, f"still open: (stable, end) offsets {offsets}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("next_call", ["send", "commit"])
async def test_a_transaction_open_past_its_timeout_is_aborted_by_the_coordinator(
    any_kafka: KafkaBroker, new_topic: NewTopic, next_call: str
) -> None:
    # The coordinator aborts the transaction under a bumped epoch. What the producer hears
    # next is what the Java client hears:
    # - a send: the leader refuses the old epoch (INVALID_PRODUCER_EPOCH, abortable); the
    #   abort then succeeds on transactions v2 (EndTxn with the epoch before the bump is
    #   taken as a retry of the abort already done) and the producer goes on, while on v1
    #   the coordinator fences it (PRODUCER_FENCED);
    # - a commit: v2 answers INVALID_TXN_STATE (the transaction was aborted), v1
    #   PRODUCER_FENCED; both fatal.
    topic = new_topic(any_kafka, partitions=2)
    v2 = _transactions_v2(any_kafka)
    transactional_id = _transactional_id("timeout")
    bootstrap = any_kafka.bootstrap_servers
    producer = Producer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        transaction_timeout_ms=3000,
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        for partition in (0, 1):
            await asyncio.wait_for(
                producer.send_and_wait(topic, b"timed-out-%d" % partition, partition=partition),
                _HANG,
            )
        await _wait_until_ended(any_kafka, topic, [0, 1])

        if next_call == "send":
            with pytest.raises(InvalidProducerEpochError):
                await asyncio.wait_for(producer.send_and_wait(topic, b"late", partition=0), _HANG)
            assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
            with pytest.raises(InvalidProducerEpochError):
                await producer.commit_transaction()
            if v2:
                await asyncio.wait_for(producer.abort_transaction(), _HANG)
                assert producer.transaction_state is TransactionState.READY
            else:
                with pytest.raises(ProducerFencedError) as fenced:
                    await asyncio.wait_for(producer.abort_transaction(), _HANG)
                assert "coordinator aborted the transaction" in str(fenced.value)
        else:
            expected_error = InvalidTxnStateError if v2 else ProducerFencedError
            with pytest.raises(expected_error) as refused:
                await asyncio.wait_for(producer.commit_transaction(), _HANG)
            if v2:  # the code alone does not say why; the message does
                assert "transaction_timeout_ms" in str(refused.value)
        usable = v2 and next_call == "send"
        if not usable:
            assert producer.transaction_state is TransactionState.FATAL_ERROR
            with pytest.raises((InvalidTxnStateError, ProducerFencedError)):
                await producer.begin_transaction()
            # What a user does then: close it and start a new instance.
            await producer.close()
            producer = Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
            await asyncio.wait_for(producer.start(), _HANG)
        async with producer.transaction():
            for partition in (0, 1):
                await producer.send(topic, b"after-%d" % partition, partition=partition)
    finally:
        await producer.close()

    committed = _read(any_kafka, {topic: 2}, "read_committed")
    assert committed == {(topic, 0): [b"after-0"], (topic, 1): [b"after-1"]}
    written = _read(any_kafka, {topic: 4}, "read_uncommitted")
    assert written == {
        (topic, 0): [b"timed-out-0", b"after-0"],
        (topic, 1): [b"timed-out-1", b"after-1"],
    }
