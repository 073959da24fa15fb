"""Generate the reference tables of the docs from the code, so they cannot drift.

* ``docs/configuration.md``: every option of :func:`aioproducer.config.options_table`.
* ``docs/errors.md``: every class in ``aioproducer.errors.__all__``.
* ``docs/metrics.md``: every metric of :data:`aioproducer.metric_catalog.DEFINITIONS`, by group.

Each table lives between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` markers.

    python docs/gen_config_table.py          # rewrite the tables in place
    python docs/gen_config_table.py --check  # exit 1 if a page is out of date

mkdocs also loads this file as a hook (``hooks:`` in mkdocs.yml), so the built site always
shows the tables of the code it was built from.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _find_package() -> None:
    # Checked at each use: mkdocs restores sys.path after loading a hook module.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def _cell(text: str) -> str:
    text = _ROLE.sub(_code, text)  # reST roles (:class:`X`) read as code in Markdown
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _default(name: str, value: Any) -> str:
    if name == "client_software_version":
        # Read from the installed package metadata, so it differs between environments.
        return "aioproducer's version"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{value!r}`"


def options_markdown() -> str:
    """The configuration table, one row per option."""
    _find_package()
    from aioproducer.config import options_table

    rows = [
        "| Option | Java name | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for option in options_table():
        java = f"`{option.java_name}`" if option.java_name else "—"
        rows.append(
            f"| `{option.name}` | {java} | {_cell(_default(option.name, option.default))} "
            f"| {_cell(option.doc)} |"
        )
    return "\n".join(rows)


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ")


def _error_classes() -> list[type[BaseException]]:
    _find_package()
    import aioproducer.errors as errors

    return [
        obj
        for obj in (getattr(errors, name) for name in errors.__all__)
        if inspect.isclass(obj) and issubclass(obj, BaseException)
    ]


def _retriable(cls: type[BaseException]) -> str:
    if not getattr(cls, "retriable", False):
        return "no"
    if getattr(cls, "invalid_metadata", False):
        return "yes, after a metadata refresh"
    return "yes"


def client_errors_markdown() -> str:
    """The families and the errors raised by the client itself (no Kafka error code)."""
    rows = [
        "| Error | Derives from | Retriable | Meaning |",
        "|---|---|---|---|",
    ]
    _find_package()
    import aioproducer.errors as errors

    client = [cls for cls in _error_classes() if getattr(cls, "error_code", None) is None]
    client.sort(key=lambda cls: (cls is not errors.KafkaError, cls.__name__))
    for cls in client:
        bases = ", ".join(f"`{base.__name__}`" for base in cls.__bases__)
        rows.append(
            f"| `{cls.__name__}` | {bases} | {_retriable(cls)} | {_cell(_first_line(cls))} |"
        )
    return "\n".join(rows)


def broker_errors_markdown() -> str:
    """The errors for Kafka error codes, by code."""
    rows = [
        "| Code | Name | Error | Derives from | Retriable | Meaning |",
        "|---|---|---|---|---|---|",
    ]
    coded = [cls for cls in _error_classes() if getattr(cls, "error_code", None) is not None]
    coded.sort(key=lambda cls: (getattr(cls, "error_code", 0), cls.__name__))
    for cls in coded:
        bases = ", ".join(f"`{base.__name__}`" for base in cls.__bases__)
        rows.append(
            f"| {getattr(cls, 'error_code', '')} | `{getattr(cls, 'error_name', None) or ''}` "
            f"| `{cls.__name__}` | {bases} | "
            f"{_retriable(cls)} | {_cell(_first_line(cls))} |"
        )
    return "\n".join(rows)


def metrics_markdown(group: str) -> str:
    """The metrics of ``group``, one row per metric."""
    _find_package()
    from aioproducer.metric_catalog import DEFINITIONS

    rows = [
        "| Metric | Prometheus | Kind | Unit | Meaning |",
        "|---|---|---|---|---|",
    ]
    for metric in DEFINITIONS:
        if metric.group == group:
            rows.append(
                f"| `{metric.name}` | `{metric.prometheus_name}` | {metric.kind} "
                f"| {metric.unit} | {_cell(metric.description)} |"
            )
    return "\n".join(rows)


GENERATED: dict[str, tuple[str, str, Callable[[], str]]] = {
    "options-table": ("configuration.md", "options-table", options_markdown),
    "errors-client-table": ("errors.md", "errors-client-table", client_errors_markdown),
    "errors-broker-table": ("errors.md", "errors-broker-table", broker_errors_markdown),
    "metrics-producer-table": (
        "metrics.md",
        "metrics-producer-table",
        lambda: metrics_markdown("producer-metrics"),
    ),
    "metrics-topic-table": (
        "metrics.md",
        "metrics-topic-table",
        lambda: metrics_markdown("producer-topic-metrics"),
    ),
    "metrics-node-table": (
        "metrics.md",
        "metrics-node-table",
        lambda: metrics_markdown("producer-node-metrics"),
    ),
}


def fill(markdown: str, marker: str, table: str) -> str:
    """``markdown`` with the block between the ``marker`` comments replaced by ``table``."""
    pattern = re.compile(
        rf"(<!-- BEGIN {re.escape(marker)} -->\n)(?:.*?\n)?(<!-- END {re.escape(marker)} -->)",
        re.DOTALL,
    )
    if not pattern.search(markdown):
        raise ValueError(f"the markers for {marker!r} are missing")
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), markdown, count=1)


def render(page: str, markdown: str) -> str:
    """``markdown`` of ``page`` (a path relative to docs/) with its tables regenerated."""
    for target, marker, make in GENERATED.values():
        if target == page:
            markdown = fill(markdown, marker, make())
    return markdown


def stale_pages() -> list[str]:
    """The pages whose tables differ from what the code generates now."""
    stale = []
    for target in sorted({target for target, _, _ in GENERATED.values()}):
        text = (DOCS / target).read_text(encoding="utf-8")
        if render(target, text) != text:
            stale.append(target)
    return stale


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    """mkdocs hook: regenerate the tables of the page being built."""
    return render(page.file.src_uri, markdown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(f"docs/{page} is out of date: run python docs/gen_config_table.py")
        return 1 if stale else 0
    for page in stale:
        path = DOCS / page
        path.write_text(render(page, path.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"updated docs/{page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
