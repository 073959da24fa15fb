"""Golden bytes for the topic administration messages: CreateTopics (19), DeleteTopics (20)
and DescribeConfigs (32), every version a Kafka 4 broker offers.

The expected bytes are written out by hand from Kafka's JSON schemas (CreateTopicsRequest.json
and the others, as kafka-clients 4.4 ships them), field by field, one literal per group of
versions whose layout the schema says is identical. ``tests/unit/test_protocol_oracle.py``
checks the same messages against kafka-python's schema-driven codec besides.
"""

from __future__ import annotations

import uuid

import pytest

from aioproducer.errors import UnsupportedVersionError
from aioproducer.protocol.api import (
    CLIENT_THROTTLES_FROM,
    FIRST_FLEXIBLE_VERSION,
    ApiKey,
    Request,
    response_header_flexible,
)
from aioproducer.protocol.messages import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)


def h(text: str) -> bytes:
    """Hex with spaces and ``|`` separators allowed, for readable annotated literals."""
    return bytes.fromhex(text.replace("|", " "))


def body(request: Request, version: int) -> bytes:
    return b"".join(request.encode(version))


def decode(request: Request, version: int, data: str) -> object:
    return request.decode_response(memoryview(h(data)), version)


ZERO_UUID = "00" * 16
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")
TOPIC_ID_HEX = "0123456789abcdef0123456789abcdef"

# ---- requests ------------------------------------------------------------------------------

# Topic "t": 3 partitions, replication factor 1, config a=b; timeout 5000 ms.
CREATE = CreateTopicsRequest(
    [CreatableTopic("t", 3, 1, [], [CreatableTopicConfig("a", "b")])], 5000
)
# Partition 0 placed on brokers 1 and 2 by hand, config a set to null (the default), checked
# without creating anything.
CREATE_ASSIGNED = CreateTopicsRequest(
    [
        CreatableTopic(
            "t", -1, -1, [CreatableReplicaAssignment(0, [1, 2])], [CreatableTopicConfig("a", None)]
        )
    ],
    0,
    validate_only=True,
)
# The broker's default partition count and replication factor (KIP-464, v4+).
CREATE_DEFAULTS = CreateTopicsRequest([CreatableTopic("t")], 60000)

DELETE = DeleteTopicsRequest(["a", "b"], 5000)

# Every config of topic "t"; config "k" of broker "1".
DESCRIBE_CONFIGS = DescribeConfigsRequest(
    [DescribeConfigsResource(2, "t"), DescribeConfigsResource(4, "1", ["k"])]
)
DESCRIBE_CONFIGS_DOCS = DescribeConfigsRequest(
    [DescribeConfigsResource(2, "t")], include_synonyms=True, include_documentation=True
)

GOLDEN: list[tuple[str, Request, list[int], str]] = [
    (
        "create",
        CREATE,
        [2, 3, 4],
        "00000001 | 0001 74 | 00000003 | 0001"  # one topic "t": partitions 3, replication 1
        "| 00000000"  # no assignments
        "| 00000001 0001 61 0001 62"  # configs: a=b
        "| 00001388 | 00",  # timeout 5000, validate_only false
    ),
    (
        "create",
        CREATE,
        [5, 6, 7],  # flexible; v6 and v7 change only the answers
        "02 | 02 74 | 00000003 | 0001"
        "| 01"  # compact empty array of assignments
        "| 02 02 61 02 62 00"  # one config a=b, its tags
        "| 00"  # topic tags
        "| 00001388 | 00 | 00",  # timeout, validate_only, body tags
    ),
    (
        "create-assigned",
        CREATE_ASSIGNED,
        [2, 3, 4],
        "00000001 | 0001 74 | ffffffff | ffff"  # partitions and replication -1
        "| 00000001 00000000 00000002 00000001 00000002"  # partition 0 on brokers 1 and 2
        "| 00000001 0001 61 ffff"  # config a, null value
        "| 00000000 | 01",  # timeout 0, validate_only true
    ),
    (
        "create-assigned",
        CREATE_ASSIGNED,
        [5, 6, 7],
        "02 | 02 74 | ffffffff | ffff"
        "| 02 00000000 03 00000001 00000002 00"  # one assignment, two broker ids, tags
        "| 02 02 61 00 00"  # one config: a, null (compact), tags
        "| 00 | 00000000 | 01 | 00",
    ),
    (
        "create-defaults",
        CREATE_DEFAULTS,
        [4],
        "00000001 | 0001 74 | ffffffff | ffff | 00000000 | 00000000 | 0000ea60 | 00",
    ),
    (
        "create-defaults",
        CREATE_DEFAULTS,
        [5, 6, 7],
        "02 | 02 74 | ffffffff | ffff | 01 | 01 | 00 | 0000ea60 | 00 | 00",
    ),
    ("delete", DELETE, [1, 2, 3], "00000002 0001 61 0001 62 | 00001388"),
    ("delete", DELETE, [4, 5], "03 02 61 02 62 | 00001388 | 00"),  # flexible
    (
        "delete",
        DELETE,
        [6],  # DeleteTopicState: name (nullable), zero topic id, tags
        f"03 | 02 61 {ZERO_UUID} 00 | 02 62 {ZERO_UUID} 00 | 00001388 | 00",
    ),
    (
        "describe-configs",
        DESCRIBE_CONFIGS,
        [1, 2],
        "00000002"
        "| 02 0001 74 ffffffff"  # topic "t", every key (null array)
        "| 04 0001 31 00000001 0001 6b"  # broker "1", key "k"
        "| 00",  # include_synonyms false
    ),
    (
        "describe-configs",
        DESCRIBE_CONFIGS,
        [3],
        "00000002 | 02 0001 74 ffffffff | 04 0001 31 00000001 0001 6b | 00 | 00",
    ),
    (
        "describe-configs",
        DESCRIBE_CONFIGS,
        [4],
        "03 | 02 02 74 00 00 | 04 02 31 02 02 6b 00 | 00 | 00 | 00",
    ),
    ("describe-configs-docs", DESCRIBE_CONFIGS_DOCS, [3], "00000001 02 0001 74 ffffffff 01 01"),
    ("describe-configs-docs", DESCRIBE_CONFIGS_DOCS, [4], "02 02 02 74 00 00 01 01 00"),
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


def test_every_version_a_kafka_4_broker_offers_has_golden_bytes() -> None:
    # The versions Kafka 4.x accepts (the schemas' validVersions): all implemented.
    offered = {
        CreateTopicsRequest: (2, 7),
        DeleteTopicsRequest: (1, 6),
        DescribeConfigsRequest: (1, 4),
    }
    covered = {(type(request), v) for _, request, versions, _ in GOLDEN for v in versions}
    for cls, (low, high) in offered.items():
        assert (low, high) == (cls.MIN_VERSION, cls.MAX_VERSION)
        for version in range(low, high + 1):
            assert (cls, version) in covered, f"{cls.__name__} v{version}"


@pytest.mark.parametrize(
    ("request_", "version"),
    [
        (CREATE_DEFAULTS, 2),  # the broker's defaults need v4 (KIP-464)
        (CREATE_DEFAULTS, 3),
        (CreateTopicsRequest([CreatableTopic("t", 3)]), 3),  # a default replication factor too
        (CREATE, 1),  # below the versions Kafka 4 still serves
        (CREATE, 8),
        (DELETE, 0),
        (DELETE, 7),
        (DESCRIBE_CONFIGS, 0),
        (DESCRIBE_CONFIGS, 5),
        (DESCRIBE_CONFIGS_DOCS, 2),  # include_documentation needs v3, and is not ignorable
    ],
)
def test_unsupported_versions_and_fields_raise(request_: Request, version: int) -> None:
    with pytest.raises(UnsupportedVersionError):
        request_.encode(version)


def test_assignments_need_no_counts_below_v4() -> None:
    # A topic placed by hand carries -1 counts in every version.
    assert body(CREATE_ASSIGNED, 2).startswith(h("00000001 0001 74 ffffffff ffff"))


def test_the_tables_know_the_new_apis() -> None:
    assert FIRST_FLEXIBLE_VERSION[ApiKey.CREATE_TOPICS] == 5
    assert FIRST_FLEXIBLE_VERSION[ApiKey.DELETE_TOPICS] == 4
    assert FIRST_FLEXIBLE_VERSION[ApiKey.DESCRIBE_CONFIGS] == 4
    # "Starting in version N, on quota violation, brokers send out responses before
    # throttling" (the response schemas).
    assert CLIENT_THROTTLES_FROM[ApiKey.CREATE_TOPICS] == 3
    assert CLIENT_THROTTLES_FROM[ApiKey.DELETE_TOPICS] == 2
    assert CLIENT_THROTTLES_FROM[ApiKey.DESCRIBE_CONFIGS] == 2
    assert not response_header_flexible(ApiKey.CREATE_TOPICS, 4)
    assert response_header_flexible(ApiKey.CREATE_TOPICS, 5)
    assert not response_header_flexible(ApiKey.DELETE_TOPICS, 3)
    assert response_header_flexible(ApiKey.DELETE_TOPICS, 4)
    assert response_header_flexible(ApiKey.DESCRIBE_CONFIGS, 4)


def test_response_size_caps_grow_with_the_request() -> None:
    one = CreateTopicsRequest([CreatableTopic("t", 1, 1)]).response_size_limit()
    two = CreateTopicsRequest([CreatableTopic("t", 1, 1)] * 2).response_size_limit()
    assert one is not None and two is not None and two > one
    assert DeleteTopicsRequest(["a"] * 10).response_size_limit() is not None
    assert DESCRIBE_CONFIGS.response_size_limit() is not None


# ---- responses -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4])
def test_create_topics_response_classic(version: int) -> None:
    response = decode(
        CREATE,
        version,
        "00000007"  # throttle 7 ms
        "| 00000002"
        "| 0001 74 0000 ffff"  # "t": created, no message
        "| 0001 75 0024 0005 6578697374",  # "u": 36 TOPIC_ALREADY_EXISTS, "exist"
    )
    assert response == CreateTopicsResponse(
        7,
        [CreatableTopicResult("t", 0), CreatableTopicResult("u", 36, "exist")],
    )


@pytest.mark.parametrize("version", [5, 6])
def test_create_topics_response_flexible_with_configs(version: int) -> None:
    response = decode(
        CREATE,
        version,
        "00000000 | 03"
        # "t": no error, null message, 3 partitions, replication 1, configs [a=b read-only
        # false, source 1, not sensitive], topic tags (none)
        "| 02 74 0000 00 00000003 0001 | 02 02 61 02 62 00 01 00 00 | 00"
        # "u": 38 INVALID_REPLICATION_FACTOR with a message, counts -1, configs null, and
        # tag 0 (TopicConfigErrorCode, 2 bytes): 29 TOPIC_AUTHORIZATION_FAILED
        "| 02 75 0026 03 6e6f ffffffff ffff | 00 | 01 00 02 001d"
        "| 00",  # body tags
    )
    assert response == CreateTopicsResponse(
        0,
        [
            CreatableTopicResult(
                "t", 0, None, None, 3, 1, [CreatableTopicConfigs("a", "b", False, 1, False)]
            ),
            CreatableTopicResult("u", 38, "no", None, -1, -1, None, 29),
        ],
    )


def test_create_topics_response_v7_topic_ids() -> None:
    response = decode(
        CREATE,
        7,
        f"00000000 | 03 | 02 74 {TOPIC_ID_HEX} 0000 00 00000001 0001 01 00"
        f"| 02 75 {ZERO_UUID} 0024 00 ffffffff ffff 00 00 | 00",
    )
    assert isinstance(response, CreateTopicsResponse)
    created, existing = response.topics
    assert (created.name, created.topic_id, created.configs) == ("t", TOPIC_ID, [])
    assert (existing.topic_id, existing.error_code, existing.configs) == (None, 36, None)


def test_create_topics_response_skips_tags_it_does_not_know() -> None:
    response = decode(
        CREATE,
        5,
        "00000000 | 02 | 02 74 0000 00 00000001 0001 01 | 01 07 02 abcd | 01 05 01 ff",
    )
    assert isinstance(response, CreateTopicsResponse)
    assert response.topics == [CreatableTopicResult("t", 0, None, None, 1, 1, [], 0)]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_delete_topics_response_classic(version: int) -> None:
    response = decode(DELETE, version, "00000003 | 00000002 | 0001 61 0000 | 0001 62 0003")
    assert response == DeleteTopicsResponse(
        3, [DeletableTopicResult("a", 0), DeletableTopicResult("b", 3)]
    )


def test_delete_topics_response_v4_flexible() -> None:
    response = decode(DELETE, 4, "00000000 | 03 | 02 61 0000 00 | 02 62 0003 00 | 00")
    assert response == DeleteTopicsResponse(
        0, [DeletableTopicResult("a", 0), DeletableTopicResult("b", 3)]
    )


def test_delete_topics_response_v5_error_messages() -> None:
    response = decode(DELETE, 5, "00000000 | 02 | 02 62 0003 04 676f6e 00 | 00")
    assert response == DeleteTopicsResponse(0, [DeletableTopicResult("b", 3, None, "gon")])


def test_delete_topics_response_v6_ids_and_null_names() -> None:
    response = decode(
        DELETE,
        6,
        f"00000000 | 03 | 02 61 {TOPIC_ID_HEX} 0000 00 00 | 00 {ZERO_UUID} 0064 00 00 | 00",
    )
    assert response == DeleteTopicsResponse(
        0,
        [DeletableTopicResult("a", 0, TOPIC_ID, None), DeletableTopicResult(None, 100)],
    )


@pytest.mark.parametrize("version", [1, 2])
def test_describe_configs_response_v1_v2(version: int) -> None:
    response = decode(
        DESCRIBE_CONFIGS,
        version,
        "00000000 | 00000001"
        "| 0000 ffff 02 0001 74"  # no error, null message, topic "t"
        "| 00000001 | 0001 6b 0001 76 00 01 00"  # k=v: not read-only, source 1, not sensitive
        "| 00000001 0001 6b 0001 76 01",  # one synonym: k=v, source 1
    )
    assert response == DescribeConfigsResponse(
        0,
        [
            DescribeConfigsResult(
                0,
                None,
                2,
                "t",
                [
                    DescribeConfigsResourceResult(
                        "k", "v", False, 1, False, [DescribeConfigsSynonym("k", "v", 1)]
                    )
                ],
            )
        ],
    )


def test_describe_configs_response_v3_types_and_documentation() -> None:
    response = decode(
        DESCRIBE_CONFIGS,
        3,
        "00000000 | 00000001 | 0003 0003 6e6f21 02 0001 78 | 00000001"
        "| 0001 6b ffff 01 05 01 00000000 02 0001 64",  # k: null, read-only, default, sensitive,
        # no synonyms, type STRING (2), documentation "d"
    )
    assert isinstance(response, DescribeConfigsResponse)
    [result] = response.results
    assert (result.error_code, result.error_message, result.resource_name) == (3, "no!", "x")
    assert result.configs == [DescribeConfigsResourceResult("k", None, True, 5, True, [], 2, "d")]


def test_describe_configs_response_v4_flexible() -> None:
    response = decode(
        DESCRIBE_CONFIGS,
        4,
        "00000000 | 02 | 0000 00 02 02 74 | 02"
        # k=v, not read-only, source 1, not sensitive, no synonyms, type BOOLEAN (1), no
        # documentation, tags
        "| 02 6b 02 76 00 01 00 01 01 00 00"
        "| 00 | 00",  # result tags, body tags
    )
    config = DescribeConfigsResourceResult("k", "v", False, 1, False, [], 1, None)
    assert config.documentation is None
    assert response == DescribeConfigsResponse(
        0, [DescribeConfigsResult(0, None, 2, "t", [config])]
    )
