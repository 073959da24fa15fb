"""Record futures out of the cyclic garbage collector, where the C helper is built.

``aioproducer._native.gcutil`` (``gcutil.c``) is built with the compiled hot path. Without it
(the pure-Python install) :func:`untrack_new` does nothing and every future is tracked,
as any Python object is.

A caller that keeps the future of every record it sends keeps as many objects alive, and
each full collection of the cyclic GC walks all of them: a large share of the time of a
small-record ``send()`` loop that keeps its futures (figures in bench/README.md). A
:class:`~aioproducer.RecordFuture` refers only to its batch, which refers to no record
futures (unless interceptors need them), so it can be in no reference cycle until it holds
more: a callback, a cancel message, or the error copy it hands out. Futures start untracked
and are tracked from the moment they hold any of those (:func:`track`), as CPython itself
untracks tuples and dicts that hold only atoms.

Record batch builders refer only to buffers, bytes and lists of bytes, so they start
untracked too, and so does the :class:`~aioproducer.RecordMetadata` of an acknowledged
record (:func:`untracked_tuple`: a topic, an exact ``str``, and ints). A batch that was
acknowledged and has let go of its records and buffer (``RecordAccumulator.deallocate``)
is :func:`untrack`-ed, unless it holds a future, an error or split batches; it is tracked
again if it comes to hold a future or watchers later. A batch refers to its event loop
weakly: an untracked object's references look like outside references to the collector,
and a strong one would keep every cycle through the loop.

The rule, for whoever adds a field to these classes: an object that starts untracked may
hold only what cannot lead back to it (atoms, bytes, its batch, the loop by weak reference);
the method that first stores anything else in it (a callback, an error, a watcher, a split
batch) calls :func:`track` on it in the same statement's block. Only four modules deal
with the collector: this one, :mod:`aioproducer._core.futures` (record futures),
:mod:`aioproducer._core.accumulator` (batches and their builders) and
:mod:`aioproducer._core.delivery` (the ``produce()`` reports a batch keeps, in a list of
atoms); the protocol layer never does.
``tests/unit/test_protocol_sans_io.py`` checks the last point.
"""

from __future__ import annotations

from typing import TypeVar

_T = TypeVar("_T", bound=tuple[object, ...])

__all__ = ["track", "untrack", "untrack_new", "untracked_tuple"]

try:
    from aioproducer._native.gcutil import track, untrack, untrack_new, untracked_tuple
except ImportError:  # the pure-Python install

    def track(obj: object, /) -> None:
        """Have the cyclic GC track ``obj``: here every object already is."""

    def untrack(obj: object, /) -> None:
        """Stop the cyclic GC tracking ``obj``: not possible without the C helper."""

    def untrack_new(cls: type, /) -> bool:
        """Make new objects of ``cls`` start untracked: not possible without the C helper."""
        return False

    def untracked_tuple(cls: type[_T], /, *items: object) -> _T:
        """An instance of the named tuple class ``cls`` holding ``items``; tracked, as
        every object is without the C helper."""
        made: _T = tuple.__new__(cls, items)
        return made
