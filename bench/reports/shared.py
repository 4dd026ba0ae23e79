"""What every report section uses: result files, number formats, plots, targets tables."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from bench.common import OUTPUT_DIR, RESULTS_DIR, latest_result

#: Hand-written notes, each appended to the report where its benchmark is.
NOTES_FILE = OUTPUT_DIR / "NOTES.md"
NOTES_WINDOW_STORE = OUTPUT_DIR / "NOTES-window-store.md"
NOTES_INTO_KAFKA = OUTPUT_DIR / "NOTES-punctuation-into-kafka.md"
NOTES_SERDES_TTL = OUTPUT_DIR / "NOTES-registry-serdes-ttl-store.md"
NOTES_EPOCHS = OUTPUT_DIR / "NOTES-epochs.md"
#: Hand-written: workers and interactive queries (issues 35 and 36), after the snapshots.
NOTES_WORKERS_QUERIES = OUTPUT_DIR / "NOTES-issues-35-36.md"

Targets = list[dict[str, Any]]


def read_result(name: str) -> dict[str, Any] | None:
    """The newest result file of ``name`` (``<benchmark>[-<variant>]``), or None."""
    path = latest_result(name)
    return json.loads(path.read_text()) if path else None


def fmt_value(value: float | None, digits: int = 0, suffix: str = "", none: str = "n/a") -> str:
    if value is None:
        return none
    if digits == 0:
        return f"{value:,.0f}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def fmt_or_dash(value: float | None, digits: int = 0) -> str:
    """A number for the tables that write "-" where there is none."""
    return fmt_value(value, digits, none="-")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_plot(fig: Any, name: str, alt: str) -> list[str]:
    """Lay out ``fig``, write ``results/<name>``, close it; the markdown lines showing it."""
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / name, dpi=110)
    pyplot().close(fig)
    return ["", f"![{alt}](results/{name})", ""]


def bar_plot(
    name: str, alt: str, labels: list[str], rates: list[float], title: str, **tick_params: Any
) -> list[str]:
    """One bar per contender, records/s (median); ``tick_params`` for the x labels."""
    fig, ax = pyplot().subplots(figsize=(6, 3.5))
    ax.bar(labels, rates)
    ax.set_ylabel("records/s (median)")
    ax.set_title(title)
    if tick_params:
        ax.tick_params(axis="x", **tick_params)
    return save_plot(fig, name, alt)


def targets_table(header: str, targets: Targets) -> list[str]:
    out = [f"| {header} | measured | met? |", "|---|---|---|"]
    for t in targets:
        out.append(f"| {t['target']} | {t['measured']} | {'met' if t['met'] else 'MISSED'} |")
    out.append("")
    return out


def read_notes(path: Path) -> list[str]:
    return [path.read_text().strip(), ""] if path.exists() else []


def machine_table(machine: dict[str, Any]) -> list[str]:
    lines = ["| | |", "|---|---|"]
    for key, value in machine.items():
        lines.append(f"| {key} | {value} |")
    return lines


def median_of(values: list[Any]) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


def metric(runs: list[dict], *path: str) -> float | None:
    values = []
    for run in runs:
        value: Any = run.get("metrics") or {}
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        values.append(value)
    return median_of(values)


def load_averages(data: dict) -> str:
    m = data.get("machine", {})
    start = ", ".join(f"{x:.2f}" for x in m.get("loadavg_at_start", []))
    end = ", ".join(f"{x:.2f}" for x in m.get("loadavg_at_end", []))
    return f"load average (1, 5, 15 min) at start {start}; at end {end}"


def load_average_1min(data: dict[str, Any]) -> str:
    start = (data.get("machine") or {}).get("loadavg_at_start") or [None]
    end = data.get("loadavg_at_end") or (data.get("machine") or {}).get("loadavg_at_end") or [None]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    return f"load average {fmt(start[0])} at the start, {fmt(end[0])} at the end"


def pa_label(names: Any) -> str:
    """The run-topology contender a table is relative to: ``processor_api`` (the micro-batch
    runtime) in results recorded before that runtime was removed, ``processor_api epochs``
    since (``bench/throughput.py`` keeps that name)."""
    return "processor_api" if "processor_api" in names else "processor_api epochs"
