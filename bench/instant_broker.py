"""A broker that acknowledges every Produce request at once and stores nothing.

::

    python -m bench.instant_broker --partitions 3        # prints "listening 127.0.0.1:<port>"

The harness's ``--broker instant`` runs it in a process of its own. With no log to append
to, no replication and no disk, a client's throughput against it is bounded by the client
alone: its records per CPU-second are the ceiling the client would reach against an
infinitely fast broker.

It answers four requests, as Apache Kafka would for a healthy single-node cluster:

- ApiVersions: the versions below (an ApiVersions request of a newer version gets
  UNSUPPORTED_VERSION in version 0, as Kafka answers, and the client asks again).
- Metadata: itself as the only broker (node 1, the controller) and every topic asked for,
  with ``--partitions`` partitions each, all led by node 1. Any topic name exists; a request
  for all topics lists the ones asked for so far.
- InitProducerId: a new producer id per request, epoch 0.
- Produce: success for every partition in the request, with a base offset that grows by the
  records of each batch (read from the batch headers: the records themselves are neither
  decoded nor checked, nor kept). ``acks=0`` gets no answer, as from Kafka.

Anything else closes the connection with a message on stderr. Requests on one connection
are answered in order, each as soon as its bytes have arrived.

On SIGUSR1 it prints one JSON line to stdout: ``{"acknowledged": {topic: records}}``, the
records of every Produce request it answered so far, by topic (read from the same batch
headers as the offsets), for a benchmark to check the client's count against.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import signal
import struct
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["SUPPORTED", "InstantBroker", "listen", "main", "serve"]

PRODUCE = 0
METADATA = 3
API_VERSIONS = 18
INIT_PRODUCER_ID = 22

#: api key -> (lowest, highest) version answered. Produce stops at 11: version 12 only adds
#: transactions v2 semantics, and 13 names topics by id.
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 11),
    METADATA: (0, 12),
    API_VERSIONS: (0, 4),
    INIT_PRODUCER_ID: (0, 4),
}
#: The first version of each request that uses the flexible (compact, tagged) encoding.
_FLEXIBLE_FROM = {PRODUCE: 9, METADATA: 9, API_VERSIONS: 3, INIT_PRODUCER_ID: 2}

NODE_ID = 1
UNSUPPORTED_VERSION = 35
#: Kafka's "not requested" value of the authorized-operations fields.
_NO_OPERATIONS = -(2**31)
_EMPTY_TAGS = b"\x00"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_PRODUCE_PARTITION = struct.Struct(">ihq")  # index, error code, base offset
_LOG_APPEND_AND_START = struct.Struct(">qq")  # log append time, log start offset


class ProtocolError(Exception):
    """A request this broker does not answer."""


# -- encoding -----------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _skip_tags(data: bytes | bytearray, pos: int) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    return pos


def _string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\x00" if flexible else _INT16.pack(-1)
    raw = text.encode()
    return (_uvarint(len(raw) + 1) if flexible else _INT16.pack(len(raw))) + raw


def _array_head(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _INT32.pack(count)


def _read_string(data: bytes | bytearray, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        size, pos = _read_uvarint(data, pos)
        size -= 1
    else:
        (size,) = _INT16.unpack_from(data, pos)
        pos += 2
    if size < 0:
        return None, pos
    return bytes(data[pos : pos + size]).decode(), pos + size


def _read_array_head(data: bytes | bytearray, pos: int, flexible: bool) -> tuple[int, int]:
    """The element count (-1: null) and the position after it."""
    if flexible:
        count, pos = _read_uvarint(data, pos)
        return count - 1, pos
    (count,) = _INT32.unpack_from(data, pos)
    return count, pos + 4


def _topic_id(name: str) -> bytes:
    """A stable non-zero topic id per name (Metadata v10+)."""
    return hashlib.md5(name.encode()).digest()


def record_count(records: bytes | bytearray, start: int, stop: int) -> int:
    """How many records the record batches in ``records[start:stop]`` hold: the sum of each
    batch's last offset delta plus one (magic 2 batch headers)."""
    count = 0
    pos = start
    while pos + 27 <= stop:
        (length,) = _INT32.unpack_from(records, pos + 8)
        (last_delta,) = _INT32.unpack_from(records, pos + 23)
        count += last_delta + 1
        pos += 12 + length
    return count


# -- the broker ---------------------------------------------------------------------------


class InstantBroker:
    """The request handlers, and what they remember: topic names, offsets, producer ids."""

    def __init__(self, host: str, port: int, partitions: int) -> None:
        self.host = host
        self.port = port
        self.partitions = partitions
        self.topics: dict[str, None] = {}
        self.next_offset: dict[tuple[str, int], int] = {}
        #: Records of the Produce requests answered (acks 1 or all), by topic.
        self.acknowledged: dict[str, int] = {}
        self.next_producer_id = 1000
        self._handlers: dict[int, Callable[[int, bytes | bytearray, int, int], bytes | None]] = {
            PRODUCE: self.produce,
            METADATA: self.metadata,
            API_VERSIONS: self.api_versions,
            INIT_PRODUCER_ID: self.init_producer_id,
        }

    def handle(self, frame: bytes | bytearray, start: int, stop: int) -> bytes | None:
        """The response frame (size prefix included) to the request in
        ``frame[start:stop]``, or None when it gets no answer."""
        api_key, version, correlation_id = _HEADER.unpack_from(frame, start)
        handler = self._handlers.get(api_key)
        if handler is None:
            raise ProtocolError(f"api key {api_key} (version {version}) is not answered here")
        lowest, highest = SUPPORTED[api_key]
        if api_key == API_VERSIONS and version > highest:
            refusal = self._api_versions_body(0, UNSUPPORTED_VERSION)
            return _INT32.pack(4 + len(refusal)) + _INT32.pack(correlation_id) + refusal
        if not lowest <= version <= highest:
            raise ProtocolError(
                f"api key {api_key} version {version} (answered: {lowest}-{highest})"
            )
        flexible = version >= _FLEXIBLE_FROM[api_key]
        pos = start + 8
        (client_id_size,) = _INT16.unpack_from(frame, pos)
        pos += 2 + max(0, client_id_size)
        # ApiVersions v3+ requests carry header v2 (tags) though its response header is v0.
        if flexible:
            pos = _skip_tags(frame, pos)
        body = handler(version, frame, pos, stop)
        if body is None:
            return None
        header = _INT32.pack(correlation_id)
        if flexible and api_key != API_VERSIONS:
            header += _EMPTY_TAGS
        return _INT32.pack(len(header) + len(body)) + header + body

    # ApiVersions ---------------------------------------------------------------------------

    def api_versions(self, version: int, frame: bytes | bytearray, pos: int, stop: int) -> bytes:
        """ApiVersions: the versions of :data:`SUPPORTED`."""
        return self._api_versions_body(version, 0)

    @staticmethod
    def _api_versions_body(version: int, error_code: int) -> bytes:
        flexible = version >= 3
        parts = [_INT16.pack(error_code), _array_head(len(SUPPORTED), flexible)]
        for key, (lowest, highest) in sorted(SUPPORTED.items()):
            parts.append(struct.pack(">hhh", key, lowest, highest))
            if flexible:
                parts.append(_EMPTY_TAGS)
        if version >= 1:
            parts.append(_INT32.pack(0))  # throttle time
        if flexible:
            parts.append(_EMPTY_TAGS)
        return b"".join(parts)

    # Metadata ------------------------------------------------------------------------------

    def metadata(self, version: int, frame: bytes | bytearray, pos: int, stop: int) -> bytes:
        """Metadata: node 1 (this broker) and every topic asked for."""
        flexible = version >= 9
        count, pos = _read_array_head(frame, pos, flexible)
        names: list[str] = []
        for _ in range(max(0, count)):
            if version >= 10:
                pos += 16  # topic id
            name, pos = _read_string(frame, pos, flexible)
            if flexible:
                pos = _skip_tags(frame, pos)
            if name is not None:
                names.append(name)
        if count < 0 or (count == 0 and version == 0):  # all topics
            names = list(self.topics)
        for name in names:
            self.topics.setdefault(name)
        return self._metadata_body(version, names)

    def _metadata_body(self, version: int, names: list[str]) -> bytes:
        flexible = version >= 9
        tags = _EMPTY_TAGS if flexible else b""
        parts: list[bytes] = []
        if version >= 3:
            parts.append(_INT32.pack(0))  # throttle time
        parts.append(_array_head(1, flexible))
        parts.append(_INT32.pack(NODE_ID) + _string(self.host, flexible) + _INT32.pack(self.port))
        if version >= 1:
            parts.append(_string(None, flexible))  # rack
        parts.append(tags)
        if version >= 2:
            parts.append(_string("instant", flexible))  # cluster id
        if version >= 1:
            parts.append(_INT32.pack(NODE_ID))  # controller
        parts.append(_array_head(len(names), flexible))
        replicas = _array_head(1, flexible) + _INT32.pack(NODE_ID)
        for name in names:
            parts.append(_INT16.pack(0) + _string(name, flexible))
            if version >= 10:
                parts.append(_topic_id(name))
            if version >= 1:
                parts.append(b"\x00")  # not internal
            parts.append(_array_head(self.partitions, flexible))
            for index in range(self.partitions):
                parts.append(_INT16.pack(0) + _INT32.pack(index) + _INT32.pack(NODE_ID))
                if version >= 7:
                    parts.append(_INT32.pack(0))  # leader epoch
                parts.append(replicas + replicas)  # replicas, in-sync replicas
                if version >= 5:
                    parts.append(_array_head(0, flexible))  # offline replicas
                parts.append(tags)
            if version >= 8:
                parts.append(_INT32.pack(_NO_OPERATIONS))
            parts.append(tags)
        if 8 <= version <= 10:
            parts.append(_INT32.pack(_NO_OPERATIONS))  # cluster authorized operations
        parts.append(tags)
        return b"".join(parts)

    # InitProducerId ------------------------------------------------------------------------

    def init_producer_id(
        self, version: int, frame: bytes | bytearray, pos: int, stop: int
    ) -> bytes:
        """InitProducerId: a new producer id, epoch 0."""
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        body = struct.pack(">ihqh", 0, 0, producer_id, 0)
        return body + _EMPTY_TAGS if version >= 2 else body

    # Produce -------------------------------------------------------------------------------

    def produce(
        self, version: int, frame: bytes | bytearray, pos: int, stop: int
    ) -> bytes | None:
        """Produce: success for every partition, base offsets advanced by the records."""
        flexible = version >= 9
        _transactional_id, pos = _read_string(frame, pos, flexible)
        (acks,) = _INT16.unpack_from(frame, pos)
        pos += 6  # acks, timeout
        topic_count, pos = _read_array_head(frame, pos, flexible)
        next_offset = self.next_offset
        tags = _EMPTY_TAGS if flexible else b""
        # log append time -1 (the create time stands), log start offset 0
        after_offset = b""
        if version >= 2:
            after_offset = _LOG_APPEND_AND_START.pack(-1, 0)[: 16 if version >= 5 else 8]
        if version >= 8:
            after_offset += _array_head(0, flexible) + _string(None, flexible)  # no errors
        after_offset += tags
        parts = [_array_head(max(0, topic_count), flexible)]
        counted: dict[str, int] = {}
        for _ in range(max(0, topic_count)):
            name, pos = _read_string(frame, pos, flexible)
            parts.append(_string(name, flexible))
            partition_count, pos = _read_array_head(frame, pos, flexible)
            parts.append(_array_head(max(0, partition_count), flexible))
            for _ in range(max(0, partition_count)):
                (index,) = _INT32.unpack_from(frame, pos)
                pos += 4
                if flexible:
                    size, pos = _read_uvarint(frame, pos)
                    size -= 1
                else:
                    (size,) = _INT32.unpack_from(frame, pos)
                    pos += 4
                records = record_count(frame, pos, pos + size) if size > 0 else 0
                pos += max(0, size)
                if flexible:
                    pos = _skip_tags(frame, pos)
                key = (name or "", index)
                base = next_offset.get(key, 0)
                next_offset[key] = base + records
                counted[key[0]] = counted.get(key[0], 0) + records
                parts.append(_PRODUCE_PARTITION.pack(index, 0, base))
                parts.append(after_offset)
            if flexible:
                pos = _skip_tags(frame, pos)
            parts.append(tags)
        if acks == 0:
            return None
        acknowledged = self.acknowledged
        for name, records in counted.items():
            acknowledged[name] = acknowledged.get(name, 0) + records
        parts.append(_INT32.pack(0))  # throttle time
        parts.append(tags)
        return b"".join(parts)


class _Connection(asyncio.Protocol):
    """One client connection: frames in, responses out, in order."""

    def __init__(self, broker: InstantBroker) -> None:
        self._broker = broker
        self._buffer = bytearray()
        self._transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they write.
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        consumed = 0
        available = len(buffer)
        responses: list[bytes] = []
        handle = self._broker.handle
        try:
            while available - consumed >= 4:
                (size,) = _INT32.unpack_from(buffer, consumed)
                end = consumed + 4 + size
                if end > available:
                    break
                response = handle(buffer, consumed + 4, end)
                if response is not None:
                    responses.append(response)
                consumed = end
        except (ProtocolError, struct.error, IndexError, UnicodeDecodeError) as exc:
            print(f"instant broker: closing a connection: {exc!r}", file=sys.stderr, flush=True)
            if responses:
                self._transport.write(b"".join(responses))
            self._transport.close()
            return
        if consumed:
            del buffer[:consumed]
        if responses:
            self._transport.write(b"".join(responses) if len(responses) > 1 else responses[0])


async def listen(
    host: str, port: int, partitions: int, broker: InstantBroker | None = None
) -> tuple[asyncio.Server, str]:
    """Start accepting connections (port 0 picks one); the server and ``host:port``.
    ``broker``, when given, is the state to answer with (its port is set here)."""
    loop = asyncio.get_running_loop()
    state = broker if broker is not None else InstantBroker(host, port, partitions)
    server = await loop.create_server(lambda: _Connection(state), host, port)
    state.port = server.sockets[0].getsockname()[1]
    return server, f"{host}:{state.port}"


async def serve(host: str, port: int, partitions: int) -> None:
    """Listen until SIGTERM or SIGINT; print ``listening host:port`` once accepting."""
    loop = asyncio.get_running_loop()
    broker = InstantBroker(host, port, partitions)
    server, address = await listen(host, port, partitions, broker)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)

    def report() -> None:
        print(json.dumps({"acknowledged": broker.acknowledged}), flush=True)

    with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
        loop.add_signal_handler(signal.SIGUSR1, report)
    print(f"listening {address}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench.instant_broker``."""
    parser = argparse.ArgumentParser(prog="python -m bench.instant_broker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of every topic")
    args = parser.parse_args(argv)
    if args.partitions < 1:
        parser.error("--partitions must be at least 1")
    runner = asyncio.run
    try:
        import uvloop
    except ImportError:
        pass
    else:
        runner = uvloop.run
    runner(serve(args.host, args.port, args.partitions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
