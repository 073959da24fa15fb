"""BufferPool: accounting, reuse of batch_size buffers, FIFO waiters, timeouts, close."""

from __future__ import annotations

import asyncio

import pytest

from aioproducer._core.buffer_pool import BufferPool
from aioproducer.errors import BufferExhaustedError, KafkaError, ProducerClosedError


def full_pool() -> tuple[BufferPool, bytearray]:
    """A pool of one 100-byte buffer, handed out: the next allocation must wait."""
    pool = BufferPool(total_memory=100, poolable_size=100)
    held = pool.allocate_nowait(100)
    assert held is not None
    return pool, held


async def queued(pool: BufferPool, max_block: float, size: int = 100) -> asyncio.Task[bytearray]:
    """A task waiting in ``pool`` for ``size`` bytes, returned once it is in the queue."""
    task = asyncio.create_task(pool.allocate(size, max_block))
    await asyncio.sleep(0)
    return task


async def give_back(pool: BufferPool, waiter: asyncio.Task[bytearray], size: int = 100) -> None:
    """Wait for ``waiter``'s buffer (briefly) and return it to the pool."""
    buffer = await asyncio.wait_for(waiter, 1)
    assert len(buffer) == size
    pool.deallocate(buffer, size)


def test_allocate_and_reuse_poolable_buffers() -> None:
    pool = BufferPool(total_memory=1024, poolable_size=256)
    first = pool.allocate_nowait(256)
    assert first is not None and len(first) == 256
    assert pool.available_memory() == 768
    first[:3] = b"abc"
    pool.deallocate(first, 256)
    assert pool.statistics().free_buffers == 1
    again = pool.allocate_nowait(256)
    # The very same buffer object comes back: batch_size buffers are reused.
    assert again is first
    assert pool.available_memory() == 768


def test_large_buffers_are_accounted_not_pooled() -> None:
    pool = BufferPool(total_memory=1024, poolable_size=256)
    big = pool.allocate_nowait(700)
    assert big is not None and len(big) == 700
    assert pool.available_memory() == 324
    assert pool.allocate_nowait(400) is None
    pool.deallocate(big, 700)
    assert pool.statistics().free_buffers == 0
    assert pool.available_memory() == 1024


def test_free_list_is_released_for_a_large_request() -> None:
    pool = BufferPool(total_memory=1024, poolable_size=256)
    buffers = [pool.allocate_nowait(256) for _ in range(4)]
    assert pool.allocate_nowait(256) is None
    for buffer in buffers:
        pool.deallocate(buffer, 256)
    assert pool.statistics().free_buffers == 4
    big = pool.allocate_nowait(1000)
    assert big is not None
    assert pool.statistics().free_buffers == 0


def test_request_larger_than_total_is_rejected() -> None:
    pool = BufferPool(total_memory=100, poolable_size=50)
    with pytest.raises(ValueError, match="exceeds the pool's total memory"):
        pool.allocate_nowait(101)


async def test_waiters_are_served_first_come_first_served() -> None:
    pool = BufferPool(total_memory=300, poolable_size=100)
    held = [pool.allocate_nowait(100) for _ in range(3)]
    order: list[str] = []

    async def want(name: str, size: int) -> None:
        buffer = await pool.allocate(size, 5.0)
        order.append(name)
        pool.deallocate(buffer, size)

    big = asyncio.create_task(want("big", 200))
    await asyncio.sleep(0)
    small = asyncio.create_task(want("small", 100))
    await asyncio.sleep(0)
    assert pool.queued() == 2
    # One buffer back: enough for "small", but "big" is ahead and must be served first.
    pool.deallocate(held[0], 100)
    await asyncio.sleep(0.01)
    assert order == []
    # A caller arriving now does not jump the queue either.
    assert pool.allocate_nowait(100) is None
    pool.deallocate(held[1], 100)
    await asyncio.wait_for(asyncio.gather(big, small), 2)
    assert order == ["big", "small"]
    pool.deallocate(held[2], 100)
    assert pool.available_memory() == 300


async def test_exhaustion_raises_after_max_block() -> None:
    pool = BufferPool(total_memory=100, poolable_size=100)
    held = pool.allocate_nowait(100)
    with pytest.raises(BufferExhaustedError) as info:
        await pool.allocate(100, 0.05)
    assert isinstance(info.value, KafkaError)
    assert info.value.retriable
    assert "100 bytes" in str(info.value)
    assert pool.queued() == 0
    assert pool.statistics().wait_time_total_s > 0
    pool.deallocate(held, 100)
    assert pool.available_memory() == 100


async def test_timed_out_head_waiter_unblocks_the_next() -> None:
    pool = BufferPool(total_memory=200, poolable_size=100)
    held = pool.allocate_nowait(100)
    head = asyncio.create_task(pool.allocate(200, 0.05))
    await asyncio.sleep(0)
    second = asyncio.create_task(pool.allocate(100, 5.0))
    await asyncio.sleep(0)
    with pytest.raises(BufferExhaustedError):
        await head
    await give_back(pool, second)
    pool.deallocate(held, 100)
    assert pool.available_memory() == 200


async def test_cancelled_waiter_loses_no_memory() -> None:
    pool, held = full_pool()
    waiter = await queued(pool, 5.0)
    # Grant the memory and cancel in the same loop iteration: the grant must come back.
    pool.deallocate(held, 100)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert pool.available_memory() == 100
    assert pool.queued() == 0


async def test_waiter_cancelled_mid_queue_leaves_the_queue() -> None:
    pool = BufferPool(total_memory=100, poolable_size=100)
    held = pool.allocate_nowait(100)
    first = asyncio.create_task(pool.allocate(100, 5.0))
    middle = asyncio.create_task(pool.allocate(100, 5.0))
    last = asyncio.create_task(pool.allocate(100, 5.0))
    await asyncio.sleep(0)
    assert pool.queued() == 3
    middle.cancel()
    with pytest.raises(asyncio.CancelledError):
        await middle
    assert pool.queued() == 2
    pool.deallocate(held, 100)
    buffer = await asyncio.wait_for(first, 1)
    assert pool.queued() == 1
    pool.deallocate(buffer, 100)
    buffer = await asyncio.wait_for(last, 1)
    assert pool.queued() == 0
    pool.deallocate(buffer, 100)
    assert pool.available_memory() == 100


async def test_close_fails_waiters() -> None:
    pool = BufferPool(total_memory=100, poolable_size=100)
    held = pool.allocate_nowait(100)
    waiter = asyncio.create_task(pool.allocate(100, 5.0))
    await asyncio.sleep(0)
    pool.close()
    with pytest.raises(ProducerClosedError):
        await waiter
    with pytest.raises(ProducerClosedError):
        pool.allocate_nowait(10)
    pool.deallocate(held, 100)


async def test_a_later_waiter_with_an_earlier_deadline_times_out_first() -> None:
    # One timer serves every waiter: a shorter wait queued behind a long one must still end
    # on time, and the long one must go on waiting.
    pool, held = full_pool()
    patient = await queued(pool, 5.0)
    # Were it to wait for the first waiter's deadline, wait_for would time out instead.
    with pytest.raises(BufferExhaustedError):
        await asyncio.wait_for(pool.allocate(100, 0.05), 2.5)
    assert not patient.done()
    pool.deallocate(held, 100)
    await give_back(pool, patient)
    assert pool.available_memory() == 100


async def test_a_waiter_outlives_the_deadline_of_one_served_before_it() -> None:
    # The timer armed for a short wait that was served must not fail a longer wait after it.
    pool, held = full_pool()
    quick = await queued(pool, 0.05)
    pool.deallocate(held, 100)
    held = await asyncio.wait_for(quick, 1)
    slow = asyncio.create_task(pool.allocate(100, 5.0))
    await asyncio.sleep(0.2)  # well past the served waiter's deadline
    assert not slow.done()
    assert pool.queued() == 1
    pool.deallocate(held, 100)
    await give_back(pool, slow)
    assert pool.available_memory() == 100
