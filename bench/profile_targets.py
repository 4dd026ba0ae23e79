"""Workloads run under py-spy by ``bench.run --profile`` (see ``bench/profiles.py``).

``python -m bench.profile_targets punctuation SIZE``: three punctuations of seed 003's product
count over a store of SIZE keys (in-process task, as in ``bench.punctuation``).
``python -m bench.profile_targets restore BOOTSTRAP N``: one restore of the benchmark's
changelog of N entries (it must already be on the broker, as ``bench.restore`` leaves it).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path


def punctuation(size: int) -> None:
    from bench.punctuation import _fill, make_task
    from processor_api.engine.records import InputRecord, ListCollector
    from topologies.product_count import build_topology

    root = Path(tempfile.mkdtemp(prefix="bench-prof-punct-"))
    collector = ListCollector()
    task = make_task(build_topology(punctuate_interval_ms=1000), root / "0_0", collector)
    _fill(task, "Counts", size)
    for offset in range(3):
        task.process_batch([InputRecord("logs", 0, offset, offset * 1000, b"k", b"v")])
        collector.drain()
        task.flush()
    task.close()
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    from processor_api.logging import configure_logging

    configure_logging("console", level="WARNING")
    if sys.argv[1] == "punctuation":
        punctuation(int(sys.argv[2]))
    elif sys.argv[1] == "restore":
        from bench.restore import _processor_api_restore

        print(_processor_api_restore(sys.argv[2], int(sys.argv[3])))
    else:
        raise SystemExit(f"unknown target {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
