"""Tests that CI runs once, in its pass over the compiled build.

CI runs the suite twice, over the compiled build and over the same source as plain Python
(``.ci/run``). A test whose subject is the same in both builds and that takes minutes runs
in the first pass only; its skip in the second is one that ``tests/conftest.py`` allows
under ``CI=true`` (the reason ends with :data:`REASON_SUFFIX`).
"""

from __future__ import annotations

import os

import pytest

#: The end of every such skip's reason.
REASON_SUFFIX = ": run in the compiled pass"


def compiled_pass_only(why: str) -> pytest.MarkDecorator:
    """Skip the test in the plain-Python pass (``AIOPRODUCER_EXPECT_COMPILED=0``), saying
    ``why`` it runs once."""
    return pytest.mark.skipif(
        os.environ.get("AIOPRODUCER_EXPECT_COMPILED") == "0", reason=f"{why}{REASON_SUFFIX}"
    )
