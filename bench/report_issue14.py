"""The issue-14 section of ``bench/RESULTS.md``: punctuation that ends in Kafka.

Reads ``bench/results/punctuation-kafka-issue14.json`` (a whole-store punctuation into Kafka
next to a bare producer, in-process), ``punctuation-lag-*.json`` (wall-clock punctuation
lateness on Spark) and ``timers-*.json`` (transformWithStateInPandas timers next to
run-topology). Sections whose file is missing are left out.
"""

from __future__ import annotations

import json
from typing import Any

from bench.common import OUTPUT_DIR, RESULTS_DIR


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / name
    return json.loads(path.read_text()) if path.exists() else None


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _into_kafka(data: dict[str, Any], out: list[str], targets: list[tuple[str, str, bool]]) -> None:
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
            f"| {int(size):,} | {_n(rate.get('punctuation_to_kafka'))} | "
            f"{_n(rate.get('punctuation_to_kafka_eos'))} | {_n(rate.get('bare_producer'))} | "
            f"{_n(rate.get('bare_producer_checked'))} | "
            f"{_n(row.get('into_kafka_vs_bare_producer'), 2)} | "
            f"{_n(row.get('into_kafka_vs_bare_producer_checked'), 2)} | "
            f"{_n(rate.get('punctuation'))} |"
        )
    largest = data["by_size"][str(max(int(s) for s in data["by_size"]))]
    ratio = largest.get("into_kafka_vs_bare_producer")
    if ratio is not None:
        targets.append(
            (
                "whole-store punctuation into Kafka >= 0.8x a bare producer",
                f"{ratio:.2f}x (vs a producer checking each delivery: "
                f"{largest['into_kafka_vs_bare_producer_checked']:.2f}x)",
                ratio >= 0.8,
            )
        )
    out.append("")


def _lag(out: list[str], targets: list[tuple[str, str, bool]]) -> None:
    runs = [
        (name, data)
        for name in (
            "punctuation-lag-1000ms.json",
            "punctuation-lag-10000ms.json",
            "punctuation-lag-1000ms-30k-per-s.json",
        )
        if (data := _load(name)) is not None
    ]
    if not runs:
        return
    out += [
        "### Wall-clock punctuation lateness on Spark",
        "",
        "`bench.punct_topologies:build_lag_probe` (`bench/punct_spark.py lag`): a "
        "WALL_CLOCK_TIME punctuation on 3 tasks, lateness = fire time minus due time on the "
        "grid, steady state (after each task's first firing). Trigger `1 s` or `auto` (no "
        "`--trigger-interval`: the runtime chooses a quarter of the smallest wall-clock "
        "interval, 0.1-1 s). `records` = input records processed during the run (the "
        "throughput cost of the trigger). Both alternate within one run.",
        "",
        "| interval | input | trigger | punctuations | p50 ms | p99 ms | max ms | records "
        "processed (median) | command, load average |",
        "|---:|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for _, data in runs:
        for variant, summary in data["summary"].items():
            load, trigger = variant.split(", trigger ")
            records = sorted(r["records"] or 0 for r in data["runs"] if r["variant"] == variant)
            median = records[len(records) // 2] if records else None
            rate = f"{load} ({data['rate_records_per_s']:,}/s)" if load != "idle" else load
            out.append(
                f"| {data['interval_ms']:,} ms | {rate} | {trigger} | "
                f"{summary['steady_punctuations']} | {_n(summary['p50_ms'])} | "
                f"{_n(summary['p99_ms'])} | {_n(summary['max_ms'])} | {_n(median)} | "
                f"`{data.get('command', '')}`; {data.get('load_average')} |"
            )
    first = runs[0][1]
    if first["interval_ms"] == 1000:
        p99 = max(
            s["p99_ms"] for v, s in first["summary"].items() if v.endswith("auto") and s["p99_ms"]
        )
        targets.append(
            ("wall-clock lateness p99 < 0.5 s at a 1 s interval", f"{p99} ms", p99 < 500)
        )
    before = _load("punctuation-lag-before-between-batches.json")
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
    files = sorted(RESULTS_DIR.glob("timers-*.json"))
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
                f"| {data['keys']:,} | {name} | {_n(summary['entries_per_s_median'])} | "
                f"{_n(summary['lateness_p50_ms_median'])} | "
                f"{_n(summary['lateness_p99_ms_max'])} | {len(runs)} x {data['seconds']:g} s "
                f"(emitted: {emitted}) | {data.get('load_average')} |"
            )
        out.append("")
        out.append(f"Command: `{data.get('command')}`.")
        out.append("")


def issue14_section() -> list[str]:
    """The section, targets first; empty when no issue-14 result exists."""
    body: list[str] = []
    targets: list[tuple[str, str, bool]] = []
    into_kafka = _load("punctuation-kafka-issue14.json")
    if into_kafka:
        _into_kafka(into_kafka, body, targets)
    _lag(body, targets)
    _timers(body)
    if not body:
        return []
    out = ["## Issue 14: punctuation that ends in Kafka", ""]
    out += ["| target (issue 14) | measured | met? |", "|---|---|---|"]
    out += [f"| {t} | {m} | {'met' if ok else 'MISSED'} |" for t, m, ok in targets]
    out.append("")
    notes = OUTPUT_DIR / "NOTES-issue14.md"
    if notes.exists():
        out += [notes.read_text().strip(), ""]
    return out + body
