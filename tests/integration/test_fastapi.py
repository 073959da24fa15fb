"""The FastAPI integration in a real app, driven by TestClient (which runs the lifespan),
producing to Tansu and read back with confluent-kafka.

What is proved: the lifespan starts the producer before the first request and closes it
(delivering buffered records) on shutdown; handlers get it through the dependency;
background and fire-and-forget records arrive; failures are logged; and a missing lifespan
is a clear error, not an AttributeError.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi import BackgroundTasks, Depends, FastAPI, Request
from fastapi.testclient import TestClient

from aioproducer import Producer, ProducerState
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import KafkaConnectionError, RequestTimedOutError
from aioproducer.integrations.fastapi import (
    ProducerDep,
    ProducerLifespan,
    get_producer,
    kafka_lifespan,
    log_failure,
    send_and_forget,
)
from aioproducer.testing import InMemoryProducer
from tests.support.readback import read_back

TopicFactory = Callable[..., str]


def _app(bootstrap: str, topic: str, **options: Any) -> FastAPI:
    app = FastAPI(lifespan=kafka_lifespan(bootstrap_servers=bootstrap, **options))

    @app.post("/wait/{key}")
    async def wait(key: str, request: Request, producer: ProducerDep) -> dict[str, int]:
        metadata = await producer.send_and_wait(topic, await request.body(), key.encode())
        return {"partition": metadata.partition, "offset": metadata.offset}

    @app.post("/forget/{key}", status_code=202)
    async def forget(key: str, request: Request, producer: ProducerDep) -> None:
        await send_and_forget(producer, topic, await request.body(), key.encode())

    @app.post("/background", status_code=202)
    async def background(
        request: Request, tasks: BackgroundTasks, producer: ProducerDep
    ) -> None:
        tasks.add_task(producer.send_and_wait, topic, await request.body(), b"bg")

    @app.get("/state")
    async def state(producer: ProducerDep) -> dict[str, str]:
        return {"state": producer.state.value}

    return app


def test_lifespan_dependency_and_background_publishing(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=2)
    app = _app(tansu.bootstrap_servers, topic, linger_ms=5)
    with TestClient(app) as client:
        assert client.get("/state").json() == {"state": "running"}
        producer = app.state.producer
        answers = [client.post(f"/wait/w{i}", content=f"wait-{i}".encode()) for i in range(5)]
        for i in range(20):
            response = client.post(f"/forget/f{i}", content=f"forget-{i}".encode())
            assert response.status_code == 202
        assert client.post("/background", content=b"background").status_code == 202
    assert producer.state is ProducerState.CLOSED
    assert not hasattr(app.state, "producer")

    records = read_back(tansu.bootstrap_servers, topic, expected=26)
    by_value = {r.value: r for r in records}
    assert len(records) == 26
    assert set(by_value) == (
        {f"wait-{i}".encode() for i in range(5)}
        | {f"forget-{i}".encode() for i in range(20)}
        | {b"background"}
    )
    for i, response in enumerate(answers):
        record = by_value[f"wait-{i}".encode()]
        assert response.json() == {"partition": record.partition, "offset": record.offset}
        assert record.key == f"w{i}".encode()
    assert by_value[b"background"].key == b"bg"


def test_shutdown_delivers_what_requests_left_buffered(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=2)
    # A linger far longer than the test: only the lifespan's close() can send these.
    app = _app(tansu.bootstrap_servers, topic, linger_ms=600_000)
    with TestClient(app) as client:
        for i in range(50):
            assert client.post(f"/forget/f{i}", content=f"{i}".encode()).status_code == 202
        assert app.state.producer.metrics()["record-send-total"] == 0
    records = read_back(tansu.bootstrap_servers, topic, expected=50)
    assert sorted(int(r.value or b"") for r in records) == list(range(50))


def test_custom_lifespan_runs_inside_and_sees_the_producer(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=1)
    events: list[str] = []

    @asynccontextmanager
    async def mine(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        producer: Producer = app.state.orders_producer
        await producer.send_and_wait(topic, b"app started")
        events.append("started")
        yield {"greeting": "hello"}
        await producer.send_and_wait(topic, b"app stopping")
        events.append("stopped")

    lifespan = ProducerLifespan(
        {"bootstrap.servers": tansu.bootstrap_servers},
        lifespan=mine,
        state_key="orders_producer",
    )
    app = FastAPI(lifespan=lifespan)

    @app.get("/")
    async def index(
        # The default form: an Annotated[...] naming a local would not resolve here.
        request: Request,
        producer: Producer = Depends(lifespan.dependency),  # noqa: B008
    ) -> dict[str, str]:
        return {"greeting": request.state.greeting, "state": producer.state.value}

    with TestClient(app) as client:
        assert client.get("/").json() == {"greeting": "hello", "state": "running"}
    assert events == ["started", "stopped"]
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert [r.value for r in records] == [b"app started", b"app stopping"]


def test_without_the_lifespan_the_dependency_says_what_is_wrong() -> None:
    app = FastAPI()

    @app.get("/")
    async def index(producer: ProducerDep) -> None:  # pragma: no cover - never reached
        pass

    client = TestClient(app, raise_server_exceptions=True)
    with pytest.raises(RuntimeError, match="kafka_lifespan"):
        client.get("/")


@pytest.fixture
def silent_listener() -> Iterator[socket.socket]:
    """A listening socket that never answers: a producer pointed at it would connect (the
    kernel completes the handshake) and then wait; ``accepted(listener)`` says if it did."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    try:
        yield listener
    finally:
        listener.close()


def _address(listener: socket.socket) -> str:
    host, port = listener.getsockname()
    return f"{host}:{port}"


def _connections(listener: socket.socket) -> int:
    count = 0
    while True:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


def test_an_in_memory_producer_override_keeps_the_lifespan_from_connecting(
    silent_listener: socket.socket,
) -> None:
    app = _app(_address(silent_listener), "orders", max_block_ms=2_000)
    producer = InMemoryProducer(topics={"orders": 3})
    app.dependency_overrides[get_producer] = lambda: producer
    with TestClient(app) as client:
        assert client.get("/state").json() == {"state": "running"}
        answer = client.post("/wait/w1", content=b"waited").json()
        assert client.post("/forget/f1", content=b"forgotten").status_code == 202
        assert client.post("/background", content=b"background").status_code == 202
        assert app.state.producer is producer
    assert _connections(silent_listener) == 0
    # The lifespan started the producer it was given, and closed it on shutdown.
    assert producer.state is ProducerState.CLOSED
    assert not hasattr(app.state, "producer")
    records = {r.value: r for r in producer.records("orders")}
    assert set(records) == {b"waited", b"forgotten", b"background"}
    waited = records[b"waited"]
    assert answer == {"partition": waited.partition, "offset": waited.offset}
    assert waited.key == b"w1" and records[b"background"].key == b"bg"


def test_a_producer_factory_runs_the_app_on_an_in_memory_producer(
    silent_listener: socket.socket,
) -> None:
    seen: list[Producer] = []

    @asynccontextmanager
    async def mine(app: FastAPI) -> AsyncIterator[None]:
        seen.append(app.state.producer)
        await app.state.producer.send_and_wait("events", {"event": "started"})
        yield

    app = FastAPI(
        lifespan=kafka_lifespan(
            bootstrap_servers=_address(silent_listener),
            value_serializer=lambda value: json.dumps(value).encode(),
            producer_factory=InMemoryProducer,
            lifespan=mine,
        )
    )

    @app.post("/events/{name}")
    async def event(name: str, producer: ProducerDep) -> dict[str, int]:
        metadata = await producer.send_and_wait("events", {"event": name})
        return {"offset": metadata.offset}

    with TestClient(app) as client:
        assert client.post("/events/clicked").json() == {"offset": 1}
    assert _connections(silent_listener) == 0
    [producer] = seen
    assert isinstance(producer, InMemoryProducer)
    assert [r.value for r in producer.records("events")] == [
        b'{"event": "started"}',
        b'{"event": "clicked"}',
    ]


def test_the_dependency_can_be_overridden_by_any_fake(silent_listener: socket.socket) -> None:
    class Fake:
        sent: list[bytes] = []

        async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> Any:
            self.sent.append(value)
            return type("Meta", (), {"partition": 0, "offset": 41})()

    app = _app(_address(silent_listener), "unused", max_block_ms=2_000)
    app.dependency_overrides[get_producer] = Fake
    with TestClient(app) as client:
        assert client.post("/wait/k", content=b"v").json() == {"partition": 0, "offset": 41}
    assert Fake.sent == [b"v"]
    assert _connections(silent_listener) == 0


def test_an_override_of_a_custom_state_key_that_needs_the_request(
    silent_listener: socket.socket,
) -> None:
    producer = InMemoryProducer()
    lifespan = ProducerLifespan(
        bootstrap_servers=_address(silent_listener), max_block_ms=2_000, state_key="audit"
    )
    app = FastAPI(lifespan=lifespan)

    @app.post("/audit")
    async def audit(
        producer: Producer = Depends(lifespan.dependency),  # noqa: B008
    ) -> dict[str, str]:
        await producer.send_and_wait("audit", b"entry")
        return {"state": producer.state.value}

    async def per_request(request: Request) -> Producer:
        # Needs the request: the lifespan cannot call it, and leaves it to FastAPI.
        if producer.state is ProducerState.CREATED:
            await producer.start()
        return producer

    app.dependency_overrides[lifespan.dependency] = per_request
    with TestClient(app) as client:
        assert client.post("/audit").json() == {"state": "running"}
        assert not hasattr(app.state, "audit")
    assert _connections(silent_listener) == 0
    assert [r.value for r in producer.records("audit")] == [b"entry"]

    # Nor is one whose parameters FastAPI fills through their defaults.
    def settings() -> str:
        return "audit-topic"

    def with_a_dependency(topic: str = Depends(settings)) -> Producer:
        assert topic == "audit-topic"  # called by FastAPI, never by the lifespan
        return producer

    second = FastAPI(lifespan=lifespan)
    second.post("/audit")(audit)
    second.dependency_overrides[lifespan.dependency] = with_a_dependency
    with TestClient(second) as client:
        assert client.post("/audit").json() == {"state": "running"}
    assert _connections(silent_listener) == 0
    assert len(producer.records("audit")) == 2


def test_a_broker_that_does_not_answer_stops_startup() -> None:
    app = _app("127.0.0.1:1", "unused", max_block_ms=500)
    with pytest.raises((KafkaConnectionError, RequestTimedOutError)), TestClient(app):
        pass  # pragma: no cover - startup fails


async def test_log_failure_reports_failed_records(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    failed: asyncio.Future[None] = loop.create_future()
    failed.set_exception(KafkaConnectionError("broker gone"))
    succeeded: asyncio.Future[None] = loop.create_future()
    succeeded.set_result(None)
    with caplog.at_level(logging.ERROR, logger="aioproducer.integrations.fastapi"):
        log_failure(failed)
        log_failure(succeeded)
    assert len(caplog.records) == 1
    assert "broker gone" in caplog.records[0].getMessage()
