"""Punctuation that ends in Kafka, wall-clock punctuation lag, timers."""

from __future__ import annotations

import json
import re
from typing import Any

from bench.common import RESULTS_DIR
from bench.reports.shared import (
    NOTES_INTO_KAFKA,
    Targets,
    fmt_or_dash,
    read_notes,
    read_result,
    targets_table,
)


def _into_kafka(data: dict[str, Any], out: list[str], targets: Targets) -> None:
    out += [
        "### A whole-store punctuation into Kafka (in-process, embedded broker)",
        "",
        "Seed 003's product count: one punctuation forwards every entry of a RocksDB store "
        "(change logging on) to a Kafka sink; timed from the punctuation's start until every "
        "record is acknowledged. Next to it, alternating in the same process: a bare "
        "confluent-kafka producer sending the same serialized records to the same broker with "
        "the same producer settings and flushing until all are acknowledged, once without a "
        "delivery callback (it cannot tell a failed record from a delivered one) and once with "
        "one that counts failures (what a loop that must know its records arrived does), and "
        "the same punctuation inside a transaction (`exactly_once_v2`). The engine's ceiling "
        "(output counted and thrown away) is the last column. "
        f"Median of {data['reps']} runs; load average {data.get('load_average_before')} before, "
        f"{data.get('load_average_after')} after. Command: `{data.get('command')}`.",
        "",
        "| store keys | into Kafka entries/s | in a transaction entries/s | bare producer "
        "entries/s | bare producer, checked, entries/s | into Kafka / bare | into Kafka / "
        "checked | thrown away (ceiling) entries/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in data["by_size"].items():
        rate = {k: v["entries_per_s_median"] for k, v in row.items() if isinstance(v, dict)}
        out.append(
            f"| {int(size):,} | {fmt_or_dash(rate.get('punctuation_to_kafka'))} | "
            f"{fmt_or_dash(rate.get('punctuation_to_kafka_eos'))} | {fmt_or_dash(rate.get('bare_producer'))} | "
            f"{fmt_or_dash(rate.get('bare_producer_checked'))} | "
            f"{fmt_or_dash(row.get('into_kafka_vs_bare_producer'), 2)} | "
            f"{fmt_or_dash(row.get('into_kafka_vs_bare_producer_checked'), 2)} | "
            f"{fmt_or_dash(rate.get('punctuation'))} |"
        )
    largest = data["by_size"][str(max(int(s) for s in data["by_size"]))]
    ratio = largest.get("into_kafka_vs_bare_producer")
    if ratio is not None:
        targets.append(
            {
                "target": "whole-store punctuation into Kafka >= 0.8x a bare producer",
                "measured": f"{ratio:.2f}x (vs a producer checking each delivery: "
                f"{largest['into_kafka_vs_bare_producer_checked']:.2f}x)",
                "met": ratio >= 0.8,
            }
        )
    out.append("")


def _lag(out: list[str], targets: Targets) -> None:
    runs = [
        (name, data)
        for name in (
            "punctuation-lag-1000ms",
            "punctuation-lag-10000ms",
            "punctuation-lag-1000ms-30k-per-s",
        )
        if (data := read_result(name)) is not None
    ]
    if not runs:
        return
    # variants "idle, trigger 1 s" etc. with the micro-batch runtime; "idle" etc. in epochs
    micro_batches = any(", trigger " in v for _, data in runs for v in data["summary"])
    out += [
        "### Wall-clock punctuation lateness on Spark",
        "",
        "`bench.punct_topologies:build_lag_probe` (`bench/punct_spark.py lag`): a "
        "WALL_CLOCK_TIME punctuation on 3 tasks, lateness = fire time minus due time on the "
        "grid, steady state (after each task's first firing). "
        + (
            "Trigger `1 s` or `auto` (no "
            "`--trigger-interval`: the runtime chooses a quarter of the smallest wall-clock "
            "interval, 0.1-1 s). `records` = input records processed during the run (the "
            "throughput cost of the trigger). Both alternate within one run."
            if micro_batches
            else "In epochs (trigger `-`: none; rows with a trigger were measured with the "
            "micro-batch runtime, since removed). `records` = input records processed during "
            "the run. Idle and with input alternate within one run."
        ),
        "",
        "| interval | input | trigger | punctuations | p50 ms | p99 ms | max ms | records "
        "processed (median) | command, load average |",
        "|---:|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for _, data in runs:
        for variant, summary in data["summary"].items():
            load, _, trigger = variant.partition(", trigger ")
            trigger = trigger or "-"
            records = sorted(r["records"] or 0 for r in data["runs"] if r["variant"] == variant)
            median = records[len(records) // 2] if records else None
            rate = f"{load} ({data['rate_records_per_s']:,}/s)" if load != "idle" else load
            out.append(
                f"| {data['interval_ms']:,} ms | {rate} | {trigger} | "
                f"{summary['steady_punctuations']} | {fmt_or_dash(summary['p50_ms'])} | "
                f"{fmt_or_dash(summary['p99_ms'])} | {fmt_or_dash(summary['max_ms'])} | {fmt_or_dash(median)} | "
                f"`{data.get('command', '')}`; {data.get('load_average')} |"
            )
    first = runs[0][1]
    if first["interval_ms"] == 1000:
        p99 = max(
            s["p99_ms"]
            for v, s in first["summary"].items()
            if (v.endswith("auto") or ", trigger " not in v) and s["p99_ms"]
        )
        targets.append(
            {
                "target": "wall-clock lateness p99 < 0.5 s at a 1 s interval",
                "measured": f"{p99} ms",
                "met": p99 < 500,
            }
        )
    before = read_result("punctuation-lag-before-between-batches")
    if before:
        out += [
            "",
            "Before punctuations fired between micro-batches (commit 223c043, same command, "
            "trigger chosen by the runtime): at a 1 s interval p99 "
            + ", ".join(
                f"{v} {s['p99_ms']} ms"
                for v, s in before["by_interval_ms"]["1000"]["summary"].items()
            )
            + ".",
        ]
    out.append("")


def _timers(out: list[str]) -> None:
    pattern = re.compile(r"timers-(\d+)-\d{4}-\d\d-\d\d")
    by_keys = {
        int(m[1]): path  # the newest file of each number of keys
        for path in sorted(RESULTS_DIR.glob("timers-*.json"))
        if (m := pattern.fullmatch(path.stem))
    }
    files = [by_keys[keys] for keys in sorted(by_keys)]
    if not files:
        return
    out += [
        "### Timers: every second, emit every key's count",
        "",
        "`bench/timers.py`: the same input (one record per key), two contenders alternating, "
        "each in its own process and SparkSession on `local[2]`: Spark's "
        "`transformWithStateInPandas` with one processing-time timer per key (output counted "
        "in `foreachBatch`, not sent to Kafka), and `run-topology` with one WALL_CLOCK_TIME "
        "punctuation per task forwarding the whole store to a Kafka topic. Entries/s over the "
        "steady part of the run (from each contender's first emission); a contender that keeps "
        "up emits keys per second. Quix Streams has no timers (quixio/quix-streams issue "
        "#790), so it has no row.",
        "",
        "| keys | contender | emitted entries/s (median) | lateness p50 ms (median) | "
        "lateness p99 ms (max) | runs, seconds each | load average |",
        "|---:|---|---:|---:|---:|---|---|",
    ]
    for path in files:
        data = json.loads(path.read_text())
        for name, summary in data["summary"].items():
            runs = [r for r in data["runs"] if r["contender"] == name]
            emitted = ", ".join(f"{r.get('emitted', 0):,}" for r in runs)
            out.append(
                f"| {data['keys']:,} | {name} | {fmt_or_dash(summary['entries_per_s_median'])} | "
                f"{fmt_or_dash(summary['lateness_p50_ms_median'])} | "
                f"{fmt_or_dash(summary['lateness_p99_ms_max'])} | {len(runs)} x {data['seconds']:g} s "
                f"(emitted: {emitted}) | {data.get('load_average')} |"
            )
        out.append("")
        out.append(f"Command: `{data.get('command')}`.")
        out.append("")


def punctuation_into_kafka_section(targets: Targets) -> list[str]:
    """Punctuation that ends in Kafka, wall-clock lateness, timers; its own targets first."""
    body: list[str] = []
    targets = []
    into_kafka = read_result("punctuation-into-kafka")
    if into_kafka:
        _into_kafka(into_kafka, body, targets)
    _lag(body, targets)
    _timers(body)
    if not body:
        return []
    out = ["## Punctuation that ends in Kafka", ""]
    out += targets_table("target", targets)
    return out + read_notes(NOTES_INTO_KAFKA) + body
