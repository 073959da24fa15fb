"""aioproducer, confluent-kafka's way: ``await producer.produce(topic, value, key,
on_delivery=counter)`` per record (with ``poll(0)`` every 10,000 records), then ``flush()``,
which runs the remaining delivery callbacks; the callback counts the acknowledgements."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.runners._common import (
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
from bench.runners.aioproducer_send import make_producer, versions, warm_up
from bench.runners.confluent_producer import Counter

CLIENT = "aioproducer_produce"
POLL_EVERY = 10_000


async def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    producer = make_producer(spec)
    await producer.start()
    try:
        await warm_up(producer, spec, data)
        topic = spec.topic
        produce, poll = producer.produce, producer.poll
        value, key = data.value, data.key
        if spec.mode == "throughput":
            counter = Counter()
            meter = Meter()
            meter.start()
            for i in range(spec.records):
                await produce(topic, value(i), key(i), on_delivery=counter)
                if i % POLL_EVERY == 0:
                    await poll(0)
            await producer.flush()
            meter.stop()
            return result(
                spec,
                meter,
                acked=counter.acked,
                errors=counter.failed,
                error_samples=counter.samples,
                extra=versions(),
            )

        clock = time.perf_counter
        serving = True

        async def serve() -> None:
            # The reports are served (and the acknowledgement times taken) here, as soon as
            # they arrive: a service would poll in a task of its own.
            while serving:
                if await poll(0.05) == 0:
                    await asyncio.sleep(0.001)

        async def send_range(indices: range, recorder: LatencyRecorder) -> None:
            sent = recorder.sent
            for i in indices:
                sent[i] = clock()

                def report(error: Any, message: Any, i: int = i) -> None:
                    if error is None:
                        recorder.ok(i)
                    else:
                        recorder.failed(i, error)

                await produce(topic, value(i), key(i), on_delivery=report)

        server = asyncio.ensure_future(serve())
        try:
            meter, recorder = await paced_async(spec, send_range)
        finally:
            serving = False
            await server
        return latency_result(spec, meter, recorder, versions())
    finally:
        await producer.close()


def main() -> None:
    """Entry point: ``python -m bench.runners.aioproducer_produce --spec JSON``."""
    runner_main(CLIENT, lambda spec, data: run_async(lambda: _run(spec, data), spec.loop))


if __name__ == "__main__":
    main()
