"""confluent-kafka's ``confluent_kafka.aio.AIOProducer``: ``await produce()`` per record
(each returns a delivery future, awaited at the end)."""

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
from bench.runners.confluent_producer import config, versions

CLIENT = "confluent_aio"


async def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    from confluent_kafka.aio import AIOProducer

    producer = AIOProducer(config(spec))
    try:
        topic = spec.topic
        produce = producer.produce
        value, key = data.value, data.key
        warm = [await produce(topic, value=value(i), key=key(i)) for i in range(spec.warmup)]
        await gather_acks(warm)
        if spec.mode == "throughput":
            meter = Meter()
            meter.start()
            futures = [
                await produce(topic, value=value(i), key=key(i)) for i in range(spec.records)
            ]
            # The last partial buffer goes to librdkafka only on flush (or a 1 s timer).
            await producer.flush()
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
                future = await produce(topic, value=value(i), key=key(i))
                future.add_done_callback(track(recorder, i))

        meter, recorder = await paced_async(spec, send_range)
        return latency_result(spec, meter, recorder, versions())
    finally:
        await producer.close()


def main() -> None:
    """Entry point: ``python -m bench.runners.confluent_aio --spec JSON``."""
    runner_main(CLIENT, lambda spec, data: run_async(lambda: _run(spec, data), spec.loop))


if __name__ == "__main__":
    main()
