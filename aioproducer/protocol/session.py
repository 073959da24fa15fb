"""The conversation with one broker over one connection, without the connection (sans-I/O).

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

A :class:`Session` holds what a connection knows between its reads and writes: the versions
negotiated with the broker (ApiVersions), the next correlation id, the requests in flight in
the order they were sent, the correlation ids of requests sent without expecting a response
(Produce with ``acks=0``), and the bytes of a response frame that has not fully arrived. It
turns a request into the bytes to write (:meth:`Session.send`), and the bytes read into the
outcomes of the requests they answer (:meth:`Session.receive_data`); it never reads, writes,
sleeps or awaits, so it is driven the same way by an :mod:`asyncio` protocol
(:class:`~aioproducer.net.connection.BrokerConnection`) and by a test pushing bytes.

What the session decides (the rest of the failure policy is the connection's):

- A response frame's size prefix is below 4, above ``max_response_size`` or above what a
  response to the oldest in-flight request can take
  (:meth:`~aioproducer.protocol.api.Request.response_size_limit`), or a response carries a
  correlation id that no request explains: a :class:`Failure` with a
  :class:`~aioproducer.errors.CorruptResponseError` for the oldest in-flight request. Nothing
  is read, let alone allocated, past the size prefix. A size prefix that is a TLS record
  header is a :class:`~aioproducer.errors.ConfigurationError`.
- A response cannot be decoded: a :class:`Failure` with a
  :class:`~aioproducer.errors.CorruptResponseError` for that request, because the byte stream
  can no longer be trusted.
- Bytes arrive while no request awaits a response: a :class:`Failure` (and a warning). After
  requests sent without expecting a response, which some brokers answer anyway, the rest of
  such a frame must come within the request timeout (:meth:`Session.timed_out`).
- The oldest in-flight request is older than the request timeout: :meth:`Session.timed_out`
  returns a :class:`Failure` with a :class:`~aioproducer.errors.RequestTimedOutError`.

After a :class:`Failure` the connection must close; :meth:`Session.close` then gives the
error each request still in flight fails with.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from aioproducer.errors import (
    ConfigurationError,
    CorruptResponseError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from aioproducer.protocol.api import (
    ADDED_IN,
    CLIENT_THROTTLES_FROM,
    SMALL_RESPONSE_LIMIT,
    ApiKey,
    Request,
    Response,
    response_header_flexible,
)
from aioproducer.protocol.error_codes import UNSUPPORTED_VERSION
from aioproducer.protocol.framing import encode_request, read_correlation_id, split_response_header
from aioproducer.protocol.messages import ApiVersionsResponse

__all__ = ["MIN_FRAME_SIZE", "Failure", "Session"]

log = logging.getLogger("aioproducer.net")

#: The smallest legal response frame: a response header is at least its 4-byte correlation id.
MIN_FRAME_SIZE: Final = 4

# Compacting the receive buffer moves the unread tail to the front; doing it only once the read
# offset is large (and past half the buffer) keeps the total copying linear in the bytes read.
_COMPACT_THRESHOLD: Final = 64 << 10

# How many correlation ids of requests sent without expecting a response (Produce with acks=0)
# are remembered, to recognise the answers some brokers send anyway (Tansu, librdkafka's mock).
# Such answers come back in order, so a short memory is enough.
_UNANSWERED_MEMORY: Final = 1024

_CORRELATION_ID_MASK: Final = 0x7FFFFFFF

#: What the caller attaches to each request it sends, and gets back with the outcome (the
#: connection's future of the response).
W = TypeVar("W")

# (correlation id, request, version, waiter, sent at)
_InFlight = tuple[int, Request[Any], int, W, float]


def _byte_count(count: int) -> str:
    return "1 byte" if count == 1 else f"{count} bytes"


class Failure:
    """The byte stream can no longer be trusted (or a request timed out): close the connection.

    Attributes:
        head_error: what the oldest in-flight request fails with (None: it fails as the others
            do, with a retriable connection error).
        cause: why the connection closes.
    """

    __slots__ = ("cause", "head_error")

    def __init__(self, head_error: KafkaError | None, cause: KafkaError) -> None:
        self.head_error = head_error
        self.cause = cause

    def __repr__(self) -> str:
        return f"<Failure {self.cause!r}>"


def _decode_unsupported_api_versions(
    request: Request[Any], body: memoryview, version: int
) -> Response:
    """Read an UNSUPPORTED_VERSION answer to ApiVersions, whatever its layout.

    Kafka answers in the v0 layout, listing the ApiVersions range it speaks; librdkafka's mock
    cluster answers in the layout that was asked for, with an array count that does not match
    its entries. Only the error code is essential: without a readable range the handshake
    retries with v0, which every broker speaks.
    """
    for candidate in (0, version):
        try:
            response: Response = request.decode_response(body, candidate)
        except CorruptResponseError:
            continue
        return response
    return ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=[])


class Session(Generic[W]):
    """Correlation ids, in-flight order, framing and version choice for one connection.

    Args:
        description: how messages name the broker (``node 1 (host:9092)``).
        client_id: the client id every request header carries.
        max_in_flight: how many requests may await a response at once (once ready).
        max_response_size: the largest response frame accepted.
        request_timeout_ms: how long a request may await its response.
        security_protocol: the configured security protocol's name, for the message when a
            broker answers with TLS.
        clock: the monotonic clock (seconds) that dates the start of a frame nobody awaits;
            every other time is passed in.

    Attributes:
        api_versions: ``{api_key: (min_version, max_version)}`` the broker supports (see
            :meth:`set_api_versions`).
    """

    def __init__(
        self,
        description: str,
        *,
        client_id: str | None,
        max_in_flight: int,
        max_response_size: int,
        request_timeout_ms: int,
        security_protocol: str,
        clock: Callable[[], float],
    ) -> None:
        self.description = description
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._client_id = client_id
        self._max_in_flight = max_in_flight
        self._max_response_size = max_response_size
        # A size prefix up to this is accepted whatever the request (the size cap of every
        # API is at least SMALL_RESPONSE_LIMIT): the per-request cap is looked up only above.
        self._always_accepted_size = min(SMALL_RESPONSE_LIMIT, max_response_size)
        self._request_timeout_ms = request_timeout_ms
        self._request_timeout = request_timeout_ms / 1000.0
        self._security_protocol = security_protocol
        self._clock = clock
        self._closed = False
        self._in_flight: deque[_InFlight[W]] = deque()
        self._unanswered_ids: deque[int] = deque(maxlen=_UNANSWERED_MEMORY)
        self._next_correlation_id = 0
        self._recv_buffer = bytearray()
        self._recv_offset = 0
        # Bytes received in all, and where in that stream the incomplete frame buffered with
        # nothing in flight starts and since when (clock seconds) it waits for its rest.
        self._received_bytes = 0
        self._partial_frame_start = -1
        self._partial_frame_since: float | None = None
        self._versions_cache: dict[type[Request[Any]], int] = {}
        # KIP-219: until when (clock seconds) the broker asked to be sent nothing.
        self.throttled_until = 0.0

    # ---- state -------------------------------------------------------------------------------

    def in_flight_count(self) -> int:
        """How many requests await a response."""
        return len(self._in_flight)

    def oldest_request_sent_at(self) -> float | None:
        """When the oldest in-flight request was sent (clock seconds), or None."""
        return self._in_flight[0][4] if self._in_flight else None

    def has_unanswered(self) -> bool:
        """True once a request was sent without expecting a response (Produce with acks=0)."""
        return len(self._unanswered_ids) > 0

    def receive_buffer_size(self) -> int:
        """The bytes held of what was received: the start of a frame whose rest has not come
        yet, and handled bytes not yet compacted away (0 once closed)."""
        return len(self._recv_buffer)

    @property
    def partial_frame_since(self) -> float | None:
        """Since when (clock seconds) the start of a frame that no request awaits waits for
        its rest; None when none does. The connection wakes up after the request timeout to
        call :meth:`timed_out`."""
        return self._partial_frame_since

    # ---- versions ----------------------------------------------------------------------------

    def set_api_versions(self, api_versions: dict[int, tuple[int, int]]) -> None:
        """Adopt the version ranges of the broker's ApiVersions answer."""
        self.api_versions = api_versions
        self._versions_cache.clear()

    def negotiate(self, request_type: type[Request[Any]], highest: int | None = None) -> int:
        """The highest version of ``request_type`` both this client and the broker support.

        Args:
            request_type: the request class.
            highest: a lower limit than the class's ``MAX_VERSION`` for this request (see
                :meth:`~aioproducer.protocol.api.Request.highest_version`).

        Raises:
            UnsupportedVersionError: the broker does not know the API, or the ranges do not
                overlap (the message gives both ranges).
        """
        cached = self._versions_cache.get(request_type)
        if cached is None:
            cached = self._negotiate(request_type)
        if highest is None or highest >= cached:
            return cached
        broker_min = self.api_versions[request_type.API_KEY][0]
        if highest < max(request_type.MIN_VERSION, broker_min):
            raise UnsupportedVersionError(
                f"{self.description} supports {request_type.__name__} v{broker_min} and up; "
                f"this request may be sent only up to v{highest}"
            )
        return highest

    def _negotiate(self, request_type: type[Request[Any]]) -> int:
        name = request_type.__name__
        broker_range = self.api_versions.get(request_type.API_KEY)
        if broker_range is None:
            since = ADDED_IN.get(request_type.API_KEY)
            raise UnsupportedVersionError(
                f"{self.description} does not support {name} (api key {request_type.API_KEY}"
                + (f"; brokers offer it from Kafka {since} on)" if since else ")")
            )
        broker_min, broker_max = broker_range
        high = min(request_type.MAX_VERSION, broker_max)
        if high < max(request_type.MIN_VERSION, broker_min):
            raise UnsupportedVersionError(
                f"{self.description} supports {name} v{broker_min}-v{broker_max}; "
                f"aioproducer implements v{request_type.MIN_VERSION}-v{request_type.MAX_VERSION}"
            )
        self._versions_cache[request_type] = high
        return high

    # ---- sending -----------------------------------------------------------------------------

    def send(
        self,
        request: Request[Any],
        version: int | None,
        now: float,
        waiter: W,
        limit_in_flight: bool = True,
    ) -> tuple[list[bytes | memoryview], bool]:
        """Frame ``request`` and put it in flight; the caller writes the parts returned.

        Args:
            request: the version-neutral request.
            version: the version to encode; None lets :meth:`negotiate` pick it.
            now: the time the request is sent (clock seconds), for :meth:`timed_out`.
            waiter: what :meth:`receive_data` hands back with the request's outcome.
            limit_in_flight: refuse the request when ``max_in_flight`` requests already await
                a response (False during the handshake, when only it sends).

        Returns:
            The framed request's buffers (the body's own buffers, not copied), and whether
            a response is expected: when not (Produce with ``acks=0``), ``waiter`` is not kept.

        Raises:
            IllegalStateError: ``max_in_flight`` requests are already in flight.
            UnsupportedVersionError: no version in common (from :meth:`negotiate`).
        """
        expects_response = request.expects_response()
        if expects_response and limit_in_flight and len(self._in_flight) >= self._max_in_flight:
            raise IllegalStateError(
                f"{self.description} already has {len(self._in_flight)} requests in flight "
                "(max_in_flight_requests_per_connection); check can_send() first"
            )
        if version is None:
            version = self.negotiate(type(request), request.highest_version())
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & _CORRELATION_ID_MASK
        parts = encode_request(request, version, correlation_id, self._client_id)
        if expects_response:
            self._in_flight.append((correlation_id, request, version, waiter, now))
        else:
            self._unanswered_ids.append(correlation_id)
        return parts, expects_response

    # ---- receiving ---------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> tuple[list[tuple[W, Response]], Failure | None]:
        """Split ``data`` (and what came before it) into frames and match them to requests.

        Returns:
            The waiter and response of each request answered, in send order, and the
            :class:`Failure` that must close the connection, if any (then nothing more is
            read; a response that cannot be decoded is one, with a
            :class:`~aioproducer.errors.CorruptResponseError` for its request). Nothing is
            returned once the session has failed or closed.
        """
        outcomes: list[tuple[W, Response]] = []
        if self._closed:
            return outcomes, None
        self._received_bytes += len(data)
        buffer = self._recv_buffer
        if len(buffer) > self._recv_offset:
            buffer += data
            failure = self._read_buffered_frames(outcomes)
        else:
            failure = self._read_frames_from(data, outcomes)
        if failure is None:
            if len(self._recv_buffer) > self._recv_offset:
                failure = self._partial_frame_left()
            else:
                self._partial_frame_since = None
        if failure is not None:
            self._closed = True
        return outcomes, failure

    def _read_frames_from(self, data: bytes, outcomes: list[tuple[W, Response]]) -> Failure | None:
        # Fast path with nothing buffered: frames are slices of the immutable chunk, no copy.
        end = len(data)
        view = memoryview(data)
        position = 0
        while end - position >= 4:
            size = int.from_bytes(view[position : position + 4], "big", signed=True)
            failure = self._check_frame_size(size)
            if failure is not None:
                return failure
            frame_end = position + 4 + size
            if frame_end > end:
                break
            failure = self._handle_frame(view[position + 4 : frame_end], outcomes)
            if failure is not None:
                return failure
            position = frame_end
        if position < end:
            self._recv_buffer = bytearray(view[position:])
            self._recv_offset = 0
        return None

    def _read_buffered_frames(self, outcomes: list[tuple[W, Response]]) -> Failure | None:
        buffer = self._recv_buffer
        position = self._recv_offset
        end = len(buffer)
        while end - position >= 4:
            size = int.from_bytes(buffer[position : position + 4], "big", signed=True)
            failure = self._check_frame_size(size)
            if failure is not None:
                return failure
            frame_end = position + 4 + size
            if frame_end > end:
                break
            if frame_end == end:
                # The buffer ends with this frame (typical for a large response that came in
                # many chunks): hand the buffer over with the frame instead of copying it.
                self._recv_buffer = bytearray()
                self._recv_offset = 0
                return self._handle_frame(memoryview(buffer)[position + 4 :], outcomes)
            # Copy the frame out (slicing copies): a view into the buffer would pin it, and a
            # pinned bytearray cannot grow or be compacted.
            failure = self._handle_frame(memoryview(buffer[position + 4 : frame_end]), outcomes)
            if failure is not None:
                return failure
            position = frame_end
        if position == end:
            buffer.clear()
            self._recv_offset = 0
        elif position >= _COMPACT_THRESHOLD and position * 2 >= end:
            del buffer[:position]
            self._recv_offset = 0
        else:
            self._recv_offset = position
        return None

    def _partial_frame_left(self) -> Failure | None:
        """The start of a frame is buffered after a read: bound the wait for its rest."""
        if self._in_flight:
            # An answer to the oldest request: its request timeout bounds the wait.
            self._partial_frame_since = None
            return None
        unread = len(self._recv_buffer) - self._recv_offset
        if not self._unanswered_ids:
            # No request awaits an answer: these bytes can never be one.
            return self._unsolicited(
                f"{_byte_count(unread)} arrived while no request awaited a response"
            )
        # Perhaps an answer to a request sent without expecting one (acks=0), which some
        # brokers send: its rest must come within the request timeout.
        start = self._received_bytes - unread
        if start != self._partial_frame_start or self._partial_frame_since is None:
            self._partial_frame_start = start
            self._partial_frame_since = self._clock()
        return None

    def _check_frame_size(self, size: int) -> Failure | None:
        if MIN_FRAME_SIZE <= size <= self._always_accepted_size:
            return None
        limit = self._max_response_size
        which = "max_response_size"
        if self._in_flight:
            _, request, version, _, _ = self._in_flight[0]
            request_limit = request.response_size_limit()
            if request_limit is not None and request_limit < limit:
                limit = request_limit
                which = f"the most a response to {type(request).__name__} v{version} may take"
        elif limit > SMALL_RESPONSE_LIMIT:
            # An answer to an acks=0 Produce request, or bytes nobody asked for.
            limit = SMALL_RESPONSE_LIMIT
            which = "the most a response may take with no request in flight"
        if MIN_FRAME_SIZE <= size <= limit:
            return None
        if (size >> 24) & 0xFF in (0x15, 0x16) and (size >> 16) & 0xFF == 0x03:
            # A TLS record header (alert or handshake, version 3.x) where a Kafka size
            # prefix should be: retrying cannot help, so say what is wrong.
            error = ConfigurationError(
                f"{self.description} answered with TLS: its listener expects "
                "security_protocol='SSL' or 'SASL_SSL', not "
                f"{self._security_protocol!r}"
            )
            return Failure(error, error)
        # Never wait for (or allocate) what an untrusted prefix announces.
        return self._corrupt(
            f"response size prefix {size} is outside [{MIN_FRAME_SIZE}, {limit}] ({which})"
        )

    def _corrupt(self, what: str) -> Failure:
        error = CorruptResponseError(f"corrupt response from {self.description}: {what}")
        return Failure(error, error)

    def _unsolicited(self, what: str) -> Failure:
        # Nothing is in flight to carry the error: say it in the log.
        log.warning("corrupt response from %s: %s; closing the connection", self.description, what)
        return self._corrupt(what)

    def _handle_frame(
        self, frame: memoryview, outcomes: list[tuple[W, Response]]
    ) -> Failure | None:
        correlation_id = read_correlation_id(frame)
        in_flight = self._in_flight
        if not in_flight or in_flight[0][0] != correlation_id:
            return self._handle_unexpected(correlation_id)
        entry = in_flight.popleft()
        _, request, version, waiter, _ = entry
        api_key = request.API_KEY
        try:
            _, body = split_response_header(frame, response_header_flexible(api_key, version))
            if (
                api_key == ApiKey.API_VERSIONS
                and version > 0
                and body.nbytes >= 2
                and int.from_bytes(body[:2], "big") == UNSUPPORTED_VERSION
            ):
                response = _decode_unsupported_api_versions(request, body, version)
                # Encoded by the broker at v0, which has no throttle time.
                throttle_ms = 0
            else:
                response = request.decode_response(body, version)
                throttle_ms = getattr(response, "throttle_time_ms", 0)
        except Exception as exc:
            # Not only CorruptResponseError: a decoder bug on hostile bytes must not escape
            # into the event loop's exception handler and leave the request pending.
            error = CorruptResponseError(
                f"could not decode the response to {type(request).__name__} v{version} "
                f"(correlation id {correlation_id}) from {self.description}: {exc}"
            )
            error.__cause__ = exc
            in_flight.appendleft(entry)  # the request fails with the error, the others after it
            return Failure(error, error)
        if throttle_ms > 0:
            first = CLIENT_THROTTLES_FROM.get(api_key)
            if first is not None and version >= first:
                # Java's NetworkClient.maybeThrottle: nothing more to this broker until then.
                until = self._clock() + throttle_ms / 1000.0
                if until > self.throttled_until:
                    self.throttled_until = until
        outcomes.append((waiter, response))
        return None

    def _handle_unexpected(self, correlation_id: int) -> Failure | None:
        unanswered = self._unanswered_ids
        if correlation_id in unanswered:
            # An answer to a request sent without expecting one (acks=0): real Kafka sends
            # none, but some brokers do. The ones before it were not answered; forget them.
            while unanswered and unanswered.popleft() != correlation_id:
                pass
            log.debug(
                "%s answered correlation id %d, sent without expecting a response; ignored",
                self.description,
                correlation_id,
            )
            return None
        if not self._in_flight:
            return self._unsolicited(
                f"got correlation id {correlation_id}, expected none (nothing in flight)"
            )
        return self._corrupt(
            f"got correlation id {correlation_id}, expected {self._in_flight[0][0]}"
        )

    # ---- timeouts and closing ------------------------------------------------------------------

    def timed_out(self, now: float) -> Failure | None:
        """The :class:`Failure` that closes the connection when a wait has lasted too long.

        The oldest in-flight request older than the request timeout fails with
        :class:`~aioproducer.errors.RequestTimedOutError`. With nothing in flight, the start
        of a frame that has waited for its rest as long is corrupt (an answer to an
        ``acks=0`` request that stalled). None when nothing has timed out.
        """
        if self._closed:
            return None
        if not self._in_flight:
            since = self._partial_frame_since
            if since is None or now - since < self._request_timeout:
                return None
            unread = len(self._recv_buffer) - self._recv_offset
            failure = self._unsolicited(
                f"{_byte_count(unread)} of a frame arrived while no request awaited a response, "
                f"and not the rest within {self._request_timeout_ms} ms (request_timeout_ms)"
            )
        else:
            correlation_id, request, version, _, sent_at = self._in_flight[0]
            if now - sent_at < self._request_timeout:
                return None
            error = RequestTimedOutError(
                f"{type(request).__name__} v{version} (correlation id {correlation_id}) to "
                f"{self.description} got no response within {self._request_timeout_ms} ms "
                "(request_timeout_ms); closing the connection"
            )
            failure = Failure(error, error)
        self._closed = True
        return failure

    def close(
        self, head_error: KafkaError | None, cause: BaseException | None
    ) -> list[tuple[W, KafkaError]]:
        """End the session: the error each request still in flight fails with, in send order.

        The oldest fails with ``head_error`` if given; the others (all, without it) with a
        retriable :class:`~aioproducer.errors.KafkaConnectionError` that names the request and
        has ``cause`` as its cause. The receive buffer is dropped.
        """
        self._closed = True
        in_flight, self._in_flight = self._in_flight, deque()
        self._recv_buffer = bytearray()
        self._recv_offset = 0
        self._partial_frame_since = None
        reason = f"closed ({type(cause).__name__}: {cause})" if cause is not None else "closed"
        failed: list[tuple[W, KafkaError]] = []
        for index, (correlation_id, request, version, waiter, _) in enumerate(in_flight):
            if index == 0 and head_error is not None:
                error: KafkaError = head_error
            else:
                error = KafkaConnectionError(
                    f"connection to {self.description} {reason} while "
                    f"{type(request).__name__} v{version} (correlation id {correlation_id}) "
                    "was in flight"
                )
                error.__cause__ = cause
            failed.append((waiter, error))
        return failed
