"""SyncProducer on Tansu: blocking calls from plain threads, read back with confluent-kafka.

What is proved: records sent from several threads all arrive, each thread's records in the
order it sent them; every field round-trips; the async producer's error classes reach the
calling thread; close() delivers what is buffered; and nothing hangs when the loop thread
is gone.
"""

from __future__ import annotations

import concurrent.futures
import gc
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from aioproducer import ProducerRecord, RecordMetadata
from aioproducer import sync as sync_module
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import (
    ConfigurationError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTopicError,
    ProducerClosedError,
    RecordTooLargeError,
    SenderCrashedError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from aioproducer.sync import SyncProducer
from tests.support.readback import read_back

TopicFactory = Callable[..., str]


def _portal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("aioproducer-sync-")]


def test_threads_send_concurrently_and_keep_their_order(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=3)
    threads, per_thread = 4, 500
    futures: dict[int, list[concurrent.futures.Future[RecordMetadata]]] = {}

    with SyncProducer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=2) as producer:

        def work(n: int) -> None:
            key = f"thread-{n}".encode()
            futures[n] = [
                producer.send(topic, f"{n}:{i}".encode(), key) for i in range(per_thread)
            ]

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        producer.flush()
        assert all(f.done() for fs in futures.values() for f in fs)
        metadata = {n: [f.result() for f in fs] for n, fs in futures.items()}

    records = read_back(tansu.bootstrap_servers, topic, expected=threads * per_thread)
    assert len(records) == threads * per_thread
    by_position = {(r.partition, r.offset): r for r in records}
    for n in range(threads):
        # One key per thread: one partition, offsets rising in the thread's send order.
        assert len({m.partition for m in metadata[n]}) == 1
        offsets = [m.offset for m in metadata[n]]
        assert offsets == sorted(offsets)
        values = [by_position[(m.partition, m.offset)].value for m in metadata[n]]
        assert values == [f"{n}:{i}".encode() for i in range(per_thread)]
        assert all(by_position[(m.partition, m.offset)].key == f"thread-{n}".encode()
                   for m in metadata[n])


def test_every_field_round_trips(tansu: EmbeddedBroker, new_topic: TopicFactory) -> None:
    topic = new_topic(tansu, partitions=2)
    with SyncProducer({"bootstrap.servers": tansu.bootstrap_servers}) as producer:
        first = producer.send_and_wait(
            topic,
            b"value",
            b"key",
            partition=1,
            timestamp_ms=1_700_000_000_123,
            headers=[("h", b"1"), ("none", None)],
        )
        many = producer.send_many(
            topic,
            [b"v0", (b"k1", b"v1"), ProducerRecord(topic, b"v2", partition=0, timestamp_ms=7)],
        )
        later = producer.send_many_nowait(topic, [b"w0", b"w1"], partition=1).result(30)
        assert producer.partitions_for(topic) == [0, 1]
        metrics = producer.metrics()
    assert isinstance(first, RecordMetadata)
    assert (first.topic, first.partition, first.timestamp) == (topic, 1, 1_700_000_000_123)
    assert [m.partition for m in later] == [1, 1]
    assert later[1].offset == later[0].offset + 1
    assert many[2].partition == 0
    assert metrics["record-send-total"] >= 6

    records = read_back(tansu.bootstrap_servers, topic, expected=6)
    by_value = {r.value: r for r in records}
    assert set(by_value) == {b"value", b"v0", b"v1", b"v2", b"w0", b"w1"}
    sent = by_value[b"value"]
    assert (sent.key, sent.partition, sent.offset) == (b"key", 1, first.offset)
    assert sent.headers == [("h", b"1"), ("none", None)]
    assert sent.timestamp_ms == 1_700_000_000_123
    assert by_value[b"v1"].key == b"k1"
    assert (by_value[b"v2"].partition, by_value[b"v2"].timestamp_ms) == (0, 7)


def test_send_many_stamps_every_item_at_the_call_and_keeps_a_given_timestamp(
    tansu: EmbeddedBroker, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The call's time is 1.7e12 ms; the loop thread's clock is later. An
    # item that gives exactly the call's time keeps it, and items without a timestamp
    # (plain, paired, a record with headers) all get the call's time, not the loop's.
    topic = new_topic(tansu, partitions=1)
    call_ms = 1_700_000_000_000
    with SyncProducer({"bootstrap.servers": tansu.bootstrap_servers}) as producer:
        monkeypatch.setattr(sync_module, "_now_ms", lambda: call_ms)
        future = producer.send_many_nowait(
            topic,
            [
                ProducerRecord(topic, b"given", timestamp_ms=call_ms),
                b"plain",
                (b"k", b"paired"),
                ProducerRecord(topic, b"headed", headers=[("h", b"1")]),
            ],
        )
        future.result(30)
    records = read_back(tansu.bootstrap_servers, topic, expected=4)
    assert {r.value: r.timestamp_ms for r in records} == dict.fromkeys(
        [b"given", b"plain", b"paired", b"headed"], call_ms
    )


def test_errors_are_the_async_producers_raised_in_the_caller(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=1)
    before = len(_portal_threads())
    with pytest.raises(ConfigurationError):
        SyncProducer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=-1)
    with pytest.raises(ConfigurationError):
        SyncProducer(bootstrap_servers=tansu.bootstrap_servers, no_such_option=1)
    assert len(_portal_threads()) == before  # a failed construction leaves no thread

    producer = SyncProducer(bootstrap_servers=tansu.bootstrap_servers, max_block_ms=2000)
    try:
        with pytest.raises(SerializationError):
            producer.send_and_wait(topic, "a str is not bytes")
        # What the arguments alone show is raised in the caller, before anything is queued.
        with pytest.raises(SerializationError):
            producer.send(topic, 12345)
        with pytest.raises(InvalidArgumentError):
            producer.send(topic, b"v", timestamp_ms=-5)
        with pytest.raises(InvalidArgumentTypeError):
            producer.send(topic, b"v", partition="0")
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send_and_wait(topic, b"v", partition=7)
        with pytest.raises(SerializationError):
            producer.send_many(topic, [b"ok", 3.5])
        # The producer is still usable after those failures.
        assert producer.send_and_wait(topic, b"after").partition == 0
    finally:
        producer.close()
    assert producer.closed
    with pytest.raises(ProducerClosedError):
        producer.send(topic, b"late")
    with pytest.raises(ProducerClosedError):
        producer.flush()
    with pytest.raises(ProducerClosedError):
        producer.metrics()
    producer.close()  # harmless twice
    assert len(_portal_threads()) == before


def test_blocking_inside_the_loop_thread_is_refused(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=1)
    seen: list[BaseException] = []

    def callback(_: concurrent.futures.Future[RecordMetadata]) -> None:
        # Done-callbacks run in the loop thread, where blocking would deadlock.
        try:
            producer.send_and_wait(topic, b"nested")
        except BaseException as exc:
            seen.append(exc)

    with SyncProducer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        producer.send(topic, b"first").add_done_callback(callback)
        producer.flush()
    assert len(seen) == 1 and isinstance(seen[0], IllegalStateError)


def test_close_delivers_what_is_buffered(tansu: EmbeddedBroker, new_topic: TopicFactory) -> None:
    topic = new_topic(tansu, partitions=2)
    # A long linger keeps everything buffered until close() sends it.
    producer = SyncProducer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=60_000)
    futures = [producer.send(topic, f"{i}".encode()) for i in range(1000)]
    assert not all(f.done() for f in futures)
    producer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    records = read_back(tansu.bootstrap_servers, topic, expected=1000)
    assert sorted(int(r.value or b"") for r in records) == list(range(1000))


def test_a_dead_loop_thread_fails_fast_instead_of_hanging(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=1)
    producer = SyncProducer(bootstrap_servers=tansu.bootstrap_servers, linger_ms=60_000)
    pending = producer.send(topic, b"buffered")
    # Stop the event loop under the producer, as a crash of the loop thread would.
    portal: Any = producer._portal
    portal.call(portal.stop, True)
    assert isinstance(pending.exception(timeout=30), SenderCrashedError)
    with pytest.raises(SenderCrashedError):
        producer.send(topic, b"after")
    with pytest.raises(SenderCrashedError):
        producer.flush()
    with pytest.raises(SenderCrashedError):
        producer.partitions_for(topic)
    producer.close()
    assert producer.closed


def test_transactions_from_synchronous_code(tansu: EmbeddedBroker, new_topic: TopicFactory) -> None:
    topic = new_topic(tansu, partitions=1)
    with SyncProducer(
        bootstrap_servers=tansu.bootstrap_servers, transactional_id=f"sync-{topic}"
    ) as producer:
        with producer.transaction():
            futures = [producer.send(topic, f"{i}".encode()) for i in range(20)]
        # The commit delivered everything sent inside the block before it returned.
        assert all(f.done() and f.exception() is None for f in futures)
        with pytest.raises(RuntimeError, match="inside"), producer.transaction():
            producer.send(topic, b"aborted")
            raise RuntimeError("inside the transaction")
        # The producer goes on after an abort.
        with producer.transaction():
            producer.send_and_wait(topic, b"after")
    # Tansu shows aborted records too (a known gap), so count what a committed run must have.
    values = [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=21)]
    assert values[:20] == [f"{i}".encode() for i in range(20)]
    assert values[-1] == b"after"


def test_serializers_run_in_the_calling_thread(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=1)
    threads: list[threading.Thread] = []

    def utf8(value: Any) -> bytes:
        threads.append(threading.current_thread())
        return value.encode()  # an AttributeError for anything but a str

    with SyncProducer(bootstrap_servers=tansu.bootstrap_servers, value_serializer=utf8) as producer:
        producer.send(topic, "first").result(30)
        # What the serializer refuses raises here, at once, and nothing is queued.
        with pytest.raises(SerializationError, match="value_serializer"):
            producer.send(topic, 5)
        with pytest.raises(SerializationError, match="send_many item 1"):
            producer.send_many_nowait(topic, ["a", 5, "c"])
        assert len(producer.send_many(topic, ["b", ProducerRecord(topic, "c")])) == 2
    assert threads and all(thread is threading.main_thread() for thread in threads)
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=3)] == [
        b"first",
        b"b",
        b"c",
    ]


class _Recorder:
    """An interceptor that notes where on_send runs and what was acknowledged; it turns a
    str value into bytes, and leaves anything else as it is."""

    def __init__(self) -> None:
        self.send_threads: list[threading.Thread] = []
        self.acknowledged: list[tuple[int, type[BaseException] | None]] = []

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.send_threads.append(threading.current_thread())
        if isinstance(record.value, str):
            return ProducerRecord(record.topic, record.value.encode(), record.key)
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, exc: BaseException | None) -> None:
        self.acknowledged.append((metadata.offset, None if exc is None else type(exc)))


def test_with_interceptors_a_bad_record_still_raises_in_the_caller(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=1)
    recorder = _Recorder()
    with SyncProducer(
        bootstrap_servers=tansu.bootstrap_servers, interceptors=[recorder]
    ) as producer:
        # on_send runs here, in the calling thread (as the Java client runs it), then the
        # checks and serializers: a value no interceptor made bytes is refused at once.
        with pytest.raises(SerializationError, match="value"):
            producer.send(topic, 12345)
        with pytest.raises(SerializationError, match="send_many item 1"):
            producer.send_many_nowait(topic, [b"a", 3.5, b"c"])
        producer.send(topic, "made bytes by the interceptor").result(30)
        assert len(producer.send_many(topic, ["b", (b"k", b"c")])) == 2
    assert recorder.send_threads
    assert all(thread is threading.main_thread() for thread in recorder.send_threads)
    # Each delivered record acknowledged once; on_send did not run twice for any.
    assert [exc for _, exc in recorder.acknowledged] == [None, None, None]
    # send 1, send_many up to the refused item 2, send 1, send_many 2.
    assert len(recorder.send_threads) == 1 + 2 + 1 + 2
    values = [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=3)]
    assert values == [b"made bytes by the interceptor", b"b", b"c"]


def test_what_send_can_know_before_a_broker_answers_is_raised_in_the_caller(
    tansu: EmbeddedBroker, new_topic: TopicFactory
) -> None:
    topic = new_topic(tansu, partitions=1)
    with SyncProducer(bootstrap_servers=tansu.bootstrap_servers, max_request_size=2000) as producer:
        # Too large for max_request_size: the async send raises it, so this one does too,
        # rather than leaving it on a future the caller may never look at.
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            producer.send(topic, b"x" * 5000)
        with pytest.raises(RecordTooLargeError, match="send_many item 1"):
            producer.send_many_nowait(topic, [b"small", b"x" * 5000])
        with pytest.raises(RecordTooLargeError, match="send_many item 0"):
            producer.send_many_nowait(topic, [(b"k", b"x" * 5000)])
        with pytest.raises(InvalidTopicError, match="send_many item 1"):
            producer.send_many_nowait(topic, [b"ok", ProducerRecord("bad topic!", b"v")])
        with pytest.raises(SerializationError, match="send_many item 0"):
            producer.send_many_nowait(topic, [ProducerRecord(topic, b"v", headers=[("h", 1)])])
        producer.send(topic, b"after").result(30)
    # Nothing of the refused calls was queued.
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [b"after"]


def test_a_refused_record_whose_future_nobody_checks_is_logged(
    tansu: EmbeddedBroker, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    topic = new_topic(tansu, partitions=1)

    def refusals() -> list[str]:
        return [r.getMessage() for r in caplog.records if "dropped unchecked" in r.getMessage()]

    with (
        caplog.at_level(logging.WARNING, logger="aioproducer"),
        SyncProducer(bootstrap_servers=tansu.bootstrap_servers) as producer,
    ):
        # Only the loop thread can tell that the topic has no partition 7: the error goes
        # on the future. Checked, it is the caller's to handle; nothing is logged.
        checked = producer.send(topic, b"v", partition=7)
        assert isinstance(checked.exception(30), UnknownTopicOrPartitionError)
        producer.flush()  # the loop thread is done with the record
        del checked
        gc.collect()
        assert refusals() == []
        # Dropped unchecked, the refusal would vanish: it is logged instead.
        ignored = producer.send(topic, b"v", partition=7)
        producer.flush()
        assert ignored.done()
        del ignored
        gc.collect()
        assert len(refusals()) == 1, refusals()
        assert "UnknownTopicOrPartitionError" in refusals()[0]
        assert "partition 7" in refusals()[0]
        # A delivered record's future needs no looking at.
        producer.send(topic, b"fine")
        producer.flush()
        gc.collect()
    assert len(refusals()) == 1
