"""kafka-python's ``KafkaProducer``: ``send()`` per record, then ``flush()``."""

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
    paced_sync,
    result,
    runner_main,
)

CLIENT = "kafka_python"


def _run(spec: RunSpec, data: RunData) -> dict[str, Any]:
    import kafka  # type: ignore[import-untyped,unused-ignore]
    from kafka import KafkaProducer  # type: ignore[import-untyped,unused-ignore]

    producer = KafkaProducer(
        bootstrap_servers=spec.bootstrap_servers,
        acks="all" if spec.acks_int == -1 else spec.acks_int,
        linger_ms=spec.linger_ms,
        batch_size=spec.batch_size,
        compression_type=spec.compression_or_none,
        enable_idempotence=spec.idempotence,
        request_timeout_ms=30_000,
        # kafka-python 3 opens with ApiVersions v4; librdkafka's mock answers only v0-2 and
        # kafka-python cannot read its fallback reply, so pin the protocol generation of
        # Kafka 2.3 (record batch v2, Produce v7: everything these scenarios need).
        api_version=(2, 3, 0),
    )
    extra = {"library": "kafka-python", "library_version": kafka.__version__}
    try:
        topic = spec.topic
        send = producer.send
        value, key = data.value, data.key
        warm = [send(topic, value=value(i), key=key(i)) for i in range(spec.warmup)]
        producer.flush(60)
        for future in warm:
            future.get(0)
        if spec.mode == "throughput":
            meter = Meter()
            meter.start()
            futures = [send(topic, value=value(i), key=key(i)) for i in range(spec.records)]
            producer.flush(120)
            acked = failed = 0
            samples: list[str] = []
            for future in futures:
                if future.succeeded():
                    acked += 1
                elif future.is_done:
                    failed += 1
                    if len(samples) < MAX_ERROR_SAMPLES:
                        samples.append(repr(future.exception))
            meter.stop()
            return result(
                spec, meter, acked=acked, errors=failed, error_samples=samples, extra=extra
            )

        clock = time.perf_counter

        def send_range(indices: range, recorder: LatencyRecorder) -> None:
            sent = recorder.sent
            for i in indices:
                sent[i] = clock()
                future = send(topic, value=value(i), key=key(i))
                # Callbacks run on kafka-python's I/O thread when the batch completes.
                future.add_callback(lambda _metadata, i=i: recorder.ok(i))
                future.add_errback(lambda error, i=i: recorder.failed(i, error))

        meter, recorder = paced_sync(
            spec, send_range, wait=time.sleep, finish=lambda: producer.flush(120)
        )
        return latency_result(spec, meter, recorder, extra)
    finally:
        producer.close(10)


def main() -> None:
    """Entry point: ``python -m bench.runners.kafka_python --spec JSON``."""
    runner_main(CLIENT, _run)


if __name__ == "__main__":
    main()
