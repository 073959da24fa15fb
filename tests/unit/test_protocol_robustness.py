"""Hostile bytes for every response decoder, and the sans-I/O rule (no asyncio)."""

from __future__ import annotations

import contextlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioproducer.protocol
from aioproducer.errors import CorruptResponseError
from aioproducer.protocol.api import Request
from tests.unit.test_protocol_oracle import REQUEST_CASES, RESPONSE_CASES, _versions

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DECODERS = [
    pytest.param(build(version)[0], version, id=f"{cls.__name__}-v{version}")
    for cls, build in REQUEST_CASES
    for version in _versions(cls)
]

VALID_RESPONSES = [
    pytest.param(
        build(version)[0],
        version,
        bytes(response().encode(version=version)),
        id=f"{cls.__name__}-v{version}",
    )
    for cls, build, response, _ in RESPONSE_CASES
    for version in _versions(cls)
]


@pytest.mark.parametrize(("request_", "version"), DECODERS)
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=120))
def test_random_bytes_raise_only_corrupt_response_error(
    request_: Request, version: int, data: bytes
) -> None:
    with contextlib.suppress(CorruptResponseError):
        request_.decode_response(memoryview(data), version)


@pytest.mark.parametrize(("request_", "version", "data"), VALID_RESPONSES)
def test_every_truncation_of_a_valid_response_is_corrupt(
    request_: Request, version: int, data: bytes
) -> None:
    request_.decode_response(memoryview(data), version)
    for cut in range(len(data)):
        with pytest.raises(CorruptResponseError):
            request_.decode_response(memoryview(data[:cut]), version)


@pytest.mark.parametrize(("request_", "version", "data"), VALID_RESPONSES)
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4))
def test_mutated_valid_responses_raise_only_corrupt_response_error(
    request_: Request, version: int, data: bytes, changes: list[tuple[int, int]]
) -> None:
    mutated = bytearray(data)
    for position, byte in changes:
        if mutated:
            mutated[position % len(mutated)] = byte
    with contextlib.suppress(CorruptResponseError):
        request_.decode_response(memoryview(bytes(mutated)), version)


def test_no_protocol_module_imports_asyncio() -> None:
    package_dir = Path(aioproducer.protocol.__file__).parent
    modules = [
        f"aioproducer.protocol.{info.name}" for info in pkgutil.iter_modules([str(package_dir)])
    ]
    assert "aioproducer.protocol.messages" in modules
    # The parent package is stubbed so that only the protocol modules (and what they import)
    # are loaded, whatever aioproducer/__init__.py pulls in.
    script = (
        "import importlib, sys, types\n"
        f"root = types.ModuleType('aioproducer'); root.__path__ = [{str(package_dir.parent)!r}]\n"
        "sys.modules['aioproducer'] = root\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('asyncio.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
