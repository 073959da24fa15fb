"""Prometheus integration: the producers' metrics, read when Prometheus scrapes.

::

    from prometheus_client import start_http_server
    from aioproducer.integrations import prometheus

    producer = Producer(bootstrap_servers="localhost:9092", client_id="orders")
    await producer.start()
    prometheus.register(producer)      # into prometheus_client's default registry
    start_http_server(9464)            # or serve prometheus_client.make_asgi_app()
    ...
    prometheus.unregister(producer)
    await producer.close()

Nothing is counted for Prometheus on the send path: :class:`ProducerCollector` asks each
producer for :meth:`~aioproducer.Producer.metrics_detailed` at scrape time and turns the
entries into metric families. Names follow Micrometer's Kafka client binder (what Spring
Boot applications export): ``kafka_producer_record_send_total`` for ``record-send-total`` of
``producer-metrics``, ``kafka_producer_topic_record_send_total`` for the per-topic one,
``kafka_producer_node_request_latency_avg`` for the per-broker one
(:func:`aioproducer.metric_catalog.prometheus_name`). Every sample has a ``client_id``
label; per-topic samples a ``topic`` label, per-broker ones a ``node_id`` label
(``node-1``). Totals are counters, everything else gauges; values keep the Java units
(milliseconds, bytes), as the names say.

Needs the ``prometheus`` extra: ``pip install 'aioproducer[prometheus]'``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from aioproducer.config import ProducerConfig
from aioproducer.errors import ConfigurationError, KafkaError
from aioproducer.metric_catalog import (
    DEFINITIONS,
    NODE_GROUP,
    PRODUCER_GROUP,
    TOPIC_GROUP,
    MetricDefinition,
)
from aioproducer.metric_catalog import Metric as ProducerMetric

__all__ = ["MetricSource", "ProducerCollector", "register", "registered", "unregister"]

log = logging.getLogger("aioproducer.integrations.prometheus")

# The Java tags of each group, and their Prometheus labels (Micrometer turns dashes into
# underscores).
_TAGS: dict[str, tuple[str, ...]] = {
    PRODUCER_GROUP: ("client-id",),
    TOPIC_GROUP: ("client-id", "topic"),
    NODE_GROUP: ("client-id", "node-id"),
}


class MetricSource(Protocol):
    """What the collector reads: a :class:`~aioproducer.Producer`, a
    :class:`~aioproducer.SyncProducer` or an
    :class:`~aioproducer.testing.InMemoryProducer`."""

    @property
    def config(self) -> ProducerConfig:
        """The producer's configuration (its ``client_id`` tells producers apart)."""
        ...

    def metrics_detailed(self) -> list[ProducerMetric]:
        """Every metric with its group and tags."""
        ...


def _is_closed(producer: MetricSource) -> bool:
    """True for a producer that was closed (a Producer, InMemoryProducer or SyncProducer)."""
    closed = getattr(producer, "closed", None)
    if isinstance(closed, bool):
        return closed
    state = getattr(producer, "state", None)
    return getattr(state, "value", None) == "closed"


def _family(definition: MetricDefinition) -> CounterMetricFamily | GaugeMetricFamily:
    name = definition.prometheus_name
    documentation = (
        f"{definition.description} ({definition.unit}; {definition.name} of "
        f"{definition.group})"
    )
    labels = [tag.replace("-", "_") for tag in _TAGS[definition.group]]
    if definition.kind == "counter":
        return CounterMetricFamily(name, documentation, labels=labels)
    return GaugeMetricFamily(name, documentation, labels=labels)


class ProducerCollector(Collector):
    """A Prometheus collector of the metrics of one or more producers.

    Each scrape reads every producer's :meth:`~aioproducer.Producer.metrics_detailed`;
    producers are told apart by the ``client_id`` label, so two producers added to one
    collector must have different ``client_id`` options. A producer not started yet reports
    nothing; a closed one is dropped at the next scrape (its series end, as the Java
    client's metrics leave JMX when it closes), and a new producer may take its
    ``client_id`` at once.

    Most code calls :func:`register` instead, which keeps one collector per registry.

    Args:
        producers: the producers to report from the start.
    """

    def __init__(self, producers: Iterable[MetricSource] = ()) -> None:
        self._lock = threading.Lock()
        self._producers: dict[str, MetricSource] = {}
        for producer in producers:
            self.add(producer)

    def add(self, producer: MetricSource) -> None:
        """Report ``producer``'s metrics from the next scrape on (adding it again does
        nothing).

        Raises:
            ConfigurationError: another producer with the same ``client_id`` is reported
                here: their samples could not be told apart.
        """
        client_id = producer.config.client_id
        with self._lock:
            known = self._producers.get(client_id)
            if known is not None and known is not producer and not _is_closed(known):
                raise ConfigurationError(
                    f"another producer with client_id {client_id!r} is registered already: "
                    "give each producer its own client_id to tell their metrics apart"
                )
            self._producers[client_id] = producer

    def remove(self, producer: MetricSource) -> bool:
        """Stop reporting ``producer``; False if it was not reported."""
        with self._lock:
            client_id = producer.config.client_id
            if self._producers.get(client_id) is producer:
                del self._producers[client_id]
                return True
            return False

    @property
    def producers(self) -> list[MetricSource]:
        """The producers reported, in the order added."""
        with self._lock:
            return list(self._producers.values())

    def describe(self) -> Iterable[Metric]:
        """Every metric family this collector can report (with no samples), so a registry
        refuses another collector that reports the same names."""
        return [_family(definition) for definition in DEFINITIONS]

    def collect(self) -> Iterable[Metric]:
        """The metric families with one sample per producer (and topic, or broker)."""
        families: dict[tuple[str, str], CounterMetricFamily | GaugeMetricFamily] = {}
        by_key = {(d.group, d.name): d for d in DEFINITIONS}
        for producer in self.producers:
            if _is_closed(producer):
                self.remove(producer)
                continue
            try:
                entries = producer.metrics_detailed()
            except KafkaError as exc:
                log.debug("no metrics from producer %r: %s", producer.config.client_id, exc)
                continue
            for entry in entries:
                key = (entry.group, entry.name)
                family = families.get(key)
                if family is None:
                    family = families[key] = _family(by_key[key])
                family.add_metric([entry.tags[tag] for tag in _TAGS[entry.group]], entry.value)
        return list(families.values())


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, ProducerCollector] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def register(
    producer: MetricSource, registry: CollectorRegistry = REGISTRY
) -> ProducerCollector:
    """Report ``producer``'s metrics in ``registry`` (prometheus_client's default registry
    unless given), through the registry's one :class:`ProducerCollector`, made and
    registered on first use. Registering a producer again does nothing.

    Returns:
        The registry's collector.

    Raises:
        ConfigurationError: another producer with the same ``client_id`` is registered in
            ``registry``.
    """
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = ProducerCollector()
            registry.register(collector)
            _collectors[registry] = collector
    collector.add(producer)
    return collector


def unregister(producer: MetricSource, registry: CollectorRegistry = REGISTRY) -> None:
    """Stop reporting ``producer``'s metrics in ``registry``; the collector leaves the
    registry with its last producer. Does nothing for a producer not registered there."""
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None or not collector.remove(producer):
            return
        if not collector.producers:
            registry.unregister(collector)
            del _collectors[registry]


@contextmanager
def registered(
    producer: MetricSource, registry: CollectorRegistry = REGISTRY
) -> Iterator[ProducerCollector]:
    """:func:`register` ``producer`` for the ``with`` block, then :func:`unregister` it."""
    collector = register(producer, registry)
    try:
        yield collector
    finally:
        unregister(producer, registry)
