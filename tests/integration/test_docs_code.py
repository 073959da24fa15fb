"""Every Python code block in the README and the docs runs as written, against the
embedded broker (the rules are in tests/support/doc_blocks.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aioproducer.embedded import EmbeddedBroker
from tests.support.doc_blocks import (
    DOCS_BROKER,
    DOCS_REGISTRY,
    ROOT,
    ShellBlock,
    blocks,
    pages,
    shape,
    shell_blocks,
)
from tests.support.spark import ONCE_PER_CI_RUN

# A page runs in well under this; it only turns a hang into a failure.
_HANG = 180.0

PAGES_WITH_CODE = [page for page in pages() if any(not b.hidden for b in blocks(page))]


def test_every_page_with_python_is_run() -> None:
    names = {str(page.relative_to(ROOT)) for page in PAGES_WITH_CODE}
    assert {"README.md", "docs/getting-started.md", "docs/index.md"} <= names


def test_skipped_blocks_say_why() -> None:
    for page in pages():
        for block in [*blocks(page), *shell_blocks(page)]:
            if block.skip is not None:
                assert block.skip != "(no reason given)", f"{block.where}: say why it is skipped"


#: Pages whose code starts a real Kafka node (marked ``kafka``, as the Kafka suites are).
_KAFKA_PAGES = {"tested-against.md"}
#: Pages whose ``localhost:9092`` is the session's Kafka node rather than Tansu: their code
#: creates the topics it uses, which only a broker that creates none on first use proves.
_ON_KAFKA_PAGES = {"topics.md"}
# Pages whose code runs a Spark job: run once per CI run, in its compiled pass.
_SPARK_JOB_PAGES = {"spark.md"}


def _uses_the_registry(page: Path) -> bool:
    return any(DOCS_REGISTRY in block.code for block in blocks(page) if block.skip is None)


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(
            page,
            id=str(page.relative_to(ROOT)),
            marks=([pytest.mark.kafka] if page.name in _KAFKA_PAGES | _ON_KAFKA_PAGES else [])
            + ([ONCE_PER_CI_RUN, pytest.mark.spark] if page.name in _SPARK_JOB_PAGES else [])
            + ([pytest.mark.registry] if _uses_the_registry(page) else []),
        )
        for page in PAGES_WITH_CODE
    ],
)
def test_the_page_runs(
    page: Path, tansu: EmbeddedBroker, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    registry: list[str] = []
    if _uses_the_registry(page):
        registry.append(request.getfixturevalue("schema_registry").url)
    if page.name in _KAFKA_PAGES:
        from tests.support.kafka import kafka_available

        reason = kafka_available()
        if reason is not None:
            pytest.skip(reason)
    broker = tansu.bootstrap_servers
    if page.name in _ON_KAFKA_PAGES:
        broker = request.getfixturevalue("kafka").bootstrap_servers
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.doc_blocks",
            str(page),
            broker,
            *registry,
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=_HANG,
        check=False,
    )
    assert result.returncode == 0, f"{page.name} failed:\n{result.stderr}\n{result.stdout}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    shown = [b.where for b in blocks(page) if not b.hidden and b.skip is None]
    assert [where for where in report["ran"] if where in shown] == shown


SHELL_BLOCKS = [block for page in pages() for block in shell_blocks(page) if block.skip is None]


def test_the_command_line_pages_are_run() -> None:
    assert {"README.md", "docs/cli.md", "docs/getting-started.md"} <= {
        block.page for block in SHELL_BLOCKS
    }


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[block.where for block in SHELL_BLOCKS])
def test_the_shell_block_runs(block: ShellBlock, tansu: EmbeddedBroker, tmp_path: Path) -> None:
    """Run each command of the block in bash; a command shown with its output prints every
    line shown (numbers aside); one shown alone exits with 0."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    environment = {
        **os.environ,
        "PYTHONPATH": path,
        # The aioproducer command and python of the environment running the tests.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    for command, shown in block.steps:
        result = subprocess.run(
            [
                "bash",
                "-c",
                "set -eo pipefail\n" + command.replace(DOCS_BROKER, tansu.bootstrap_servers),
            ],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=_HANG,
            check=False,
        )
        printed = {shape(line) for line in (result.stdout + result.stderr).splitlines()}
        if not shown:
            assert result.returncode == 0, f"{block.where}: {command}\n{result.stderr}"
            continue
        missing = [line for line in shown if line.strip() and shape(line) not in printed]
        assert not missing, (
            f"{block.where}: {command}\nnot printed: {missing}\n"
            f"printed:\n{result.stdout}{result.stderr}"
        )
