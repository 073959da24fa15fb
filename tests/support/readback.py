"""Read records back with a third-party client (confluent-kafka) as an oracle.

The consumer is assigned partitions directly instead of joining a group: group joins
are slow on Tansu and add nothing to a read-back.
"""

from __future__ import annotations

import itertools
import time
import uuid
from dataclasses import dataclass
from typing import Any

import confluent_kafka

__all__ = ["ConsumedRecord", "ReadBackError", "high_watermarks", "partitions_of", "read_back"]


class ReadBackError(RuntimeError):
    """The read-back consumer hit an error it cannot continue past."""


@dataclass(frozen=True)
class ConsumedRecord:
    """One record as confluent-kafka's consumer saw it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    """In wire order; duplicates kept. An empty list when the record had none."""
    timestamp: tuple[int, int]
    """``(type, ms)``: type 0 none, 1 CreateTime, 2 LogAppendTime."""

    @property
    def timestamp_type(self) -> int:
        """0 none, 1 CreateTime, 2 LogAppendTime."""
        return self.timestamp[0]

    @property
    def timestamp_ms(self) -> int:
        """The timestamp in milliseconds since the epoch."""
        return self.timestamp[1]


def _config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        # The Python binding insists on a group id even for assign()-only use; a
        # fresh one keeps runs apart. Nothing is ever committed.
        "group.id": f"aioproducer-readback-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "log_level": 3,
        **extra,
    }


def partitions_of(bootstrap: str, topic: str, *, timeout: float = 10.0) -> list[int]:
    """The partition ids of ``topic``, sorted, from a Metadata request.

    Raises:
        ReadBackError: the topic is unknown or metadata did not arrive in time.
    """
    consumer = confluent_kafka.Consumer(_config(bootstrap))
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
    except confluent_kafka.KafkaException as exc:
        raise ReadBackError(f"no metadata for {topic!r}: {exc}") from exc
    finally:
        consumer.close()
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None or not entry.partitions:
        error = entry.error if entry is not None else "missing"
        raise ReadBackError(f"topic {topic!r} is not available: {error}")
    return sorted(entry.partitions)


def read_back(
    bootstrap: str,
    topic: str,
    partitions: list[int] | None = None,
    *,
    expected: int,
    timeout: float = 30.0,
    isolation_level: str = "read_uncommitted",
    extra_wait: float = 0.0,
    check_crcs: bool = True,
) -> list[ConsumedRecord]:
    """Read ``topic`` from the beginning until ``expected`` records have arrived.

    Args:
        bootstrap: ``host:port[,host:port...]``.
        topic: The topic to read.
        partitions: The partitions to read; all of them by default.
        expected: Stop once this many records are read.
        timeout: Stop after this many seconds even if fewer arrived.
        isolation_level: ``"read_uncommitted"`` or ``"read_committed"``.
        extra_wait: After ``expected`` records, keep reading at least this long to catch
            records beyond the expected ones (duplicates, for instance). The read also goes
            on to each partition's end: the high watermark with ``read_uncommitted`` (exact
            on Kafka and the mock; Tansu may report one a batch short), the last stable
            offset with ``read_committed``.
        check_crcs: Verify every batch's CRC-32C (librdkafka's ``check.crcs``), so a
            corrupt batch fails the read instead of passing unseen: neither Tansu nor the
            mock cluster checks CRCs when they store a batch. Only topics holding the mock
            cluster's own transaction markers, which it writes with CRC 0, turn it off.

    Returns:
        The records sorted by (partition, offset). Fewer than ``expected`` means the
        timeout ran out; the caller's assertion then shows what did arrive.

    Raises:
        ReadBackError: the consumer reported a fatal error, or a corrupt record batch.
    """
    if partitions is None:
        partitions = partitions_of(bootstrap, topic, timeout=timeout)
    consumer = confluent_kafka.Consumer(
        _config(
            bootstrap,
            **{
                "isolation.level": isolation_level,
                "check.crcs": check_crcs,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
            },
        )
    )
    records: list[ConsumedRecord] = []
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)
                for partition in partitions
            ]
        )
        deadline = time.monotonic() + timeout
        # After ``expected`` records: read on for extra_wait, and up to each partition's end
        # as it was then, so what the log holds beyond the expected records (duplicates) is
        # read too and the caller's count sees it.
        settle_until: float | None = None
        ends: list[Any] | None = None
        while True:
            now = time.monotonic()
            if settle_until is None and len(records) >= expected:
                settle_until = now + extra_wait
                if isolation_level == "read_uncommitted":
                    ends = _high_watermarks(consumer, topic, partitions)
                else:
                    ends = _stable_offsets(bootstrap, topic, partitions)
            if now >= deadline:
                break
            if settle_until is not None:
                caught_up = ends is None or _caught_up(consumer, ends)
                if (caught_up and now >= settle_until) or now >= settle_until + _CATCH_UP:
                    break
            limit = deadline if settle_until is None else max(settle_until, now + 0.05)
            wait = max(0.0, min(0.2, limit - now, deadline - now))
            for message in consumer.consume(num_messages=500, timeout=wait):
                error = message.error()
                if error is not None:
                    if error.fatal():
                        raise ReadBackError(f"consumer failed: {error}")
                    if error.code() == confluent_kafka.KafkaError._BAD_MSG:
                        # A record batch that fails its CRC (or does not parse): what the
                        # producer wrote is corrupt.
                        raise ReadBackError(f"corrupt record batch in {topic}: {error}")
                    continue  # transient: the consumer retries on its own
                records.append(_record(message))
        if len(records) < expected:
            _report_shortfall(consumer, topic, partitions, records, expected, timeout)
    finally:
        consumer.close()
    records.sort(key=lambda record: (record.partition, record.offset))
    return records


# How long reading on to the high watermarks may take at the most (it takes one fetch).
_CATCH_UP = 5.0


def _high_watermarks(consumer: Any, topic: str, partitions: list[int]) -> list[Any]:
    return [
        confluent_kafka.TopicPartition(
            topic,
            partition,
            consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), timeout=10, cached=False
            )[1],
        )
        for partition in partitions
    ]


def _stable_offsets(bootstrap: str, topic: str, partitions: list[int]) -> list[Any] | None:
    """Each partition's last stable offset (the end a read_committed consumer reaches), or
    None where the broker cannot tell (then only ``extra_wait`` applies)."""
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    wanted = {confluent_kafka.TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    try:
        answers = admin.list_offsets(
            wanted, isolation_level=confluent_kafka.IsolationLevel.READ_COMMITTED
        )
        return [
            confluent_kafka.TopicPartition(topic, tp.partition, future.result(timeout=10).offset)
            for tp, future in answers.items()
        ]
    except confluent_kafka.KafkaException:
        return None


def unread_offsets(records: list[ConsumedRecord]) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the ranges ``(first, end)`` of offsets below its last record read that
    no record read has (on Kafka a transaction's marker takes one offset each; elsewhere a
    range means records the read skipped)."""
    unread: dict[int, list[tuple[int, int]]] = {}
    ordered = sorted(records, key=lambda record: (record.partition, record.offset))
    for partition, group in itertools.groupby(ordered, key=lambda record: record.partition):
        expected = 0
        for record in group:
            if record.offset > expected:
                unread.setdefault(partition, []).append((expected, record.offset))
            expected = record.offset + 1
    return unread


def _report_shortfall(
    consumer: Any,
    topic: str,
    partitions: list[int],
    records: list[ConsumedRecord],
    expected: int,
    timeout: float,
) -> None:
    """Tell, on stderr (pytest shows it with a failure), whether the records are missing
    from the broker or the read was slow: per partition, what was read, where the
    consumer stands and the broker's high watermark."""
    import sys

    counts = {partition: 0 for partition in partitions}
    for record in records:
        counts[record.partition] = counts.get(record.partition, 0) + 1
    try:
        ends = {tp.partition: tp.offset for tp in _high_watermarks(consumer, topic, partitions)}
        positions = {
            tp.partition: tp.offset
            for tp in consumer.position(
                [confluent_kafka.TopicPartition(topic, partition) for partition in partitions]
            )
        }
    except confluent_kafka.KafkaException as exc:
        print(f"read_back({topic!r}): no watermarks after a short read: {exc}", file=sys.stderr)
        return
    detail = ", ".join(
        f"partition {p}: read {counts[p]}, position {positions.get(p)}, high watermark {ends[p]}"
        for p in partitions
    )
    print(
        f"read_back({topic!r}): {len(records)} of {expected} records in {timeout:g} s; {detail}; "
        f"offsets not read: {unread_offsets(records)}",
        file=sys.stderr,
    )


def _caught_up(consumer: Any, ends: list[Any]) -> bool:
    """Whether the consumer's position reached each partition's end offset in ``ends``."""
    positions = {
        tp.partition: tp.offset
        for tp in consumer.position(
            [confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in ends]
        )
    }
    return all(end.offset <= 0 or positions.get(end.partition, -1) >= end.offset for end in ends)


def _record(message: Any) -> ConsumedRecord:
    headers = message.headers() or []
    timestamp_type, timestamp_ms = message.timestamp()
    return ConsumedRecord(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        headers=[(str(name), value) for name, value in headers],
        timestamp=(int(timestamp_type), int(timestamp_ms)),
    )


def high_watermarks(bootstrap: str, topic: str, *, timeout: float = 10.0) -> dict[int, int]:
    """Each partition's high watermark (the offset the next record will get).

    Tansu reports the base offset of the last batch plus one rather than the last
    offset plus one, so on Tansu this undercounts whenever a batch held several
    records; use :func:`read_back` there.
    """
    partitions = partitions_of(bootstrap, topic, timeout=timeout)
    consumer = confluent_kafka.Consumer(_config(bootstrap))
    try:
        return {
            partition: int(
                consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(topic, partition), timeout=timeout, cached=False
                )[1]
            )
            for partition in partitions
        }
    finally:
        consumer.close()
