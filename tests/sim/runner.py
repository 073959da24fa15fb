"""Running seeds: one (:func:`run_seed`) or many, and what a failure prints."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.sim.checks import check, notes
from tests.sim.simulation import RunOptions, Simulation


@dataclass
class Result:
    """The outcome of one seed."""

    seed: int
    violations: list[str]
    notes: list[str]
    summary: str
    steps: int
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def run_seed(seed: int, options: RunOptions | None = None) -> Result:
    """Run ``seed`` and check the invariants."""
    simulation = Simulation(seed, options)
    simulation.run()
    return Result(
        seed,
        check(simulation),
        notes(simulation),
        simulation.config.describe(),
        simulation.steps,
        simulation.trace_lines,
    )


def replay_command(seed: int, options: RunOptions | None = None) -> str:
    """The one-line command that replays ``seed`` with its trace."""
    extra = ""
    if options is not None and options.lose_control_answers:
        extra += " --lose-control-answers"
    if options is not None and options.modes:
        extra += " --mode " + ",".join(options.modes)
    return f"python -m tests.sim --seed {seed} --trace{extra}"


def failure_report(result: Result, options: RunOptions | None = None) -> str:
    """What a failing seed prints: the violations, the replay command, the configuration."""
    lines = [f"seed {result.seed} violates {len(result.violations)} invariant(s):"]
    lines += [f"  - {text}" for text in result.violations]
    lines.append(f"  config: {result.summary}")
    lines.append(f"  replay: {replay_command(result.seed, options)}")
    return "\n".join(lines)
