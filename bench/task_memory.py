"""Peak memory of one task's epoch: count per key, RocksDB store, no Spark.

``python -m bench.task_memory [RECORDS] [--keys N] [--reps N]`` runs one task of
``topologies.count_per_key`` through an ``EpochTaskRunner`` (the loop a task host runs) over
``RECORDS`` records of ``--keys`` keys on the embedded broker, under ``at_least_once`` with its
default 30 s commit interval (the whole run is one commit), in a fresh child process per run,
and records the child's peak RSS. Two contenders, alternating:

* ``last change per key``: what a task's stores keep until the commit today (only what the
  commit sends to the changelog);
* ``every write``: the change-logging layer keeping every write until the commit, as before.

Writes ``bench/results/task-memory-<date>.json`` (machine, load, every run, medians).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench.common import Broker, log, machine_info, stats, write_result

CONTENDERS = {"last change per key": "last", "every write": "all"}

CHILD = r"""
import json, sys, tempfile, threading, time
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.epoch_runner import EpochControl, EpochTaskRunner
from processor_api.runtime.protocol import EpochEnd, EpochRequest
from processor_api.state.changelogging import ChangeLoggingBytesStore
from tests.harness.task_runs import one_task
from topologies.count_per_key import build_topology

bootstrap, topic, app, records, mode = sys.argv[1:6]
records = int(records)
if mode == "all":  # the layer as it was: every write kept until the commit
    ChangeLoggingBytesStore.keep_last_per_key = lambda self: None


def rss_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1])


peak, done = [0], threading.Event()


def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss_kb())
        time.sleep(0.02)


threading.Thread(target=sample, daemon=True).start()
before = rss_kb()
spec, runner = one_task(
    EpochTaskRunner, build_topology(input_topic=topic), run_id=app,
    bootstrap=bootstrap, state_dir=tempfile.mkdtemp(), config={"application_id": app},
    input_topic=topic,
)
started = time.monotonic()
reply = runner.run_epoch(
    EpochRequest(spec, "0_0", None, 1, EpochEnd(end_offsets={(topic, 0): records})),
    EpochControl(connected=lambda: True),
)
elapsed = time.monotonic() - started
done.set()
runner.close()
print(json.dumps({"before_kb": before, "peak_kb": max(peak[0], rss_kb()),
                  "processed": reply.processed, "seconds": round(elapsed, 2)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.task_memory")
    parser.add_argument("records", nargs="?", type=int, default=660_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from processor_api.kafka.names import commit_marker_topic
    from tests.harness.topics import produce

    broker = Broker.start()
    runs = []
    try:
        topic = f"task-memory-{int(time.time())}"
        broker.create_topic(topic, 1)
        produce(
            broker.bootstrap,
            topic,
            ((f"key-{i % args.keys:05d}".encode(), b"x" * 20) for i in range(args.records)),
        )
        names = list(CONTENDERS)
        for rep in range(args.reps):
            for name in names if rep % 2 == 0 else reversed(names):
                app = f"task-memory-{rep}-{CONTENDERS[name]}-{int(time.time() * 1000)}"
                broker.create_topic(commit_marker_topic(app), 1)
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, broker.bootstrap, topic, app,
                     str(args.records), CONTENDERS[name]],
                    capture_output=True, text=True, check=True, timeout=600,
                )  # fmt: skip
                result = json.loads(done.stdout.strip().splitlines()[-1])
                result.update(contender=name, rep=rep)
                log(f"rep {rep + 1}/{args.reps} {name}: {result}")
                runs.append(result)
    finally:
        broker.stop()
    summary = {
        name: {
            "peak_rss_mib": stats([r["peak_kb"] / 1024 for r in runs if r["contender"] == name]),
            "records_per_s": stats(
                [r["processed"] / r["seconds"] for r in runs if r["contender"] == name]
            ),
        }
        for name in CONTENDERS
    }
    write_result(
        "task-memory",
        {
            "command": "python -m bench.task_memory " + " ".join(sys.argv[1:]),
            "records": args.records,
            "keys": args.keys,
            "machine": machine_info(),
            "loadavg_at_end": list(os.getloadavg()),
            "runs": runs,
            "summary": summary,
        },
    )
    for name, figures in summary.items():
        log(f"{name}: {json.dumps(figures)}")


if __name__ == "__main__":
    main()
