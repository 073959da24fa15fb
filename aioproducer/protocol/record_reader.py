"""Decoding record batches v2 (magic 2): the reading half of the record format.

The producer decodes its own batches (to split one the broker found too large) and tests
decode what the builder wrote; both go through :func:`decode_record_batches`, which checks the
CRC-32C and decompresses.

Batch layout (Kafka's ``DefaultRecordBatch``): base_offset int64, batch_length int32 (bytes
after this field), partition_leader_epoch int32, magic int8, crc uint32 (CRC-32C of the bytes
from attributes to the end), attributes int16, last_offset_delta int32, base_timestamp int64,
max_timestamp int64, producer_id int64, producer_epoch int16, base_sequence int32, record
count int32, then the records (compressed as one block when the codec bits are set).

Record layout (``DefaultRecord``): length varint, attributes int8, timestamp_delta varlong,
offset_delta varint, key (varint length, -1 for null), value (likewise), header count varint,
then each header's key (varint length, UTF-8) and value (varint length, -1 for null).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c as _crc32c

from aioproducer.errors import CorruptResponseError
from aioproducer.protocol.compression import CompressionType, decompress
from aioproducer.protocol.primitives import Reader

__all__ = [
    "BATCH_HEADER_SIZE",
    "DecodedRecord",
    "DecodedRecordBatch",
    "decode_record_batches",
]

BATCH_HEADER_SIZE = 61
"""Bytes of a v2 batch before its first record."""

# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,
# last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
# base_sequence, record_count
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = 12  # base_offset and batch_length: the bytes batch_length does not count
_CRC_START = 21
_MAGIC_OFFSET = 16

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_FLAG = 0x08
_TRANSACTIONAL_FLAG = 0x10
_CONTROL_FLAG = 0x20


@dataclass(slots=True)
class DecodedRecord:
    """One record of a batch; offsets and timestamps are relative to the batch's bases."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


@dataclass(slots=True)
class DecodedRecordBatch:
    """A record batch v2 with its header fields and decoded records."""

    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[DecodedRecord]

    @property
    def compression(self) -> CompressionType:
        """The codec from the attributes' low three bits."""
        return CompressionType(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 for CreateTime, 1 for LogAppendTime."""
        return 1 if self.attributes & _TIMESTAMP_TYPE_FLAG else 0

    @property
    def is_transactional(self) -> bool:
        """True when the batch belongs to a transaction."""
        return bool(self.attributes & _TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        """True for a control batch (transaction markers)."""
        return bool(self.attributes & _CONTROL_FLAG)


def _decode_record(reader: Reader) -> DecodedRecord:
    length = reader.varint()
    if length < 0 or length > reader.remaining():
        raise CorruptResponseError(f"invalid record length {length}")
    body = Reader(reader.view(length))
    attributes = body.int8()
    timestamp_delta = body.varlong()
    offset_delta = body.varint()
    key = _varint_bytes(body)
    value = _varint_bytes(body)
    header_count = body.varint()
    if header_count < 0 or header_count > body.remaining():
        raise CorruptResponseError(f"invalid record header count {header_count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(header_count):
        name_length = body.varint()
        if name_length < 0 or name_length > body.remaining():
            raise CorruptResponseError(f"invalid header key length {name_length}")
        try:
            name = str(body.view(name_length), "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptResponseError(f"header key is not UTF-8: {exc}") from None
        headers.append((name, _varint_bytes(body)))
    if not body.at_end():
        raise CorruptResponseError(f"{body.remaining()} unread bytes at the end of a record")
    return DecodedRecord(offset_delta, timestamp_delta, key, value, headers, attributes)


def _varint_bytes(reader: Reader) -> bytes | None:
    length = reader.varint()
    if length == -1:
        return None
    if length < 0 or length > reader.remaining():
        raise CorruptResponseError(f"invalid record field length {length}")
    return bytes(reader.view(length))


def _decode_batch(batch: memoryview) -> DecodedRecordBatch:
    (
        base_offset,
        _batch_length,
        partition_leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    ) = _HEADER.unpack_from(batch, 0)
    computed = _crc32c.crc32c(batch[_CRC_START:])
    if computed != crc:
        raise CorruptResponseError(
            f"record batch at offset {base_offset} has CRC {crc:#010x}, computed {computed:#010x}"
        )
    codec_id = attributes & _COMPRESSION_MASK
    if codec_id > CompressionType.ZSTD:
        raise CorruptResponseError(f"unknown compression codec {codec_id}")
    payload: bytes | memoryview = batch[BATCH_HEADER_SIZE:]
    if codec_id:
        payload = decompress(CompressionType(codec_id), payload)
    if record_count < 0 or record_count > len(payload):
        raise CorruptResponseError(f"invalid record count {record_count}")
    reader = Reader(payload)
    records = [_decode_record(reader) for _ in range(record_count)]
    if not reader.at_end():
        raise CorruptResponseError(f"{reader.remaining()} bytes after the last record")
    return DecodedRecordBatch(
        base_offset,
        partition_leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records,
    )


def decode_record_batches(data: bytes | bytearray | memoryview) -> list[DecodedRecordBatch]:
    """Decode every record batch v2 in ``data``, back to back.

    Raises :class:`~aioproducer.errors.CorruptResponseError` for a truncated batch, a batch
    of another magic, a CRC-32C mismatch, data that does not decompress, or records that do
    not add up to the batch (wrong count, bad lengths, trailing bytes).
    """
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    end = view.nbytes
    position = 0
    batches: list[DecodedRecordBatch] = []
    while position < end:
        if end - position < BATCH_HEADER_SIZE:
            raise CorruptResponseError(
                f"{end - position} bytes at offset {position} are too few for a record batch"
            )
        (batch_length,) = struct.unpack_from(">i", view, position + 8)
        size = _LOG_OVERHEAD + batch_length
        if size < BATCH_HEADER_SIZE or position + size > end:
            raise CorruptResponseError(
                f"record batch at offset {position} has an invalid length {batch_length}"
            )
        magic = view[position + _MAGIC_OFFSET]
        if magic != 2:
            raise CorruptResponseError(f"record batch at offset {position} has magic {magic}")
        batches.append(_decode_batch(view[position : position + size]))
        position += size
    return batches
