"""The transaction state machine, driven step by step without I/O: which coordinator request
goes next, where it goes, and what each answer (or error code) does to the state."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

import pytest

from aioproducer._core.accumulator import ProducerBatch
from aioproducer._core.transactions import (
    CoordinatorType,
    TransactionalRequest,
    TransactionalRequestKind,
    TransactionManager,
    consumer_group_metadata,
    normalize_offsets,
)
from aioproducer.errors import (
    ConcurrentTransactionsError,
    DeliveryTimeoutError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    KafkaConnectionError,
    KafkaError,
    ProducerFencedError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
    error_for_code,
)
from aioproducer.net.connection import FinalizedFeatures
from aioproducer.protocol.api import ApiKey
from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    Coordinator,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from aioproducer.protocol.record_batch import RecordBatchBuilder
from aioproducer.records import ConsumerGroupMetadata, PreparedTransaction, TransactionState

Kind = TransactionalRequestKind
State = TransactionState

TID = "txn-1"
PRODUCER_ID = 4000
EPOCH = 3
BACKOFF = 0.1

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNKNOWN_MEMBER_ID = 25
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
UNKNOWN_PRODUCER_ID = 59
PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120


@dataclass
class Harness:
    """A TransactionManager, a fake clock, and the coordinator side of the conversation."""

    txn: TransactionManager
    now: float = 100.0

    def next(self, incomplete: bool = False) -> TransactionalRequest | None:
        return self.txn.next_request(self.now, incomplete)

    def expect(self, kind: TransactionalRequestKind, incomplete: bool = False) -> Any:
        """Take the next request, which must be ``kind`` to a known coordinator; send it."""
        item = self.next(incomplete)
        assert item is not None, f"expected {kind}, nothing to send"
        assert item.kind is kind, item
        assert self.txn.coordinator_node(item) is not None, "the coordinator is unknown"
        request = self.txn.build_request(item)
        self.txn.request_sent(item, finding_coordinator=False)
        return item, request

    def find(self, kind: TransactionalRequestKind, node: int = 1, code: int = 0) -> Any:
        """The next request must first find its coordinator: answer with ``node``."""
        item = self.next()
        assert item is not None and item.kind is kind, item
        assert self.txn.coordinator_node(item) is None
        request = self.txn.find_coordinator_request(item)
        self.txn.request_sent(item, finding_coordinator=True)
        response = FindCoordinatorResponse(
            0, [Coordinator(item.coordinator_key, node, "h", 9, code)]
        )
        self.txn.handle_find_coordinator(item, response, None, self.now)
        return request

    def answer(self, item: TransactionalRequest, response: Any) -> None:
        self.txn.handle_response(item, response, None, self.now)

    def wait_backoff(self) -> None:
        self.now += self.txn.time_to_next_request(self.now)

    def initialize(self) -> asyncio.Future[None]:
        result = self.txn.initialize()
        self.find(Kind.INIT_PRODUCER_ID)
        item, _ = self.expect(Kind.INIT_PRODUCER_ID)
        self.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH))
        return result

    def add(self, *partitions: tuple[str, int], code: int = 0) -> AddPartitionsToTxnRequest:
        for tp in partitions:
            self.txn.maybe_add_partition(tp)
        item, request = self.expect(Kind.ADD_PARTITIONS)
        self.answer(item, add_partitions_response(item.partitions, code))
        assert isinstance(request, AddPartitionsToTxnRequest)
        return request


def add_partitions_response(
    partitions: Any, code: int = 0, codes: dict[tuple[str, int], int] | None = None
) -> AddPartitionsToTxnResponse:
    codes = codes or {}
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(
            AddPartitionsToTxnPartitionResult(partition, codes.get((topic, partition), code))
        )
    topics = [AddPartitionsToTxnTopicResult(name, parts) for name, parts in by_topic.items()]
    return AddPartitionsToTxnResponse(0, 0, [AddPartitionsToTxnResult(TID, topics)])


@pytest.fixture
async def harness() -> Harness:
    loop = asyncio.get_running_loop()
    manager = TransactionManager(
        TID,
        transaction_timeout_ms=60_000,
        retry_backoff=BACKOFF,
        retry_backoff_max=1.0,
        request_timeout=30.0,
        create_future=loop.create_future,
    )
    return Harness(manager)


@pytest.fixture
async def open_txn(harness: Harness) -> Harness:
    """Initialized, with a transaction open."""
    harness.initialize()
    harness.txn.begin_transaction()
    return harness


def make_batch(topic: str = "t", partition: int = 0) -> ProducerBatch:
    builder = RecordBatchBuilder(bytearray(1024), CompressionType.NONE, None)
    assert builder.try_append(0, None, b"value", None) >= 0
    return ProducerBatch(topic, partition, builder, 1024, 0.0, 120.0, asyncio.get_running_loop())


# ---- initialization -------------------------------------------------------------------------


async def test_initialization_finds_the_transaction_coordinator_then_gets_a_producer_id(
    harness: Harness,
) -> None:
    txn = harness.txn
    assert txn.state is State.UNINITIALIZED
    result = txn.initialize()
    assert txn.state is State.INITIALIZING
    find = harness.find(Kind.INIT_PRODUCER_ID, node=2)
    assert isinstance(find, FindCoordinatorRequest)
    assert find.key_type == CoordinatorType.TRANSACTION == 1
    assert find.coordinator_keys == [TID]
    item, request = harness.expect(Kind.INIT_PRODUCER_ID)
    assert txn.coordinator_node(item) == 2
    assert request == InitProducerIdRequest(TID, 60_000, -1, -1)
    assert not result.done()
    harness.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH))
    assert result.done() and result.exception() is None
    assert txn.state is State.READY
    assert (txn.producer_id, txn.producer_epoch) == (PRODUCER_ID, EPOCH)
    assert not txn.needs_producer_id
    assert harness.next() is None


@pytest.mark.parametrize("code", [COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS])
async def test_init_producer_id_retries_retriable_errors_after_a_backoff(
    harness: Harness, code: int
) -> None:
    result = harness.txn.initialize()
    harness.find(Kind.INIT_PRODUCER_ID)
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    harness.answer(item, InitProducerIdResponse(0, code, -1, -1))
    assert harness.next() is None, "retried before the backoff"
    assert harness.txn.time_to_next_request(harness.now) == pytest.approx(BACKOFF)
    harness.wait_backoff()
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    harness.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH))
    assert result.done() and harness.txn.state is State.READY


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE])
async def test_init_producer_id_looks_the_coordinator_up_again_when_it_moved(
    harness: Harness, code: int
) -> None:
    harness.txn.initialize()
    harness.find(Kind.INIT_PRODUCER_ID, node=1)
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    harness.answer(item, InitProducerIdResponse(0, code, -1, -1))
    harness.wait_backoff()
    harness.find(Kind.INIT_PRODUCER_ID, node=3)
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    assert harness.txn.coordinator_node(item) == 3


@pytest.mark.parametrize("code", [PRODUCER_FENCED, INVALID_PRODUCER_EPOCH])
async def test_init_producer_id_fenced_is_fatal(harness: Harness, code: int) -> None:
    result = harness.txn.initialize()
    harness.find(Kind.INIT_PRODUCER_ID)
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    harness.answer(item, InitProducerIdResponse(0, code, -1, -1))
    assert harness.txn.state is State.FATAL_ERROR
    assert isinstance(result.exception(), ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        harness.txn.begin_transaction()


async def test_find_coordinator_errors(harness: Harness) -> None:
    harness.txn.initialize()
    harness.find(Kind.INIT_PRODUCER_ID, code=COORDINATOR_NOT_AVAILABLE)
    assert harness.txn.state is State.INITIALIZING
    assert harness.next() is None
    harness.wait_backoff()
    harness.find(Kind.INIT_PRODUCER_ID, code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert harness.txn.state is State.FATAL_ERROR
    assert isinstance(harness.txn.last_error, TransactionalIdAuthorizationFailedError)


async def test_a_lost_connection_forgets_the_coordinator_and_retries(harness: Harness) -> None:
    harness.txn.initialize()
    harness.find(Kind.INIT_PRODUCER_ID, node=1)
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    harness.txn.handle_response(item, None, KafkaConnectionError("gone"), harness.now)
    assert harness.txn.state is State.INITIALIZING
    harness.wait_backoff()
    harness.find(Kind.INIT_PRODUCER_ID, node=2)
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    assert harness.txn.coordinator_node(item) == 2


# ---- the transaction -------------------------------------------------------------------------


async def test_sending_needs_an_open_transaction(harness: Harness) -> None:
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        harness.txn.check_send_allowed()
    harness.initialize()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        harness.txn.check_send_allowed()
    with pytest.raises(IllegalStateError):
        harness.txn.begin_commit()
    with pytest.raises(IllegalStateError):
        harness.txn.begin_abort()
    harness.txn.begin_transaction()
    harness.txn.check_send_allowed()
    with pytest.raises(IllegalStateError, match="open already"):
        harness.txn.begin_transaction()
    harness.txn.begin_commit()
    with pytest.raises(IllegalStateError, match="committing"):
        harness.txn.check_send_allowed()
    with pytest.raises(IllegalStateError, match="commit_transaction"):
        harness.txn.begin_transaction()


async def test_a_partition_is_drained_only_once_added_to_the_transaction(
    open_txn: Harness,
) -> None:
    txn = open_txn.txn
    batch = make_batch("t", 1)
    txn.maybe_add_partition(("t", 1))
    assert not txn.may_drain(batch, 1)
    item, request = open_txn.expect(Kind.ADD_PARTITIONS)
    assert isinstance(request, AddPartitionsToTxnRequest)
    [transaction] = request.transactions
    assert (transaction.transactional_id, transaction.producer_id) == (TID, PRODUCER_ID)
    assert transaction.producer_epoch == EPOCH
    assert [(t.name, t.partitions) for t in transaction.topics] == [("t", [1])]
    assert not txn.may_drain(batch, 1), "drained while AddPartitionsToTxn is in flight"
    open_txn.answer(item, add_partitions_response(item.partitions))
    assert txn.may_drain(batch, 1)
    assert txn.partitions_in_transaction == {("t", 1)}
    # Once added, a partition is not added again in the same transaction.
    txn.maybe_add_partition(("t", 1))
    assert open_txn.next() is None


async def test_new_partitions_are_added_together(open_txn: Harness) -> None:
    for tp in [("b", 0), ("a", 2), ("a", 0)]:
        open_txn.txn.maybe_add_partition(tp)
    _, request = open_txn.expect(Kind.ADD_PARTITIONS)
    assert [(t.name, t.partitions) for t in request.transactions[0].topics] == [
        ("a", [0, 2]),
        ("b", [0]),
    ]


async def test_an_unregistered_batch_gets_its_partition_added(open_txn: Harness) -> None:
    batch = make_batch("t", 3)
    assert not open_txn.txn.may_drain(batch, 1)
    item, _ = open_txn.expect(Kind.ADD_PARTITIONS)
    assert item.partitions == {("t", 3)}


async def test_drained_batches_are_transactional_with_the_producer_id_and_epoch(
    open_txn: Harness,
) -> None:
    open_txn.add(("t", 0))
    batch = make_batch("t", 0)
    assert open_txn.txn.may_drain(batch, 1)
    open_txn.txn.prepare(batch)
    assert batch.transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        PRODUCER_ID,
        EPOCH,
        0,
    )


async def test_commit_waits_for_incomplete_batches_then_sends_end_txn(open_txn: Harness) -> None:
    txn = open_txn.txn
    open_txn.add(("t", 0))
    result = txn.begin_commit()
    assert txn.state is State.COMMITTING_TRANSACTION
    assert txn.is_completing
    assert open_txn.next(incomplete=True) is None
    assert txn.has_pending_work()
    item, request = open_txn.expect(Kind.END_TXN, incomplete=False)
    assert request == EndTxnRequest(TID, PRODUCER_ID, EPOCH, True, version_cap=4)
    # Calling commit again while it runs waits for the same result.
    assert txn.begin_commit() is result
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert result.done() and result.exception() is None
    assert txn.state is State.READY
    assert txn.partitions_in_transaction == frozenset()
    assert not txn.has_pending_work()


async def test_a_transaction_that_added_nothing_completes_without_end_txn(
    open_txn: Harness,
) -> None:
    result = open_txn.txn.begin_commit()
    assert open_txn.next() is None
    assert result.done() and result.exception() is None
    assert open_txn.txn.state is State.READY


async def test_abort_sends_end_txn_abort_and_drops_what_was_not_added(open_txn: Harness) -> None:
    txn = open_txn.txn
    open_txn.add(("t", 0))
    txn.maybe_add_partition(("t", 1))
    result = txn.begin_abort()
    assert txn.state is State.ABORTING_TRANSACTION
    error = txn.undrained_batch_error()
    assert isinstance(error, TransactionAbortedError)
    item, request = open_txn.expect(Kind.END_TXN)
    assert request == EndTxnRequest(TID, PRODUCER_ID, EPOCH, False, version_cap=4)
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert result.done() and result.exception() is None
    assert txn.state is State.READY
    assert txn.undrained_batch_error() is None
    txn.begin_transaction()


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE])
async def test_end_txn_goes_to_the_new_coordinator_when_it_moved(
    open_txn: Harness, code: int
) -> None:
    open_txn.add(("t", 0))
    result = open_txn.txn.begin_commit()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, code))
    assert not result.done()
    open_txn.wait_backoff()
    open_txn.find(Kind.END_TXN, node=7)
    item, _ = open_txn.expect(Kind.END_TXN)
    assert open_txn.txn.coordinator_node(item) == 7
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert result.done() and open_txn.txn.state is State.READY


async def test_concurrent_transactions_is_retried(open_txn: Harness) -> None:
    # The first AddPartitionsToTxn of a transaction retries quickly: the previous
    # transaction's markers are usually still being written.
    open_txn.txn.maybe_add_partition(("t", 0))
    item, _ = open_txn.expect(Kind.ADD_PARTITIONS)
    open_txn.answer(item, add_partitions_response(item.partitions, CONCURRENT_TRANSACTIONS))
    assert open_txn.txn.state is State.IN_TRANSACTION
    assert 0 < open_txn.txn.time_to_next_request(open_txn.now) < BACKOFF
    open_txn.wait_backoff()
    item, _ = open_txn.expect(Kind.ADD_PARTITIONS)
    assert item.partitions == {("t", 0)}
    open_txn.answer(item, add_partitions_response(item.partitions))
    result = open_txn.txn.begin_commit()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, CONCURRENT_TRANSACTIONS))
    assert not result.done()
    open_txn.wait_backoff()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert result.done() and result.exception() is None


@pytest.mark.parametrize("code", [PRODUCER_FENCED, INVALID_PRODUCER_EPOCH])
@pytest.mark.parametrize("where", ["add_partitions", "end_txn"])
async def test_fencing_is_fatal(open_txn: Harness, code: int, where: str) -> None:
    txn = open_txn.txn
    if where == "add_partitions":
        txn.maybe_add_partition(("t", 0))
        item, _ = open_txn.expect(Kind.ADD_PARTITIONS)
        result = txn.begin_commit()
        open_txn.answer(item, add_partitions_response(item.partitions, code))
    else:
        open_txn.add(("t", 0))
        result = txn.begin_commit()
        item, _ = open_txn.expect(Kind.END_TXN)
        open_txn.answer(item, EndTxnResponse(0, code))
    assert txn.state is State.FATAL_ERROR
    assert isinstance(result.exception(), ProducerFencedError)
    assert TID in str(result.exception())
    # Every later operation raises the fatal error; nothing more is sent.
    for operation in (
        txn.begin_transaction,
        txn.begin_commit,
        txn.begin_abort,
        txn.check_send_allowed,
        txn.initialize,
    ):
        with pytest.raises(ProducerFencedError):
            operation()
    assert isinstance(txn.undrained_batch_error(), ProducerFencedError)
    assert open_txn.next() is None
    assert not txn.has_pending_work()


async def test_transactional_id_authorization_failure_is_fatal(open_txn: Harness) -> None:
    open_txn.add(("t", 0))
    result = open_txn.txn.begin_commit()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    assert open_txn.txn.state is State.FATAL_ERROR
    assert isinstance(result.exception(), TransactionalIdAuthorizationFailedError)


async def test_invalid_txn_state_on_end_txn_is_fatal(open_txn: Harness) -> None:
    open_txn.add(("t", 0))
    open_txn.txn.begin_commit()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, INVALID_TXN_STATE))
    assert open_txn.txn.state is State.FATAL_ERROR


async def test_transaction_abortable_leaves_the_producer_able_to_abort_and_go_on(
    open_txn: Harness,
) -> None:
    txn = open_txn.txn
    txn.maybe_add_partition(("t", 0))
    item, _ = open_txn.expect(Kind.ADD_PARTITIONS)
    open_txn.answer(item, add_partitions_response(item.partitions, TRANSACTION_ABORTABLE))
    assert txn.state is State.ABORTABLE_ERROR
    assert isinstance(txn.last_error, TransactionAbortableError)
    assert isinstance(txn.undrained_batch_error(), TransactionAbortableError)
    with pytest.raises(TransactionAbortableError, match="must be aborted"):
        txn.check_send_allowed()
    with pytest.raises(TransactionAbortableError):
        txn.begin_commit()
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        txn.begin_transaction()
    result = txn.begin_abort()
    # Nothing was added, so there is nothing for the coordinator to abort.
    assert open_txn.next() is None
    assert result.done() and result.exception() is None
    assert txn.state is State.READY
    txn.begin_transaction()
    open_txn.add(("t", 0))
    assert txn.may_drain(make_batch("t", 0), 1)


async def test_per_partition_errors_name_the_partition(open_txn: Harness) -> None:
    open_txn.txn.maybe_add_partition(("public", 0))
    open_txn.txn.maybe_add_partition(("secret", 0))
    item, _ = open_txn.expect(Kind.ADD_PARTITIONS)
    response = add_partitions_response(
        item.partitions,
        OPERATION_NOT_ATTEMPTED,
        {("secret", 0): TOPIC_AUTHORIZATION_FAILED},
    )
    open_txn.answer(item, response)
    assert open_txn.txn.state is State.ABORTABLE_ERROR
    error = open_txn.txn.last_error
    assert isinstance(error, TopicAuthorizationFailedError)
    assert "secret-0" in str(error)
    assert "public-0" not in str(error)


async def test_a_failed_batch_makes_the_commit_raise_and_abort_bumps_the_epoch(
    open_txn: Harness,
) -> None:
    txn = open_txn.txn
    open_txn.add(("t", 0))
    batch = make_batch("t", 0)
    txn.prepare(batch)
    result = txn.begin_commit()
    error = DeliveryTimeoutError("expired")
    txn.on_batch_failed(batch, error)
    txn.on_final_failure(batch, str(error))
    assert txn.state is State.ABORTABLE_ERROR
    assert result.exception() is error or isinstance(result.exception(), DeliveryTimeoutError)
    assert open_txn.next() is None, "EndTxn(commit) must not be sent after a failure"
    abort = txn.begin_abort()
    item, request = open_txn.expect(Kind.END_TXN)
    assert request.committed is False
    open_txn.answer(item, EndTxnResponse(0, 0))
    # The batch's sequence was lost, so the abort completes with a new epoch.
    assert not abort.done()
    assert txn.state is State.INITIALIZING
    item, request = open_txn.expect(Kind.INIT_PRODUCER_ID)
    assert isinstance(request, InitProducerIdRequest)
    open_txn.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert abort.done() and abort.exception() is None
    assert txn.state is State.READY
    assert txn.producer_epoch == EPOCH + 1
    txn.begin_transaction()
    open_txn.add(("t", 0))
    fresh = make_batch("t", 0)
    txn.prepare(fresh)
    assert (fresh.producer_epoch, fresh.base_sequence) == (EPOCH + 1, 0)


async def test_a_fenced_batch_is_fatal(open_txn: Harness) -> None:
    open_txn.add(("t", 0))
    batch = make_batch("t", 0)
    open_txn.txn.prepare(batch)
    from aioproducer.errors import error_for_code

    open_txn.txn.on_batch_failed(batch, error_for_code(PRODUCER_FENCED))
    assert open_txn.txn.state is State.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        open_txn.txn.check_send_allowed()


async def test_invalid_producer_epoch_on_produce_is_abortable(open_txn: Harness) -> None:
    # KIP-588: on Produce the coordinator may have bumped the epoch after a timeout.
    from aioproducer.errors import error_for_code

    open_txn.add(("t", 0))
    open_txn.txn.on_batch_failed(make_batch("t", 0), error_for_code(INVALID_PRODUCER_EPOCH))
    assert open_txn.txn.state is State.ABORTABLE_ERROR


# ---- offsets -----------------------------------------------------------------------------------


async def test_send_offsets_adds_the_group_then_commits_to_the_group_coordinator(
    open_txn: Harness,
) -> None:
    txn = open_txn.txn
    group = ConsumerGroupMetadata("g", generation_id=5, member_id="m-1", group_instance_id="i-1")
    result = txn.send_offsets({("in", 0): (42, "meta", -1), ("in", 1): (7, None, -1)}, group)
    item, request = open_txn.expect(Kind.ADD_OFFSETS)
    assert request == AddOffsetsToTxnRequest(TID, PRODUCER_ID, EPOCH, "g")
    open_txn.answer(item, AddOffsetsToTxnResponse(0, 0))
    assert not result.done()
    find = open_txn.find(Kind.TXN_OFFSET_COMMIT, node=5)
    assert find.key_type == CoordinatorType.GROUP == 0
    assert find.coordinator_keys == ["g"]
    item, request = open_txn.expect(Kind.TXN_OFFSET_COMMIT)
    assert txn.coordinator_node(item) == 5
    assert isinstance(request, TxnOffsetCommitRequest)
    assert (request.group_id, request.generation_id, request.member_id) == ("g", 5, "m-1")
    assert request.group_instance_id == "i-1"
    assert (request.producer_id, request.producer_epoch) == (PRODUCER_ID, EPOCH)
    [topic] = request.topics
    assert topic.name == "in"
    assert [
        (p.partition_index, p.committed_offset, p.committed_metadata) for p in topic.partitions
    ] == [
        (0, 42, "meta"),
        (1, 7, None),
    ]
    response = TxnOffsetCommitResponse(
        0,
        [
            TxnOffsetCommitResponseTopic(
                "in",
                [
                    TxnOffsetCommitResponsePartition(0, 0),
                    TxnOffsetCommitResponsePartition(1, COORDINATOR_LOAD_IN_PROGRESS),
                ],
            )
        ],
    )
    open_txn.answer(item, response)
    assert not result.done()
    open_txn.wait_backoff()
    item, request = open_txn.expect(Kind.TXN_OFFSET_COMMIT)
    # Only the partition that failed is sent again.
    assert [p.partition_index for p in request.topics[0].partitions] == [1]
    ok = TxnOffsetCommitResponse(
        0, [TxnOffsetCommitResponseTopic("in", [TxnOffsetCommitResponsePartition(1, 0)])]
    )
    open_txn.answer(item, ok)
    assert result.done() and result.exception() is None
    # The offsets started the transaction: the commit sends EndTxn.
    commit = txn.begin_commit()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert commit.done()


async def test_a_fenced_group_member_makes_the_transaction_abortable(open_txn: Harness) -> None:
    result = open_txn.txn.send_offsets({("in", 0): (1, None, -1)}, ConsumerGroupMetadata("g"))
    item, _ = open_txn.expect(Kind.ADD_OFFSETS)
    open_txn.answer(item, AddOffsetsToTxnResponse(0, 0))
    open_txn.find(Kind.TXN_OFFSET_COMMIT)
    item, _ = open_txn.expect(Kind.TXN_OFFSET_COMMIT)
    response = TxnOffsetCommitResponse(
        0,
        [
            TxnOffsetCommitResponseTopic(
                "in", [TxnOffsetCommitResponsePartition(0, UNKNOWN_MEMBER_ID)]
            )
        ],
    )
    open_txn.answer(item, response)
    assert isinstance(result.exception(), UnknownMemberIdError)
    assert open_txn.txn.state is State.ABORTABLE_ERROR


async def test_add_offsets_fenced_and_group_authorization(open_txn: Harness) -> None:
    result = open_txn.txn.send_offsets({("in", 0): (1, None, -1)}, ConsumerGroupMetadata("g"))
    item, _ = open_txn.expect(Kind.ADD_OFFSETS)
    open_txn.answer(item, AddOffsetsToTxnResponse(0, GROUP_AUTHORIZATION_FAILED))
    assert isinstance(result.exception(), KafkaError)
    assert open_txn.txn.state is State.ABORTABLE_ERROR
    open_txn.txn.begin_abort()
    assert open_txn.next() is None
    assert open_txn.txn.state is State.READY
    open_txn.txn.begin_transaction()
    result = open_txn.txn.send_offsets({("in", 0): (1, None, -1)}, ConsumerGroupMetadata("g"))
    item, _ = open_txn.expect(Kind.ADD_OFFSETS)
    open_txn.answer(item, AddOffsetsToTxnResponse(0, PRODUCER_FENCED))
    assert isinstance(result.exception(), ProducerFencedError)
    assert open_txn.txn.state is State.FATAL_ERROR


async def test_abort_fails_offsets_still_waiting(open_txn: Harness) -> None:
    result = open_txn.txn.send_offsets({("in", 0): (1, None, -1)}, ConsumerGroupMetadata("g"))
    open_txn.txn.begin_abort()
    assert isinstance(result.exception(), TransactionAbortedError)


def test_offsets_in_every_accepted_shape() -> None:
    TopicPartition = namedtuple("TopicPartition", "topic partition")
    OffsetAndMetadata = namedtuple("OffsetAndMetadata", "offset metadata")

    class ConfluentStyle:
        def __init__(self, topic: str, partition: int) -> None:
            self.topic, self.partition = topic, partition

        def __hash__(self) -> int:
            return hash((self.topic, self.partition))

    offsets = normalize_offsets(
        {
            ("a", 0): 1,
            TopicPartition("a", 1): OffsetAndMetadata(2, "m"),
            ConfluentStyle("b", 0): (3, None),
        }
    )
    assert offsets == {("a", 0): (1, None, -1), ("a", 1): (2, "m", -1), ("b", 0): (3, None, -1)}


def test_the_leader_epoch_of_a_committed_offset_is_kept() -> None:
    # Java's OffsetAndMetadata.leaderEpoch, sent as TxnOffsetCommit's committed_leader_epoch.
    OffsetAndMetadata = namedtuple("OffsetAndMetadata", "offset metadata leader_epoch")

    class ConfluentTopicPartition:
        def __init__(self, topic: str, partition: int, leader_epoch: int | None) -> None:
            self.topic, self.partition, self.leader_epoch = topic, partition, leader_epoch

    offsets = normalize_offsets(
        {
            ("a", 0): (1, None, 7),
            ("a", 1): OffsetAndMetadata(2, "m", 8),
            ConfluentTopicPartition("b", 0, 9): 3,
            ConfluentTopicPartition("b", 1, None): 4,
        }
    )
    assert offsets == {
        ("a", 0): (1, None, 7),
        ("a", 1): (2, "m", 8),
        ("b", 0): (3, None, 9),
        ("b", 1): (4, None, -1),
    }


async def test_txn_offset_commit_carries_the_leader_epoch(open_txn: Harness) -> None:
    txn = open_txn.txn
    txn.send_offsets({("in", 0): (42, None, 5)}, ConsumerGroupMetadata("g"))
    item, _ = open_txn.expect(Kind.ADD_OFFSETS)
    open_txn.answer(item, AddOffsetsToTxnResponse(0, 0))
    open_txn.find(Kind.TXN_OFFSET_COMMIT, node=5)
    _, request = open_txn.expect(Kind.TXN_OFFSET_COMMIT)
    (topic,) = request.topics
    (partition,) = topic.partitions
    assert (partition.committed_offset, partition.committed_leader_epoch) == (42, 5)


@pytest.mark.parametrize(
    ("offsets", "error"),
    [
        ([("a", 0)], TypeError),
        ({"a": 1}, TypeError),
        ({("a", -1): 1}, TypeError),
        ({("a", 0): -5}, ValueError),
        ({("a", 0): "5"}, TypeError),
        ({("a", 0): (5, 7)}, TypeError),
    ],
)
def test_bad_offsets_are_rejected(offsets: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        normalize_offsets(offsets)


def test_group_metadata_in_every_accepted_shape() -> None:
    assert consumer_group_metadata("g") == ConsumerGroupMetadata("g", -1, "", None)
    full = ConsumerGroupMetadata("g", 3, "m", "i")
    assert consumer_group_metadata(full) is full

    class ForeignMetadata:
        group_id = "g"
        generation_id = 3
        member_id = "m"
        group_instance_id = None

    assert consumer_group_metadata(ForeignMetadata()) == ConsumerGroupMetadata("g", 3, "m", None)
    with pytest.raises(TypeError):
        consumer_group_metadata(42)
    with pytest.raises(ValueError):
        consumer_group_metadata("")


# ---- closing -----------------------------------------------------------------------------------


async def test_closing_with_an_open_transaction_aborts_it(open_txn: Harness) -> None:
    open_txn.add(("t", 0))
    open_txn.txn.begin_close(open_txn.now)
    assert open_txn.txn.state is State.ABORTING_TRANSACTION
    assert isinstance(open_txn.txn.undrained_batch_error(), TransactionAbortedError)
    item, request = open_txn.expect(Kind.END_TXN)
    assert request.committed is False
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert not open_txn.txn.has_pending_work()


async def test_closing_gives_the_coordinator_request_timeout_ms_then_gives_up(
    open_txn: Harness,
) -> None:
    open_txn.add(("t", 0))
    open_txn.txn.begin_close(open_txn.now)
    assert open_txn.txn.has_pending_work()
    open_txn.now += 31.0
    assert open_txn.next() is None
    assert not open_txn.txn.has_pending_work()


async def test_fail_all_fails_what_waits(open_txn: Harness) -> None:
    open_txn.add(("t", 0))
    result = open_txn.txn.begin_commit()
    open_txn.txn.fail_all(KafkaConnectionError("closed"))
    assert isinstance(result.exception(), KafkaConnectionError)
    assert not open_txn.txn.has_pending_work()


async def test_a_retriable_error_keeps_the_state(open_txn: Harness) -> None:
    open_txn.txn.maybe_add_partition(("t", 0))
    item, _ = open_txn.expect(Kind.ADD_PARTITIONS)
    open_txn.answer(item, add_partitions_response(item.partitions, COORDINATOR_LOAD_IN_PROGRESS))
    assert open_txn.txn.state is State.IN_TRANSACTION
    assert open_txn.txn.last_error is None
    assert ConcurrentTransactionsError.retriable


async def test_offsets_answered_after_an_abort_began_are_not_committed(
    open_txn: Harness,
) -> None:
    result = open_txn.txn.send_offsets({("in", 0): (1, None, -1)}, ConsumerGroupMetadata("g"))
    item, _ = open_txn.expect(Kind.ADD_OFFSETS)
    open_txn.txn.begin_abort()
    open_txn.answer(item, AddOffsetsToTxnResponse(0, 0))
    assert isinstance(result.exception(), TransactionAbortedError)
    _, request = open_txn.expect(Kind.END_TXN)
    assert request.committed is False


async def test_a_commit_includes_offsets_still_being_sent(open_txn: Harness) -> None:
    result = open_txn.txn.send_offsets({("in", 0): (1, None, -1)}, ConsumerGroupMetadata("g"))
    item, _ = open_txn.expect(Kind.ADD_OFFSETS)
    commit = open_txn.txn.begin_commit()
    open_txn.answer(item, AddOffsetsToTxnResponse(0, 0))
    open_txn.find(Kind.TXN_OFFSET_COMMIT)
    item, _ = open_txn.expect(Kind.TXN_OFFSET_COMMIT)
    ok = TxnOffsetCommitResponse(
        0, [TxnOffsetCommitResponseTopic("in", [TxnOffsetCommitResponsePartition(0, 0)])]
    )
    open_txn.answer(item, ok)
    assert result.done() and result.exception() is None
    item, request = open_txn.expect(Kind.END_TXN)
    assert request.committed is True
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert commit.done() and commit.exception() is None


# ---- transactions v2 (KIP-890 part 2) ----------------------------------------------------------

INVALID_PRODUCER_ID_MAPPING = 49
TV2_VERSIONS = {ApiKey.PRODUCE: (3, 12), ApiKey.END_TXN: (0, 5)}


@dataclass
class Features:
    """What the connections learned from ApiVersions, changed by the test between steps."""

    current: FinalizedFeatures = field(default_factory=FinalizedFeatures)

    def set(
        self,
        epoch: int,
        level: int | None,
        versions: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        levels = {} if level is None else {"transaction.version": level}
        self.current = FinalizedFeatures(
            epoch, levels, TV2_VERSIONS if versions is None else versions, 1
        )


def v2_harness(features: Features) -> Harness:
    loop = asyncio.get_running_loop()
    manager = TransactionManager(
        TID,
        transaction_timeout_ms=60_000,
        retry_backoff=BACKOFF,
        retry_backoff_max=1.0,
        request_timeout=30.0,
        create_future=loop.create_future,
        finalized_features=lambda: features.current,
    )
    return Harness(manager)


@pytest.fixture
def features() -> Features:
    feats = Features()
    feats.set(1, 2)
    return feats


@pytest.fixture
async def open_v2(features: Features) -> Harness:
    """Initialized against a cluster with transaction.version 2, with a transaction open."""
    harness = v2_harness(features)
    harness.initialize()
    assert harness.txn.transaction_v2
    harness.txn.begin_transaction()
    return harness


@pytest.mark.parametrize(
    ("level", "versions", "expected"),
    [
        (2, TV2_VERSIONS, True),
        (3, TV2_VERSIONS, True),
        (1, TV2_VERSIONS, False),
        (None, TV2_VERSIONS, False),  # the feature is not finalized at all
        # Unlike Java, also the request versions v2 needs: Produce v12 and EndTxn v5.
        (2, {ApiKey.PRODUCE: (3, 11), ApiKey.END_TXN: (0, 5)}, False),
        (2, {ApiKey.PRODUCE: (3, 12), ApiKey.END_TXN: (0, 4)}, False),
    ],
)
async def test_transactions_v2_is_chosen_at_initialization_from_finalized_features(
    features: Features, level: int | None, versions: dict[int, tuple[int, int]], expected: bool
) -> None:
    features.set(3, level, versions)
    harness = v2_harness(features)
    assert not harness.txn.transaction_v2  # nothing is known before InitProducerId
    harness.initialize()
    assert harness.txn.transaction_v2 is expected
    assert harness.txn.produce_version_cap == (None if expected else 11)


async def test_without_a_feature_source_transactions_stay_v1(harness: Harness) -> None:
    harness.initialize()
    assert not harness.txn.transaction_v2
    assert harness.txn.produce_version_cap == 11


async def test_v2_adds_no_partitions_and_drains_at_once(open_v2: Harness) -> None:
    txn = open_v2.txn
    txn.maybe_add_partition(("t", 0))
    assert open_v2.next() is None, "no AddPartitionsToTxn with transactions v2"
    assert txn.partitions_in_transaction == {("t", 0)}
    batch = make_batch("t", 0)
    assert txn.may_drain(batch, 1)
    txn.prepare(batch)
    assert batch.transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        PRODUCER_ID,
        EPOCH,
        0,
    )
    # A batch nobody registered drains too (its leader adds the partition).
    assert txn.may_drain(make_batch("t", 1), 1)
    assert txn.produce_version_cap is None


async def test_v2_commit_takes_the_bumped_epoch_from_end_txn(open_v2: Harness) -> None:
    txn = open_v2.txn
    txn.maybe_add_partition(("t", 0))
    batch = make_batch("t", 0)
    txn.prepare(batch)
    txn.on_success(batch)
    result = txn.begin_commit()
    assert open_v2.next(incomplete=True) is None
    item, request = open_v2.expect(Kind.END_TXN)
    assert request == EndTxnRequest(TID, PRODUCER_ID, EPOCH, True, version_cap=None)
    assert request.highest_version() == 5
    open_v2.answer(item, EndTxnResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert result.done() and result.exception() is None
    assert txn.state is State.READY
    assert (txn.producer_id, txn.producer_epoch) == (PRODUCER_ID, EPOCH + 1)
    assert open_v2.next() is None, "no InitProducerId: the coordinator bumped the epoch"
    # The next transaction's batches carry the new epoch and start again at sequence 0.
    txn.begin_transaction()
    txn.maybe_add_partition(("t", 0))
    fresh = make_batch("t", 0)
    assert txn.may_drain(fresh, 1)
    txn.prepare(fresh)
    assert (fresh.producer_epoch, fresh.base_sequence) == (EPOCH + 1, 0)


async def test_v2_epoch_overflow_gives_a_new_producer_id(open_v2: Harness) -> None:
    txn = open_v2.txn
    txn.maybe_add_partition(("t", 0))
    txn.begin_abort()
    item, request = open_v2.expect(Kind.END_TXN)
    assert request.committed is False
    open_v2.answer(item, EndTxnResponse(0, 0, PRODUCER_ID + 1, 0))
    assert (txn.producer_id, txn.producer_epoch) == (PRODUCER_ID + 1, 0)


async def test_v2_offsets_go_straight_to_the_group_coordinator(open_v2: Harness) -> None:
    txn = open_v2.txn
    group = ConsumerGroupMetadata("g", generation_id=5, member_id="m-1")
    result = txn.send_offsets({("in", 0): (42, None, -1)}, group)
    open_v2.find(Kind.TXN_OFFSET_COMMIT, node=5)
    item, request = open_v2.expect(Kind.TXN_OFFSET_COMMIT)
    assert isinstance(request, TxnOffsetCommitRequest)
    assert request.version_cap is None and request.highest_version() == 5
    assert (request.producer_id, request.producer_epoch) == (PRODUCER_ID, EPOCH)
    open_v2.answer(
        item,
        TxnOffsetCommitResponse(
            0, [TxnOffsetCommitResponseTopic("in", [TxnOffsetCommitResponsePartition(0, 0)])]
        ),
    )
    assert result.done() and result.exception() is None
    # Offsets alone start the transaction: the commit needs an EndTxn.
    txn.begin_commit()
    item, _ = open_v2.expect(Kind.END_TXN)
    open_v2.answer(item, EndTxnResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert txn.state is State.READY


async def test_v1_offsets_cap_txn_offset_commit_at_v4(open_txn: Harness) -> None:
    open_txn.txn.send_offsets({("in", 0): (1, None, -1)}, ConsumerGroupMetadata("g"))
    item, _ = open_txn.expect(Kind.ADD_OFFSETS)
    open_txn.answer(item, AddOffsetsToTxnResponse(0, 0))
    open_txn.find(Kind.TXN_OFFSET_COMMIT, node=5)
    _, request = open_txn.expect(Kind.TXN_OFFSET_COMMIT)
    assert request.highest_version() == 4


async def test_v2_abort_after_a_lost_sequence_needs_no_init_producer_id(
    open_v2: Harness,
) -> None:
    # Java: with transactions v2 the client never bumps the epoch itself (the coordinator
    # does, in EndTxn), so the abort completes as soon as EndTxn answers.
    txn = open_v2.txn
    txn.maybe_add_partition(("t", 0))
    batch = make_batch("t", 0)
    txn.prepare(batch)
    error = error_for_code(UNKNOWN_PRODUCER_ID)
    txn.on_batch_failed(batch, error)
    txn.on_final_failure(batch, str(error))
    assert txn.state is State.ABORTABLE_ERROR
    assert txn.needs_producer_id
    abort = txn.begin_abort()
    item, request = open_v2.expect(Kind.END_TXN)
    assert request.committed is False and request.version_cap is None
    open_v2.answer(item, EndTxnResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert abort.done() and abort.exception() is None
    assert txn.state is State.READY
    assert not txn.needs_producer_id
    assert open_v2.next() is None
    assert txn.producer_epoch == EPOCH + 1


@pytest.mark.parametrize(
    ("code", "fatal"),
    [
        (TRANSACTION_ABORTABLE, False),
        (INVALID_TXN_STATE, False),  # Java: only the listed exceptions are fatal on Produce
        (INVALID_PRODUCER_EPOCH, False),
        (PRODUCER_FENCED, True),
        (INVALID_PRODUCER_ID_MAPPING, True),  # Java 4.0's maybeTransitionToErrorState
    ],
)
async def test_v2_produce_errors(open_v2: Harness, code: int, fatal: bool) -> None:
    txn = open_v2.txn
    txn.maybe_add_partition(("t", 0))
    txn.on_batch_failed(make_batch("t", 0), error_for_code(code))
    if not fatal:
        assert txn.state is State.ABORTABLE_ERROR
        txn.begin_abort()
        item, _ = open_v2.expect(Kind.END_TXN)
        open_v2.answer(item, EndTxnResponse(0, 0, PRODUCER_ID, EPOCH + 1))
        assert txn.state is State.READY
        return
    assert txn.state is State.FATAL_ERROR
    expected = ProducerFencedError if code == PRODUCER_FENCED else InvalidProducerIdMappingError
    assert isinstance(txn.last_error, expected)
    with pytest.raises(expected):
        txn.begin_transaction()


async def test_v1_keeps_a_lost_producer_id_mapping_on_produce_abortable(
    open_txn: Harness,
) -> None:
    open_txn.add(("t", 0))
    open_txn.txn.on_batch_failed(make_batch("t", 0), error_for_code(INVALID_PRODUCER_ID_MAPPING))
    assert open_txn.txn.state is State.ABORTABLE_ERROR


async def test_v2_end_txn_with_a_lost_producer_id_mapping_is_fatal(open_v2: Harness) -> None:
    open_v2.txn.maybe_add_partition(("t", 0))
    result = open_v2.txn.begin_commit()
    item, _ = open_v2.expect(Kind.END_TXN)
    open_v2.answer(item, EndTxnResponse(0, INVALID_PRODUCER_ID_MAPPING))
    assert open_v2.txn.state is State.FATAL_ERROR
    assert isinstance(result.exception(), InvalidProducerIdMappingError)


async def test_turning_v2_on_between_transactions_bumps_the_epoch_first(
    features: Features,
) -> None:
    features.set(1, 1)
    harness = v2_harness(features)
    harness.initialize()
    txn = harness.txn
    assert not txn.transaction_v2
    txn.begin_transaction()
    harness.add(("t", 0))
    # The cluster finalizes transaction.version 2 during the transaction.
    features.set(2, 2)
    result = txn.begin_commit()
    item, request = harness.expect(Kind.END_TXN)
    assert request.version_cap == 4, "the transaction ends with the protocol it began with"
    assert not txn.transaction_v2
    harness.answer(item, EndTxnResponse(0, 0))
    # As Java (KAFKA-18227): an epoch bump before the first v2 transaction.
    assert txn.state is State.INITIALIZING
    assert not result.done()
    item, request = harness.expect(Kind.INIT_PRODUCER_ID)
    assert isinstance(request, InitProducerIdRequest)
    harness.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert result.done() and result.exception() is None
    assert txn.state is State.READY
    assert txn.transaction_v2
    txn.begin_transaction()
    txn.maybe_add_partition(("t", 0))
    assert harness.next() is None, "no AddPartitionsToTxn any more"
    batch = make_batch("t", 0)
    assert txn.may_drain(batch, 1)
    txn.prepare(batch)
    assert (batch.producer_epoch, batch.base_sequence) == (EPOCH + 1, 0)


async def test_turning_v2_off_applies_from_the_next_transaction(
    open_v2: Harness, features: Features
) -> None:
    txn = open_v2.txn
    txn.maybe_add_partition(("t", 0))
    features.set(2, 1)
    txn.begin_commit()
    item, request = open_v2.expect(Kind.END_TXN)
    assert request.version_cap is None
    assert txn.transaction_v2 and txn.produce_version_cap is None
    open_v2.answer(item, EndTxnResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert txn.state is State.READY
    assert not txn.transaction_v2
    assert txn.produce_version_cap == 11
    txn.begin_transaction()
    request = open_v2.add(("t", 0))
    assert request.transactions[0].producer_epoch == EPOCH + 1


async def test_features_are_read_again_only_when_their_epoch_grows(
    open_v2: Harness, features: Features
) -> None:
    # Java reads the finalized features only when a newer epoch arrived.
    txn = open_v2.txn
    txn.maybe_add_partition(("t", 0))
    features.set(1, 1)  # same epoch as at initialization: ignored
    txn.begin_abort()
    item, _ = open_v2.expect(Kind.END_TXN)
    open_v2.answer(item, EndTxnResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert txn.transaction_v2


# ---- epoch bumps: who is fenced, and aborts that cannot send EndTxn --------------------------


async def _abortable_after_a_lost_sequence(open_txn: Harness) -> None:
    txn = open_txn.txn
    open_txn.add(("t", 0))
    batch = make_batch("t", 0)
    txn.prepare(batch)
    error = DeliveryTimeoutError("expired")
    txn.on_batch_failed(batch, error)
    txn.on_final_failure(batch, str(error))
    assert txn.state is State.ABORTABLE_ERROR


def _abort_until_the_epoch_bump(open_txn: Harness) -> tuple[Any, Any, Any]:
    """Abort; answer EndTxn; return the abort's result and the InitProducerId that bumps."""
    abort = open_txn.txn.begin_abort()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, 0))
    item, request = open_txn.expect(Kind.INIT_PRODUCER_ID)
    return abort, item, request


async def test_the_epoch_bump_after_an_abort_names_the_producer_id_and_epoch(
    open_txn: Harness,
) -> None:
    # Java's initializeTransactions(producerIdAndEpoch): a stale instance that bumps is the
    # one the coordinator fences (PRODUCER_FENCED), never the newer instance.
    await _abortable_after_a_lost_sequence(open_txn)
    txn = open_txn.txn
    abort, item, request = _abort_until_the_epoch_bump(open_txn)
    assert (request.producer_id, request.producer_epoch) == (PRODUCER_ID, EPOCH)
    open_txn.answer(item, InitProducerIdResponse(0, PRODUCER_FENCED, -1, -1))
    assert isinstance(abort.exception(), ProducerFencedError)
    assert txn.state is State.FATAL_ERROR


async def test_a_coordinator_without_kip_360_is_asked_again_with_no_id(
    open_txn: Harness,
) -> None:
    await _abortable_after_a_lost_sequence(open_txn)
    txn = open_txn.txn
    abort, item, request = _abort_until_the_epoch_bump(open_txn)
    assert request.producer_id == PRODUCER_ID
    # Tansu answers UNKNOWN_SERVER_ERROR to an InitProducerId that names an id.
    open_txn.answer(item, InitProducerIdResponse(0, -1, -1, -1))
    assert not abort.done()
    item, request = open_txn.expect(Kind.INIT_PRODUCER_ID)
    assert (request.producer_id, request.producer_epoch) == (-1, -1)
    open_txn.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert abort.done() and abort.exception() is None
    assert txn.state is State.READY


@pytest.mark.parametrize("code", [INVALID_PRODUCER_ID_MAPPING, UNKNOWN_PRODUCER_ID])
async def test_an_abort_after_a_lost_producer_id_mapping_skips_end_txn(
    open_txn: Harness, code: int
) -> None:
    # Java's beginCompletingTransaction: the coordinator would refuse EndTxn; InitProducerId
    # with the id and epoch aborts what is open and bumps the epoch. Before, EndTxn was sent
    # and refused again at every abort: the producer was stuck until closed.
    txn = open_txn.txn
    open_txn.add(("t", 0))
    batch = make_batch("t", 0)
    txn.prepare(batch)
    txn.on_batch_failed(batch, error_for_code(code))
    assert txn.state is State.ABORTABLE_ERROR
    abort = txn.begin_abort()
    item, request = open_txn.expect(Kind.INIT_PRODUCER_ID)
    assert (request.producer_id, request.producer_epoch) == (PRODUCER_ID, EPOCH)
    open_txn.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert abort.done() and abort.exception() is None
    assert txn.state is State.READY
    txn.begin_transaction()
    open_txn.add(("t", 0))
    fresh = make_batch("t", 0)
    txn.prepare(fresh)
    assert (fresh.producer_epoch, fresh.base_sequence) == (EPOCH + 1, 0)


@pytest.mark.parametrize("code", [INVALID_PRODUCER_ID_MAPPING, UNKNOWN_PRODUCER_ID])
async def test_end_txn_refused_for_a_lost_mapping_completes_the_abort_by_an_epoch_bump(
    open_txn: Harness, code: int
) -> None:
    txn = open_txn.txn
    open_txn.add(("t", 0))
    abort = txn.begin_abort()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, code))
    assert not abort.done()
    item, request = open_txn.expect(Kind.INIT_PRODUCER_ID)
    assert (request.producer_id, request.producer_epoch) == (PRODUCER_ID, EPOCH)
    open_txn.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert abort.done() and abort.exception() is None
    assert txn.state is State.READY


@pytest.mark.parametrize("code", [INVALID_PRODUCER_ID_MAPPING, UNKNOWN_PRODUCER_ID])
async def test_end_txn_commit_refused_for_a_lost_mapping_is_abortable(
    open_txn: Harness, code: int
) -> None:
    txn = open_txn.txn
    open_txn.add(("t", 0))
    commit = txn.begin_commit()
    item, _ = open_txn.expect(Kind.END_TXN)
    open_txn.answer(item, EndTxnResponse(0, code))
    assert isinstance(commit.exception(), KafkaError)
    assert txn.state is State.ABORTABLE_ERROR
    abort = txn.begin_abort()
    item, _ = open_txn.expect(Kind.INIT_PRODUCER_ID)
    open_txn.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert abort.done() and abort.exception() is None


def make_batch_of(count: int, topic: str = "t", partition: int = 0) -> ProducerBatch:
    builder = RecordBatchBuilder(bytearray(4096), CompressionType.NONE, None)
    for index in range(count):
        assert builder.try_append(0, None, b"value-%d" % index, None) >= 0
    return ProducerBatch(topic, partition, builder, 4096, 0.0, 120.0, asyncio.get_running_loop())


async def test_a_split_batch_stays_in_the_transaction(open_txn: Harness) -> None:
    # MESSAGE_TOO_LARGE on a batch of many records splits it; the parts carry its sequence
    # range and the transaction goes on (Java), where it used to become abortable.
    txn = open_txn.txn
    open_txn.add(("t", 0))
    big = make_batch_of(4)
    txn.prepare(big)
    later = make_batch_of(1)
    txn.prepare(later)
    assert (big.base_sequence, later.base_sequence) == (0, 4)
    first, second = make_batch_of(2), make_batch_of(2)
    for part, sequence in ((first, 0), (second, 2)):
        part.producer_id, part.producer_epoch = big.producer_id, big.producer_epoch
        part.base_sequence = sequence
    txn.split(big, [first, second])
    assert txn.state is State.IN_TRANSACTION
    assert not txn.needs_producer_id
    assert txn.may_drain(first, 1) and not txn.may_drain(second, 1) and not txn.may_drain(later, 1)


@pytest.mark.parametrize(
    "code", [TRANSACTION_ABORTABLE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 31]
)
async def test_an_epoch_bump_refused_abortably_is_tried_again_by_the_next_abort(
    open_txn: Harness, code: int
) -> None:
    # Java's InitProducerIdHandler: these make the producer abortable, not dead.
    await _abortable_after_a_lost_sequence(open_txn)
    txn = open_txn.txn
    abort, item, _ = _abort_until_the_epoch_bump(open_txn)
    open_txn.answer(item, InitProducerIdResponse(0, code, -1, -1))
    assert isinstance(abort.exception(), KafkaError)
    assert txn.state is State.ABORTABLE_ERROR
    again = txn.begin_abort()
    item, request = open_txn.expect(Kind.INIT_PRODUCER_ID)  # no second EndTxn
    assert (request.producer_id, request.producer_epoch) == (PRODUCER_ID, EPOCH)
    open_txn.answer(item, InitProducerIdResponse(0, 0, PRODUCER_ID, EPOCH + 1))
    assert again.done() and again.exception() is None
    assert txn.state is State.READY


async def test_the_first_init_producer_id_refused_for_authorization_stays_fatal(
    harness: Harness,
) -> None:
    result = harness.txn.initialize()
    harness.find(Kind.INIT_PRODUCER_ID)
    item, _ = harness.expect(Kind.INIT_PRODUCER_ID)
    harness.answer(item, InitProducerIdResponse(0, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1))
    assert isinstance(result.exception(), TransactionalIdAuthorizationFailedError)
    assert harness.txn.state is State.FATAL_ERROR


# ---- prepared transactions (two-phase commit) ---------------------------------------------------


async def test_a_prepared_transaction_carries_the_id_and_epoch_and_closing_leaves_it_open(
    open_txn: Harness,
) -> None:
    open_txn.add(("t", 0))
    prepared = open_txn.txn.prepare_transaction()
    assert prepared == PreparedTransaction(TID, PRODUCER_ID, EPOCH, transaction_v2=False)
    assert open_txn.txn.state is State.PREPARED_TRANSACTION
    assert open_txn.txn.in_transaction
    with pytest.raises(IllegalStateError, match="the transaction is prepared"):
        open_txn.txn.check_send_allowed()
    with pytest.raises(IllegalStateError, match="a prepared transaction is open"):
        open_txn.txn.begin_transaction()
    # Unlike an open transaction, a prepared one is not aborted by closing.
    open_txn.txn.begin_close(open_txn.now)
    assert open_txn.txn.state is State.PREPARED_TRANSACTION
    assert open_txn.next() is None
    assert not open_txn.txn.has_pending_work()


async def test_a_prepared_transaction_can_still_be_committed_by_its_producer(
    open_txn: Harness,
) -> None:
    open_txn.add(("t", 0))
    open_txn.txn.prepare_transaction()
    result = open_txn.txn.begin_commit()
    item, request = open_txn.expect(Kind.END_TXN)
    assert request.committed is True
    open_txn.answer(item, EndTxnResponse(0, 0))
    assert result.done() and result.exception() is None
    assert open_txn.txn.state is State.READY


async def test_preparing_needs_an_open_transaction_with_nothing_underway(
    harness: Harness,
) -> None:
    harness.initialize()
    with pytest.raises(IllegalStateError, match="cannot prepare: no transaction is open"):
        harness.txn.prepare_transaction()
    harness.txn.begin_transaction()
    empty = harness.txn.prepare_transaction()
    assert empty.empty
    aborted = harness.txn.begin_abort()
    assert harness.next() is None  # nothing was added: no EndTxn needed
    assert aborted.done()
    harness.txn.begin_transaction()
    harness.txn.maybe_add_partition(("t", 0))  # AddPartitionsToTxn not sent yet
    with pytest.raises(IllegalStateError, match="still underway"):
        harness.txn.prepare_transaction()
    assert harness.txn.state is State.IN_TRANSACTION


async def test_an_abort_after_an_unanswered_add_partitions_adds_them_again_then_ends(
    open_txn: Harness,
) -> None:
    # AddPartitionsToTxn timed out: the coordinator may have added the partition and have
    # the transaction open. An abort that skipped EndTxn ("nothing was added") left it open:
    # the next transaction's records then never went out. As Java's
    # beginCompletingTransaction, the abort adds them again, then sends EndTxn(abort).
    h = open_txn
    h.txn.maybe_add_partition(("t", 0))
    item, _ = h.expect(Kind.ADD_PARTITIONS)
    h.txn.handle_response(item, None, RequestTimedOutError("no answer"), h.now)
    h.txn.transition_to_abortable(KafkaError("a record expired"))
    abort = h.txn.begin_abort()
    h.wait_backoff()
    h.find(Kind.ADD_PARTITIONS)
    again, _ = h.expect(Kind.ADD_PARTITIONS)
    assert again.partitions == frozenset({("t", 0)})
    h.answer(again, add_partitions_response(again.partitions))
    end, _ = h.expect(Kind.END_TXN)
    assert not end.committed
    h.answer(end, EndTxnResponse(0, 0))
    assert abort.done() and abort.exception() is None
    assert h.txn.state is State.READY
    # The next transaction adds its partition as any other.
    h.txn.begin_transaction()
    h.add(("t", 0))
    assert h.txn.may_drain(make_batch("t", 0), 1)
