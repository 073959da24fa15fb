"""The exactly-once options of the Spark data source, checked on the driver: parsed, refused
with a message that says what to do, and turned into transactional ids and marker groups
that a restarted query finds again. (The writes themselves run on Kafka:
tests/integration/test_kafka_spark_exactly_once.py.)"""

from __future__ import annotations

import pickle

import pytest

from aioproducer import PreparedTransaction
from aioproducer.errors import ConfigurationError
from aioproducer.integrations.spark import SinkOptions, _Layout
from aioproducer.integrations.spark_transactions import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    TransactionalBatchWriter,
    TransactionalCommitMessage,
    TransactionalStreamWriter,
)

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


def test_a_streaming_query_finds_its_prefix_again_from_its_checkpoint() -> None:
    options = {"delivery.guarantee": "exactly_once", "checkpointLocation": "/checkpoints/q"}
    first = TransactionalStreamWriter(parse(**options), LAYOUT)
    again = TransactionalStreamWriter(parse(**options), LAYOUT)
    other = TransactionalStreamWriter(
        parse(**{**options, "checkpointLocation": "/checkpoints/other"}), LAYOUT
    )
    assert first.prefix == again.prefix != other.prefix
    assert first.marker_topic == "t"


def test_a_streaming_query_needs_a_prefix_and_a_marker_topic() -> None:
    with pytest.raises(ConfigurationError, match=r"transactional\.id\.prefix"):
        TransactionalStreamWriter(parse(**{"delivery.guarantee": "exactly_once"}), LAYOUT)
    no_topic = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": "k:9092",
            "delivery.guarantee": "exactly_once",
            "transactional.id.prefix": "q",
        }
    )
    with pytest.raises(ConfigurationError, match=r"transactional\.marker\.topic"):
        TransactionalStreamWriter(no_topic, LAYOUT)


def test_the_commit_message_pickles_with_its_prepared_transaction() -> None:
    message = TransactionalCommitMessage(3, 10, PreparedTransaction("p-3", 7, 2, True))
    assert pickle.loads(pickle.dumps(message)) == message
