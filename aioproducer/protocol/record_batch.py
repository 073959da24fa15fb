"""The record batch v2 builder: the producer's hot path.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

Records are encoded straight into a pooled ``bytearray`` (the BufferPool hands it out), after
a 61-byte header that is filled in when the batch is closed. Varints for small numbers come
from a precomputed table, and the CRC-32C runs in C (the ``crc32c`` package). Where the C
helper ``aioproducer._native.crcutil`` is built, the records' CRC is taken as they are copied into
the buffer and combined with the header's at close, so closing reads only the header.

Layout (see Kafka's DefaultRecordBatch): baseOffset int64, batchLength int32,
partitionLeaderEpoch int32, magic int8 (2), crc uint32, attributes int16, lastOffsetDelta
int32, baseTimestamp int64, maxTimestamp int64, producerId int64, producerEpoch int16,
baseSequence int32, recordCount int32, then the records (compressed as one block when a codec
is set). The CRC covers everything from the attributes to the end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final, cast

import crc32c as _crc32c

from aioproducer.protocol.compression import CompressionType, compress

__all__ = [
    "RECORD_BATCH_OVERHEAD",
    "RecordBatchBuilder",
    "encode_varint",
    "estimate_record_size",
]

RECORD_BATCH_OVERHEAD: Final = 61
"""Bytes of the batch header before the first record."""

# Final throughout: compiled, a Final module constant is a C static or an inlined literal,
# where a plain one is a dict lookup in the module globals at every use.
_MAX_RECORD_OVERHEAD: Final = 21
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21
_TRANSACTIONAL_FLAG: Final = 0x10

# baseOffset, batchLength, partitionLeaderEpoch, magic
_HEAD: Final = struct.Struct(">qiib")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordCount
_TAIL: Final = struct.Struct(">hiqqqhii")
_PRODUCER_STATE: Final = struct.Struct(">qhi")
_PRODUCER_STATE_OFFSET: Final = 43
_CRC: Final = struct.Struct(">I")

_crc: Final = _crc32c.crc32c


def _load_crc_combine() -> Callable[[int, int, int], int] | None:
    # The C helper is built with the compiled hot path; without it (the pure-Python
    # install) close() takes the CRC of the whole batch.
    try:
        from aioproducer._native.crcutil import combine
    except ImportError:
        return None
    return combine


#: crc(a + b) from crc(a), crc(b) and len(b), where aioproducer._native.crcutil is built.
_crc_combine: Final = _load_crc_combine()


def _load_copy_parts() -> Callable[[bytearray, int, list[bytes]], int] | None:
    # Without the C helper, write_pending() joins the parts and assigns the slice.
    try:
        from aioproducer._native.crcutil import copy_parts
    except ImportError:
        return None
    return copy_parts


#: Copies a list of bytes into a bytearray at an offset, where aioproducer._native.crcutil is built.
_copy_parts: Final = _load_copy_parts()


def _encode_varint_slow(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    zigzag &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


_TABLE_LOW: Final = -1
_TABLE_HIGH: Final = 1 << 16
_VARINTS: Final[list[bytes]] = [_encode_varint_slow(i) for i in range(_TABLE_LOW, _TABLE_HIGH)]
# Their lengths, by the same index: a list lookup is cheaper than len() on the hot path.
_VARINT_SIZES: Final[list[int]] = [len(encoded) for encoded in _VARINTS]


def encode_varint(value: int) -> bytes:
    """Zig-zag varint encoding of ``value`` (table lookup for -1..65535)."""
    if _TABLE_LOW <= value < _TABLE_HIGH:
        return _VARINTS[value + 1]
    return _encode_varint_slow(value)


def _header_bytes(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        encoded_name = name.encode("utf-8")
        parts.append(encode_varint(len(encoded_name)))
        parts.append(encoded_name)
        if value is None:
            parts.append(_VARINTS[0])
        else:
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def estimate_record_size(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None
) -> int:
    """An upper bound of the bytes one record takes in a batch (Kafka's estimate).

    The one estimate of a record's size: it checks a record against ``max_request_size``
    and ``buffer_memory``, sizes the buffer of a batch that starts with the record, and
    sizes the parts of a split batch.
    """
    size = _MAX_RECORD_OVERHEAD + 5
    size += -1 if key is None else len(key)
    size += -1 if value is None else len(value)
    if headers:
        for name, data in headers:
            size += len(name.encode()) + (0 if data is None else len(data)) + 10
    return size


# What a detached builder points at instead of its buffer and parts (see detach()). Shared
# and never written: a detached builder has no capacity, so no record is appended to it.
_DETACHED_BUFFER = bytearray()
_NO_PARTS: list[bytes] = []


class RecordBatchBuilder:
    """Appends records into a pooled buffer and closes them into a v2 record batch.

    The buffer is written in place: records start at byte 61, and ``close()`` fills the header
    and the CRC. The builder never grows the buffer; ``try_append`` returns False when a record
    does not fit, except for the first record, for which the caller sized the buffer.
    """

    __slots__ = (
        "_buffer",
        "_capacity",
        "_closed_view",
        "_combine_crc",
        "_compression",
        "_compression_level",
        "_parts",
        "_position",
        "_precompressed",
        "_records_crc",
        "_written",
        "base_timestamp",
        "max_timestamp",
        "record_count",
        "uncompressed_size",
    )

    def __init__(
        self,
        buffer: bytearray,
        compression: CompressionType = CompressionType.NONE,
        compression_level: int | None = None,
    ) -> None:
        self._buffer = buffer
        self._capacity = len(buffer)
        self._position = RECORD_BATCH_OVERHEAD
        # Records are encoded into parts (the caller's key and value bytes among them) and
        # copied into the buffer in one go when the batch is full or closed: one copy per
        # batch instead of per record (aioproducer._native.crcutil.copy_parts; without it, a join
        # and a slice assignment). _written is where the buffer's copy ends.
        self._parts: list[bytes] = []
        self._written = RECORD_BATCH_OVERHEAD
        # With aioproducer._native.crcutil, for uncompressed batches (a codec's block gets its CRC
        # at close, while it is in the cache anyway): the CRC-32C of the records written so
        # far, taken as they are copied in; close() combines it with the header's.
        self._combine_crc = _crc_combine is not None and compression is CompressionType.NONE
        self._records_crc = 0
        self._compression = compression
        self._compression_level = compression_level
        self._closed_view: memoryview | None = None
        self._precompressed: bytes | None = None
        self.record_count = 0
        self.base_timestamp = 0
        self.max_timestamp = -1
        self.uncompressed_size = 0

    @property
    def buffer(self) -> bytearray:
        """The pooled buffer the batch is written into."""
        return self._buffer

    @property
    def pending_parts(self) -> list[bytes]:
        """The pieces of the records not yet copied into the buffer (see
        :meth:`write_pending`): ``bytes`` only, and the same list for the builder's life."""
        return self._parts

    @property
    def size_in_bytes(self) -> int:
        """Bytes used so far (header included, before compression)."""
        return self._position

    @property
    def remaining(self) -> int:
        """Bytes still free in the buffer."""
        return self._capacity - self._position

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> int:
        """Append one record; return its offset delta, or -1 when it does not fit.

        ``key`` and ``value`` must be ``bytes`` (or None); the caller converts other buffers.
        """
        count = self.record_count
        if count == 0:
            self.base_timestamp = timestamp
            timestamp_delta = 0
        else:
            timestamp_delta = timestamp - self.base_timestamp
        varints = _VARINTS
        sizes = _VARINT_SIZES
        if -1 <= timestamp_delta < 65535:
            ts_bytes = varints[timestamp_delta + 1]
            body_length = 1 + sizes[timestamp_delta + 1]  # attributes, timestamp delta
        else:
            ts_bytes = _encode_varint_slow(timestamp_delta)
            body_length = 1 + len(ts_bytes)
        if count < 65535:
            offset_bytes = varints[count + 1]
            body_length += sizes[count + 1]
        else:
            offset_bytes = _encode_varint_slow(count)
            body_length += len(offset_bytes)
        if key is None:
            key = b""
            key_prefix = b"\x01"
            body_length += 1
        else:
            key_length = len(key)
            if key_length < 65535:
                key_prefix = varints[key_length + 1]
                body_length += sizes[key_length + 1] + key_length
            else:
                key_prefix = _encode_varint_slow(key_length)
                body_length += len(key_prefix) + key_length
        if value is None:
            value = b""
            value_prefix = b"\x01"
            body_length += 1
        else:
            value_length = len(value)
            if value_length < 65535:
                value_prefix = varints[value_length + 1]
                body_length += sizes[value_length + 1] + value_length
            else:
                value_prefix = _encode_varint_slow(value_length)
                body_length += len(value_prefix) + value_length
        if headers:
            header_bytes = _header_bytes(headers)
            body_length += len(header_bytes)
        else:
            header_bytes = b"\x00"
            body_length += 1
        # The body length is known from the parts, so no temporary encoding is needed.
        if body_length < 65535:
            length_prefix = varints[body_length + 1]
            end = self._position + sizes[body_length + 1] + body_length
        else:
            length_prefix = _encode_varint_slow(body_length)
            end = self._position + len(length_prefix) + body_length
        if end > self._capacity:
            if count != 0:
                # Full: nothing more will fit, so the records go into the buffer now and
                # the caller's bytes are no longer referenced.
                self.write_pending()
                return -1
            raise ValueError(
                f"the buffer ({self._capacity} bytes) cannot hold the first record ({end} bytes)"
            )
        self._parts.extend(
            (
                length_prefix,
                b"\x00",
                ts_bytes,
                offset_bytes,
                key_prefix,
                key,
                value_prefix,
                value,
                header_bytes,
            )
        )
        self._position = end
        self.record_count = count + 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return count

    def _run_head(self, timestamp: int) -> bytes:
        """The attributes and timestamp delta that every record of a run appended at
        ``timestamp`` shares (delta 0 for the batch's first records)."""
        delta = 0 if self.record_count == 0 else timestamp - self.base_timestamp
        if -1 <= delta < 65535:
            return b"\x00" + _VARINTS[delta + 1]
        return b"\x00" + _encode_varint_slow(delta)

    def append_values(
        self, timestamp: int, values: Sequence[bytes], start: int, stop: int
    ) -> int:
        """Append ``values[start:stop]`` as records without key or headers; return where it
        stopped (``stop`` when all fit).

        The bulk path of ``send_many``: every record shares ``timestamp``, and the records are
        copied into the buffer together (see :meth:`write_pending`). Each value must be
        ``bytes``.
        """
        count = self.record_count
        if start >= stop:
            return start
        if count == 0:
            self.base_timestamp = timestamp
        varints = _VARINTS
        head = self._run_head(timestamp)
        fixed = len(head) + 1 + 1  # + key length (-1) + header count (0)
        position = self._position
        capacity = self._capacity
        parts = self._parts
        index = start
        limit = 65534
        while index < stop:
            value = values[index]
            value_length = len(value)
            offset_bytes = varints[count + 1] if count < limit else _encode_varint_slow(count)
            value_prefix = (
                varints[value_length + 1]
                if value_length < limit
                else _encode_varint_slow(value_length)
            )
            body_length = fixed + len(offset_bytes) + len(value_prefix) + value_length
            length_prefix = (
                varints[body_length + 1] if body_length < limit else _encode_varint_slow(
                    body_length
                )
            )
            end = position + len(length_prefix) + body_length
            if end > capacity:
                if count == 0:
                    raise ValueError(
                        f"the buffer ({capacity} bytes) cannot hold the first record "
                        f"({end} bytes)"
                    )
                break
            parts.extend((length_prefix, head, offset_bytes, b"\x01", value_prefix, value, b"\x00"))
            position = end
            count += 1
            index += 1
        if index > start:
            self._position = position
            self.record_count = count
            if timestamp > self.max_timestamp:
                self.max_timestamp = timestamp
        if index < stop:
            # Full: copy the records in now. After _position moved: write_pending() fills
            # the buffer up to it, and a slice shorter than the records would grow the
            # buffer instead (and the pool would not take it back).
            self.write_pending()
        return index

    def append_pairs(
        self,
        timestamp: int,
        items: list[Any],
        base: int,
        places: list[int],
        start: int,
        stop: int,
        write: bool = True,
    ) -> int:
        """Append the ``(key, value)`` records ``items[base + places[i]]``, ``i`` from
        ``start`` to ``stop``, without headers; return the ``i`` it stopped at (``stop`` when
        all fit).

        The keyed bulk path of ``send_many``: every record shares ``timestamp``; keys and
        values must be ``bytes``. With ``write`` False nothing is appended: the return value
        says how many would fit.
        """
        count = self.record_count
        if start >= stop:
            return start
        first = count == 0
        varints = _VARINTS
        head = self._run_head(timestamp)
        fixed = len(head) + 1  # + header count (0)
        position = self._position
        capacity = self._capacity
        parts = self._parts
        index = start
        limit = 65534
        while index < stop:
            key, value = cast("tuple[bytes, bytes]", items[base + places[index]])
            key_length = len(key)
            value_length = len(value)
            offset_bytes = varints[count + 1] if count < limit else _encode_varint_slow(count)
            key_prefix = (
                varints[key_length + 1] if key_length < limit else _encode_varint_slow(key_length)
            )
            value_prefix = (
                varints[value_length + 1]
                if value_length < limit
                else _encode_varint_slow(value_length)
            )
            body_length = (
                fixed
                + len(offset_bytes)
                + len(key_prefix)
                + key_length
                + len(value_prefix)
                + value_length
            )
            length_prefix = (
                varints[body_length + 1] if body_length < limit else _encode_varint_slow(
                    body_length
                )
            )
            end = position + len(length_prefix) + body_length
            if end > capacity:
                if count == 0 and write:
                    raise ValueError(
                        f"the buffer ({capacity} bytes) cannot hold the first record "
                        f"({end} bytes)"
                    )
                break
            if write:
                parts.extend(
                    (
                        length_prefix,
                        head,
                        offset_bytes,
                        key_prefix,
                        key,
                        value_prefix,
                        value,
                        b"\x00",
                    )
                )
            position = end
            count += 1
            index += 1
        if write and index > start:
            if first:
                self.base_timestamp = timestamp
            self._position = position
            self.record_count = count
            if timestamp > self.max_timestamp:
                self.max_timestamp = timestamp
        if write and index < stop:
            # Full: copy the records in now (see append_values).
            self.write_pending()
        return index

    def append_rows(
        self,
        timestamp: int,
        rows: Any,
        base: int,
        places: list[int] | None,
        start: int,
        stop: int,
        write: bool = True,
        sizes: bytearray | None = None,
    ) -> int:
        """:meth:`append_pairs` for the rows ``base + places[i]`` (``base + i`` when
        ``places`` is None) of ``rows``, a BinaryPairs (``aioproducer._native.arrowcols``:
        the keys and values of an Arrow batch, either may be null), which encodes them into
        one part. With ``sizes``, the key and value sizes of each record appended are added
        to it as two native int32 (-1 for a null)."""
        count = self.record_count
        if start >= stop:
            return start
        encoded = rows.encode(
            self._run_head(timestamp),
            count,
            base,
            places,
            start,
            stop,
            self._capacity - self._position,
            write,
            sizes,
        )
        stopped: int = encoded[1]
        if not write:
            return stopped
        if stopped == start and count == 0:
            raise ValueError(
                f"the buffer ({self._capacity} bytes) cannot hold the first record"
            )
        if stopped > start:
            if count == 0:
                self.base_timestamp = timestamp
            records: bytes = encoded[0]
            self._parts.append(records)
            self._position += encoded[2]
            self.record_count = count + stopped - start
            if timestamp > self.max_timestamp:
                self.max_timestamp = timestamp
        if stopped < stop:
            # Full: copy the records in now (see append_values).
            self.write_pending()
        return stopped

    def write_pending(self) -> None:
        """Copy the records appended since the last call into the buffer.

        ``close`` and ``compress_records`` need it done; call it on the event loop before
        handing the batch to a worker thread.
        """
        parts = self._parts
        if parts:
            written = self._written
            position = self._position
            if _copy_parts is not None:
                # Straight into the buffer: one pass over the bytes, no temporary.
                end = _copy_parts(self._buffer, written, parts)
                assert end == position, "pending records and position disagree"
                if self._combine_crc:
                    # Read back while the copy is still in the cache.
                    self._records_crc = _crc(
                        memoryview(self._buffer)[written:position], self._records_crc
                    )
            else:
                data = b"".join(parts)
                assert len(data) == position - written, "pending records and position disagree"
                if self._combine_crc:
                    self._records_crc = _crc(data, self._records_crc)
                self._buffer[written:position] = data
            parts.clear()
            self._written = position

    @property
    def records_size(self) -> int:
        """Bytes of the records so far (what the codec would compress)."""
        return self._position - RECORD_BATCH_OVERHEAD

    def compress_records(self) -> bytes:
        """Compress the records as they are now and return the block; change nothing.

        Safe to call from a worker thread while the event loop goes on, provided nothing
        appends to the batch meanwhile (the accumulator marks it full first) and
        :meth:`write_pending` ran before: it only reads the buffer. Hand the result to
        :meth:`use_compressed` before :meth:`close`.
        """
        if self._parts:
            raise RuntimeError("write_pending() must run before compress_records()")
        return compress(
            self._compression,
            memoryview(self._buffer)[RECORD_BATCH_OVERHEAD : self._position],
            self._compression_level,
        )

    def use_compressed(self, block: bytes) -> None:
        """Have :meth:`close` use ``block`` (from :meth:`compress_records`), not compress."""
        self._precompressed = block

    @property
    def precompressed(self) -> bool:
        """True when a block from :meth:`compress_records` waits for :meth:`close`."""
        return self._precompressed is not None

    def close(
        self,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> memoryview:
        """Compress (when a codec is set), fill in the header and the CRC; return the batch.

        The returned view points into the pooled buffer (or a new one when the compressed
        block does not fit): it stays valid until the buffer goes back to the pool.

        Raises:
            RuntimeError: the builder was detached (its batch is done; the buffer is gone).
        """
        if self.detached:
            raise RuntimeError("a detached record batch builder cannot be closed")
        if self._closed_view is not None:
            raise RuntimeError("the batch is closed already")
        if self.record_count == 0:
            raise RuntimeError("an empty batch cannot be closed")
        self.write_pending()
        buffer = self._buffer
        end = self._position
        self.uncompressed_size = end
        if self._compression is not CompressionType.NONE:
            compressed = self._precompressed
            if compressed is None:
                compressed = self.compress_records()
            self._precompressed = None
            end = RECORD_BATCH_OVERHEAD + len(compressed)
            if end > self._capacity:
                # Incompressible data can grow a little; the header goes into a new buffer then.
                buffer = bytearray(buffer[:RECORD_BATCH_OVERHEAD]) + compressed
                self._buffer = buffer
                self._capacity = len(buffer)
            else:
                buffer[RECORD_BATCH_OVERHEAD:end] = compressed
        attributes = int(self._compression) | (_TRANSACTIONAL_FLAG if transactional else 0)
        _HEAD.pack_into(buffer, 0, 0, end - 12, -1, 2)
        _TAIL.pack_into(
            buffer,
            _ATTRIBUTES_OFFSET,
            attributes,
            self.record_count - 1,
            self.base_timestamp,
            self.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            self.record_count,
        )
        view = memoryview(buffer)[:end]
        if self._combine_crc and _crc_combine is not None:
            # The records' CRC was taken as they were written: only the header is read here.
            crc = _crc_combine(
                _crc(view[_ATTRIBUTES_OFFSET:RECORD_BATCH_OVERHEAD]),
                self._records_crc,
                end - RECORD_BATCH_OVERHEAD,
            )
        else:
            crc = _crc(view[_ATTRIBUTES_OFFSET:])
        _CRC.pack_into(buffer, _CRC_OFFSET, crc)
        self._closed_view = view
        return view

    def seal(
        self,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        *,
        restamp: bool = False,
    ) -> memoryview:
        """The batch to send: closed now with this producer state if still open.

        The one way a drained batch is closed. A batch closed already (a retry) keeps its
        bytes; with ``restamp`` it takes this producer state (and a new CRC) instead, for a
        retry that goes out under a new producer id, epoch or sequence.

        Raises:
            RuntimeError: the builder was detached, or holds no record.
        """
        view = self._closed_view
        if view is None:
            return self.close(producer_id, producer_epoch, base_sequence, transactional)
        if restamp:
            return self.rewrite_producer_state(
                producer_id, producer_epoch, base_sequence, transactional
            )
        return view

    @property
    def closed_view(self) -> memoryview | None:
        """The closed batch, as :meth:`close` returned it; None while open or once detached."""
        return self._closed_view

    @property
    def closed_size(self) -> int:
        """The batch's bytes once closed (compressed, with a codec); 0 before ``close()``."""
        view = self._closed_view
        return 0 if view is None else len(view)

    @property
    def compression_ratio(self) -> float:
        """Once closed, the records' compressed size over their size before; else 1.0."""
        view = self._closed_view
        records = self.uncompressed_size - RECORD_BATCH_OVERHEAD
        if view is None or records <= 0:
            return 1.0
        return (len(view) - RECORD_BATCH_OVERHEAD) / records

    @property
    def detached(self) -> bool:
        """True after :meth:`detach`: the buffer went back to the pool."""
        return self._buffer is _DETACHED_BUFFER

    @property
    def closed(self) -> bool:
        """True once ``close()`` ran, and after :meth:`detach`."""
        return self._closed_view is not None or self.detached

    def rewrite_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool
    ) -> memoryview:
        """Change the producer id, epoch and sequence of a closed batch, and its CRC.

        Used when a retried batch must go out under a new producer id or epoch.
        """
        view = self._closed_view
        if view is None:
            return self.close(producer_id, producer_epoch, base_sequence, transactional)
        buffer = self._buffer
        _PRODUCER_STATE.pack_into(
            buffer, _PRODUCER_STATE_OFFSET, producer_id, producer_epoch, base_sequence
        )
        attributes = int(self._compression) | (_TRANSACTIONAL_FLAG if transactional else 0)
        struct.pack_into(">h", buffer, _ATTRIBUTES_OFFSET, attributes)
        _CRC.pack_into(buffer, _CRC_OFFSET, _crc(view[_ATTRIBUTES_OFFSET:]))
        return view

    def release_view(self) -> None:
        """Drop the exported view so the buffer can be reused (resized) by the pool."""
        if self._closed_view is not None:
            self._closed_view.release()

    def detach(self) -> None:
        """Let go of the buffer and the record parts once the batch is done with them.

        A finished batch lives on as long as its record futures do (callers often keep
        thousands). Detached, it keeps only its counters, so it neither pins a pooled buffer
        nor costs the cycle collector its part list and view on every pass.
        The builder takes no more records: its capacity is zero.
        """
        self.release_view()
        self._closed_view = None
        self._precompressed = None
        self._buffer = _DETACHED_BUFFER
        self._capacity = 0
        self._parts = _NO_PARTS
