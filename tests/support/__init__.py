"""Test helpers: real brokers to produce to and a third-party consumer to read back.

- :mod:`tests.support.mock_cluster`: librdkafka's mock cluster with fault injection,
  in-process (:class:`~tests.support.mock_cluster.MockCluster`) or in a child process
  (:class:`~tests.support.mock_cluster.MockClusterProcess`).
- :mod:`tests.support.readback`: read records back with confluent-kafka.
- The Tansu broker itself is :class:`aioproducer.embedded.EmbeddedBroker`.

The fixtures built on these live in ``tests/conftest.py``.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["TopicCreator"]


class TopicCreator(Protocol):
    """A broker that can create topics: EmbeddedBroker, MockCluster, MockClusterProcess."""

    @property
    def bootstrap_servers(self) -> str:
        """``host:port[,host:port...]`` for clients."""
        ...

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create ``name`` with ``partitions`` partitions."""
        ...
