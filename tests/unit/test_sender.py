"""The Sender stepped with a fake clock and fake connections, as the Java client's SenderTest.

Real parts: RecordAccumulator, BufferPool, Metadata, IdempotenceManager, ProducerMetrics,
ProducerConfig and the protocol dataclasses. Fake parts: the ConnectionManager and the
BrokerConnections, which record every request (and decode its record batches the moment it
is sent) and hand back futures the test resolves with real response objects. Each test calls
``sender.run_once(now)`` step by step, answering requests by resolving their futures
(``handle_responses(now)``, or the next step, handles them; no event loop turn is needed);
only the close and crash tests start the sender task.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import struct
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from aioproducer import TransactionState
from aioproducer._core.accumulator import ProducerBatch, RecordAccumulator
from aioproducer._core.answers import AnswerHandler, AnswerQueue
from aioproducer._core.buffer_pool import BufferPool
from aioproducer._core.futures import RecordFuture
from aioproducer._core.idempotence import IdempotenceManager
from aioproducer._core.metadata import Broker, Metadata, PartitionInfo, TopicInfo
from aioproducer._core.metrics import ProducerMetrics
from aioproducer._core.sender import Sender
from aioproducer._core.transactions import TransactionalRequestKind, TransactionManager
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    BatchEncodingError,
    BatchOvertakenError,
    ClusterAuthorizationFailedError,
    DeliveryTimeoutError,
    IllegalStateError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaConnectionError,
    KafkaError,
    NotLeaderOrFollowerError,
    ProducerClosedError,
    RecordTooLargeError,
    SenderCrashedError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
    error_for_code,
)
from aioproducer.net.manager import ConnectionManager
from aioproducer.protocol.api import Request
from aioproducer.protocol.compression import CompressionType, offload_threshold
from aioproducer.protocol.messages import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    BatchIndexAndErrorMessage,
    Coordinator,
    EndTxnRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderIdAndEpoch,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)
from aioproducer.protocol.record_batch import estimate_record_size
from aioproducer.protocol.record_reader import DecodedRecordBatch, decode_record_batches
from aioproducer.records import TimestampType

TOPIC = "t"
NODES = (1, 2, 3)
T0 = 1000.0
TIMESTAMP = 1_700_000_000_000

NONE = 0
MESSAGE_TOO_LARGE = 10
NOT_ENOUGH_REPLICAS = 19
NOT_LEADER_OR_FOLLOWER = 6
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
COORDINATOR_LOAD_IN_PROGRESS = 14
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
UNKNOWN_PRODUCER_ID = 59
INVALID_RECORD = 87
INVALID_TIMESTAMP = 32

TopicPartition = tuple[str, int]


# ---- fakes ------------------------------------------------------------------------------------


class Reply:
    """Where a test answers a request the fake connection was given: the answer goes onto
    the sender's queue with the request's handler, as a real connection queues what it
    reads (or, when it closes, the error it fails the request with)."""

    def __init__(self, handler: AnswerHandler | None, answers: AnswerQueue) -> None:
        self._handler = handler
        self._answers = answers
        # A request that expects no answer (acks=0) is done when sent.
        self._done = handler is None

    def done(self) -> bool:
        return self._done

    def set_result(self, response: Any) -> None:
        self._queue(response, None)

    def set_exception(self, exc: BaseException) -> None:
        self._queue(None, exc)

    def _queue(self, response: Any, error: BaseException | None) -> None:
        assert not self._done, "a request is answered once"
        assert self._handler is not None
        self._done = True
        self._answers.push(self._handler, response, error)
        self._answers.wake()


@dataclass
class Sent:
    """One request a fake connection was given, with where its answer goes."""

    request: Request[Any]
    reply: Reply
    at: float
    # Produce only: each partition's record batch, decoded when the request was sent (the
    # sender may reuse the buffer once the batch is done).
    batches: dict[TopicPartition, DecodedRecordBatch] = field(default_factory=dict)

    @property
    def produce(self) -> ProduceRequest:
        assert isinstance(self.request, ProduceRequest)
        return self.request

    def batch(self, partition: int, topic: str = TOPIC) -> DecodedRecordBatch:
        return self.batches[(topic, partition)]

    def values(self, partition: int, topic: str = TOPIC) -> list[bytes | None]:
        return [record.value for record in self.batch(partition, topic).records]


class FakeConnection:
    """What the Sender uses of a BrokerConnection: can_send, send_for, in-flight accounting."""

    def __init__(
        self,
        node_id: int,
        max_in_flight: int,
        clock: Callable[[], float],
        answers: AnswerQueue,
    ) -> None:
        self.node_id = node_id
        self.answers = answers
        self.host = f"broker{node_id}"
        self.port = 9092
        self.description = f"node {node_id} ({self.host}:{self.port})"
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.max_in_flight = max_in_flight
        self.sent: list[Sent] = []
        self.send_error: BaseException | None = None
        # KIP-219: set by a test as the real connection sets it from a throttled answer.
        self.throttled_until = 0.0
        self._clock = clock

    def in_flight_count(self) -> int:
        return sum(1 for s in self.sent if not s.reply.done())

    def can_send(self) -> bool:
        return self.in_flight_count() < self.max_in_flight and self.throttled_until <= self._clock()

    def throttle_delay(self, now: float) -> float:
        return max(0.0, self.throttled_until - now)

    def send_for(
        self, request: Request[Any], handler: AnswerHandler, version: int | None = None
    ) -> None:
        if self.send_error is not None:
            raise self.send_error
        expects_response = request.expects_response()
        if expects_response and not self.can_send():
            # As the real connection: the sender must check can_send() first.
            raise IllegalStateError(f"node {self.node_id} is at max in flight")
        reply = Reply(handler if expects_response else None, self.answers)
        sent = Sent(request, reply, self._clock())
        if isinstance(request, ProduceRequest):
            for topic in request.topics:
                for partition in topic.partitions:
                    (decoded,) = decode_record_batches(bytes(partition.records))
                    sent.batches[(topic.name, partition.index)] = decoded
        self.sent.append(sent)

    def check_request_timeouts(self, now: float) -> bool:
        return False

    def requests(self, kind: type[Request[Any]]) -> list[Sent]:
        return [s for s in self.sent if isinstance(s.request, kind)]


class FakeConnections:
    """What the Sender uses of the ConnectionManager; records every call it gets."""

    def __init__(
        self, max_in_flight: int, clock: Callable[[], float], answers: AnswerQueue
    ) -> None:
        self.nodes = {n: FakeConnection(n, max_in_flight, clock, answers) for n in NODES}
        self.connected: set[int] = set(NODES)
        self.connect_calls: list[int] = []
        self.any_connecting_calls = 0
        self.brokers_set: list[dict[int, tuple[str, int]]] = []
        #: node id -> (the error it refused us with, when), as auth_error() reports it.
        self.refused: dict[int, tuple[KafkaError, float]] = {}
        self.timeout_checks: list[float] = []
        self.idle_checks: list[float] = []
        self.ready_error: BaseException | None = None
        self.rebootstraps: list[tuple[str, float]] = []

    def ready(self, node_id: int) -> FakeConnection | None:
        if self.ready_error is not None:
            raise self.ready_error
        return self.nodes[node_id] if node_id in self.connected else None

    def ensure_connecting(self, node_id: int, now: float) -> None:
        self.connect_calls.append(node_id)

    def connection_delay(self, node_id: int, now: float) -> float:
        # As the real manager while an attempt runs: it calls back when the attempt ends.
        return math.inf

    def auth_error(self, node_id: int) -> tuple[KafkaError, float] | None:
        return self.refused.get(node_id)

    def ensure_any_connecting(self, now: float) -> None:
        self.any_connecting_calls += 1

    def least_loaded(self, now: float, for_metadata: bool = False) -> FakeConnection | None:
        usable = [self.nodes[n] for n in sorted(self.connected) if self.nodes[n].can_send()]
        return min(usable, key=lambda c: c.in_flight_count()) if usable else None

    def set_brokers(
        self, brokers: Mapping[int, tuple[str, int]], *, from_metadata: bool = True
    ) -> None:
        self.brokers_set.append(dict(brokers))

    def rebootstrap(self, reason: str, now: float) -> None:
        self.rebootstraps.append((reason, now))

    def distrust(self, node_id: int) -> None:
        return None

    @property
    def bootstrap_only(self) -> bool:
        return False

    def check_request_timeouts(self, now: float) -> None:
        self.timeout_checks.append(now)

    def close_idle(self, now: float) -> None:
        self.idle_checks.append(now)

    def all_sent(self, kind: type[Request[Any]]) -> list[Sent]:
        found = [s for c in self.nodes.values() for s in c.requests(kind)]
        return sorted(found, key=lambda s: s.at)


# ---- responses --------------------------------------------------------------------------------


def ok(partition: int, base_offset: int, log_append_time: int = -1) -> ProducePartitionResponse:
    return ProducePartitionResponse(partition, NONE, base_offset, log_append_time)


def error(
    partition: int,
    code: int,
    message: str | None = None,
    record_errors: Sequence[tuple[int, str]] = (),
) -> ProducePartitionResponse:
    return ProducePartitionResponse(
        partition,
        code,
        -1,
        error_message=message,
        record_errors=[BatchIndexAndErrorMessage(i, m) for i, m in record_errors],
    )


def metadata_response(leaders: Mapping[int, int]) -> MetadataResponse:
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponseBroker(n, f"broker{n}", 9092) for n in NODES],
        cluster_id="cluster",
        controller_id=1,
        topics=[
            MetadataResponseTopic(
                NONE,
                TOPIC,
                partitions=[
                    MetadataResponsePartition(NONE, p, leader, replica_nodes=[leader])
                    for p, leader in sorted(leaders.items())
                ],
            )
        ],
    )


async def run_callbacks() -> None:
    # Done callbacks are scheduled with call_soon; a few turns also run what they schedule.
    for _ in range(3):
        await asyncio.sleep(0)


# ---- the harness ------------------------------------------------------------------------------


class Harness:
    """A Sender over real producer parts, a fake clock and fake connections."""

    def __init__(
        self,
        *,
        leaders: Mapping[int, int] | None = None,
        idempotent: bool = False,
        transactions: TransactionManager | None = None,
        offload: Callable[[ProducerBatch], None] | None = None,
        **options: Any,
    ) -> None:
        self.now = T0
        loop = asyncio.get_running_loop()
        options.setdefault("linger_ms", 10)
        options.setdefault("enable_idempotence", idempotent)
        self.config = config = ProducerConfig.from_options(**options)
        self.pool = BufferPool(config.buffer_memory, config.batch_size)
        self.metrics = ProducerMetrics(clock=self.clock)
        self.metadata = Metadata(
            max_age=config.metadata_max_age_ms / 1000.0,
            max_idle=config.metadata_max_idle_ms / 1000.0,
            retry_backoff=config.retry_backoff_ms / 1000.0,
            loop=loop,
        )
        self.idempotence: IdempotenceManager | None = transactions or (
            IdempotenceManager() if idempotent else None
        )
        compression = CompressionType[config.compression_type.upper()]
        self.accumulator = RecordAccumulator(
            pool=self.pool,
            batch_size=config.batch_size,
            linger=config.linger_ms / 1000.0,
            delivery_timeout=config.delivery_timeout_ms / 1000.0,
            retry_backoff=config.retry_backoff_ms / 1000.0,
            compression=compression,
            compression_level=config.compression_level,
            loop=loop,
            idempotence=self.idempotence,
            offload_threshold=offload_threshold(compression, config.compression_offload_bytes),
        )
        # The sender's answer queue; a test's answers wake a started sender task.
        self.answers = AnswerQueue(wake=lambda: self.sender.wakeup())
        self.connections = FakeConnections(
            config.max_in_flight_requests_per_connection, self.clock, self.answers
        )
        self.acknowledged: list[tuple[ProducerBatch, BaseException | None]] = []
        self.sender = Sender(
            config=config,
            accumulator=self.accumulator,
            metadata=self.metadata,
            connections=cast(ConnectionManager, self.connections),
            idempotence=self.idempotence,
            metrics=self.metrics,
            answers=self.answers,
            on_acknowledgement=lambda batch, exc: self.acknowledged.append((batch, exc)),
            offload=offload,
            clock=self.clock,
        )
        self.set_leaders(leaders if leaders is not None else {0: 1, 1: 1, 2: 2})

    def clock(self) -> float:
        return self.now

    def set_leaders(self, leaders: Mapping[int, int]) -> None:
        """Install a cluster where partition p of TOPIC is led by leaders[p] (-1: no leader)."""
        self.metadata.add_topic(TOPIC, self.now)
        self.metadata.update(
            [Broker(n, f"broker{n}", 9092) for n in NODES],
            [
                TopicInfo(
                    TOPIC,
                    tuple(PartitionInfo(p, leader) for p, leader in sorted(leaders.items())),
                )
            ],
            self.now,
        )

    def conn(self, node: int) -> FakeConnection:
        return self.connections.nodes[node]

    def append(self, partition: int, value: bytes, key: bytes | None = None) -> RecordFuture:
        """Append as the producer does: to the open batch, else to a new one from the pool."""
        future = self.accumulator.try_append(TOPIC, partition, TIMESTAMP, key, value, None)
        if future is not None:
            return future
        size = estimate_record_size(key, value, None)
        buffer = self.pool.allocate_nowait(self.accumulator.buffer_size_for(size, TOPIC, partition))
        assert buffer is not None
        return self.accumulator.append_to_new_batch(
            TOPIC, partition, TIMESTAMP, key, value, None, buffer, self.now
        )

    def step(self, at: float | None = None) -> float:
        """One ``run_once`` at ``at`` (default: now)."""
        if at is not None:
            assert at >= self.now, "the fake clock never goes back"
            self.now = at
        return self.sender.run_once(self.now)

    def produce_requests(self, node: int | None = None) -> list[Sent]:
        if node is None:
            return self.connections.all_sent(ProduceRequest)
        return self.conn(node).requests(ProduceRequest)

    def last_produce(self, node: int | None = None) -> Sent:
        requests = self.produce_requests(node)
        assert requests, "no Produce request was sent"
        return requests[-1]

    async def respond(self, sent: Sent, *partitions: ProducePartitionResponse) -> None:
        """Answer a Produce request (every partition of TOPIC) at the current time."""
        sent.reply.set_result(
            ProduceResponse(topics=[ProduceTopicResponse(TOPIC, list(partitions))])
        )
        self.sender.handle_responses(self.now)

    async def fail(self, sent: Sent, exc: BaseException) -> None:
        """Fail a request, as a dying connection does."""
        sent.reply.set_exception(exc)
        self.sender.handle_responses(self.now)

    async def init_producer_id(self, producer_id: int, epoch: int = 0) -> None:
        """Let the sender send InitProducerId and answer it."""
        self.step()
        requests = self.connections.all_sent(InitProducerIdRequest)
        assert requests and not requests[-1].reply.done()
        requests[-1].reply.set_result(InitProducerIdResponse(0, NONE, producer_id, epoch))
        self.sender.handle_responses(self.now)

    async def establish(self, partition: int = 0) -> None:
        """Have one record of ``partition`` acknowledged (sequence 0), then forget its
        request: until the broker acknowledged a batch of a partition under the producer's
        epoch, an idempotent producer sends it one batch at a time."""
        leader = self.metadata.cluster.leader_for(TOPIC, partition)
        self.append(partition, b"first")
        self.step()
        sent = self.last_produce(leader)
        await self.respond(sent, ok(partition, 0))
        self.conn(leader).sent.remove(sent)

    async def answer_metadata_refresh(self) -> None:
        """Step the sender so it asks for metadata, and answer with the same leaders."""
        self.step()
        (request,) = self.connections.all_sent(MetadataRequest)
        request.reply.set_result(metadata_response({0: 1, 1: 1, 2: 2}))
        self.sender.handle_responses(self.now)

    def memory_is_back(self) -> bool:
        return self.pool.available_memory() == self.config.buffer_memory


def offsets(futures: Sequence[RecordFuture]) -> list[int]:
    return [f.result().offset for f in futures]


# ---- linger and readiness ---------------------------------------------------------------------


async def test_a_batch_waits_for_linger_ms_then_goes_out() -> None:
    h = Harness(linger_ms=10)
    h.append(0, b"a")
    delay = h.step()
    assert h.produce_requests() == []
    # The sender asks to be woken when the linger ends, not later.
    assert delay == pytest.approx(0.010)
    assert h.step(T0 + 0.009) == pytest.approx(0.001)
    assert h.produce_requests() == []
    h.step(T0 + 0.010)
    (sent,) = h.produce_requests(1)
    assert sent.values(0) == [b"a"]


async def test_a_full_batch_goes_out_at_once() -> None:
    h = Harness(linger_ms=60_000, batch_size=256)
    futures = [h.append(0, bytes([i]) * 50) for i in range(6)]
    assert len(h.accumulator.deque_for((TOPIC, 0))) == 2
    h.step()
    (sent,) = h.produce_requests(1)
    in_first = len(sent.batch(0).records)
    assert 1 < in_first < 6
    assert sent.values(0) == [bytes([i]) * 50 for i in range(in_first)]
    # The second batch is not full and keeps lingering.
    h.step(T0 + 1.0)
    assert len(h.produce_requests()) == 1
    await h.respond(sent, ok(0, 10))
    assert offsets(futures[:in_first]) == list(range(10, 10 + in_first))
    assert not any(f.done() for f in futures[in_first:])


async def test_flush_makes_a_lingering_batch_ready() -> None:
    h = Harness(linger_ms=60_000)
    h.append(0, b"a")
    h.step()
    assert h.produce_requests() == []
    h.accumulator.begin_flush()
    h.step()
    (sent,) = h.produce_requests(1)
    assert sent.values(0) == [b"a"]


async def test_a_leader_without_a_connection_is_connected_not_drained() -> None:
    h = Harness()
    h.connections.connected.discard(1)
    h.append(0, b"a")
    h.step(T0 + 0.010)
    assert h.connections.connect_calls == [1]
    assert h.produce_requests() == []
    assert h.accumulator.has_undrained()
    h.connections.connected.add(1)
    h.step()
    (sent,) = h.produce_requests(1)
    assert sent.values(0) == [b"a"]


# ---- requests and responses -------------------------------------------------------------------


async def test_one_request_per_broker_with_every_ready_partition() -> None:
    h = Harness(leaders={0: 1, 1: 1, 2: 2})
    p0 = [h.append(0, b"a0"), h.append(0, b"a1")]
    p1 = [h.append(1, b"b0")]
    p2 = [h.append(2, b"c0"), h.append(2, b"c1"), h.append(2, b"c2")]
    h.step(T0 + 0.010)
    (to_1,) = h.produce_requests(1)
    (to_2,) = h.produce_requests(2)
    assert h.produce_requests(3) == []
    assert sorted(to_1.batches) == [(TOPIC, 0), (TOPIC, 1)]
    assert sorted(to_2.batches) == [(TOPIC, 2)]
    assert [topic.name for topic in to_1.produce.topics] == [TOPIC]
    assert to_1.produce.acks == -1
    assert to_1.produce.timeout_ms == h.config.request_timeout_ms
    assert to_1.produce.transactional_id is None
    assert to_1.values(0) == [b"a0", b"a1"]
    assert to_2.values(2) == [b"c0", b"c1", b"c2"]
    assert h.metrics.request_total == 2
    # In flight: nothing resolved, memory still held.
    assert not any(f.done() for f in p0 + p1 + p2)
    assert not h.memory_is_back()

    await h.respond(to_1, ok(0, 100), ok(1, 7))
    await h.respond(to_2, ok(2, 40))
    assert offsets(p0) == [100, 101]
    assert offsets(p1) == [7]
    assert offsets(p2) == [40, 41, 42]
    first = p0[0].result()
    assert (first.topic, first.partition, first.timestamp) == (TOPIC, 0, TIMESTAMP)
    assert first.timestamp_type == TimestampType.CREATE_TIME
    assert (first.serialized_key_size, first.serialized_value_size) == (-1, 2)
    assert h.metrics.record_send_total == 6
    assert h.metrics.record_error_total == 0
    assert h.memory_is_back()
    assert sorted(b.partition for b, exc in h.acknowledged if exc is None) == [0, 1, 2]


async def test_log_append_time_replaces_the_create_time() -> None:
    h = Harness()
    futures = [h.append(0, b"a"), h.append(0, b"b")]
    h.step(T0 + 0.010)
    await h.respond(h.last_produce(1), ok(0, 5, log_append_time=1_800_000_000_000))
    for future in futures:
        metadata = future.result()
        assert metadata.timestamp == 1_800_000_000_000
        assert metadata.timestamp_type == TimestampType.LOG_APPEND_TIME


async def test_batch_results_give_each_record_what_its_future_gives() -> None:
    from aioproducer._core.futures import BatchResults

    h = Harness(leaders={0: 1, 1: 2, 2: 2})
    create_time = [h.append(0, b"a", key=b"k"), h.append(0, b"bb")]
    append_time = [h.append(1, b"c"), h.append(1, b"")]
    failing = [h.append(2, b"d")]
    h.step(T0 + 0.010)
    await h.respond(h.last_produce(1), ok(0, 7))
    sent = h.last_produce(2)
    sent.reply.set_result(
        ProduceResponse(
            topics=[
                ProduceTopicResponse(
                    TOPIC,
                    [ok(1, 40, log_append_time=1_800_000_000_000), error(2, INVALID_RECORD)],
                )
            ]
        )
    )
    h.sender.handle_responses(h.now)
    metadata = await BatchResults(create_time + append_time)
    assert metadata == [f.result() for f in create_time + append_time]
    assert [(m.offset, m.timestamp_type) for m in metadata] == [
        (7, TimestampType.CREATE_TIME),
        (8, TimestampType.CREATE_TIME),
        (40, TimestampType.LOG_APPEND_TIME),
        (41, TimestampType.LOG_APPEND_TIME),
    ]
    assert [m.serialized_key_size for m in metadata] == [1, -1, -1, -1]
    assert metadata[3].serialized_value_size == 0
    with pytest.raises(InvalidRecordError):
        await BatchResults(create_time + failing)
    cancelled = h.append(0, b"e")
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await BatchResults([*create_time, cancelled])


async def test_nothing_is_drained_while_the_connection_is_at_max_in_flight() -> None:
    h = Harness(max_in_flight_requests_per_connection=2, linger_ms=0)
    first = h.append(0, b"1")
    h.step()
    second = h.append(0, b"2")
    h.step()
    third = h.append(0, b"3")
    h.step()
    h.step(T0 + 5.0)
    requests = h.produce_requests(1)
    assert [r.values(0) for r in requests] == [[b"1"], [b"2"]]
    assert h.accumulator.has_undrained()
    await h.respond(requests[0], ok(0, 0))
    assert first.done() and not third.done()
    h.step()
    assert [r.values(0) for r in h.produce_requests(1)] == [[b"1"], [b"2"], [b"3"]]
    await h.respond(requests[1], ok(0, 1))
    await h.respond(h.last_produce(1), ok(0, 2))
    assert offsets([first, second, third]) == [0, 1, 2]


async def test_in_flight_requests_have_their_timeouts_checked() -> None:
    h = Harness()
    h.append(0, b"a")
    h.step(T0 + 0.010)
    assert h.connections.timeout_checks == [T0 + 0.010]
    delay = h.step(T0 + 1.0)
    assert h.connections.timeout_checks == [T0 + 0.010, T0 + 1.0]
    # The sender comes back before an in-flight request could time out unnoticed.
    assert delay <= h.config.request_timeout_ms / 1000.0
    await h.respond(h.last_produce(1), ok(0, 0))
    h.step(T0 + 2.0)
    assert h.connections.timeout_checks == [T0 + 0.010, T0 + 1.0]


# ---- retriable errors ---------------------------------------------------------------------------


async def test_a_retriable_error_refreshes_metadata_and_retries_after_the_backoff() -> None:
    h = Harness(leaders={0: 1, 1: 1, 2: 2}, retry_backoff_ms=100)
    futures = [h.append(0, b"a"), h.append(0, b"b")]
    h.step(T0 + 0.010)
    first = h.last_produce(1)
    h.now = T0 + 0.020
    await h.respond(first, error(0, NOT_LEADER_OR_FOLLOWER))
    assert not any(f.done() for f in futures)
    assert h.metrics.record_retry_total == 2
    assert h.metadata.update_requested

    # The next step asks for metadata, for the topic; the leader has moved to broker 2.
    h.step()
    (metadata_request,) = h.connections.all_sent(MetadataRequest)
    assert isinstance(metadata_request.request, MetadataRequest)
    assert list(metadata_request.request.topics or []) == [TOPIC]
    metadata_request.reply.set_result(metadata_response({0: 2, 1: 1, 2: 2}))
    h.sender.handle_responses(h.now)
    assert h.metadata.cluster.leader_for(TOPIC, 0) == 2
    assert h.connections.brokers_set[-1] == {n: (f"broker{n}", 9092) for n in NODES}

    # The first retry waits retry_backoff_ms, give or take 20% jitter: not sooner.
    delay = h.step(T0 + 0.020 + 0.079)
    assert h.produce_requests() == [first]
    # ...and the sender asks to be woken when the backoff ends.
    assert 0 < delay <= 0.120 - 0.079 + 1e-9
    h.step(T0 + 0.020 + 0.121)
    retry = h.last_produce()
    assert retry is not first
    assert retry in h.produce_requests(2)
    assert retry.values(0) == [b"a", b"b"]
    await h.respond(retry, ok(0, 33))
    assert offsets(futures) == [33, 34]
    assert h.metrics.record_send_total == 2
    assert h.metrics.record_error_total == 0
    assert h.memory_is_back()


async def test_retry_backoff_grows_exponentially() -> None:
    h = Harness(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    future = h.append(0, b"a")
    h.step(T0 + 0.010)
    expected = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for attempt, backoff in enumerate(expected):
        sent = h.last_produce(1)
        await h.respond(sent, error(0, NOT_ENOUGH_REPLICAS))
        failed_at = h.now
        h.step(failed_at + backoff * 0.8 - 0.001)
        assert h.last_produce(1) is sent, f"retry {attempt + 1} came before its backoff"
        h.step(failed_at + backoff * 1.2 + 0.001)
        assert h.last_produce(1) is not sent, f"retry {attempt + 1} did not come after it"
    assert h.metrics.record_retry_total == len(expected)
    await h.respond(h.last_produce(1), ok(0, 9))
    assert future.result().offset == 9


async def test_retry_backoff_never_exceeds_retry_backoff_max_ms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The largest jitter the sender can draw, every time.
    monkeypatch.setattr(random.Random, "uniform", lambda self, low, high: high)
    h = Harness(retry_backoff_ms=100, retry_backoff_max_ms=400)
    h.append(0, b"a")
    h.step(T0 + 0.010)
    for _ in range(5):
        sent = h.last_produce(1)
        await h.respond(sent, error(0, NOT_ENOUGH_REPLICAS))
        # retry_backoff_max_ms is "the longest wait between retries".
        h.step(h.now + 0.400)
        assert h.last_produce(1) is not sent


async def test_a_connection_failure_is_retried() -> None:
    h = Harness()
    futures = [h.append(0, b"a"), h.append(1, b"b")]
    h.step(T0 + 0.010)
    first = h.last_produce(1)
    await h.fail(first, KafkaConnectionError("connection to node 1 lost"))
    assert h.metrics.record_retry_total == 2
    assert not any(f.done() for f in futures)
    # A lost connection may mean a moved leader: the metadata is refreshed too.
    h.step()
    assert len(h.connections.all_sent(MetadataRequest)) == 1
    h.step(h.now + 0.121)
    retry = h.last_produce(1)
    assert retry is not first
    assert retry.values(0) == [b"a"] and retry.values(1) == [b"b"]
    await h.respond(retry, ok(0, 3), ok(1, 4))
    assert offsets(futures) == [3, 4]


async def test_a_partition_missing_from_the_response_is_retried() -> None:
    h = Harness()
    futures = [h.append(0, b"a"), h.append(1, b"b")]
    h.step(T0 + 0.010)
    await h.respond(h.last_produce(1), ok(0, 3))
    assert futures[0].result().offset == 3
    assert not futures[1].done()
    h.step(h.now + 0.121)
    retry = h.last_produce(1)
    assert sorted(retry.batches) == [(TOPIC, 1)]
    await h.respond(retry, ok(1, 8))
    assert futures[1].result().offset == 8


async def test_retries_zero_fails_a_retriable_error_at_once() -> None:
    h = Harness(retries=0)
    future = h.append(0, b"a")
    h.step(T0 + 0.010)
    await h.respond(h.last_produce(1), error(0, NOT_LEADER_OR_FOLLOWER, "not the leader"))
    assert isinstance(future.exception(), NotLeaderOrFollowerError)
    assert h.metrics.record_retry_total == 0
    assert h.metrics.record_error_total == 1
    h.step(h.now + 10.0)
    assert len(h.produce_requests()) == 1
    assert h.memory_is_back()


# ---- non-retriable errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (INVALID_RECORD, InvalidRecordError),
        (TOPIC_AUTHORIZATION_FAILED, TopicAuthorizationFailedError),
    ],
)
async def test_a_non_retriable_error_fails_only_its_partition(
    code: int, error_class: type[KafkaError]
) -> None:
    h = Harness()
    failing = [h.append(0, b"bad"), h.append(0, b"worse")]
    fine = [h.append(1, b"good")]
    h.step(T0 + 0.010)
    (sent,) = h.produce_requests(1)
    await h.respond(
        sent,
        # Every record named: the batch fails whole (KIP-467 resends only unnamed ones).
        error(0, code, "rejected", record_errors=[(0, "record 0 too"), (1, "record 1 is broken")]),
        ok(1, 50),
    )
    for future in failing:
        exc = future.exception()
        assert isinstance(exc, error_class)
        assert "record 1 is broken" in str(exc)
    assert offsets(fine) == [50]
    assert h.metrics.record_error_total == 2
    assert h.metrics.record_send_total == 1
    assert h.metrics.record_retry_total == 0
    assert [(b.partition, type(exc)) for b, exc in h.acknowledged] == [
        (0, error_class),
        (1, type(None)),
    ]
    # Not retried, and every buffer went back to the pool.
    h.step(h.now + 10.0)
    assert h.produce_requests() == [sent]
    assert h.memory_is_back()


# ---- delivery timeout ---------------------------------------------------------------------------


@pytest.mark.parametrize("backoff_ms", [100, 0])
async def test_metadata_asks_for_a_connection_when_none_can_send(backoff_ms: int) -> None:
    # A record waits for a leader and every connection is down (reconnecting): the sender
    # asks for a connection and, until one is ready, never asks to run again at once (found
    # by the simulation: a busy loop on the event loop for as long as reconnecting took),
    # not even with no backoff configured.
    h = Harness(leaders={0: -1}, retry_backoff_ms=backoff_ms, reconnect_backoff_ms=backoff_ms)
    h.connections.connected.clear()
    h.append(0, b"a")
    delays = [h.step(h.now + 0.001 * i) for i in range(4)]
    assert all(delay > 0 for delay in delays), delays
    assert h.connections.any_connecting_calls >= 1
    assert h.connections.all_sent(MetadataRequest) == []
    h.connections.connected.add(3)
    h.step(h.now + 0.1)
    (request,) = h.conn(3).requests(MetadataRequest)
    request.reply.set_result(metadata_response({0: 3}))
    h.sender.handle_responses(h.now)
    h.step()
    assert h.last_produce(3).values(0) == [b"a"]


async def test_a_batch_without_a_leader_expires_at_the_delivery_timeout() -> None:
    h = Harness(
        leaders={0: -1, 1: 1}, linger_ms=10, request_timeout_ms=1000, delivery_timeout_ms=2000
    )
    future = h.append(0, b"a")
    delay = h.step()
    # No leader: metadata is asked for; nothing can be sent.
    assert len(h.connections.all_sent(MetadataRequest)) == 1
    assert h.produce_requests() == []
    assert delay <= 2.0
    delay = h.step(T0 + 1.5)
    assert delay <= 0.5
    h.step(T0 + 1.999)
    assert not future.done()
    h.step(T0 + 2.0)
    exc = future.exception()
    assert isinstance(exc, DeliveryTimeoutError)
    assert exc.retriable
    assert h.metrics.record_error_total == 1
    assert h.produce_requests() == []
    assert h.memory_is_back()


async def test_an_in_flight_batch_expires_at_its_deadline() -> None:
    h = Harness(linger_ms=10, request_timeout_ms=1000, delivery_timeout_ms=2000)
    future = h.append(0, b"a")
    h.step(T0 + 0.010)
    sent = h.last_produce(1)
    # In flight at its deadline: it fails then, as in Java, without waiting for the broker.
    h.step(T0 + 1.999)
    assert not future.done()
    h.step(T0 + 2.0)
    exc = future.exception()
    assert isinstance(exc, DeliveryTimeoutError)
    assert "in flight" in str(exc)
    assert h.metrics.record_error_total == 1
    # The buffer stays allocated until the request is over (the transport may hold it).
    assert not h.memory_is_back()
    await h.respond(sent, error(0, NOT_LEADER_OR_FOLLOWER, "moved"))
    assert h.metrics.record_retry_total == 0
    assert h.metrics.record_error_total == 1
    h.step(h.now + 10.0)
    assert h.produce_requests() == [sent]
    assert h.memory_is_back()


async def test_a_retry_that_waits_past_the_deadline_expires() -> None:
    h = Harness(linger_ms=10, request_timeout_ms=1000, delivery_timeout_ms=2000)
    future = h.append(0, b"a")
    h.step(T0 + 0.010)
    h.now = T0 + 1.95
    await h.respond(h.last_produce(1), error(0, NOT_ENOUGH_REPLICAS))
    assert not future.done()
    h.step(T0 + 2.0)
    assert isinstance(future.exception(), DeliveryTimeoutError)
    assert len(h.produce_requests()) == 1
    assert h.memory_is_back()


# ---- too large ----------------------------------------------------------------------------------


async def test_message_too_large_splits_a_batch_into_smaller_ones() -> None:
    # The broker's limit (max.message.bytes) is below batch_size: the usual way to get
    # MESSAGE_TOO_LARGE for a batch of many records.
    h = Harness(batch_size=1024, linger_ms=0)
    values = [f"{i:03d}".encode() * 20 for i in range(10)]
    futures = [h.append(0, value) for value in values]
    h.step()
    sent = h.last_produce(1)
    assert len(sent.batch(0).records) == 10
    await h.respond(sent, error(0, MESSAGE_TOO_LARGE))
    seen: list[bytes | None] = []
    base = 70
    for _ in range(10):
        h.step()
        request = h.last_produce(1)
        if request is sent or request.reply.done():
            break
        part = request.values(0)
        assert 0 < len(part) < 10, "the batch was resent whole instead of split"
        seen.extend(part)
        await h.respond(request, ok(0, base))
        base += len(part)
    assert seen == values
    assert offsets(futures) == list(range(70, 80))
    assert h.memory_is_back()


async def test_message_too_large_split_batches_resolve_with_their_offsets() -> None:
    h = Harness(batch_size=4096, linger_ms=0)
    values = [f"{i:04d}".encode() * 50 for i in range(12)]
    futures = [h.append(0, value) for value in values]
    h.step()
    sent = h.last_produce(1)
    assert len(sent.batch(0).records) == 12
    # A batch larger than batch_size (a single large record's batch) splits as well.
    h.accumulator.batch_size = 1024
    await h.respond(sent, error(0, MESSAGE_TOO_LARGE))
    assert not any(f.done() for f in futures)
    assert h.metrics.record_error_total == 0
    seen: list[bytes | None] = []
    base = 500
    for _ in range(12):
        h.step()
        request = h.last_produce(1)
        if request is sent or request.reply.done():
            break
        part = request.values(0)
        assert 0 < len(part) < 12
        seen.extend(part)
        await h.respond(request, ok(0, base))
        base += len(part)
    assert seen == values
    assert offsets(futures) == list(range(500, 512))
    assert h.metrics.record_send_total == 12
    assert h.memory_is_back()


async def test_message_too_large_on_a_single_record_fails_with_record_too_large() -> None:
    h = Harness(linger_ms=0)
    future = h.append(0, b"x" * 500)
    h.step()
    await h.respond(h.last_produce(1), error(0, MESSAGE_TOO_LARGE))
    assert isinstance(future.exception(), RecordTooLargeError)
    assert h.metrics.record_error_total == 1
    h.step(h.now + 10.0)
    assert len(h.produce_requests()) == 1
    assert h.memory_is_back()


# ---- idempotence --------------------------------------------------------------------------------


async def test_init_producer_id_goes_out_before_any_produce() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    future = h.append(0, b"a")
    h.step()
    assert h.produce_requests() == []
    (init,) = h.connections.all_sent(InitProducerIdRequest)
    assert isinstance(init.request, InitProducerIdRequest)
    assert init.request.transactional_id is None
    assert (init.request.producer_id, init.request.producer_epoch) == (-1, -1)
    # Only one InitProducerId at a time.
    h.step(T0 + 1.0)
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1
    assert h.produce_requests() == []
    init.reply.set_result(InitProducerIdResponse(0, NONE, 4000, 3))
    h.sender.handle_responses(h.now)
    h.step()
    batch = h.last_produce(1).batch(0)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4000, 3, 0)
    assert not batch.is_transactional
    await h.respond(h.last_produce(1), ok(0, 0))
    assert future.result().offset == 0


async def test_a_retriable_init_producer_id_error_is_retried_after_the_backoff() -> None:
    h = Harness(idempotent=True, linger_ms=0, retry_backoff_ms=100)
    future = h.append(0, b"a")
    h.step()
    (first,) = h.connections.all_sent(InitProducerIdRequest)
    first.reply.set_result(InitProducerIdResponse(0, COORDINATOR_LOAD_IN_PROGRESS, -1, -1))
    h.sender.handle_responses(h.now)
    h.step(T0 + 0.099)
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1
    h.step(T0 + 0.100)
    second = h.connections.all_sent(InitProducerIdRequest)[-1]
    assert second is not first
    assert not future.done()
    assert h.produce_requests() == []


async def test_a_coordinator_not_ready_yet_is_no_warning_but_a_lost_connection_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A cluster that just started answers COORDINATOR_LOAD_IN_PROGRESS for a while: normal,
    # said at INFO; other retriable failures of InitProducerId stay warnings.
    caplog.set_level(logging.INFO, logger="aioproducer.sender")
    h = Harness(idempotent=True, linger_ms=0, retry_backoff_ms=100)
    h.append(0, b"a")
    h.step()
    (first,) = h.connections.all_sent(InitProducerIdRequest)
    first.reply.set_result(InitProducerIdResponse(0, COORDINATOR_LOAD_IN_PROGRESS, -1, -1))
    h.sender.handle_responses(h.now)
    h.step(T0 + 0.100)
    second = h.connections.all_sent(InitProducerIdRequest)[-1]
    second.reply.set_exception(KafkaConnectionError("connection lost"))
    h.sender.handle_responses(h.now)
    lines = [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if "InitProducerId" in record.getMessage()
    ]
    assert [level for level, _ in lines] == [logging.INFO, logging.WARNING], lines
    assert "COORDINATOR_LOAD_IN_PROGRESS" in lines[0][1]
    assert "connection lost" in lines[1][1]


async def test_a_fatal_init_producer_id_error_fails_every_record() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    futures = [h.append(0, b"a"), h.append(2, b"b")]
    h.step()
    (init,) = h.connections.all_sent(InitProducerIdRequest)
    init.reply.set_result(InitProducerIdResponse(0, CLUSTER_AUTHORIZATION_FAILED, -1, -1))
    h.sender.handle_responses(h.now)
    for future in futures:
        assert isinstance(future.exception(), ClusterAuthorizationFailedError)
    assert isinstance(h.sender.fatal_error, ClusterAuthorizationFailedError)
    assert h.produce_requests() == []
    assert h.memory_is_back()


async def test_sequences_grow_by_record_count_per_partition() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    first = [h.append(0, b"a"), h.append(0, b"b"), h.append(0, b"c")]
    other = [h.append(1, b"x")]
    h.step()
    # Until the broker acknowledged a batch of the partition, one at a time.
    second = [h.append(0, b"d"), h.append(0, b"e")]
    h.step()
    assert len(h.produce_requests(1)) == 1
    await h.respond(h.produce_requests(1)[0], ok(0, 0), ok(1, 0))
    h.step()
    third = [h.append(0, b"f")]
    h.step()
    requests = h.produce_requests(1)
    assert len(requests) == 3
    assert [(r.batch(0).base_sequence, len(r.batch(0).records)) for r in requests] == [
        (0, 3),
        (3, 2),
        (5, 1),
    ]
    assert requests[0].batch(1).base_sequence == 0
    assert {r.batch(0).producer_id for r in requests} == {1000}
    await h.respond(requests[1], ok(0, 3))
    await h.respond(requests[2], ok(0, 5))
    assert offsets(first + second + third) == [0, 1, 2, 3, 4, 5]
    assert offsets(other) == [0]


async def test_one_in_flight_keeps_order_while_a_failed_response_awaits_handling() -> None:
    # Idempotent, one request in flight. The broker's answer to the first batch (an error to
    # retry) has been read, which frees the connection's slot. The next step must not send
    # the partition's next batch ahead of the retry: a broker that checks no sequences
    # (librdkafka's mock) would store it first.
    h = Harness(
        idempotent=True, linger_ms=0, max_in_flight_requests_per_connection=1, batch_size=128
    )
    await h.init_producer_id(1000)
    older = [h.append(0, b"a%03d" % i) for i in range(4)]
    newer = [h.append(0, b"b%03d" % i + b"x" * 40) for i in range(2)]
    assert older[0]._batch is not newer[0]._batch
    h.step()
    (first,) = h.produce_requests(1)
    older_values = first.values(0)
    first.reply.set_result(
        ProduceResponse(topics=[ProduceTopicResponse(TOPIC, [error(0, NOT_LEADER_OR_FOLLOWER)])])
    )
    h.step()  # the slot is free; the retry waits for its backoff and nothing overtakes it
    assert h.produce_requests(1) == [first], "a newer batch went out ahead of the retry"
    await h.answer_metadata_refresh()
    h.step(h.now + 1.0)
    retry = h.last_produce(1)
    assert retry.values(0) == older_values


async def test_a_request_the_connection_refuses_leaves_its_partitions_drainable() -> None:
    # With one request in flight (order guaranteed), a partition is muted while its batch is
    # out. A request the connection refuses at once (its transport just closed) is retried;
    # its partitions must be unmuted then, or they would never be drained again.
    h = Harness(linger_ms=0, max_in_flight_requests_per_connection=1, retry_backoff_ms=100)
    first = h.append(0, b"a")
    h.conn(1).send_error = KafkaConnectionError("the transport is closing")
    h.step()
    assert h.produce_requests(1) == []
    assert h.metrics.record_retry_total == 1
    h.conn(1).send_error = None
    h.step(h.now + 0.25)
    (retry,) = h.produce_requests(1)
    assert retry.values(0) == [b"a"]
    await h.respond(retry, ok(0, 7))
    assert first.result().offset == 7
    second = h.append(0, b"b")
    h.step()
    assert h.last_produce(1).values(0) == [b"b"]
    await h.respond(h.last_produce(1), ok(0, 8))
    assert second.result().offset == 8


async def test_a_retry_keeps_the_order_within_a_partition() -> None:
    h = Harness(idempotent=True, linger_ms=0, retry_backoff_ms=100)
    await h.init_producer_id(1000)
    await h.establish()
    older = [h.append(0, b"a"), h.append(0, b"b")]
    h.step()
    newer = [h.append(0, b"c"), h.append(0, b"d"), h.append(0, b"e")]
    h.step()
    request_a, request_b = h.produce_requests(1)
    assert (request_a.batch(0).base_sequence, request_b.batch(0).base_sequence) == (1, 3)

    # The older batch met a leader change; the broker then saw the newer one out of order.
    await h.respond(request_a, error(0, NOT_LEADER_OR_FOLLOWER))
    await h.respond(request_b, error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    assert h.metrics.record_retry_total == 5
    assert h.idempotence is not None and not h.idempotence.needs_producer_id

    await h.answer_metadata_refresh()

    h.step(h.now + 0.25)
    retry_a = h.last_produce(1)
    assert retry_a.values(0) == [b"a", b"b"]
    # The newer batch waits until the older retried one is acknowledged.
    h.step(h.now + 1.0)
    assert h.last_produce(1) is retry_a
    await h.respond(retry_a, ok(0, 20))
    assert offsets(older) == [20, 21]
    h.step()
    retry_b = h.last_produce(1)
    assert retry_b.values(0) == [b"c", b"d", b"e"]
    # Sequences stay as first assigned, under the same producer id.
    assert [(r.batch(0).producer_id, r.batch(0).base_sequence) for r in (retry_a, retry_b)] == [
        (1000, 1),
        (1000, 3),
    ]
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1
    await h.respond(retry_b, ok(0, 22))
    assert offsets(newer) == [22, 23, 24]
    assert h.memory_is_back()


async def test_out_of_order_on_a_later_batch_is_a_plain_retry() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    await h.establish()
    older = h.append(0, b"a")
    h.step()
    newer = h.append(0, b"b")
    h.step()
    request_a, request_b = h.produce_requests(1)
    await h.respond(request_b, error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    assert h.idempotence is not None and not h.idempotence.needs_producer_id
    assert not newer.done()
    await h.respond(request_a, ok(0, 0))
    h.step(h.now + 0.121)
    retry = h.last_produce(1)
    assert retry.values(0) == [b"b"]
    assert (retry.batch(0).producer_id, retry.batch(0).base_sequence) == (1000, 2)
    await h.respond(retry, ok(0, 1))
    assert offsets([older, newer]) == [0, 1]
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1


async def _older_and_newer() -> tuple[Harness, list[Any], list[Any], list[Sent]]:
    """An idempotent producer with two requests out for partition 0: the older batch
    ``a, b`` (sequence 1) and the newer batch ``c`` (sequence 3)."""
    h = Harness(idempotent=True, linger_ms=0, retry_backoff_ms=100)
    await h.init_producer_id(1000)
    await h.establish()
    older = [h.append(0, b"a"), h.append(0, b"b")]
    h.step()
    newer = [h.append(0, b"c")]
    h.step()
    return h, older, newer, list(h.produce_requests(1))


async def test_a_batch_that_later_ones_overtook_fails_as_overtaken_and_is_not_sent_again() -> None:
    # The older batch's attempt ended without saying whether it was written
    # (NOT_LEADER_OR_FOLLOWER: Kafka answers it also when leadership moved after the
    # append); the newer one was acknowledged, and the older one's retry is refused as out
    # of order. The broker may have written it and forgotten it (it keeps five batches per
    # producer, one after loading a snapshot): sending it again could write it twice, and
    # after the newer one. It fails as overtaken, counted, and the partition goes on.
    h, older, newer, (request_a, request_b) = await _older_and_newer()
    await h.respond(request_a, error(0, NOT_LEADER_OR_FOLLOWER))
    await h.respond(request_b, ok(0, 3))
    assert offsets(newer) == [3]
    await h.answer_metadata_refresh()
    h.step(h.now + 0.25)
    retry = h.last_produce(1)
    assert identity(retry) == (1000, 0, 1)
    await h.respond(retry, error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    for future in older:
        assert isinstance(future.exception(), BatchOvertakenError)
        assert not future.exception().retriable
    assert h.metrics.batch_overtaken_total == 1
    h.step(h.now + 0.5)
    assert h.last_produce(1) is retry, "the overtaken batch was sent again"
    # The partition goes on under a bumped epoch, from sequence 0.
    last = h.append(0, b"d")
    h.step(h.now + 0.5)
    assert identity(h.last_produce(1)) == (1000, 1, 0)
    await h.respond(h.last_produce(1), ok(0, 4))
    assert last.result().offset == 4
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1
    assert h.memory_is_back()


def unknown_producer_id(partition: int, log_start_offset: int) -> ProducePartitionResponse:
    return ProducePartitionResponse(
        partition, UNKNOWN_PRODUCER_ID, -1, log_start_offset=log_start_offset
    )


def identity(sent: Sent, partition: int = 0) -> tuple[int, int, int]:
    """(producer id, epoch, base sequence) of the batch a request carried for ``partition``."""
    batch = sent.batch(partition)
    return batch.producer_id, batch.producer_epoch, batch.base_sequence


@pytest.mark.parametrize("code", [OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID])
async def test_a_gap_on_the_head_batch_bumps_the_epoch_and_restarts_its_partition(
    code: int,
) -> None:
    # Java's TransactionManager.canRetry + bumpIdempotentProducerEpoch: the epoch is bumped
    # locally (no InitProducerId), and the partition's unfinished batches get sequences
    # from 0 under it, in their order.
    h, older, newer, (request_a, request_b) = await _older_and_newer()
    answer = error(0, code) if code == OUT_OF_ORDER_SEQUENCE_NUMBER else unknown_producer_id(0, 0)
    await h.respond(request_a, answer)
    h.step(h.now + 0.5)
    # The partition restarts once nothing of it is out: the batch behind it may be written.
    assert h.last_produce(1) is request_b
    await h.respond(request_b, error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    h.step(h.now + 0.5)
    retry_a = h.last_produce(1)
    assert retry_a.values(0) == [b"a", b"b"]
    assert identity(retry_a) == (1000, 1, 0)
    h.step(h.now + 0.5)
    assert h.last_produce(1) is retry_a
    await h.respond(retry_a, ok(0, 10))
    h.step(h.now + 0.5)
    retry_b = h.last_produce(1)
    assert retry_b.values(0) == [b"c"]
    assert identity(retry_b) == (1000, 1, 2)
    await h.respond(retry_b, ok(0, 12))
    assert offsets(older + newer) == [10, 11, 12]
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1


async def test_unknown_producer_id_without_a_log_start_offset_is_a_plain_retry() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    future = h.append(0, b"a")
    h.step()
    await h.respond(h.last_produce(1), unknown_producer_id(0, -1))
    h.step(h.now + 0.5)
    assert identity(h.last_produce(1)) == (1000, 0, 0)
    await h.respond(h.last_produce(1), ok(0, 3))
    assert future.result().offset == 3


async def test_a_batch_failing_for_good_bumps_the_epoch_of_its_partition_only() -> None:
    # Its sequence numbers are a gap the broker would never get past: that partition starts
    # again under the next epoch; no new producer id is needed.
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    lost = h.append(0, b"bad")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    assert isinstance(lost.exception(), InvalidRecordError)
    later = h.append(0, b"good")
    h.step()
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1
    assert h.last_produce(1).values(0) == [b"good"]
    assert identity(h.last_produce(1)) == (1000, 1, 0)
    await h.respond(h.last_produce(1), ok(0, 1))
    assert later.result().offset == 1


async def test_a_split_batch_keeps_its_sequences_and_nothing_overtakes_it() -> None:
    # Five in flight, one partition: batch A (sequences 0-4) is too large for the broker and
    # is split; batch B (sequence 5) behind it gets OUT_OF_ORDER_SEQUENCE_NUMBER. The parts
    # of A carry 0-4 and go before B (Java's ProducerBatch.split, insertInSequenceOrder).
    h = Harness(idempotent=True, linger_ms=0, batch_size=1024)
    await h.init_producer_id(1000)
    await h.establish()
    values = [f"{i}".encode() * 150 for i in range(5)]
    in_a = [h.append(0, value) for value in values]
    h.step()
    in_b = h.append(0, b"b")
    h.step()
    request_a, request_b = h.produce_requests(1)
    assert identity(request_a)[2] == 1 and identity(request_b)[2] == 6
    await h.respond(request_a, error(0, MESSAGE_TOO_LARGE))
    await h.respond(request_b, error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    sent_after: list[Sent] = []
    offset = 100
    for _ in range(10):
        h.step(h.now + 1.0)
        request = h.last_produce(1)
        if request in (request_a, request_b) or request.reply.done():
            break
        sent_after.append(request)
        count = len(request.batch(0).records)
        await h.respond(request, ok(0, offset))
        offset += count
    order = [value for request in sent_after for value in request.values(0)]
    assert order == [*values, b"b"], "a batch went out before the split one"
    assert all(len(r.batch(0).records) < len(values) for r in sent_after), "not split"
    sequences = [identity(request) for request in sent_after]
    assert all(pid == 1000 and epoch == 0 for pid, epoch, _ in sequences)
    starts = [sequence for _, _, sequence in sequences]
    assert starts[0] == 1 and starts[-1] == 6 and starts == sorted(starts)
    assert offsets([*in_a, in_b]) == list(range(100, 106))
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1
    assert h.memory_is_back()


async def test_a_reset_on_one_partition_leaves_a_retry_on_another_with_its_sequence() -> None:
    # Partition 2's first attempt may be in the log (its connection broke before the
    # answer): its retry keeps its producer id, epoch and sequence, so the broker would
    # recognise it as a duplicate, while partition 0 starts again under a bumped epoch
    # (Java's partitionsToRewriteSequences).
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    on_q = h.append(2, b"q")
    h.step()
    first_q = h.last_produce(2)
    assert identity(first_q, 2) == (1000, 0, 0)
    await h.fail(first_q, KafkaConnectionError("connection lost after the append"))
    on_p = h.append(0, b"p-bad")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    assert isinstance(on_p.exception(), InvalidRecordError)
    h.step(h.now + 1.0)
    retry_q = h.last_produce(2)
    assert retry_q is not first_q
    assert identity(retry_q, 2) == (1000, 0, 0), "the retry was given a new sequence"
    await h.respond(retry_q, ok(2, 7))
    assert on_q.result().offset == 7
    after_p = h.append(0, b"p-good")
    h.step()
    assert identity(h.last_produce(1)) == (1000, 1, 0)
    await h.respond(h.last_produce(1), ok(0, 1))
    assert after_p.result().offset == 1
    # Partition 2 moves to the new epoch once its old batches are done, from sequence 0.
    after_q = h.append(2, b"q2")
    h.step()
    assert identity(h.last_produce(2), 2) == (1000, 1, 0)
    await h.respond(h.last_produce(2), ok(2, 8))
    assert after_q.result().offset == 8


async def test_new_batches_wait_while_a_partition_has_batches_of_the_old_epoch_out() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    h.append(2, b"q-old")
    h.step()
    on_p = h.append(0, b"p-bad")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    assert isinstance(on_p.exception(), InvalidRecordError)
    h.step()
    # The epoch is bumped; partition 2 still has a batch of epoch 0 out.
    newer_q = h.append(2, b"q-new")
    h.step()
    assert len(h.produce_requests(2)) == 1, "a new-epoch batch went out before an old-epoch one"
    await h.respond(h.last_produce(2), ok(2, 0))
    h.step()
    assert h.last_produce(2).values(2) == [b"q-new"]
    assert identity(h.last_produce(2), 2) == (1000, 1, 0)
    await h.respond(h.last_produce(2), ok(2, 1))
    assert newer_q.result().offset == 1


async def test_an_expired_retry_leaves_the_sequence_unresolved_until_the_partition_drains() -> None:
    # Java's markSequenceUnresolved / maybeResolveSequences: a retried batch that expires
    # may or may not be in the log. New batches wait; when a later batch of the partition is
    # acknowledged the broker has everything before it, and nothing is bumped.
    h = Harness(idempotent=True, linger_ms=0, delivery_timeout_ms=5000, request_timeout_ms=4000)
    await h.init_producer_id(1000)
    await h.establish()
    first = h.append(0, b"a")
    h.step()
    h.now += 1.0
    second = h.append(0, b"b")  # created a second later: it expires later
    h.step()
    request_a, request_b = h.produce_requests(1)
    await h.fail(request_a, KafkaConnectionError("lost"))
    h.step(h.now + 0.2)
    retry_a = h.last_produce(1)
    assert identity(retry_a) == (1000, 0, 1)
    h.step(T0 + 5.0)  # delivery_timeout_ms of a passes with its retry in flight
    assert isinstance(first.exception(), DeliveryTimeoutError)
    waiting = h.append(0, b"c")
    h.step()
    assert h.last_produce(1) is retry_a, "a new batch went while a sequence is unresolved"
    await h.respond(request_b, ok(0, 1))  # the later batch was written: a was too
    await h.respond(retry_a, ok(0, 0))
    h.step()
    assert h.last_produce(1).values(0) == [b"c"]
    assert identity(h.last_produce(1)) == (1000, 0, 3)
    await h.respond(h.last_produce(1), ok(0, 2))
    assert (second.result().offset, waiting.result().offset) == (1, 2)


async def test_an_expired_retry_that_nothing_resolves_bumps_the_epoch() -> None:
    h = Harness(idempotent=True, linger_ms=0, delivery_timeout_ms=5000, request_timeout_ms=4000)
    await h.init_producer_id(1000)
    first = h.append(0, b"a")
    h.step()
    await h.fail(h.last_produce(1), KafkaConnectionError("lost"))
    h.step(h.now + 0.2)
    retry = h.last_produce(1)
    h.step(T0 + 5.0)
    assert isinstance(first.exception(), DeliveryTimeoutError)
    await h.fail(retry, KafkaConnectionError("lost again"))
    later = h.append(0, b"b")
    h.step()
    h.step()
    assert identity(h.last_produce(1)) == (1000, 1, 0)
    await h.respond(h.last_produce(1), ok(0, 5))
    assert later.result().offset == 5


async def test_the_last_acknowledged_sequence_is_the_highest() -> None:
    # TxnPartitionEntry keeps the maximum: a late answer for an older batch does not make a
    # batch that is next in line look out of order.
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    await h.establish()
    futures = [h.append(0, b"a")]
    h.step()
    futures.append(h.append(0, b"b"))
    h.step()
    futures.append(h.append(0, b"c"))
    h.step()
    request_a, request_b, request_c = h.produce_requests(1)
    await h.respond(request_b, ok(0, 2))
    await h.respond(request_a, ok(0, 1))
    assert h.idempotence is not None
    state = h.idempotence._partitions[(TOPIC, 0)]
    assert state.last_acked_sequence == 2
    # c is next in line: OUT_OF_ORDER on it is a real gap, and bumps.
    await h.respond(request_c, error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    h.step(h.now + 1.0)
    assert identity(h.last_produce(1)) == (1000, 1, 0)


async def test_an_exhausted_epoch_asks_for_a_new_producer_id() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000, epoch=32767)
    lost = h.append(0, b"bad")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    assert isinstance(lost.exception(), InvalidRecordError)
    later = h.append(0, b"good")
    h.step()
    inits = h.connections.all_sent(InitProducerIdRequest)
    assert len(inits) == 2
    assert (inits[-1].request.producer_id, inits[-1].request.producer_epoch) == (-1, -1)
    inits[-1].reply.set_result(InitProducerIdResponse(0, NONE, 2000, 0))
    h.sender.handle_responses(h.now)
    h.step()
    assert identity(h.last_produce(1)) == (2000, 0, 0)
    await h.respond(h.last_produce(1), ok(0, 1))
    assert later.result().offset == 1


async def test_a_refused_new_producer_id_fails_what_waits_and_every_later_send() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000, epoch=32767)
    h.append(0, b"bad")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    waiting = h.append(0, b"waits for the id")
    h.step()
    init = h.connections.all_sent(InitProducerIdRequest)[-1]
    init.reply.set_result(InitProducerIdResponse(0, CLUSTER_AUTHORIZATION_FAILED, -1, -1))
    h.sender.handle_responses(h.now)
    assert isinstance(waiting.exception(), ClusterAuthorizationFailedError)
    assert isinstance(h.sender.fatal_error, ClusterAuthorizationFailedError)


async def test_after_a_fatal_producer_id_error_no_init_producer_id_is_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A broker that cannot take InitProducerId at all: one attempt, one error, then the
    # sender waits to be closed instead of trying at every step.
    h = Harness(idempotent=True, linger_ms=0)
    for node in NODES:
        h.conn(node).send_error = UnsupportedVersionError("node does not support InitProducerId")
    caplog.set_level(logging.ERROR, logger="aioproducer.sender")
    delays = [h.step(h.now + 0.01 * i) for i in range(4)]
    assert isinstance(h.sender.fatal_error, UnsupportedVersionError)
    assert "enable_idempotence=False" in str(h.sender.fatal_error)
    failures = [r for r in caplog.records if "InitProducerId failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert all(delay > 0 for delay in delays[1:]), delays


async def test_an_answer_that_arrived_before_a_force_close_is_still_handled() -> None:
    # The broker acknowledged the record; close(timeout) runs out in the same loop turn,
    # before the sender's next step: the record keeps its offset, not a close error.
    h = Harness(linger_ms=0)
    future = h.append(0, b"acknowledged")
    task = h.sender.start()
    await wait_until(lambda: len(h.produce_requests()) == 1)
    h.last_produce(1).reply.set_result(
        ProduceResponse(topics=[ProduceTopicResponse(TOPIC, [ok(0, 7)])])
    )
    h.sender.force_close(ProducerClosedError("closed with a timeout"))
    await asyncio.wait_for(task, 10)
    assert future.result().offset == 7
    assert h.memory_is_back()


async def test_duplicate_sequence_number_counts_as_success() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    futures = [h.append(0, b"a"), h.append(0, b"b")]
    h.step()
    sent = h.last_produce(1)
    await h.respond(
        sent, ProducePartitionResponse(0, DUPLICATE_SEQUENCE_NUMBER, -1, error_message="dup")
    )
    assert [f.result().offset for f in futures] == [-1, -1]
    assert h.metrics.record_send_total == 2
    assert h.metrics.record_error_total == 0
    # The partition goes on from the acknowledged sequence, under the same producer id.
    assert h.idempotence is not None and not h.idempotence.needs_producer_id
    h.append(0, b"c")
    h.step()
    assert h.last_produce(1).batch(0).base_sequence == 2
    assert not h.memory_is_back()
    await h.respond(h.last_produce(1), ok(0, 2))
    assert h.memory_is_back()


# ---- acks=0 -------------------------------------------------------------------------------------


async def test_acks_zero_with_one_in_flight_leaves_the_partition_drainable() -> None:
    h = Harness(linger_ms=0, acks=0, max_in_flight_requests_per_connection=1)
    first = h.append(0, b"a")
    h.step()
    second = h.append(0, b"b")
    h.step(h.now + 0.1)
    assert first.done() and second.done(), "the partition stayed muted after an acks=0 send"
    assert [r.values(0) for r in h.produce_requests(1)] == [[b"a"], [b"b"]]


async def test_acks_zero_completes_batches_at_once_without_in_flight() -> None:
    h = Harness(acks=0, linger_ms=0)
    futures = [h.append(0, b"a"), h.append(0, b"b"), h.append(2, b"c")]
    h.step()
    (sent,) = h.produce_requests(1)
    assert sent.produce.acks == 0
    assert all(f.done() for f in futures)
    assert [f.result().offset for f in futures] == [-1, -1, -1]
    assert h.metrics.record_send_total == 3
    # Nothing awaits an answer, so no request timeout is watched.
    assert h.connections.timeout_checks == []
    assert h.memory_is_back()
    # The request still holds its records after the buffers went back to the pool and were
    # reused: the transport may not have written them yet.
    h.append(0, b"z" * 40)
    (partition,) = sent.produce.topics[0].partitions
    (decoded,) = decode_record_batches(bytes(partition.records))
    assert [r.value for r in decoded.records] == [b"a", b"b"]


# ---- the task: close, force close, crash ---------------------------------------------------------


async def wait_until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition did not become true")


async def test_initiate_close_drains_everything_then_the_task_ends() -> None:
    h = Harness(linger_ms=60_000)
    futures = [h.append(0, b"a"), h.append(2, b"b")]
    task = h.sender.start()
    await run_callbacks()
    assert h.produce_requests() == []
    h.sender.initiate_close()
    await wait_until(lambda: len(h.produce_requests()) == 2)
    # In flight: the task waits for the answers.
    await run_callbacks()
    assert not task.done()
    await h.respond(h.last_produce(1), ok(0, 1))
    await run_callbacks()
    assert not task.done()
    await h.respond(h.last_produce(2), ok(2, 2))
    await asyncio.wait_for(task, 10)
    assert offsets(futures) == [1, 2]
    assert h.memory_is_back()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd is Linux's")
async def test_the_sender_task_frees_its_wake_timer() -> None:
    # The sender sleeps on a timerfd (aioproducer._core.timer): closed when its task ends.
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(3):
        h = Harness(leaders={0: 1}, linger_ms=0)
        task = h.sender.start()
        await asyncio.sleep(0.01)
        assert len(os.listdir("/proc/self/fd")) > len(before)
        h.sender.force_close(ProducerClosedError("closed by the test"))
        await asyncio.wait_for(task, 10)
    assert sorted(os.listdir("/proc/self/fd")) == before


def _copy_of(error: BaseException, seen: BaseException | None) -> bool:
    # A record future hands out its own copy of its batch's error (futures.error_copy).
    return type(seen) is type(error) and seen is not None and seen.args == error.args


async def test_force_close_fails_what_is_left_with_the_given_error() -> None:
    h = Harness(leaders={0: 1, 1: -1, 2: 2}, linger_ms=0)
    in_flight = h.append(0, b"a")
    task = h.sender.start()
    await wait_until(lambda: len(h.produce_requests()) == 1)
    stuck = h.append(1, b"b")
    closing = ProducerClosedError("closed by the test")
    h.sender.force_close(closing)
    await asyncio.wait_for(task, 10)
    assert _copy_of(closing, in_flight.exception())
    assert _copy_of(closing, stuck.exception())
    assert h.metrics.record_error_total == 2
    assert h.memory_is_back()
    # A late answer changes nothing.
    await h.respond(h.last_produce(1), ok(0, 0))
    assert _copy_of(closing, in_flight.exception())
    assert h.metrics.record_send_total == 0


async def test_an_answer_queued_after_the_sender_ended_is_dropped() -> None:
    # The sender ended with a Produce request still out; its connection closes afterwards
    # and fails the request. Nobody handles answers any more: the queue keeps nothing (the
    # handler would hold the request's batches).
    h = Harness(linger_ms=0)
    h.append(0, b"a")
    task = h.sender.start()
    await wait_until(lambda: len(h.produce_requests()) == 1)
    h.sender.force_close(ProducerClosedError("closed by the test"))
    await asyncio.wait_for(task, 10)
    h.last_produce(1).reply.set_exception(KafkaConnectionError("connection closed"))
    assert len(h.answers) == 0


class _Interrupt(BaseException):
    """What a callback might raise that no step catches (as KeyboardInterrupt)."""


async def test_an_acknowledged_record_stays_acknowledged_when_a_callback_crashes_the_task() -> None:
    # Two answers are queued; the acknowledgement callback raises a BaseException at the
    # first. The task crashes and fails what is pending, but the second answer, taken
    # with the first, is still handled: its record was stored and says so.
    h = Harness(linger_ms=0)
    first = h.append(0, b"a")
    second = h.append(2, b"b")
    h.step()
    to_one, to_two = h.last_produce(1), h.last_produce(2)
    acknowledged: list[ProducerBatch] = []

    def on_acknowledgement(batch: ProducerBatch, exc: BaseException | None) -> None:
        acknowledged.append(batch)
        if len(acknowledged) == 1:
            raise _Interrupt

    h.sender._on_acknowledgement = on_acknowledgement
    to_one.reply.set_result(ProduceResponse(topics=[ProduceTopicResponse(TOPIC, [ok(0, 1)])]))
    to_two.reply.set_result(ProduceResponse(topics=[ProduceTopicResponse(TOPIC, [ok(2, 2)])]))
    task = h.sender.start()
    with pytest.raises(_Interrupt):
        await asyncio.wait_for(task, 10)
    assert (first.result().offset, second.result().offset) == (1, 2)
    assert len(acknowledged) == 2


async def test_a_step_that_keeps_failing_ends_the_task_and_fails_every_pending_record() -> None:
    h = Harness(linger_ms=0, retry_backoff_ms=1, retry_backoff_max_ms=1)
    in_flight = h.append(0, b"a")
    h.step()
    assert len(h.produce_requests(1)) == 1
    queued = h.append(2, b"b")
    boom = RuntimeError("boom")
    h.connections.ready_error = boom
    task = h.sender.start()
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(task, 10)
    assert h.sender.crashed is boom
    for future in (in_flight, queued):
        exc = future.exception()
        assert isinstance(exc, SenderCrashedError)
        assert exc.__cause__ is boom
    assert h.memory_is_back()


async def test_a_step_that_fails_once_is_logged_and_the_sender_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(linger_ms=0, retry_backoff_ms=1, retry_backoff_max_ms=1)
    future = h.append(0, b"a")
    h.connections.ready_error = RuntimeError("a passing fault")
    task = h.sender.start()
    for _ in range(1000):
        if "a step of the aioproducer sender failed" in caplog.text:
            break
        await asyncio.sleep(0.001)
    h.connections.ready_error = None
    for _ in range(1000):
        if h.produce_requests(1):
            break
        await asyncio.sleep(0.001)
    await h.respond(h.last_produce(1), ok(0, 7))
    assert future.result().offset == 7
    assert not task.done() and h.sender.crashed is None
    h.sender.force_close(ProducerClosedError("closed by the test"))
    await asyncio.wait_for(task, 10)


def append_unbuildable(h: Harness, partition: int) -> RecordFuture:
    """A record whose batch cannot be built: a timestamp past the wire format's int64, as
    if a check in front of the accumulator had let it through (a fault of ours)."""
    size = estimate_record_size(None, b"x", None)
    buffer = h.pool.allocate_nowait(h.accumulator.buffer_size_for(size, TOPIC, partition))
    assert buffer is not None
    return h.accumulator.append_to_new_batch(
        TOPIC, partition, 2**63, None, b"x", None, buffer, h.now
    )


async def test_a_batch_that_cannot_be_built_fails_alone() -> None:
    h = Harness(linger_ms=0)
    bad = append_unbuildable(h, 0)
    same_node = h.append(1, b"one")
    other_node = h.append(2, b"two")
    h.step()
    exc = bad.exception()
    assert isinstance(exc, BatchEncodingError) and not exc.retriable
    assert "build the batch" in str(exc) and f"{TOPIC}-0" in str(exc)
    # The packing error, in its words on each Python ("int too large to convert" up to
    # 3.11, "'q' format requires ... <= number <= ..." from 3.12).
    assert isinstance(exc.__cause__, (OverflowError, struct.error)), repr(exc.__cause__)
    # The other batches went out, in the same step.
    assert [sent.produce.topics[0].partitions[0].index for sent in h.produce_requests(1)] == [1]
    await h.respond(h.last_produce(1), ok(1, 10))
    await h.respond(h.last_produce(2), ok(2, 20))
    assert offsets([same_node, other_node]) == [10, 20]
    # The partition of the failed batch takes records as before.
    later = h.append(0, b"later")
    h.step()
    assert h.last_produce(1).values(0) == [b"later"]
    await h.respond(h.last_produce(1), ok(0, 30))
    assert later.result().offset == 30
    assert h.metrics.record_error_total == 1
    assert h.memory_is_back()


async def test_an_idempotent_batch_that_cannot_be_built_leaves_no_sequence_gap() -> None:
    h = Harness(linger_ms=0, idempotent=True)
    await h.init_producer_id(1000)
    bad = append_unbuildable(h, 0)
    h.step()
    assert isinstance(bad.exception(), BatchEncodingError)
    good = h.append(0, b"good")
    h.step()
    sent = h.last_produce(1)
    assert sent.batch(0).base_sequence == 0
    assert sent.batch(0).producer_id == 1000
    await h.respond(sent, ok(0, 5))
    assert good.result().offset == 5
    # No new producer id was needed: no sequence was lost.
    assert h.idempotence is not None and not h.idempotence.needs_producer_id


async def test_a_fault_while_sending_fails_only_that_request() -> None:
    h = Harness(linger_ms=0)
    in_flight = h.append(0, b"a")
    h.step()
    being_sent = h.append(2, b"b")
    boom = RuntimeError("boom")
    h.conn(2).send_error = boom
    h.step()
    assert being_sent.done(), "the record whose request failed never resolves"
    exc = being_sent.exception()
    assert isinstance(exc, BatchEncodingError) and exc.__cause__ is boom
    # The sender goes on: the earlier request completes, and partition 2 sends again.
    await h.respond(h.last_produce(1), ok(0, 1))
    assert in_flight.result().offset == 1
    h.conn(2).send_error = None
    again = h.append(2, b"c")
    h.step()
    await h.respond(h.last_produce(2), ok(2, 2))
    assert again.result().offset == 2
    assert h.sender.crashed is None
    assert h.memory_is_back()


async def test_a_fault_while_handling_a_response_fails_only_that_request() -> None:
    h = Harness(linger_ms=0)
    first = h.append(0, b"a")
    other = h.append(2, b"b")
    h.step()
    # A response the handler cannot read (a fault of ours, not a broker's error code).
    h.last_produce(1).reply.set_result(object())
    h.sender.handle_responses(h.now)
    exc = first.exception()
    assert isinstance(exc, BatchEncodingError) and "handle a Produce response" in str(exc)
    assert isinstance(exc.__cause__, AttributeError)
    await h.respond(h.last_produce(2), ok(2, 4))
    assert other.result().offset == 4
    after = h.append(0, b"c")
    h.step()
    await h.respond(h.last_produce(1), ok(0, 9))
    assert after.result().offset == 9
    assert h.memory_is_back()


# ---- compression off the event loop -----------------------------------------------------------


class HeldOffload:
    """Stands in for the worker thread: keeps each batch until the test finishes it."""

    def __init__(self, **options: Any) -> None:
        self.batches: list[ProducerBatch] = []
        self.harness = Harness(offload=self.batches.append, **options)

    def finish(self, batch: ProducerBatch) -> None:
        self.harness.accumulator.offload_done(batch, batch.builder.compress_records())


def _big_values(count: int, size: int = 300) -> list[bytes]:
    return [(b"%05d:" % i) + b"payload " * (size // 8) for i in range(count)]


async def test_a_big_compressed_batch_is_drained_only_after_the_thread_compressed_it() -> None:
    held = HeldOffload(compression_type="zstd", compression_offload_bytes=1024, linger_ms=0)
    h = held.harness
    values = _big_values(10)
    futures = [h.append(0, v) for v in values]
    h.step()
    assert h.produce_requests() == [], "a batch left before its records were compressed"
    (batch,) = held.batches
    assert batch.compressing and batch.full
    # The batch takes no more records while the thread reads it: a new one starts.
    late = h.append(0, b"late")
    assert late._batch is not batch
    assert batch.record_count == 10
    h.step()
    assert h.produce_requests() == []
    held.finish(batch)
    h.step()
    sent = h.last_produce(1)
    assert sent.values(0) == values, "the thread's block is not the batch's records"
    assert sent.batch(0).compression == CompressionType.ZSTD
    await h.respond(sent, ok(0, 0))
    assert offsets(futures) == list(range(10))


async def test_small_batches_are_compressed_on_the_loop() -> None:
    # zstd's measured threshold is 64 KiB: a 16 KiB batch never goes to the thread.
    held = HeldOffload(compression_type="zstd", linger_ms=0)
    h = held.harness
    h.append(0, b"x" * 2000)
    h.step()
    assert held.batches == []
    assert h.last_produce(1).values(0) == [b"x" * 2000]


async def test_offloading_can_be_turned_off() -> None:
    h = Harness(compression_type="gzip", compression_offload_bytes=-1, linger_ms=0)
    assert h.accumulator.offload_threshold is None
    h.append(0, b"y" * 12_000)
    h.step()
    assert h.last_produce(1).values(0) == [b"y" * 12_000]


async def test_offloaded_batches_keep_their_order_whichever_thread_finishes_first() -> None:
    held = HeldOffload(
        idempotent=True,
        compression_type="lz4",
        compression_offload_bytes=1024,
        batch_size=4096,
        linger_ms=60_000,
    )
    h = held.harness
    await h.init_producer_id(7)
    values = _big_values(50)
    futures = [h.append(0, v) for v in values]
    assert len(h.accumulator.deque_for((TOPIC, 0))) >= 3
    h.step()
    # The head and the full batches behind it compress together; the open tail lingers on.
    first, second, *rest = held.batches
    assert rest and all(b.full for b in held.batches)
    held.finish(second)
    h.step()
    assert h.produce_requests() == [], "a later batch went out before the head of its partition"
    for batch in (first, *rest):
        held.finish(batch)
    for _ in range(len(held.batches)):
        h.step()
    requests = h.produce_requests(1)
    sequences = [r.batch(0).base_sequence for r in requests]
    assert sequences == sorted(sequences) and sequences[0] == 0
    sent_values = [v for r in requests for v in r.values(0)]
    assert sent_values == values[: len(sent_values)]
    offset = 0
    for sent in requests:
        await h.respond(sent, ok(0, offset))
        offset += len(sent.batch(0).records)
    assert offsets(futures[:offset]) == list(range(offset))


async def test_a_batch_failed_while_compressing_returns_its_buffer_once_the_thread_is_done() -> (
    None
):
    held = HeldOffload(compression_type="zstd", compression_offload_bytes=1024, linger_ms=0)
    h = held.harness
    future = h.append(0, _big_values(1, 4000)[0])
    h.step()
    (batch,) = held.batches
    closing = ProducerClosedError("closed by the test")
    h.sender._abort_all(closing)
    assert _copy_of(closing, future.exception())
    # The thread still reads the buffer: it must not go back to the pool yet.
    assert not h.memory_is_back()
    held.finish(batch)
    assert h.memory_is_back()
    h.step()
    assert h.produce_requests() == []


async def test_the_worker_thread_compresses_and_the_batch_goes_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from aioproducer.protocol.record_batch import RecordBatchBuilder

    threads: list[int] = []
    real = RecordBatchBuilder.compress_records

    def spying(builder: RecordBatchBuilder) -> bytes:
        threads.append(threading.get_ident())
        return real(builder)

    monkeypatch.setattr(RecordBatchBuilder, "compress_records", spying)
    h = Harness(compression_type="gzip", compression_offload_bytes=0, linger_ms=0)
    values = _big_values(5)
    futures = [h.append(0, v) for v in values]
    h.step()
    assert h.produce_requests() == []
    deadline = asyncio.get_running_loop().time() + 10
    while not h.produce_requests() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)
        h.step()
    assert threads and threading.get_ident() not in threads, "compressed on the loop's thread"
    sent = h.last_produce(1)
    assert sent.values(0) == values
    assert h.metrics.snapshot(0, 0, 0.0, 0)["compression-offload-total"] == 1.0
    await h.respond(sent, ok(0, 0))
    assert offsets(futures) == list(range(5))


async def test_a_codec_error_in_the_thread_falls_back_to_the_loop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import threading

    from aioproducer.protocol.record_batch import RecordBatchBuilder

    loop_thread = threading.get_ident()
    real = RecordBatchBuilder.compress_records

    def broken_in_workers(builder: RecordBatchBuilder) -> bytes:
        if threading.get_ident() != loop_thread:
            raise MemoryError("no memory in the worker")
        return real(builder)

    monkeypatch.setattr(RecordBatchBuilder, "compress_records", broken_in_workers)
    h = Harness(compression_type="zstd", compression_offload_bytes=0, linger_ms=0)
    future = h.append(0, b"z" * 500)
    h.step()
    deadline = asyncio.get_running_loop().time() + 10
    while not h.produce_requests() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)
        h.step()
    assert h.last_produce(1).values(0) == [b"z" * 500]
    assert "compressing it on the event loop instead" in caplog.text
    await h.respond(h.last_produce(1), ok(0, 3))
    assert future.result().offset == 3


async def test_a_producer_raises_its_own_copy_of_the_senders_fatal_error() -> None:
    # The fatal error also failed every pending batch. Raised as is, each send() would add
    # its caller's frame (and the record futures it holds) to that error's traceback: a
    # cycle through futures the GC does not track (aioproducer._core.gc).
    from aioproducer import Producer
    from aioproducer.producer import ProducerState

    h = Harness(idempotent=True, linger_ms=0)
    h.append(0, b"a")
    h.step()
    (init,) = h.connections.all_sent(InitProducerIdRequest)
    init.reply.set_result(InitProducerIdResponse(0, CLUSTER_AUTHORIZATION_FAILED, -1, -1))
    h.sender.handle_responses(h.now)
    fatal = h.sender.fatal_error
    assert isinstance(fatal, ClusterAuthorizationFailedError)
    producer = Producer(bootstrap_servers="127.0.0.1:9")
    producer._state = ProducerState.RUNNING
    producer._sender = h.sender
    raised = []
    for _ in range(2):
        with pytest.raises(ClusterAuthorizationFailedError) as info:
            producer._check_running()
        raised.append(info.value)
    assert raised[0] is not fatal and raised[1] is not fatal and raised[0] is not raised[1]
    assert [str(e) for e in raised] == [str(fatal)] * 2
    assert all(
        "test_sender" not in (frame.f_code.co_filename or "")
        for frame, _ in traceback.walk_tb(fatal.__traceback__)
    )


async def test_a_timed_out_or_cancelled_metadata_wait_leaves_no_waiter() -> None:
    h = Harness(leaders={0: 1})
    metadata = h.metadata
    assert await metadata.wait_for_update(0.001) is False
    waiting = asyncio.ensure_future(metadata.wait_for_update(10.0))
    await asyncio.sleep(0)
    assert len(metadata._waiters) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not metadata._waiters
    # An update wakes a waiter with True.
    waiting = asyncio.ensure_future(metadata.wait_for_update(10.0))
    await asyncio.sleep(0)
    metadata.wake_waiters()
    assert await waiting is True


# ---- a transaction around the sender -----------------------------------------------------------


async def transaction_in_progress(partitions: Sequence[int]) -> TransactionManager:
    """A TransactionManager with producer id 5000, epoch 2 and a transaction open that holds
    ``partitions`` of TOPIC, driven through its coordinator conversation by hand."""
    loop = asyncio.get_running_loop()
    txn = TransactionManager(
        "tx",
        transaction_timeout_ms=60_000,
        retry_backoff=0.1,
        retry_backoff_max=1.0,
        request_timeout=30.0,
        create_future=loop.create_future,
    )

    def answer(kind: TransactionalRequestKind, response: Any) -> None:
        item = txn.next_request(T0, False)
        assert item is not None and item.kind is kind
        if txn.coordinator_node(item) is None:
            txn.find_coordinator_request(item)
            txn.request_sent(item, finding_coordinator=True)
            coordinator = Coordinator(item.coordinator_key, 1, "broker1", 9092, NONE)
            txn.handle_find_coordinator(item, FindCoordinatorResponse(0, [coordinator]), None, T0)
            item = txn.next_request(T0, False)
            assert item is not None and item.kind is kind
        txn.build_request(item)
        txn.request_sent(item, finding_coordinator=False)
        txn.handle_response(item, response, None, T0)

    txn.initialize()
    answer(TransactionalRequestKind.INIT_PRODUCER_ID, InitProducerIdResponse(0, NONE, 5000, 2))
    txn.begin_transaction()
    for partition in partitions:
        txn.maybe_add_partition((TOPIC, partition))
    results = [AddPartitionsToTxnPartitionResult(p, NONE) for p in sorted(partitions)]
    topics = [AddPartitionsToTxnTopicResult(TOPIC, results)]
    answer(
        TransactionalRequestKind.ADD_PARTITIONS,
        AddPartitionsToTxnResponse(0, NONE, [AddPartitionsToTxnResult("tx", topics)]),
    )
    assert txn.state is TransactionState.IN_TRANSACTION
    return txn


async def test_a_transactional_batch_split_keeps_the_transaction_and_its_order() -> None:
    # Before, MESSAGE_TOO_LARGE on a transactional batch of many records made the
    # transaction abortable; as Java, the batch is split and the commit goes on.
    txn = await transaction_in_progress([0])
    h = Harness(transactions=txn, linger_ms=0, batch_size=1024)
    values = [f"{i}".encode() * 150 for i in range(5)]
    futures = [h.append(0, value) for value in values]
    h.step()
    request = h.last_produce(1)
    assert request.produce.transactional_id == "tx"
    assert identity(request) == (5000, 2, 0)
    await h.respond(request, error(0, MESSAGE_TOO_LARGE))
    assert txn.state is TransactionState.IN_TRANSACTION
    seen: list[bytes | None] = []
    offset = 40
    for _ in range(10):
        h.step(h.now + 1.0)
        part = h.last_produce(1)
        if part is request or part.reply.done():
            break
        assert part.batch(0).is_transactional
        assert identity(part)[:2] == (5000, 2)
        assert len(part.batch(0).records) < len(values), "sent again whole, not split"
        seen.extend(part.values(0))
        count = len(part.batch(0).records)
        await h.respond(part, ok(0, offset))
        offset += count
    assert seen == values
    assert offsets(futures) == list(range(40, 45))
    assert txn.state is TransactionState.IN_TRANSACTION
    commit = txn.begin_commit()
    assert not commit.done()


async def _expired_in_flight(
    late: ProducePartitionResponse | None,
) -> tuple[Harness, TransactionManager, list[RecordFuture]]:
    """A transactional batch whose Produce is answered only after delivery_timeout_ms
    (``late``; None: its connection dies instead)."""
    txn = await transaction_in_progress([0])
    h = Harness(transactions=txn, linger_ms=0, delivery_timeout_ms=3000, request_timeout_ms=3000)
    futures = [h.append(0, b"a"), h.append(0, b"b")]
    h.step()
    request = h.last_produce(1)
    h.step(T0 + 3.0)
    for future in futures:
        assert isinstance(future.exception(), DeliveryTimeoutError)
    if late is None:
        await h.fail(request, KafkaConnectionError("lost"))
    else:
        await h.respond(request, late)
    return h, txn, futures


@pytest.mark.parametrize("late", [ok(0, 7), error(0, NOT_LEADER_OR_FOLLOWER), None])
async def test_a_transactional_batch_that_expires_in_flight_makes_the_commit_fail(
    late: ProducePartitionResponse | None,
) -> None:
    # Java: getExpiredInflightBatches -> failBatch -> handleFailedBatch -> abortable. The
    # records were reported failed; a commit would keep them (a late success) or commit the
    # transaction without them.
    h, txn, _ = await _expired_in_flight(late)
    assert txn.state is TransactionState.ABORTABLE_ERROR
    with pytest.raises(KafkaError, match="must be aborted"):
        txn.begin_commit()
    abort = txn.begin_abort()
    assert not abort.done()
    assert h.memory_is_back()


async def test_end_txn_and_prepare_wait_for_a_batch_that_expired_while_its_request_is_out() -> None:
    txn = await transaction_in_progress([0])
    h = Harness(transactions=txn, linger_ms=0, delivery_timeout_ms=3000, request_timeout_ms=3000)
    h.append(0, b"a")
    h.step()
    request = h.last_produce(1)
    h.step(T0 + 3.0)
    assert h.accumulator.has_incomplete(), "the broker may still write it"
    waiter = h.accumulator.wait_until_complete()
    with pytest.raises(KafkaError, match="must be aborted"):
        txn.prepare_transaction(has_incomplete_batches=h.accumulator.has_incomplete())
    abort = txn.begin_abort()
    h.step()
    assert h.connections.all_sent(EndTxnRequest) == [], "EndTxn went with a Produce still out"
    await h.respond(request, ok(0, 7))
    assert waiter.done() and not h.accumulator.has_incomplete()
    assert not abort.done()


async def test_a_late_success_after_an_in_flight_expiry_resolves_the_sequence() -> None:
    # Java's completeBatch handles the answer of a batch already done: its sequence is
    # acknowledged, and the partition goes on under the same epoch.
    h = Harness(idempotent=True, linger_ms=0, delivery_timeout_ms=3000, request_timeout_ms=3000)
    await h.init_producer_id(1000)
    await h.establish()
    h.append(0, b"a")
    h.step()
    request = h.last_produce(1)
    h.step(T0 + 3.0)
    later = h.append(0, b"b")
    h.step()
    assert h.last_produce(1) is request or identity(h.last_produce(1)) == (1000, 0, 2)
    await h.respond(request, ok(0, 1))
    h.step()
    if h.last_produce(1) is not request:
        await h.respond(h.last_produce(1), ok(0, 2))
    h.step()
    assert later.result().offset == 2
    assert identity(h.last_produce(1)) == (1000, 0, 2), "the epoch was bumped for nothing"
    assert h.memory_is_back()


async def test_a_fresh_partition_has_one_batch_out_until_the_broker_acknowledges_one() -> None:
    # A leader without state for the producer takes any sequence: a second batch written
    # before a refused first one would leave the first unable ever to be written in order.
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    first = h.append(0, b"a")
    h.step()
    second = h.append(0, b"b")
    h.step()
    assert len(h.produce_requests(1)) == 1
    await h.respond(h.last_produce(1), error(0, NOT_LEADER_OR_FOLLOWER))
    await h.answer_metadata_refresh()
    h.step(h.now + 1.0)
    retry = h.last_produce(1)
    assert retry.values(0) == [b"a"] and len(h.produce_requests(1)) == 2
    await h.respond(retry, ok(0, 0))
    h.step()
    assert h.last_produce(1).values(0) == [b"b"]
    await h.respond(h.last_produce(1), ok(0, 1))
    assert offsets([first, second]) == [0, 1]


async def test_nothing_goes_to_a_new_leader_while_an_attempt_is_out_at_the_old() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    await h.establish()
    first = h.append(0, b"a")
    h.step()
    old = h.last_produce(1)
    h.set_leaders({0: 2, 1: 1, 2: 2})
    second = h.append(0, b"b")
    h.step()
    assert h.produce_requests(2) == [], "sent to the new leader with an attempt out at the old"
    await h.respond(old, error(0, NOT_LEADER_OR_FOLLOWER))
    h.step(h.now + 1.0)
    retry = h.last_produce(2)
    assert retry.values(0) == [b"a"]
    await h.respond(retry, ok(0, 1))
    h.step()
    await h.respond(h.last_produce(2), ok(0, 2))
    assert offsets([first, second]) == [1, 2]


async def test_a_retried_head_out_of_order_after_an_unknown_outcome_is_not_resent() -> None:
    # The first attempt's connection broke (it may be in the log); the broker since lost
    # track of the producer's last batches (a restart from a snapshot keeps one) and refuses
    # the retry as out of order. Under a new epoch it would be written twice.
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    await h.establish()
    lost = h.append(0, b"a")
    h.step()
    await h.fail(h.last_produce(1), KafkaConnectionError("lost"))
    h.step(h.now + 1.0)
    await h.respond(h.last_produce(1), error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    assert isinstance(lost.exception(), BatchOvertakenError)
    assert h.metrics.batch_overtaken_total == 1
    after = h.append(0, b"b")
    h.step(h.now + 1.0)
    assert identity(h.last_produce(1)) == (1000, 1, 0)
    await h.respond(h.last_produce(1), ok(0, 5))
    assert after.result().offset == 5


async def test_the_parts_of_a_split_batch_keep_its_unknown_outcome() -> None:
    # An attempt lost with its connection may be in the log: the parts of the batch, split
    # later for being too large, may be too (they are not restarted under a new epoch).
    h = Harness(idempotent=True, linger_ms=0, batch_size=1024)
    await h.init_producer_id(1000)
    await h.establish()
    for value in [f"{i}".encode() * 150 for i in range(5)]:
        h.append(0, value)
    h.step()
    await h.fail(h.last_produce(1), KafkaConnectionError("lost"))
    h.step(h.now + 1.0)
    await h.respond(h.last_produce(1), error(0, MESSAGE_TOO_LARGE))
    parts = list(h.accumulator.deque_for((TOPIC, 0)))
    assert len(parts) >= 2 and all(part.maybe_written for part in parts)


async def test_a_coordinator_request_out_alone_has_its_timeout_checked() -> None:
    # With no Produce out, an EndTxn whose answer never comes must still time out (Java's
    # NetworkClient checks every request at each poll), or the commit waits for good.
    txn = await transaction_in_progress([0])
    h = Harness(transactions=txn, linger_ms=0)
    txn.begin_commit()
    h.step()
    assert len(h.connections.all_sent(EndTxnRequest)) == 1
    checks = len(h.connections.timeout_checks)
    delay = h.step(h.now + 1.0)
    assert len(h.connections.timeout_checks) > checks
    assert delay <= h.config.request_timeout_ms / 1000.0


async def test_a_commit_waiting_for_its_batches_does_not_spin_the_sender() -> None:
    # EndTxn waits for the Produce still out; the step must not ask to run again at once
    # (a busy loop on the event loop until the answer): the answer wakes it.
    txn = await transaction_in_progress([0])
    h = Harness(transactions=txn, linger_ms=0)
    h.append(0, b"a")
    h.step()
    txn.begin_commit()
    assert h.step() > 0
    assert h.connections.all_sent(EndTxnRequest) == []
    await h.respond(h.last_produce(1), ok(0, 0))
    h.step()
    assert len(h.connections.all_sent(EndTxnRequest)) == 1


async def test_an_abort_by_epoch_bump_waits_for_the_produce_requests_of_the_transaction() -> None:
    # The coordinator lost the producer id: the abort bumps the epoch with InitProducerId.
    # Sent while a Produce of the transaction was out, the retry of that batch went into the
    # next transaction under the new epoch, and was committed with it.
    txn = await transaction_in_progress([0])
    h = Harness(transactions=txn, linger_ms=0)
    old = h.append(0, b"from-the-aborted-transaction")
    h.step()
    request = h.last_produce(1)
    txn.transition_to_abortable(error_for_code(49, "AddPartitionsToTxn"))
    abort = txn.begin_abort()
    h.step()
    assert h.connections.all_sent(InitProducerIdRequest) == [], "the abort went with a Produce out"
    await h.respond(request, error(0, NOT_LEADER_OR_FOLLOWER))
    h.step()
    assert isinstance(old.exception(), KafkaError)
    (init,) = h.connections.all_sent(InitProducerIdRequest)
    init.reply.set_result(InitProducerIdResponse(0, NONE, 5000, 3))
    h.sender.handle_responses(h.now)
    assert abort.done() and abort.exception() is None
    for _ in range(3):
        h.step(h.now + 1.0)
    assert h.produce_requests(1) == [request], "a batch of the aborted transaction went again"
    assert h.memory_is_back()


# ---- KIP-951 and KIP-219 ----------------------------------------------------------------------


async def test_a_new_leader_named_in_the_answer_takes_the_retry_at_once() -> None:
    # KIP-951: NOT_LEADER_OR_FOLLOWER with current_leader moves the partition to broker 2
    # without a metadata round trip, and the retry skips its backoff.
    h = Harness(linger_ms=0, retry_backoff_ms=1000)
    future = h.append(0, b"a")
    h.step()
    answer = ProducePartitionResponse(
        0, NOT_LEADER_OR_FOLLOWER, -1, current_leader=LeaderIdAndEpoch(2, 7)
    )
    await h.respond(h.last_produce(1), answer)
    assert h.metadata.cluster.leader_for(TOPIC, 0) == 2
    h.step()
    retry = h.last_produce(2)
    assert retry.values(0) == [b"a"]
    await h.respond(retry, ok(0, 3))
    assert future.result().offset == 3


async def test_a_throttled_broker_gets_nothing_until_the_throttle_ends() -> None:
    h = Harness(linger_ms=0)
    first = h.append(0, b"a")
    h.step()
    topics = [ProduceTopicResponse(TOPIC, [ok(0, 0)])]
    response = ProduceResponse(topics=topics, throttle_time_ms=500)
    h.last_produce(1).reply.set_result(response)
    h.conn(1).throttled_until = h.now + 0.5  # what the connection makes of that answer
    h.sender.handle_responses(h.now)
    assert first.result().offset == 0
    second = h.append(0, b"b")
    other = h.append(2, b"c")
    delay = h.step()
    assert len(h.produce_requests(1)) == 1, "a throttled broker was sent a request"
    assert len(h.produce_requests(2)) == 1, "another broker waited for the throttle"
    assert delay <= 0.5
    h.step(T0 + 0.499)
    assert len(h.produce_requests(1)) == 1
    h.step(T0 + 0.5)
    assert h.last_produce(1).values(0) == [b"b"]
    await h.respond(h.last_produce(1), ok(0, 1))
    await h.respond(h.last_produce(2), ok(2, 0))
    assert (second.result().offset, other.result().offset) == (1, 0)
    snapshot = h.metrics.snapshot(0, 0, 0.0, 0)
    assert snapshot["produce-throttle-time-max"] == 500


async def test_a_throttled_coordinator_gets_no_transactional_request_either() -> None:
    # KIP-219 holds every request to the broker, as Java's NetworkClient does, not only
    # Produce.
    txn = await transaction_in_progress([0])
    h = Harness(transactions=txn, linger_ms=0)
    h.conn(1).throttled_until = h.now + 0.5
    txn.begin_commit()
    delay = h.step()
    assert h.connections.all_sent(EndTxnRequest) == []
    assert 0 < delay <= 0.5
    h.step(h.now + 0.5)
    assert len(h.connections.all_sent(EndTxnRequest)) == 1


# ---- KIP-467: records the broker refused inside a batch ----------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
async def test_records_named_in_record_errors_fail_alone_and_the_rest_go_again(
    idempotent: bool,
) -> None:
    h = Harness(linger_ms=0, idempotent=idempotent)
    if idempotent:
        await h.init_producer_id(1000)
    futures = [h.append(0, value) for value in (b"a", b"b", b"c", b"d")]
    h.step()
    await h.respond(
        h.last_produce(1),
        error(0, INVALID_RECORD, "one or more records were invalid", [(1, "bad b"), (3, "bad d")]),
    )
    for index in (1, 3):
        exc = futures[index].exception()
        assert isinstance(exc, InvalidRecordError)
        assert f"record {index} of its batch" in str(exc) and "bad" in str(exc)
    assert not futures[0].done() and not futures[2].done()
    h.step()
    h.step()
    resent = h.last_produce(1)
    assert resent.values(0) == [b"a", b"c"]
    if idempotent:
        # The refused batch took no sequence: the partition starts again, epoch bumped.
        assert identity(resent) == (1000, 1, 0)
    await h.respond(resent, ok(0, 10))
    assert offsets([futures[0], futures[2]]) == [10, 11]
    assert h.metrics.record_error_total == 2
    assert h.memory_is_back()


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_retry_refused_for_some_records_after_an_attempt_that_may_be_written_fails_whole(
    idempotent: bool,
) -> None:
    # The first attempt's connection died: the broker may have written the batch. Kafka
    # checks timestamps before it recognises a retried batch, so the retry can be refused
    # for records that have grown too old meanwhile (message.timestamp.before.max.ms).
    # Sending the other records again in new batches would write them twice; every record
    # fails instead, and says it may have been written.
    h = Harness(linger_ms=0, idempotent=idempotent)
    if idempotent:
        await h.init_producer_id(1000)
    futures = [h.append(0, value) for value in (b"a", b"b", b"c")]
    h.step()
    await h.fail(h.last_produce(1), KafkaConnectionError("connection lost"))
    h.step(h.now + 1.0)
    assert len(h.produce_requests()) == 2
    await h.respond(
        h.last_produce(1),
        error(0, INVALID_TIMESTAMP, "timestamp out of range", [(0, "a is too old")]),
    )
    for future in futures:
        exc = future.exception()
        assert isinstance(exc, InvalidTimestampError), exc
        assert exc.maybe_written
        assert "may have been written" in str(exc)
    h.step(h.now + 1.0)
    h.step(h.now + 1.0)
    assert len(h.produce_requests()) == 2, "records of a maybe-written batch were sent again"
    assert h.memory_is_back()


async def test_a_record_error_says_whether_it_may_have_been_written() -> None:
    # Refused before anything could be written: maybe_written False. Expired while in
    # flight: True.
    h = Harness(linger_ms=0, delivery_timeout_ms=1000, request_timeout_ms=1000)
    refused = h.append(0, b"refused")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    assert isinstance(refused.exception(), InvalidRecordError)
    assert not refused.exception().maybe_written
    expired = h.append(0, b"expired in flight")
    h.step()
    h.step(h.now + 1.5)
    exc = expired.exception()
    assert isinstance(exc, DeliveryTimeoutError) and exc.maybe_written


async def test_a_fault_after_the_request_went_out_says_the_records_may_be_written() -> None:
    # The broker answered (a success, say); a fault of ours while handling the answer fails
    # the records: they may well be in the log.
    h = Harness(linger_ms=0)
    answered = h.append(0, b"a")
    h.step()
    h.last_produce(1).reply.set_result(object())  # an answer the handler cannot read
    h.sender.handle_responses(h.now)
    exc = answered.exception()
    assert isinstance(exc, KafkaError) and exc.maybe_written


async def test_a_request_the_connection_refused_at_once_was_not_written() -> None:
    # send() raised: nothing went out. The retry's later refusal is definite.
    h = Harness(linger_ms=0, retries=0)
    future = h.append(0, b"a")
    h.conn(1).send_error = KafkaConnectionError("the transport closed")
    h.step()
    exc = future.exception()
    assert isinstance(exc, KafkaConnectionError) and not exc.maybe_written


async def test_a_record_an_abortable_transaction_never_sent_was_not_written() -> None:
    # A batch expires in flight (maybe written) and makes the transaction abortable; a
    # record appended afterwards is never sent and fails with a copy of that error, which
    # must not say the record may be in the log.
    txn = await transaction_in_progress([0, 1])
    h = Harness(transactions=txn, linger_ms=0, delivery_timeout_ms=3000, request_timeout_ms=3000)
    expired = h.append(0, b"a")
    h.step()
    h.step(T0 + 3.0)
    never_sent = h.append(1, b"b")
    h.step(T0 + 3.1)
    assert expired.exception().maybe_written
    exc = never_sent.exception()
    assert isinstance(exc, KafkaError) and not exc.maybe_written, exc


async def test_a_batch_whose_every_record_is_named_fails_whole() -> None:
    h = Harness(linger_ms=0)
    futures = [h.append(0, b"a"), h.append(0, b"b")]
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD, "bad", [(0, "x"), (1, "y")]))
    assert all(isinstance(f.exception(), InvalidRecordError) for f in futures)
    h.step(h.now + 1.0)
    assert len(h.produce_requests()) == 1
    assert h.memory_is_back()


@pytest.mark.parametrize("code", [90, 47])
async def test_a_broker_that_fences_a_local_epoch_bump_gets_a_new_producer_id(code: int) -> None:
    # Kafka takes an epoch the idempotent producer bumped itself; Tansu answers
    # PRODUCER_FENCED. Then the producer asks for a new id, and bumps that way from then on.
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    lost = h.append(0, b"bad")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    assert isinstance(lost.exception(), InvalidRecordError)
    later = h.append(0, b"good")
    h.step()
    assert identity(h.last_produce(1)) == (1000, 1, 0)
    await h.respond(h.last_produce(1), error(0, code))
    assert not later.done(), "the bumped epoch's refusal failed the record"
    h.step(h.now + 1.0)
    inits = h.connections.all_sent(InitProducerIdRequest)
    assert len(inits) == 2
    inits[-1].reply.set_result(InitProducerIdResponse(0, NONE, 2000, 0))
    h.sender.handle_responses(h.now)
    h.step(h.now + 1.0)
    assert identity(h.last_produce(1)) == (2000, 0, 0)
    await h.respond(h.last_produce(1), ok(0, 5))
    assert later.result().offset == 5
    # The next lost sequence goes straight to a new producer id.
    again = h.append(0, b"bad again")
    h.step()
    await h.respond(h.last_produce(1), error(0, INVALID_RECORD))
    assert isinstance(again.exception(), InvalidRecordError)
    h.append(0, b"after")
    h.step()
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 3


async def test_a_fenced_answer_to_an_epoch_never_bumped_locally_stays_fatal_for_the_batch() -> None:
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    future = h.append(0, b"a")
    h.step()
    await h.respond(h.last_produce(1), error(0, 90))
    assert isinstance(future.exception(), KafkaError)
    assert len(h.connections.all_sent(InitProducerIdRequest)) == 1


async def test_sequences_wrap_at_2_to_the_31() -> None:
    # Kafka's sequences are int32 and wrap to 0 after 2**31 - 1.
    h = Harness(idempotent=True, linger_ms=0)
    await h.init_producer_id(1000)
    assert h.idempotence is not None
    state = h.idempotence._state((TOPIC, 0))
    state.producer_id, state.producer_epoch = 1000, 0
    state.next_sequence = 2**31 - 2
    state.last_acked_sequence = 2**31 - 3
    first = [h.append(0, value) for value in (b"a", b"b", b"c", b"d")]
    h.step()
    assert identity(h.last_produce(1)) == (1000, 0, 2**31 - 2)
    await h.respond(h.last_produce(1), ok(0, 0))
    assert offsets(first) == [0, 1, 2, 3]
    after = h.append(0, b"e")
    h.step()
    assert identity(h.last_produce(1)) == (1000, 0, 2)
    # It is next in line across the wrap: an OUT_OF_ORDER answer is a real gap.
    await h.respond(h.last_produce(1), error(0, OUT_OF_ORDER_SEQUENCE_NUMBER))
    h.step(h.now + 1.0)
    assert identity(h.last_produce(1)) == (1000, 1, 0)
    await h.respond(h.last_produce(1), ok(0, 4))
    assert after.result().offset == 4


async def test_a_retry_that_expires_in_the_accumulator_holds_its_partition_no_longer() -> None:
    # A sequenced batch queued to go again that expires there: the batches behind it no
    # longer wait for it (they were held for as long as the producer lived).
    h = Harness(
        idempotent=True,
        linger_ms=0,
        retry_backoff_ms=10_000,
        retry_backoff_max_ms=10_000,
        delivery_timeout_ms=5000,
        request_timeout_ms=4000,
    )
    await h.init_producer_id(1000)
    first = h.append(0, b"a")
    h.step()
    await h.respond(h.last_produce(1), error(0, NOT_ENOUGH_REPLICAS))
    h.step(T0 + 5.0)
    assert isinstance(first.exception(), DeliveryTimeoutError)
    later = h.append(0, b"b")
    h.step()
    h.step()
    assert h.last_produce(1).values(0) == [b"b"]
    await h.respond(h.last_produce(1), ok(0, 0))
    assert later.result().offset == 0


async def test_a_record_too_large_for_the_broker_is_split_off_and_fails_alone() -> None:
    # A large record and a small one in one batch, refused as too large: the split keeps
    # the large one alone (else the small one joins it again in its buffer's slack and the
    # same batch is split into itself forever), which then fails as too large.
    h = Harness(linger_ms=0, batch_size=1024)
    big = h.append(0, b"x" * 4000)
    small = h.append(0, b"s")
    h.step()
    first = h.last_produce(1)
    assert first.values(0) == [b"x" * 4000, b"s"]
    await h.respond(first, error(0, MESSAGE_TOO_LARGE))
    h.step()
    alone = h.last_produce(1)
    assert alone.values(0) == [b"x" * 4000]
    await h.respond(alone, error(0, MESSAGE_TOO_LARGE))
    assert isinstance(big.exception(), RecordTooLargeError)
    h.step()
    rest = h.last_produce(1)
    assert rest.values(0) == [b"s"]
    await h.respond(rest, ok(0, 0))
    assert small.result().offset == 0
    assert len(h.produce_requests()) == 3
    assert h.memory_is_back()


async def test_retries_that_failed_together_expire_at_their_own_deadlines() -> None:
    # Three requests of one partition fail together (the connection dropped) and wait to go
    # again while no broker can take them. Each batch must expire at its own deadline: the
    # oldest first, not when the newest one does (found by the simulation: a retry queued
    # behind a newer one outlived its delivery_timeout_ms until the newer one went).
    h = Harness(linger_ms=0, leaders={0: 1}, delivery_timeout_ms=3000, request_timeout_ms=3000)
    futures = []
    for offset, value in enumerate((b"a", b"b", b"c")):
        h.now = T0 + offset
        futures.append(h.append(0, value))
        h.step()
    sent = h.produce_requests(1)
    assert len(sent) == 3
    h.now = T0 + 2.1
    for request in sent:
        await h.fail(request, KafkaConnectionError("connection lost"))
    h.connections.connected.clear()
    h.step(T0 + 3.05)
    assert isinstance(futures[0].exception(), DeliveryTimeoutError)
    assert not futures[1].done() and not futures[2].done()
    h.step(T0 + 4.05)
    assert isinstance(futures[1].exception(), DeliveryTimeoutError)
    assert not futures[2].done()
