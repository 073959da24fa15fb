"""The simulation's fixed seeds, as part of the normal test run.

Seeds run in chunks (one test per chunk, so the suite stays fast) and a failing chunk names
each failing seed with the command that replays it, its violations and configuration. The
first failing seed's trace is attached, so that CI logs show what happened.
``python -m tests.sim`` runs more seeds, or replays one.
"""

from __future__ import annotations

import pytest

from tests.sim.runner import Result, failure_report, run_seed
from tests.sim.simulation import RunOptions, Simulation
from tests.support.passes import compiled_pass_only

#: Seeds the suite runs: SEED_CHUNKS chunks of CHUNK seeds (about 20 ms a seed in plain
#: Python; ``python -m tests.sim --seeds 100000`` is the long soak).
CHUNK = 100
SEED_CHUNKS = 50


#: More chunks with the answers to coordinator and metadata requests lost too.
LOST_ANSWER_CHUNKS = 10
#: The share of each that the plain-Python pass of CI runs too (the same code as the
#: compiled pass's, in about twice the time).
PURE_PASS_SHARE = 0.4
_COMPILED_PASS_ONLY = compiled_pass_only("more of the simulation's seeds")


def _chunks(count: int) -> list[object]:
    """The first seed of each of ``count`` chunks; those past PURE_PASS_SHARE run once per
    CI run, in its compiled pass."""
    shared = round(count * PURE_PASS_SHARE)
    return [
        pytest.param(chunk * CHUNK, marks=[] if chunk < shared else [_COMPILED_PASS_ONLY])
        for chunk in range(count)
    ]


def _run_chunk(first: int, options: RunOptions | None = None) -> None:
    failing: list[Result] = []
    for seed in range(first, first + CHUNK):
        result = run_seed(seed, options)
        if not result.ok:
            failing.append(result)
    if failing:
        reports = [failure_report(result) for result in failing]
        traced = RunOptions(trace=True)
        if options is not None:
            traced.lose_control_answers = options.lose_control_answers
        trace = run_seed(failing[0].seed, traced).trace
        pytest.fail(
            f"{len(failing)} of seeds {first}..{first + CHUNK - 1} fail:\n"
            + "\n".join(reports)
            + f"\n\ntrace of seed {failing[0].seed}:\n"
            + "\n".join(trace[-400:]),
            pytrace=False,
        )


@pytest.mark.parametrize("first", _chunks(SEED_CHUNKS))
def test_seeds(first: int) -> None:
    _run_chunk(first)


@pytest.mark.parametrize("first", _chunks(LOST_ANSWER_CHUNKS))
def test_seeds_with_lost_coordinator_and_metadata_answers(first: int) -> None:
    _run_chunk(first, RunOptions(lose_control_answers=True))


def test_a_seed_replays_exactly() -> None:
    # The same seed, twice, traced and not: the same run (the trace draws nothing).
    first = run_seed(7, RunOptions(trace=True))
    second = run_seed(7, RunOptions(trace=True))
    assert first.trace == second.trace
    assert first.violations == second.violations
    untraced = Simulation(7)
    untraced.run()
    assert untraced.steps == first.steps


def test_every_mode_is_drawn() -> None:
    modes = {Simulation(seed).config.mode for seed in range(30)}
    assert modes == {"plain", "idempotent", "transactional"}
