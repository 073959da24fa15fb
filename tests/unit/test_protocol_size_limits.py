"""Response size caps (``Request.response_size_limit``) against the largest answers a broker
can legitimately send, encoded by kafka-python's schema-driven codec (independent of ours).

A connection refuses a size prefix over the cap of the request it answers, so a cap must
hold every real answer: the fixed-shape APIs at their most (every API key listed, long
names), and the answers that grow with their request (a Produce batch the broker rejects
record by record, transactions over thousands of partitions) at the sizes the request
allows.
"""

from __future__ import annotations

from typing import Any

import pytest

from aioproducer.protocol import messages as m
from aioproducer.protocol.api import SMALL_RESPONSE_LIMIT, Request

kp = pytest.importorskip("kafka.protocol")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# kafka-python ships no type information: its classes are Any here.
from kafka.protocol.metadata import (  # type: ignore[import-untyped]  # noqa: E402
    ApiVersionsResponse as KApiVersionsResponse,
)
from kafka.protocol.metadata import (  # noqa: E402
    FindCoordinatorResponse as KFindCoordinatorResponse,
)
from kafka.protocol.producer import (  # type: ignore[import-untyped]  # noqa: E402
    ProduceResponse as KProduceResponse,
)
from kafka.protocol.producer.transaction import (  # type: ignore[import-untyped]  # noqa: E402
    AddPartitionsToTxnResponse as KAddPartitionsToTxnResponse,
)
from kafka.protocol.producer.transaction import (  # noqa: E402
    TxnOffsetCommitResponse as KTxnOffsetCommitResponse,
)

# A response frame is the header (correlation id, and a tagged-field byte when flexible)
# followed by the body kafka-python encodes.
HEADER = 5
LONGEST_TOPIC = "t" * 249  # Kafka's limit on topic names


def _fits(request: Request[Any], body: bytes) -> None:
    limit = request.response_size_limit()
    assert limit is not None
    assert HEADER + len(body) <= limit, f"{HEADER + len(body)} > {limit}"


@pytest.mark.parametrize(
    "request_",
    [
        m.ApiVersionsRequest(),
        m.InitProducerIdRequest("txn", 60000),
        m.AddOffsetsToTxnRequest("txn", 1, 0, "group"),
        m.EndTxnRequest("txn", 1, 0, True),
        m.SaslHandshakeRequest("PLAIN"),
        m.SaslAuthenticateRequest(b"\0user\0password"),
        m.DescribeClusterRequest(),
        m.FindCoordinatorRequest(["txn"], 1),
    ],
    ids=lambda r: type(r).__name__,
)
def test_fixed_shape_answers_are_capped_at_1_mib(request_: Request[Any]) -> None:
    assert request_.response_size_limit() == SMALL_RESPONSE_LIMIT


def test_metadata_has_no_cap_of_its_own() -> None:
    # It grows with the cluster: only max_response_size bounds it.
    assert m.MetadataRequest(topics=None).response_size_limit() is None


def test_an_api_versions_answer_listing_every_api_key_fits() -> None:
    R = KApiVersionsResponse
    response = R(
        error_code=0,
        api_keys=[
            R.ApiVersion(api_key=k, min_version=0, max_version=32767) for k in range(1 << 15)
        ],
        throttle_time_ms=0,
        supported_features=[
            R.SupportedFeatureKey(name=f"feature-{i}-" + "x" * 200, min_version=0, max_version=9)
            for i in range(200)
        ],
        finalized_features_epoch=1,
        finalized_features=[
            R.FinalizedFeatureKey(
                name=f"feature-{i}-" + "x" * 200, max_version_level=9, min_version_level=0
            )
            for i in range(200)
        ],
        zk_migration_ready=False,
    )
    _fits(m.ApiVersionsRequest(), bytes(response.encode(version=4)))


def test_a_find_coordinator_answer_with_long_strings_fits() -> None:
    key = "k" * 32767  # the longest string Kafka's int16 lengths allow
    R = KFindCoordinatorResponse
    response = R(
        throttle_time_ms=0,
        coordinators=[
            R.Coordinator(
                key=key,
                node_id=1,
                host="h" * 32767,
                port=9092,
                error_code=15,
                error_message="e" * 32767,
            )
        ],
    )
    _fits(m.FindCoordinatorRequest([key], 1), bytes(response.encode(version=6)))


@pytest.mark.parametrize("version", [8, 9, 11])
def test_a_batch_rejected_record_by_record_fits(version: int) -> None:
    # A batch of 20 000 uncompressed records of 7 bytes (no key, no value, no header: the
    # smallest a record can be), every one refused with a message that names the topic
    # partition (INVALID_RECORD: a record without a key in a compacted topic).
    records = 20_000
    request = m.ProduceRequest(
        None,
        -1,
        30000,
        [
            m.ProduceTopicData(
                LONGEST_TOPIC, [m.ProducePartitionData(0, bytes(61 + 7 * records))]
            )
        ],
    )
    R = KProduceResponse
    P = R.TopicProduceResponse.PartitionProduceResponse
    message = (
        f"Compacted topic cannot accept message without key in topic partition {LONGEST_TOPIC}-0."
    )
    response = R(
        responses=[
            R.TopicProduceResponse(
                name=LONGEST_TOPIC,
                partition_responses=[
                    P(
                        index=0,
                        error_code=87,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        record_errors=[
                            P.BatchIndexAndErrorMessage(
                                batch_index=i, batch_index_error_message=message
                            )
                            for i in range(records)
                        ],
                        error_message="One or more records have been rejected due to " * 20,
                        current_leader=P.LeaderIdAndEpoch(leader_id=3, leader_epoch=9),
                    )
                ],
            )
        ],
        throttle_time_ms=0,
        node_endpoints=[R.NodeEndpoint(node_id=3, host="h" * 255, port=9094, rack="r" * 255)],
    )
    _fits(request, bytes(response.encode(version=version)))


def test_a_transaction_over_many_partitions_fits() -> None:
    topics = [
        m.AddPartitionsToTxnTopic(f"{i:03d}" + "t" * 246, list(range(2000))) for i in range(50)
    ]
    request = m.AddPartitionsToTxnRequest.for_client("txn", 1, 0, topics)
    R = KAddPartitionsToTxnResponse
    TR = R.AddPartitionsToTxnTopicResult
    PR = TR.AddPartitionsToTxnPartitionResult
    response = R(
        throttle_time_ms=0,
        error_code=0,
        results_by_transaction=[],
        results_by_topic_v3_and_below=[
            TR(
                name=topic.name,
                results_by_partition=[
                    PR(partition_index=p, partition_error_code=53) for p in topic.partitions
                ],
            )
            for topic in topics
        ],
    )
    _fits(request, bytes(response.encode(version=3)))


def test_an_offset_commit_over_many_partitions_fits() -> None:
    topics = [
        m.TxnOffsetCommitRequestTopic(
            f"{i:03d}" + "t" * 246,
            [m.TxnOffsetCommitRequestPartition(p, 100) for p in range(2000)],
        )
        for i in range(50)
    ]
    request = m.TxnOffsetCommitRequest("txn", "group", 1, 0, topics)
    R = KTxnOffsetCommitResponse
    T = R.TxnOffsetCommitResponseTopic
    P = T.TxnOffsetCommitResponsePartition
    response = R(
        throttle_time_ms=0,
        topics=[
            T(
                name=topic.name,
                partitions=[
                    P(partition_index=p.partition_index, error_code=22) for p in topic.partitions
                ],
            )
            for topic in topics
        ],
    )
    _fits(request, bytes(response.encode(version=3)))

