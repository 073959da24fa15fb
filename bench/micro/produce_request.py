"""Produce requests: encoding (body and framing) and decoding the response.

A request carries one topic with three partitions of one full 16 KiB batch each, as the
sender builds for one broker; the response is what a broker answers to it.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

from bench.micro._timer import Measurement, measure, run_main, skipped

TOPIC = "bench-topic"
PARTITIONS = 3
BATCH_SIZE = 16_384


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def produce_response_body(version: int, partitions: int = PARTITIONS) -> bytes:
    """A successful ProduceResponse body for ``version`` (3-11), written from the schema."""
    flexible = version >= 9
    name = TOPIC.encode()
    out = bytearray()
    out += _uvarint(2) if flexible else struct.pack(">i", 1)
    out += _uvarint(len(name) + 1) + name if flexible else struct.pack(">h", len(name)) + name
    out += _uvarint(partitions + 1) if flexible else struct.pack(">i", partitions)
    for index in range(partitions):
        out += struct.pack(">ihq", index, 0, 1_000_000 + index * 148)
        out += struct.pack(">q", -1)  # log_append_time_ms (v2+)
        if version >= 5:
            out += struct.pack(">q", 0)  # log_start_offset
        if version >= 8:
            # record_errors: empty array; error_message: null
            out += b"\x01\x00" if flexible else struct.pack(">ih", 0, -1)
        if flexible:
            out += b"\x00"
    if flexible:
        out += b"\x00"
    out += struct.pack(">i", 0)  # throttle_time_ms
    if flexible:
        out += b"\x00"
    return bytes(out)


def collect() -> list[Measurement]:
    """Run every case."""
    try:
        from aioproducer.protocol.compression import CompressionType
        from aioproducer.protocol.framing import encode_request, split_response_header
        from aioproducer.protocol.messages import (
            ProducePartitionData,
            ProduceRequest,
            ProduceTopicData,
        )
        from aioproducer.protocol.record_batch import RecordBatchBuilder
    except Exception as exc:
        return [skipped("produce_request", exc)]
    results: list[Measurement] = []
    views = []
    for _ in range(PARTITIONS):
        builder = RecordBatchBuilder(bytearray(BATCH_SIZE), CompressionType.NONE)
        values = [bytes([65 + i % 26]) * 100 for i in range(200)]
        builder.append_values(1_700_000_000_000, values, 0, len(values))
        views.append(builder.close())

    def request() -> ProduceRequest:
        return ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout_ms=30_000,
            topics=[
                ProduceTopicData(
                    TOPIC, [ProducePartitionData(i, view) for i, view in enumerate(views)]
                )
            ],
        )

    for version in (3, 9, 11):
        name = f"build + encode_request, Produce v{version}, 3 x 16 KiB"
        try:
            results.append(
                measure(name, lambda version=version: encode_request(  # type: ignore[misc]
                    request(), version, 7, "aioproducer"))
            )
        except Exception as exc:
            results.append(skipped(name, exc))

    for version in (3, 9, 10):
        name = f"decode ProduceResponse v{version}, 3 partitions"
        try:
            body = produce_response_body(version)
            frame = memoryview(struct.pack(">i", 7) + (b"\x00" if version >= 9 else b"") + body)
            produce = request()

            def decode(
                version: int = version, frame: memoryview = frame, produce: Any = produce
            ) -> Any:
                _, rest = split_response_header(frame, version >= 9)
                return produce.decode_response(rest, version)

            response = decode()
            offsets = [p.base_offset for t in response.topics for p in t.partitions]
            if offsets != [1_000_000 + i * 148 for i in range(PARTITIONS)]:
                raise AssertionError(f"decoded the wrong offsets: {offsets}")
            results.append(measure(name, decode))
        except Exception as exc:
            results.append(skipped(name, exc))
    return results


def main() -> int:
    """Entry point: ``python -m bench.micro.produce_request``."""
    return run_main("Produce request encoding / response decoding (protocol/)", collect)


if __name__ == "__main__":
    sys.exit(main())
