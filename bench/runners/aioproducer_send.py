"""aioproducer, one ``await producer.send()`` per record (the futures are awaited at the end)."""

from __future__ import annotations

import time
from typing import Any

from bench.runners._common import (
    LatencyRecorder,
    Meter,
    RunData,
    RunSpec,
    gather_acks,
    latency_result,
    paced_async,
    result,
    run_async,
    runner_main,
    track,
)

CLIENT = "aioproducer_send"


def make_producer(spec: RunSpec) -> Any:
    """An aioproducer ``Producer`` configured like every other runner."""
    from aioproducer import Producer

    return Producer(
        bootstrap_servers=spec.bootstrap_servers,
        acks="all" if spec.acks_int == -1 else spec.acks_int,
        # aioproducer takes whole milliseconds, like the Java client.
        linger_ms=round(spec.linger_ms),
        batch_size=spec.batch_size,
        compression_type=spec.compression,
        enable_idempotence=spec.idempotence,
    )


def versions() -> dict[str, Any]:
    """The client library's version, for the result."""
    import aioproducer

    return {"library": "aioproducer", "library_version": getattr(aioproducer, "__version__", "dev")}


async def warm_up(producer: Any, spec: RunSpec, data: RunData) -> None:
    """Send and await ``spec.warmup`` records so connections and metadata exist."""
    futures = [
        await producer.send(spec.topic, data.value(i), data.key(i)) for i in range(spec.warmup)
    ]
    for future in futures:
        await future


async def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    producer = make_producer(spec)
    await producer.start()
    try:
        await warm_up(producer, spec, data)
        topic = spec.topic
        send = producer.send
        value, key = data.value, data.key
        if spec.mode == "throughput":
            meter = Meter()
            meter.start()
            futures = [await send(topic, value(i), key(i)) for i in range(spec.records)]
            acked, failed, samples = await gather_acks(futures)
            meter.stop()
            return result(
                spec, meter, acked=acked, errors=failed, error_samples=samples, extra=versions()
            )

        clock = time.perf_counter

        async def send_range(indices: range, recorder: LatencyRecorder) -> None:
            sent = recorder.sent
            for i in indices:
                sent[i] = clock()
                future = await send(topic, value(i), key(i))
                future.add_done_callback(track(recorder, i))

        meter, recorder = await paced_async(spec, send_range)
        return latency_result(spec, meter, recorder, versions())
    finally:
        await producer.close()


def main() -> None:
    """Entry point: ``python -m bench.runners.aioproducer_send --spec JSON``."""
    runner_main(CLIENT, lambda spec, data: run_async(lambda: _run(spec, data), spec.loop))


if __name__ == "__main__":
    main()
