"""Codecs: round trips, the exact formats Kafka expects, levels, and cross-reads with peers."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct
from collections.abc import Callable

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioproducer.errors import ConfigurationError, CorruptResponseError
from aioproducer.protocol.compression import (
    CompressionType,
    compress,
    compressor,
    decompress,
    default_level,
    offload_threshold,
    validate_level,
)

aiokafka_codec = pytest.importorskip("aiokafka.codec")
kafka_codec = pytest.importorskip("kafka.codec")

CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]

# Compressible (repetitive text) and incompressible (random) data, crossing the 32 KiB
# xerial snappy block and the 64 KiB lz4 block boundaries.
TEXT = b"".join(
    b"record %06d: the quick brown fox jumps over the lazy dog\n" % i for i in range(3000)
)
RANDOM = os.urandom(70_000)
SAMPLES = [b"", b"x", TEXT, RANDOM]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("data", SAMPLES, ids=["empty", "one", "text", "random"])
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    compressed = compress(codec, data)
    assert decompress(codec, compressed) == data


@pytest.mark.parametrize(
    ("codec", "levels"),
    [
        (CompressionType.GZIP, [-1, 1, 9]),
        (CompressionType.LZ4, [1, 9, 12, 17]),
        (CompressionType.ZSTD, [-5, 1, 3, 22]),
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_round_trip_at_every_level_bound(codec: CompressionType, levels: list[int]) -> None:
    for level in levels:
        assert decompress(codec, compress(codec, TEXT, level)) == TEXT


def test_compress_accepts_memoryviews_of_a_larger_buffer() -> None:
    backing = bytearray(b"header" + TEXT)
    view = memoryview(backing)[6:]
    for codec in CODECS:
        assert decompress(codec, compress(codec, view)) == TEXT


def test_none_is_identity() -> None:
    assert compress(CompressionType.NONE, memoryview(b"abc")) == b"abc"
    assert decompress(CompressionType.NONE, b"abc") == b"abc"


def test_defaults_follow_kip_390() -> None:
    assert default_level(CompressionType.GZIP) == -1
    assert default_level(CompressionType.LZ4) == 9
    assert default_level(CompressionType.ZSTD) == 3
    assert default_level(CompressionType.SNAPPY) is None
    assert default_level(CompressionType.NONE) is None


@pytest.mark.parametrize(
    ("codec", "level"),
    [
        (CompressionType.GZIP, 0),
        (CompressionType.GZIP, 10),
        (CompressionType.GZIP, -2),
        (CompressionType.LZ4, 0),
        (CompressionType.LZ4, 18),
        (CompressionType.ZSTD, 23),
        (CompressionType.ZSTD, -131073),
        (CompressionType.SNAPPY, 1),
        (CompressionType.NONE, 1),
    ],
)
def test_invalid_levels_are_configuration_errors(codec: CompressionType, level: int) -> None:
    with pytest.raises(ConfigurationError):
        validate_level(codec, level)
    with pytest.raises(ConfigurationError):
        compress(codec, b"data", level)
    with pytest.raises(ConfigurationError):
        compressor(codec, level)


@pytest.mark.parametrize("codec", CODECS)
def test_a_compressor_is_made_once_per_codec_and_level_and_matches_compress(
    codec: CompressionType,
) -> None:
    data = os.urandom(300) * 40  # 12,000 bytes: one LZ4 block, compressible
    function = compressor(codec)
    assert compressor(codec) is function
    assert compressor(codec, default_level(codec)) is not None
    assert decompress(codec, function(data)) == data
    assert decompress(codec, compress(codec, memoryview(data))) == data
    big = os.urandom(70_000)  # incompressible, more than one LZ4 block
    assert decompress(codec, function(big)) == big
    assert compressor(CompressionType.NONE)(memoryview(b"raw")) == b"raw"


def test_lz4_counts_bytes_not_items_of_other_buffers() -> None:
    # len() of an array of 4-byte ints counts ints; the frame must state bytes.
    import array

    lz4 = CompressionType.LZ4
    data = os.urandom(400)
    assert decompress(lz4, compress(lz4, array.array("I", data))) == data
    wide = memoryview(os.urandom(100_000)).cast("I")  # 25,000 items, two 64 KiB blocks
    assert decompress(lz4, compress(lz4, wide)) == wide.tobytes()


def test_a_float_level_is_not_cached_for_the_int_level() -> None:
    # 3.0 == 3 as a dict key: a compressor made for 3.0 must not answer for 3.
    zstd = CompressionType.ZSTD
    with contextlib.suppress(Exception):
        compress(zstd, b"data" * 10, 3.0)  # type: ignore[arg-type]
    assert decompress(zstd, compress(zstd, b"x" * 99, 3)) == b"x" * 99


def test_validate_level_returns_the_default_for_none() -> None:
    assert validate_level(CompressionType.ZSTD, None) == 3
    assert validate_level(CompressionType.ZSTD, -131072) == -131072
    assert validate_level(CompressionType.SNAPPY, None) is None


# ---- the formats on the wire --------------------------------------------------------------


def test_gzip_writes_the_gzip_format() -> None:
    compressed = compress(CompressionType.GZIP, TEXT)
    assert compressed[:3] == b"\x1f\x8b\x08"  # gzip magic, deflate
    assert gzip.decompress(compressed) == TEXT  # the stdlib as an oracle


def test_snappy_writes_xerial_blocks_of_32_kib() -> None:
    compressed = compress(CompressionType.SNAPPY, RANDOM)
    assert compressed[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    position, blocks = 16, []
    while position < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, position)
        block = compressed[position + 4 : position + 4 + length]
        blocks.append(bytes(cramjam.snappy.decompress_raw(block)))
        position += 4 + length
    assert position == len(compressed)
    assert [len(block) for block in blocks] == [32768, 32768, 70_000 - 65536]
    assert b"".join(blocks) == RANDOM


def test_snappy_reads_raw_blocks_too() -> None:
    raw = bytes(cramjam.snappy.compress_raw(TEXT))
    assert decompress(CompressionType.SNAPPY, raw) == TEXT


def test_lz4_writes_frames_with_independent_64_kib_blocks_and_no_checksums() -> None:
    compressed = compress(CompressionType.LZ4, RANDOM)
    assert compressed[:4] == b"\x04\x22\x4d\x18"  # frame magic
    flags, block_descriptor = compressed[4], compressed[5]
    assert flags >> 6 == 1  # version 01
    assert flags & 0x20  # independent blocks (KIP-57: brokers do not read linked blocks)
    assert not flags & 0x10  # no block checksums
    assert not flags & 0x08  # no content size
    assert not flags & 0x04  # no content checksum
    assert (block_descriptor >> 4) & 0x7 == 4  # 64 KiB maximum block size


@pytest.mark.parametrize(
    "data",
    [*SAMPLES, b"q" * 65536, b"q" * 65537, bytearray(RANDOM[:1000]) + bytearray(TEXT)],
    ids=["empty", "one", "text", "random", "one-block", "two-blocks", "mixed"],
)
def test_lz4_at_the_default_level_frames_lz4_blocks_as_lz4_frame_does(data: bytes) -> None:
    # At the default level the frame is put together here around lz4.block's blocks: the
    # header must be the lz4 library's own, every block at most 64 KiB, and the lz4
    # library's frame reader must read it back, from bytes or from a view into a buffer.
    import lz4.frame

    expected_header = lz4.frame.compress(
        b"",
        compression_level=0,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )[:7]
    for source in (data, memoryview(bytearray(data))):
        frame = compress(CompressionType.LZ4, source)
        assert frame[:7] == expected_header
        assert frame[-4:] == b"\x00\x00\x00\x00"
        assert lz4.frame.decompress(frame) == data
        position, blocks = 7, 0
        while frame[position : position + 4] != b"\x00\x00\x00\x00":
            length = int.from_bytes(frame[position : position + 4], "little")
            stored = length & 0x7FFFFFFF
            assert stored <= 64 * 1024
            if length & 0x80000000:  # incompressible: stored as is
                start = blocks * 64 * 1024
                assert frame[position + 4 : position + 4 + stored] == data[start : start + stored]
            position += 4 + stored
            blocks += 1
        assert blocks == -(-len(data) // (64 * 1024))
        assert position + 4 == len(frame)


def test_zstd_writes_a_zstd_frame() -> None:
    assert compress(CompressionType.ZSTD, TEXT)[:4] == b"\x28\xb5\x2f\xfd"


# ---- oracle cross-reads -------------------------------------------------------------------

PEER_DECODERS: dict[CompressionType, list[Callable[[bytes], bytes]]] = {
    CompressionType.GZIP: [aiokafka_codec.gzip_decode, kafka_codec.gzip_decode],
    CompressionType.SNAPPY: [aiokafka_codec.snappy_decode],
    CompressionType.LZ4: [aiokafka_codec.lz4_decode, kafka_codec.lz4_decode],
    CompressionType.ZSTD: [aiokafka_codec.zstd_decode, kafka_codec.zstd_decode],
}
PEER_ENCODERS: dict[CompressionType, list[Callable[[bytes], bytes]]] = {
    CompressionType.GZIP: [aiokafka_codec.gzip_encode, kafka_codec.gzip_encode],
    CompressionType.SNAPPY: [
        aiokafka_codec.snappy_encode,
        lambda data: aiokafka_codec.snappy_encode(data, xerial_compatible=False),
    ],
    CompressionType.LZ4: [aiokafka_codec.lz4_encode, kafka_codec.lz4_encode],
    CompressionType.ZSTD: [aiokafka_codec.zstd_encode, kafka_codec.zstd_encode],
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("data", [TEXT, RANDOM], ids=["text", "random"])
def test_peers_read_what_we_write(codec: CompressionType, data: bytes) -> None:
    compressed = compress(codec, data)
    for peer_decode in PEER_DECODERS[codec]:
        assert bytes(peer_decode(compressed)) == data, peer_decode.__module__


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("data", [TEXT, RANDOM], ids=["text", "random"])
def test_we_read_what_peers_write(codec: CompressionType, data: bytes) -> None:
    for peer_encode in PEER_ENCODERS[codec]:
        assert decompress(codec, bytes(peer_encode(data))) == data


# ---- corrupt input ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_truncated_data_is_corrupt(codec: CompressionType) -> None:
    compressed = compress(codec, RANDOM)
    with pytest.raises(CorruptResponseError):
        decompress(codec, compressed[: len(compressed) // 2])


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_garbage_is_corrupt(codec: CompressionType) -> None:
    with pytest.raises(CorruptResponseError):
        decompress(codec, b"\x82SNAPPY\x00garbage that is not compressed at all")


def test_snappy_block_stating_an_impossible_length_is_refused_before_decoding() -> None:
    # A raw block whose varint preamble claims 4 GiB from 8 bytes.
    with pytest.raises(CorruptResponseError):
        decompress(CompressionType.SNAPPY, b"\xff\xff\xff\xff\x0f\x00ab")
    xerial = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    with pytest.raises(CorruptResponseError):
        decompress(CompressionType.SNAPPY, xerial + b"\x00\x00\x00\x08\xff\xff\xff\xff\x0f\x00ab")
    with pytest.raises(CorruptResponseError):
        decompress(CompressionType.SNAPPY, xerial + b"\x7f\xff\xff\xff")  # block past the end


def _xxh32_short(data: bytes) -> int:
    """XXH32 with seed 0 of fewer than 16 bytes (the LZ4 frame header checksum's hash)."""
    mask = 0xFFFFFFFF
    primes = (2654435761, 2246822519, 3266489917, 668265263, 374761393)

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    assert len(data) < 16
    acc = (primes[4] + len(data)) & mask
    index = 0
    while index + 4 <= len(data):
        acc = (acc + struct.unpack_from("<I", data, index)[0] * primes[2]) & mask
        acc = (rotl(acc, 17) * primes[3]) & mask
        index += 4
    for byte in data[index:]:
        acc = (acc + byte * primes[4]) & mask
        acc = (rotl(acc, 11) * primes[0]) & mask
    acc ^= acc >> 15
    acc = (acc * primes[1]) & mask
    acc ^= acc >> 13
    acc = (acc * primes[2]) & mask
    return acc ^ (acc >> 16)


def test_lz4_frame_stating_a_huge_content_size_is_not_trusted() -> None:
    # lz4.frame.decompress() allocates the content size a frame header states (2**62 bytes
    # here: a MemoryError); the codec must decode the stream instead and find the lie.
    import lz4.frame

    honest = lz4.frame.compress(b"abc", store_size=True, block_linked=False)
    assert honest[4] & 0x08  # the header carries a content size, bytes 6-13
    assert honest[14] == (_xxh32_short(honest[4:14]) >> 8) & 0xFF
    descriptor = honest[4:6] + struct.pack("<Q", 1 << 62)
    checksum = bytes([(_xxh32_short(descriptor) >> 8) & 0xFF])
    forged = honest[:4] + descriptor + checksum + honest[15:]
    with pytest.raises(CorruptResponseError):
        decompress(CompressionType.LZ4, forged)


def test_zstd_frame_stating_a_huge_content_size_is_not_trusted() -> None:
    # ZstdDecompressor.decompress() allocates the content size in the frame header (2**40
    # bytes here: a MemoryError); a streaming decoder must report corruption instead.
    import zstandard

    honest = zstandard.ZstdCompressor().compress(b"abc")
    assert honest[4] == 0x20  # single segment, one-byte content size at byte 5
    forged = honest[:4] + b"\xe0" + struct.pack("<Q", 1 << 40) + honest[6:]
    with pytest.raises(CorruptResponseError):
        decompress(CompressionType.ZSTD, forged)


def test_unknown_codec_is_corrupt() -> None:
    with pytest.raises(CorruptResponseError):
        decompress(7, b"")  # type: ignore[arg-type]


@settings(max_examples=50)
@given(st.sampled_from(CODECS), st.binary(max_size=300))
def test_random_bytes_raise_only_corrupt_response_error(
    codec: CompressionType, data: bytes
) -> None:
    with contextlib.suppress(CorruptResponseError):
        decompress(codec, data)


@settings(max_examples=50)
@given(st.sampled_from(CODECS), st.binary(max_size=3000))
def test_round_trip_property(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_offload_thresholds_follow_the_codec_unless_configured() -> None:
    assert offload_threshold(CompressionType.NONE) is None
    assert offload_threshold(CompressionType.NONE, 0) is None
    # gzip is ~5x slower than zstd per byte, zstd ~2x slower than lz4 and snappy.
    assert offload_threshold(CompressionType.GZIP) == 8 * 1024
    assert offload_threshold(CompressionType.ZSTD) == 64 * 1024
    assert offload_threshold(CompressionType.LZ4) == 128 * 1024
    assert offload_threshold(CompressionType.SNAPPY) == 128 * 1024
    assert offload_threshold(CompressionType.ZSTD, 0) == 0
    assert offload_threshold(CompressionType.ZSTD, 4096) == 4096
    assert offload_threshold(CompressionType.ZSTD, -1) is None


def test_compress_records_then_close_writes_the_same_batch_as_close_alone() -> None:
    from aioproducer.protocol.record_batch import RecordBatchBuilder

    def build(offloaded: bool) -> bytes:
        builder = RecordBatchBuilder(bytearray(64 * 1024), CompressionType.ZSTD)
        for i in range(200):
            assert builder.try_append(1_700_000_000_000 + i, b"k", b"value %d" % i, None) >= 0
        if offloaded:
            with pytest.raises(RuntimeError, match="write_pending"):
                builder.compress_records()
            builder.write_pending()
            builder.use_compressed(builder.compress_records())
            assert builder.precompressed
        return bytes(builder.close(7, 1, 0, False))

    assert build(True) == build(False)
