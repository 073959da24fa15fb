"""The Kafka wire format's primitive types: a bounds-checked reader and writer functions.

Every read checks that the bytes it needs are there, and every length read from the wire is
compared with what remains *before* anything is allocated for it, so hostile or truncated bytes
raise :class:`~aioproducer.errors.CorruptResponseError` and nothing else (never ``IndexError``,
``struct.error`` or ``MemoryError``).

Encodings follow Kafka's ``org.apache.kafka.common.protocol.types``: big-endian integers,
``int16``-length strings (-1 for null), ``int32``-length bytes and arrays (-1 for null), and in
flexible versions the *compact* forms, whose length N is written as the unsigned varint N + 1
(0 for null), followed by a tagged-field section.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar

from aioproducer.errors import CorruptResponseError

__all__ = [
    "EMPTY_TAGGED_FIELDS",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "NO_TAGGED_FIELDS",
    "UINT32",
    "Reader",
    "write_array",
    "write_boolean",
    "write_bytes",
    "write_compact_array",
    "write_compact_bytes",
    "write_compact_nullable_array",
    "write_compact_nullable_bytes",
    "write_compact_nullable_string",
    "write_compact_string",
    "write_int8",
    "write_int16",
    "write_int32",
    "write_int64",
    "write_nullable_array",
    "write_nullable_bytes",
    "write_nullable_string",
    "write_string",
    "write_tagged_fields",
    "write_uint32",
    "write_uuid",
    "write_uvarint",
    "write_varint",
    "write_varlong",
]

_T = TypeVar("_T")
_R = TypeVar("_R", bound="Reader")

INT8 = struct.Struct(">b")
"""Precompiled big-endian ``int8`` (shared by the codecs for speed)."""
INT16 = struct.Struct(">h")
"""Precompiled big-endian ``int16``."""
INT32 = struct.Struct(">i")
"""Precompiled big-endian ``int32``."""
INT64 = struct.Struct(">q")
"""Precompiled big-endian ``int64``."""
UINT32 = struct.Struct(">I")
"""Precompiled big-endian ``uint32``."""

_UINT32_MAX = 0xFFFFFFFF
_UINT64_MAX = 0xFFFFFFFFFFFFFFFF

EMPTY_TAGGED_FIELDS = b"\x00"
"""An empty tagged-field section (zero fields)."""

NO_TAGGED_FIELDS: Mapping[int, memoryview] = MappingProxyType({})
"""The read-only result of reading an empty tagged-field section."""


class Reader:
    """Reads Kafka primitives from a buffer, front to back, checking every bound.

    Strings and byte strings are copied out (``str`` / ``bytes``); :meth:`view` gives a
    zero-copy slice. Any read that would pass the end, any length that is negative where the
    type does not allow it (or larger than the bytes left), any over-long varint and any
    invalid UTF-8 raise :class:`~aioproducer.errors.CorruptResponseError`.
    """

    __slots__ = ("_data", "_end", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._data = view
        self._pos = 0
        self._end = view.nbytes

    # ---- position -------------------------------------------------------------------------

    @property
    def position(self) -> int:
        """The offset of the next byte to read."""
        return self._pos

    def remaining(self) -> int:
        """The number of bytes not read yet."""
        return self._end - self._pos

    def at_end(self) -> bool:
        """True when every byte has been read."""
        return self._pos >= self._end

    def _truncated(self, needed: int, what: str) -> CorruptResponseError:
        return CorruptResponseError(
            f"truncated data: {what} needs {needed} bytes at offset {self._pos}, "
            f"{self._end - self._pos} left"
        )

    def _take(self, length: int, what: str) -> int:
        """Reserve ``length`` bytes and return where they start."""
        pos = self._pos
        end = pos + length
        if end > self._end:
            raise self._truncated(length, what)
        self._pos = end
        return pos

    def skip(self, length: int) -> None:
        """Skip ``length`` bytes."""
        if length < 0:
            raise CorruptResponseError(f"negative length {length}")
        self._take(length, "a skipped field")

    def view(self, length: int) -> memoryview:
        """The next ``length`` bytes as a zero-copy view (valid while the source buffer is)."""
        if length < 0:
            raise CorruptResponseError(f"negative length {length}")
        start = self._take(length, "a byte range")
        return self._data[start : start + length]

    def rest(self) -> memoryview:
        """Every byte not read yet, as a view; the reader is then at its end."""
        start = self._pos
        self._pos = self._end
        return self._data[start : self._end]

    # ---- fixed-width integers -------------------------------------------------------------

    def int8(self) -> int:
        """A signed 8-bit integer."""
        pos = self._pos
        if pos >= self._end:
            raise self._truncated(1, "int8")
        self._pos = pos + 1
        value: int = self._data[pos]
        return value - 256 if value > 127 else value

    def boolean(self) -> bool:
        """A boolean (one byte, non-zero is true)."""
        pos = self._pos
        if pos >= self._end:
            raise self._truncated(1, "boolean")
        self._pos = pos + 1
        return self._data[pos] != 0

    def int16(self) -> int:
        """A signed big-endian 16-bit integer."""
        pos = self._pos
        if pos + 2 > self._end:
            raise self._truncated(2, "int16")
        self._pos = pos + 2
        value: int = INT16.unpack_from(self._data, pos)[0]
        return value

    def int32(self) -> int:
        """A signed big-endian 32-bit integer."""
        pos = self._pos
        if pos + 4 > self._end:
            raise self._truncated(4, "int32")
        self._pos = pos + 4
        value: int = INT32.unpack_from(self._data, pos)[0]
        return value

    def uint32(self) -> int:
        """An unsigned big-endian 32-bit integer."""
        pos = self._pos
        if pos + 4 > self._end:
            raise self._truncated(4, "uint32")
        self._pos = pos + 4
        value: int = UINT32.unpack_from(self._data, pos)[0]
        return value

    def int64(self) -> int:
        """A signed big-endian 64-bit integer."""
        pos = self._pos
        if pos + 8 > self._end:
            raise self._truncated(8, "int64")
        self._pos = pos + 8
        value: int = INT64.unpack_from(self._data, pos)[0]
        return value

    def uuid(self) -> uuid.UUID:
        """A 16-byte UUID."""
        start = self._take(16, "uuid")
        return uuid.UUID(bytes=bytes(self._data[start : start + 16]))

    # ---- varints --------------------------------------------------------------------------

    def _unsigned(self, max_bytes: int, limit: int, what: str) -> int:
        data = self._data
        pos = self._pos
        end = self._end
        if pos < end:
            byte: int = data[pos]
            if byte < 0x80:
                self._pos = pos + 1
                return byte
        result = 0
        shift = 0
        for index in range(max_bytes):
            if pos + index >= end:
                raise self._truncated(index + 1, what)
            byte = data[pos + index]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                if result > limit:
                    raise CorruptResponseError(f"{what} at offset {pos} overflows")
                self._pos = pos + index + 1
                return result
            shift += 7
        raise CorruptResponseError(f"{what} at offset {pos} is longer than {max_bytes} bytes")

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (32 bits)."""
        return self._unsigned(5, _UINT32_MAX, "unsigned varint")

    def varint(self) -> int:
        """A zig-zag signed varint of at most 5 bytes (32 bits)."""
        raw = self._unsigned(5, _UINT32_MAX, "varint")
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        """A zig-zag signed varint of at most 10 bytes (64 bits)."""
        raw = self._unsigned(10, _UINT64_MAX, "varlong")
        return (raw >> 1) ^ -(raw & 1)

    # ---- lengths --------------------------------------------------------------------------

    def _length(self, length: int, nullable: bool, what: str) -> int:
        """Check a decoded length: -1 is null where allowed, and the bytes must be there."""
        if length < 0:
            if length == -1 and nullable:
                return -1
            raise CorruptResponseError(f"invalid {what} length {length} at offset {self._pos}")
        if length > self._end - self._pos:
            raise self._truncated(length, what)
        return length

    def _compact_length(self, nullable: bool, what: str) -> int:
        return self._length(self.uvarint() - 1, nullable, what)

    def _decode_text(self, length: int) -> str:
        start = self._pos
        self._pos = start + length
        try:
            return str(self._data[start : start + length], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptResponseError(f"invalid UTF-8 at offset {start}: {exc}") from None

    def _copy(self, length: int) -> bytes:
        start = self._pos
        self._pos = start + length
        return bytes(self._data[start : start + length])

    # ---- strings --------------------------------------------------------------------------

    def string(self) -> str:
        """A string with an ``int16`` length (null is not allowed)."""
        return self._decode_text(self._length(self.int16(), False, "string"))

    def nullable_string(self) -> str | None:
        """A string with an ``int16`` length, -1 meaning null."""
        length = self._length(self.int16(), True, "nullable string")
        return None if length < 0 else self._decode_text(length)

    def compact_string(self) -> str:
        """A string with an unsigned-varint length + 1 (null is not allowed)."""
        return self._decode_text(self._compact_length(False, "compact string"))

    def compact_nullable_string(self) -> str | None:
        """A string with an unsigned-varint length + 1, 0 meaning null."""
        length = self._compact_length(True, "compact nullable string")
        return None if length < 0 else self._decode_text(length)

    # ---- byte strings ---------------------------------------------------------------------

    def bytes_(self) -> bytes:
        """Bytes with an ``int32`` length (null is not allowed)."""
        return self._copy(self._length(self.int32(), False, "bytes"))

    def nullable_bytes(self) -> bytes | None:
        """Bytes with an ``int32`` length, -1 meaning null."""
        length = self._length(self.int32(), True, "nullable bytes")
        return None if length < 0 else self._copy(length)

    def compact_bytes(self) -> bytes:
        """Bytes with an unsigned-varint length + 1 (null is not allowed)."""
        return self._copy(self._compact_length(False, "compact bytes"))

    def compact_nullable_bytes(self) -> bytes | None:
        """Bytes with an unsigned-varint length + 1, 0 meaning null."""
        length = self._compact_length(True, "compact nullable bytes")
        return None if length < 0 else self._copy(length)

    # ---- arrays ---------------------------------------------------------------------------

    def _elements(self: _R, count: int, read: Callable[[_R], _T]) -> list[_T]:
        # Every element of every array Kafka defines takes at least one byte, so a count
        # larger than what remains is corrupt; checking it first bounds both the list and
        # the loop by the size of the input.
        if count > self._end - self._pos:
            raise self._truncated(count, "array")
        return [read(self) for _ in range(count)]

    def array(self: _R, read: Callable[[_R], _T]) -> list[_T]:
        """An array with an ``int32`` count (null is not allowed); ``read`` decodes one element."""
        count = self.int32()
        if count < 0:
            raise CorruptResponseError(f"invalid array length {count} at offset {self._pos}")
        return self._elements(count, read)

    def nullable_array(self: _R, read: Callable[[_R], _T]) -> list[_T] | None:
        """An array with an ``int32`` count, -1 meaning null."""
        count = self.int32()
        if count == -1:
            return None
        if count < 0:
            raise CorruptResponseError(f"invalid array length {count} at offset {self._pos}")
        return self._elements(count, read)

    def compact_array(self: _R, read: Callable[[_R], _T]) -> list[_T]:
        """An array with an unsigned-varint count + 1 (null is not allowed)."""
        count = self.uvarint() - 1
        if count < 0:
            raise CorruptResponseError(f"null compact array at offset {self._pos}")
        return self._elements(count, read)

    def compact_nullable_array(self: _R, read: Callable[[_R], _T]) -> list[_T] | None:
        """An array with an unsigned-varint count + 1, 0 meaning null."""
        count = self.uvarint() - 1
        if count < 0:
            return None
        return self._elements(count, read)

    # ---- tagged fields --------------------------------------------------------------------

    def tagged_fields(self) -> Mapping[int, memoryview]:
        """Read a tagged-field section and return ``{tag: raw value}``.

        Callers decode the tags they know (with a new :class:`Reader` over the value, so a bad
        value cannot read past its own end) and ignore the rest, which is how unknown tagged
        fields are skipped. The common empty section returns a shared read-only mapping.
        """
        count = self.uvarint()
        if count == 0:
            return NO_TAGGED_FIELDS
        if count > self._end - self._pos:
            raise self._truncated(count, "tagged fields")
        fields: dict[int, memoryview] = {}
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            if size > self._end - self._pos:
                raise self._truncated(size, f"tagged field {tag}")
            start = self._pos
            self._pos = start + size
            fields[tag] = self._data[start : start + size]
        return fields

    def skip_tagged_fields(self) -> None:
        """Read a tagged-field section and drop it."""
        data = self._data
        pos = self._pos
        if pos < self._end and data[pos] == 0:
            self._pos = pos + 1
            return
        self.tagged_fields()


# ---- writers ------------------------------------------------------------------------------


def write_int8(value: int) -> bytes:
    """A signed 8-bit integer."""
    return INT8.pack(value)


def write_boolean(value: bool) -> bytes:
    """A boolean as one byte (0 or 1)."""
    return b"\x01" if value else b"\x00"


def write_int16(value: int) -> bytes:
    """A signed big-endian 16-bit integer."""
    return INT16.pack(value)


def write_int32(value: int) -> bytes:
    """A signed big-endian 32-bit integer."""
    return INT32.pack(value)


def write_uint32(value: int) -> bytes:
    """An unsigned big-endian 32-bit integer."""
    return UINT32.pack(value)


def write_int64(value: int) -> bytes:
    """A signed big-endian 64-bit integer."""
    return INT64.pack(value)


def write_uuid(value: uuid.UUID | None) -> bytes:
    """A UUID as 16 bytes; None writes the all-zero UUID (Kafka's ``Uuid.ZERO_UUID``)."""
    return bytes(16) if value is None else value.bytes


# Small unsigned varints (lengths, counts) are by far the most common: precompute them.
_SMALL_UVARINTS: tuple[bytes, ...] = tuple(
    bytes([n]) if n < 0x80 else bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(1 << 14)
)


def write_uvarint(value: int) -> bytes:
    """An unsigned varint (at most 5 bytes: ``value`` must fit in 32 bits)."""
    if 0 <= value < 16384:
        return _SMALL_UVARINTS[value]
    if value < 0 or value > _UINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _write_unsigned64(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_varint(value: int) -> bytes:
    """A zig-zag signed varint (``value`` must fit in 32 bits)."""
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint out of range: {value}")
    return write_uvarint(((value << 1) ^ (value >> 31)) & _UINT32_MAX)


def write_varlong(value: int) -> bytes:
    """A zig-zag signed varint of up to 64 bits."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong out of range: {value}")
    return _write_unsigned64(((value << 1) ^ (value >> 63)) & _UINT64_MAX)


def _utf8(value: str) -> bytes:
    return value.encode("utf-8")


def write_string(value: str) -> bytes:
    """A string with an ``int16`` length."""
    encoded = _utf8(value)
    if len(encoded) > 0x7FFF:
        raise ValueError(f"string of {len(encoded)} bytes is too long for an int16 length")
    return INT16.pack(len(encoded)) + encoded


def write_nullable_string(value: str | None) -> bytes:
    """A string with an ``int16`` length, or -1 for None."""
    return b"\xff\xff" if value is None else write_string(value)


def write_compact_string(value: str) -> bytes:
    """A string with an unsigned-varint length + 1."""
    encoded = _utf8(value)
    return write_uvarint(len(encoded) + 1) + encoded


def write_compact_nullable_string(value: str | None) -> bytes:
    """A string with an unsigned-varint length + 1, or 0 for None."""
    return b"\x00" if value is None else write_compact_string(value)


def write_bytes(value: bytes | bytearray | memoryview) -> bytes:
    """Bytes with an ``int32`` length."""
    return INT32.pack(len(value)) + bytes(value)


def write_nullable_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    """Bytes with an ``int32`` length, or -1 for None."""
    return b"\xff\xff\xff\xff" if value is None else write_bytes(value)


def write_compact_bytes(value: bytes | bytearray | memoryview) -> bytes:
    """Bytes with an unsigned-varint length + 1."""
    return write_uvarint(len(value) + 1) + bytes(value)


def write_compact_nullable_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    """Bytes with an unsigned-varint length + 1, or 0 for None."""
    return b"\x00" if value is None else write_compact_bytes(value)


def write_array(items: Sequence[_T], write: Callable[[_T], bytes]) -> bytes:
    """An array with an ``int32`` count; ``write`` encodes one element."""
    return INT32.pack(len(items)) + b"".join([write(item) for item in items])


def write_nullable_array(items: Sequence[_T] | None, write: Callable[[_T], bytes]) -> bytes:
    """An array with an ``int32`` count, or -1 for None."""
    return b"\xff\xff\xff\xff" if items is None else write_array(items, write)


def write_compact_array(items: Sequence[_T], write: Callable[[_T], bytes]) -> bytes:
    """An array with an unsigned-varint count + 1."""
    return write_uvarint(len(items) + 1) + b"".join([write(item) for item in items])


def write_compact_nullable_array(items: Sequence[_T] | None, write: Callable[[_T], bytes]) -> bytes:
    """An array with an unsigned-varint count + 1, or 0 for None."""
    return b"\x00" if items is None else write_compact_array(items, write)


def write_tagged_fields(fields: Mapping[int, bytes] | Iterable[tuple[int, bytes]] = ()) -> bytes:
    """A tagged-field section: the count, then each ``tag, size, value`` by ascending tag."""
    items = sorted(fields.items() if isinstance(fields, Mapping) else fields)
    if not items:
        return EMPTY_TAGGED_FIELDS
    parts = [write_uvarint(len(items))]
    for tag, value in items:
        parts.append(write_uvarint(tag))
        parts.append(write_uvarint(len(value)))
        parts.append(value)
    return b"".join(parts)
