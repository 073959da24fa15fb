"""Send Python objects as JSON with a key and a value serializer.

    python examples/serializers_json.py [--bootstrap-servers HOST:PORT] [--topic NAME]
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from _broker import cluster

from aioproducer import Producer


def to_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


async def main(bootstrap_servers: str, topic: str) -> None:
    producer = Producer(
        bootstrap_servers=bootstrap_servers,
        key_serializer=str.encode,  # keys are str
        value_serializer=to_json,  # values are anything json.dumps takes
    )
    await producer.start()
    try:
        events: list[dict[str, Any]] = [
            {"user": "ada", "action": "login", "ok": True},
            {"user": "grace", "action": "upload", "bytes": 2048},
            {"user": "ada", "action": "logout"},
        ]
        futures = [await producer.send(topic, event, key=event["user"]) for event in events]
        # No key: the key serializer is not called (a None key or value stays None).
        events.append({"action": "heartbeat"})
        futures.append(await producer.send(topic, events[-1]))
        for event, future in zip(events, futures, strict=True):
            metadata = await future
            print(f"{event['action']:>7}: partition {metadata.partition}, offset {metadata.offset}")
    finally:
        await producer.close()


if __name__ == "__main__":
    with cluster("json-events", "Send JSON values.") as (bootstrap_servers, topic):
        asyncio.run(main(bootstrap_servers, topic))
