"""Warm restore: a task whose local store is gone, ready again from a snapshot + tail or from a
full changelog replay.

For each store size N (distinct keys, ``Serdes.string()`` keys, ``Serdes.long()`` values): the
changelog (1 partition, compacted, on the embedded broker) gets N records; a first task restores
them, commits at offset N and snapshots to a local directory (``state.snapshot.location`` as
``run-topology`` defaults it); then a tail of ``--tail`` more changelog records (updates of
existing keys) is produced. The contenders, alternating, each start from an empty task
directory and end when the store holds offset N + tail (what the task waits for before it
processes anything):

* ``snapshot + tail``: ``TaskStores.restore`` with snapshots: download the newest snapshot,
  replay the tail (``read_changelog``);
* ``full replay``: ``TaskStores.restore`` without snapshots: replay [0, N + tail).

Both stores are checked to hold N keys. Run: ``python -m bench.warm_restore --sizes
100000,1000000 --reps 3``.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Broker,
    bulk_producer,
    log,
    machine_info,
    produce_waiting,
    stats,
    write_result,
)
from bench.restore import produce_changelog

APP = "bench-warm"
STORE = "restored"
_LONG = struct.Struct(">q")


def _task_stores(directory: Path, topic: str, snapshot_dir: Path | None) -> Any:
    from processor_api.serdes import Serdes
    from processor_api.state import Stores
    from processor_api.state.manager import TaskStores
    from processor_api.state.snapshots import SnapshotSettings, TaskSnapshots

    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(STORE), Serdes.string(), Serdes.long()
    )
    snapshots = None
    if snapshot_dir is not None:
        settings = SnapshotSettings(location=str(snapshot_dir), interval_ms=0)
        snapshots = TaskSnapshots(settings, task_id="0_0", partition=0, directory=directory)
    stores = TaskStores(
        application_id=APP,
        task_id="0_0",
        partition=0,
        directory=directory,
        builders={STORE: builder},
        changelog_topics={STORE: topic},
        timestamp_fn=lambda: 0,
        snapshots=snapshots,
    )
    stores.build(builder, lambda: 0)
    return stores


def _reader(bootstrap: str) -> Any:
    from processor_api.kafka.reader import read_changelog

    def reader(topic, partition, start, end, apply, **options):  # noqa: ANN001
        return read_changelog(
            bootstrap, topic, partition, start, end, apply,
            isolation_level="read_uncommitted", **options,
        )  # fmt: skip

    return reader


def _seed_snapshot(bootstrap: str, topic: str, entries: int, root: Path, snapshots: Path) -> dict:
    """Restore the N-record changelog once, commit at N, snapshot, wait for the upload."""
    from processor_api.state.snapshots import UPLOADER

    started = time.perf_counter()
    stores = _task_stores(root / "seed" / "0_0", topic, snapshots)
    stores.restore({STORE: entries}, _reader(bootstrap))
    stores.commit({STORE: entries})
    if not UPLOADER.wait_idle(600):
        raise RuntimeError("the snapshot upload did not finish within 600 s")
    stores.close()
    shutil.rmtree(root / "seed", ignore_errors=True)
    size = sum(f.stat().st_size for f in snapshots.rglob("*") if f.is_file())
    return {"seed_s": round(time.perf_counter() - started, 2), "snapshot_bytes": size}


def _produce_tail(bootstrap: str, topic: str, tail: int) -> None:
    producer = bulk_producer(bootstrap)
    for i in range(tail):
        produce_waiting(producer, topic, _LONG.pack(-i), b"key-%07d" % i, partition=0)
    if producer.flush(120):
        raise RuntimeError("tail not flushed")


def _restore(bootstrap: str, topic: str, end: int, root: Path, snapshots: Path | None) -> dict:
    directory = Path(tempfile.mkdtemp(dir=root)) / "0_0"
    gc.collect()
    started = time.perf_counter()
    stores = _task_stores(directory, topic, snapshots)
    replayed = stores.restore({STORE: end}, _reader(bootstrap))
    seconds = time.perf_counter() - started
    entries = sum(1 for _ in stores.stacks[STORE].inner.range(None, None))
    stores.close()
    shutil.rmtree(directory.parent, ignore_errors=True)
    return {"seconds": seconds, "replayed": replayed.get(STORE, 0), "entries_in_store": entries}


def run_size(broker: Broker, entries: int, tail: int, reps: int) -> dict[str, Any]:
    topic = f"{APP}-{entries}-{int(time.time())}-{STORE}-changelog"
    broker.create_topic(topic, 1, {"cleanup.policy": "compact"})
    log(f"warm restore: producing a changelog of {entries:,} entries")
    produced = produce_changelog(broker.bootstrap, entries, topic)
    root = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    snapshots = root / "snapshots"
    try:
        seeded = _seed_snapshot(broker.bootstrap, topic, entries, root, snapshots)
        log(f"  snapshot at offset {entries:,}: {seeded}")
        _produce_tail(broker.bootstrap, topic, tail)
        contenders = {"snapshot + tail": snapshots, "full replay": None}
        runs = []
        for rep in range(reps):
            names = list(contenders) if rep % 2 == 0 else list(reversed(contenders))
            for name in names:
                outcome = _restore(broker.bootstrap, topic, entries + tail, root, contenders[name])
                log(f"  rep {rep + 1}/{reps} {name}: {outcome}")
                runs.append({"contender": name, "rep": rep, **outcome})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = {
        name: {"seconds": stats([r["seconds"] for r in runs if r["contender"] == name])}
        for name in contenders
    }
    warm = summary["snapshot + tail"]["seconds"]["median"]
    cold = summary["full replay"]["seconds"]["median"]
    return {
        "entries": entries,
        "tail": tail,
        "produce": produced,
        **seeded,
        "runs": runs,
        "summary": summary,
        "speedup_median": round(cold / warm, 1) if warm else None,
        "all_entries_restored": all(r["entries_in_store"] == entries for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.warm_restore")
    parser.add_argument(
        "--sizes", default="100000,1000000", help="store sizes (keys), comma-separated"
    )
    parser.add_argument(
        "--tail", type=int, default=10_000, help="changelog records after the snapshot"
    )
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    broker = Broker.start()
    try:
        results = [run_size(broker, int(n), args.tail, args.reps) for n in args.sizes.split(",")]
    finally:
        broker.stop()
    write_result(
        "warm-restore",
        {
            "command": "python -m bench.warm_restore " + " ".join(sys.argv[1:]),
            "machine": machine_info(),
            "loadavg_at_end": list(os.getloadavg()),
            "sizes": results,
        },
    )
    for result in results:
        log(
            f"{result['entries']:,} keys, tail {result['tail']:,}: "
            + ", ".join(f"{n} {s['seconds']['median']:.2f}s" for n, s in result["summary"].items())
            + f" (x{result['speedup_median']})"
        )


if __name__ == "__main__":
    main()
