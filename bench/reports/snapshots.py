"""Warm restore from snapshots, their cost, executor loss and spread."""

from __future__ import annotations

import statistics
from typing import Any

from bench.reports.shared import (
    Targets,
    read_result,
)


def snapshots_section(targets: Targets) -> list[str]:
    """Warm restore from snapshots, their cost, executor loss and spread (issue 22's targets)."""
    out = ["## Snapshots and executor loss", ""]
    warm = read_result("warm-restore")
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
    cost = read_result("snapshot-cost")
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
    loss = read_result("executor-loss")
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
    out += _loss_layout(targets)
    spread = read_result("executor-spread")
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


def _loss_layout(targets: Targets) -> list[str]:
    """Issue 35's executor-loss layout: 12 tasks, two executors of 2 workers each."""
    out: list[str] = []
    survivor_s: list[float] = []
    exact = True
    for name in ("executor-loss-12tasks", "executor-loss-12tasks-watched"):
        loss = read_result(name)
        if loss:
            out += _loss_layout_runs(loss, survivor_s)
            exact = exact and loss["all_exact"]
    if not out:
        return []
    median = statistics.median(survivor_s) if survivor_s else None
    targets.append(
        {
            "target": "12 tasks on 2 executors of 2 workers: the survivor runs the lost tasks "
            "within 10 s of the loss being seen, exact (issue 35)",
            "measured": f"median {median} s after the kill (runs: {len(survivor_s)}), exact in "
            f"every run: {exact}",
            "met": median is not None and median <= 10 and exact,
        }
    )
    return out


def _loss_layout_runs(loss: dict[str, Any], survivor_s: list[float]) -> list[str]:
    layout = loss["layout"]
    out = [
        f"Executor killed with {layout['partitions']} tasks on `{loss['master']}`, "
        f"`num.stream.threads={layout['threads']}`: 4 workers of 3 tasks (`{loss['command']}`; "
        f"{layout['rate_per_s']} sales/s produced right after the kill and its wave; load "
        f"average {loss['loadavg_at_start'][0]:.1f} at the start, "
        f"{loss['loadavg_at_end'][0]:.1f} at the end). A task that moved restores from its "
        "snapshot where it lands; the executor a moved task restored on first tells who took "
        "it. Seconds after the kill:",
        "",
        "| run | tasks the survivor took | their first new outputs, last | tasks the "
        "replacement took first | their first new outputs, last | all outputs | exact |",
        "|---|---|---|---|---|---|---|",
    ]
    watched = []
    for run in loss["runs"]:
        moved_to = run.get("moved_to", {})
        first = run.get("moved_tasks_first_output_after_loss_seen_s", {})
        before = set(run.get("workers_before_kill", {}))
        seen = run.get("loss_seen_after_kill_s") or 0.0  # the figures count from it
        by_survivor = [t for t, e in moved_to.items() if e in before]
        by_replacement = [t for t, e in moved_to.items() if e not in before]

        def last(
            tasks: list[str], first: dict[str, Any] = first, seen: float = seen
        ) -> float | None:
            times = [first[t] for t in tasks if first.get(t) is not None]
            return round(max(times) + seen, 2) if times else None

        if last(by_survivor) is not None:
            survivor_s.append(last(by_survivor))  # type: ignore[arg-type]
        out.append(
            f"| {run['rep'] + 1} | {len(by_survivor)} | {last(by_survivor)} s | "
            f"{len(by_replacement)} | {last(by_replacement)} s | "
            f"{run['complete_after_kill_s']} s | {run['exact']} |"
        )
        if run.get("replacement_registered_after_kill_s") is not None:
            watched.append(
                f"Run {run['rep'] + 1}: Spark's REST API stopped listing the killed executor "
                f"{run['loss_seen_after_kill_s']} s after the kill (the driver's `Lost executor` "
                f"line, whole seconds: {run['loss_logged_after_kill_s']} s); the replacement "
                f"registered {run['replacement_registered_after_kill_s']} s after the kill."
            )
    return [*out, "", *(f"{line}\n" for line in watched)]
