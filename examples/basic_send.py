"""Send a few records and wait for the broker's acknowledgements.

    python examples/basic_send.py [--bootstrap-servers HOST:PORT] [--topic NAME]
"""

from __future__ import annotations

import asyncio

from _broker import cluster

from aioproducer import Producer


async def main(bootstrap_servers: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap_servers, linger_ms=5) as producer:
        # send() returns as soon as the record is buffered; the future resolves when the
        # broker has acknowledged it. Records with the same key go to the same partition.
        futures = [
            await producer.send(
                topic,
                value=f"order {n} created".encode(),
                key=f"customer-{n % 3}".encode(),
                headers=[("source", b"basic_send")],
            )
            for n in range(10)
        ]
        for metadata in await asyncio.gather(*futures):
            print(f"{metadata.topic}[{metadata.partition}] @ offset {metadata.offset}")

        # One record, waiting for its acknowledgement right away.
        metadata = await producer.send_and_wait(topic, b"the last one", key=b"customer-0")
        print(f"last record: partition {metadata.partition}, offset {metadata.offset}")
    # Leaving the block flushed and closed the producer.


if __name__ == "__main__":
    with cluster("basic-send", "Send a few records.") as (bootstrap_servers, topic):
        asyncio.run(main(bootstrap_servers, topic))
