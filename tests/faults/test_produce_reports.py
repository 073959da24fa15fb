"""``produce()``'s delivery reports against librdkafka's mock cluster, read back with
confluent-kafka.

A record appended at once leaves its report with its batch, and the batch queues the
reports of all its records when it is done; these scenarios check what a caller sees of
that, whatever happens to the batch:

- ``test_every_report_once_in_order_with_the_offset_the_log_holds``: thousands of records
  on three partitions, with one shared callback and a callback per record, polled while
  producing: every report comes once, in each partition's offset order, with the key,
  value, headers and offset the log holds.
- ``test_records_that_waited_for_memory_are_reported_in_offset_order``: two tasks produce
  into a buffer too small for them, so records that waited for memory share batches with
  records appended at once; the reports still come in each partition's offset order.
- ``test_a_split_batch_reports_each_record_where_it_went``: MESSAGE_TOO_LARGE splits a
  batch of produced records; each report gives the offset the record has in the log.
- ``test_a_failed_batch_reports_the_error_for_each_record``: a fatal error for a batch
  reaches every record's callback, with the partition the record was sent to.
- ``test_a_raising_callback_keeps_the_rest_of_its_batch_queued``: serving stops at a
  callback that raises; the next poll serves the rest of the same batch, in order.
- ``test_a_cancelled_async_callback_keeps_the_rest_queued``: a poll cancelled while it
  awaits an async callback leaves the reports after it for the next poll.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aioproducer import DeliveredMessage, Producer
from aioproducer import errors as e
from tests.faults.checks import bounded, mock_options, unique_topic
from tests.support.mock_cluster import ApiKey, ErrorCode, MockCluster
from tests.support.readback import read_back

pytestmark = pytest.mark.mock_cluster

Report = tuple[BaseException | None, DeliveredMessage]


async def test_every_report_once_in_order_with_the_offset_the_log_holds(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("reports")
    mock_cluster.create_topic(topic, 3)
    shared: list[Report] = []
    own: list[tuple[int, Report]] = []

    def on_delivery(err: BaseException | None, msg: DeliveredMessage) -> None:
        shared.append((err, msg))

    options = mock_options(mock_cluster.bootstrap_servers, linger_ms=5, batch_size=2048)
    count = 3000
    async with Producer(**options) as producer:
        for n in range(count):
            value = b"value-%05d" % n
            if n % 7 == 0:
                # A callback of its own (a closure per record), among the shared ones.
                await producer.produce(
                    topic,
                    value,
                    key=b"key-%d" % (n % 11),
                    headers=[("n", str(n))],
                    on_delivery=lambda err, msg, n=n: own.append((n, (err, msg))),
                )
            else:
                await producer.produce(
                    topic, value, key=b"key-%d" % (n % 11), on_delivery=on_delivery
                )
            if n % 500 == 0:
                await producer.poll(0)
        await bounded(producer.flush())
        assert await producer.poll(0) == 0
        assert len(producer) == 0
    reports = shared + [report for _, report in own]
    assert len(reports) == count
    assert all(err is None and msg.error() is None for err, msg in reports)
    assert sorted(msg.value() for _, msg in reports) == [b"value-%05d" % n for n in range(count)]
    for n, (_, msg) in own:
        assert msg.value() == b"value-%05d" % n
        assert msg.headers() == [("n", str(n).encode())]
    # Reports come in the order records finish: in each partition, in offset order.
    for partition in range(3):
        offsets = [msg.offset() for _, msg in shared if msg.partition() == partition]
        assert offsets == sorted(offsets)
    stored = {
        (r.partition, r.offset): r
        for r in read_back(mock_cluster.bootstrap_servers, topic, expected=count)
    }
    assert len(stored) == count
    for _, msg in reports:
        record = stored[(msg.partition(), msg.offset())]
        assert (msg.topic(), msg.key(), msg.value()) == (topic, record.key, record.value)
        # The mock answers every Produce with LogAppendTime 1234 (a quirk of its own): the
        # report says what the broker answered, as confluent-kafka's does.
        assert msg.timestamp() == (2, 1234)
        latency = msg.latency()
        assert latency is not None and latency >= 0


async def test_records_that_waited_for_memory_are_reported_in_offset_order(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("reports-waited")
    mock_cluster.create_topic(topic, 1)
    got: list[Report] = []

    def on_delivery(err: BaseException | None, msg: DeliveredMessage) -> None:
        got.append((err, msg))

    options = mock_options(
        mock_cluster.bootstrap_servers, linger_ms=20, batch_size=1024, buffer_memory=4096
    )
    async with Producer(**options) as producer:

        async def produce(name: bytes) -> None:
            for n in range(1500):
                await producer.produce(topic, b"%s-%04d" % (name, n), on_delivery=on_delivery)

        await bounded(asyncio.gather(produce(b"a"), produce(b"b")))
        await bounded(producer.flush())
        waited = producer.metrics()["bufferpool-wait-time-ns-total"]
    assert waited > 0  # some records did wait for memory
    assert len(got) == 3000 and all(err is None for err, _ in got)
    offsets = [msg.offset() for _, msg in got]
    assert offsets == sorted(offsets)
    stored = {
        r.offset: r.value for r in read_back(mock_cluster.bootstrap_servers, topic, expected=3000)
    }
    assert all(stored[msg.offset()] == msg.value() for _, msg in got)


async def test_a_split_batch_reports_each_record_where_it_went(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("reports-split")
    mock_cluster.create_topic(topic, 1)
    got: list[Report] = []
    options = mock_options(mock_cluster.bootstrap_servers, batch_size=4096, linger_ms=50)
    async with Producer(**options) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.MESSAGE_TOO_LARGE])
        for n in range(200):
            await producer.produce(
                topic, b"split-%03d" % n, on_delivery=lambda err, msg: got.append((err, msg))
            )
        await bounded(producer.flush())
        assert producer.metrics()["record-error-total"] == 0
    assert len(got) == 200
    assert all(err is None for err, _ in got)
    assert sorted(msg.value() for _, msg in got) == [b"split-%03d" % n for n in range(200)]
    stored = {
        r.offset: r.value for r in read_back(mock_cluster.bootstrap_servers, topic, expected=201)
    }
    assert len(stored) == 201
    for _, msg in got:
        assert (msg.partition(), stored[msg.offset()]) == (0, msg.value())


async def test_a_failed_batch_reports_the_error_for_each_record(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("reports-failed")
    mock_cluster.create_topic(topic, 2)
    got: list[Report] = []
    options = mock_options(
        mock_cluster.bootstrap_servers, linger_ms=50, enable_idempotence=False, retries=0
    )
    async with Producer(**options) as producer:
        await producer.send_and_wait(topic, b"warm-up", partition=1)
        mock_cluster.push_request_errors(ApiKey.PRODUCE, [ErrorCode.INVALID_RECORD])
        for n in range(20):
            await producer.produce(
                topic,
                b"bad-%02d" % n,
                partition=1,
                on_delivery=lambda err, msg: got.append((err, msg)),
            )
        await bounded(producer.flush())
        await producer.produce(
            topic, b"good", partition=1, on_delivery=lambda err, msg: got.append((err, msg))
        )
        await bounded(producer.flush())
    assert [msg.value() for _, msg in got] == [b"bad-%02d" % n for n in range(20)] + [b"good"]
    for err, msg in got[:20]:
        assert isinstance(err, e.InvalidRecordError) and msg.error() is err
        assert (msg.partition(), msg.offset()) == (1, -1)
    assert got[20][0] is None and got[20][1].partition() == 1
    stored = read_back(mock_cluster.bootstrap_servers, topic, expected=2)
    assert sorted(r.value for r in stored) == [b"good", b"warm-up"]


async def test_a_raising_callback_keeps_the_rest_of_its_batch_queued(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("reports-raise")
    mock_cluster.create_topic(topic, 1)
    seen: list[bytes] = []

    def on_delivery(err: BaseException | None, msg: DeliveredMessage) -> None:
        seen.append(msg.value())
        if msg.value() in (b"v-3", b"v-6"):
            raise RuntimeError(f"callback bug at {msg.value()!r}")

    options = mock_options(mock_cluster.bootstrap_servers, linger_ms=50)
    async with Producer(**options) as producer:
        for n in range(10):
            await producer.produce(topic, b"v-%d" % n, on_delivery=on_delivery)
        await producer.send_and_wait(topic, b"after")  # one partition: the batch is done
        with pytest.raises(RuntimeError, match="v-3"):
            await producer.poll(0)
        assert seen == [b"v-%d" % n for n in range(4)]
        assert producer._reports.ready == 6
        with pytest.raises(RuntimeError, match="v-6"):
            await producer.poll(0)
        assert await producer.poll(0) == 3
    assert seen == [b"v-%d" % n for n in range(10)]


async def test_a_cancelled_async_callback_keeps_the_rest_queued(
    mock_cluster: MockCluster,
) -> None:
    topic = unique_topic("reports-async")
    mock_cluster.create_topic(topic, 1)
    seen: list[bytes] = []
    release = asyncio.Event()

    async def on_delivery(err: BaseException | None, msg: DeliveredMessage) -> Any:
        seen.append(msg.value())
        if msg.value() == b"v-2" and not release.is_set():
            await release.wait()

    options = mock_options(mock_cluster.bootstrap_servers, linger_ms=50)
    async with Producer(**options) as producer:
        for n in range(5):
            await producer.produce(topic, b"v-%d" % n, on_delivery=on_delivery)
        await producer.send_and_wait(topic, b"after")
        polling = asyncio.create_task(producer.poll(0))
        while len(seen) < 3:
            await asyncio.sleep(0.01)
        polling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await polling
        release.set()
        assert await producer.poll(0) == 2
    assert seen == [b"v-%d" % n for n in range(5)]
