"""The Spark sink's exactly-once writer while Spark's input is slow, on a scripted broker (no
JVM): a task's input iterator may block for seconds (an upstream stage, a UDF), and what the
writer took before must go out meanwhile, not wait until the next rows come (nor reach its
delivery timeout if they come late).

- ``test_an_exactly_once_writer_sends_while_its_input_waits``: the first chunk is handed
  over, then the next read blocks for two seconds; by the end of that wait the broker has
  the first chunk's records (a Produce request arrived), and the transaction the writer
  prepares holds both chunks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.faults.checks import unique_topic
from tests.faults.scripted_broker import PRODUCE, TRANSACTION_API_VERSIONS, ScriptedCluster

pytest.importorskip("pyspark")

from aioproducer.integrations.spark.exactly_once import _produce_prepared
from aioproducer.integrations.spark.options import SinkOptions, _Layout
from aioproducer.integrations.spark.producers import _run

LAYOUT = _Layout(
    key=None, value="binary", topic=False, partition=False, headers=None, timestamp=None
)
WAIT = 2.0


async def test_an_exactly_once_writer_sends_while_its_input_waits() -> None:
    topic = unique_topic("spark-input-waits")
    cluster = ScriptedCluster(1, topics={topic: 1})
    cluster.broker(1).api_versions = dict(TRANSACTION_API_VERSIONS)
    seen_during_wait: list[int] = []

    def chunks() -> Iterator[dict[str, list[Any]]]:
        yield {"value": [b"first-%d" % i for i in range(100)]}
        # Spark's input is slow: the read blocks the thread that makes it.
        time.sleep(WAIT)
        seen_during_wait.append(len(cluster.requests_of(PRODUCE)))
        yield {"value": [b"second-%d" % i for i in range(100)]}

    async with cluster:
        sink = SinkOptions.parse(
            {
                "kafka.bootstrap.servers": cluster.bootstrap_servers,
                "topic": topic,
                "delivery.guarantee": "exactly_once",
                "kafka.linger.ms": "0",
            }
        )
        # A task runs the writer on an event loop of its own thread, as Spark's worker does.
        prepared, sent, already = await asyncio.wait_for(
            asyncio.to_thread(
                _run, _produce_prepared(sink, LAYOUT, chunks(), f"{topic}-tx", None)
            ),
            60,
        )
        assert (sent, already) == (200, False)
        assert prepared is not None
        assert seen_during_wait and seen_during_wait[0] >= 1, (
            "nothing reached the broker while the input waited"
        )
        assert cluster.values(topic, 0) == [b"first-%d" % i for i in range(100)] + [
            b"second-%d" % i for i in range(100)
        ]
