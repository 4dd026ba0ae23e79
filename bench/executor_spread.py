"""Spread again after an executor loss: tasks per executor over time, after kill -9 of one.

``python -m bench.executor_spread [--reps R] [--observe-s S]`` (under ``flock
/tmp/spark-tests.lock``: it starts Spark) writes ``bench/results/executor-spread-<date>.json``.
A continuous run in epochs (5 s) of the seed's sales aggregation, 4 partitions, on two
executors (``local-cluster[2,N,1024]``: N slots each), a state directory per executor and
snapshots after every commit. Once all 4 tasks run, the executor JVM holding the most tasks
is killed; Spark's REST API (``/executors``: ``activeTasks``) is read every 0.5 s for ``S``
seconds. Per run:
when the replacement executor registered, and from when on the live executors' task counts
differ by at most one whenever all 4 tasks run (samples between two epochs, when fewer run,
are left out), to the end. Contenders, alternating: executors of 3 slots each (room for all 4
tasks on one) and of 2 slots each (each executor's share of the 4 tasks), both with Spark's
default ``spark.locality.wait`` (3 s; 0 made no difference, see
``bench/results/executor-spread-2026-11-26.json``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Broker, log, machine_info, write_result

PARTITIONS = 4
LOCALITY_WAIT = "3s"  # Spark's default, which run-topology keeps
#: contender -> master: two executors of 1 GiB with this many slots each
CONTENDERS = {
    "3 slots per executor (room for all 4 tasks)": "local-cluster[2,3,1024]",
    "2 slots per executor (a share of the 4 tasks)": "local-cluster[2,2,1024]",
}


def _cwd_name(pid: int) -> str | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).name
    except OSError:
        return None


def spread_from(timeline: list[dict[str, Any]]) -> float | None:
    """The first time from which, whenever every task ran on two live executors, their task
    counts differ by at most one, to the end of ``timeline`` (None: never so, or no such
    sample after it)."""
    full = [p for p in timeline if len(p["tasks"]) >= 2 and sum(p["tasks"].values()) == PARTITIONS]
    for index, point in enumerate(full):
        if all(max(p["tasks"].values()) - min(p["tasks"].values()) <= 1 for p in full[index:]):
            return float(point["t"])
    return None


def _one_run(broker: Broker, master: str, observe_s: float) -> dict[str, Any]:
    from tests.harness.executor_loss import executor_pids, free_port, spark_executors
    from tests.harness.folds import make_sales, produce_sales
    from tests.harness.local_cluster import remove_executor_dirs
    from tests.harness.processes import CliRun, cli_args
    from tests.harness.topics import uid

    run_id = uid()
    input_topic, output_topic = f"spread-in-{run_id}", f"spread-out-{run_id}"
    broker.create_topic(input_topic, PARTITIONS)
    broker.create_topic(output_topic, PARTITIONS)
    produce_sales(broker.bootstrap, input_topic, make_sales(400, 16, seed=61))
    port = free_port()
    marker = f"-Dprocessor_api.test.run={run_id}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-spread-"))
    args = cli_args(
        "topologies.sales_aggregation:build_topology",
        broker.bootstrap,
        f"spread-{run_id}",
        tmp / "state",
        guarantee="exactly_once_v2",
        available_now=False,
        topology_args={"input_topic": input_topic, "output_topic": output_topic, "threshold": 0},
        config={"state.snapshot.interval.ms": "0", "commit.interval.ms": "200"},
        extra=[
            "--epoch-interval", "5", "--state-dir-per-executor",
            "--spark-conf", f"spark.executor.extraJavaOptions={marker}",
            "--spark-conf", "spark.ui.enabled=true",
            "--spark-conf", f"spark.ui.port={port}",
            "--spark-conf", f"spark.locality.wait={LOCALITY_WAIT}",
        ],
    )  # fmt: skip
    args[args.index("local[2]")] = master
    timeline: list[dict[str, Any]] = []
    with CliRun(args, tmp / "run.log") as run:
        deadline = time.monotonic() + 180
        while True:
            executors = spark_executors(port) or []
            running = {e["id"]: e["activeTasks"] for e in executors if e["isActive"]}
            if len(running) == 2 and sum(running.values()) == PARTITIONS:
                break
            if time.monotonic() > deadline or not run.is_alive():
                raise RuntimeError(f"the 4 tasks never ran at once: {running}; {run.tail()}")
            time.sleep(0.5)
        before = dict(running)
        busiest = max(sorted(before), key=lambda e: before[e])
        # a standalone executor runs in its work directory .../work/<app>/<executor id>
        (victim,) = [p for p in executor_pids(marker) if _cwd_name(p) == busiest]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        while (elapsed := time.monotonic() - killed_at) < observe_s:
            executors = spark_executors(port) or []
            live = {e["id"]: e["activeTasks"] for e in executors if e["isActive"]}
            live.pop(busiest, None)
            timeline.append({"t": round(elapsed, 1), "tasks": live})
            time.sleep(0.5)
        run.signal(signal.SIGTERM)
        run.wait(120)
    remove_executor_dirs(marker)
    replacement_s = next((p["t"] for p in timeline if len(p["tasks"]) >= 2), None)
    spread_s = spread_from(timeline)
    final = timeline[-1]["tasks"] if timeline else {}
    return {
        "master": master,
        "locality_wait": LOCALITY_WAIT,
        "before_kill": before,
        "killed_executor": busiest,
        "replacement_registered_s": replacement_s,
        "spread_from_s": spread_s,
        "final_tasks_per_executor": final,
        "timeline": timeline[::4],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.executor_spread")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--observe-s", type=float, default=120.0)
    args = parser.parse_args()
    loadavg_at_start = list(os.getloadavg())
    broker = Broker.start()
    runs = []
    try:
        for rep in range(args.reps):
            names = list(CONTENDERS) if rep % 2 == 0 else list(reversed(CONTENDERS))
            for name in names:
                result = _one_run(broker, CONTENDERS[name], args.observe_s)
                result.update(contender=name, rep=rep)
                log(
                    f"rep {rep + 1}/{args.reps} {name}: before {result['before_kill']}, "
                    f"replacement at {result['replacement_registered_s']} s, spread from "
                    f"{result['spread_from_s']} s, final {result['final_tasks_per_executor']}"
                )
                runs.append(result)
    finally:
        broker.stop()
    write_result(
        "executor-spread",
        {
            "command": "python -m bench.executor_spread " + " ".join(sys.argv[1:]),
            "masters": CONTENDERS,
            "partitions": PARTITIONS,
            "runs": runs,
            "loadavg_at_start": loadavg_at_start,
            "loadavg_at_end": list(os.getloadavg()),
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()
