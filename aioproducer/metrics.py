"""Producer metrics under the Java client's names (``producer-metrics`` group).

Totals count since the producer started; averages and maxima are over the last sample
window (``metrics_sample_window_ms``, two windows as in Java); rates are per second over the
same span.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["CONNECTION_METRICS", "ProducerMetrics"]

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
        """Sum per second over the elapsed part of the two windows."""
        self._roll(now)
        elapsed = (now - self._start) + (self._window if self._previous[1] else 0.0)
        elapsed = max(elapsed, 1.0)
        return (self._current[0] + self._previous[0]) / elapsed


class ProducerMetrics:
    """Counters the producer updates on its hot paths, read by ``Producer.metrics()``."""

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        now = clock()
        self.record_send_total = 0
        self.record_error_total = 0
        self.record_retry_total = 0
        self.request_total = 0
        self.byte_total = 0
        self.compression_offload_total = 0
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

    def records_sent(self, count: int) -> None:
        """``count`` records were acknowledged."""
        self.record_send_total += count
        self._record_send.record_many(count, 1, count, self._clock())

    def records_failed(self, count: int) -> None:
        """``count`` records failed for good."""
        self.record_error_total += count
        self._record_errors.record_many(count, 1, count, self._clock())

    def records_retried(self, count: int) -> None:
        """``count`` records go out again."""
        self.record_retry_total += count
        self._record_retries.record_many(count, 1, count, self._clock())

    def batch_drained(
        self, size: int, uncompressed: int, records: int, queue_time: float, now: float
    ) -> None:
        """A batch left the accumulator for a request."""
        self._batch_size.record(size, now)
        self._compression_rate.record(size / uncompressed if uncompressed else 1.0, now)
        self._queue_time.record(queue_time * 1000.0, now)
        self._record_size.record_many(uncompressed, records, uncompressed / max(records, 1), now)

    def batch_offloaded(self) -> None:
        """A batch was handed to a worker thread to be compressed."""
        self.compression_offload_total += 1

    def request_sent(self, records: int, size: int, now: float) -> None:
        """A produce request went out."""
        self.request_total += 1
        self.byte_total += size
        self._records_per_request.record(records, now)
        self._requests.record(1, now)
        self._bytes.record(size, now)

    def request_completed(self, latency: float, now: float) -> None:
        """A produce response arrived ``latency`` seconds after its request."""
        self._request_latency.record(latency * 1000.0, now)

    def request_throttled(self, throttle_time_ms: int, now: float) -> None:
        """A produce response asked the client to wait ``throttle_time_ms`` (a quota)."""
        self._throttle_time.record(throttle_time_ms, now)

    def snapshot(
        self,
        buffer_available: int,
        buffer_total: int,
        bufferpool_wait_time_total: float,
        waiting_threads: int,
    ) -> dict[str, float]:
        """Every metric by its Java name."""
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
            "records-per-request-avg": self._records_per_request.avg(now),
            "compression-rate-avg": self._compression_rate.avg(now),
            "compression-offload-total": float(self.compression_offload_total),
            "request-latency-avg": self._request_latency.avg(now),
            "request-latency-max": self._request_latency.max(now),
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
