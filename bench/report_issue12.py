"""The issue-12 section of ``bench/RESULTS.md``: store kinds beyond key-value.

Reads ``bench/results/throughput-quick-windowed.json`` (count per key next to count per key
and one-minute window, end to end on Spark) and ``global-store-1000000.json`` (a task host's
global store copy). Sections whose file is missing are left out.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from bench.common import RESULTS_DIR

KV, WINDOWED = "processor_api", "processor_api windowed count"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / name
    return json.loads(path.read_text()) if path.exists() else None


def _load_avg(data: dict[str, Any]) -> str:
    start = (data.get("machine") or {}).get("loadavg_at_start") or [None]
    end = data.get("loadavg_at_end") or (data.get("machine") or {}).get("loadavg_at_end") or [None]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    return f"load average {fmt(start[0])} at the start, {fmt(end[0])} at the end"


def _windowed(data: dict[str, Any], out: list[str]) -> None:
    records, size = next(iter(data["sizes"].items()))
    summary = size["summary"]
    steady = {
        name: statistics.median(
            r["metrics"]["steady_records_per_s"]
            for r in size["runs"]
            if r["contender"] == name and r["ok"]
        )
        for name in (KV, WINDOWED)
    }
    windows = [r["metrics"].get("windows") for r in size["runs"] if r["contender"] == WINDOWED]
    out += [
        "### A windowed aggregation end to end, next to the key-value one",
        "",
        f"`topologies/count_per_key.py` on {int(records):,} records (10,000 keys, 3 partitions), "
        "`run-topology --available-now --master local[2]`, once counting per key in a "
        "key-value store and once per key and one-minute tumbling window in a window store "
        f"(RocksDB segments, {windows[0]:,} windows at the end); alternating, "
        f"{summary[KV]['runs']} runs each, medians; {_load_avg(data)}. "
        "Each run is checked: the key-value run by reading its RocksDB stores, the windowed "
        "one by reading its committed changelog with `read_store` (sum of counts = records).",
        "",
        "| contender | wall time (min-max) | steady-state records/s |",
        "|---|---:|---:|",
    ]
    for name in (KV, WINDOWED):
        wall = summary[name]["wall_s"]
        out.append(
            f"| {name} | {wall['median']:.1f} s ({wall['min']:.1f}-{wall['max']:.1f}) "
            f"| {steady[name]:,.0f} |"
        )
    ratio = summary[WINDOWED]["wall_s"]["median"] / summary[KV]["wall_s"]["median"]
    out += [
        "",
        f"The windowed count takes {ratio:.2f}x the key-value count's wall time, and runs at "
        f"{steady[WINDOWED] / steady[KV]:.2f}x its steady-state rate (start-up, the same for "
        "both, dominates the wall time). Not profiled yet: per record the window store also "
        "finds the window's segment and builds Kafka Streams' composite key (key, window "
        "start, sequence number). Command: `" + data["command"] + "`.",
        "",
    ]


def _global(data: dict[str, Any], out: list[str]) -> None:
    fill, catch_up = data["fill"], data["catch_up"]
    out += [
        "### A global store with 1,000,000 entries",
        "",
        f"Every task host keeps its own copy (ARCHITECTURE.md says why); {_load_avg(data)}.",
        "",
        "| what | median (min-max) |",
        "|---|---:|",
    ]
    for name, entry in fill.items():
        s = entry["seconds"]
        out.append(f"| {name} | {s['median']:.1f} s ({s['min']:.1f}-{s['max']:.1f}) |")
    for key, label in (
        ("reopen_with_checkpoint_ms", "host restart with its copy intact"),
        ("catch_up_nothing_new_ms", "catch-up before a micro-batch, nothing new"),
        ("catch_up_with_new_records_ms", "catch-up, 1,000 new records"),
    ):
        s = catch_up[key]
        out.append(f"| {label} | {s['median']:.0f} ms ({s['min']:.0f}-{s['max']:.0f}) |")
    out += ["", f"Command: `{data['command']}`.", ""]


def issue12_section() -> list[str]:
    """Markdown lines of the issue-12 section (empty when no result file exists)."""
    body: list[str] = []
    for name, render in (
        ("throughput-quick-windowed.json", _windowed),
        ("global-store-1000000.json", _global),
    ):
        data = _load(name)
        if data is None:
            continue
        try:
            render(data, body)
        except Exception as exc:  # noqa: BLE001 - a broken section must not hide the others
            body += [f"Could not render {name}: {exc!r}", ""]
    return ["## Issue 12: windowed aggregation on Spark, global stores", "", *body] if body else []
