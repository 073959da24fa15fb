"""A FastAPI service that publishes to Kafka: one producer for the app's whole life.

Run it in-process (an embedded broker, a few requests through FastAPI's TestClient, which
runs the lifespan like a server does):

    python examples/fastapi_app.py [--bootstrap-servers HOST:PORT] [--topic NAME]

Or serve it (needs uvicorn) against your cluster:

    cd examples && KAFKA_BOOTSTRAP_SERVERS=localhost:9092 uvicorn fastapi_app:app
"""

from __future__ import annotations

import os

from fastapi import BackgroundTasks, FastAPI
from pydantic import BaseModel

from aioproducer.integrations.fastapi import ProducerDep, kafka_lifespan, send_and_forget


class Order(BaseModel):
    """An order, as clients post it."""

    order_id: str
    customer: str
    amount_cents: int


def create_app(bootstrap_servers: str, topic: str) -> FastAPI:
    """The app; its lifespan starts the producer before the first request and closes it
    (delivering whatever is still buffered) on shutdown."""
    app = FastAPI(
        title="orders",
        lifespan=kafka_lifespan(bootstrap_servers=bootstrap_servers, linger_ms=5, acks="all"),
    )

    @app.post("/orders")
    async def create_order(order: Order, producer: ProducerDep) -> dict[str, int]:
        # Waits for the broker: the client learns the order is durable. Keyed by customer,
        # so one customer's orders stay in one partition, in order.
        metadata = await producer.send_and_wait(
            topic, order.model_dump_json().encode(), key=order.customer.encode()
        )
        return {"partition": metadata.partition, "offset": metadata.offset}

    @app.post("/clicks", status_code=202)
    async def record_click(page: str, producer: ProducerDep) -> None:
        # Fire and forget: returns once the record is buffered; a failure is logged.
        await send_and_forget(producer, topic, page.encode(), headers=[("kind", b"click")])

    @app.post("/audit", status_code=202)
    async def audit(message: str, tasks: BackgroundTasks, producer: ProducerDep) -> None:
        # Runs after the response is sent, on the same event loop.
        tasks.add_task(producer.send_and_wait, topic, message.encode())

    return app


# For `uvicorn fastapi_app:app`: building the app connects nothing; the lifespan does.
app = create_app(
    os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
    os.environ.get("KAFKA_TOPIC", "orders"),
)


def main(bootstrap_servers: str, topic: str) -> None:
    """Send a few requests through the app, in-process."""
    from fastapi.testclient import TestClient

    demo = create_app(bootstrap_servers, topic)
    with TestClient(demo) as client:  # entering runs the lifespan: the producer starts
        for n in range(3):
            order = {"order_id": f"o-{n}", "customer": f"c-{n % 2}", "amount_cents": 100 * n}
            print("POST /orders ->", client.post("/orders", json=order).json())
        print("POST /clicks ->", client.post("/clicks", params={"page": "/home"}).status_code)
        print("POST /audit  ->", client.post("/audit", params={"message": "hi"}).status_code)
    print("shut down: the producer delivered everything and closed")


if __name__ == "__main__":
    from _broker import cluster

    with cluster("orders", "A FastAPI app that publishes to Kafka.") as (servers, topic_name):
        main(servers, topic_name)
