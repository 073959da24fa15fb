"""Record batch v2 decoding: a hand-built batch, aiokafka's builder as an oracle, bad input."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioproducer.errors import CorruptResponseError
from aioproducer.protocol.compression import CompressionType
from aioproducer.protocol.record_reader import (
    DecodedRecord,
    DecodedRecordBatch,
    decode_record_batches,
)

default_records = pytest.importorskip("aiokafka.record.default_records")


def with_crc(batch: bytes | bytearray) -> bytes:
    """Fill in the CRC-32C of a batch (bytes 17-20) over its bytes from the attributes on."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


RECORDS = (
    "18"  # record length 12
    "00 00 00"  # attributes, timestamp delta 0, offset delta 0
    "02 6b | 02 76"  # key "k", value "v"
    "02 | 02 68 02 78"  # one header: "h" = "x"
    "16"  # record length 11
    "00 0a 02"  # attributes, timestamp delta 5, offset delta 1
    "01 | 04 7676"  # key null, value "vv"
    "02 | 02 68 01"  # one header: "h" = null
)
HAND_BUILT = with_crc(
    bytes.fromhex(
        (
            "0000000000000064"  # base offset 100
            "0000004a"  # batch length: 74 bytes follow
            "ffffffff"  # partition leader epoch -1
            "02"  # magic
            "00000000"  # CRC, filled in below
            "0010"  # attributes: transactional
            "00000001"  # last offset delta
            "00000000000003e8 00000000000003ed"  # base and max timestamps 1000, 1005
            "0000000000000007 0001 00000005"  # producer id, epoch, base sequence
            "00000002"  # record count
        ).replace(" ", "")
        + RECORDS.replace(" ", "").replace("|", "")
    )
)


def test_hand_built_batch() -> None:
    [batch] = decode_record_batches(HAND_BUILT)
    assert batch == DecodedRecordBatch(
        base_offset=100,
        partition_leader_epoch=-1,
        magic=2,
        crc=int.from_bytes(HAND_BUILT[17:21], "big"),
        attributes=0x10,
        last_offset_delta=1,
        base_timestamp=1000,
        max_timestamp=1005,
        producer_id=7,
        producer_epoch=1,
        base_sequence=5,
        records=[
            DecodedRecord(0, 0, b"k", b"v", [("h", b"x")]),
            DecodedRecord(1, 5, None, b"vv", [("h", None)]),
        ],
    )
    assert batch.is_transactional
    assert not batch.is_control
    assert batch.compression is CompressionType.NONE
    assert batch.timestamp_type == 0


def test_a_changed_key_with_its_crc_fixed_decodes() -> None:
    # The same change as the "crc-mismatch" case below is well-formed once the CRC matches:
    # that case fails on the CRC alone.
    [batch] = decode_record_batches(_mutated(66, b"K"))
    assert batch.records[0].key == b"K"


def test_batches_back_to_back_and_from_a_memoryview() -> None:
    data = memoryview(bytearray(b"xx" + HAND_BUILT + HAND_BUILT))[2:]
    assert len(decode_record_batches(data)) == 2
    assert decode_record_batches(b"") == []


def _aiokafka_batch(
    codec: int, records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]]
) -> bytes:
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=1,
        producer_id=123456789,
        producer_epoch=7,
        base_sequence=42,
        batch_size=1 << 24,
    )
    for offset, (timestamp, key, value, headers) in enumerate(records):
        assert builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


ORACLE_RECORDS: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
    (1_700_000_000_000, b"key-0", b"value-0" * 50, []),
    (1_700_000_000_001, None, b"no key", [("trace", b"abc"), ("ünïcode", b"")]),
    (1_700_000_000_000 - 7, b"earlier", None, []),  # a negative timestamp delta, null value
    *[(1_700_000_005_000 + i, b"k%d" % i, b"v" * i, []) for i in range(200)],
]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_decodes_what_aiokafka_builds(codec: CompressionType) -> None:
    [batch] = decode_record_batches(_aiokafka_batch(int(codec), ORACLE_RECORDS))
    assert batch.compression is codec
    assert batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123456789, 7, 42)
    assert batch.last_offset_delta == len(ORACLE_RECORDS) - 1
    assert batch.base_timestamp == ORACLE_RECORDS[0][0]
    assert batch.max_timestamp == max(r[0] for r in ORACLE_RECORDS)
    decoded = [
        (batch.base_timestamp + r.timestamp_delta, r.key, r.value, r.headers) for r in batch.records
    ]
    assert decoded == ORACLE_RECORDS
    assert [r.offset_delta for r in batch.records] == list(range(len(ORACLE_RECORDS)))


# ---- corrupt input ------------------------------------------------------------------------


def _mutated(offset: int, replacement: bytes, fix_crc: bool = True) -> bytes:
    data = bytearray(HAND_BUILT)
    data[offset : offset + len(replacement)] = replacement
    return with_crc(data) if fix_crc else bytes(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_mutated(66, b"K", fix_crc=False), id="crc-mismatch"),  # the key "k"
        pytest.param(HAND_BUILT[:-1], id="truncated-batch"),
        pytest.param(HAND_BUILT[:40], id="truncated-header"),
        pytest.param(HAND_BUILT + HAND_BUILT[:20], id="truncated-second-batch"),
        pytest.param(_mutated(16, b"\x01"), id="magic-1"),
        pytest.param(_mutated(8, b"\x00\x00\x00\x05"), id="batch-length-too-small"),
        pytest.param(_mutated(8, b"\x7f\xff\xff\xff"), id="batch-length-too-large"),
        pytest.param(_mutated(57, b"\x00\x00\x00\x03"), id="more-records-than-present"),
        pytest.param(_mutated(57, b"\x00\x00\x00\x01"), id="bytes-after-last-record"),
        pytest.param(_mutated(57, b"\x80\x00\x00\x00"), id="negative-record-count"),
        pytest.param(_mutated(61, b"\x7e"), id="record-length-past-the-end"),
        pytest.param(_mutated(61, b"\x01"), id="negative-record-length"),
        pytest.param(_mutated(65, b"\x7e"), id="key-length-past-the-record"),
        pytest.param(_mutated(69, b"\x03"), id="negative-header-count"),
        pytest.param(_mutated(71, b"\xc3\x28"[:1]), id="header-key-not-utf8"),
        pytest.param(_mutated(21, b"\x00\x07"), id="unknown-codec"),
        pytest.param(_mutated(21, b"\x00\x01"), id="not-gzip-data"),
    ],
)
def test_corrupt_batches_raise_corrupt_response_error(data: bytes) -> None:
    with pytest.raises(CorruptResponseError):
        decode_record_batches(data)


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_response_error(data: bytes) -> None:
    with contextlib.suppress(CorruptResponseError):
        decode_record_batches(data)


_COMPRESSED = {codec: _aiokafka_batch(int(codec), ORACLE_RECORDS[:20]) for codec in CompressionType}


@settings(max_examples=200)
@given(st.sampled_from(list(CompressionType)), st.data())
def test_truncated_or_mutated_valid_batches_raise_only_corrupt_response_error(
    codec: CompressionType, data: st.DataObject
) -> None:
    batch = bytearray(_COMPRESSED[codec])
    if data.draw(st.booleans(), label="truncate"):
        cut = data.draw(st.integers(1, len(batch) - 1), label="cut")
        with pytest.raises(CorruptResponseError):
            decode_record_batches(bytes(batch[:cut]))
        return
    # Change bytes after the CRC and fix the CRC up, so the decoding itself is exercised.
    for _ in range(data.draw(st.integers(1, 4), label="changes")):
        position = data.draw(st.integers(21, len(batch) - 1), label="position")
        batch[position] = data.draw(st.integers(0, 255), label="byte")
    with contextlib.suppress(CorruptResponseError):
        decode_record_batches(with_crc(batch))
