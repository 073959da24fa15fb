"""The names the architecture and internals pages cite exist in the code: every
``module.name``, ``Class.member`` and ``function(...)`` written in inline code, with the
parameters a cited signature names (the code blocks are run by
tests/integration/test_docs_code.py; this checks the prose)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aioproducer"
PAGES = [ROOT / "docs" / "architecture.md", ROOT / "docs" / "internals.md"]

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_SPAN = re.compile(r"`([^`\n]+)`")
# ``a.b.c`` or ``name(...)``, optionally ``-> annotation``.
_REFERENCE = re.compile(
    r"^(?:async |def |class )?(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
    r"(?P<call>\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\))?(?:\s*->.*)?(?::.*)?$"
)


@dataclass
class _Index:
    """What the package defines: modules, and for each module and class its members;
    for each function name, the parameter names of each definition."""

    modules: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    classes: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    functions: dict[str, list[set[str]]] = field(default_factory=lambda: defaultdict(list))
    names: set[str] = field(default_factory=set)


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = node.args
    every = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    names = {p.arg for p in every}
    if a.vararg:
        names.add(a.vararg.arg)
    if a.kwarg:
        names.add(a.kwarg.arg)
    return names


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body``, those inside ``try`` and ``if`` blocks included (a
    module defines a fallback there when its C helper is missing)."""
    flat: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                flat += _flat(part)
        elif isinstance(node, ast.If):
            flat += _flat(node.body) + _flat(node.orelse)
        else:
            flat.append(node)
    return flat


def _members(body: list[ast.stmt]) -> set[str]:
    members: set[str] = set()
    for node in _flat(body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            members.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members.add(node.target.id)
        elif isinstance(node, ast.Assign):
            members.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            members.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            members.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return members


@functools.cache
def _index() -> _Index:
    index = _Index()
    sources = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyi")]
    for path in sources:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        tree = ast.parse(path.read_text())
        index.modules[module] |= _members(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                members = _members(node.body)
                for item in node.body:
                    # Attributes set in methods (self.x = ...).
                    for sub in ast.walk(item):
                        if (
                            isinstance(sub, ast.Attribute)
                            and isinstance(sub.value, ast.Name)
                            and sub.value.id == "self"
                            and isinstance(sub.ctx, ast.Store)
                        ):
                            members.add(sub.attr)
                index.classes[node.name] |= members
                index.names.add(node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                index.functions[node.name].append(_parameters(node))
                index.names.add(node.name)
    for module, members in list(index.modules.items()):
        parts = module.split(".")
        # A module is cited by its dotted path from any depth: ``aioproducer.sender``,
        # ``sender``, ``net.connection``.
        for start in range(len(parts)):
            index.modules[".".join(parts[start:])] |= members
    return index


def _spans(page: Path) -> list[tuple[int, str]]:
    text = page.read_text()
    prose = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found = []
    for number, line in enumerate(prose.splitlines(), 1):
        found += [(number, span.strip()) for span in _SPAN.findall(line)]
    return found


def _is_java(name: str) -> bool:
    """camelCase names (a lower-case start, then capitals) are the Java client's or the
    broker's, cited for comparison."""
    return any(re.match(r"[a-z]\w*[A-Z]", part) for part in name.split("."))


def _java_options() -> set[str]:
    from aioproducer.config import ProducerConfig

    names = set()
    for f in dataclasses.fields(ProducerConfig):
        java = f.metadata.get("java")
        if isinstance(java, str):
            names.add(java)
    return names


_FILE = re.compile(r"^[\w./-]+\.(?:py|pyi|c|md|json|toml|yml)$")


def _problems(index: _Index, span: str) -> list[str]:
    if _FILE.match(span):
        found = [p for p in ROOT.rglob(Path(span).name) if ".venv" not in p.parts]
        if not any(str(p.relative_to(ROOT)).endswith(span) for p in found):
            return [f"`{span}`: no such file"]
        return []
    if span in _JAVA_OPTIONS:
        return []
    match = _REFERENCE.match(span)
    if match is None:
        return []
    name, call, args = match["name"], match["call"], match["args"]
    parts = name.split(".")
    if _is_java(name):
        return []
    # Resolve the longest module prefix, then members of modules and classes.
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in index.modules and (cut > 1 or (call is None and len(parts) > 1)):
            scope, kind = index.modules[head], "module"
            break
        if cut == 1 and head in index.classes:
            scope, kind = index.classes[head], "class"
            break
    else:
        scope, kind, cut = set(), "", 0
    if cut == 0:
        if len(parts) == 1 and name in dir(builtins):
            return []
        if len(parts) == 1 and call is not None and not name[0].isupper():
            if name not in index.functions and name not in index.names:
                return [f"`{span}`: no function {name!r} in the package"]
            return _signature_problems(index, span, name, args)
        return []  # a word or another project's name, not a reference to check
    for part in parts[cut:]:
        if part not in scope:
            return [f"`{span}`: {'.'.join(parts[:cut])} ({kind}) has no {part!r}"]
        scope = index.classes.get(part, set())
        kind = "class"
        cut += 1
    return _signature_problems(index, span, parts[-1], args) if call is not None else []


def _signature_problems(index: _Index, span: str, name: str, args: str | None) -> list[str]:
    if not args or args.strip() in ("...", ""):
        return []
    wanted = set()
    for arg in re.split(r",\s*(?![^()\[\]]*[\])])", args):
        arg = arg.strip()
        if arg in ("*", "/", "...") or not arg:
            continue
        token = re.match(r"^\*{0,2}([A-Za-z_]\w*)\s*(?::|=|$)", arg)
        if token is None:
            return []  # an expression, not a signature
        wanted.add(token[1])
    definitions = index.functions.get(name, [])
    if not definitions or any(wanted <= params for params in definitions):
        return []
    return [f"`{span}`: no {name}() takes {sorted(wanted)}"]


_JAVA_OPTIONS = _java_options()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_names_a_page_cites_exist(page: Path) -> None:
    index = _index()
    problems = [
        f"{page.name}:{line}: {problem}"
        for line, span in _spans(page)
        for problem in _problems(index, span)
    ]
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_name_that_does_not_exist() -> None:
    index = _index()
    assert _problems(index, "sender.Sender.run_once(now)") == []
    assert _problems(index, "accumulator.RecordAccumulator.no_such_method") != []
    assert _problems(index, "await_flush_completion()") != []
    assert _problems(index, "drain(cluster, nodes, no_such_parameter)") != []
    assert _problems(index, "ProducerStateManager.readSnapshot") == []  # the broker's
