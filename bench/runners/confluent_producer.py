"""confluent-kafka's synchronous ``Producer``: ``produce()`` + ``poll(0)`` per record, then
``flush()``; deliveries are counted in the delivery callback."""

from __future__ import annotations

import time
from typing import Any

from bench.runners._common import (
    LatencyRecorder,
    Meter,
    RunData,
    RunSpec,
    latency_result,
    paced_sync,
    result,
    runner_main,
)

CLIENT = "confluent_producer"
MAX_ERROR_SAMPLES = 5


def config(spec: RunSpec) -> dict[str, Any]:
    """librdkafka properties equivalent to the other runners' settings."""
    return {
        "bootstrap.servers": spec.bootstrap_servers,
        "acks": "all" if spec.acks_int == -1 else str(spec.acks_int),
        "linger.ms": spec.linger_ms,
        "batch.size": spec.batch_size,
        "compression.type": spec.compression,
        "enable.idempotence": spec.idempotence,
        "request.timeout.ms": 30_000,
    }


def versions() -> dict[str, Any]:
    """The client library's version, for the result."""
    import confluent_kafka

    return {
        "library": "confluent-kafka",
        "library_version": str(confluent_kafka.version()),
        "librdkafka_version": confluent_kafka.libversion()[0],
    }


class Counter:
    """Counts delivery reports."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.samples: list[str] = []

    def __call__(self, error: Any, message: Any) -> None:
        if error is None:
            self.acked += 1
        else:
            self.failed += 1
            if len(self.samples) < MAX_ERROR_SAMPLES:
                self.samples.append(str(error))


def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    from confluent_kafka import Producer

    counter = Counter()
    producer = Producer({**config(spec), "on_delivery": counter})
    produce, poll = producer.produce, producer.poll
    topic = spec.topic
    value, key = data.value, data.key

    def send(i: int, **kwargs: Any) -> None:
        while True:
            try:
                produce(topic, value(i), key(i), **kwargs)
                return
            except BufferError:
                # librdkafka's queue is full: serve delivery reports until there is room.
                poll(0.005)

    for i in range(spec.warmup):
        send(i)
        poll(0)
    producer.flush(60)
    counter.__init__()  # type: ignore[misc]

    if spec.mode == "throughput":
        meter = Meter()
        meter.start()
        for i in range(spec.records):
            while True:
                try:
                    produce(topic, value(i), key(i))
                    break
                except BufferError:
                    poll(0.005)
            poll(0)
        remaining = producer.flush(120)
        meter.stop()
        samples = counter.samples + ([f"{remaining} still queued after flush"] if remaining else [])
        return result(
            spec,
            meter,
            acked=counter.acked,
            errors=counter.failed,
            error_samples=samples,
            extra=versions(),
        )

    clock = time.perf_counter

    def send_range(indices: range, recorder: LatencyRecorder) -> None:
        sent = recorder.sent
        for i in indices:
            sent[i] = clock()

            def report(error: Any, message: Any, i: int = i) -> None:
                if error is None:
                    recorder.ok(i)
                else:
                    recorder.failed(i, error)

            send(i, on_delivery=report)
            poll(0)

    meter, recorder = paced_sync(
        spec, send_range, wait=lambda seconds: poll(seconds), finish=lambda: producer.flush(120)
    )
    return latency_result(spec, meter, recorder, versions())


def main() -> None:
    """Entry point: ``python -m bench.runners.confluent_producer --spec JSON``."""
    runner_main(CLIENT, _run)


if __name__ == "__main__":
    main()
