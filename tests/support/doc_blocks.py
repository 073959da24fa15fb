"""The Python code blocks of the README and the docs, run as written.

The rules a page follows (tests/integration/test_docs_code.py runs every page):

- Each page's ```` ```python ```` blocks run in order, in one namespace and on one event loop,
  in a process of their own: a later block may use what an earlier one defined, as in a
  notebook. Top-level ``await`` and ``async with`` are allowed, as in ``python -m asyncio``.
- The broker is ``localhost:9092`` in the text; the runner points that address at a test
  broker (the only change made to the code). Topics are created on first use.
- ``<!-- docs-test-hidden`` ... ``-->``: hidden Python run at that point: what a reader is
  assumed to have (a started producer, a consumer's messages), or cleaning up after.
- ``<!-- docs-test-skip: REASON -->`` right before a block: that block is not run (an
  outline of internal classes, a cluster the tests do not have); the reason is required and
  the test lists every skipped block.
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
        before = text[: match.start()].rstrip()
        reason = None
        if before.endswith("-->"):
            skip = _SKIP.fullmatch(before[before.rfind("<!--") :])
            if skip is not None:
                reason = skip.group(1).strip() or "(no reason given)"
        line = text.count("\n", 0, match.start()) + 2
        found.append((match.start(), Block(name, line, match.group(2), skip=reason)))
    for match in _SETUP.finditer(text):
        line = text.count("\n", 0, match.start()) + 2
        found.append((match.start(), Block(name, line, match.group(1), hidden=True)))
    return [block for _, block in sorted(found, key=lambda item: item[0])]


def run_page(page: Path, broker: str) -> list[str]:
    """Run the page's blocks against ``broker``; return the ``where`` of each block run.

    Raises whatever a block raises, with its page and line in the traceback's file name.
    """
    namespace: dict[str, object] = {"__name__": "__docs__"}
    loop = asyncio.new_event_loop()
    ran: list[str] = []
    try:
        for block in blocks(page):
            if block.skip is not None:
                continue
            code = compile(
                block.code.replace(DOCS_BROKER, broker),
                block.where,
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
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
    """``python -m tests.support.doc_blocks PAGE BROKER``: run one page, print JSON."""
    page, broker = Path(sys.argv[1]), sys.argv[2]
    try:
        ran = run_page(page, broker)
    except BaseException:  # report any failure, SystemExit included
        traceback.print_exc()
        return 1
    skipped = [asdict(block) for block in blocks(page) if block.skip is not None]
    print(json.dumps({"ran": ran, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
