"""A fair pool of batch buffers bounded by ``buffer_memory``, like the Java client's BufferPool.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

Buffers of exactly ``poolable_size`` bytes (``batch_size``) are kept for reuse once their batch
is done; larger ones are accounted for and then left to the garbage collector. When memory is
short, callers wait on futures that are served strictly first come, first served, for at most
``max_block_ms``; then :class:`~aioproducer.errors.BufferExhaustedError` is raised.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

from aioproducer.errors import BufferExhaustedError, ProducerClosedError

__all__ = ["BufferPool", "BufferPoolStatistics"]


@dataclass(frozen=True, slots=True)
class BufferPoolStatistics:
    """A snapshot of the pool.

    Attributes:
        total_bytes: ``buffer_memory``.
        available_bytes: bytes free (in the free list or never allocated).
        free_buffers: pooled buffers of ``poolable_size`` waiting for reuse.
        waiters: callers waiting for memory.
        wait_time_total_s: seconds callers spent waiting, summed.
    """

    total_bytes: int
    available_bytes: int
    free_buffers: int
    waiters: int
    wait_time_total_s: float


class _Waiter:
    __slots__ = ("deadline", "future", "queued", "size")

    def __init__(self, size: int, future: asyncio.Future[bytearray], deadline: float) -> None:
        self.size = size
        self.future = future
        # When it gives up, on the loop's clock.
        self.deadline = deadline
        # False once taken off the pool's queue (served, or skipped as done, or closed).
        self.queued = True


class BufferPool:
    """Memory for record batches, at most ``total_memory`` bytes at once."""

    def __init__(self, total_memory: int, poolable_size: int) -> None:
        if poolable_size <= 0:
            raise ValueError("poolable_size must be positive")
        self._total = total_memory
        self._poolable_size = poolable_size
        self._free: deque[bytearray] = deque()
        # Bytes neither handed out nor held in the free list.
        self._non_pooled_available = total_memory
        self._waiters: deque[_Waiter] = deque()
        self._wait_time_total = 0.0
        self._closed = False
        # The loop the waiters' futures belong to, kept so a wait makes no
        # asyncio.get_running_loop() call (a getpid() system call each time).
        self._loop: asyncio.AbstractEventLoop | None = None
        # One timer for every waiter's deadline, armed for the earliest one; a waiter that is
        # served leaves it be, so a wait costs no timer of its own (a wait per batch is the
        # steady state of a producer that outpaces its brokers).
        self._timer: asyncio.TimerHandle | None = None

    @property
    def poolable_size(self) -> int:
        """The size of the buffers the pool keeps for reuse (``batch_size``)."""
        return self._poolable_size

    @property
    def total_memory(self) -> int:
        """``buffer_memory``."""
        return self._total

    def available_memory(self) -> int:
        """Bytes that could be handed out now."""
        return self._non_pooled_available + len(self._free) * self._poolable_size

    def queued(self) -> int:
        """How many callers wait for memory."""
        return len(self._waiters)

    def statistics(self) -> BufferPoolStatistics:
        """A frozen snapshot of the pool's state."""
        return BufferPoolStatistics(
            total_bytes=self._total,
            available_bytes=self.available_memory(),
            free_buffers=len(self._free),
            waiters=len(self._waiters),
            wait_time_total_s=self._wait_time_total,
        )

    def allocate_nowait(self, size: int) -> bytearray | None:
        """A buffer of ``size`` bytes if one is free now and nobody waits ahead; else None."""
        if size > self._total:
            raise ValueError(
                f"a buffer of {size} bytes exceeds the pool's total memory of {self._total} bytes"
            )
        if self._closed:
            raise ProducerClosedError("the producer is closed; no new buffer is handed out")
        if self._waiters:
            return None
        return self._take(size)

    async def allocate(self, size: int, max_time_to_block: float) -> bytearray:
        """A buffer of ``size`` bytes, waiting up to ``max_time_to_block`` seconds for memory.

        Raises:
            BufferExhaustedError: no memory became free in time.
            ProducerClosedError: the pool was closed while waiting.
        """
        buffer = self.allocate_nowait(size)
        if buffer is not None:
            return buffer
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, max_time_to_block)
        waiter = _Waiter(size, loop.create_future(), deadline)
        self._waiters.append(waiter)
        if self._timer is None or deadline < self._timer.when():
            self._arm_timer(loop, deadline)
        start = time.monotonic()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            # The memory may have been granted just before the cancellation landed.
            if waiter.future.done() and not waiter.future.cancelled():
                granted = waiter.future.result()
                self.deallocate(granted, len(granted))
            raise
        finally:
            self._wait_time_total += time.monotonic() - start
            if waiter.queued:
                # Timed out or cancelled while queued: leave the queue.
                waiter.queued = False
                self._waiters.remove(waiter)
            self._serve_waiters()

    def _arm_timer(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, self._expire_waiters)

    def _expire_waiters(self) -> None:
        # Fail the waiters whose deadline has passed; arm the timer for the next deadline.
        self._timer = None
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        earliest: float | None = None
        for waiter in self._waiters:
            future = waiter.future
            if future.done():
                continue
            if waiter.deadline <= now:
                future.set_exception(
                    BufferExhaustedError(
                        f"failed to allocate {waiter.size} bytes within the configured max "
                        f"blocking time; {self.available_memory()} of {self._total} bytes of "
                        "buffer_memory are free"
                    )
                )
            elif earliest is None or waiter.deadline < earliest:
                earliest = waiter.deadline
        if earliest is not None:
            self._arm_timer(loop, earliest)

    def _take(self, size: int) -> bytearray | None:
        if size == self._poolable_size and self._free:
            return self._free.popleft()
        if self._non_pooled_available + len(self._free) * self._poolable_size < size:
            return None
        # Give free pooled buffers back to the general memory until there is enough.
        while self._non_pooled_available < size:
            self._free.pop()
            self._non_pooled_available += self._poolable_size
        self._non_pooled_available -= size
        return bytearray(size)

    def deallocate(self, buffer: bytearray | None, size: int) -> None:
        """Return ``size`` bytes (and the buffer, when it has the poolable size)."""
        if buffer is not None and size == self._poolable_size and len(buffer) == size:
            self._free.append(buffer)
        else:
            self._non_pooled_available += size
        self._serve_waiters()

    def _serve_waiters(self) -> None:
        # Strictly first come, first served: the head waiter blocks those behind it.
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.future.done():
                waiters.popleft()
                head.queued = False
                continue
            buffer = self._take(head.size)
            if buffer is None:
                return
            waiters.popleft()
            head.queued = False
            head.future.set_result(buffer)

    def close(self) -> None:
        """Fail every waiter with ProducerClosedError and refuse new allocations."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiters:
            waiter = self._waiters.popleft()
            waiter.queued = False
            if not waiter.future.done():
                waiter.future.set_exception(
                    ProducerClosedError("the producer closed while waiting for buffer memory")
                )
