"""What snapshots cost: steady-state throughput with snapshots every second against none.

``python -m bench.snapshot_cost [--records N] [--reps R] [--interval-ms MS]`` (run it under
``flock /tmp/spark-tests.lock``: it starts Spark) writes ``bench/results/snapshot-cost-<date>.json``:
count per key (``topologies/count_per_key.py``, 3 partitions, RocksDB) in epochs,
``--available-now``, on one local SparkSession, alternating runs with
``state.snapshot.interval.ms=MS`` (1,000 by default: 60 times the default rate, so a run of a few
seconds takes several snapshots per task) and with ``-1`` (none), both committing every
``--commit-interval-ms`` (1,000: a snapshot follows a commit). The rate of a run is its
records over its longest task call (as ``bench/metrics_cost.py``); the cost is
``1 - median(with) / median(without)``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import uuid
from typing import Any

from bench.common import Broker, log, machine_info, produce_input, write_result
from bench.metrics_cost import KEYS, PARTITIONS, epoch_run


def _snapshot_files(location: str) -> int:
    return sum(len(files) for _, _, files in os.walk(location))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.snapshot_cost")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=1_000)
    parser.add_argument("--commit-interval-ms", type=int, default=1_000)
    args = parser.parse_args()
    from processor_api.spark.session import build_spark_session
    from processor_api.spark.settings import RunSettings

    loadavg_at_start = list(os.getloadavg())
    broker = Broker.start()
    spark = None
    runs = []
    try:
        topic = f"bench-snapshots-{uuid.uuid4().hex[:6]}"
        broker.create_topic(topic, PARTITIONS)
        produce_input(broker.bootstrap, topic, args.records, KEYS)
        spark = build_spark_session(
            RunSettings(bootstrap_servers=broker.bootstrap, master=f"local[{PARTITIONS}]"),
            "bench-snapshots",
            PARTITIONS,
        )
        epoch_run(spark, broker.bootstrap, topic)  # warm-up: JVM, imports
        for rep in range(args.reps):
            for snapshots in (False, True) if rep % 2 == 0 else (True, False):
                location = tempfile.mkdtemp(prefix="bench-snapshot-location-")
                config = {
                    "commit.interval.ms": args.commit_interval_ms,
                    "state.snapshot.interval.ms": args.interval_ms if snapshots else -1,
                    "state.snapshot.location": location,
                }
                run = epoch_run(spark, broker.bootstrap, topic, config=config)
                assert run["records"] == args.records, run
                run.update(snapshots=snapshots, snapshot_files=_snapshot_files(location))
                log(f"rep {rep} snapshots={snapshots}: {run}")
                runs.append(run)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
    without = statistics.median(r["records_per_s"] for r in runs if not r["snapshots"])
    with_ = statistics.median(r["records_per_s"] for r in runs if r["snapshots"])
    result: dict[str, Any] = {
        "command": f"python -m bench.snapshot_cost --records {args.records} --reps {args.reps} "
        f"--interval-ms {args.interval_ms} --commit-interval-ms {args.commit_interval_ms}",
        "records": args.records,
        "keys": KEYS,
        "partitions": PARTITIONS,
        "interval_ms": args.interval_ms,
        "commit_interval_ms": args.commit_interval_ms,
        "runs": runs,
        "median_records_per_s_without": without,
        "median_records_per_s_with": with_,
        "cost_fraction": round(1 - with_ / without, 4),
        "loadavg_at_start": loadavg_at_start,
        "loadavg_at_end": list(os.getloadavg()),
        "machine": machine_info(),
    }
    write_result("snapshot-cost", result, indent=1, sort_keys=True)
    log(f"snapshots every {args.interval_ms} ms cost {result['cost_fraction']:.2%} of throughput")


if __name__ == "__main__":
    main()
