"""What a user sends and what comes back: records and their metadata.

The futures of sent records are in :mod:`aioproducer.futures`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "Header",
    "ProducerRecord",
    "RecordMetadata",
    "TimestampType",
]

Header = tuple[str, bytes | None]
"""A record header: a name and a value (bytes, or None)."""


class TimestampType:
    """Where a record's timestamp comes from."""

    CREATE_TIME = 0
    """Set by the producer (the default)."""
    LOG_APPEND_TIME = 1
    """Set by the broker when it appends the batch (topic config ``message.timestamp.type``)."""


class RecordMetadata(NamedTuple):
    """Where the broker stored a record (an immutable named tuple: cheap to make per record).

    Attributes:
        topic: the topic.
        partition: the partition.
        offset: the record's offset, or -1 when unknown (acks=0, or a duplicate the broker
            recognised without reporting the original offset).
        timestamp: the record's timestamp in milliseconds: the create time the producer set,
            or the broker's log-append time when the topic uses it.
        serialized_key_size: bytes of the serialized key, -1 for a None key.
        serialized_value_size: bytes of the serialized value, -1 for a None value.
        timestamp_type: :class:`TimestampType` of ``timestamp``.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int
    timestamp_type: int = TimestampType.CREATE_TIME


@dataclass(slots=True)
class ProducerRecord:
    """A record to send: what ``send_many`` accepts as an item and interceptors see.

    Attributes:
        topic: the topic.
        value: the value (bytes-like, None, or anything the value serializer takes).
        key: the key (bytes-like, None, or anything the key serializer takes).
        partition: an explicit partition, or None to let the partitioner choose.
        timestamp_ms: the create time in milliseconds, or None for now.
        headers: headers as ``(name, value)`` pairs.
    """

    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Sequence[Header] | None = None


# Sentinel a batch future resolves to when its records moved to smaller batches.
SPLIT = object()
