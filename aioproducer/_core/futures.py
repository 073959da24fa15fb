"""The futures of sent records: :class:`RecordFuture` per record, :class:`BatchResults` per
``send_many`` call.

Compiled by mypyc where a C compiler is at hand (:mod:`aioproducer.compiled`): its classes
take no attributes beyond those declared and no patched methods, and the types it
declares are checked at run time.

One of each is made per record sent, so this module is compiled with the hot path (see
:mod:`aioproducer.compiled`); ``aioproducer.RecordFuture`` and ``aioproducer.BatchResults``
are the names to import.
"""

from __future__ import annotations

import array
import asyncio
import copy
import functools
import itertools
from collections.abc import Callable, Generator, Sequence
from contextvars import Context
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar, cast

from aioproducer._core.gc import track as _gc_track
from aioproducer._core.gc import untrack as _gc_untrack
from aioproducer._core.gc import untrack_new as _gc_untrack_new
from aioproducer._core.gc import untracked_tuple
from aioproducer.errors import KafkaError
from aioproducer.records import RecordMetadata, RecordMetadataSequence, TimestampType

if TYPE_CHECKING:
    from aioproducer._core.accumulator import ProducerBatch

__all__ = ["BatchResults", "BatchWatcher", "RecordFuture", "RecordRun"]

_E = TypeVar("_E", bound=BaseException)

# Final: compiled, these are C statics rather than a globals lookup per record.
_RecordMetadata: Final = RecordMetadata
_untracked_tuple: Final = untracked_tuple  # a static, not a globals lookup per record
_CREATE_TIME: Final = TimestampType.CREATE_TIME
_LOG_APPEND_TIME: Final = TimestampType.LOG_APPEND_TIME
# Tells the BatchResults of different send_many calls apart (see RecordRun.owner).
_tokens: Final = itertools.count()
# RecordFuture keeps key_size + 1 and value_size + 1 in one int, the key's above this bit.
# Kafka's sizes are int32, so both parts fit; compiled, the int stays unboxed for any key
# under 1 GiB.
_SIZE_SHIFT: Final = 32
_SIZE_MASK: Final = (1 << 32) - 1


class _Cancelled:
    """What a cancelled :class:`RecordFuture` holds in its callback slot: the cancel message."""

    def __init__(self, message: Any) -> None:
        self.message = message


class _Failed:
    """What a failed :class:`RecordFuture` holds in its callback slot once it handed out its
    error: the copy it raises and returns (see :func:`error_copy`)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def error_copy(error: _E, prefix: str | None = None, *, fresh: bool = False) -> _E:
    """A copy of ``error`` to raise or hand out in its place: the one way errors are copied.

    Raising an exception adds the frames it passes through to its traceback, and those
    frames hold the caller's variables. One exception object raised to many callers (each
    record of a failed batch, each caller after a fatal error, several threads) would pile
    up their frames, and a batch's own error raised from a record's future would refer
    through them back to the batch: a reference cycle through futures the GC does not track
    (see :mod:`aioproducer._core.gc`). A copy keeps the type, message, attributes and cause.

    Args:
        error: the exception to copy.
        prefix: when given, the copy's message is ``"{prefix}: {message}"``.
        fresh: False (a record future's copy of its batch's error) keeps the original's
            traceback and context, so only the caller's frames are the copy's own; True (an
            error raised again later, in another place) starts with no traceback and has the
            original as its context, and says nothing of records written
            (``maybe_written`` is its class's again).

    Returns ``error`` itself when it cannot be copied.
    """
    try:
        clone = copy.copy(error)
    except Exception:  # pragma: no cover - an exception class that cannot be copied
        return error
    if type(clone) is not type(error):  # pragma: no cover - a __reduce__ that changes it
        return error
    clone.__cause__ = error.__cause__
    if fresh:
        if isinstance(clone, KafkaError):
            clone.__dict__.pop("maybe_written", None)
        clone.__traceback__ = None
        clone.__context__ = error
        clone.__suppress_context__ = False
    else:
        clone.__traceback__ = error.__traceback__
        clone.__context__ = error.__context__
        clone.__suppress_context__ = error.__suppress_context__
    if prefix:
        message = error.message if isinstance(error, KafkaError) else str(error)
        clone.args = (f"{prefix}: {message}",)
    return clone


def with_maybe_written(error: _E, maybe_written: bool, note: str | None = None) -> _E:
    """``error`` for records whose batch may have been written (``maybe_written``) or not:
    a copy with :attr:`~aioproducer.errors.KafkaError.maybe_written` set so (``error``
    itself when it is not a :class:`KafkaError` or says so already); ``note`` is added to
    the copy's message."""
    if not isinstance(error, KafkaError) or error.maybe_written is maybe_written:
        return error
    clone = error_copy(error)
    clone.maybe_written = maybe_written
    if note:
        clone.args = (f"{clone.message}; {note}",)
    return clone


class BatchWatcher:
    """What a batch calls once when it is done (acknowledged, failed or split):
    :meth:`ProducerBatch.watch <aioproducer._core.accumulator.ProducerBatch.watch>` keeps
    the watcher itself, not a bound method made per watcher."""

    def _on_batch_done(self) -> None:
        raise NotImplementedError


class RecordFuture(BatchWatcher):
    """The result of one sent record: await it for its :class:`RecordMetadata`.

    No asyncio future is made per record (nor, unless awaited, per batch): this object
    derives the record's metadata from its batch's outcome, so sending stays cheap. It
    behaves as an asyncio future: awaitable, with ``done()``, ``result()``, ``exception()``,
    ``add_done_callback()``, ``cancel()``, and accepted as is by ``asyncio.gather``,
    ``asyncio.wait``, ``asyncio.as_completed``, ``asyncio.shield`` and ``asyncio.wait_for``
    (no task is made per record). Awaiting many in order costs less than ``gather``, which
    runs a Python callback per record (see "Send many records" in the getting-started
    guide).

    Cancelling it (or a task awaiting it) detaches only this future: the record is still
    delivered, as with any request already handed to a producer.
    """

    # Makes asyncio.isfuture() accept it, so gather() and wait() use it without a Task.
    _asyncio_future_blocking: ClassVar[bool] = False

    def __init__(
        self,
        batch: ProducerBatch,
        relative_offset: int,
        timestamp: int,
        key_size: int,
        value_size: int,
    ) -> None:
        # Every object made per record is one more for the cyclic garbage collector to walk,
        # again at each full collection while the caller keeps it (its pauses are what a
        # latency percentile sees), and its cost grows with the object's size: five slots
        # make 80 bytes, the smallest size class above four.
        self._batch = batch
        self.relative_offset = relative_offset
        self.timestamp = timestamp
        self._sizes = (key_size + 1) << _SIZE_SHIFT | (value_size + 1)
        # The rarely used state shares one slot:
        # - None: no callback;
        # - a callable: the one callback, registered with no context (the usual case);
        # - a list of (callback, context) pairs: several, or one with a context;
        # - a _Cancelled: this future was cancelled (and takes no more callbacks);
        # - a _Failed: the record failed, and this future handed out its copy of the error.
        # Compiled, a future starts untracked by the cyclic GC (see aioproducer._core.gc): the
        # batch is all it refers to. It is tracked as soon as this slot holds anything.
        # The batch is told to call _on_batch_done() when the first callback comes; a record
        # whose callbacks were all removed and which gets another is told twice, and the
        # second call finds nothing to run.
        self._callbacks: Any = None

    @property
    def key_size(self) -> int:
        """Bytes of the serialized key, -1 for a None key."""
        return (self._sizes >> _SIZE_SHIFT) - 1

    @property
    def value_size(self) -> int:
        """Bytes of the serialized value, -1 for a None value."""
        return (self._sizes & _SIZE_MASK) - 1

    def _current(self) -> ProducerBatch:
        # The record's batch: the one it was appended to or, once that one was split (the
        # broker found it too large), the batch the split moved the record to. Batches keep
        # no futures (see ProducerBatch.records), so the future follows the split's
        # forwarding table itself, and remembers where it led.
        batch = self._batch
        while batch.split:
            forward = batch.forward
            if forward is None:
                raise AssertionError("a split batch without its forwarding table")
            batch, self.relative_offset = forward[self.relative_offset]
            self._batch = batch
        return batch

    def _take_callbacks(self) -> list[tuple[Callable[[Any], object], Context | None]]:
        # Every registered callback in registration order; none are left registered.
        callbacks = self._callbacks
        if callbacks is None or isinstance(callbacks, _Failed):
            return []
        self._callbacks = None
        if isinstance(callbacks, list):
            return callbacks
        return [(callbacks, None)]

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the record's batch belongs to."""
        batch = self._batch
        if batch.split:
            batch = self._current()
        return batch.loop

    def done(self) -> bool:
        """True once the record was acknowledged or failed (or this future cancelled)."""
        # The batch read directly while it was not split: asyncio.gather() and wait() ask
        # each record, and a method call per question is most of the cost.
        batch = self._batch
        if batch.split:
            batch = self._current()
        return batch.final or isinstance(self._callbacks, _Cancelled)

    def cancelled(self) -> bool:
        """True when this future (not the record's delivery) was cancelled."""
        return isinstance(self._callbacks, _Cancelled)

    def cancel(self, msg: Any = None) -> bool:
        """Detach this future: it reports cancelled; the record itself is still delivered."""
        if self.done():
            return False
        callbacks = self._take_callbacks()
        self._callbacks = _Cancelled(msg)
        _gc_track(self)
        if callbacks:
            loop = self.get_loop()
            for callback, context in callbacks:
                loop.call_soon(callback, self, context=context)
        return True

    @property
    def _cancel_message(self) -> Any:
        # asyncio.gather() reads this attribute of a cancelled child, as of its own futures.
        callbacks = self._callbacks
        return callbacks.message if isinstance(callbacks, _Cancelled) else None

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        # asyncio.gather() calls this on a cancelled child, as on its own futures.
        message = self._cancel_message
        return asyncio.CancelledError(*(() if message is None else (message,)))

    def _metadata(self, batch: ProducerBatch) -> RecordMetadata:
        # The metadata of an acknowledged record of ``batch``, made by the C helper where
        # it is built (the NamedTuple's own __new__ is a Python function, tuple.__new__
        # copies a tuple of the items, and this runs once per record): see gc.py.
        base_offset, log_append_time = batch.outcome
        if log_append_time < 0:
            timestamp, timestamp_type = self.timestamp, _CREATE_TIME
        else:
            timestamp, timestamp_type = log_append_time, _LOG_APPEND_TIME
        sizes = self._sizes  # key_size and value_size, without two property calls
        return _untracked_tuple(
            _RecordMetadata,
            batch.topic,
            batch.partition,
            base_offset + self.relative_offset if base_offset >= 0 else -1,
            timestamp,
            (sizes >> _SIZE_SHIFT) - 1,
            (sizes & _SIZE_MASK) - 1,
            timestamp_type,
        )

    def result(self) -> RecordMetadata:
        """The metadata; raises the record's error, or InvalidStateError when not done."""
        batch = self._batch
        if batch.final and batch.error is None and self._callbacks is None:
            # Acknowledged, not cancelled (a split batch is never final): the usual case.
            return self._metadata(batch)
        batch = self._current()
        if self.cancelled():
            raise self._make_cancelled_error()
        if not batch.final:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        if batch.error is not None:
            raise self._error(batch.error)
        return self._metadata(batch)

    def _acknowledged(self) -> RecordMetadata:
        # The metadata of the record once its batch was acknowledged, whether or not this
        # future was cancelled: cancelling detached its caller, the record was delivered
        # (the producer's interceptors hear of it all the same).
        return self._metadata(self._current())

    def exception(self) -> BaseException | None:
        """The record's error, None on success; raises InvalidStateError when not done."""
        batch = self._batch
        if batch.final and batch.error is None and self._callbacks is None:
            return None  # acknowledged, not cancelled: asyncio.gather() asks every record
        if self.cancelled():
            raise self._make_cancelled_error()
        batch = self._current()
        if not batch.final:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        error = batch.error
        return None if error is None else self._error(error)

    def _error(self, error: BaseException) -> BaseException:
        # This future's copy of its batch's error (see error_copy): the same one each time,
        # kept once no callback waits any more (the callbacks themselves ask for it).
        callbacks = self._callbacks
        if isinstance(callbacks, _Failed):
            return callbacks.error
        clone = error_copy(error)
        if callbacks is None:
            self._callbacks = _Failed(clone)
            _gc_track(self)
        return clone

    def add_done_callback(
        self, callback: Callable[[Any], object], *, context: Context | None = None
    ) -> None:
        """Call ``callback(self)`` once the record is acknowledged or failed.

        As with an asyncio future, the call comes soon after, on the event loop, never
        from inside this method; an exception the callback raises goes to the loop's
        exception handler and does not keep other callbacks from running.
        """
        callbacks = self._callbacks
        batch = self._batch
        if batch.final:  # done (a final batch was never split): called soon, as asyncio does
            batch.loop.call_soon(callback, self, context=context)
            return
        if callbacks is None and not batch.split:
            # The first callback of a pending record (asyncio.gather() and wait() add one
            # to each): one call from the batch, when done, serves every watching record.
            batch.watch(self)
            _gc_track(self)
            self._callbacks = callback if context is None else [(callback, context)]
            return
        if self.done():
            self.get_loop().call_soon(callback, self, context=context)
            return
        if callbacks is None:
            # One call from the batch, when done, serves every watching record of it.
            self._current().watch(self)
            _gc_track(self)
            if context is None:
                self._callbacks = callback
            else:
                self._callbacks = [(callback, context)]
        elif isinstance(callbacks, list):
            callbacks.append((callback, context))
        else:
            self._callbacks = [(callbacks, None), (callback, context)]

    def remove_done_callback(self, callback: Callable[[Any], object]) -> int:
        """Remove every registration of ``callback``; return how many there were."""
        callbacks = self._callbacks
        if callbacks is None:
            return 0
        if callbacks is callback:
            # The one callback (asyncio.wait() removes its own from every record it waited
            # for). The batch still calls _on_batch_done(), which then finds nothing to run.
            self._callbacks = None
            return 1
        if self.cancelled():
            return 0  # cancelling took every callback
        registered = self._take_callbacks()
        kept = [entry for entry in registered if entry[0] != callback]
        if kept:
            only_callback, only_context = kept[0]
            if len(kept) == 1 and only_context is None:
                self._callbacks = only_callback
            else:
                self._callbacks = kept
        return len(registered) - len(kept)

    def _on_batch_done(self) -> None:
        # The watched batch is done: acknowledged, failed, or split.
        callbacks = self._callbacks
        if callbacks is None or isinstance(callbacks, (_Cancelled, _Failed)):
            return
        batch = self._batch
        if not batch.final:
            batch = self._current()
            if not batch.final:
                # Split: the record moved to a new batch, which calls back when it is done.
                batch.watch(self)
                return
        self._callbacks = None
        if isinstance(callbacks, list):
            for callback, context in callbacks:
                self._run_callback(callback, context)
            return
        try:  # the one callback, with no context: _run_callback() inlined
            callbacks(self)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report_callback_error(callbacks, exc)

    def _run_callback(self, callback: Callable[[Any], object], context: Context | None) -> None:
        try:
            if context is None:
                callback(self)
            else:
                context.run(callback, self)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report_callback_error(callback, exc)

    def _report_callback_error(self, callback: Callable[[Any], object], exc: BaseException) -> None:
        # As asyncio does for a future's callback: report it, and still call the other
        # callbacks (of this record and of the rest of its batch).
        self.get_loop().call_exception_handler(
            {
                "message": f"Exception in callback {callback!r} of {self!r}",
                "exception": exc,
                "future": self,
            }
        )

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self._wait(True)

    def __iter__(self) -> Generator[Any, None, RecordMetadata]:
        return self._wait(True)

    def _wait(self, detach: bool) -> Generator[Any, None, RecordMetadata]:
        # ``detach``: a cancellation of the awaiting task cancels this future too, as it
        # cancels the asyncio future a task awaits (asyncio.wait_for's timeout cancels the
        # task, not the awaited future, from Python 3.12 on). BatchResults waits without.
        batch = self._batch
        if batch.final and batch.error is None and self._callbacks is None:
            return self._metadata(batch)  # acknowledged: awaiting in order finds most so
        if not self.done():
            # A waiter of our own: cancelling the awaiting task must not cancel the batch.
            waiter: asyncio.Future[None] = self.get_loop().create_future()
            self.add_done_callback(functools.partial(_wake, waiter))
            try:
                yield from waiter.__await__()
            except asyncio.CancelledError:
                if detach:
                    self.cancel()
                raise
        return self.result()

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        batch = self._current()
        return f"<RecordFuture {batch.topic}-{batch.partition} {state}>"


def _wake(waiter: asyncio.Future[None], _: object) -> None:
    if not waiter.done():
        waiter.set_result(None)


class RecordRun:
    """Records of one ``send_many`` call that sit one after another in one batch, kept without
    a :class:`RecordFuture` each.

    ``send_many`` appends thousands of records per call; a future object per record is most
    of the cyclic garbage collector's work (it walks every live one again and again). A run
    keeps what a record's metadata needs in plain lists instead: the batch, the offset of its
    first record, and each record's place in the call and its key and value sizes. The
    futures are made only if asked for (:attr:`BatchResults.futures`), or when the batch is
    split (each record then moves to a new batch, which a future can follow).
    """

    def __init__(
        self,
        owner: int,
        batch: ProducerBatch,
        first_offset: int,
        timestamp: int,
        start_position: int,
    ) -> None:
        # The BatchResults.token of the call: a number, not the object, so that no reference
        # cycle keeps either alive after use.
        self.owner = owner
        self.batch = batch
        self.first_offset = first_offset
        self.timestamp = timestamp
        self.count = 0
        # Places in the call's results: start_position + i while they follow each other;
        # from the first gap on, each record's distance from the one before (the first's is
        # 0). Distances rather than places: they are small ints, which Python does not
        # allocate (a keyed call spreads its records over a few partitions' runs).
        self.start_position = start_position
        self.last_position = start_position - 1
        self.gaps: list[int] | None = None
        # Key sizes stay None while every record is key-less (-1 each).
        self.key_sizes: list[int] | None = None
        self.value_sizes: list[int] = []
        _untracked(self.value_sizes)
        self.futures: list[RecordFuture] | None = None
        # A run of rows of a BinaryPairs (add_rows) keeps no object per record: per piece
        # added, the list of places it came with (``rows.group()``'s, shared, never
        # changed) and three numbers in ``bounds`` (the piece's first position, and its
        # start and stop in the list), and the records' key and value sizes packed as two int32
        # each in ``packed``. Places and sizes become lists only when the metadata or the
        # futures are asked for, which a caller that only awaits the call never does. Such
        # a run takes rows only, and other runs never take rows. A run of key-less rows
        # (add_value_rows) has packed sizes only: its places follow each other.
        self.packed: bytearray | None = None
        self.keyless_rows = False
        self.pieces: list[list[int]] | None = None
        self.bounds: list[int] | None = None

    def add(self, position: int, key_size: int, value_size: int) -> None:
        """Take the record at the next offset of the batch, for place ``position`` (after
        the places of the run's records so far)."""
        count = self.count
        self._place(position, count)
        key_sizes = self.key_sizes
        if key_sizes is not None:
            key_sizes.append(key_size)
        elif key_size != -1:
            key_sizes = self.key_sizes = _untracked([-1] * count)
            key_sizes.append(key_size)
        self.value_sizes.append(value_size)
        self.count = count + 1

    def add_pairs(
        self,
        items: list[Any],
        base: int,
        places: list[int],
        start: int,
        stop: int,
        first_position: int,
    ) -> None:
        """Take the ``(key, value)`` records ``items[base + places[i]]`` for ``i`` in
        ``start:stop``, at the next offsets of the batch, for places
        ``first_position + places[i]``."""
        count = self.count
        key_sizes = self.key_sizes
        if key_sizes is None:
            key_sizes = self.key_sizes = _untracked([-1] * count)
        value_sizes = self.value_sizes
        for index in range(start, stop):
            place = places[index]
            self._place(first_position + place, count + index - start)
            key, value = cast("tuple[bytes, bytes]", items[base + place])
            key_sizes.append(len(key))
            value_sizes.append(len(value))
        self.count = count + stop - start

    def add_rows(
        self,
        rows: Any,
        places: list[int],
        start: int,
        stop: int,
        first_position: int,
        sizes: bytearray,
    ) -> None:
        """Take the records of the rows ``places[i]`` of a chunk of ``rows``, a BinaryPairs
        (``aioproducer._native.arrowcols``), for ``i`` in ``start:stop``, at the next
        offsets of the batch, for places ``first_position + places[i]``; ``sizes`` holds
        their key and value sizes as the encoder packed them. The run keeps ``places`` and
        three numbers, no object per row. Only on a run that is empty or holds rows."""
        pieces = self.pieces
        bounds = self.bounds
        packed = self.packed
        if pieces is None or bounds is None or packed is None:
            assert pieces is None and packed is None, "a run of key-less rows takes no more"
            self.pieces = pieces = [places]
            self.bounds = bounds = [first_position, start, stop]
            self.packed = sizes
            # Lists of ints, and the lists of places (ints only): in no reference cycle.
            _gc_untrack(pieces)
            _gc_untrack(bounds)
            self.keyless_rows = rows.keyless()
        else:
            packed += sizes
            pieces.append(places)
            bounds.append(first_position)
            bounds.append(start)
            bounds.append(stop)
        self.last_position = first_position + places[stop - 1]
        self.count += stop - start

    def _place(self, position: int, count: int) -> None:
        # The place of the run's record number ``count``.
        last = self.last_position
        gaps = self.gaps
        if gaps is not None:
            gaps.append(position - last)
        elif position != last + 1:
            # The run has records (its first one's place is start_position).
            gaps = self.gaps = _untracked([1] * count)
            gaps[0] = 0
            gaps.append(position - last)
        self.last_position = position

    def positions(self) -> list[int] | None:
        """The places in the call's results of the run's records, in order; None while they
        follow each other from :attr:`start_position` on."""
        pieces = self.pieces
        bounds = self.bounds
        if pieces is not None and bounds is not None:
            placed: list[int] = []
            for number, places in enumerate(pieces):
                first_position = bounds[3 * number]
                for index in range(bounds[3 * number + 1], bounds[3 * number + 2]):
                    placed.append(first_position + places[index])
            return placed
        gaps = self.gaps
        if gaps is None:
            return None
        positions = []
        position = self.start_position
        for gap in gaps:
            position += gap
            positions.append(position)
        return positions

    def sizes(self) -> tuple[list[int] | None, list[int]]:
        """The records' key sizes (None while every record is key-less) and value sizes,
        in order (-1 for a null)."""
        packed = self.packed
        if packed is None:
            return self.key_sizes, self.value_sizes
        numbers = array.array(_INT32)
        numbers.frombytes(packed)
        both: list[int] = numbers.tolist()
        return (None if self.keyless_rows else both[0::2]), both[1::2]

    def futures_if_moved(self) -> list[RecordFuture] | None:
        """The records' futures if they exist, made now if the run's batch was split (each
        record may then be in another batch, which only a future can follow); else None."""
        if self.futures is None and self.batch.split:
            return self.materialize()
        return self.futures

    def materialize(self) -> list[RecordFuture]:
        """A future for each record (made once); each follows its record if the batch is
        split."""
        futures = self.futures
        if futures is None:
            batch = self.batch
            first = self.first_offset
            timestamp = self.timestamp
            key_sizes, value_sizes = self.sizes()
            futures = []
            for index in range(self.count):
                future = RecordFuture(
                    batch,
                    first + index,
                    timestamp,
                    -1 if key_sizes is None else key_sizes[index],
                    value_sizes[index],
                )
                # Tracked: with interceptors the batch refers to this run, and so to them.
                _gc_track(future)
                futures.append(future)
            self.futures = futures
        return futures


# The array type code of a 32-bit int, as arrowcols packs a row's key and value sizes.
_INT32: Final = next(code for code in "ihl" if array.array(code).itemsize == 4)


def _untracked(numbers: list[int]) -> list[int]:
    # A run's lists of sizes and places hold ints only, thousands of them in a large batch:
    # out of the cyclic GC, which would otherwise walk them at every young collection while
    # the batch fills (they can be in no reference cycle).
    _gc_untrack(numbers)
    return numbers


def _batch_waiter(batch: ProducerBatch) -> asyncio.Future[None]:
    # A future of our own, set when the batch's future is done: cancelling the awaiting task
    # must not cancel the batch.
    future = batch.future
    waiter: asyncio.Future[None] = future.get_loop().create_future()
    future.add_done_callback(functools.partial(_wake, waiter))
    return waiter


class BatchResults:
    """What ``send_many`` returns: awaitable, resolving to a
    :class:`~aioproducer.RecordMetadataSequence` of each record's metadata, in order.

    Awaiting it raises the error of the first failed record, if any. ``len()`` is the number
    of records. The per-record futures are made only when :attr:`futures` is read, and the
    metadata only when the awaited sequence is read: awaiting the whole call needs neither.
    """

    def __init__(self, futures: list[RecordFuture] | None = None) -> None:
        self._total = 0
        # Records with a future of their own (the first of each new batch, those that
        # waited for memory or metadata) and their places in the results.
        self._futures: list[RecordFuture] = []
        self._positions: list[int] = []
        self._runs: list[RecordRun] = []
        self._all: list[RecordFuture] | None = None
        self.token = next(_tokens)
        # The batch of the record added last.
        self.last_batch: ProducerBatch | None = None
        for future in futures or ():
            self.add_future(future)

    def add_future(self, future: RecordFuture) -> None:
        """Append a record that has its own future."""
        self._futures.append(future)
        self.last_batch = future._batch
        self._positions.append(self._total)
        self._total += 1
        self._all = None

    def add_lazy(
        self, batch: ProducerBatch, offset: int, timestamp: int, key_size: int, value_size: int
    ) -> None:
        """Append the record just written at ``offset`` of ``batch``, without a future."""
        run = self._open_run(batch, offset, timestamp, self._total)
        run.add(self._total, key_size, value_size)
        self.last_batch = batch
        self._total += 1
        self._all = None

    def add_values(
        self,
        batch: ProducerBatch,
        first_offset: int,
        timestamp: int,
        values: Sequence[bytes],
        start: int,
        stop: int,
    ) -> None:
        """Append the key-less records ``values[start:stop]``, just written to ``batch`` from
        ``first_offset`` on, without futures."""
        if stop <= start:
            return
        run = self._new_run(batch, first_offset, timestamp)
        sizes = run.value_sizes
        for index in range(start, stop):
            sizes.append(len(values[index]))
        self._count_run(run, stop - start)

    def add_value_rows(
        self,
        batch: ProducerBatch,
        first_offset: int,
        timestamp: int,
        start: int,
        stop: int,
        sizes: bytearray,
    ) -> None:
        """:meth:`add_values` for the rows ``start:stop`` of a BinaryPairs without a key
        column (``aioproducer._native.arrowcols``), whose key and value sizes ``sizes``
        holds as the encoder packed them: the run keeps them so, places following each
        other."""
        if stop <= start:
            return
        run = self._new_run(batch, first_offset, timestamp)
        run.packed = sizes
        run.keyless_rows = True
        self._count_run(run, stop - start)

    def _new_run(self, batch: ProducerBatch, first_offset: int, timestamp: int) -> RecordRun:
        """A new run of records just written to ``batch`` from ``first_offset`` on, at the
        next places of the call's results; the caller adds their value sizes, then counts
        them in (:meth:`_count_run`)."""
        run = RecordRun(self.token, batch, first_offset, timestamp, self._total)
        batch.records.append(run)
        batch.open_run = run
        self._runs.append(run)
        return run

    def _count_run(self, run: RecordRun, count: int) -> None:
        """Count in the ``count`` records of ``run``, a new run (:meth:`_new_run`) whose
        value sizes are added."""
        run.count = count
        run.last_position = self._total + count - 1
        self.last_batch = run.batch
        self._total += count
        self._all = None

    def add_pairs(
        self,
        batch: ProducerBatch,
        first_offset: int,
        timestamp: int,
        items: list[Any],
        base: int,
        places: list[int],
        start: int,
        stop: int,
        first_position: int,
    ) -> None:
        """Take the ``(key, value)`` records ``items[base + places[i]]`` (``i`` in
        ``start:stop``), just written to ``batch`` from ``first_offset`` on, without
        futures, for the places ``first_position + places[i]``.

        The records of one chunk of a call go to their partitions' batches one partition
        after another, so places are filled out of order: :meth:`count_to` counts them in
        once all up to a place are added.
        """
        if stop <= start:
            return
        run = self._open_run(batch, first_offset, timestamp, first_position + places[start])
        run.add_pairs(items, base, places, start, stop, first_position)
        self.last_batch = batch
        self._all = None

    def _open_run(
        self,
        batch: ProducerBatch,
        first_offset: int,
        timestamp: int,
        position: int,
        rows: bool = False,
    ) -> RecordRun:
        """The call's run in ``batch`` that records from ``first_offset`` on, stamped
        ``timestamp``, join: the batch's open run if it is this call's and ends there (and
        holds rows when ``rows``, or no rows when not), else a new one whose first record
        has place ``position``."""
        run = batch.open_run
        if (
            run is None
            or run.owner != self.token
            or run.first_offset + run.count != first_offset
            or run.timestamp != timestamp
            or run.futures is not None
            # Rows join a run of rows (pieces); other records a run without packed sizes.
            or (run.pieces is None if rows else run.packed is not None)
        ):
            run = RecordRun(self.token, batch, first_offset, timestamp, position)
            batch.records.append(run)
            batch.open_run = run
            self._runs.append(run)
        return run

    def add_rows(
        self,
        batch: ProducerBatch,
        first_offset: int,
        timestamp: int,
        rows: Any,
        places: list[int],
        start: int,
        stop: int,
        first_position: int,
        sizes: bytearray,
    ) -> None:
        """:meth:`add_pairs` for rows of ``rows``, a BinaryPairs
        (``aioproducer._native.arrowcols``), the ``places[i]`` of a chunk, whose key and
        value sizes ``sizes`` holds packed (see :meth:`RecordRun.add_rows`)."""
        if stop <= start:
            return
        run = self._open_run(
            batch, first_offset, timestamp, first_position + places[start], True
        )
        run.add_rows(rows, places, start, stop, first_position, sizes)
        self.last_batch = batch
        self._all = None

    def count_to(self, total: int) -> None:
        """Count in the records added with :meth:`add_pairs` for the places below ``total``
        (each of them is added)."""
        self._total = total
        self._all = None

    def __len__(self) -> int:
        return self._total

    @property
    def futures(self) -> list[RecordFuture]:
        """The per-record futures, in the order the records were given (made on first use)."""
        futures = self._all
        if futures is None:
            slots: list[Any] = [None] * self._total
            for position, future in zip(self._positions, self._futures, strict=True):
                slots[position] = future
            for run in self._runs:
                positions = run.positions()
                start = run.start_position
                for index, future in enumerate(run.materialize()):
                    slots[start + index if positions is None else positions[index]] = future
            futures = self._all = slots
        return futures

    def done(self) -> bool:
        """True once every record was acknowledged or failed."""
        for run in self._runs:
            run_futures = run.futures_if_moved()
            if run_futures is None:
                if not run.batch.final:
                    return False
            elif not all(future.done() for future in run_futures):
                return False
        return all(future.done() for future in self._futures)

    def __await__(self) -> Generator[Any, None, RecordMetadataSequence]:
        # Records of one batch complete together: this waits about once per batch.
        for run in self._runs:
            while run.futures_if_moved() is None and not run.batch.final:
                # Woken when the batch is done, or split (its records then need futures).
                yield from _batch_waiter(run.batch).__await__()
            for future in run.futures or ():
                if not future.done():
                    yield from future._wait(False)
        for future in self._futures:
            if not future.done():
                yield from future._wait(False)
        # A failed record raises its error; of several, the first in order. The metadata of
        # the others is made only when the sequence is first read.
        failed = self._total
        failure: RecordFuture | None = None
        for position, future in zip(self._positions, self._futures, strict=True):
            if (future.cancelled() or future._current().error is not None) and position < failed:
                failed, failure = position, future
        for run in self._runs:
            run_futures = run.futures_if_moved()
            if run_futures is not None:
                positions = run.positions()
                for index, future in enumerate(run_futures):
                    if future.cancelled() or future._current().error is not None:
                        position = (
                            run.start_position + index if positions is None else positions[index]
                        )
                        if position < failed:
                            failed, failure = position, future
                continue
            batch = run.batch
            if batch.error is not None:
                position = run.start_position  # the first record's: places only grow
                if position < failed:
                    failed = position
                    failure = RecordFuture(batch, run.first_offset, run.timestamp, -1, -1)
        if failure is not None:
            failure.result()  # raises the record's error
        return RecordMetadataSequence(self._total, self._metadata)

    def _metadata(self) -> list[RecordMetadata]:
        # The metadata of each record of a call whose records were all acknowledged, built
        # with RecordFuture.result()'s checks inlined.
        results: list[Any] = [None] * self._total
        for position, future in zip(self._positions, self._futures, strict=True):
            results[position] = future._metadata(future._current())
        for run in self._runs:
            run_futures = run.futures_if_moved()
            if run_futures is not None:
                positions = run.positions()
                start = run.start_position
                for index, future in enumerate(run_futures):
                    results[start + index if positions is None else positions[index]] = (
                        future._metadata(future._current())
                    )
            else:
                _fill_run(results, run, run.batch)
        return results


def _fill_run(results: list[Any], run: RecordRun, batch: ProducerBatch) -> None:
    # The metadata of every record of an acknowledged run, into its places in ``results``.
    base_offset, log_append_time = batch.outcome
    timestamp_type = _CREATE_TIME
    timestamp = run.timestamp
    if log_append_time >= 0:
        timestamp, timestamp_type = log_append_time, _LOG_APPEND_TIME
    topic = batch.topic
    partition = batch.partition
    first = base_offset + run.first_offset if base_offset >= 0 else -1
    key_sizes, value_sizes = run.sizes()
    positions = run.positions()
    start = run.start_position
    for index in range(run.count):
        results[start + index if positions is None else positions[index]] = _untracked_tuple(
            _RecordMetadata,
            topic,
            partition,
            first + index if first >= 0 else -1,
            timestamp,
            -1 if key_sizes is None else key_sizes[index],
            value_sizes[index],
            timestamp_type,
        )


# Compiled, RecordFuture objects start untracked by the cyclic GC (see aioproducer._core.gc).
_UNTRACKED: Final = _gc_untrack_new(RecordFuture)
