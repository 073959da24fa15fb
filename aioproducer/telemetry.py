"""The seam that tracing plugs into: what a :class:`~aioproducer.Producer` tells a telemetry
object about the records it sends.

A producer holds one :class:`SendTelemetry` or none. With none (the default) ``send()``
pays one attribute check per record and nothing else; this module imports nothing from
OpenTelemetry or any other tracing library. :mod:`aioproducer.integrations.otel` is the
implementation for OpenTelemetry; another tracer can implement the two protocols below.

A telemetry object is attached with :func:`attach` (one producer) or made for every
producer built afterwards with :func:`set_default` (a factory called in
``Producer(...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aioproducer._core.futures import BatchResults, RecordFuture
    from aioproducer.producer import Producer

__all__ = ["SendSpan", "SendTelemetry", "attach", "attached", "default_for", "set_default"]


class SendSpan(Protocol):
    """One traced ``send()`` record or ``send_many()`` call, from the call until every
    record it took is acknowledged or failed."""

    def inject(self, headers: Any) -> Any:
        """The headers to send in place of ``headers`` (as given to ``send()``: None, a
        sequence of ``(name, value)`` pairs or a mapping): the same with the span's
        context added. Must not change the object it is given."""
        ...

    def inject_items(self, topic: str, items: list[Any] | tuple[Any, ...]) -> list[Any]:
        """The items to send in place of ``send_many()``'s ``items``, each carrying the
        span's context in its headers. Must not change the objects it is given."""
        ...

    def record_appended(self, future: RecordFuture) -> None:
        """``send()`` buffered the record: the span ends when ``future`` is done."""
        ...

    def records_appended(self, results: BatchResults) -> None:
        """``send_many()`` buffered every item: the span ends when ``results`` is done."""
        ...

    def failed(self, error: BaseException) -> None:
        """The call raised ``error`` (nothing was buffered by ``send()``; ``send_many()``
        buffered the items before the one refused): the span ends now, failed."""
        ...


class SendTelemetry(Protocol):
    """What a producer with telemetry calls on each ``send()`` and ``send_many()``."""

    def start_send(self, topic: Any, key: Any, value: Any, partition: Any) -> SendSpan:
        """A span for one record of ``send()``, with the arguments as given (unchecked)."""
        ...

    def start_send_many(self, topic: str, count: int, partition: int | None) -> SendSpan:
        """A span for a ``send_many()`` call of ``count`` items to ``topic``."""
        ...

    def started(self, producer: Producer) -> None:
        """``producer.start()`` succeeded (its ``metrics()`` are filled from now on)."""
        ...


TelemetryFactory = Callable[["Producer"], "SendTelemetry | None"]
"""Makes the telemetry of a new producer (None: that producer has none)."""

_default: TelemetryFactory | None = None


def set_default(factory: TelemetryFactory | None) -> None:
    """Call ``factory(producer)`` in every ``Producer(...)`` built from now on, and attach
    what it returns; None stops that (producers built already keep their telemetry)."""
    global _default
    _default = factory


def default_for(producer: Producer) -> SendTelemetry | None:
    """The telemetry the default factory (:func:`set_default`) makes for ``producer``."""
    factory = _default
    return None if factory is None else factory(producer)


def attach(producer: Producer, telemetry: SendTelemetry | None) -> None:
    """Give ``producer`` this telemetry from its next ``send()`` on (None: none). Records
    sent before keep the spans they have."""
    producer._telemetry = telemetry
    changed = getattr(producer, "_telemetry_changed", None)
    if changed is not None:
        changed()


def attached(producer: Producer) -> SendTelemetry | None:
    """The telemetry ``producer`` has now, or None."""
    return producer._telemetry
