"""Throughput, punctuation and restore (``bench.run``), the what-if prototypes, the profiles.

Full-run results are preferred; a benchmark only run with ``--quick`` is reported from its
quick file (and marked so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, latest_result, result_files
from bench.reports.shared import (
    Targets,
    bar_plot,
    fmt_value,
    pa_label,
    pyplot,
    save_plot,
)

_EXTRA_SIZE = re.compile(r"throughput-(full|quick)-\d+[kM]-\d{4}-\d\d-\d\d")


def load_run(name: str) -> tuple[dict[str, Any] | None, str | None]:
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
    plt = pyplot()
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
    image = save_plot(fig, "throughput.png", "throughput")
    for size in sizes:
        base = pa_label(size["summary"])
        pa = size["summary"].get(base, {})
        for name, s in size["summary"].items():
            w = s["wall_s"]
            ratio = size["throughput_ratios"].get(f"{base} / {name}")
            out.append(
                f"| {size['records']:,} | {name} | {fmt_value(w['median'], 1)} "
                f"({fmt_value(w['min'], 1)}-{fmt_value(w['max'], 1)}) | "
                f"{fmt_value(s['records_per_s_median'])} | "
                f"{'1 (itself)' if name == base else fmt_value(ratio, 2)} | "
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
                    "measured": f"{base} {fmt_value(pa_wall, 1)} s vs hand loop {fmt_value(hand, 1)} s"
                    f" -> hand/{base} = {fmt_value((hand or 0) / pa_wall, 3) if pa_wall else 'n/a'}",
                    "met": bool(pa_wall and hand and pa_wall <= hand),
                }
            )
            targets.append(
                {
                    "target": f"throughput >= 1.5x Quix Streams{scope}",
                    "measured": f"{fmt_value(quix, 2)}x",
                    "met": bool(quix and quix >= 1.5),
                }
            )
            targets.append(
                {
                    "target": f"throughput >= 2x transformWithStateInPandas{scope}",
                    "measured": f"{fmt_value(tws, 2)}x",
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
                f"{fmt_value(run['wall_s'], 1)} | {text} |"
            )
    out += ["", "Commands (BOOTSTRAP = the embedded broker of the run):", ""]
    for size in sizes:
        for name, cmd in size["commands"].items():
            out.append(f"- {size['records']:,} / {name}: `{cmd}`")
    out.append("")


def _punctuation(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    plt = pyplot()
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
            f"| {int(size):,} | {fmt_value(r['punctuation']['seconds']['median'], 3)} | "
            f"{fmt_value(ys[-1])} | "
            + (f"{fmt_value(to_kafka)} | " if kafka else "")
            + f"{fmt_value(ys_all[-1])} | {fmt_value(ys_raw[-1])} |"
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
    image = save_plot(fig, "punctuation_cost.png", "punctuation cost")
    largest = str(max(xs))
    rate = cost["by_size"][largest]["punctuation"]["entries_per_s_median"]
    scope = "" if int(largest) >= 1_000_000 else f" (indicative: {int(largest):,} keys, quick)"
    targets.append(
        {
            "target": f"punctuation over a 1M-key store forwards >= 1M entries/s{scope}",
            "measured": f"{fmt_value(rate)} entries/s ({fmt_value(rate / 1e6, 2)}x)",
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
            f"| {name} | {fmt_value(s['median'] * 1e6, 2)} ({fmt_value(s['min'] * 1e6, 2)}-"
            f"{fmt_value(s['max'] * 1e6, 2)}) | {fmt_value(check['overhead_ns_vs_0'][name])} |"
        )
    out += ["", "| schedules | ns per check call (median) |", "|---|---:|"]
    for name, s in check["check_call_ns"].items():
        out.append(f"| {name} | {fmt_value(s['median'])} |")
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
                f"| {name} | {fmt_value(s['wall_s_median'], 1)} | "
                f"{fmt_value(s['records_per_s_median'])} | {fmt_value(s['ratio_vs_none'], 2)} | "
                f"{fmt_value(s['outputs_median'])} |"
            )
        out += bar_plot(
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
                f"{fmt_value(s['p50_ms'])} | {fmt_value(s['p90_ms'])} | {fmt_value(s['p99_ms'])} | "
                f"{fmt_value(s['max_ms'])} | {fmt_value(s['max_incl_warmup_ms'])} |"
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
        out += save_plot(fig, "punctuation_lag.png", "lag")
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
            f"| {name} | {fmt_value(sec['median'], 2)} ({fmt_value(sec['min'], 2)}-"
            f"{fmt_value(sec['max'], 2)}) | {fmt_value(s['records_per_s_median'])} | "
            f"{fmt_value(s['records_per_s_median'] / plain, 2)} |"
        )
    out += bar_plot(
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
            "measured": f"{fmt_value(ratio, 2)}x",
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
            f"{fmt_value(s['as is']['median'])} | {fmt_value(s['patched']['median'])} | "
            f"{fmt_value(r['speedup'], 2)}x |"
        )
    pr = data["per_record"]
    out.append(
        f"| count per key, {pr['records']:,} records in process, P1-P3 (µs/record) | "
        f"{fmt_value(pr['us_per_record']['as is']['median'], 2)} | "
        f"{fmt_value(pr['us_per_record']['patched']['median'], 2)} | "
        f"{fmt_value(pr['speedup'], 2)}x |"
    )
    if "patched + WAL off" in pr["us_per_record"]:
        out.append(
            f"| same, P1-P4 (RocksDB WAL off) (µs/record) | "
            f"{fmt_value(pr['us_per_record']['as is']['median'], 2)} | "
            f"{fmt_value(pr['us_per_record']['patched + WAL off']['median'], 2)} | "
            f"{fmt_value(pr.get('speedup_wal_off'), 2)}x |"
        )
    cp = data.get("changelog_produce")
    if cp:
        out.append(
            f"| changelog: {cp['records']:,} change records produced and acked, P5 "
            f"(records/s) | {fmt_value(cp['records_per_s']['as is']['median'])} | "
            f"{fmt_value(cp['records_per_s']['patched']['median'])} | "
            f"{fmt_value(cp['speedup'], 2)}x |"
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
                    f"| {fmt_value(s['share_of_process'] * 100, 1) if s else ''} | "
                    f"{s['function'] if s else ''} | | "
                    f"{fmt_value(t['share_of_process'] * 100, 1) if t else ''} | "
                    f"{t['function'] if t else ''} |"
                )
            out.append("")


def _first_round(name: str, render: Callable[..., None], targets: Targets) -> list[str]:
    data, mode = load_run(name)
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
    data, mode = load_run("profiles")
    out: list[str] = []
    if data:
        _profiles(data, mode, out)
    return out
