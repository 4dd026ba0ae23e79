"""Timers compared: "every second, emit every key's count".

``python -m bench.timers --bootstrap HOST:PORT --keys N --seconds S --reps R``

Two contenders on the same input (a fresh topic of 3 partitions holding one record per key for
``N`` keys, produced before the runs), each a continuous query running ``S`` seconds on
``local[2]``, alternating, ``R`` runs each:

* ``transformWithStateInPandas`` (Spark's own, ``timeMode="ProcessingTime"``): one
  ``ValueState`` count and one processing-time timer per key; ``handleExpiredTimer`` emits the
  key's count with the timer's due and fire times and registers the next timer one second
  later. Spark fires expired timers in micro-batches (trigger: 1 s); its output rows are
  counted in a ``foreachBatch`` sink (they do not go to Kafka). Its input comes from the
  benchmark's Kafka data source (``bench/tws_source.py``; until the micro-batch runtime was
  removed, the library's ``processor_api_kafka``).
* ``run-topology`` (``bench.timers:build_topology``): a count per key in a RocksDB store and
  one WALL_CLOCK_TIME punctuation per task every second that forwards the whole store
  (``forward_all``) to a Kafka topic, plus one record per firing with its due and fire times.
  Runs in epochs with the runtime's defaults (recorded results before the micro-batch runtime
  was removed ran it in micro-batches, the trigger chosen by the runtime).

Figures: entries emitted per second of steady run (after each contender's first emission) and
lateness (fire time minus due time) p50/p99 of the timers / punctuations. Quix Streams has no
timers (its issue #790), so it has no row. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from processor_api import Processor, ProcessorContext, PunctuationType, Record, Serdes, Stores
from processor_api import Topology as _Topology
from processor_api.engine.punctuation import next_due_after

INTERVAL_MS = 1000


# ------------------------------------------------------------------ run-topology contender
class EmitCounts(Processor):
    """Counts per key; every second forwards every count, and a lateness record."""

    DUE = "\x00due"

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("counts")
        self.meta = context.get_state_store("meta")
        if self.meta.get(self.DUE) is None:
            self.meta.put(self.DUE, context.current_system_time_ms() + INTERVAL_MS)
        context.schedule(INTERVAL_MS, PunctuationType.WALL_CLOCK_TIME, self.emit)

    def process(self, record: Record) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def emit(self, timestamp: int) -> None:
        fired = time.time_ns() // 1_000_000
        with self.store.all() as entries:
            count = self.context.forward_all(entries, timestamp, "counts-out")
        due = self.meta.get(self.DUE)
        self.context.forward(
            Record(
                self.context.task_id,
                {"due_ms": due, "fire_ms": fired, "entries": count},
                timestamp,
            ),
            "firings-out",
        )
        self.meta.put(self.DUE, next_due_after(due, INTERVAL_MS, timestamp))


def build_topology(
    *, input_topic: str, counts_topic: str, firings_topic: str, **_: Any
) -> _Topology:
    counts = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    meta = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("meta"), Serdes.string(), Serdes.long()
    )
    return (
        _Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.bytes())
        .add_processor("emit", EmitCounts, "in")
        .add_state_store(counts, "emit")
        .add_state_store(meta, "emit")
        .add_sink("counts-out", counts_topic, "emit", key_serde=Serdes.string(),
                  value_serde=Serdes.long())
        .add_sink("firings-out", firings_topic, "emit", key_serde=Serdes.string(),
                  value_serde=Serdes.json())
    )  # fmt: skip


def _read_json(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from processor_api.kafka.offsets import end_offsets
    from processor_api.kafka.reader import PartitionReader

    ends = end_offsets(bootstrap, [(topic, p) for p in range(3)])
    out: list[dict[str, Any]] = []
    with PartitionReader(
        bootstrap, f"bench-timers-{uuid.uuid4().hex[:6]}", isolation_level="read_uncommitted"
    ) as reader:
        for (_, partition), end in sorted(ends.items()):
            for messages in reader.read(topic, partition, 0, end):
                out.extend(json.loads(m.value()) for m in messages)
    return out


def run_topology_contender(spark: Any, args: argparse.Namespace, input_topic: str) -> dict:
    from processor_api.kafka.admin import create_topics
    from processor_api.kafka.offsets import end_offsets
    from processor_api.spark.runner import RunSettings, TopologyRunner

    tag = uuid.uuid4().hex[:6]
    counts_topic, firings_topic = f"bench-timers-counts-{tag}", f"bench-timers-firings-{tag}"
    create_topics(args.bootstrap, [(counts_topic, 3, {}), (firings_topic, 3, {})], exist_ok=False)
    settings = RunSettings(
        bootstrap_servers=args.bootstrap,
        application_id=f"bench-timers-{tag}",
        state_dir=tempfile.mkdtemp(prefix="bench-timers-"),
        master=args.master,
        log_format="console",
    )
    runner = TopologyRunner(
        "bench.timers:build_topology",
        settings,
        spark=spark,
        topology_kwargs={
            "input_topic": input_topic,
            "counts_topic": counts_topic,
            "firings_topic": firings_topic,
        },
    )
    timer = threading.Timer(args.seconds, runner.request_stop)
    timer.start()
    error = None
    try:
        runner.run()
    except Exception as exc:  # noqa: BLE001 - reported in the result
        error = repr(exc)[:500]
    timer.cancel()
    firings = _read_json(args.bootstrap, firings_topic)
    emitted = sum(end_offsets(args.bootstrap, [(counts_topic, p) for p in range(3)]).values())
    return _summarize(
        "run-topology",
        [(f["due_ms"], f["fire_ms"], f["entries"]) for f in firings],
        emitted,
        error,
    )


# ------------------------------------------------------- transformWithStateInPandas contender
class TimedCount(StatefulProcessor):
    """One ValueState count and one processing-time timer per key."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "value long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802, ANN001
        added = sum(len(frame) for frame in rows)
        known = self.count.exists()
        self.count.update(((self.count.get()[0] if known else 0) + added,))
        if not known:
            now = timerValues.getCurrentProcessingTimeInMs()
            self.handle.registerTimer(now + INTERVAL_MS)
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, ANN001
        due = expiredTimerInfo.getExpiryTimeInMs()
        fired = time.time_ns() // 1_000_000
        self.handle.registerTimer(next_due_after(due, INTERVAL_MS, fired))
        yield pd.DataFrame(
            {"key": [key[0]], "count": [self.count.get()[0]], "due": [due], "fired": [fired]}
        )

    def close(self) -> None:
        pass


def tws_contender(spark: Any, args: argparse.Namespace, input_topic: str) -> dict:
    from pyspark.sql import functions as F

    from bench.tws_source import BenchKafkaSource

    spark.dataSource.register(BenchKafkaSource)
    firings: list[tuple[int, int, int]] = []
    emitted = {"rows": 0}

    def on_batch(frame, batch_id: int) -> None:  # noqa: ANN001
        rows = frame.groupBy("due").agg(F.min("fired").alias("fired"), F.count("*").alias("n"))
        for row in rows.collect():
            firings.append((int(row["due"]), int(row["fired"]), int(row["n"])))
            emitted["rows"] += int(row["n"])

    checkpoint = tempfile.mkdtemp(prefix="bench-timers-tws-")
    source = (
        spark.readStream.format(BenchKafkaSource.name())
        .option("bootstrap.servers", args.bootstrap)
        .option("topic", input_topic)
        .load()
    )
    query = (
        source.select(F.col("key").cast("string").alias("key"), "value")
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=TimedCount(),
            outputStructType="key string, count long, due long, fired long",
            outputMode="Update",
            timeMode="ProcessingTime",
        )
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    error = None
    try:
        query.awaitTermination(args.seconds)
    finally:
        query.stop()
    if query.exception() is not None:
        error = str(query.exception())[:500]
    return _summarize("transformWithStateInPandas", firings, emitted["rows"], error)


# --------------------------------------------------------------------------- common
def _summarize(
    name: str, firings: list[tuple[int, int, int]], emitted: int, error: str | None
) -> dict:
    """Entries per second over the steady part (from the first firing) and lateness."""
    lateness = sorted(fired - due for due, fired, _ in firings)
    result: dict[str, Any] = {"contender": name, "emitted": emitted, "error": error}
    if firings:
        first = min(fired for _, fired, _ in firings)
        last = max(fired for _, fired, _ in firings)
        steady = sum(n for _, fired, n in firings if fired > first)
        span_s = (last - first) / 1000
        result.update(
            {
                "firings": len(firings),
                "entries_per_s": steady / span_s if span_s > 0 else None,
                "lateness_p50_ms": lateness[len(lateness) // 2],
                "lateness_p99_ms": lateness[min(len(lateness) - 1, int(0.99 * len(lateness)))],
                "lateness_max_ms": lateness[-1],
            }
        )
    return result


def _fill(bootstrap: str, keys: int) -> str:
    from processor_api.kafka.admin import create_topics
    from processor_api.kafka.producer import DeliveryTracker, make_producer

    topic = f"bench-timers-in-{keys}-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [(topic, 3, {})], exist_ok=False)
    tracker = DeliveryTracker(make_producer(bootstrap))
    tracker.produce_values(topic, [(b"key-%07d" % i, b"v") for i in range(keys)], 1_000)
    tracker.flush_and_check(120)
    return topic


def _tws_session(master: str) -> Any:
    """A plain SparkSession with the RocksDB state store (what transformWithState requires)."""
    from pyspark.sql import SparkSession

    python_path = os.pathsep.join(dict.fromkeys([os.getcwd(), *(p for p in sys.path if p)]))
    os.environ["PYTHONPATH"] = python_path  # the JVM and its Python workers inherit it
    spark = (
        SparkSession.builder.master(master)
        .appName("bench-timers-transformWithStateInPandas")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "3")
        .config("spark.sql.adaptive.enabled", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.executorEnv.PYTHONPATH", python_path)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _one_run(args: argparse.Namespace) -> dict:
    """One contender in this process (each in its own process: its own SparkSession)."""
    from processor_api.logging import configure_logging

    configure_logging("console", level="WARNING")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.contender == "run-topology":
        from processor_api.spark.runner import RunSettings, build_spark_session

        spark = build_spark_session(
            RunSettings(bootstrap_servers=args.bootstrap, master=args.master),
            "bench-timers",
            3,
        )
        result = run_topology_contender(spark, args, args.input_topic)
    else:
        spark = _tws_session(args.master)
        result = tws_contender(spark, args, args.input_topic)
    spark.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--contender", choices=["run-topology", "transformWithStateInPandas"])
    parser.add_argument("--input-topic")
    args = parser.parse_args()
    if args.contender:
        print(json.dumps(_one_run(args)), flush=True)
        return

    import subprocess

    input_topic = _fill(args.bootstrap, args.keys)
    contenders = ["run-topology", "transformWithStateInPandas"]
    runs = []
    for rep in range(args.reps):
        for name in contenders[rep % 2 :] + contenders[: rep % 2]:
            cmd = [
                sys.executable, "-m", "bench.timers", "--bootstrap", args.bootstrap,
                "--seconds", str(args.seconds), "--master", args.master,
                "--contender", name, "--input-topic", input_topic,
            ]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            result = (
                json.loads(lines[-1])
                if lines
                else {"contender": name, "error": done.stderr[-2000:]}
            )
            result["rep"] = rep
            print(json.dumps(result), file=sys.stderr, flush=True)
            runs.append(result)
    summary = {}
    for name in contenders:
        mine = [r for r in runs if r["contender"] == name and r.get("entries_per_s")]
        rates = sorted(r["entries_per_s"] for r in mine)
        p50s = sorted(r["lateness_p50_ms"] for r in mine)
        summary[name] = {
            "entries_per_s_median": rates[len(rates) // 2] if rates else None,
            "lateness_p50_ms_median": p50s[len(p50s) // 2] if p50s else None,
            "lateness_p99_ms_max": max((r["lateness_p99_ms"] for r in mine), default=None),
        }
    print(
        json.dumps(
            {
                "keys": args.keys,
                "seconds": args.seconds,
                "reps": args.reps,
                "interval_ms": INTERVAL_MS,
                "runs": runs,
                "summary": summary,
                "load_average": os.getloadavg(),
                "quix_streams": "no timers (quixio/quix-streams issue #790): not a contender",
            }
        )
    )


if __name__ == "__main__":
    main()
