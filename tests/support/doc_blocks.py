"""The Python code blocks of the README and the docs, run as written.

The rules a page follows (tests/integration/test_docs_code.py runs every page):

- Each page's ```` ```python ```` blocks run in order, in one namespace and on one event loop,
  in a process of their own: a later block may use what an earlier one defined, as in a
  notebook. Top-level ``await`` and ``async with`` are allowed, as in ``python -m asyncio``.
- The broker is ``localhost:9092`` in the text; the runner points that address at a test
  broker (the only change made to the code): Tansu, where topics are created on first use,
  or for the pages about creating topics an Apache Kafka node, where they are not. A Schema
  Registry is ``http://localhost:8081``, pointed at a test registry on pages that name it.
- ``<!-- docs-test-hidden`` ... ``-->``: hidden Python run at that point: what a reader is
  assumed to have (a started producer, a consumer's messages), or cleaning up after.
- ``<!-- docs-test-skip: REASON -->`` right before a block: that block is not run (an
  outline of internal classes, a command that installs packages); the reason is required.
- Shell blocks (```` ```bash ````, ```` ```console ````) run with ``bash``, with
  ``localhost:9092`` pointed at the test broker as well. A ``console`` block shows commands
  after ``$ `` and what they print after them: every line shown must be printed, digits
  aside (ports, rates and times differ from run to run). A ``bash`` block must succeed.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import re
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The address the docs use for the broker.
DOCS_BROKER = "localhost:9092"
#: The URL the docs use for a Schema Registry.
DOCS_REGISTRY = "http://localhost:8081"

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_SETUP = re.compile(r"<!--\s*docs-test-hidden\s*\n(.*?)-->", re.S)
_SKIP = re.compile(r"<!--\s*docs-test-skip:(.*?)-->", re.S)


@dataclass(frozen=True)
class Block:
    """One piece of Python on a page: a shown block or a hidden setup."""

    page: str
    line: int
    code: str
    hidden: bool = False
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


_SHELLS = ("bash", "console", "sh", "shell")


@dataclass(frozen=True)
class ShellBlock:
    """A shell block: ``(command, the lines it is shown to print)`` pairs."""

    page: str
    line: int
    steps: tuple[tuple[str, tuple[str, ...]], ...]
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _skip_reason(text: str, start: int) -> str | None:
    before = text[:start].rstrip()
    if before.endswith("-->"):
        skip = _SKIP.fullmatch(before[before.rfind("<!--") :])
        if skip is not None:
            return skip.group(1).strip() or "(no reason given)"
    return None


def _steps(kind: str, body: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if kind != "console":
        return ((body, ()),)
    steps: list[tuple[str, list[str]]] = []
    continued = False
    for line in body.splitlines():
        if continued and steps:
            steps[-1] = (steps[-1][0] + "\n" + line, steps[-1][1])
        elif line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        continued = line.endswith("\\") and (not steps or not steps[-1][1])
    return tuple((command, tuple(shown)) for command, shown in steps)


def shell_blocks(page: Path) -> list[ShellBlock]:
    """The page's shell blocks, in order."""
    text = page.read_text()
    name = str(page.relative_to(ROOT))
    found: list[ShellBlock] = []
    for match in _FENCE.finditer(text):
        info = match.group(1).strip().split()
        if not info or info[0] not in _SHELLS:
            continue
        line = text.count("\n", 0, match.start()) + 2
        skip = _skip_reason(text, match.start())
        found.append(ShellBlock(name, line, _steps(info[0], match.group(2)), skip))
    return found


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def shape(text: str) -> str:
    """``text`` with every UUID as ``U``, every number as ``N`` and runs of blanks as one
    space."""
    return " ".join(re.sub(r"\d+", "N", _UUID.sub("U", text)).split())


def pages() -> list[Path]:
    """The README and every docs page."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The page's Python blocks and hidden setups, in the order they appear."""
    text = page.read_text()
    name = str(page.relative_to(ROOT))
    found: list[tuple[int, Block]] = []
    for match in _FENCE.finditer(text):
        info = match.group(1).strip().split()
        if not info or info[0] != "python":
            continue
        reason = _skip_reason(text, match.start())
        line = text.count("\n", 0, match.start()) + 2
        found.append((match.start(), Block(name, line, match.group(2), skip=reason)))
    for match in _SETUP.finditer(text):
        line = text.count("\n", 0, match.start()) + 2
        found.append((match.start(), Block(name, line, match.group(1), hidden=True)))
    return [block for _, block in sorted(found, key=lambda item: item[0])]


def run_page(page: Path, broker: str, registry: str | None = None) -> list[str]:
    """Run the page's blocks against ``broker`` (and ``registry``, a Schema Registry's URL);
    return the ``where`` of each block run.

    Raises whatever a block raises, with its page and line in the traceback's file name.
    """
    namespace: dict[str, object] = {"__name__": "__docs__"}
    loop = asyncio.new_event_loop()
    ran: list[str] = []
    try:
        for block in blocks(page):
            if block.skip is not None:
                continue
            text = block.code.replace(DOCS_BROKER, broker)
            if registry is not None:
                text = text.replace(DOCS_REGISTRY, registry)
            code = compile(
                text,
                block.where,
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                # As written: without the runner's own "from __future__" imports.
                dont_inherit=True,
            )
            result = eval(code, namespace)  # the docs' own code
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
            ran.append(block.where)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return ran


def main() -> int:
    """``python -m tests.support.doc_blocks PAGE BROKER [REGISTRY]``: run one page, print
    JSON."""
    page, broker = Path(sys.argv[1]), sys.argv[2]
    registry = sys.argv[3] if len(sys.argv) > 3 else None
    try:
        ran = run_page(page, broker, registry)
    except BaseException:  # report any failure, SystemExit included
        traceback.print_exc()
        return 1
    skipped = [asdict(block) for block in blocks(page) if block.skip is not None]
    print(json.dumps({"ran": ran, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
