"""aioproducer's bulk path: ``await producer.send_many(topic, items)`` in chunks.

Items are values, or ``(key, value)`` tuples when keyed; the chunk lists are built before
the clock starts (they hold references to the prepared payloads). In latency mode each
tick's due records go out as one ``send_many`` call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
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
    track,
)
from bench.runners.aioproducer_send import make_producer, versions, warm_up

CLIENT = "aioproducer_send_many"


def items(data: RunData, start: int, stop: int) -> list[Any]:
    """The ``send_many`` items for records ``start`` to ``stop - 1``."""
    values = data.value_list(start, stop)
    if data.keys is None:
        return values
    return list(zip(data.key_list(start, stop), values, strict=True))


async def count_results(results: Sequence[Any]) -> tuple[int, int, list[str]]:
    """Await each ``send_many`` result: (acknowledged, failed, error samples)."""
    acked = failed = 0
    samples: list[str] = []
    for batch in results:
        try:
            acked += len(await batch)
        except Exception:
            # Count record by record: some may have succeeded.
            for future in batch.futures:
                try:
                    await future
                except Exception as exc:
                    failed += 1
                    if len(samples) < MAX_ERROR_SAMPLES:
                        samples.append(repr(exc))
                else:
                    acked += 1
    return acked, failed, samples


async def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    producer = make_producer(spec)
    await producer.start()
    try:
        await warm_up(producer, spec, data)
        topic = spec.topic
        send_many = producer.send_many
        if spec.mode == "throughput":
            step = max(1, spec.chunk)
            chunks = [
                items(data, start, min(spec.records, start + step))
                for start in range(0, spec.records, step)
            ]
            meter = Meter()
            meter.start()
            results = [await send_many(topic, chunk) for chunk in chunks]
            acked, failed, samples = await count_results(results)
            meter.stop()
            return result(
                spec, meter, acked=acked, errors=failed, error_samples=samples, extra=versions()
            )

        clock = time.perf_counter

        async def send_range(indices: range, recorder: LatencyRecorder) -> None:
            now = clock()
            sent = recorder.sent
            for i in indices:
                sent[i] = now
            batch = await send_many(topic, items(data, indices.start, indices.stop))
            for i, future in zip(indices, batch.futures, strict=True):
                future.add_done_callback(track(recorder, i))

        meter, recorder = await paced_async(spec, send_range)
        return latency_result(spec, meter, recorder, versions())
    finally:
        await producer.close()


def main() -> None:
    """Entry point: ``python -m bench.runners.aioproducer_send_many --spec JSON``."""
    runner_main(CLIENT, lambda spec, data: run_async(lambda: _run(spec, data), spec.loop))


if __name__ == "__main__":
    main()
