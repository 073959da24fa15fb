"""The FastAPI integration in a real app, driven by TestClient (which runs the lifespan),
producing to Tansu and read back with confluent-kafka.

What is proved: the lifespan starts the producer before the first request and closes it
(delivering buffered records) on shutdown; handlers get it through the dependency;
background and fire-and-forget records arrive; failures are logged; and a missing lifespan
is a clear error, not an AttributeError.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
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


def test_the_dependency_can_be_overridden() -> None:
    class Fake:
        sent: list[bytes] = []

        async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> Any:
            self.sent.append(value)
            return type("Meta", (), {"partition": 0, "offset": 41})()

    app = _app("127.0.0.1:1", "unused")
    app.router.lifespan_context = _no_lifespan
    app.dependency_overrides[get_producer] = Fake
    with TestClient(app) as client:
        assert client.post("/wait/k", content=b"v").json() == {"partition": 0, "offset": 41}
    assert Fake.sent == [b"v"]


@asynccontextmanager
async def _no_lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield


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
