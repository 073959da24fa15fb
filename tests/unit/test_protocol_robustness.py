"""Hostile bytes for every response decoder: only CorruptResponseError may come out."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
