"""The hot path compiled with mypyc: which modules are, and what they must not contain.

``AIOPRODUCER_EXPECT_COMPILED`` (set by ``.ci/run``) says which build is under test: ``1``
the compiled one, ``0`` the pure-Python one. Unset, only the source rules are checked.
"""

from __future__ import annotations

import ast
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from aioproducer import compiled
from aioproducer.compiled import HOT_PATH_MODULES, compiled_modules
from aioproducer.protocol import record_batch

ROOT = Path(__file__).resolve().parents[2]


def _source(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


class _AwaitWhileHandling(ast.NodeVisitor):
    """Finds awaits (and async with/for) inside except and finally blocks."""

    def __init__(self) -> None:
        self.handling = 0
        self.found: list[str] = []

    def _visit_all(self, nodes: list[ast.stmt]) -> None:
        for node in nodes:
            self.visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        self._visit_all(node.body)
        self._visit_all(node.orelse)
        self.handling += 1
        for handler in node.handlers:
            self.visit(handler)
        self._visit_all(node.finalbody)
        self.handling -= 1

    def _note(self, node: ast.AST, what: str) -> None:
        self.found.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    def visit_Await(self, node: ast.Await) -> None:
        if self.handling:
            self._note(node, "await inside except/finally")
        self.generic_visit(node)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        # __aexit__ is awaited while the block's exception is being handled.
        self._note(node, "async with")
        self.generic_visit(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._note(node, "async for")
        self.generic_visit(node)


@pytest.mark.parametrize("module", HOT_PATH_MODULES)
def test_compiled_modules_never_await_while_handling_an_exception(module: str) -> None:
    # mypyc leaves the handled exception in the thread state while a compiled coroutine is
    # suspended in an except/finally block, and a later compiled await re-raises it (found by
    # tests/faults/test_cancellation.py when producer.py was compiled). Such code belongs in
    # an interpreted module.
    visitor = _AwaitWhileHandling()
    visitor.visit(ast.parse(_source(module).read_text(), str(_source(module))))
    assert visitor.found == [], f"{module} is compiled; move this to an interpreted module"


@pytest.mark.parametrize("module", HOT_PATH_MODULES)
def test_a_compiled_module_says_so_in_its_docstring(module: str) -> None:
    # Whoever edits it should know, before anything else, what compiling forbids.
    docstring = ast.get_docstring(ast.parse(_source(module).read_text())) or ""
    assert "Compiled by mypyc where a C compiler is at hand" in " ".join(docstring.split())


def test_the_checker_finds_an_await_in_an_except_block() -> None:
    visitor = _AwaitWhileHandling()
    visitor.visit(ast.parse("async def f():\n try:\n  pass\n except E:\n  await g()\n"))
    visitor.visit(ast.parse("async def f():\n try:\n  await g()\n finally:\n  await h()\n"))
    assert len(visitor.found) == 2


def test_setup_compiles_exactly_the_hot_path_modules() -> None:
    # setup.py reads HOT_PATH_MODULES from the source of aioproducer/compiled.py.
    # Only that function of setup.py runs here: the module itself would build the package.
    tree = ast.parse((ROOT / "setup.py").read_text())
    function = next(
        node for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "_compiled_sources"
    )
    namespace: dict[str, object] = {"__file__": str(ROOT / "setup.py"), "ast": ast, "Path": Path}
    exec(compile(ast.Module(body=[function], type_ignores=[]), "setup.py", "exec"), namespace)
    sources = namespace["_compiled_sources"]
    assert callable(sources)
    assert sources() == [str(_source(m).relative_to(ROOT)) for m in HOT_PATH_MODULES]


def test_the_build_under_test_is_the_expected_one() -> None:
    expected = os.environ.get("AIOPRODUCER_EXPECT_COMPILED")
    if expected is None:
        pytest.skip("AIOPRODUCER_EXPECT_COMPILED is not set")
    if expected == "1":
        assert compiled_modules() == HOT_PATH_MODULES
    else:
        assert compiled_modules() == ()


# The C helpers beside the mypyc-compiled modules; each has a pure-Python fallback.
_NATIVE_HELPERS = (
    "aioproducer._native.arrowcols",
    "aioproducer._native.crcutil",
    "aioproducer._native.gcutil",
    "aioproducer._native.sockwriter",
)


@pytest.mark.parametrize("name", _NATIVE_HELPERS)
def test_the_native_helpers_are_there_only_in_the_compiled_build(name: str) -> None:
    # The pure-Python pass must run what a machine without a C compiler installs: no
    # helper may come from a build elsewhere on the path (an editable install's checkout).
    import importlib.util

    expected = os.environ.get("AIOPRODUCER_EXPECT_COMPILED")
    if expected is None:
        pytest.skip("AIOPRODUCER_EXPECT_COMPILED is not set")
    spec = importlib.util.find_spec(name)
    if expected == "1":
        assert spec is not None, f"{name} was not built"
    else:
        assert spec is None, f"{name} is importable in the pure build: {spec.origin}"



def test_without_the_gc_helper_every_record_future_stays_tracked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Where the C helper was not built (the pure-Python install), aioproducer._core.gc falls back
    # to doing nothing: futures are tracked by the cyclic GC as any object is.
    import gc
    import importlib.util

    monkeypatch.setitem(sys.modules, "aioproducer._native.gcutil", None)  # import fails
    spec = importlib.util.spec_from_file_location(
        "_gc_without_helper", ROOT / "aioproducer/_core/gc.py"
    )
    assert spec is not None and spec.loader is not None
    fallback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fallback)

    class Plain:
        pass

    assert fallback.untrack_new(Plain) is False
    obj = Plain()
    fallback.track(obj)
    assert gc.is_tracked(obj)
    # A record's metadata is then made by tuple.__new__: the same named tuple.
    from aioproducer import RecordMetadata, TimestampType

    made = fallback.untracked_tuple(RecordMetadata, "t", 0, 7, 5, -1, 3, TimestampType.CREATE_TIME)
    assert type(made) is RecordMetadata
    assert made == RecordMetadata("t", 0, 7, 5, -1, 3, TimestampType.CREATE_TIME)


def test_without_the_crc_helper_a_batch_takes_the_crc_of_all_its_bytes_at_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Where aioproducer._native.crcutil was not built, record_batch takes the CRC of the whole batch
    # at close instead of combining the records' CRC with the header's: the same bytes.
    import importlib.util

    import crc32c

    monkeypatch.setitem(sys.modules, "aioproducer._native.crcutil", None)  # import fails
    path = ROOT / "aioproducer/protocol/record_batch.py"
    spec = importlib.util.spec_from_file_location("_record_batch_without_helper", path)
    assert spec is not None and spec.loader is not None
    fallback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fallback)
    assert fallback._crc_combine is None
    assert fallback._copy_parts is None  # the records are joined and assigned instead

    def build(module: Any) -> bytes:
        builder = module.RecordBatchBuilder(bytearray(4096))
        for i in range(20):
            assert builder.try_append(1_000 + i, None, b"v" * i, []) == i
            builder.write_pending()
        assert builder.append_values(1_100, [b"w" * 30] * 3, 0, 3) == 3
        return bytes(builder.close())

    batch = build(fallback)
    assert int.from_bytes(batch[17:21], "big") == crc32c.crc32c(batch[21:])
    # The same bytes as the module under test writes, with or without its helpers.
    if os.environ.get("AIOPRODUCER_EXPECT_COMPILED") == "1":
        assert record_batch._copy_parts is not None  # so the C copy is what is compared
    assert batch == build(record_batch)


# ---- saying what runs -----------------------------------------------------------------------


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the loggers already warned through, as a new process would."""
    monkeypatch.setattr(compiled, "_WARNED", set())


def test_interpreted_modules_are_the_rest_of_the_hot_path() -> None:
    interpreted = compiled.interpreted_modules()
    assert sorted(interpreted + compiled_modules()) == sorted(HOT_PATH_MODULES)


@pytest.mark.usefixtures("fresh_warnings")
def test_the_fallback_warning_matches_the_build_under_test(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The pure-Python build warns, once per process and logger; the compiled build is quiet.
    expected = os.environ.get("AIOPRODUCER_EXPECT_COMPILED")
    if expected is None:
        pytest.skip("AIOPRODUCER_EXPECT_COMPILED is not set")
    logger = logging.getLogger("aioproducer.tests.fallback")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        results = [compiled.warn_if_interpreted(logger) for _ in range(3)]
    records = [r for r in caplog.records if r.name == logger.name]
    if expected == "1":
        assert results == [False, False, False]
        assert records == []
        assert compiled.fallback_message() is None
        return
    assert results == [True, False, False]
    assert [r.levelno for r in records] == [logging.WARNING]
    message = records[0].getMessage()
    assert message.startswith(
        "aioproducer runs on its plain-Python fallback: the compiled core is not installed "
        f"(none of the {len(HOT_PATH_MODULES)} hot-path modules is compiled)"
    )
    assert "about half as many records per second" in message
    assert message.endswith(f"to fix it, {compiled.INSTALL_ADVICE}")
    assert "pip install --only-binary=aioproducer aioproducer" in message


@pytest.mark.usefixtures("fresh_warnings")
def test_a_partly_compiled_install_names_the_modules_left_interpreted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As after a build that compiled some modules, or an edited module shadowing its build.
    monkeypatch.setattr(compiled, "compiled_modules", lambda: HOT_PATH_MODULES[2:])
    first, second = logging.getLogger("aioproducer.a"), logging.getLogger("aioproducer.b")
    with caplog.at_level(logging.WARNING):
        assert compiled.warn_if_interpreted(first) is True
        assert compiled.warn_if_interpreted(first) is False
        assert compiled.warn_if_interpreted(second) is True  # each logger once
    assert [r.name for r in caplog.records] == ["aioproducer.a", "aioproducer.b"]
    assert caplog.records[0].getMessage().startswith(
        f"aioproducer runs 2 of its {len(HOT_PATH_MODULES)} hot-path modules as plain Python "
        f"({HOT_PATH_MODULES[0]}, {HOT_PATH_MODULES[1]}), which produces about half as many"
    )
    assert compiled.interpreted_modules() == HOT_PATH_MODULES[:2]


@pytest.mark.usefixtures("fresh_warnings")
def test_a_fully_compiled_install_logs_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compiled, "compiled_modules", lambda: HOT_PATH_MODULES)
    with caplog.at_level(logging.DEBUG):
        assert compiled.warn_if_interpreted(logging.getLogger("aioproducer.c")) is False
    assert caplog.records == []
    assert compiled.fallback_message() is None
