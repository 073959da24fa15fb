"""Build script: compile the hot path with mypyc where it can; stay pure Python where not.

Everything else about the package is in pyproject.toml. The modules named in
``aioproducer/compiled.py`` (``HOT_PATH_MODULES``) are ordinary, ``mypy --strict``-clean
Python: mypyc turns the same source into C extension modules (as it does for mypy and
black), so there is one implementation, and the pure-Python package is the fallback wherever
no C compiler is at hand.

``AIOPRODUCER_COMPILE`` chooses:

- ``auto`` (the default): compile; if mypyc or the C compiler fails, warn and install the
  pure-Python modules.
- ``1``: compile, and fail the install if that fails.
- ``0``: do not compile.

``aioproducer.compiled.compiled_modules()`` tells at run time which modules run compiled.
"""

from __future__ import annotations

import ast
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _compiled_sources() -> list[str]:
    # aioproducer/compiled.py names the modules; read its literal without importing the
    # package (its dependencies need not be installed yet).
    source = Path(__file__).with_name("aioproducer").joinpath("compiled.py").read_text()
    for node in ast.parse(source).body:
        target = getattr(node, "target", None)
        if isinstance(node, ast.AnnAssign) and getattr(target, "id", "") == "HOT_PATH_MODULES":
            assert node.value is not None
            names = ast.literal_eval(node.value)
            return [name.replace(".", "/") + ".py" for name in names]
    raise RuntimeError("aioproducer/compiled.py has no HOT_PATH_MODULES")


class _OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when compiling fails (mode ``auto``)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # a missing compiler surfaces as several distutils errors
            if _mode() == "1":
                raise
            warnings.warn(
                f"aioproducer: compiling the hot path failed ({exc}); installing pure Python",
                stacklevel=1,
            )
            self.extensions = []


def _mode() -> str:
    mode = os.environ.get("AIOPRODUCER_COMPILE", "auto").strip().lower()
    if mode not in {"auto", "0", "1"}:
        sys.exit(f"AIOPRODUCER_COMPILE must be auto, 0 or 1, not {mode!r}")
    return mode


#: The setup commands that build extension modules; the others (``egg_info``, ``dist_info``
#: and ``sdist``, which a PEP 517 frontend runs for metadata and the source archive) need
#: only the list of C sources, not mypyc's translation of the hot path, which takes long.
_BUILDING_COMMANDS = frozenset(
    {"build", "build_ext", "bdist_wheel", "bdist", "bdist_egg", "install", "develop",
     "editable_wheel"}
)


def _helpers() -> list[Extension]:
    """The C helpers beside the compiled modules (each has a pure-Python fallback)."""
    # The compiled record futures start untracked by the cyclic GC; aioproducer/_core/gc.py
    # explains why, and runs without this helper in the pure-Python install.
    gcutil = Extension("aioproducer._native.gcutil", ["aioproducer/_native/gcutil.c"])
    # Record batches take the CRC of their records as they are written and combine it
    # with the header's at close (aioproducer/_native/crcutil.c says why); without this helper
    # the builder reads the whole batch again at close.
    crcutil = Extension("aioproducer._native.crcutil", ["aioproducer/_native/crcutil.c"])
    # The Spark data source makes a keyed chunk's (key, value) pairs from the Arrow
    # columns' buffers in one pass (aioproducer/_native/arrowcols.c says why); without this
    # helper it zips the columns' lists.
    arrowcols = Extension("aioproducer._native.arrowcols", ["aioproducer/_native/arrowcols.c"])
    helpers = [gcutil, crcutil, arrowcols]
    if sys.platform.startswith("linux"):
        # Broker connections write on a native thread (aioproducer/_native/sockwriter.c says
        # why); elsewhere they write through the event loop's transport.
        helpers.append(
            Extension("aioproducer._native.sockwriter", ["aioproducer/_native/sockwriter.c"])
        )
    return helpers


def _ext_modules() -> list[Any]:
    mode = _mode()
    if mode == "0" or sys.implementation.name != "cpython":
        return []
    if not _BUILDING_COMMANDS.intersection(sys.argv[1:]):
        return _helpers()  # their sources go into the sdist; nothing is compiled here
    try:
        from mypyc.build import mypycify
    except ImportError:
        if mode == "1":
            raise
        warnings.warn("aioproducer: mypyc is not installed; installing pure Python", stacklevel=1)
        return []
    try:
        # The build environment holds setuptools and mypy, not the runtime dependencies
        # (anyio, ...) that the compiled modules' imports lead to; mypyc needs only the
        # types of its own modules, and `mypy --strict` runs with everything in CI.
        options = ["--config-file", "", "--ignore-missing-imports"]
        extensions = mypycify(
            [*options, *_compiled_sources()],
            opt_level="3",
            debug_level="0",
            group_name="aioproducer",
        )
        return [*extensions, *_helpers()]
    except (Exception, SystemExit) as exc:
        if mode == "1":
            raise
        warnings.warn(f"aioproducer: mypyc failed ({exc}); installing pure Python", stacklevel=1)
        return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": _OptionalBuildExt})
