"""The error hierarchy: one class per Kafka error code, classified like the Java client."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import aioproducer.errors as errors
from aioproducer.errors import (
    ERROR_CODES,
    AuthenticationError,
    AuthorizationError,
    ConfigurationError,
    InvalidMetadataError,
    KafkaError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    PartitionerError,
    SerializationError,
    UnknownProducerIdError,
    UnknownServerError,
    error_for_code,
)
from aioproducer.protocol import error_codes
from aioproducer.protocol.error_codes import ErrorCode

# From Kafka's Errors.java and the superclass of each exception in common/errors/*.java:
# InvalidMetadataException subclasses (retriable, and refresh metadata first) ...
JAVA_INVALID_METADATA = {3, 5, 6, 9, 13, 56, 72, 74, 80, 83, 84, 100, 103}
# ... and the other RetriableException subclasses.
JAVA_RETRIABLE_ONLY = {2, 7, 14, 15, 16, 19, 20, 41, 51, 70, 71, 75, 78, 88, 89, 106, 122, 123, 133}


def test_every_code_from_minus_one_to_133_has_a_class() -> None:
    assert sorted(ERROR_CODES) == [-1, *range(1, 134)]
    for code, cls in ERROR_CODES.items():
        assert cls.error_code == code
        assert issubclass(cls, KafkaError)


def test_every_class_is_a_public_named_class_of_the_module() -> None:
    exported = set(errors.__all__)
    for cls in ERROR_CODES.values():
        assert cls.__name__ in exported
        assert getattr(errors, cls.__name__) is cls
        assert cls.__name__.endswith("Error")
        assert cls.error_name and cls.error_name.isupper()
    names = [cls.error_name for cls in ERROR_CODES.values()]
    assert len(set(names)) == len(names)
    assert len({cls.__name__ for cls in ERROR_CODES.values()}) == len(ERROR_CODES)


def test_the_error_code_table_names_every_class_code() -> None:
    # One table of codes and names: each class takes both from its ErrorCode member.
    assert {int(code) for code in ErrorCode} == {0, *ERROR_CODES}
    assert ErrorCode.NONE == 0 and ErrorCode(0) not in ERROR_CODES
    for code, cls in ERROR_CODES.items():
        assert cls.error_name == ErrorCode(code).name
    assert errors.UnknownProducerIdError.error_name == "UNKNOWN_PRODUCER_ID"
    assert errors.InvalidTopicError.error_name == "INVALID_TOPIC_EXCEPTION"
    # Client errors have neither; a subclass of a broker error keeps its parent's.
    assert errors.DeliveryTimeoutError.error_name is None
    assert errors.SslError.error_code is None and errors.SslError.error_name is None


def test_error_codes_print_as_numbers() -> None:
    assert str(ErrorCode.NOT_LEADER_OR_FOLLOWER) == f"{ErrorCode.NOT_LEADER_OR_FOLLOWER}" == "6"
    assert str(error_for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER)).startswith(
        "[Error 6 NOT_LEADER_OR_FOLLOWER]"
    )


def test_the_error_modules_are_what_the_table_generates() -> None:
    # One table (tools/error_table.py) makes ErrorCode, the classes, ERROR_CODES and __all__.
    from tools import generate_errors

    assert generate_errors.render_error_codes() == generate_errors.ERROR_CODES_PY.read_text()
    current = generate_errors.ERRORS_PY.read_text()
    assert generate_errors.render_errors(current) == current


def test_the_generator_notices_a_class_edited_by_hand() -> None:
    from tools import generate_errors

    current = generate_errors.ERRORS_PY.read_text()
    edited = current.replace(
        "    error_code = ErrorCode.OFFSET_OUT_OF_RANGE\n",
        "    retriable = True\n    error_code = ErrorCode.OFFSET_OUT_OF_RANGE\n",
    )
    assert edited != current
    assert generate_errors.render_errors(edited) == current


def test_the_literal_codes_of_the_compiled_modules_match_the_table() -> None:
    for name in error_codes.__all__:
        if name != "ErrorCode":
            value = getattr(error_codes, name)
            assert type(value) is int and value == ErrorCode[name], name


def test_all_lists_only_existing_documented_names() -> None:
    assert len(set(errors.__all__)) == len(errors.__all__)
    for name in errors.__all__:
        obj = getattr(errors, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name


def test_classification_follows_the_java_client() -> None:
    retriable = {code for code, cls in ERROR_CODES.items() if cls.retriable}
    invalid_metadata = {code for code, cls in ERROR_CODES.items() if cls.invalid_metadata}
    assert invalid_metadata == JAVA_INVALID_METADATA
    assert retriable == JAVA_INVALID_METADATA | JAVA_RETRIABLE_ONLY
    for code in JAVA_INVALID_METADATA:
        assert issubclass(ERROR_CODES[code], InvalidMetadataError)


def test_client_side_classes_double_as_broker_codes() -> None:
    assert ERROR_CODES[3] is errors.UnknownTopicOrPartitionError
    assert ERROR_CODES[7] is errors.RequestTimedOutError
    assert ERROR_CODES[10] is errors.RecordTooLargeError
    assert ERROR_CODES[17] is errors.InvalidTopicError
    assert ERROR_CODES[35] is errors.UnsupportedVersionError
    assert ERROR_CODES[90] is errors.ProducerFencedError


def test_security_errors_share_their_family_base() -> None:
    for code in (29, 30, 31, 53, 65):
        assert issubclass(ERROR_CODES[code], AuthorizationError)
    for code in (33, 34, 58):
        assert issubclass(ERROR_CODES[code], AuthenticationError)
    assert ERROR_CODES[29].__name__ == "TopicAuthorizationFailedError"
    assert ERROR_CODES[31].__name__ == "ClusterAuthorizationFailedError"
    assert ERROR_CODES[53].__name__ == "TransactionalIdAuthorizationFailedError"
    assert ERROR_CODES[58].__name__ == "SaslAuthenticationFailedError"


def test_producer_relevant_classes_have_their_codes() -> None:
    expected = {
        "CorruptMessageError": 2,
        "CoordinatorLoadInProgressError": 14,
        "CoordinatorNotAvailableError": 15,
        "NotCoordinatorError": 16,
        "NotEnoughReplicasError": 19,
        "NotEnoughReplicasAfterAppendError": 20,
        "InvalidRequiredAcksError": 21,
        "PolicyViolationError": 44,
        "OutOfOrderSequenceNumberError": 45,
        "DuplicateSequenceNumberError": 46,
        "InvalidProducerEpochError": 47,
        "InvalidTxnStateError": 48,
        "ConcurrentTransactionsError": 51,
        "KafkaStorageError": 56,
        "UnknownProducerIdError": 59,
        "FencedLeaderEpochError": 74,
        "UnknownLeaderEpochError": 75,
        "InvalidRecordError": 87,
        "ThrottlingQuotaExceededError": 89,
        "TransactionAbortableError": 120,
    }
    for name, code in expected.items():
        assert getattr(errors, name).error_code == code, name
    # As Java's UnknownProducerIdException extends OutOfOrderSequenceException.
    assert issubclass(UnknownProducerIdError, OutOfOrderSequenceNumberError)


def test_error_for_code_builds_an_instance_with_the_broker_message() -> None:
    exc = error_for_code(6, "leader moved to 3")
    assert type(exc) is NotLeaderOrFollowerError
    assert exc.retriable and exc.invalid_metadata
    assert "leader moved to 3" in str(exc)
    assert "NOT_LEADER_OR_FOLLOWER" in str(exc) and "6" in str(exc)
    with pytest.raises(InvalidMetadataError):
        raise exc


def test_error_for_code_without_message_describes_the_error() -> None:
    exc = error_for_code(19)
    assert "NOT_ENOUGH_REPLICAS" in exc.message
    assert "in-sync replicas" in exc.message


@pytest.mark.parametrize("message", [None, "denied by ACL"])
@pytest.mark.parametrize("code", [29, 5000])
def test_error_for_code_says_where_the_error_applies(code: int, message: str | None) -> None:
    exc = error_for_code(code, message, where="topic-partition orders-3")
    assert str(exc).endswith("(topic-partition orders-3)")
    if message is not None:
        assert message in str(exc)
    assert "(" not in str(error_for_code(code, message))


@pytest.mark.parametrize("code", [0x7FFF, 134, -2, 5000])
def test_unknown_codes_become_unknown_server_error_with_the_number(code: int) -> None:
    exc = error_for_code(code, "strange")
    assert type(exc) is UnknownServerError
    assert exc.code == code
    assert str(code) in str(exc) and "strange" in str(exc)
    assert not exc.retriable
    server_error = error_for_code(-1)
    assert isinstance(server_error, UnknownServerError) and server_error.code == -1


def test_code_zero_is_not_an_error() -> None:
    with pytest.raises(ValueError):
        error_for_code(0)


def test_instances_may_override_retriable() -> None:
    assert not errors.InvalidRecordError().retriable
    assert errors.InvalidRecordError("x", retriable=True).retriable
    assert not errors.NotEnoughReplicasError("x", retriable=False).retriable
    assert errors.NotEnoughReplicasError().retriable


def test_client_errors_are_also_builtin_errors() -> None:
    assert issubclass(ConfigurationError, ValueError)
    assert issubclass(SerializationError, TypeError)
    assert issubclass(PartitionerError, ValueError)
    assert ConfigurationError.error_code is None


def test_kafka_error_keeps_its_signature() -> None:
    exc = KafkaError("boom", retriable=True)
    assert exc.message == "boom" and exc.retriable
    assert KafkaError().message == ""
    assert KafkaError.error_code is None and KafkaError.error_name is None


def test_names_and_classification_agree_with_kafka_python() -> None:
    kafka_errors = pytest.importorskip("kafka.errors")
    candidates: list[Any] = [
        cls
        for cls in vars(kafka_errors).values()
        if isinstance(cls, type) and issubclass(cls, kafka_errors.BrokerResponseError)
    ]
    theirs = {cls.errno: cls for cls in candidates if cls.errno not in (None, 0)}
    # kafka-python keeps older protocol names for a few codes.
    renamed = {
        -1: "UNKNOWN",
        6: "NOT_LEADER_FOR_PARTITION",
        10: "MESSAGE_SIZE_TOO_LARGE",
        17: "INVALID_TOPIC",
        39: "INVALID_REPLICATION_ASSIGNMENT",
    }
    # Where kafka-python departs from Java: CorruptRecordException is a RetriableException,
    # UnknownLeaderEpochException is not an InvalidMetadataException.
    java_differs = {2, 75}
    assert len(theirs) > 100
    for code, other in theirs.items():
        ours = ERROR_CODES[code]
        assert other.message == renamed.get(code, ours.error_name), code
        if code not in java_differs:
            assert ours.retriable == other.retriable, code
            assert ours.invalid_metadata == bool(getattr(other, "invalid_metadata", False)), code


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as exc:
        return exc


def test_error_copy_for_a_record_future_keeps_the_traceback_and_context() -> None:
    from aioproducer._core.futures import error_copy

    original = _raised(errors.NotEnoughReplicasError("too few in sync"))
    original.__cause__ = ValueError("cause")
    clone = error_copy(original)
    assert clone is not original and type(clone) is type(original)
    assert str(clone) == "too few in sync" and clone.retriable
    assert clone.__traceback__ is original.__traceback__
    assert clone.__cause__ is original.__cause__


def test_error_copy_fresh_starts_a_traceback_with_the_original_as_context() -> None:
    from aioproducer._core.futures import error_copy

    original = _raised(errors.SenderCrashedError("the sender task crashed"))
    clone = error_copy(original, "the record was not sent", fresh=True)
    assert type(clone) is errors.SenderCrashedError
    assert clone.message == "the record was not sent: the sender task crashed"
    assert clone.__traceback__ is None
    assert clone.__context__ is original and not clone.__suppress_context__
    assert error_copy(original, fresh=True).message == "the sender task crashed"
