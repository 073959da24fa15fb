"""Version-neutral requests and responses for the APIs a producer uses, and the few it
administers topics with (CreateTopics, DeleteTopics, DescribeConfigs).

Each request is a slotted dataclass whose fields are named after Kafka's JSON schemas (in
snake_case). ``encode(version)`` writes the body for one version; ``decode_response(data,
version)`` reads the body of the matching response into named fields, with the schema's
defaults for fields the version does not carry. Unknown tagged fields are skipped.

As in Kafka's generated code, a field a version cannot carry is silently dropped when the
schema marks it ignorable, and raises :class:`~aioproducer.errors.UnsupportedVersionError`
when it holds a non-default value and is not ignorable (so a request never means something
different on the wire from what the caller built).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from aioproducer.errors import CorruptResponseError, UnsupportedVersionError
from aioproducer.protocol import produce_codec
from aioproducer.protocol.api import (
    FIRST_FLEXIBLE_VERSION,
    SMALL_RESPONSE_LIMIT,
    ApiKey,
    Request,
    Response,
)
from aioproducer.protocol.error_codes import UNSUPPORTED_VERSION
from aioproducer.protocol.primitives import (
    INT8,
    INT16,
    INT32,
    INT64,
    NO_TAGGED_FIELDS,
    Reader,
    write_compact_bytes,
    write_compact_nullable_string,
    write_compact_string,
    write_nullable_string,
    write_string,
    write_uuid,
    write_uvarint,
)

__all__ = [
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnPartitionResult",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AddPartitionsToTxnResult",
    "AddPartitionsToTxnTopic",
    "AddPartitionsToTxnTopicResult",
    "AddPartitionsToTxnTransaction",
    "ApiVersion",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "BatchIndexAndErrorMessage",
    "Coordinator",
    "CreatableReplicaAssignment",
    "CreatableTopic",
    "CreatableTopicConfig",
    "CreatableTopicConfigs",
    "CreatableTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeletableTopicResult",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeClusterBroker",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResource",
    "DescribeConfigsResourceResult",
    "DescribeConfigsResponse",
    "DescribeConfigsResult",
    "DescribeConfigsSynonym",
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
    "DescribeTransactionsState",
    "EndTxnRequest",
    "EndTxnResponse",
    "FinalizedFeatureKey",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "LeaderIdAndEpoch",
    "ListTransactionsRequest",
    "ListTransactionsResponse",
    "ListTransactionsState",
    "MetadataRequest",
    "MetadataResponse",
    "MetadataResponseBroker",
    "MetadataResponsePartition",
    "MetadataResponseTopic",
    "NodeEndpoint",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetFetchResponsePartition",
    "OffsetFetchResponseTopic",
    "ProducePartitionData",
    "ProducePartitionResponse",
    "ProduceRequest",
    "ProduceResponse",
    "ProduceTopicData",
    "ProduceTopicResponse",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "SupportedFeatureKey",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitRequestPartition",
    "TxnOffsetCommitRequestTopic",
    "TxnOffsetCommitResponse",
    "TxnOffsetCommitResponsePartition",
    "TxnOffsetCommitResponseTopic",
    "decode_api_versions_response",
]

_T = TypeVar("_T")

_NO_AUTHORIZED_OPERATIONS = -(1 << 31)
_PRODUCE_FIRST_FLEXIBLE = FIRST_FLEXIBLE_VERSION[ApiKey.PRODUCE]


# ---- shared codec helpers -----------------------------------------------------------------


class _BodyReader(Reader):
    """A :class:`Reader` that picks the compact or classic encoding from the version."""

    __slots__ = ("flexible",)

    def __init__(self, data: bytes | bytearray | memoryview, flexible: bool) -> None:
        super().__init__(data)
        self.flexible = flexible

    def text(self) -> str:
        return self.compact_string() if self.flexible else self.string()

    def nullable_text(self) -> str | None:
        return self.compact_nullable_string() if self.flexible else self.nullable_string()

    def blob(self) -> bytes:
        return self.compact_bytes() if self.flexible else self.bytes_()

    def items(self, read: Callable[[_BodyReader], _T]) -> list[_T]:
        """A non-nullable array, compact or not; ``read`` decodes one element."""
        return self.compact_array(read) if self.flexible else self.array(read)

    def int32_items(self) -> list[int]:
        return self.items(Reader.int32)

    def text_items(self) -> list[str]:
        return self.items(_BodyReader.text)

    def tags(self) -> Mapping[int, memoryview]:
        """The tagged fields of a flexible struct; nothing in classic versions."""
        return self.tagged_fields() if self.flexible else NO_TAGGED_FIELDS

    def skip_tags(self) -> None:
        if self.flexible:
            self.skip_tagged_fields()


# ---- response size caps (Request.response_size_limit) -------------------------------------

# Responses that answer for each topic and partition of their request grow with it; these are
# the bytes one entry may take, with room to spare. A topic entry is its name (at most 249
# characters, Kafka's limit, which the producer checks too), an array count and tagged
# fields; a partition entry of AddPartitionsToTxn or TxnOffsetCommit an index, an error code
# and tagged fields.
_TOPIC_ALLOWANCE = 1024
_PARTITION_ALLOWANCE = 64
# A Produce partition entry adds offsets, an error message and (v10+) the new leader with
# its endpoint, a host name.
_PRODUCE_PARTITION_ALLOWANCE = 4096
# A batch the broker rejects record by record (INVALID_RECORD, INVALID_TIMESTAMP) gets an
# index and a message per bad record, of up to ~330 bytes when it names the topic partition,
# and a record takes 7 bytes or more in an uncompressed batch: up to ~50 response bytes per
# request byte.
_PRODUCE_RECORD_ERROR_FACTOR = 64


def _echo_limit(topics: int, partitions: int, per_partition: int = _PARTITION_ALLOWANCE) -> int:
    """The size cap of a response with one entry per topic and partition of its request."""
    return SMALL_RESPONSE_LIMIT + topics * _TOPIC_ALLOWANCE + partitions * per_partition


def _tagged(
    tags: Mapping[int, memoryview], tag: int, read: Callable[[_BodyReader], _T]
) -> _T | None:
    """Decode tagged field ``tag`` inside its own bounds, or None when absent."""
    raw = tags.get(tag)
    if raw is None:
        return None
    return read(_BodyReader(raw, True))


class _BodyWriter:
    """Accumulates a request body, picking the compact or classic encoding from the version."""

    __slots__ = ("buffer", "flexible")

    def __init__(self, flexible: bool) -> None:
        self.buffer = bytearray()
        self.flexible = flexible

    def int8(self, value: int) -> None:
        self.buffer += INT8.pack(value)

    def boolean(self, value: bool) -> None:
        self.buffer += b"\x01" if value else b"\x00"

    def int16(self, value: int) -> None:
        self.buffer += INT16.pack(value)

    def int32(self, value: int) -> None:
        self.buffer += INT32.pack(value)

    def int64(self, value: int) -> None:
        self.buffer += INT64.pack(value)

    def uuid(self, value: uuid.UUID | None) -> None:
        self.buffer += write_uuid(value)

    def text(self, value: str) -> None:
        self.buffer += write_compact_string(value) if self.flexible else write_string(value)

    def nullable_text(self, value: str | None) -> None:
        if self.flexible:
            self.buffer += write_compact_nullable_string(value)
        else:
            self.buffer += write_nullable_string(value)

    def blob(self, value: bytes | bytearray | memoryview) -> None:
        if self.flexible:
            self.buffer += write_compact_bytes(value)
        else:
            self.buffer += INT32.pack(len(value))
            self.buffer += value

    def count(self, length: int) -> None:
        self.buffer += write_uvarint(length + 1) if self.flexible else INT32.pack(length)

    def null_array(self) -> None:
        self.buffer += b"\x00" if self.flexible else b"\xff\xff\xff\xff"

    def items(self, values: Sequence[_T], write: Callable[[_BodyWriter, _T], None]) -> None:
        self.count(len(values))
        for value in values:
            write(self, value)

    def int32_items(self, values: Sequence[int]) -> None:
        self.items(values, _BodyWriter.int32)

    def text_items(self, values: Sequence[str]) -> None:
        self.items(values, _BodyWriter.text)

    def tags(self) -> None:
        """An empty tagged-field section, in flexible versions only."""
        if self.flexible:
            self.buffer += b"\x00"

    def done(self) -> list[bytes | memoryview]:
        return [bytes(self.buffer)]


def _writer(request: Request[Response], version: int) -> _BodyWriter:
    request.check_version(version)
    return _BodyWriter(request.is_flexible(version))


def _reader(request: Request[Response], data: memoryview, version: int) -> _BodyReader:
    request.check_version(version)
    return _BodyReader(data, request.is_flexible(version))


def _require(condition: bool, request: Request[Response], version: int, what: str) -> None:
    """Refuse to drop a non-ignorable field the caller set (Kafka's generated-code rule)."""
    if not condition:
        raise UnsupportedVersionError(f"{type(request).__name__} v{version} cannot carry {what}")


# ---- ApiVersions (18) ---------------------------------------------------------------------


@dataclass(slots=True)
class ApiVersion:
    """One API the broker supports, with its version range (inclusive)."""

    api_key: int
    min_version: int
    max_version: int


@dataclass(slots=True)
class SupportedFeatureKey:
    """A feature the broker supports (tagged field, v3+)."""

    name: str
    min_version: int
    max_version: int


@dataclass(slots=True)
class FinalizedFeatureKey:
    """A cluster-wide finalized feature level (tagged field, v3+)."""

    name: str
    max_version_level: int
    min_version_level: int


@dataclass(slots=True)
class ApiVersionsResponse(Response):
    """The APIs and versions a broker supports."""

    error_code: int
    api_keys: list[ApiVersion]
    throttle_time_ms: int = 0
    supported_features: list[SupportedFeatureKey] = field(default_factory=list)
    finalized_features_epoch: int = -1
    finalized_features: list[FinalizedFeatureKey] = field(default_factory=list)
    zk_migration_ready: bool = False

    def supported_versions(self) -> dict[int, tuple[int, int]]:
        """``{api_key: (min_version, max_version)}``."""
        return {k.api_key: (k.min_version, k.max_version) for k in self.api_keys}


def _decode_api_versions(data: memoryview, version: int) -> ApiVersionsResponse:
    r = _BodyReader(data, version >= FIRST_FLEXIBLE_VERSION[ApiKey.API_VERSIONS])

    def api_version(r: _BodyReader) -> ApiVersion:
        entry = ApiVersion(r.int16(), r.int16(), r.int16())
        r.skip_tags()
        return entry

    def supported_feature(r: _BodyReader) -> SupportedFeatureKey:
        entry = SupportedFeatureKey(r.text(), r.int16(), r.int16())
        r.skip_tags()
        return entry

    def finalized_feature(r: _BodyReader) -> FinalizedFeatureKey:
        entry = FinalizedFeatureKey(r.text(), r.int16(), r.int16())
        r.skip_tags()
        return entry

    response = ApiVersionsResponse(r.int16(), r.items(api_version))
    if version >= 1:
        response.throttle_time_ms = r.int32()
    tags = r.tags()
    if tags:
        response.supported_features = _tagged(tags, 0, lambda t: t.items(supported_feature)) or []
        epoch = _tagged(tags, 1, Reader.int64)
        response.finalized_features_epoch = -1 if epoch is None else epoch
        response.finalized_features = _tagged(tags, 2, lambda t: t.items(finalized_feature)) or []
        response.zk_migration_ready = bool(_tagged(tags, 3, Reader.boolean))
    return response


def decode_api_versions_response(data: memoryview, version: int) -> ApiVersionsResponse:
    """Decode an ApiVersions response, falling back to the v0 layout like the Java client.

    A broker that does not know the requested ApiVersions version answers
    UNSUPPORTED_VERSION with a v0 body listing the versions it does support; that body does
    not parse at the version that was asked for, so it is read again as v0.
    """
    try:
        return _decode_api_versions(data, version)
    except CorruptResponseError:
        if version == 0:
            raise
        error = Reader(data).int16() if len(data) >= 2 else None
        if error != UNSUPPORTED_VERSION:
            raise
        try:
            return _decode_api_versions(data, 0)
        except CorruptResponseError:
            # Some brokers (librdkafka's mock) list their versions in a layout that is
            # neither; the error code alone is enough for the caller to fall back to v0.
            return ApiVersionsResponse(UNSUPPORTED_VERSION, [])


@dataclass(slots=True)
class ApiVersionsRequest(Request[ApiVersionsResponse]):
    """Ask a broker which APIs and versions it supports (v0-4).

    The client software name and version are sent from v3 (and dropped before: ignorable).
    """

    API_KEY: ClassVar[int] = ApiKey.API_VERSIONS
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 4
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = SMALL_RESPONSE_LIMIT

    client_software_name: str = "aioproducer"
    client_software_version: str = "0"

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        if version >= 3:
            w.text(self.client_software_name)
            w.text(self.client_software_version)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> ApiVersionsResponse:
        """Decode the response, reading an UNSUPPORTED_VERSION answer in its v0 layout."""
        self.check_version(version)
        return decode_api_versions_response(data, version)


# ---- Metadata (3) -------------------------------------------------------------------------


@dataclass(slots=True)
class MetadataResponseBroker:
    """A broker of the cluster."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class MetadataResponsePartition:
    """A partition's leader and replicas."""

    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int = -1
    replica_nodes: list[int] = field(default_factory=list)
    isr_nodes: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class MetadataResponseTopic:
    """A topic and its partitions.

    ``topic_id`` is None when the broker gave none: before v10, or the all-zero id it sends
    for a topic that does not exist.
    """

    error_code: int
    name: str | None
    topic_id: uuid.UUID | None = None
    is_internal: bool = False
    partitions: list[MetadataResponsePartition] = field(default_factory=list)
    topic_authorized_operations: int = _NO_AUTHORIZED_OPERATIONS


@dataclass(slots=True)
class MetadataResponse(Response):
    """The brokers of the cluster and the topics asked for."""

    throttle_time_ms: int
    brokers: list[MetadataResponseBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataResponseTopic]
    cluster_authorized_operations: int = _NO_AUTHORIZED_OPERATIONS
    error_code: int = 0
    """v13+: a top-level error; REBOOTSTRAP_REQUIRED asks the client to contact its
    bootstrap servers again (KIP-1102)."""


_ZERO_UUID = uuid.UUID(int=0)


def _topic_id(r: _BodyReader) -> uuid.UUID | None:
    topic_id = r.uuid()
    return None if topic_id == _ZERO_UUID else topic_id


def _decode_metadata(r: _BodyReader, version: int) -> MetadataResponse:
    def broker(r: _BodyReader) -> MetadataResponseBroker:
        entry = MetadataResponseBroker(
            r.int32(), r.text(), r.int32(), r.nullable_text() if version >= 1 else None
        )
        r.skip_tags()
        return entry

    def partition(r: _BodyReader) -> MetadataResponsePartition:
        entry = MetadataResponsePartition(
            r.int16(),
            r.int32(),
            r.int32(),
            r.int32() if version >= 7 else -1,
            r.int32_items(),
            r.int32_items(),
            r.int32_items() if version >= 5 else [],
        )
        r.skip_tags()
        return entry

    def topic(r: _BodyReader) -> MetadataResponseTopic:
        entry = MetadataResponseTopic(
            r.int16(),
            r.nullable_text() if version >= 12 else r.text(),
            _topic_id(r) if version >= 10 else None,
            r.boolean() if version >= 1 else False,
            r.items(partition),
            r.int32() if version >= 8 else _NO_AUTHORIZED_OPERATIONS,
        )
        r.skip_tags()
        return entry

    response = MetadataResponse(
        r.int32() if version >= 3 else 0,
        r.items(broker),
        r.nullable_text() if version >= 2 else None,
        r.int32() if version >= 1 else -1,
        r.items(topic),
    )
    if 8 <= version <= 10:
        response.cluster_authorized_operations = r.int32()
    if version >= 13:
        response.error_code = r.int16()
    r.skip_tags()
    return response


@dataclass(slots=True)
class MetadataRequest(Request[MetadataResponse]):
    """Ask for the brokers and for topics' partitions and leaders (v1-13; v13 is v12 with a
    top-level error code in the answer).

    ``topics=None`` asks for every topic, ``[]`` for none (brokers only). From v10 each topic
    carries a topic id, sent as the zero UUID (topics are asked for by name).
    ``allow_auto_topic_creation=False`` needs v4+.
    """

    API_KEY: ClassVar[int] = ApiKey.METADATA
    MIN_VERSION: ClassVar[int] = 1
    MAX_VERSION: ClassVar[int] = 13

    topics: Sequence[str] | None
    allow_auto_topic_creation: bool = True
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        topics = self.topics
        if topics is None:
            w.null_array()
        else:
            w.count(len(topics))
            for name in topics:
                if version >= 10:
                    w.uuid(None)
                w.text(name)
                w.tags()
        if version >= 4:
            w.boolean(self.allow_auto_topic_creation)
        else:
            _require(self.allow_auto_topic_creation, self, version, "allow_auto_topic_creation")
        if 8 <= version <= 10:
            w.boolean(self.include_cluster_authorized_operations)
        else:
            _require(
                not self.include_cluster_authorized_operations,
                self,
                version,
                "include_cluster_authorized_operations",
            )
        if version >= 8:
            w.boolean(self.include_topic_authorized_operations)
        else:
            _require(
                not self.include_topic_authorized_operations,
                self,
                version,
                "include_topic_authorized_operations",
            )
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> MetadataResponse:
        """Decode the response body sent for ``version``."""
        return _decode_metadata(_reader(self, data, version), version)


# ---- Produce (0) --------------------------------------------------------------------------


@dataclass(slots=True)
class BatchIndexAndErrorMessage:
    """A record that made the broker drop its batch (v8+)."""

    batch_index: int
    batch_index_error_message: str | None


@dataclass(slots=True)
class LeaderIdAndEpoch:
    """The partition's current leader, sent with NOT_LEADER_OR_FOLLOWER (v10+, tagged)."""

    leader_id: int
    leader_epoch: int


@dataclass(slots=True)
class NodeEndpoint:
    """Where to reach a new leader named in ``current_leader`` (v10+, tagged)."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(slots=True)
class ProducePartitionResponse:
    """The outcome of one partition's batch."""

    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[BatchIndexAndErrorMessage] = field(default_factory=list)
    error_message: str | None = None
    current_leader: LeaderIdAndEpoch | None = None


@dataclass(slots=True)
class ProduceTopicResponse:
    """The outcomes of one topic's partitions."""

    name: str
    partitions: list[ProducePartitionResponse]


@dataclass(slots=True)
class ProduceResponse(Response):
    """The broker's answer to a Produce request (never sent for ``acks=0``)."""

    topics: list[ProduceTopicResponse]
    throttle_time_ms: int = 0
    node_endpoints: list[NodeEndpoint] = field(default_factory=list)


@dataclass(slots=True)
class ProducePartitionData:
    """One partition's records: a record batch v2, passed through without copying."""

    index: int
    records: bytes | bytearray | memoryview


@dataclass(slots=True)
class ProduceTopicData:
    """One topic's partitions."""

    name: str
    partitions: list[ProducePartitionData]


@functools.lru_cache(maxsize=256)
def _produce_head(
    transactional_id: str | None, acks: int, timeout_ms: int, flexible: bool
) -> bytes:
    if flexible:
        txn = write_compact_nullable_string(transactional_id)
    else:
        txn = write_nullable_string(transactional_id)
    return txn + INT16.pack(acks) + INT32.pack(timeout_ms)


def _decode_batch_error(r: _BodyReader) -> BatchIndexAndErrorMessage:
    entry = BatchIndexAndErrorMessage(r.int32(), r.nullable_text())
    r.skip_tags()
    return entry


def _decode_leader(r: _BodyReader) -> LeaderIdAndEpoch:
    entry = LeaderIdAndEpoch(r.int32(), r.int32())
    r.skip_tags()
    return entry


def _decode_node_endpoint(r: _BodyReader) -> NodeEndpoint:
    entry = NodeEndpoint(r.int32(), r.text(), r.int32(), r.nullable_text())
    r.skip_tags()
    return entry


def _decode_produce_common(data: memoryview, version: int) -> ProduceResponse | None:
    """Decode the usual ProduceResponse quickly (compiled), or return None to leave it to the
    reader: see :func:`aioproducer.protocol.produce_codec.decode_common`."""
    response: ProduceResponse | None = produce_codec.decode_common(
        data,
        version,
        version >= _PRODUCE_FIRST_FLEXIBLE,
        ProduceResponse,
        ProduceTopicResponse,
        ProducePartitionResponse,
    )
    return response


def _decode_produce(r: _BodyReader, version: int) -> ProduceResponse:
    flexible = r.flexible

    def partition(r: _BodyReader) -> ProducePartitionResponse:
        entry = ProducePartitionResponse(r.int32(), r.int16(), r.int64())
        if version >= 2:
            entry.log_append_time_ms = r.int64()
        if version >= 5:
            entry.log_start_offset = r.int64()
        if version >= 8:
            entry.record_errors = r.items(_decode_batch_error)
            entry.error_message = r.nullable_text()
        if flexible:
            tags = r.tagged_fields()
            if tags and version >= 10:
                entry.current_leader = _tagged(tags, 0, _decode_leader)
        return entry

    def topic(r: _BodyReader) -> ProduceTopicResponse:
        entry = ProduceTopicResponse(r.text(), r.items(partition))
        r.skip_tags()
        return entry

    response = ProduceResponse(r.items(topic), r.int32())
    if flexible:
        tags = r.tagged_fields()
        if tags and version >= 10:
            response.node_endpoints = (
                _tagged(tags, 0, lambda t: t.items(_decode_node_endpoint)) or []
            )
    return response


@dataclass(slots=True)
class ProduceRequest(Request[ProduceResponse]):
    """Write record batches to partition leaders (v3-12).

    ``acks=0`` gets no response at all (:meth:`expects_response` is False). The body is a
    list of buffers: the framing around each large record batch is one small ``bytes``, and
    the batch itself is passed through as given.

    v12 has the same body as v11. Its meaning differs (KIP-890 part 2): a transactional
    Produce v12 asks the partition leader to add the partition to the transaction itself, so
    a producer using transactions v1 (AddPartitionsToTxn) must send at most v11: it sets
    ``version_cap=11``.
    """

    API_KEY: ClassVar[int] = ApiKey.PRODUCE
    MIN_VERSION: ClassVar[int] = 3
    MAX_VERSION: ClassVar[int] = 12

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopicData]
    version_cap: int | None = None

    def expects_response(self) -> bool:
        """False for ``acks=0``: the broker does not answer."""
        return self.acks != 0

    def highest_version(self) -> int:
        """:attr:`MAX_VERSION`, or ``version_cap`` when that is lower."""
        cap = self.version_cap
        return self.MAX_VERSION if cap is None or cap > self.MAX_VERSION else cap

    def response_size_limit(self) -> int | None:
        """An entry per topic and partition sent, and room for a message per record in case
        the broker rejects every record one by one (64 bytes per byte of records)."""
        partitions = 0
        record_bytes = 0
        for topic in self.topics:
            partitions += len(topic.partitions)
            for partition in topic.partitions:
                records = partition.records
                record_bytes += records.nbytes if isinstance(records, memoryview) else len(records)
        return (
            _echo_limit(len(self.topics), partitions, _PRODUCE_PARTITION_ALLOWANCE)
            + record_bytes * _PRODUCE_RECORD_ERROR_FACTOR
        )

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``: framing bytes around uncopied record batches."""
        if not 3 <= version <= 12:
            self.check_version(version)
        flexible = version >= _PRODUCE_FIRST_FLEXIBLE
        head = _produce_head(self.transactional_id, self.acks, self.timeout_ms, flexible)
        return produce_codec.encode_body(head, self.topics, flexible)

    def decode_response(self, data: memoryview, version: int) -> ProduceResponse:
        """Decode the response body sent for ``version``."""
        self.check_version(version)
        response = _decode_produce_common(data, version)
        if response is None:
            response = _decode_produce(_reader(self, data, version), version)
        return response


# ---- InitProducerId (22) ------------------------------------------------------------------


@dataclass(slots=True)
class InitProducerIdResponse(Response):
    """The producer id and epoch the broker assigned."""

    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int


@dataclass(slots=True)
class InitProducerIdRequest(Request[InitProducerIdResponse]):
    """Get a producer id and epoch, for idempotence or a transactional id (v0-5).

    ``producer_id``/``producer_epoch`` (v3+, KIP-360) let a producer bump its epoch after an
    error; before v3 they must stay -1.
    """

    API_KEY: ClassVar[int] = ApiKey.INIT_PRODUCER_ID
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 5
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = SMALL_RESPONSE_LIMIT

    transactional_id: str | None
    transaction_timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.nullable_text(self.transactional_id)
        w.int32(self.transaction_timeout_ms)
        if version >= 3:
            w.int64(self.producer_id)
            w.int16(self.producer_epoch)
        else:
            _require(
                self.producer_id == -1 and self.producer_epoch == -1,
                self,
                version,
                "producer_id/producer_epoch",
            )
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> InitProducerIdResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)
        response = InitProducerIdResponse(r.int32(), r.int16(), r.int64(), r.int16())
        r.skip_tags()
        return response


# ---- FindCoordinator (10) -----------------------------------------------------------------


@dataclass(slots=True)
class Coordinator:
    """The coordinator of one key (a group id or a transactional id)."""

    key: str
    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None = None


@dataclass(slots=True)
class FindCoordinatorResponse(Response):
    """One coordinator per key asked for (v0-3 answers for a single key)."""

    throttle_time_ms: int
    coordinators: list[Coordinator]


@dataclass(slots=True)
class FindCoordinatorRequest(Request[FindCoordinatorResponse]):
    """Find the broker that coordinates groups or transactions (v0-6).

    ``key_type`` is 0 for a group, 1 for a transaction (v1+). Versions 0-3 carry exactly one
    key; v4+ (KIP-699) carry a batch of ``coordinator_keys``.
    """

    API_KEY: ClassVar[int] = ApiKey.FIND_COORDINATOR
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 6

    coordinator_keys: list[str]
    key_type: int = 0

    def response_size_limit(self) -> int | None:
        """:data:`~aioproducer.protocol.api.SMALL_RESPONSE_LIMIT` per key asked for."""
        return SMALL_RESPONSE_LIMIT * max(1, len(self.coordinator_keys))

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        if version <= 3:
            _require(len(self.coordinator_keys) == 1, self, version, "more than one key")
            w.text(self.coordinator_keys[0])
        if version >= 1:
            w.int8(self.key_type)
        else:
            _require(self.key_type == 0, self, version, "a non-group key_type")
        if version >= 4:
            w.text_items(self.coordinator_keys)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> FindCoordinatorResponse:
        """Decode the response; a v0-3 answer becomes one coordinator for the single key."""
        r = _reader(self, data, version)
        if version >= 4:

            def coordinator(r: _BodyReader) -> Coordinator:
                entry = Coordinator(
                    r.text(), r.int32(), r.text(), r.int32(), r.int16(), r.nullable_text()
                )
                r.skip_tags()
                return entry

            response = FindCoordinatorResponse(r.int32(), r.items(coordinator))
        else:
            throttle_time_ms = r.int32() if version >= 1 else 0
            error_code = r.int16()
            error_message = r.nullable_text() if version >= 1 else None
            key = self.coordinator_keys[0] if self.coordinator_keys else ""
            single = Coordinator(key, r.int32(), r.text(), r.int32(), error_code, error_message)
            response = FindCoordinatorResponse(throttle_time_ms, [single])
        r.skip_tags()
        return response


# ---- AddPartitionsToTxn (24) --------------------------------------------------------------


@dataclass(slots=True)
class AddPartitionsToTxnTopic:
    """A topic's partitions to add to a transaction."""

    name: str
    partitions: list[int]


@dataclass(slots=True)
class AddPartitionsToTxnTransaction:
    """One transaction's partitions (the v4+ batched form; v0-3 carry exactly one)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: list[AddPartitionsToTxnTopic]
    verify_only: bool = False


@dataclass(slots=True)
class AddPartitionsToTxnPartitionResult:
    """The outcome for one partition."""

    partition_index: int
    partition_error_code: int


@dataclass(slots=True)
class AddPartitionsToTxnTopicResult:
    """The outcomes for one topic's partitions."""

    name: str
    results_by_partition: list[AddPartitionsToTxnPartitionResult]


@dataclass(slots=True)
class AddPartitionsToTxnResult:
    """The outcomes for one transaction."""

    transactional_id: str
    topic_results: list[AddPartitionsToTxnTopicResult]


@dataclass(slots=True)
class AddPartitionsToTxnResponse(Response):
    """Per-transaction results; a v0-3 answer becomes one result for the request's id.

    ``error_code`` is the top-level error of v4+ (0 before).
    """

    throttle_time_ms: int
    error_code: int
    results_by_transaction: list[AddPartitionsToTxnResult]


def _decode_add_partitions_topic(r: _BodyReader) -> AddPartitionsToTxnTopicResult:
    def partition(r: _BodyReader) -> AddPartitionsToTxnPartitionResult:
        entry = AddPartitionsToTxnPartitionResult(r.int32(), r.int16())
        r.skip_tags()
        return entry

    entry = AddPartitionsToTxnTopicResult(r.text(), r.items(partition))
    r.skip_tags()
    return entry


def _encode_add_partitions_topic(w: _BodyWriter, topic: AddPartitionsToTxnTopic) -> None:
    w.text(topic.name)
    w.int32_items(topic.partitions)
    w.tags()


@dataclass(slots=True)
class AddPartitionsToTxnRequest(Request[AddPartitionsToTxnResponse]):
    """Add partitions to ongoing transactions (v0-5).

    Clients negotiate v0-3 (one transaction per request), as the Java client does: v4+ is the
    brokers' batched, verify-only form, which needs CLUSTER_ACTION permission. It is encoded
    and decoded here too (``encode(4)``/``encode(5)``), but :attr:`MAX_VERSION` stays 3.
    """

    API_KEY: ClassVar[int] = ApiKey.ADD_PARTITIONS_TO_TXN
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 3
    HIGHEST_ENCODABLE_VERSION: ClassVar[int] = 5

    transactions: list[AddPartitionsToTxnTransaction]

    @classmethod
    def for_client(
        cls,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: list[AddPartitionsToTxnTopic],
    ) -> AddPartitionsToTxnRequest:
        """The single-transaction request a producer sends."""
        transaction = AddPartitionsToTxnTransaction(
            transactional_id, producer_id, producer_epoch, topics
        )
        return cls([transaction])

    def response_size_limit(self) -> int | None:
        """An entry per transaction, topic and partition sent."""
        topics = 0
        partitions = 0
        for transaction in self.transactions:
            topics += len(transaction.topics) + 1  # a transaction's entry is no larger
            partitions += sum(len(topic.partitions) for topic in transaction.topics)
        return _echo_limit(topics, partitions)

    @classmethod
    def check_version(cls, version: int) -> None:
        """Accept v0 to v5 (negotiation still stops at :attr:`MAX_VERSION`)."""
        if not cls.MIN_VERSION <= version <= cls.HIGHEST_ENCODABLE_VERSION:
            raise UnsupportedVersionError(
                f"{cls.__name__} v{version} is not implemented "
                f"(v{cls.MIN_VERSION}-v{cls.HIGHEST_ENCODABLE_VERSION} are)"
            )

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        if version >= 4:

            def transaction(w: _BodyWriter, txn: AddPartitionsToTxnTransaction) -> None:
                w.text(txn.transactional_id)
                w.int64(txn.producer_id)
                w.int16(txn.producer_epoch)
                w.boolean(txn.verify_only)
                w.items(txn.topics, _encode_add_partitions_topic)
                w.tags()

            w.items(self.transactions, transaction)
        else:
            _require(len(self.transactions) == 1, self, version, "other than one transaction")
            txn = self.transactions[0]
            _require(not txn.verify_only, self, version, "verify_only")
            w.text(txn.transactional_id)
            w.int64(txn.producer_id)
            w.int16(txn.producer_epoch)
            w.items(txn.topics, _encode_add_partitions_topic)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> AddPartitionsToTxnResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)
        throttle_time_ms = r.int32()
        if version >= 4:

            def result(r: _BodyReader) -> AddPartitionsToTxnResult:
                entry = AddPartitionsToTxnResult(r.text(), r.items(_decode_add_partitions_topic))
                r.skip_tags()
                return entry

            response = AddPartitionsToTxnResponse(throttle_time_ms, r.int16(), r.items(result))
        else:
            transactional_id = self.transactions[0].transactional_id if self.transactions else ""
            topics = r.items(_decode_add_partitions_topic)
            response = AddPartitionsToTxnResponse(
                throttle_time_ms, 0, [AddPartitionsToTxnResult(transactional_id, topics)]
            )
        r.skip_tags()
        return response


# ---- AddOffsetsToTxn (25) -----------------------------------------------------------------


@dataclass(slots=True)
class AddOffsetsToTxnResponse(Response):
    """The outcome of adding a group's offsets to a transaction."""

    throttle_time_ms: int
    error_code: int


@dataclass(slots=True)
class AddOffsetsToTxnRequest(Request[AddOffsetsToTxnResponse]):
    """Add a consumer group's offsets to a transaction (v0-4)."""

    API_KEY: ClassVar[int] = ApiKey.ADD_OFFSETS_TO_TXN
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 4
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = SMALL_RESPONSE_LIMIT

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.text(self.transactional_id)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        w.text(self.group_id)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> AddOffsetsToTxnResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)
        response = AddOffsetsToTxnResponse(r.int32(), r.int16())
        r.skip_tags()
        return response


# ---- EndTxn (26) --------------------------------------------------------------------------


@dataclass(slots=True)
class EndTxnResponse(Response):
    """The outcome of ending a transaction; v5+ returns the (bumped) producer id and epoch."""

    throttle_time_ms: int
    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class EndTxnRequest(Request[EndTxnResponse]):
    """Commit (``committed=True``) or abort a transaction (v0-5).

    v5 (KIP-890 part 2, transactions v2) has the same request body; the coordinator then
    bumps the producer epoch after every transaction and returns the new producer id and
    epoch in the response. A producer using transactions v1 sends at most v4
    (``version_cap=4``), as the Java client's ``EndTxnRequest.Builder`` does.
    """

    API_KEY: ClassVar[int] = ApiKey.END_TXN
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 5
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = SMALL_RESPONSE_LIMIT

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    version_cap: int | None = None

    def highest_version(self) -> int:
        """:attr:`MAX_VERSION`, or ``version_cap`` when that is lower."""
        cap = self.version_cap
        return self.MAX_VERSION if cap is None or cap > self.MAX_VERSION else cap

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.text(self.transactional_id)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        w.boolean(self.committed)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> EndTxnResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)
        response = EndTxnResponse(r.int32(), r.int16())
        if version >= 5:
            response.producer_id = r.int64()
            response.producer_epoch = r.int16()
        r.skip_tags()
        return response


# ---- TxnOffsetCommit (28) -----------------------------------------------------------------


@dataclass(slots=True)
class TxnOffsetCommitRequestPartition:
    """An offset to commit for one partition."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = None


@dataclass(slots=True)
class TxnOffsetCommitRequestTopic:
    """Offsets to commit for one topic."""

    name: str
    partitions: list[TxnOffsetCommitRequestPartition]


@dataclass(slots=True)
class TxnOffsetCommitResponsePartition:
    """The outcome for one partition."""

    partition_index: int
    error_code: int


@dataclass(slots=True)
class TxnOffsetCommitResponseTopic:
    """The outcomes for one topic."""

    name: str
    partitions: list[TxnOffsetCommitResponsePartition]


@dataclass(slots=True)
class TxnOffsetCommitResponse(Response):
    """Per-partition outcomes of a transactional offset commit."""

    throttle_time_ms: int
    topics: list[TxnOffsetCommitResponseTopic]


@dataclass(slots=True)
class TxnOffsetCommitRequest(Request[TxnOffsetCommitResponse]):
    """Commit consumer offsets inside a transaction (v0-5).

    The consumer group metadata (``generation_id``, ``member_id``, ``group_instance_id``)
    needs v3+ (KIP-447); ``committed_leader_epoch`` is sent from v2 (dropped before).

    v5 has the same body as v4. Its meaning differs (KIP-890 part 2): the group coordinator
    adds the group's offsets partition to the transaction itself, so no AddOffsetsToTxn goes
    first. A producer using transactions v1 sends at most v4 (``version_cap=4``).
    """

    API_KEY: ClassVar[int] = ApiKey.TXN_OFFSET_COMMIT
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 5

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: list[TxnOffsetCommitRequestTopic]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    version_cap: int | None = None

    def highest_version(self) -> int:
        """:attr:`MAX_VERSION`, or ``version_cap`` when that is lower."""
        cap = self.version_cap
        return self.MAX_VERSION if cap is None or cap > self.MAX_VERSION else cap

    def response_size_limit(self) -> int | None:
        """An entry per topic and partition sent."""
        partitions = sum(len(topic.partitions) for topic in self.topics)
        return _echo_limit(len(self.topics), partitions)

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.text(self.transactional_id)
        w.text(self.group_id)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        if version >= 3:
            w.int32(self.generation_id)
            w.text(self.member_id)
            w.nullable_text(self.group_instance_id)
        else:
            _require(
                self.generation_id == -1
                and self.member_id == ""
                and self.group_instance_id is None,
                self,
                version,
                "consumer group metadata (generation_id, member_id, group_instance_id)",
            )

        def partition(w: _BodyWriter, p: TxnOffsetCommitRequestPartition) -> None:
            w.int32(p.partition_index)
            w.int64(p.committed_offset)
            if version >= 2:
                w.int32(p.committed_leader_epoch)
            w.nullable_text(p.committed_metadata)
            w.tags()

        def topic(w: _BodyWriter, t: TxnOffsetCommitRequestTopic) -> None:
            w.text(t.name)
            w.items(t.partitions, partition)
            w.tags()

        w.items(self.topics, topic)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> TxnOffsetCommitResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)

        def partition(r: _BodyReader) -> TxnOffsetCommitResponsePartition:
            entry = TxnOffsetCommitResponsePartition(r.int32(), r.int16())
            r.skip_tags()
            return entry

        def topic(r: _BodyReader) -> TxnOffsetCommitResponseTopic:
            entry = TxnOffsetCommitResponseTopic(r.text(), r.items(partition))
            r.skip_tags()
            return entry

        response = TxnOffsetCommitResponse(r.int32(), r.items(topic))
        r.skip_tags()
        return response


# ---- OffsetFetch (9) ----------------------------------------------------------------------


@dataclass(slots=True)
class OffsetFetchResponsePartition:
    """A group's committed offset for one partition (-1 when none is committed)."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str | None
    error_code: int


@dataclass(slots=True)
class OffsetFetchResponseTopic:
    """The committed offsets of one topic."""

    name: str
    partitions: list[OffsetFetchResponsePartition]


@dataclass(slots=True)
class OffsetFetchResponse(Response):
    """A group's committed offsets, and the group-level error code (v2+)."""

    throttle_time_ms: int
    topics: list[OffsetFetchResponseTopic]
    error_code: int = 0


@dataclass(slots=True)
class OffsetFetchRequest(Request[OffsetFetchResponse]):
    """Read one consumer group's committed offsets for the partitions named, or (``topics``
    None, v2+) for every partition it has one for (v1-7).

    ``require_stable`` (v7+, KIP-447) asks the group coordinator to answer
    UNSTABLE_OFFSET_COMMIT (retriable) for a partition whose offset a transaction that is
    still open has committed, rather than the offset committed before it. Versions 8 and
    later batch groups (and v10 names topics by id); one group by topic name is what this
    client needs, so it negotiates at most v7, which every broker since Kafka 2.5 serves.
    """

    API_KEY: ClassVar[int] = ApiKey.OFFSET_FETCH
    MIN_VERSION: ClassVar[int] = 1
    MAX_VERSION: ClassVar[int] = 7

    group_id: str
    topics: dict[str, list[int]] | None
    require_stable: bool = False

    def response_size_limit(self) -> int | None:
        """An entry per topic and partition asked for, each with its metadata string; only
        the connection's ``max_response_size`` when every partition of the group is
        asked for."""
        if self.topics is None:
            return None
        partitions = sum(len(p) for p in self.topics.values())
        return _echo_limit(len(self.topics), partitions, _TOPIC_ALLOWANCE + 64)

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.text(self.group_id)

        def topic(w: _BodyWriter, item: tuple[str, list[int]]) -> None:
            w.text(item[0])
            w.int32_items(item[1])
            w.tags()

        if self.topics is None:
            # Every partition the group has committed an offset for (v2+).
            _require(version >= 2, self, version, "every partition (topics null)")
            w.null_array()
        else:
            w.items(sorted(self.topics.items()), topic)
        if version >= 7:
            w.boolean(self.require_stable)
        else:
            _require(not self.require_stable, self, version, "require_stable")
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> OffsetFetchResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)
        throttle = r.int32() if version >= 3 else 0

        def partition(r: _BodyReader) -> OffsetFetchResponsePartition:
            index = r.int32()
            offset = r.int64()
            leader_epoch = r.int32() if version >= 5 else -1
            entry = OffsetFetchResponsePartition(
                index, offset, leader_epoch, r.nullable_text(), r.int16()
            )
            r.skip_tags()
            return entry

        def topic(r: _BodyReader) -> OffsetFetchResponseTopic:
            entry = OffsetFetchResponseTopic(r.text(), r.items(partition))
            r.skip_tags()
            return entry

        topics = r.items(topic)
        error_code = r.int16() if version >= 2 else 0
        r.skip_tags()
        return OffsetFetchResponse(throttle, topics, error_code)


# ---- DescribeTransactions (65) ------------------------------------------------------------


@dataclass(slots=True)
class DescribeTransactionsState:
    """What a transaction coordinator holds for one transactional id: the state of its
    transaction (``Ongoing``, ``CompleteCommit``...), its producer id and epoch, its timeout
    and when it began (the coordinator's clock, ms since the epoch; -1 with no transaction
    open), and the partitions it holds that have no marker yet."""

    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    producer_id: int
    producer_epoch: int
    topics: dict[str, list[int]]


@dataclass(slots=True)
class DescribeTransactionsResponse(Response):
    """One entry per transactional id asked, each with its own error code."""

    throttle_time_ms: int
    transaction_states: list[DescribeTransactionsState]


@dataclass(slots=True)
class DescribeTransactionsRequest(Request[DescribeTransactionsResponse]):
    """Describe transactional ids (v0, KIP-664). Only the coordinator of an id describes
    it (``NOT_COORDINATOR`` elsewhere): the caller asks each id's coordinator."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_TRANSACTIONS
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0

    transactional_ids: list[str]

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.text_items(self.transactional_ids)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> DescribeTransactionsResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)

        def topic(r: _BodyReader) -> tuple[str, list[int]]:
            entry = (r.text(), r.int32_items())
            r.skip_tags()
            return entry

        def state(r: _BodyReader) -> DescribeTransactionsState:
            entry = DescribeTransactionsState(
                r.int16(),
                r.text(),
                r.text(),
                r.int32(),
                r.int64(),
                r.int64(),
                r.int16(),
                dict(r.items(topic)),
            )
            r.skip_tags()
            return entry

        throttle_time_ms = r.int32()
        response = DescribeTransactionsResponse(throttle_time_ms, r.items(state))
        r.skip_tags()
        return response


# ---- ListTransactions (66) ----------------------------------------------------------------


@dataclass(slots=True)
class ListTransactionsState:
    """One transactional id a transaction coordinator holds, and its transaction's state
    (``Ongoing``, ``PrepareCommit``, ``CompleteAbort``, ``Empty``...)."""

    transactional_id: str
    producer_id: int
    transaction_state: str


@dataclass(slots=True)
class ListTransactionsResponse(Response):
    """The transactional ids one broker coordinates that match the request's filters."""

    throttle_time_ms: int
    error_code: int
    unknown_state_filters: list[str]
    transaction_states: list[ListTransactionsState]


@dataclass(slots=True)
class ListTransactionsRequest(Request[ListTransactionsResponse]):
    """List the transactional ids one broker coordinates (v0-2, KIP-664).

    Each broker answers for the transactional ids whose ``__transaction_state`` partitions
    it leads, so a whole cluster is listed by asking every broker. Empty filters match
    everything. ``duration_filter`` (ms, v1+) keeps transactions open at least that long;
    ``transactional_id_pattern`` (a Java regular expression, v2+, KIP-1152) narrows the
    answer on the broker. Both are filters only: an older version drops them and answers
    with more, which the caller must filter again. A broker may coordinate any number of
    transactional ids, so only the connection's ``max_response_size`` caps the answer.
    """

    API_KEY: ClassVar[int] = ApiKey.LIST_TRANSACTIONS
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 2

    state_filters: list[str] = field(default_factory=list)
    producer_id_filters: list[int] = field(default_factory=list)
    duration_filter: int = -1
    transactional_id_pattern: str | None = None

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.text_items(self.state_filters)
        w.items(self.producer_id_filters, _BodyWriter.int64)
        if version >= 1:
            w.int64(self.duration_filter)
        if version >= 2:
            w.nullable_text(self.transactional_id_pattern)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> ListTransactionsResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)

        def state(r: _BodyReader) -> ListTransactionsState:
            entry = ListTransactionsState(r.text(), r.int64(), r.text())
            r.skip_tags()
            return entry

        throttle_time_ms = r.int32()
        error_code = r.int16()
        response = ListTransactionsResponse(
            throttle_time_ms, error_code, r.text_items(), r.items(state)
        )
        r.skip_tags()
        return response


# ---- SaslHandshake (17) and SaslAuthenticate (36) -----------------------------------------


@dataclass(slots=True)
class SaslHandshakeResponse(Response):
    """Whether the mechanism is enabled, and which ones are."""

    error_code: int
    mechanisms: list[str]


@dataclass(slots=True)
class SaslHandshakeRequest(Request[SaslHandshakeResponse]):
    """Choose a SASL mechanism (v0-1; v1 means SaslAuthenticate requests follow)."""

    API_KEY: ClassVar[int] = ApiKey.SASL_HANDSHAKE
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 1
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = SMALL_RESPONSE_LIMIT

    mechanism: str

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.text(self.mechanism)
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> SaslHandshakeResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)
        return SaslHandshakeResponse(r.int16(), r.text_items())


@dataclass(slots=True)
class SaslAuthenticateResponse(Response):
    """The server's SASL bytes; ``session_lifetime_ms`` (v1+) bounds the session, 0 if none."""

    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0


@dataclass(slots=True)
class SaslAuthenticateRequest(Request[SaslAuthenticateResponse]):
    """One round of SASL authentication bytes (v0-2)."""

    API_KEY: ClassVar[int] = ApiKey.SASL_AUTHENTICATE
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 2
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = SMALL_RESPONSE_LIMIT

    auth_bytes: bytes

    def __repr__(self) -> str:
        # The bytes are credentials: keep them out of logs and tracebacks.
        return f"SaslAuthenticateRequest(auth_bytes=<{len(self.auth_bytes)} bytes>)"

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.blob(self.auth_bytes)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> SaslAuthenticateResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)
        response = SaslAuthenticateResponse(r.int16(), r.nullable_text(), r.blob())
        if version >= 1:
            response.session_lifetime_ms = r.int64()
        r.skip_tags()
        return response


# ---- DescribeCluster (60) -----------------------------------------------------------------


@dataclass(slots=True)
class DescribeClusterBroker:
    """A broker (or controller, for ``endpoint_type=2``) of the cluster."""

    broker_id: int
    host: str
    port: int
    rack: str | None


@dataclass(slots=True)
class DescribeClusterResponse(Response):
    """The cluster id, controller and brokers."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    endpoint_type: int
    cluster_id: str
    controller_id: int
    brokers: list[DescribeClusterBroker]
    cluster_authorized_operations: int


@dataclass(slots=True)
class DescribeClusterRequest(Request[DescribeClusterResponse]):
    """Describe the cluster (v0-1; ``endpoint_type`` other than 1 needs v1)."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_CLUSTER
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 1
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = SMALL_RESPONSE_LIMIT

    include_cluster_authorized_operations: bool = False
    endpoint_type: int = 1

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        w.boolean(self.include_cluster_authorized_operations)
        if version >= 1:
            w.int8(self.endpoint_type)
        else:
            _require(self.endpoint_type == 1, self, version, "an endpoint_type other than 1")
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> DescribeClusterResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)

        def broker(r: _BodyReader) -> DescribeClusterBroker:
            entry = DescribeClusterBroker(r.int32(), r.text(), r.int32(), r.nullable_text())
            r.skip_tags()
            return entry

        throttle_time_ms = r.int32()
        error_code = r.int16()
        error_message = r.nullable_text()
        endpoint_type = r.int8() if version >= 1 else 1
        response = DescribeClusterResponse(
            throttle_time_ms,
            error_code,
            error_message,
            endpoint_type,
            r.text(),
            r.int32(),
            r.items(broker),
            r.int32(),
        )
        r.skip_tags()
        return response


# ---- CreateTopics (19) --------------------------------------------------------------------

# A topic entry of a CreateTopics answer carries, from v5 (KIP-525), every config of the topic
# (about forty, each a name, a value and flags) and an error message; with room to spare.
_CREATED_TOPIC_ALLOWANCE = 64 * 1024


@dataclass(slots=True)
class CreatableReplicaAssignment:
    """The brokers to place one partition on (the first is its preferred leader)."""

    partition_index: int
    broker_ids: list[int]


@dataclass(slots=True)
class CreatableTopicConfig:
    """A topic config to set at creation (``value`` None: the broker's default)."""

    name: str
    value: str | None


@dataclass(slots=True)
class CreatableTopic:
    """One topic to create.

    ``num_partitions`` and ``replication_factor`` are -1 for the broker's defaults
    (``num.partitions``, ``default.replication.factor``; v4+, KIP-464) or when
    ``assignments`` place every partition by hand.
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: list[CreatableReplicaAssignment] = field(default_factory=list)
    configs: list[CreatableTopicConfig] = field(default_factory=list)


@dataclass(slots=True)
class CreatableTopicConfigs:
    """A config of a created topic, as the broker reports it (v5+)."""

    name: str
    value: str | None
    read_only: bool
    config_source: int = -1
    is_sensitive: bool = False


@dataclass(slots=True)
class CreatableTopicResult:
    """The outcome for one topic.

    ``topic_id`` (v7+) is None when absent or zero. ``num_partitions``,
    ``replication_factor`` and ``configs`` (v5+) describe the topic as created (or as it
    would be, with ``validate_only``); ``configs`` is None when the broker sent none, and
    then ``topic_config_error_code`` may say why (a tagged field). Before v5 they keep the
    schema's defaults (-1, -1, empty).
    """

    name: str
    error_code: int
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: list[CreatableTopicConfigs] | None = field(default_factory=list)
    topic_config_error_code: int = 0


@dataclass(slots=True)
class CreateTopicsResponse(Response):
    """One result per topic of the request."""

    throttle_time_ms: int
    topics: list[CreatableTopicResult]


def _encode_creatable_topic(w: _BodyWriter, topic: CreatableTopic) -> None:
    def assignment(w: _BodyWriter, item: CreatableReplicaAssignment) -> None:
        w.int32(item.partition_index)
        w.int32_items(item.broker_ids)
        w.tags()

    def config(w: _BodyWriter, item: CreatableTopicConfig) -> None:
        w.text(item.name)
        w.nullable_text(item.value)
        w.tags()

    w.text(topic.name)
    w.int32(topic.num_partitions)
    w.int16(topic.replication_factor)
    w.items(topic.assignments, assignment)
    w.items(topic.configs, config)
    w.tags()


@dataclass(slots=True)
class CreateTopicsRequest(Request[CreateTopicsResponse]):
    """Create topics (v2-7). Brokers forward it to the active controller (KRaft).

    ``timeout_ms`` is how long the broker may wait for the creation to complete before it
    answers REQUEST_TIMED_OUT for a topic (which may still be created). ``validate_only``
    checks the topics without creating anything.

    v4 (KIP-464) lets a topic without ``assignments`` leave ``num_partitions`` or
    ``replication_factor`` at -1 for the broker's defaults: below it such a topic raises
    :class:`~aioproducer.errors.UnsupportedVersionError`, as Java's request builder does.
    v5 is the first flexible version and returns the created topics' configs; v6 may
    answer THROTTLING_QUOTA_EXCEEDED (KIP-599); v7 returns the topic ids.
    """

    API_KEY: ClassVar[int] = ApiKey.CREATE_TOPICS
    MIN_VERSION: ClassVar[int] = 2
    MAX_VERSION: ClassVar[int] = 7

    topics: list[CreatableTopic]
    timeout_ms: int = 60000
    validate_only: bool = False

    def response_size_limit(self) -> int | None:
        """An entry per topic, each with the topic's configs (v5+)."""
        return SMALL_RESPONSE_LIMIT + len(self.topics) * _CREATED_TOPIC_ALLOWANCE

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        if version < 4:
            for topic in self.topics:
                _require(
                    bool(topic.assignments)
                    or (topic.num_partitions != -1 and topic.replication_factor != -1),
                    self,
                    version,
                    f"the broker's default partition count or replication factor (topic "
                    f"{topic.name!r}; needs v4)",
                )
        w.items(self.topics, _encode_creatable_topic)
        w.int32(self.timeout_ms)
        w.boolean(self.validate_only)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> CreateTopicsResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)

        def config(r: _BodyReader) -> CreatableTopicConfigs:
            entry = CreatableTopicConfigs(
                r.text(), r.nullable_text(), r.boolean(), r.int8(), r.boolean()
            )
            r.skip_tags()
            return entry

        def topic(r: _BodyReader) -> CreatableTopicResult:
            entry = CreatableTopicResult(r.text(), 0)
            if version >= 7:
                entry.topic_id = _topic_id(r)
            entry.error_code = r.int16()
            entry.error_message = r.nullable_text()
            if version >= 5:
                entry.num_partitions = r.int32()
                entry.replication_factor = r.int16()
                # v5 is the first flexible version: the array is compact.
                entry.configs = r.compact_nullable_array(config)
                tags = r.tags()
                if tags:
                    code = _tagged(tags, 0, Reader.int16)
                    entry.topic_config_error_code = 0 if code is None else code
            else:
                r.skip_tags()
            return entry

        response = CreateTopicsResponse(r.int32(), r.items(topic))
        r.skip_tags()
        return response


# ---- DeleteTopics (20) --------------------------------------------------------------------


@dataclass(slots=True)
class DeletableTopicResult:
    """The outcome for one topic; ``name`` is None (v6+) only for a topic asked for by id,
    ``topic_id`` (v6+) None when absent or zero, ``error_message`` sent from v5."""

    name: str | None
    error_code: int
    topic_id: uuid.UUID | None = None
    error_message: str | None = None


@dataclass(slots=True)
class DeleteTopicsResponse(Response):
    """One result per topic of the request."""

    throttle_time_ms: int
    responses: list[DeletableTopicResult]


@dataclass(slots=True)
class DeleteTopicsRequest(Request[DeleteTopicsResponse]):
    """Delete topics by name (v1-6).

    v6 names each topic in a struct with its topic id; this client deletes by name, so it
    sends the zero id there, as Java's request builder does for names. ``timeout_ms`` is how
    long the broker may wait for the deletions to complete.
    """

    API_KEY: ClassVar[int] = ApiKey.DELETE_TOPICS
    MIN_VERSION: ClassVar[int] = 1
    MAX_VERSION: ClassVar[int] = 6

    topic_names: list[str]
    timeout_ms: int = 60000

    def response_size_limit(self) -> int | None:
        """An entry per topic, each with an error message (v5+)."""
        return _echo_limit(len(self.topic_names), 0, 0)

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)
        if version >= 6:

            def state(w: _BodyWriter, name: str) -> None:
                w.nullable_text(name)
                w.uuid(None)
                w.tags()

            w.items(self.topic_names, state)
        else:
            w.text_items(self.topic_names)
        w.int32(self.timeout_ms)
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> DeleteTopicsResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)

        def result(r: _BodyReader) -> DeletableTopicResult:
            entry = DeletableTopicResult(r.nullable_text() if version >= 6 else r.text(), 0)
            if version >= 6:
                entry.topic_id = _topic_id(r)
            entry.error_code = r.int16()
            if version >= 5:
                entry.error_message = r.nullable_text()
            r.skip_tags()
            return entry

        response = DeleteTopicsResponse(r.int32(), r.items(result))
        r.skip_tags()
        return response


# ---- DescribeConfigs (32) -----------------------------------------------------------------

# A described resource holds every config (a topic has about forty; a broker a few hundred),
# each with its synonyms (v1+) and documentation (v3+): room for the largest, a broker's.
_DESCRIBED_RESOURCE_ALLOWANCE = 1 << 20


@dataclass(slots=True)
class DescribeConfigsResource:
    """A resource whose configs to describe: ``resource_type`` 2 for a topic, 4 for a broker
    (Java's ``ConfigResource.Type``); ``configuration_keys`` None for every config."""

    resource_type: int
    resource_name: str
    configuration_keys: list[str] | None = None


@dataclass(slots=True)
class DescribeConfigsSynonym:
    """Where else a config's value could come from, most specific first (v1+)."""

    name: str
    value: str | None
    source: int


@dataclass(slots=True)
class DescribeConfigsResourceResult:
    """One config: its value (None when sensitive or unset), whether it is read-only or
    sensitive, its source (v1+; Java's ``ConfigEntry.ConfigSource``: 1 a topic's own value,
    5 the default, ...), and from v3 its type and documentation (None unless asked for;
    the schema's default, empty, before v3)."""

    name: str
    value: str | None
    read_only: bool
    config_source: int = -1
    is_sensitive: bool = False
    synonyms: list[DescribeConfigsSynonym] = field(default_factory=list)
    config_type: int = 0
    documentation: str | None = ""


@dataclass(slots=True)
class DescribeConfigsResult:
    """The configs of one resource, or its error."""

    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    configs: list[DescribeConfigsResourceResult]


@dataclass(slots=True)
class DescribeConfigsResponse(Response):
    """One result per resource of the request."""

    throttle_time_ms: int
    results: list[DescribeConfigsResult]


@dataclass(slots=True)
class DescribeConfigsRequest(Request[DescribeConfigsResponse]):
    """Describe the configs of topics or brokers (v1-4).

    ``include_documentation`` needs v3+ (not ignorable). A topic's configs can be asked of
    any broker; a broker's own (dynamic) configs of that broker.
    """

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_CONFIGS
    MIN_VERSION: ClassVar[int] = 1
    MAX_VERSION: ClassVar[int] = 4

    resources: list[DescribeConfigsResource]
    include_synonyms: bool = False
    include_documentation: bool = False

    def response_size_limit(self) -> int | None:
        """Room for every config of each resource asked for."""
        return SMALL_RESPONSE_LIMIT + len(self.resources) * _DESCRIBED_RESOURCE_ALLOWANCE

    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body for ``version``."""
        w = _writer(self, version)

        def resource(w: _BodyWriter, item: DescribeConfigsResource) -> None:
            w.int8(item.resource_type)
            w.text(item.resource_name)
            if item.configuration_keys is None:
                w.null_array()
            else:
                w.text_items(item.configuration_keys)
            w.tags()

        w.items(self.resources, resource)
        w.boolean(self.include_synonyms)
        if version >= 3:
            w.boolean(self.include_documentation)
        else:
            _require(not self.include_documentation, self, version, "include_documentation")
        w.tags()
        return w.done()

    def decode_response(self, data: memoryview, version: int) -> DescribeConfigsResponse:
        """Decode the response body sent for ``version``."""
        r = _reader(self, data, version)

        def synonym(r: _BodyReader) -> DescribeConfigsSynonym:
            entry = DescribeConfigsSynonym(r.text(), r.nullable_text(), r.int8())
            r.skip_tags()
            return entry

        def config(r: _BodyReader) -> DescribeConfigsResourceResult:
            entry = DescribeConfigsResourceResult(r.text(), r.nullable_text(), r.boolean())
            entry.config_source = r.int8()
            entry.is_sensitive = r.boolean()
            entry.synonyms = r.items(synonym)
            if version >= 3:
                entry.config_type = r.int8()
                entry.documentation = r.nullable_text()
            r.skip_tags()
            return entry

        def result(r: _BodyReader) -> DescribeConfigsResult:
            entry = DescribeConfigsResult(
                r.int16(), r.nullable_text(), r.int8(), r.text(), r.items(config)
            )
            r.skip_tags()
            return entry

        response = DescribeConfigsResponse(r.int32(), r.items(result))
        r.skip_tags()
        return response
