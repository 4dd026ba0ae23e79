"""Punctuation benchmarks.

In-process (the task engine without Spark: ``processor_api.engine.task.Task``, real RocksDB
stores, change logging on):

* :func:`punctuation_cost` - one punctuation of seed 003's product count (forwards the whole
  store) versus store size, next to its parts: a raw RocksDB scan and a typed ``store.all()``.
  The collector counts the records it is handed and keeps none, as the Kafka producer does
  (a ``ListCollector`` holding a million records makes CPython's collector walk them several
  times: ~0.5 s at 1M). With a broker, the same punctuation is also measured into Kafka: a
  ``KafkaCollector`` producing to the embedded broker, until every record is acknowledged.
* :func:`check_overhead` - the per-record cost of stream-time punctuation checks: count per key
  with 0, 1 and 10 STREAM_TIME schedules that are never due, plus the check alone.

On Spark (``bench/punct_spark.py``, one SparkSession, runs alternating):

* records per second with and without punctuation at 100 ms, 1 s and 10 s of stream time;
* wall-clock punctuation lag (fire time minus due time), idle and with input.
"""

from __future__ import annotations

import gc
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    BASE_TIMESTAMP_MS,
    PYTHON,
    RECORDS_PER_MS,
    Broker,
    key_for,
    last_json_line,
    log,
    run_command,
    stats,
)
from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task
from processor_api.topology import Topology

_LONG = struct.Struct(">q")


def make_task(topology: Topology, task_dir: Path, collector: ListCollector) -> Task:
    sub = topology.subtopologies()[0]
    task = Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(state_dir=task_dir, timestamp_fn=ts),
        collector=collector,
        config=StreamsConfig.from_dict({"application_id": "bench"}),
    )
    task.initialize()
    return task


# ------------------------------------------------------------------ punctuation vs store size
def _fill(task: Task, store: str, size: int) -> None:
    inner = task.stores[store].inner
    chunk = 100_000
    for start in range(0, size, chunk):
        inner.put_all(
            [
                (b"key-%07d" % i, _LONG.pack(i % 97 + 1))
                for i in range(start, min(size, start + chunk))
            ]
        )
    inner.flush()


class CountingCollector:
    """Counts the records handed over and keeps none (as a producer does once it sent them)."""

    def __init__(self) -> None:
        self.count = 0

    def send(self, record: Any) -> None:
        self.count += 1

    def partition_count(self, topic: str) -> int:
        return 1

    def drain(self) -> int:
        count, self.count = self.count, 0
        return count


class SwitchCollector:
    """The task's collector, pointing at the counting collector or at the Kafka one.

    The task's sinks keep the collector they were built with, so the target is switched here.
    ``send`` is the target's own bound method (an instance attribute), so the sinks call the
    target directly and the switch costs nothing per record.
    """

    def __init__(self, target: Any) -> None:
        self.use(target)

    def use(self, target: Any) -> None:
        self.target = target
        self.send = target.send
        self.partition_count = target.partition_count
        self.send_values = getattr(target, "send_values", None)


def _kafka_collector(bootstrap: str, transactional_id: str | None = None) -> Any:
    from processor_api.kafka.collector import KafkaCollector
    from processor_api.kafka.producer import DeliveryTracker, make_producer

    producer = make_producer(bootstrap, transactional_id=transactional_id)
    if transactional_id is not None:
        producer.init_transactions(30)
    return KafkaCollector(DeliveryTracker(producer), bootstrap)


def _bare_producer_run(
    producer: Any, topic: str, entries: list[tuple[bytes, bytes]], timestamp: int, checked: bool
) -> int:
    """What a hand-written loop does: produce every entry, then flush until all are reported.

    ``checked``: with a delivery callback that counts failures (the loop knows its records
    arrived); without, ``flush`` returning 0 only says no record is left in the queue, failed
    or not.
    """
    failed = [0]

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failed[0] += 1

    produce, poll = producer.produce, producer.poll
    for i, (key, value) in enumerate(entries):
        while True:
            try:
                if checked:
                    produce(topic, value, key, on_delivery=on_delivery, timestamp=timestamp)
                else:
                    produce(topic, value, key, timestamp=timestamp)
                break
            except BufferError:
                poll(0.05)
        if not i & 1023:
            poll(0)
    if producer.flush(300) or failed[0]:
        raise RuntimeError("bare producer: records not acknowledged")
    return len(entries)


def _cost_for_size(
    topology: Topology,
    size: int,
    reps: int,
    bootstrap: str | None = None,
    output_topic: str | None = None,
) -> dict[str, Any]:
    log(f"punctuation cost: store of {size} keys")
    root = Path(tempfile.mkdtemp(prefix="bench-punct-"))
    collector = CountingCollector()
    switch = SwitchCollector(collector)
    task = make_task(topology, root / "0_0", switch)  # type: ignore[arg-type]
    _fill(task, "Counts", size)
    store = task.stores["Counts"].store
    inner = task.stores["Counts"].inner
    offset = 0
    samples: dict[str, list[float]] = {"punctuation": [], "store_all": [], "rocksdb_scan": []}
    entries: dict[str, int] = {}

    def fire() -> float:
        nonlocal offset
        # a record at the next grid point fires the punctuation once
        record = InputRecord("logs", 0, offset, offset * 1000, b"key-0000000", b"v")
        offset += 1
        started = time.perf_counter()
        task.process_batch([record])
        return started

    def punctuation() -> int:
        collector.drain()
        started = fire()
        samples["punctuation"].append(time.perf_counter() - started)
        task.flush()
        return collector.drain()

    parts: list[tuple[str, Any]] = []
    if bootstrap is not None and output_topic is not None:
        from processor_api.kafka.producer import make_producer

        kafka = _kafka_collector(bootstrap)
        kafka_eos = _kafka_collector(bootstrap, transactional_id=f"bench-punct-{time.time_ns()}")
        bare = make_producer(bootstrap)
        raw_entries = list(inner.range(None, None))
        # a million long-lived tuples would make every full collection during the other
        # contenders walk them; the task host freezes its long-lived objects the same way
        gc.freeze()
        names = ("punctuation_to_kafka", "punctuation_to_kafka_eos", "bare_producer")
        for name in names + ("bare_producer_checked",):
            samples[name] = []

        def punctuation_to_kafka() -> int:
            switch.use(kafka)
            try:
                kafka.tracker.reset()
                sent_before = kafka.sent
                started = fire()
                kafka.tracker.flush_and_check(300)
                samples["punctuation_to_kafka"].append(time.perf_counter() - started)
            finally:
                switch.use(collector)
            task.flush()
            return kafka.sent - sent_before

        def punctuation_to_kafka_eos() -> int:
            switch.use(kafka_eos)
            try:
                kafka_eos.tracker.reset()
                sent_before = kafka_eos.sent
                producer = kafka_eos.tracker.producer
                started = time.perf_counter()
                producer.begin_transaction()
                fire()
                kafka_eos.tracker.flush_and_check(300)
                producer.commit_transaction(60)
                samples["punctuation_to_kafka_eos"].append(time.perf_counter() - started)
            finally:
                switch.use(collector)
            task.flush()
            return kafka_eos.sent - sent_before

        def bare_producer() -> int:
            started = time.perf_counter()
            n = _bare_producer_run(bare, output_topic, raw_entries, offset * 1000, False)
            samples["bare_producer"].append(time.perf_counter() - started)
            return n

        def bare_producer_checked() -> int:
            started = time.perf_counter()
            n = _bare_producer_run(bare, output_topic, raw_entries, offset * 1000, True)
            samples["bare_producer_checked"].append(time.perf_counter() - started)
            return n

        parts += [
            ("punctuation_to_kafka", punctuation_to_kafka),
            ("bare_producer", bare_producer),
            ("punctuation_to_kafka_eos", punctuation_to_kafka_eos),
            ("bare_producer_checked", bare_producer_checked),
        ]

    def store_all() -> int:
        started = time.perf_counter()
        n = 0
        with store.all() as it:
            for _ in it:
                n += 1
        samples["store_all"].append(time.perf_counter() - started)
        return n

    def rocksdb_scan() -> int:
        started = time.perf_counter()
        n = 0
        for _ in inner.range(None, None):
            n += 1
        samples["rocksdb_scan"].append(time.perf_counter() - started)
        return n

    parts += [
        ("punctuation", punctuation),
        ("store_all", store_all),
        ("rocksdb_scan", rocksdb_scan),
    ]
    punctuation()  # warm-up: block cache, first firing
    samples["punctuation"].clear()
    for rep in range(reps):
        for name, fn in parts[rep % len(parts) :] + parts[: rep % len(parts)]:
            gc.collect()
            entries[name] = fn()
    task.close()
    gc.unfreeze()
    shutil.rmtree(root, ignore_errors=True)
    size_result: dict[str, Any] = {"store_keys": size}
    for name, values in samples.items():
        s = stats(values)
        size_result[name] = {
            "seconds": s,
            "entries": entries[name],
            "samples_s": values,
            "entries_per_s_median": entries[name] / s["median"] if s["median"] else None,
        }
    if "bare_producer" in samples:
        into = size_result["punctuation_to_kafka"]["entries_per_s_median"]
        into_eos = size_result["punctuation_to_kafka_eos"]["entries_per_s_median"]
        bare_rate = size_result["bare_producer"]["entries_per_s_median"]
        checked_rate = size_result["bare_producer_checked"]["entries_per_s_median"]
        size_result["into_kafka_vs_bare_producer"] = into / bare_rate
        size_result["into_kafka_vs_bare_producer_checked"] = into / checked_rate
        size_result["into_kafka_eos_vs_bare_producer"] = into_eos / bare_rate
        log(
            f"  into Kafka {into:.0f} entries/s, in a transaction {into_eos:.0f}/s, "
            f"bare producer {bare_rate:.0f}/s ({into / bare_rate:.2f}x), checking each "
            f"delivery {checked_rate:.0f}/s ({into / checked_rate:.2f}x)"
        )
    log(
        f"  punctuation {size_result['punctuation']['entries_per_s_median']:.0f} entries/s, "
        f"store.all {size_result['store_all']['entries_per_s_median']:.0f}/s, "
        f"rocksdb scan {size_result['rocksdb_scan']['entries_per_s_median']:.0f}/s"
    )
    return size_result


def punctuation_cost(
    sizes: list[int],
    reps: int,
    bootstrap: str | None = None,
) -> dict[str, Any]:
    """Seconds and entries/s of one product-count punctuation over stores of ``sizes`` keys.

    With ``bootstrap``, also into Kafka (``punctuation_to_kafka``: produced and acknowledged).
    """
    from topologies.product_count import build_topology

    results: dict[str, Any] = {}
    for size in sizes:
        output_topic = f"bench-punct-out-{size}-{time.time_ns() % 10**6}"
        if bootstrap:
            from processor_api.kafka.admin import create_topics

            create_topics(bootstrap, [(output_topic, 1, {})], exist_ok=False)
        topology = build_topology(punctuate_interval_ms=1000, output_topic=output_topic)
        results[str(size)] = _cost_for_size(topology, size, reps, bootstrap, output_topic)
    return {
        "sizes": sizes,
        "reps": reps,
        "by_size": results,
        "topology": "topologies.product_count:build_topology(punctuate_interval_ms=1000)"
        " (forward_all)",
        "collector": "The collector counts the records and keeps none (as a producer does); "
        "'into Kafka': a KafkaCollector producing to the embedded broker, timed "
        "until every record is acknowledged",
    }


# -------------------------------------------------------------------- per-record check cost
def _records(n: int, keys: int = 10_000) -> list[InputRecord]:
    return [
        InputRecord(
            "count-input",
            0,
            i,
            BASE_TIMESTAMP_MS + i // RECORDS_PER_MS,
            key_for(i, keys),
            b"v" * 32,
        )
        for i in range(n)
    ]


def check_overhead(records: int, reps: int) -> dict[str, Any]:
    """Time to process ``records`` records with 0, 1, 10 never-due STREAM_TIME schedules."""
    from bench.punct_topologies import build_check_overhead
    from topologies.count_per_key import build_topology

    log(f"punctuation check overhead: {records} records, {reps} reps")
    batch = _records(records)
    variants = {
        "0 schedules": build_topology,
        "1 schedule": lambda: build_check_overhead(schedules=1),
        "10 schedules": lambda: build_check_overhead(schedules=10),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(reps):
        for name in names[rep % 3 :] + names[: rep % 3]:
            root = Path(tempfile.mkdtemp(prefix="bench-check-"))
            task = make_task(variants[name](), root / "0_0", ListCollector())
            task.process_batch(batch[:1000])  # warm-up (the first record fires the schedules)
            rest = batch[1000:]
            gc.collect()
            started = time.perf_counter()
            task.process_batch(rest)
            samples[name].append((time.perf_counter() - started) / len(rest))
            task.flush()
            task.close()
            shutil.rmtree(root, ignore_errors=True)
    # the check alone: maybe_punctuate_stream_time() with nothing due
    direct: dict[str, Any] = {}
    for count, name in ((0, "0 schedules"), (1, "1 schedule"), (10, "10 schedules")):
        root = Path(tempfile.mkdtemp(prefix="bench-check-"))
        topology = build_check_overhead(schedules=count) if count else build_topology()
        task = make_task(topology, root / "0_0", ListCollector())
        task.process_batch(batch[:10])
        loops = 1_000_000
        check = task.maybe_punctuate_stream_time
        values = []
        for _ in range(max(reps, 3)):
            started = time.perf_counter()
            for _ in range(loops):
                check()
            values.append((time.perf_counter() - started) / loops * 1e9)
        direct[name] = stats(values)
        task.close()
        shutil.rmtree(root, ignore_errors=True)
    per_record = {name: stats(v) for name, v in samples.items()}
    base = per_record["0 schedules"]["median"]
    return {
        "records": records,
        "reps": reps,
        "per_record_s": per_record,
        "samples_per_record_s": samples,
        "overhead_ns_vs_0": {name: (s["median"] - base) * 1e9 for name, s in per_record.items()},
        "check_call_ns": direct,
        "topologies": "topologies.count_per_key (0), bench.punct_topologies:build_check_overhead",
    }


# --------------------------------------------------------------------------- Spark (e2e)
def spark_intervals(broker: Broker, topic: str, records: int, reps: int) -> dict[str, Any]:
    return _bench_command(
        broker,
        ["bench.punct_spark", "intervals", "--topic", topic, "--records", str(records)],
        reps,
        "punctuation-intervals",
    )


def spark_lag(broker: Broker, seconds: float, reps: int, rate: int) -> dict[str, Any]:
    return _bench_command(
        broker,
        ["bench.punct_spark", "lag", "--seconds", str(seconds), "--rate", str(rate)],
        reps,
        "punctuation-lag",
    )


def spark_timers(broker: Broker, keys: int, seconds: float, reps: int) -> dict[str, Any]:
    """``bench/timers.py``: transformWithStateInPandas timers next to run-topology."""
    return _bench_command(
        broker,
        ["bench.timers", "--keys", str(keys), "--seconds", str(seconds)],
        reps,
        f"timers-{keys}",
    )


def _bench_command(broker: Broker, args: list[str], reps: int, label: str) -> dict[str, Any]:
    """Run ``python -m ARGS --bootstrap B --reps R`` and return its last JSON line, with the
    exit code, log, wall time and the command (broker address masked)."""
    cmd = [PYTHON, "-m", *args, "--bootstrap", broker.bootstrap, "--reps", str(reps)]
    wall, code, out, log_path = run_command(cmd, label=label, timeout_s=3600)
    result = last_json_line(out)
    result.update(
        {
            "exit_code": code,
            "log": str(log_path),
            "wall_s": wall,
            "command": " ".join(cmd).replace(broker.bootstrap, "BOOTSTRAP"),
        }
    )
    return result
