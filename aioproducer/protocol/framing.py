"""Request framing and response headers.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

A request on the wire is an ``int32`` size, the request header, then the body. Header v1
(non-flexible requests) is ``api_key int16, api_version int16, correlation_id int32,
client_id nullable string``; header v2 (flexible requests) adds a tagged-field section, but
keeps the client id as an ``int16``-length string so that any broker can read the header of an
ApiVersions request of a version it does not know.

A response frame (after its size) starts with the ``int32`` correlation id; header v1
(flexible responses, except ApiVersions) adds a tagged-field section.
"""

from __future__ import annotations

import functools
import struct
from typing import TYPE_CHECKING

from aioproducer.errors import CorruptResponseError
from aioproducer.protocol.api import Request, Response, response_header_flexible
from aioproducer.protocol.primitives import INT32, Reader, write_nullable_string

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "SIZE_PREFIX_LENGTH",
    "decode_response_frame",
    "encode_request",
    "read_correlation_id",
    "read_frame_size",
    "split_response_header",
    "total_size",
]

SIZE_PREFIX_LENGTH = 4
"""Bytes of the ``int32`` size that precedes every request and response."""

# size, api_key, api_version, correlation_id
_HEADER_FIXED = struct.Struct(">ihhi")


@functools.lru_cache(maxsize=64)
def _encoded_client_id(client_id: str | None) -> bytes:
    return write_nullable_string(client_id)


def _length(part: bytes | memoryview) -> int:
    return part.nbytes if isinstance(part, memoryview) else len(part)


def encode_request(
    request: Request[Response],
    version: int,
    correlation_id: int,
    client_id: str | None,
) -> list[bytes | memoryview]:
    """Frame ``request`` for ``version``: size, request header, then the body's own buffers.

    The body parts (large record batches among them) are passed through without being copied
    or joined, so the list can go straight to ``transport.writelines``. Only the header is
    merged into the body's first part when that part is small.
    """
    body = request.encode(version)
    client = _encoded_client_id(client_id)
    flexible = request.is_flexible(version)
    header_size = 8 + len(client) + (1 if flexible else 0)
    size = header_size
    for part in body:
        size += _length(part)
    header = _HEADER_FIXED.pack(size, request.API_KEY, version, correlation_id) + client
    if flexible:
        header += b"\x00"
    if body and isinstance(body[0], bytes) and len(body[0]) <= 4096:
        return [header + body[0], *body[1:]]
    return [header, *body]


def read_frame_size(prefix: bytes | bytearray | memoryview) -> int:
    """The size in the 4-byte prefix of a frame; negative sizes are corrupt."""
    if len(prefix) < SIZE_PREFIX_LENGTH:
        raise CorruptResponseError("truncated frame size")
    size: int = INT32.unpack_from(prefix, 0)[0]
    if size < 0:
        raise CorruptResponseError(f"negative frame size {size}")
    return size


def read_correlation_id(frame: memoryview) -> int:
    """The correlation id at the start of a response frame (the size prefix removed)."""
    if frame.nbytes < 4:
        raise CorruptResponseError(f"response frame of {frame.nbytes} bytes has no header")
    correlation_id: int = INT32.unpack_from(frame, 0)[0]
    return correlation_id


def split_response_header(frame: memoryview, flexible: bool) -> tuple[int, memoryview]:
    """Split a response frame into its correlation id and its body.

    ``flexible`` selects response header v1 (correlation id, then tagged fields, which are
    skipped) over v0 (correlation id only); see
    :func:`~aioproducer.protocol.api.response_header_flexible`.
    """
    if frame.nbytes >= 5 and (not flexible or frame[4] == 0):
        # The usual header: no tagged fields (a zero count), so no reader is needed.
        correlation_id: int = INT32.unpack_from(frame, 0)[0]
        return correlation_id, frame[5:] if flexible else frame[4:]
    reader = Reader(frame)
    correlation_id = reader.int32()
    if flexible:
        reader.skip_tagged_fields()
    return correlation_id, reader.rest()


def decode_response_frame(
    request: Request[Response], version: int, frame: memoryview
) -> tuple[int, Response]:
    """Decode a whole response frame (without its size) to ``request`` sent at ``version``."""
    correlation_id, body = split_response_header(
        frame, response_header_flexible(request.API_KEY, version)
    )
    return correlation_id, request.decode_response(body, version)


def total_size(parts: Sequence[bytes | memoryview]) -> int:
    """The number of bytes in ``parts`` (a framed request)."""
    return sum(_length(part) for part in parts)
