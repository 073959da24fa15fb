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
:func:`send_and_forget`. With ``topics=[NewTopic("orders", num_partitions=6)]`` the lifespan
also makes sure the app's topics exist (creating those missing) before the app serves
requests.

In tests, replace the dependency and the lifespan connects to nothing: it uses the
replacement (an :class:`~aioproducer.testing.InMemoryProducer`, say) instead::

    producer = InMemoryProducer()
    app.dependency_overrides[get_producer] = lambda: producer
    with TestClient(app) as client:
        client.post("/orders", json={...})
    assert producer.records("orders")
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, cast

from fastapi import Depends, Request

from aioproducer import NewTopic, Producer, ProducerState, RecordFuture
from aioproducer.errors import InvalidArgumentTypeError

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

    When the app replaces this lifespan's dependency (``app.dependency_overrides[
    get_producer]``, or ``[lifespan.dependency]`` for a custom ``state_key``), the lifespan
    builds no producer and connects to nothing. If the replacement takes no arguments, it
    is called once on startup and what it returns is stored instead, so your own lifespan
    finds it in ``app.state``; a :class:`~aioproducer.Producer` (such as an
    :class:`~aioproducer.testing.InMemoryProducer`) not started yet is started, and closed
    on shutdown.

    Args:
        config: producer options by snake_case or Java name.
        lifespan: your own lifespan, run inside this one (so it can use the producer
            through ``app.state.producer``); a mapping it yields joins the lifespan state.
        state_key: the name to store the producer under; :meth:`dependency` reads it.
        close_timeout: seconds ``close()`` may take on shutdown; records still undelivered
            then fail. None waits for them (up to ``delivery_timeout_ms``).
        producer_factory: builds the producer, called as ``producer_factory(config,
            **options)``: :class:`~aioproducer.Producer` by default;
            :class:`~aioproducer.testing.InMemoryProducer` for an app that runs without a
            broker (with the same options, so the same serializers).
        topics: topics the app needs, each a :class:`~aioproducer.NewTopic`: once the
            producer is started, those missing are created and those there are accepted as
            they are (:meth:`TopicAdmin.ensure_topics <aioproducer.TopicAdmin.ensure_topics>`),
            before the app serves requests. A topic that can be neither created nor found
            (a replication factor the cluster cannot meet, no permission) stops the app
            from starting. Also done on a replacement producer (an
            :class:`~aioproducer.testing.InMemoryProducer` creates them in memory); not on a
            replacement that is no :class:`~aioproducer.Producer`.
        **options: producer options by snake_case name; they win over ``config``.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        lifespan: _Lifespan | None = None,
        state_key: str = STATE_KEY,
        close_timeout: float | None = None,
        producer_factory: Callable[..., Producer] = Producer,
        topics: Iterable[NewTopic] = (),
        **options: Any,
    ) -> None:
        self._config = dict(config) if config is not None else None
        self._options = options
        self._inner = lifespan
        self._state_key = state_key
        self._close_timeout = close_timeout
        self._factory = producer_factory
        self._topics = list(topics)
        for topic in self._topics:
            if not isinstance(topic, NewTopic):
                raise InvalidArgumentTypeError(
                    f"topics takes NewTopic objects, not {type(topic).__name__} {topic!r}"
                )

    def __call__(self, app: Any) -> AbstractAsyncContextManager[Mapping[str, Any]]:
        """Return the async context manager Starlette enters on startup."""
        return self._run(app)

    @asynccontextmanager
    async def _run(self, app: Any) -> AsyncIterator[Mapping[str, Any]]:
        override = self._override(app)
        producer: Any
        if override is None:
            # Built here, not at import time: the server's loop is running now.
            producer = self._factory(self._config, **self._options)
        else:
            producer = _replacement(override)
            log.info(
                "the producer dependency is overridden: the lifespan builds no producer and "
                "connects to nothing"
            )
        started = isinstance(producer, Producer) and producer.state is ProducerState.CREATED
        if started:
            await producer.start()
        if self._topics and isinstance(producer, Producer):
            try:
                await producer.admin.ensure_topics(self._topics)
            except BaseException:
                if started:
                    await producer.close(0)
                raise
        state: dict[str, Any] = {}
        if producer is not _NOTHING:
            setattr(app.state, self._state_key, producer)
            state[self._state_key] = producer
        try:
            if self._inner is None:
                yield state
            else:
                async with self._inner(app) as inner_state:
                    if inner_state:
                        state.update(inner_state)
                    yield state
        finally:
            if producer is not _NOTHING and getattr(app.state, self._state_key, None) is producer:
                delattr(app.state, self._state_key)
            if started:
                await producer.close(self._close_timeout)

    def _override(self, app: Any) -> Callable[..., Any] | None:
        """The app's replacement for this lifespan's dependency, if it has one."""
        overrides = getattr(app, "dependency_overrides", None)
        if not overrides:
            return None
        keys: list[Callable[..., Any]] = [self.dependency]
        if self._state_key == STATE_KEY:
            keys.append(get_producer)
        for key in keys:
            replacement = overrides.get(key)
            if replacement is not None:
                return cast("Callable[..., Any]", replacement)
        return None

    def dependency(self, request: Request) -> Producer:
        """A dependency returning this lifespan's producer (for a custom ``state_key``)."""
        return _lookup(request, self._state_key)


_NOTHING: Any = object()


def _replacement(override: Callable[..., Any]) -> Any:
    """What a dependency override gives outside a request: its result when it is a plain
    callable that needs no argument, else ``_NOTHING`` (it is left to FastAPI to call)."""
    if inspect.iscoroutinefunction(override) or inspect.isgeneratorfunction(override):
        return _NOTHING
    if inspect.isasyncgenfunction(override):
        return _NOTHING
    try:
        signature = inspect.signature(override)
    except (TypeError, ValueError):
        return _NOTHING
    if any(_filled_by_fastapi(parameter) for parameter in signature.parameters.values()):
        return _NOTHING
    return override()


def _filled_by_fastapi(parameter: inspect.Parameter) -> bool:
    """True for a parameter only FastAPI can give a value: one without a default (the
    request, an ``Annotated[..., Depends(...)]``), or one whose default is FastAPI's own
    marker (``= Depends(...)``, ``= Header()``)."""
    if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        return False
    default = parameter.default
    if default is inspect.Parameter.empty:
        return True
    return type(default).__module__.split(".")[0] == "fastapi"


def kafka_lifespan(
    config: Mapping[str, Any] | None = None,
    *,
    lifespan: _Lifespan | None = None,
    close_timeout: float | None = None,
    producer_factory: Callable[..., Producer] = Producer,
    topics: Iterable[NewTopic] = (),
    **options: Any,
) -> ProducerLifespan:
    """A lifespan that starts a producer with the app and closes it on shutdown.

    ``FastAPI(lifespan=kafka_lifespan(bootstrap_servers="host:9092"))``; with
    ``topics=[NewTopic("orders", num_partitions=6)]`` it also makes sure the app's topics
    exist before the app serves requests. See :class:`ProducerLifespan` for the arguments.
    """
    return ProducerLifespan(
        config,
        lifespan=lifespan,
        close_timeout=close_timeout,
        producer_factory=producer_factory,
        topics=topics,
        **options,
    )


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

    Tests can replace it with ``app.dependency_overrides[get_producer] = ...`` (an
    :class:`~aioproducer.testing.InMemoryProducer`, say); the lifespan then connects to
    nothing (see :class:`ProducerLifespan`).

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
