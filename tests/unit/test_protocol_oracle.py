"""Every request and response version against kafka-python's schema-driven codec (an oracle).

kafka-python 3 generates its encoders and decoders from the same JSON schemas Kafka ships,
independently of this code: our request bytes must equal its bytes for every version we
implement, and every response it encodes must decode here to the same field values.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from aioproducer.protocol import messages as m
from aioproducer.protocol.api import Request

kp = pytest.importorskip("kafka.protocol")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from kafka.protocol.admin import CreateTopicsRequest as KCreateTopicsRequest  # noqa: E402
from kafka.protocol.admin import CreateTopicsResponse as KCreateTopicsResponse  # noqa: E402
from kafka.protocol.admin import DeleteTopicsRequest as KDeleteTopicsRequest  # noqa: E402
from kafka.protocol.admin import DeleteTopicsResponse as KDeleteTopicsResponse  # noqa: E402
from kafka.protocol.admin import (  # noqa: E402
    DescribeConfigsRequest as KDescribeConfigsRequest,
)
from kafka.protocol.admin import (  # noqa: E402
    DescribeConfigsResponse as KDescribeConfigsResponse,
)
from kafka.protocol.admin import (  # noqa: E402
    DescribeTransactionsRequest as KDescribeTransactionsRequest,
)
from kafka.protocol.admin import (  # noqa: E402
    DescribeTransactionsResponse as KDescribeTransactionsResponse,
)
from kafka.protocol.admin import (  # noqa: E402
    ListTransactionsRequest as KListTransactionsRequest,
)
from kafka.protocol.admin import (  # noqa: E402
    ListTransactionsResponse as KListTransactionsResponse,
)
from kafka.protocol.admin.cluster import (  # noqa: E402
    DescribeClusterRequest as KDescribeClusterRequest,
)
from kafka.protocol.admin.cluster import (  # noqa: E402
    DescribeClusterResponse as KDescribeClusterResponse,
)
from kafka.protocol.consumer.group import (  # noqa: E402
    OffsetFetchRequest as KOffsetFetchRequest,
)
from kafka.protocol.consumer.group import (  # noqa: E402
    OffsetFetchResponse as KOffsetFetchResponse,
)
from kafka.protocol.metadata import (  # noqa: E402
    ApiVersionsRequest as KApiVersionsRequest,
)
from kafka.protocol.metadata import (  # noqa: E402
    ApiVersionsResponse as KApiVersionsResponse,
)
from kafka.protocol.metadata import (  # noqa: E402
    FindCoordinatorRequest as KFindCoordinatorRequest,
)
from kafka.protocol.metadata import (  # noqa: E402
    FindCoordinatorResponse as KFindCoordinatorResponse,
)
from kafka.protocol.metadata import MetadataRequest as KMetadataRequest  # noqa: E402
from kafka.protocol.metadata import MetadataResponse as KMetadataResponse  # noqa: E402
from kafka.protocol.producer import ProduceRequest as KProduceRequest  # noqa: E402
from kafka.protocol.producer import ProduceResponse as KProduceResponse  # noqa: E402
from kafka.protocol.producer.transaction import (  # noqa: E402
    AddOffsetsToTxnRequest as KAddOffsetsToTxnRequest,
)
from kafka.protocol.producer.transaction import (  # noqa: E402
    AddOffsetsToTxnResponse as KAddOffsetsToTxnResponse,
)
from kafka.protocol.producer.transaction import (  # noqa: E402
    AddPartitionsToTxnRequest as KAddPartitionsToTxnRequest,
)
from kafka.protocol.producer.transaction import (  # noqa: E402
    AddPartitionsToTxnResponse as KAddPartitionsToTxnResponse,
)
from kafka.protocol.producer.transaction import EndTxnRequest as KEndTxnRequest  # noqa: E402
from kafka.protocol.producer.transaction import EndTxnResponse as KEndTxnResponse  # noqa: E402
from kafka.protocol.producer.transaction import (  # noqa: E402
    InitProducerIdRequest as KInitProducerIdRequest,
)
from kafka.protocol.producer.transaction import (  # noqa: E402
    InitProducerIdResponse as KInitProducerIdResponse,
)
from kafka.protocol.producer.transaction import (  # noqa: E402
    TxnOffsetCommitRequest as KTxnOffsetCommitRequest,
)
from kafka.protocol.producer.transaction import (  # noqa: E402
    TxnOffsetCommitResponse as KTxnOffsetCommitResponse,
)
from kafka.protocol.sasl import SaslAuthenticateRequest as KSaslAuthenticateRequest  # noqa: E402
from kafka.protocol.sasl import (  # noqa: E402
    SaslAuthenticateResponse as KSaslAuthenticateResponse,
)
from kafka.protocol.sasl import SaslHandshakeRequest as KSaslHandshakeRequest  # noqa: E402
from kafka.protocol.sasl import SaslHandshakeResponse as KSaslHandshakeResponse  # noqa: E402

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def _versions(cls: type[Request]) -> list[int]:
    high = getattr(cls, "HIGHEST_ENCODABLE_VERSION", cls.MAX_VERSION)
    return list(range(cls.MIN_VERSION, high + 1))


# ---- requests: (our request for version v, kafka-python's request for version v) ----------


def _produce(v: int) -> tuple[Request, Any]:
    records = [b"\x01\x02", memoryview(b"\x07" * 3000)]
    ours = m.ProduceRequest(
        "txn",
        -1,
        30000,
        [
            m.ProduceTopicData("alpha", [m.ProducePartitionData(0, records[0])]),
            m.ProduceTopicData("beta", [m.ProducePartitionData(3, records[1])]),
        ],
    )
    T = KProduceRequest.TopicProduceData
    theirs = KProduceRequest(
        transactional_id="txn",
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            T(name="alpha", partition_data=[T.PartitionProduceData(index=0, records=b"\x01\x02")]),
            T(
                name="beta",
                partition_data=[T.PartitionProduceData(index=3, records=b"\x07" * 3000)],
            ),
        ],
    )
    return ours, theirs


def _metadata(v: int) -> tuple[Request, Any]:
    ours = m.MetadataRequest(
        ["alpha", "beta"],
        allow_auto_topic_creation=v < 4,
        include_cluster_authorized_operations=8 <= v <= 10,
        include_topic_authorized_operations=v >= 8,
    )
    T = KMetadataRequest.MetadataRequestTopic
    theirs = KMetadataRequest(
        topics=[T(name="alpha"), T(name="beta")],
        allow_auto_topic_creation=v < 4,
        include_cluster_authorized_operations=8 <= v <= 10,
        include_topic_authorized_operations=v >= 8,
    )
    return ours, theirs


def _metadata_all_topics(v: int) -> tuple[Request, Any]:
    return m.MetadataRequest(None), KMetadataRequest(topics=None, allow_auto_topic_creation=True)


def _api_versions(v: int) -> tuple[Request, Any]:
    return (
        m.ApiVersionsRequest("aioproducer", "0.1.0"),
        KApiVersionsRequest(client_software_name="aioproducer", client_software_version="0.1.0"),
    )


def _init_producer_id(v: int) -> tuple[Request, Any]:
    producer_id, epoch = (42, 3) if v >= 3 else (-1, -1)
    return (
        m.InitProducerIdRequest("txn", 60000, producer_id, epoch),
        KInitProducerIdRequest(
            transactional_id="txn",
            transaction_timeout_ms=60000,
            producer_id=producer_id,
            producer_epoch=epoch,
        ),
    )


def _init_producer_id_idempotent(v: int) -> tuple[Request, Any]:
    return (
        m.InitProducerIdRequest(None, 60000),
        KInitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
    )


def _find_coordinator(v: int) -> tuple[Request, Any]:
    key_type = 1 if v >= 1 else 0
    if v >= 4:
        return (
            m.FindCoordinatorRequest(["txn-a", "txn-b"], key_type),
            KFindCoordinatorRequest(key_type=key_type, coordinator_keys=["txn-a", "txn-b"]),
        )
    return (
        m.FindCoordinatorRequest(["txn-a"], key_type),
        KFindCoordinatorRequest(key="txn-a", key_type=key_type),
    )


def _add_partitions(v: int) -> tuple[Request, Any]:
    topics = [m.AddPartitionsToTxnTopic("alpha", [0, 1]), m.AddPartitionsToTxnTopic("beta", [7])]
    T = KAddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    their_topics = [T(name="alpha", partitions=[0, 1]), T(name="beta", partitions=[7])]
    if v >= 4:
        ours = m.AddPartitionsToTxnRequest(
            [
                m.AddPartitionsToTxnTransaction("txn", 42, 3, topics, verify_only=True),
                m.AddPartitionsToTxnTransaction("other", 5, 0, topics[:1]),
            ]
        )
        X = KAddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        theirs = KAddPartitionsToTxnRequest(
            transactions=[
                X(
                    transactional_id="txn",
                    producer_id=42,
                    producer_epoch=3,
                    verify_only=True,
                    topics=their_topics,
                ),
                X(
                    transactional_id="other",
                    producer_id=5,
                    producer_epoch=0,
                    verify_only=False,
                    topics=their_topics[:1],
                ),
            ]
        )
        return ours, theirs
    return (
        m.AddPartitionsToTxnRequest.for_client("txn", 42, 3, topics),
        KAddPartitionsToTxnRequest(
            v3_and_below_transactional_id="txn",
            v3_and_below_producer_id=42,
            v3_and_below_producer_epoch=3,
            v3_and_below_topics=their_topics,
        ),
    )


def _add_offsets(v: int) -> tuple[Request, Any]:
    return (
        m.AddOffsetsToTxnRequest("txn", 42, 3, "group"),
        KAddOffsetsToTxnRequest(
            transactional_id="txn", producer_id=42, producer_epoch=3, group_id="group"
        ),
    )


def _end_txn(v: int) -> tuple[Request, Any]:
    return (
        m.EndTxnRequest("txn", 42, 3, False),
        KEndTxnRequest(transactional_id="txn", producer_id=42, producer_epoch=3, committed=False),
    )


def _txn_offset_commit(v: int) -> tuple[Request, Any]:
    group = ("member-1", 9, "instance") if v >= 3 else ("", -1, None)
    P = m.TxnOffsetCommitRequestPartition
    ours = m.TxnOffsetCommitRequest(
        "txn",
        "group",
        42,
        3,
        [m.TxnOffsetCommitRequestTopic("alpha", [P(0, 100, 5, "meta"), P(2, 7, -1, None)])],
        generation_id=group[1],
        member_id=group[0],
        group_instance_id=group[2],
    )
    T = KTxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    KP = T.TxnOffsetCommitRequestPartition
    theirs = KTxnOffsetCommitRequest(
        transactional_id="txn",
        group_id="group",
        producer_id=42,
        producer_epoch=3,
        generation_id=group[1],
        member_id=group[0],
        group_instance_id=group[2],
        topics=[
            T(
                name="alpha",
                partitions=[
                    KP(
                        partition_index=0,
                        committed_offset=100,
                        committed_leader_epoch=5,
                        committed_metadata="meta",
                    ),
                    KP(
                        partition_index=2,
                        committed_offset=7,
                        committed_leader_epoch=-1,
                        committed_metadata=None,
                    ),
                ],
            )
        ],
    )
    return ours, theirs


def _sasl_handshake(v: int) -> tuple[Request, Any]:
    return m.SaslHandshakeRequest("SCRAM-SHA-256"), KSaslHandshakeRequest(mechanism="SCRAM-SHA-256")


def _sasl_authenticate(v: int) -> tuple[Request, Any]:
    token = b"\x00user\x00secret"
    return m.SaslAuthenticateRequest(token), KSaslAuthenticateRequest(auth_bytes=token)


def _describe_cluster(v: int) -> tuple[Request, Any]:
    endpoint_type = 2 if v >= 1 else 1
    return (
        m.DescribeClusterRequest(True, endpoint_type),
        KDescribeClusterRequest(
            include_cluster_authorized_operations=True, endpoint_type=endpoint_type
        ),
    )


def _list_transactions(v: int) -> tuple[Request, Any]:
    fields: dict[str, Any] = {
        "state_filters": ["Ongoing", "Empty"],
        "producer_id_filters": [7, 1 << 40],
    }
    if v >= 1:
        fields["duration_filter"] = 60_000
    if v >= 2:
        fields["transactional_id_pattern"] = "spark-.*"
    return m.ListTransactionsRequest(**fields), KListTransactionsRequest(**fields)


def _describe_transactions(v: int) -> tuple[Request, Any]:
    ids = ["spark-0", "spark-1-retry1"]
    return (
        m.DescribeTransactionsRequest(ids),
        KDescribeTransactionsRequest(transactional_ids=ids),
    )


def _list_transactions_response() -> Any:
    R = KListTransactionsResponse
    return R(
        throttle_time_ms=5,
        error_code=0,
        unknown_state_filters=["Gone"],
        transaction_states=[
            R.TransactionState(
                transactional_id="spark-0", producer_id=1 << 40, transaction_state="Ongoing"
            ),
            R.TransactionState(
                transactional_id="spark-1-retry1", producer_id=3, transaction_state="PrepareCommit"
            ),
        ],
    )


def _offset_fetch(v: int) -> tuple[Request, Any]:
    T = KOffsetFetchRequest.OffsetFetchRequestTopic
    return (
        m.OffsetFetchRequest("group", {"beta": [1], "alpha": [0, 3]}, require_stable=v >= 7),
        KOffsetFetchRequest(
            group_id="group",
            topics=[
                T(name="alpha", partition_indexes=[0, 3]),
                T(name="beta", partition_indexes=[1]),
            ],
            require_stable=v >= 7,
        ),
    )


@pytest.mark.parametrize("version", [v for v in _versions(m.OffsetFetchRequest) if v >= 2])
def test_an_offset_fetch_of_every_partition_of_a_group_matches_kafka_python(version: int) -> None:
    ours = m.OffsetFetchRequest("group", None, require_stable=version >= 7)
    theirs = KOffsetFetchRequest(group_id="group", topics=None, require_stable=version >= 7)
    assert b"".join(ours.encode(version)) == bytes(theirs.encode(version=version))


def _offset_fetch_response() -> Any:
    T = KOffsetFetchResponse.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    return KOffsetFetchResponse(
        throttle_time_ms=5,
        topics=[
            T(
                name="alpha",
                partitions=[
                    P(
                        partition_index=0,
                        committed_offset=42,
                        committed_leader_epoch=3,
                        metadata="m",
                        error_code=0,
                    ),
                    P(
                        partition_index=3,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata=None,
                        error_code=88,
                    ),
                ],
            )
        ],
        error_code=0,
    )


def _create_topics(v: int) -> tuple[Request, Any]:
    # Below v4 (KIP-464) every topic without an assignment names its counts.
    partitions, replication = (-1, -1) if v >= 4 else (6, 3)
    ours = m.CreateTopicsRequest(
        [
            m.CreatableTopic(
                "alpha",
                partitions,
                replication,
                [],
                [m.CreatableTopicConfig("cleanup.policy", "compact")],
            ),
            m.CreatableTopic(
                "beta",
                -1,
                -1,
                [m.CreatableReplicaAssignment(0, [1, 2]), m.CreatableReplicaAssignment(1, [2, 3])],
                [m.CreatableTopicConfig("retention.ms", None)],
            ),
        ],
        30000,
        validate_only=True,
    )
    T = KCreateTopicsRequest.CreatableTopic
    theirs = KCreateTopicsRequest(
        topics=[
            T(
                name="alpha",
                num_partitions=partitions,
                replication_factor=replication,
                assignments=[],
                configs=[T.CreatableTopicConfig(name="cleanup.policy", value="compact")],
            ),
            T(
                name="beta",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    T.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2]),
                    T.CreatableReplicaAssignment(partition_index=1, broker_ids=[2, 3]),
                ],
                configs=[T.CreatableTopicConfig(name="retention.ms", value=None)],
            ),
        ],
        timeout_ms=30000,
        validate_only=True,
    )
    return ours, theirs


def _delete_topics(v: int) -> tuple[Request, Any]:
    ours = m.DeleteTopicsRequest(["alpha", "beta"], 15000)
    if v >= 6:
        S = KDeleteTopicsRequest.DeleteTopicState
        theirs = KDeleteTopicsRequest(
            topics=[
                S(name="alpha", topic_id=uuid.UUID(int=0)),
                S(name="beta", topic_id=uuid.UUID(int=0)),
            ],
            timeout_ms=15000,
        )
    else:
        theirs = KDeleteTopicsRequest(topic_names=["alpha", "beta"], timeout_ms=15000)
    return ours, theirs


def _describe_configs(v: int) -> tuple[Request, Any]:
    documentation = v >= 3
    ours = m.DescribeConfigsRequest(
        [m.DescribeConfigsResource(2, "alpha"), m.DescribeConfigsResource(4, "1", ["a", "b"])],
        include_synonyms=True,
        include_documentation=documentation,
    )
    R = KDescribeConfigsRequest.DescribeConfigsResource
    theirs = KDescribeConfigsRequest(
        resources=[
            R(resource_type=2, resource_name="alpha", configuration_keys=None),
            R(resource_type=4, resource_name="1", configuration_keys=["a", "b"]),
        ],
        include_synonyms=True,
        include_documentation=documentation,
    )
    return ours, theirs


def _create_topics_response() -> Any:
    R = KCreateTopicsResponse
    T = R.CreatableTopicResult
    return R(
        throttle_time_ms=9,
        topics=[
            T(
                name="alpha",
                topic_id=TOPIC_ID,
                error_code=0,
                error_message=None,
                topic_config_error_code=0,
                num_partitions=6,
                replication_factor=3,
                configs=[
                    T.CreatableTopicConfigs(
                        name="cleanup.policy",
                        value="compact",
                        read_only=False,
                        config_source=1,
                        is_sensitive=False,
                    ),
                    T.CreatableTopicConfigs(
                        name="sasl.secret",
                        value=None,
                        read_only=True,
                        config_source=5,
                        is_sensitive=True,
                    ),
                ],
            ),
            T(
                name="beta",
                topic_id=uuid.UUID(int=0),
                error_code=38,
                error_message="Replication factor: 3 larger than available brokers: 1.",
                topic_config_error_code=29,
                num_partitions=-1,
                replication_factor=-1,
                configs=None,
            ),
        ],
    )


def _delete_topics_response() -> Any:
    R = KDeleteTopicsResponse
    D = R.DeletableTopicResult
    return R(
        throttle_time_ms=4,
        responses=[
            D(name="alpha", topic_id=TOPIC_ID, error_code=0, error_message=None),
            D(
                name="beta",
                topic_id=uuid.UUID(int=0),
                error_code=3,
                error_message="This server does not host this topic-partition.",
            ),
        ],
    )


def _describe_configs_response() -> Any:
    R = KDescribeConfigsResponse
    X = R.DescribeConfigsResult
    C = X.DescribeConfigsResourceResult
    return R(
        throttle_time_ms=2,
        results=[
            X(
                error_code=0,
                error_message=None,
                resource_type=2,
                resource_name="alpha",
                configs=[
                    C(
                        name="cleanup.policy",
                        value="compact",
                        read_only=False,
                        config_source=1,
                        is_sensitive=False,
                        synonyms=[
                            C.DescribeConfigsSynonym(
                                name="cleanup.policy", value="compact", source=1
                            ),
                            C.DescribeConfigsSynonym(
                                name="log.cleanup.policy", value="delete", source=5
                            ),
                        ],
                        config_type=7,
                        documentation="what to do with old segments",
                    ),
                    C(
                        name="secret",
                        value=None,
                        read_only=True,
                        config_source=5,
                        is_sensitive=True,
                        synonyms=[],
                        config_type=9,
                        documentation=None,
                    ),
                ],
            ),
            X(
                error_code=3,
                error_message="unknown topic",
                resource_type=2,
                resource_name="gone",
                configs=[],
            ),
        ],
    )


REQUEST_CASES: list[tuple[type[Request], Callable[[int], tuple[Request, Any]]]] = [
    (m.ProduceRequest, _produce),
    (m.MetadataRequest, _metadata),
    (m.MetadataRequest, _metadata_all_topics),
    (m.ApiVersionsRequest, _api_versions),
    (m.InitProducerIdRequest, _init_producer_id),
    (m.InitProducerIdRequest, _init_producer_id_idempotent),
    (m.FindCoordinatorRequest, _find_coordinator),
    (m.AddPartitionsToTxnRequest, _add_partitions),
    (m.AddOffsetsToTxnRequest, _add_offsets),
    (m.EndTxnRequest, _end_txn),
    (m.TxnOffsetCommitRequest, _txn_offset_commit),
    (m.OffsetFetchRequest, _offset_fetch),
    (m.ListTransactionsRequest, _list_transactions),
    (m.DescribeTransactionsRequest, _describe_transactions),
    (m.SaslHandshakeRequest, _sasl_handshake),
    (m.SaslAuthenticateRequest, _sasl_authenticate),
    (m.DescribeClusterRequest, _describe_cluster),
    (m.CreateTopicsRequest, _create_topics),
    (m.DeleteTopicsRequest, _delete_topics),
    (m.DescribeConfigsRequest, _describe_configs),
]


@pytest.mark.parametrize(
    ("version", "build"),
    [
        pytest.param(v, build, id=f"{build.__name__.strip('_')}-v{v}")
        for cls, build in REQUEST_CASES
        for v in _versions(cls)
    ],
)
def test_request_bytes_match_kafka_python(
    version: int, build: Callable[[int], tuple[Request, Any]]
) -> None:
    ours, theirs = build(version)
    assert b"".join(ours.encode(version)) == bytes(theirs.encode(version=version))


# ---- responses: kafka-python encodes, we decode -------------------------------------------

_ABSENT_DEFAULTS = (None, -1, 0, False, [], -(1 << 31))


def _bits(value: Any) -> Any:
    return sum(1 << bit for bit in value) if isinstance(value, set) else value


def _assert_matches(ours: Any, theirs: Any, renames: dict[str, str], path: str) -> None:
    for f in dataclasses.fields(ours):
        mine = getattr(ours, f.name)
        other = getattr(theirs, renames.get(f.name, f.name), None)
        where = f"{path}.{f.name}"
        if other is None:
            # kafka-python leaves fields the version does not carry unset; ours hold the
            # schema default (checked exactly by the hand-built golden tests).
            assert mine in _ABSENT_DEFAULTS, where
            continue
        _assert_value(mine, other, renames, where)


def _assert_value(mine: Any, other: Any, renames: dict[str, str], where: str) -> None:
    if dataclasses.is_dataclass(mine):
        _assert_matches(mine, other, renames, where)
    elif isinstance(mine, list):
        assert len(mine) == len(other), where
        for index, (a, b) in enumerate(zip(mine, other, strict=True)):
            _assert_value(a, b, renames, f"{where}[{index}]")
    else:
        assert mine == _bits(other), where


def _produce_response() -> Any:
    R = KProduceResponse
    P = R.TopicProduceResponse.PartitionProduceResponse
    return R(
        responses=[
            R.TopicProduceResponse(
                name="alpha",
                partition_responses=[
                    P(
                        index=0,
                        error_code=0,
                        base_offset=1000,
                        log_append_time_ms=1700000000000,
                        log_start_offset=12,
                        record_errors=[],
                        error_message=None,
                    ),
                    P(
                        index=1,
                        error_code=6,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        record_errors=[
                            P.BatchIndexAndErrorMessage(
                                batch_index=2, batch_index_error_message="x"
                            ),
                            P.BatchIndexAndErrorMessage(
                                batch_index=5, batch_index_error_message=None
                            ),
                        ],
                        error_message="not leader",
                        current_leader=P.LeaderIdAndEpoch(leader_id=3, leader_epoch=9),
                    ),
                ],
            )
        ],
        throttle_time_ms=25,
        node_endpoints=[R.NodeEndpoint(node_id=3, host="b3", port=9094, rack="r1")],
    )


def _metadata_response() -> Any:
    R = KMetadataResponse
    T = R.MetadataResponseTopic
    P = T.MetadataResponsePartition
    return R(
        throttle_time_ms=7,
        brokers=[
            R.MetadataResponseBroker(node_id=1, host="b1", port=9092, rack="r1"),
            R.MetadataResponseBroker(node_id=2, host="b2", port=9093, rack=None),
        ],
        cluster_id="cluster",
        controller_id=2,
        topics=[
            T(
                error_code=0,
                name="alpha",
                topic_id=TOPIC_ID,
                is_internal=False,
                partitions=[
                    P(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=4,
                        replica_nodes=[1, 2],
                        isr_nodes=[1],
                        offline_replicas=[2],
                    ),
                    P(
                        error_code=5,
                        partition_index=1,
                        leader_id=-1,
                        leader_epoch=-1,
                        replica_nodes=[],
                        isr_nodes=[],
                        offline_replicas=[],
                    ),
                ],
                authorized_operations={3, 4},
            ),
            T(
                error_code=3,
                name="missing",
                topic_id=uuid.UUID(int=0),
                is_internal=True,
                partitions=[],
                authorized_operations={1},
            ),
        ],
        authorized_operations={2, 7},
    )


def _api_versions_response() -> Any:
    R = KApiVersionsResponse
    return R(
        error_code=0,
        api_keys=[
            R.ApiVersion(api_key=0, min_version=3, max_version=11),
            R.ApiVersion(api_key=18, min_version=0, max_version=4),
        ],
        throttle_time_ms=3,
        supported_features=[
            R.SupportedFeatureKey(name="kraft.version", min_version=0, max_version=1)
        ],
        finalized_features_epoch=17,
        finalized_features=[
            R.FinalizedFeatureKey(
                name="metadata.version", max_version_level=20, min_version_level=20
            ),
            # KIP-890 part 2: what makes a producer use transactions v2.
            R.FinalizedFeatureKey(
                name="transaction.version", max_version_level=2, min_version_level=0
            ),
        ],
        zk_migration_ready=True,
    )


def _find_coordinator_response() -> Any:
    R = KFindCoordinatorResponse
    return R(
        throttle_time_ms=4,
        error_code=15,
        error_message="loading",
        node_id=2,
        host="b2",
        port=9093,
        coordinators=[
            R.Coordinator(
                key="txn-a", node_id=2, host="b2", port=9093, error_code=0, error_message=None
            ),
            R.Coordinator(
                key="txn-b", node_id=-1, host="", port=-1, error_code=15, error_message="loading"
            ),
        ],
    )


def _add_partitions_response() -> Any:
    R = KAddPartitionsToTxnResponse
    TR = R.AddPartitionsToTxnTopicResult
    PR = TR.AddPartitionsToTxnPartitionResult
    topic_results = [
        TR(
            name="alpha",
            results_by_partition=[
                PR(partition_index=0, partition_error_code=0),
                PR(partition_index=1, partition_error_code=53),
            ],
        )
    ]
    return R(
        throttle_time_ms=1,
        error_code=0,
        results_by_transaction=[
            R.AddPartitionsToTxnResult(transactional_id="txn", topic_results=topic_results)
        ],
        results_by_topic_v3_and_below=topic_results,
    )


def _txn_offset_commit_response() -> Any:
    R = KTxnOffsetCommitResponse
    T = R.TxnOffsetCommitResponseTopic
    P = T.TxnOffsetCommitResponsePartition
    return R(
        throttle_time_ms=2,
        topics=[
            T(
                name="alpha",
                partitions=[
                    P(partition_index=0, error_code=0),
                    P(partition_index=2, error_code=22),
                ],
            )
        ],
    )


def _describe_cluster_response() -> Any:
    R = KDescribeClusterResponse
    return R(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=2,
        cluster_id="cluster",
        controller_id=1,
        brokers=[
            R.DescribeClusterBroker(broker_id=1, host="b1", port=9092, rack="r1"),
            R.DescribeClusterBroker(broker_id=2, host="b2", port=9093, rack=None),
        ],
        authorized_operations={3},
    )


RESPONSE_CASES: list[
    tuple[type[Request], Callable[[int], tuple[Request, Any]], Any, dict[str, str]]
] = [
    (
        m.ProduceRequest,
        _produce,
        _produce_response,
        {"topics": "responses", "partitions": "partition_responses"},
    ),
    (
        m.MetadataRequest,
        _metadata,
        _metadata_response,
        {
            "topic_authorized_operations": "authorized_operations",
            "cluster_authorized_operations": "authorized_operations",
        },
    ),
    (m.ApiVersionsRequest, _api_versions, _api_versions_response, {}),
    (
        m.InitProducerIdRequest,
        _init_producer_id,
        lambda: KInitProducerIdResponse(
            throttle_time_ms=5, error_code=0, producer_id=4000, producer_epoch=2
        ),
        {},
    ),
    (
        m.AddOffsetsToTxnRequest,
        _add_offsets,
        lambda: KAddOffsetsToTxnResponse(throttle_time_ms=5, error_code=48),
        {},
    ),
    (
        m.EndTxnRequest,
        _end_txn,
        lambda: KEndTxnResponse(throttle_time_ms=5, error_code=0, producer_id=42, producer_epoch=4),
        {},
    ),
    (m.TxnOffsetCommitRequest, _txn_offset_commit, _txn_offset_commit_response, {}),
    (m.OffsetFetchRequest, _offset_fetch, _offset_fetch_response, {}),
    (m.ListTransactionsRequest, _list_transactions, _list_transactions_response, {}),
    (
        m.SaslHandshakeRequest,
        _sasl_handshake,
        lambda: KSaslHandshakeResponse(error_code=33, mechanisms=["PLAIN", "SCRAM-SHA-512"]),
        {},
    ),
    (
        m.SaslAuthenticateRequest,
        _sasl_authenticate,
        lambda: KSaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=b"server", session_lifetime_ms=3600000
        ),
        {},
    ),
    (
        m.DescribeClusterRequest,
        _describe_cluster,
        _describe_cluster_response,
        {"cluster_authorized_operations": "authorized_operations"},
    ),
    (m.CreateTopicsRequest, _create_topics, _create_topics_response, {}),
    (m.DeleteTopicsRequest, _delete_topics, _delete_topics_response, {}),
    (m.DescribeConfigsRequest, _describe_configs, _describe_configs_response, {}),
]


@pytest.mark.parametrize(
    ("version", "build", "response", "renames"),
    [
        pytest.param(v, build, response, renames, id=f"{cls.__name__}-v{v}")
        for cls, build, response, renames in RESPONSE_CASES
        for v in _versions(cls)
    ],
)
def test_responses_encoded_by_kafka_python_decode_to_the_same_fields(
    version: int,
    build: Callable[[int], tuple[Request, Any]],
    response: Callable[[], Any],
    renames: dict[str, str],
) -> None:
    request, _ = build(version)
    their_response = response()
    data = bytes(their_response.encode(version=version))
    ours = request.decode_response(memoryview(data), version)
    theirs = type(their_response).decode(data, version=version)
    _assert_matches(ours, theirs, renames, type(ours).__name__)


def test_describe_transactions_responses_decode_to_the_same_fields() -> None:
    R = KDescribeTransactionsResponse
    S = R.TransactionState
    data = bytes(
        R(
            throttle_time_ms=3,
            transaction_states=[
                S(
                    error_code=0,
                    transactional_id="spark-0",
                    transaction_state="Ongoing",
                    transaction_timeout_ms=60_000,
                    transaction_start_time_ms=1_700_000_000_123,
                    producer_id=1 << 40,
                    producer_epoch=7,
                    topics=[
                        S.TopicData(topic="alpha", partitions=[0, 3]),
                        S.TopicData(topic="beta", partitions=[1]),
                    ],
                ),
                S(
                    error_code=105,
                    transactional_id="gone",
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                ),
            ],
        ).encode(version=0)
    )
    request, _ = _describe_transactions(0)
    ours = request.decode_response(memoryview(data), 0)
    assert isinstance(ours, m.DescribeTransactionsResponse)
    assert ours.throttle_time_ms == 3
    assert ours.transaction_states == [
        m.DescribeTransactionsState(
            0,
            "spark-0",
            "Ongoing",
            60_000,
            1_700_000_000_123,
            1 << 40,
            7,
            {"alpha": [0, 3], "beta": [1]},
        ),
        m.DescribeTransactionsState(105, "gone", "", 0, -1, -1, -1, {}),
    ]


@pytest.mark.parametrize("version", _versions(m.FindCoordinatorRequest))
def test_find_coordinator_responses_of_every_version(version: int) -> None:
    request, _ = _find_coordinator(version)
    data = bytes(_find_coordinator_response().encode(version=version))
    theirs = KFindCoordinatorResponse.decode(data, version=version)
    ours = request.decode_response(memoryview(data), version)
    assert ours.throttle_time_ms == (theirs.throttle_time_ms or 0)
    if version >= 4:
        _assert_value(ours.coordinators, theirs.coordinators, {}, "coordinators")
    else:
        # The single-key answer becomes one coordinator for the key that was asked for.
        [single] = ours.coordinators
        assert single.key == "txn-a"
        assert (single.node_id, single.host, single.port, single.error_code) == (
            theirs.node_id,
            theirs.host,
            theirs.port,
            theirs.error_code,
        )
        # v0 has no error message: ours is null (the schema default), kafka-python's "".
        assert single.error_message == (theirs.error_message if version >= 1 else None)


@pytest.mark.parametrize("version", _versions(m.AddPartitionsToTxnRequest))
def test_add_partitions_responses_of_every_version(version: int) -> None:
    request, _ = _add_partitions(version)
    data = bytes(_add_partitions_response().encode(version=version))
    theirs = KAddPartitionsToTxnResponse.decode(data, version=version)
    ours = request.decode_response(memoryview(data), version)
    assert ours.throttle_time_ms == theirs.throttle_time_ms
    if version >= 4:
        assert ours.error_code == theirs.error_code
        _assert_value(ours.results_by_transaction, theirs.results_by_transaction, {}, "results")
    else:
        [result] = ours.results_by_transaction
        assert result.transactional_id == "txn"
        _assert_value(result.topic_results, theirs.results_by_topic_v3_and_below, {}, "results")
