"""Long-lived task hosts: 2M records end to end, start-up settings, latency."""

from __future__ import annotations

from bench.reports.shared import (
    Targets,
    fmt_value,
    load_averages,
    median_of,
    metric,
    pa_label,
    pyplot,
    read_result,
    save_plot,
    targets_table,
)


def _steady(name: str, runs: list[dict], records: int) -> float | None:
    if name == "hand_loop":  # the loop's own time: consume + update, no interpreter start
        return median_of([records / r["metrics"]["loop_s"] for r in runs if r.get("metrics")])
    return metric(runs, "steady_records_per_s")


def _task_hosts_throughput(data: dict, out: list[str], targets: list[dict]) -> None:
    for size in data["sizes"].values():
        records = size["records"]
        out += [
            f"### Count per key, {records:,} records, end to end",
            "",
            f"Command: `{data['command']}`, started {data['started_at']}, "
            f"{size['reps']} repetitions alternating; {load_averages(data)}. Source: "
            f"{data.get('machine', {}).get('processor_api source')}.",
            "",
            "| contender | median wall s (min-max) | wall / processor_api's | "
            "steady-state records/s (median) | peak memory PSS MiB (RSS sum) | ok |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        base = pa_label(size["summary"])
        pa_wall = size["summary"].get(base, {}).get("wall_s", {}).get("median")
        steady: dict[str, float | None] = {}
        for name, s in size["summary"].items():
            runs = [r for r in size["runs"] if r["contender"] == name and r["ok"]]
            steady[name] = _steady(name, runs, records)
            w = s["wall_s"]
            pss = metric(runs, "memory", "peak_pss_mib")
            rss = metric(runs, "memory", "peak_rss_sum_mib")
            out.append(
                f"| {name} | {fmt_value(w['median'], 1)} ({fmt_value(w['min'], 1)}-{fmt_value(w['max'], 1)}) | "
                f"{fmt_value(w['median'] / pa_wall, 2) if pa_wall and w['median'] else 'n/a'} | "
                f"{fmt_value(steady[name])} | {fmt_value(pss)} ({fmt_value(rss)}) | {s['ok']}/{s['runs']} |"
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
            f"| {name} | {fmt_value(metric(runs, 'start_to_query_started_s'), 2)} | "
            f"{fmt_value(metric(runs, 'query_started_to_first_batch_s'), 2)} | "
            f"{fmt_value(metric(runs, 'start_to_first_batch_s'), 2)} | "
            f"{fmt_value(metric(runs, 'first_batch', 'triggerExecution_ms'))} | "
            f"{fmt_value(metric(runs, 'first_batch', 'addBatch_ms'))} | "
            f"{fmt_value(metric(runs, 'first_batch', 'queryPlanning_ms'))} | "
            f"{fmt_value(size['summary'][name]['wall_s']['median'], 1)} |"
        )
    out.append("")


def _task_hosts_latency(data: dict, mode: str, out: list[str], targets: list[dict]) -> None:
    out += [
        f"### Latency, produce -> output visible ({mode} run)",
        "",
        f"Command: `{data['command']}`, started {data['started_at']}; {load_averages(data)}. "
        f"Each run: trickle ({data['trickle_rate']}/s) until the first output, then the rate "
        f"for {data['settle_s']} s (not measured) and {data['measure_s']} s measured; "
        f"{data['reps']} repetitions alternating; medians over repetitions of each run's "
        "percentile. `bench/latency.py` says how.",
        "",
        "| rate /s | contender | p50 ms | p90 ms | p99 ms | max ms | missing | ok runs |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    plt = pyplot()
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
                f"| {int(rate):,} | {name} | {fmt_value(s['p50_ms']['median'])} | "
                f"{fmt_value(s['p90_ms']['median'])} | {fmt_value(s['p99_ms']['median'])} | "
                f"{fmt_value(s['max_ms']['median'])} | {fmt_value(s['missing']['median'])} | "
                f"{s['ok']}/{s['runs']} |"
            )
            p = s["p99_ms"]["median"]
            if rate == "2000" and name.startswith("processor_api") and p is not None:
                if best_2000 is None or p < best_2000[1]:
                    best_2000 = (name, p)
    fig.suptitle("Count per key: end-to-end latency at a steady rate")
    out += save_plot(fig, "latency.png", "latency")
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
    data = read_result("throughput-full-task-hosts-2M")
    if data:
        _task_hosts_throughput(data, body, targets)
    data = read_result("throughput-full-startup-settings")
    if data:
        for size in data["sizes"].values():
            body += [
                f"### Start-up settings, {size['records']:,} records (one micro-batch), "
                "alternating",
                "",
                f"Command: `{data['command']}`, started {data['started_at']}; {load_averages(data)}. "
                f"Source: {data.get('machine', {}).get('processor_api source')}.",
                "",
            ]
            _startup_table(size, body)
    for mode in ("full", "quick"):
        data = read_result(f"latency-{mode}")
        if data:
            _task_hosts_latency(data, mode, body, targets)
            break
    if not body:
        return []
    out += ["## Tasks that read their own input (long-lived task hosts)", ""]
    out += targets_table("target", targets)
    return out + body
