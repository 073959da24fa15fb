"""The primitive reader and writers: known encodings, bounds, and hostile input."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioproducer.errors import CorruptResponseError
from aioproducer.protocol.primitives import (
    Reader,
    write_array,
    write_boolean,
    write_bytes,
    write_compact_array,
    write_compact_bytes,
    write_compact_nullable_array,
    write_compact_nullable_bytes,
    write_compact_nullable_string,
    write_compact_string,
    write_int8,
    write_int16,
    write_int32,
    write_int64,
    write_nullable_array,
    write_nullable_bytes,
    write_nullable_string,
    write_string,
    write_tagged_fields,
    write_uint32,
    write_uuid,
    write_uvarint,
    write_varint,
    write_varlong,
)

h = bytes.fromhex


# ---- writers against encodings derived by hand from Kafka's type definitions ----------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_uvarint_encoding(value: int, expected: str) -> None:
    assert write_uvarint(value) == h(expected)
    assert Reader(h(expected)).uvarint() == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-64, "7f"),
        (64, "8001"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_varint_zigzag_encoding(value: int, expected: str) -> None:
    assert write_varint(value) == h(expected)
    assert Reader(h(expected)).varint() == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "00"),
        (-1, "01"),
        (2**31, "8080808010"),
        (2**63 - 1, "feffffffffffffffff01"),
        (-(2**63), "ffffffffffffffffff01"),
    ],
)
def test_varlong_zigzag_encoding(value: int, expected: str) -> None:
    assert write_varlong(value) == h(expected)
    assert Reader(h(expected)).varlong() == value


def test_fixed_width_writers() -> None:
    assert write_int8(-2) == h("fe")
    assert write_boolean(True) == h("01")
    assert write_boolean(False) == h("00")
    assert write_int16(-2) == h("fffe")
    assert write_int32(258) == h("00000102")
    assert write_uint32(0xFFFFFFFE) == h("fffffffe")
    assert write_int64(-1) == h("ffffffffffffffff")
    some = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    assert write_uuid(some) == h("00112233445566778899aabbccddeeff")
    assert write_uuid(None) == bytes(16)


def test_string_and_bytes_writers() -> None:
    assert write_string("ab") == h("0002") + b"ab"
    assert write_string("é") == h("0002c3a9")
    assert write_nullable_string(None) == h("ffff")
    assert write_compact_string("ab") == h("03") + b"ab"
    assert write_compact_string("") == h("01")
    assert write_compact_nullable_string(None) == h("00")
    assert write_bytes(b"ab") == h("00000002") + b"ab"
    assert write_nullable_bytes(None) == h("ffffffff")
    assert write_compact_bytes(memoryview(b"ab")) == h("03") + b"ab"
    assert write_compact_nullable_bytes(None) == h("00")


def test_array_writers() -> None:
    assert write_array([1, 2], write_int16) == h("00000002 0001 0002")
    assert write_nullable_array(None, write_int16) == h("ffffffff")
    assert write_compact_array([1], write_int16) == h("02 0001")
    assert write_compact_nullable_array(None, write_int16) == h("00")


def test_tagged_fields_are_written_by_ascending_tag() -> None:
    assert write_tagged_fields() == h("00")
    assert write_tagged_fields({1: b"x", 0: b"yz"}) == h("02 00 02 797a 01 01 78")


def test_string_too_long_for_int16_length() -> None:
    with pytest.raises(ValueError):
        write_string("x" * 0x8000)


@pytest.mark.parametrize("value", [-1, 2**32])
def test_uvarint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        write_uvarint(value)


# ---- reading ------------------------------------------------------------------------------


def test_reader_reads_every_type_in_sequence() -> None:
    data = h(
        "ff"  # int8 -1
        "01"  # boolean
        "8000"  # int16 -32768
        "7fffffff"  # int32
        "ffffffff"  # uint32
        "8000000000000000"  # int64 min
        "00112233445566778899aabbccddeeff"  # uuid
        "0002 6869"  # string "hi"
        "ffff"  # nullable string null
        "03 6869"  # compact string "hi"
        "00"  # compact nullable string null
        "00000001 7a"  # bytes
        "ffffffff"  # nullable bytes null
        "02 7a"  # compact bytes
        "00"  # compact nullable bytes null
        "00000002 0001 0002"  # array of int16
        "ffffffff"  # nullable array null
        "03 0001 0002"  # compact array of int16
        "00"  # compact nullable array null
        "02 00 01 61 05 00"  # tagged fields: tag 0 = "a", tag 5 = ""
    )
    r = Reader(data)
    assert r.int8() == -1
    assert r.boolean() is True
    assert r.int16() == -32768
    assert r.int32() == 2**31 - 1
    assert r.uint32() == 2**32 - 1
    assert r.int64() == -(2**63)
    assert r.uuid() == uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    assert r.string() == "hi"
    assert r.nullable_string() is None
    assert r.compact_string() == "hi"
    assert r.compact_nullable_string() is None
    assert r.bytes_() == b"z"
    assert r.nullable_bytes() is None
    assert r.compact_bytes() == b"z"
    assert r.compact_nullable_bytes() is None
    assert r.array(Reader.int16) == [1, 2]
    assert r.nullable_array(Reader.int16) is None
    assert r.compact_array(Reader.int16) == [1, 2]
    assert r.compact_nullable_array(Reader.int16) is None
    tags = r.tagged_fields()
    assert {tag: bytes(value) for tag, value in tags.items()} == {0: b"a", 5: b""}
    assert r.at_end()
    assert r.remaining() == 0


def test_reader_accepts_bytearray_and_memoryview_slices() -> None:
    backing = bytearray(h("ffff 0001 0002"))
    assert Reader(memoryview(backing)[2:]).int16() == 1
    assert Reader(backing).int16() == -1


@pytest.mark.parametrize(
    ("data", "read"),
    [
        ("", Reader.int8),
        ("00", Reader.int16),
        ("000000", Reader.int32),
        ("00000000000000", Reader.int64),
        ("00" * 15, Reader.uuid),
        ("0005 6162", Reader.string),  # length beyond the end
        ("ffff", Reader.string),  # null where not nullable
        ("fffe", Reader.nullable_string),  # -2 is never valid
        ("00", Reader.compact_string),  # compact null where not nullable
        ("05 6162", Reader.compact_nullable_string),
        ("0002 c328", Reader.string),  # invalid UTF-8
        ("ffffffff", Reader.bytes_),
        ("fffffffe", Reader.nullable_bytes),
        ("7fffffff 00", Reader.bytes_),  # a huge length is refused before allocating
        ("ffffffff0f", Reader.compact_bytes),
        ("80", Reader.uvarint),  # truncated varint
        ("8080808080 01", Reader.uvarint),  # six bytes
        ("ffffffff1f", Reader.uvarint),  # five bytes but more than 32 bits
        ("ffffffffffffffffff7f", Reader.varlong),  # ten bytes but more than 64 bits
        ("8080808080808080808001", Reader.varlong),  # eleven bytes
    ],
)
def test_corrupt_input_raises_corrupt_response_error(
    data: str, read: Callable[[Reader], Any]
) -> None:
    with pytest.raises(CorruptResponseError):
        read(Reader(h(data)))


@pytest.mark.parametrize(
    ("data", "read"),
    [
        ("7fffffff", lambda r: r.array(Reader.int8)),
        ("fffffffe", lambda r: r.array(Reader.int8)),
        ("ffffffff", lambda r: r.array(Reader.int8)),  # null where not nullable
        ("fffffffe", lambda r: r.nullable_array(Reader.int8)),
        ("00", lambda r: r.compact_array(Reader.int8)),
        ("ffffffff0f", lambda r: r.compact_nullable_array(Reader.int8)),
        ("03 01", lambda r: r.compact_array(Reader.int8)),  # count beyond the data
        ("01 00 05 61", Reader.tagged_fields),  # value longer than the data
        ("ffffffff0f", Reader.tagged_fields),  # count beyond the data
    ],
)
def test_corrupt_counts_raise_before_allocating(data: str, read: Callable[[Reader], Any]) -> None:
    with pytest.raises(CorruptResponseError):
        read(Reader(h(data)))


def test_failed_read_leaves_the_position_alone() -> None:
    r = Reader(h("0005 6162"))
    with pytest.raises(CorruptResponseError):
        r.int64()
    assert r.position == 0
    assert r.int16() == 5


def test_view_is_zero_copy_and_skip_checks_bounds() -> None:
    backing = bytearray(b"abcdef")
    r = Reader(backing)
    r.skip(1)
    view = r.view(2)
    backing[1] = ord("X")
    assert bytes(view) == b"Xc"
    with pytest.raises(CorruptResponseError):
        r.skip(10)
    assert bytes(r.rest()) == b"def"
    assert r.at_end()


def test_skip_tagged_fields_skips_unknown_fields() -> None:
    r = Reader(h("02 00 01 61 07 02 6263 2a"))
    r.skip_tagged_fields()
    assert r.int8() == 0x2A


# ---- properties ---------------------------------------------------------------------------

READERS: list[Callable[[Reader], Any]] = [
    Reader.int8,
    Reader.int16,
    Reader.int32,
    Reader.int64,
    Reader.uint32,
    Reader.uuid,
    Reader.boolean,
    Reader.uvarint,
    Reader.varint,
    Reader.varlong,
    Reader.string,
    Reader.nullable_string,
    Reader.compact_string,
    Reader.compact_nullable_string,
    Reader.bytes_,
    Reader.nullable_bytes,
    Reader.compact_bytes,
    Reader.compact_nullable_bytes,
    Reader.tagged_fields,
    lambda r: r.array(Reader.string),
    lambda r: r.nullable_array(Reader.int64),
    lambda r: r.compact_array(Reader.compact_string),
    lambda r: r.compact_nullable_array(Reader.varint),
]


@given(st.binary(max_size=64), st.lists(st.sampled_from(READERS), min_size=1, max_size=12))
def test_random_bytes_raise_only_corrupt_response_error(
    data: bytes, reads: list[Callable[[Reader], Any]]
) -> None:
    reader = Reader(data)
    try:
        for read in reads:
            read(reader)
    except CorruptResponseError:
        pass
    assert 0 <= reader.position <= len(data)


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(value: int) -> None:
    r = Reader(write_uvarint(value))
    assert r.uvarint() == value
    assert r.at_end()


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    r = Reader(write_varint(value))
    assert r.varint() == value
    assert r.at_end()


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    r = Reader(write_varlong(value))
    assert r.varlong() == value
    assert r.at_end()


@given(st.text(max_size=200), st.none() | st.text(max_size=20), st.binary(max_size=200))
def test_string_and_bytes_round_trips(text: str, maybe: str | None, blob: bytes) -> None:
    data = b"".join(
        [
            write_string(text),
            write_nullable_string(maybe),
            write_compact_string(text),
            write_compact_nullable_string(maybe),
            write_bytes(blob),
            write_compact_bytes(blob),
        ]
    )
    r = Reader(data)
    assert r.string() == text
    assert r.nullable_string() == maybe
    assert r.compact_string() == text
    assert r.compact_nullable_string() == maybe
    assert r.bytes_() == blob
    assert r.compact_bytes() == blob
    assert r.at_end()


@given(st.dictionaries(st.integers(0, 2**31), st.binary(max_size=20), max_size=5))
def test_tagged_fields_round_trip(fields: dict[int, bytes]) -> None:
    r = Reader(write_tagged_fields(fields))
    assert {tag: bytes(value) for tag, value in r.tagged_fields().items()} == fields
    assert r.at_end()
