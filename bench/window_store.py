"""Window store at 1M windows, RocksDB and in-memory: put, fetch, fetch_all and expiry.

``python -m bench.window_store [--entries 1000000] [--windows 100] [--reps 3]`` (no Spark, no
broker: one process, in-process stores). The store is what a task gets for
``Stores.window_store_builder(Stores.persistent_window_store(...) | in_memory_window_store(...),
Serdes.string(), Serdes.long())``, opened through ``TaskStores.build`` (batch buffer, change
logging, the typed ``WindowStore``); every ``--batch`` puts are one commit: the change
records are drained and ``TaskStores.commit`` applies the buffer to the segmented store (and
flushes RocksDB), as a task's commit does.

Layout: ``entries / windows`` keys (``key-00042``) x ``windows`` windows of 60 s, written
window by window (stream time advances); retention = ``windows`` x 60 s, so the segment
interval (Kafka Streams' default, retention / 2) puts the first half of the windows in
segment 0. Phases, each on the filled store of the run before it:

* **put**: all ``entries`` puts with their commits;
* **fetch(key, from, to)**: every key once, over 10 windows in the middle (``first_fetch_s``
  is the first call alone: the in-memory store sorts its key index on the first ordered read);
* **fetch_all(from, to)**: the same 10 windows for every key, and every window;
* **expiry**: one put whose window start advances stream time to retention + segment
  interval (the first half of the windows expire), and its commit, which drops segment 0.

Next to expiry, the contender a naive implementation pays: a key-value store (same supplier
kind) holding the same ``entries`` stored keys deletes the same half one by one
(change-logged, one commit), once with ``KeyValueStore.delete`` (which reads the old value
first) and once with ``put(key, None)`` (no read). Contenders alternate (the two window stores,
the four key-value ones; the order rotates each repetition).
After the repetitions the slowest window phase and the slowest key-value phase are run
once more each under cProfile.

Writes ``bench/results/window-store-<entries>-<date>.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import log, machine_info, stats, write_result

APP = "bench-window-store"
STORE = "windows"
WINDOW_SIZE_MS = 60_000
FETCH_WINDOWS = 10
KINDS = ("rocksdb", "in-memory")


@dataclass(frozen=True)
class Shape:
    entries: int
    windows: int
    batch: int

    @property
    def keys(self) -> int:
        return self.entries // self.windows

    @property
    def retention(self) -> int:
        return self.windows * WINDOW_SIZE_MS

    @property
    def segment_interval(self) -> int:
        from processor_api.state.segments import segment_interval_for

        return segment_interval_for(self.retention)

    @property
    def expiring_windows(self) -> int:
        """Windows of segment 0: the ones the expiry put drops."""
        return sum(1 for w in range(self.windows) if w * WINDOW_SIZE_MS < self.segment_interval)

    @property
    def advance_to(self) -> int:
        """The window start that makes segment 0 expire (retention + one segment interval)."""
        return self.retention + self.segment_interval

    def key(self, i: int) -> str:
        return f"key-{i:05d}"


class Phases:
    """Seconds per phase, with an optional cProfile around one of them."""

    def __init__(self, profile: str | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.profile = profile
        self.profile_text: str | None = None

    @contextmanager
    def timed(self, phase: str):  # noqa: ANN201
        gc.collect()
        profiler = cProfile.Profile() if phase == self.profile else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        try:
            yield
        finally:
            if profiler is not None:
                profiler.disable()
            self.seconds[phase] = time.perf_counter() - started
            if profiler is not None:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(14)
                self.profile_text = out.getvalue()


def _task_stores(root: Path, builder: Any) -> Any:
    from processor_api.state.manager import TaskStores

    return TaskStores(
        application_id=APP,
        task_id="0_0",
        partition=0,
        directory=root / APP / "0_0",
        builders={builder.name: builder},
        changelog_topics={builder.name: f"{APP}-{builder.name}-changelog"},
        timestamp_fn=lambda: 0,
    )


class Committer:
    """Drains the change records and commits the batch buffer, as a task's batch end does."""

    def __init__(self, stores: Any, name: str) -> None:
        self.stores, self.name = stores, name
        self.offset = 0

    def __call__(self) -> None:
        self.offset += len(self.stores.stacks[self.name].changelog.drain_changes())
        self.stores.commit({self.name: self.offset})


def _stored_count(stores: Any, name: str) -> int:
    """Entries in the innermost store (below the batch buffer), counted by iteration."""
    return sum(1 for _ in stores.buffers[name].inner.range(None, None))


def run_window(kind: str, shape: Shape, root: Path, profile: str | None = None) -> dict:
    """Fill a window store and time put, fetch, fetch_all and expiry on it."""
    from processor_api import Serdes, Stores
    from processor_api.state.manager import wipe_application_state

    factory = Stores.persistent_window_store if kind == "rocksdb" else Stores.in_memory_window_store
    builder = Stores.window_store_builder(
        factory(STORE, shape.retention, WINDOW_SIZE_MS), Serdes.string(), Serdes.long()
    )
    stores = _task_stores(root, builder)
    stack = stores.build(builder, lambda: 0)
    store, commit = stack.store, Committer(stores, STORE)
    keys = [shape.key(i) for i in range(shape.keys)]
    phases = Phases(profile)
    with phases.timed("put"):
        pending = 0
        for w in range(shape.windows):
            start = w * WINDOW_SIZE_MS
            for i, key in enumerate(keys):
                store.put(key, w * shape.keys + i, start)
                pending += 1
                if pending == shape.batch:
                    commit()
                    pending = 0
        commit()

    middle = (shape.windows // 2 - FETCH_WINDOWS // 2) * WINDOW_SIZE_MS
    time_from, time_to = middle, middle + (FETCH_WINDOWS - 1) * WINDOW_SIZE_MS
    gc.collect()
    started = time.perf_counter()
    first = sum(1 for _ in store.fetch(keys[0], time_from, time_to))
    first_fetch_s = time.perf_counter() - started
    stored = _stored_count(stores, STORE)  # after the first fetch, which it would warm up
    fetched = 0
    with phases.timed("fetch_key"):
        for key in keys:
            for _ in store.fetch(key, time_from, time_to):
                fetched += 1
    with phases.timed("fetch_all_10_windows"):
        fetched_all_10 = sum(1 for _ in store.fetch_all(time_from, time_to))
    with phases.timed("fetch_all_every_window"):
        fetched_all = sum(1 for _ in store.all())

    with phases.timed("expiry"):
        store.put(keys[0], -1, shape.advance_to)
        commit()
    left = _stored_count(stores, STORE)
    stores.close()
    wipe_application_state(root, APP)
    return {
        "seconds": phases.seconds,
        "first_fetch_s": first_fetch_s,
        "stored_after_put": stored,
        "first_fetch_windows": first,
        "fetch_key_windows": fetched,
        "fetch_all_10_windows_entries": fetched_all_10,
        "fetch_all_every_window_entries": fetched_all,
        "stored_after_expiry": left,
        "changelog_records": commit.offset,
        "profile": phases.profile_text,
    }


def run_key_value(
    kind: str, shape: Shape, root: Path, how: str, profile: str | None = None
) -> dict:
    """The naive contender: the same stored keys in a key-value store, half deleted one by one.

    ``how="delete"``: ``KeyValueStore.delete(key)`` (reads the old value, as Kafka Streams'
    ``delete`` returns it); ``how="put_none"``: ``put(key, None)`` (no read).
    """
    from processor_api import Serdes, Stores
    from processor_api.state.key_schemas import window_key
    from processor_api.state.manager import wipe_application_state

    supplier = (
        Stores.persistent_key_value_store(STORE)
        if kind == "rocksdb"
        else Stores.in_memory_key_value_store(STORE)
    )
    builder = Stores.key_value_store_builder(supplier, Serdes.bytes(), Serdes.long())
    stores = _task_stores(root, builder)
    store, commit = stores.build(builder, lambda: 0).store, Committer(stores, STORE)
    key_bytes = [shape.key(i).encode() for i in range(shape.keys)]
    phases = Phases(profile)
    with phases.timed("put"):
        pending = 0
        for w in range(shape.windows):
            start = w * WINDOW_SIZE_MS
            for i, key in enumerate(key_bytes):
                store.put(window_key(key, start), w * shape.keys + i)
                pending += 1
                if pending == shape.batch:
                    commit()
                    pending = 0
        commit()
    doomed = [
        window_key(key, w * WINDOW_SIZE_MS)
        for w in range(shape.expiring_windows)
        for key in key_bytes
    ]
    with phases.timed("delete_one_by_one"):
        if how == "delete":
            for key in doomed:
                store.delete(key)
        else:
            for key in doomed:
                store.put(key, None)
        commit()
    left = _stored_count(stores, STORE)
    stores.close()
    wipe_application_state(root, APP)
    return {
        "seconds": phases.seconds,
        "deleted": len(doomed),
        "stored_after_delete": left,
        "changelog_records": commit.offset,
        "profile": phases.profile_text,
    }


def _contenders(shape: Shape, root: Path) -> dict[str, Callable[[], dict]]:
    return {
        "window, rocksdb": lambda: run_window("rocksdb", shape, root),
        "window, in-memory": lambda: run_window("in-memory", shape, root),
        "key-value, rocksdb, delete()": lambda: run_key_value("rocksdb", shape, root, "delete"),
        "key-value, in-memory, delete()": lambda: run_key_value("in-memory", shape, root, "delete"),
        "key-value, rocksdb, put(None)": lambda: run_key_value("rocksdb", shape, root, "put_none"),
        "key-value, in-memory, put(None)": lambda: run_key_value(
            "in-memory", shape, root, "put_none"
        ),
    }


def _summary(runs: list[dict], shape: Shape) -> dict[str, Any]:
    expiring = shape.keys * shape.expiring_windows
    per_phase_count = {  # phase -> (items, what an item is)
        "put": (shape.entries, "puts"),
        "fetch_key": (shape.keys, f"fetch calls of {FETCH_WINDOWS} windows each"),
        "fetch_all_10_windows": (shape.keys * FETCH_WINDOWS, "entries returned"),
        "fetch_all_every_window": (shape.entries, "entries returned"),
        "expiry": (expiring, "entries dropped"),
        "delete_one_by_one": (expiring, "entries deleted"),
    }
    summary: dict[str, Any] = {}
    for contender in dict.fromkeys(r["contender"] for r in runs):
        mine = [r for r in runs if r["contender"] == contender]
        phases: dict[str, Any] = {}
        for phase in mine[0]["seconds"]:
            s = stats([r["seconds"][phase] for r in mine])
            count, unit = per_phase_count[phase]
            rate = count / s["median"] if s["median"] else None
            phases[phase] = {"seconds": s, "per_s_median": rate, "items": count, "unit": unit}
        if "first_fetch_s" in mine[0]:
            phases["first_fetch"] = {"seconds": stats([r["first_fetch_s"] for r in mine])}
        summary[contender] = phases
    for kind in KINDS:
        window = summary.get(f"window, {kind}", {}).get("expiry", {}).get("seconds", {})
        for how in ("delete()", "put(None)"):
            naive = summary.get(f"key-value, {kind}, {how}", {}).get("delete_one_by_one", {})
            if window.get("median") and naive:
                summary[f"expiry vs {how} one by one, {kind}"] = {
                    "segment_drop_s_median": window["median"],
                    "delete_one_by_one_s_median": naive["seconds"]["median"],
                    "ratio": naive["seconds"]["median"] / window["median"],
                }
    return summary


def _checks(runs: list[dict], shape: Shape) -> dict[str, bool]:
    expired = shape.keys * shape.expiring_windows
    windows = [r for r in runs if r["contender"].startswith("window")]
    naive = [r for r in runs if r["contender"].startswith("key-value")]
    return {
        "all_windows_stored": all(r["stored_after_put"] == shape.entries for r in windows),
        "fetch_key_returned_10_per_key": all(
            r["fetch_key_windows"] == shape.keys * FETCH_WINDOWS for r in windows
        ),
        "fetch_all_returned_all": all(
            r["fetch_all_every_window_entries"] == shape.entries
            and r["fetch_all_10_windows_entries"] == shape.keys * FETCH_WINDOWS
            for r in windows
        ),
        # the expiring half is gone, the advancing put is there
        "expiry_dropped_half": all(
            r["stored_after_expiry"] == shape.entries - expired + 1 for r in windows
        ),
        "naive_deleted_half": all(
            r["stored_after_delete"] == shape.entries - expired for r in naive
        ),
    }


def _slowest(summary: dict[str, Any], prefix: str) -> tuple[str, str]:
    return max(
        (
            (contender, phase)
            for contender, phases in summary.items()
            if contender.startswith(prefix)
            for phase in phases
            if phase != "first_fetch"
        ),
        key=lambda cp: summary[cp[0]][cp[1]]["seconds"]["median"],
    )


def _profile_slowest(shape: Shape, root: Path, summary: dict[str, Any]) -> list[dict]:
    """One cProfile run of the slowest window phase and of the slowest contender phase."""
    profiles = []
    for prefix in ("window", "key-value"):
        contender, phase = _slowest(summary, prefix)
        log(f"cProfile of the slowest {prefix} phase: {contender}: {phase}")
        kind = "rocksdb" if "rocksdb" in contender else "in-memory"
        if prefix == "window":
            again = run_window(kind, shape, root, profile=phase)
        else:
            how = "delete" if "delete()" in contender else "put_none"
            again = run_key_value(kind, shape, root, how, profile=phase)
        profiles.append(
            {
                "contender": contender,
                "phase": phase,
                "seconds_under_profile": again["seconds"][phase],
                "top_by_tottime": again["profile"],
            }
        )
    return profiles


def run(shape: Shape, reps: int, profile: bool = True) -> dict[str, Any]:
    """The alternating repetitions, their summary, and one cProfile of the slowest phase."""
    root = Path(tempfile.mkdtemp(prefix="bench-window-store-"))
    try:
        contenders = _contenders(shape, root)
        names = list(contenders)
        runs = []
        for rep in range(reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                load_before = os.getloadavg()
                result = contenders[name]()
                result.pop("profile", None)
                timings = ", ".join(f"{k} {v:.3f}s" for k, v in result["seconds"].items())
                log(f"  rep {rep + 1}/{reps}: {name}: {timings}")
                runs.append(
                    {
                        "contender": name,
                        "rep": rep,
                        "loadavg_before": list(load_before),
                        "loadavg_after": list(os.getloadavg()),
                        **result,
                    }
                )
        summary = _summary(runs, shape)
        profiled = _profile_slowest(shape, root, summary) if profile else []
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "shape": {
            **asdict(shape),
            "keys": shape.keys,
            "window_size_ms": WINDOW_SIZE_MS,
            "retention_ms": shape.retention,
            "segment_interval_ms": shape.segment_interval,
            "expiring_windows": shape.expiring_windows,
            "fetch_windows": FETCH_WINDOWS,
        },
        "reps": reps,
        "runs": runs,
        "summary": summary,
        "checks": _checks(runs, shape),
        "profiles": profiled,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="windows in all")
    parser.add_argument("--windows", type=int, default=100, help="windows per key")
    parser.add_argument("--batch", type=int, default=10_000, help="puts per commit")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile run")
    args = parser.parse_args(argv)
    if args.windows < 2 * FETCH_WINDOWS or args.entries % args.windows or args.batch < 1:
        parser.error(
            f"--windows must be >= {2 * FETCH_WINDOWS}, --entries a multiple of --windows and "
            f"--batch >= 1 (got --windows {args.windows}, --entries {args.entries}, "
            f"--batch {args.batch})"
        )
    from processor_api.logging import configure_logging

    configure_logging("console", level="warning")
    shape = Shape(args.entries, args.windows, args.batch)
    machine = machine_info()
    body = run(shape, args.reps, profile=not args.no_profile)
    write_result(
        f"window-store-{args.entries}",
        {
            "benchmark": "window-store",
            "command": f"python -m bench.window_store --entries {args.entries} "
            f"--windows {args.windows} --batch {args.batch} --reps {args.reps}",
            "machine": machine,
            "loadavg_at_end": list(os.getloadavg()),
            **body,
        },
    )


if __name__ == "__main__":
    main()
