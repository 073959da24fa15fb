"""Interceptors: change records before they are sent, and observe every acknowledgement.

An interceptor is any object with ``on_send(record)`` and ``on_acknowledgement(metadata,
exception)``. ``on_send`` may return a new :class:`~aioproducer.ProducerRecord` (or None to
keep the record as it is); exceptions raised by either method are logged, not propagated.

    python examples/interceptors.py [--bootstrap-servers HOST:PORT] [--topic NAME]
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from _broker import cluster

from aioproducer import Producer, ProducerRecord, RecordMetadata


class TraceHeader:
    """Stamps every record with a ``trace-id`` header."""

    def __init__(self) -> None:
        self._next = 0

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self._next += 1
        headers = [*(record.headers or []), ("trace-id", f"trace-{self._next}".encode())]
        return dataclasses.replace(record, headers=headers)

    def on_acknowledgement(self, metadata: RecordMetadata, exception: BaseException | None) -> None:
        pass


class DeliveryCounter:
    """Counts acknowledged and failed records, per partition."""

    def __init__(self) -> None:
        self.acknowledged: dict[int, int] = {}
        self.failed = 0

    def on_send(self, record: ProducerRecord) -> None:
        return None  # keep the record unchanged

    def on_acknowledgement(self, metadata: RecordMetadata, exception: BaseException | None) -> None:
        if exception is None:
            self.acknowledged[metadata.partition] = self.acknowledged.get(metadata.partition, 0) + 1
        else:
            self.failed += 1


async def main(bootstrap_servers: str, topic: str) -> None:
    counter = DeliveryCounter()
    async with Producer(
        bootstrap_servers=bootstrap_servers, interceptors=[TraceHeader(), counter]
    ) as producer:
        for n in range(100):
            await producer.send(topic, f"event {n} at {time.time():.3f}".encode())
        await producer.flush()
    print(f"acknowledged per partition: {dict(sorted(counter.acknowledged.items()))}")
    print(f"failed: {counter.failed}")


if __name__ == "__main__":
    with cluster("intercepted", "Use interceptors.") as (bootstrap_servers, topic):
        asyncio.run(main(bootstrap_servers, topic))
