"""OpenTelemetry for aioproducer: a PRODUCER span per record sent, its context in the record's
headers, and the producer's metrics as OpenTelemetry metrics.

Install the extra (``pip install "aioproducer[otel]"``, which brings ``opentelemetry-api``),
configure the OpenTelemetry SDK as usual, then instrument every producer built from now on::

    from aioproducer.integrations.otel import AioproducerInstrumentor

    AioproducerInstrumentor().instrument()

or one producer (``tracer_provider`` and ``meter_provider`` default to the global ones)::

    AioproducerInstrumentor.instrument_producer(producer, tracer_provider=provider)

The spans follow the OpenTelemetry semantic conventions for messaging (Kafka), v1.44.0:

- ``send()``: one span per record, named ``send {topic}``, of kind PRODUCER, with
  ``messaging.system`` ``"kafka"``, ``messaging.operation.type`` and
  ``messaging.operation.name`` ``"send"``, ``messaging.destination.name``,
  ``messaging.client.id``, ``server.address`` and ``server.port`` (the first bootstrap
  server), ``messaging.kafka.message.key`` when the key is a ``str``,
  ``messaging.kafka.message.tombstone`` for a record without a value; once the broker
  acknowledged the record, ``messaging.destination.partition.id`` and
  ``messaging.kafka.offset``. The span starts in ``send()`` and ends when the record is
  acknowledged or fails, not when ``send()`` returns.
- ``send_many()``: one span for the call, with ``messaging.batch.message_count``; it ends
  once every record is acknowledged or failed (as failed, with the first failed record's
  error, if any did). Each record carries the span's context.
- A failure (``send()`` raises, or the record fails later) sets ``error.type`` to the
  error's class (``aioproducer.errors.RecordTooLargeError``), records the exception and
  sets the span's status to ERROR.

Each record gets the headers of the global propagator (``opentelemetry.propagate``; W3C
``traceparent`` by default) for the span, so a consumer continues the trace, unless the
record has one of those headers already.

The producer's metrics (:meth:`~aioproducer.Producer.metrics_detailed`: producer-wide, per
topic and per broker) are observed when the meter provider collects (nothing is done per
record): each ``*-total`` name as a counter, every other name as a gauge, with its unit.
Producer-wide ones are named ``kafka.producer.`` followed by the name with ``-`` as ``_``
(``record-send-total`` is ``kafka.producer.record_send_total``); per-topic ones
``kafka.producer.topic.`` and the name, with the topic as ``messaging.destination.name``;
per-broker ones ``kafka.producer.node.`` and the name, with ``kafka.node.id``
(``node-1``). Every observation has the producer's ``messaging.client.id``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import re
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import propagate
from opentelemetry import trace as otel_trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from aioproducer import BatchResults, Producer, ProducerRecord, ProducerState, RecordFuture
from aioproducer import telemetry as _telemetry
from aioproducer._core.appender import send_many_item
from aioproducer.metric_catalog import (
    DEFINITIONS,
    NODE_GROUP,
    PRODUCER_GROUP,
    TOPIC_GROUP,
    Metric,
)

__all__ = ["SCHEMA_URL", "AioproducerInstrumentor"]

SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
"""The version of the semantic conventions the spans follow."""

_NAME = "aioproducer"
_VERSION = "0.1.0"
_METRIC_PREFIX = "kafka.producer."
_UNSAFE = re.compile(r"[^a-z0-9_.]")
# A collection waits at most this long (seconds) for a producer's loop to read its metrics.
_METRICS_WAIT = 5.0
# The callbacks of one collection share a producer's metrics read this recently (seconds).
_SNAPSHOT_AGE = 0.5


class AioproducerInstrumentor:
    """Instruments aioproducer's producers with OpenTelemetry.

    As OpenTelemetry's instrumentors, this is a singleton: ``AioproducerInstrumentor()``
    returns the same object each time, :meth:`instrument` a second time does nothing, and
    :meth:`uninstrument` undoes it.
    """

    _instance: AioproducerInstrumentor | None = None

    def __new__(cls) -> AioproducerInstrumentor:
        if cls._instance is None:
            instance = super().__new__(cls)
            instance._instrumented = False
            instance._producers = weakref.WeakSet()
            cls._instance = instance
        return cls._instance

    _instrumented: bool
    _producers: weakref.WeakSet[Producer]

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        """True between :meth:`instrument` and :meth:`uninstrument`."""
        return self._instrumented

    def instrument(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        **_: Any,
    ) -> None:
        """Trace (and observe the metrics of) every :class:`~aioproducer.Producer` built
        from now on.

        Args:
            tracer_provider: where the spans go; the global tracer provider by default.
            meter_provider: where the metrics go; the global meter provider by default.
        """
        if self._instrumented:
            return
        tracer = _tracer(tracer_provider)
        bridge = _bridge(_meter(meter_provider))

        def make(producer: Producer) -> _ProducerTelemetry:
            self._producers.add(producer)
            return _ProducerTelemetry(producer, tracer, bridge)

        _telemetry.set_default(make)
        self._instrumented = True

    def uninstrument(self, **_: Any) -> None:
        """Stop: producers built from now on are not traced, and those :meth:`instrument`
        instrumented stop tracing (records sent already keep their spans)."""
        if not self._instrumented:
            return
        _telemetry.set_default(None)
        for producer in list(self._producers):
            self.uninstrument_producer(producer)
        self._producers = weakref.WeakSet()
        self._instrumented = False

    @staticmethod
    def instrument_producer(
        producer: Producer,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> Producer:
        """Trace ``producer`` (built already, started or not) and observe its metrics;
        return it."""
        _telemetry.attach(
            producer,
            _ProducerTelemetry(producer, _tracer(tracer_provider), _bridge(_meter(meter_provider))),
        )
        return producer

    @staticmethod
    def uninstrument_producer(producer: Producer) -> Producer:
        """Stop tracing ``producer`` and observing its metrics; return it."""
        telemetry = _telemetry.attached(producer)
        if isinstance(telemetry, _ProducerTelemetry):
            telemetry.close(producer)
        _telemetry.attach(producer, None)
        return producer


def _tracer(provider: TracerProvider | None) -> Tracer:
    return otel_trace.get_tracer(
        _NAME, _VERSION, tracer_provider=provider, schema_url=SCHEMA_URL
    )


def _meter(provider: MeterProvider | None) -> Meter:
    return otel_metrics.get_meter(_NAME, _VERSION, meter_provider=provider, schema_url=SCHEMA_URL)


# One bridge per meter: a meter makes an instrument name once (a second request returns
# the first instrument, without the new callback), so one callback serves every producer.
_bridges: weakref.WeakKeyDictionary[Meter, _MetricsBridge] = weakref.WeakKeyDictionary()
_bridges_lock = threading.Lock()


def _bridge(meter: Meter) -> _MetricsBridge:
    with _bridges_lock:
        bridge = _bridges.get(meter)
        if bridge is None:
            bridge = _bridges[meter] = _MetricsBridge(meter)
        return bridge


def _server(bootstrap_servers: Iterable[str]) -> tuple[str, int] | None:
    # The first bootstrap server, as host and port ("[::1]:9092" too).
    for entry in bootstrap_servers:
        host, _, port = entry.strip().rpartition(":")
        if host and port.isdigit():
            return host.strip("[]"), int(port)
    return None


def _error_type(error: BaseException) -> str:
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class _ProducerTelemetry:
    """The :class:`~aioproducer.telemetry.SendTelemetry` of one producer."""

    def __init__(self, producer: Producer, tracer: Tracer, bridge: _MetricsBridge) -> None:
        config = producer.config
        self._tracer = tracer
        self._bridge = bridge
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.client.id": config.client_id,
        }
        server = _server(config.bootstrap_servers)
        if server is not None:
            attributes["server.address"], attributes["server.port"] = server
        self._attributes = attributes
        bridge.add(producer)

    def close(self, producer: Producer) -> None:
        self._bridge.remove(producer)

    def started(self, producer: Producer) -> None:
        self._bridge.started(producer)

    def _start(self, topic: Any, attributes: dict[str, Any]) -> _Span:
        if isinstance(topic, str):
            attributes["messaging.destination.name"] = topic
            name = f"send {topic}"
        else:
            name = "send"  # not a topic name: send() refuses it, and the span says why
        span = self._tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
        return _Span(span)

    def start_send(self, topic: Any, key: Any, value: Any, partition: Any) -> _Span:
        attributes = dict(self._attributes)
        if isinstance(key, str):
            attributes["messaging.kafka.message.key"] = key
        if value is None:
            attributes["messaging.kafka.message.tombstone"] = True
        if type(partition) is int and partition >= 0:
            attributes["messaging.destination.partition.id"] = str(partition)
        return self._start(topic, attributes)

    def start_send_many(self, topic: str, count: int, partition: int | None) -> _Span:
        attributes = dict(self._attributes)
        attributes["messaging.batch.message_count"] = count
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        return self._start(topic, attributes)


class _Span:
    """The :class:`~aioproducer.telemetry.SendSpan` of one ``send()`` or ``send_many()``."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def _context_headers(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=otel_trace.set_span_in_context(self._span))
        return carrier

    def inject(self, headers: Any) -> Any:
        return _with_context(headers, self._context_headers())

    def inject_items(self, topic: str, items: list[Any] | tuple[Any, ...]) -> list[Any]:
        carrier = self._context_headers()
        if not carrier:
            return list(items)
        injected: list[Any] = []
        for item in items:
            if isinstance(item, ProducerRecord):
                # Copied, not made anew: send_many checks its fields and names the item.
                record = copy.copy(item)
                record.headers = _with_context(item.headers, carrier)
            else:
                _, value, key, _, _, _ = send_many_item(topic, None, item)
                record = ProducerRecord(
                    topic, value=value, key=key, headers=_with_context(None, carrier)
                )
            injected.append(record)
        return injected

    def record_appended(self, future: RecordFuture) -> None:
        future.add_done_callback(self._record_done)

    def _record_done(self, future: RecordFuture) -> None:
        span = self._span
        if future.cancelled():
            span.end()  # only the future was detached; its record's outcome is not known
            return
        error = future.exception()
        if error is not None:
            self.failed(error)
            return
        metadata = future.result()
        span.set_attribute("messaging.destination.partition.id", str(metadata.partition))
        if metadata.offset >= 0:
            span.set_attribute("messaging.kafka.offset", metadata.offset)
        span.end()

    def records_appended(self, results: BatchResults) -> None:
        task = asyncio.get_running_loop().create_task(self._wait_many(results))
        # The loop keeps only weak references to tasks.
        _pending.add(task)
        task.add_done_callback(_pending.discard)

    async def _wait_many(self, results: BatchResults) -> None:
        try:
            await results
        except BaseException as exc:
            self.failed(exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._span.end()

    def failed(self, error: BaseException) -> None:
        span = self._span
        span.set_attribute("error.type", _error_type(error))
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()


_pending: set[asyncio.Task[None]] = set()


def _with_context(headers: Any, carrier: dict[str, str]) -> Any:
    """``headers`` (as ``send()`` takes them) with the propagator's ``carrier`` added, in a
    new list; as they are when they hold one of its names already, or are not headers
    (``send()`` then refuses them with its own error)."""
    if not carrier:
        return headers
    pairs: list[Any]
    if headers is None:
        pairs = []
    elif isinstance(headers, Mapping):
        pairs = list(headers.items())
    elif isinstance(headers, str | bytes | bytearray | memoryview):
        return headers
    else:
        try:
            pairs = list(headers)
        except TypeError:
            return headers
    for pair in pairs:
        if isinstance(pair, tuple | list) and len(pair) == 2 and pair[0] in carrier:
            return pairs
    pairs.extend((name, value.encode()) for name, value in carrier.items())
    return pairs


# Instrument names by metric group, and the OpenTelemetry attribute of each Java tag.
_GROUP_PREFIX: dict[str, str] = {
    PRODUCER_GROUP: _METRIC_PREFIX,
    TOPIC_GROUP: _METRIC_PREFIX + "topic.",
    NODE_GROUP: _METRIC_PREFIX + "node.",
}
_TAG_ATTRIBUTES: dict[str, str] = {
    "topic": "messaging.destination.name",
    "node-id": "kafka.node.id",
}


def _instrument_name(group: str, name: str) -> str:
    """The OpenTelemetry instrument of a metric: ``kafka.producer.`` and the Java name with
    underscores for the producer-wide group; ``kafka.producer.topic.`` and
    ``kafka.producer.node.`` before it for the per-topic and per-broker groups."""
    return _GROUP_PREFIX[group] + _UNSAFE.sub("_", name.lower())


class _MetricsBridge:
    """Observable instruments over the ``metrics_detailed()`` of producers, read at
    collection: one instrument per metric of the catalog, made once, with the producer's
    client id and the topic or broker as attributes."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        # Producer -> the loop to read its metrics on (None: any thread; not started yet).
        self._producers: weakref.WeakKeyDictionary[
            Producer, asyncio.AbstractEventLoop | None
        ] = weakref.WeakKeyDictionary()
        # The metrics read at the current collection: one read per producer serves every
        # instrument's callback (they run one after the other, within a collection).
        self._snapshots: weakref.WeakKeyDictionary[
            Producer, tuple[float, dict[tuple[str, str], list[Metric]]]
        ] = weakref.WeakKeyDictionary()
        for definition in DEFINITIONS:
            callbacks = [self._callback(definition.group, definition.name)]
            description = f"{definition.description} (aioproducer: {definition.name})"
            name = _instrument_name(definition.group, definition.name)
            if definition.kind == "counter":
                meter.create_observable_counter(
                    name, callbacks=callbacks, unit=definition.unit, description=description
                )
            else:
                meter.create_observable_gauge(
                    name, callbacks=callbacks, unit=definition.unit, description=description
                )

    def add(self, producer: Producer) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        if producer.state is ProducerState.RUNNING:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self._producers[producer] = loop

    def started(self, producer: Producer) -> None:
        # Called in start(), on the producer's loop.
        if producer in self._producers:
            self._producers[producer] = asyncio.get_running_loop()

    def remove(self, producer: Producer) -> None:
        self._producers.pop(producer, None)
        self._snapshots.pop(producer, None)

    def _callback(self, group: str, name: str) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return self._observe(group, name)

        return observe

    def _observe(self, group: str, name: str) -> list[Observation]:
        observations = []
        now = time.monotonic()
        for producer, loop in list(self._producers.items()):
            snapshot = self._snapshots.get(producer)
            if snapshot is not None and now - snapshot[0] < _SNAPSHOT_AGE:
                entries = snapshot[1]
            else:
                entries = {}
                for entry in _read_metrics(producer, loop):
                    entries.setdefault((entry.group, entry.name), []).append(entry)
                self._snapshots[producer] = (now, entries)
            for entry in entries.get((group, name), ()):
                attributes = {"messaging.client.id": producer.config.client_id}
                for tag, value in entry.tags.items():
                    attribute = _TAG_ATTRIBUTES.get(tag)
                    if attribute is not None:
                        attributes[attribute] = value
                observations.append(Observation(entry.value, attributes))
        return observations


def _read_metrics(producer: Producer, loop: asyncio.AbstractEventLoop | None) -> list[Metric]:
    """``producer.metrics_detailed()``, read on the producer's loop when collected in
    another thread (the loop updates them as it goes); empty when that loop is not
    running."""
    if loop is None or _running_loop() is loop:
        return producer.metrics_detailed()
    if loop.is_closed() or not loop.is_running():
        return []
    result: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

    def read() -> None:
        try:
            result.set_result(producer.metrics_detailed())
        except BaseException as exc:
            result.set_exception(exc)

    try:
        loop.call_soon_threadsafe(read)
        return result.result(_METRICS_WAIT)
    except (RuntimeError, concurrent.futures.TimeoutError):
        return []


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
