"""A worker's per-record path without Kafka or Spark: count per key through a ``Task`` whose
stores are built by ``TaskStores`` as a worker builds them (batch buffer, change log keeping
each key's last change), in process, one core.

``python -m bench.store_path [--records N] [--reps R] [--rounds K] [--baseline DIR]``: each
round runs this tree's library and, with ``--baseline`` (a checkout of an earlier commit,
e.g. ``git archive REV | tar -x -C DIR``), that one's, each in a fresh process, alternating
which goes first; a process processes N records R times (a new task each time, a commit
every 100,000 records: change records drained, batch buffer written to RocksDB) and reports
its median microseconds per record. Writes ``bench/results/store-path-<date>.json`` (median
and spread over the rounds, load average before and after). ``--profile``: instead, one
process per tree under py-spy (500 Hz), summarized by ``bench.profiles.summarize`` into
``bench/results/profiles-store-path-<date>.json`` (not timed). Records are built in memory
(``bench.punctuation._records``: 10k keys), so the consumer's share of a run is not in it.

``--input``: the records come the way a worker's come, as ``confluent_kafka.Message``s
(built once, before the timing) through ``WorkerInput.fetch`` (5,000 a fetch),
``ContinuousInput.poll`` and ``Task.process_batch``, as the epoch loop calls them; the
consumer under ``WorkerInput`` is a stand-in that hands out the prebuilt messages (librdkafka's
own fetching is not measured, only Python's path from the consumer's message to the
processor), and the result files are named ``store-path-input``/``profiles-store-path-input``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import log, machine_info, write_result

REPO_DIR = Path(__file__).resolve().parent.parent

_CHILD = r"""
import gc, json, shutil, statistics, sys, tempfile, time
from pathlib import Path
from processor_api.config import StreamsConfig
from processor_api.engine.records import ListCollector
from processor_api.engine.task import Task
from processor_api.logging import configure_logging
from processor_api.state.manager import TaskStores
from bench.punctuation import _records
from topologies.count_per_key import build_topology

configure_logging("console", level="WARNING")
records, reps = int(sys.argv[1]), int(sys.argv[2])
through_input = len(sys.argv) > 3 and sys.argv[3] == "input"
batch = _records(records)
if through_input:
    from confluent_kafka import Message, TopicPartition
    from processor_api.runtime.continuous_input import ContinuousInput, WorkerInput

    messages = [
        Message(topic=r.topic, partition=0, offset=r.offset, key=r.key, value=r.value,
                timestamp=(1, r.timestamp))
        for r in batch
    ]

    class ListConsumer:  # hands out the prebuilt messages as a consumer would (stand-in)

        def __init__(self):
            self.at = 0

        def consume(self, n, timeout):
            chunk = messages[self.at:self.at + n]
            self.at += len(chunk)
            return chunk

        def poll(self, timeout):
            return None

        def position(self, partitions):
            return [TopicPartition(tp.topic, tp.partition, self.at) for tp in partitions]

        def get_watermark_offsets(self, tp, cached=False):
            return 0, len(messages)

        def incremental_assign(self, partitions): pass
        def incremental_unassign(self, partitions): pass
        def pause(self, partitions): pass
        def resume(self, partitions): pass
        def seek(self, partition): pass
        def close(self): pass
per_record = []
for _ in range(reps):
    root = Path(tempfile.mkdtemp(prefix="bench-store-path-"))
    topology = build_topology()
    stores = TaskStores(
        application_id="bench", task_id="0_0", partition=0, directory=root / "0_0",
        builders=topology.store_builders, changelog_topics={"counts": "bench-counts-changelog"},
        timestamp_fn=lambda: 0,
    )
    task = Task(
        subtopology=topology.subtopologies()[0], partition=0,
        store_builders=topology.store_builders, store_factory=stores.build,
        collector=ListCollector(), config=StreamsConfig.from_dict({"application_id": "bench"}),
    )
    task.initialize()
    if through_input:
        worker = WorkerInput("127.0.0.1:9", "bench", isolation_level="read_uncommitted")
        real, worker._consumer = worker._consumer, ListConsumer()
        real.close()
        stream = ContinuousInput("", "0_0", 0, isolation_level="read_uncommitted", shared=worker)
        stream.assign({"count-input": 0}, {})
    gc.collect()
    started = time.perf_counter()
    for start in range(0, records, 5000):
        if through_input:
            worker.fetch(0)
            task.process_batch(stream.poll(0.0))
        else:
            task.process_batch(batch[start:start + 5000])
        if start % 100_000 == 0:  # a commit's store work
            for name, stack in stores.stacks.items():
                stack.changelog.drain_changes()
                stores.buffers[name].commit()
    per_record.append((time.perf_counter() - started) / records * 1e6)
    if through_input:
        assert task.records_processed == records, task.records_processed
        stream.close()
        worker.close()
    task.close()
    shutil.rmtree(root, ignore_errors=True)
import processor_api
print(json.dumps({"us_per_record": statistics.median(per_record), "reps": per_record,
                  "library": processor_api.__file__}))
"""


def _run(tree: Path, records: int, reps: int, mode: str) -> float:
    """Median microseconds per record of one process running ``tree``'s library."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(records), str(reps), mode],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    library = Path(result["library"]).resolve()
    if not library.is_relative_to(tree):
        raise RuntimeError(f"the run of {tree} imported the library at {library}")
    return float(result["us_per_record"])


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "values": [round(v, 3) for v in values],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_path")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3, help="runs per process (median taken)")
    parser.add_argument("--rounds", type=int, default=4, help="processes per tree, alternating")
    parser.add_argument("--baseline", type=Path, default=None, help="an earlier commit's tree")
    parser.add_argument("--baseline-rev", default="baseline")
    parser.add_argument("--profile", action="store_true", help="py-spy profiles, not timed")
    parser.add_argument(
        "--input", action="store_true", help="through WorkerInput and ContinuousInput (above)"
    )
    args = parser.parse_args()
    mode = "input" if args.input else "records"
    result_name = "store-path-input" if args.input else "store-path"
    trees = {"this tree": REPO_DIR}
    if args.baseline is not None:
        trees[f"before ({args.baseline_rev})"] = args.baseline.resolve()
    if args.profile:
        _profile(trees, args.records, mode, result_name)
        return
    load_before = list(os.getloadavg())
    samples: dict[str, list[float]] = {name: [] for name in trees}
    names = list(trees)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            value = _run(trees[name], args.records, args.reps, mode)
            log(f"round {round_ + 1}: {name} {value:.2f} us/record")
            samples[name].append(value)
    result = {
        "what": "count per key through a Task over TaskStores (batch buffer, change log keeping "
        "the last change per key), in process, one core; records built in memory"
        + (
            ", as confluent_kafka Messages through WorkerInput.fetch and ContinuousInput.poll "
            "(a stand-in consumer hands out the prebuilt messages, 5,000 a fetch)"
            if args.input
            else ""
        ),
        "records": args.records,
        "reps_per_process": args.reps,
        "rounds": args.rounds,
        "command": "python -m bench.store_path "
        + " ".join(sys.argv[1:]).replace(
            str(args.baseline) if args.baseline else "\0", "BASELINE_DIR"
        ),
        "us_per_record": {name: _stats(values) for name, values in samples.items()},
        "machine": machine_info(),
        "loadavg_before": load_before,
        "loadavg_after": list(os.getloadavg()),
    }
    write_result(result_name, result, indent=1)
    for name, values in samples.items():
        log(f"{name}: {json.dumps(_stats(values))}")


def _profile(trees: dict[str, Path], records: int, mode: str, result_name: str) -> None:
    from bench import profiles

    summaries = {}
    for name, tree in trees.items():
        label = f"profile-{result_name}-" + name.split(" ")[0]
        cmd = [sys.executable, "-c", _CHILD, str(records), "1", mode]
        wrapped = profiles.profile_command(cmd, label, rate=500)
        subprocess.run(
            wrapped, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
            capture_output=True,
        )  # fmt: skip
        summary = profiles.summarize(profiles.RAW_DIR / f"{label}.txt", top=25)
        summary.pop("file", None)
        summaries[name] = summary
        log(f"profiled {name}: {summary.get('samples')} samples")
    write_result(
        f"profiles-{result_name}",
        {
            "what": "py-spy record --rate 500 of bench.store_path's process (count per key "
            f"through a Task over TaskStores, {records} records, one run, {mode}), per tree",
            "machine": machine_info(),
            "profiles": summaries,
        },
        indent=1,
    )


if __name__ == "__main__":
    main()
