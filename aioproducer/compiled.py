"""Which modules run compiled: the hot path, built with mypyc when the package is installed.

The same ``mypy --strict`` source serves both ways: ``setup.py`` compiles the modules in
:data:`HOT_PATH_MODULES` to C extensions where a C compiler is at hand (set
``AIOPRODUCER_COMPILE=0`` to skip it), and the package runs them as plain Python where not.
Behaviour is the same either way; the compiled record append is about twice as fast.

Nothing says which one an install got unless asked: ``aioproducer --version`` prints it, and
the Spark sink and ``aioproducer perf`` log one warning (:func:`warn_if_interpreted`) when
they run on the plain-Python fallback.
"""

from __future__ import annotations

import importlib
import logging
import threading

__all__ = [
    "HOT_PATH_MODULES",
    "INSTALL_ADVICE",
    "compiled_modules",
    "fallback_message",
    "interpreted_modules",
    "warn_if_interpreted",
]

HOT_PATH_MODULES: tuple[str, ...] = (
    "aioproducer._core.accumulator",
    "aioproducer._core.answers",
    "aioproducer._core.appender",
    "aioproducer._core.buffer_pool",
    "aioproducer._core.delivery",
    "aioproducer._core.futures",
    "aioproducer._core.metrics",
    "aioproducer._core.partitioner",
    "aioproducer._core.sender",
    "aioproducer.net.connection",
    "aioproducer.net.manager",
    "aioproducer.net.writers",
    "aioproducer.protocol.framing",
    "aioproducer.protocol.produce_codec",
    "aioproducer.protocol.record_batch",
    "aioproducer.protocol.session",
)
"""The modules ``setup.py`` compiles: every step a record passes through on its way into a
batch (the appender, the accumulator, the record futures, the buffer pool, the partitioners
and the record batch encoder), and the per-request work after it (the sender task and the
queue its answers arrive on, the metrics it updates, the broker connections with their
sessions, writers and manager, the request framing and the Produce codec).
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


def interpreted_modules() -> tuple[str, ...]:
    """The modules of :data:`HOT_PATH_MODULES` that run as plain Python here: all of them
    where the package was installed without compiling (no C compiler at install time,
    ``AIOPRODUCER_COMPILE=0``, not CPython), none from a wheel with the compiled core."""
    compiled = set(compiled_modules())
    return tuple(name for name in HOT_PATH_MODULES if name not in compiled)


INSTALL_ADVICE = (
    "install a wheel with the compiled core (pip install --only-binary=aioproducer "
    "aioproducer), or install from source with a C compiler and the Python headers at hand "
    "(AIOPRODUCER_COMPILE=1 makes that install fail instead of falling back to plain Python)"
)
"""How to get the compiled core, as the fallback warning and ``aioproducer --version`` say."""


def fallback_message() -> str | None:
    """What :func:`warn_if_interpreted` logs: which hot-path modules run as plain Python,
    what that costs and how to fix it; None when every one runs compiled."""
    interpreted = interpreted_modules()
    if not interpreted:
        return None
    if len(interpreted) == len(HOT_PATH_MODULES):
        what = (
            "aioproducer runs on its plain-Python fallback: the compiled core is not "
            f"installed (none of the {len(HOT_PATH_MODULES)} hot-path modules is compiled)"
        )
    else:
        what = (
            f"aioproducer runs {len(interpreted)} of its {len(HOT_PATH_MODULES)} hot-path "
            f"modules as plain Python ({', '.join(interpreted)})"
        )
    return (
        f"{what}, which produces about half as many records per second as the compiled "
        f"core; to fix it, {INSTALL_ADVICE}"
    )


#: The loggers :func:`warn_if_interpreted` has warned through in this process.
_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def warn_if_interpreted(logger: logging.Logger) -> bool:
    """Log :func:`fallback_message` through ``logger`` at WARNING, once per process and
    logger, when a hot-path module runs as plain Python.

    The Spark sink calls it in each task (through ``aioproducer.integrations.spark``'s
    logger: one line in each Python worker's log) and ``aioproducer perf`` when it starts.

    Returns:
        True if this call logged the warning.
    """
    with _WARNED_LOCK:
        if logger.name in _WARNED:
            return False
        _WARNED.add(logger.name)
    message = fallback_message()
    if message is None:
        return False
    logger.warning("%s", message)
    return True
