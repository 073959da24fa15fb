"""A FastAPI endpoint that publishes its request model through a Schema Registry.

The model is the schema: ``JsonSchemaSerializer.for_model`` registers its JSON Schema
under ``{topic}-value`` with the first record and writes each request body in the
registry's wire format, which consumers in any language decode. Needs a registry
(Confluent Schema Registry, Apicurio, Karapace) at ``SCHEMA_REGISTRY_URL``
(``http://localhost:8081`` by default) and ``pip install 'aioproducer[fastapi,schema-registry]'``:

    SCHEMA_REGISTRY_URL=http://localhost:8081 \\
        python examples/fastapi_schema_registry.py [--bootstrap-servers HOST:PORT] [--topic NAME]
"""

from __future__ import annotations

import os

from fastapi import FastAPI
from pydantic import BaseModel

from aioproducer.integrations.fastapi import ProducerDep, kafka_lifespan
from aioproducer.schema_registry import JsonSchemaSerializer, SchemaRegistryClient


class Signup(BaseModel):
    """A signup, as clients post it: the schema of the topic's values."""

    email: str
    plan: str = "free"
    seats: int = 1


def create_app(bootstrap_servers: str, topic: str, registry_url: str) -> FastAPI:
    """The app: its lifespan starts a producer whose values are Signups in the registry's
    wire format."""
    registry = SchemaRegistryClient(registry_url)
    app = FastAPI(
        title="signups",
        lifespan=kafka_lifespan(
            bootstrap_servers=bootstrap_servers,
            key_serializer=str.encode,
            value_serializer=JsonSchemaSerializer.for_model(registry, Signup),
        ),
    )

    @app.post("/signups")
    async def signup(body: Signup, producer: ProducerDep) -> dict[str, int]:
        # The first request waits (within max_block_ms) for the schema's id; the others
        # are written from the serializer's cache, with no request to the registry.
        metadata = await producer.send_and_wait(topic, body, key=body.email)
        return {"partition": metadata.partition, "offset": metadata.offset}

    return app


def main(bootstrap_servers: str, topic: str) -> None:
    """Send a few requests through the app, in-process."""
    from fastapi.testclient import TestClient

    url = os.environ.get("SCHEMA_REGISTRY_URL", "http://localhost:8081")
    with TestClient(create_app(bootstrap_servers, topic, url)) as client:
        for n, plan in enumerate(["free", "team", "team"]):
            body = {"email": f"user{n}@example.com", "plan": plan, "seats": 1 + 4 * n}
            print("POST /signups ->", client.post("/signups", json=body).json())
        refused = client.post("/signups", json={"plan": "team"})  # no email: FastAPI says 422
        print("POST /signups without an email ->", refused.status_code)
    print(f"published 3 signups as JSON Schema records under subject {topic}-value")


if __name__ == "__main__":
    from _broker import cluster

    with cluster("signups", "A FastAPI app that publishes through a Schema Registry.") as (
        servers,
        topic_name,
    ):
        main(servers, topic_name)
