"""A wake-up timer for the sender with sub-millisecond precision, where the OS has one.

The sender sleeps until the next batch's linger ends. ``loop.call_later`` keeps time in
whole milliseconds under uvloop (libuv's clock) and polls with millisecond timeouts under
asyncio, so it wakes up to ~1 ms late (figures in bench/README.md). Every lingering batch
pays that on top of ``linger_ms``, and
at a steady rate the first record of each batch is the one a p99 sees.

On Linux a ``timerfd`` is exact to the kernel's timer slack (tens of microseconds): the
event loop watches it like a socket (``add_reader``), and arming it is one system call.
Python 3.13 has ``os.timerfd_create``; older versions reach the same libc functions through
ctypes. Where neither works (another OS, a loop without ``add_reader``), :class:`WakeTimer`
falls back to ``call_later``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["WakeTimer"]

log = logging.getLogger("aioproducer")

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = getattr(os, "O_NONBLOCK", 0o4000)
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0o2000000)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc_timerfd() -> tuple[Callable[[], int], Callable[[int, float], None]] | None:
    """(create, arm) through libc, or None where there is no timerfd."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        timerfd_create = libc.timerfd_create
        timerfd_settime = libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
    timerfd_create.restype = ctypes.c_int
    timerfd_settime.argtypes = [
        ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p
    ]
    timerfd_settime.restype = ctypes.c_int

    def create() -> int:
        fd = int(timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
        if fd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
        return fd

    spec = _Itimerspec()

    def arm(fd: int, delay: float) -> None:
        # A zero it_value would disarm the timer: the shortest wait is 1 ns.
        nanoseconds = max(1, int(delay * 1e9))
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(nanoseconds, 1_000_000_000)
        if timerfd_settime(fd, 0, ctypes.byref(spec), None) < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))

    return create, arm


def _os_timerfd() -> tuple[Callable[[], int], Callable[[int, float], None]] | None:
    """(create, arm) with Python 3.13's os.timerfd_* functions, or None before 3.13."""
    create_fd: Any = getattr(os, "timerfd_create", None)
    settime: Any = getattr(os, "timerfd_settime", None)
    if create_fd is None or settime is None:
        return None
    flags = getattr(os, "TFD_NONBLOCK", _TFD_NONBLOCK) | getattr(os, "TFD_CLOEXEC", _TFD_CLOEXEC)
    clock = getattr(time, "CLOCK_MONOTONIC", _CLOCK_MONOTONIC)

    def create() -> int:
        return int(create_fd(clock, flags=flags))

    def arm(fd: int, delay: float) -> None:
        settime(fd, initial=max(delay, 1e-9), interval=0)

    return create, arm


class WakeTimer:
    """One re-armable wake-up for one event loop: :meth:`arm` sets when ``callback`` is
    called next (replacing the previous time), :meth:`close` frees the timer.

    ``precise`` tells whether a ``timerfd`` serves it (else ``loop.call_later``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._fd = -1
        self._arm: Callable[[int, float], None] | None = None
        # The deadline armed and not yet reached: arming the same one again is skipped.
        self._armed: float | None = None
        functions = _os_timerfd() or _libc_timerfd()
        if functions is None:
            return
        create, arm = functions
        try:
            fd = create()
        except OSError as exc:
            log.debug("no timerfd for the sender's wake-ups (%s); using call_later", exc)
            return
        try:
            loop.add_reader(fd, self._on_readable)
        except Exception as exc:  # e.g. NotImplementedError from Windows' proactor loop
            os.close(fd)
            log.debug("the event loop cannot watch a timerfd (%s); using call_later", exc)
            return
        self._fd = fd
        self._arm = arm

    @property
    def precise(self) -> bool:
        """True while a timerfd serves this timer."""
        return self._fd >= 0

    def arm(self, delay: float, now: float) -> None:
        """Call the callback ``delay`` seconds from now, instead of at the time set before.

        ``now`` is the clock reading ``delay`` was computed from: with it, arming again the
        deadline already armed (``now + delay``) is recognized and costs nothing.
        """
        deadline = now + delay
        armed = self._armed
        if armed is not None and abs(armed - deadline) < 1e-6:
            return
        self._armed = deadline
        if self._arm is not None:
            try:
                self._arm(self._fd, delay)
                return
            except OSError as exc:  # pragma: no cover - settime on a valid fd does not fail
                log.debug("arming the timerfd failed (%s); using call_later", exc)
                self.close()
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_later(delay, self._fire)

    def close(self) -> None:
        """Stop the timer and free its file descriptor; arm() then falls back to call_later."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed = None
        fd, self._fd, self._arm = self._fd, -1, None
        if fd >= 0:
            # A loop already closed has forgotten its readers.
            with contextlib.suppress(Exception):
                self._loop.remove_reader(fd)
            os.close(fd)

    def _on_readable(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiry count; reading clears the readiness
        except (BlockingIOError, InterruptedError):
            return  # re-armed before this callback ran: not expired after all
        self._armed = None
        self._callback()

    def _fire(self) -> None:
        self._handle = None
        self._armed = None
        self._callback()
