"""A scripted Kafka cluster in asyncio: correct where the test needs it, hostile on cue.

:class:`ScriptedCluster` runs a few brokers on loopback, in the test's own event loop. Each
answers ApiVersions, Metadata and InitProducerId correctly, and Produce the way Kafka does:
it checks idempotent sequence numbers per (partition, producer id) with Kafka's rules (a new
epoch starts at sequence 0, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, a retry of one of the last
five batches is answered with its original offset and not appended twice). That makes it an
exactly-once oracle, which librdkafka's mock is not (the mock keeps every copy of a retried
batch from a non-transactional idempotent producer).

Then each Produce request (or any request, by API key) can be given an :class:`Action` from a
per-broker script: answer with an error code, append and then drop the connection, append and
answer late, stop answering, answer with garbage, a truncated body, a frame cut in the middle,
a size prefix that announces gigabytes, or an answer followed by bytes no request asked for.
Requests are decoded, and responses encoded, with kafka-python's schema-driven codec,
independent of the client under test; record batches are read with kafka-python's record
reader.

It is also a transaction coordinator and group coordinator (FindCoordinator names
:attr:`ScriptedCluster.coordinator` for every key): InitProducerId for a transactional id
fences the previous epoch and aborts its open transaction; AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn check the producer id and epoch as Kafka does;
transactional batches are refused (INVALID_TXN_STATE) for a partition not added to the
transaction, and records and offsets take effect only when EndTxn commits. With
:attr:`ScriptedCluster.transaction_version` at 2 or more it advertises that finalized feature
in ApiVersions v3+ and follows KIP-890 transactions v2: Produce v12 adds the partition to the
transaction, TxnOffsetCommit v5 the group's offsets, and EndTxn v5 bumps the epoch and returns
it. Use :data:`TRANSACTION_API_VERSIONS` as the brokers' ``api_versions`` for that.

What it does not do: transaction timeouts, transaction markers in the log, acks=0 semantics
beyond not answering, compression other than what kafka-python can read, quotas, and
consumer groups beyond storing committed offsets. Every partition has one replica (its
leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import os
import struct
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# kafka-python ships no type information: its classes are Any here.
from kafka.protocol.admin import (  # type: ignore[import-untyped]
    CreateTopicsRequest as KCreateTopicsRequest,
)
from kafka.protocol.admin import CreateTopicsResponse as KCreateTopicsResponse
from kafka.protocol.admin import DeleteTopicsRequest as KDeleteTopicsRequest
from kafka.protocol.admin import DeleteTopicsResponse as KDeleteTopicsResponse
from kafka.protocol.metadata import (  # type: ignore[import-untyped]
    ApiVersionsResponse as KApiVersionsResponse,
)
from kafka.protocol.metadata import (
    FindCoordinatorRequest as KFindCoordinatorRequest,
)
from kafka.protocol.metadata import (
    FindCoordinatorResponse as KFindCoordinatorResponse,
)
from kafka.protocol.metadata import MetadataRequest as KMetadataRequest
from kafka.protocol.metadata import MetadataResponse as KMetadataResponse
from kafka.protocol.producer import (  # type: ignore[import-untyped]
    ProduceRequest as KProduceRequest,
)
from kafka.protocol.producer import ProduceResponse as KProduceResponse
from kafka.protocol.producer.transaction import (  # type: ignore[import-untyped]
    AddOffsetsToTxnRequest as KAddOffsetsToTxnRequest,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse as KAddOffsetsToTxnResponse,
)
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest as KAddPartitionsToTxnRequest,
)
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnResponse as KAddPartitionsToTxnResponse,
)
from kafka.protocol.producer.transaction import EndTxnRequest as KEndTxnRequest
from kafka.protocol.producer.transaction import EndTxnResponse as KEndTxnResponse
from kafka.protocol.producer.transaction import (
    InitProducerIdRequest as KInitProducerIdRequest,
)
from kafka.protocol.producer.transaction import (
    InitProducerIdResponse as KInitProducerIdResponse,
)
from kafka.protocol.producer.transaction import (
    TxnOffsetCommitRequest as KTxnOffsetCommitRequest,
)
from kafka.protocol.producer.transaction import (
    TxnOffsetCommitResponse as KTxnOffsetCommitResponse,
)
from kafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "ADMIN_API_VERSIONS",
    "API_VERSIONS",
    "CREATE_TOPICS",
    "DELETE_TOPICS",
    "END_TXN",
    "FIND_COORDINATOR",
    "INIT_PRODUCER_ID",
    "METADATA",
    "PRODUCE",
    "TRANSACTION_API_VERSIONS",
    "TXN_OFFSET_COMMIT",
    "Action",
    "ActionKind",
    "ReceivedRequest",
    "ScriptedBroker",
    "ScriptedCluster",
    "StoredRecord",
]

PRODUCE = 0
METADATA = 3
FIND_COORDINATOR = 10
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28

_NONE = 0
_CORRUPT_MESSAGE = 2
_UNKNOWN_TOPIC_OR_PARTITION = 3
_NOT_LEADER_OR_FOLLOWER = 6
_UNSUPPORTED_VERSION = 35
_TOPIC_ALREADY_EXISTS = 36
_INVALID_PARTITIONS = 37
_INVALID_REPLICATION_FACTOR = 38
_NOT_CONTROLLER = 41
_OUT_OF_ORDER_SEQUENCE_NUMBER = 45
_DUPLICATE_SEQUENCE_NUMBER = 46
_INVALID_PRODUCER_EPOCH = 47
_INVALID_TXN_STATE = 48
_INVALID_PRODUCER_ID_MAPPING = 49
_PRODUCER_FENCED = 90

_SEQUENCE_MODULO = 1 << 31

# A record batch v2: base offset int64, batch length int32 (of what follows it), partition
# leader epoch int32, magic int8, crc uint32 of every byte after it.
_BATCH_LENGTH = struct.Struct(">qi")
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17


def _crcs_hold(data: bytes) -> bool:
    """Whether every record batch in ``data`` has the CRC-32C its header says (computed
    here with the crc32c package, apart from the producer's own code)."""
    import crc32c

    position = 0
    while position + _BATCH_LENGTH.size <= len(data):
        _, length = _BATCH_LENGTH.unpack_from(data, position)
        end = position + _BATCH_LENGTH.size + length
        if length < _CRC_OFFSET - _BATCH_LENGTH.size + _CRC.size or end > len(data):
            return False
        (expected,) = _CRC.unpack_from(data, position + _CRC_OFFSET)
        if crc32c.crc32c(data[position + _CRC_OFFSET + _CRC.size : end]) != expected:
            return False
        position = end
    return position == len(data)
# Kafka keeps the last five batches of each producer per partition to recognise retries
# (ProducerStateEntry.NUM_BATCHES_TO_RETAIN); that is why max.in.flight is at most 5.
_RETAINED_BATCHES = 5

#: The versions each broker advertises; the client picks the highest it also implements.
DEFAULT_API_VERSIONS: Mapping[int, tuple[int, int]] = {
    PRODUCE: (3, 9),
    METADATA: (1, 12),
    API_VERSIONS: (0, 3),
    INIT_PRODUCER_ID: (0, 4),
}

#: What a Kafka 4.0 broker advertises for a transactional producer (KIP-890 part 2 versions
#: included: Produce v12, EndTxn v5, TxnOffsetCommit v5).
TRANSACTION_API_VERSIONS: Mapping[int, tuple[int, int]] = {
    PRODUCE: (3, 12),
    METADATA: (1, 12),
    FIND_COORDINATOR: (0, 4),
    API_VERSIONS: (0, 3),
    INIT_PRODUCER_ID: (0, 5),
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 5),
    TXN_OFFSET_COMMIT: (0, 5),
}

#: What a Kafka 4 broker advertises for topic administration (CreateTopics v2-7,
#: DeleteTopics v1-6), on top of :data:`DEFAULT_API_VERSIONS`.
ADMIN_API_VERSIONS: Mapping[int, tuple[int, int]] = {
    **DEFAULT_API_VERSIONS,
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
}


class ActionKind(enum.Enum):
    """How a broker treats one request."""

    NORMAL = "normal"
    """Handle it as Kafka would."""
    ERROR = "error"
    """Append nothing; answer every partition with ``Action.error``."""
    APPEND_THEN_DROP = "append_then_drop"
    """Append as NORMAL, then close the connection without answering: an outcome the client
    cannot know."""
    APPEND_THEN_DELAY = "append_then_delay"
    """Append as NORMAL at once, answer after ``Action.delay`` seconds (if the connection is
    still open); later requests are handled meanwhile but their answers wait behind it."""
    APPEND_THEN_HOLD = "append_then_hold"
    """Append as NORMAL at once, answer only once ``Action.release`` is set (never, if it
    never is); later requests are handled meanwhile but their answers wait behind it."""
    DELAY = "delay"
    """A slow broker: read nothing more from the connection for ``Action.delay`` seconds,
    then handle the request as NORMAL. (Any other kind with a ``delay`` waits the same way
    first, except APPEND_THEN_DELAY, which appends first.)"""
    HANG = "hang"
    """Append nothing and never answer this or any later request of the connection."""
    GARBAGE = "garbage"
    """Answer with the right size prefix and correlation id, then ``Action.payload`` (random
    bytes when empty) as the body. Nothing is appended."""
    TRUNCATED = "truncated"
    """Append nothing; answer with a well-framed response whose body stops halfway."""
    CUT_MID_FRAME = "cut_mid_frame"
    """Append nothing; write half of a response frame, then close the connection."""
    RAW = "raw"
    """Append nothing; write ``Action.payload`` as is (any size prefix included) and keep
    the connection open without answering anything else."""
    TRAILING = "trailing"
    """Append and answer as NORMAL, then write ``Action.payload`` right after the answer:
    bytes no request asked for."""


@dataclass(frozen=True)
class Action:
    """One scripted reaction; see :class:`ActionKind`."""

    kind: ActionKind
    error: int = 0
    delay: float = 0.0
    payload: bytes = b""
    release: asyncio.Event | None = field(default=None, compare=False)

    @classmethod
    def error_code(cls, code: int, delay: float = 0.0) -> Action:
        """Answer with ``code`` for every partition (after ``delay`` seconds, reading nothing
        more meanwhile), appending nothing."""
        return cls(ActionKind.ERROR, error=code, delay=delay)

    @classmethod
    def hold(cls) -> Action:
        """Append, and answer only once ``action.release.set()`` is called."""
        return cls(ActionKind.APPEND_THEN_HOLD, release=asyncio.Event())


NORMAL = Action(ActionKind.NORMAL)


@dataclass(frozen=True)
class StoredRecord:
    """A record a broker appended, with the idempotence fields of its batch."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    producer_epoch: int
    sequence: int
    transactional: bool = False


@dataclass
class Transaction:
    """One transaction of a transactional id, as its coordinator sees it.

    ``outcome`` is "ongoing", then "committed" or "aborted". ``version`` is 2 when it was
    begun with transactions v2 (an implicit add by Produce v12 or TxnOffsetCommit v5).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    records: list[tuple[str, int, int]] = field(default_factory=list)
    outcome: str = "ongoing"
    version: int = 1


@dataclass
class _TransactionalId:
    producer_id: int
    producer_epoch: int
    ongoing: Transaction | None = None


@dataclass(frozen=True)
class ReceivedRequest:
    """A request a broker read, in arrival order."""

    broker_id: int
    api_key: int
    version: int
    correlation_id: int
    action: ActionKind
    at: float
    """The loop's clock when it arrived."""


@dataclass
class _ProducerState:
    epoch: int
    # (first sequence, last sequence, base offset) of the last batches appended.
    batches: deque[tuple[int, int, int]] = field(
        default_factory=lambda: deque(maxlen=_RETAINED_BATCHES)
    )


@dataclass
class _Partition:
    records: list[StoredRecord] = field(default_factory=list)
    producers: dict[int, _ProducerState] = field(default_factory=dict)
    # offset -> the transaction the record belongs to
    transaction_of: dict[int, Transaction] = field(default_factory=dict)


class ScriptedBroker:
    """One broker of a :class:`ScriptedCluster`; scripts are set through its attributes.

    Attributes:
        node_id: the broker id.
        script: per API key, actions used one per request, in order; when a queue is empty
            (or absent) ``default`` applies.
        default: per API key, the action once the script is used up (NORMAL if absent).
        api_versions: the versions advertised in ApiVersions.
    """

    def __init__(self, cluster: ScriptedCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.script: dict[int, deque[Action]] = {}
        self.default: dict[int, Action] = {}
        self.api_versions: dict[int, tuple[int, int]] = dict(DEFAULT_API_VERSIONS)
        self.host = "127.0.0.1"
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.connections_accepted = 0
        self.refuse = False
        """When True, every new connection is accepted and closed at once (a broker that is
        starting up, or a load balancer with nothing behind it)."""
        self.connection_times: list[float] = []
        """The loop's clock at each accepted connection."""
        self.cluster_id: str | None = None
        """The cluster id this broker's Metadata answers give, when not the cluster's."""
        self.metadata_error = 0
        """The top-level error code of this broker's Metadata answers from v13 on (advertise
        v13 in ``api_versions`` first): REBOOTSTRAP_REQUIRED is 129."""

    def push(self, api_key: int, *actions: Action) -> None:
        """Queue actions for the next requests of ``api_key`` to this broker."""
        self.script.setdefault(api_key, deque()).extend(actions)

    def _next_action(self, api_key: int) -> Action:
        queue = self.script.get(api_key)
        if queue:
            return queue.popleft()
        return self.default.get(api_key, NORMAL)

    async def start(self) -> None:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop every connection (a broker that died)."""
        if self._server is not None:
            self._server.close()
        self.drop_connections()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    def drop_connections(self) -> None:
        """Close every open connection at once."""
        for writer in list(self._writers):
            transport = writer.transport
            transport.abort()
        self._writers.clear()

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    # ---- the connection loop ---------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections_accepted += 1
        self.connection_times.append(asyncio.get_running_loop().time())
        # Kafka handles the requests of one connection one at a time, in order, and answers
        # in that order: requests are handled here, in the read loop, and an answer held back
        # (APPEND_THEN_DELAY) holds back every later answer of the connection too.
        previous: asyncio.Task[None] | None = None
        hung = False
        try:
            while not self.refuse:
                try:
                    size_bytes = await reader.readexactly(4)
                    (size,) = struct.unpack(">i", size_bytes)
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                api_key, version, correlation_id = struct.unpack(">hhi", frame[:8])
                action = self._next_action(api_key)
                self.cluster._record(self.node_id, api_key, version, correlation_id, action.kind)
                if hung:
                    continue
                kind = action.kind
                if kind is ActionKind.HANG:
                    hung = True
                    continue
                if action.delay > 0 and kind is not ActionKind.APPEND_THEN_DELAY:
                    # A slow broker: it reads nothing more from this connection meanwhile.
                    await asyncio.sleep(action.delay)
                response = self.cluster._handle(self, frame, api_key, version, action)
                if response is None:
                    continue  # acks=0
                if kind is ActionKind.APPEND_THEN_DROP:
                    writer.transport.abort()
                    return
                data = _answer_bytes(correlation_id, response, api_key, version, action)
                close_after = kind is ActionKind.CUT_MID_FRAME
                hung = close_after or kind is ActionKind.RAW
                delay = action.delay if kind is ActionKind.APPEND_THEN_DELAY else 0.0
                release = action.release if kind is ActionKind.APPEND_THEN_HOLD else None
                if (
                    delay > 0
                    or release is not None
                    or (previous is not None and not previous.done())
                ):
                    previous = asyncio.ensure_future(
                        self._write_later(writer, data, delay, release, previous, close_after)
                    )
                    self._tasks.add(previous)
                    previous.add_done_callback(self._tasks.discard)
                else:
                    writer.write(data)
                    if close_after:
                        await writer.drain()
                        writer.transport.abort()
                        return
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            # A bug of the scripted broker, not of the client: ScriptedCluster.close raises it.
            self.cluster.failures.append(exc)
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
            self._tasks.discard(task)

    async def _write_later(
        self,
        writer: asyncio.StreamWriter,
        data: bytes,
        delay: float,
        release: asyncio.Event | None,
        previous: asyncio.Task[None] | None,
        close_after: bool,
    ) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            if delay > 0:
                await asyncio.sleep(delay)
            if release is not None:
                await release.wait()
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            if writer.transport.is_closing():
                return
            writer.write(data)
            if close_after:
                await writer.drain()
                writer.transport.abort()


# The kinds of action under which a broker acts on a request (appends, creates, ...).
_ACTING = frozenset(
    {
        ActionKind.NORMAL,
        ActionKind.DELAY,
        ActionKind.APPEND_THEN_DROP,
        ActionKind.APPEND_THEN_DELAY,
        ActionKind.APPEND_THEN_HOLD,
        ActionKind.TRAILING,
    }
)

_TRANSACTIONAL_APIS: Mapping[int, Any] = {
    FIND_COORDINATOR: KFindCoordinatorRequest,
    INIT_PRODUCER_ID: KInitProducerIdRequest,
    ADD_PARTITIONS_TO_TXN: KAddPartitionsToTxnRequest,
    ADD_OFFSETS_TO_TXN: KAddOffsetsToTxnRequest,
    END_TXN: KEndTxnRequest,
    TXN_OFFSET_COMMIT: KTxnOffsetCommitRequest,
}


def _answer_bytes(
    correlation_id: int, response: Any, api_key: int, version: int, action: Action
) -> bytes:
    """The bytes a broker writes for ``response`` under ``action``."""
    data = _frame(correlation_id, response, api_key, version)
    kind = action.kind
    if kind is ActionKind.GARBAGE:
        body = action.payload or os.urandom(64)
        return struct.pack(">ii", 4 + len(body), correlation_id) + body
    if kind is ActionKind.TRUNCATED:
        # Keep the correlation id (and a flexible header's tag byte) and about half the body,
        # under a size prefix that matches what is sent: the frame is whole, its body is not.
        keep = max(5, (len(data) - 4) // 2)
        return struct.pack(">i", keep) + data[4 : 4 + keep]
    if kind is ActionKind.CUT_MID_FRAME:
        return data[: max(5, len(data) // 2)]
    if kind is ActionKind.RAW:
        return action.payload
    if kind is ActionKind.TRAILING:
        return data + action.payload
    return data


@dataclass(frozen=True)
class _TopLevelError:
    """A Metadata answer of v13 or later: kafka-python's v12 answer and the top-level error
    code v13 adds."""

    response: Any
    error_code: int


def _frame(correlation_id: int, response: Any, api_key: int, version: int) -> bytes:
    if isinstance(response, _TopLevelError):
        # Metadata v13 (KIP-1102) is v12 with a top-level ErrorCode before the body's tagged
        # fields; kafka-python encodes v12, the code goes in before its last byte (no tags).
        data = bytearray(_frame(correlation_id, response.response, api_key, 12))
        assert data[-1] == 0, "the v12 body ends with tagged fields"
        data[-1:-1] = struct.pack(">h", response.error_code)
        data[0:4] = struct.pack(">i", len(data) - 4)
        return bytes(data)
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    data = response.encode(header=True, framed=True)
    return bytes(data)


class ScriptedCluster:
    """Brokers 1..N on loopback sharing one log per partition; see the module docstring.

    Args:
        num_brokers: how many brokers.
        topics: ``{topic: partition count}``. Partition ``p`` is led by broker
            ``1 + p % num_brokers`` unless :attr:`leaders` says otherwise.
        duplicate_answer: how a retry of an appended batch is answered: ``"offset"`` (no
            error, the original offset: Kafka) or ``"error"`` (DUPLICATE_SEQUENCE_NUMBER,
            as older brokers and Tansu do).

    Use as ``async with ScriptedCluster(...) as cluster:``.
    """

    def __init__(
        self,
        num_brokers: int = 2,
        *,
        topics: Mapping[str, int] | None = None,
        duplicate_answer: str = "offset",
    ) -> None:
        if duplicate_answer not in ("offset", "error"):
            raise ValueError(
                f"duplicate_answer must be 'offset' or 'error', not {duplicate_answer!r}"
            )
        self.brokers = {node: ScriptedBroker(self, node) for node in range(1, num_brokers + 1)}
        self.topics: dict[str, int] = dict(topics or {})
        self.leaders: dict[tuple[str, int], int] = {}
        self.duplicate_answer = duplicate_answer
        # Tansu's way: InitProducerId only for a new id (-1/-1); a bump gets an error.
        self.requests: list[ReceivedRequest] = []
        self.failures: list[BaseException] = []
        """Exceptions the brokers' own code raised (a broken script, not a client fault)."""
        self.advertised: set[int] | None = None
        """Broker ids listed in Metadata answers; None lists every broker."""
        self.cluster_id = "scripted"
        """The cluster id Metadata answers give: two scripted clusters with the same id are
        one cluster that moved to other addresses, as far as a client can tell."""
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._producer_ids = itertools.count(1000)
        self.transaction_version: int | None = None
        """The finalized ``transaction.version`` advertised in ApiVersions v3+ (None: the
        feature is not finalized, as before Kafka 4.0)."""
        self.features_epoch = 1
        """The finalized-features epoch sent with it."""
        self.coordinator = 1
        """The broker FindCoordinator names, for transactional ids and groups alike."""
        self.controller: int | None = None
        """The broker Metadata answers name as the controller; None names the lowest id
        listed."""
        self.active_controller: int | None = None
        """The only broker that creates and deletes topics; the others answer
        NOT_CONTROLLER, as brokers did before KRaft (a KRaft broker forwards the request to
        the controller instead). None: every broker does."""
        self.transactions: list[Transaction] = []
        """Every transaction, in the order they began."""
        self.committed_offsets: dict[str, dict[tuple[str, int], int]] = {}
        """Consumer offsets committed by transactions: ``{group: {(topic, partition): offset}}``."""
        self.decoded: list[tuple[int, int, Any]] = []
        """(api key, version, request decoded by kafka-python) of every transactional request
        (FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
        TxnOffsetCommit, EndTxn), Metadata request and topic administration request
        (CreateTopics, DeleteTopics)."""
        self._transactional_ids: dict[str, _TransactionalId] = {}

    async def __aenter__(self) -> ScriptedCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start every broker."""
        for broker in self.brokers.values():
            await broker.start()

    async def close(self) -> None:
        """Stop every broker.

        Raises:
            AssertionError: a broker's own code failed while serving (see :attr:`failures`).
        """
        for broker in self.brokers.values():
            await broker.stop()
        if self.failures:
            raise AssertionError(f"the scripted broker failed: {self.failures!r}") from (
                self.failures[0]
            )

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's ``host:port``, comma-separated."""
        return ",".join(broker.address for broker in self.brokers.values())

    def broker(self, node_id: int) -> ScriptedBroker:
        """The broker with this id."""
        return self.brokers[node_id]

    def leader_for(self, topic: str, partition: int) -> int:
        """The id of the broker leading ``topic``-``partition``."""
        return self.leaders.get((topic, partition), 1 + partition % len(self.brokers))

    def records(self, topic: str, partition: int = 0) -> list[StoredRecord]:
        """What the partition's log holds, in offset order."""
        return list(self._partition(topic, partition).records)

    def values(self, topic: str, partition: int = 0) -> list[bytes | None]:
        """The values of the partition's log, in offset order."""
        return [record.value for record in self._partition(topic, partition).records]

    def committed_values(self, topic: str, partition: int = 0) -> list[bytes | None]:
        """What a consumer reading committed data sees: the values of records written
        outside transactions or by committed ones, in offset order."""
        state = self._partition(topic, partition)
        return [
            record.value
            for record in state.records
            if record.offset not in state.transaction_of
            or state.transaction_of[record.offset].outcome == "committed"
        ]

    def decoded_of(self, api_key: int) -> list[tuple[int, Any]]:
        """(version, decoded request) of the transactional requests of one type."""
        return [(version, request) for key, version, request in self.decoded if key == api_key]

    def requests_of(self, api_key: int, broker_id: int | None = None) -> list[ReceivedRequest]:
        """The requests of one type received so far (by one broker, if given)."""
        return [
            r
            for r in self.requests
            if r.api_key == api_key and (broker_id is None or r.broker_id == broker_id)
        ]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds, looking every few milliseconds.

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """

        async def poll() -> None:
            while not predicate():
                await asyncio.sleep(0.005)

        await asyncio.wait_for(poll(), timeout)

    # ---- request handling -----------------------------------------------------------------

    def _record(
        self, broker_id: int, api_key: int, version: int, correlation_id: int, kind: ActionKind
    ) -> None:
        loop = asyncio.get_running_loop()
        self.requests.append(
            ReceivedRequest(broker_id, api_key, version, correlation_id, kind, loop.time())
        )

    def _partition(self, topic: str, partition: int) -> _Partition:
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = _Partition()
        return state

    def _handle(
        self, broker: ScriptedBroker, frame: bytes, api_key: int, version: int, action: Action
    ) -> Any:
        """The response object for a request (None when none is due)."""
        if api_key == API_VERSIONS:
            return self._api_versions(broker, version)
        if api_key == METADATA:
            return self._metadata(frame, version, broker)
        if api_key in _TRANSACTIONAL_APIS:
            request = _TRANSACTIONAL_APIS[api_key].decode(frame, version=version, header=True)
            self.decoded.append((api_key, version, request))
            if api_key == FIND_COORDINATOR:
                return self._find_coordinator(request, version)
            if api_key == INIT_PRODUCER_ID and request.transactional_id is not None:
                return self._init_transactional_id(request)
            if api_key == ADD_PARTITIONS_TO_TXN:
                return self._add_partitions(request, version)
            if api_key == ADD_OFFSETS_TO_TXN:
                return self._add_offsets(request, version)
            if api_key == TXN_OFFSET_COMMIT:
                return self._txn_offset_commit(request, version)
            if api_key == END_TXN:
                return self._end_txn(request, version)
        if api_key == INIT_PRODUCER_ID:
            # As Kafka: without a transactional id, a new producer id at epoch 0, whatever
            # id and epoch the request names (KIP-360's bump is for transactional ids; an
            # idempotent producer bumps its epoch locally).
            return KInitProducerIdResponse(
                throttle_time_ms=0,
                error_code=0,
                producer_id=next(self._producer_ids),
                producer_epoch=0,
            )
        if api_key == PRODUCE:
            return self._produce(broker, frame, version, action)
        if api_key == CREATE_TOPICS:
            return self._create_topics(broker, frame, version, action)
        if api_key == DELETE_TOPICS:
            return self._delete_topics(broker, frame, version, action)
        raise AssertionError(f"the scripted broker does not implement api key {api_key}")

    def _api_versions(self, broker: ScriptedBroker, version: int) -> Any:
        low, high = broker.api_versions[API_VERSIONS]
        R = KApiVersionsResponse
        keys = [
            R.ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(broker.api_versions.items())
        ]
        if not low <= version <= high:
            return R(error_code=_UNSUPPORTED_VERSION, api_keys=keys)
        if self.transaction_version is None or version < 3:
            return R(error_code=0, api_keys=keys, throttle_time_ms=0)
        # KIP-584 finalized features (tagged fields of v3+): what KIP-890 clients look at.
        return R(
            error_code=0,
            api_keys=keys,
            throttle_time_ms=0,
            finalized_features_epoch=self.features_epoch,
            finalized_features=[
                R.FinalizedFeatureKey(
                    name="transaction.version",
                    max_version_level=self.transaction_version,
                    min_version_level=0,
                )
            ],
        )

    def _metadata(self, frame: bytes, version: int, broker: ScriptedBroker) -> Any:
        # v13 is v12 with a top-level error code in the answer (see _frame).
        request = KMetadataRequest.decode(frame, version=min(version, 12), header=True)
        self.decoded.append((METADATA, version, request))
        R = KMetadataResponse
        T = R.MetadataResponseTopic
        P = T.MetadataResponsePartition
        listed = (
            self.brokers
            if self.advertised is None
            else {node: broker for node, broker in self.brokers.items() if node in self.advertised}
        )
        brokers = [
            R.MetadataResponseBroker(node_id=node, host=b.host, port=b.port, rack=None)
            for node, b in listed.items()
        ]
        names: Iterable[str] = (
            list(self.topics) if request.topics is None else [t.name for t in request.topics]
        )
        topics = []
        for name in names:
            count = self.topics.get(name)
            if count is None:
                topics.append(
                    T(
                        error_code=_UNKNOWN_TOPIC_OR_PARTITION,
                        name=name,
                        topic_id=uuid.UUID(int=0),
                        is_internal=False,
                        partitions=[],
                        authorized_operations=set(),
                    )
                )
                continue
            partitions = [
                P(
                    error_code=0,
                    partition_index=p,
                    leader_id=self.leader_for(name, p),
                    leader_epoch=0,
                    replica_nodes=[self.leader_for(name, p)],
                    isr_nodes=[self.leader_for(name, p)],
                    offline_replicas=[],
                )
                for p in range(count)
            ]
            topics.append(
                T(
                    error_code=0,
                    name=name,
                    topic_id=uuid.UUID(int=0),
                    is_internal=False,
                    partitions=partitions,
                    authorized_operations=set(),
                )
            )
        response = R(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=broker.cluster_id if broker.cluster_id is not None else self.cluster_id,
            controller_id=(
                self.controller if self.controller is not None else min(listed) if listed else -1
            ),
            topics=topics,
            authorized_operations=set(),
        )
        if version >= 13:
            return _TopLevelError(response, broker.metadata_error)
        return response

    def _produce(self, broker: ScriptedBroker, frame: bytes, version: int, action: Action) -> Any:
        """Append each partition's records as Kafka does (the leader checks, then every
        batch's CRC-32C, then the producer's sequence), unless ``action`` says otherwise."""
        request = KProduceRequest.decode(frame, version=version, header=True)
        R = KProduceResponse
        P = R.TopicProduceResponse.PartitionProduceResponse
        appends = action.kind in (
            ActionKind.NORMAL,
            ActionKind.DELAY,
            ActionKind.APPEND_THEN_DROP,
            ActionKind.APPEND_THEN_DELAY,
            ActionKind.APPEND_THEN_HOLD,
            ActionKind.TRAILING,
        )
        topics = []
        for topic_data in request.topic_data:
            partitions = []
            for data in topic_data.partition_data:
                name, index = topic_data.name, data.index
                if not appends:
                    code, offset = (action.error or -1), -1
                elif name not in self.topics or index >= self.topics[name]:
                    code, offset = _UNKNOWN_TOPIC_OR_PARTITION, -1
                elif self.leader_for(name, index) != broker.node_id:
                    code, offset = _NOT_LEADER_OR_FOLLOWER, -1
                elif not _crcs_hold(bytes(data.records)):
                    # As Kafka's LogValidator: a batch whose CRC-32C does not match.
                    code, offset = _CORRUPT_MESSAGE, -1
                elif request.transactional_id is not None:
                    code, offset = self._append_transactional(
                        request.transactional_id, name, index, bytes(data.records), version
                    )
                else:
                    code, offset = self._append(name, index, bytes(data.records))
                partitions.append(
                    P(
                        index=index,
                        error_code=code,
                        base_offset=offset,
                        log_append_time_ms=-1,
                        log_start_offset=0,
                        record_errors=[],
                        error_message=None,
                    )
                )
            topics.append(
                R.TopicProduceResponse(name=topic_data.name, partition_responses=partitions)
            )
        if request.acks == 0:
            return None
        return R(responses=topics, throttle_time_ms=0)

    # ---- topic administration -------------------------------------------------------------

    def _administers(self, broker: ScriptedBroker, action: Action) -> int:
        """0 when ``broker`` acts on an admin request under ``action``, else the error code
        every topic gets."""
        if action.kind is ActionKind.ERROR:
            return action.error or -1
        if action.kind not in _ACTING:
            return -1
        if self.active_controller is not None and broker.node_id != self.active_controller:
            return _NOT_CONTROLLER
        return _NONE

    def _create_topics(
        self, broker: ScriptedBroker, frame: bytes, version: int, action: Action
    ) -> Any:
        """Create each topic as Kafka's controller does (counts checked against the
        brokers), unless ``action`` or :attr:`active_controller` says otherwise."""
        request = KCreateTopicsRequest.decode(frame, version=version, header=True)
        self.decoded.append((CREATE_TOPICS, version, request))
        refused = self._administers(broker, action)
        R = KCreateTopicsResponse
        results = []
        for topic in request.topics:
            name = topic.name
            partitions = topic.num_partitions
            if topic.assignments:
                partitions = len(topic.assignments)
            elif partitions == -1:
                partitions = 1  # num.partitions
            replication = 1 if topic.replication_factor == -1 else topic.replication_factor
            code, message = refused, None
            if code == _NONE:
                if name in self.topics:
                    code, message = _TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
                elif partitions < 1:
                    code, message = _INVALID_PARTITIONS, "Number of partitions must be above 0."
                elif not topic.assignments and replication > len(self.brokers):
                    code, message = (
                        _INVALID_REPLICATION_FACTOR,
                        f"Unable to replicate the partition {replication} time(s): The target "
                        f"replication factor of {replication} cannot be reached because only "
                        f"{len(self.brokers)} broker(s) are registered.",
                    )
                elif not request.validate_only:
                    self.topics[name] = partitions
            created = code == _NONE
            results.append(
                R.CreatableTopicResult(
                    name=name,
                    topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name) if created else uuid.UUID(int=0),
                    error_code=code,
                    error_message=message,
                    topic_config_error_code=0,
                    num_partitions=partitions if created else -1,
                    replication_factor=replication if created else -1,
                    configs=(
                        [
                            R.CreatableTopicResult.CreatableTopicConfigs(
                                name=c.name,
                                value=c.value,
                                read_only=False,
                                config_source=1,
                                is_sensitive=False,
                            )
                            for c in topic.configs
                        ]
                        if created
                        else None
                    ),
                )
            )
        return R(throttle_time_ms=0, topics=results)

    def _delete_topics(
        self, broker: ScriptedBroker, frame: bytes, version: int, action: Action
    ) -> Any:
        request = KDeleteTopicsRequest.decode(frame, version=version, header=True)
        self.decoded.append((DELETE_TOPICS, version, request))
        names = (
            [t.name for t in request.topics] if version >= 6 else list(request.topic_names)
        )
        refused = self._administers(broker, action)
        R = KDeleteTopicsResponse
        results = []
        for name in names:
            code = refused
            if code == _NONE and self.topics.pop(name, None) is None:
                code = _UNKNOWN_TOPIC_OR_PARTITION
            results.append(
                R.DeletableTopicResult(
                    name=name, topic_id=uuid.UUID(int=0), error_code=code, error_message=None
                )
            )
        return R(throttle_time_ms=0, responses=results)

    # ---- transactions ---------------------------------------------------------------------

    def _find_coordinator(self, request: Any, version: int) -> Any:
        R = KFindCoordinatorResponse
        node = self.brokers[self.coordinator]
        if version >= 4:
            return R(
                throttle_time_ms=0,
                coordinators=[
                    R.Coordinator(
                        key=key,
                        node_id=node.node_id,
                        host=node.host,
                        port=node.port,
                        error_code=0,
                        error_message=None,
                    )
                    for key in request.coordinator_keys
                ],
            )
        return R(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            node_id=node.node_id,
            host=node.host,
            port=node.port,
        )

    def _init_transactional_id(self, request: Any) -> Any:
        """Kafka's InitProducerId for a transactional id: the same producer id under the next
        epoch, which fences the old one and aborts its open transaction."""
        tid = request.transactional_id
        state = self._transactional_ids.get(tid)
        if state is None:
            state = self._transactional_ids[tid] = _TransactionalId(next(self._producer_ids), 0)
        else:
            if state.ongoing is not None:
                self._finish(state, committed=False)
            state.producer_epoch += 1
        return KInitProducerIdResponse(
            throttle_time_ms=0,
            error_code=0,
            producer_id=state.producer_id,
            producer_epoch=state.producer_epoch,
        )

    def _check_producer(self, tid: str, producer_id: int, epoch: int) -> int:
        """The error for a request of an unknown or fenced producer, or 0."""
        state = self._transactional_ids.get(tid)
        if state is None or state.producer_id != producer_id:
            return _INVALID_PRODUCER_ID_MAPPING
        if epoch != state.producer_epoch:
            return _PRODUCER_FENCED
        return _NONE

    def _ongoing(self, tid: str, version: int = 1) -> Transaction:
        state = self._transactional_ids[tid]
        if state.ongoing is None:
            state.ongoing = Transaction(
                tid, state.producer_id, state.producer_epoch, version=version
            )
            self.transactions.append(state.ongoing)
        return state.ongoing

    @property
    def _v2(self) -> bool:
        return self.transaction_version is not None and self.transaction_version >= 2

    def _add_partitions(self, request: Any, version: int) -> Any:
        R = KAddPartitionsToTxnResponse
        T = R.AddPartitionsToTxnTopicResult
        tid = request.v3_and_below_transactional_id
        code = self._check_producer(
            tid, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch
        )
        results = []
        for topic in request.v3_and_below_topics:
            if code == _NONE:
                self._ongoing(tid).partitions.update((topic.name, p) for p in topic.partitions)
            results.append(
                T(
                    name=topic.name,
                    results_by_partition=[
                        T.AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=code
                        )
                        for p in topic.partitions
                    ],
                )
            )
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=results)

    def _add_offsets(self, request: Any, version: int) -> Any:
        tid = request.transactional_id
        code = self._check_producer(tid, request.producer_id, request.producer_epoch)
        if code == _NONE:
            self._ongoing(tid).groups.add(request.group_id)
        return KAddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)

    def _txn_offset_commit(self, request: Any, version: int) -> Any:
        R = KTxnOffsetCommitResponse
        tid = request.transactional_id
        code = self._check_producer(tid, request.producer_id, request.producer_epoch)
        if code == _NONE:
            state = self._transactional_ids[tid]
            implicit = version >= 5 and self._v2
            if implicit:
                # KIP-890 part 2: TxnOffsetCommit v5 adds the group's offsets itself.
                self._ongoing(tid, version=2).groups.add(request.group_id)
            elif state.ongoing is None or request.group_id not in state.ongoing.groups:
                code = _INVALID_TXN_STATE
        if code == _NONE:
            pending = self._ongoing(tid).offsets.setdefault(request.group_id, {})
            for topic in request.topics:
                for p in topic.partitions:
                    pending[(topic.name, p.partition_index)] = p.committed_offset
        return R(
            throttle_time_ms=0,
            topics=[
                R.TxnOffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ],
        )

    def _end_txn(self, request: Any, version: int) -> Any:
        tid = request.transactional_id
        code = self._check_producer(tid, request.producer_id, request.producer_epoch)
        state = self._transactional_ids.get(tid)
        if code == _NONE and (state is None or state.ongoing is None):
            code = _INVALID_TXN_STATE
        if code != _NONE or state is None:
            return KEndTxnResponse(
                throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1
            )
        self._finish(state, committed=request.committed)
        if version >= 5:
            # KIP-890 part 2: every transaction ends with an epoch bump, returned to the
            # client for its next transaction.
            state.producer_epoch += 1
        return KEndTxnResponse(
            throttle_time_ms=0,
            error_code=0,
            producer_id=state.producer_id,
            producer_epoch=state.producer_epoch,
        )

    def _finish(self, state: _TransactionalId, *, committed: bool) -> None:
        transaction = state.ongoing
        assert transaction is not None
        transaction.outcome = "committed" if committed else "aborted"
        if committed:
            for group, offsets in transaction.offsets.items():
                self.committed_offsets.setdefault(group, {}).update(offsets)
        state.ongoing = None

    def _append_transactional(
        self, tid: str, topic: str, partition: int, data: bytes, version: int
    ) -> tuple[int, int]:
        batches = list(MemoryRecords(data))
        if not batches or not all(batch.is_transactional for batch in batches):
            return _INVALID_TXN_STATE, -1
        code = self._check_producer(tid, batches[0].producer_id, batches[0].producer_epoch)
        if code != _NONE:
            return code, -1
        state = self._transactional_ids[tid]
        if version >= 12 and self._v2:
            # KIP-890 part 2: Produce v12 adds the partition to the transaction itself.
            self._ongoing(tid, version=2).partitions.add((topic, partition))
        elif state.ongoing is None or (topic, partition) not in state.ongoing.partitions:
            # What Kafka's verification (KIP-890 part 1) answers for a partition the
            # transaction never added.
            return _INVALID_TXN_STATE, -1
        transaction = self._ongoing(tid)
        log = self._partition(topic, partition)
        before = len(log.records)
        code, offset = self._append(topic, partition, data, transactional=True)
        for position in range(before, len(log.records)):
            log.transaction_of[position] = transaction
            transaction.records.append((topic, partition, position))
        return code, offset

    def _append(
        self, topic: str, partition: int, data: bytes, *, transactional: bool = False
    ) -> tuple[int, int]:
        """Kafka's idempotent append: (error code, base offset)."""
        log = self._partition(topic, partition)
        batches = list(MemoryRecords(data))
        first_offset = -1
        for batch in batches:
            records = list(batch)
            count = len(records)
            pid = batch.producer_id
            epoch = batch.producer_epoch
            first = batch.base_sequence
            if pid >= 0:
                state = log.producers.get(pid)
                last = (first + count - 1) % _SEQUENCE_MODULO
                if state is None or epoch > state.epoch:
                    if first != 0:
                        return _OUT_OF_ORDER_SEQUENCE_NUMBER, -1
                    state = log.producers[pid] = _ProducerState(epoch)
                elif epoch < state.epoch:
                    return _INVALID_PRODUCER_EPOCH, -1
                else:
                    for seen_first, seen_last, seen_offset in state.batches:
                        if (seen_first, seen_last) == (first, last):
                            if self.duplicate_answer == "error":
                                return _DUPLICATE_SEQUENCE_NUMBER, -1
                            return _NONE, seen_offset
                    expected = (state.batches[-1][1] + 1) % _SEQUENCE_MODULO if state.batches else 0
                    if first != expected:
                        return _OUT_OF_ORDER_SEQUENCE_NUMBER, -1
                state.batches.append((first, last, len(log.records)))
            base = len(log.records)
            if first_offset < 0:
                first_offset = base
            for index, record in enumerate(records):
                log.records.append(
                    StoredRecord(
                        offset=base + index,
                        key=record.key,
                        value=record.value,
                        producer_id=pid,
                        producer_epoch=epoch,
                        sequence=(first + index) % _SEQUENCE_MODULO if pid >= 0 else -1,
                        transactional=transactional,
                    )
                )
        return _NONE, first_offset
