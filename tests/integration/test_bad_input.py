"""Bad input never takes the producer down: a property-based test over the public API.

Hypothesis draws records with arguments of every type and value (topics, keys, values,
partitions, timestamps, headers, serializers' outputs) and mixes them with good records,
sent through ``send``, ``send_many`` and ``SyncProducer.send`` to a real broker (Tansu).
The property, checked against what confluent-kafka's consumer reads back:

- a record the rules allow round-trips exactly (key, value, headers, partition, timestamp);
- a record they do not allow is refused in the caller, at once, with a KafkaError (also a
  TypeError or ValueError where it says so) that has a message, and nothing else changes;
- every good record is delivered, and the producer still sends afterwards.

The rules are written here a second time, independently of the producer's code: what
Kafka's Java client accepts. Examples Hypothesis once found are kept as explicit cases.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aioproducer import Producer, ProducerRecord
from aioproducer.embedded import EmbeddedBroker
from aioproducer.errors import KafkaError
from aioproducer.sync import SyncProducer
from tests.support.readback import ConsumedRecord, read_back

PARTITIONS = 3
MAX_TIMESTAMP = 2**63 - 1
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

# ---- the rules, as the Java client has them --------------------------------------------


class Refused(Exception):
    """The oracle's verdict: the producer must refuse this record."""


def _bytes_like(obj: Any) -> bool:
    return isinstance(obj, bytes | bytearray | memoryview)


def _is_int(obj: Any) -> bool:
    return isinstance(obj, int) and not isinstance(obj, bool)


def _serialized(obj: Any, serializer: Callable[[Any], Any] | None) -> bytes | None:
    if serializer is not None:
        try:
            obj = serializer(obj)
        except Exception as exc:
            raise Refused(f"the serializer raised {exc!r}") from None
    if obj is None:
        return None
    if not _bytes_like(obj):
        raise Refused(f"not bytes-like: {type(obj).__name__}")
    return bytes(obj)


def _headers(headers: Any) -> list[tuple[str, bytes | None]]:
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        pairs = list(headers.items())
    else:
        try:
            pairs = list(headers)
        except TypeError:
            raise Refused("headers are not iterable") from None
    out = []
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise Refused(f"not a pair: {pair!r}")
        name, value = pair
        if not isinstance(name, str):
            raise Refused("a header name is not a str")
        try:
            name.encode()
        except UnicodeEncodeError:
            raise Refused("a header name is not UTF-8") from None
        if value is not None and not _bytes_like(value):
            raise Refused("a header value is not bytes-like")
        out.append((name, None if value is None else bytes(value)))
    return out


@dataclass
class Expected:
    """What the consumer must read back for an accepted record."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None
    timestamp: int | None


def oracle(record: Candidate, key_serializer: Any, value_serializer: Any) -> Expected:
    """The record as Kafka stores it, or :class:`Refused`."""
    if record.topic is not _TOPIC_MARK:
        raise Refused("an illegal topic")
    partition = record.partition
    if partition is not None and not (_is_int(partition) and 0 <= partition < PARTITIONS):
        raise Refused("a partition the topic does not have")
    timestamp = record.timestamp_ms
    if timestamp is not None and not (_is_int(timestamp) and 0 <= timestamp <= MAX_TIMESTAMP):
        raise Refused("a timestamp outside 0..2**63-1")
    headers = _headers(record.headers)
    key = _serialized(record.key, key_serializer)
    value = _serialized(record.value, value_serializer)
    return Expected(key, value, headers, partition, timestamp)


# ---- what Hypothesis draws ---------------------------------------------------------------

_TOPIC_MARK = object()  # stands for the test's own topic until the name is known


@dataclass
class Candidate:
    """A record as a user might pass it; ``topic`` is _TOPIC_MARK for the test's topic."""

    topic: Any
    value: Any = None
    key: Any = None
    partition: Any = None
    timestamp_ms: Any = None
    headers: Any = None
    api: str = "send"
    good: bool = False


_small_bytes = st.binary(max_size=40)
_bytes_like_values = st.one_of(
    _small_bytes, _small_bytes.map(bytearray), _small_bytes.map(memoryview)
)
_odd_objects = st.one_of(
    st.text(max_size=12),
    st.text(max_size=4).map(lambda t: t + "\ud800"),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.tuples(st.integers()),
    st.builds(object),
)
_payloads = st.one_of(st.none(), _bytes_like_values, _odd_objects)
_timestamps = st.one_of(
    st.none(),
    st.integers(0, MAX_TIMESTAMP),
    st.integers(max_value=-1),
    st.integers(min_value=2**63),
    st.integers(min_value=2**63, max_value=2**64 + 5),
    st.floats(),
    st.booleans(),
    st.text(max_size=5),
)
_partitions = st.one_of(
    st.none(),
    st.integers(-3, PARTITIONS + 3),
    st.integers(min_value=2**31 - 2),
    st.integers(max_value=-(2**31)),
    st.booleans(),
    st.floats(),
    st.text(max_size=3),
)
_header_names = st.one_of(
    st.text(max_size=8),
    st.just("\ud800"),
    st.binary(max_size=4),
    st.integers(),
    st.none(),
)
_header_values = st.one_of(st.none(), _bytes_like_values, st.text(max_size=4), st.integers())
_headers_strategy = st.one_of(
    st.none(),
    st.lists(st.tuples(_header_names, _header_values), max_size=3),
    st.lists(st.lists(_header_values, min_size=1, max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=5), _header_values, max_size=2),
    st.integers(),
    st.text(max_size=3),
)
_odd_topics = st.one_of(
    st.text(max_size=260).filter(lambda t: not _LEGAL_TOPIC.fullmatch(t) or t in {".", ".."}),
    st.integers(),
    st.none(),
    st.binary(max_size=5),
)


@st.composite
def odd_records(draw: st.DrawFn, api: str) -> Candidate:
    topic = draw(st.one_of(st.just(_TOPIC_MARK), _odd_topics)) if api == "send" else _TOPIC_MARK
    return Candidate(
        topic=topic,
        value=draw(_payloads),
        key=draw(_payloads),
        partition=draw(_partitions),
        timestamp_ms=draw(_timestamps),
        headers=draw(_headers_strategy),
        api=api,
    )


@st.composite
def good_records(draw: st.DrawFn, api: str) -> Candidate:
    return Candidate(
        topic=_TOPIC_MARK,
        value=draw(_small_bytes),
        key=draw(st.one_of(st.none(), _small_bytes)),
        partition=draw(st.one_of(st.none(), st.integers(0, PARTITIONS - 1))),
        headers=draw(st.one_of(st.none(), st.just([("h", b"v")]))),
        api=api,
        good=True,
    )


def _identity(obj: Any) -> Any:
    return obj


def _utf8(obj: Any) -> Any:
    if obj is None or _bytes_like(obj):
        return obj
    return obj.encode()  # an AttributeError for anything but a str


SERIALIZERS: dict[str, Callable[[Any], Any] | None] = {
    "none": None,
    "identity": _identity,
    "utf8": _utf8,
}


@st.composite
def scenarios(draw: st.DrawFn, apis: tuple[str, ...]) -> list[Candidate]:
    records: list[Candidate] = []
    for _ in range(draw(st.integers(1, 8))):
        api = draw(st.sampled_from(apis))
        records.append(draw(good_records(api)))
        records.append(draw(odd_records(api)))
    records.append(draw(good_records(apis[0])))
    return records


# ---- running a scenario ------------------------------------------------------------------


@dataclass
class Outcome:
    """What happened to each record handed to the producer, in the order sent."""

    accepted: list[tuple[Candidate, Any]] = field(default_factory=list)  # (record, future)
    refused: list[tuple[Candidate, BaseException]] = field(default_factory=list)


def _topic(record: Candidate, topic: str) -> Any:
    return topic if record.topic is _TOPIC_MARK else record.topic


def _refused(outcome: Outcome, record: Candidate, exc: BaseException) -> None:
    assert isinstance(exc, KafkaError | TypeError | ValueError), (
        f"{record} was refused with {exc!r}, not a KafkaError, TypeError or ValueError"
    )
    assert str(exc), f"{record} was refused with an error without a message: {exc!r}"
    outcome.refused.append((record, exc))


async def _run_async(
    bootstrap: str, topic: str, records: list[Candidate], serializer: str
) -> Outcome:
    outcome = Outcome()
    chosen = SERIALIZERS[serializer]
    async with Producer(
        bootstrap_servers=bootstrap,
        linger_ms=5,
        key_serializer=chosen,
        value_serializer=chosen,
    ) as producer:
        for record in records:
            if record.api == "send":
                try:
                    future = await producer.send(
                        _topic(record, topic),
                        record.value,
                        record.key,
                        partition=record.partition,
                        timestamp_ms=record.timestamp_ms,
                        headers=record.headers,
                    )
                except Exception as exc:
                    _refused(outcome, record, exc)
                else:
                    outcome.accepted.append((record, future))
                continue
            # send_many: one ProducerRecord per call, so a refusal names a single item.
            try:
                item = ProducerRecord(
                    _topic(record, topic),
                    record.value,
                    record.key,
                    record.partition,
                    record.timestamp_ms,
                    record.headers,
                )
            except Exception as exc:
                _refused(outcome, record, exc)
                continue
            try:
                results = await producer.send_many(topic, [item])
            except KafkaError as exc:
                assert exc.accepted is not None and len(exc.accepted) == 0
                _refused(outcome, record, exc)
            else:
                outcome.accepted.append((record, results.futures[0]))
        await producer.flush()
        for _, future in outcome.accepted:
            await future
    return outcome


def _run_sync(bootstrap: str, topic: str, records: list[Candidate], serializer: str) -> Outcome:
    outcome = Outcome()
    chosen = SERIALIZERS[serializer]
    with SyncProducer(
        bootstrap_servers=bootstrap, linger_ms=5, key_serializer=chosen, value_serializer=chosen
    ) as producer:
        for record in records:
            try:
                future = producer.send(
                    _topic(record, topic),
                    record.value,
                    record.key,
                    partition=record.partition,
                    timestamp_ms=record.timestamp_ms,
                    headers=record.headers,
                )
            except Exception as exc:
                _refused(outcome, record, exc)
                continue
            # Only the loop thread knows the topic's partition count: a partition the topic
            # lacks fails the future, before delivery. Everything else raised above.
            error = future.exception(timeout=30)
            if error is not None:
                assert type(error).__name__ == "UnknownTopicOrPartitionError", error
                _refused(outcome, record, error)
            else:
                outcome.accepted.append((record, future))
        producer.flush()
    return outcome


def check(broker: EmbeddedBroker, topic: str, outcome: Outcome, serializer: str) -> None:
    chosen = SERIALIZERS[serializer]
    for record, exc in outcome.refused:
        assert not record.good, f"a good record was refused: {record} ({exc!r})"
        with pytest.raises(Refused):
            oracle(record, chosen, chosen)
    expected: list[tuple[Expected, Any]] = []
    for record, future in outcome.accepted:
        try:
            wanted = oracle(record, chosen, chosen)
        except Refused as why:
            raise AssertionError(f"{record} should have been refused ({why})") from None
        metadata = future.result()
        if wanted.partition is not None:
            assert metadata.partition == wanted.partition
        expected.append((wanted, metadata))
    consumed = read_back(broker.bootstrap_servers, topic, expected=len(expected))
    assert len(consumed) == len(expected), "records were lost or written twice"
    by_place: dict[tuple[int, int], ConsumedRecord] = {
        (r.partition, r.offset): r for r in consumed
    }
    for wanted, metadata in expected:
        got = by_place[(metadata.partition, metadata.offset)]
        assert (got.key, got.value, got.headers) == (wanted.key, wanted.value, wanted.headers)
        if wanted.timestamp is not None:
            assert got.timestamp == (1, wanted.timestamp)


def _fresh_topic(broker: EmbeddedBroker) -> str:
    name = f"bad-input-{uuid.uuid4().hex[:12]}"
    broker.create_topic(name, partitions=PARTITIONS)
    return name


_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# ---- the properties ----------------------------------------------------------------------

# Examples found by Hypothesis (or by hand) that once took a producer down or lost records.
_TIMESTAMP_PAST_INT64 = [
    Candidate(_TOPIC_MARK, b"good", good=True),
    Candidate(_TOPIC_MARK, b"x", timestamp_ms=2**63),
    Candidate(_TOPIC_MARK, b"after", good=True),
]
_TIMESTAMP_PAST_UINT64 = [
    Candidate(_TOPIC_MARK, b"good", good=True),
    Candidate(_TOPIC_MARK, b"x", timestamp_ms=2**64, api="send_many"),
    Candidate(_TOPIC_MARK, b"after", good=True),
]
_LOOSE_TYPES = [
    Candidate(_TOPIC_MARK, b"x", timestamp_ms=-5),
    Candidate(_TOPIC_MARK, b"x", timestamp_ms=1.5),
    Candidate(_TOPIC_MARK, b"x", partition="0"),
    Candidate(_TOPIC_MARK, b"x", partition=True),
    Candidate(_TOPIC_MARK, b"x", headers=[("\ud800", b"v")]),
    Candidate(_TOPIC_MARK, b"after", good=True),
]


@given(records=scenarios(("send", "send_many")), serializer=st.sampled_from(sorted(SERIALIZERS)))
@example(records=_TIMESTAMP_PAST_INT64, serializer="none")
@example(records=_TIMESTAMP_PAST_UINT64, serializer="none")
@example(records=_LOOSE_TYPES, serializer="none")
@_SETTINGS
def test_async_api_refuses_bad_records_and_delivers_the_rest(
    tansu: EmbeddedBroker, records: list[Candidate], serializer: str
) -> None:
    topic = _fresh_topic(tansu)
    outcome = asyncio.run(_run_async(tansu.bootstrap_servers, topic, records, serializer))
    check(tansu, topic, outcome, serializer)


@given(records=scenarios(("sync",)), serializer=st.sampled_from(sorted(SERIALIZERS)))
@example(records=[*_TIMESTAMP_PAST_INT64, *_LOOSE_TYPES], serializer="none")
@_SETTINGS
def test_sync_producer_refuses_bad_records_and_delivers_the_rest(
    tansu: EmbeddedBroker, records: list[Candidate], serializer: str
) -> None:
    topic = _fresh_topic(tansu)
    outcome = _run_sync(tansu.bootstrap_servers, topic, records, serializer)
    check(tansu, topic, outcome, serializer)


# ---- the sender's fault boundary, on a real broker ---------------------------------------


@pytest.fixture
def poisoned_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the codec fail on any batch holding b"POISON", as a codec bug would."""
    from aioproducer.protocol import compression

    real = compression.compressor

    def compressor(codec: Any, level: Any = None) -> Callable[[Any], bytes]:
        compress = real(codec, level)

        def guarded(data: Any) -> bytes:
            if b"POISON" in bytes(data):
                raise RuntimeError("the codec broke on this batch")
            return compress(data)

        return guarded

    monkeypatch.setattr(compression, "compressor", compressor)


@pytest.mark.usefixtures("poisoned_codec")
async def test_a_batch_the_codec_cannot_compress_fails_alone(tansu: EmbeddedBroker) -> None:
    topic = _fresh_topic(tansu)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, compression_type="gzip", linger_ms=20
    ) as producer:
        good = [await producer.send(topic, b"good-%d" % i, partition=i % 2) for i in range(20)]
        poisoned = await producer.send(topic, b"POISON", partition=2)
        with pytest.raises(KafkaError) as caught:
            await poisoned
        assert type(caught.value).__name__ == "BatchEncodingError"
        assert "the codec broke" in str(caught.value.__cause__)
        delivered = await asyncio.gather(*good)  # raises if any of them failed
        assert sorted(m.partition for m in delivered) == [0] * 10 + [1] * 10
        later = await producer.send_and_wait(topic, b"after", partition=2)
    consumed = read_back(tansu.bootstrap_servers, topic, expected=21)
    assert sorted(r.value or b"" for r in consumed) == sorted(
        [b"good-%d" % i for i in range(20)] + [b"after"]
    )
    # The failed batch took no sequence numbers: the partition's next batch went through.
    assert later.partition == 2


async def test_a_passing_fault_in_the_sender_is_survived(tansu: EmbeddedBroker) -> None:
    topic = _fresh_topic(tansu)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, retry_backoff_ms=5, retry_backoff_max_ms=5
    ) as producer:
        metadata = producer._metadata
        real = metadata.time_to_next_update
        failures = iter(range(3))

        def flaky(now: float) -> float:
            if next(failures, None) is not None:
                raise RuntimeError("a passing fault")
            return float(real(now))

        metadata.time_to_next_update = flaky
        result = await producer.send_and_wait(topic, b"delivered", partition=0)
        assert result.offset == 0
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [
        b"delivered"
    ]


async def test_a_fault_in_every_step_ends_the_producer_and_close_says_so(
    tansu: EmbeddedBroker,
) -> None:
    topic = _fresh_topic(tansu)
    producer = Producer(
        bootstrap_servers=tansu.bootstrap_servers,
        linger_ms=10_000,
        retry_backoff_ms=1,
        retry_backoff_max_ms=1,
    )
    await producer.start()
    pending = await producer.send(topic, b"buffered", partition=0)
    boom = RuntimeError("a fault every step meets")

    def broken(now: float) -> float:
        raise boom

    producer._metadata.time_to_next_update = broken
    producer._sender.wakeup()  # type: ignore[union-attr]
    with pytest.raises(KafkaError) as failed:
        await asyncio.wait_for(pending, 30)
    assert type(failed.value).__name__ == "SenderCrashedError"
    assert failed.value.__cause__ is boom
    with pytest.raises(KafkaError) as refused:
        await producer.send(topic, b"after")
    assert type(refused.value).__name__ == "SenderCrashedError"
    with pytest.raises(KafkaError) as closing:
        await producer.close()
    assert type(closing.value).__name__ == "SenderCrashedError"
    assert closing.value.__cause__ is boom
    await producer.close()  # once closed, close() is quiet


async def test_each_record_is_checked_against_max_request_size(tansu: EmbeddedBroker) -> None:
    # Below batch_size, an open batch has room for a record larger than a request may be:
    # the record is refused all the same, as the Java client checks every record.
    topic = _fresh_topic(tansu)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, max_request_size=1000, linger_ms=50
    ) as producer:
        small = await producer.send(topic, b"small", partition=0)
        with pytest.raises(KafkaError) as caught:
            await producer.send(topic, b"x" * 2000, partition=0)
        assert type(caught.value).__name__ == "RecordTooLargeError"
        with pytest.raises(KafkaError) as in_bulk:
            await producer.send_many(topic, [b"bulk", b"y" * 2000], partition=0)
        assert type(in_bulk.value).__name__ == "RecordTooLargeError"
        assert in_bulk.value.accepted is not None and len(in_bulk.value.accepted) == 1
        await small
        await in_bulk.value.accepted
    consumed = read_back(tansu.bootstrap_servers, topic, expected=2)
    assert [r.value for r in consumed] == [b"small", b"bulk"]


class _Meddler:
    """An interceptor that puts what it is told into every record's fields."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        for name, value in self.fields.items():
            setattr(record, name, value)
        return record

    def on_acknowledgement(self, metadata: Any, exc: BaseException | None) -> None:
        pass


@pytest.mark.parametrize(
    ("field_name", "value"), [("partition", "0"), ("timestamp_ms", 1.5), ("partition", True)]
)
async def test_a_field_an_interceptor_or_a_caller_spoils_is_refused_like_an_argument(
    tansu: EmbeddedBroker, field_name: str, value: Any
) -> None:
    topic = _fresh_topic(tansu)
    async with Producer(
        bootstrap_servers=tansu.bootstrap_servers, interceptors=[_Meddler(**{field_name: value})]
    ) as producer:
        with pytest.raises(TypeError) as caught:
            await producer.send(topic, b"x")
        assert isinstance(caught.value, KafkaError) and field_name in str(caught.value)
    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        spoiled = ProducerRecord(topic, b"spoiled")
        setattr(spoiled, field_name, value)
        with pytest.raises(TypeError) as in_bulk:
            await producer.send_many(topic, [b"kept", spoiled, b"not taken"])
        error = in_bulk.value
        assert isinstance(error, KafkaError) and "send_many item 1" in str(error)
        assert error.accepted is not None and len(error.accepted) == 1
        await error.accepted
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [b"kept"]


def test_sync_send_many_refuses_a_bad_item_before_queueing_any(tansu: EmbeddedBroker) -> None:
    topic = _fresh_topic(tansu)
    with SyncProducer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        with pytest.raises(KafkaError, match="send_many item 1") as caught:
            producer.send_many_nowait(topic, [b"not queued", "a str", b"nor this"])
        assert caught.value.accepted is None
        producer.send_many(topic, [b"after"], partition=0)
    assert [r.value for r in read_back(tansu.bootstrap_servers, topic, expected=1)] == [b"after"]


@pytest.mark.parametrize("headers", ["ab", b"ab"])
async def test_headers_given_as_one_string_get_a_message_that_says_so(
    tansu: EmbeddedBroker, headers: Any
) -> None:
    async with Producer(bootstrap_servers=tansu.bootstrap_servers) as producer:
        with pytest.raises(KafkaError, match="headers must be a sequence of"):
            await producer.send(_fresh_topic(tansu), b"x", headers=headers)
