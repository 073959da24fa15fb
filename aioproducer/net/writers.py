"""How a connection's bytes reach the socket: through the event loop, or a native thread.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

A :class:`~aioproducer.net.connection.BrokerConnection` writes through one writer object,
whichever way it writes: :class:`LoopWriter` hands the parts to ``transport.writelines`` (no
joining of large buffers); :class:`NativeWriter` copies them to
:class:`aioproducer._native.sockwriter.SocketWriter`, a thread that writes them to the socket on
another core (``socket_writer_thread``). Both close the same ways: :meth:`LoopWriter.close`
(flush, then close), :meth:`LoopWriter.abort` (drop what is queued) and
:meth:`LoopWriter.half_close` (flush, then shut down the write side only).

The rule that keeps the native writer safe lives in :func:`native_writer_for` alone: only on
a connection whose transport writes the bytes it is given unchanged (no TLS), and only when
nothing is queued in the transport, so bytes stay in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import sysconfig
from typing import TYPE_CHECKING, Final

if sysconfig.get_config_var("Py_GIL_DISABLED"):
    # A free-threaded Python: the native writer declares that it needs the GIL, and
    # importing it would turn the GIL back on for the whole process. Writes go through the
    # transport, as where the helper is not built.
    _SOCKET_WRITER_BUILT = False
else:
    try:
        from aioproducer._native.sockwriter import SocketWriter
    except ImportError:  # not Linux, or the pure-Python install: writes go through the transport
        _SOCKET_WRITER_BUILT = False
    else:
        _SOCKET_WRITER_BUILT = True

from aioproducer.net.handshake import security_protocol_name

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from aioproducer.config import ProducerConfig

__all__ = [
    "WRITE_BUFFER_HIGH_WATER",
    "WRITE_BUFFER_LOW_WATER",
    "LoopWriter",
    "NativeWriter",
    "native_writer_for",
]

log = logging.getLogger("aioproducer.net")

#: The transport's write buffer size above which a connection stops being writable.
#: asyncio's default (64 KiB) is smaller than one typical produce request, which would make the
#: connection look congested after every request; 1 MiB keeps one large request plus headroom.
WRITE_BUFFER_HIGH_WATER: Final = 1 << 20
#: The write buffer size below which a connection is writable again.
WRITE_BUFFER_LOW_WATER: Final = 256 << 10

# The protocols whose transport writes the bytes it is given unchanged, so that a native
# writer may write them to the socket itself: Kafka's SASL never wraps the stream after
# authentication (no SASL security layer). Any other protocol (SSL, SASL_SSL) encrypts in
# the transport, and its bytes must never reach the raw socket, whatever the transport says
# about itself.
_RAW_SOCKET_PROTOCOLS: Final = frozenset({"PLAINTEXT", "SASL_PLAINTEXT"})


def _remove_reader(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    # Typed as returning bool, but uvloop's returns None: compiled code would refuse that.
    remove: Callable[[int], object] = loop.remove_reader
    remove(fd)


#: asyncio's transport of plain sockets on its selector event loop (see LoopWriter).
_SELECTOR_SOCKET_TRANSPORT: Final[type] = getattr(
    asyncio.selector_events, "_SelectorSocketTransport", type(None)
)


class LoopWriter:
    """Writes through the event loop's transport.

    Args:
        transport: the connection's transport.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        # asyncio's plain socket transport has its own writelines() from Python 3.12 on,
        # which until 3.12.9 and 3.13.2 never paused the protocol above the high-water mark
        # (CPython gh-127655): ``writable`` stayed True however much was queued. Its
        # _maybe_pause_protocol() is asked after each write, as the fixed writelines() does
        # itself (a second call changes nothing). Other transports pause on their own:
        # asyncio's TLS transport (through its SSL protocol), uvloop's, and asyncio's
        # before 3.12.
        self._maybe_pause: Callable[[], object] | None = (
            getattr(transport, "_maybe_pause_protocol", None)
            if sys.version_info >= (3, 12) and isinstance(transport, _SELECTOR_SOCKET_TRANSPORT)
            else None
        )

    @property
    def threaded(self) -> bool:
        """True while a native thread writes (never for this class)."""
        return False

    def write(self, parts: Sequence[bytes | memoryview]) -> None:
        """Queue ``parts`` (a framed request) for writing, in order, without joining them.

        Raises:
            OSError, RuntimeError: the transport is closing (uvloop raises RuntimeError).
        """
        self._transport.writelines(parts)
        maybe_pause = self._maybe_pause
        if maybe_pause is not None:
            maybe_pause()

    def close(self) -> None:
        """Flush what is queued, then close the connection."""
        self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is queued."""
        self._transport.abort()

    def half_close(self) -> None:
        """Flush what is queued, then shut down the write side only (reading goes on)."""
        self._transport.write_eof()

    def drop_queued(self) -> None:
        """Drop what a writer thread has queued (nothing to do here: :meth:`abort` drops
        what the transport holds)."""


class NativeWriter(LoopWriter):
    """Writes on :class:`aioproducer._native.sockwriter.SocketWriter`'s thread.

    Above :data:`WRITE_BUFFER_HIGH_WATER` bytes queued on the thread, the protocol's
    ``pause_writing`` is called, and ``resume_writing`` once the queue drained below
    :data:`WRITE_BUFFER_LOW_WATER` (the thread signals an eventfd the loop watches), as a
    transport does. Once closed or aborted, the thread is gone and what is left goes through
    the transport.

    Args:
        transport: the connection's transport (closes the socket after the thread is done).
        writer: the native writer, writing to the transport's socket.
        drain_fd: the eventfd ``writer`` signals when its queue drains.
        loop: the event loop that watches ``drain_fd`` (None: never paused).
        protocol: told when to pause and resume writing.
        flush_timeout_ms: how long closing waits for the thread to flush.
    """

    def __init__(
        self,
        transport: asyncio.Transport,
        writer: SocketWriter,
        drain_fd: int,
        loop: asyncio.AbstractEventLoop | None,
        protocol: asyncio.BaseProtocol,
        flush_timeout_ms: int,
    ) -> None:
        super().__init__(transport)
        self._writer: SocketWriter | None = writer
        self._drain_fd = drain_fd
        self._loop = loop
        self._protocol = protocol
        self._flush_timeout_ms = flush_timeout_ms
        self._paused = False

    @property
    def threaded(self) -> bool:
        """True until the writer thread is told to stop."""
        return self._writer is not None

    def write(self, parts: Sequence[bytes | memoryview]) -> None:
        """Hand ``parts`` to the writer thread (it copies them), or to the transport once the
        thread was stopped.

        Raises:
            OSError: the thread could not write to the socket.
        """
        writer = self._writer
        if writer is None:
            self._transport.writelines(parts)
        elif writer.write(parts) > WRITE_BUFFER_HIGH_WATER and not self._paused:
            self._watch_drain(writer)

    def _watch_drain(self, writer: SocketWriter) -> None:
        """Above the high-water mark: paused until the writer's queue drains."""
        loop = self._loop
        if writer.notify_below(WRITE_BUFFER_LOW_WATER) or loop is None:
            return
        self._paused = True
        self._protocol.pause_writing()
        loop.add_reader(self._drain_fd, self._on_drained)

    def _on_drained(self) -> None:
        drain_fd = self._drain_fd
        if self._loop is not None:
            _remove_reader(self._loop, drain_fd)
        self._paused = False
        with contextlib.suppress(OSError):  # a spurious wakeup: the counter was read
            os.eventfd_read(drain_fd)
        self._protocol.resume_writing()

    def _stop(self, *, abort: bool, shutdown_write: bool = False) -> None:
        """Let the writer thread flush and close its socket (or drop what is queued)."""
        writer = self._writer
        if writer is None:
            return
        self._writer = None
        if abort:
            writer.abort()
        else:
            writer.close(shutdown_write, self._flush_timeout_ms)
        # The writer no longer touches the eventfd once told to stop.
        drain_fd, self._drain_fd = self._drain_fd, -1
        if self._paused:
            self._paused = False
            if self._loop is not None:
                _remove_reader(self._loop, drain_fd)
        os.close(drain_fd)

    def close(self) -> None:
        """Let the thread flush, then close the transport (the socket closes when the
        thread's copy of the descriptor does)."""
        self._stop(abort=False)
        self._transport.close()

    def abort(self) -> None:
        """Drop what the thread has queued and abort the transport."""
        self._stop(abort=True)
        self._transport.abort()

    def drop_queued(self) -> None:
        """Stop the thread, dropping what it has queued; the transport stays open."""
        self._stop(abort=True)

    def half_close(self) -> None:
        """The thread shuts the write side down after what it has queued."""
        if self._writer is None:
            self._transport.write_eof()
        else:
            self._stop(abort=False, shutdown_write=True)


def native_writer_for(
    transport: asyncio.Transport,
    config: ProducerConfig,
    protocol: asyncio.BaseProtocol,
    loop: asyncio.AbstractEventLoop | None,
    description: str,
) -> NativeWriter | None:
    """A :class:`NativeWriter` for ``transport`` if this connection may use one, else None.

    On loopback, the write system call also runs the broker's side of TCP and wakes its
    thread: a fifth of the producer's CPU at 1 KiB records, on the event loop's thread.
    The native writer copies each request and writes it on another core. Only on plaintext
    connections (TLS encrypts in the transport), and only when nothing is queued in the
    transport, so bytes stay in order.

    Plaintext means both: a ``security_protocol`` without TLS (PLAINTEXT or
    SASL_PLAINTEXT), and a transport that reports no ``ssl_object``. Either alone is not
    trusted: an event loop's TLS transport might not report its ``ssl_object``.
    """
    if (
        not _SOCKET_WRITER_BUILT
        or not config.socket_writer_thread
        or security_protocol_name(config.security_protocol) not in _RAW_SOCKET_PROTOCOLS
        or transport.get_extra_info("ssl_object") is not None
        or transport.get_write_buffer_size() != 0
    ):
        return None
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    drain_fd = -1
    try:
        drain_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        writer = SocketWriter(sock.fileno(), drain_fd)
    except OSError as exc:  # pragma: no cover - out of threads or descriptors
        log.debug("%s writes through the event loop (%s)", description, exc)
        if drain_fd >= 0:
            os.close(drain_fd)
        return None
    return NativeWriter(
        transport,
        writer,
        drain_fd,
        loop,
        protocol,
        config.request_timeout_ms,
    )
