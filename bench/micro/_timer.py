"""The shared timing loop and report for the micro-benchmarks."""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

__all__ = ["Measurement", "measure", "report", "run_main", "skipped"]


@dataclass
class Measurement:
    """One benchmark's result: nanoseconds per operation (best of the repeats)."""

    name: str
    ns_per_op: float | None
    ops_per_call: int = 1
    note: str = ""

    @property
    def per_second(self) -> float | None:
        """Operations per second at ``ns_per_op``."""
        return 1e9 / self.ns_per_op if self.ns_per_op else None


#: Set by ``python -m bench.micro --smoke``: each benchmark runs once, briefly, to show that
#: it runs and measures something; the figures then mean little.
SMOKE = False


def measure(
    name: str,
    function: Callable[[], object],
    *,
    ops_per_call: int = 1,
    repeat: int = 5,
    min_seconds: float = 0.2,
    note: str = "",
) -> Measurement:
    """Time ``function`` (each call does ``ops_per_call`` operations); best of ``repeat``
    (one short run under :data:`SMOKE`)."""
    if SMOKE:
        repeat, min_seconds = 1, 0.002
    timer = timeit.Timer(function)
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= min_seconds or number >= 1 << 24:
            break
        number *= 2 if elapsed > min_seconds / 10 else 10
    best = min([elapsed, *timer.repeat(repeat - 1, number)])
    return Measurement(name, best / number / ops_per_call * 1e9, ops_per_call, note)


def skipped(name: str, reason: BaseException | str) -> Measurement:
    """A benchmark that could not run against the current code."""
    text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
    return Measurement(name, None, note=f"skipped: {text}")


def report(results: Sequence[Measurement], title: str) -> str:
    """An aligned table of results."""
    width = max([len(r.name) for r in results] + [20])
    lines = [title, "-" * len(title)]
    for r in results:
        if r.ns_per_op is None:
            lines.append(f"{r.name:<{width}}  {'':>12}  {r.note}")
            continue
        rate = r.per_second or 0.0
        lines.append(
            f"{r.name:<{width}}  {r.ns_per_op:>9,.0f} ns/op  {rate:>12,.0f} op/s  {r.note}".rstrip()
        )
    return "\n".join(lines)


def run_main(
    title: str, collect: Callable[[], list[Measurement]], argv: Sequence[str] | None = None
) -> int:
    """Command-line entry for one benchmark file: print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=title)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    options = parser.parse_args(list(argv) if argv is not None else None)
    results = collect()
    if options.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    else:
        print(report(results, title))
    sys.stdout.flush()
    return 0
