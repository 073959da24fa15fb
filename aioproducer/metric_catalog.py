"""Every metric the producer reports: its group, name, unit, kind and meaning, in one place.

The names, groups and tags are the Java client's (``producer-metrics``,
``producer-topic-metrics`` with a ``topic`` tag, ``producer-node-metrics`` with a ``node-id``
tag of the form ``node-<id>``), so dashboards written for Java producers read the same way.
:meth:`Producer.metrics_detailed() <aioproducer.Producer.metrics_detailed>` hands them out
as :class:`Metric` entries; the metrics page documents each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFINITIONS",
    "NODE_GROUP",
    "PRODUCER_GROUP",
    "TOPIC_GROUP",
    "Metric",
    "MetricDefinition",
    "MetricKind",
    "definition",
    "metric_entries",
    "node_tag",
    "prometheus_name",
]

PRODUCER_GROUP = "producer-metrics"
"""The producer-wide group (tags: ``client-id``)."""

TOPIC_GROUP = "producer-topic-metrics"
"""The per-topic group (tags: ``client-id``, ``topic``)."""

NODE_GROUP = "producer-node-metrics"
"""The per-broker group (tags: ``client-id``, ``node-id``)."""

MetricKind = Literal["counter", "gauge"]
"""``"counter"``: a total that only grows while the producer runs (the ``*-total`` names);
``"gauge"``: a value that goes up and down (rates, averages, maxima, current levels)."""


@dataclass(frozen=True)
class MetricDefinition:
    """What one metric is: its group, name, unit, kind and meaning."""

    group: str
    name: str
    unit: str
    description: str

    @property
    def kind(self) -> MetricKind:
        """``"counter"`` for the ``*-total`` names, ``"gauge"`` for the others."""
        return "counter" if self.name.endswith("-total") else "gauge"

    @property
    def prometheus_name(self) -> str:
        """The name in Prometheus: see :func:`prometheus_name`."""
        return prometheus_name(self.group, self.name)


@dataclass(frozen=True)
class Metric:
    """One metric's value, with what identifies and explains it (the Java client's
    ``MetricName`` and its value).

    Attributes:
        name: the Java client's name, e.g. ``"record-send-total"``.
        group: ``"producer-metrics"``, ``"producer-topic-metrics"`` or
            ``"producer-node-metrics"``.
        tags: ``{"client-id": ...}``, plus ``"topic"`` in the topic group and ``"node-id"``
            (``"node-<id>"``; bootstrap servers have negative ids, as in Java) in the node
            group.
        value: the value, in ``unit``.
        description: what the metric means.
        unit: ``"records"``, ``"bytes"``, ``"ms"``, ``"records/s"``, ...
        kind: ``"counter"`` (a total that only grows) or ``"gauge"``.
    """

    name: str
    group: str
    tags: Mapping[str, str]
    value: float
    description: str
    unit: str
    kind: MetricKind


def _define(group: str, *rows: tuple[str, str, str]) -> tuple[MetricDefinition, ...]:
    return tuple(MetricDefinition(group, name, unit, text) for name, unit, text in rows)


DEFINITIONS: tuple[MetricDefinition, ...] = (
    *_define(
        PRODUCER_GROUP,
        ("record-send-total", "records", "Records acknowledged by the brokers."),
        ("record-send-rate", "records/s", "Records acknowledged per second."),
        (
            "record-error-total",
            "records",
            "Records that failed for good (after retries, or on a fatal error).",
        ),
        ("record-error-rate", "records/s", "Records failed per second."),
        ("record-retry-total", "records", "Records sent again after a retriable error."),
        ("record-retry-rate", "records/s", "Records retried per second."),
        ("batch-size-avg", "bytes", "Average size of the batches sent (after compression)."),
        ("batch-size-max", "bytes", "Largest batch sent."),
        (
            "batch-split-total",
            "batches",
            "Batches split in two or more because the broker found them too large "
            "(MESSAGE_TOO_LARGE).",
        ),
        ("batch-split-rate", "batches/s", "Batch splits per second."),
        (
            "batch-overtaken-total",
            "batches",
            "Batches failed with BatchOvertakenError: the broker's sequence for the partition "
            "had moved past them, so whether they were written is unknown (aioproducer only).",
        ),
        ("records-per-request-avg", "records", "Average records per Produce request."),
        (
            "compression-rate-avg",
            "ratio",
            "Average compressed size / uncompressed size of the batches (1.0 without "
            "compression).",
        ),
        (
            "compression-offload-total",
            "batches",
            "Batches compressed in a worker thread instead of on the event loop (aioproducer "
            "only; see compression_offload_bytes).",
        ),
        (
            "request-latency-avg",
            "ms",
            "Average time from sending a Produce request to its response.",
        ),
        ("request-latency-max", "ms", "Longest Produce request latency."),
        (
            "requests-in-flight",
            "requests",
            "Requests sent to the brokers and not answered yet, now (every kind of request).",
        ),
        (
            "produce-throttle-time-avg",
            "ms",
            "Average time a broker asked the producer to wait after a Produce response, for "
            "a quota (KIP-219); the producer sends that broker nothing meanwhile.",
        ),
        ("produce-throttle-time-max", "ms", "Longest such wait."),
        (
            "record-queue-time-avg",
            "ms",
            "Average time a batch waited in the accumulator before it was sent.",
        ),
        ("record-queue-time-max", "ms", "Longest time a batch waited in the accumulator."),
        (
            "record-size-avg",
            "bytes",
            "Average size of a record in the batches sent, before compression (its own "
            "bytes; the batch header is not counted).",
        ),
        ("request-total", "requests", "Produce requests sent."),
        ("request-rate", "requests/s", "Produce requests sent per second."),
        (
            "outgoing-byte-total",
            "bytes",
            "Bytes of record batches sent in Produce requests, as sent (compressed; a retry "
            "counts again). Unlike the Java client's, requests of other kinds and the "
            "request headers are not counted here: the per-broker group's "
            "outgoing-byte-total counts every request frame.",
        ),
        ("outgoing-byte-rate", "bytes/s", "Those bytes per second."),
        (
            "buffer-available-bytes",
            "bytes",
            "Buffer memory not in use (free buffers plus memory never allocated).",
        ),
        ("buffer-total-bytes", "bytes", "buffer_memory: the most the buffered records may use."),
        (
            "bufferpool-wait-time-total",
            "ns",
            "Total time send() calls waited for buffer memory (the Java client's older name).",
        ),
        (
            "bufferpool-wait-time-ns-total",
            "ns",
            "The same total under the Java client's newer name.",
        ),
        (
            "waiting-threads",
            "coroutines",
            "Coroutines waiting for buffer memory right now (Java counts threads; here they "
            "are coroutines).",
        ),
        ("connection-count", "connections", "Connections to brokers open now."),
        (
            "connection-creation-total",
            "connections",
            "Connections set up (TCP, TLS and SASL done).",
        ),
        (
            "connection-close-total",
            "connections",
            "Connections closed while the producer runs (idle, lost, or refused on "
            "re-authentication).",
        ),
        (
            "successful-authentication-total",
            "authentications",
            "SASL authentications that succeeded when connecting.",
        ),
        (
            "failed-authentication-total",
            "authentications",
            "SASL authentications the broker refused when connecting.",
        ),
        (
            "successful-reauthentication-total",
            "authentications",
            "SASL re-authentications (KIP-368) that succeeded on an open connection.",
        ),
        (
            "failed-reauthentication-total",
            "authentications",
            "SASL re-authentications the broker refused (the connection then closes).",
        ),
    ),
    *_define(
        TOPIC_GROUP,
        ("record-send-total", "records", "Records of the topic acknowledged by the brokers."),
        ("record-send-rate", "records/s", "Records of the topic acknowledged per second."),
        ("record-retry-total", "records", "Records of the topic sent again after an error."),
        ("record-retry-rate", "records/s", "Records of the topic retried per second."),
        ("record-error-total", "records", "Records of the topic that failed for good."),
        ("record-error-rate", "records/s", "Records of the topic failed per second."),
        (
            "byte-total",
            "bytes",
            "Bytes of the topic's batches put in Produce requests (after compression; a "
            "retried batch counts again).",
        ),
        ("byte-rate", "bytes/s", "Bytes of the topic's batches sent per second."),
        (
            "compression-rate",
            "ratio",
            "Average compressed size / uncompressed size of the topic's batches.",
        ),
    ),
    *_define(
        NODE_GROUP,
        ("request-total", "requests", "Requests of every kind sent to the broker."),
        ("request-rate", "requests/s", "Requests sent to the broker per second."),
        ("response-total", "responses", "Responses read from the broker."),
        ("response-rate", "responses/s", "Responses read from the broker per second."),
        ("outgoing-byte-total", "bytes", "Bytes sent to the broker (whole request frames)."),
        ("outgoing-byte-rate", "bytes/s", "Bytes sent to the broker per second."),
        ("incoming-byte-total", "bytes", "Bytes read from the broker."),
        ("incoming-byte-rate", "bytes/s", "Bytes read from the broker per second."),
        (
            "request-latency-avg",
            "ms",
            "Average time from sending a Produce request to the broker to its response.",
        ),
        ("request-latency-max", "ms", "Longest Produce request latency to the broker."),
        (
            "requests-in-flight",
            "requests",
            "Requests sent to the broker and not answered yet, now (aioproducer only).",
        ),
    ),
)
"""Every metric, producer-wide first, then per topic, then per broker."""

_BY_KEY: dict[tuple[str, str], MetricDefinition] = {(d.group, d.name): d for d in DEFINITIONS}


def definition(group: str, name: str) -> MetricDefinition:
    """The definition of metric ``name`` in ``group``.

    Raises:
        KeyError: no such metric.
    """
    return _BY_KEY[(group, name)]


def prometheus_name(group: str, name: str) -> str:
    """The Prometheus name of metric ``name`` of ``group``, as Micrometer's Kafka client
    binder (and so Spring Boot) names it: ``kafka_``, the group without ``-metrics``, the
    name, dashes made underscores. ``record-send-total`` of ``producer-metrics`` is
    ``kafka_producer_record_send_total``, of ``producer-topic-metrics``
    ``kafka_producer_topic_record_send_total``; ``request-latency-avg`` of
    ``producer-node-metrics`` is ``kafka_producer_node_request_latency_avg``."""
    prefix = group.removesuffix("-metrics")
    return f"kafka_{prefix}_{name}".replace("-", "_")


def node_tag(node_id: int) -> str:
    """The ``node-id`` tag of broker ``node_id``, as the Java client writes it:
    ``node-1``, ``node--1`` for the first bootstrap server."""
    return f"node-{node_id}"


def metric_entries(
    group: str, tags: Mapping[str, str], values: Mapping[str, float]
) -> list[Metric]:
    """``values`` (metric name to value, all of ``group``) as :class:`Metric` entries with
    ``tags``.

    Raises:
        KeyError: a name that is not a metric of ``group``.
    """
    entries: list[Metric] = []
    for name, value in values.items():
        known = _BY_KEY[(group, name)]
        entries.append(Metric(name, group, tags, value, known.description, known.unit, known.kind))
    return entries
