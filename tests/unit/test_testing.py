"""aioproducer.testing.InMemoryProducer: a Producer for tests that keeps records in memory.

What is proved: records are stored with offsets counted per partition and the metadata the
caller gets says where; keyed records land where Kafka's partitioner puts them (checked
against confluent-kafka's murmur2); the producer's own checks refuse bad input with the
same errors and store nothing; send_many reports the refused item as Producer.send_many
does; fail_next fails the records it is told to, and only those; transactions show their
records only once committed, drop aborted ones, and follow the producer's state machine.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from aioproducer import (
    BatchResults,
    ConsumerGroupMetadata,
    Producer,
    ProducerRecord,
    ProducerState,
    RecordFuture,
    RecordMetadata,
    TransactionState,
)
from aioproducer.errors import (
    BufferExhaustedError,
    ConfigurationError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTopicError,
    KafkaError,
    NotEnoughReplicasError,
    PartitionerError,
    ProducerClosedError,
    ProducerFencedError,
    RecordTooLargeError,
    SerializationError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from aioproducer.testing import InMemoryProducer, StoredRecord


async def started(**kwargs: Any) -> InMemoryProducer:
    producer = InMemoryProducer(**kwargs)
    await producer.start()
    return producer


# ---- storing and reading back --------------------------------------------------------------


async def test_records_are_stored_with_offsets_per_partition_and_metadata_says_where() -> None:
    async with InMemoryProducer(topics={"orders": 2}) as producer:
        assert isinstance(producer, Producer)
        first = await producer.send_and_wait(
            "orders", b"v0", key=b"k", partition=1, timestamp_ms=1_000, headers=[("h", b"x")]
        )
        second = await producer.send_and_wait("orders", b"v1", partition=1, timestamp_ms=2_000)
        other = await producer.send_and_wait("orders", None, key=b"k", partition=0)
    assert first == RecordMetadata("orders", 1, 0, 1_000, 1, 2)
    assert second == RecordMetadata("orders", 1, 1, 2_000, -1, 2)
    assert (other.partition, other.offset, other.serialized_value_size) == (0, 0, -1)
    assert producer.records("orders", partition=1) == [
        StoredRecord("orders", 1, 0, 1_000, b"k", b"v0", (("h", b"x"),)),
        StoredRecord("orders", 1, 1, 2_000, None, b"v1"),
    ]
    assert [r.value for r in producer.records("orders")] == [b"v0", b"v1", None]
    assert producer.records("other") == []
    # Closed, the producer still shows what it stored.
    assert producer.state is ProducerState.CLOSED
    assert len(producer.history()) == 3


async def test_with_acks_0_the_metadata_has_no_offset_as_in_the_producer() -> None:
    producer = await started(acks=0)
    assert (await producer.send_and_wait("t", b"v")).offset == -1
    results = await producer.send_many("t", [b"a", b"b"])
    assert [m.offset for m in await results] == [-1, -1]
    assert [r.offset for r in producer.records("t")] == [0, 1, 2]


async def test_send_returns_a_done_record_future_that_behaves_as_a_future() -> None:
    producer = await started()
    future = await producer.send("t", b"v")
    assert isinstance(future, RecordFuture) and future.done()
    called: list[RecordMetadata] = []
    future.add_done_callback(lambda f: called.append(f.result()))
    results = await asyncio.gather(future, await producer.send("t", b"w"))
    assert [m.offset for m in results] == [0, 1]
    await asyncio.sleep(0)  # callbacks run soon after, as asyncio's do
    assert called == [results[0]]


async def test_timestamps_default_to_now() -> None:
    producer = await started()
    before = int(time.time() * 1000)
    metadata = await producer.send_and_wait("t", b"v")
    after = int(time.time() * 1000)
    assert before <= metadata.timestamp <= after
    assert producer.records("t")[0].timestamp == metadata.timestamp


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 12])
async def test_keyed_records_land_where_kafkas_partitioner_puts_them(partitions: int) -> None:
    producer = await started(topics={"t": partitions})
    keys = [f"user-{i}".encode() for i in range(200)] + [b"", b"\x00\xff" * 9]
    for key in keys:
        metadata = await producer.send_and_wait("t", b"v", key=key)
        # confluent-kafka's murmur2 is librdkafka's, written to match the Java client.
        assert metadata.partition == confluent_kafka.murmur2(key, partitions), key


async def test_keyless_records_stick_to_a_partition_until_a_batch_is_full() -> None:
    producer = await started(topics={"t": 4}, batch_size=1000)
    for _ in range(300):
        await producer.send("t", b"x" * 90)  # 100 bytes counted per record
    partitions = [r.partition for r in producer.records("t")]
    assert len(set(partitions[:9])) == 1  # 900 bytes: no switch yet
    assert len(set(partitions)) > 1


async def test_a_custom_partitioner_chooses_and_is_checked() -> None:
    producer = await started(
        topics={"t": 4}, partitioner=lambda topic, key, count: 0 if key is None else count - 1
    )
    assert (await producer.send_and_wait("t", b"v", key=b"k")).partition == 3
    assert (await producer.send_and_wait("t", b"v")).partition == 0
    wrong = await started(partitioner=lambda topic, key, count: count)
    with pytest.raises(PartitionerError, match="returned partition 1 for topic 't'"):
        await wrong.send("t", b"v")
    assert wrong.history() == []


async def test_serializers_and_interceptors_run_as_in_the_producer() -> None:
    seen: list[tuple[Any, BaseException | None]] = []

    class Tag:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            record.headers = [("tagged", b"1")]
            return record

        def on_acknowledgement(self, metadata: RecordMetadata, exc: BaseException | None) -> None:
            seen.append((metadata, exc))

    producer = await started(
        key_serializer=str.encode,
        value_serializer=lambda v: json.dumps(v).encode(),
        interceptors=[Tag()],
    )
    metadata = await producer.send_and_wait("t", {"a": 1}, key="k")
    [record] = producer.records("t")
    assert (record.key, record.value, record.headers) == (b"k", b'{"a": 1}', (("tagged", b"1"),))
    producer.fail_next(NotEnoughReplicasError)
    failed = await producer.send("t", {"b": 2}, key="k2")
    assert isinstance(failed.exception(), NotEnoughReplicasError)
    assert seen[0] == (metadata, None)
    assert seen[1][0].offset == -1 and isinstance(seen[1][1], NotEnoughReplicasError)


# ---- what is refused -----------------------------------------------------------------------


def _failing_serializer(value: Any) -> bytes:
    raise RuntimeError("cannot serialize")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"value": "text"}, SerializationError, "the record value is of type str"),
        ({"key": 5}, SerializationError, "the record key is of type int"),
        ({"timestamp_ms": -1}, InvalidArgumentError, "timestamp_ms=-1 is out of range"),
        ({"timestamp_ms": 1.5}, InvalidArgumentTypeError, "timestamp_ms must be an int"),
        ({"partition": -2}, InvalidArgumentError, "partition=-2 is out of range"),
        ({"partition": "0"}, InvalidArgumentTypeError, "partition must be an int"),
        ({"partition": True}, InvalidArgumentTypeError, "partition must be an int"),
        ({"partition": 3}, UnknownTopicOrPartitionError, "partition 3 is out of range"),
        ({"headers": [("h", "text")]}, SerializationError, "the value of header 'h'"),
        ({"headers": b"raw"}, SerializationError, "headers must be a sequence"),
        ({"topic": "bad topic"}, InvalidTopicError, "bad topic"),
        ({"topic": ""}, InvalidTopicError, ""),
        ({"value": b"x" * 2000}, RecordTooLargeError, "larger than max_request_size (1000)"),
    ],
)
async def test_bad_input_is_refused_with_the_producers_errors(
    kwargs: dict[str, Any], error: type[KafkaError], message: str
) -> None:
    producer = await started(topics={"t": 3}, max_request_size=1000)
    arguments = {"topic": "t", "value": b"v", **kwargs}
    with pytest.raises(error) as raised:
        await producer.send(**arguments)
    assert message in str(raised.value)
    assert producer.history() == []
    # Nothing else changed: the next record is the partition's first.
    assert (await producer.send_and_wait("t", b"ok", partition=0)).offset == 0


async def test_a_failing_serializer_is_named() -> None:
    producer = await started(value_serializer=_failing_serializer)
    with pytest.raises(SerializationError, match="_failing_serializer failed for a record"):
        await producer.send("t", "v")


async def test_options_are_validated_as_the_producer_does() -> None:
    with pytest.raises(ConfigurationError, match="linger"):
        InMemoryProducer(linger_ms=-1)
    with pytest.raises(ConfigurationError):
        InMemoryProducer(no_such_option=1)
    with pytest.raises(ConfigurationError, match="default_partitions"):
        InMemoryProducer(default_partitions=0)
    with pytest.raises(ConfigurationError, match="partition count of topic 't'"):
        InMemoryProducer(topics={"t": 0})
    with pytest.raises(ConfigurationError, match="not the str 'orders'"):
        InMemoryProducer(topics="orders")


async def test_lifecycle_misuse_raises_as_in_the_producer() -> None:
    producer = InMemoryProducer()
    with pytest.raises(IllegalStateError, match="not started"):
        await producer.send("t", b"v")
    assert producer.metrics() == {}
    await producer.start()
    with pytest.raises(IllegalStateError, match="start"):
        await producer.start()
    await producer.close()
    await producer.close()
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"v")
    with pytest.raises(ProducerClosedError):
        await producer.flush()


# ---- topics --------------------------------------------------------------------------------


async def test_unknown_topics_are_created_or_refused() -> None:
    creating = await started(default_partitions=3)
    assert await creating.partitions_for("new") == [0, 1, 2]
    await creating.send_and_wait("other", b"v")
    assert creating.topics == {"new": 3, "other": 3}

    strict = await started(topics=["known"], auto_create_topics=False)
    assert await strict.partitions_for("known") == [0]
    with pytest.raises(UnknownTopicOrPartitionError, match="'unknown' does not exist"):
        await strict.send("unknown", b"v")
    with pytest.raises(UnknownTopicOrPartitionError):
        await strict.partitions_for("unknown")
    strict.create_topic("unknown", 2)
    assert (await strict.send_and_wait("unknown", b"v", partition=1)).partition == 1
    with pytest.raises(IllegalStateError, match="exists already with 2"):
        strict.create_topic("unknown", 5)


async def test_a_partition_out_of_range_is_not_retriable() -> None:
    producer = await started(topics={"t": 2})
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        await producer.send("t", b"v", partition=2)
    assert raised.value.retriable is False
    assert "topic 't' has 2 partition(s), 0 to 1" in str(raised.value)


# ---- send_many ------------------------------------------------------------------------------


async def test_send_many_takes_values_pairs_and_records() -> None:
    producer = await started(topics={"t": 3, "u": 1})
    results = await producer.send_many(
        "t",
        [
            b"plain",
            (b"key", b"pair"),
            ProducerRecord("u", b"record", partition=0, timestamp_ms=5, headers=[("h", None)]),
        ],
        partition=2,
    )
    assert isinstance(results, BatchResults) and len(results) == 3
    metadata = await results
    assert [(m.topic, m.partition, m.offset) for m in metadata] == [
        ("t", 2, 0),
        ("t", 2, 1),
        ("u", 0, 0),
    ]
    assert [f.result() for f in results.futures] == list(metadata)
    assert producer.records("u") == [StoredRecord("u", 0, 0, 5, None, b"record", (("h", None),))]


async def test_send_many_names_the_refused_item_and_keeps_the_ones_before() -> None:
    producer = await started()
    with pytest.raises(SerializationError) as raised:
        await producer.send_many("t", [b"a", b"b", 3, b"d"])
    error = raised.value
    assert str(error).startswith("send_many item 2: the record value is of type int")
    assert error.accepted is not None and len(error.accepted) == 2
    assert [m.offset for m in await error.accepted] == [0, 1]
    assert [r.value for r in producer.records("t")] == [b"a", b"b"]
    with pytest.raises(InvalidArgumentError, match=r"^partition=-1"):
        await producer.send_many("t", [b"x"], partition=-1)


# ---- injected failures ------------------------------------------------------------------------


async def test_fail_next_fails_the_next_records_futures_and_stores_nothing() -> None:
    producer = await started()
    producer.fail_next(NotEnoughReplicasError, count=2)
    failures = [await producer.send("t", f"v{i}".encode()) for i in range(3)]
    for future in failures[:2]:
        error = future.exception()
        assert isinstance(error, NotEnoughReplicasError) and error.retriable
        with pytest.raises(NotEnoughReplicasError, match="fail_next"):
            await future
    assert (await failures[2]).offset == 0
    assert [r.value for r in producer.records("t")] == [b"v2"]
    metrics = producer.metrics()
    assert (metrics["record-send-total"], metrics["record-error-total"]) == (1, 2)


async def test_fail_next_by_topic_with_an_instance_and_on_send() -> None:
    producer = await started()
    error = KafkaError("broker says no", retriable=True)
    error.maybe_written = True  # an outcome the application must treat as unknown
    producer.fail_next(error, topic="a")
    producer.fail_next(ProducerClosedError("full"), topic="b", on_send=True)
    assert (await producer.send_and_wait("b-other", b"v")).offset == 0
    with pytest.raises(KafkaError, match="broker says no") as raised:
        await producer.send_and_wait("a", b"v")
    assert raised.value.retriable is True
    assert raised.value.maybe_written is True
    with pytest.raises(ProducerClosedError, match=r"^send_many item 0: full$"):
        await producer.send_many("b", [b"refused", b"not taken"])
    assert (await producer.send_and_wait("b", b"v")).offset == 0
    assert (await producer.send_and_wait("a", b"v")).offset == 0
    assert [r.topic for r in producer.records()] == ["b-other", "b", "a"]
    with pytest.raises(InvalidArgumentTypeError):
        producer.fail_next(ValueError)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        producer.fail_next(KafkaError, count=0)


async def test_a_send_failure_comes_where_the_producer_would_wait_for_memory() -> None:
    producer = await started(topics={"known": 2}, auto_create_topics=False)
    producer.fail_next(BufferExhaustedError, on_send=True)
    # Refused first for what the producer checks before it waits for memory.
    with pytest.raises(UnknownTopicOrPartitionError):
        await producer.send("unknown", b"v")
    with pytest.raises(UnknownTopicOrPartitionError):
        await producer.send("known", b"v", partition=2)
    with pytest.raises(BufferExhaustedError, match=r"InMemoryProducer\.fail_next\(\)") as raised:
        await producer.send("known", b"v")
    assert raised.value.retriable
    assert (await producer.send_and_wait("known", b"v", partition=0)).offset == 0


async def test_send_many_awaits_to_the_first_injected_failure() -> None:
    producer = await started()
    producer.fail_next(NotEnoughReplicasError)
    results = await producer.send_many("t", [b"a", b"b"])
    with pytest.raises(NotEnoughReplicasError):
        await results
    assert [f.exception() is None for f in results.futures] == [False, True]


# ---- transactions ---------------------------------------------------------------------------


async def test_records_of_a_transaction_show_only_once_committed() -> None:
    producer = await started(transactional_id="tx", topics={"out": 1})
    assert producer.transaction_state is TransactionState.READY
    with pytest.raises(IllegalStateError, match="only inside a transaction"):
        await producer.send("out", b"v")
    await producer.begin_transaction()
    await producer.send("out", b"a")
    await producer.send_offsets_to_transaction(
        {("in", 0): 42}, ConsumerGroupMetadata("group", generation_id=3, member_id="m")
    )
    assert producer.records("out") == []
    assert [r.value for r in producer.uncommitted_records("out")] == [b"a"]
    assert producer.committed_offsets == {}
    await producer.commit_transaction()
    assert [(r.value, r.offset, r.transactional) for r in producer.records("out")] == [
        (b"a", 0, True)
    ]
    assert producer.committed_offsets == {"group": {("in", 0): 42}}
    # The commit marker took offset 1.
    async with producer.transaction():
        metadata = await producer.send_and_wait("out", b"b")
    assert metadata.offset == 2
    assert producer.transactions_committed == 2


async def test_aborted_transactions_are_dropped() -> None:
    producer = await started(transactional_id="tx")
    with pytest.raises(RuntimeError, match="handler failed"):
        async with producer.transaction():
            await producer.send("out", b"lost")
            await producer.send_offsets_to_transaction({("in", 0): 7}, "group")
            raise RuntimeError("handler failed")
    assert producer.records("out") == []
    assert [r.value for r in producer.aborted_records("out")] == [b"lost"]
    assert producer.committed_offsets == {}
    assert producer.transactions_aborted == 1
    assert producer.transaction_state is TransactionState.READY
    with pytest.raises(IllegalStateError, match="cannot commit: no transaction is open"):
        await producer.commit_transaction()
    with pytest.raises(IllegalStateError, match="cannot abort: no transaction is open"):
        await producer.abort_transaction()


async def test_a_failed_record_makes_the_transaction_abortable() -> None:
    producer = await started(transactional_id="tx")
    await producer.begin_transaction()
    await producer.send("out", b"kept-out")
    producer.fail_next(NotEnoughReplicasError)
    future = await producer.send("out", b"failed")
    assert isinstance(future.exception(), NotEnoughReplicasError)
    assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
    with pytest.raises(NotEnoughReplicasError, match="must be aborted"):
        await producer.send("out", b"more")
    with pytest.raises(NotEnoughReplicasError, match="cannot commit the transaction"):
        await producer.commit_transaction()
    await producer.abort_transaction()
    assert producer.records() == []
    async with producer.transaction():
        await producer.send("out", b"next")
    assert [r.value for r in producer.records()] == [b"next"]


async def test_the_transaction_context_aborts_when_the_commit_fails() -> None:
    producer = await started(transactional_id="tx")
    with pytest.raises(NotEnoughReplicasError):
        async with producer.transaction():
            producer.fail_next(NotEnoughReplicasError)
            await producer.send("out", b"failed")
    assert producer.transaction_state is TransactionState.READY
    assert producer.transactions_aborted == 1


async def test_a_fenced_producer_can_only_close() -> None:
    producer = await started(transactional_id="tx")
    await producer.begin_transaction()
    producer.fail_next(ProducerFencedError)
    await producer.send("out", b"v")
    assert producer.transaction_state is TransactionState.FATAL_ERROR
    for operation in (producer.abort_transaction, producer.begin_transaction):
        with pytest.raises(ProducerFencedError, match="fatal error; close it"):
            await operation()
    await producer.close()


async def test_closing_aborts_the_open_transaction() -> None:
    producer = await started(transactional_id="tx")
    await producer.begin_transaction()
    await producer.send("out", b"v")
    await producer.close()
    assert producer.records() == [] and len(producer.aborted_records()) == 1


async def test_a_prepared_transaction_is_left_open_by_close_and_refuses_sends() -> None:
    producer = await started(transactional_id="tx")
    await producer.begin_transaction()
    await producer.send("out", b"v")
    prepared = await producer.prepare_transaction()
    assert prepared.transactional_id == "tx" and not prepared.empty
    assert producer.transaction_state is TransactionState.PREPARED_TRANSACTION
    with pytest.raises(IllegalStateError, match="the transaction is prepared"):
        await producer.send("out", b"w")
    await producer.close()
    assert producer.records() == [] and producer.aborted_records() == []
    assert [r.value for r in producer.uncommitted_records("out")] == [b"v"]


async def test_a_prepared_transaction_commits_like_an_open_one() -> None:
    producer = await started(transactional_id="tx")
    await producer.begin_transaction()
    await producer.send("out", b"v")
    await producer.prepare_transaction()
    await producer.commit_transaction()
    assert [r.value for r in producer.records("out")] == [b"v"]


async def test_transaction_calls_need_a_transactional_id() -> None:
    producer = await started()
    assert producer.transaction_state is None
    with pytest.raises(IllegalStateError, match="set transactional_id"):
        await producer.begin_transaction()
    with pytest.raises(IllegalStateError, match="set transactional_id"):
        await producer.send_offsets_to_transaction({("in", 0): 1}, "group")


async def test_clear_forgets_records_but_offsets_go_on() -> None:
    producer = await started()
    await producer.send("t", b"a")
    producer.clear()
    assert producer.records() == [] and producer.history() == []
    assert (await producer.send_and_wait("t", b"b")).offset == 1


# ---- records left pending (auto_complete=False) ------------------------------------------------


async def test_pending_records_wait_for_the_test_to_complete_them() -> None:
    producer = await started(auto_complete=False, topics={"t": 1})
    waiting = asyncio.ensure_future(producer.send_and_wait("t", b"a"))
    for _ in range(100):  # until the task has sent its record (a guard, not a delay)
        if producer.pending_count:
            break
        await asyncio.sleep(0)
    assert producer.pending_count == 1
    future = await producer.send("t", b"b")
    batch = await producer.send_many("t", [b"c", b"d"])
    assert not future.done() and not waiting.done() and not batch.done()
    assert producer.records() == [] and producer.pending_count == 4
    assert producer.complete_next() == 1
    assert (await asyncio.wait_for(waiting, 10)).offset == 0
    assert not future.done()
    assert producer.complete_next(10) == 3
    assert (await future).offset == 1
    assert [m.offset for m in await batch] == [2, 3]
    assert [r.value for r in producer.records("t")] == [b"a", b"b", b"c", b"d"]
    assert producer.complete_next() == 0


async def test_pending_records_fail_when_told_and_as_fail_next_said() -> None:
    producer = await started(auto_complete=False)
    producer.fail_next(NotEnoughReplicasError)
    doomed = await producer.send("t", b"doomed")  # fails when completed, as set up
    refused = await producer.send("t", b"refused")
    kept = await producer.send("t", b"kept")
    assert producer.complete_next() == 1
    assert isinstance(doomed.exception(), NotEnoughReplicasError)
    assert producer.fail_pending(ProducerFencedError("refused by the test")) == 1
    with pytest.raises(ProducerFencedError, match="refused by the test"):
        await refused
    assert not kept.done()
    await producer.flush()
    assert (await kept).offset == 0
    assert [r.value for r in producer.records()] == [b"kept"]
    assert producer.fail_pending(KafkaError) == 0


async def test_close_delivers_pending_records_unless_its_timeout_is_zero() -> None:
    delivering = await started(auto_complete=False)
    future = await delivering.send("t", b"v")
    await delivering.close()
    assert (await future).offset == 0
    assert len(delivering.records()) == 1

    dropping = await started(auto_complete=False)
    future = await dropping.send("t", b"v")
    await dropping.close(timeout=0)
    with pytest.raises(ProducerClosedError, match="timeout 0 before delivery"):
        await future
    assert dropping.records() == []


async def test_pending_records_of_a_transaction() -> None:
    producer = await started(auto_complete=False, transactional_id="tx")
    # The commit delivers the transaction's records first.
    await producer.begin_transaction()
    committed = await producer.send("out", b"committed")
    await producer.commit_transaction()
    assert (await committed).offset == 0
    assert [r.value for r in producer.records()] == [b"committed"]
    # An abort fails the records not sent yet.
    await producer.begin_transaction()
    aborted = await producer.send("out", b"aborted")
    await producer.abort_transaction()
    with pytest.raises(TransactionAbortedError, match="aborted before the record was sent"):
        await aborted
    # After a failed record, the others of the transaction are not sent.
    await producer.begin_transaction()
    first = await producer.send("out", b"first")
    second = await producer.send("out", b"second")
    producer.fail_pending(NotEnoughReplicasError)
    producer.complete_next()
    assert isinstance(first.exception(), NotEnoughReplicasError)
    assert "InMemoryProducer.fail_pending()" in str(first.exception())
    with pytest.raises(NotEnoughReplicasError, match="the record was not sent"):
        await second
    await producer.abort_transaction()
    # Closing with a transaction open aborts it, and its pending records fail.
    await producer.begin_transaction()
    unsent = await producer.send("out", b"unsent")
    await producer.close()
    with pytest.raises(TransactionAbortedError, match="closed with the transaction open"):
        await unsent
    assert [r.value for r in producer.records()] == [b"committed"]
    assert producer.history() == producer.records()


# ---- the testing page's snippets ------------------------------------------------------------

_PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
_SNIPPETS = re.findall(r"```python\n(.*?)```", _PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.mark.parametrize("index", range(len(_SNIPPETS)))
def test_the_testing_pages_snippets_run(index: int) -> None:
    """Each snippet runs as written, and so do the tests it shows (those that need no
    fixture: the Spark one needs a SparkSession)."""
    source = _SNIPPETS[index]
    if "fastapi" in source:
        pytest.importorskip("fastapi")
    namespace: dict[str, Any] = {"__name__": f"testing_page_snippet_{index}"}
    exec(compile(source, f"docs/testing.md snippet {index}", "exec"), namespace)
    tests = [
        value
        for name, value in namespace.items()
        if name.startswith("test_") and not inspect.signature(value).parameters
    ]
    if "def test_" in source and "spark" not in source:
        assert tests, "the snippet's test was not found"
    for test in tests:
        if inspect.iscoroutinefunction(test):
            asyncio.run(test())
        else:
            test()


async def test_confluent_style_calls_store_and_report_as_the_producer_does() -> None:
    reports: list[tuple[Any, Any]] = []
    producer = InMemoryProducer(transactional_id="tx-confluent", topics={"orders": 2})
    await producer.init_transactions()  # starts it
    await producer.begin_transaction()
    await producer.produce(
        "orders", b"v1", key=b"k", partition=1, on_delivery=lambda e, m: reports.append((e, m))
    )
    await producer.produce(
        "orders", "v2", partition=1, callback=lambda e, m: reports.append((e, m))
    )
    assert reports == []  # callbacks run only in poll(), flush() or close()
    await producer.commit_transaction()
    assert await producer.poll(0) == 2
    assert [(e, m.partition(), m.offset(), m.value()) for e, m in reports] == [
        (None, 1, 0, b"v1"),
        (None, 1, 1, b"v2"),
    ]
    assert [r.value for r in producer.records("orders", 1)] == [b"v1", b"v2"]
    await producer.stop()
    assert producer.state is ProducerState.CLOSED


async def test_init_transactions_needs_a_transactional_id() -> None:
    with pytest.raises(IllegalStateError, match="transactional_id"):
        await InMemoryProducer().init_transactions()
