"""The sender's wake-up timer (aioproducer._core.timer): a timerfd on Linux, call_later elsewhere.

No test bounds how late a wake-up may come (CI machines vary); they check that it comes,
never before its time, once per arming, and that the file descriptor is freed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import pytest

from aioproducer._core.timer import WakeTimer

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


class _Recorder:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        self.event.set()

    async def next(self) -> float:
        await asyncio.wait_for(self.event.wait(), 5.0)
        self.event.clear()
        return self.times[-1]


async def _fires_once_not_early(timer: WakeTimer, recorder: _Recorder) -> None:
    start = time.monotonic()
    timer.arm(0.003, start)
    fired = await recorder.next()
    if timer.precise:
        # (call_later may fire early under uvloop, whose clock counts whole milliseconds;
        # the sender then finds nothing ready and sleeps again.)
        assert fired - start >= 0.003 - 1e-4
    await asyncio.sleep(0.02)
    assert len(recorder.times) == 1


@linux_only
async def test_a_timerfd_wakes_once_and_not_before_its_time() -> None:
    recorder = _Recorder()
    timer = WakeTimer(asyncio.get_running_loop(), recorder)
    try:
        assert timer.precise
        await _fires_once_not_early(timer, recorder)
    finally:
        timer.close()


async def test_call_later_serves_a_loop_that_cannot_watch_the_timerfd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()

    def refuse(*args: Any) -> None:
        raise NotImplementedError("no add_reader here")

    monkeypatch.setattr(loop, "add_reader", refuse)
    recorder = _Recorder()
    timer = WakeTimer(loop, recorder)
    try:
        assert not timer.precise
        await _fires_once_not_early(timer, recorder)
    finally:
        timer.close()


@pytest.mark.parametrize("precise", [True, False])
async def test_arming_again_replaces_the_earlier_time(
    precise: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    if not precise:
        monkeypatch.setattr(loop, "add_reader", lambda *a: (_ for _ in ()).throw(OSError()))
    elif not sys.platform.startswith("linux"):
        pytest.skip("timerfd is Linux's")
    recorder = _Recorder()
    timer = WakeTimer(loop, recorder)
    try:
        assert timer.precise is precise
        now = time.monotonic()
        timer.arm(0.05, now)
        timer.arm(0.002, now)  # sooner: the 50 ms one is gone
        await recorder.next()
        await asyncio.sleep(0.1)
        assert len(recorder.times) == 1
        now = time.monotonic()
        timer.arm(0.002, now)
        timer.arm(0.05, now)  # later: the 2 ms one is gone too
        await asyncio.sleep(0.02)
        assert len(recorder.times) == 1
        await recorder.next()
        assert recorder.times[1] - now >= 0.05 - 2e-3
    finally:
        timer.close()


@linux_only
async def test_arming_the_armed_deadline_again_makes_no_system_call() -> None:
    recorder = _Recorder()
    timer = WakeTimer(asyncio.get_running_loop(), recorder)
    calls: list[float] = []
    arm = timer._arm
    assert arm is not None

    def counting(fd: int, delay: float) -> None:
        calls.append(delay)
        arm(fd, delay)

    timer._arm = counting
    try:
        now = time.monotonic()
        for step in range(5):  # the sender re-computes the same linger deadline
            timer.arm(0.004 - step * 1e-4, now + step * 1e-4)
        assert len(calls) == 1
        await recorder.next()
        timer.arm(0.004, now)  # once fired, the same deadline is armed again
        assert len(calls) == 2
    finally:
        timer.close()


@linux_only
async def test_close_frees_the_timerfd_and_a_closed_timer_still_works() -> None:
    recorder = _Recorder()
    timer = WakeTimer(asyncio.get_running_loop(), recorder)
    fd = timer._fd
    os.fstat(fd)
    timer.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    assert not timer.precise
    await _fires_once_not_early(timer, recorder)
    timer.close()
