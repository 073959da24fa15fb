"""Completing a prepared transaction through coordinator trouble, on librdkafka's mock
cluster (which can answer a request with an error on demand): the coordinator loading,
still writing the previous markers or moved is waited out, and EndTxn is sent again until it
succeeds; an error that will not go away (authorization) is raised at once, with its class.
The Kafka suite (test_kafka_two_phase.py) runs the protocol itself on real brokers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from aioproducer import PreparedTransaction, Producer, complete_prepared_transaction
from aioproducer.errors import ProducerFencedError, TransactionalIdAuthorizationFailedError
from tests.support.mock_cluster import ApiKey, ErrorCode, MockCluster

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


@pytest.fixture
def tracked(mock_cluster: MockCluster) -> Iterator[MockCluster]:
    """The mock cluster, recording requests from the start of the test."""
    mock_cluster.start_request_tracking()
    yield mock_cluster


async def _prepare(cluster: MockCluster) -> PreparedTransaction:
    topic = f"two-phase-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    async with Producer(
        bootstrap_servers=cluster.bootstrap_servers,
        transactional_id=f"tid-{uuid.uuid4().hex[:10]}",
        max_block_ms=20_000,
    ) as producer:
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"v")
        return await producer.prepare_transaction()


def _end_txn_requests(cluster: MockCluster) -> int:
    return sum(1 for r in cluster.get_requests() if r.api_key == ApiKey.END_TXN)


def test_completion_waits_out_a_busy_or_moved_coordinator(tracked: MockCluster) -> None:
    prepared = asyncio.run(_prepare(tracked))
    assert _end_txn_requests(tracked) == 0  # prepared: the producer sent no EndTxn
    tracked.push_request_errors(
        ApiKey.END_TXN,
        [
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.CONCURRENT_TRANSACTIONS,
            ErrorCode.NOT_COORDINATOR,
        ],
    )
    asyncio.run(
        complete_prepared_transaction(
            prepared, bootstrap_servers=tracked.bootstrap_servers, retry_backoff_ms=10
        )
    )
    assert _end_txn_requests(tracked) == 4


def test_completion_raises_an_error_that_will_not_go_away(tracked: MockCluster) -> None:
    prepared = asyncio.run(_prepare(tracked))
    tracked.push_request_errors(ApiKey.END_TXN, [TRANSACTIONAL_ID_AUTHORIZATION_FAILED])
    with pytest.raises(TransactionalIdAuthorizationFailedError, match="EndTxn"):
        asyncio.run(
            complete_prepared_transaction(
                prepared, commit=False, bootstrap_servers=tracked.bootstrap_servers
            )
        )
    assert _end_txn_requests(tracked) == 1


def test_a_refusal_after_an_unanswered_end_txn_says_the_outcome_is_unknown(
    tracked: MockCluster,
) -> None:
    # The first EndTxn is answered only after request_timeout_ms (it may have committed);
    # the retry is refused as fenced, which is what a retry after a commit that bumped the
    # epoch would get: the error must not say that nothing was committed.
    prepared = asyncio.run(_prepare(tracked))
    tracked.coordinator_set("transaction", prepared.transactional_id, 1)
    tracked.broker_push_request_error_rtts(
        1, ApiKey.END_TXN, [(0, 1500), (ErrorCode.PRODUCER_FENCED, 0)]
    )
    with pytest.raises(ProducerFencedError, match="cannot tell whether"):
        asyncio.run(
            complete_prepared_transaction(
                prepared,
                bootstrap_servers=tracked.bootstrap_servers,
                request_timeout_ms=1000,
                retry_backoff_ms=10,
            )
        )
    assert _end_txn_requests(tracked) == 2
