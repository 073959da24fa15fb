"""The read-back oracle itself: it sees records beyond the ones expected, and corrupt
batches fail it."""

from __future__ import annotations

import uuid
from typing import Any

import confluent_kafka

from tests.support.readback import read_back


def _write(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value, partition=0)
        producer.flush(10)


def test_records_beyond_the_expected_ones_are_read_too(mock_cluster: Any) -> None:
    # A duplicate written after the expected records must reach the caller's count.
    topic = f"readback-{uuid.uuid4().hex[:8]}"
    mock_cluster.create_topic(topic, 1)
    _write(mock_cluster.bootstrap_servers, topic, [b"a", b"b", b"c", b"b"])
    records = read_back(mock_cluster.bootstrap_servers, topic, expected=3)
    assert [r.value for r in records] == [b"a", b"b", b"c", b"b"]
