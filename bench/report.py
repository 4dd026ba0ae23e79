"""Writes ``bench/RESULTS.md`` and ``bench/results/*.png`` from ``bench/results/*.json``.

The one report generator of the benchmarks: it runs nothing, it reads the recorded result
files (``<benchmark>[-<variant>]-<YYYY-MM-DD>.json``, the newest of each name) and the
hand-written ``bench/NOTES*.md``.

``python -m bench.report`` (or ``python -m bench.run --full --report-only``) rewrites
``bench/RESULTS.md`` and the plots; ``python -m bench.report SECTION ...`` prints those sections
(and redraws their plots) without touching ``RESULTS.md``; ``--list`` names the sections.

For throughput, punctuation and restore (``bench.run``), full-run results are preferred; a
benchmark only run with ``--quick`` is reported from its quick file (and marked so).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import OUTPUT_DIR, RESULTS_DIR, latest_result, log, result_files

#: Hand-written notes, each appended to the report where its benchmark is.
NOTES_FILE = OUTPUT_DIR / "NOTES.md"
NOTES_WINDOW_STORE = OUTPUT_DIR / "NOTES-window-store.md"
NOTES_INTO_KAFKA = OUTPUT_DIR / "NOTES-punctuation-into-kafka.md"
NOTES_SERDES_TTL = OUTPUT_DIR / "NOTES-registry-serdes-ttl-store.md"
NOTES_EPOCHS = OUTPUT_DIR / "NOTES-epochs.md"

Targets = list[dict[str, Any]]


# ------------------------------------------------------------------------------- shared
def _read(name: str) -> dict[str, Any] | None:
    """The newest result file of ``name`` (``<benchmark>[-<variant>]``), or None."""
    path = latest_result(name)
    return json.loads(path.read_text()) if path else None


def _fmt(value: float | None, digits: int = 0, suffix: str = "", none: str = "n/a") -> str:
    if value is None:
        return none
    if digits == 0:
        return f"{value:,.0f}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def _n(value: float | None, digits: int = 0) -> str:
    """A number for the tables that write "-" where there is none."""
    return _fmt(value, digits, none="-")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_plot(fig: Any, name: str, alt: str) -> list[str]:
    """Lay out ``fig``, write ``results/<name>``, close it; the markdown lines showing it."""
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / name, dpi=110)
    _plt().close(fig)
    return ["", f"![{alt}](results/{name})", ""]


def _bar_plot(
    name: str, alt: str, labels: list[str], rates: list[float], title: str, **tick_params: Any
) -> list[str]:
    """One bar per contender, records/s (median); ``tick_params`` for the x labels."""
    fig, ax = _plt().subplots(figsize=(6, 3.5))
    ax.bar(labels, rates)
    ax.set_ylabel("records/s (median)")
    ax.set_title(title)
    if tick_params:
        ax.tick_params(axis="x", **tick_params)
    return _save_plot(fig, name, alt)


def _targets_table(header: str, targets: Targets) -> list[str]:
    out = [f"| {header} | measured | met? |", "|---|---|---|"]
    for t in targets:
        out.append(f"| {t['target']} | {t['measured']} | {'met' if t['met'] else 'MISSED'} |")
    out.append("")
    return out


def _notes(path: Path) -> list[str]:
    return [path.read_text().strip(), ""] if path.exists() else []


def _machine_table(machine: dict[str, Any]) -> list[str]:
    lines = ["| | |", "|---|---|"]
    for key, value in machine.items():
        lines.append(f"| {key} | {value} |")
    return lines


def _median(values: list[Any]) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


def _metric(runs: list[dict], *path: str) -> float | None:
    values = []
    for run in runs:
        value: Any = run.get("metrics") or {}
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        values.append(value)
    return _median(values)


def _load_averages(data: dict) -> str:
    m = data.get("machine", {})
    start = ", ".join(f"{x:.2f}" for x in m.get("loadavg_at_start", []))
    end = ", ".join(f"{x:.2f}" for x in m.get("loadavg_at_end", []))
    return f"load average (1, 5, 15 min) at start {start}; at end {end}"


def _load_average_1min(data: dict[str, Any]) -> str:
    start = (data.get("machine") or {}).get("loadavg_at_start") or [None]
    end = data.get("loadavg_at_end") or (data.get("machine") or {}).get("loadavg_at_end") or [None]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    return f"load average {fmt(start[0])} at the start, {fmt(end[0])} at the end"


# ----------------------------------------- throughput, punctuation, restore (bench.run)
def _pa(names: Any) -> str:
    """The run-topology contender a table is relative to: ``processor_api`` (the micro-batch
    runtime) in results recorded before that runtime was removed, ``processor_api epochs``
    since (``bench/throughput.py`` keeps that name)."""
    return "processor_api" if "processor_api" in names else "processor_api epochs"


_EXTRA_SIZE = re.compile(r"throughput-(full|quick)-\d+[kM]-\d{4}-\d\d-\d\d")


def _load_run(name: str) -> tuple[dict[str, Any] | None, str | None]:
    """The newest ``<name>-full-<date>.json``, else ``<name>-quick-<date>.json``, and its mode."""
    for mode in ("full", "quick"):
        path = latest_result(f"{name}-{mode}")
        if path:
            data = json.loads(path.read_text())
            if name == "throughput":  # extra sizes run separately (--suffix=-20M); other
                # variants (--suffix=-windowed, -task-hosts-2M, ...) have sections of their own
                for extra in sorted(RESULTS_DIR.glob(f"{name}-{mode}-*.json")):
                    if not _EXTRA_SIZE.fullmatch(extra.stem):
                        continue
                    more = json.loads(extra.read_text())
                    for size, result in more.get("sizes", {}).items():
                        result["from_file"] = extra.name
                        result["command"] = more.get("command")
                        key = size if size not in data["sizes"] else f"{size}{extra.stem}"
                        data["sizes"][key] = result
            return data, mode
    return None, None


def _throughput(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    out += [f"## 1. Throughput, end to end ({mode} run)", ""]
    out += [
        "Count per key, 10,000 keys, 3 partitions, one embedded-broker topic per size read by",
        "every contender; wall time of each contender's process (interpreter and, for the",
        "Spark contenders, JVM/Spark start included), alternating, median of "
        f"{next(iter(data['sizes'].values()))['reps']} repetitions. Command: `{data['command']}`"
        f" (`{data['make_target']}`), started {data['started_at']}.",
        "",
        "| records | contender | median wall s (min-max) | records/s (median) | "
        "processor_api rate / contender rate | ok runs |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.8))
    sizes = sorted(data["sizes"].values(), key=lambda s: (s["records"], bool(s.get("from_file"))))
    names = list(dict.fromkeys(n for s in sizes for n in s["summary"]))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        rates = [s["summary"].get(name, {}).get("records_per_s_median") or 0 for s in sizes]
        xs = [j + i * width for j in range(len(sizes))]
        bars = ax.bar(xs, rates, width, label=name)
        ax.bar_label(
            bars,
            labels=[f"{r:,.0f}" if r else "" for r in rates],
            fontsize=6,
            rotation=90,
            padding=2,
        )
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(sizes))])
    ax.set_xticklabels(
        [
            f"{s['records']:,} records"
            + (f"\n({Path(s['from_file']).stem})" if s.get("from_file") else "")
            for s in sizes
        ],
        fontsize=8,
    )
    ax.set_ylabel("records/s (end to end, median)")
    ax.set_yscale("log")
    ax.set_title("Count per key: end-to-end throughput (start-up included)")
    ax.legend(fontsize=8)
    image = _save_plot(fig, "throughput.png", "throughput")
    for size in sizes:
        base = _pa(size["summary"])
        pa = size["summary"].get(base, {})
        for name, s in size["summary"].items():
            w = s["wall_s"]
            ratio = size["throughput_ratios"].get(f"{base} / {name}")
            out.append(
                f"| {size['records']:,} | {name} | {_fmt(w['median'], 1)} "
                f"({_fmt(w['min'], 1)}-{_fmt(w['max'], 1)}) | "
                f"{_fmt(s['records_per_s_median'])} | "
                f"{'1 (itself)' if name == base else _fmt(ratio, 2)} | "
                f"{s['ok']}/{s['runs']} |"
            )
        records = size["records"]
        quix = size["throughput_ratios"].get(f"{base} / quixstreams")
        tws = size["throughput_ratios"].get(f"{base} / transformWithStateInPandas")
        hand = size["summary"].get("hand_loop", {}).get("wall_s", {}).get("median")
        pa_wall = pa.get("wall_s", {}).get("median")
        if size.get("from_file"):
            out.append(
                f"| | *(rows above: separate run, `{size['from_file']}`: "
                f"`{size.get('command')}`)* | | | | |"
            )
        elif records in (2_000_000,) or (
            mode == "quick" and records == max(s["records"] for s in sizes)
        ):
            scope = "" if records == 2_000_000 else f" (indicative: {records:,} records, quick)"
            targets.append(
                {
                    "target": f"end-to-end time <= hand-written loop's at 2M records{scope}",
                    "measured": f"{base} {_fmt(pa_wall, 1)} s vs hand loop {_fmt(hand, 1)} s"
                    f" -> hand/{base} = {_fmt((hand or 0) / pa_wall, 3) if pa_wall else 'n/a'}",
                    "met": bool(pa_wall and hand and pa_wall <= hand),
                }
            )
            targets.append(
                {
                    "target": f"throughput >= 1.5x Quix Streams{scope}",
                    "measured": f"{_fmt(quix, 2)}x",
                    "met": bool(quix and quix >= 1.5),
                }
            )
            targets.append(
                {
                    "target": f"throughput >= 2x transformWithStateInPandas{scope}",
                    "measured": f"{_fmt(tws, 2)}x",
                    "met": bool(tws and tws >= 2.0),
                }
            )
    out += image
    out += [
        "Per-run details (phase times of processor_api from its own log, Quix Streams' time",
        "to its first record, transformWithStateInPandas' session vs query time):",
        "",
    ]
    out += ["| records | contender | rep | wall s | details |", "|---:|---|---:|---:|---|"]
    for size in sizes:
        for run in size["runs"]:
            details = {k: v for k, v in (run.get("metrics") or {}).items()}
            text = ", ".join(f"{k}={v}" for k, v in details.items())
            if run.get("error"):
                text += f" ERROR: {run['error'][:120]}"
            out.append(
                f"| {size['records']:,} | {run['contender']} | {run['rep'] + 1} | "
                f"{_fmt(run['wall_s'], 1)} | {text} |"
            )
    out += ["", "Commands (BOOTSTRAP = the embedded broker of the run):", ""]
    for size in sizes:
        for name, cmd in size["commands"].items():
            out.append(f"- {size['records']:,} / {name}: `{cmd}`")
    out.append("")


def _punctuation(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    plt = _plt()
    cost = data["cost_vs_store_size"]
    out += [
        f"## 2. Punctuation ({mode} run)",
        "",
        f"Command: `{data['command']}` (`{data['make_target']}`), started {data['started_at']}.",
        "",
        "### 2a. One punctuation versus store size (in-process, no Spark)",
        "",
        "Seed 003's product count (`topologies.product_count`, its punctuator calls "
        "`context.forward_all(store.all(), timestamp)`), a `Task` and a real RocksDB store "
        "(change logging on) filled with N keys; a record at the next grid point fires the "
        "punctuation, which forwards every entry to the sink (serialized, handed to the "
        f"collector). {cost.get('collector', 'ListCollector')}. Median of "
        f"{cost['reps']} repetitions, alternating with its parts: `store.all()` (typed "
        "iteration only) and a raw RocksDB scan.",
        "",
    ]
    kafka = any("punctuation_to_kafka" in r for r in cost["by_size"].values())
    out += [
        "| store keys | punctuation s | punctuation entries/s | "
        + ("into Kafka entries/s | " if kafka else "")
        + "store.all() entries/s | raw RocksDB scan entries/s |",
        "|---:|---:|---:|" + ("---:|" if kafka else "") + "---:|---:|",
    ]
    xs, ys, ys_all, ys_raw, ys_kafka = [], [], [], [], []
    for size, r in cost["by_size"].items():
        xs.append(int(size))
        ys.append(r["punctuation"]["entries_per_s_median"])
        ys_all.append(r["store_all"]["entries_per_s_median"])
        ys_raw.append(r["rocksdb_scan"]["entries_per_s_median"])
        to_kafka = r.get("punctuation_to_kafka", {}).get("entries_per_s_median")
        ys_kafka.append(to_kafka)
        out.append(
            f"| {int(size):,} | {_fmt(r['punctuation']['seconds']['median'], 3)} | "
            f"{_fmt(ys[-1])} | "
            + (f"{_fmt(to_kafka)} | " if kafka else "")
            + f"{_fmt(ys_all[-1])} | {_fmt(ys_raw[-1])} |"
        )
    secs = [cost["by_size"][str(x)]["punctuation"]["seconds"]["median"] for x in xs]
    fig, (left, ax) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(xs, secs, "o-")
    for x, y in zip(xs, secs, strict=True):
        left.annotate(f"{y:.3g} s", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("store keys")
    left.set_ylabel("seconds per punctuation (median)")
    left.set_title("Cost of one punctuation (forwards the whole store)")
    ax.plot(xs, ys, "o-", label="punctuation (forward all)")
    if kafka:
        ax.plot(xs, ys_kafka, "d-.", label="punctuation into Kafka (acknowledged)")
    ax.plot(xs, ys_all, "s--", label="store.all() iteration")
    ax.plot(xs, ys_raw, "^:", label="raw RocksDB scan")
    ax.axhline(1_000_000, color="red", lw=0.8, label="target 1M entries/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("store keys")
    ax.set_ylabel("entries/s")
    ax.set_title("Entries per second")
    ax.legend(fontsize=8, loc="lower left")
    image = _save_plot(fig, "punctuation_cost.png", "punctuation cost")
    largest = str(max(xs))
    rate = cost["by_size"][largest]["punctuation"]["entries_per_s_median"]
    scope = "" if int(largest) >= 1_000_000 else f" (indicative: {int(largest):,} keys, quick)"
    targets.append(
        {
            "target": f"punctuation over a 1M-key store forwards >= 1M entries/s{scope}",
            "measured": f"{_fmt(rate)} entries/s ({_fmt(rate / 1e6, 2)}x)",
            "met": rate >= 1_000_000,
        }
    )
    out += image

    check = data["check_overhead"]
    out += [
        "### 2b. Per-record overhead of stream-time punctuation checks (in-process)",
        "",
        f"Count per key over {check['records']:,} records (10,000 keys, RocksDB, change "
        "logging), with 0, 1 and 10 STREAM_TIME schedules that are never due after the "
        f"first record; median of {check['reps']} alternating repetitions. The second "
        "table times `Task.maybe_punctuate_stream_time()` alone (1,000,000 calls, nothing "
        "due): the differential figure is within the noise of a shared machine, the "
        "direct one is not.",
        "",
        "| schedules | µs per record (median, min-max) | overhead vs 0 schedules, ns/record |",
        "|---|---:|---:|",
    ]
    for name, s in check["per_record_s"].items():
        out.append(
            f"| {name} | {_fmt(s['median'] * 1e6, 2)} ({_fmt(s['min'] * 1e6, 2)}-"
            f"{_fmt(s['max'] * 1e6, 2)}) | {_fmt(check['overhead_ns_vs_0'][name])} |"
        )
    out += ["", "| schedules | ns per check call (median) |", "|---|---:|"]
    for name, s in check["check_call_ns"].items():
        out.append(f"| {name} | {_fmt(s['median'])} |")
    out.append("")

    intervals = data.get("spark_intervals") or {}
    out += ["### 2c. Records per second with and without punctuation (Spark)", ""]
    if intervals.get("summary"):
        out += [
            f"Seed 003's product count over {intervals['records']:,} records (10,000 keys, "
            "3 partitions, 10 records per ms of stream time, so the input spans "
            f"{intervals['records'] // 10_000} s of stream time), `TopologyRunner.run()` "
            "with available-now on one running SparkSession (`local[2]`), alternating, "
            f"median of {intervals['reps']}. `none` = interval 10^12 ms (fires once, on "
            f"the first record). Command: `{intervals.get('command')}`.",
            "",
            "| punctuation interval | median wall s | records/s | rate vs none | "
            "records forwarded by punctuations (median) |",
            "|---|---:|---:|---:|---:|",
        ]
        names, rates = [], []
        for name, s in intervals["summary"].items():
            names.append(name)
            rates.append(s["records_per_s_median"] or 0)
            out.append(
                f"| {name} | {_fmt(s['wall_s_median'], 1)} | "
                f"{_fmt(s['records_per_s_median'])} | {_fmt(s['ratio_vs_none'], 2)} | "
                f"{_fmt(s['outputs_median'])} |"
            )
        out += _bar_plot(
            "punctuation_intervals.png",
            "intervals",
            names,
            rates,
            "Product count on Spark by stream-time punctuation interval",
        )
    else:
        out += [f"Not measured: {intervals.get('error') or intervals.get('exit_code')}", ""]

    lag = data.get("spark_wall_clock_lag") or {}
    out += ["### 2d. Wall-clock punctuation lag (Spark)", ""]
    if lag.get("summary"):
        # a run in epochs has no trigger; results before the micro-batch runtime was removed do
        trigger = (
            f"trigger interval {lag.get('trigger_interval_s', '1 s or chosen by the runtime (auto)')}"
            if "trigger_interval_s" in lag or "triggers" in lag
            else "in epochs"
        )
        out += [
            "`bench.punct_topologies:build_lag_probe`: a WALL_CLOCK_TIME punctuation every "
            f"{lag['interval_ms']} ms, {trigger}, "
            f"{lag['seconds']} s per run, idle (no input) or with {lag['rate_records_per_s']}"
            f" records/s produced during the run; {lag['reps']} runs each, alternating. Lag "
            "= wall clock when the punctuator runs minus its due time on the grid. "
            f"{lag['note']}. Command: `{lag.get('command')}`.",
            "",
            "| input, trigger | punctuations (steady) | p50 ms | p90 ms | p99 ms | max ms | "
            "max incl. start-up ms |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, s in lag["summary"].items():
            out.append(
                f"| {name} | {s['punctuations']} ({s['steady_punctuations']}) | "
                f"{_fmt(s['p50_ms'])} | {_fmt(s['p90_ms'])} | {_fmt(s['p99_ms'])} | "
                f"{_fmt(s['max_ms'])} | {_fmt(s['max_incl_warmup_ms'])} |"
            )
        fig, ax = plt.subplots(figsize=(7, 4))
        for name in lag["summary"]:
            values = sorted(
                x for r in lag["runs"] if r["variant"] == name for x in r["steady_lags_ms"]
            )
            if values:
                ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=name)
        ax.set_xlabel("lag: fire time - due time (ms)")
        ax.set_ylabel("fraction of punctuations")
        ax.set_title("Wall-clock punctuation lag (CDF, steady state)")
        ax.legend()
        out += _save_plot(fig, "punctuation_lag.png", "lag")
    else:
        out += [f"Not measured: {lag.get('error') or lag.get('exit_code')}", ""]


def _restore(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    out += [
        f"## 3. Restore ({mode} run)",
        "",
        f"A changelog of {data['entries']:,} entries (1 partition, distinct keys); "
        "contenders in process, alternating, median of "
        f"{data['reps']}. Command: `{data['command']}` (`{data['make_target']}`), started "
        f"{data['started_at']}. All entries restored: {data['restored_all_entries']}.",
        "",
        "| contender | median s (min-max) | records/s | vs plain consumer |",
        "|---|---:|---:|---:|",
    ]
    plain = data["summary"]["plain consumer"]["records_per_s_median"]
    names, rates = [], []
    for name, s in data["summary"].items():
        names.append(name)
        rates.append(s["records_per_s_median"])
        sec = s["seconds"]
        out.append(
            f"| {name} | {_fmt(sec['median'], 2)} ({_fmt(sec['min'], 2)}-"
            f"{_fmt(sec['max'], 2)}) | {_fmt(s['records_per_s_median'])} | "
            f"{_fmt(s['records_per_s_median'] / plain, 2)} |"
        )
    out += _bar_plot(
        "restore.png",
        "restore",
        names,
        rates,
        f"Restore of {data['entries']:,} changelog entries",
        labelsize=8,
    )
    ratio = data["ratio_restore_vs_plain_consumer"]
    scope = "" if data["entries"] >= 1_000_000 else f" (indicative: {data['entries']:,}, quick)"
    targets.append(
        {
            "target": f"restore >= 0.8x the plain consumer's read rate{scope}",
            "measured": f"{_fmt(ratio, 2)}x",
            "met": ratio >= 0.8,
        }
    )


def _whatif(data: dict, mode: str, out: list[str]) -> None:
    out += [
        f"## 4. The prototypes behind the fixes (earlier {mode} run, d232ac5)",
        "",
        "Measured before the fixes were made: `bench/whatif.py` (removed since; see git "
        "history) patched the library of d232ac5 in the benchmark process only, "
        "alternating as-is and patched runs, median of "
        f"{data['reps']}. These patches are now in the library. Patches:",
        "",
    ]
    patches = data["patches"]
    if isinstance(patches, str):
        patches = ["P" + p.strip() for p in ("P" + patches).split("* P")[0:] if p.strip()]
    out += [f"- {p}" for p in patches]
    out += [
        "",
        f"Command: `{data['command']}`.",
        "",
        "| workload | as is | patched | speedup |",
        "|---|---:|---:|---:|",
    ]
    for size, r in data["punctuation"].items():
        s = r["entries_per_s"]
        out.append(
            f"| punctuation over {int(size):,} keys (entries/s) | "
            f"{_fmt(s['as is']['median'])} | {_fmt(s['patched']['median'])} | "
            f"{_fmt(r['speedup'], 2)}x |"
        )
    pr = data["per_record"]
    out.append(
        f"| count per key, {pr['records']:,} records in process, P1-P3 (µs/record) | "
        f"{_fmt(pr['us_per_record']['as is']['median'], 2)} | "
        f"{_fmt(pr['us_per_record']['patched']['median'], 2)} | "
        f"{_fmt(pr['speedup'], 2)}x |"
    )
    if "patched + WAL off" in pr["us_per_record"]:
        out.append(
            f"| same, P1-P4 (RocksDB WAL off) (µs/record) | "
            f"{_fmt(pr['us_per_record']['as is']['median'], 2)} | "
            f"{_fmt(pr['us_per_record']['patched + WAL off']['median'], 2)} | "
            f"{_fmt(pr.get('speedup_wal_off'), 2)}x |"
        )
    cp = data.get("changelog_produce")
    if cp:
        out.append(
            f"| changelog: {cp['records']:,} change records produced and acked, P5 "
            f"(records/s) | {_fmt(cp['records_per_s']['as is']['median'])} | "
            f"{_fmt(cp['records_per_s']['patched']['median'])} | "
            f"{_fmt(cp['speedup'], 2)}x |"
        )
    out.append("")


def _profiles(data: dict, mode: str, out: list[str]) -> None:
    out += [
        f"## py-spy profiles ({mode} run)",
        "",
        "`py-spy record --subprocesses --format raw` (collapsed stacks in "
        "`bench/results/raw/`, not committed); per process kind, the functions with the "
        "most samples (self = leaf, total = inclusive).",
        "",
    ]
    for name, prof in data["profiles"].items():
        out += [
            f"### {name}",
            "",
            f"Command: `{prof.get('command', '?')}`; {prof.get('samples')} samples.",
            "",
        ]
        for kind, p in (prof.get("processes") or {}).items():
            if p["share"] is not None and p["share"] < 0.05:
                continue
            out += [
                f"**{kind}** ({p['samples']} samples, {p['share']:.0%} of all)",
                "",
                "| self % | function | | total % | library function (inclusive) |",
                "|---:|---|---|---:|---|",
            ]
            library = [
                t
                for t in p["top_inclusive"]
                if any(a in t["function"] for a in ("processor_api/", "topologies/"))
            ]
            for i in range(min(12, max(len(p["top_self"]), 1))):
                s = p["top_self"][i] if i < len(p["top_self"]) else None
                t = library[i] if i < len(library) else None
                out.append(
                    f"| {_fmt(s['share_of_process'] * 100, 1) if s else ''} | "
                    f"{s['function'] if s else ''} | | "
                    f"{_fmt(t['share_of_process'] * 100, 1) if t else ''} | "
                    f"{t['function'] if t else ''} |"
                )
            out.append("")


def _first_round(name: str, render: Callable[..., None], targets: Targets) -> list[str]:
    data, mode = _load_run(name)
    if data is None:
        return [f"## {name}", "", "Not run yet.", ""]
    out: list[str] = []
    try:
        render(data, mode, out, targets)
    except Exception as exc:  # noqa: BLE001 - a broken section must not hide the others
        out += [f"Could not render {name}: {exc!r}", ""]
    return out


def throughput_section(targets: Targets) -> list[str]:
    return _first_round("throughput", _throughput, targets)


def punctuation_section(targets: Targets) -> list[str]:
    return _first_round("punctuation", _punctuation, targets)


def restore_section(targets: Targets) -> list[str]:
    return _first_round("restore", _restore, targets)


def prototypes_section(targets: Targets) -> list[str]:
    """The what-if prototypes measured on d232ac5 (``results/earlier/``)."""
    files = result_files("whatif-full-d232ac5", RESULTS_DIR / "earlier")
    if not files:
        return []
    out: list[str] = []
    try:
        _whatif(json.loads(files[-1].read_text()), "full", out)
    except Exception as exc:  # noqa: BLE001
        out += [f"Could not render whatif: {exc!r}", ""]
    return out


def profiles_section(targets: Targets) -> list[str]:
    data, mode = _load_run("profiles")
    out: list[str] = []
    if data:
        _profiles(data, mode, out)
    return out


# ------------------------------------------------------------- window store (in-process)
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
    return out + _notes(NOTES_WINDOW_STORE)


# ------------------------------------------ windowed aggregation on Spark, global stores
def _windowed(data: dict[str, Any], out: list[str]) -> None:
    records, size = next(iter(data["sizes"].items()))
    summary = size["summary"]
    # "processor_api" and "processor_api windowed count" when recorded with micro-batches
    KV = _pa(summary)  # noqa: N806
    WINDOWED = f"{KV} windowed count"  # noqa: N806
    steady = {
        name: _median(
            [
                (r.get("metrics") or {}).get("steady_records_per_s")
                for r in size["runs"]
                if r["contender"] == name and r["ok"]
            ]
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
        f"{summary[KV]['runs']} runs each, medians; {_load_average_1min(data)}. "
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
            f"| {_n(steady[name])} |"
        )
    ratio = summary[WINDOWED]["wall_s"]["median"] / summary[KV]["wall_s"]["median"]
    kv_steady, windowed_steady = steady[KV], steady[WINDOWED]
    rates = (
        f", and runs at {windowed_steady / kv_steady:.2f}x its steady-state rate"
        if kv_steady and windowed_steady
        else ""
    )
    out += [
        "",
        f"The windowed count takes {ratio:.2f}x the key-value count's wall time{rates} "
        "(start-up, the same for both, dominates the wall time). Not profiled yet: per record "
        "the window store also finds the window's segment and builds Kafka Streams' composite "
        "key (key, window start, sequence number). Command: `" + data["command"] + "`.",
        "",
    ]


def _global(data: dict[str, Any], out: list[str]) -> None:
    fill, catch_up = data["fill"], data["catch_up"]
    out += [
        "### A global store with 1,000,000 entries",
        "",
        f"Every task host keeps its own copy (ARCHITECTURE.md says why); {_load_average_1min(data)}.",
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


def windowed_and_global_store_section(targets: Targets) -> list[str]:
    """Windowed count on Spark next to the key-value one; a 1M-entry global store."""
    body: list[str] = []
    for name, render in (
        ("throughput-quick-windowed", _windowed),  # bench.run --quick --suffix=-windowed
        ("global-store-1000000", _global),
    ):
        data = _read(name)
        if data is None:
            continue
        try:
            render(data, body)
        except Exception as exc:  # noqa: BLE001 - a broken section must not hide the others
            body += [f"Could not render {name}: {exc!r}", ""]
    return ["## Windowed aggregation on Spark, global stores", "", *body] if body else []


# ------------------------------------ punctuation into Kafka, wall-clock lag, timers
def _into_kafka(data: dict[str, Any], out: list[str], targets: Targets) -> None:
    out += [
        "### A whole-store punctuation into Kafka (in-process, embedded broker)",
        "",
        "Seed 003's product count: one punctuation forwards every entry of a RocksDB store "
        "(change logging on) to a Kafka sink; timed from the punctuation's start until every "
        "record is acknowledged. Next to it, alternating in the same process: a bare "
        "confluent-kafka producer sending the same serialized records to the same broker with "
        "the same producer settings and flushing until all are acknowledged, once without a "
        "delivery callback (it cannot tell a failed record from a delivered one) and once with "
        "one that counts failures (what a loop that must know its records arrived does), and "
        "the same punctuation inside a transaction (`exactly_once_v2`). The engine's ceiling "
        "(output counted and thrown away) is the last column. "
        f"Median of {data['reps']} runs; load average {data.get('load_average_before')} before, "
        f"{data.get('load_average_after')} after. Command: `{data.get('command')}`.",
        "",
        "| store keys | into Kafka entries/s | in a transaction entries/s | bare producer "
        "entries/s | bare producer, checked, entries/s | into Kafka / bare | into Kafka / "
        "checked | thrown away (ceiling) entries/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in data["by_size"].items():
        rate = {k: v["entries_per_s_median"] for k, v in row.items() if isinstance(v, dict)}
        out.append(
            f"| {int(size):,} | {_n(rate.get('punctuation_to_kafka'))} | "
            f"{_n(rate.get('punctuation_to_kafka_eos'))} | {_n(rate.get('bare_producer'))} | "
            f"{_n(rate.get('bare_producer_checked'))} | "
            f"{_n(row.get('into_kafka_vs_bare_producer'), 2)} | "
            f"{_n(row.get('into_kafka_vs_bare_producer_checked'), 2)} | "
            f"{_n(rate.get('punctuation'))} |"
        )
    largest = data["by_size"][str(max(int(s) for s in data["by_size"]))]
    ratio = largest.get("into_kafka_vs_bare_producer")
    if ratio is not None:
        targets.append(
            {
                "target": "whole-store punctuation into Kafka >= 0.8x a bare producer",
                "measured": f"{ratio:.2f}x (vs a producer checking each delivery: "
                f"{largest['into_kafka_vs_bare_producer_checked']:.2f}x)",
                "met": ratio >= 0.8,
            }
        )
    out.append("")


def _lag(out: list[str], targets: Targets) -> None:
    runs = [
        (name, data)
        for name in (
            "punctuation-lag-1000ms",
            "punctuation-lag-10000ms",
            "punctuation-lag-1000ms-30k-per-s",
        )
        if (data := _read(name)) is not None
    ]
    if not runs:
        return
    # variants "idle, trigger 1 s" etc. with the micro-batch runtime; "idle" etc. in epochs
    micro_batches = any(", trigger " in v for _, data in runs for v in data["summary"])
    out += [
        "### Wall-clock punctuation lateness on Spark",
        "",
        "`bench.punct_topologies:build_lag_probe` (`bench/punct_spark.py lag`): a "
        "WALL_CLOCK_TIME punctuation on 3 tasks, lateness = fire time minus due time on the "
        "grid, steady state (after each task's first firing). "
        + (
            "Trigger `1 s` or `auto` (no "
            "`--trigger-interval`: the runtime chooses a quarter of the smallest wall-clock "
            "interval, 0.1-1 s). `records` = input records processed during the run (the "
            "throughput cost of the trigger). Both alternate within one run."
            if micro_batches
            else "In epochs (trigger `-`: none; rows with a trigger were measured with the "
            "micro-batch runtime, since removed). `records` = input records processed during "
            "the run. Idle and with input alternate within one run."
        ),
        "",
        "| interval | input | trigger | punctuations | p50 ms | p99 ms | max ms | records "
        "processed (median) | command, load average |",
        "|---:|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for _, data in runs:
        for variant, summary in data["summary"].items():
            load, _, trigger = variant.partition(", trigger ")
            trigger = trigger or "-"
            records = sorted(r["records"] or 0 for r in data["runs"] if r["variant"] == variant)
            median = records[len(records) // 2] if records else None
            rate = f"{load} ({data['rate_records_per_s']:,}/s)" if load != "idle" else load
            out.append(
                f"| {data['interval_ms']:,} ms | {rate} | {trigger} | "
                f"{summary['steady_punctuations']} | {_n(summary['p50_ms'])} | "
                f"{_n(summary['p99_ms'])} | {_n(summary['max_ms'])} | {_n(median)} | "
                f"`{data.get('command', '')}`; {data.get('load_average')} |"
            )
    first = runs[0][1]
    if first["interval_ms"] == 1000:
        p99 = max(
            s["p99_ms"]
            for v, s in first["summary"].items()
            if (v.endswith("auto") or ", trigger " not in v) and s["p99_ms"]
        )
        targets.append(
            {
                "target": "wall-clock lateness p99 < 0.5 s at a 1 s interval",
                "measured": f"{p99} ms",
                "met": p99 < 500,
            }
        )
    before = _read("punctuation-lag-before-between-batches")
    if before:
        out += [
            "",
            "Before punctuations fired between micro-batches (commit 223c043, same command, "
            "trigger chosen by the runtime): at a 1 s interval p99 "
            + ", ".join(
                f"{v} {s['p99_ms']} ms"
                for v, s in before["by_interval_ms"]["1000"]["summary"].items()
            )
            + ".",
        ]
    out.append("")


def _timers(out: list[str]) -> None:
    pattern = re.compile(r"timers-(\d+)-\d{4}-\d\d-\d\d")
    by_keys = {
        int(m[1]): path  # the newest file of each number of keys
        for path in sorted(RESULTS_DIR.glob("timers-*.json"))
        if (m := pattern.fullmatch(path.stem))
    }
    files = [by_keys[keys] for keys in sorted(by_keys)]
    if not files:
        return
    out += [
        "### Timers: every second, emit every key's count",
        "",
        "`bench/timers.py`: the same input (one record per key), two contenders alternating, "
        "each in its own process and SparkSession on `local[2]`: Spark's "
        "`transformWithStateInPandas` with one processing-time timer per key (output counted "
        "in `foreachBatch`, not sent to Kafka), and `run-topology` with one WALL_CLOCK_TIME "
        "punctuation per task forwarding the whole store to a Kafka topic. Entries/s over the "
        "steady part of the run (from each contender's first emission); a contender that keeps "
        "up emits keys per second. Quix Streams has no timers (quixio/quix-streams issue "
        "#790), so it has no row.",
        "",
        "| keys | contender | emitted entries/s (median) | lateness p50 ms (median) | "
        "lateness p99 ms (max) | runs, seconds each | load average |",
        "|---:|---|---:|---:|---:|---|---|",
    ]
    for path in files:
        data = json.loads(path.read_text())
        for name, summary in data["summary"].items():
            runs = [r for r in data["runs"] if r["contender"] == name]
            emitted = ", ".join(f"{r.get('emitted', 0):,}" for r in runs)
            out.append(
                f"| {data['keys']:,} | {name} | {_n(summary['entries_per_s_median'])} | "
                f"{_n(summary['lateness_p50_ms_median'])} | "
                f"{_n(summary['lateness_p99_ms_max'])} | {len(runs)} x {data['seconds']:g} s "
                f"(emitted: {emitted}) | {data.get('load_average')} |"
            )
        out.append("")
        out.append(f"Command: `{data.get('command')}`.")
        out.append("")


def punctuation_into_kafka_section(targets: Targets) -> list[str]:
    """Punctuation that ends in Kafka, wall-clock lateness, timers; its own targets first."""
    body: list[str] = []
    targets = []
    into_kafka = _read("punctuation-into-kafka")
    if into_kafka:
        _into_kafka(into_kafka, body, targets)
    _lag(body, targets)
    _timers(body)
    if not body:
        return []
    out = ["## Punctuation that ends in Kafka", ""]
    out += _targets_table("target", targets)
    return out + _notes(NOTES_INTO_KAFKA) + body


# ----------------------------------- long-lived task hosts: 2M end to end, start-up, latency
def _steady(name: str, runs: list[dict], records: int) -> float | None:
    if name == "hand_loop":  # the loop's own time: consume + update, no interpreter start
        return _median([records / r["metrics"]["loop_s"] for r in runs if r.get("metrics")])
    return _metric(runs, "steady_records_per_s")


def _task_hosts_throughput(data: dict, out: list[str], targets: list[dict]) -> None:
    for size in data["sizes"].values():
        records = size["records"]
        out += [
            f"### Count per key, {records:,} records, end to end",
            "",
            f"Command: `{data['command']}`, started {data['started_at']}, "
            f"{size['reps']} repetitions alternating; {_load_averages(data)}. Source: "
            f"{data.get('machine', {}).get('processor_api source')}.",
            "",
            "| contender | median wall s (min-max) | wall / processor_api's | "
            "steady-state records/s (median) | peak memory PSS MiB (RSS sum) | ok |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        base = _pa(size["summary"])
        pa_wall = size["summary"].get(base, {}).get("wall_s", {}).get("median")
        steady: dict[str, float | None] = {}
        for name, s in size["summary"].items():
            runs = [r for r in size["runs"] if r["contender"] == name and r["ok"]]
            steady[name] = _steady(name, runs, records)
            w = s["wall_s"]
            pss = _metric(runs, "memory", "peak_pss_mib")
            rss = _metric(runs, "memory", "peak_rss_sum_mib")
            out.append(
                f"| {name} | {_fmt(w['median'], 1)} ({_fmt(w['min'], 1)}-{_fmt(w['max'], 1)}) | "
                f"{_fmt(w['median'] / pa_wall, 2) if pa_wall and w['median'] else 'n/a'} | "
                f"{_fmt(steady[name])} | {_fmt(pss)} ({_fmt(rss)}) | {s['ok']}/{s['runs']} |"
            )
        out += [
            "",
            "Steady state: processor_api and its before = records of the micro-batches after",
            "the first / time from the first to the last `batch_done` (driver log); hand loop =",
            "records / its consume loop's own time (`loop_s`); Quix Streams = records after its",
            "first one / time since. Peak memory: every process of the run sampled every 0.25 s",
            "(`bench/common.py: MemorySampler`: root, descendants and every process carrying the",
            "run's marker in its environment, which reaches the task hosts Spark's workers start",
            "in their own sessions); PSS splits shared pages, the RSS sum counts them per process.",
            "",
        ]
        pa_runs = [r for r in size["runs"] if r["contender"] == base and r["ok"]]
        if pa_runs:
            kinds = pa_runs[0]["metrics"].get("memory", {}).get("peak_pss_by_kind_mib")
            seen = pa_runs[0]["metrics"].get("memory", {}).get("processes_seen_by_kind")
            out += [
                f"{base} at its peak (rep 1), PSS MiB by kind: {kinds}; processes seen: {seen}.",
                "",
            ]
        hand = size["summary"].get("hand_loop", {}).get("wall_s", {}).get("median")
        quix = size["summary"].get("quixstreams", {}).get("wall_s", {}).get("median")
        if records == 2_000_000 and pa_wall:
            if quix:
                targets.append(
                    {
                        "target": "2M end to end: run-topology time <= Quix Streams'",
                        "measured": f"{pa_wall:.1f} s vs {quix:.1f} s ({pa_wall / quix:.2f}x)",
                        "met": pa_wall <= quix,
                    }
                )
            if hand:
                targets.append(
                    {
                        "target": "2M end to end: run-topology <= 1.5x the hand loop's",
                        "measured": f"{pa_wall:.1f} s vs {hand:.1f} s ({pa_wall / hand:.2f}x)",
                        "met": pa_wall <= 1.5 * hand,
                    }
                )
            pa_steady = steady.get(base)
            if pa_steady and steady.get("hand_loop"):
                r = pa_steady / steady["hand_loop"]
                targets.append(
                    {
                        "target": "steady-state throughput >= 1.5x the hand loop's",
                        "measured": f"{pa_steady:,.0f} vs "
                        f"{steady['hand_loop']:,.0f} records/s ({r:.2f}x)",
                        "met": r >= 1.5,
                    }
                )
        _startup_table(size, out)


def _startup_table(size: dict, out: list[str]) -> None:
    names = [n for n in size["summary"] if n.startswith("processor_api")]
    if not names:
        return
    out += [
        "Start-up (medians; from the run's log: harness start of the process -> "
        "`query_started` -> first `batch_done`; Spark's `durationMs` of micro-batch 0):",
        "",
        "| contender | start -> query_started s | query_started -> first batch done s | "
        "start -> first batch done s | batch 0 triggerExecution ms | addBatch ms | "
        "queryPlanning ms | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        runs = [r for r in size["runs"] if r["contender"] == name and r["ok"]]
        out.append(
            f"| {name} | {_fmt(_metric(runs, 'start_to_query_started_s'), 2)} | "
            f"{_fmt(_metric(runs, 'query_started_to_first_batch_s'), 2)} | "
            f"{_fmt(_metric(runs, 'start_to_first_batch_s'), 2)} | "
            f"{_fmt(_metric(runs, 'first_batch', 'triggerExecution_ms'))} | "
            f"{_fmt(_metric(runs, 'first_batch', 'addBatch_ms'))} | "
            f"{_fmt(_metric(runs, 'first_batch', 'queryPlanning_ms'))} | "
            f"{_fmt(size['summary'][name]['wall_s']['median'], 1)} |"
        )
    out.append("")


def _task_hosts_latency(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    out += [
        f"### Latency, produce -> output visible ({mode} run)",
        "",
        f"Command: `{data['command']}`, started {data['started_at']}; {_load_averages(data)}. "
        f"Each run: trickle ({data['trickle_rate']}/s) until the first output, then the rate "
        f"for {data['settle_s']} s (not measured) and {data['measure_s']} s measured; "
        f"{data['reps']} repetitions alternating; medians over repetitions of each run's "
        "percentile. `bench/latency.py` says how.",
        "",
        "| rate /s | contender | p50 ms | p90 ms | p99 ms | max ms | missing | ok runs |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    plt = _plt()
    rates = [str(r) for r in data["rates"]]
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4.2), squeeze=False)
    best_2000: tuple[str, float] | None = None
    for i, rate in enumerate(rates):
        summary = data["summary"].get(rate, {})
        names = list(summary)
        p50 = [summary[n]["p50_ms"]["median"] or 0 for n in names]
        p99 = [summary[n]["p99_ms"]["median"] or 0 for n in names]
        ax = axes[0][i]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([n.replace("processor_api ", "pa\n") for n in names], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("ms (median of runs)")
        ax.set_title(f"{int(rate):,} records/s")
        ax.legend(fontsize=7)
        for name in names:
            s = summary[name]
            out.append(
                f"| {int(rate):,} | {name} | {_fmt(s['p50_ms']['median'])} | "
                f"{_fmt(s['p90_ms']['median'])} | {_fmt(s['p99_ms']['median'])} | "
                f"{_fmt(s['max_ms']['median'])} | {_fmt(s['missing']['median'])} | "
                f"{s['ok']}/{s['runs']} |"
            )
            p = s["p99_ms"]["median"]
            if rate == "2000" and name.startswith("processor_api") and p is not None:
                if best_2000 is None or p < best_2000[1]:
                    best_2000 = (name, p)
    fig.suptitle("Count per key: end-to-end latency at a steady rate")
    out += _save_plot(fig, "latency.png", "latency")
    out += ["Commands:", ""] + [f"- {n}: `{c}`" for n, c in data["commands"].items()] + [""]
    if best_2000:
        targets.append(
            {
                "target": "latency at 2,000 records/s: p99 <= 1 s",
                "measured": f"{best_2000[0]}: p99 {best_2000[1]:,.0f} ms",
                "met": best_2000[1] <= 1000,
            }
        )


def task_hosts_section(targets: Targets) -> list[str]:
    """Long-lived task hosts: 2M contenders, start-up settings, latency, memory; own targets."""
    out: list[str] = []
    targets = []
    body: list[str] = []
    # bench.run --full --suffix=-task-hosts-2M (and --suffix=-startup-settings) write these
    data = _read("throughput-full-task-hosts-2M")
    if data:
        _task_hosts_throughput(data, body, targets)
    data = _read("throughput-full-startup-settings")
    if data:
        for size in data["sizes"].values():
            body += [
                f"### Start-up settings, {size['records']:,} records (one micro-batch), "
                "alternating",
                "",
                f"Command: `{data['command']}`, started {data['started_at']}; {_load_averages(data)}. "
                f"Source: {data.get('machine', {}).get('processor_api source')}.",
                "",
            ]
            _startup_table(size, body)
    for mode in ("full", "quick"):
        data = _read(f"latency-{mode}")
        if data:
            _task_hosts_latency(data, mode, body, targets)
            break
    if not body:
        return []
    out += ["## Tasks that read their own input (long-lived task hosts)", ""]
    out += _targets_table("target", targets)
    return out + body


# ------------------------------------------------------------------------------- the report
def notes_section(targets: Targets) -> list[str]:
    return _notes(NOTES_FILE)


def serdes_ttl_section(targets: Targets) -> list[str]:
    return _notes(NOTES_SERDES_TTL)


def epochs_section(targets: Targets) -> list[str]:
    return _notes(NOTES_EPOCHS)


def snapshots_section(targets: Targets) -> list[str]:
    """Warm restore from snapshots, their cost, executor loss and spread (issue 22's targets)."""
    out = ["## Snapshots and executor loss", ""]
    warm = _read("warm-restore")
    if warm:
        out += [
            f"Ready after losing local state (`{warm['command']}`; medians of "
            f"{warm['sizes'][0]['summary']['full replay']['seconds']['n']} alternating runs):",
            "",
            "| keys | snapshot | snapshot + tail (s) | full replay (s) | tail records |",
            "|---|---|---|---|---|",
        ]
        for size in warm["sizes"]:
            warm_s = size["summary"]["snapshot + tail"]["seconds"]["median"]
            cold_s = size["summary"]["full replay"]["seconds"]["median"]
            out.append(
                f"| {size['entries']:,} | {size['snapshot_bytes'] / 1e6:.1f} MB | {warm_s:.3f} | "
                f"{cold_s:.3f} | {size['tail']:,} |"
            )
            targets.append(
                {
                    "target": f"restore of {size['entries']:,} keys from a snapshot <= 3 s",
                    "measured": f"{warm_s:.3f} s",
                    "met": warm_s <= 3.0,
                }
            )
        out.append("")
    cost = _read("snapshot-cost")
    if cost:
        out += [
            f"Snapshot cost (`{cost['command']}`): {cost['median_records_per_s_with']:,} records/s "
            f"with snapshots every {cost['interval_ms']} ms against "
            f"{cost['median_records_per_s_without']:,} without "
            f"({cost['cost_fraction']:.1%}).",
            "",
        ]
        targets.append(
            {
                "target": "snapshots cost <= 5% of steady-state throughput",
                "measured": f"{cost['cost_fraction']:.1%}",
                "met": cost["cost_fraction"] <= 0.05,
            }
        )
    loss = _read("executor-loss")
    if loss:
        first = loss["first_outputs_after_kill_s"]
        out += [
            f"Executor killed on `{loss['master']}` (`{loss['command']}`): outputs on every "
            f"partition {first['median']} s after the kill (median of {first['n']}; "
            f"{first['min']}-{first['max']} s), exact in every run: {loss['all_exact']}.",
            "",
        ]
        targets.append(
            {
                "target": "first output of a moved task <= 15 s after an executor kill",
                "measured": f"{first['median']} s",
                "met": first["median"] <= 15,
            }
        )
    spread = _read("executor-spread")
    if spread:
        out += [f"Tasks per executor after a loss (`{spread['command']}`):", ""]
        by_contender: dict[str, list[dict[str, Any]]] = {}
        for run in spread["runs"]:
            by_contender.setdefault(run["contender"], []).append(run)
            out.append(
                f"- {run['contender']}: before {run['before_kill']}, replacement at "
                f"{run['replacement_registered_s']} s, final {run['final_tasks_per_executor']}, "
                + (
                    "never spread again in the time observed"
                    if run["spread_from_s"] is None
                    else f"spread from {run['spread_from_s']} s"
                )
            )
        out.append("")
        for contender, runs in by_contender.items():
            after = [
                r["spread_from_s"] - (r["replacement_registered_s"] or 0.0)
                for r in runs
                if r["spread_from_s"] is not None
            ]
            median = statistics.median(after) if after else None
            spread_ok = len(after) == len(runs) and median is not None and median <= 120
            master = runs[0].get("master", spread.get("master", ""))
            targets.append(
                {
                    "target": "tasks spread over the executors within 2 minutes of a "
                    f"replacement (`{master}`, {contender})",
                    "measured": (
                        f"{len(after)} of {len(runs)} runs spread"
                        + (f", median {median:.1f} s after" if median is not None else "")
                    ),
                    "met": spread_ok,
                }
            )
        out.append("")
    return out


#: Section name -> renderer, for ``python -m bench.report SECTION``.
SECTIONS: dict[str, Callable[[Targets], list[str]]] = {
    "window-store": window_store_section,
    "windowed-and-global-store": windowed_and_global_store_section,
    "punctuation-into-kafka": punctuation_into_kafka_section,
    "task-hosts": task_hosts_section,
    "throughput": throughput_section,
    "punctuation": punctuation_section,
    "restore": restore_section,
    "prototypes": prototypes_section,
    "profiles": profiles_section,
    "registry-serdes-ttl-store": serdes_ttl_section,
    "epochs": epochs_section,
    "snapshots": snapshots_section,
}
FIRST_ROUND = ("throughput", "punctuation", "restore", "prototypes", "profiles")


def write_report() -> Path:
    out: list[str] = [
        "# Benchmarks",
        "",
        "Generated by `bench/report.py` from `bench/results/*.json`; "
        "`make bench-quick` (`python -m bench.run --quick`) and `make bench` "
        "(`python -m bench.run --full`) rewrite it. Plots: `bench/results/*.png`. "
        "Each section shows the full run's results when there are any "
        "(`*-full-<date>.json`), else the quick run's (`*-quick-<date>.json`).",
        "",
        "`run-topology` runs in epochs, its only runtime since the micro-batch runtime was "
        'removed on 2026-11-27 (the sections "Runs in epochs" near the end). Contenders named '
        "`processor_api` (with its `before`, diagnostics and windowed count) and `processor_api "
        "trigger=...` are that micro-batch runtime, measured when it was the default; kept as "
        "history. Contenders named `processor_api epochs ...` run in epochs.",
        "",
    ]
    targets: Targets = []
    body: list[str] = []
    for name in FIRST_ROUND:
        body += SECTIONS[name](targets)
    machine = next(
        (d.get("machine") for d in (_load_run(n)[0] for n in FIRST_ROUND[:3]) if d), None
    )
    for name in ("window-store", "windowed-and-global-store", "punctuation-into-kafka"):
        out += SECTIONS[name]([])
    out += task_hosts_section([])
    out += ["## Targets: throughput, punctuation, restore (ratios measured in the same run)", ""]
    out += _targets_table("target", targets)
    out += notes_section([])
    if machine:
        out += ["## Machine", ""] + _machine_table(machine) + [""]
    out += body
    out += ["", *serdes_ttl_section([]), *epochs_section([])]
    snapshot_targets: Targets = []
    out += snapshots_section(snapshot_targets)  # the notes before end with a blank line
    out += _targets_table("target", snapshot_targets)
    path = OUTPUT_DIR / "RESULTS.md"
    path.write_text("\n".join(out).rstrip("\n") + "\n")
    log(f"wrote {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.report",
        description="Rewrite bench/RESULTS.md and the plots from the recorded results, or "
        "print some sections. Runs no benchmark.",
    )
    parser.add_argument(
        "sections",
        nargs="*",
        metavar="SECTION",
        help=f"print only these sections: {', '.join(SECTIONS)}",
    )
    parser.add_argument("--list", action="store_true", help="list the sections and stop")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(SECTIONS))
        return 0
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    if not args.sections:
        write_report()
        return 0
    for name in args.sections:
        targets: Targets = []
        lines = SECTIONS[name](targets)
        if targets:
            lines += _targets_table("target", targets)
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
