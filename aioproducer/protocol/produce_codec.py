"""The Produce request body and the usual Produce response: the per-request codec, compiled.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

Every produce request passes through here twice: its body is encoded, and its response is
decoded. Interpreted, the two cost a tenth of the CPU of a request of three 16 KiB batches in
a loaded producer (the code is cold by the time the next request comes; bench/README.md).
This module is in :data:`~aioproducer.compiled.HOT_PATH_MODULES`; the message classes stay in
:mod:`aioproducer.protocol.messages`, which hands its classes in (``decode_common``) and calls
these functions from :class:`~aioproducer.protocol.messages.ProduceRequest`.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from aioproducer.protocol.primitives import write_compact_string, write_string, write_uvarint

__all__ = ["INLINE_RECORDS_LIMIT", "decode_common", "encode_body", "uvarint"]

#: Record batches up to this size are copied into the surrounding framing bytes: one buffer
#: is cheaper to write than three for a small batch. Larger ones stay separate, uncopied.
INLINE_RECORDS_LIMIT: Final = 1024

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")

# The fixed part of one partition's result, up to and including what follows the offsets in
# a result with nothing to report: no record errors, a null error message and no tagged
# fields. v3-4 end at the log append time; v5-7 add the log start offset; v8 adds an empty
# int32 array and a null int16 string; v9+ write those compactly (0x01, 0x00) and end with
# an empty tag section (0x00).
_PARTITION_3: Final = struct.Struct(">ihqq")
_PARTITION_5: Final = struct.Struct(">ihqqq")
_PARTITION_8: Final = struct.Struct(">ihqqqih")
_PARTITION_9: Final = struct.Struct(">ihqqq3s")
_EMPTY_FLEXIBLE_TAIL: Final = b"\x01\x00\x00"

# Encoded topic names, (name, flexible) -> bytes. Producers write to few topics; the cap only
# keeps a producer fed endless topic names from growing without bound.
_TOPIC_NAMES: dict[tuple[str, bool], bytes] = {}
_TOPIC_NAMES_MAX: Final = 4096


def uvarint(value: int) -> bytes:
    """An unsigned varint of at most 5 bytes (``value`` must fit in 32 bits).

    One byte is made here; longer ones by :func:`~aioproducer.protocol.primitives.write_uvarint`.
    """
    if 0 <= value < 0x80:
        return bytes((value,))
    return write_uvarint(value)


def _topic_name(name: str, flexible: bool) -> bytes:
    key = (name, flexible)
    encoded = _TOPIC_NAMES.get(key)
    if encoded is None:
        encoded = write_compact_string(name) if flexible else write_string(name)
        if len(_TOPIC_NAMES) >= _TOPIC_NAMES_MAX:
            _TOPIC_NAMES.clear()
        _TOPIC_NAMES[key] = encoded
    return encoded


def encode_body(head: bytes, topics: list[Any], flexible: bool) -> list[bytes | memoryview]:
    """A Produce request body: framing bytes around the uncopied record batches.

    ``head`` is the encoded transactional id, acks and timeout. ``topics`` are
    :class:`~aioproducer.protocol.messages.ProduceTopicData` (``name``, ``partitions``), each
    partition a ``ProducePartitionData`` (``index``, ``records``).
    """
    pack32 = _INT32.pack
    parts: list[bytes | memoryview] = []
    buffer = bytearray(head)
    buffer += uvarint(len(topics) + 1) if flexible else pack32(len(topics))
    for topic in topics:
        partitions: list[Any] = topic.partitions
        buffer += _topic_name(topic.name, flexible)
        buffer += uvarint(len(partitions) + 1) if flexible else pack32(len(partitions))
        for partition in partitions:
            records: Any = partition.records
            size: int = records.nbytes if isinstance(records, memoryview) else len(records)
            buffer += pack32(partition.index)
            buffer += uvarint(size + 1) if flexible else pack32(size)
            if size <= INLINE_RECORDS_LIMIT:
                buffer += records
            else:
                parts.append(bytes(buffer))
                parts.append(memoryview(records) if isinstance(records, bytearray) else records)
                buffer = bytearray()
            if flexible:
                buffer += b"\x00"
        if flexible:
            buffer += b"\x00"
    if flexible:
        buffer += b"\x00"
    parts.append(bytes(buffer))
    return parts


def decode_common(
    data: memoryview,
    version: int,
    flexible: bool,
    response_type: Any,
    topic_type: Any,
    partition_type: Any,
) -> Any:
    """Decode the usual ProduceResponse quickly, or return None to leave it to the reader.

    The usual response has short arrays and partitions with nothing but an error code and
    offsets (no record errors, message or tagged fields). Anything else, and any truncated or
    odd input, returns None: the field-by-field reader then decodes it and reports what is
    wrong. Both give the same result for the inputs this one accepts. The result is built of
    ``response_type(topics, throttle_time_ms)``, ``topic_type(name, partitions)`` and
    ``partition_type(index, error_code, base_offset, log_append_time_ms, log_start_offset)``.
    ``flexible`` says whether ``version`` is a flexible one (the caller reads it from
    :data:`~aioproducer.protocol.api.FIRST_FLEXIBLE_VERSION`, as for :func:`encode_body`).
    """
    if flexible:
        layout = _PARTITION_9
    elif version >= 8:
        layout = _PARTITION_8
    elif version >= 5:
        layout = _PARTITION_5
    else:
        layout = _PARTITION_3
    step = layout.size
    end = len(data)
    try:
        if flexible:
            topic_count = data[0] - 1
            pos = 1
            if not 0 <= topic_count < 0x7F:
                return None
        else:
            topic_count = _INT32.unpack_from(data, 0)[0]
            pos = 4
            if topic_count < 0 or topic_count > end:
                return None
        topics: list[Any] = []
        for _ in range(topic_count):
            if flexible:
                name_length = data[pos] - 1
                pos += 1
                if not 0 <= name_length < 0x7F:
                    return None
            else:
                name_length = _INT16.unpack_from(data, pos)[0]
                pos += 2
                if name_length < 0:
                    return None
            if pos + name_length > end:
                return None
            name = str(data[pos : pos + name_length], "utf-8")
            pos += name_length
            if flexible:
                partition_count = data[pos] - 1
                pos += 1
                if not 0 <= partition_count < 0x7F:
                    return None
            else:
                partition_count = _INT32.unpack_from(data, pos)[0]
                pos += 4
                if partition_count < 0 or partition_count > end:
                    return None
            partitions: list[Any] = []
            for _ in range(partition_count):
                fields = layout.unpack_from(data, pos)
                pos += step
                if flexible:
                    if fields[5] != _EMPTY_FLEXIBLE_TAIL:
                        return None
                elif version >= 8 and (fields[5] != 0 or fields[6] != -1):
                    return None
                partitions.append(
                    partition_type(
                        fields[0],
                        fields[1],
                        fields[2],
                        fields[3],
                        fields[4] if version >= 5 else -1,
                    )
                )
            if flexible:
                if data[pos] != 0:
                    return None
                pos += 1
            topics.append(topic_type(name, partitions))
        throttle_time_ms = _INT32.unpack_from(data, pos)[0]
        pos += 4
        if flexible and data[pos] != 0:
            return None
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    return response_type(topics, throttle_time_ms)
