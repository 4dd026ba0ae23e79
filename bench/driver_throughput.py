"""Records per second through the ``TopologyTestDriver``: a count topology, RocksDB vs in-memory.

``python -m bench.driver_throughput [--records 50000] [--keys 1000] [--reps 3] [--label L]``
(no Spark, no broker). Why: users unit-test with their production store suppliers, and the
driver used to flush RocksDB's memtables to disk after every piped record (its per-record
commit), 120-250 records/s. Target: >= 20,000 records/s with the persistent store.

Two contenders, alternating (the order rotates each repetition), each a fresh driver over the
same topology: a source of string keys and values, a processor counting records per key in a
key-value store (``Stores.persistent_key_value_store`` or ``in_memory_key_value_store``,
logging on, caching off, as ``Stores`` builds them by default) and forwarding ``(key, count)``
to a sink. ``--records`` records, keys ``k0 .. k<keys-1>`` in turn, are piped one by one
(``TestInputTopic.pipe_input``); only that loop is timed, by the wall clock and by the
process's CPU time (the machine is shared: records per CPU second say what the code costs
while other processes take turns on the cores). Each run is then checked: the output topic
holds one count per record, in order, and the store holds every key's count (read through
``get_key_value_store``), so a fast run that lost data fails instead of counting.

Writes a small summary (medians, min-max, load averages) to
``bench/results/driver-throughput-<records>[-<label>]-<date>.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from typing import Any

from bench.common import BENCH_DIR, log, stats, write_result
from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.testing import TopologyTestDriver

CONTENDERS = {
    "persistent (RocksDB)": Stores.persistent_key_value_store,
    "in-memory": Stores.in_memory_key_value_store,
}


class CountPerKey(Processor):
    """Counts records per key and forwards ``(key, count)``."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("counts")

    def process(self, record: Record) -> None:
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(record.with_value(count))


def build_topology(contender: str) -> Topology:
    """The count topology with the contender's store supplier."""
    counts = Stores.key_value_store_builder(
        CONTENDERS[contender]("counts"), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        .add_source("in", "events", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("count", CountPerKey, "in")
        .add_state_store(counts, "count")
        .add_sink("out", "counts", "count", key_serde=Serdes.string(), value_serde=Serdes.long())
    )


def trial(contender: str, records: int, keys: int) -> dict[str, Any]:
    """Pipe ``records`` records through a fresh driver; time the piping, then check results."""
    names = [f"k{i}" for i in range(keys)]
    with TopologyTestDriver(build_topology(contender)) as driver:
        events = driver.create_input_topic("events")
        counts = driver.create_output_topic("counts")
        pipe = events.pipe_input
        started, cpu_started = time.perf_counter(), time.process_time()
        for i in range(records):
            pipe(names[i % keys], "x")
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
        expected: dict[str, int] = {}
        for i in range(records):
            expected[names[i % keys]] = expected.get(names[i % keys], 0) + 1
        outputs = counts.read_key_values_to_list()
        seen: dict[str, int] = {}
        for key, count in outputs:
            seen[key] = seen.get(key, 0) + 1
            if count != seen[key]:
                raise AssertionError(
                    f"{contender}: output count {count} for {key!r}, expected {seen[key]}"
                )
        with driver.get_key_value_store("counts").all() as entries:
            stored = {entry.key: entry.value for entry in entries}
    if len(outputs) != records or seen != expected or stored != expected:
        raise AssertionError(
            f"{contender}: {len(outputs)} outputs for {records} records, or the counts in the "
            "outputs or the store differ from the expected ones"
        )
    return {
        "seconds": seconds,
        "records_per_s": records / seconds,
        "records_per_cpu_s": records / cpu_seconds,
    }


def _git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(BENCH_DIR), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(BENCH_DIR), "status", "--porcelain", "--", "../processor_api"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"<{exc}>"
    return out.stdout.strip() + (" (library with uncommitted changes)" if dirty.stdout else "")


def _version(package: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001 - informational only
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--label", default="", help="variant name in the result file's name")
    args = parser.parse_args(argv)
    if args.records < 1 or args.keys < 1 or args.reps < 1:
        parser.error("--records, --keys and --reps must be >= 1")
    load_at_start = os.getloadavg()
    names = list(CONTENDERS)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for rep in range(args.reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            result = trial(name, args.records, args.keys)
            runs[name].append(result)
            log(
                f"rep {rep + 1}/{args.reps}: {name}: {result['records_per_s']:,.0f} records/s "
                f"({result['seconds']:.2f} s; {result['records_per_cpu_s']:,.0f} per CPU "
                f"second), load {os.getloadavg()[0]:.2f}"
            )
    summary = {
        name: {
            "records_per_s": stats([r["records_per_s"] for r in results]),
            "records_per_cpu_s": stats([r["records_per_cpu_s"] for r in results]),
            "seconds": stats([r["seconds"] for r in results]),
        }
        for name, results in runs.items()
    }
    for name, figures in summary.items():
        rate = figures["records_per_s"]
        log(
            f"{name}: median {rate['median']:,.0f} records/s ({rate['min']:,.0f}-{rate['max']:,.0f})"
        )
    label = f" --label {args.label}" if args.label else ""
    write_result(
        f"driver-throughput-{args.records}" + (f"-{args.label}" if args.label else ""),
        {
            "benchmark": "driver-throughput",
            "command": f"python -m bench.driver_throughput --records {args.records} "
            f"--keys {args.keys} --reps {args.reps}{label}",
            "git": _git_head(),
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "rocksdict": _version("rocksdict"),
            "loadavg_at_start": [round(x, 2) for x in load_at_start],
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "records": args.records,
            "keys": args.keys,
            "reps": args.reps,
            "results_checked": True,
            "summary": summary,
        },
    )


if __name__ == "__main__":
    main()
