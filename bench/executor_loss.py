"""Executor loss: how soon a run on ``local-cluster[2,1,1024]`` answers again after kill -9 of
one executor JVM (``tests/harness/executor_loss.py``: separate state directories per executor,
snapshots after every commit, ``exactly_once_v2``).

``python -m bench.executor_loss [--reps R]`` (under ``flock /tmp/spark-tests.lock``: it starts
Spark) writes ``bench/results/executor-loss-<date>.json``: per run, the seconds from the kill
until every output partition had a committed output of the wave produced right after the kill
(the moved task's partition included), and until every notification was committed; each run is
checked exact (committed notifications and final stores equal the reference fold).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench.common import Broker, log, machine_info, stats, write_result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.executor_loss")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from tests.harness.executor_loss import run_executor_loss
    from tests.integration.test_local_cluster import _executor_dirs

    loadavg_at_start = list(os.getloadavg())
    broker = Broker.start()
    runs = []
    try:
        for rep in range(args.reps):
            loss = run_executor_loss(broker._kafka, Path(tempfile.mkdtemp()), _executor_dirs)
            comparison = loss.comparison()
            run = {
                "rep": rep,
                "first_outputs_after_kill_s": round(loss.first_outputs_after_kill_s, 2),
                "complete_after_kill_s": round(loss.complete_after_kill_s, 2),
                "restores_from_snapshots": len(loss.restores_from_snapshots),
                "exact": comparison.equal and comparison.totals_equal,
                "aborted_shown": len(loss.aborted),
            }
            log(f"rep {rep + 1}/{args.reps}: {run}")
            runs.append(run)
    finally:
        broker.stop()
    write_result(
        "executor-loss",
        {
            "command": "python -m bench.executor_loss " + " ".join(sys.argv[1:]),
            "master": "local-cluster[2,1,1024]",
            "runs": runs,
            "first_outputs_after_kill_s": stats([r["first_outputs_after_kill_s"] for r in runs]),
            "complete_after_kill_s": stats([r["complete_after_kill_s"] for r in runs]),
            "all_exact": all(r["exact"] for r in runs),
            "loadavg_at_start": loadavg_at_start,
            "loadavg_at_end": list(os.getloadavg()),
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()
