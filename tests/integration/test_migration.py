"""The calls users of aiokafka and confluent-kafka reach for, on Tansu: ``stop()``,
``produce()`` with delivery callbacks served by ``poll()``/``flush()``/``close()`` in the
caller's task or thread, ``init_transactions()``; and a producer used from an event loop it
does not belong to failing clearly. Read back with confluent-kafka."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from aioproducer import DeliveredMessage, Producer, ProducerState
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import IllegalStateError, KafkaError, ProducerClosedError
from aioproducer.sync import SyncProducer
from tests.support.readback import high_watermarks, read_back

TopicFactory = Callable[..., str]
Report = tuple[BaseException | None, DeliveredMessage]


async def test_produce_callbacks_run_in_poll_in_the_polling_task(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    reports: list[Report] = []
    tasks: list[asyncio.Task[Any] | None] = []

    def on_delivery(err: BaseException | None, msg: DeliveredMessage) -> None:
        reports.append((err, msg))
        tasks.append(asyncio.current_task())

    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        for n in range(10):
            await producer.produce(topic, f"value-{n}", key=f"key-{n % 3}", on_delivery=on_delivery)
        # One partition, idempotent: once a later record is acknowledged, so are these.
        await producer.send_and_wait(topic, b"marker")
        assert reports == []  # acknowledged, but their callbacks run only when polled
        served = 0
        while served < 10:
            served += await producer.poll(30)
        assert served == 10
        assert await producer.poll(0) == 0
        assert await asyncio.wait_for(producer.poll(None), 60) == 0  # nothing outstanding
    assert set(tasks) == {asyncio.current_task()}
    stored = {
        (r.partition, r.offset): r for r in read_back(tansu.bootstrap_servers, topic, expected=11)
    }
    assert len(stored) == 11
    for err, msg in reports:
        assert err is None and msg.error() is None
        record = stored[(msg.partition(), msg.offset())]
        assert msg.topic() == topic
        assert (msg.key(), msg.value()) == (record.key, record.value)
        assert msg.timestamp() == (1, record.timestamp_ms)
    assert sorted(msg.value() for _, msg in reports) == sorted(
        f"value-{n}".encode() for n in range(10)
    )


async def test_produce_takes_confluent_arguments(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=3)
    got: list[Report] = []
    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        await producer.produce(
            topic,
            value="text",
            key="k",
            partition=2,
            timestamp=1_700_000_000_000,
            headers={"trace": "abc", "raw": b"\x01"},
            callback=lambda err, msg: got.append((err, msg)),
        )
        await producer.produce(topic, b"no callback", headers=[("h", b"1"), ("h", None)])
        await producer.flush()  # runs the callback, as confluent-kafka's flush() does
        assert len(got) == 1
        with pytest.raises(KafkaError, match="out of range"):
            await producer.produce(topic, b"x", partition=7)
    records = sorted(
        read_back(tansu.bootstrap_servers, topic, expected=2), key=lambda r: r.partition
    )
    by_value = {r.value: r for r in records}
    first = by_value[b"text"]
    assert (first.key, first.partition, first.timestamp_ms) == (b"k", 2, 1_700_000_000_000)
    assert first.headers == [("trace", b"abc"), ("raw", b"\x01")]
    assert by_value[b"no callback"].headers == [("h", b"1"), ("h", None)]
    err, msg = got[0]
    assert err is None and (msg.partition(), msg.offset()) == (2, first.offset)


async def test_close_reports_records_that_fail_and_stop_is_close(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    got: list[Report] = []
    producer = Producer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=600_000)
    await producer.start()
    await producer.produce(topic, b"never sent", on_delivery=lambda e, m: got.append((e, m)))
    await producer.close(timeout=0)  # fails what is buffered, then reports it
    assert len(got) == 1
    err, msg = got[0]
    assert isinstance(err, ProducerClosedError) and msg.error() is err
    assert msg.offset() == -1 and msg.value() == b"never sent"

    async with Producer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=600_000) as other:
        await other.produce(
            topic, b"delivered by stop", on_delivery=lambda e, m: got.append((e, m))
        )
        await other.stop()
        assert other.state is ProducerState.CLOSED
    assert got[1][0] is None and got[1][1].offset() >= 0
    records = read_back(tansu.bootstrap_servers, topic, expected=1)
    assert [r.value for r in records] == [b"delivered by stop"]


async def test_init_transactions_starts_a_transactional_producer(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    producer = Producer(
        bootstrap_servers=tansu.bootstrap_servers, transactional_id=f"migrate-{uuid.uuid4()}"
    )
    await producer.init_transactions()  # confluent-kafka and Java: before anything else
    assert producer.state is ProducerState.RUNNING
    await producer.init_transactions()  # nothing left to do
    try:
        await producer.begin_transaction()
        await producer.produce(topic, b"in a transaction")
        await producer.commit_transaction()
    finally:
        await producer.close()
    records = read_back(
        tansu.bootstrap_servers, topic, expected=1, isolation_level="read_committed"
    )
    assert [r.value for r in records] == [b"in a transaction"]

    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as plain:
        with pytest.raises(IllegalStateError, match="transactional_id"):
            await plain.init_transactions()
    with pytest.raises(IllegalStateError, match="transactional_id"):
        await Producer(bootstrap_servers=tansu.bootstrap_servers).init_transactions()


def test_sync_produce_callbacks_run_in_the_thread_that_polls(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=2)
    threads: list[str] = []
    got: list[Report] = []

    def on_delivery(err: BaseException | None, msg: DeliveredMessage) -> None:
        threads.append(threading.current_thread().name)
        got.append((err, msg))

    with SyncProducer(
        bootstrap_servers=tansu.bootstrap_servers, transactional_id=f"sync-{uuid.uuid4()}"
    ) as producer:
        producer.init_transactions(timeout=10)
        with producer.transaction():  # the commit waits until every record is acknowledged
            for n in range(5):
                producer.produce(topic, f"value-{n}", key="k", on_delivery=on_delivery)
        assert got == []  # acknowledged, but their callbacks run only when polled
        served = 0
        while served < 5:
            served += producer.poll(30)
        assert producer.poll(0) == 0
        assert producer.poll() == 0  # nothing outstanding: no wait
        with producer.transaction():
            producer.produce(topic, "flushed", on_delivery=on_delivery)
            producer.flush()
            assert len(got) == 6  # flush() ran it
        with producer.transaction():
            producer.produce(topic, "closed", on_delivery=on_delivery)
    assert len(got) == 7  # close() ran it
    assert set(threads) == {threading.current_thread().name}
    records = read_back(tansu.bootstrap_servers, topic, expected=7)
    stored = {(r.partition, r.offset): r.value for r in records}
    for err, msg in got:
        assert err is None
        assert stored[(msg.partition(), msg.offset())] == msg.value()
    assert [msg.value() for _, msg in got] == [
        *(f"value-{n}".encode() for n in range(5)),
        b"flushed",
        b"closed",
    ]
    with (
        SyncProducer(bootstrap_servers=tansu.bootstrap_servers) as plain,
        pytest.raises(IllegalStateError, match="transactional_id"),
    ):
        plain.init_transactions()


def _in_another_thread(coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> BaseException:
    """Run ``coroutine()`` with asyncio.run in a new thread; return what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(asyncio.wait_for(coroutine(), 60))
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the call from another loop hung"
    assert raised, "the call from another loop did not fail"
    return raised[0]


async def test_a_producer_used_from_another_event_loop_says_so(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu)
    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        await producer.send_and_wait(topic, b"before")
        calls: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
            "send": lambda: producer.send_and_wait(topic, b"from another loop"),
            "send_many": lambda: producer.send_many(topic, [b"from another loop"]),
            "produce": lambda: producer.produce(topic, b"from another loop"),
            "poll": lambda: producer.poll(1),
            "flush": lambda: producer.flush(),
            "partitions_for": lambda: producer.partitions_for(topic),
            "close": lambda: producer.close(),
        }
        for name, call in calls.items():
            error = await asyncio.to_thread(_in_another_thread, call)
            assert isinstance(error, IllegalStateError), (name, error)
            assert "belongs to another event loop" in str(error), name
            assert "SyncProducer" in str(error) and "one Producer per" in str(error)
        assert producer.state is ProducerState.RUNNING
        await producer.send_and_wait(topic, b"after")
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert [r.value for r in records] == [b"before", b"after"]
    # Nothing else was written (each record above went in a batch of its own).
    assert high_watermarks(tansu.bootstrap_servers, topic) == {0: 2}


def test_a_producer_whose_loop_moved_to_another_thread_refuses_the_old_one(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    # Started in this thread, then its loop runs in another: a second loop in this thread
    # is not the producer's, though this thread ran the producer's loop before.
    topic = new_topic(tansu)
    loop = asyncio.new_event_loop()
    producer = Producer(bootstrap_servers=tansu.bootstrap_servers)
    loop.run_until_complete(producer.start())
    loop.run_until_complete(producer.send_and_wait(topic, b"first"))
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:

        async def from_this_thread() -> list[str]:
            refused = []
            calls: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
                "send": lambda: producer.send(topic, b"wrong loop"),
                "try_send": lambda: producer.try_send(topic, b"wrong loop"),
                "produce": lambda: producer.produce(topic, b"wrong loop"),
            }
            for name, call in calls.items():
                with pytest.raises(IllegalStateError, match="belongs to another event loop"):
                    await call()
                refused.append(name)
            return refused

        assert asyncio.run(from_this_thread()) == ["send", "try_send", "produce"]
        # In the loop's own thread, it still sends.
        asyncio.run_coroutine_threadsafe(producer.send_and_wait(topic, b"second"), loop).result(60)
        asyncio.run_coroutine_threadsafe(producer.close(), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(60)
        loop.close()
    records = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert [r.value for r in records] == [b"first", b"second"]


async def test_produce_goes_through_a_send_patched_in(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    # produce() takes send()'s steps itself only while send() is the producer's own: a
    # send() wrapped on the instance (as mock.patch.object or a tracing tool does) runs.
    topic = new_topic(tansu)
    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        calls = []
        original = producer.send

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[0])
            return await original(*args, **kwargs)

        producer.send = wrapped  # type: ignore[method-assign]
        await producer.produce(topic, b"through the wrapper")
        await producer.flush()
    assert calls == [topic]
    records = read_back(tansu.bootstrap_servers, topic, expected=1)
    assert [r.value for r in records] == [b"through the wrapper"]


def test_a_producer_used_from_a_second_asyncio_run_says_so(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    # The same thread, another loop: a producer started in one loop, sent to from the next.
    topic = new_topic(tansu)
    first = asyncio.new_event_loop()
    producer = Producer(bootstrap_servers=tansu.bootstrap_servers)
    try:
        first.run_until_complete(producer.start())
        with pytest.raises(IllegalStateError, match="belongs to another event loop"):
            asyncio.run(asyncio.wait_for(producer.send_and_wait(topic, b"second loop"), 60))
        first.run_until_complete(producer.send_and_wait(topic, b"first loop"))
        first.run_until_complete(producer.close())
    finally:
        first.close()
    # Closed: the producer says that first.
    with pytest.raises(ProducerClosedError):
        asyncio.run(producer.send(topic, b"late"))
    records = read_back(tansu.bootstrap_servers, topic, expected=1)
    assert [r.value for r in records] == [b"first loop"]
