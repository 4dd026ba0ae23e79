"""The window store, measured in-process."""

from __future__ import annotations

import json
import re
from typing import Any

from bench.common import RESULTS_DIR
from bench.reports.shared import (
    NOTES_WINDOW_STORE,
    Targets,
    read_notes,
)

_PHASES = (
    ("put", "put (commit every batch)"),
    ("fetch_key", "fetch(key, from, to), 10 windows"),
    ("fetch_all_10_windows", "fetch_all(from, to), 10 of the windows"),
    ("fetch_all_every_window", "all() (every window)"),
    ("expiry", "expiry: put advancing stream time + commit (segment drop)"),
)


def _window_store_latest() -> dict[str, Any] | None:
    """The newest result of the largest ``window-store-<entries>-<date>.json``."""
    pattern = re.compile(r"window-store-(\d+)-(\d{4}-\d\d-\d\d)")
    found = [
        (int(m[1]), m[2], path)
        for path in RESULTS_DIR.glob("window-store-*.json")
        if (m := pattern.fullmatch(path.stem))
    ]
    return json.loads(max(found)[2].read_text()) if found else None


def _cell(phase: dict[str, Any] | None, rate: bool = True) -> str:
    if not phase or phase["seconds"]["median"] is None:
        return "-"
    s = phase["seconds"]
    if not rate:  # a single operation: its time, not a rate
        return f"{s['median'] * 1000:,.1f} ms ({s['min'] * 1000:,.1f}-{s['max'] * 1000:,.1f})"
    return f"{phase['per_s_median']:,.0f}/s ({s['median']:.3f} s, {s['min']:.3f}-{s['max']:.3f})"


def window_store_section(targets: Targets) -> list[str]:
    """Window store at 1M windows, in-process (empty without a result file)."""
    data = _window_store_latest()
    if data is None:
        return []
    shape, summary = data["shape"], data["summary"]
    loads = data["machine"]["loadavg_at_start"], data["loadavg_at_end"]
    out = [
        f"## Window store at {shape['entries']:,} windows (in-process, no Spark)",
        "",
        f"`bench/window_store.py`: a `WindowStore` opened through `TaskStores.build` (batch "
        f"buffer, change logging), {shape['keys']:,} keys x {shape['windows']} windows of "
        f"{shape['window_size_ms'] // 1000} s written window by window, a commit (change "
        f"records drained, buffer applied, RocksDB flushed) every {shape['batch']:,} puts; "
        f"retention {shape['retention_ms']:,} ms, segment interval "
        f"{shape['segment_interval_ms']:,} ms, so the expiry put drops the first "
        f"{shape['expiring_windows']} windows of every key. Median of {data['reps']} "
        "alternating runs (min-max in brackets); load average "
        f"{[round(x, 2) for x in loads[0]]} at start, {[round(x, 2) for x in loads[1]]} at end. "
        f"Command: `{data['command']}` (git {data['machine'].get('processor_api source')}).",
        "",
        "| phase | RocksDB | in-memory | counted |",
        "|---|---:|---:|---|",
    ]
    rocks, memory = summary.get("window, rocksdb", {}), summary.get("window, in-memory", {})
    for key, label in _PHASES:
        phase = rocks.get(key) or memory.get(key) or {}
        unit = f"{phase['items']:,} {phase['unit']}" if phase else ""
        rate = key != "expiry"
        cells = f"{_cell(rocks.get(key), rate)} | {_cell(memory.get(key), rate)}"
        out.append(f"| {label} | {cells} | {unit} |")
    first = [summary.get(f"window, {k}", {}).get("first_fetch") for k in ("rocksdb", "in-memory")]
    if all(first):
        cells = " | ".join(_cell(f, rate=False) for f in first)
        out.append(f"| first fetch after the fill (alone) | {cells} | one call |")
    out += [
        "",
        "Expiry against the contender a naive store pays: a key-value store of the same kind "
        "holding the same stored keys deletes the same entries one by one, change-logged (one "
        "tombstone each), in one commit; `delete(key)` reads the old value first (Kafka "
        "Streams' `delete` returns it), `put(key, None)` does not.",
        "",
        "| store | segment drop | `delete(key)` one by one | ratio | `put(key, None)` one by one "
        "| ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, label in (("rocksdb", "RocksDB"), ("in-memory", "in-memory")):
        window = summary.get(f"window, {kind}", {}).get("expiry")
        if not window:
            continue
        cells = [f"{window['seconds']['median'] * 1000:,.1f} ms"]
        for how in ("delete()", "put(None)"):
            naive = summary.get(f"key-value, {kind}, {how}", {}).get("delete_one_by_one")
            if naive is None:
                cells += ["-", "-"]
                continue
            s = naive["seconds"]
            cells += [
                f"{s['median']:,.2f} s ({s['min']:.2f}-{s['max']:.2f})",
                f"{s['median'] / window['seconds']['median']:,.0f}x",
            ]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    checks = data.get("checks", {})
    out += [
        "",
        "Checks of every run (stored counts, entries returned, the half dropped): "
        + ("all passed." if checks and all(checks.values()) else f"FAILED: {checks}"),
        "",
    ]
    return out + read_notes(NOTES_WINDOW_STORE)
