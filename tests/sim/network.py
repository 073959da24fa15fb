"""Fake broker connections for the simulation: in-order answers, in-flight limits, drops.

These stand in for :class:`~aioproducer.net.connection.BrokerConnection` and
:class:`~aioproducer.net.manager.ConnectionManager` (what the Sender uses of them, as in
``tests/unit/test_sender.py``) and behave as the real ones do where it matters:

- a connection pipelines at most ``max_in_flight`` requests and queues their answers on the
  sender's answer queue strictly in the order they were sent (an answer ready early waits
  behind an older one);
- :meth:`FakeConnection.close` fails every in-flight request once (the oldest with the
  given error, the others with :class:`~aioproducer.errors.KafkaConnectionError`, as
  ``Session.close`` does); an answer the broker produces afterwards goes nowhere;
- a write may fail (:meth:`Network.write_fails`): ``send_for`` then closes the connection,
  failing the requests already in flight on it, and raises
  :class:`~aioproducer.errors.KafkaConnectionError`; nothing is queued for the request it
  was given, as the real connection does;
- a request is timed out only when the sender calls ``check_request_timeouts`` (the real
  manager has no timer of its own): the oldest request past ``request_timeout_ms`` fails
  with :class:`~aioproducer.errors.RequestTimedOutError` and the connection closes;
- a dropped connection is reconnected only when the sender asks (``ensure_connecting``),
  after a connect delay, and not while its broker is down.

The simulation (:class:`~tests.sim.simulation.Simulation`) is the broker side: it is told of
every request sent (:meth:`Network.on_send`) and later sets answers with
:meth:`FakeConnection.answer`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aioproducer._core.answers import AnswerHandler, AnswerQueue
from aioproducer.errors import (
    KafkaConnectionError,
    KafkaError,
    RequestTimedOutError,
)
from aioproducer.protocol.api import Request
from aioproducer.protocol.messages import ProduceRequest
from aioproducer.protocol.record_reader import DecodedRecordBatch, decode_record_batches

TopicPartition = tuple[str, int]


class Network(Protocol):
    """What the connections need of the simulation."""

    now: float

    def on_send(self, connection: FakeConnection, entry: InFlight) -> None: ...

    def write_fails(self, connection: FakeConnection, request: Request[Any]) -> bool: ...

    def next_request_number(self) -> int: ...

    def on_ready_at(self, connection: FakeConnection, at: float) -> None: ...

    def connect_delay(self, node: int) -> float | None: ...

    def trace(self, text: str) -> None: ...

    def protocol_violation(self, text: str) -> None: ...


@dataclass(eq=False)
class InFlight:
    """One request on a connection, with its handler and (once the broker answered) its
    answer."""

    number: int
    request: Request[Any]
    handler: AnswerHandler
    sent_at: float
    # Produce: each partition's batch, decoded when sent (the buffer is reused later).
    batches: dict[TopicPartition, DecodedRecordBatch] = field(default_factory=dict)
    sizes: dict[TopicPartition, int] = field(default_factory=dict)
    answer: Any = None
    ready_at: float = math.inf
    # False once its connection closed: an answer to it is dropped.
    live: bool = True


class FakeConnection:
    """What the Sender uses of a BrokerConnection."""

    def __init__(
        self,
        network: Network,
        node_id: int,
        max_in_flight: int,
        request_timeout: float,
        answers: AnswerQueue,
    ) -> None:
        self.network = network
        self.answers = answers
        self.node_id = node_id
        self.host = f"broker{node_id}"
        self.port = 9092
        self.description = f"node {node_id} ({self.host}:{self.port})"
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.max_in_flight = max_in_flight
        self.request_timeout = request_timeout
        self.in_flight: deque[InFlight] = deque()
        self.closed = False
        # When the last request sent reaches the broker (the simulation keeps them in order).
        self.last_arrival = -math.inf
        # KIP-219, as the real connection keeps it: nothing to the broker before then.
        self.throttled_until = 0.0

    def in_flight_count(self) -> int:
        return len(self.in_flight)

    def can_send(self) -> bool:
        return (
            not self.closed
            and len(self.in_flight) < self.max_in_flight
            and self.throttled_until <= self.network.now
        )

    def throttle_delay(self, now: float) -> float:
        return max(0.0, self.throttled_until - now)

    def send_for(
        self, request: Request[Any], handler: AnswerHandler, version: int | None = None
    ) -> None:
        if self.closed:
            raise KafkaConnectionError(f"connection to broker {self.node_id} is closed")
        # The real connection sends what it is given (its caller checks can_send() first):
        # so does this one, and the simulation counts a request the caller should have held.
        if request.expects_response() and len(self.in_flight) >= self.max_in_flight:
            self.network.protocol_violation(
                f"{type(request).__name__} sent to broker {self.node_id} with "
                f"{len(self.in_flight)} requests in flight (max_in_flight_requests_per_"
                f"connection {self.max_in_flight})"
            )
        elif self.throttled_until > self.network.now:
            self.network.protocol_violation(
                f"{type(request).__name__} sent to broker {self.node_id} "
                f"{self.throttled_until - self.network.now:.3f}s before the end of the "
                f"throttle it asked for (KIP-219: the client holds every request)"
            )
        if self.network.write_fails(self, request):
            self.close(None, "a write failed (fault)")
            raise KafkaConnectionError(
                f"connection to broker {self.node_id}: write failed (fault), "
                f"{type(request).__name__} not sent"
            )
        entry = InFlight(self.network.next_request_number(), request, handler, self.network.now)
        if isinstance(request, ProduceRequest):
            for topic in request.topics:
                for partition in topic.partitions:
                    (decoded,) = decode_record_batches(bytes(partition.records))
                    entry.batches[(topic.name, partition.index)] = decoded
                    entry.sizes[(topic.name, partition.index)] = len(partition.records)
        if request.expects_response():
            self.in_flight.append(entry)
        self.network.on_send(self, entry)

    def answer(self, entry: InFlight, answer: Any, at: float) -> None:
        """The broker's answer to ``entry`` reaches the client at ``at``."""
        if not entry.live:
            return
        entry.answer = answer
        entry.ready_at = at
        self.network.on_ready_at(self, at)

    def deliver(self, now: float) -> list[InFlight]:
        """Queue for the sender, in send order, the answers that arrived by ``now``; return
        them."""
        delivered = []
        while self.in_flight and self.in_flight[0].ready_at <= now:
            entry = self.in_flight.popleft()
            entry.live = False
            throttle_ms = getattr(entry.answer, "throttle_time_ms", 0)
            if throttle_ms > 0:
                # Every answer the simulation throttles is of a version at which the broker
                # expects the client to wait (Produce v6+).
                self.throttled_until = max(self.throttled_until, now + throttle_ms / 1000.0)
            self.answers.push(entry.handler, entry.answer, None)
            delivered.append(entry)
        return delivered

    def close(self, head_error: KafkaError | None, reason: str) -> None:
        """Fail every in-flight request once (``Session.close``)."""
        if self.closed:
            return
        self.closed = True
        self.network.trace(f"connection to broker {self.node_id} closed: {reason}")
        for index, entry in enumerate(self.in_flight):
            entry.live = False
            error: KafkaError
            if index == 0 and head_error is not None:
                error = head_error
            else:
                error = KafkaConnectionError(
                    f"connection to broker {self.node_id} closed ({reason}) while "
                    f"{type(entry.request).__name__} #{entry.number} was in flight"
                )
            self.answers.push(entry.handler, None, error)
        self.in_flight.clear()

    def check_request_timeouts(self, now: float) -> bool:
        if self.closed or not self.in_flight:
            return False
        head = self.in_flight[0]
        if now - head.sent_at < self.request_timeout:
            return False
        self.close(
            RequestTimedOutError(
                f"{type(head.request).__name__} #{head.number} to broker {self.node_id} got no "
                "response within request_timeout_ms"
            ),
            "request timed out",
        )
        return True


class FakeConnections:
    """What the Sender uses of the ConnectionManager: one connection per broker,
    reconnected on request after a delay."""

    def __init__(
        self,
        network: Network,
        nodes: list[int],
        max_in_flight: int,
        request_timeout: float,
        answers: AnswerQueue,
    ) -> None:
        self.network = network
        self.nodes = nodes
        self.max_in_flight = max_in_flight
        self.request_timeout = request_timeout
        self.answers = answers
        self.connections: dict[int, FakeConnection] = {}
        self.connecting: dict[int, float] = {}  # node -> when the attempt ends
        self.backoff_until: dict[int, float] = {}
        for node in nodes:
            self.connections[node] = self._new(node)

    def _new(self, node: int) -> FakeConnection:
        return FakeConnection(
            self.network, node, self.max_in_flight, self.request_timeout, self.answers
        )

    def ready(self, node_id: int) -> FakeConnection | None:
        connection = self.connections.get(node_id)
        if connection is None or connection.closed:
            return None
        return connection

    def ensure_connecting(self, node_id: int, now: float) -> None:
        if self.ready(node_id) is not None or node_id in self.connecting:
            return
        if now < self.backoff_until.get(node_id, -math.inf):
            return
        delay = self.network.connect_delay(node_id)
        if delay is None:
            # The broker is down: the attempt fails; try again after a backoff.
            self.backoff_until[node_id] = now + 0.05
            return
        self.connecting[node_id] = now + delay
        self.network.on_ready_at(self.connections[node_id], now + delay)

    def finish_connecting(self, now: float) -> None:
        """Attempts that ended by ``now`` succeed if their broker is up."""
        for node, until in list(self.connecting.items()):
            if until <= now:
                del self.connecting[node]
                if self.network.connect_delay(node) is None:
                    self.backoff_until[node] = now + 0.05
                    continue
                self.connections[node] = self._new(node)
                self.network.trace(f"connected to broker {node}")

    def is_connecting(self, node_id: int) -> bool:
        return node_id in self.connecting

    def connection_delay(self, node_id: int, now: float) -> float:
        if node_id in self.connecting:
            return math.inf
        return max(0.0, self.backoff_until.get(node_id, -math.inf) - now)

    def auth_error(self, node_id: int) -> tuple[KafkaError, float] | None:
        return None

    def least_loaded(self, now: float, for_metadata: bool = False) -> FakeConnection | None:
        usable = [c for n in self.nodes if (c := self.ready(n)) is not None and c.can_send()]
        return min(usable, key=lambda c: c.in_flight_count()) if usable else None

    def ensure_any_connecting(self, now: float) -> None:
        for node in self.nodes:
            self.ensure_connecting(node, now)

    def check_request_timeouts(self, now: float) -> None:
        for connection in list(self.connections.values()):
            connection.check_request_timeouts(now)

    def close_idle(self, now: float) -> None:
        return None

    def set_brokers(
        self, brokers: Mapping[int, tuple[str, int]], *, from_metadata: bool = True
    ) -> None:
        return None

    def rebootstrap(self, reason: str, now: float) -> None:
        return None  # the simulated brokers never move

    def distrust(self, node_id: int) -> None:
        return None

    @property
    def bootstrap_only(self) -> bool:
        return False

    def in_flight_total(self) -> int:
        return sum(len(c.in_flight) for c in self.connections.values() if not c.closed)
