"""A windowed aggregation on Spark next to the key-value one; a 1M-entry global store."""

from __future__ import annotations

from typing import Any

from bench.reports.shared import (
    Targets,
    fmt_or_dash,
    load_average_1min,
    median_of,
    pa_label,
    read_result,
)


def _windowed(data: dict[str, Any], out: list[str]) -> None:
    records, size = next(iter(data["sizes"].items()))
    summary = size["summary"]
    # "processor_api" and "processor_api windowed count" when recorded with micro-batches
    KV = pa_label(summary)  # noqa: N806
    WINDOWED = f"{KV} windowed count"  # noqa: N806
    steady = {
        name: median_of(
            [
                (r.get("metrics") or {}).get("steady_records_per_s")
                for r in size["runs"]
                if r["contender"] == name and r["ok"]
            ]
        )
        for name in (KV, WINDOWED)
    }
    windows = [r["metrics"].get("windows") for r in size["runs"] if r["contender"] == WINDOWED]
    out += [
        "### A windowed aggregation end to end, next to the key-value one",
        "",
        f"`topologies/count_per_key.py` on {int(records):,} records (10,000 keys, 3 partitions), "
        "`run-topology --available-now --master local[2]`, once counting per key in a "
        "key-value store and once per key and one-minute tumbling window in a window store "
        f"(RocksDB segments, {windows[0]:,} windows at the end); alternating, "
        f"{summary[KV]['runs']} runs each, medians; {load_average_1min(data)}. "
        "Each run is checked: the key-value run by reading its RocksDB stores, the windowed "
        "one by reading its committed changelog with `read_store` (sum of counts = records).",
        "",
        "| contender | wall time (min-max) | steady-state records/s |",
        "|---|---:|---:|",
    ]
    for name in (KV, WINDOWED):
        wall = summary[name]["wall_s"]
        out.append(
            f"| {name} | {wall['median']:.1f} s ({wall['min']:.1f}-{wall['max']:.1f}) "
            f"| {fmt_or_dash(steady[name])} |"
        )
    ratio = summary[WINDOWED]["wall_s"]["median"] / summary[KV]["wall_s"]["median"]
    kv_steady, windowed_steady = steady[KV], steady[WINDOWED]
    rates = (
        f", and runs at {windowed_steady / kv_steady:.2f}x its steady-state rate"
        if kv_steady and windowed_steady
        else ""
    )
    out += [
        "",
        f"The windowed count takes {ratio:.2f}x the key-value count's wall time{rates} "
        "(start-up, the same for both, dominates the wall time). Not profiled yet: per record "
        "the window store also finds the window's segment and builds Kafka Streams' composite "
        "key (key, window start, sequence number). Command: `" + data["command"] + "`.",
        "",
    ]


def _global(data: dict[str, Any], out: list[str]) -> None:
    fill, catch_up = data["fill"], data["catch_up"]
    out += [
        "### A global store with 1,000,000 entries",
        "",
        f"Every task host keeps its own copy (ARCHITECTURE.md says why); {load_average_1min(data)}.",
        "",
        "| what | median (min-max) |",
        "|---|---:|",
    ]
    for name, entry in fill.items():
        s = entry["seconds"]
        out.append(f"| {name} | {s['median']:.1f} s ({s['min']:.1f}-{s['max']:.1f}) |")
    for key, label in (
        ("reopen_with_checkpoint_ms", "host restart with its copy intact"),
        ("catch_up_nothing_new_ms", "catch-up before a micro-batch, nothing new"),
        ("catch_up_with_new_records_ms", "catch-up, 1,000 new records"),
    ):
        s = catch_up[key]
        out.append(f"| {label} | {s['median']:.0f} ms ({s['min']:.0f}-{s['max']:.0f}) |")
    out += ["", f"Command: `{data['command']}`.", ""]


def windowed_and_global_store_section(targets: Targets) -> list[str]:
    """Windowed count on Spark next to the key-value one; a 1M-entry global store."""
    body: list[str] = []
    for name, render in (
        ("throughput-quick-windowed", _windowed),  # bench.run --quick --suffix=-windowed
        ("global-store-1000000", _global),
    ):
        data = read_result(name)
        if data is None:
            continue
        try:
            render(data, body)
        except Exception as exc:  # noqa: BLE001 - a broken section must not hide the others
            body += [f"Could not render {name}: {exc!r}", ""]
    return ["## Windowed aggregation on Spark, global stores", "", *body] if body else []
