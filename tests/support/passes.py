"""Tests that CI runs once, in its pass over the compiled build; the passes without Java.

CI runs the whole suite twice on one CPython, over the compiled build and over the same
source as plain Python (``.ci/run``), then the tests that need no Java on each other CPython
the package declares, over its wheel (``python -m tools.wheel --suite``, which sets
:data:`WITHOUT_JAVA`). A test whose subject is the same in every build and on every Python,
and that takes minutes, runs in the first pass only; its skip in the others is one that
``tests/conftest.py`` allows under ``CI=true`` (the reason ends with :data:`REASON_SUFFIX`).
"""

from __future__ import annotations

import os

import pytest

#: The end of every such skip's reason.
REASON_SUFFIX = ": run in the compiled pass"

#: Set by ``python -m tools.wheel --suite`` for its runs on the other CPython versions, which
#: select the tests that need no Java by their markers.
WITHOUT_JAVA = "AIOPRODUCER_TESTS_WITHOUT_JAVA"


def compiled_pass_only(why: str) -> pytest.MarkDecorator:
    """Skip the test in the plain-Python pass (``AIOPRODUCER_EXPECT_COMPILED=0``) and in the
    runs on the other Pythons (:data:`WITHOUT_JAVA`), saying ``why`` it runs once."""
    return pytest.mark.skipif(
        os.environ.get("AIOPRODUCER_EXPECT_COMPILED") == "0"
        or os.environ.get(WITHOUT_JAVA) == "1",
        reason=f"{why}{REASON_SUFFIX}",
    )


def refuse_java(what: str) -> None:
    """Fail the test, in a run without Java (:data:`WITHOUT_JAVA`), before ``what`` starts a
    Java process: the test lacks the marker (``kafka``, ``spark`` or ``registry``) that
    would have left it out of that run."""
    if os.environ.get(WITHOUT_JAVA) == "1":
        pytest.fail(
            f"{what} needs Java, which this run leaves out ({WITHOUT_JAVA}=1): mark the test "
            "kafka, spark or registry",
            pytrace=False,
        )
