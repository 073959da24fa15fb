"""FastAPI integration: one producer per app, started and closed by the app's lifespan.

::

    from fastapi import FastAPI
    from aioproducer.integrations.fastapi import ProducerDep, kafka_lifespan

    app = FastAPI(lifespan=kafka_lifespan(bootstrap_servers="localhost:9092", linger_ms=5))

    @app.post("/orders")
    async def create_order(order: Order, producer: ProducerDep) -> dict[str, int]:
        metadata = await producer.send_and_wait("orders", order.model_dump_json().encode())
        return {"offset": metadata.offset}

The producer is built and started inside the lifespan, on the server's running loop, and
closed (after delivering what is buffered) when the app shuts down. Requests reach it through
the :func:`get_producer` dependency. For publishing off the request path, see
:func:`send_and_forget`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, Request

from aioproducer import Producer, RecordFuture

__all__ = [
    "STATE_KEY",
    "ProducerDep",
    "ProducerLifespan",
    "get_producer",
    "kafka_lifespan",
    "log_failure",
    "send_and_forget",
]

log = logging.getLogger("aioproducer.integrations.fastapi")

STATE_KEY = "producer"
"""The name under which the lifespan stores the producer (request and app state)."""

_Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


class ProducerLifespan:
    """A FastAPI/Starlette lifespan that runs a :class:`~aioproducer.Producer` with the app.

    Pass an instance as ``FastAPI(lifespan=...)``. On startup it builds and starts the
    producer; the app serves requests only once the producer is connected, and a startup
    failure (no broker answering within ``max_block_ms``) stops the app from starting. On
    shutdown it closes the producer, which delivers every buffered record first. The
    producer is stored as ``app.state.producer`` and in the lifespan state, so
    ``request.state.producer`` and :func:`get_producer` find it.

    Args:
        config: producer options by snake_case or Java name.
        lifespan: your own lifespan, run inside this one (so it can use the producer
            through ``app.state.producer``); a mapping it yields joins the lifespan state.
        state_key: the name to store the producer under; :meth:`dependency` reads it.
        close_timeout: seconds ``close()`` may take on shutdown; records still undelivered
            then fail. None waits for them (up to ``delivery_timeout_ms``).
        **options: producer options by snake_case name; they win over ``config``.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        lifespan: _Lifespan | None = None,
        state_key: str = STATE_KEY,
        close_timeout: float | None = None,
        **options: Any,
    ) -> None:
        self._config = dict(config) if config is not None else None
        self._options = options
        self._inner = lifespan
        self._state_key = state_key
        self._close_timeout = close_timeout

    def __call__(self, app: Any) -> AbstractAsyncContextManager[Mapping[str, Any]]:
        """Return the async context manager Starlette enters on startup."""
        return self._run(app)

    @asynccontextmanager
    async def _run(self, app: Any) -> AsyncIterator[Mapping[str, Any]]:
        # Built here, not at import time: the server's loop is running now.
        producer = Producer(self._config, **self._options)
        await producer.start()
        setattr(app.state, self._state_key, producer)
        try:
            state: dict[str, Any] = {self._state_key: producer}
            if self._inner is None:
                yield state
            else:
                async with self._inner(app) as inner_state:
                    if inner_state:
                        state.update(inner_state)
                    yield state
        finally:
            if getattr(app.state, self._state_key, None) is producer:
                delattr(app.state, self._state_key)
            await producer.close(self._close_timeout)

    def dependency(self, request: Request) -> Producer:
        """A dependency returning this lifespan's producer (for a custom ``state_key``)."""
        return _lookup(request, self._state_key)


def kafka_lifespan(
    config: Mapping[str, Any] | None = None,
    *,
    lifespan: _Lifespan | None = None,
    close_timeout: float | None = None,
    **options: Any,
) -> ProducerLifespan:
    """A lifespan that starts a producer with the app and closes it on shutdown.

    ``FastAPI(lifespan=kafka_lifespan(bootstrap_servers="host:9092"))``; see
    :class:`ProducerLifespan` for the arguments.
    """
    return ProducerLifespan(config, lifespan=lifespan, close_timeout=close_timeout, **options)


def _lookup(request: Request, key: str) -> Producer:
    producer = getattr(request.state, key, None)
    if producer is None:
        producer = getattr(request.app.state, key, None)
    if not isinstance(producer, Producer):
        raise RuntimeError(
            f"no aioproducer Producer in the app state under {key!r}: create the app with "
            "FastAPI(lifespan=kafka_lifespan(...)), and in tests enter the client "
            "(`with TestClient(app) as client:`) so that the lifespan runs"
        )
    return producer


def get_producer(request: Request) -> Producer:
    """The app's producer: a dependency, ``Annotated[Producer, Depends(get_producer)]``.

    Tests can replace it with ``app.dependency_overrides[get_producer] = ...``.

    Raises:
        RuntimeError: the app was not created with :func:`kafka_lifespan` (or its lifespan
            did not run).
    """
    return _lookup(request, STATE_KEY)


ProducerDep = Annotated[Producer, Depends(get_producer)]
"""A handler parameter annotated with this receives the app's producer."""


def log_failure(future: Any) -> None:
    """A done-callback that logs a record's delivery failure (and ignores success).

    ``future.add_done_callback(log_failure)`` on a :class:`~aioproducer.RecordFuture` whose
    outcome nobody awaits, so that failures are not silent.
    """
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        log.error("a record sent in the background was not delivered: %r", error)


async def send_and_forget(
    producer: Producer,
    topic: str,
    value: Any = None,
    key: Any = None,
    **kwargs: Any,
) -> RecordFuture:
    """Buffer a record and return at once; a delivery failure is logged, not raised.

    Awaiting this takes only as long as buffering (it waits only for topic metadata or buffer
    memory, up to ``max_block_ms``), so the response does not wait for the broker's round
    trip. Errors known at once (a value that is not bytes, an unknown topic, a full buffer)
    are raised here; later ones go to the ``aioproducer.integrations.fastapi`` logger. The
    record is delivered before the app finishes shutting down, as the lifespan closes the
    producer. ``kwargs`` are ``send``'s (``partition``, ``timestamp_ms``, ``headers``).
    """
    future = await producer.send(topic, value, key, **kwargs)
    future.add_done_callback(log_failure)
    return future
