"""Serializers that see the record they serialize: its topic and its headers.

A ``key_serializer`` or ``value_serializer`` is one of:

- a callable of one argument, ``serializer(data) -> bytes | None`` (``str.encode``, say);
- a :class:`Serializer`: an object with ``serialize(topic, headers, data)``, the Java
  client's ``Serializer.serialize(String topic, Headers headers, T data)``. It learns the
  record's topic (a Schema Registry serializer names its subject after it) and gets the
  record's headers as a list it may append to: what it adds is sent with the record;
- a serializer of confluent-kafka (``confluent_kafka.serialization.Serializer``:
  ``StringSerializer``, ``AvroSerializer``, ``JSONSerializer``, ``ProtobufSerializer``),
  called as confluent-kafka's ``SerializingProducer`` calls it, with a
  ``SerializationContext(topic, MessageField.KEY or VALUE, headers)``.

A key serializer runs before the value serializer, both with the same headers, after the
interceptors and before the partitioner, as in the Java client. A ``None`` key or value never
reaches either: it stays ``None`` (no key; a tombstone). A serializer that raises, or returns
something other than bytes-like or ``None``, fails that record with a
:class:`~aioproducer.errors.SerializationError`; so does a header it adds that is not a
``(str, bytes or None)`` pair. Serializers run on the event loop (for ``SyncProducer``, in the
calling thread), so one that does I/O on a cache miss blocks the loop while it does.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from aioproducer.errors import KafkaError, SerializationError
from aioproducer.records import Header

__all__ = ["Serializer", "SerializerNotReady"]

_T_contra = TypeVar("_T_contra", contravariant=True)


class Serializer(Protocol[_T_contra]):
    """A serializer that sees the record: the Java client's ``Serializer``.

    Example::

        class Tagged:
            def serialize(self, topic: str, headers: list[Header], data: str) -> bytes:
                headers.append(("content-type", b"text/plain"))
                return data.encode()
    """

    def serialize(self, topic: str, headers: list[Header], data: _T_contra) -> bytes | None:
        """``data`` (never None) as bytes, or None.

        Args:
            topic: the record's topic.
            headers: the record's headers so far, as ``(name, value)`` pairs; append to
                add some (the key serializer's additions are there for the value's).
            data: the key or value to serialize.
        """
        ...


class SerializerNotReady(Exception):
    """Raised by a :class:`Serializer` that must fetch something before it can serialize
    (a Schema Registry serializer meeting a schema it has no id for yet).

    ``send()`` then awaits ``wait()`` in its slow path, as it waits for a topic's metadata,
    within what is left of ``max_block_ms``, and calls the serializers again (the
    interceptors do not run twice); ``SyncProducer`` waits in the calling thread.
    A wait that fails with a retriable :class:`~aioproducer.errors.KafkaError` (a registry
    that cannot be reached) is tried again until ``max_block_ms`` runs out; any other error
    of the wait fails the record at once, as a
    :class:`~aioproducer.errors.SerializationError` unless it is a ``KafkaError``.

    Args:
        wait: makes the awaitable to wait for; called once per wait, on the producer's
            event loop.
        what: what is awaited, for the error when ``max_block_ms`` runs out first.
    """

    def __init__(self, wait: Callable[[], Awaitable[object]], what: str) -> None:
        super().__init__(what)
        self.wait = wait
        self.what = what
        #: Set by the producer: the record as the interceptors left it, to resume from.
        self.record: Any = None


async def wait_for_serializer(not_ready: SerializerNotReady, timeout: float) -> None:
    """Await what ``not_ready`` waits for, within ``timeout`` seconds: a wait that fails
    with a retriable error (a registry that cannot be reached, a 503) is tried again, after
    0.1 s and then longer (up to 1 s), until the time runs out, as a send waits for a
    topic's metadata.

    Raises:
        KafkaError: the wait's own error (a registry's refusal) when it is not retriable,
            or the last retriable one when the time ran out after it.
        SerializationError: the time ran out with no error to show (a request still
            unanswered), retriable; or the wait failed with an error that is not a
            KafkaError.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    backoff = _FIRST_RETRY_S
    last: KafkaError | None = None
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise last if last is not None else _out_of_time(not_ready)
        try:
            await asyncio.wait_for(not_ready.wait(), remaining)
            return
        except asyncio.TimeoutError:  # TimeoutError from 3.11, a class of its own before
            raise last if last is not None else _out_of_time(not_ready) from None
        except KafkaError as exc:
            if not exc.retriable:
                raise
            last = exc
            pause = min(backoff, deadline - loop.time())
            if pause > 0:
                await asyncio.sleep(pause)
            backoff = min(backoff * 2, _LAST_RETRY_S)
        except Exception as exc:
            raise SerializationError(
                f"the serializer could not get {not_ready.what}: {exc!r}"
            ) from exc


# The pauses between tries of a wait that failed with a retriable error.
_FIRST_RETRY_S = 0.1
_LAST_RETRY_S = 1.0


def _out_of_time(not_ready: SerializerNotReady) -> SerializationError:
    return SerializationError(
        f"max_block_ms passed before the serializer had {not_ready.what}", retriable=True
    )


def with_context(serializer: Any) -> bool:
    """True when ``serializer`` is called with the record's topic and headers (a
    :class:`Serializer`, or one of confluent-kafka's); False for a one-argument callable."""
    if callable(getattr(serializer, "serialize", None)):
        return True
    return _is_confluent(serializer)


def _is_confluent(serializer: Any) -> bool:
    return any(
        cls.__name__ == "Serializer" and cls.__module__.startswith("confluent_kafka.")
        for cls in type(serializer).__mro__
    )


def serializer_name(serializer: Any) -> str:
    """How errors name ``serializer``: its qualified name, or its class's."""
    name = getattr(serializer, "__qualname__", None)
    if not isinstance(name, str):
        name = type(serializer).__qualname__
    module = getattr(serializer, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) else name


def call_in_context(
    serializer: Any, data: Any, role: str, topic: str, headers: list[Header]
) -> Any:
    """What ``serializer`` (:func:`with_context` true) makes of ``data``, the record's
    ``role`` ("key" or "value")."""
    serialize = getattr(serializer, "serialize", None)
    if callable(serialize):
        return serialize(topic, headers, data)
    from confluent_kafka.serialization import MessageField, SerializationContext

    field = MessageField.KEY if role == "key" else MessageField.VALUE
    # Their list, appended to in place: what a confluent serializer adds is sent too.
    shared: Any = headers
    return serializer(data, SerializationContext(topic, field, shared))


def refuse_coroutine(result: Any, serializer: Any, role: str) -> None:
    """SerializationError when a serializer returned a coroutine (an async serializer)."""
    if inspect.iscoroutine(result):
        result.close()
        raise SerializationError(
            f"{role}_serializer {serializer_name(serializer)} returned a coroutine: serializers "
            "run synchronously, so an async serializer (confluent-kafka's AsyncAvroSerializer, "
            "say) cannot be used; use its synchronous counterpart"
        )
