"""What an operator reads in the logs: each event once, at its level, naming the broker or
the topic, under the ``aioproducer`` logger hierarchy."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from aioproducer import Producer
from tests.support.readback import read_back

# Only there to turn a hang into a failure; never a measured threshold.
PATIENCE = 60.0


def _lines(caplog: pytest.LogCaptureFixture, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if needle in r.getMessage()]


async def _until(condition: Any) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), PATIENCE)


async def test_a_leader_move_and_a_lost_broker_are_logged_once_each(
    mock_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    topic = "logged-events"
    mock_cluster.create_topic(topic, 2)
    mock_cluster.partition_set_leader(topic, 0, 1)
    mock_cluster.partition_set_leader(topic, 1, 2)
    caplog.set_level(logging.DEBUG, logger="aioproducer")
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap_servers,
        retry_backoff_ms=20,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=100,
        linger_ms=0,
    ) as producer:
        await (await producer.send(topic, b"first", partition=0))
        # The leader of partition 0 moves: the old leader refuses the next batch
        # (NOT_LEADER_OR_FOLLOWER), the producer refreshes its metadata and retries.
        mock_cluster.partition_set_leader(topic, 0, 3)
        await asyncio.wait_for(await producer.send(topic, b"moved", partition=0), PATIENCE)
        # Broker 3 goes down while a record waits for it, then comes back.
        mock_cluster.broker_set_down(3)
        pending = await producer.send(topic, b"while down", partition=0)
        await _until(lambda: _lines(caplog, "; reconnecting"))
        mock_cluster.broker_set_up(3)
        await asyncio.wait_for(pending, PATIENCE)

    # The move from 1 to 3, learnt from the old leader's answer (KIP-951) or from a
    # metadata refresh: logged once. (Broker 3 going down may show in the metadata too:
    # "0: 3 -> none", then "0: none -> 3", each once.)
    moved = [
        r
        for r in _lines(caplog, "moved")
        if f"{topic}-0 moved from broker 1 to 3" in r.getMessage() or "0: 1 -> 3" in r.getMessage()
    ]
    assert len(moved) == 1, [r.getMessage() for r in _lines(caplog, "moved")]
    assert moved[0].levelno == logging.INFO and moved[0].name == "aioproducer.metadata"
    changes = [r.getMessage() for r in _lines(caplog, "moved")]
    assert len(changes) == len(set(changes)), changes

    lost = _lines(caplog, "; reconnecting")
    assert len(lost) == 1, [r.getMessage() for r in lost]
    assert lost[0].levelno in (logging.INFO, logging.WARNING)
    back = _lines(caplog, "is back")
    assert len(back) == 1 and back[0].levelno == logging.INFO
    # Both name the broker, the same way.
    assert lost[0].getMessage().startswith("connection to node 3 (")
    assert lost[0].getMessage().split(" lost")[0] == back[0].getMessage().split(" is back")[0]

    first_id = _lines(caplog, "cluster id ")
    assert len(first_id) == 1 and first_id[0].levelno == logging.INFO

    stored = read_back(mock_cluster.bootstrap_servers, topic, expected=3)
    assert sorted(r.value for r in stored) == [b"first", b"moved", b"while down"]
