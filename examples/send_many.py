"""The bulk path: buffer 10,000 records with one call to ``send_many``.

    python examples/send_many.py [--bootstrap-servers HOST:PORT] [--topic NAME]
"""

from __future__ import annotations

import asyncio
from collections import Counter

from _broker import cluster

from aioproducer import Producer, ProducerRecord

COUNT = 10_000


async def main(bootstrap_servers: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap_servers, linger_ms=10) as producer:
        # Items are values, (key, value) pairs, or ProducerRecord objects.
        values = [f"reading {n}".encode() for n in range(COUNT - 2)]
        items: list[object] = [*values, (b"sensor-7", b"a keyed reading")]
        items.append(ProducerRecord(topic, value=b"with a header", headers=[("unit", b"C")]))

        results = await producer.send_many(topic, items)
        metadata = await results  # every record's RecordMetadata, in order
        per_partition = Counter(m.partition for m in metadata)
        print(f"{len(metadata)} records acknowledged")
        for partition, count in sorted(per_partition.items()):
            print(f"  partition {partition}: {count} records")


if __name__ == "__main__":
    with cluster("send-many", "Send records in bulk.") as (bootstrap_servers, topic):
        asyncio.run(main(bootstrap_servers, topic))
