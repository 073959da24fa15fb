"""The sans-I/O session, driven by pushing bytes: no socket, no event loop, a scripted clock.

- ``test_requests_are_framed_with_increasing_correlation_ids``: the bytes a request becomes.
- ``test_responses_come_back_with_their_waiters_in_send_order``: one chunk, many frames.
- ``test_a_frame_split_into_single_bytes_is_buffered_until_whole``: partial frames.
- ``test_an_unexplained_correlation_id_fails_the_oldest_request``: and the rest, on close.
- ``test_a_size_prefix_above_the_limit_fails_before_reading_on``: nothing buffered past it.
- ``test_a_tls_record_where_a_size_should_be_is_a_configuration_error``
- ``test_bytes_with_nothing_in_flight_fail_with_a_warning``
- ``test_an_undecodable_response_fails_its_request_then_the_session``
- ``test_answers_to_requests_sent_without_expecting_one_are_ignored``: acks=0 and brokers
  that answer anyway; the rest of such a frame must come within the request timeout.
- ``test_the_oldest_request_times_out``
- ``test_max_in_flight_is_enforced_unless_told_otherwise``
- ``test_versions_are_negotiated_from_the_broker_ranges``
- ``test_a_throttled_answer_holds_the_broker_only_where_kip_219_says_so``
"""

from __future__ import annotations

import logging
import struct

import pytest

from aioproducer.errors import (
    ConfigurationError,
    CorruptResponseError,
    IllegalStateError,
    KafkaConnectionError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from aioproducer.protocol.api import ApiKey
from aioproducer.protocol.messages import ApiVersionsRequest, ProduceRequest
from aioproducer.protocol.session import Session
from tests.support.echo import EchoRequest, EchoResponse

DESCRIPTION = "node 1 (localhost:9092)"
TIMEOUT_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_session(
    clock: Clock | None = None, *, max_in_flight: int = 5, max_response_size: int = 32 << 20
) -> Session[str]:
    return Session(
        DESCRIPTION,
        client_id="test-client",
        max_in_flight=max_in_flight,
        max_response_size=max_response_size,
        request_timeout_ms=TIMEOUT_MS,
        security_protocol="PLAINTEXT",
        clock=clock or Clock(),
    )


def frame(correlation_id: int, body: bytes) -> bytes:
    """A response frame with header v0."""
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


def test_requests_are_framed_with_increasing_correlation_ids() -> None:
    session = make_session()
    for correlation_id in range(3):
        parts, expects_response = session.send(EchoRequest(b"ping"), 4, 0.0, "w")
        assert expects_response
        client = b"\x00\x0btest-client"
        header = struct.pack(">hhi", ApiKey.METADATA, 4, correlation_id) + client
        size = struct.pack(">i", len(header) + 4)
        assert b"".join(parts) == size + header + b"ping"
    assert session.in_flight_count() == 3
    assert session.oldest_request_sent_at() == 0.0


def test_responses_come_back_with_their_waiters_in_send_order() -> None:
    session = make_session()
    for name in ("a", "b", "c"):
        session.send(EchoRequest(name.encode()), 4, 0.0, name)
    outcomes, failure = session.receive_data(frame(0, b"A") + frame(1, b"B") + frame(2, b"C"))
    assert failure is None
    assert outcomes == [
        ("a", EchoResponse(b"A")),
        ("b", EchoResponse(b"B")),
        ("c", EchoResponse(b"C")),
    ]
    assert session.in_flight_count() == 0
    assert session.receive_buffer_size() == 0


def test_a_frame_split_into_single_bytes_is_buffered_until_whole() -> None:
    session = make_session()
    session.send(EchoRequest(b"a"), 4, 0.0, "a")
    session.send(EchoRequest(b"b"), 4, 0.0, "b")
    data = frame(0, b"first answer") + frame(1, b"second")
    outcomes: list[tuple[str, object]] = []
    for index in range(len(data)):
        received, failure = session.receive_data(data[index : index + 1])
        assert failure is None
        outcomes += received
        if index < len(frame(0, b"first answer")) - 1:
            assert not outcomes
            assert session.partial_frame_since is None  # a request awaits these bytes
    assert outcomes == [("a", EchoResponse(b"first answer")), ("b", EchoResponse(b"second"))]
    assert session.receive_buffer_size() == 0


def test_an_unexplained_correlation_id_fails_the_oldest_request() -> None:
    session = make_session()
    session.send(EchoRequest(b"a"), 4, 0.0, "a")
    session.send(EchoRequest(b"b"), 4, 0.0, "b")
    outcomes, failure = session.receive_data(frame(1000, b"nobody asked"))
    assert outcomes == []
    assert failure is not None
    assert isinstance(failure.head_error, CorruptResponseError)
    assert str(failure.head_error) == (
        f"corrupt response from {DESCRIPTION}: got correlation id 1000, expected 0"
    )
    failed = session.close(failure.head_error, failure.cause)
    assert [waiter for waiter, _ in failed] == ["a", "b"]
    assert failed[0][1] is failure.head_error
    second = failed[1][1]
    assert type(second) is KafkaConnectionError and second.retriable
    assert "EchoRequest v4 (correlation id 1) was in flight" in str(second)
    assert second.__cause__ is failure.cause
    # Nothing more is read once the session failed.
    assert session.receive_data(frame(1, b"late")) == ([], None)


def test_a_size_prefix_above_the_limit_fails_before_reading_on() -> None:
    session = make_session(max_response_size=4 << 20)
    session.send(EchoRequest(b"a", limit=2 << 20), 4, 0.0, "a")
    outcomes, failure = session.receive_data(struct.pack(">i", (2 << 20) + 1) + b"\x00" * 10)
    assert outcomes == []
    assert failure is not None and isinstance(failure.head_error, CorruptResponseError)
    assert f"response size prefix {(2 << 20) + 1} is outside [4, {2 << 20}]" in str(failure.cause)
    assert "the most a response to EchoRequest v4 may take" in str(failure.cause)
    assert session.receive_buffer_size() == 0
    # Below the minimum, whatever the request.
    session = make_session()
    session.send(EchoRequest(b"a"), 4, 0.0, "a")
    _, failure = session.receive_data(struct.pack(">i", 3))
    assert failure is not None and "outside [4, " in str(failure.cause)


def test_a_tls_record_where_a_size_should_be_is_a_configuration_error() -> None:
    session = make_session()
    session.send(EchoRequest(b"a"), 4, 0.0, "a")
    _, failure = session.receive_data(b"\x15\x03\x03\x00\x02\x02\x50")
    assert failure is not None and isinstance(failure.head_error, ConfigurationError)
    assert "expects security_protocol='SSL' or 'SASL_SSL', not 'PLAINTEXT'" in str(failure.cause)


def test_bytes_with_nothing_in_flight_fail_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    session = make_session()
    with caplog.at_level(logging.WARNING, logger="aioproducer.net"):
        outcomes, failure = session.receive_data(b"\x00\x00")
    assert outcomes == []
    assert failure is not None and failure.head_error is failure.cause
    assert str(failure.cause) == (
        f"corrupt response from {DESCRIPTION}: 2 bytes arrived while no request awaited a response"
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"corrupt response from {DESCRIPTION}: 2 bytes arrived while no request awaited a "
        "response; closing the connection"
    ]


def test_an_undecodable_response_fails_its_request_then_the_session() -> None:
    session = make_session()
    session.send(EchoRequest(b"a"), 4, 0.0, "a")
    session.send(EchoRequest(b"b"), 4, 0.0, "b")
    outcomes, failure = session.receive_data(frame(0, b"garbage") + frame(1, b"fine"))
    assert outcomes == []
    assert failure is not None
    error = failure.head_error
    assert isinstance(error, CorruptResponseError) and failure.cause is error
    assert str(error) == (
        "could not decode the response to EchoRequest v4 (correlation id 0) from "
        f"{DESCRIPTION}: not an echo"
    )
    assert isinstance(error.__cause__, CorruptResponseError)
    [(waiter, head), (later_waiter, later)] = session.close(failure.head_error, failure.cause)
    assert (waiter, head) == ("a", error)
    assert later_waiter == "b" and type(later) is KafkaConnectionError and later.__cause__ is error


def test_answers_to_requests_sent_without_expecting_one_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    session = make_session(clock)
    for _ in range(3):
        _, expects_response = session.send(EchoRequest(b"x", respond=False), 4, 0.0, "unused")
        assert not expects_response
    assert session.in_flight_count() == 0 and session.has_unanswered()
    with caplog.at_level(logging.DEBUG, logger="aioproducer.net"):
        assert session.receive_data(frame(1, b"ok")) == ([], None)
    assert (
        f"{DESCRIPTION} answered correlation id 1, sent without expecting a response; ignored"
        in caplog.messages
    )
    # The start of another such answer: its rest must come within the request timeout.
    assert session.receive_data(frame(2, b"ok")[:5]) == ([], None)
    assert session.partial_frame_since == clock.now
    assert session.timed_out(clock.now + TIMEOUT_MS / 1000 - 0.001) is None
    failure = session.timed_out(clock.now + TIMEOUT_MS / 1000)
    assert failure is not None and isinstance(failure.cause, CorruptResponseError)
    assert str(failure.cause).endswith(
        "5 bytes of a frame arrived while no request awaited a response, and not the rest "
        f"within {TIMEOUT_MS} ms (request_timeout_ms)"
    )


def test_the_rest_of_an_unawaited_frame_ends_the_wait() -> None:
    clock = Clock()
    session = make_session(clock)
    session.send(EchoRequest(b"x", respond=False), 4, 0.0, "unused")
    data = frame(0, b"ok")
    session.receive_data(data[:3])
    assert session.partial_frame_since == clock.now
    assert session.receive_data(data[3:]) == ([], None)
    assert session.partial_frame_since is None
    assert session.timed_out(clock.now + 3600) is None


def test_the_oldest_request_times_out() -> None:
    session = make_session()
    session.send(EchoRequest(b"a"), 4, 10.0, "a")
    session.send(EchoRequest(b"b"), 4, 20.0, "b")
    assert session.timed_out(10.0 + TIMEOUT_MS / 1000 - 0.001) is None
    failure = session.timed_out(10.0 + TIMEOUT_MS / 1000)
    assert failure is not None and isinstance(failure.head_error, RequestTimedOutError)
    assert str(failure.head_error) == (
        f"EchoRequest v4 (correlation id 0) to {DESCRIPTION} got no response within "
        f"{TIMEOUT_MS} ms (request_timeout_ms); closing the connection"
    )
    failed = session.close(failure.head_error, failure.cause)
    assert [w for w, _ in failed] == ["a", "b"] and failed[0][1] is failure.head_error


def test_max_in_flight_is_enforced_unless_told_otherwise() -> None:
    session = make_session(max_in_flight=1)
    session.send(EchoRequest(b"a"), 4, 0.0, "a")
    with pytest.raises(IllegalStateError, match="already has 1 requests in flight"):
        session.send(EchoRequest(b"b"), 4, 0.0, "b")
    session.send(EchoRequest(b"b"), 4, 0.0, "b", False)  # the handshake's requests
    session.send(EchoRequest(b"c", respond=False), 4, 0.0, "c")  # expects no response
    assert session.in_flight_count() == 2


def test_versions_are_negotiated_from_the_broker_ranges() -> None:
    session = make_session()
    with pytest.raises(UnsupportedVersionError, match="does not support EchoRequest"):
        session.negotiate(EchoRequest)
    session.set_api_versions({ApiKey.METADATA: (0, 6)})
    assert session.negotiate(EchoRequest) == 6
    assert session.negotiate(EchoRequest, 5) == 5
    parts, _ = session.send(EchoRequest(b"a"), None, 0.0, "a")
    assert struct.unpack_from(">hh", b"".join(parts), 4) == (ApiKey.METADATA, 6)
    session.set_api_versions({ApiKey.METADATA: (9, 12)})
    with pytest.raises(UnsupportedVersionError, match="supports EchoRequest v9-v12"):
        session.negotiate(EchoRequest)


@pytest.mark.parametrize(("version", "throttles"), [(5, False), (6, True)])
def test_a_throttled_answer_holds_the_broker_only_where_kip_219_says_so(
    version: int, throttles: bool
) -> None:
    # From Produce v6 the broker answers at once and expects the client to wait
    # throttle_time_ms; before, it delayed the answer itself (Java's shouldClientThrottle).
    clock = Clock()
    session = make_session(clock)
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topics=[])
    session.send(request, version, clock.now, "produce")
    # No topics, then throttle_time_ms 500.
    outcomes, failure = session.receive_data(frame(0, struct.pack(">ii", 0, 500)))
    assert failure is None and len(outcomes) == 1
    assert session.throttled_until == (clock.now + 0.5 if throttles else 0.0)


def test_an_api_versions_refusal_encoded_at_v0_throttles_nothing() -> None:
    # Kafka refuses an ApiVersions version it does not know with an answer at v0, which
    # has no throttle time; librdkafka's mock answers in the layout asked for, with an empty
    # array count before one entry: read as v3, the entry's bytes become a throttle time of
    # 1,179,648 ms.
    clock = Clock()
    session = make_session(clock)
    session.send(ApiVersionsRequest(), 3, clock.now, "versions")
    body = bytes.fromhex("0023" "01" "0012" "0000" "0002" "00" "00000000")
    outcomes, failure = session.receive_data(frame(0, body))
    assert failure is None and len(outcomes) == 1
    assert session.throttled_until == 0.0
