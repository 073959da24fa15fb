"""aiokafka's batch API: ``create_batch()``, ``append()`` until full, ``send_batch()``.

Keyless records fill one batch at a time, partitions taken round-robin; keyed records go
to one open batch per partition, chosen by aiokafka's own ``DefaultPartitioner`` (murmur2),
as a user of this API has to do. Each ``send_batch`` future stands for its batch's records.
"""

from __future__ import annotations

import time
from typing import Any

from bench.runners._common import (
    MAX_ERROR_SAMPLES,
    LatencyRecorder,
    Meter,
    RunData,
    RunSpec,
    latency_result,
    paced_async,
    result,
    run_async,
    runner_main,
)
from bench.runners.aiokafka_send import make_producer, versions

CLIENT = "aiokafka_batch"


class BatchSender:
    """Fills aiokafka batches and sends them; remembers each future and its record count."""

    def __init__(self, producer: Any, topic: str, partitions: list[int], keyed: bool) -> None:
        from aiokafka.partitioner import DefaultPartitioner  # type: ignore[import-untyped,unused-ignore]

        self.producer = producer
        self.topic = topic
        self.partitions = partitions
        self.keyed = keyed
        self.partitioner = DefaultPartitioner()
        self.next_partition = 0
        self.open: dict[int, Any] = {}
        self.sent: list[tuple[Any, int]] = []

    def _partition_for(self, key: bytes | None) -> int:
        if self.keyed:
            partition: int = self.partitioner(key, self.partitions, self.partitions)
            return partition
        if not self.open:
            self.next_partition = (self.next_partition + 1) % len(self.partitions)
        return self.partitions[self.next_partition]

    async def append(self, key: bytes | None, value: bytes) -> None:
        """Append one record, sending the batch it fills."""
        partition = self._partition_for(key)
        batch = self.open.get(partition)
        if batch is None:
            batch = self.open[partition] = self.producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:
            await self._send(partition, batch)
            batch = self.open[partition] = self.producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)

    async def _send(self, partition: int, batch: Any) -> None:
        count = batch.record_count()
        future = await self.producer.send_batch(batch, self.topic, partition=partition)
        self.sent.append((future, count))
        del self.open[partition]

    async def send_open(self) -> None:
        """Send every batch still open."""
        for partition, batch in list(self.open.items()):
            await self._send(partition, batch)

    async def wait(self) -> tuple[int, int, list[str]]:
        """Await every batch: (records acknowledged, records failed, error samples)."""
        acked = failed = 0
        samples: list[str] = []
        for future, count in self.sent:
            try:
                await future
            except Exception as exc:
                failed += count
                if len(samples) < MAX_ERROR_SAMPLES:
                    samples.append(repr(exc))
            else:
                acked += count
        self.sent.clear()
        return acked, failed, samples


async def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    producer = make_producer(spec)
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(spec.topic))
        sender = BatchSender(producer, spec.topic, partitions, spec.keyed)
        value, key = data.value, data.key
        append = sender.append
        for i in range(spec.warmup):
            await append(key(i), value(i))
        await sender.send_open()
        await sender.wait()
        if spec.mode == "throughput":
            meter = Meter()
            meter.start()
            for i in range(spec.records):
                await append(key(i), value(i))
            await sender.send_open()
            acked, failed, samples = await sender.wait()
            meter.stop()
            return result(
                spec, meter, acked=acked, errors=failed, error_samples=samples, extra=versions()
            )

        clock = time.perf_counter

        async def send_range(indices: range, recorder: LatencyRecorder) -> None:
            # One tick's records go out as one batch per partition, sent at once.
            now = clock()
            sent = recorder.sent
            first = len(sender.sent)
            for i in indices:
                sent[i] = now
                await append(key(i), value(i))
            await sender.send_open()
            futures = [future for future, _ in sender.sent[first:]]
            # With keys a tick's records land in several batches; each batch's future
            # acknowledges the records appended to it, which a tick does not track
            # individually, so the whole tick is credited when all its batches are done.
            done = _TickDone(recorder, indices, len(futures))
            for future in futures:
                future.add_done_callback(done)
            # Only the batches still open matter from here on.
            del sender.sent[:]

        meter, recorder = await paced_async(spec, send_range)
        return latency_result(spec, meter, recorder, versions())
    finally:
        await producer.stop()


class _TickDone:
    """Marks a tick's records acknowledged when all its batch futures completed."""

    def __init__(self, recorder: LatencyRecorder, indices: range, count: int) -> None:
        self.recorder = recorder
        self.indices = indices
        self.remaining = count
        self.error: BaseException | None = None

    def __call__(self, future: Any) -> None:
        try:
            error = future.exception()
        except BaseException as exc:
            error = exc
        if error is not None:
            self.error = error
        self.remaining -= 1
        if self.remaining == 0:
            for i in self.indices:
                if self.error is None:
                    self.recorder.ok(i)
                else:
                    self.recorder.failed(i, self.error)


def main() -> None:
    """Entry point: ``python -m bench.runners.aiokafka_batch --spec JSON``."""
    runner_main(CLIENT, lambda spec, data: run_async(lambda: _run(spec, data), spec.loop))


if __name__ == "__main__":
    main()
