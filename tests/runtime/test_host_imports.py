"""A task host imports pyarrow when it first uses a snapshot location, not at start (issue 20:
memory).

``import pyarrow.fs`` brings numpy with it, about 40 MiB of resident memory in every task host
(three on a 3-partition run). A host needs it only to take or read a snapshot: with
``run-topology``'s defaults one interval (60 s) after its task started, when its task closes
cleanly, or at a restore from a snapshot; a run without snapshots never needs it.
"""

from __future__ import annotations

import subprocess
import sys


def _modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


def test_starting_a_task_host_imports_neither_pyarrow_nor_numpy() -> None:
    loaded = _modules_after_import("processor_api.runtime.worker_host")
    assert "processor_api.state.snapshots" in loaded  # the snapshot code itself is there
    assert not {"pyarrow", "pyarrow.fs", "numpy", "pandas"} & loaded


def test_opening_a_snapshot_location_imports_pyarrow(tmp_path) -> None:
    code = (
        "import sys; from processor_api.state.snapshot_files import open_location; "
        f"open_location({str(tmp_path)!r}); print('pyarrow.fs' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True"


_UPLOAD_IMPORTS = """
import sys, threading
from pathlib import Path

importers = []


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow.fs":
            importers.append(threading.current_thread().name)
        return None


sys.meta_path.insert(0, Watch())
from processor_api.state.snapshots import UPLOADER, SnapshotSettings, TaskSnapshots

root = Path(sys.argv[1])
snapshots = TaskSnapshots(
    SnapshotSettings(str(root / "snapshots"), interval_ms=0),
    task_id="0_0", partition=0, directory=root / "task",
)


def checkpoint(target):
    target.mkdir(parents=True)
    (target / "CURRENT").write_text("x")


snapshots.take([("counts", checkpoint, "app-counts-changelog", 7, {})])
UPLOADER.wait_idle(60)
print(" ".join(importers))
print(sorted(p.name for p in (root / "snapshots" / "0_0" / "counts").iterdir()))
"""


def test_a_snapshot_imports_pyarrow_in_the_upload_thread_not_in_the_tasks_loop(tmp_path) -> None:
    # the first import of pyarrow.fs takes about 0.3 s: on the loop's thread it stopped every
    # task of the worker at the commit that took the first snapshot
    done = subprocess.run(
        [sys.executable, "-c", _UPLOAD_IMPORTS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    importers, uploaded = done.stdout.strip().splitlines()
    assert importers == "processor-api-snapshots", done.stdout
    assert uploaded != "[]", done.stdout  # the snapshot was written
