"""Charts and markdown tables from the harness's result files.

::

    python -m bench.chart                       # newest bench/results/*.json -> throughput.png
    python -m bench.chart --markdown            # print the README tables instead
    python -m bench.chart --input bench/results/20250101T000000Z-mock.json --markdown

The chart has one panel per broker: grouped bars of the median records per second for
every throughput scenario (log scale, one bar per client), and ``latency.png`` shows the
send-to-ack percentiles of the latency scenarios.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

__all__ = ["latest_result", "load", "main", "markdown_tables", "write_charts"]

_ORDER = (
    "aioproducer_send",
    "aioproducer_send_many",
    "aioproducer_produce",
    "confluent_producer",
    "java_send",
    "aiokafka_batch",
    "aiokafka_send",
    "confluent_aio",
    "kafka_python",
)
_SHORT = {
    "aioproducer_send": "aioproducer send",
    "aioproducer_send_many": "aioproducer send_many",
    "aioproducer_produce": "aioproducer produce",
    "aiokafka_send": "aiokafka send",
    "aiokafka_batch": "aiokafka send_batch",
    "confluent_producer": "confluent Producer",
    "java_send": "Java KafkaProducer",
    "confluent_aio": "confluent AIOProducer",
    "kafka_python": "kafka-python",
}


def latest_result(directory: Path = RESULTS) -> Path | None:
    """The newest harness result in ``directory`` (by the time in its name); the files of
    ``bench.memory``, ``bench.offload`` and ``bench.instructions`` are not harness runs."""
    files = sorted(p for p in directory.glob("*-*.json") if p.is_file() and _is_harness_run(p))
    return files[-1] if files else None


def _is_harness_run(path: Path) -> bool:
    """Whether the name ends in the harness's broker tag: ``mock``, ``both``, ``all`` or
    broker names joined with ``+`` (``kafka+instant``)."""
    from bench.harness import BROKER_GROUPS, BROKER_NAMES

    tag = path.stem.rsplit("-", 1)[-1]
    return tag in BROKER_GROUPS or all(part in BROKER_NAMES for part in tag.split("+"))


def load(path: Path) -> dict[str, Any]:
    """Read a result document; the summary is recomputed from its runs."""
    document: dict[str, Any] = json.loads(path.read_text())
    if document.get("runs"):
        from bench.harness import summarize

        document["summary"] = summarize(document["runs"])
    return document


def _clients(cells: dict[str, Any]) -> list[str]:
    known = [c for c in _ORDER if c in cells]
    return known + sorted(c for c in cells if c not in _ORDER)


def _label(client: str) -> str:
    return _SHORT.get(client, client)


def _scenario_order(document: dict[str, Any], names: Sequence[str]) -> list[str]:
    listed = [s["name"] for s in document.get("scenarios", []) if s["name"] in names]
    return listed + sorted(n for n in names if n not in listed)


def _fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def _fmt_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    # Two decimals, or two significant digits for a ratio under 0.01 (never "0.00x").
    return f"{value:.2f}x" if value >= 0.01 or value == 0 else f"{value:.2g}x"


def _is_latency(cells: dict[str, Any]) -> bool:
    return any("latency_ms" in cell for cell in cells.values())


def _cpu_per_record(cell: dict[str, Any]) -> float | None:
    """Microseconds of the runner's CPU per record (older files: ``cpu_s_per_million``,
    the same number)."""
    value = cell.get("cpu_us_per_record", cell.get("cpu_s_per_million"))
    return None if value is None else float(value)


def markdown_tables(document: dict[str, Any]) -> str:
    """Markdown tables of a result document: throughput, ratios, CPU and memory, latency."""
    summary = document.get("summary") or {}
    medians: dict[str, dict[str, dict[str, Any]]] = summary.get("medians", {})
    ratios: dict[str, Any] = summary.get("ratios", {})
    settings = document.get("settings", {})
    machine = document.get("machine", {})
    lines: list[str] = []
    lines.append(
        f"Run {document.get('created', '?')}: {settings.get('rounds', '?')} round(s), "
        f"{settings.get('partitions', '?')} partitions, linger {settings.get('linger_ms')} ms, "
        f"batch {settings.get('batch_size')} B, loop {settings.get('loop')}; "
        f"{machine.get('cpu_count', '?')} CPUs ({machine.get('cpu_model', '?')}), "
        f"Python {machine.get('python', '?')}."
    )
    uncounted = {r.get("broker") for r in document.get("runs", []) if r.get("broker_count")}
    for broker in sorted(uncounted & set(medians)):
        lines += ["", f"The {broker} broker stores nothing: its runs have no broker-side "
                     "record count, only the client's."]
    for broker, reason in (document.get("skipped_brokers") or {}).items():
        lines += ["", f"The {broker} broker was skipped: {reason}"]
    for broker, skipped in (document.get("skipped_clients") or {}).items():
        for client, reason in skipped.items():
            lines += ["", f"{_label(client)} did not run on the {broker} broker: {reason}"]
    for broker, scenarios in medians.items():
        throughput = {s: c for s, c in scenarios.items() if not _is_latency(c)}
        latency = {s: c for s, c in scenarios.items() if _is_latency(c)}
        if throughput:
            clients = sorted({c for cells in throughput.values() for c in cells},
                             key=lambda c: (_ORDER.index(c) if c in _ORDER else 99, c))
            lines += ["", f"### Throughput, {broker} broker (median records/s)", ""]
            lines.append("| scenario | " + " | ".join(_label(c) for c in clients) + " |")
            lines.append("|---|" + "---:|" * len(clients))
            for scenario in _scenario_order(document, list(throughput)):
                cells = throughput[scenario]
                row = []
                for client in clients:
                    cell = cells.get(client)
                    if cell is None:
                        row.append("")
                    elif not cell.get("ok_runs"):
                        row.append("failed")
                    else:
                        row.append(_fmt_rate(cell.get("msgs_per_s")))
                lines.append(f"| {scenario} | " + " | ".join(row) + " |")
            lines += ["", f"### CPU per record (us) / peak RSS (MiB), {broker} broker", ""]
            lines.append("The runner process's user + system CPU over the timed part, divided "
                         "by the records timed.")
            lines.append("")
            lines.append("| scenario | " + " | ".join(_label(c) for c in clients) + " |")
            lines.append("|---|" + "---:|" * len(clients))
            for scenario in _scenario_order(document, list(throughput)):
                cells = throughput[scenario]
                row = []
                for client in clients:
                    cell = cells.get(client) or {}
                    if not cell.get("ok_runs"):
                        row.append("")
                        continue
                    cpu = _cpu_per_record(cell)
                    rss = cell.get("peak_rss_bytes")
                    row.append(
                        f"{cpu:.2f} / {rss / 2**20:.0f}" if cpu is not None and rss else "-"
                    )
                lines.append(f"| {scenario} | " + " | ".join(row) + " |")
            if broker in uncounted:
                lines += ["", f"### Records per CPU-second, {broker} broker (the client-bound "
                          "ceiling)", ""]
                lines.append("| scenario | " + " | ".join(_label(c) for c in clients) + " |")
                lines.append("|---|" + "---:|" * len(clients))
                for scenario in _scenario_order(document, list(throughput)):
                    cells = throughput[scenario]
                    row = []
                    for client in clients:
                        cell = cells.get(client) or {}
                        row.append(_fmt_rate(cell.get("records_per_cpu_s"))
                                   if cell.get("ok_runs") else "")
                    lines.append(f"| {scenario} | " + " | ".join(row) + " |")
        if latency:
            for scenario in _scenario_order(document, list(latency)):
                cells = latency[scenario]
                lines += ["", f"### Latency {scenario}, {broker} broker (median of rounds, ms)", ""]
                lines.append("| client | p50 | p95 | p99 | p99.9 | max | achieved msg/s | "
                             "CPU us/record |")
                lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
                for client in _clients(cells):
                    cell = cells[client]
                    lat = cell.get("latency_ms")
                    if not cell.get("ok_runs") or not lat:
                        lines.append(f"| {_label(client)} | failed | | | | | | |")
                        continue
                    lines.append(
                        f"| {_label(client)} | {lat['p50']:.2f} | {lat['p95']:.2f} | "
                        f"{lat['p99']:.2f} | {lat['p99_9']:.2f} | {lat['max']:.2f} | "
                        f"{_fmt_rate(cell.get('achieved_rate'))} | "
                        f"{_cpu_per_record(cell) or 0:.1f} |"
                    )
        broker_ratios = ratios.get(broker, {})
        if broker_ratios:
            peers = [c for c in _ORDER if not c.startswith("aioproducer")]
            lines += ["", f"### aioproducer versus each peer, {broker} broker", ""]
            lines.append(
                "Throughput: subject/peer median records/s (higher is better); latency "
                "scenarios: subject/peer p99 (lower is better). In brackets: the median of "
                "the same ratio taken within each round."
            )
            lines.append("")
            present = sorted(
                {p for subjects in broker_ratios.values() for peer_map in subjects.values()
                 for p in peer_map if not p.startswith("aioproducer")},
                key=lambda c: peers.index(c) if c in peers else 99,
            )
            lines.append("| scenario | subject | " + " | ".join(_label(p) for p in present) + " |")
            lines.append("|---|---|" + "---:|" * len(present))
            for scenario in _scenario_order(document, list(broker_ratios)):
                for subject, peer_map in broker_ratios[scenario].items():
                    row = []
                    for peer in present:
                        entry = peer_map.get(peer)
                        if not entry:
                            row.append("")
                        elif "throughput" in entry:
                            row.append(
                                f"{_fmt_ratio(entry['throughput'])} "
                                f"({_fmt_ratio(entry.get('throughput_per_round'))})"
                            )
                        elif "p99" in entry:
                            row.append(
                                f"p99 {_fmt_ratio(entry['p99'])} "
                                f"({_fmt_ratio(entry.get('p99_per_round'))})"
                            )
                        else:
                            row.append("-")
                    lines.append(f"| {scenario} | {_label(subject)} | " + " | ".join(row) + " |")
    targets = summary.get("targets") or []
    if targets:
        lines += ["", "### The performance targets", ""]
        lines.append("| broker | scenario | check | ratio | bound | met |")
        lines.append("|---|---|---|---:|---:|:-:|")
        for t in targets:
            relation = ">=" if t["metric"] == "throughput" else "<="
            lines.append(
                f"| {t['broker']} | {t['scenario']} | {_label(t['subject'])} / "
                f"{_label(t['peer'])} {t['metric']} | {t['ratio']:.2f} | {relation} "
                f"{t['bound']:g} | {'yes' if t['met'] else 'no'} |"
            )
    failed = [r for r in document.get("runs", []) if not r.get("ok")]
    if failed:
        lines += ["", f"{len(failed)} run(s) failed and were not counted:"]
        for row in failed[:20]:
            samples = "; ".join(map(str, row.get("error_samples", [])))[:160]
            lines.append(
                f"- {row.get('broker')} {row.get('label')} {row['scenario']} {row['client']}: "
                f"{samples}"
            )
    return "\n".join(lines)


def _leading_digit(value: float) -> int:
    """The first significant digit of a positive tick value (2 for 200k, 5 for 0.5)."""
    if value <= 0:
        return 0
    digits = f"{value:.6e}"
    return int(digits[0])


def write_charts(document: dict[str, Any], directory: Path = RESULTS) -> list[Path]:
    """Write ``throughput.png`` (and ``latency.png`` when there are latency scenarios)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    medians: dict[str, dict[str, dict[str, Any]]] = document["summary"]["medians"]
    written: list[Path] = []
    brokers = list(medians)
    if not brokers:
        return written
    figure, axes = plt.subplots(len(brokers), 1, figsize=(14, 5.5 * len(brokers)), squeeze=False)
    for axis, broker in zip(axes[:, 0], brokers, strict=True):
        scenarios = {s: c for s, c in medians[broker].items() if not _is_latency(c)}
        names = _scenario_order(document, list(scenarios))
        clients = sorted({c for cells in scenarios.values() for c in cells},
                         key=lambda c: (_ORDER.index(c) if c in _ORDER else 99, c))
        width = 0.8 / max(1, len(clients))
        for k, client in enumerate(clients):
            xs = [i + (k - (len(clients) - 1) / 2) * width for i in range(len(names))]
            ys = [float(scenarios[s].get(client, {}).get("msgs_per_s") or 0) for s in names]
            axis.bar(xs, ys, width, label=_label(client))
        axis.set_xticks(range(len(names)))
        axis.set_xticklabels(names, rotation=30, ha="right")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_rate(v)))
        # Label only the 2x and 5x minor ticks: labelling all eight of each decade made
        # them overlap into an unreadable stack.
        axis.yaxis.set_minor_formatter(
            FuncFormatter(lambda v, _: _fmt_rate(v) if _leading_digit(v) in (2, 5) else "")
        )
        axis.set_ylabel("records/s (median, log scale)")
        axis.set_title(f"Producer throughput, {broker} broker")
        axis.grid(axis="y", which="both", alpha=0.3)
        axis.legend(fontsize="small", ncol=len(clients), loc="lower center",
                    bbox_to_anchor=(0.5, 1.06), frameon=False)
    figure.tight_layout()
    path = directory / "throughput.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    written.append(path)

    latency_cells = [
        (broker, scenario, cells)
        for broker in brokers
        for scenario, cells in medians[broker].items()
        if _is_latency(cells)
    ]
    if latency_cells:
        figure, axes = plt.subplots(
            len(latency_cells), 1, figsize=(12, 4.5 * len(latency_cells)), squeeze=False
        )
        percentiles = ("p50", "p95", "p99", "p99_9")
        for axis, (broker, scenario, cells) in zip(axes[:, 0], latency_cells, strict=True):
            clients = [c for c in _clients(cells) if cells[c].get("latency_ms")]
            width = 0.8 / max(1, len(percentiles))
            for k, p in enumerate(percentiles):
                xs = [i + (k - (len(percentiles) - 1) / 2) * width for i in range(len(clients))]
                ys = [cells[c]["latency_ms"][p] for c in clients]
                axis.bar(xs, ys, width, label=p.replace("_", "."))
            axis.set_xticks(range(len(clients)))
            axis.set_xticklabels([_label(c) for c in clients], rotation=20, ha="right")
            axis.set_yscale("log")
            axis.set_ylabel("send-to-ack ms (log scale)")
            axis.set_title(f"Latency {scenario}, {broker} broker")
            axis.grid(axis="y", which="both", alpha=0.3)
            axis.legend(fontsize="small")
        figure.tight_layout()
        path = directory / "latency.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.chart``."""
    parser = argparse.ArgumentParser(prog="python -m bench.chart", description=__doc__)
    parser.add_argument("--input", type=Path, help="a result file (default: the newest)")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the PNGs go")
    args = parser.parse_args(list(argv) if argv is not None else None)
    path = args.input or latest_result()
    if path is None:
        print("no result files in bench/results/; run `python -m bench.harness` first")
        return 1
    document = load(path)
    if args.markdown:
        print(markdown_tables(document))
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for written in write_charts(document, args.out_dir):
        print(f"wrote {written} (from {path.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
