"""Two-phase commit over Kafka transactions, on both transaction protocols: a producer
prepares a transaction (flushed, not committed) and closes; another client, here another
process, commits or aborts it from the PreparedTransaction (producer id and epoch) with
FindCoordinator + EndTxn.

- A prepared transaction survives its producer's close (close aborts an open transaction,
  not a prepared one): nothing is readable as committed until another process commits it,
  then all of it is; a retried commit is harmless.
- An abort from another client discards it: read_uncommitted sees the records,
  read_committed never does.
- A wrong epoch is refused with a clear error, and so is a transaction a newer producer
  with the same transactional id aborted (the retry of a failed task): nothing is
  committed.
- A prepared transaction that outlives transaction_timeout_ms is aborted by the
  coordinator; completing it then fails, saying so.
- An offset committed inside the prepared transaction (the marker of a Spark micro-batch)
  becomes visible to fetch_committed_offsets only when the transaction commits.
- list_transactions finds the prepared transactions still open under a prefix (and not
  those of another prefix, nor the completed ones when asked for open ones only).
- describe_transactions tells a prepared transaction still open under its producer id and
  epoch (with its timeout and start) from one committed or aborted, and leaves out an id
  the coordinator does not know.

Records are read back with confluent-kafka's consumer (tests.support.readback).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import OffsetSpec

from aioproducer import (
    PreparedTransaction,
    Producer,
    TransactionState,
    complete_prepared_transaction,
    describe_transactions,
    fetch_committed_offsets,
    list_transactions,
)
from aioproducer.errors import (
    IllegalStateError,
    KafkaError,
    ProducerFencedError,
    RequestTimedOutError,
)
from tests.support.kafka import KafkaBroker
from tests.support.readback import read_back

pytestmark = pytest.mark.kafka

NewTopic = Callable[..., str]

_ROOT = Path(__file__).resolve().parents[2]
# Only turns a hang into a failure.
_HANG = 60.0


@pytest.fixture(params=["kafka", "kafka_tv1"])
def any_kafka(request: pytest.FixtureRequest) -> KafkaBroker:
    """Each Kafka node in turn: transaction.version 2 (the default), then 1."""
    broker: KafkaBroker = request.getfixturevalue(request.param)
    return broker


def _transactional_id(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


async def _prepare(
    broker: KafkaBroker, topic: str, transactional_id: str, count: int, label: str = "v"
) -> PreparedTransaction:
    """Send ``count`` records in a transaction over the topic's partitions, prepare it, and
    close the producer."""
    async with Producer(
        bootstrap_servers=broker.bootstrap_servers, transactional_id=transactional_id
    ) as producer:
        await producer.begin_transaction()
        partitions = await producer.partitions_for(topic)
        for i in range(count):
            await producer.send(topic, f"{label}{i}".encode(), partition=i % len(partitions))
        prepared = await producer.prepare_transaction()
        assert producer.transaction_state is TransactionState.PREPARED_TRANSACTION
    return prepared


def _complete_in_another_process(
    broker: KafkaBroker, prepared: PreparedTransaction, commit: bool
) -> subprocess.CompletedProcess[str]:
    script = (
        "import asyncio, json, sys\n"
        "from aioproducer import PreparedTransaction, complete_prepared_transaction\n"
        "p = PreparedTransaction(**json.loads(sys.argv[1]))\n"
        "asyncio.run(complete_prepared_transaction(p, commit=sys.argv[2] == 'commit', "
        "bootstrap_servers=sys.argv[3]))\n"
        "print('done')\n"
    )
    fields = {
        "transactional_id": prepared.transactional_id,
        "producer_id": prepared.producer_id,
        "producer_epoch": prepared.producer_epoch,
        "transaction_v2": prepared.transaction_v2,
        "empty": prepared.empty,
    }
    env = dict(os.environ, PYTHONPATH=str(_ROOT))
    return subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            json.dumps(fields),
            "commit" if commit else "abort",
            broker.bootstrap_servers,
        ],
        capture_output=True,
        text=True,
        timeout=_HANG,
        env=env,
        check=False,
    )


def _values(broker: KafkaBroker, topic: str, expected: int, isolation_level: str) -> list[bytes]:
    records = read_back(
        broker.bootstrap_servers,
        topic,
        expected=expected,
        isolation_level=isolation_level,
        extra_wait=0.3,
    )
    return sorted(r.value for r in records if r.value is not None)


async def _commit_one(broker: KafkaBroker, topic: str, value: bytes) -> None:
    """A committed record after the others: a read_committed reader that reaches it has
    read past everything before it."""
    async with (
        Producer(
            bootstrap_servers=broker.bootstrap_servers,
            transactional_id=_transactional_id("after"),
        ) as producer,
        producer.transaction(),
    ):
        await producer.send(topic, value, partition=0)


def test_a_prepared_transaction_is_committed_by_another_process(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(any_kafka, partitions=3)
    prepared = asyncio.run(_prepare(any_kafka, topic, _transactional_id("2pc-commit"), 30))
    assert prepared.transaction_v2 is (any_kafka.finalized_features()["transaction.version"] >= 2)
    assert not prepared.empty
    # Closed with the transaction prepared: written, not committed, not aborted.
    assert len(_values(any_kafka, topic, 30, "read_uncommitted")) == 30
    done = _complete_in_another_process(any_kafka, prepared, commit=True)
    assert done.returncode == 0, done.stderr
    expected = sorted(f"v{i}".encode() for i in range(30))
    assert _values(any_kafka, topic, 30, "read_committed") == expected
    # Completing again with the same outcome is recognised as a retry.
    asyncio.run(
        complete_prepared_transaction(
            prepared, commit=True, bootstrap_servers=any_kafka.bootstrap_servers
        )
    )
    assert _values(any_kafka, topic, 30, "read_committed") == expected


def test_a_prepared_transaction_is_aborted_by_another_client(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(any_kafka, partitions=2)
    prepared = asyncio.run(_prepare(any_kafka, topic, _transactional_id("2pc-abort"), 10))
    done = _complete_in_another_process(any_kafka, prepared, commit=False)
    assert done.returncode == 0, done.stderr
    asyncio.run(_commit_one(any_kafka, topic, b"after"))
    assert _values(any_kafka, topic, 1, "read_committed") == [b"after"]
    assert len(_values(any_kafka, topic, 11, "read_uncommitted")) == 11


def test_a_wrong_epoch_is_refused(any_kafka: KafkaBroker, new_topic: NewTopic) -> None:
    topic = new_topic(any_kafka)
    prepared = asyncio.run(_prepare(any_kafka, topic, _transactional_id("2pc-epoch"), 5))
    wrong = PreparedTransaction(
        prepared.transactional_id,
        prepared.producer_id,
        prepared.producer_epoch - 1,
        prepared.transaction_v2,
    )
    with pytest.raises(KafkaError) as caught:
        asyncio.run(
            complete_prepared_transaction(
                wrong, commit=True, bootstrap_servers=any_kafka.bootstrap_servers
            )
        )
    message = str(caught.value)
    assert f"epoch {prepared.producer_epoch - 1}" in message
    assert "no longer has it open under that epoch" in message
    assert not caught.value.retriable
    # The right epoch still commits it.
    asyncio.run(
        complete_prepared_transaction(
            prepared, commit=True, bootstrap_servers=any_kafka.bootstrap_servers
        )
    )
    assert len(_values(any_kafka, topic, 5, "read_committed")) == 5


def test_a_newer_producer_aborts_the_prepared_transaction_and_commit_fails(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(any_kafka)
    transactional_id = _transactional_id("2pc-fenced")
    prepared = asyncio.run(_prepare(any_kafka, topic, transactional_id, 5, label="old"))

    async def retry() -> None:
        # What a retried task does: the same transactional id, which fences the old one.
        async with (
            Producer(
                bootstrap_servers=any_kafka.bootstrap_servers, transactional_id=transactional_id
            ) as producer,
            producer.transaction(),
        ):
            await producer.send(topic, b"new", partition=0)

    asyncio.run(retry())
    with pytest.raises(KafkaError) as caught:
        asyncio.run(
            complete_prepared_transaction(
                prepared, commit=True, bootstrap_servers=any_kafka.bootstrap_servers
            )
        )
    assert "A newer producer with this transactional id started" in str(caught.value)
    assert isinstance(caught.value, ProducerFencedError) or caught.value.error_code in (47, 48)
    assert _values(any_kafka, topic, 1, "read_committed") == [b"new"]


def test_a_prepared_producer_refuses_sends_and_can_still_commit_itself(
    kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(kafka)

    async def scenario() -> None:
        async with Producer(
            bootstrap_servers=kafka.bootstrap_servers,
            transactional_id=_transactional_id("2pc-self"),
        ) as producer:
            with pytest.raises(IllegalStateError, match="no transaction is open"):
                await producer.prepare_transaction()
            await producer.begin_transaction()
            await producer.send(topic, b"a")
            await producer.prepare_transaction()
            with pytest.raises(IllegalStateError, match="the transaction is prepared"):
                await producer.send(topic, b"b")
            with pytest.raises(IllegalStateError, match="a prepared transaction is open"):
                await producer.begin_transaction()
            await producer.commit_transaction()
            assert producer.transaction_state is TransactionState.READY
            # An empty transaction prepares as empty: there is nothing to complete.
            await producer.begin_transaction()
            empty = await producer.prepare_transaction()
            assert empty.empty
            await producer.abort_transaction()

    asyncio.run(scenario())
    assert _values(kafka, topic, 1, "read_committed") == [b"a"]


def test_an_offset_committed_in_a_prepared_transaction_is_seen_once_committed(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(any_kafka)
    group = f"2pc-group-{uuid.uuid4().hex[:8]}"
    marker = (topic, 0)
    bootstrap = any_kafka.bootstrap_servers

    async def scenario() -> None:
        async with Producer(
            bootstrap_servers=bootstrap, transactional_id=_transactional_id("2pc-offsets")
        ) as producer:
            await producer.begin_transaction()
            await producer.send(topic, b"x")
            await producer.send_offsets_to_transaction({marker: 42}, group)
            prepared = await producer.prepare_transaction()
        # Open: the offset is not decided yet, so it is not answered (require_stable).
        with pytest.raises(RequestTimedOutError):
            await fetch_committed_offsets(group, [marker], bootstrap_servers=bootstrap, timeout=2)
        await complete_prepared_transaction(prepared, bootstrap_servers=bootstrap)
        assert await fetch_committed_offsets(group, [marker], bootstrap_servers=bootstrap) == {
            marker: 42
        }

    asyncio.run(scenario())


def _ended(broker: KafkaBroker, topic: str) -> bool:
    """No transaction is open on partition 0: its last stable offset is its end."""
    tp = confluent_kafka.TopicPartition(topic, 0)
    ends = []
    for level in (
        confluent_kafka.IsolationLevel.READ_COMMITTED,
        confluent_kafka.IsolationLevel.READ_UNCOMMITTED,
    ):
        futures = broker.admin().list_offsets(
            {tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=10
        )
        ends.append(futures[tp].result(timeout=10).offset)
    return ends[0] == ends[1]


def test_a_prepared_transaction_past_its_timeout_cannot_be_committed(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(any_kafka)
    bootstrap = any_kafka.bootstrap_servers

    async def prepare() -> PreparedTransaction:
        async with Producer(
            bootstrap_servers=bootstrap,
            transactional_id=_transactional_id("2pc-timeout"),
            transaction_timeout_ms=1000,
        ) as producer:
            await producer.begin_transaction()
            await producer.send(topic, b"late", partition=0)
            return await producer.prepare_transaction()

    prepared = asyncio.run(prepare())
    # The coordinator aborts it once the timeout passed (it looks twice a second on the
    # test brokers).
    deadline = time.monotonic() + _HANG
    while not _ended(any_kafka, topic):
        assert time.monotonic() < deadline, "the coordinator never aborted the transaction"
        time.sleep(0.2)
    with pytest.raises(KafkaError) as caught:
        asyncio.run(complete_prepared_transaction(prepared, bootstrap_servers=bootstrap))
    assert "stayed open longer than transaction_timeout_ms" in str(caught.value)
    assert not caught.value.retriable
    asyncio.run(_commit_one(any_kafka, topic, b"after"))
    assert _values(any_kafka, topic, 1, "read_committed") == [b"after"]


def test_list_transactions_finds_the_prepared_transactions_left_open_under_a_prefix(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(any_kafka, partitions=2)
    prefix = _transactional_id("listed")
    kept = asyncio.run(_prepare(any_kafka, topic, f"{prefix}-0", 5))
    left = asyncio.run(_prepare(any_kafka, topic, f"{prefix}-1", 5))
    other = asyncio.run(_prepare(any_kafka, topic, _transactional_id("elsewhere"), 5))
    asyncio.run(complete_prepared_transaction(kept, bootstrap_servers=any_kafka.bootstrap_servers))

    def listed(**filters: object) -> dict[str, tuple[int, str]]:
        listing = asyncio.run(
            list_transactions(bootstrap_servers=any_kafka.bootstrap_servers, **filters)  # type: ignore[arg-type]
        )
        return {t.transactional_id: (t.producer_id, t.state) for t in listing}

    assert listed(states=["Ongoing"], transactional_id_prefix=prefix) == {
        left.transactional_id: (left.producer_id, "Ongoing")
    }
    everything = listed()
    assert everything[left.transactional_id] == (left.producer_id, "Ongoing")
    assert everything[other.transactional_id] == (other.producer_id, "Ongoing")
    # Committed: the coordinator writes the markers, then holds the id with no transaction.
    assert everything[kept.transactional_id][1] in {"PrepareCommit", "CompleteCommit"}
    asyncio.run(
        complete_prepared_transaction(
            other, commit=False, bootstrap_servers=any_kafka.bootstrap_servers
        )
    )
    asyncio.run(
        complete_prepared_transaction(
            left, commit=False, bootstrap_servers=any_kafka.bootstrap_servers
        )
    )
    assert listed(states=["Ongoing"], transactional_id_prefix=prefix) == {}


def test_describe_transactions_tells_an_open_prepared_transaction_from_an_ended_one(
    any_kafka: KafkaBroker, new_topic: NewTopic
) -> None:
    topic = new_topic(any_kafka, partitions=2)
    bootstrap = any_kafka.bootstrap_servers
    prefix = _transactional_id("described")
    before_ms = time.time() * 1000.0
    committed = asyncio.run(_prepare(any_kafka, topic, f"{prefix}-0", 4))
    aborted = asyncio.run(_prepare(any_kafka, topic, f"{prefix}-1", 4))
    # More ids than a connection takes requests at once (5): they wait their turn.
    unknown = [f"{prefix}-never-used-{n}" for n in range(10)]
    ids = [committed.transactional_id, aborted.transactional_id, *unknown]

    described = asyncio.run(describe_transactions(ids, bootstrap_servers=bootstrap))
    assert sorted(described) == sorted(ids[:2])  # the unknown ids are left out
    for prepared in (committed, aborted):
        d = described[prepared.transactional_id]
        assert d.matches(prepared)
        assert (d.state, d.producer_id, d.producer_epoch) == (
            "Ongoing",
            prepared.producer_id,
            prepared.producer_epoch,
        )
        assert sorted(d.partitions.get(topic, [])) == [0, 1]
        assert d.timeout_ms == 60_000  # the producer's transaction_timeout_ms by default
        # The coordinator's clock, near this machine's: the transaction began after
        # before_ms, less a second of slack.
        assert d.start_time_ms >= before_ms - 1000
        assert 0 < d.time_left_ms() <= d.timeout_ms

    asyncio.run(complete_prepared_transaction(committed, bootstrap_servers=bootstrap))
    asyncio.run(complete_prepared_transaction(aborted, commit=False, bootstrap_servers=bootstrap))
    described = asyncio.run(describe_transactions(ids, bootstrap_servers=bootstrap))
    assert described[committed.transactional_id].state in {"PrepareCommit", "CompleteCommit"}
    assert described[aborted.transactional_id].state in {"PrepareAbort", "CompleteAbort"}
    for prepared in (committed, aborted):
        assert not described[prepared.transactional_id].matches(prepared)
        assert described[prepared.transactional_id].producer_id == prepared.producer_id
