"""An address that drops packets, made without privileges: a listener whose accept queue is
full and never drained. Linux then drops every new connection's SYN, so a connection
attempt there hangs until the connector's own timeout, as toward a host behind a firewall
that drops packets (rather than refusing them)."""

from __future__ import annotations

import socket
import time
from types import TracebackType


class SilentAddress:
    """Listen at ``host:port`` (``port`` 0: any) and fill the accept queue, on entering.

    Use as a context manager (:meth:`close` also ends it); :attr:`port` is the port it
    holds once entered.
    """

    def __init__(self, host: str, port: int = 0) -> None:
        self.host = host
        self.port = port
        self._server: socket.socket | None = None
        self._fillers: list[socket.socket] = []

    def __enter__(self) -> SilentAddress:
        server = self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # The address may have just been a broker's, with its connections in TIME_WAIT.
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.host, self.port))
        self.port = server.getsockname()[1]
        # A backlog of 0 queues one connection; the next ones' SYNs are dropped.
        server.listen(0)
        for _ in range(3):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            filler.connect_ex((self.host, self.port))
            self._fillers.append(filler)
        self._check_silent()
        return self

    def _check_silent(self) -> None:
        deadline = time.monotonic() + 5.0
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.settimeout(0.3)
                try:
                    probe.connect((self.host, self.port))
                except TimeoutError:
                    return
                except OSError as exc:
                    raise AssertionError(f"{self.host}:{self.port} refused: {exc}") from exc
            # The probe got in (a filler's handshake had not finished): it fills the queue too.
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.host}:{self.port} keeps accepting connections")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        for filler in self._fillers:
            filler.close()
        self._fillers.clear()
        if self._server is not None:
            self._server.close()
            self._server = None
