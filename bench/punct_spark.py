"""Punctuation on Spark: one SparkSession, several ``TopologyRunner`` runs, alternating.

``python -m bench.punct_spark intervals --bootstrap B --topic T --records N --reps R``
    seed 003's product count (``topologies.product_count``) over topic T, ``--available-now``,
    with STREAM_TIME punctuation every 100 ms, 1 s, 10 s of stream time, and "none" (interval
    10^12 ms: the schedule fires once, on the first record, then never). The figure is the
    wall time of ``TopologyRunner.run()`` on an already started SparkSession (planning, query
    start, processing, stop; not the JVM start, which is the same for all variants).

``python -m bench.punct_spark lag --bootstrap B --seconds S --reps R --rate N``
    ``bench.punct_topologies:build_lag_probe`` (WALL_CLOCK_TIME every 1 s) running S seconds on
    a fresh 3-partition topic, idle or with N records/s produced during the run; every
    punctuation reports fire time minus due time.

Runs in epochs, the only runtime. Results recorded before the micro-batch runtime was removed
measured it (``runtime`` absent from the result; the lag variants named their trigger,
``idle, trigger 1 s`` / ``auto``). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from typing import Any

from processor_api.logging import configure_logging

NEVER_MS = 10**12
INTERVALS = {"none": NEVER_MS, "10 s": 10_000, "1 s": 1_000, "100 ms": 100}


def _session(master: str = "local[2]") -> Any:
    from processor_api.spark.runner import RunSettings, build_spark_session

    settings = RunSettings(bootstrap_servers="unused", master=master)
    return build_spark_session(settings, "bench-punctuation", 3)


def intervals(args: argparse.Namespace) -> dict[str, Any]:
    from processor_api.spark.runner import RunSettings, TopologyRunner

    spark = _session()
    runs = []
    names = list(INTERVALS)
    for rep in range(args.reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            state_dir = tempfile.mkdtemp(prefix="bench-punct-spark-")
            app_id = f"bench-punct-{name.replace(' ', '')}-{rep}-{uuid.uuid4().hex[:6]}"
            settings = RunSettings(
                bootstrap_servers=args.bootstrap,
                application_id=app_id,
                state_dir=state_dir,
                master="local[2]",
                available_now=True,
                log_format="console",
            )
            kwargs = {
                "input_topic": args.topic,
                "output_topic": f"{app_id}-out",
                "punctuate_interval_ms": INTERVALS[name],
            }
            started = time.monotonic()
            runner = TopologyRunner(
                "topologies.product_count:build_topology",
                settings,
                topology_kwargs=kwargs,
                spark=spark,
            )
            error = None
            try:
                result = runner.run()
            except Exception as exc:  # noqa: BLE001 - recorded
                error, result = repr(exc)[:500], None
            wall = time.monotonic() - started
            run = {
                "variant": name,
                "rep": rep,
                "wall_s": wall,
                "records": result.records if result else None,
                "outputs": result.outputs if result else None,
                "changelog_records": result.changelog_records if result else None,
                "batches": result.batches if result else None,
                "ok": error is None and result is not None and result.records == args.records,
                "error": error,
            }
            print(json.dumps(run), flush=True)
            runs.append(run)
    spark.stop()
    summary = {}
    for name in names:
        walls = [r["wall_s"] for r in runs if r["variant"] == name and r["ok"]]
        outputs = [r["outputs"] for r in runs if r["variant"] == name and r["ok"]]
        med = statistics.median(walls) if walls else None
        summary[name] = {
            "interval_ms": INTERVALS[name],
            "ok": len(walls),
            "wall_s_median": med,
            "records_per_s_median": args.records / med if med else None,
            "outputs_median": statistics.median(outputs) if outputs else None,
        }
    base = summary["none"]["records_per_s_median"]
    for name in names:
        rate = summary[name]["records_per_s_median"]
        summary[name]["ratio_vs_none"] = rate / base if rate and base else None
    return {
        "records": args.records,
        "topic": args.topic,
        "reps": args.reps,
        "runs": runs,
        "summary": summary,
        "runtime": "epochs",
        "note": "wall time of TopologyRunner.run() on a running SparkSession (local[2])",
    }


def _produce_steadily(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> int:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    sent = 0
    started = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            producer.produce(topic, b"v" * 32, b"key-%04d" % (sent % 1000))
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(10)
    return sent


def _read_all(bootstrap: str, topic: str) -> list[dict]:
    from confluent_kafka import Consumer, TopicPartition

    from processor_api.kafka.offsets import end_offsets

    ends = end_offsets(bootstrap, [(topic, p) for p in range(3)])
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lag-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    out = []
    remaining = sum(ends.values())
    deadline = time.monotonic() + 30
    while remaining > 0 and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            if message.error() is None:
                out.append(json.loads(message.value()))
                remaining -= 1
    consumer.close()
    return out


def lag(args: argparse.Namespace) -> dict[str, Any]:
    from processor_api.kafka.admin import create_topics
    from processor_api.spark.runner import RunSettings, TopologyRunner

    spark = _session()
    runs = []
    variants = ["idle", "with input"]
    for rep in range(args.reps):
        for variant in variants[rep % len(variants) :] + variants[: rep % len(variants)]:
            tag = f"{'idle' if variant == 'idle' else 'input'}-{rep}-{uuid.uuid4().hex[:6]}"
            input_topic, output_topic = f"bench-lag-in-{tag}", f"bench-lag-out-{tag}"
            create_topics(args.bootstrap, [(input_topic, 3), (output_topic, 3)], exist_ok=False)
            settings = RunSettings(
                bootstrap_servers=args.bootstrap,
                application_id=f"bench-lag-{tag}",
                state_dir=tempfile.mkdtemp(prefix="bench-lag-"),
                master="local[2]",
                log_format="console",
            )
            runner = TopologyRunner(
                "bench.punct_topologies:build_lag_probe",
                settings,
                spark=spark,
                topology_kwargs={
                    "input_topic": input_topic,
                    "output_topic": output_topic,
                    "interval_ms": args.interval_ms,
                },
            )
            stop_producing = threading.Event()
            producer = None
            if variant == "with input":
                producer = threading.Thread(
                    target=_produce_steadily,
                    args=(args.bootstrap, input_topic, args.rate, stop_producing),
                    daemon=True,
                )
                producer.start()
            timer = threading.Timer(args.seconds, runner.request_stop)
            timer.start()
            error = None
            try:
                result = runner.run()
            except Exception as exc:  # noqa: BLE001
                error, result = repr(exc)[:500], None
            timer.cancel()
            stop_producing.set()
            if producer is not None:
                producer.join(15)
            fired = _read_all(args.bootstrap, output_topic)
            first_fire = {}
            for row in sorted(fired, key=lambda r: r["fire_ms"]):
                first_fire.setdefault(row["task"], row["fire_ms"])
            steady = [r["lag_ms"] for r in fired if r["due_ms"] >= first_fire[r["task"]]]
            run = {
                "variant": variant,
                "rep": rep,
                "seconds": args.seconds,
                "records": result.records if result else None,
                "punctuations": len(fired),
                "lags_ms": [r["lag_ms"] for r in fired],
                "steady_lags_ms": steady,
                "error": error,
            }
            print(json.dumps({k: v for k, v in run.items() if "lags" not in k}), flush=True)
            runs.append(run)
    spark.stop()
    summary = {}
    for name in variants:
        lags = sorted(x for r in runs if r["variant"] == name for x in r["steady_lags_ms"])
        all_lags = sorted(x for r in runs if r["variant"] == name for x in r["lags_ms"])

        def pct(values: list[int], q: float) -> float | None:
            if not values:
                return None
            return values[min(len(values) - 1, int(q * len(values)))]

        summary[name] = {
            "punctuations": len(all_lags),
            "steady_punctuations": len(lags),
            "p50_ms": pct(lags, 0.5),
            "p90_ms": pct(lags, 0.9),
            "p99_ms": pct(lags, 0.99),
            "max_ms": lags[-1] if lags else None,
            "min_ms": lags[0] if lags else None,
            "max_incl_warmup_ms": all_lags[-1] if all_lags else None,
        }
    return {
        "seconds": args.seconds,
        "reps": args.reps,
        "rate_records_per_s": args.rate,
        "interval_ms": args.interval_ms,
        "runtime": "epochs",
        "runs": runs,
        "summary": summary,
        "note": "steady = punctuations due at or after the task's first firing "
        "(excludes the catch-up firing of the query's start-up)",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["intervals", "lag"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic")
    parser.add_argument("--records", type=int)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--interval-ms", type=int, default=1000)
    args = parser.parse_args()
    configure_logging("console", level="WARNING")
    result = intervals(args) if args.mode == "intervals" else lag(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
