"""The Schema Registry wire format: what precedes a serialized key or value.

``0x00`` (the magic byte), the schema id as 4 bytes big-endian, then, for Protobuf only, the
message indexes (which message of the schema's file the payload is: a zigzag varint count,
then each index as a zigzag varint; the first message, ``[0]``, is the single byte ``0x00``),
then the payload. Every Confluent-compatible deserializer, in any language, reads it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["MAGIC_BYTE", "header", "message_indexes", "read_header"]

MAGIC_BYTE = 0
_HEADER = struct.Struct(">bI")


def header(schema_id: int) -> bytes:
    """The 5 bytes that start a payload written with schema ``schema_id``."""
    if not 0 <= schema_id <= 0xFFFFFFFF:
        raise ValueError(f"a schema id is 4 bytes unsigned, not {schema_id}")
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def read_header(data: bytes) -> tuple[int, bytes]:
    """The schema id and the rest of ``data``; ValueError when it is not in the format."""
    if len(data) < _HEADER.size or data[0] != MAGIC_BYTE:
        raise ValueError("not in the Schema Registry wire format (no magic byte 0 and id)")
    _, schema_id = _HEADER.unpack_from(data)
    return schema_id, data[_HEADER.size :]


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def message_indexes(indexes: Sequence[int]) -> bytes:
    """The Protobuf message indexes: ``[0]`` (the file's first message) as ``b"\\x00"``."""
    if list(indexes) == [0]:
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)
