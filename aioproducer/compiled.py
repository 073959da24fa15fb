"""Which modules run compiled: the hot path, built with mypyc when the package is installed.

The same ``mypy --strict`` source serves both ways: ``setup.py`` compiles the modules in
:data:`HOT_PATH_MODULES` to C extensions where a C compiler is at hand (set
``AIOPRODUCER_COMPILE=0`` to skip it), and the package runs them as plain Python where not.
Behaviour is the same either way; the compiled record append is about twice as fast.
"""

from __future__ import annotations

import importlib

__all__ = ["HOT_PATH_MODULES", "compiled_modules"]

HOT_PATH_MODULES: tuple[str, ...] = (
    "aioproducer.accumulator",
    "aioproducer.appender",
    "aioproducer.buffer_pool",
    "aioproducer.futures",
    "aioproducer.metrics",
    "aioproducer.net.connection",
    "aioproducer.net.manager",
    "aioproducer.net.writers",
    "aioproducer.partitioner",
    "aioproducer.protocol.framing",
    "aioproducer.protocol.produce_codec",
    "aioproducer.protocol.record_batch",
    "aioproducer.protocol.session",
    "aioproducer.sender",
)
"""The modules ``setup.py`` compiles: every step a record passes through on its way into a
batch (the appender, the accumulator, the record futures, the buffer pool, the partitioners
and the record batch encoder), and the per-request work after it (the sender task, the
metrics it updates, the broker connections with their sessions, writers and manager, the
request framing and the Produce codec).
The classes users build or configure (``Producer``, ``SyncProducer``, ...) stay
interpreted on purpose: mypyc keeps no docstrings, which ``help()``,
``inspect.signature`` and ``unittest.mock.create_autospec`` need.
``setup.py`` reads this tuple from this file's source, so it must stay a literal."""


def compiled_modules() -> tuple[str, ...]:
    """The modules of :data:`HOT_PATH_MODULES` that run as compiled extensions here."""
    compiled = []
    for name in HOT_PATH_MODULES:
        path = getattr(importlib.import_module(name), "__file__", None) or ""
        if not path.endswith(".py"):
            compiled.append(name)
    return tuple(compiled)
