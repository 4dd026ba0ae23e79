"""Writes ``bench/RESULTS.md`` and ``bench/results/*.png`` from ``bench/results/*.json``.

Full-run results are preferred; a benchmark only run with ``--quick`` is reported from its quick
file (and marked so). ``python -m bench.run --full --report-only`` regenerates the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.common import OUTPUT_DIR, RESULTS_DIR, log
from bench.report_issue12 import issue12_section
from bench.report_issue14 import issue14_section
from bench.report_window_store import window_store_section

NOTES_FILE = OUTPUT_DIR / "NOTES.md"  # hand-written analysis appended to the report


def _load(name: str) -> tuple[dict[str, Any] | None, str | None]:
    for mode in ("full", "quick"):
        path = RESULTS_DIR / f"{name}-{mode}.json"
        if path.exists():
            data = json.loads(path.read_text())
            if name == "throughput":  # extra sizes run separately (--suffix), e.g. 20M
                for extra in sorted(RESULTS_DIR.glob(f"{name}-{mode}-*.json")):
                    if extra.name in (ISSUE11_THROUGHPUT, ISSUE11_STARTUP):
                        continue  # their own section (issue 11)
                    more = json.loads(extra.read_text())
                    for size, result in more.get("sizes", {}).items():
                        result["from_file"] = extra.name
                        result["command"] = more.get("command")
                        key = size if size not in data["sizes"] else f"{size}{extra.stem}"
                        data["sizes"][key] = result
            return data, mode
    return None, None


def _fmt(value: float | None, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    if digits == 0:
        return f"{value:,.0f}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _machine_table(machine: dict[str, Any]) -> list[str]:
    lines = ["| | |", "|---|---|"]
    for key, value in machine.items():
        lines.append(f"| {key} | {value} |")
    return lines


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
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "throughput.png", dpi=110)
    plt.close(fig)
    for size in sizes:
        pa = size["summary"].get("processor_api", {})
        for name, s in size["summary"].items():
            w = s["wall_s"]
            ratio = size["throughput_ratios"].get(f"processor_api / {name}")
            out.append(
                f"| {size['records']:,} | {name} | {_fmt(w['median'], 1)} "
                f"({_fmt(w['min'], 1)}-{_fmt(w['max'], 1)}) | "
                f"{_fmt(s['records_per_s_median'])} | "
                f"{'1 (itself)' if name == 'processor_api' else _fmt(ratio, 2)} | "
                f"{s['ok']}/{s['runs']} |"
            )
        records = size["records"]
        quix = size["throughput_ratios"].get("processor_api / quixstreams")
        tws = size["throughput_ratios"].get("processor_api / transformWithStateInPandas")
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
                    "measured": f"processor_api {_fmt(pa_wall, 1)} s vs hand loop {_fmt(hand, 1)} s"
                    f" -> hand/processor_api = {_fmt((hand or 0) / pa_wall, 3) if pa_wall else 'n/a'}",
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
    out += ["", "![throughput](results/throughput.png)", ""]
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
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "punctuation_cost.png", dpi=110)
    plt.close(fig)
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
    out += ["", "![punctuation cost](results/punctuation_cost.png)", ""]

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
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(names, rates)
        ax.set_ylabel("records/s (median)")
        ax.set_title("Product count on Spark by stream-time punctuation interval")
        fig.tight_layout()
        fig.savefig(RESULTS_DIR / "punctuation_intervals.png", dpi=110)
        plt.close(fig)
        out += ["", "![intervals](results/punctuation_intervals.png)", ""]
    else:
        out += [f"Not measured: {intervals.get('error') or intervals.get('exit_code')}", ""]

    lag = data.get("spark_wall_clock_lag") or {}
    out += ["### 2d. Wall-clock punctuation lag (Spark)", ""]
    if lag.get("summary"):
        out += [
            "`bench.punct_topologies:build_lag_probe`: a WALL_CLOCK_TIME punctuation every "
            f"{lag['interval_ms']} ms, trigger interval "
            f"{lag.get('trigger_interval_s', '1 s or chosen by the runtime (auto)')}, "
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
        fig.tight_layout()
        fig.savefig(RESULTS_DIR / "punctuation_lag.png", dpi=110)
        plt.close(fig)
        out += ["", "![lag](results/punctuation_lag.png)", ""]
    else:
        out += [f"Not measured: {lag.get('error') or lag.get('exit_code')}", ""]


def _restore(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    plt = _plt()
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
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(names, rates)
    ax.set_ylabel("records/s (median)")
    ax.set_title(f"Restore of {data['entries']:,} changelog entries")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "restore.png", dpi=110)
    plt.close(fig)
    out += ["", "![restore](results/restore.png)", ""]
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


def write_report() -> Path:
    out: list[str] = [
        "# Benchmarks (issue #5)",
        "",
        "Generated by `bench/report.py` from `bench/results/*.json`; "
        "`make bench-quick` (`python -m bench.run --quick`) and `make bench` "
        "(`python -m bench.run --full`) rewrite it. Plots: `bench/results/*.png`. "
        "Each section shows the full run's results when there are any "
        "(`*-full.json`), else the quick run's (`*-quick.json`).",
        "",
    ]
    targets: list[dict] = []
    body: list[str] = []
    machine = None
    for name, fn in (
        ("throughput", _throughput),
        ("punctuation", _punctuation),
        ("restore", _restore),
    ):
        data, mode = _load(name)
        if data is None:
            body += [f"## {name}", "", "Not run yet.", ""]
            continue
        machine = machine or data.get("machine")
        try:
            fn(data, mode, body, targets)
        except Exception as exc:  # noqa: BLE001 - a broken section must not hide the others
            body += [f"Could not render {name}: {exc!r}", ""]
    whatif_path = RESULTS_DIR / "earlier" / "whatif-full-d232ac5.json"
    whatif, mode = (
        (json.loads(whatif_path.read_text()), "full") if whatif_path.exists() else (None, None)
    )
    if whatif:
        try:
            _whatif(whatif, mode, body)
        except Exception as exc:  # noqa: BLE001
            body += [f"Could not render whatif: {exc!r}", ""]
    prof, mode = _load("profiles")
    if prof:
        _profiles(prof, mode, body)
    out += window_store_section()
    out += issue12_section()
    out += issue14_section()
    out += issue11_section()
    out += [
        "## Targets of issue 5 (ratios measured in the same run)",
        "",
        "| target | measured | met? |",
        "|---|---|---|",
    ]
    for t in targets:
        out.append(f"| {t['target']} | {t['measured']} | {'met' if t['met'] else 'MISSED'} |")
    out.append("")
    if NOTES_FILE.exists():
        out += [NOTES_FILE.read_text().strip(), ""]
    if machine:
        out += ["## Machine", ""] + _machine_table(machine) + [""]
    out += body
    path = OUTPUT_DIR / "RESULTS.md"
    path.write_text("\n".join(out) + "\n")
    log(f"wrote {path}")
    return path


# ------------------------------------------------------------------------------- issue 11
ISSUE11_THROUGHPUT = "throughput-full-issue11.json"
ISSUE11_STARTUP = "throughput-full-startup.json"
ISSUE11_LATENCY = ("latency-full.json", "latency-quick.json")


def _median(values: list[Any]) -> float | None:
    import statistics

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


def _steady(name: str, runs: list[dict], records: int) -> float | None:
    if name == "hand_loop":  # the loop's own time: consume + update, no interpreter start
        return _median([records / r["metrics"]["loop_s"] for r in runs if r.get("metrics")])
    return _metric(runs, "steady_records_per_s")


def _load_avgs(data: dict) -> str:
    m = data.get("machine", {})
    start = ", ".join(f"{x:.2f}" for x in m.get("loadavg_at_start", []))
    end = ", ".join(f"{x:.2f}" for x in m.get("loadavg_at_end", []))
    return f"load average (1, 5, 15 min) at start {start}; at end {end}"


def _throughput_issue11(data: dict, out: list[str], targets: list[dict]) -> None:
    for size in data["sizes"].values():
        records = size["records"]
        out += [
            f"### Count per key, {records:,} records, end to end",
            "",
            f"Command: `{data['command']}`, started {data['started_at']}, "
            f"{size['reps']} repetitions alternating; {_load_avgs(data)}. Source: "
            f"{data.get('machine', {}).get('processor_api source')}.",
            "",
            "| contender | median wall s (min-max) | wall / processor_api's | "
            "steady-state records/s (median) | peak memory PSS MiB (RSS sum) | ok |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        pa_wall = size["summary"].get("processor_api", {}).get("wall_s", {}).get("median")
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
        pa_runs = [r for r in size["runs"] if r["contender"] == "processor_api" and r["ok"]]
        if pa_runs:
            kinds = pa_runs[0]["metrics"].get("memory", {}).get("peak_pss_by_kind_mib")
            seen = pa_runs[0]["metrics"].get("memory", {}).get("processes_seen_by_kind")
            out += [
                f"processor_api at its peak (rep 1), PSS MiB by kind: {kinds}; "
                f"processes seen: {seen}.",
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
            if steady.get("processor_api") and steady.get("hand_loop"):
                r = steady["processor_api"] / steady["hand_loop"]
                targets.append(
                    {
                        "target": "steady-state throughput >= 1.5x the hand loop's",
                        "measured": f"{steady['processor_api']:,.0f} vs "
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


def _latency_issue11(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    out += [
        f"### Latency, produce -> output visible ({mode} run)",
        "",
        f"Command: `{data['command']}`, started {data['started_at']}; {_load_avgs(data)}. "
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
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "latency.png", dpi=110)
    plt.close(fig)
    out += ["", "![latency](results/latency.png)", ""]
    out += ["Commands:", ""] + [f"- {n}: `{c}`" for n, c in data["commands"].items()] + [""]
    if best_2000:
        targets.append(
            {
                "target": "latency at 2,000 records/s: p99 <= 1 s",
                "measured": f"{best_2000[0]}: p99 {best_2000[1]:,.0f} ms",
                "met": best_2000[1] <= 1000,
            }
        )


def issue11_section() -> list[str]:
    """The issue-11 section: 2M contenders, start-up before/after, latency, memory."""
    out: list[str] = []
    targets: list[dict] = []
    body: list[str] = []
    path = RESULTS_DIR / ISSUE11_THROUGHPUT
    if path.exists():
        _throughput_issue11(json.loads(path.read_text()), body, targets)
    path = RESULTS_DIR / ISSUE11_STARTUP
    if path.exists():
        data = json.loads(path.read_text())
        for size in data["sizes"].values():
            body += [
                f"### Start-up settings, {size['records']:,} records (one micro-batch), "
                "alternating",
                "",
                f"Command: `{data['command']}`, started {data['started_at']}; {_load_avgs(data)}. "
                f"Source: {data.get('machine', {}).get('processor_api source')}.",
                "",
            ]
            _startup_table(size, body)
    for name in ISSUE11_LATENCY:
        path = RESULTS_DIR / name
        if path.exists():
            _latency_issue11(
                json.loads(path.read_text()), name.split("-")[1].split(".")[0], body, targets
            )
            break
    if not body:
        return []
    out += ["## Issue 11: tasks that read their own input (long-lived task hosts)", ""]
    out += ["| target (issue 11) | measured | met? |", "|---|---|---|"]
    for t in targets:
        out.append(f"| {t['target']} | {t['measured']} | {'met' if t['met'] else 'MISSED'} |")
    out.append("")
    return out + body
