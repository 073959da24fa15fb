"""The exactly-once options of the Spark data source, checked on the driver: parsed, refused
with a message that says what to do, and turned into transactional ids and marker groups
that a restarted query finds again. (The writes themselves run on Kafka:
tests/integration/test_kafka_spark_exactly_once.py.)"""

from __future__ import annotations

import json
import pickle

import pytest

from aioproducer import PreparedTransaction
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import (
    ConfigurationError,
    TransactionAbortedError,
    UnsupportedVersionError,
)
from aioproducer.integrations.spark.exactly_once import (
    _DECISION_CHUNK,
    TransactionalBatchWriter,
    TransactionalCommitMessage,
    TransactionalStreamWriter,
    _check_prepared,
    _Decision,
    _decision_groups,
    _derived_prefix,
    _digest_sum,
    _InputDigest,
    _layout,
    _Marker,
    _outcome,
    _query_of,
    _read_metadata,
)
from aioproducer.integrations.spark.options import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    SinkOptions,
    _Layout,
)
from aioproducer.integrations.spark.producers import _run

LAYOUT = _Layout(
    key=None, value="binary", topic=False, partition=False, headers=None, timestamp=None
)


def parse(**options: str) -> SinkOptions:
    return SinkOptions.parse({"kafka.bootstrap.servers": "k:9092", "topic": "t", **options})


def test_at_least_once_is_the_default_and_changes_nothing() -> None:
    sink = parse()
    assert sink.delivery_guarantee == "at_least_once"
    assert "transaction.timeout.ms" not in sink.config
    # A streaming query's checkpoint location is accepted, as before.
    assert parse(checkpointLocation="/c").delivery_guarantee == "at_least_once"


def test_exactly_once_is_parsed_with_a_transaction_timeout_that_covers_the_job() -> None:
    sink = parse(**{"delivery.guarantee": "Exactly-Once"})
    assert sink.delivery_guarantee == "exactly_once"
    assert sink.config["transaction.timeout.ms"] == DEFAULT_TRANSACTION_TIMEOUT_MS == 900_000
    chosen = parse(**{"delivery.guarantee": "exactly_once", "kafka.transaction.timeout.ms": "5000"})
    assert chosen.config["transaction.timeout.ms"] == "5000"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delivery.guarantee": "twice"}, r"'at_least_once' \(the default\) or 'exactly_once'"),
        (
            {"delivery.guarantee": "exactly_once", "kafka.transactional.id": "x"},
            r"each task gets its own transactional id",
        ),
        (
            {"delivery.guarantee": "exactly_once", "transactional.id.prefix": " "},
            r"'transactional.id.prefix' must not be empty",
        ),
        (
            {"delivery.guarantee": "exactly_once", "transactional.marker.topic": "a b"},
            r"option 'transactional.marker.topic'",
        ),
        (
            {"delivery.guarantee": "exactly_once", "kafka.transaction.timeout.ms": "-1"},
            r"transaction",
        ),
        (
            {"transactional.id.prefix": "orders"},
            r"'transactional.id.prefix' applies to delivery.guarantee exactly_once only",
        ),
        (
            {"delivery.guarantee": "at_least_once", "transactional.marker.topic": "m"},
            r"'transactional.marker.topic' applies to delivery.guarantee exactly_once only",
        ),
    ],
)
def test_bad_exactly_once_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse(**options)


def test_a_batch_write_gets_a_prefix_of_its_own_unless_one_is_given() -> None:
    sink = parse(**{"delivery.guarantee": "exactly_once"})
    first = TransactionalBatchWriter(sink, LAYOUT).prefix
    second = TransactionalBatchWriter(sink, LAYOUT).prefix
    assert first.startswith("aioproducer-spark-") and first != second
    given = parse(**{"delivery.guarantee": "exactly_once", "transactional.id.prefix": "orders"})
    assert TransactionalBatchWriter(given, LAYOUT).prefix == "orders"


def test_a_streaming_query_derives_its_prefix_from_its_query_id() -> None:
    # Spark keeps the query id in the checkpoint: the same however the checkpoint's path
    # is spelled, and new once the checkpoint is deleted.
    assert _derived_prefix("q-1") == _derived_prefix("q-1") != _derived_prefix("q-2")
    assert _derived_prefix("q-1").startswith("aioproducer-spark-")
    writer = TransactionalStreamWriter(parse(**{"delivery.guarantee": "exactly_once"}), LAYOUT)
    assert writer.prefix is None and writer.marker_topic == "t"
    given = parse(**{"delivery.guarantee": "exactly_once", "transactional.id.prefix": "orders"})
    assert TransactionalStreamWriter(given, LAYOUT).prefix == "orders"


def test_a_streaming_query_needs_a_marker_topic() -> None:
    no_topic = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": "k:9092",
            "delivery.guarantee": "exactly_once",
            "transactional.id.prefix": "q",
        }
    )
    with pytest.raises(ConfigurationError, match=r"transactional\.marker\.topic"):
        TransactionalStreamWriter(no_topic, LAYOUT)


def test_the_input_digest_counts_the_rows_whatever_their_order() -> None:
    rows = [(b"k1", b"a"), (b"k2", b"b"), (None, b"c")]

    def digest(ordered: list[tuple[bytes | None, bytes]], chunk: int) -> str:
        result = _InputDigest()
        for start in range(0, len(ordered), chunk):
            part = ordered[start : start + chunk]
            result.add({"key": [k for k, _ in part], "value": [v for _, v in part]})
        return str(result)

    assert digest(rows, 3) == digest(list(reversed(rows)), 1)
    assert digest(rows, 3) != digest(rows[:2], 3)
    assert digest(rows, 3) != digest([(b"k1", b"b"), (b"k2", b"a"), (None, b"c")], 3)
    assert digest(rows, 3).startswith("3:")


def test_a_marker_names_its_query_and_only_such_markers_are_read() -> None:
    marker = _Marker("p-0", "t", 5, "query-1")
    fields = _read_metadata(marker.metadata("3:00ff"))
    assert fields == {"query": "query-1", "batch": 4, "rows": "3:00ff"}
    # Markers of earlier versions carried no metadata: they name no query.
    assert _read_metadata("") is None and _read_metadata(None) is None
    assert _read_metadata("not json") is None and _read_metadata('{"batch": 4}') is None


def test_a_batch_layout_is_its_partitions_and_their_digests() -> None:
    def message(partition: int, digest: str) -> TransactionalCommitMessage:
        return TransactionalCommitMessage(partition, 1, digest=digest, query_id="q", prefix="p")

    two = [message(0, "1:01"), message(1, "1:02")]
    assert _layout(two) == _layout(list(reversed(two)))
    assert _layout(two).startswith("2:")
    assert _layout([message(0, "2:03")]) != _layout(two)
    assert _layout([message(0, "1:02"), message(1, "1:01")]) != _layout(two)
    assert _query_of(two, None) == ("p", "q") and _query_of(two, "given") == ("given", "q")


def test_the_commit_message_pickles_with_its_prepared_transaction() -> None:
    message = TransactionalCommitMessage(3, 10, PreparedTransaction("p-3", 7, 2, True))
    assert pickle.loads(pickle.dumps(message)) == message


def test_the_input_digest_tells_apart_what_kafka_would_receive_differently() -> None:
    def digest(*chunks: dict[str, list[object]]) -> str:
        result = _InputDigest()
        for chunk in chunks:
            result.add(chunk)
        return str(result)

    # A null value (a tombstone) is not an empty one; nor a null key an empty key.
    assert digest({"key": [b"k"], "value": [None]}) != digest({"key": [b"k"], "value": [b""]})
    assert digest({"key": [None], "value": [b"v"]}) != digest({"key": [b""], "value": [b"v"]})
    # Fields do not run into each other.
    assert digest({"key": [b"c"], "value": [b"a\x00b"]}) != digest(
        {"key": [b"b\x00c"], "value": [b"a"]}
    )
    # Every column counts: partition, timestamp, headers, topic.
    for column, one, other in (
        ("partition", 0, 2),
        ("timestamp", 1000, 9999),
        ("headers", [("h", b"1")], [("h", b"2")]),
        ("topic", "a", "b"),
    ):
        first = digest({"value": [b"v"], column: [one]})
        assert first != digest({"value": [b"v"], column: [other]})
    # A chunk without a key column (the Arrow path leaves out one whose keys are all null)
    # counts as null keys: the same rows give the same digest however they are chunked.
    assert digest({"value": [b"a", b"b"]}, {"key": [b"k"], "value": [b"c"]}) == digest(
        {"key": [None], "value": [b"a"]}, {"key": [None, b"k"], "value": [b"b", b"c"]}
    )


def test_a_writes_digest_is_the_same_however_its_rows_are_split() -> None:
    rows = [{"key": [str(i).encode()], "value": [b"v%d" % i]} for i in range(10)]

    def messages(split: list[range]) -> list[TransactionalCommitMessage]:
        out = []
        for partition, indexes in enumerate(split):
            digest = _InputDigest()
            for i in indexes:
                digest.add(rows[i])
            out.append(TransactionalCommitMessage(partition, len(indexes), digest=str(digest)))
        return out

    whole = _digest_sum(messages([range(10)]))
    assert whole is not None and whole.startswith("10:")
    assert _digest_sum(messages([range(3), range(3, 4), range(4, 10)])) == whole
    assert _digest_sum(messages([range(3), range(4, 10)])) != whole
    # A task that took no digest: the write's rows cannot be told.
    assert _digest_sum([TransactionalCommitMessage(0, 1)]) is None


def test_a_commit_decision_fits_the_metadata_of_group_offsets() -> None:
    biggest = PreparedTransaction("p-9999-retry99", (1 << 63) - 1, (1 << 15) - 1, True)
    transactions = [(p, 99, biggest) for p in range(2 * _DECISION_CHUNK + 1)]
    decision = _Decision("w" * 32, "12345678:" + "f" * 16, transactions, "orders")
    chunks = decision.chunks()
    assert [len(c) for c in chunks] == [_DECISION_CHUNK, _DECISION_CHUNK, 1]
    assert chunks[0][0] == [0, 99, (1 << 63) - 1, (1 << 15) - 1]
    # offset.metadata.max.bytes is 4096 by default.
    assert all(len(json.dumps(c, separators=(",", ":"))) < 4096 for c in chunks)
    head = json.loads(decision.head(len(chunks)))
    assert head == {
        "write": "w" * 32,
        "state": "committing",
        "rows": "12345678:" + "f" * 16,
        "chunks": 3,
        "count": 2 * _DECISION_CHUNK + 1,
        "v2": True,
    }
    assert _decision_groups("p", 3) == ["p-commit", "p-commit-1", "p-commit-2", "p-commit-3"]


@pytest.mark.parametrize(
    ("v2", "state", "epoch", "expected"),
    [
        # Transactions v1: a commit leaves the epoch; an abort may bump it once.
        (False, "CompleteCommit", 5, "committed"),
        (False, "CompleteCommit", 6, "unknown"),  # a later transaction of the id
        (False, "CompleteAbort", 5, "aborted"),
        (False, "CompleteAbort", 6, "aborted"),  # a timeout, or a newer producer
        (False, "Empty", 6, "unknown"),
        (False, "Ongoing", 6, "unknown"),
        # Transactions v2: every end bumps it, an abort once or twice.
        (True, "CompleteCommit", 6, "committed"),
        (True, "CompleteCommit", 5, "unknown"),
        (True, "CompleteCommit", 7, "unknown"),
        (True, "PrepareAbort", 6, "aborted"),
        (True, "CompleteAbort", 7, "aborted"),
    ],
)
def test_what_became_of_a_transaction_is_told_by_its_epoch(
    v2: bool, state: str, epoch: int, expected: str
) -> None:
    from aioproducer import TransactionDescription

    prepared = PreparedTransaction("p-0", 42, 5, transaction_v2=v2)
    described = TransactionDescription("p-0", state, 42, epoch, 60_000, -1, {})
    assert _outcome(prepared, described) == expected
    # Another producer id, or an id the coordinator forgot, tells nothing.
    other = TransactionDescription("p-0", state, 43, epoch, 60_000, -1, {})
    assert _outcome(prepared, other) == "unknown"
    assert _outcome(prepared, None) == "unknown"


def test_exactly_once_refuses_a_broker_that_cannot_list_or_describe_transactions(
    tansu: EmbeddedBroker,
) -> None:
    # Tansu, as Kafka before 3.0, has neither ListTransactions nor DescribeTransactions. A
    # batch write refuses it on the driver before any task starts; a commit that meets it
    # (a streaming micro-batch, or a broker that came back older) commits nothing.
    sink = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": tansu.bootstrap_servers,
            "topic": "t",
            "delivery.guarantee": "exactly_once",
        }
    )
    with pytest.raises(UnsupportedVersionError) as caught:
        TransactionalBatchWriter(sink, LAYOUT).check_cluster()
    message = str(caught.value)
    assert "exactly_once needs Kafka 3.0 or later" in message
    assert "ListTransactions" in message and "at_least_once" in message

    prepared = [
        TransactionalCommitMessage(n, 10, PreparedTransaction(f"p-{n}", 7 + n, 0, False))
        for n in range(2)
    ]
    with pytest.raises(TransactionAbortedError) as refused:
        _run(_check_prepared(sink, list(prepared), "micro-batch 0"))
    message = str(refused.value)
    assert message.startswith("micro-batch 0: nothing was committed")
    assert "needs Kafka 3.0 or later" in message and "DescribeTransactions" in message


def test_listing_and_describing_refuse_states_and_ids_they_could_never_match() -> None:
    from aioproducer.two_phase import describe_transactions, list_transactions

    for states in (["ongoing"], ["Bogus"], "Ongoing"):
        with pytest.raises(ConfigurationError, match="state"):
            _run(list_transactions(states=states, bootstrap_servers="localhost:1"))
    with pytest.raises(ConfigurationError, match="not the string 'tx-1'"):
        _run(describe_transactions("tx-1", bootstrap_servers="localhost:1"))
