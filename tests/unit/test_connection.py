"""The network layer against a scripted fake broker (and one round trip with Tansu).

The fake broker is an ``asyncio.start_server`` that decodes request headers by hand and
answers with canned responses built by hand, so these tests do not trust the codec they test
against. Every test runs on the default asyncio loop and on uvloop (the ``run`` fixture).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import struct
import time
import tracemalloc
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import uvloop

from aioproducer._core.answers import AnswerHandler, AnswerQueue
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    CorruptResponseError,
    IllegalStateError,
    KafkaConnectionError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from aioproducer.net import BrokerConnection, ConnectionManager, ConnectionState, ExponentialBackoff
from aioproducer.net import writers as writers_module
from aioproducer.net.connection import ResolvedAddresses
from aioproducer.protocol.api import SMALL_RESPONSE_LIMIT, ApiKey
from aioproducer.protocol.messages import (
    ApiVersionsRequest,
    InitProducerIdRequest,
    MetadataRequest,
    MetadataResponse,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
)
from tests.support.blackhole import SilentAddress
from tests.support.echo import EchoRequest

if TYPE_CHECKING:
    from aioproducer.embedded import EmbeddedBroker

T = TypeVar("T")

HOST = "127.0.0.1"
LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
# A safety net so that a broken test fails instead of hanging; never a measured threshold.
PATIENCE = 10.0

Runner = Callable[[Coroutine[Any, Any, T]], T]


@pytest.fixture(params=sorted(LOOP_FACTORIES))
def run(request: pytest.FixtureRequest) -> Iterator[Runner[Any]]:
    """Run a coroutine to completion on a fresh loop of each kind."""
    factory = LOOP_FACTORIES[request.param]

    def runner(coroutine: Coroutine[Any, Any, T]) -> T:
        loop = factory()
        try:
            return loop.run_until_complete(asyncio.wait_for(coroutine, PATIENCE * 3))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    yield runner


# Which way connections write in the test running now (the ``writes`` fixture).
_WRITER_THREAD = [True]


@pytest.fixture(autouse=True, params=["writer-thread", "transport"])
def writes(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test twice: writes on the native writer thread (where it is built, the
    default) and through the event loop's transport (``socket_writer_thread=False``)."""
    _WRITER_THREAD[0] = request.param == "writer-thread"
    yield request.param
    _WRITER_THREAD[0] = True


def make_config(port: int | list[int] = 9092, **options: Any) -> ProducerConfig:
    ports = port if isinstance(port, list) else [port]
    options.setdefault("socket_writer_thread", _WRITER_THREAD[0])
    return ProducerConfig(
        bootstrap_servers=",".join(f"{HOST}:{p}" for p in ports),
        client_id="test-client",
        **options,
    )


# The request the fake broker echoes is tests.support.echo.EchoRequest.


# ---- the fake broker ---------------------------------------------------------------------

DEFAULT_RANGES: dict[int, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.METADATA: (0, 8),
    ApiKey.PRODUCE: (3, 9),
}
# First flexible version (request header v2) of the APIs the fake broker decodes.
FLEXIBLE_FROM = {ApiKey.API_VERSIONS: 3, ApiKey.METADATA: 9, ApiKey.PRODUCE: 9}


@dataclass
class Received:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: bytes
    writer: asyncio.StreamWriter = field(repr=False)


def frame(correlation_id: int, body: bytes) -> bytes:
    """A response frame with header v0."""
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


def api_versions_body(
    version: int,
    error_code: int,
    ranges: dict[int, tuple[int, int]],
    features: tuple[int, dict[str, int]] | None = None,
) -> bytes:
    entries = sorted(ranges.items())
    if version >= 3:
        assert len(entries) < 127
        out = struct.pack(">hB", error_code, len(entries) + 1)
        for key, (low, high) in entries:
            out += struct.pack(">hhhB", key, low, high, 0)
        out += struct.pack(">i", 0)  # throttle_time_ms
        if features is None:
            return out + b"\x00"  # no tagged fields
        epoch, levels = features
        # Tag 1: FinalizedFeaturesEpoch (int64); tag 2: FinalizedFeatures, a compact array
        # of (compact name, max level int16, min level int16, empty tags).
        array = bytes([len(levels) + 1])
        for name, level in levels.items():
            array += bytes([len(name) + 1]) + name.encode() + struct.pack(">hhB", level, 0, 0)
        assert len(array) < 128
        epoch_tag = b"\x01\x08" + struct.pack(">q", epoch)
        return out + b"\x02" + epoch_tag + bytes([2, len(array)]) + array
    out = struct.pack(">hi", error_code, len(entries))
    for key, (low, high) in entries:
        out += struct.pack(">hhh", key, low, high)
    return out + (struct.pack(">i", 0) if version >= 1 else b"")


class FakeBroker:
    """A scripted broker on a loopback port.

    ApiVersions is answered from ``ranges``; a version above ``api_versions_max`` gets
    UNSUPPORTED_VERSION in the v0 layout (listing ApiVersions' own range if
    ``list_api_versions``), as Kafka does. Every other request is queued for the test, which
    answers it (or not) with :meth:`reply` / :meth:`write`.
    """

    def __init__(
        self,
        ranges: dict[int, tuple[int, int]] | None = None,
        *,
        api_versions_max: int = 3,
        list_api_versions: bool = True,
        unsupported_body: bytes | None = None,
        features: tuple[int, dict[str, int]] | None = None,
    ) -> None:
        self.ranges = dict(DEFAULT_RANGES if ranges is None else ranges)
        self.features = features
        self.api_versions_max = api_versions_max
        self.list_api_versions = list_api_versions
        self.unsupported_body = unsupported_body
        self.received: list[Received] = []
        self.requests: asyncio.Queue[Received] = asyncio.Queue()
        self.writers: list[asyncio.StreamWriter] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for writer in self.writers:
            writer.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def next_request(self) -> Received:
        return await asyncio.wait_for(self.requests.get(), PATIENCE)

    @staticmethod
    def reply(request: Received, body: bytes) -> None:
        request.writer.write(frame(request.correlation_id, body))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                data = await reader.readexactly(size)
                request = self._parse(data, writer)
                self.received.append(request)
                if request.api_key == ApiKey.API_VERSIONS:
                    self._answer_api_versions(request)
                else:
                    self.requests.put_nowait(request)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _parse(data: bytes, writer: asyncio.StreamWriter) -> Received:
        api_key, version, correlation_id, length = struct.unpack_from(">hhih", data, 0)
        position = 10
        client_id = None
        if length >= 0:
            client_id = data[position : position + length].decode()
            position += length
        if version >= FLEXIBLE_FROM.get(api_key, 1 << 15):
            assert data[position] == 0, "the fake broker expects no tagged header fields"
            position += 1
        return Received(api_key, version, correlation_id, client_id, data[position:], writer)

    def _answer_api_versions(self, request: Received) -> None:
        if request.version > self.api_versions_max:
            listed = {ApiKey.API_VERSIONS: (0, self.api_versions_max)}
            body = self.unsupported_body or api_versions_body(
                0, 35, listed if self.list_api_versions else {}
            )
        else:
            body = api_versions_body(request.version, 0, self.ranges, self.features)
        self.reply(request, body)


class Recorder:
    """A callback that counts its calls and lets a test wait for a condition."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self._changed = asyncio.Event()

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)
        self._changed.set()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), PATIENCE)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections (bound, never listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        yield sock.getsockname()[1]


async def connected(
    broker: FakeBroker, node_id: int = 1, clock: Callable[[], float] | None = None, **options: Any
) -> tuple[BrokerConnection, Recorder, Recorder]:
    on_close, on_capacity = Recorder(), Recorder()
    connection = BrokerConnection(
        node_id,
        HOST,
        broker.port,
        make_config(broker.port, **options),
        on_close=on_close,
        on_capacity=on_capacity,
        **({"clock": clock} if clock is not None else {}),
    )
    await connection.connect()
    return connection, on_close, on_capacity


async def connected_with_answers(
    broker: FakeBroker, node_id: int = 1, **options: Any
) -> tuple[BrokerConnection, AnswerQueue, list[int]]:
    """A connection whose send_for answers go to an answer queue; the list counts its
    wake-ups."""
    wakes: list[int] = []
    answers = AnswerQueue(wake=lambda: wakes.append(len(answers)))
    connection = BrokerConnection(
        node_id, HOST, broker.port, make_config(broker.port, **options), answers=answers
    )
    await connection.connect()
    return connection, answers, wakes


def handler_named(name: str, seen: list[tuple[str, Any, BaseException | None]]) -> AnswerHandler:
    return lambda response, error, now: seen.append((name, response, error))


async def failure(future: asyncio.Future[Any]) -> BaseException:
    with pytest.raises(Exception) as caught:
        await asyncio.wait_for(future, PATIENCE)
    return caught.value


# ---- ApiVersions ---------------------------------------------------------------------------------


def test_api_versions_handshake_and_negotiation(run: Runner[None]) -> None:
    async def scenario() -> None:
        ranges = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 8), ApiKey.PRODUCE: (0, 2)}
        async with FakeBroker(ranges) as broker:
            connection, _, _ = await connected(
                broker, client_software_name="net-test", client_software_version="1.2.3"
            )
            assert connection.state is ConnectionState.READY
            assert connection.api_versions == ranges
            first = broker.received[0]
            assert (first.api_key, first.version, first.client_id) == (18, 3, "test-client")
            # v3 carries the software name and version as compact strings.
            assert first.body == b"\x09net-test\x061.2.3\x00"
            assert connection.negotiate(MetadataRequest) == 8  # ours 1-12, the broker's 0-8
            assert connection.negotiate(ApiVersionsRequest) == 3
            with pytest.raises(UnsupportedVersionError, match="InitProducerIdRequest"):
                connection.negotiate(InitProducerIdRequest)  # not advertised at all
            with pytest.raises(UnsupportedVersionError, match=r"v0-v2.*v3-v12"):
                connection.negotiate(ProduceRequest)  # no overlap
            connection.close()
            await connection.wait_closed()

    run(scenario())


def test_a_request_may_cap_its_version_below_the_negotiated_one(run: Runner[None]) -> None:
    # Transactions v1 caps Produce at v11 even where the broker speaks v12 (KIP-890).
    async def scenario() -> None:
        ranges = {ApiKey.API_VERSIONS: (0, 3), ApiKey.PRODUCE: (3, 12)}
        async with FakeBroker(ranges) as broker:
            connection, _, _ = await connected(broker)
            assert connection.negotiate(ProduceRequest) == 12
            assert connection.negotiate(ProduceRequest, 11) == 11
            assert connection.negotiate(ProduceRequest, 13) == 12
            with pytest.raises(UnsupportedVersionError, match=r"v3 and up.*up to v2"):
                connection.negotiate(ProduceRequest, 2)
            # acks=0: no answer, so the broker only records what it read.
            await connection.send(ProduceRequest("tx", 0, 1, [], version_cap=11))
            await connection.send(ProduceRequest("tx", 0, 1, []))
            produced = [r for r in broker.received if r.api_key == ApiKey.PRODUCE]
            while len(produced) < 2:
                await broker.next_request()
                produced = [r for r in broker.received if r.api_key == ApiKey.PRODUCE]
            assert [r.version for r in produced] == [11, 12]
            connection.close()
            await connection.wait_closed()

    run(scenario())


def test_finalized_features_are_kept_and_the_newest_epoch_wins(run: Runner[None]) -> None:
    # As the Java client's ApiVersions: whichever broker reported the highest
    # finalized-features epoch is believed (transaction.version decides KIP-890 part 2).
    async def scenario() -> None:
        changes = Recorder()
        old = (5, {"transaction.version": 1})
        new = (9, {"transaction.version": 2, "metadata.version": 25})
        older = (7, {"transaction.version": 0})
        ranges = {ApiKey.API_VERSIONS: (0, 3), ApiKey.PRODUCE: (3, 12)}
        async with (
            FakeBroker(features=old) as one,
            FakeBroker(ranges, features=new) as two,
            FakeBroker(features=older) as three,
            FakeBroker() as plain,
        ):
            manager = ConnectionManager(make_config(one.port), changes)
            assert manager.finalized_features.epoch == -1
            assert manager.finalized_features.level("transaction.version") == 0
            ports = {1: one.port, 2: two.port, 3: three.port, 4: plain.port}
            manager.set_brokers({node: (HOST, port) for node, port in ports.items()})
            for node in (1, 2, 3, 4):
                manager.ensure_connecting(node, 0.0)
                await changes.wait_until(lambda n=node: manager.ready(n) is not None)
                if node == 1:
                    assert manager.finalized_features.level("transaction.version") == 1
            first = manager.ready(1)
            assert first is not None
            assert (first.finalized_features_epoch, first.finalized_features) == (
                5,
                {"transaction.version": 1},
            )
            fourth = manager.ready(4)
            assert fourth is not None and fourth.finalized_features_epoch == -1
            features = manager.finalized_features
            assert (features.epoch, features.node_id) == (9, 2)
            assert features.levels == {"transaction.version": 2, "metadata.version": 25}
            assert features.level("transaction.version") == 2
            assert features.api_versions == ranges
            await manager.close()
            # Kept once the connection that reported it is gone.
            assert manager.finalized_features is features

    run(scenario())


# librdkafka's mock cluster answers an unknown ApiVersions version in a layout of its own:
# error 35, a compact array count of 0, then one entry anyway (bytes seen on the wire).
MOCK_CLUSTER_UNSUPPORTED = bytes.fromhex("002301001200000002" + "00000000")


@pytest.mark.parametrize(
    ("listed", "unsupported_body", "retry_version"),
    [(True, None, 2), (False, None, 0), (True, MOCK_CLUSTER_UNSUPPORTED, 0)],
    ids=["kafka, listed", "kafka, not listed", "librdkafka mock"],
)
def test_api_versions_falls_back_on_unsupported_version(
    run: Runner[None], listed: bool, unsupported_body: bytes | None, retry_version: int
) -> None:
    async def scenario() -> None:
        async with FakeBroker(
            api_versions_max=2, list_api_versions=listed, unsupported_body=unsupported_body
        ) as broker:
            connection, _, _ = await connected(broker)
            assert [r.version for r in broker.received] == [3, retry_version]
            assert connection.is_ready
            assert connection.api_versions == DEFAULT_RANGES
            connection.close()

    run(scenario())


# ---- pipelining --------------------------------------------------------------------------


@pytest.mark.parametrize("delivery", ["one write", "byte by byte"])
def test_pipelined_requests_resolve_in_order(run: Runner[None], delivery: str) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, _, _ = await connected(broker)
            payloads = [b"first", b"second" * 100, b"third"]
            futures = [connection.send(EchoRequest(p)) for p in payloads]
            assert connection.in_flight_count() == 3
            done_order: list[int] = []
            for index, future in enumerate(futures):
                future.add_done_callback(lambda _, i=index: done_order.append(i))
            requests = [await broker.next_request() for _ in payloads]
            assert [r.body for r in requests] == payloads
            assert len({r.correlation_id for r in requests}) == 3
            wire = b"".join(frame(r.correlation_id, b"re:" + r.body) for r in requests)
            writer = requests[0].writer
            if delivery == "one write":
                writer.write(wire)
            else:
                for index in range(len(wire)):
                    writer.write(wire[index : index + 1])
                    await writer.drain()
                    await asyncio.sleep(0)
            results = await asyncio.gather(*futures)
            assert [r.payload if r else None for r in results] == [b"re:" + p for p in payloads]
            # From Python 3.12, gather() of futures that are all done already returns before
            # their callbacks ran (it no longer waits a loop iteration): let them run.
            await asyncio.sleep(0)
            assert done_order == [0, 1, 2]
            assert connection.in_flight_count() == 0
            assert connection.is_ready
            connection.close()

    run(scenario())


def test_answers_to_send_for_are_queued_in_send_order_with_one_wake_per_read(
    run: Runner[None],
) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, answers, wakes = await connected_with_answers(broker)
            seen: list[tuple[str, Any, BaseException | None]] = []
            payloads = [b"first", b"second" * 100, b"third"]
            for payload in payloads:
                connection.send_for(EchoRequest(payload), handler_named(payload.decode(), seen))
            assert connection.in_flight_count() == 3
            requests = [await broker.next_request() for _ in payloads]
            # Nothing is handed over until the answers are read, and then all in one read.
            assert len(answers) == 0 and wakes == []
            requests[0].writer.write(
                b"".join(frame(r.correlation_id, b"re:" + r.body) for r in requests)
            )
            await asyncio.wait_for(_until(lambda: len(answers) == 3), PATIENCE)
            assert wakes == [3]
            assert seen == []  # the queue's owner calls the handlers, not the connection
            for handler, response, error in answers.take():
                handler(response, error, 0.0)
            assert [(name, response.payload, error) for name, response, error in seen] == [
                (p.decode(), b"re:" + p, None) for p in payloads
            ]
            assert len(answers) == 0
            connection.close()

    run(scenario())


def test_a_dropped_connection_queues_each_request_error_once(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, answers, wakes = await connected_with_answers(broker, node_id=7)
            seen: list[tuple[str, Any, BaseException | None]] = []
            for index in range(3):
                connection.send_for(EchoRequest(bytes([index])), handler_named(str(index), seen))
            for _ in range(3):
                await broker.next_request()
            broker.writers[0].close()
            await asyncio.wait_for(_until(lambda: connection.closed), PATIENCE)
            queued = answers.take()
            assert [response for _, response, _ in queued] == [None] * 3
            for handler, response, error in queued:
                handler(response, error, 0.0)
            assert [name for name, _, _ in seen] == ["0", "1", "2"]
            for _, _, error in seen:
                assert type(error) is KafkaConnectionError and error.retriable
                assert f"node 7 ({HOST}:{broker.port})" in str(error)
            assert len(wakes) == 1
            with pytest.raises(KafkaConnectionError):
                connection.send_for(EchoRequest(b"late"), handler_named("late", seen))
            assert len(answers) == 0

    run(scenario())


def test_a_failed_write_raises_and_queues_nothing_for_its_request(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, answers, _ = await connected_with_answers(broker)
            seen: list[tuple[str, Any, BaseException | None]] = []
            connection.send_for(EchoRequest(b"out"), handler_named("out", seen))
            await broker.next_request()
            assert connection._transport is not None
            connection._transport.abort()
            try:
                connection.send_for(EchoRequest(b"late"), handler_named("late", seen))
            except KafkaConnectionError as exc:
                # The sender hears of the failure from the raise, and only from it.
                assert exc.retriable
                expected = ["out"]
            else:
                # asyncio dropped the write without a word: the connection fails both
                # requests once it sees the transport is gone.
                expected = ["out", "late"]
            await asyncio.wait_for(_until(lambda: connection.closed), PATIENCE)
            for handler, response, error in answers.take():
                handler(response, error, 0.0)
            assert [name for name, _, _ in seen] == expected
            assert all(type(error) is KafkaConnectionError for _, _, error in seen)

    run(scenario())


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


def test_send_for_needs_an_answer_queue(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, _, _ = await connected(broker)
            with pytest.raises(IllegalStateError, match="no answer queue"):
                connection.send_for(EchoRequest(b"x"), lambda response, error, now: None)
            assert connection.in_flight_count() == 0
            connection.close()

    run(scenario())


def test_large_responses_split_across_reads(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, _, _ = await connected(broker)
            sizes = [10, 2_000_000, 7, 300_000, 5]
            futures = [connection.send(EchoRequest(str(size).encode())) for size in sizes]
            requests = [await broker.next_request() for _ in sizes]
            bodies = [bytes([i]) * size for i, size in enumerate(sizes)]
            requests[0].writer.write(
                b"".join(frame(r.correlation_id, b) for r, b in zip(requests, bodies, strict=True))
            )
            results = await asyncio.gather(*futures)
            assert [r.payload if r else None for r in results] == bodies
            assert connection.is_ready
            connection.close()

    run(scenario())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_frames_survive_any_chunking(run: Runner[None], seed: int) -> None:
    async def scenario() -> None:
        rng = random.Random(seed)
        async with FakeBroker() as broker:
            connection, _, _ = await connected(
                broker, max_in_flight_requests_per_connection=30, enable_idempotence=False
            )
            sizes = [rng.choice([0, 1, 50, 5000, 100_000, 300_000]) for _ in range(30)]
            futures = [connection.send(EchoRequest(b"?")) for _ in sizes]
            requests = [await broker.next_request() for _ in sizes]
            bodies = [bytes([rng.randrange(256)]) * size for size in sizes]
            pairs = zip(requests, bodies, strict=True)
            wire = b"".join(frame(r.correlation_id, body) for r, body in pairs)
            writer = requests[0].writer
            position = 0
            while position < len(wire):
                step = rng.choice([1, 3, 4, 7, 1000, 65536, 262144])
                writer.write(wire[position : position + step])
                position += step
                await writer.drain()
                await asyncio.sleep(0)
            results = await asyncio.gather(*futures)
            assert [r.payload if r else None for r in results] == bodies
            assert connection.is_ready
            connection.close()

    run(scenario())


def test_max_in_flight_is_respected(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, _, on_capacity = await connected(
                broker, max_in_flight_requests_per_connection=2
            )
            first = connection.send(EchoRequest(b"1"))
            second = connection.send(EchoRequest(b"2"))
            assert not connection.can_send()
            with pytest.raises(IllegalStateError, match="in flight"):
                connection.send(EchoRequest(b"3"))
            request = await broker.next_request()
            await broker.next_request()
            assert broker.requests.empty()
            assert len(broker.received) == 3  # ApiVersions and the two allowed
            assert on_capacity.calls == []
            broker.reply(request, b"ok")
            await first
            assert connection.can_send()
            assert on_capacity.calls == [(connection,)]  # a full connection freed a slot
            third = connection.send(EchoRequest(b"3"))
            assert (await broker.next_request()).body == b"3"
            connection.close()
            for future in (second, third):
                assert type(await failure(future)) is KafkaConnectionError

    run(scenario())


def test_unsolicited_response_is_ignored(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            silent = connection.send(EchoRequest(b"acks=0", respond=False))
            assert silent.done() and silent.result() is None
            with pytest.raises(IllegalStateError, match="expects no response"):
                await connection.request(EchoRequest(b"", respond=False))
            assert connection.in_flight_count() == 0
            answered = connection.send(EchoRequest(b"normal"))
            unsolicited = await broker.next_request()
            normal = await broker.next_request()
            # Like Tansu and librdkafka's mock: an answer to the acks=0 request, then the real one.
            broker.reply(unsolicited, b"unexpected")
            broker.reply(normal, b"expected")
            result = await answered
            assert result is not None and result.payload == b"expected"
            assert connection.is_ready
            assert on_close.calls == []
            connection.close()

    run(scenario())


async def _exactly(sock: socket.socket, count: int) -> bytes:
    """``count`` bytes from a non-blocking socket on the running loop."""
    loop = asyncio.get_running_loop()
    data = bytearray()
    while len(data) < count:
        chunk = await loop.sock_recv(sock, min(1 << 20, count - len(data)))
        if not chunk:
            raise ConnectionError("end of stream inside a frame")
        data += chunk
    return bytes(data)


async def _read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed frame, without its size."""
    return await _exactly(sock, struct.unpack(">i", await _exactly(sock, 4))[0])


async def _accept_and_handshake(listener: socket.socket) -> socket.socket:
    """A hand-driven broker: accept one connection and answer its ApiVersions."""
    loop = asyncio.get_running_loop()
    sock, _ = await loop.sock_accept(listener)
    sock.setblocking(False)
    request = await _read_frame(sock)
    version, correlation_id = struct.unpack_from(">hi", request, 2)
    body = api_versions_body(version, 0, DEFAULT_RANGES)
    await loop.sock_sendall(sock, frame(correlation_id, body))
    return sock


async def _connect_hand_driven() -> tuple[BrokerConnection, socket.socket, socket.socket]:
    """A connection to a broker the test drives by hand: (connection, broker's socket,
    listener), handshaken."""
    listener = socket.create_server((HOST, 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    server = asyncio.ensure_future(_accept_and_handshake(listener))
    connection = BrokerConnection(1, HOST, port, make_config(port))
    await connection.connect()
    return connection, await server, listener


def test_close_after_acks_zero_lets_the_broker_read_everything(run: Runner[None]) -> None:
    # Tansu and librdkafka's mock answer acks=0 produce requests. An answer that reaches a
    # fully closed socket makes its kernel send a TCP reset, and a broker that sees the reset
    # drops the requests it had received but not read yet: records the producer reported as
    # sent (the CI failure of test_acks_zero_with_a_broker_that_answers_anyway). The broker
    # here reads nothing until the client has closed and its answer has landed, then must
    # read every request and a clean end of stream.
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        connection, broker_side, listener = await _connect_hand_driven()
        payloads = [bytes([i]) * 2000 for i in range(20)]
        for payload in payloads:
            assert connection.send(EchoRequest(payload, respond=False)).done()
        connection.close()
        await asyncio.sleep(0.05)  # the client's close has reached the kernel
        # Like the mock: answer each request as it is read, and give up on the connection at
        # the first failed write (the reset the client's kernel sends for an answer it will
        # not read), dropping what was not read yet.
        bodies = []
        try:
            for _ in payloads:
                body = await _read_frame(broker_side)
                bodies.append(body)
                correlation_id = struct.unpack_from(">i", body, 4)[0]
                await loop.sock_sendall(broker_side, frame(correlation_id, b"ok"))
                await asyncio.sleep(0.01)  # a reset, if the client sends one, lands here
            assert await loop.sock_recv(broker_side, 1) == b""  # then a clean end of stream
        finally:
            broker_side.close()
            listener.close()
        assert all(body.endswith(payload) for body, payload in zip(bodies, payloads, strict=True))
        await asyncio.wait_for(connection.wait_closed(), PATIENCE)

    run(scenario())


def test_a_broker_that_stops_reading_makes_the_connection_unwritable_until_it_reads(
    run: Runner[None], writes: str
) -> None:
    # Above the high-water mark of bytes not yet on the wire, ``writable`` turns False (the
    # sender holds back produce requests); once the broker reads, it turns True again and
    # every request arrives whole and in order, by either way of writing.
    async def scenario() -> None:
        connection, broker_side, listener = await _connect_hand_driven()
        try:
            payloads = [bytes([i]) * (512 << 10) for i in range(24)]  # 12 MiB, unread
            for payload in payloads:
                connection.send(EchoRequest(payload, respond=False))
            assert not connection.writable
            for payload in payloads:
                assert (await _read_frame(broker_side)).endswith(payload)
            deadline = time.monotonic() + PATIENCE
            while not connection.writable:
                assert time.monotonic() < deadline, "still not writable after the broker read"
                await asyncio.sleep(0.001)
        finally:
            connection.abort()
            broker_side.close()
            listener.close()
        await asyncio.wait_for(connection.wait_closed(), PATIENCE)

    run(scenario())


def test_plaintext_connections_write_on_the_native_thread_where_it_is_built(
    run: Runner[None], writes: str
) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, _, _ = await connected(broker)
            try:
                expected = writes == "writer-thread" and _socket_writer_built()
                assert connection._writer is not None
                assert connection._writer.threaded is expected
                future = connection.send(EchoRequest(b"ping"))
                request = await asyncio.wait_for(broker.requests.get(), PATIENCE)
                assert request.body.endswith(b"ping")
                broker.reply(request, b"pong")
                assert (await asyncio.wait_for(future, PATIENCE)).payload.endswith(b"pong")
            finally:
                connection.close()
            assert connection._writer is not None and not connection._writer.threaded
            await asyncio.wait_for(connection.wait_closed(), PATIENCE)

    run(scenario())


class _FakeSocket:
    """A socket as a transport reports it: a real descriptor, options ignored."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def setsockopt(self, *args: Any) -> None:
        pass


class _TransportHidingTls(asyncio.Transport):
    """A transport that reports no ``ssl_object``, as a third-party loop's TLS transport
    might."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._extra = {"socket": _FakeSocket(sock), "ssl_object": None}

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


class _RecordingWriter:
    """Stands in for the native writer where it is not built."""

    def __init__(self, fd: int, notify_fd: int = -1) -> None:
        self.fd = fd

    def abort(self) -> None:
        pass

    def close(self, shutdown_write: bool = False, timeout_ms: int = 30000) -> None:
        pass


@pytest.mark.skipif(not hasattr(os, "eventfd"), reason="the native writer is for Linux")
@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "PLAINTEXT", "SASL_PLAINTEXT"])
def test_only_an_unencrypted_protocol_writes_on_the_native_thread(
    monkeypatch: pytest.MonkeyPatch, writes: str, protocol: str
) -> None:
    # The transport says nothing of TLS; security_protocol alone must keep TLS bytes (SSL,
    # SASL_SSL) from reaching the raw socket. PLAINTEXT and SASL_PLAINTEXT write as given,
    # unless socket_writer_thread is off (the "transport" run): then no protocol does.
    monkeypatch.setattr(writers_module, "_SOCKET_WRITER_BUILT", True)
    if not _socket_writer_built():
        monkeypatch.setattr(writers_module, "SocketWriter", _RecordingWriter, raising=False)
    sasl: dict[str, Any] = {}
    if protocol.startswith("SASL"):
        sasl = {"sasl_mechanism": "PLAIN", "sasl_plain_username": "u", "sasl_plain_password": "p"}
    config = make_config(security_protocol=protocol, **sasl)
    ours, peer = socket.socketpair()
    try:
        connection = BrokerConnection(1, HOST, 9092, config)
        connection.connection_made(_TransportHidingTls(ours))
        connection._start_writer()
        try:
            assert connection._writer is not None
            unencrypted = protocol in ("PLAINTEXT", "SASL_PLAINTEXT")
            assert connection._writer.threaded is (unencrypted and writes == "writer-thread")
        finally:
            connection.abort()
        assert not connection._writer.threaded
    finally:
        ours.close()
        peer.close()


def _socket_writer_built() -> bool:
    try:
        import aioproducer._native.sockwriter  # noqa: F401
    except ImportError:
        return False
    return True


def test_unexplained_correlation_id_closes_as_corrupt(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            head = connection.send(EchoRequest(b"a"))
            second = connection.send(EchoRequest(b"b"))
            request = await broker.next_request()
            request.writer.write(frame(request.correlation_id + 1000, b"nobody asked"))
            assert isinstance(await failure(head), CorruptResponseError)
            error = await failure(second)
            assert type(error) is KafkaConnectionError and error.retriable
            assert connection.closed
            assert len(on_close.calls) == 1

    run(scenario())


# ---- failures ----------------------------------------------------------------------------


def test_connection_drop_fails_every_in_flight_request_once(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker, node_id=7)
            futures = [connection.send(EchoRequest(bytes([i]))) for i in range(3)]
            for _ in futures:
                await broker.next_request()
            broker.writers[0].close()
            errors = [await failure(f) for f in futures]
            for error in errors:
                assert type(error) is KafkaConnectionError
                assert error.retriable
                assert f"node 7 ({HOST}:{broker.port})" in str(error)
            assert len({id(e) for e in errors}) == 3
            await on_close.wait_until(lambda: connection.closed)
            assert len(on_close.calls) == 1
            assert on_close.calls[0][0] is connection
            connection.close(RuntimeError("again"))  # idempotent: no second callback
            assert len(on_close.calls) == 1
            with pytest.raises(KafkaConnectionError):
                connection.send(EchoRequest(b"late"))
            await connection.wait_closed()

    run(scenario())


def test_send_racing_a_lost_transport_fails_as_retriable(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            # The transport dies before connection_lost has run: asyncio drops the write,
            # uvloop raises RuntimeError. Either way the caller sees a retriable error.
            assert connection._transport is not None
            connection._transport.abort()
            try:
                future = connection.send(EchoRequest(b"late"))
            except KafkaConnectionError as exc:
                error: BaseException = exc
            else:
                error = await failure(future)
            assert type(error) is KafkaConnectionError and error.retriable
            await on_close.wait_until(lambda: connection.closed)
            assert len(on_close.calls) == 1

    run(scenario())


def test_request_timeout_closes_the_connection(run: Runner[None]) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker, clock=clock, request_timeout_ms=1000)
            oldest = connection.send(EchoRequest(b"old"))
            clock.now += 0.5
            newer = connection.send(EchoRequest(b"new"))
            clock.now += 0.499
            assert connection.check_request_timeouts(clock.now) is False
            assert connection.is_ready
            clock.now += 0.001
            assert connection.check_request_timeouts(clock.now) is True
            timed_out = await failure(oldest)
            assert isinstance(timed_out, RequestTimedOutError) and timed_out.retriable
            other = await failure(newer)
            assert type(other) is KafkaConnectionError and other.retriable
            assert connection.closed
            assert len(on_close.calls) == 1
            assert isinstance(on_close.calls[0][1], RequestTimedOutError)
            assert connection.check_request_timeouts(clock.now + 100) is False

    run(scenario())


@pytest.mark.parametrize("size", [2**31 - 1, 1025, 3, -1], ids=["int32 max", "limit+1", "3", "-1"])
def test_bad_size_prefix_fails_fast(run: Runner[None], size: int) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker, max_response_size=1024)
            head = connection.send(EchoRequest(b"a"))
            second = connection.send(EchoRequest(b"b"))
            request = await broker.next_request()
            # Only the prefix: the connection must not wait for the announced bytes.
            request.writer.write(struct.pack(">i", size))
            error = await failure(head)
            assert isinstance(error, CorruptResponseError)
            assert str(size) in str(error)
            assert type(await failure(second)) is KafkaConnectionError
            assert connection.closed and len(on_close.calls) == 1

    run(scenario())


def test_announced_size_is_not_allocated_up_front(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, _, _ = await connected(broker)  # max_response_size: 32 MiB
            future = connection.send(EchoRequest(b"a"))  # a Metadata request: no cap of its own
            request = await broker.next_request()
            announced = 30 * 1024 * 1024
            tracemalloc.start()
            try:
                # A frame that announces 30 MiB, a few bytes of it, then the broker hangs up:
                # the bytes are read before the loss is seen.
                request.writer.write(struct.pack(">ii", announced, request.correlation_id) + b"x")
                request.writer.close()
                error = await failure(future)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert type(error) is KafkaConnectionError
            assert peak < announced // 16

    run(scenario())


# ---- response size caps, and bytes nobody asked for -------------------------------------


async def _until(predicate: Callable[[], bool]) -> None:
    """Wait until ``predicate()`` holds (looking every millisecond; a bound against hangs)."""
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.001)


def test_a_response_over_its_request_cap_fails_fast(run: Runner[None]) -> None:
    # An InitProducerId answer has a fixed shape: 1 MiB is its cap, far below
    # max_response_size. The announced bytes are neither waited for nor buffered.
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            head = connection.send(InitProducerIdRequest(None, 60000), 1)
            second = connection.send(EchoRequest(b"b"))
            request = await broker.next_request()
            announced = SMALL_RESPONSE_LIMIT + 1
            request.writer.write(struct.pack(">ii", announced, request.correlation_id))
            error = await failure(head)
            assert type(error) is CorruptResponseError and error.retriable
            assert (
                f"response size prefix {announced} is outside [4, {SMALL_RESPONSE_LIMIT}] "
                "(the most a response to InitProducerIdRequest v1 may take)"
            ) in str(error)
            other = await failure(second)
            assert type(other) is KafkaConnectionError and other.retriable
            assert connection.closed and len(on_close.calls) == 1
            assert connection.receive_buffer_size() == 0

    run(scenario())


def test_a_metadata_response_may_take_up_to_max_response_size(run: Runner[None]) -> None:
    # The same size as above, answering a request without a cap of its own (Metadata's key).
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            future = connection.send(EchoRequest(b"a"))
            request = await broker.next_request()
            payload = bytes(SMALL_RESPONSE_LIMIT - 3)  # a frame of SMALL_RESPONSE_LIMIT + 1
            broker.reply(request, payload)
            response = await asyncio.wait_for(future, PATIENCE)
            assert response is not None and response.payload == payload
            assert connection.is_ready and on_close.calls == []
            assert connection.receive_buffer_size() == 0
            connection.close()

    run(scenario())


@pytest.mark.parametrize("over", [0, 1], ids=["at the cap", "over the cap"])
def test_a_produce_response_cap_grows_with_the_request(run: Runner[None], over: int) -> None:
    async def scenario() -> None:
        records = bytes(64 << 10)
        produce = ProduceRequest(
            None, -1, 30000, [ProduceTopicData("t", [ProducePartitionData(0, records)])]
        )
        limit = produce.response_size_limit()
        assert limit is not None and limit > SMALL_RESPONSE_LIMIT + 64 * len(records)
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            future = connection.send(produce, 9)
            request = await broker.next_request()
            request.writer.write(struct.pack(">ii", limit + over, request.correlation_id))
            if over:
                error = await failure(future)
                assert type(error) is CorruptResponseError
                assert f"outside [4, {limit}]" in str(error) and "ProduceRequest v9" in str(error)
                assert connection.closed and connection.receive_buffer_size() == 0
            else:
                # Accepted: the prefix and correlation id wait for the rest of the frame.
                await _until(lambda: connection.receive_buffer_size() == 8 or connection.closed)
                assert connection.is_ready and on_close.calls == []
                assert not future.done()
                connection.close()

    run(scenario())


@pytest.mark.parametrize(
    "unsolicited",
    [b"\x00\x00", struct.pack(">ii", 100, 7) + b"abc", struct.pack(">ii", 4, 7)],
    ids=["part of a size", "part of a frame", "a whole frame"],
)
def test_bytes_nobody_asked_for_close_the_connection(
    run: Runner[None], caplog: pytest.LogCaptureFixture, unsolicited: bytes
) -> None:
    # Nothing is in flight, and no request was sent without expecting an answer (acks=0):
    # no answer can be coming, so the bytes are not kept waiting for a rest that may never
    # come. The connection closes at once, with a warning (no request carries the error).
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            assert connection.in_flight_count() == 0
            broker.writers[0].write(unsolicited)
            await on_close.wait_until(lambda: connection.closed)
            cause = on_close.calls[0][1]
            assert isinstance(cause, CorruptResponseError)
            assert "no request awaited a response" in str(cause) or "nothing in flight" in str(
                cause
            )
            assert connection.receive_buffer_size() == 0

    caplog.set_level(logging.WARNING, logger="aioproducer.net")
    run(scenario())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "closing the connection" in warnings[0].getMessage()


def test_a_stalled_answer_to_an_acks_0_request_closes_at_the_request_timeout(
    run: Runner[None],
) -> None:
    # Some brokers (Tansu, librdkafka's mock) answer acks=0 requests, so bytes may come with
    # nothing in flight; the rest of their frame must come within request_timeout_ms.
    async def scenario() -> None:
        clock = FakeClock()
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker, clock=clock, request_timeout_ms=1000)
            connection.send(EchoRequest(b"acks=0", respond=False))
            request = await broker.next_request()
            start = struct.pack(">ii", 100, request.correlation_id) + b"abc"
            request.writer.write(start)
            await _until(lambda: connection.receive_buffer_size() == len(start))
            assert connection.check_request_timeouts(clock.now + 0.999) is False
            assert connection.is_ready
            assert connection.check_request_timeouts(clock.now + 1.0) is True
            assert connection.closed and len(on_close.calls) == 1
            cause = on_close.calls[0][1]
            assert isinstance(cause, CorruptResponseError)
            assert "11 bytes of a frame" in str(cause) and "request_timeout_ms" in str(cause)
            assert connection.receive_buffer_size() == 0

    run(scenario())


def test_an_answer_to_an_acks_0_request_may_come_in_pieces(run: Runner[None]) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker, clock=clock, request_timeout_ms=1000)
            connection.send(EchoRequest(b"acks=0", respond=False))
            request = await broker.next_request()
            answer = frame(request.correlation_id, b"unexpected")
            request.writer.write(answer[:6])
            await _until(lambda: connection.receive_buffer_size() == 6)
            clock.now += 0.9
            request.writer.write(answer[6:])
            await _until(lambda: connection.receive_buffer_size() == 0)
            # The frame came whole within the timeout: nothing is left to time out.
            assert connection.check_request_timeouts(clock.now + 100) is False
            future = connection.send(EchoRequest(b"normal"))
            broker.reply(await broker.next_request(), b"expected")
            response = await asyncio.wait_for(future, PATIENCE)
            assert response is not None and response.payload == b"expected"
            assert connection.is_ready and on_close.calls == []
            connection.close()

    run(scenario())


def test_a_stalled_answer_closes_without_a_caller(run: Runner[None]) -> None:
    # Nobody calls check_request_timeouts (no batch is in flight with acks=0): the
    # connection's own timer closes it.
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker, request_timeout_ms=50)
            connection.send(EchoRequest(b"acks=0", respond=False))
            request = await broker.next_request()
            request.writer.write(struct.pack(">ii", 100, request.correlation_id))
            await on_close.wait_until(lambda: connection.closed)
            cause = on_close.calls[0][1]
            assert isinstance(cause, CorruptResponseError) and "request_timeout_ms" in str(cause)

    run(scenario())


def test_undecodable_response_fails_the_request_and_closes(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            connection, on_close, _ = await connected(broker)
            head = connection.send(MetadataRequest(topics=[]))
            second = connection.send(MetadataRequest(topics=[]))
            request = await broker.next_request()
            assert (request.api_key, request.version) == (ApiKey.METADATA, 8)
            broker.reply(request, b"\x00\x00\x00\x00\xff\xff")  # throttle, then a cut array
            error = await failure(head)
            assert isinstance(error, CorruptResponseError)
            assert "MetadataRequest v8" in str(error)
            other = await failure(second)
            assert type(other) is KafkaConnectionError and other.retriable
            assert isinstance(other.__cause__, CorruptResponseError)
            assert connection.closed and len(on_close.calls) == 1

    run(scenario())


def test_connect_to_a_refused_port_is_retriable(run: Runner[None], refused_port: int) -> None:
    async def scenario() -> None:
        on_close = Recorder()
        connection = BrokerConnection(
            3, HOST, refused_port, make_config(refused_port), on_close=on_close
        )
        with pytest.raises(KafkaConnectionError, match=f"node 3 .{HOST}:{refused_port}") as caught:
            await connection.connect()
        assert caught.value.retriable
        assert connection.closed and len(on_close.calls) == 1
        await connection.wait_closed()

    run(scenario())


# ---- the manager -------------------------------------------------------------------------


def test_exponential_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    backoff = ExponentialBackoff(100, 1000, rng=random.Random(7))
    for attempts, expected in enumerate([100, 200, 400, 800, 1000, 1000, 1000]):
        for _ in range(50):
            delay = backoff.backoff_ms(attempts)
            assert expected * 0.8 <= delay <= min(expected * 1.2, 1000)
    assert ExponentialBackoff(100, 1000, jitter=0).backoff_ms(40) == 1000
    assert ExponentialBackoff(50, 50).backoff_ms(10) == 50


def test_reconnect_backoff_grows(run: Runner[None], refused_port: int) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        changes = Recorder()
        config = make_config(refused_port, reconnect_backoff_ms=100, reconnect_backoff_max_ms=1000)
        manager = ConnectionManager(config, changes, clock=clock)
        delays = []
        for attempt in range(6):
            manager.ensure_connecting(-1, clock.now)
            assert manager.is_connecting(-1)
            await changes.wait_until(lambda: not manager.is_connecting(-1))
            assert manager.ready(-1) is None
            delay = manager.connection_delay(-1, clock.now)
            delays.append(delay)
            manager.ensure_connecting(-1, clock.now + delay / 2)  # still backing off
            assert not manager.is_connecting(-1)
            clock.now += delay
            assert manager.connection_delay(-1, clock.now) == 0
            assert len(changes.calls) == attempt + 1
        for delay, expected in zip(delays, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0], strict=True):
            assert expected * 0.8 <= delay <= min(expected * 1.2, 1.0)
        assert delays[:4] == sorted(delays[:4])
        await manager.close()

    run(scenario())


def test_manager_reports_failed_and_lost_connections(run: Runner[None], refused_port: int) -> None:
    # on_disconnect (the producer refreshes its metadata then) names the node of a failed
    # attempt and of a dropped connection, not of a connection closed on purpose.
    async def scenario() -> None:
        changes, disconnects = Recorder(), Recorder()
        async with FakeBroker() as two, FakeBroker() as three:
            manager = ConnectionManager(make_config(two.port), changes, on_disconnect=disconnects)
            manager.set_brokers(
                {1: (HOST, refused_port), 2: (HOST, two.port), 3: (HOST, three.port)}
            )
            manager.ensure_connecting(1, 0.0)
            manager.ensure_connecting(2, 0.0)
            manager.ensure_connecting(3, 0.0)
            await changes.wait_until(
                lambda: bool(manager.ready(2) and manager.ready(3)) and not manager.is_connecting(1)
            )
            assert disconnects.calls == [(1,)]
            two.writers[0].close()
            await disconnects.wait_until(lambda: len(disconnects.calls) == 2)
            assert disconnects.calls == [(1,), (2,)]
            third = manager.ready(3)
            assert third is not None
            manager.set_brokers({2: (HOST, two.port)})  # node 3 left: closed on purpose
            await manager.close()
            assert third.closed
            assert disconnects.calls == [(1,), (2,)]

    run(scenario())


def test_a_lost_broker_that_left_the_metadata_and_returned_is_said_to_be_back(
    run: Runner[None], caplog: pytest.LogCaptureFixture
) -> None:
    # A metadata refresh while a broker is down often leaves it out; when it returns at the
    # same address, its connection is "back", as for a broker that never left the metadata.
    async def scenario() -> None:
        caplog.set_level(logging.INFO, logger="aioproducer.net")
        changes = Recorder()
        async with FakeBroker() as two:
            manager = ConnectionManager(make_config(two.port), changes)
            manager.set_brokers({2: (HOST, two.port)})
            manager.ensure_connecting(2, 0.0)
            await changes.wait_until(lambda: manager.ready(2) is not None)
            two.writers[0].close()
            await changes.wait_until(
                lambda: any("; reconnecting" in r.getMessage() for r in caplog.records)
            )
            manager.set_brokers({})  # the refresh while it is down
            manager.set_brokers({2: (HOST, two.port)})
            manager.ensure_connecting(2, 0.0)
            await changes.wait_until(lambda: manager.ready(2) is not None)
            await manager.close()
        back = [r.getMessage() for r in caplog.records if "is back" in r.getMessage()]
        assert len(back) == 1 and back[0].startswith("connection to node 2 ("), back

    run(scenario())


def test_a_broker_that_leaves_the_metadata_before_its_socket_says_so_is_lost_once(
    run: Runner[None], caplog: pytest.LogCaptureFixture
) -> None:
    # A broker going down may leave a metadata answer before its own socket's end is read:
    # the loss is logged once, as when the socket tells first, and its return as "back".
    async def scenario() -> None:
        caplog.set_level(logging.INFO, logger="aioproducer.net")
        changes = Recorder()
        async with FakeBroker() as two:
            manager = ConnectionManager(make_config(two.port), changes)
            manager.set_brokers({2: (HOST, two.port)})
            manager.ensure_connecting(2, 0.0)
            await changes.wait_until(lambda: manager.ready(2) is not None)
            first = manager.ready(2)
            assert first is not None
            manager.set_brokers({})  # the refresh that leaves it out comes first
            assert first.closed
            two.writers[0].close()  # then its socket ends
            await asyncio.sleep(0.05)
            manager.set_brokers({2: (HOST, two.port)})
            manager.ensure_connecting(2, 0.0)
            await changes.wait_until(lambda: manager.ready(2) is not None)
            await manager.close()
        lost = [r for r in caplog.records if "; reconnecting" in r.getMessage()]
        assert len(lost) == 1, [r.getMessage() for r in lost]
        assert lost[0].getMessage().startswith("connection to node 2 (")
        assert "left the cluster metadata" in lost[0].getMessage()
        assert lost[0].levelno == logging.INFO  # nothing was in flight
        back = [r.getMessage() for r in caplog.records if "is back" in r.getMessage()]
        assert len(back) == 1 and back[0].startswith("connection to node 2 ("), back

    run(scenario())


def test_bootstrap_fails_over_to_the_second_server(run: Runner[None], refused_port: int) -> None:
    async def scenario() -> None:
        changes = Recorder()
        async with FakeBroker() as broker:
            manager = ConnectionManager(make_config([refused_port, broker.port]), changes)
            connection = await manager.bootstrap(deadline=time.monotonic() + 60)
            assert (connection.node_id, connection.port) == (-2, broker.port)
            assert manager.ready(-2) is connection
            assert manager.ready(-1) is None
            assert manager.least_loaded(0.0) is connection
            # The failed server backs off; asking again returns the live connection at once.
            assert await manager.bootstrap(deadline=0.0) is connection
            await manager.close()
            assert connection.closed

    run(scenario())


def test_bootstrap_gives_up_naming_the_servers(run: Runner[None], refused_port: int) -> None:
    async def scenario() -> None:
        with socket.socket() as other:
            other.bind((HOST, 0))
            other_port = other.getsockname()[1]
            manager = ConnectionManager(make_config([refused_port, other_port]), Recorder())
            with pytest.raises(KafkaConnectionError) as caught:
                await manager.bootstrap(deadline=0.0)  # past: one round, then give up
            message = str(caught.value)
            assert f"{HOST}:{refused_port}" in message and f"{HOST}:{other_port}" in message
            assert caught.value.retriable
            await manager.close()

    run(scenario())


def test_manager_connects_brokers_and_drops_the_ones_that_leave(run: Runner[None]) -> None:
    async def scenario() -> None:
        changes = Recorder()
        async with FakeBroker() as one, FakeBroker() as two:
            manager = ConnectionManager(make_config(one.port), changes)
            manager.set_brokers({1: (HOST, one.port), 2: (HOST, two.port)})
            manager.ensure_connecting(1, 0.0)
            manager.ensure_connecting(2, 0.0)
            manager.ensure_connecting(3, 0.0)  # unknown: ignored
            await changes.wait_until(lambda: bool(manager.ready(1) and manager.ready(2)))
            first, second = manager.ready(1), manager.ready(2)
            assert first is not None and second is not None
            pending = first.send(EchoRequest(b"x"))
            assert manager.least_loaded(0.0) is second
            loads = [second.send(EchoRequest(b"y")), second.send(EchoRequest(b"z"))]
            assert manager.least_loaded(0.0) is first
            manager.set_brokers({2: (HOST, two.port)})
            error = await failure(pending)
            assert type(error) is KafkaConnectionError and error.retriable
            assert "left the cluster" in str(error)
            assert manager.ready(1) is None and manager.ready(2) is second
            await manager.close()
            await manager.close()  # idempotent
            assert second.closed
            for future in loads:
                assert type(await failure(future)) is KafkaConnectionError
            manager.ensure_connecting(2, 0.0)
            assert not manager.is_connecting(2)

    run(scenario())


def test_manager_reconnects_after_a_drop_only_after_backoff(run: Runner[None]) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        changes = Recorder()
        async with FakeBroker() as broker:
            config = make_config(
                broker.port, reconnect_backoff_ms=100, reconnect_backoff_max_ms=1000
            )
            manager = ConnectionManager(config, changes, clock=clock)
            manager.set_brokers({1: (HOST, broker.port)})
            manager.ensure_connecting(1, clock.now)
            await changes.wait_until(lambda: manager.ready(1) is not None)
            broker.writers[0].close()
            await changes.wait_until(lambda: manager.ready(1) is None)
            delay = manager.connection_delay(1, clock.now)
            assert 0.08 <= delay <= 0.12  # the first step of the backoff
            manager.ensure_connecting(1, clock.now)
            assert not manager.is_connecting(1)
            clock.now += delay
            manager.ensure_connecting(1, clock.now)
            await changes.wait_until(lambda: manager.ready(1) is not None)
            assert manager.connection_delay(1, clock.now) == 0
            await manager.close()

    run(scenario())


def test_ensure_any_connecting_prefers_known_brokers(run: Runner[None], refused_port: int) -> None:
    async def scenario() -> None:
        changes = Recorder()
        async with FakeBroker() as broker:
            manager = ConnectionManager(make_config(refused_port), changes)
            assert manager.least_loaded(0.0) is None
            manager.set_brokers({5: (HOST, broker.port)})
            manager.ensure_any_connecting(0.0)
            assert manager.is_connecting(5) and not manager.is_connecting(-1)
            await changes.wait_until(lambda: manager.least_loaded(0.0) is not None)
            assert manager.least_loaded(0.0) is manager.ready(5)
            await manager.close()

    run(scenario())


# ---- every address a name resolves to (use_all_dns_ips) ----------------------------------


class FixedResolver:
    """Resolves any name to ``addresses`` (IPv4), counting the lookups."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)
        self.lookups = 0

    async def __call__(self, host: str, port: int) -> list[tuple[int, str]]:
        self.lookups += 1
        return [(int(socket.AF_INET), address) for address in self.addresses]


def test_an_address_that_drops_packets_costs_one_attempt_and_the_next_starts_past_it(
    run: Runner[None],
) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            with SilentAddress("127.0.0.2", broker.port):
                resolver = FixedResolver("127.0.0.2", HOST)
                addresses = ResolvedAddresses("brokers.test", broker.port, resolver)
                config = make_config(broker.port)
                first = BrokerConnection(1, "brokers.test", broker.port, config)
                started = time.monotonic()
                with pytest.raises(KafkaConnectionError) as caught:
                    await first.connect(400, addresses)
                waited = time.monotonic() - started
                # The attempt hung at the silent address until its setup timeout.
                assert 0.35 <= waited < PATIENCE, waited
                assert "at 127.0.0.2 within 400 ms" in str(caught.value)
                assert caught.value.retriable
                assert addresses.start == HOST
                # The next attempt starts at the address after it, and reaches the broker.
                second = BrokerConnection(1, "brokers.test", broker.port, config)
                await second.connect(400, addresses)
                assert second.is_ready and resolver.lookups == 1
                # A later attempt starts where the last one connected.
                assert addresses.start == HOST
                second.close()
                await second.wait_closed()
                # Forgotten (an established connection was lost): resolved anew, from the top.
                addresses.forget()
                third = BrokerConnection(1, "brokers.test", broker.port, config)
                with pytest.raises(KafkaConnectionError):
                    await third.connect(400, addresses)
                assert resolver.lookups == 2 and addresses.start == HOST

    run(scenario())


def test_a_refused_address_falls_through_to_the_next_within_one_attempt(
    run: Runner[None],
) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            # Nothing listens on 127.0.0.3 at the broker's port: refused at once.
            resolver = FixedResolver("127.0.0.3", HOST)
            addresses = ResolvedAddresses("brokers.test", broker.port, resolver)
            connection = BrokerConnection(1, "brokers.test", broker.port, make_config(broker.port))
            await connection.connect(PATIENCE * 1000, addresses)
            assert connection.is_ready
            assert addresses.start == HOST and resolver.lookups == 1
            connection.close()
            await connection.wait_closed()

    run(scenario())


def test_an_address_that_fails_the_handshake_costs_one_attempt(run: Runner[None]) -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:

            async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writer.close()

            # 127.0.0.3 takes connections and hangs up at once (a load balancer with nothing
            # behind it): TCP succeeds there, the handshake does not.
            hanging_up = await asyncio.start_server(hang_up, "127.0.0.3", broker.port)
            try:
                resolver = FixedResolver("127.0.0.3", HOST)
                addresses = ResolvedAddresses("brokers.test", broker.port, resolver)
                config = make_config(broker.port)
                first = BrokerConnection(1, "brokers.test", broker.port, config)
                with pytest.raises(KafkaConnectionError) as caught:
                    await first.connect(PATIENCE * 1000, addresses)
                assert caught.value.retriable
                assert addresses.start == HOST
                second = BrokerConnection(1, "brokers.test", broker.port, config)
                await second.connect(PATIENCE * 1000, addresses)
                assert second.is_ready and second.address == HOST
                assert resolver.lookups == 1
                second.close()
                await second.wait_closed()
            finally:
                hanging_up.close()

    run(scenario())


def test_every_refused_address_is_named(run: Runner[None]) -> None:
    async def scenario() -> None:
        with socket.socket() as bound:
            bound.bind(("127.0.0.3", 0))
            port = bound.getsockname()[1]
            addresses = ResolvedAddresses(
                "brokers.test", port, FixedResolver("127.0.0.3", "127.0.0.4")
            )
            connection = BrokerConnection(1, "brokers.test", port, make_config(port))
            with pytest.raises(KafkaConnectionError) as caught:
                await connection.connect(PATIENCE * 1000, addresses)
            message = str(caught.value)
            assert "127.0.0.3" in message and "127.0.0.4" in message, message

    run(scenario())


def test_once_every_address_failed_the_name_is_resolved_again(run: Runner[None]) -> None:
    async def scenario() -> None:
        with socket.socket() as bound:
            bound.bind(("127.0.0.3", 0))
            port = bound.getsockname()[1]
            resolver = FixedResolver("127.0.0.3", "127.0.0.4")
            addresses = ResolvedAddresses("brokers.test", port, resolver)
            for attempt in (1, 2):
                connection = BrokerConnection(1, "brokers.test", port, make_config(port))
                with pytest.raises(KafkaConnectionError) as caught:
                    await connection.connect(PATIENCE * 1000, addresses)
                assert caught.value.retriable
                assert resolver.lookups == attempt and addresses.start is None
            # The name now resolves to a broker: the next attempt finds it.
            async with FakeBroker() as broker:
                resolver.addresses = [HOST]
                addresses.port = broker.port
                connection = BrokerConnection(1, "brokers.test", broker.port, make_config(port))
                await connection.connect(PATIENCE * 1000, addresses)
                assert connection.is_ready and resolver.lookups == 3
                connection.close()
                await connection.wait_closed()

    run(scenario())


# ---- a real broker -----------------------------------------------------------------------


def test_tansu_round_trip(run: Runner[None], tansu: EmbeddedBroker) -> None:
    async def scenario() -> None:
        config = ProducerConfig(bootstrap_servers=tansu.bootstrap_servers)
        connection = BrokerConnection(-1, tansu.host, tansu.port, config)
        await connection.connect()
        assert ApiKey.PRODUCE in connection.api_versions
        version = connection.negotiate(MetadataRequest)
        response = await asyncio.wait_for(connection.request(MetadataRequest(topics=[])), PATIENCE)
        assert isinstance(response, MetadataResponse)
        assert any(b.port == tansu.port for b in response.brokers), (version, response)
        connection.close()
        await connection.wait_closed()

    run(scenario())
