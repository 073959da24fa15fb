"""Record batch compression codecs, in the formats Kafka's own clients write.

| codec  | format written                              | levels (KIP-390) | default level |
|--------|---------------------------------------------|------------------|---------------|
| gzip   | gzip (RFC 1952), like ``GZIPOutputStream``  | 1..9, or -1      | -1 (zlib's 6) |
| snappy | xerial framing around raw snappy blocks     | none             | none          |
| lz4    | LZ4 frame, independent 64 KiB blocks        | 1..17            | 9             |
| zstd   | zstd frame                                  | -131072..22      | 3             |

The levels and defaults are the Java client's (KIP-390, Kafka 3.8: ``compression.gzip.level``
defaults to ``Deflater.DEFAULT_COMPRESSION`` = -1, which zlib maps to level 6;
``compression.lz4.level`` to 9; ``compression.zstd.level`` to 3). LZ4 levels above 12 compress
as 12, the highest level the C library has; at level 9, the default, LZ4 uses its fast
compressor, as Kafka's Lz4BlockOutputStream does.

Snappy is written the way the Java client writes it (snappy-java's ``SnappyOutputStream``):
the header ``b"\\x82SNAPPY\\x00"``, version 1 and compatible version 1 as big-endian ``int32``,
then each 32 KiB chunk of input as a big-endian ``int32`` length and a raw snappy block. The
Java client and librdkafka both read that; on decompression both that and a bare raw snappy
block are accepted. LZ4 is the frame format with independent blocks (KIP-57: brokers do not
read linked blocks), without checksums or content size, as the Java client writes it.

Decompression never sizes a buffer from a length stored in the compressed data: zstd and LZ4
are decoded as streams, and a snappy block's stated length is checked against the most a
block of its size can expand to. Corrupt input raises
:class:`~aioproducer.errors.CorruptResponseError`.
"""

from __future__ import annotations

import functools
import struct
import threading
import zlib
from collections.abc import Callable
from enum import IntEnum

import cramjam
import lz4.block
import lz4.frame
import zstandard

from aioproducer.errors import ConfigurationError, CorruptResponseError

__all__ = [
    "CompressionType",
    "compress",
    "compressor",
    "decompress",
    "default_level",
    "offload_threshold",
    "validate_level",
]

_Buffer = bytes | bytearray | memoryview


class CompressionType(IntEnum):
    """The codec ids of the record batch ``attributes`` (bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_LEVELS: dict[CompressionType, tuple[int, int, int] | None] = {
    # codec: (min, max, default)
    CompressionType.NONE: None,
    CompressionType.SNAPPY: None,
    CompressionType.GZIP: (1, 9, -1),
    CompressionType.LZ4: (1, 17, 9),
    CompressionType.ZSTD: (-131072, 22, 3),
}


def default_level(codec: CompressionType) -> int | None:
    """The Java client's default level for ``codec``, or None when it has no levels."""
    levels = _LEVELS[CompressionType(codec)]
    return None if levels is None else levels[2]


# Uncompressed record bytes from which a batch is compressed in a worker thread rather than
# on the event loop, per codec at its default level: every codec here releases the GIL while it
# works, and a thread pays off once compressing takes about four times the loop time of the
# hand-off through run_in_executor (the figures, from bench/micro/compression.py, are in
# bench/README.md). Below these the batch is compressed inline, which costs the loop less
# than the hand-off would.
_OFFLOAD_THRESHOLDS: dict[CompressionType, int] = {
    CompressionType.GZIP: 8 * 1024,
    CompressionType.ZSTD: 64 * 1024,
    CompressionType.LZ4: 128 * 1024,
    CompressionType.SNAPPY: 128 * 1024,
}


def offload_threshold(codec: CompressionType, configured: int | None = None) -> int | None:
    """Record bytes from which ``codec`` runs in a worker thread; None for never.

    ``configured`` is ``compression_offload_bytes``: None picks the measured default for the
    codec, a negative number turns offloading off, 0 or more is the threshold itself.
    """
    codec = CompressionType(codec)
    if codec is CompressionType.NONE:
        return None
    if configured is None:
        return _OFFLOAD_THRESHOLDS[codec]
    return None if configured < 0 else configured


def validate_level(codec: CompressionType, level: int | None) -> int | None:
    """Return the level to use (the default for None), or raise ``ConfigurationError``.

    Ranges follow KIP-390: gzip 1..9 (or -1, zlib's default), lz4 1..17, zstd -131072..22;
    none and snappy take no level.
    """
    codec = CompressionType(codec)
    levels = _LEVELS[codec]
    if level is None:
        return None if levels is None else levels[2]
    if levels is None:
        raise ConfigurationError(f"{codec.name.lower()} compression takes no level")
    low, high, default = levels
    if not (low <= level <= high or level == default):
        raise ConfigurationError(
            f"{codec.name.lower()} compression level must be in {low}..{high}, got {level}"
        )
    return level


# ---- gzip ---------------------------------------------------------------------------------

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip wrapper, 32 KiB window
_GZIP_OR_ZLIB_WBITS = 32 + zlib.MAX_WBITS  # detect the wrapper when reading


def _gzip_compress(data: _Buffer, level: int) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data: _Buffer) -> bytes:
    decompressor = zlib.decompressobj(_GZIP_OR_ZLIB_WBITS)
    out = decompressor.decompress(data) + decompressor.flush()
    if not decompressor.eof:
        raise CorruptResponseError("truncated gzip data")
    return out


# ---- snappy -------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")
# The densest snappy element is a 3-byte copy that writes 64 bytes; nothing expands more.
_SNAPPY_MAX_EXPANSION = 22


def _snappy_compress(data: _Buffer) -> bytes:
    view = memoryview(data)
    if view.format != "B":
        view = view.cast("B")
    parts = [_XERIAL_HEADER]
    raw = cramjam.snappy.compress_raw
    pack = _BLOCK_LENGTH.pack
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_stated_length(block: memoryview) -> int:
    """The uncompressed length at the start of a raw snappy block (an unsigned varint)."""
    result = 0
    for index in range(min(5, len(block))):
        byte = block[index]
        result |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return result
    raise CorruptResponseError("invalid snappy block length")


def _snappy_raw_decompress(block: memoryview) -> bytes:
    # The snappy library allocates the length the block states before decoding it; refuse a
    # length no block of this size can reach instead of trusting it.
    if _snappy_stated_length(block) > _SNAPPY_MAX_EXPANSION * len(block):
        raise CorruptResponseError("snappy block states an impossible length")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: _Buffer) -> bytes:
    view = memoryview(data)
    if view.format != "B":
        view = view.cast("B")
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return _snappy_raw_decompress(view)
    if len(view) < 16:
        raise CorruptResponseError("truncated xerial snappy header")
    position = 16
    end = len(view)
    parts: list[bytes] = []
    while position < end:
        if position + 4 > end:
            raise CorruptResponseError("truncated xerial snappy block length")
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += 4
        if length < 0 or position + length > end:
            raise CorruptResponseError(f"invalid xerial snappy block length {length}")
        parts.append(_snappy_raw_decompress(view[position : position + length]))
        position += length
    return b"".join(parts)


# ---- lz4 ----------------------------------------------------------------------------------

_LZ4_CHUNK = 1 << 20


# Kafka's Lz4BlockOutputStream uses lz4's fast compressor at the default level (9) and the
# high-compression one at any other level; lz4.frame's level 0 is the fast mode.
_LZ4_DEFAULT_LEVEL = 9


# At the default level the frame is written here around lz4.block's raw blocks: the frame
# format with Kafka's settings is a fixed 7-byte header, then each 64 KiB block as a
# little-endian uint32 length and the block (the length's top bit set when the block is
# stored uncompressed, because compressing did not make it smaller), then a zero end mark.
# It is the frame lz4.frame.compress writes with those settings (the blocks' matches can
# differ by a few bytes), for less: lz4.frame sets up a frame context on every call (figures
# in bench/README.md). Other levels go through lz4.frame (its HC mode). Input of one block (up
# to 64 KiB, the usual batch) is framed without slicing, with the cached compressor() below.
_LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000
_LZ4_BLOCK_LENGTH = struct.Struct("<I")
_LZ4_END_MARK = b"\x00\x00\x00\x00"


def _lz4_frame_settings(level: int) -> dict[str, object]:
    return {
        "compression_level": 0 if level == _LZ4_DEFAULT_LEVEL else level,
        "block_size": lz4.frame.BLOCKSIZE_MAX64KB,
        "block_linked": False,
        "content_checksum": False,
        "block_checksum": False,
        "store_size": False,
    }


# The header lz4.frame writes with these settings: magic, FLG, BD and the header checksum.
_LZ4_HEADER: bytes = lz4.frame.compress(b"", **_lz4_frame_settings(9))[:7]


def _lz4_compress_fast(data: _Buffer) -> bytes:
    # Bytes, not items: len() of an array.array or a memoryview of ints counts items.
    size = len(data) if type(data) in (bytes, bytearray) else memoryview(data).nbytes
    if size == 0:
        return _LZ4_HEADER + _LZ4_END_MARK
    if size <= _LZ4_BLOCK_SIZE:
        # One block, the usual case (batch.size is 16 KiB by default): no slicing.
        block: bytes = lz4.block.compress(data, store_size=False)
        if len(block) < size:
            return b"".join((_LZ4_HEADER, _LZ4_BLOCK_LENGTH.pack(len(block)), block, _LZ4_END_MARK))
        return b"".join(
            (_LZ4_HEADER, _LZ4_BLOCK_LENGTH.pack(size | _LZ4_UNCOMPRESSED), data, _LZ4_END_MARK)
        )
    view = memoryview(data).cast("B")
    parts: list[_Buffer] = [_LZ4_HEADER]
    for start in range(0, size, _LZ4_BLOCK_SIZE):
        chunk = view[start : start + _LZ4_BLOCK_SIZE]
        block = lz4.block.compress(chunk, store_size=False)
        if len(block) < len(chunk):
            parts.append(_LZ4_BLOCK_LENGTH.pack(len(block)))
            parts.append(block)
        else:
            parts.append(_LZ4_BLOCK_LENGTH.pack(len(chunk) | _LZ4_UNCOMPRESSED))
            parts.append(chunk)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_compress(data: _Buffer, level: int) -> bytes:
    # Levels other than the default (HC mode); _make_compressor picks _lz4_compress_fast
    # for the default.
    compressed: bytes = lz4.frame.compress(data, **_lz4_frame_settings(level))
    return compressed


def _lz4_decompress(data: _Buffer) -> bytes:
    # lz4.frame.decompress() would allocate the content size a frame header states; a
    # decompressor object with a bounded output per call allocates only what it produces.
    decompressor = lz4.frame.LZ4FrameDecompressor()
    parts = [decompressor.decompress(data, max_length=_LZ4_CHUNK)]
    while not decompressor.eof and not decompressor.needs_input:
        parts.append(decompressor.decompress(b"", max_length=_LZ4_CHUNK))
    if not decompressor.eof:
        raise CorruptResponseError("truncated lz4 frame")
    return b"".join(parts)


# ---- zstd ---------------------------------------------------------------------------------

# Compressor objects are not thread safe, and compression may run in worker threads.
_local = threading.local()


def _zstd_compress(data: _Buffer, level: int) -> bytes:
    compressors: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "zstd", None)
    if compressors is None:
        compressors = _local.zstd = {}
    compressor = compressors.get(level)
    if compressor is None:
        compressor = compressors[level] = zstandard.ZstdCompressor(level=level)
    compressed: bytes = compressor.compress(data)
    return compressed


def _zstd_decompress(data: _Buffer) -> bytes:
    # A streaming decompressor: ZstdDecompressor.decompress() would allocate the content
    # size the frame header states.
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    out: bytes = decompressor.decompress(data)
    if not decompressor.eof:
        raise CorruptResponseError("truncated zstd frame")
    return out


# ---- dispatch -----------------------------------------------------------------------------

_DECOMPRESS_ERRORS = (
    zlib.error,
    zstandard.ZstdError,
    cramjam.DecompressionError,
    RuntimeError,
    ValueError,
)


def compressor(codec: CompressionType, level: int | None = None) -> Callable[[_Buffer], bytes]:
    """The function that compresses with ``codec`` at ``level`` (None: the Java client's
    default), made once per codec and level: :func:`compress` without the checks per call.

    An invalid level raises :class:`~aioproducer.errors.ConfigurationError`.
    """
    # Only int (or None) levels are cached: 3.0 == 3 as a dict key, and a compressor made
    # for a float level must not answer for the int one.
    cacheable = level is None or type(level) is int
    key = (codec, level)
    function = _COMPRESSORS.get(key) if cacheable else None
    if function is None:
        function = _make_compressor(CompressionType(codec), level)
        if cacheable:
            _COMPRESSORS[key] = function
    return function


def _make_compressor(codec: CompressionType, level: int | None) -> Callable[[_Buffer], bytes]:
    chosen = validate_level(codec, level)
    if codec is CompressionType.SNAPPY:
        return _snappy_compress
    if codec is CompressionType.NONE:
        return bytes
    assert chosen is not None
    if codec is CompressionType.LZ4 and chosen == _LZ4_DEFAULT_LEVEL:
        return _lz4_compress_fast
    compress_at = {
        CompressionType.GZIP: _gzip_compress,
        CompressionType.LZ4: _lz4_compress,
        CompressionType.ZSTD: _zstd_compress,
    }[codec]
    return functools.partial(compress_at, level=chosen)


# (codec, level) -> its compressor; a handful of entries at most.
_COMPRESSORS: dict[tuple[CompressionType, int | None], Callable[[_Buffer], bytes]] = {}


def compress(codec: CompressionType, data: _Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` at ``level`` (None: the Java client's default).

    ``CompressionType.NONE`` returns the bytes unchanged. An invalid level raises
    :class:`~aioproducer.errors.ConfigurationError`.
    """
    return compressor(codec, level)(data)


def decompress(codec: CompressionType, data: _Buffer) -> bytes:
    """Decompress ``data`` written with ``codec``; corrupt data raises ``CorruptResponseError``."""
    try:
        codec = CompressionType(codec)
    except ValueError:
        raise CorruptResponseError(f"unknown compression codec {codec}") from None
    try:
        if codec is CompressionType.GZIP:
            return _gzip_decompress(data)
        if codec is CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec is CompressionType.LZ4:
            return _lz4_decompress(data)
        if codec is CompressionType.ZSTD:
            return _zstd_decompress(data)
    except CorruptResponseError:
        raise
    except _DECOMPRESS_ERRORS as exc:
        raise CorruptResponseError(f"corrupt {codec.name.lower()} data: {exc}") from exc
    return bytes(data)
