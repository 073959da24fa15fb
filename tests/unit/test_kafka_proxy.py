"""The test proxy (tests.support.kafka_proxy) in front of a stand-in broker that answers
each request frame with a frame naming its correlation id: it forwards both ways, holds
a Produce answer and everything behind it on that connection, and releases or cuts."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from tests.support.kafka_proxy import KafkaProxy
from tests.support.stream_server import StreamServer

_PRODUCE, _METADATA = 0, 3
_WAIT = 5.0


class _Answering(StreamServer):
    """Answers every request with ``size, correlation id, b"answer"``."""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            body = struct.pack(">i", correlation_id) + b"answer"
            writer.write(struct.pack(">i", len(body)) + body)
            await writer.drain()


def _request(api_key: int, correlation_id: int) -> bytes:
    body = struct.pack(">hhi", api_key, 9, correlation_id) + b"\x00\x00"
    return struct.pack(">i", len(body)) + body


async def _answer(reader: asyncio.StreamReader) -> int:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), _WAIT))
    (correlation_id,) = struct.unpack_from(">i", await reader.readexactly(size))
    return int(correlation_id)


@pytest.fixture
async def proxy() -> AsyncIterator[KafkaProxy]:
    async with (
        _Answering("127.0.0.1", 0) as broker,
        KafkaProxy((broker.host, broker.port)) as proxy,
    ):
        yield proxy


async def test_answers_flow_until_told_to_hold(proxy: KafkaProxy) -> None:
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    for correlation_id, api_key in enumerate([_METADATA, _PRODUCE, _METADATA]):
        writer.write(_request(api_key, correlation_id))
        assert await _answer(reader) == correlation_id
    assert proxy.held_answers == 0
    writer.close()


async def test_a_held_produce_answer_holds_what_follows_it_until_released(
    proxy: KafkaProxy,
) -> None:
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    proxy.hold_produce_answers()
    writer.write(_request(_METADATA, 1))
    assert await _answer(reader) == 1  # not a Produce answer: it flows
    writer.write(_request(_PRODUCE, 2) + _request(_METADATA, 3) + _request(_PRODUCE, 4))
    await asyncio.wait_for(proxy.wait_held(2), _WAIT)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(reader.readexactly(1), 0.2)
    assert proxy.release() == 3
    assert [await _answer(reader) for _ in range(3)] == [2, 3, 4]
    writer.write(_request(_PRODUCE, 5))  # no longer holding
    assert await _answer(reader) == 5
    assert (proxy.held_answers, proxy.released, proxy.dropped) == (2, 3, 0)
    writer.close()


async def test_cut_closes_the_connections_holding_answers(proxy: KafkaProxy) -> None:
    held_reader, held_writer = await asyncio.open_connection(proxy.host, proxy.port)
    other_reader, other_writer = await asyncio.open_connection(proxy.host, proxy.port)
    proxy.hold_produce_answers()
    held_writer.write(_request(_PRODUCE, 1))
    await asyncio.wait_for(proxy.wait_held(1), _WAIT)
    assert await proxy.cut() == 1
    assert await asyncio.wait_for(held_reader.read(), _WAIT) == b""  # closed, answer dropped
    assert proxy.dropped == 1
    other_writer.write(_request(_PRODUCE, 7))
    assert await _answer(other_reader) == 7
    held_writer.close()
    other_writer.close()
