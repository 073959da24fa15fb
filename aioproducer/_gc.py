"""Record futures out of the cyclic garbage collector, where the C helper is built.

``aioproducer._gcutil`` (``_gcutil.c``) is built with the compiled hot path. Without it
(the pure-Python install) :func:`untrack_new` does nothing and every future is tracked,
as any Python object is.

A caller that keeps the future of every record it sends keeps as many objects alive, and
each full collection of the cyclic GC walks all of them: about a sixth of the time of a
100-byte ``send()`` loop that keeps its futures. A :class:`~aioproducer.RecordFuture`
refers only to its batch, which refers to no record futures (unless interceptors need
them), so it can be in no reference cycle until it holds more: a callback, a cancel
message, or the error copy it hands out. Futures start untracked and are tracked from the
moment they hold any of those (:func:`track`), as CPython itself untracks tuples and dicts
that hold only atoms.
"""

from __future__ import annotations

__all__ = ["track", "untrack_new"]

try:
    from aioproducer._gcutil import track, untrack_new
except ImportError:  # the pure-Python install

    def track(obj: object, /) -> None:
        """Have the cyclic GC track ``obj``: here every object already is."""

    def untrack_new(cls: type, /) -> bool:
        """Make new objects of ``cls`` start untracked: not possible without the C helper."""
        return False
