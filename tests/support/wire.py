"""Seeing, holding or answering the requests the sender sends, in a test.

:func:`intercept_send_for` puts a function of the test between the sender and
``BrokerConnection.send_for``. The sender calls ``send_for`` through its ``_Connection``
protocol (a Python attribute lookup even when both are compiled), so the patch is seen in
the compiled pass too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from aioproducer._core.answers import AnswerHandler
from aioproducer.net.connection import BrokerConnection

Send = Callable[[AnswerHandler], None]
"""Sends the intercepted request for real, its answer going to the handler given."""

Intercept = Callable[[BrokerConnection, Any, AnswerHandler, Send], None]
"""``intercept(connection, request, handler, send)``: called instead of ``send_for``."""


def intercept_send_for(monkeypatch: pytest.MonkeyPatch, intercept: Intercept) -> None:
    """Route every request sent with ``BrokerConnection.send_for`` through ``intercept``.

    ``send(handler)`` sends the request as ``send_for`` would, its answer queued for
    ``handler`` (the sender's own, or one wrapping it); it raises as ``send_for`` does. Not
    calling it keeps the request off the wire: the test then owes the sender an answer,
    which it queues on the connection's answer queue as a connection does.
    """
    original = BrokerConnection.send_for

    def send_for(
        self: BrokerConnection, request: Any, handler: AnswerHandler, version: int | None = None
    ) -> None:
        intercept(self, request, handler, lambda chosen: original(self, request, chosen, version))

    monkeypatch.setattr(BrokerConnection, "send_for", send_for)
