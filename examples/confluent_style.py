"""confluent-kafka style code on aioproducer: produce() with a delivery callback, poll(),
flush(), on the asyncio Producer and on the blocking SyncProducer.

    python examples/confluent_style.py [--bootstrap-servers HOST:PORT] [--topic NAME]
"""

from __future__ import annotations

import asyncio

from _broker import cluster

from aioproducer import DeliveredMessage, Producer, SyncProducer

delivered: list[DeliveredMessage] = []


def delivery_report(err: BaseException | None, msg: DeliveredMessage) -> None:
    # Runs inside poll(), flush() or close(), in the caller's task or thread.
    if err is not None:
        print(f"delivery failed for {msg.key()!r}: {err}")
        return
    delivered.append(msg)


async def produce_async(bootstrap_servers: str, topic: str) -> None:
    # A confluent-kafka configuration dict: the Java names are taken as they are.
    async with Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5}) as producer:
        for n in range(5):
            await producer.produce(
                topic, f"async event {n}", key=f"user-{n % 2}", on_delivery=delivery_report
            )
            await producer.poll(0)  # the callbacks of records done so far
        await producer.flush()  # waits for the rest and runs their callbacks


def produce_blocking(bootstrap_servers: str, topic: str) -> None:
    with SyncProducer({"bootstrap.servers": bootstrap_servers}) as producer:
        for n in range(5):
            producer.produce(
                topic,
                f"sync event {n}",
                key=f"user-{n % 2}",
                headers={"source": "confluent_style"},
                on_delivery=delivery_report,
            )
            producer.poll(0)
        producer.flush()


if __name__ == "__main__":
    with cluster("confluent-style", "produce() and poll() as in confluent-kafka.") as (
        bootstrap_servers,
        topic,
    ):
        asyncio.run(produce_async(bootstrap_servers, topic))
        produce_blocking(bootstrap_servers, topic)
        for msg in delivered:
            print(f"{msg.value().decode()}: {msg.topic()}[{msg.partition()}] @ {msg.offset()}")
        print(f"delivered: {len(delivered)} of 10")
