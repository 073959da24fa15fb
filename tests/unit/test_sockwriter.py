"""The native socket writer (aioproducer._native.sockwriter), on a socket pair.

It is built on Linux with the compiled hot path; broker connections use it for plaintext
writes (``socket_writer_thread``). These tests check what the peer reads: every byte in
order, the end of stream after close(), nothing more after abort(), and the errors a
caller sees. No test bounds a time; waits are safety nets.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

sockwriter = pytest.importorskip("aioproducer._native.sockwriter", reason="built on Linux only")
SocketWriter = sockwriter.SocketWriter

PATIENCE = 10.0


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    # Small buffers, whatever the host's defaults: a few MiB queued cannot all fit in them.
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    ours.setblocking(False)
    peer.settimeout(PATIENCE)
    yield ours, peer
    ours.close()
    peer.close()


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(min(1 << 20, count - len(data)))
        if not chunk:
            raise AssertionError(f"end of stream after {len(data)} of {count} bytes")
        data += chunk
    return bytes(data)


def _wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting until {what}")
        time.sleep(0.001)


def test_every_buffer_kind_arrives_whole_and_in_order(pair: tuple[socket.socket, ...]) -> None:
    ours, peer = pair
    writer = SocketWriter(ours.fileno())
    expected = bytearray()
    for i in range(2000):
        parts = [
            (i % 251).to_bytes(1, "big") * (i % 700),
            memoryview(b"header" + i.to_bytes(4, "big"))[2:],
            bytearray(b"tail"),
            b"",
        ]
        writer.write(parts)
        for part in parts:
            expected += part
    assert _read_exactly(peer, len(expected)) == expected
    _wait_until(lambda: writer.pending == 0, "the queue is written")
    assert writer.error == 0
    writer.close()
    ours.close()
    assert peer.recv(1) == b""  # the thread's copy of the descriptor closed too


def test_the_caller_may_reuse_its_buffers_at_once(pair: tuple[socket.socket, ...]) -> None:
    # write() copies: a pooled buffer overwritten right after must not change what is sent.
    ours, peer = pair
    writer = SocketWriter(ours.fileno())
    buffer = bytearray(b"a" * 4096)
    writer.write([memoryview(buffer)])
    buffer[:] = b"b" * 4096
    writer.write([buffer])
    assert _read_exactly(peer, 8192) == b"a" * 4096 + b"b" * 4096
    writer.close()


def test_close_flushes_a_backlog_then_shuts_the_write_side(
    pair: tuple[socket.socket, ...],
) -> None:
    ours, peer = pair
    writer = SocketWriter(ours.fileno())
    chunk = os.urandom(64 << 10)
    for _ in range(64):  # 4 MiB: far more than the socket buffers hold
        writer.write([chunk])
    writer.close(shutdown_write=True)
    ours.close()  # the event loop's descriptor goes at once; nothing queued is lost
    assert _read_exactly(peer, 64 * len(chunk)) == chunk * 64
    assert peer.recv(1) == b""
    _wait_until(lambda: writer.exited, "the thread ends")
    assert writer.error == 0
    with pytest.raises(ConnectionError, match="closed"):
        writer.write([b"late"])


def test_abort_drops_the_backlog_and_ends_the_thread(pair: tuple[socket.socket, ...]) -> None:
    ours, peer = pair
    writer = SocketWriter(ours.fileno())
    for _ in range(64):
        writer.write([b"x" * (64 << 10)])
    writer.abort()
    _wait_until(lambda: writer.exited, "the thread ends")
    assert writer.pending == 0
    ours.close()
    received = 0
    while chunk := peer.recv(1 << 20):
        received += len(chunk)
    assert received < 64 * (64 << 10)  # only what the (small) socket buffers held


def test_a_failed_write_is_reported_and_later_writes_raise(
    pair: tuple[socket.socket, ...],
) -> None:
    ours, peer = pair
    writer = SocketWriter(ours.fileno())
    peer.close()
    writer.write([b"x" * 100])
    _wait_until(lambda: writer.exited, "the thread ends")
    assert writer.error != 0
    with pytest.raises(OSError) as caught:
        writer.write([b"y"])
    assert caught.value.errno == writer.error


def test_the_eventfd_fires_once_the_queue_drains(pair: tuple[socket.socket, ...]) -> None:
    ours, peer = pair
    drained = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        writer = SocketWriter(ours.fileno(), drained)
        assert writer.notify_below(0)  # nothing queued: below at once, no signal armed
        total = 0
        for _ in range(64):
            total = writer.write([b"z" * (64 << 10)])
        assert total > 1 << 20  # the peer reads nothing yet, so most of it is still queued
        assert not writer.notify_below(256 << 10)
        assert select.select([drained], [], [], 0)[0] == []
        _read_exactly(peer, 64 * (64 << 10))
        assert select.select([drained], [], [], PATIENCE)[0] == [drained]
        assert os.eventfd_read(drained) == 1
        assert writer.pending <= 256 << 10
        writer.close()
    finally:
        os.close(drained)


def test_bad_arguments_are_refused(pair: tuple[socket.socket, ...]) -> None:
    ours, _ = pair
    with pytest.raises(OSError):
        SocketWriter(-1)
    for bad in ({"poll_us": 0}, {"poll_us": 1_000_000}, {"idle_us": -1}):
        with pytest.raises(ValueError):
            SocketWriter(ours.fileno(), **bad)
    writer = SocketWriter(ours.fileno())
    with pytest.raises(ValueError):
        writer.close(timeout_ms=-1)
    with pytest.raises(TypeError):
        writer.write([object()])
    with pytest.raises(TypeError):
        writer.write(7)
    with pytest.raises(ValueError):
        writer.notify_below(-1)
    writer.abort()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ (PEP 688) is new in 3.12")
def test_a_list_the_caller_changes_while_a_buffer_exports_is_read_safely(
    pair: tuple[socket.socket, ...],
) -> None:
    # Exporting an item's buffer may run Python code, which may change the list write() is
    # reading: an item replaced is read from the list as it is now (never from freed
    # memory), a list that shrank is refused, and the writer stays usable.
    ours, peer = pair
    writer = SocketWriter(ours.fileno())
    parts: list[Any] = []

    class Replacing:
        def __buffer__(self, flags: int) -> memoryview:
            parts.extend([b"-appended"] * 1000)  # the list's array moves
            parts[1] = b"-replaced"
            return memoryview(b"first")

    class Shrinking:
        def __buffer__(self, flags: int) -> memoryview:
            parts.clear()
            return memoryview(b"lost")

    parts[:] = [Replacing(), b"-original", b"-third"]
    writer.write(parts)
    parts[:] = [Shrinking(), b"-second"]
    with pytest.raises(RuntimeError, match="changed size"):
        writer.write(parts)
    writer.write([b"-last"])
    writer.close(shutdown_write=True)
    expected = b"first-replaced-third-last"
    assert _read_exactly(peer, len(expected)) == expected
    assert peer.recv(1) == b""


@pytest.mark.parametrize("closed_first", [False, True], ids=["dropped", "closed-then-dropped"])
def test_a_dropped_writer_still_writes_what_it_queued(
    pair: tuple[socket.socket, ...], closed_first: bool
) -> None:
    # Dropping the object leaves nobody to queue more: the thread flushes what was queued,
    # as close() would, often before it has even started. (BrokerConnection lets go of its
    # writer right after close(shutdown_write=True).)
    ours, peer = pair
    writer = SocketWriter(ours.fileno())
    chunk = os.urandom(64 << 10)
    for _ in range(16):
        writer.write([chunk])
    if closed_first:
        writer.close(shutdown_write=True)
    del writer
    if not closed_first:
        ours.close()  # without a shutdown the end of stream comes when both copies close
    assert _read_exactly(peer, 16 * len(chunk)) == chunk * 16
    assert peer.recv(1) == b""
