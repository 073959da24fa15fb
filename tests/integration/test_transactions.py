"""Transactions on real brokers, checked at the protocol level.

Neither broker here hides aborted records from read_committed consumers, nor fences the way
Kafka does, so the tests check the conversation itself: the mock cluster's request tracking
gives the order of requests as the brokers saw them, and a recorder around
``BrokerConnection.send_for`` gives their contents (record batch headers, EndTxn's commit flag)
and the responses. Errors are injected with the mock's error stacks; fencing by a second
producer runs on Tansu.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from aioproducer import ConsumerGroupMetadata, Producer, TransactionState
from aioproducer._core.answers import AnswerHandler
from aioproducer.errors import (
    IllegalStateError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionAbortedError,
    UnsupportedVersionError,
)
from aioproducer.net.connection import BrokerConnection
from aioproducer.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from aioproducer.protocol.record_reader import decode_record_batches
from tests.support.mock_cluster import ApiKey, ErrorCode, MockCluster
from tests.support.readback import read_back
from tests.support.wire import Send, intercept_send_for

# Requests that say something about the transaction (not Metadata or ApiVersions).
_TXN_KEYS = {
    ApiKey.PRODUCE,
    ApiKey.FIND_COORDINATOR,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
}
# Every test must end well before this; it only turns a hang into a failure.
_HANG = 60.0


@dataclass
class Exchange:
    """One request our client sent, and the response it got (None if it got none)."""

    node_id: int
    request: Any
    response: Any = None
    # Produce only: (topic, partition, batch bytes), copied when sent (the buffers are
    # pooled and reused once the batch is acknowledged).
    records: list[tuple[str, int, bytes]] | None = None
    # How many requests had been sent when the response arrived.
    answered_after: int | None = None


class WireRecorder:
    """Records every request aioproducer sends, in order, with its response."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    def of(self, *types: type) -> list[Exchange]:
        return [e for e in self.exchanges if isinstance(e.request, types)]

    def produced_batches(self) -> list[tuple[int, str, int, Any]]:
        """``(index, topic, partition, decoded batch)`` for every batch sent."""
        batches = []
        for index, exchange in enumerate(self.exchanges):
            for topic, partition, data in exchange.records or ():
                for batch in decode_record_batches(data):
                    batches.append((index, topic, partition, batch))
        return batches

    def added_partitions_before(self, index: int) -> set[tuple[str, int]]:
        """Partitions whose AddPartitionsToTxn was answered before request ``index`` went out."""
        added: set[tuple[str, int]] = set()
        for exchange in self.exchanges[:index]:
            answered = exchange.answered_after
            if (
                isinstance(exchange.request, AddPartitionsToTxnRequest)
                and exchange.response
                and answered is not None
                and answered <= index
            ):
                for result in exchange.response.results_by_transaction:
                    for topic in result.topic_results:
                        for p in topic.results_by_partition:
                            if p.partition_error_code == 0:
                                added.add((topic.name, p.partition_index))
        return added

    def end_txns(self) -> list[bool]:
        """The ``committed`` flag of every EndTxn that was answered without error."""
        return [
            e.request.committed
            for e in self.of(EndTxnRequest)
            if e.response is not None and e.response.error_code == 0
        ]


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> WireRecorder:
    recorder = WireRecorder()

    def record(conn: BrokerConnection, request: Any, handler: AnswerHandler, send: Send) -> None:
        exchange = Exchange(conn.node_id, request)
        if isinstance(request, ProduceRequest):
            exchange.records = [
                (topic.name, partition.index, bytes(partition.records))
                for topic in request.topics
                for partition in topic.partitions
            ]

        def recorded(response: Any, error: BaseException | None, now: float) -> None:
            # Handled by the sender's step: what it knew from then on.
            if response is not None:
                exchange.response = response
                exchange.answered_after = len(recorder.exchanges)
            handler(response, error, now)

        send(recorded)
        recorder.exchanges.append(exchange)

    intercept_send_for(monkeypatch, record)
    return recorder


@pytest.fixture
def tracked(mock_cluster: MockCluster) -> Iterator[MockCluster]:
    """The mock cluster, recording requests from the start of the test."""
    mock_cluster.start_request_tracking()
    yield mock_cluster


def _keys(cluster: MockCluster) -> list[tuple[int, int]]:
    """(broker, api key) of the transaction-related requests the mock received, in order.

    Read before stopping tracking: librdkafka forgets the recording when it stops.
    """
    return [(r.broker_id, r.api_key) for r in cluster.get_requests() if r.api_key in _TXN_KEYS]


def _topic(cluster: MockCluster, partitions: int = 3) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=partitions, replication_factor=3)
    return name


def _txn_id() -> str:
    return f"tid-{uuid.uuid4().hex[:10]}"


def _producer(bootstrap: str, transactional_id: str, **options: Any) -> Producer:
    options.setdefault("linger_ms", 5)
    options.setdefault("retry_backoff_ms", 20)
    options.setdefault("max_block_ms", 20_000)
    return Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id, **options)


# ---- the protocol on the mock -----------------------------------------------------------------


async def test_commit_follows_the_protocol(tracked: MockCluster, wire: WireRecorder) -> None:
    topic = _topic(tracked)
    tid = _txn_id()
    values = [f"value-{i}".encode() for i in range(30)]
    # The coordinator answers AddPartitionsToTxn slowly and batches do not linger, so a
    # batch sent before its partition was added would show below.
    tracked.coordinator_set("transaction", tid, 2)
    tracked.broker_push_request_error_rtts(2, ApiKey.ADD_PARTITIONS_TO_TXN, [(0, 300)] * 2)
    async with _producer(tracked.bootstrap_servers, tid, linger_ms=0) as producer:
        assert producer.transaction_state is TransactionState.READY
        for chunk in (values[:15], values[15:]):
            async with producer.transaction():
                futures = [
                    await producer.send(topic, value, key=str(i).encode())
                    for i, value in enumerate(chunk)
                ]
            assert all(f.done() and f.exception() is None for f in futures)
        keys = _keys(tracked)
    produce = [i for i, (_, key) in enumerate(keys) if key == ApiKey.PRODUCE]
    assert produce, keys
    # The broker side: a producer id before any Produce, partitions added before producing.
    assert keys.index((keys[0][0], ApiKey.FIND_COORDINATOR)) == 0
    init = [i for i, (_, key) in enumerate(keys) if key == ApiKey.INIT_PRODUCER_ID]
    assert len(init) == 1 and init[0] < produce[0]
    first_add = next(i for i, (_, key) in enumerate(keys) if key == ApiKey.ADD_PARTITIONS_TO_TXN)
    assert first_add < produce[0]
    end_txn = [i for i, (_, key) in enumerate(keys) if key == ApiKey.END_TXN]
    assert len(end_txn) == 2 and end_txn[-1] > produce[-1]
    coordinator = keys[init[0]][0]
    assert all(keys[i][0] == coordinator for i in end_txn)
    # The client side: each batch is transactional, under the producer id and epoch the
    # coordinator gave, and goes only to a partition already added to the transaction.
    [init_exchange] = wire.of(InitProducerIdRequest)
    assert init_exchange.request.transactional_id == tid
    assert init_exchange.node_id == coordinator
    granted: InitProducerIdResponse = init_exchange.response
    batches = wire.produced_batches()
    assert sum(len(b.records) for *_, b in batches) == len(values)
    for index, name, partition, batch in batches:
        assert batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch) == (
            granted.producer_id,
            granted.producer_epoch,
        )
        assert (name, partition) in wire.added_partitions_before(index)
    assert all(e.request.transactional_id == tid for e in wire.of(ProduceRequest))
    assert wire.end_txns() == [True, True]
    # The mock writes its transaction markers with CRC 0: no CRC check on this read (the
    # wire recorder decoded every batch we sent, checking its CRC-32C).
    consumed = read_back(
        tracked.bootstrap_servers, topic, expected=len(values), check_crcs=False
    )
    assert sorted(r.value for r in consumed) == sorted(values)


async def test_send_outside_a_transaction_raises(tracked: MockCluster, wire: WireRecorder) -> None:
    topic = _topic(tracked)
    async with _producer(tracked.bootstrap_servers, _txn_id()) as producer:
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send(topic, b"x")
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send_many(topic, [b"x"])
        with pytest.raises(IllegalStateError):
            await producer.commit_transaction()
        await producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="open already"):
            await producer.begin_transaction()
        await producer.abort_transaction()
    assert not wire.of(ProduceRequest)


async def test_a_producer_without_transactional_id_has_no_transactions(
    mock_cluster: MockCluster,
) -> None:
    async with Producer(bootstrap_servers=mock_cluster.bootstrap_servers) as producer:
        assert producer.transaction_state is None
        with pytest.raises(IllegalStateError, match="transactional_id"):
            await producer.begin_transaction()


async def test_an_exception_inside_transaction_aborts_it(
    tracked: MockCluster, wire: WireRecorder
) -> None:
    topic = _topic(tracked)
    async with _producer(tracked.bootstrap_servers, _txn_id()) as producer:
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                # Wait for delivery, so the partition is part of the transaction.
                await (await producer.send(topic, b"sent, then aborted"))
                unsent = await producer.send(topic, b"never sent", partition=2)
                raise RuntimeError("boom")
        assert producer.transaction_state is TransactionState.READY
        # A record still buffered when the transaction aborted fails and is never sent.
        with pytest.raises(TransactionAbortedError):
            await unsent
        async with producer.transaction():
            await producer.send(topic, b"committed")
        keys = _keys(tracked)
    assert wire.end_txns() == [False, True]
    assert [k for _, k in keys].count(ApiKey.END_TXN) == 2
    sent = [r.value for *_, b in wire.produced_batches() for r in b.records]
    assert b"never sent" not in sent
    assert sorted(sent) == [b"committed", b"sent, then aborted"]


async def test_abort_transaction_drops_buffered_records(
    tracked: MockCluster, wire: WireRecorder
) -> None:
    topic = _topic(tracked)
    async with _producer(tracked.bootstrap_servers, _txn_id(), linger_ms=60_000) as producer:
        await producer.begin_transaction()
        futures = [await producer.send(topic, b"lingering", partition=0) for _ in range(5)]
        await producer.abort_transaction()
        for future in futures:
            with pytest.raises(TransactionAbortedError):
                await future
        assert producer.transaction_state is TransactionState.READY
    assert not wire.of(ProduceRequest)


async def test_closing_with_an_open_transaction_aborts_it(
    tracked: MockCluster, wire: WireRecorder
) -> None:
    topic = _topic(tracked)
    producer = _producer(tracked.bootstrap_servers, _txn_id())
    await producer.start()
    await producer.begin_transaction()
    await (await producer.send(topic, b"x"))
    await asyncio.wait_for(producer.close(), _HANG)
    assert wire.end_txns() == [False]


async def test_send_offsets_to_transaction(tracked: MockCluster, wire: WireRecorder) -> None:
    topic = _topic(tracked)
    group = ConsumerGroupMetadata(
        "group-a", generation_id=4, member_id="member-1", group_instance_id="instance-1"
    )
    async with _producer(tracked.bootstrap_servers, _txn_id()) as producer:
        async with producer.transaction():
            await producer.send(topic, b"out")
            await producer.send_offsets_to_transaction({(topic, 0): 17, (topic, 1): 3}, group)
        # A plain group id works too.
        async with producer.transaction():
            await producer.send(topic, b"out-2")
            await producer.send_offsets_to_transaction({(topic, 0): 18}, "group-b")
        keys = _keys(tracked)
    finds = [e.request for e in wire.of(FindCoordinatorRequest)]
    assert [(f.key_type, f.coordinator_keys) for f in finds if f.key_type == 0] == [
        (0, ["group-a"]),
        (0, ["group-b"]),
    ]
    adds = wire.of(AddOffsetsToTxnRequest)
    assert [a.request.group_id for a in adds] == ["group-a", "group-b"]
    commits = wire.of(TxnOffsetCommitRequest)
    assert [c.response.topics[0].partitions[0].error_code for c in commits] == [0, 0]
    first = commits[0].request
    assert (first.generation_id, first.member_id, first.group_instance_id) == (
        4,
        "member-1",
        "instance-1",
    )
    assert {(p.partition_index, p.committed_offset) for p in first.topics[0].partitions} == {
        (0, 17),
        (1, 3),
    }
    second = commits[1].request
    assert (second.group_id, second.generation_id, second.member_id) == ("group-b", -1, "")
    # AddOffsetsToTxn goes to the transaction coordinator before TxnOffsetCommit, and both
    # come before the commit.
    order = [k for _, k in keys if k != ApiKey.FIND_COORDINATOR]
    first_add = order.index(ApiKey.ADD_OFFSETS_TO_TXN)
    assert first_add < order.index(ApiKey.TXN_OFFSET_COMMIT) < order.index(ApiKey.END_TXN)
    assert wire.end_txns() == [True, True]


# ---- coordinator errors on the mock ---------------------------------------------------------


async def test_retriable_coordinator_errors_are_retried(
    tracked: MockCluster, wire: WireRecorder
) -> None:
    topic = _topic(tracked)
    tracked.push_request_errors(
        ApiKey.FIND_COORDINATOR,
        [ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_NOT_AVAILABLE],
    )
    tracked.push_request_errors(
        ApiKey.INIT_PRODUCER_ID,
        [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS],
    )
    tracked.push_request_errors(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        [ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS],
    )
    tracked.push_request_errors(ApiKey.END_TXN, [ErrorCode.CONCURRENT_TRANSACTIONS])
    async with _producer(tracked.bootstrap_servers, _txn_id()) as producer:
        async with producer.transaction():
            await producer.send(topic, b"made it", partition=0)
        keys = [k for _, k in _keys(tracked)]
    assert keys.count(ApiKey.FIND_COORDINATOR) >= 3
    assert keys.count(ApiKey.INIT_PRODUCER_ID) == 3
    assert keys.count(ApiKey.ADD_PARTITIONS_TO_TXN) == 3
    assert keys.count(ApiKey.END_TXN) == 2
    assert keys.index(ApiKey.PRODUCE) > max(
        i for i, k in enumerate(keys) if k == ApiKey.ADD_PARTITIONS_TO_TXN
    )
    assert wire.end_txns() == [True]
    # The mock's transaction markers carry CRC 0 (see test_commit_follows_the_protocol).
    consumed = read_back(tracked.bootstrap_servers, topic, expected=1, check_crcs=False)
    assert [r.value for r in consumed] == [b"made it"]


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
async def test_end_txn_follows_the_coordinator_when_it_moves(
    tracked: MockCluster, wire: WireRecorder, code: int
) -> None:
    topic = _topic(tracked)
    tid = _txn_id()
    tracked.coordinator_set("transaction", tid, 1)
    async with _producer(tracked.bootstrap_servers, tid) as producer:
        async with producer.transaction():
            await (await producer.send(topic, b"x"))
            tracked.coordinator_set("transaction", tid, 3)
            tracked.push_request_errors(ApiKey.END_TXN, [code])
        keys = _keys(tracked)
    end_txn = [(broker, i) for i, (broker, key) in enumerate(keys) if key == ApiKey.END_TXN]
    assert [broker for broker, _ in end_txn] == [1, 3]
    # The coordinator was looked up again between the two.
    between = [key for _, key in keys[end_txn[0][1] : end_txn[1][1]]]
    assert ApiKey.FIND_COORDINATOR in between
    assert wire.end_txns() == [True]


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
@pytest.mark.parametrize("api_key", [ApiKey.END_TXN, ApiKey.ADD_PARTITIONS_TO_TXN])
async def test_fencing_is_fatal_and_the_producer_still_closes(
    tracked: MockCluster, wire: WireRecorder, code: int, api_key: int
) -> None:
    topic = _topic(tracked)
    producer = _producer(tracked.bootstrap_servers, _txn_id())
    await producer.start()
    await producer.begin_transaction()
    tracked.push_request_errors(api_key, [code])
    future = await producer.send(topic, b"x")
    with pytest.raises(ProducerFencedError, match="fenced"):
        await asyncio.wait_for(producer.commit_transaction(), _HANG)
    assert producer.transaction_state is TransactionState.FATAL_ERROR
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
        # The partition was never added, so its record was never sent.
        with pytest.raises(ProducerFencedError):
            await future
        assert not wire.of(ProduceRequest)
    with pytest.raises(ProducerFencedError):
        await producer.send(topic, b"y")
    with pytest.raises(ProducerFencedError):
        await producer.begin_transaction()
    with pytest.raises(ProducerFencedError):
        await producer.abort_transaction()
    await asyncio.wait_for(producer.close(), _HANG)
    assert wire.end_txns() == []


async def test_transaction_abortable_lets_the_producer_abort_and_go_on(
    tracked: MockCluster, wire: WireRecorder
) -> None:
    topic = _topic(tracked)
    async with _producer(tracked.bootstrap_servers, _txn_id()) as producer:
        await producer.begin_transaction()
        tracked.push_request_errors(ApiKey.PRODUCE, [ErrorCode.TRANSACTION_ABORTABLE])
        failed = await producer.send(topic, b"rejected", partition=0)
        with pytest.raises(TransactionAbortableError):
            await failed
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError):
            await producer.send(topic, b"refused")
        await producer.abort_transaction()
        assert producer.transaction_state is TransactionState.READY
        async with producer.transaction():
            await producer.send(topic, b"after", partition=0)
    # The rejected batch left a gap in its sequence: after the abort, InitProducerId gives a
    # new epoch (the mock: a new producer id) and the next transaction's batches start again
    # at sequence 0 under it.
    inits = wire.of(InitProducerIdRequest)
    assert len(inits) == 2
    assert wire.end_txns() == [False, True]
    assert wire.exchanges.index(inits[1]) > wire.exchanges.index(wire.of(EndTxnRequest)[0])
    old, new = ((e.response.producer_id, e.response.producer_epoch) for e in inits)
    assert new != old
    last_init = wire.exchanges.index(inits[1])
    after = [b for i, _, _, b in wire.produced_batches() if i > last_init]
    assert after
    assert all((b.producer_id, b.producer_epoch, b.base_sequence) == (*new, 0) for b in after)
    # The mock's transaction markers carry CRC 0 (see test_commit_follows_the_protocol).
    consumed = read_back(tracked.bootstrap_servers, topic, [0], expected=1, check_crcs=False)
    assert [r.value for r in consumed] == [b"after"]


async def test_a_failed_batch_makes_the_context_manager_abort(
    tracked: MockCluster, wire: WireRecorder
) -> None:
    topic = _topic(tracked)
    async with _producer(tracked.bootstrap_servers, _txn_id()) as producer:
        tracked.push_request_errors(ApiKey.PRODUCE, [ErrorCode.TRANSACTION_ABORTABLE])
        with pytest.raises(TransactionAbortableError):
            async with producer.transaction():
                await producer.send(topic, b"rejected", partition=0)
        assert producer.transaction_state is TransactionState.READY
    assert wire.end_txns() == [False]


async def test_a_broker_without_end_txn_fails_the_commit_clearly(
    tracked: MockCluster, wire: WireRecorder
) -> None:
    # Tansu 0.6 does not route EndTxn: the commit must fail with a clear error, not hang.
    topic = _topic(tracked)
    tracked.set_apiversion(ApiKey.END_TXN, -1, -1)
    producer = _producer(tracked.bootstrap_servers, _txn_id())
    await producer.start()
    await producer.begin_transaction()
    await (await producer.send(topic, b"x"))
    with pytest.raises(UnsupportedVersionError, match="EndTxn"):
        await asyncio.wait_for(producer.commit_transaction(), _HANG)
    assert producer.transaction_state is TransactionState.FATAL_ERROR
    with pytest.raises(UnsupportedVersionError):
        await producer.begin_transaction()
    await asyncio.wait_for(producer.close(), _HANG)
    assert not wire.of(EndTxnRequest)


async def test_start_gives_up_after_max_block_ms(tracked: MockCluster) -> None:
    tracked.push_request_errors(
        ApiKey.FIND_COORDINATOR, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 500
    )
    producer = _producer(tracked.bootstrap_servers, _txn_id(), max_block_ms=300)
    with pytest.raises(RequestTimedOutError, match="max_block_ms"):
        await asyncio.wait_for(producer.start(), _HANG)
    assert producer.state.value == "closed"
    tracked.clear_request_errors(ApiKey.FIND_COORDINATOR)


# ---- Tansu ------------------------------------------------------------------------------------


async def test_commit_and_abort_on_tansu(tansu: Any) -> None:
    topic = f"txn-{uuid.uuid4().hex[:10]}"
    tansu.create_topic(topic, partitions=2)
    async with _producer(tansu.bootstrap_servers, _txn_id()) as producer:
        async with producer.transaction():
            for i in range(10):
                await producer.send(topic, f"c{i}".encode(), key=str(i).encode())
        await producer.begin_transaction()
        await (await producer.send(topic, b"aborted"))
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"last")
    consumed = read_back(tansu.bootstrap_servers, topic, expected=12)
    values = {r.value for r in consumed}
    assert {f"c{i}".encode() for i in range(10)} | {b"last"} <= values


async def test_a_second_producer_fences_the_first_on_tansu(tansu: Any) -> None:
    topic = f"txn-{uuid.uuid4().hex[:10]}"
    tansu.create_topic(topic, partitions=1)
    tid = _txn_id()
    first = _producer(tansu.bootstrap_servers, tid)
    await first.start()
    await first.begin_transaction()
    await (await first.send(topic, b"before"))
    async with _producer(tansu.bootstrap_servers, tid) as second:
        with pytest.raises(ProducerFencedError, match="fenced"):
            # Either the record or the commit reports the fencing, whichever comes first.
            future = await first.send(topic, b"after the second producer started")
            await asyncio.wait_for(future, _HANG)
            await asyncio.wait_for(first.commit_transaction(), _HANG)
        assert first.transaction_state is TransactionState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            await first.begin_transaction()
        await asyncio.wait_for(first.close(), _HANG)
        # The new producer is unaffected.
        async with second.transaction():
            await second.send(topic, b"from the second producer")
    consumed = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert b"from the second producer" in [r.value for r in consumed]
