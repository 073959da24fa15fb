"""The public surface: ``__all__`` lists exactly the public names, each importable and
documented; the errors form one hierarchy; the generated docs match the code."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import aioproducer
import aioproducer.errors as errors
from tests.support.passes import compiled_pass_only

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _public_attributes(module: types.ModuleType) -> set[str]:
    """Names a user sees on the module: not private, not a submodule."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
        # `from __future__ import annotations` leaves a feature object behind.
        and name != "annotations"
    }


def test_all_lists_exactly_the_public_names() -> None:
    listed = set(aioproducer.__all__)
    assert len(listed) == len(aioproducer.__all__), "duplicates in __all__"
    assert listed - {"__version__"} == _public_attributes(aioproducer)


def test_the_documented_entry_points_are_public() -> None:
    from aioproducer import Producer, ProducerRecord, RecordMetadata  # noqa: F401

    assert {"Producer", "ProducerRecord", "RecordMetadata"} <= set(aioproducer.__all__)


@pytest.mark.parametrize("name", sorted(aioproducer.__all__))
def test_each_public_name_is_importable(name: str) -> None:
    module = importlib.import_module("aioproducer")
    assert hasattr(module, name), f"aioproducer.__all__ names {name!r}, which does not exist"


def _source_docstring(obj: object) -> str | None:
    """The docstring in the .py source, for a class or method of a module compiled with
    mypyc (which keeps no docstrings); None for anything else. mkdocstrings reads the same."""
    import ast

    qualname = getattr(obj, "__qualname__", None)
    owner = getattr(obj, "__objclass__", obj)  # a method descriptor knows only its class
    module = sys.modules.get(getattr(owner, "__module__", None) or "")
    if not isinstance(qualname, str) or module is None:
        return None
    path = Path(getattr(module, "__file__", None) or "")
    if path.suffix == ".py" or not path.name:
        return None
    node: ast.AST = ast.parse(path.with_name(path.name.split(".")[0] + ".py").read_text())
    for part in qualname.split("."):
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and child.name == part
            ):
                node = child
                break
        else:
            return None
    assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    return ast.get_docstring(node) or ""


def _own_docstring(obj: object) -> str:
    source = _source_docstring(obj)
    if source is not None:
        return source.strip()
    doc = getattr(obj, "__doc__", None) or ""
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""  # the signature dataclasses write when a class has no docstring
    return doc.strip()


def _attribute_docstrings(module: types.ModuleType) -> dict[str, str]:
    """``NAME = value`` followed by a string literal, as mkdocstrings reads it."""
    import ast

    # The .py file, as mkdocstrings reads it: for a module compiled with mypyc, __file__ is
    # the extension beside it (accumulator.cpython-311-x86_64-linux-gnu.so).
    path = Path(module.__file__ or "")
    source = path.with_name(path.name.split(".")[0] + ".py")
    found: dict[str, str] = {}
    if not source.exists():
        return found  # a hand-written C extension (aioproducer._native.gcutil): no Python source
    tree = ast.parse(source.read_text())
    body = tree.body
    for statement, following in itertools.pairwise(body):
        targets: list[ast.expr] = []
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = following.value.value
    return found


def _defining_module(name: str, obj: object) -> types.ModuleType:
    module_name = getattr(obj, "__module__", None)
    if isinstance(module_name, str) and module_name.startswith("aioproducer"):
        return sys.modules[module_name]
    # Aliases (``Header = tuple[...]``) remember no module: find the one that assigns it.
    for module_name, module in sorted(sys.modules.items()):
        if module_name.startswith("aioproducer") and name in _attribute_docstrings(module):
            return module
    return aioproducer


@pytest.mark.parametrize("name", sorted(set(aioproducer.__all__) - {"__version__"}))
def test_each_public_name_is_documented(name: str) -> None:
    obj = getattr(aioproducer, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert _own_docstring(obj), f"aioproducer.{name} has no docstring"
    else:
        docs = _attribute_docstrings(_defining_module(name, obj))
        assert docs.get(name, "").strip(), f"aioproducer.{name} has no docstring after it"


def _public_members(cls: type) -> list[tuple[str, object]]:
    members = []
    for member_name, member in vars(cls).items():
        if member_name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if (
            inspect.isfunction(member)
            or inspect.ismethoddescriptor(member)  # a method of a class compiled with mypyc
            or isinstance(member, property)
        ):
            members.append((member_name, member))
    return members


@pytest.mark.parametrize(
    "name", sorted(n for n in aioproducer.__all__ if inspect.isclass(getattr(aioproducer, n)))
)
def test_public_methods_of_public_classes_are_documented(name: str) -> None:
    cls = getattr(aioproducer, name)
    undocumented = [
        member_name for member_name, member in _public_members(cls) if not _own_docstring(member)
    ]
    assert not undocumented, f"{name} methods without a docstring: {undocumented}"


def test_the_testing_module_lists_and_documents_its_public_names() -> None:
    import aioproducer.testing as testing

    defined = {
        name
        for name in _public_attributes(testing)
        if getattr(getattr(testing, name), "__module__", None) == testing.__name__
    }
    assert set(testing.__all__) == defined
    assert _own_docstring(testing)
    for name in testing.__all__:
        cls = getattr(testing, name)
        assert _own_docstring(cls), f"aioproducer.testing.{name} has no docstring"
        undocumented = [
            member_name
            for member_name, member in _public_members(cls)
            if not _own_docstring(member)
        ]
        assert not undocumented, f"{name} methods without a docstring: {undocumented}"
    # The in-memory producer has each public method of the producer as its own (none is
    # inherited, where it would reach for a connection that is not there).
    producer_methods = {
        name for name, member in _public_members(aioproducer.Producer)
        if not isinstance(member, property)
    }
    assert producer_methods <= set(vars(testing.InMemoryProducer))


# ---- errors ------------------------------------------------------------------------------


def _error_classes() -> list[type]:
    return [
        getattr(errors, name)
        for name in errors.__all__
        if inspect.isclass(getattr(errors, name))
    ]


def test_errors_all_is_exactly_the_public_names() -> None:
    def defined_in_errors(value: object) -> bool:
        if inspect.isclass(value) or inspect.isfunction(value):
            return value.__module__ == errors.__name__
        return type(value).__module__ != "typing"  # ClassVar and friends are imports

    public = {
        name for name in _public_attributes(errors) if defined_in_errors(getattr(errors, name))
    }
    assert set(errors.__all__) == public


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_derives_from_kafka_error_and_says_if_retriable(cls: type) -> None:
    assert issubclass(cls, errors.KafkaError)
    assert isinstance(cls.retriable, bool)
    assert _own_docstring(cls), f"{cls.__name__} has no docstring"


def test_retriable_can_be_overridden_per_instance() -> None:
    assert errors.KafkaConnectionError.retriable is True
    error = errors.KafkaConnectionError("gone", retriable=False)
    assert error.retriable is False
    assert errors.KafkaConnectionError("gone").retriable is True


def test_the_families_are_what_the_docs_promise() -> None:
    assert issubclass(errors.ConfigurationError, ValueError)
    assert issubclass(errors.SerializationError, TypeError)
    assert errors.BufferExhaustedError.retriable
    assert errors.DeliveryTimeoutError.retriable
    assert not errors.RecordTooLargeError.retriable


# ---- docs generated from the code ----------------------------------------------------------


def _load_generator() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_table", DOCS / "gen_config_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_doc_tables_are_in_sync_with_the_code() -> None:
    generator = _load_generator()
    assert generator.stale_pages() == [], "run: python docs/gen_config_table.py"


def test_configuration_page_lists_every_option() -> None:
    from aioproducer.config import options_table

    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for option in options_table():
        assert f"| `{option.name}` |" in page
        if option.java_name:
            assert f"`{option.java_name}`" in page


def test_errors_page_lists_every_error() -> None:
    page = (DOCS / "errors.md").read_text(encoding="utf-8")
    for cls in _error_classes():
        assert f"`{cls.__name__}`" in page


def test_metrics_page_lists_exactly_the_metrics() -> None:
    from aioproducer.metric_catalog import DEFINITIONS

    # Each group's section is checked in tests/unit/test_metrics.py.
    names = {definition.name for definition in DEFINITIONS}
    page = (DOCS / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", page, flags=re.MULTILINE))
    assert documented == names


def test_the_connection_manager_reports_the_connection_metrics() -> None:
    from aioproducer._core.metrics import CONNECTION_METRICS
    from aioproducer.config import ProducerConfig
    from aioproducer.net.manager import ConnectionManager

    manager = ConnectionManager(ProducerConfig(bootstrap_servers="localhost:9092"), lambda: None)
    assert tuple(manager.statistics()) == CONNECTION_METRICS


# mkdocs reads the sources as text: the site is the same whichever build or Python runs it
# (and the docs toolchain resolves to mismatched releases on Python 3.10).
@compiled_pass_only("the documentation site's build, the same for every build and Python")
def test_docs_build_in_strict_mode(tmp_path: Path) -> None:
    """Broken links, bad mkdocstrings references and stale nav entries fail the build."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    api = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("aioproducer.Producer.send_many", "aioproducer.errors.KafkaError"):
        assert f'id="{name}"' in api
