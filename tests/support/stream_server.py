"""A listening asyncio stream server that ends its connection handlers when it closes.

The base of the test's scripted servers (``ScriptedSaslBroker``, ``TlsProxy``): it owns the
listening socket and one task per connection, and ``close()`` cancels those tasks and waits
for them, so no handler outlives the test that started the server.
"""

from __future__ import annotations

import abc
import asyncio
import ssl
from typing import Any, TypeVar

__all__ = ["StreamServer"]

_S = TypeVar("_S", bound="StreamServer")


class StreamServer(abc.ABC):
    """Listens on ``host:port`` (port 0 picks one) and hands each connection to ``_handle``.

    Subclasses implement :meth:`_handle` and may override :meth:`start` (calling
    :meth:`_listen`). Errors in ``_ignored_errors`` end a connection quietly: a client that
    goes away, or a handshake that fails on purpose in a test.
    """

    _ignored_errors: tuple[type[BaseException], ...] = (
        OSError,
        asyncio.IncompleteReadError,
        ssl.SSLError,
    )

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        """The listening port (after :meth:`start`)."""
        assert self._server is not None, f"start() the {type(self).__name__} first"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Start listening."""
        await self._listen()

    async def _listen(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self._requested_port, ssl=ssl_context
        )

    async def close(self) -> None:
        """Stop listening and end every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def drop_connections(self) -> None:
        """End every connection and keep listening (a broker that restarted)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self: _S) -> _S:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except self._ignored_errors:
            pass
        except asyncio.CancelledError:
            # Ending normally: asyncio's stream server (3.11) calls exception() on the
            # handler task and would report a cancelled one as an error in a callback.
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    @abc.abstractmethod
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection until it ends."""
