"""Answers to the sender's requests, queued by the broker connections for the sender's step.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

A connection reads responses whenever the event loop hands it bytes, and fails its requests
whenever it closes; what an answer means is the sender's business, and the sender acts only
in its step (:meth:`~aioproducer._core.sender.Sender.run_once`). So the connection pushes
each answer, with the handler the request was sent with, onto the :class:`AnswerQueue`, and
wakes the sender; the step takes everything queued and calls each handler with the step's
time, as Java's ``NetworkClient.poll`` completes its requests' handlers. A broker answers a
connection's requests in the order they were sent, so each connection's answers are queued
in that order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Union, final

__all__ = ["Answer", "AnswerHandler", "AnswerQueue"]

AnswerHandler = Callable[[Any, Union[BaseException, None], float], None]  # noqa: UP007
"""What to do with an answer: called with the response (None when the request failed), the
error (None when it was answered) and the time of the step that handles it."""

Answer = tuple[AnswerHandler, Any, Union[BaseException, None]]  # noqa: UP007
"""A handler with the response or error it is to be called with."""


@final
class AnswerQueue:
    """The answers that arrived since the sender's last step, in arrival order.

    Args:
        wake: called after answers were pushed (the sender's wake-up); None wakes nobody
            (a caller that steps on its own clock).
    """

    def __init__(self, wake: Callable[[], None] | None = None) -> None:
        self._answers: list[Answer] = []
        self._wake: Final = wake
        self._closed = False

    def push(self, handler: AnswerHandler, response: Any, error: BaseException | None) -> None:
        """Queue ``handler``'s answer: ``response`` or ``error``. Dropped once closed.

        Call :meth:`wake` after the last of the answers that arrived together."""
        if not self._closed:
            self._answers.append((handler, response, error))

    def wake(self) -> None:
        """Tell the sender answers are waiting."""
        wake = self._wake
        if wake is not None and self._answers:
            wake()

    def __len__(self) -> int:
        return len(self._answers)

    def take(self) -> list[Answer]:
        """Everything queued, oldest first; the queue is empty after."""
        answers = self._answers
        if answers:
            self._answers = []
        return answers

    def put_back(self, answers: list[Answer]) -> None:
        """Queue ``answers``, taken but not handled, again ahead of the others (the step
        that took them ended early)."""
        if not self._closed:
            self._answers[:0] = answers

    def close(self) -> None:
        """Nobody handles answers any more: drop those queued and any pushed later (their
        requests' records were failed already)."""
        self._closed = True
        self._answers = []
