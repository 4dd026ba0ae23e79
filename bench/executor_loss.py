"""Executor loss: how soon a run on ``local-cluster[2,N,1024]`` answers again after kill -9 of
one executor JVM (``tests/harness/executor_loss.py``: separate state directories per executor,
snapshots after every commit, ``exactly_once_v2``).

``python -m bench.executor_loss [--reps R]`` (under ``flock /tmp/spark-tests.lock``: it starts
Spark) writes ``bench/results/executor-loss-<date>.json``: per run, the seconds from the kill
until every task had a committed output of the input produced right after the kill (the moved
tasks included), and until every notification was committed; each run is checked exact
(committed notifications and final stores equal the reference fold).

Issue 35's layout, 12 tasks on two executors of 2 cores and 2 workers each, with a steady
input and the executors watched for 90 s after the kill::

    python -m bench.executor_loss --partitions 12 --cores 2 --threads 2 --products 48 \\
        --rate 200 --observe-s 90 --variant 12tasks

adds, per run (``--observe-s``): when Spark's REST API stopped listing the killed executor
as active (*the loss seen*; the driver's ``Lost executor`` log line, whole seconds, beside
it), the tasks that moved (those that restored after the kill: a task restores where it
starts without its state) with the executor each restored on first and when each had its
first new committed output, where the moved tasks' restores started and how long they took
(the executors' logs), when the replacement executor registered and when it ran as many
workers as the killed one did, and the workers per executor every 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import Broker, log, machine_info, stats, write_result

SCHEDULER_LOG4J = Path(__file__).with_name("log4j2-scheduler.properties")


def _stats_of(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """``stats`` of ``key`` over the runs that have it (watched runs only, or measured)."""
    return stats([run[key] for run in runs if run.get(key) is not None])


def _watched(loss: Any) -> dict[str, Any]:
    """The figures of a watched run (``LossLayout.observe_s`` > 0), in seconds."""
    watch = loss.watch
    killed = watch.killed_at
    moved = watch.moved_first_output_at
    taken = [watch.after_loss_seen(at) for at in moved.values()]
    restores: dict[str, list[dict[str, Any]]] = {}
    for executor, events in watch.events.items():
        for event in events:
            task = f"0_{event.get('partition')}"
            if task in moved and event["at"] > killed:
                restores.setdefault(executor, []).append(
                    {
                        "task": task,
                        "event": event["event"],
                        "after_loss_seen_s": watch.after_loss_seen(event["at"]),
                        **{
                            k: event[k]
                            for k in ("duration_s", "snapshot_download_s", "records")
                            if k in event
                        },
                    }
                )
    gaps = watch.longest_output_gap_s
    lost = [gaps[t] for t in watch.lost_tasks if t in gaps]
    kept = [gap for task, gap in gaps.items() if task not in watch.lost_tasks]
    registered = watch.replacement_registered_at
    share = watch.replacement_share_at
    return {
        "killed_executor": watch.killed_executor,
        "workers_before_kill": watch.before,
        "loss_seen_after_kill_s": None
        if watch.loss_seen_at is None
        else round(watch.loss_seen_at - killed, 2),
        "loss_logged_after_kill_s": None
        if watch.loss_logged_at is None
        else round(watch.loss_logged_at - killed, 2),
        "moved_tasks": sorted(moved),
        "moved_to": watch.moved_to,
        "moved_tasks_first_output_after_loss_seen_s": {
            task: watch.after_loss_seen(at) for task, at in moved.items()
        },
        "all_moved_tasks_taken_after_loss_seen_s": None
        if None in taken or not taken
        else max(t for t in taken if t is not None),
        "moved_task_restores": restores,
        "lost_tasks": watch.lost_tasks,
        "longest_output_gap_after_kill_s": gaps,
        "longest_output_gap_lost_tasks_s": max(lost) if lost else None,
        "longest_output_gap_survivor_tasks_s": max(kept) if kept else None,
        "replacement": watch.replacement,
        "replacement_registered_after_kill_s": None
        if registered is None
        else round(registered - killed, 2),
        "replacement_share_after_registered_s": None
        if share is None or registered is None
        else round(share - registered, 2),
        "workers_per_executor": [[t, running] for t, running in watch.timeline],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.executor_loss")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions = tasks")
    parser.add_argument("--cores", type=int, default=1, help="cores of each of the 2 executors")
    parser.add_argument("--threads", type=int, default=None, help="num.stream.threads")
    parser.add_argument("--products", type=int, default=12)
    parser.add_argument(
        "--rate", type=int, default=0, help="sales/s produced after the second wave"
    )
    parser.add_argument("--observe-s", type=float, default=0.0, help="watch Spark's executors")
    parser.add_argument("--variant", default="", help="result file name: executor-loss-<variant>")
    parser.add_argument(
        "--scheduler-log",
        action="store_true",
        help="Spark's scheduler and shuffle-fetch lines at INFO, with milliseconds, in run.log "
        "and the executors' logs (bench/log4j2-scheduler.properties)",
    )
    args = parser.parse_args()
    from tests.harness.executor_loss import LossLayout, run_executor_loss

    layout = LossLayout(
        partitions=args.partitions,
        cores=args.cores,
        threads=args.threads,
        products=args.products,
        rate_per_s=args.rate,
        observe_s=args.observe_s,
        spark_log4j=SCHEDULER_LOG4J if args.scheduler_log else None,
    )
    loadavg_at_start = list(os.getloadavg())
    broker = Broker.start()
    runs: list[dict[str, Any]] = []
    try:
        for rep in range(args.reps):
            load = list(os.getloadavg())
            logs = Path(tempfile.mkdtemp(prefix="bench-loss-"))
            log(f"rep {rep + 1}/{args.reps}: run.log and the executors' logs in {logs}")
            loss = run_executor_loss(broker._kafka, logs, layout)
            comparison = loss.comparison()
            run: dict[str, Any] = {
                "rep": rep,
                "loadavg_at_start": load,
                "first_outputs_after_kill_s": round(loss.first_outputs_after_kill_s, 2),
                "complete_after_kill_s": round(loss.complete_after_kill_s, 2),
                "restores_from_snapshots": len(loss.restores_from_snapshots),
                "exact": comparison.equal and comparison.totals_equal,
                "sales": len(loss.sales),
                "aborted_shown": len(loss.aborted),
            }
            if loss.watch is not None:
                run.update(_watched(loss))
            shown = {k: v for k, v in run.items() if k != "workers_per_executor"}
            log(f"rep {rep + 1}/{args.reps}: {shown}")
            runs.append(run)
            # after every run: a later run that fails leaves the earlier ones recorded
            _write(args, layout, runs, loadavg_at_start)
    finally:
        broker.stop()


def _write(
    args: argparse.Namespace, layout: Any, runs: list[dict[str, Any]], loadavg: list[float]
) -> None:
    taken = [r.get("all_moved_tasks_taken_after_loss_seen_s") for r in runs]
    write_result(
        "executor-loss" + (f"-{args.variant}" if args.variant else ""),
        {
            "command": "python -m bench.executor_loss " + " ".join(sys.argv[1:]),
            "master": layout.master,
            "layout": {
                "partitions": layout.partitions,
                "threads": layout.threads,
                "products": layout.products,
                "rate_per_s": layout.rate_per_s,
                "observe_s": layout.observe_s,
            },
            "runs": runs,
            "first_outputs_after_kill_s": stats([r["first_outputs_after_kill_s"] for r in runs]),
            "complete_after_kill_s": stats([r["complete_after_kill_s"] for r in runs]),
            "all_moved_tasks_taken_after_loss_seen_s": stats([t for t in taken if t is not None]),
            "loss_seen_after_kill_s": _stats_of(runs, "loss_seen_after_kill_s"),
            "replacement_share_after_registered_s": _stats_of(
                runs, "replacement_share_after_registered_s"
            ),
            "longest_output_gap_lost_tasks_s": _stats_of(runs, "longest_output_gap_lost_tasks_s"),
            "longest_output_gap_survivor_tasks_s": _stats_of(
                runs, "longest_output_gap_survivor_tasks_s"
            ),
            "all_exact": all(r["exact"] for r in runs),
            "loadavg_at_start": loadavg,
            "loadavg_at_end": list(os.getloadavg()),
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()
