"""``python -m tests.sim``: run seeds of the simulation, or replay one with its trace.

    python -m tests.sim --seeds 1000            # seeds 0..999 (--start to shift)
    python -m tests.sim --seed 42 --trace       # replay one seed, printing every event
    python -m tests.sim --seeds 500 --mode transactional --lose-control-answers

A failing seed prints its violations, its configuration and the one-line command that
replays it; with ``--trace`` (or for the first failure, unless ``--quiet``) the trace of
its events follows.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from tests.sim.runner import failure_report, run_seed
from tests.sim.simulation import RunOptions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="print the trace of events")
    parser.add_argument("--quiet", action="store_true", help="no trace for the first failure")
    parser.add_argument(
        "--mode", help="comma-separated modes to draw from: plain, idempotent, transactional"
    )
    parser.add_argument(
        "--lose-control-answers",
        action="store_true",
        help="also lose answers to Metadata, FindCoordinator, InitProducerId and txn requests",
    )
    parser.add_argument("--max-failures", type=int, default=20, help="stop after this many")
    args = parser.parse_args(argv)
    modes = tuple(args.mode.split(",")) if args.mode else None
    options = RunOptions(lose_control_answers=args.lose_control_answers, modes=modes)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    failures = 0
    kinds: Counter[str] = Counter()
    notes = 0
    started = time.perf_counter()
    for seed in seeds:
        traced = args.trace or (args.seed is not None)
        options.trace = traced
        result = run_seed(seed, options)
        notes += len(result.notes)
        if args.trace:
            print("\n".join(result.trace))
        for note in result.notes:
            print(f"seed {seed} note: {note}")
        if result.ok:
            continue
        failures += 1
        for text in result.violations:
            kinds[
                text.split(" ")[0].rstrip(":")
                if text.startswith(("hang", "internal"))
                else _kind(text)
            ] += 1
        print(failure_report(result, options))
        if failures == 1 and not traced and not args.quiet:
            options.trace = True
            print("\n".join(run_seed(seed, options).trace))
        if failures >= args.max_failures:
            print(f"stopping after {failures} failures")
            break
    elapsed = time.perf_counter() - started
    print(
        f"{len(seeds)} seed(s), {failures} failing, {notes} note(s), {elapsed:.1f}s"
        + (f"; violations: {dict(kinds)}" if kinds else "")
    )
    return 1 if failures else 0


def _kind(text: str) -> str:
    for word in (
        "never sent",
        "protocol",
        "needless epoch bump",
        "committed",
        "aborted",
        "partly",
        "duplicated",
        "times",
        "definite",
        "order",
        "after it in the log",
        "not in the log",
        "delivery_timeout_ms",
        "took until",
        "hang",
    ):
        if word in text:
            return word
    return "other"


if __name__ == "__main__":
    sys.exit(main())
