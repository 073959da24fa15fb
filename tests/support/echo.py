"""A request whose body a test broker (or a test pushing bytes) echoes back as the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aioproducer.errors import CorruptResponseError
from aioproducer.protocol.api import ApiKey, Request, Response

__all__ = ["EchoRequest", "EchoResponse"]


@dataclass(slots=True)
class EchoResponse(Response):
    payload: bytes


@dataclass(slots=True)
class EchoRequest(Request[EchoResponse]):
    """A request whose body is ``payload``; it borrows Metadata's key and header rules.

    ``respond`` False: sent expecting no answer (as Produce with acks=0); ``limit``: its
    response size cap; an answer of ``b"garbage"`` does not decode.
    """

    API_KEY: ClassVar[int] = ApiKey.METADATA
    MIN_VERSION: ClassVar[int] = 1
    MAX_VERSION: ClassVar[int] = 8
    FLEXIBLE_FROM: ClassVar[int] = 9

    payload: bytes
    respond: bool = True
    limit: int | None = None

    def encode(self, version: int) -> list[bytes | memoryview]:
        return [self.payload]

    def expects_response(self) -> bool:
        return self.respond

    def response_size_limit(self) -> int | None:
        return self.limit

    def decode_response(self, data: memoryview, version: int) -> EchoResponse:
        if bytes(data) == b"garbage":
            raise CorruptResponseError("not an echo")
        return EchoResponse(bytes(data))
