"""Java ``.properties`` files, as the Java clients' ``client.properties`` are written.

:func:`read_properties` reads one into a dict that :class:`~aioproducer.Producer` takes as it
is, Java option names and all::

    producer = Producer(read_properties("client.properties"))

Errors name the file and a line number, never the text of a line: a line may hold a
password.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from aioproducer.errors import ConfigurationError

__all__ = ["parse_properties", "read_entries", "read_properties"]

_PROPERTY_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
# java.util.Properties ends lines only at these (not at form feeds or U+0085, which
# str.splitlines() would also split at).
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


def read_properties(path: str | Path) -> dict[str, str]:
    """The options of the Java properties file at ``path``, later entries winning.

    Read as UTF-8, or as ISO-8859-1 (what Java reads) when it is not valid UTF-8, by the
    rules of ``java.util.Properties.load`` (see :func:`parse_properties`).

    Raises:
        ConfigurationError: the file cannot be read, or has a malformed ``\\uXXXX`` escape
            (the message names the file and the line, nothing of the line's text).
    """
    try:
        entries = read_entries(path)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"{path} {exc}") from None
    return {name: value for name, value, _ in entries}


def read_entries(path: str | Path) -> list[tuple[str, str, int]]:
    """The ``(name, value, line)`` entries of the properties file at ``path``, read as UTF-8,
    or as ISO-8859-1 (what Java reads) when it is not valid UTF-8.

    Raises:
        OSError: the file cannot be read.
        ValueError: from :func:`parse_properties`.
    """
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text)


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """The entries of a Java ``.properties`` file as ``(name, value, line)`` triples, in order.

    Follows ``java.util.Properties.load``: lines end at ``\\n``, ``\\r`` or ``\\r\\n``;
    ``#`` and ``!`` comment lines; ``name=value``, ``name: value`` or ``name value``;
    whitespace around the separator dropped; a line ending in an odd number of
    backslashes continues on the next one (whose leading whitespace is dropped); escapes
    ``\\t \\n \\r \\f \\uXXXX``, and a backslash before any other character stands for
    that character (``\\=``, ``\\:``, ``\\ ``, ``\\\\``). A name without a value has the
    empty value. ``line`` is the number of the line the entry starts on.

    Raises:
        ValueError: a malformed ``\\uXXXX`` escape. The message names the line it is on
            and nothing of its text, which may be a secret.
    """
    entries: list[tuple[str, str, int]] = []
    lines = _LINE_BREAK.split(text)
    index = 0
    while index < len(lines):
        number = index + 1
        logical = lines[index].lstrip(" \t\f")
        index += 1
        if not logical or logical[0] in "#!":
            continue
        # Where each physical line starts in the logical one, to name the line of an error.
        starts = [(0, number)]
        while _continues(logical) and index < len(lines):
            logical = logical[:-1]
            starts.append((len(logical), index + 1))
            logical += lines[index].lstrip(" \t\f")
            index += 1
        if _continues(logical):  # a backslash at the very end of the file
            logical = logical[:-1]
        try:
            name, value = _split_entry(logical)
        except _EscapeError as exc:
            line = max(line for offset, line in starts if offset <= exc.offset)
            raise ValueError(f"line {line}: malformed \\uXXXX escape") from None
        entries.append((name, value, number))
    return entries


class _EscapeError(ValueError):
    def __init__(self, offset: int) -> None:
        super().__init__(f"malformed escape at offset {offset}")
        self.offset = offset


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    position = 0
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char in "=: \t\f":
            break
        position += 1
    name = line[:position]
    value_start = len(line) - len(line[position:].lstrip(" \t\f"))
    if line[value_start : value_start + 1] in ("=", ":"):
        value_start += 1
        value_start = len(line) - len(line[value_start:].lstrip(" \t\f"))
    return _unescape(name, 0), _unescape(line[value_start:], value_start)


def _unescape(text: str, offset: int) -> str:
    """``text`` with its escapes replaced; ``offset`` is where it starts in its line, for
    the position an :class:`_EscapeError` reports."""
    if "\\" not in text:
        return text
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char != "\\" or position + 1 >= len(text):
            out.append(char)
            position += 1
            continue
        escaped = text[position + 1]
        if escaped == "u":
            digits = text[position + 2 : position + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise _EscapeError(offset + position)
            out.append(chr(int(digits, 16)))
            position += 6
            continue
        out.append(_PROPERTY_ESCAPES.get(escaped, escaped))
        position += 2
    return "".join(out)
