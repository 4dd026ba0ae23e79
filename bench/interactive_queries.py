"""Interactive queries (issue 36's targets): a point lookup's latency through the driver while
the application processes 20,000 records/s, what 500 lookups/s cost the processing, and the
time of a 10,000-entry range.

``python -m bench.interactive_queries [--reps R] [--records N] [--rate 20000] [--lookups 500]
[--seconds 30]`` (it starts Spark and a broker: run it alone) writes
``bench/results/interactive-queries-<date>.json``. On one local SparkSession (``local[2]``),
count per key (``topologies/count_per_key.py``, 2 partitions, RocksDB, 10,000 keys):

* **cost**: ``--available-now`` runs over N records, alternating without and with a load of
  500 lookups/s (random keys, from another process), R of each; the rate of a run is its
  records over its longest task call (Spark's observed ``max_task_ms``: the poll loop); the
  cost is ``1 - median(with) / median(without)``;
* **latency**: a continuous run fed at ``--rate`` records/s for ``--seconds`` by another
  process, which also asks 500 lookups/s; each lookup's time from request to parsed answer,
  once the tasks answer (the 503s of their start are counted apart); and the run's lag at the
  end (whether it kept up);
* **range**: then, the run still going, ``/stores/counts/all?limit=10000`` (every key) 20
  times.

The load runs in a process of its own (``multiprocessing`` spawn), so its requests do not
compete with the driver's HTTP server for one interpreter's lock.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import socket
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from bench.common import Broker, key_for, log, machine_info, produce_input, write_result

PARTITIONS = 2
KEYS = 10_000
TOPOLOGY = "topologies.count_per_key:build_topology"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _lookups(url: str, per_s: float, stop: Any, out: dict[str, Any], seed: int) -> None:
    """Paced lookups of random keys until ``stop``, on one kept-alive connection;
    latencies (ms) of answered ones."""
    latencies: list[float] = []
    unavailable = errors = 0
    interval = 1.0 / per_s
    next_at = time.monotonic()
    rng = random.Random(seed)
    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(str(address.hostname), address.port, timeout=10)
    while not stop.is_set():
        key = key_for(rng.randrange(KEYS), KEYS).decode()
        started = time.perf_counter()
        try:
            connection.request("GET", f"/stores/counts/keys/{key}")
            answer = connection.getresponse()
            body = answer.read()
            if answer.status == 200:
                json.loads(body)
                latencies.append((time.perf_counter() - started) * 1000)
            elif answer.status == 503:
                unavailable += 1
            elif answer.status != 404:  # 404: a key not counted yet
                errors += 1
        except OSError:
            unavailable += 1  # the endpoint is not up yet
            connection.close()
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()  # behind: do not burst to catch up
    out.setdefault("latencies", []).extend(latencies)
    out["unavailable"] = out.get("unavailable", 0) + unavailable
    out["errors"] = out.get("errors", 0) + errors


#: Lookups are asked by this many threads, each at its share of the rate (one request at a
#: time each: a lookup's round trip must not cap the rate).
ASKERS = 4


def load_process(
    url: str,
    lookups_per_s: float,
    bootstrap: str | None,
    topic: str | None,
    rate: int,
    seconds: float,
    stop: Any,
    results: Any,
) -> None:
    """Another process's load: lookups, and with a topic records at ``rate``/s for
    ``seconds`` then the range reads; without one, lookups until ``stop`` is set. Puts a
    dict on ``results``."""
    out: dict[str, Any] = {}
    askers = [
        threading.Thread(target=_lookups, args=(url, lookups_per_s / ASKERS, stop, out, seed))
        for seed in range(ASKERS)
    ]
    for asker in askers:
        asker.start()
    produced = 0
    if topic is not None and bootstrap is not None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
        )
        started = time.monotonic()
        step = rate // 100  # every 10 ms
        while time.monotonic() - started < seconds:
            for _ in range(step):
                producer.produce(topic, b"v", key_for(produced, KEYS))
                produced += 1
            producer.poll(0)
            delay = started + produced / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.flush(60)
        stop.set()
    else:
        stop.wait()
    for asker in askers:
        asker.join()
    out["produced"] = produced
    if topic is not None:
        ranges = []
        for _ in range(20):
            started = time.perf_counter()
            with urllib.request.urlopen(f"{url}/stores/counts/all?limit=10000", timeout=30) as a:
                body = json.loads(a.read())
            ranges.append(((time.perf_counter() - started) * 1000, len(body["entries"])))
        out["ranges"] = ranges
        out["counted"] = sum(e["value"] for e in body["entries"])
    results.put(out)


def _spawn(*args: Any) -> tuple[Any, Any, Any]:
    context = multiprocessing.get_context("spawn")
    results, stop = context.Queue(), context.Event()
    process = context.Process(target=load_process, args=(*args, stop, results))
    process.start()
    return process, stop, results


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: The runs' commit.interval.ms (``--commit-interval-ms``).
COMMIT_INTERVAL_MS = {"value": 1000}


def _runner(spark: Any, bootstrap: str, topic: str, available_now: bool, port: int = 0) -> Any:
    from processor_api.spark.runner import RunSettings, TopologyRunner

    settings = RunSettings(
        bootstrap_servers=bootstrap,
        application_id=f"bench-iq-{uuid.uuid4().hex[:8]}",
        state_dir=tempfile.mkdtemp(prefix="bench-iq-"),
        available_now=available_now,
        epoch_interval_s=600.0,
        query_port=port,
        config={"commit.interval.ms": str(COMMIT_INTERVAL_MS["value"])},
    )
    return TopologyRunner(TOPOLOGY, settings, topology_kwargs={"input_topic": topic}, spark=spark)


def cost_run(spark: Any, bootstrap: str, topic: str, records: int, lookups: float) -> dict:
    """One ``--available-now`` run, with ``lookups``/s from another process (0: none),
    asking from before the run starts until it ended."""
    port = _free_port()
    runner = _runner(spark, bootstrap, topic, available_now=True, port=port)
    load = _spawn(f"http://127.0.0.1:{port}", lookups, None, None, 0, 0) if lookups else None
    try:
        runner.run()
    finally:
        answered = None
        if load is not None:
            process, stop, results = load
            stop.set()
            out = results.get(timeout=60)
            process.join()
            answered = len(out["latencies"])
    observed = [
        p["observedMetrics"]["processor_api"]
        for p in runner._query.recentProgress  # noqa: SLF001 - the bench reads Spark's progress
        if "processor_api" in (p.get("observedMetrics") or {})
    ]
    done_records = sum(o["records"] for o in observed)
    loop_s = max(o["max_task_ms"] for o in observed) / 1000
    return {
        "lookups_per_s": lookups,
        "lookups_answered": answered,
        "records": done_records,
        "loop_s": round(loop_s, 3),
        "records_per_s": round(done_records / loop_s),
    }


def latency_run(
    spark: Any, bootstrap: str, topic: str, rate: int, lookups: float, seconds: float
) -> dict[str, Any]:
    """A continuous run fed at ``rate`` while ``lookups``/s ask it; then the range reads."""
    runner = _runner(spark, bootstrap, topic, available_now=False)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        while runner.query_port is None:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{runner.query_port}"
        while True:  # the tasks answer (404: nothing counted yet)
            try:
                urllib.request.urlopen(f"{url}/stores/counts/keys/x", timeout=10)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    break
            time.sleep(0.2)
        load_avg_start = os.getloadavg()[0]
        process, _, results = _spawn(url, lookups, bootstrap, topic, rate, seconds)
        out = results.get(timeout=seconds + 600)
        process.join()
        load_avg_end = os.getloadavg()[0]
    finally:
        runner.request_stop()
        thread.join(120)
    latencies = out["latencies"]
    ranges = out["ranges"]
    return {
        "rate": rate,
        "seconds": seconds,
        "produced": out["produced"],
        # every key once before, then the fed records: what the counts held at the end
        "counted_at_end": out["counted"],
        "lookups_per_s": lookups,
        "lookups_answered": len(latencies),
        "lookups_unavailable": out["unavailable"],
        "lookup_errors": out["errors"],
        "lookup_ms": {
            "median": round(statistics.median(latencies), 2),
            "p99": round(_percentile(latencies, 0.99) or 0, 2),
            "max": round(max(latencies), 2),
        },
        "range_10000": {
            "entries": sorted({n for _, n in ranges}),
            "median_ms": round(statistics.median(ms for ms, _ in ranges), 1),
            "p99_ms": round(_percentile([ms for ms, _ in ranges], 0.99) or 0, 1),
        },
        "load_average": [load_avg_start, load_avg_end],
    }


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (see the module docs)."""
    from processor_api.spark.session import build_spark_session
    from processor_api.spark.settings import RunSettings

    parser = argparse.ArgumentParser(prog="bench.interactive_queries")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--lookups", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--commit-interval-ms", type=int, default=1000)
    parser.add_argument("--latency-only", action="store_true", help="skip the cost runs")
    args = parser.parse_args(argv)
    COMMIT_INTERVAL_MS["value"] = args.commit_interval_ms
    started_load = os.getloadavg()[0]
    broker = Broker.start()
    spark = None
    try:
        backlog = f"bench-iq-backlog-{uuid.uuid4().hex[:6]}"
        broker.create_topic(backlog, PARTITIONS)
        produce_input(broker.bootstrap, backlog, args.records, KEYS)
        spark = build_spark_session(
            RunSettings(bootstrap_servers=broker.bootstrap, master=f"local[{PARTITIONS}]"),
            "bench-interactive-queries",
            PARTITIONS,
        )
        runs = []
        if not args.latency_only:
            cost_run(spark, broker.bootstrap, backlog, args.records, 0)  # warm-up
        for rep in range(0 if args.latency_only else args.reps):
            for lookups in (0.0, args.lookups) if rep % 2 == 0 else (args.lookups, 0.0):
                run = cost_run(spark, broker.bootstrap, backlog, args.records, lookups)
                log(f"cost rep {rep}: {run}")
                runs.append(run)
        live = f"bench-iq-live-{uuid.uuid4().hex[:6]}"
        broker.create_topic(live, PARTITIONS)
        produce_input(broker.bootstrap, live, KEYS, KEYS)  # every key once: ranges of 10,000
        latency = latency_run(spark, broker.bootstrap, live, args.rate, args.lookups, args.seconds)
        log(f"latency: {latency}")
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
    without = with_ = None
    if runs:
        without = statistics.median(r["records_per_s"] for r in runs if not r["lookups_per_s"])
        with_ = statistics.median(r["records_per_s"] for r in runs if r["lookups_per_s"])
    write_result(
        "interactive-queries" + ("-latency" if args.latency_only else ""),
        {
            "command": "python -m bench.interactive_queries " + " ".join(argv or []),
            "machine": machine_info(),
            "commit_interval_ms": args.commit_interval_ms,
            "load_average_start": started_load,
            "load_average_end": os.getloadavg()[0],
            "cost": {
                "records": args.records,
                "runs": runs,
                "median_records_per_s_without": without,
                "median_records_per_s_with": with_,
                "cost_fraction": (
                    None if with_ is None or without is None else round(1 - with_ / without, 4)
                ),
            },
            "latency": latency,
        },
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
