"""connections_max_idle_ms on a real broker (Tansu): an idle connection is closed, and the
producer connects again when it has something to send."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aioproducer import Producer
from tests.support.readback import read_back


def _open_connections(producer: Producer) -> int:
    manager: Any = producer._connections
    nodes = [*manager._nodes.values(), *manager._bootstrap_nodes]
    return sum(1 for node in nodes if node.connection is not None and not node.connection.closed)


async def _until(condition: Any, limit: float = 20.0) -> None:
    # Generous: only turns a connection that is never closed into a failure.
    for _ in range(int(limit / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition did not hold in time")


async def test_an_idle_connection_is_closed_and_opened_again_when_needed(tansu: Any) -> None:
    topic = f"idle-{uuid.uuid4().hex[:10]}"
    tansu.create_topic(topic, partitions=1)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        connections_max_idle_ms=300,
        # Keep metadata refreshes from using the connection meanwhile.
        metadata_max_age_ms=600_000,
    ) as producer:
        await producer.send_and_wait(topic, b"before")
        assert _open_connections(producer) >= 1
        await _until(lambda: _open_connections(producer) == 0)
        await producer.send_and_wait(topic, b"after")
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=2)] == [
        b"before",
        b"after",
    ]


async def test_connections_stay_open_with_minus_one(tansu: Any) -> None:
    topic = f"idle-{uuid.uuid4().hex[:10]}"
    tansu.create_topic(topic, partitions=1)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, connections_max_idle_ms=-1
    ) as producer:
        await producer.send_and_wait(topic, b"x")
        opened = _open_connections(producer)
        await asyncio.sleep(1.0)
        assert _open_connections(producer) == opened >= 1
