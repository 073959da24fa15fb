"""Golden bytes for every request version, and responses decoded from hand-built bytes.

The expected bytes are written out by hand from Kafka's JSON schemas, field by field, one
literal per group of versions whose layout the schema says is identical.
"""

from __future__ import annotations

import uuid

import pytest

from aioproducer.errors import CorruptResponseError, UnsupportedVersionError
from aioproducer.protocol.api import Request
from aioproducer.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
    AddPartitionsToTxnTransaction,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BatchIndexAndErrorMessage,
    Coordinator,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    EndTxnRequest,
    EndTxnResponse,
    FinalizedFeatureKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderIdAndEpoch,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    NodeEndpoint,
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
    ProduceTopicResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    SupportedFeatureKey,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)


def h(text: str) -> bytes:
    """Hex with spaces and ``|`` separators allowed, for readable annotated literals."""
    return bytes.fromhex(text.replace("|", " "))


def body(request: Request, version: int) -> bytes:
    return b"".join(request.encode(version))


TX = "0002 7478"  # string "tx"
TX_C = "03 7478"  # compact string "tx"
PID = "0000000000000005"  # int64 producer id 5
EPOCH = "0002"  # int16 producer epoch 2
ZERO_UUID = "00" * 16


# ---- request golden bytes -----------------------------------------------------------------

PRODUCE = ProduceRequest(
    "tx", -1, 30000, [ProduceTopicData("t", [ProducePartitionData(1, b"\xaa\xbb")])]
)
PRODUCE_V3_TO_V8 = (
    f"{TX} | ffff | 00007530"  # transactional id, acks -1, timeout 30000
    "| 00000001 | 0001 74"  # one topic, name "t"
    "| 00000001 | 00000001 | 00000002 aabb"  # one partition: index 1, records (int32 size)
)
# v12 (KIP-890 part 2) has the body of v11, field by field from ProduceRequest.json: only
# the version in the request header differs (it tells the leader to add the partition to the
# transaction itself).
PRODUCE_V9_TO_V12 = (
    f"{TX_C} | ffff | 00007530"
    "| 02 | 02 74"  # compact array of 1, compact "t"
    "| 02 | 00000001 | 03 aabb | 00"  # partition: index, compact records, tags
    "| 00"  # topic tags
    "| 00"  # body tags
)

METADATA = MetadataRequest(["t"])
METADATA_NO_AUTO = MetadataRequest(["t"], allow_auto_topic_creation=False)
METADATA_ALL = MetadataRequest(None)

API_VERSIONS = ApiVersionsRequest("n", "1")

INIT_IDEMPOTENT = InitProducerIdRequest(None, 60000)
INIT_TXN = InitProducerIdRequest("tx", 60000)
INIT_BUMP = InitProducerIdRequest("tx", 60000, 5, 2)

FIND_GROUP = FindCoordinatorRequest(["g"], 0)
FIND_TXN = FindCoordinatorRequest(["tx"], 1)
FIND_BATCH = FindCoordinatorRequest(["a", "b"], 1)

ADD_PARTITIONS = AddPartitionsToTxnRequest.for_client(
    "tx", 5, 2, [AddPartitionsToTxnTopic("t", [0, 1])]
)
ADD_PARTITIONS_BATCH = AddPartitionsToTxnRequest(
    [
        AddPartitionsToTxnTransaction(
            "tx", 5, 2, [AddPartitionsToTxnTopic("t", [0, 1])], verify_only=True
        )
    ]
)

ADD_OFFSETS = AddOffsetsToTxnRequest("tx", 5, 2, "g")
END_TXN = EndTxnRequest("tx", 5, 2, True)

_OFFSETS = [TxnOffsetCommitRequestTopic("t", [TxnOffsetCommitRequestPartition(0, 100, 7, "m")])]
TXN_OFFSETS = TxnOffsetCommitRequest("tx", "g", 5, 2, _OFFSETS)
TXN_OFFSETS_GROUP = TxnOffsetCommitRequest(
    "tx", "g", 5, 2, _OFFSETS, generation_id=3, member_id="m1", group_instance_id="i"
)

SASL_HANDSHAKE = SaslHandshakeRequest("PLAIN")
SASL_AUTHENTICATE = SaslAuthenticateRequest(b"\x00u\x00p")
DESCRIBE_CLUSTER = DescribeClusterRequest()

GOLDEN: list[tuple[str, Request, list[int], str]] = [
    ("produce", PRODUCE, [3, 4, 5, 6, 7, 8], PRODUCE_V3_TO_V8),
    ("produce", PRODUCE, [9, 10, 11, 12], PRODUCE_V9_TO_V12),
    (
        "produce-idempotent",
        ProduceRequest(None, 1, 5, [ProduceTopicData("t", [])]),
        [3, 8],
        "ffff 0001 00000005 | 00000001 0001 74 00000000",
    ),
    (
        "produce-idempotent",
        ProduceRequest(None, 1, 5, [ProduceTopicData("t", [])]),
        [9, 11, 12],
        # null compact transactional id, acks 1, timeout 5 | one topic "t", no partitions
        "00 0001 00000005 | 02 02 74 01 00 | 00",
    ),
    ("metadata", METADATA, [1, 2, 3], "00000001 0001 74"),
    ("metadata", METADATA, [4, 5, 6, 7], "00000001 0001 74 | 01"),  # + allow auto creation
    # + include cluster / topic authorized operations (false)
    ("metadata", METADATA, [8], "00000001 0001 74 | 01 | 00 | 00"),
    ("metadata", METADATA, [9], "02 | 02 74 00 | 01 | 00 | 00 | 00"),  # flexible
    ("metadata", METADATA, [10], f"02 | {ZERO_UUID} 02 74 00 | 01 | 00 | 00 | 00"),  # topic id
    # v11+: no cluster authorized operations
    ("metadata", METADATA, [11, 12, 13], f"02 | {ZERO_UUID} 02 74 00 | 01 | 00 | 00"),
    ("metadata-no-auto", METADATA_NO_AUTO, [4], "00000001 0001 74 | 00"),
    ("metadata-all", METADATA_ALL, [1, 2, 3], "ffffffff"),  # null array: every topic
    ("metadata-all", METADATA_ALL, [4], "ffffffff 01"),
    ("metadata-all", METADATA_ALL, [12], "00 | 01 | 00 | 00"),
    ("api-versions", API_VERSIONS, [0, 1, 2], ""),
    ("api-versions", API_VERSIONS, [3, 4], "026e 0231 00"),
    ("init-idempotent", INIT_IDEMPOTENT, [0, 1], "ffff 0000ea60"),
    ("init-idempotent", INIT_IDEMPOTENT, [2], "00 0000ea60 00"),
    ("init-idempotent", INIT_IDEMPOTENT, [3, 4, 5], "00 0000ea60 ffffffffffffffff ffff 00"),
    ("init-txn", INIT_TXN, [0, 1], f"{TX} 0000ea60"),
    ("init-bump", INIT_BUMP, [3, 4, 5], f"{TX_C} 0000ea60 {PID} {EPOCH} 00"),
    ("find-group", FIND_GROUP, [0], "0001 67"),
    ("find-txn", FIND_TXN, [1, 2], f"{TX} 01"),  # key, key type
    ("find-txn", FIND_TXN, [3], f"{TX_C} 01 00"),
    ("find-txn", FIND_TXN, [4, 5, 6], f"01 02 {TX_C} 00"),  # key type, coordinator keys
    ("find-batch", FIND_BATCH, [4], "01 03 0261 0262 00"),
    (
        "add-partitions",
        ADD_PARTITIONS,
        [0, 1, 2],
        f"{TX} {PID} {EPOCH} | 00000001 0001 74 00000002 00000000 00000001",
    ),
    (
        "add-partitions",
        ADD_PARTITIONS,
        [3],
        f"{TX_C} {PID} {EPOCH} | 02 02 74 03 00000000 00000001 00 | 00",
    ),
    (
        "add-partitions-batch",
        ADD_PARTITIONS_BATCH,
        [4, 5],
        # transactions[1]: id, pid, epoch, verify_only, topics[1], tags; then body tags
        f"02 {TX_C} {PID} {EPOCH} 01 | 02 02 74 03 00000000 00000001 00 | 00 | 00",
    ),
    ("add-offsets", ADD_OFFSETS, [0, 1, 2], f"{TX} {PID} {EPOCH} 0001 67"),
    ("add-offsets", ADD_OFFSETS, [3, 4], f"{TX_C} {PID} {EPOCH} 02 67 00"),
    ("end-txn", END_TXN, [0, 1, 2], f"{TX} {PID} {EPOCH} 01"),
    # v5 (KIP-890 part 2) keeps the request body of v3-4: compact transactional id "tx",
    # producer id 5, epoch 2, committed true, empty tagged fields.
    ("end-txn", END_TXN, [3, 4, 5], f"{TX_C} {PID} {EPOCH} 01 00"),
    (
        "txn-offsets",
        TXN_OFFSETS,
        [0, 1],
        # txn id, group, pid, epoch | topics[1]: "t", partitions[1]: index, offset, metadata
        f"{TX} 0001 67 {PID} {EPOCH} | 00000001 0001 74 00000001 00000000 0000000000000064 0001 6d",
    ),
    (
        "txn-offsets",
        TXN_OFFSETS,
        [2],  # + committed leader epoch
        f"{TX} 0001 67 {PID} {EPOCH} | 00000001 0001 74 00000001 "
        "00000000 0000000000000064 00000007 0001 6d",
    ),
    (
        "txn-offsets",
        TXN_OFFSETS,
        # + generation -1, member "", instance null; flexible. v5 (KIP-890 part 2) is the
        # same body as v4 (TxnOffsetCommitRequest.json, Kafka 4.0).
        [3, 4, 5],
        f"{TX_C} 02 67 {PID} {EPOCH} ffffffff 01 00 | 02 02 74 02 "
        "00000000 0000000000000064 00000007 02 6d 00 | 00 | 00",
    ),
    (
        "txn-offsets-group",
        TXN_OFFSETS_GROUP,
        [3, 5],
        f"{TX_C} 02 67 {PID} {EPOCH} 00000003 03 6d31 02 69 | 02 02 74 02 "
        "00000000 0000000000000064 00000007 02 6d 00 | 00 | 00",
    ),
    ("sasl-handshake", SASL_HANDSHAKE, [0, 1], "0005 504c41494e"),
    ("sasl-authenticate", SASL_AUTHENTICATE, [0, 1], "00000004 00750070"),
    ("sasl-authenticate", SASL_AUTHENTICATE, [2], "05 00750070 00"),
    ("describe-cluster", DESCRIBE_CLUSTER, [0], "00 00"),
    ("describe-cluster", DESCRIBE_CLUSTER, [1], "00 01 00"),
]


@pytest.mark.parametrize(
    ("request_", "version", "expected"),
    [
        pytest.param(request, version, expected, id=f"{name}-v{version}")
        for name, request, versions, expected in GOLDEN
        for version in versions
    ],
)
def test_request_golden_bytes(request_: Request, version: int, expected: str) -> None:
    assert body(request_, version) == h(expected)


def test_every_implemented_request_version_has_golden_bytes() -> None:
    covered = {(type(request), v) for _, request, versions, _ in GOLDEN for v in versions}
    for cls in {type(request) for _, request, _, _ in GOLDEN}:
        high = getattr(cls, "HIGHEST_ENCODABLE_VERSION", cls.MAX_VERSION)
        for version in range(cls.MIN_VERSION, high + 1):
            assert (cls, version) in covered, f"{cls.__name__} v{version}"


def test_produce_with_acks_zero_expects_no_response() -> None:
    assert not ProduceRequest(None, 0, 1000, []).expects_response()
    assert ProduceRequest(None, 1, 1000, []).expects_response()
    assert ProduceRequest(None, -1, 1000, []).expects_response()
    assert MetadataRequest(None).expects_response()


def test_produce_passes_large_records_through_and_inlines_small_ones() -> None:
    large = memoryview(bytes(range(256)) * 8)
    request = ProduceRequest(
        None,
        1,
        1000,
        [ProduceTopicData("t", [ProducePartitionData(0, large), ProducePartitionData(1, b"ab")])],
    )
    parts = request.encode(3)
    assert [part is large for part in parts] == [False, True, False]
    assert bytes(parts[0]).endswith(h("00000000 00000800"))  # index 0, records size 2048
    assert bytes(parts[2]) == h("00000001 00000002 6162")


@pytest.mark.parametrize(
    ("request_", "version"),
    [
        (ProduceRequest(None, 1, 1, []), 2),  # below the implemented range
        (ProduceRequest(None, 1, 1, []), 13),
        (MetadataRequest(None), 0),
        (MetadataRequest(None), 14),
        (MetadataRequest(["t"], allow_auto_topic_creation=False), 3),
        (MetadataRequest(["t"], include_cluster_authorized_operations=True), 11),
        (MetadataRequest(["t"], include_topic_authorized_operations=True), 7),
        (InitProducerIdRequest("tx", 1, 5, 2), 2),  # KIP-360 fields need v3
        (FindCoordinatorRequest(["tx"], 1), 0),  # transaction coordinators need v1
        (FindCoordinatorRequest(["a", "b"], 0), 3),  # batches need v4
        (ADD_PARTITIONS_BATCH, 3),  # verify_only needs v4
        (AddPartitionsToTxnRequest([]), 3),
        (AddPartitionsToTxnRequest([]), 6),
        (TXN_OFFSETS_GROUP, 2),  # group metadata needs v3
        (TXN_OFFSETS, 6),
        (END_TXN, 6),
        (DescribeClusterRequest(endpoint_type=2), 0),
        (SaslHandshakeRequest("PLAIN"), 2),
    ],
)
def test_unsupported_versions_and_fields_raise(request_: Request, version: int) -> None:
    with pytest.raises(UnsupportedVersionError):
        request_.encode(version)


def test_ignorable_fields_are_dropped_silently() -> None:
    # ApiVersions v0-2 have no client software fields; TxnOffsetCommit v0-1 no leader epoch.
    assert body(ApiVersionsRequest("name", "version"), 2) == b""
    assert body(TXN_OFFSETS, 1) == body(TxnOffsetCommitRequest("tx", "g", 5, 2, _OFFSETS), 0)


def test_add_partitions_negotiates_only_the_client_versions() -> None:
    assert AddPartitionsToTxnRequest.MAX_VERSION == 3


def test_sasl_authenticate_repr_hides_the_credentials() -> None:
    text = repr(SaslAuthenticateRequest(b"user:secret"))
    assert "secret" not in text
    assert "11 bytes" in text


# ---- responses decoded from hand-built bytes ----------------------------------------------


def decode(request: Request, version: int, data: str) -> object:
    return request.decode_response(memoryview(h(data)), version)


def test_api_versions_response_v0() -> None:
    response = decode(API_VERSIONS, 0, "0000 | 00000002 | 0000 0003 000b | 0012 0000 0004")
    assert response == ApiVersionsResponse(
        0, [ApiVersion(0, 3, 11), ApiVersion(18, 0, 4)], throttle_time_ms=0
    )


def test_api_versions_response_v1_has_throttle_time() -> None:
    response = decode(API_VERSIONS, 1, "0000 | 00000001 | 0012 0000 0004 | 00000064")
    assert response == ApiVersionsResponse(0, [ApiVersion(18, 0, 4)], throttle_time_ms=100)


def test_api_versions_response_v3_tagged_fields_and_unknown_tags() -> None:
    response = decode(
        API_VERSIONS,
        3,
        "0000 | 03 | 0000 0003 000b 00 | 0012 0000 0004 00 | 00000064"
        "| 03"  # three tagged fields
        "| 00 09 02 03 6d76 0001 0014 00"  # tag 0: supported_features [("mv", 1, 20)]
        "| 01 08 0000000000000007"  # tag 1: finalized_features_epoch 7
        "| 09 02 ffff",  # tag 9: unknown, skipped
    )
    assert response == ApiVersionsResponse(
        0,
        [ApiVersion(0, 3, 11), ApiVersion(18, 0, 4)],
        throttle_time_ms=100,
        supported_features=[SupportedFeatureKey("mv", 1, 20)],
        finalized_features_epoch=7,
    )
    assert isinstance(response, ApiVersionsResponse)
    assert response.supported_versions() == {0: (3, 11), 18: (0, 4)}


def test_api_versions_response_v3_finalized_features() -> None:
    # Written field by field from ApiVersionsResponse.json: what a Kafka 4.0 broker with
    # transaction.version 2 finalized sends (KIP-584 finalized features, KIP-890 part 2).
    transaction_version = b"transaction.version".hex()  # 19 bytes
    response = decode(
        API_VERSIONS,
        3,
        "0000"  # error_code 0
        "| 03"  # api_keys: compact array of 2
        "| 0000 0003 000c 00"  # Produce v3-v12, no tags
        "| 001a 0000 0005 00"  # EndTxn (26) v0-v5, no tags
        "| 00000000"  # throttle_time_ms 0
        "| 02"  # two tagged fields
        "| 01 08 000000000000002a"  # tag 1, 8 bytes: finalized_features_epoch 42
        "| 02 1a"  # tag 2, 26 bytes: finalized_features
        f"| 02 | 14 {transaction_version} | 0002 | 0001 | 00",  # [name, max 2, min 1, no tags]
    )
    assert response == ApiVersionsResponse(
        0,
        [ApiVersion(0, 3, 12), ApiVersion(26, 0, 5)],
        throttle_time_ms=0,
        finalized_features_epoch=42,
        finalized_features=[FinalizedFeatureKey("transaction.version", 2, 1)],
    )


def test_transactions_v1_caps_the_kip_890_versions() -> None:
    # Java's LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2: Produce 11, EndTxn 4, TxnOffsetCommit 4.
    assert PRODUCE.highest_version() == ProduceRequest.MAX_VERSION == 12
    assert ProduceRequest("tx", -1, 1, [], version_cap=11).highest_version() == 11
    assert ProduceRequest("tx", -1, 1, [], version_cap=99).highest_version() == 12
    assert END_TXN.highest_version() == EndTxnRequest.MAX_VERSION == 5
    assert EndTxnRequest("tx", 5, 2, True, version_cap=4).highest_version() == 4
    assert TXN_OFFSETS.highest_version() == TxnOffsetCommitRequest.MAX_VERSION == 5
    capped = TxnOffsetCommitRequest("tx", "g", 5, 2, _OFFSETS, version_cap=4)
    assert capped.highest_version() == 4
    assert METADATA.highest_version() == MetadataRequest.MAX_VERSION


def test_api_versions_unsupported_version_answer_is_read_as_v0() -> None:
    # A broker that does not know v3 answers UNSUPPORTED_VERSION (35) in the v0 layout.
    response = decode(API_VERSIONS, 3, "0023 | 00000001 | 0012 0000 0002")
    assert response == ApiVersionsResponse(35, [ApiVersion(18, 0, 2)])


def test_api_versions_corrupt_answer_other_than_unsupported_version_is_not_reread() -> None:
    with pytest.raises(CorruptResponseError):
        decode(API_VERSIONS, 3, "0000 | 00000001 | 0012 0000 0002")


def test_metadata_response_v1() -> None:
    response = decode(
        METADATA,
        1,
        "00000001 | 00000001 0001 68 00002384 ffff"  # brokers: node 1, "h", 9092, rack null
        "| 00000002"  # controller id
        "| 00000001 | 0000 0001 74 00"  # topics: error 0, "t", not internal
        "| 00000001 | 0000 00000000 00000001"  # partitions: error 0, index 0, leader 1
        "| 00000002 00000001 00000002 | 00000001 00000001",  # replicas [1, 2], isr [1]
    )
    assert response == MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponseBroker(1, "h", 9092, None)],
        cluster_id=None,
        controller_id=2,
        topics=[
            MetadataResponseTopic(
                0, "t", None, False, [MetadataResponsePartition(0, 0, 1, -1, [1, 2], [1], [])]
            )
        ],
    )


def test_metadata_response_v8() -> None:
    response = decode(
        METADATA,
        8,
        "00000005"  # throttle
        "| 00000001 | 00000001 0001 68 00002384 0002 7231"  # rack "r1"
        "| 0001 63"  # cluster id "c"
        "| 00000001"  # controller
        "| 00000001 | 0003 0001 74 01"  # error 3, "t", internal
        "| 00000001 | 0000 00000000 00000001 00000009"  # + leader epoch 9
        "| 00000001 00000001 | 00000001 00000001 | 00000000"  # + offline replicas []
        "| 00000008"  # topic authorized operations
        "| 00000010",  # cluster authorized operations
    )
    assert response == MetadataResponse(
        5,
        [MetadataResponseBroker(1, "h", 9092, "r1")],
        "c",
        1,
        [
            MetadataResponseTopic(
                3, "t", None, True, [MetadataResponsePartition(0, 0, 1, 9, [1], [1], [])], 8
            )
        ],
        16,
    )


def test_metadata_response_v12() -> None:
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    response = decode(
        METADATA,
        12,
        "00000000"
        "| 02 | 00000001 02 68 00002384 00 00"  # broker, rack null, tags
        "| 03 6964"  # cluster id "id"
        "| 00000001"
        "| 03"  # two topics
        "| 0000 02 74 00112233445566778899aabbccddeeff 00"  # "t", topic id, not internal
        "| 02 | 0000 00000000 00000001 00000005 02 00000001 02 00000001 01 00"
        "| 80000000 00"  # no authorized operations, topic tags
        f"| 0064 00 {ZERO_UUID} 00 01 80000000 00"  # error 100, null name, zero id, no partitions
        "| 00",  # body tags (no cluster authorized operations in v11+)
    )
    assert response == MetadataResponse(
        0,
        [MetadataResponseBroker(1, "h", 9092, None)],
        "id",
        1,
        [
            MetadataResponseTopic(
                0, "t", topic_id, False, [MetadataResponsePartition(0, 0, 1, 5, [1], [1], [])]
            ),
            MetadataResponseTopic(100, None, None, False, []),
        ],
    )


def test_metadata_response_v13_has_a_top_level_error_code() -> None:
    # KIP-1102: v13 adds ErrorCode after the topics; REBOOTSTRAP_REQUIRED (129) asks the
    # client to contact its bootstrap servers again. The request is v12's.
    response = decode(
        METADATA,
        13,
        "00000000"
        "| 01"  # no brokers
        "| 03 6964"  # cluster id "id"
        "| ffffffff"  # no controller
        "| 01"  # no topics
        "| 0081"  # error code 129
        "| 00",  # body tags
    )
    assert response == MetadataResponse(0, [], "id", -1, [], error_code=129)
    assert body(METADATA, 13) == body(METADATA, 12)


PRODUCE_RESPONSE_TOPIC_V3 = (
    "00000001 | 0001 74 | 00000001"
    "| 00000001 0006 0000000000000064 ffffffffffffffff"  # index 1, error 6, offset 100, -1
)


def test_produce_response_v3() -> None:
    response = decode(PRODUCE, 3, PRODUCE_RESPONSE_TOPIC_V3 + "| 00000005")
    assert response == ProduceResponse(
        [ProduceTopicResponse("t", [ProducePartitionResponse(1, 6, 100, -1)])], 5
    )


def test_produce_response_v5_has_log_start_offset() -> None:
    response = decode(PRODUCE, 5, PRODUCE_RESPONSE_TOPIC_V3 + "0000000000000007 | 00000000")
    assert response == ProduceResponse(
        [ProduceTopicResponse("t", [ProducePartitionResponse(1, 6, 100, -1, 7)])], 0
    )


def test_produce_response_v8_has_record_errors() -> None:
    response = decode(
        PRODUCE,
        8,
        PRODUCE_RESPONSE_TOPIC_V3 + "0000000000000007"
        "| 00000002 | 00000002 0003 626164 | 00000004 ffff"  # record errors [(2, "bad"), (4, null)]
        "| 0004 6f6f7073"  # error message "oops"
        "| 00000000",
    )
    assert response == ProduceResponse(
        [
            ProduceTopicResponse(
                "t",
                [
                    ProducePartitionResponse(
                        1,
                        6,
                        100,
                        -1,
                        7,
                        [BatchIndexAndErrorMessage(2, "bad"), BatchIndexAndErrorMessage(4, None)],
                        "oops",
                    )
                ],
            )
        ]
    )


def test_produce_response_v9_ignores_tags_it_does_not_know() -> None:
    response = decode(
        PRODUCE,
        9,
        "02 | 02 74 | 02 | 00000001 0000 0000000000000064 ffffffffffffffff 0000000000000000"
        "| 01 | 00 | 01 00 09 00000003 00000007 00"  # a tag 0 before v10 is not current_leader
        "| 00 | 00000000 | 00",
    )
    assert isinstance(response, ProduceResponse)
    assert response.topics[0].partitions[0].current_leader is None
    assert response.topics[0].partitions[0].base_offset == 100


def test_produce_response_v10_tagged_current_leader_and_node_endpoints() -> None:
    response = decode(
        PRODUCE,
        10,
        "02 | 02 74 | 02"
        "| 00000001 0006 ffffffffffffffff ffffffffffffffff ffffffffffffffff"
        "| 01 | 00"  # no record errors, null error message
        "| 02 | 00 09 00000003 00000007 00"  # tag 0: current leader 3, epoch 7
        "| 2a 03 010203"  # tag 42: unknown, skipped
        "| 00"  # topic tags
        "| 00000005"  # throttle
        "| 01 | 00 0d 02 00000003 02 68 00002384 00 00",  # tag 0: node endpoints
    )
    assert response == ProduceResponse(
        [
            ProduceTopicResponse(
                "t",
                [
                    ProducePartitionResponse(
                        1, 6, -1, -1, -1, [], None, current_leader=LeaderIdAndEpoch(3, 7)
                    )
                ],
            )
        ],
        5,
        [NodeEndpoint(3, "h", 9092, None)],
    )


def test_init_producer_id_responses() -> None:
    v0 = "00000000 0000 0000000000000005 0002"
    assert decode(INIT_IDEMPOTENT, 0, v0) == InitProducerIdResponse(0, 0, 5, 2)
    assert decode(INIT_IDEMPOTENT, 2, v0 + "00") == InitProducerIdResponse(0, 0, 5, 2)


def test_find_coordinator_responses() -> None:
    assert decode(FIND_GROUP, 0, "0000 00000001 0001 68 00002384") == FindCoordinatorResponse(
        0, [Coordinator("g", 1, "h", 9092, 0)]
    )
    assert decode(
        FIND_TXN, 1, "0000000a 000f 0004 6c6f6164 ffffffff 0000 ffffffff"
    ) == FindCoordinatorResponse(10, [Coordinator("tx", -1, "", -1, 15, "load")])
    assert decode(FIND_TXN, 3, "00000000 0000 00 00000001 02 68 00002384 00") == (
        FindCoordinatorResponse(0, [Coordinator("tx", 1, "h", 9092, 0)])
    )
    assert decode(
        FIND_BATCH,
        4,
        "00000000 | 03 | 02 61 00000001 02 68 00002384 0000 00 00"
        "| 02 62 ffffffff 01 ffffffff 000f 05 6c6f6164 00 | 00",
    ) == FindCoordinatorResponse(
        0, [Coordinator("a", 1, "h", 9092, 0), Coordinator("b", -1, "", -1, 15, "load")]
    )


def test_add_partitions_to_txn_responses() -> None:
    expected_topics = [
        AddPartitionsToTxnTopicResult(
            "t",
            [AddPartitionsToTxnPartitionResult(0, 0), AddPartitionsToTxnPartitionResult(1, 53)],
        )
    ]
    expected = AddPartitionsToTxnResponse(1, 0, [AddPartitionsToTxnResult("tx", expected_topics)])
    assert (
        decode(ADD_PARTITIONS, 0, "00000001 00000001 0001 74 00000002 00000000 0000 00000001 0035")
        == expected
    )
    assert decode(
        ADD_PARTITIONS, 3, "00000001 02 02 74 03 00000000 0000 00 00000001 0035 00 00 00"
    ) == (expected)
    assert (
        decode(
            ADD_PARTITIONS_BATCH,
            4,
            "00000001 0000 02 03 7478 02 02 74 03 00000000 0000 00 00000001 0035 00 00 00 00",
        )
        == expected
    )


def test_add_offsets_end_txn_and_txn_offset_commit_responses() -> None:
    assert decode(ADD_OFFSETS, 0, "00000000 0030") == AddOffsetsToTxnResponse(0, 48)
    assert decode(ADD_OFFSETS, 3, "00000000 0030 00") == AddOffsetsToTxnResponse(0, 48)
    assert decode(END_TXN, 0, "00000002 0033") == EndTxnResponse(2, 51)
    assert decode(END_TXN, 5, f"00000000 0000 {PID} 0003 00") == EndTxnResponse(0, 0, 5, 3)
    expected = TxnOffsetCommitResponse(
        0, [TxnOffsetCommitResponseTopic("t", [TxnOffsetCommitResponsePartition(0, 22)])]
    )
    assert decode(TXN_OFFSETS, 0, "00000000 00000001 0001 74 00000001 00000000 0016") == expected
    assert decode(TXN_OFFSETS, 3, "00000000 02 02 74 02 00000000 0016 00 00 00") == expected


def test_sasl_responses() -> None:
    assert decode(SASL_HANDSHAKE, 1, "0021 00000002 0005 504c41494e 0003 787878") == (
        SaslHandshakeResponse(33, ["PLAIN", "xxx"])
    )
    assert decode(SASL_AUTHENTICATE, 0, "0000 ffff 00000002 6869") == SaslAuthenticateResponse(
        0, None, b"hi"
    )
    assert decode(
        SASL_AUTHENTICATE, 1, "003a 0003 626164 00000000 0000000000000e10"
    ) == SaslAuthenticateResponse(58, "bad", b"", 3600)
    assert decode(
        SASL_AUTHENTICATE, 2, "0000 00 03 6869 0000000000000e10 00"
    ) == SaslAuthenticateResponse(0, None, b"hi", 3600)


def test_describe_cluster_responses() -> None:
    brokers = "02 00000001 02 68 00002384 00 00"
    assert decode(
        DESCRIBE_CLUSTER, 0, f"00000000 0000 00 03 6964 00000001 {brokers} 80000000 00"
    ) == DescribeClusterResponse(
        0, 0, None, 1, "id", 1, [DescribeClusterBroker(1, "h", 9092, None)], -(1 << 31)
    )
    assert decode(
        DESCRIBE_CLUSTER, 1, f"00000000 0000 00 02 03 6964 00000001 {brokers} 00000008 00"
    ) == DescribeClusterResponse(
        0, 0, None, 2, "id", 1, [DescribeClusterBroker(1, "h", 9092, None)], 8
    )


@pytest.mark.parametrize(
    ("request_", "version", "data"),
    [
        (METADATA, 1, "00000001 | 00000001 0001 68"),  # truncated inside a broker
        (METADATA, 9, "00000000 | 00"),  # null brokers array
        (METADATA, 1, "7fffffff"),  # a count no data backs
        (PRODUCE, 9, "02 | 02 74 | 02 | 00000001"),
        (PRODUCE, 3, "ffffffff 00000000"),  # null topics where not nullable
        (INIT_IDEMPOTENT, 0, "00000000 0000 00000000"),
        (SASL_AUTHENTICATE, 2, "0000 00 09 6869"),  # bytes longer than the data
    ],
)
def test_corrupt_responses_raise_corrupt_response_error(
    request_: Request, version: int, data: str
) -> None:
    with pytest.raises(CorruptResponseError):
        decode(request_, version, data)
