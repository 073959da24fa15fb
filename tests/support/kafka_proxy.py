"""A TCP proxy in front of a Kafka broker that can hold back the broker's Produce answers.

:class:`KafkaProxy` forwards bytes both ways, one upstream connection per client
connection. It reads Kafka's framing (a 4-byte size, then the frame) in both directions:
on the way to the broker it notes the correlation ids of Produce requests (request
header: api key, api version, correlation id), and on the way back it knows a Produce
answer by its correlation id (the first 4 bytes of a response). So it can hold the
answers of Produce requests while every other answer (Metadata, FindCoordinator,
InitProducerId, EndTxn, ...) flows: the broker has written the records, the client has
not heard so. That is how a test makes a batch outlive ``delivery_timeout_ms`` in flight
on a real broker::

    from tests.support.kafka import KafkaBroker, PROXIED_LISTENER
    from tests.support.kafka_proxy import KafkaProxy, free_port

    port = free_port()
    with KafkaBroker(proxy_port=port) as kafka:
        host, upstream = kafka.address(PROXIED_LISTENER).rsplit(":", 1)
        async with KafkaProxy((host, int(upstream)), port=port) as proxy:
            # bootstrap_servers=proxy.bootstrap_servers: the broker advertises the
            # proxy, so the client's every connection goes through it
            proxy.hold_produce_answers()
            ...                          # send; the broker writes the records
            await proxy.wait_held()      # a Produce answer is held
            proxy.release()              # forward it, late; or: await proxy.cut()

Kafka answers a connection's requests in order, and a client matches answers to requests
in that order: so once a connection holds a Produce answer, every frame the broker sends
after it on that connection waits behind it, and :meth:`KafkaProxy.release` forwards them
all, in order. Other connections are not held until a Produce answer comes on them.

The proxy runs on the test's event loop; it is not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from tests.support.stream_server import StreamServer

__all__ = ["KafkaProxy", "free_port"]

_PRODUCE = 0  # the Produce request's api key
_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now, for a proxy that must be told its port before it
    listens (a broker advertising it is configured first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream connection."""

    client: asyncio.StreamWriter
    broker: asyncio.StreamWriter
    task: asyncio.Task[Any]
    #: Correlation ids of the Produce requests not answered yet.
    produce_requests: set[int] = field(default_factory=set)
    #: The broker's frames held back, oldest first; None while answers flow.
    held: list[bytes] | None = None


class KafkaProxy(StreamServer):
    """Forwards ``host:port`` to ``upstream`` (a broker's listener), and holds Produce
    answers when told to.

    Args:
        upstream: ``(host, port)`` of the broker listener to forward to.
        host: the address to listen on.
        port: the port to listen on (0 picks one; see :attr:`port`).

    Attributes:
        connections: Client connections accepted so far.
        held_answers: Produce answers held so far (each held one counts once).
        released: Frames forwarded late by :meth:`release`.
        dropped: Held frames never forwarded: thrown away by :meth:`cut`, or by a
            connection that ended (the client gave up on it) while they were held.
    """

    def __init__(
        self, upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        super().__init__(host, port)
        self.upstream = upstream
        self.connections = 0
        self.held_answers = 0
        self.released = 0
        self.dropped = 0
        self._holding = False
        self._links: set[_Link] = set()
        self._held_changed = asyncio.Event()

    # -- what a test calls --------------------------------------------------------------

    def hold_produce_answers(self) -> None:
        """From now on, hold every Produce answer the broker sends, and everything after
        it on its connection, until :meth:`release` or :meth:`cut`."""
        self._holding = True

    async def wait_held(self, count: int = 1) -> None:
        """Wait until :attr:`held_answers` is at least ``count``: the broker answered (so
        it has written) that many Produce requests the client has not heard back on."""
        while self.held_answers < count:
            self._held_changed.clear()
            await self._held_changed.wait()

    def release(self) -> int:
        """Stop holding, and forward what was held, in order, on each connection still
        open. Returns how many frames went out."""
        self._holding = False
        count = 0
        for link in self._links:
            held, link.held = link.held, None
            if held:
                link.client.write(b"".join(held))
                count += len(held)
        self.released += count
        return count

    async def cut(self) -> int:
        """Stop holding, and close every connection holding answers, on both sides,
        without forwarding them: the client sees its connection lost with those requests
        unanswered. Returns how many connections were closed."""
        self._holding = False
        holding = [link for link in self._links if link.held is not None]
        for link in holding:
            link.task.cancel()  # the connection's handler closes both sides as it ends
        await asyncio.gather(*(link.task for link in holding), return_exceptions=True)
        return len(holding)

    # -- the connections ------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections += 1
        broker_reader, broker_writer = await asyncio.open_connection(*self.upstream)
        link = _Link(client=writer, broker=broker_writer, task=task)
        self._links.add(link)
        pumps = [
            asyncio.ensure_future(self._to_broker(reader, link)),
            asyncio.ensure_future(self._to_client(broker_reader, link)),
        ]
        try:
            # Either side closing ends the connection, as a broker's or a client's would.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._links.discard(link)
            if link.held:
                self.dropped += len(link.held)
            link.held = None
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            broker_writer.close()
            with contextlib.suppress(OSError):
                await broker_writer.wait_closed()

    async def _to_broker(self, reader: asyncio.StreamReader, link: _Link) -> None:
        """Client to broker: note which correlation ids are Produce requests."""
        with contextlib.suppress(asyncio.IncompleteReadError, OSError):
            while True:
                frame = await _read_frame(reader)
                if len(frame) >= 4 + _REQUEST_HEADER.size:
                    api_key, _version, correlation_id = _REQUEST_HEADER.unpack_from(frame, 4)
                    if api_key == _PRODUCE:
                        link.produce_requests.add(correlation_id)
                link.broker.write(frame)
                await link.broker.drain()

    async def _to_client(self, reader: asyncio.StreamReader, link: _Link) -> None:
        """Broker to client: hold a Produce answer, and what follows it, when holding."""
        with contextlib.suppress(asyncio.IncompleteReadError, OSError):
            while True:
                frame = await _read_frame(reader)
                produce = False
                if len(frame) >= 8:
                    (correlation_id,) = _SIZE.unpack_from(frame, 4)
                    if correlation_id in link.produce_requests:
                        link.produce_requests.discard(correlation_id)
                        produce = True
                if produce and self._holding and link.held is None:
                    link.held = []
                if link.held is not None:
                    link.held.append(frame)
                    if produce:
                        self.held_answers += 1
                        self._held_changed.set()
                    continue
                link.client.write(frame)
                await link.client.drain()


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    """One size-prefixed Kafka frame, the size included."""
    prefix = await reader.readexactly(_SIZE.size)
    (size,) = _SIZE.unpack(prefix)
    return prefix + await reader.readexactly(size)
