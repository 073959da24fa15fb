"""Stopping a service on SIGTERM without losing what the producer buffered.

A container platform stops a process with SIGTERM, then SIGKILL once its grace period ends
(Kubernetes: 30 s by default). Python's default for SIGTERM ends the process at once, so
records still in the producer's buffer are lost unless the service turns the signal into
an orderly stop. :func:`stop_on_signals` does that for a plain asyncio service (the
operating guide shows it whole).

Web servers handle the signal themselves: uvicorn (and gunicorn's workers) stop taking
requests on SIGTERM, then run the application's lifespan shutdown, which closes the
producer (:func:`aioproducer.integrations.fastapi.kafka_lifespan`'s ``close_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["StopSignal", "stop_on_signals"]


@dataclass
class StopSignal:
    """What :func:`stop_on_signals` yields: the signal that ended the block, once one has."""

    signal: int | None = None
    """The number of the signal received (``signal.SIGTERM``...), or None."""


@contextlib.contextmanager
def stop_on_signals(
    *signals: int,
) -> Iterator[StopSignal]:
    """Run the block until one of ``signals`` arrives (SIGTERM and SIGINT by default), then
    go on after it.

    The first such signal cancels the task running the block; the cancellation ends at the
    block's end, so the code after it runs as usual (closing the producer, which delivers
    what is buffered). Any other cancellation of the task goes through. Once the block has
    ended, the signals' handlers are back to Python's defaults: a second SIGTERM or
    SIGINT during the shutdown stops the process at once (SIGINT raises
    ``KeyboardInterrupt``).

    Use it in the task that should stop, on the main thread's event loop (signal handlers
    can only be set there), on Unix.

    Raises:
        RuntimeError: not inside a task on a running event loop, or not on the main thread.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("stop_on_signals() must be used inside an asyncio task")
    chosen = signals or (signal.SIGTERM, signal.SIGINT)
    received = StopSignal()

    def on_signal(number: int) -> None:
        if received.signal is None:
            received.signal = number
            task.cancel(f"signal {signal.Signals(number).name} received")

    installed: list[int] = []
    try:
        for number in chosen:
            loop.add_signal_handler(number, on_signal, number)
            installed.append(number)
        yield received
    except asyncio.CancelledError:
        if received.signal is None:
            raise
        # Our cancellation ends here; one that came from elsewhere as well goes on.
        if sys.version_info >= (3, 11) and task.uncancel() > 0:
            raise
    finally:
        for number in installed:
            loop.remove_signal_handler(number)
