"""What the metrics cost: throughput with and without ``--metrics-port``, and a scrape's time.

``python -m bench.metrics_cost [--records N] [--reps R] [--tasks T]`` (run it under
``flock /tmp/spark-tests.lock``: it starts Spark) writes ``bench/results/metrics-<date>.json``:

* **throughput**: count per key (``topologies/count_per_key.py``, 3 partitions, RocksDB) in
  epochs, ``--available-now``, on one local SparkSession (``local[3]``), runs with and without
  metrics alternating, R of each. The steady-state rate of a run is its records over its longest
  task call (``max_task_ms`` of Spark's observed metrics: the epoch's poll loop, without the
  query's start and stop); the cost is ``1 - median(with) / median(without)``;
* **per-record cost**: ``TaskMetrics.observe_batch`` alone on 500-record batches (what a poll
  batch adds), in ns per record, next to the engine's time per record in those runs;
* **scrape**: T tasks' snapshots (2 stores, 2 drop reasons, filled histograms, 2 input
  partitions each) behind the real collector and HTTP server: ``GET /metrics`` timed 200 times
  (median and p99), the body parsed by prometheus_client's parser to check it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import urllib.request
import uuid
from types import SimpleNamespace
from typing import Any

from bench.common import Broker, log, machine_info, produce_input, write_result

PARTITIONS = 3
KEYS = 10_000


def epoch_run(
    spark: Any,
    bootstrap: str,
    topic: str,
    *,
    metrics: bool = False,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``--available-now`` run of count per key in epochs; its steady-state rate."""
    from processor_api.spark.runner import RunSettings, TopologyRunner

    app_id = f"bench-metrics-{uuid.uuid4().hex[:8]}"
    settings = RunSettings(
        bootstrap_servers=bootstrap,
        application_id=app_id,
        state_dir=tempfile.mkdtemp(prefix="bench-metrics-"),
        available_now=True,
        metrics_port=0 if metrics else None,
        config=dict(config or {}),
    )
    runner = TopologyRunner(
        "topologies.count_per_key:build_topology",
        settings,
        topology_kwargs={"input_topic": topic},
        spark=spark,
    )
    started = time.monotonic()
    result = runner.run()
    wall_s = time.monotonic() - started
    observed = [
        p["observedMetrics"]["processor_api"]
        for p in runner._query.recentProgress  # noqa: SLF001 - the bench reads Spark's progress
        if "processor_api" in (p.get("observedMetrics") or {})
    ]
    records = sum(o["records"] for o in observed)
    loop_s = max(o["max_task_ms"] for o in observed) / 1000
    return {
        "metrics": metrics,
        "records": records,
        "run_records": result.records,
        "loop_s": round(loop_s, 3),
        "wall_s": round(wall_s, 3),
        "records_per_s": round(records / loop_s),
    }


def throughput(records: int, reps: int) -> dict[str, Any]:
    """Alternating runs with and without metrics (see the module docs)."""
    from processor_api.spark.session import build_spark_session
    from processor_api.spark.settings import RunSettings

    broker = Broker.start()
    spark = None
    try:
        topic = f"bench-metrics-{uuid.uuid4().hex[:6]}"
        broker.create_topic(topic, PARTITIONS)
        produce_input(broker.bootstrap, topic, records, KEYS)
        spark = build_spark_session(
            RunSettings(bootstrap_servers=broker.bootstrap, master=f"local[{PARTITIONS}]"),
            "bench-metrics",
            PARTITIONS,
        )
        epoch_run(spark, broker.bootstrap, topic)  # warm-up: JVM, imports
        runs = []
        for rep in range(reps):
            for metrics in (False, True) if rep % 2 == 0 else (True, False):
                run = epoch_run(spark, broker.bootstrap, topic, metrics=metrics)
                assert run["records"] == records, run
                log(f"rep {rep} metrics={metrics}: {run}")
                runs.append(run)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
    without = statistics.median(r["records_per_s"] for r in runs if not r["metrics"])
    with_ = statistics.median(r["records_per_s"] for r in runs if r["metrics"])
    return {
        "records": records,
        "partitions": PARTITIONS,
        "reps": reps,
        "runs": runs,
        "median_records_per_s_without": without,
        "median_records_per_s_with": with_,
        "cost_fraction": round(1 - with_ / without, 4),
    }


def per_record_cost(batch: int = 500, rounds: int = 2_000) -> dict[str, Any]:
    """``observe_batch`` on ``batch``-record batches, ns per record (median of 5 timings)."""
    from processor_api.engine.records import InputRecord
    from processor_api.runtime.metrics import TaskMetrics

    now = int(time.time() * 1000)
    records = [InputRecord("t", 0, i, now - 5, b"k", b"v") for i in range(batch)]
    metrics = TaskMetrics("0_0")
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            metrics.observe_batch(records, batch, 0.01, 10)
        timings.append((time.perf_counter() - started) / (rounds * batch) * 1e9)
    return {"batch": batch, "ns_per_record_median": round(statistics.median(timings), 1)}


def scrape(tasks: int, requests: int = 200) -> dict[str, Any]:
    """``GET /metrics`` with ``tasks`` tasks' samples (see the module docs)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from processor_api.engine.records import InputRecord
    from processor_api.runtime.metrics import ProcessSnapshot, TaskMetrics
    from processor_api.spark.metrics_collector import FeedState, RunCollector
    from processor_api.spark.metrics_server import MetricsServer

    state = FeedState()
    now = int(time.time() * 1000)
    records = [InputRecord("t", 0, i, now - i, b"k", b"v") for i in range(200)]
    for n in range(tasks):
        task_id = f"{n // 10}_{n % 10}"
        metrics = TaskMetrics(task_id)
        metrics.observe_batch(records, 200, 0.004, 150)
        metrics.commit_latency.observe(0.03)
        metrics.punctuation_lateness.observe(0.002)
        metrics.dropped = {"deserialization": 1, "delivery": 0}
        metrics.restored = {"counts": 10, "totals": 20}
        metrics.restore_remaining = {"counts": 0, "totals": 0}
        metrics.store_entries = {"counts": 1_000, "totals": 2_000}
        metrics.store_bytes = {"counts": 1 << 20, "totals": 2 << 20}
        metrics.phase = "running"
        state.tasks[task_id] = metrics.snapshot("bench")
        for topic in ("orders", "orders-repartition"):
            state.lag[(task_id, topic, n % 10)] = n
        state.hosts[("executor", 1000 + n)] = ProcessSnapshot(
            1000 + n, "executor", time.time(), 200 << 20, 12.5
        )
    registry = CollectorRegistry()
    registry.register(RunCollector(SimpleNamespace(state=state), lambda: 7))
    server = MetricsServer(registry, lambda: (True, ""), lambda: (True, ""), port=0)
    timings = []
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        body = b""
        for _ in range(requests):
            started = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read()
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        server.close()
    samples = sum(len(f.samples) for f in text_string_to_metric_families(body.decode()))
    timings.sort()
    return {
        "tasks": tasks,
        "requests": requests,
        "samples": samples,
        "body_bytes": len(body),
        "median_ms": round(statistics.median(timings), 2),
        "p99_ms": round(timings[int(len(timings) * 0.99) - 1], 2),
        "max_ms": round(timings[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_cost")
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "command": "python -m bench.metrics_cost "
        + f"--records {args.records} --reps {args.reps} --tasks {args.tasks}",
        "loadavg_at_start": list(os.getloadavg()),
    }
    result["scrape"] = scrape(args.tasks)
    log(f"scrape: {result['scrape']}")
    result["per_record"] = per_record_cost()
    log(f"per record: {result['per_record']}")
    if not args.skip_throughput:
        result["throughput"] = throughput(args.records, args.reps)
        log(f"throughput: cost {result['throughput']['cost_fraction']:.2%}")
    result["loadavg_at_end"] = list(os.getloadavg())
    result["machine"] = machine_info()
    write_result("metrics", result, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
