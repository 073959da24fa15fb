"""Trouble a new user runs into first is loud and early, and no record is lost without a
word: addresses that do not resolve, ports where no Kafka listens, topics that do not exist,
and a producer the program forgets to close."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import (
    ClusterAuthorizationFailedError,
    ConfigurationError,
    CoordinatorLoadInProgressError,
    KafkaConnectionError,
    ProducerClosedError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from aioproducer.protocol.api import ApiKey
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.sync import SyncProducer
from tests.support.readback import read_back

UNKNOWN_TOPIC_OR_PART = 3

# Only there to turn a hang into a failure; never a measured threshold.
PATIENCE = 30.0

_counter = iter(range(1_000_000))


def _free_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.asynccontextmanager
async def _server(reply: bytes, *, hang_up: bool) -> AsyncIterator[str]:
    """A port that accepts, sends ``reply`` (nothing Kafka would send), then hangs up, or
    keeps the connection open and reads nothing more."""
    held: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if reply:
            writer.write(reply)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        if hang_up:
            writer.close()
        else:
            held.append(writer)

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


_HTTP_REPLY = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def _warnings_at_least(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def _assert_no_internal_node_ids(text: str) -> None:
    # Bootstrap servers have node ids -1, -2, ... inside; users know them by address.
    assert "node -" not in text, text


# ---- addresses -------------------------------------------------------------------------------


async def test_bootstrap_servers_that_do_not_resolve_are_refused_at_once() -> None:
    producer = Producer(
        bootstrap_servers="no-such-host.invalid:9092,other-missing-host.invalid",
        max_block_ms=60_000,
    )
    with pytest.raises(ConfigurationError) as info:
        # Far below max_block_ms: refused without waiting for connection attempts.
        await asyncio.wait_for(producer.start(), PATIENCE)
    message = str(info.value)
    assert "no resolvable bootstrap server" in message
    assert "no-such-host.invalid:9092" in message
    assert "other-missing-host.invalid:9092" in message
    assert producer.state.value == "closed"


async def test_one_resolvable_bootstrap_server_is_enough(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The resolvable one refuses connections: the error is about connecting, not the name.
    refused = f"127.0.0.1:{_free_port()}"
    producer = Producer(
        bootstrap_servers=f"no-such-host.invalid:9092,{refused}",
        max_block_ms=1500,
        reconnect_backoff_ms=50,
    )
    with (
        caplog.at_level(logging.WARNING, logger="aioproducer"),
        pytest.raises(KafkaConnectionError),
    ):
        await asyncio.wait_for(producer.start(), PATIENCE)
    unresolved = [r for r in caplog.records if "no-such-host.invalid:9092" in r.getMessage()]
    # Said once, with the name, though every round tries it again.
    assert len(unresolved) == 1, [r.getMessage() for r in unresolved]
    assert "does not resolve" in unresolved[0].getMessage()


@pytest.mark.parametrize("server", ["refused", "closes at once", "answers HTTP", "garbage"])
async def test_a_port_without_kafka_warns_once_and_the_error_says_what_was_tried(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        if server == "refused":
            address = f"127.0.0.1:{_free_port()}"
        elif server == "closes at once":
            address = await stack.enter_async_context(_server(b"", hang_up=True))
        elif server == "answers HTTP":
            address = await stack.enter_async_context(_server(_HTTP_REPLY, hang_up=True))
        else:  # a size prefix of gigabytes, and the connection left open
            address = await stack.enter_async_context(_server(_HTTP_REPLY, hang_up=False))
        producer = Producer(bootstrap_servers=address, max_block_ms=1500, reconnect_backoff_ms=20)
        with (
            caplog.at_level(logging.DEBUG, logger="aioproducer"),
            pytest.raises(KafkaConnectionError) as info,
        ):
            await asyncio.wait_for(producer.start(), PATIENCE)

    message = str(info.value)
    assert f"tried {address}" in message
    assert "max_block_ms (1500 ms)" in message
    for cause in ("nothing listens", "not a Kafka listener", "security_protocol is PLAINTEXT"):
        assert cause in message, message
    _assert_no_internal_node_ids(message)

    loud = [r for r in _warnings_at_least(caplog) if address in r.getMessage()]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    assert f"bootstrap server {address}" in loud[0].getMessage()
    # It kept trying: the later failures are there, at DEBUG.
    quiet = [r for r in caplog.records if r.levelno == logging.DEBUG and address in r.getMessage()]
    assert quiet
    for record in _warnings_at_least(caplog):
        _assert_no_internal_node_ids(record.getMessage())


async def test_a_port_that_never_answers_is_named_in_the_error() -> None:
    async with _server(b"", hang_up=False) as address:
        producer = Producer(bootstrap_servers=address, max_block_ms=1500)
        with pytest.raises(KafkaConnectionError) as info:
            await asyncio.wait_for(producer.start(), PATIENCE)
    message = str(info.value)
    waiting = "connected, but the first request (ApiVersions) has no answer yet"
    assert f"tried {address}: {address}: {waiting}" in message, message
    assert "not a Kafka listener" in message
    _assert_no_internal_node_ids(message)


def test_sync_producer_is_refused_at_construction(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigurationError) as info:
        SyncProducer(bootstrap_servers="no-such-host.invalid")
    assert "no-such-host.invalid:9092" in str(info.value)
    address = f"127.0.0.1:{_free_port()}"
    with (
        caplog.at_level(logging.WARNING, logger="aioproducer"),
        pytest.raises(KafkaConnectionError) as refused,
    ):
        SyncProducer(bootstrap_servers=address, max_block_ms=1000, reconnect_backoff_ms=20)
    assert f"tried {address}" in str(refused.value)
    assert len([r for r in caplog.records if address in r.getMessage()]) == 1


async def test_a_cluster_that_went_away_is_named_in_the_send_error(
    mock_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        max_block_ms=1500,
        reconnect_backoff_ms=20,
        retry_backoff_ms=20,
    ) as producer:
        for broker in (1, 2, 3):
            mock_cluster.broker_set_down(broker)
        with (
            caplog.at_level(logging.WARNING, logger="aioproducer"),
            pytest.raises(UnknownTopicOrPartitionError) as info,
        ):
            await asyncio.wait_for(producer.send(f"never-{next(_counter)}", b"x"), PATIENCE)
        for broker in (1, 2, 3):
            mock_cluster.broker_set_up(broker)
    message = str(info.value)
    assert "max_block_ms" in message
    assert "no broker could be reached" in message, message
    assert "Likely causes" in message
    _assert_no_internal_node_ids(message)
    for record in _warnings_at_least(caplog):
        _assert_no_internal_node_ids(record.getMessage())


# ---- topics ----------------------------------------------------------------------------------


async def test_a_topic_that_does_not_exist_is_reported_once_and_early(
    mock_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"absent-{next(_counter)}"
    # The mock creates topics on demand; this one answers UNKNOWN_TOPIC_OR_PARTITION.
    mock_cluster.topic_set_error(topic, UNKNOWN_TOPIC_OR_PART)

    def reports() -> list[logging.LogRecord]:
        return [r for r in _warnings_at_least(caplog) if repr(topic) in r.getMessage()]

    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers, max_block_ms=60_000, retry_backoff_ms=10
    ) as producer:
        with caplog.at_level(logging.WARNING, logger="aioproducer"):
            # The wait goes on (Java semantics: up to max_block_ms), but the warning comes
            # with the first answer, long before.
            waiting = asyncio.ensure_future(producer.partitions_for(topic))
            await asyncio.wait_for(_until(lambda: bool(reports())), PATIENCE)
            assert not waiting.done()
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting

        short = Producer(
            bootstrap_servers=mock_cluster.bootstrap_servers,
            max_block_ms=1000,
            retry_backoff_ms=10,
        )
        await short.start()
        try:
            with (
                caplog.at_level(logging.WARNING, logger="aioproducer"),
                pytest.raises(UnknownTopicOrPartitionError, match="max_block_ms"),
            ):
                await asyncio.wait_for(short.send(topic, b"x"), PATIENCE)
                with pytest.raises(UnknownTopicOrPartitionError, match="max_block_ms"):
                    await asyncio.wait_for(short.partitions_for(topic), PATIENCE)
        finally:
            await short.close()
    # Once per producer, though each asked many times.
    assert len(reports()) == 2, [r.getMessage() for r in reports()]
    assert "does not exist" in reports()[0].getMessage()


# ---- a producer that is never closed ---------------------------------------------------------


@pytest.fixture
def capture_warnings() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _dropped_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, ResourceWarning) and "dropped undelivered" in str(w.message)
    ]


@pytest.mark.parametrize("ending", ["asyncio.run", "asyncio.run, producer kept", "loop closed"])
def test_records_left_in_an_unclosed_producer_are_reported(
    mock_cluster: Any,
    ending: str,
    caplog: pytest.LogCaptureFixture,
    capture_warnings: list[warnings.WarningMessage],
) -> None:
    topic = f"unclosed-{next(_counter)}"
    mock_cluster.create_topic(topic, partitions=1, replication_factor=1)
    kept: list[Producer] = []

    async def forget_to_close() -> None:
        # linger_ms keeps the records buffered when the coroutine returns.
        producer = Producer(bootstrap_servers=mock_cluster.bootstrap_servers, linger_ms=600_000)
        await producer.start()
        for i in range(3):
            await producer.send(topic, f"{i}".encode())
        if "kept" in ending:
            kept.append(producer)

    with caplog.at_level(logging.WARNING, logger="aioproducer"):
        if ending == "loop closed":
            loop = asyncio.new_event_loop()
            loop.run_until_complete(forget_to_close())
            loop.close()  # without cancelling the sender task
        else:
            asyncio.run(forget_to_close())
        kept.clear()
        gc.collect()

    logged = [r.getMessage() for r in caplog.records if "dropped undelivered" in r.getMessage()]
    assert len(logged) == 1, logged
    assert logged[0].startswith("3 records buffered in <Producer")
    assert "await producer.close()" in logged[0]
    assert "async with Producer(...)" in logged[0]
    assert [r.levelno for r in caplog.records if "dropped undelivered" in r.getMessage()] == [
        logging.WARNING
    ]
    assert _dropped_warnings(capture_warnings) == logged


@pytest.mark.parametrize("case", ["closed", "nothing sent", "all delivered", "never started"])
def test_a_producer_with_nothing_to_lose_is_silent(
    mock_cluster: Any,
    case: str,
    caplog: pytest.LogCaptureFixture,
    capture_warnings: list[warnings.WarningMessage],
) -> None:
    topic = f"quiet-{next(_counter)}"
    mock_cluster.create_topic(topic, partitions=1, replication_factor=1)

    async def main() -> None:
        producer = Producer(bootstrap_servers=mock_cluster.bootstrap_servers, linger_ms=1)
        if case == "never started":
            return
        await producer.start()
        if case == "all delivered":
            await producer.send_and_wait(topic, b"x")
        elif case == "closed":
            await producer.send(topic, b"x")
            await producer.close()

    with caplog.at_level(logging.WARNING, logger="aioproducer"):
        asyncio.run(main())
        gc.collect()
    assert not [r for r in caplog.records if "dropped undelivered" in r.getMessage()]
    assert not _dropped_warnings(capture_warnings)


async def test_start_retries_a_passing_producer_id_error_and_fails_on_a_lasting_one(
    mock_cluster: Any,
) -> None:
    # start() waits for the sender's own first InitProducerId: an error worth retrying is
    # retried within max_block_ms, a refusal for good fails start() with the broker's error
    # and leaves the producer closed.
    topic = f"fail-fast-pid-{next(_counter)}"
    mock_cluster.create_topic(topic, 1)
    mock_cluster.push_request_errors(
        ApiKey.INIT_PRODUCER_ID,
        [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE],
    )
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers, retry_backoff_ms=20
    ) as producer:
        await producer.send(topic, b"after two refusals")
    assert [r.value for r in read_back(mock_cluster.bootstrap_servers, topic, expected=1)] == [
        b"after two refusals"
    ]

    mock_cluster.push_request_errors(
        ApiKey.INIT_PRODUCER_ID, [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    )
    refused = Producer(bootstrap_servers=mock_cluster.bootstrap_servers, max_block_ms=60_000)
    with pytest.raises(ClusterAuthorizationFailedError):
        await asyncio.wait_for(refused.start(), PATIENCE)
    assert refused.state.value == "closed"
    with pytest.raises(ProducerClosedError):
        await refused.send(topic, b"never")


async def test_start_that_runs_out_of_time_says_what_it_waited_for_and_why(
    mock_cluster: Any,
) -> None:
    mock_cluster.push_request_errors(
        ApiKey.INIT_PRODUCER_ID, [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 1000
    )
    producer = Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers, max_block_ms=1500, retry_backoff_ms=50
    )
    with pytest.raises(RequestTimedOutError) as raised:
        await asyncio.wait_for(producer.start(), PATIENCE)
    message = str(raised.value)
    assert "did not get a producer id" in message and "max_block_ms (1500 ms)" in message
    assert mock_cluster.bootstrap_servers.split(",")[0] in message
    assert isinstance(raised.value.__cause__, CoordinatorLoadInProgressError)
    assert producer.state.value == "closed"


async def test_start_with_max_block_ms_zero_still_gets_its_first_answers(tansu: Any) -> None:
    # As each bootstrap server gets one whole attempt with no time left, the first
    # Metadata and InitProducerId answers get one request's time.
    async with Producer(bootstrap_servers=tansu.bootstrap_servers, max_block_ms=0) as producer:
        assert producer.state.value == "running"
