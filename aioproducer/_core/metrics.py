"""Producer metrics under the Java client's names: the producer-wide ``producer-metrics``
group, ``producer-topic-metrics`` per topic and ``producer-node-metrics`` per broker.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

Totals count since the producer started; averages and maxima are over the last sample
window (``metrics_sample_window_ms``, two windows as in Java); rates are per second over the
same span. Everything here is counted per batch or per request, never per record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aioproducer.protocol.record_batch import RECORD_BATCH_OVERHEAD

if TYPE_CHECKING:
    from aioproducer._core.accumulator import ProducerBatch

__all__ = ["CONNECTION_METRICS", "NodeMetrics", "ProducerMetrics", "TopicMetrics"]

#: The connection metrics the connection manager adds (Java's selector metrics, which the
#: Java client also reports in ``producer-metrics``).
CONNECTION_METRICS: tuple[str, ...] = (
    "connection-count",
    "connection-creation-total",
    "connection-close-total",
    "successful-authentication-total",
    "failed-authentication-total",
    "successful-reauthentication-total",
    "failed-reauthentication-total",
)


class _Windowed:
    """Sum, count and max over the current and the previous window."""

    __slots__ = ("_current", "_previous", "_start", "_window")

    def __init__(self, window: float, now: float) -> None:
        self._window = window
        self._start = now
        self._current = [0.0, 0, float("-inf")]
        self._previous = [0.0, 0, float("-inf")]

    def _roll(self, now: float) -> None:
        if now - self._start >= self._window:
            if now - self._start >= 2 * self._window:
                self._previous = [0.0, 0, float("-inf")]
            else:
                self._previous = self._current
            self._current = [0.0, 0, float("-inf")]
            self._start = now - ((now - self._start) % self._window)

    def record(self, value: float, now: float) -> None:
        self._roll(now)
        current = self._current
        current[0] += value
        current[1] += 1
        if value > current[2]:
            current[2] = value

    def record_many(self, value_sum: float, count: int, value_max: float, now: float) -> None:
        self._roll(now)
        current = self._current
        current[0] += value_sum
        current[1] += count
        if value_max > current[2]:
            current[2] = value_max

    def avg(self, now: float) -> float:
        self._roll(now)
        count = self._current[1] + self._previous[1]
        if not count:
            return 0.0
        return (self._current[0] + self._previous[0]) / count

    def max(self, now: float) -> float:
        self._roll(now)
        value = max(self._current[2], self._previous[2])
        return 0.0 if value == float("-inf") else value

    def rate(self, now: float) -> float:
        """Sum per second over the elapsed part of the current window plus one whole
        window: Java's ``Rate`` with two samples, which counts a window not yet lived as
        elapsed, so the first seconds of a producer show no spike."""
        self._roll(now)
        elapsed = (now - self._start) + self._window
        return (self._current[0] + self._previous[0]) / elapsed


class TopicMetrics:
    """One topic's counters (Java's ``producer-topic-metrics`` group), kept per batch."""

    __slots__ = (
        "_bytes",
        "_compression",
        "_record_errors",
        "_record_retries",
        "_record_send",
        "byte_total",
        "record_error_total",
        "record_retry_total",
        "record_send_total",
    )

    def __init__(self, window: float, now: float) -> None:
        self.record_send_total = 0
        self.record_retry_total = 0
        self.record_error_total = 0
        self.byte_total = 0
        self._record_send = _Windowed(window, now)
        self._record_retries = _Windowed(window, now)
        self._record_errors = _Windowed(window, now)
        self._bytes = _Windowed(window, now)
        self._compression = _Windowed(window, now)

    def sent(self, count: int, now: float) -> None:
        """``count`` records of the topic were acknowledged."""
        self.record_send_total += count
        self._record_send.record_many(count, 1, count, now)

    def failed(self, count: int, now: float) -> None:
        """``count`` records of the topic failed for good."""
        self.record_error_total += count
        self._record_errors.record_many(count, 1, count, now)

    def retried(self, count: int, now: float) -> None:
        """``count`` records of the topic go out again."""
        self.record_retry_total += count
        self._record_retries.record_many(count, 1, count, now)

    def batch_sent(self, size: int, uncompressed: int, now: float) -> None:
        """A batch of the topic of ``size`` bytes went into a Produce request."""
        self.byte_total += size
        self._bytes.record(size, now)
        self._compression.record(size / uncompressed if uncompressed else 1.0, now)

    def snapshot(self, now: float) -> dict[str, float]:
        """The topic's metrics by their Java names."""
        return {
            "record-send-total": float(self.record_send_total),
            "record-send-rate": self._record_send.rate(now),
            "record-retry-total": float(self.record_retry_total),
            "record-retry-rate": self._record_retries.rate(now),
            "record-error-total": float(self.record_error_total),
            "record-error-rate": self._record_errors.rate(now),
            "byte-total": float(self.byte_total),
            "byte-rate": self._bytes.rate(now),
            "compression-rate": self._compression.avg(now),
        }


class NodeMetrics:
    """One broker's counters (Java's ``producer-node-metrics`` group): every request the
    producer sends it and every response it reads, counted by the broker's connection, and
    the latency of Produce requests, timed by the sender. They outlive the connection: a
    reconnect goes on counting where the last connection stopped."""

    __slots__ = (
        "_clock",
        "_incoming",
        "_latency",
        "_outgoing",
        "_requests",
        "_responses",
        "incoming_byte_total",
        "outgoing_byte_total",
        "request_total",
        "response_total",
    )

    def __init__(self, window: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        now = clock()
        self.request_total = 0
        self.response_total = 0
        self.outgoing_byte_total = 0
        self.incoming_byte_total = 0
        self._requests = _Windowed(window, now)
        self._responses = _Windowed(window, now)
        self._outgoing = _Windowed(window, now)
        self._incoming = _Windowed(window, now)
        self._latency = _Windowed(window, now)

    def request_sent(self, size: int, now: float) -> None:
        """A request of ``size`` bytes (its frame) was written to the broker at ``now``."""
        self.request_total += 1
        self.outgoing_byte_total += size
        self._requests.record(1, now)
        self._outgoing.record(size, now)

    def data_received(self, size: int, responses: int) -> None:
        """``size`` bytes were read from the broker, completing ``responses`` responses."""
        now = self._clock()
        self.incoming_byte_total += size
        self._incoming.record(size, now)
        if responses:
            self.response_total += responses
            self._responses.record_many(responses, responses, 1, now)

    def request_completed(self, latency_ms: float, now: float) -> None:
        """A Produce response arrived ``latency_ms`` after its request."""
        self._latency.record(latency_ms, now)

    def snapshot(self, now: float) -> dict[str, float]:
        """The broker's metrics by their Java names (without ``requests-in-flight``, which
        the connection knows)."""
        return {
            "request-total": float(self.request_total),
            "request-rate": self._requests.rate(now),
            "response-total": float(self.response_total),
            "response-rate": self._responses.rate(now),
            "outgoing-byte-total": float(self.outgoing_byte_total),
            "outgoing-byte-rate": self._outgoing.rate(now),
            "incoming-byte-total": float(self.incoming_byte_total),
            "incoming-byte-rate": self._incoming.rate(now),
            "request-latency-avg": self._latency.avg(now),
            "request-latency-max": self._latency.max(now),
        }


class ProducerMetrics:
    """Counters the producer updates on its hot paths, read by ``Producer.metrics()``:
    producer-wide, per topic (:class:`TopicMetrics`) and per broker (:class:`NodeMetrics`).

    Only the event loop updates them; the snapshots may be taken from another thread (a
    Prometheus server's): they copy the dicts before iterating, and a value read mid-update
    is at worst one batch behind."""

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._window = window_s
        now = clock()
        self.record_send_total = 0
        self.record_error_total = 0
        self.record_retry_total = 0
        self.request_total = 0
        self.byte_total = 0
        self.compression_offload_total = 0
        self.batch_split_total = 0
        self.batch_overtaken_total = 0
        self._record_send = _Windowed(window_s, now)
        self._record_errors = _Windowed(window_s, now)
        self._record_retries = _Windowed(window_s, now)
        self._batch_size = _Windowed(window_s, now)
        self._records_per_request = _Windowed(window_s, now)
        self._compression_rate = _Windowed(window_s, now)
        self._request_latency = _Windowed(window_s, now)
        self._queue_time = _Windowed(window_s, now)
        self._record_size = _Windowed(window_s, now)
        self._bytes = _Windowed(window_s, now)
        self._requests = _Windowed(window_s, now)
        self._throttle_time = _Windowed(window_s, now)
        self._batch_splits = _Windowed(window_s, now)
        self._topics: dict[str, TopicMetrics] = {}
        self._nodes: dict[int, NodeMetrics] = {}

    def _topic(self, topic: str, now: float) -> TopicMetrics:
        metrics = self._topics.get(topic)
        if metrics is None:
            metrics = self._topics[topic] = TopicMetrics(self._window, now)
        return metrics

    def node(self, node_id: int) -> NodeMetrics:
        """The counters of broker ``node_id`` (made on first use; bootstrap servers have
        negative ids, as in the Java client)."""
        metrics = self._nodes.get(node_id)
        if metrics is None:
            metrics = self._nodes[node_id] = NodeMetrics(self._window, self._clock)
        return metrics

    def records_sent(self, topic: str, count: int, now: float) -> None:
        """``count`` records of ``topic`` were acknowledged at ``now``."""
        self.record_send_total += count
        self._record_send.record_many(count, 1, count, now)
        self._topic(topic, now).sent(count, now)

    def records_failed(self, topic: str, count: int) -> None:
        """``count`` records of ``topic`` failed for good."""
        now = self._clock()
        self.record_error_total += count
        self._record_errors.record_many(count, 1, count, now)
        self._topic(topic, now).failed(count, now)

    def records_retried(self, topic: str, count: int) -> None:
        """``count`` records of ``topic`` go out again."""
        now = self._clock()
        self.record_retry_total += count
        self._record_retries.record_many(count, 1, count, now)
        self._topic(topic, now).retried(count, now)

    def produce_sent(self, batches: list[ProducerBatch], now: float) -> None:
        """A Produce request with ``batches`` (closed) went out: the request's counts and
        each topic's bytes (every attempt, as Java counts a topic's bytes); a batch's first
        attempt also adds its size, compression rate, records and time in the queue."""
        records = 0
        size = 0
        for batch in batches:
            builder = batch.builder
            view = builder.closed_view
            sent = len(view) if view is not None else 0
            uncompressed = builder.uncompressed_size
            count = batch.record_count
            records += count
            size += sent
            self._topic(batch.topic, now).batch_sent(sent, uncompressed, now)
            if batch.attempts == 0:
                self._batch_size.record(sent, now)
                self._compression_rate.record(sent / uncompressed if uncompressed else 1.0, now)
                self._queue_time.record((now - batch.created) * 1000.0, now)
                # The records' own bytes: the batch's header is not a record's.
                record_bytes = max(0, uncompressed - RECORD_BATCH_OVERHEAD)
                self._record_size.record_many(
                    record_bytes, count, record_bytes / max(count, 1), now
                )
        self.request_total += 1
        self.byte_total += size
        self._records_per_request.record(records, now)
        self._requests.record(1, now)
        self._bytes.record(size, now)

    def batch_offloaded(self) -> None:
        """A batch was handed to a worker thread to be compressed."""
        self.compression_offload_total += 1

    def batch_overtaken(self) -> None:
        """A batch failed with BatchOvertakenError (whether it was written is unknown)."""
        self.batch_overtaken_total += 1

    def batch_split(self) -> None:
        """A batch the broker found too large was split into smaller ones."""
        self.batch_split_total += 1
        self._batch_splits.record(1, self._clock())

    def produce_answered(
        self, node_id: int, latency: float, throttle_time_ms: int, now: float
    ) -> None:
        """The answer to a Produce request to ``node_id`` arrived ``latency`` seconds after
        the request, asking the client to wait ``throttle_time_ms`` (a quota; 0: none). A
        request that failed (no answer) counts with 0."""
        latency_ms = latency * 1000.0
        self._request_latency.record(latency_ms, now)
        self.node(node_id).request_completed(latency_ms, now)
        if throttle_time_ms > 0:
            self._throttle_time.record(throttle_time_ms, now)

    def topic_snapshots(self) -> dict[str, dict[str, float]]:
        """Each topic's metrics by their Java names, by topic."""
        now = self._clock()
        # A copy first: a reader on another thread (a Prometheus server's) must not iterate
        # the dict while the event loop adds a topic.
        topics = list(self._topics.items())
        return {topic: metrics.snapshot(now) for topic, metrics in topics}

    def node_snapshots(self) -> dict[int, dict[str, float]]:
        """Each broker's metrics by their Java names, by node id."""
        now = self._clock()
        nodes = list(self._nodes.items())
        return {node: metrics.snapshot(now) for node, metrics in nodes}

    def snapshot(
        self,
        buffer_available: int,
        buffer_total: int,
        bufferpool_wait_time_total: float,
        waiting_threads: int,
        requests_in_flight: int = 0,
    ) -> dict[str, float]:
        """Every producer-wide metric by its Java name."""
        now = self._clock()
        return {
            "record-send-total": float(self.record_send_total),
            "record-send-rate": self._record_send.rate(now),
            "record-error-total": float(self.record_error_total),
            "record-error-rate": self._record_errors.rate(now),
            "record-retry-total": float(self.record_retry_total),
            "record-retry-rate": self._record_retries.rate(now),
            "batch-size-avg": self._batch_size.avg(now),
            "batch-size-max": self._batch_size.max(now),
            "batch-split-total": float(self.batch_split_total),
            "batch-split-rate": self._batch_splits.rate(now),
            "batch-overtaken-total": float(self.batch_overtaken_total),
            "records-per-request-avg": self._records_per_request.avg(now),
            "compression-rate-avg": self._compression_rate.avg(now),
            "compression-offload-total": float(self.compression_offload_total),
            "request-latency-avg": self._request_latency.avg(now),
            "request-latency-max": self._request_latency.max(now),
            "requests-in-flight": float(requests_in_flight),
            "produce-throttle-time-avg": self._throttle_time.avg(now),
            "produce-throttle-time-max": self._throttle_time.max(now),
            "record-queue-time-avg": self._queue_time.avg(now),
            "record-queue-time-max": self._queue_time.max(now),
            "record-size-avg": self._record_size.avg(now),
            "request-total": float(self.request_total),
            "request-rate": self._requests.rate(now),
            "outgoing-byte-total": float(self.byte_total),
            "outgoing-byte-rate": self._bytes.rate(now),
            "buffer-available-bytes": float(buffer_available),
            "buffer-total-bytes": float(buffer_total),
            "bufferpool-wait-time-total": bufferpool_wait_time_total * 1e9,
            "bufferpool-wait-time-ns-total": bufferpool_wait_time_total * 1e9,
            "waiting-threads": float(waiting_threads),
        }
