"""Reading a topic back to count what a command wrote (``--verify``), with
``confluent_kafka``'s consumer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from aioproducer.cli.common import UsageError, _count
from aioproducer.config import (
    ProducerConfig,
)
from aioproducer.errors import (
    ConfigurationError,
)

# ---- read-back verification ----------------------------------------------------------------


def _consumer(bootstrap: str, security: Mapping[str, str] | None = None) -> Any:
    import confluent_kafka

    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"aioproducer-verify-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
            "log_level": 3,
            **(security or {}),
        }
    )


def _reader_security(config: ProducerConfig) -> dict[str, str]:
    """The producer's TLS and SASL settings in confluent-kafka's (librdkafka's) names, so
    that the read-back check reaches the same listener the same way.

    Raises:
        UsageError: a setting the consumer cannot take (an OAUTHBEARER token provider, a
            Python ``ssl_context``).
    """
    from aioproducer.net.tls import trusted_pem

    protocol = str(getattr(config.security_protocol, "value", config.security_protocol))
    security: dict[str, str] = {"security.protocol": protocol.lower()}
    if protocol.startswith("SASL"):
        mechanism = str(getattr(config.sasl_mechanism, "value", config.sasl_mechanism))
        if mechanism == "OAUTHBEARER":
            raise UsageError(
                "--verify reads back with confluent-kafka, which cannot use aioproducer's "
                "OAUTHBEARER token provider; run without --verify and check the topic with "
                "a consumer of your own"
            )
        security["sasl.mechanism"] = mechanism
        security["sasl.username"] = config.sasl_plain_username or ""
        security["sasl.password"] = config.sasl_plain_password or ""
    if protocol.endswith("SSL"):
        if config.ssl_context is not None:
            raise UsageError("--verify cannot hand a Python ssl_context to confluent-kafka")
        try:
            pem = trusted_pem(config)
        except (ConfigurationError, OSError) as exc:
            raise UsageError(f"--verify: {exc}") from None
        if pem is not None:
            security["ssl.ca.pem"] = pem
        if config.ssl_keystore_location is not None:
            security["ssl.keystore.location"] = config.ssl_keystore_location
            security["ssl.keystore.password"] = config.ssl_keystore_password or ""
        elif config.ssl_certfile is not None:
            security["ssl.certificate.location"] = config.ssl_certfile
            security["ssl.key.location"] = config.ssl_keyfile or config.ssl_certfile
            if config.ssl_password is not None:
                security["ssl.key.password"] = config.ssl_password
        security["ssl.endpoint.identification.algorithm"] = (
            "https" if config.ssl_check_hostname else "none"
        )
    return security


def _partitions(consumer: Any, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=10)
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None:
        return []
    return sorted(entry.partitions)


def _end_offsets(
    bootstrap: str, topic: str, security: Mapping[str, str] | None = None
) -> dict[int, int]:
    """Each partition's end offset before the run, so that only this run's records count."""
    import confluent_kafka

    consumer = _consumer(bootstrap, security)
    try:
        return {
            partition: int(
                consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(topic, partition), timeout=10, cached=False
                )[1]
            )
            for partition in _partitions(consumer, topic)
        }
    except confluent_kafka.KafkaException:
        return {}  # a topic that does not exist yet holds no earlier records
    finally:
        consumer.close()


def count_records(
    bootstrap: str,
    topic: str,
    expected: int,
    start_offsets: dict[int, int] | None = None,
    *,
    idle_timeout: float = 10.0,
    settle: float = 0.5,
    security: Mapping[str, str] | None = None,
) -> int:
    """Read ``topic`` with confluent-kafka and count its records.

    Reading starts at ``start_offsets`` (the beginning for partitions not in it) and stops
    ``settle`` seconds after ``expected`` records arrived (to catch extra ones), or after
    ``idle_timeout`` seconds without a new record. ``security``: confluent-kafka's TLS and
    SASL settings (:func:`_reader_security`).
    """
    import confluent_kafka

    consumer = _consumer(bootstrap, security)
    count = 0
    try:
        partitions = _partitions(consumer, topic)
        offsets = start_offsets or {}
        consumer.assign(
            [
                confluent_kafka.TopicPartition(
                    topic, p, offsets.get(p, confluent_kafka.OFFSET_BEGINNING)
                )
                for p in partitions
            ]
        )
        last_progress = time.monotonic()
        stop_at: float | None = None
        while True:
            now = time.monotonic()
            if stop_at is None and count >= expected:
                stop_at = now + settle
            if (stop_at is not None and now >= stop_at) or now - last_progress > idle_timeout:
                break
            messages = consumer.consume(num_messages=10_000, timeout=0.2)
            for message in messages:
                if message.error() is None:
                    count += 1
            if messages:
                last_progress = time.monotonic()
    finally:
        consumer.close()
    return count


def _verify(
    bootstrap: str,
    topic: str,
    acknowledged: int,
    start_offsets: dict[int, int] | None,
    security: Mapping[str, str],
) -> str | None:
    stored = count_records(bootstrap, topic, acknowledged, start_offsets, security=security)
    if stored != acknowledged:
        return (
            f"verify: the broker acknowledged {_count(acknowledged, 'record')} but a "
            f"consumer read {stored} back from topic {topic}"
        )
    what = "the 1 record" if stored == 1 else f"all {stored} records"
    print(
        f"Verified: a confluent-kafka consumer read back {what} from topic {topic}.",
        flush=True,
    )
    return None
