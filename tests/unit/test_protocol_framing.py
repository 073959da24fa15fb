"""Request framing, response headers, and the flexible-version table."""

from __future__ import annotations

import pytest

from aioproducer.errors import CorruptResponseError, UnsupportedVersionError
from aioproducer.protocol import messages
from aioproducer.protocol.api import (
    FIRST_FLEXIBLE_VERSION,
    NEVER_FLEXIBLE,
    ApiKey,
    Request,
    response_header_flexible,
)
from aioproducer.protocol.framing import (
    decode_response_frame,
    encode_request,
    read_correlation_id,
    read_frame_size,
    split_response_header,
    total_size,
)
from aioproducer.protocol.messages import (
    ApiVersionsRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
)

h = bytes.fromhex

REQUEST_TYPES: list[type[Request]] = [
    cls
    for cls in vars(messages).values()
    if isinstance(cls, type) and issubclass(cls, Request) and cls is not Request
]


def test_every_api_key_has_a_request_type() -> None:
    assert sorted(cls.API_KEY for cls in REQUEST_TYPES) == sorted(ApiKey)


def test_request_header_v1_for_classic_versions() -> None:
    parts = encode_request(ApiVersionsRequest(), 0, 1, "cid")
    assert b"".join(parts) == h(
        "0000000d"  # size: 13 bytes follow
        "0012"  # api key 18
        "0000"  # api version 0
        "00000001"  # correlation id
        "0003 636964"  # client id "cid", int16 length
    )


def test_request_header_v2_keeps_an_int16_client_id_then_tagged_fields() -> None:
    parts = encode_request(ApiVersionsRequest("n", "1"), 3, 1, "cid")
    assert b"".join(parts) == h(
        "00000013"  # size: 19 bytes follow
        "0012 0003 00000001"  # api key 18, version 3, correlation id 1
        "0003 636964"  # client id: still an int16-length string in header v2
        "00"  # header tagged fields
        "026e 0231"  # body: compact strings "n" and "1"
        "00"  # body tagged fields
    )


def test_null_client_id() -> None:
    parts = encode_request(ApiVersionsRequest(), 0, 258, None)
    assert b"".join(parts) == h("0000000a 0012 0000 00000102 ffff")


def test_large_record_batches_are_passed_through_uncopied() -> None:
    records = memoryview(bytearray(b"r" * 5000))
    request = ProduceRequest(
        None, -1, 30000, [ProduceTopicData("t", [ProducePartitionData(0, records)])]
    )
    for version in (8, 9):
        parts = encode_request(request, version, 7, "c")
        assert any(part is records for part in parts)
        joined = b"".join(parts)
        assert int.from_bytes(joined[:4], "big") == len(joined) - 4 == total_size(parts) - 4
        assert read_frame_size(joined[:4]) == len(joined) - 4


def test_read_correlation_id_and_frame_size() -> None:
    assert read_correlation_id(memoryview(h("0000002a ffff"))) == 42
    with pytest.raises(CorruptResponseError):
        read_correlation_id(memoryview(h("0000")))
    with pytest.raises(CorruptResponseError):
        read_frame_size(h("ffffffff"))
    with pytest.raises(CorruptResponseError):
        read_frame_size(h("00"))


def test_split_response_header_v0() -> None:
    correlation_id, body = split_response_header(memoryview(h("00000007 0a0b")), False)
    assert correlation_id == 7
    assert bytes(body) == h("0a0b")


def test_split_response_header_v1_skips_tagged_fields() -> None:
    frame = memoryview(h("00000007 02 00 01 61 09 00 0a0b"))
    correlation_id, body = split_response_header(frame, True)
    assert correlation_id == 7
    assert bytes(body) == h("0a0b")


@pytest.mark.parametrize(
    ("frame", "flexible", "body"),
    [
        ("00000007 00 0a0b", True, "0a0b"),  # v1 with no tagged fields: the quick path
        ("00000007 00", True, ""),
        ("00000007", False, ""),  # v0 with an empty body
        ("00000007 00", False, "00"),  # v0: the zero is body, not a tag count
    ],
)
def test_split_response_header_usual_frames(frame: str, flexible: bool, body: str) -> None:
    correlation_id, rest = split_response_header(memoryview(h(frame)), flexible)
    assert correlation_id == 7
    assert bytes(rest) == h(body)


def test_split_response_header_corrupt() -> None:
    with pytest.raises(CorruptResponseError):
        split_response_header(memoryview(h("000000")), False)
    with pytest.raises(CorruptResponseError):
        split_response_header(memoryview(h("00000007 01 00 05 61")), True)


@pytest.mark.parametrize(
    ("api_key", "version", "flexible"),
    [
        (ApiKey.API_VERSIONS, 0, False),
        (ApiKey.API_VERSIONS, 3, False),  # always response header v0
        (ApiKey.API_VERSIONS, 4, False),
        (ApiKey.PRODUCE, 8, False),
        (ApiKey.PRODUCE, 9, True),
        (ApiKey.METADATA, 12, True),
        (ApiKey.INIT_PRODUCER_ID, 1, False),
        (ApiKey.INIT_PRODUCER_ID, 2, True),
        (ApiKey.SASL_HANDSHAKE, 1, False),
        (ApiKey.DESCRIBE_CLUSTER, 0, True),
    ],
)
def test_response_header_flexible(api_key: ApiKey, version: int, flexible: bool) -> None:
    assert response_header_flexible(api_key, version) is flexible


def test_response_header_flexible_unknown_key() -> None:
    with pytest.raises(UnsupportedVersionError):
        response_header_flexible(1, 0)


@pytest.mark.parametrize("cls", REQUEST_TYPES, ids=lambda cls: cls.__name__)
def test_flexible_versions_match_the_schemas(cls: type[Request]) -> None:
    """The table, the classes and kafka-python's schema loader (an oracle) agree."""
    from kafka.protocol.api_message import ApiMessage

    oracles = {
        sub.API_KEY: sub
        for sub in _all_subclasses(ApiMessage)
        if getattr(sub, "_class_version", None) is None and sub.is_request()
    }
    oracle = oracles[cls.API_KEY]
    assert FIRST_FLEXIBLE_VERSION[cls.API_KEY] == cls.FLEXIBLE_FROM
    first = next(
        (v for v in range(cls.MIN_VERSION, 20) if oracle.flexible_version_q(v)), NEVER_FLEXIBLE
    )
    assert first == cls.FLEXIBLE_FROM


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


def test_decode_response_frame() -> None:
    request = InitProducerIdRequest(None, 60000)
    frame = memoryview(
        h(
            "00000005"  # correlation id
            "00"  # response header v1 tagged fields (v2 is flexible)
            "00000000 0000 0000000000000003 0001 00"
        )
    )
    correlation_id, response = decode_response_frame(request, 2, frame)
    assert correlation_id == 5
    assert response == InitProducerIdResponse(0, 0, 3, 1)
