"""A FastAPI service that publishes to Kafka and serves its producer's metrics to Prometheus.

The lifespan starts the producer and registers it with aioproducer's Prometheus collector;
``GET /metrics`` serves the registry in Prometheus's text format, read at each scrape. Needs
the ``fastapi`` and ``prometheus`` extras.

Run it in-process (an embedded broker, a few requests and a scrape through FastAPI's
TestClient, which runs the lifespan like a server does):

    python examples/fastapi_prometheus.py [--bootstrap-servers HOST:PORT] [--topic NAME]

Or serve it (needs uvicorn) against your cluster, and point Prometheus at /metrics:

    cd examples && KAFKA_BOOTSTRAP_SERVERS=localhost:9092 uvicorn fastapi_prometheus:app
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from aioproducer.integrations import prometheus
from aioproducer.integrations.fastapi import ProducerDep, kafka_lifespan


class Order(BaseModel):
    """An order, as clients post it."""

    order_id: str
    customer: str


def create_app(
    bootstrap_servers: str, topic: str, registry: CollectorRegistry | None = None
) -> FastAPI:
    """The app: ``POST /orders`` publishes, ``GET /metrics`` is what Prometheus scrapes.
    ``registry``: where the producer's metrics go (a new one by default; pass
    ``prometheus_client.REGISTRY`` to serve them beside your process's other metrics)."""
    registry = registry if registry is not None else CollectorRegistry()

    @asynccontextmanager
    async def report_metrics(app: FastAPI) -> AsyncIterator[None]:
        # Runs inside kafka_lifespan: the producer has started and is in app.state.
        producer = app.state.producer
        with prometheus.registered(producer, registry):
            yield

    app = FastAPI(
        title="orders",
        lifespan=kafka_lifespan(
            bootstrap_servers=bootstrap_servers,
            client_id="orders-api",  # the client_id label of every sample
            linger_ms=5,
            lifespan=report_metrics,
        ),
    )

    # A route rather than app.mount("/metrics", make_asgi_app(...)): a mount answers
    # /metrics with a redirect to /metrics/, which not every scraper follows.
    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/orders")
    async def create_order(order: Order, producer: ProducerDep) -> dict[str, int]:
        metadata = await producer.send_and_wait(
            topic, order.model_dump_json().encode(), key=order.customer.encode()
        )
        return {"partition": metadata.partition, "offset": metadata.offset}

    return app


# For `uvicorn fastapi_prometheus:app`: building the app connects nothing; the lifespan does.
app = create_app(
    os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
    os.environ.get("KAFKA_TOPIC", "orders"),
)


def main(bootstrap_servers: str, topic: str) -> None:
    """Post a few orders through the app, in-process, then scrape /metrics as Prometheus
    does and show what it reads."""
    from fastapi.testclient import TestClient

    demo = create_app(bootstrap_servers, topic)
    with TestClient(demo) as client:
        for n in range(5):
            order = {"order_id": f"o-{n}", "customer": f"c-{n % 2}"}
            print("POST /orders ->", client.post("/orders", json=order).json())
        scrape = client.get("/metrics", follow_redirects=False)
        print("GET /metrics ->", scrape.status_code)
        delivered = 0.0
        for family in text_string_to_metric_families(scrape.text):
            if family.name in (
                "kafka_producer_topic_record_send",
                "kafka_producer_topic_record_error",
                "kafka_producer_node_request",
            ):
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        print(f"  {sample.name}{sample.labels} = {sample.value:g}")
                    if sample.name == "kafka_producer_topic_record_send_total":
                        delivered += sample.value if sample.labels["topic"] == topic else 0
    print(f"the scrape says {delivered:g} records reached {topic}")


if __name__ == "__main__":
    from _broker import cluster

    with cluster("orders", "A FastAPI app with Prometheus metrics.") as (servers, topic_name):
        main(servers, topic_name)
