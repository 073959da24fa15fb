"""Property tests on the response decoders the producer depends on, beyond what
test_protocol_robustness.py and test_protocol_oracle.py already cover.

Those check fixed responses against kafka-python and random, truncated and mutated bytes
for "only CorruptResponseError". This file adds:

- **Any legal value round-trips.** Hypothesis builds ProduceResponse, MetadataResponse,
  ApiVersionsResponse and InitProducerIdResponse with arbitrary field values (negative
  numbers, empty and non-ASCII strings, nulls, empty and long arrays, tagged fields)
  for every version the client implements; kafka-python encodes them; our decoder must read
  the same values kafka-python reads back.
- **Hostile counts cost no memory.** Valid responses with array, string and varint lengths
  overwritten by huge values must fail (or decode) allocating memory in proportion to the
  input, not to the counts it announces (measured with tracemalloc).
- **Framing helpers on random bytes** raise only CorruptResponseError.
- **Every response, hostile lengths, a fixed seed.** A deterministic pass over the real
  bytes of every response type and version: lengths and counts overwritten with huge,
  negative and null values, over-long varints, cuts, flips and insertions. Each decode
  returns or raises CorruptResponseError with a message that says what is wrong and where,
  and allocates in proportion to the input.
"""

from __future__ import annotations

import contextlib
import random
import re
import tracemalloc
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioproducer.errors import CorruptResponseError
from aioproducer.protocol import messages as m
from aioproducer.protocol.framing import read_correlation_id, split_response_header

kp = pytest.importorskip("kafka.protocol")

# kafka-python ships no type information: its classes are Any here.
from kafka.protocol.metadata import (  # type: ignore[import-untyped]  # noqa: E402
    ApiVersionsResponse as KApiVersionsResponse,
)
from kafka.protocol.metadata import MetadataResponse as KMetadataResponse  # noqa: E402
from kafka.protocol.producer import (  # type: ignore[import-untyped]  # noqa: E402
    ProduceResponse as KProduceResponse,
)
from kafka.protocol.producer.transaction import (  # type: ignore[import-untyped]  # noqa: E402
    InitProducerIdResponse as KInitProducerIdResponse,
)

from tests.unit.test_protocol_oracle import (  # noqa: E402
    RESPONSE_CASES,
    _api_versions,
    _assert_matches,
    _init_producer_id,
    _metadata,
    _produce,
    _versions,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=30)
nullable_text = st.none() | text
# Bits 0-30 only: bit 31 would make the int32 bitfield negative, and kafka-python reads
# -2**31 as "absent", which our decoder reports as the schema default.
operations = st.sets(st.integers(0, 30), max_size=5)


# ---- Produce ------------------------------------------------------------------------------

_PR = KProduceResponse
_PP = _PR.TopicProduceResponse.PartitionProduceResponse


@st.composite
def produce_responses(draw: st.DrawFn, plain: bool = False) -> Any:
    """Any ProduceResponse; ``plain``: as brokers usually send them, with no record errors,
    error messages, current leaders or node endpoints (no tagged fields)."""
    record_errors = st.lists(
        st.builds(
            _PP.BatchIndexAndErrorMessage,
            batch_index=int32,
            batch_index_error_message=nullable_text,
        ),
        max_size=3,
    )
    partition = st.builds(
        _PP,
        index=int32,
        error_code=int16,
        base_offset=int64,
        log_append_time_ms=int64,
        log_start_offset=int64,
        record_errors=st.just([]) if plain else record_errors,
        error_message=st.none() if plain else nullable_text,
        current_leader=(
            st.just(_PP.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))
            if plain
            else st.builds(_PP.LeaderIdAndEpoch, leader_id=int32, leader_epoch=int32)
        ),
    )
    topics = st.lists(
        st.builds(
            _PR.TopicProduceResponse,
            name=text,
            partition_responses=st.lists(partition, max_size=4),
        ),
        max_size=3,
    )
    endpoints = st.lists(
        st.builds(_PR.NodeEndpoint, node_id=int32, host=text, port=int32, rack=nullable_text),
        max_size=2,
    )
    return _PR(
        responses=draw(topics),
        throttle_time_ms=draw(int32),
        node_endpoints=[] if plain else draw(endpoints),
    )


@SETTINGS
@given(response=produce_responses(), version=st.sampled_from(_versions(m.ProduceRequest)))
def test_any_produce_response_decodes_as_kafka_python_reads_it(response: Any, version: int) -> None:
    data = bytes(response.encode(version=version))
    request, _ = _produce(version)
    ours = request.decode_response(memoryview(data), version)
    theirs = _PR.decode(data, version=version)
    _assert_matches(
        ours, theirs, {"topics": "responses", "partitions": "partition_responses"}, "Produce"
    )


@SETTINGS
@given(response=produce_responses(plain=True), version=st.sampled_from(_versions(m.ProduceRequest)))
def test_the_quick_produce_decoder_reads_plain_responses_as_the_reader_does(
    response: Any, version: int
) -> None:
    data = memoryview(bytes(response.encode(version=version)))
    quick = m._decode_produce_common(data, version)
    # Short names and arrays (the usual case) must take the quick path, not fall back.
    # (kafka-python writes v10's current-leader tag even at its default; brokers do not.)
    if version < 10 and all(len(t.name.encode()) < 0x7F for t in response.responses):
        assert quick is not None
    full = m._decode_produce(m._BodyReader(data, version >= 9), version)
    if quick is not None:
        assert quick == full
    theirs = _PR.decode(bytes(data), version=version)
    _assert_matches(
        full, theirs, {"topics": "responses", "partitions": "partition_responses"}, "Produce"
    )


@SETTINGS
@given(response=produce_responses(), version=st.sampled_from(_versions(m.ProduceRequest)))
def test_the_quick_produce_decoder_never_disagrees(response: Any, version: int) -> None:
    """Whatever it accepts (any content, any prefix) it reads as the field-by-field reader."""
    data = bytes(response.encode(version=version))
    for end in {len(data), *range(0, len(data), max(1, len(data) // 8))}:
        view = memoryview(data)[:end]
        quick = m._decode_produce_common(view, version)
        if quick is None:
            continue
        assert quick == m._decode_produce(m._BodyReader(view, version >= 9), version)


# ---- Metadata -----------------------------------------------------------------------------

_MR = KMetadataResponse
_MT = _MR.MetadataResponseTopic
_MP = _MT.MetadataResponsePartition


@st.composite
def metadata_responses(draw: st.DrawFn) -> Any:
    node_ids = st.lists(int32, max_size=4)
    partition = st.builds(
        _MP,
        error_code=int16,
        partition_index=int32,
        leader_id=int32,
        leader_epoch=int32,
        replica_nodes=node_ids,
        isr_nodes=node_ids,
        offline_replicas=node_ids,
    )
    topic = st.builds(
        _MT,
        error_code=int16,
        name=text,
        # The all-zero id is how v10+ says "no id"; kafka-python and we both read it.
        topic_id=st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
        is_internal=st.booleans(),
        partitions=st.lists(partition, max_size=3),
        authorized_operations=operations,
    )
    broker = st.builds(
        _MR.MetadataResponseBroker, node_id=int32, host=text, port=int32, rack=nullable_text
    )
    return _MR(
        throttle_time_ms=draw(int32),
        brokers=draw(st.lists(broker, max_size=3)),
        cluster_id=draw(nullable_text),
        controller_id=draw(int32),
        topics=draw(st.lists(topic, max_size=3)),
        authorized_operations=draw(operations),
    )


@SETTINGS
@given(response=metadata_responses(), version=st.sampled_from(_versions(m.MetadataRequest)))
def test_any_metadata_response_decodes_as_kafka_python_reads_it(
    response: Any, version: int
) -> None:
    data = bytes(response.encode(version=version))
    request, _ = _metadata(version)
    ours = request.decode_response(memoryview(data), version)
    theirs = _MR.decode(data, version=version)
    _assert_matches(
        ours,
        theirs,
        {
            "topic_authorized_operations": "authorized_operations",
            "cluster_authorized_operations": "authorized_operations",
        },
        "Metadata",
    )


# ---- ApiVersions and InitProducerId -----------------------------------------------------------

_AR = KApiVersionsResponse


@st.composite
def api_versions_responses(draw: st.DrawFn) -> Any:
    keys = st.lists(
        st.builds(_AR.ApiVersion, api_key=int16, min_version=int16, max_version=int16),
        max_size=6,
    )
    supported = st.lists(
        st.builds(_AR.SupportedFeatureKey, name=text, min_version=int16, max_version=int16),
        max_size=2,
    )
    finalized = st.lists(
        st.builds(
            _AR.FinalizedFeatureKey, name=text, max_version_level=int16, min_version_level=int16
        ),
        max_size=2,
    )
    return _AR(
        # Zero: a non-zero code makes Kafka (and our decoder) use the v0 layout.
        error_code=0,
        api_keys=draw(keys),
        throttle_time_ms=draw(int32),
        supported_features=draw(supported),
        finalized_features_epoch=draw(int64),
        finalized_features=draw(finalized),
        zk_migration_ready=draw(st.booleans()),
    )


@SETTINGS
@given(response=api_versions_responses(), version=st.sampled_from(_versions(m.ApiVersionsRequest)))
def test_any_api_versions_response_decodes_as_kafka_python_reads_it(
    response: Any, version: int
) -> None:
    data = bytes(response.encode(version=version))
    request, _ = _api_versions(version)
    ours = request.decode_response(memoryview(data), version)
    theirs = _AR.decode(data, version=version)
    _assert_matches(ours, theirs, {}, "ApiVersions")


@SETTINGS
@given(
    throttle=int32,
    error_code=int16,
    producer_id=int64,
    epoch=int16,
    version=st.sampled_from(_versions(m.InitProducerIdRequest)),
)
def test_any_init_producer_id_response_decodes_as_kafka_python_reads_it(
    throttle: int, error_code: int, producer_id: int, epoch: int, version: int
) -> None:
    response = KInitProducerIdResponse(
        throttle_time_ms=throttle,
        error_code=error_code,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
    data = bytes(response.encode(version=version))
    request, _ = _init_producer_id(version)
    ours = request.decode_response(memoryview(data), version)
    theirs = KInitProducerIdResponse.decode(data, version=version)
    _assert_matches(ours, theirs, {}, "InitProducerId")


# ---- hostile counts --------------------------------------------------------------------------

VALID = [
    (build(version)[0], version, bytes(response().encode(version=version)))
    for cls, build, response, _ in RESPONSE_CASES
    if cls in (m.ProduceRequest, m.MetadataRequest, m.ApiVersionsRequest)
    for version in _versions(cls)
]

# Big lengths as the wire spells them: int32 counts and sizes, int16 string lengths, and
# unsigned varints (compact arrays and strings, tagged-field counts and sizes).
HUGE = [
    b"\x7f\xff\xff\xff",
    b"\x7f\xff\xff\xfe",
    b"\x10\x00\x00\x00",
    b"\x7f\xff",
    b"\xff\xff\xff\xff\x07",
    b"\xff\xff\xff\x7f",
]

#: Bytes a decoder may allocate per input byte (objects per field, strings, lists), plus a
#: fixed amount; an allocation driven by an announced count would be gigabytes.
PER_INPUT_BYTE = 400
FIXED = 256 << 10


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(VALID),
    patches=st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(HUGE)), min_size=1, max_size=3
    ),
)
def test_hostile_counts_cost_memory_in_proportion_to_the_input(
    case: tuple[Any, int, bytes], patches: list[tuple[int, bytes]]
) -> None:
    request, version, data = case
    mutated = bytearray(data)
    for position, huge in patches:
        start = position % max(1, len(mutated))
        mutated[start : start + len(huge)] = huge
    hostile = bytes(mutated)
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        with contextlib.suppress(CorruptResponseError):
            request.decode_response(memoryview(hostile), version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - baseline <= PER_INPUT_BYTE * len(hostile) + FIXED


# ---- every response, hostile lengths, a fixed seed -------------------------------------------

EVERY_RESPONSE = [
    pytest.param(
        build(version)[0],
        version,
        bytes(response().encode(version=version)),
        id=f"{cls.__name__}-v{version}",
    )
    for cls, build, response, _ in RESPONSE_CASES
    for version in _versions(cls)
]

# Lengths and counts as the wire spells them: int32 (arrays, bytes), int16 (strings),
# unsigned varints (compact forms, tagged fields): huge, negative, null, too long.
HOSTILE_INT32 = [b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\xff\xff\xff\xfe"]
HOSTILE_INT16 = [b"\x7f\xff", b"\x80\x00", b"\xff\xff", b"\xff\xfe"]
HOSTILE_VARINTS = [b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01", b"\x00", b"\xfe\xff\x7f"]

#: What a decoding error says: the field that is wrong and where it is.
CLEAR_MESSAGE = re.compile(
    r"truncated data: .+ needs \d+ bytes at offset \d+, \d+ left"
    r"|invalid (.+ )?length -?\d+ at offset \d+"
    r"|null compact array at offset \d+"
    r"|.*varint at offset \d+ (overflows|is longer than \d+ bytes)"
    r"|invalid UTF-8 at offset \d+"
)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    mutated = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        position = rng.randrange(max(1, len(mutated)))
        kind = rng.randrange(6)
        if kind == 0:
            mutated[position : position + 4] = rng.choice(HOSTILE_INT32)
        elif kind == 1:
            mutated[position : position + 2] = rng.choice(HOSTILE_INT16)
        elif kind == 2:
            mutated[position : position + 1] = rng.choice(HOSTILE_VARINTS)
        elif kind == 3:
            del mutated[position:]
        elif kind == 4 and mutated:
            mutated[position] = rng.randrange(256)
        else:
            mutated[position:position] = rng.randbytes(rng.randint(1, 8))
    return bytes(mutated)


@pytest.mark.parametrize(("request_", "version", "data"), EVERY_RESPONSE)
def test_hostile_lengths_in_every_response_fail_clearly_and_cheaply(
    request_: Any, version: int, data: bytes
) -> None:
    rng = random.Random(f"{type(request_).__name__}-{version}")
    tracemalloc.start()
    try:
        for _ in range(400):
            hostile = _mutate(rng, data)
            baseline, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            try:
                request_.decode_response(memoryview(hostile), version)
            except CorruptResponseError as exc:
                assert CLEAR_MESSAGE.match(str(exc)), (hostile.hex(), str(exc))
            _, peak = tracemalloc.get_traced_memory()
            assert peak - baseline <= PER_INPUT_BYTE * len(hostile) + FIXED, hostile.hex()
    finally:
        tracemalloc.stop()


# ---- framing -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(frame=st.binary(max_size=40), flexible=st.booleans())
def test_framing_helpers_raise_only_corrupt_response_error(frame: bytes, flexible: bool) -> None:
    view = memoryview(frame)
    try:
        correlation_id = read_correlation_id(view)
    except CorruptResponseError:
        assert len(frame) < 4
        return
    assert correlation_id == int.from_bytes(frame[:4], "big", signed=True)
    try:
        same_id, body = split_response_header(view, flexible)
    except CorruptResponseError:
        assert flexible, "a non-flexible header is just the correlation id"
        return
    assert same_id == correlation_id
    assert body.nbytes <= len(frame) - 4
