"""The v2 record batch builder: golden bytes, and batches an independent reader accepts."""

from __future__ import annotations

import struct

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.record_batch import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    encode_varint,
    estimate_record_size,
)


def test_varints_are_zigzag() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(63) == b"\x7e"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(100) == b"\xc8\x01"
    assert encode_varint(-65) == b"\x81\x01"
    assert encode_varint(1 << 20) == b"\x80\x80\x80\x01"
    # Checked against kafka-python's encoder.
    assert encode_varint(1_700_000_000_000) == bytes.fromhex("80a0abfef962")


def test_golden_single_record_batch() -> None:
    builder = RecordBatchBuilder(bytearray(200))
    assert builder.try_append(1_000, b"k", b"value", [("h", b"1")]) == 0
    batch = bytes(builder.close(producer_id=7, producer_epoch=2, base_sequence=5))
    record = (
        b"\x00"  # attributes
        b"\x00"  # timestamp delta 0
        b"\x00"  # offset delta 0
        b"\x02k"  # key length 1, key
        b"\x0avalue"  # value length 5, value
        b"\x02"  # one header
        b"\x02h\x021"  # header key "h", value "1"
    )
    records = bytes([len(record) * 2]) + record
    tail = struct.pack(">hiqqqhii", 0, 0, 1000, 1000, 7, 2, 5, 1) + records
    crc = crc32c.crc32c(tail)
    expected = struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc) + tail
    assert batch == expected
    assert len(batch) == RECORD_BATCH_OVERHEAD + len(records)


def test_independent_reader_accepts_many_records() -> None:
    builder = RecordBatchBuilder(bytearray(64 * 1024))
    sent = []
    for i in range(300):
        key = None if i % 3 == 0 else f"k{i}".encode()
        value = None if i % 7 == 0 else (b"v" * (i % 150))
        headers = [("n", str(i).encode()), ("none", None)] if i % 2 else []
        ts = 1_700_000_000_000 + i * 3 - (5 if i == 10 else 0)
        assert builder.try_append(ts, key, value, headers) == i
        sent.append((key, value, headers, ts))
    data = bytes(builder.close())
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    records = list(batch)
    assert len(records) == 300
    for (key, value, headers, ts), record in zip(sent, records, strict=True):
        assert record.key == key
        assert record.value == value
        assert list(record.headers) == headers
        assert record.timestamp == ts
    assert batch.next_offset == 300


def test_full_buffer_refuses_and_first_record_must_fit() -> None:
    builder = RecordBatchBuilder(bytearray(100))
    assert builder.try_append(0, None, b"x" * 20, None) == 0
    assert builder.try_append(0, None, b"x" * 20, None) == -1
    assert builder.record_count == 1
    with pytest.raises(ValueError, match="first record"):
        RecordBatchBuilder(bytearray(70)).try_append(0, None, b"x" * 20, None)


@pytest.mark.parametrize(
    "codec",
    [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD],
)
def test_compressed_batches_read_back(codec: CompressionType) -> None:
    builder = RecordBatchBuilder(bytearray(32 * 1024), codec)
    values = [f"record-{i}-".encode() * 10 for i in range(200)]
    for i, value in enumerate(values):
        builder.try_append(1000 + i, None, value, None)
    data = bytes(builder.close())
    assert len(data) < builder.uncompressed_size
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.compression_type == int(codec)
    assert [r.value for r in batch] == values


def test_rewrite_producer_state_updates_crc() -> None:
    builder = RecordBatchBuilder(bytearray(200))
    builder.try_append(0, None, b"v", None)
    builder.close(1, 0, 0)
    data = bytes(builder.rewrite_producer_state(9, 3, 42, True))
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.producer_id == 9
    assert batch.producer_epoch == 3
    assert batch.base_sequence == 42
    assert batch.is_transactional


def test_bulk_append_matches_single_appends() -> None:
    values = [b"v" * (i % 200) for i in range(400)]
    single = RecordBatchBuilder(bytearray(32 * 1024))
    single_count = 0
    for value in values:
        if single.try_append(5_000, None, value, None) < 0:
            break
        single_count += 1
    bulk = RecordBatchBuilder(bytearray(32 * 1024))
    # In three runs, as send_many does across calls.
    reached = bulk.append_values(5_000, values, 0, 10)
    assert reached == 10
    reached = bulk.append_values(5_000, values, 10, 11)
    reached = bulk.append_values(5_000, values, reached, len(values))
    # It stops exactly where single appends stop: at the first record that does not fit.
    assert reached == single_count < len(values)
    # Filling the batch copied the records into the pooled buffer without growing it: a
    # buffer that grew is not taken back by the pool, and a batch kept alive by its record
    # futures then holds on to it (send_many's RSS grew with the record count).
    assert len(bulk.buffer) == len(single.buffer) == 32 * 1024
    assert bytes(bulk.close()) == bytes(single.close())
    assert len(bulk.buffer) == 32 * 1024
    batch = DefaultRecordBatch(bytes(single.buffer[: single.size_in_bytes]))
    assert batch.validate_crc()
    assert [r.value for r in batch] == values[:reached]


def test_the_crc_of_records_written_in_several_copies_covers_the_whole_batch() -> None:
    # With aioproducer._native.crcutil the records' CRC is taken as each group of records is copied
    # into the buffer, and combined with the header's at close: the result must be the CRC
    # of the bytes from the attributes to the end, however the records were written.
    builder = RecordBatchBuilder(bytearray(8192))
    for i in range(40):
        assert builder.try_append(1_000 + i, b"k%d" % i, b"v" * (i * 7), []) == i
        if i % 9 == 0:
            builder.write_pending()  # as a full batch or a worker hand-off does
    builder.write_pending()
    assert builder.append_values(2_000, [b"x" * 50, b"y" * 60], 0, 2) == 2
    batch = bytes(builder.close(producer_id=3, producer_epoch=1, base_sequence=9))
    (stored,) = struct.unpack_from(">I", batch, 17)
    assert stored == crc32c.crc32c(batch[21:])
    parsed = DefaultRecordBatch(batch)
    assert parsed.validate_crc()
    assert len(list(parsed)) == 42


def test_copy_parts_writes_the_parts_in_order_and_refuses_what_does_not_fit() -> None:
    crcutil = pytest.importorskip(
        "aioproducer._native.crcutil", reason="the C helper is built with the compiled hot path"
    )

    class Tagged(bytes):
        pass

    buffer = bytearray(b"." * 32)
    parts = [b"ab", b"", Tagged(b"cde"), b"f" * 10]
    assert crcutil.copy_parts(buffer, 4, parts) == 19
    assert bytes(buffer) == b"...." + b"abcde" + b"f" * 10 + b"." * 13
    assert crcutil.copy_parts(buffer, 32, []) == 32
    # Refused before anything is written: the buffer keeps its bytes and its size.
    before = bytes(buffer)
    with pytest.raises(ValueError, match="do not fit"):
        crcutil.copy_parts(buffer, 20, [b"x" * 10, b"y" * 3])
    with pytest.raises(ValueError, match="do not fit"):
        crcutil.copy_parts(buffer, -1, [b"x"])
    with pytest.raises(TypeError, match="bytes parts, not bytearray"):
        crcutil.copy_parts(buffer, 0, [b"x", bytearray(b"y")])
    with pytest.raises(TypeError, match="into a bytearray"):
        crcutil.copy_parts(memoryview(buffer), 0, [b"x"])
    with pytest.raises(TypeError, match="list of bytes"):
        crcutil.copy_parts(buffer, 0, (b"x",))
    assert bytes(buffer) == before


def test_crc_combine_joins_the_crcs_of_two_strings() -> None:
    crcutil = pytest.importorskip(
        "aioproducer._native.crcutil", reason="the C helper is built with the compiled hot path"
    )
    pieces = [b"", b"a", b"header-bytes" * 3, bytes(range(256)) * 70, b"\xff" * 16_384]
    for a in pieces:
        for b in pieces:
            joined = crcutil.combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b))
            assert joined == crc32c.crc32c(a + b)
    # The power of the last length is kept: the same length again, another, then the first,
    # and a length above 2^31 (its high bits in the kept word's).
    for length in (100, 100, 7, 100, 0, 0):
        a, b = b"head", b"y" * length
        assert crcutil.combine(crc32c.crc32c(a), crc32c.crc32c(b), length) == crc32c.crc32c(a + b)
    big = (1 << 31) + 12_345
    first = crcutil.combine(0x1234_5678, 0, big)
    assert crcutil.combine(0x1234_5678, 0, big) == first
    assert crcutil.combine(0x1234_5678, 0, 12_345) != first
    with pytest.raises(ValueError, match="32-bit CRCs"):
        crcutil.combine(1 << 32, 0, 1)
    with pytest.raises(ValueError, match="4 GiB"):
        crcutil.combine(0, 0, -1)


@pytest.mark.parametrize(
    ("key", "value", "headers"),
    [
        (None, None, None),
        (None, b"v", None),
        (b"k", None, []),
        (b"k" * 200, b"v" * 70_000, None),
        (b"", b"", [("h", None)]),
        (b"key", b"x" * 300, [("name", b"value"), ("n\u00e9", b"\x00" * 129), ("e", b"")]),
    ],
)
def test_the_record_size_estimate_bounds_a_record_that_starts_a_batch(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None
) -> None:
    # The estimate sizes the buffer of a batch that starts with the record (a new batch,
    # a part of a split batch): the record must fit there.
    estimate = estimate_record_size(key, value, headers)
    builder = RecordBatchBuilder(bytearray(RECORD_BATCH_OVERHEAD + estimate))
    assert builder.try_append(1_700_000_000_000, key, value, headers) == 0
    assert RECORD_BATCH_OVERHEAD < len(builder.close()) <= RECORD_BATCH_OVERHEAD + estimate


def test_seal_closes_a_batch_once_and_restamps_a_retry() -> None:
    builder = RecordBatchBuilder(bytearray(200))
    builder.try_append(1000, b"k", b"v", None)
    assert builder.closed_view is None
    first = builder.seal(7, 1, 0)
    assert builder.closed_view is first
    again = bytes(builder.seal(8, 2, 5))  # a retry that keeps its bytes
    assert again == bytes(first)
    restamped = DefaultRecordBatch(bytearray(builder.seal(8, 2, 5, True, restamp=True)))
    assert (restamped.producer_id, restamped.producer_epoch, restamped.base_sequence) == (8, 2, 5)
    assert restamped.is_transactional and restamped.validate_crc()
    builder.detach()
    assert builder.closed_view is None
    with pytest.raises(RuntimeError, match="detached"):
        builder.seal()
