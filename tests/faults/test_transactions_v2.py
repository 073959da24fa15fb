"""KIP-890 transactions v2 against a real TCP peer: the scripted cluster as transaction
coordinator, group coordinator and partition leaders.

The same brokers run with and without ``transaction.version`` 2 finalized in their
ApiVersions answer; the client must pick the protocol from that alone. The broker refuses a
transactional batch for a partition its transaction never added (INVALID_TXN_STATE) and
keeps records and offsets only when EndTxn commits, so a producer that skipped a step, or
sent the wrong version, fails the test through the broker's state, not only through the
request log.

Scenarios and what each proves:

- ``test_v2_skips_the_add_requests_and_takes_the_epoch_from_end_txn``: with the feature at
  level 2, two transactions with records on two leaders and consumer offsets send no
  AddPartitionsToTxn and no AddOffsetsToTxn; every Produce is v12, TxnOffsetCommit v5,
  EndTxn v5; the second transaction's batches carry the epoch the first EndTxn returned,
  with sequences from 0; the broker holds every record as committed, and the offsets.
- ``test_without_transaction_version_2_the_same_brokers_see_transactions_v1``: with the
  feature absent or at level 1, the same program sends AddPartitionsToTxn and
  AddOffsetsToTxn first, Produce v11, TxnOffsetCommit v4 and EndTxn v4, under one epoch.
- ``test_an_exception_in_the_transaction_block_aborts_it``: an exception inside
  ``async with producer.transaction()`` sends EndTxn v5 with committed=false; the records
  already written are aborted (not visible as committed), and the next transaction commits
  under the epoch the abort returned.
- ``test_transaction_abortable_on_produce_v12_aborts_and_the_producer_goes_on``:
  TRANSACTION_ABORTABLE on a Produce v12 fails that record, makes the commit raise
  TransactionAbortableError and the transaction block abort it (EndTxn v5, committed=false,
  the record written before it aborted); the next transaction commits under the epoch the
  abort returned, with no second InitProducerId (no client-side bump under v2, as in Java).
- ``test_producer_fenced_on_produce_v12_is_fatal_and_close_still_works``: PRODUCER_FENCED on
  a Produce v12 fails the record and the commit with ProducerFencedError, sends no EndTxn,
  leaves every later operation raising it, and close() still completes.
"""

from __future__ import annotations

import pytest

from aioproducer import ConsumerGroupMetadata, Producer, TransactionState
from aioproducer.errors import ProducerFencedError, TransactionAbortableError
from tests.faults.checks import bounded, fast_options, unique_topic
from tests.faults.scripted_broker import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    PRODUCE,
    TRANSACTION_API_VERSIONS,
    TXN_OFFSET_COMMIT,
    Action,
    ScriptedCluster,
)

PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120


def _cluster(topic: str, transaction_version: int | None) -> ScriptedCluster:
    # Two brokers: partition 0 is led by broker 1 (also the coordinator), partition 1 by 2.
    cluster = ScriptedCluster(2, topics={topic: 2})
    for broker in cluster.brokers.values():
        broker.api_versions = dict(TRANSACTION_API_VERSIONS)
    cluster.transaction_version = transaction_version
    return cluster


def _options(cluster: ScriptedCluster, transactional_id: str) -> dict[str, object]:
    return fast_options(cluster.bootstrap_servers, transactional_id=transactional_id)


async def _two_transactions(producer: Producer, topic: str) -> None:
    """Two committed transactions, each with records on both partitions and offsets."""
    group = ConsumerGroupMetadata("group-1", generation_id=3, member_id="member-1")
    for round_ in range(2):
        async with producer.transaction():
            futures = [
                await producer.send(topic, f"{round_}-{p}-{i}".encode(), partition=p)
                for p in (0, 1)
                for i in range(3)
            ]
            await producer.send_offsets_to_transaction({("input", 0): 10 * (round_ + 1)}, group)
        for future in futures:
            assert future.done() and future.exception() is None


def _expected(topic: str) -> dict[int, list[bytes]]:
    return {p: [f"{r}-{p}-{i}".encode() for r in range(2) for i in range(3)] for p in (0, 1)}


async def test_v2_skips_the_add_requests_and_takes_the_epoch_from_end_txn() -> None:
    topic = unique_topic("txn-v2")
    async with _cluster(topic, 2) as cluster:
        async with Producer(**_options(cluster, "tx-v2")) as producer:
            await bounded(_two_transactions(producer, topic))
        assert cluster.requests_of(ADD_PARTITIONS_TO_TXN) == []
        assert cluster.requests_of(ADD_OFFSETS_TO_TXN) == []
        produce = cluster.requests_of(PRODUCE)
        assert produce and {r.version for r in produce} == {12}
        assert {r.broker_id for r in produce} == {1, 2}
        assert [v for v, _ in cluster.decoded_of(TXN_OFFSET_COMMIT)] == [5, 5]
        end_txns = cluster.decoded_of(END_TXN)
        assert [(v, r.committed) for v, r in end_txns] == [(5, True), (5, True)]
        # InitProducerId gave epoch 0; the first EndTxn returned epoch 1 (the broker bumps
        # on every EndTxn v5), and the second transaction ran under it.
        ((_, init),) = cluster.decoded_of(INIT_PRODUCER_ID)
        assert (init.producer_id, init.producer_epoch) == (-1, -1)
        assert [r.producer_epoch for _, r in end_txns] == [0, 1]
        for partition in (0, 1):
            records = cluster.records(topic, partition)
            assert all(r.transactional for r in records)
            assert [(r.producer_epoch, r.sequence) for r in records] == [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 0),
                (1, 1),
                (1, 2),
            ]
            assert cluster.committed_values(topic, partition) == _expected(topic)[partition]
        assert [(t.version, t.outcome) for t in cluster.transactions] == [
            (2, "committed"),
            (2, "committed"),
        ]
        assert cluster.committed_offsets == {"group-1": {("input", 0): 20}}


@pytest.mark.parametrize("level", [None, 1])
async def test_without_transaction_version_2_the_same_brokers_see_transactions_v1(
    level: int | None,
) -> None:
    topic = unique_topic("txn-v1")
    async with _cluster(topic, level) as cluster:
        async with Producer(**_options(cluster, "tx-v1")) as producer:
            await bounded(_two_transactions(producer, topic))
        add_partitions = cluster.decoded_of(ADD_PARTITIONS_TO_TXN)
        assert add_partitions and {v for v, _ in add_partitions} == {3}
        added = {
            (t.name, p)
            for _, r in add_partitions
            for t in r.v3_and_below_topics
            for p in t.partitions
        }
        assert added == {(topic, 0), (topic, 1)}
        assert [v for v, _ in cluster.decoded_of(ADD_OFFSETS_TO_TXN)] == [4, 4]
        assert [v for v, _ in cluster.decoded_of(TXN_OFFSET_COMMIT)] == [4, 4]
        assert {r.version for r in cluster.requests_of(PRODUCE)} == {11}
        end_txns = cluster.decoded_of(END_TXN)
        assert [(v, r.committed, r.producer_epoch) for v, r in end_txns] == [
            (4, True, 0),
            (4, True, 0),
        ]
        for partition in (0, 1):
            records = cluster.records(topic, partition)
            assert [(r.producer_epoch, r.sequence) for r in records] == [(0, s) for s in range(6)]
            assert cluster.committed_values(topic, partition) == _expected(topic)[partition]
        assert [(t.version, t.outcome) for t in cluster.transactions] == [
            (1, "committed"),
            (1, "committed"),
        ]
        assert cluster.committed_offsets == {"group-1": {("input", 0): 20}}


class _Boom(Exception):
    pass


async def test_an_exception_in_the_transaction_block_aborts_it() -> None:
    topic = unique_topic("txn-v2-abort")
    async with _cluster(topic, 2) as cluster:
        async with Producer(**_options(cluster, "tx-abort")) as producer:
            with pytest.raises(_Boom):
                async with producer.transaction():
                    future = await producer.send(topic, b"doomed", partition=0)
                    await bounded(future)  # written to the log, inside the transaction
                    raise _Boom
            assert producer.transaction_state is TransactionState.READY
            async with producer.transaction():
                await producer.send(topic, b"kept", partition=0)
        end_txns = cluster.decoded_of(END_TXN)
        assert [(v, r.committed, r.producer_epoch) for v, r in end_txns] == [
            (5, False, 0),
            (5, True, 1),
        ]
        assert cluster.values(topic, 0) == [b"doomed", b"kept"]
        assert cluster.committed_values(topic, 0) == [b"kept"]
        assert [r.producer_epoch for r in cluster.records(topic, 0)] == [0, 1]
        assert [t.outcome for t in cluster.transactions] == ["aborted", "committed"]
        assert cluster.requests_of(ADD_PARTITIONS_TO_TXN) == []


async def test_transaction_abortable_on_produce_v12_aborts_and_the_producer_goes_on() -> None:
    topic = unique_topic("txn-v2-abortable")
    async with _cluster(topic, 2) as cluster:
        cluster.broker(1).push(PRODUCE, Action.error_code(TRANSACTION_ABORTABLE))
        async with Producer(**_options(cluster, "tx-abortable")) as producer:
            with pytest.raises(TransactionAbortableError):
                async with producer.transaction():
                    written = await producer.send(topic, b"written", partition=1)
                    await bounded(written)
                    refused = await producer.send(topic, b"refused", partition=0)
                    with pytest.raises(TransactionAbortableError):
                        await bounded(refused)
            assert producer.transaction_state is TransactionState.READY
            async with producer.transaction():
                await producer.send(topic, b"next", partition=0)
        end_txns = cluster.decoded_of(END_TXN)
        assert [(v, r.committed, r.producer_epoch) for v, r in end_txns] == [
            (5, False, 0),
            (5, True, 1),
        ]
        assert len(cluster.requests_of(INIT_PRODUCER_ID)) == 1
        assert cluster.values(topic, 1) == [b"written"]
        assert cluster.committed_values(topic, 1) == []
        assert cluster.committed_values(topic, 0) == [b"next"]
        assert [(r.producer_epoch, r.sequence) for r in cluster.records(topic, 0)] == [(1, 0)]


async def test_producer_fenced_on_produce_v12_is_fatal_and_close_still_works() -> None:
    topic = unique_topic("txn-v2-fenced")
    async with _cluster(topic, 2) as cluster:
        cluster.broker(1).push(PRODUCE, Action.error_code(PRODUCER_FENCED))
        producer = Producer(**_options(cluster, "tx-fenced"))
        await bounded(producer.start())
        try:
            with pytest.raises(ProducerFencedError):
                async with producer.transaction():
                    future = await producer.send(topic, b"fenced", partition=0)
                    with pytest.raises(ProducerFencedError):
                        await bounded(future)
            assert producer.transaction_state is TransactionState.FATAL_ERROR
            with pytest.raises(ProducerFencedError):
                await producer.begin_transaction()
        finally:
            await bounded(producer.close())
        assert [r.version for r in cluster.requests_of(PRODUCE)] == [12]
        assert cluster.requests_of(END_TXN) == []
        assert cluster.values(topic, 0) == []
