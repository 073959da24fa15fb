"""Serializers: a None key or value never reaches them, it stays None (no key, a tombstone),
as with the Java client's serializers; everything else goes through them, checked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aioproducer._core.appender import serialize
from aioproducer.errors import SerializationError


class Recording:
    """A serializer that records what it was given."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, obj: Any) -> bytes:
        self.calls.append(obj)
        return repr(obj).encode()


@pytest.mark.parametrize("role", ["key", "value"])
def test_none_is_not_passed_to_the_serializer(role: str) -> None:
    serializer = Recording()
    assert serialize(serializer, None, role, "events") is None
    assert serializer.calls == []


def test_str_encode_as_key_serializer_takes_records_without_a_key() -> None:
    # The recipe on the getting-started page: str.encode(None) would raise TypeError.
    assert serialize(str.encode, None, "key", "events") is None
    assert serialize(str.encode, "user-1", "key", "events") == b"user-1"


def test_a_json_value_serializer_leaves_a_tombstone_a_tombstone() -> None:
    # json.dumps(None) is "null": passed through, a tombstone would become a value.
    def to_json(value: Any) -> bytes:
        return json.dumps(value).encode()

    assert serialize(to_json, None, "value", "users") is None
    assert serialize(to_json, {"id": 1}, "value", "users") == b'{"id": 1}'


def test_values_other_than_none_still_go_through_the_serializer_and_its_checks() -> None:
    serializer = Recording()
    assert serialize(serializer, 0, "value", "t") == b"0"
    assert serialize(serializer, b"", "value", "t") == b"b''"
    assert serializer.calls == [0, b""]
    with pytest.raises(SerializationError, match="key_serializer"):
        serialize(str.encode, 5, "key", "t")
    with pytest.raises(SerializationError, match="not bytes-like"):
        serialize(None, "text", "value", "t")
    assert serialize(None, None, "value", "t") is None


DOCS = Path(__file__).resolve().parents[2] / "docs"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_getting_started_serializer_snippet_runs_as_written() -> None:
    block = next(
        block
        for block in _python_blocks(DOCS / "getting-started.md")
        if "key_serializer=str.encode" in block
    )
    namespace: dict[str, Any] = {}
    exec(compile(block, "getting-started.md", "exec"), namespace)  # makes no connection
    config = namespace["producer"].config
    assert serialize(config.value_serializer, {"id": 1}, "value", "t") == b'{"id": 1}'
    assert serialize(config.key_serializer, "user-1", "key", "t") == b"user-1"
    assert serialize(config.key_serializer, None, "key", "t") is None
    assert serialize(config.value_serializer, None, "value", "t") is None


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda page: page.name)
def test_doc_snippets_that_use_json_import_it(page: Path) -> None:
    for block in _python_blocks(page):
        if "json." in block:
            assert "import json" in block, f"{page.name}: a snippet uses json without importing it"
