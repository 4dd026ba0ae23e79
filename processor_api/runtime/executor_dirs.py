"""A state directory per executor (``run-topology --state-dir-per-executor``).

On a real cluster every executor has a disk of its own; executors sharing one machine (like
``local-cluster[...]`` here, or several executors per node) share the ``--state-dir`` path
unless each is given a directory of its own. With the setting, an executor keeps its task
directories under ``<state-dir>/executor-<id>/``, so a task that moves to another executor
finds no local state there, as it would on another machine, and an executor that is replaced
starts without the state of the one it replaces.

The executor's id is Spark's where the Python side can see it: ``SPARK_EXECUTOR_ID`` (set in
Kubernetes executor pods), else the standalone executor's working directory
(``.../work/<app-id>/<executor-id>``, which ``local-cluster`` uses too), else the host name
(one executor per host, as on YARN with one executor per node manager).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

EXECUTOR_DIR_PREFIX = "executor-"
_STANDALONE_WORK_DIR = re.compile(r"/work/app-[^/]+/(\d+)/?$")


def executor_id() -> str:
    """This executor's id as a directory-name-safe string."""
    from_env = os.environ.get("SPARK_EXECUTOR_ID")
    if from_env:
        return _safe(from_env)
    match = _STANDALONE_WORK_DIR.search(os.getcwd())
    if match:
        return match.group(1)
    return "host-" + _safe(socket.gethostname())


def executor_state_dir(state_dir: str, per_executor: bool) -> str:
    """The state directory this process's tasks use."""
    if not per_executor:
        return state_dir
    return str(Path(state_dir) / f"{EXECUTOR_DIR_PREFIX}{executor_id()}")


def state_dirs_here(state_dir: str | os.PathLike[str], per_executor: bool) -> list[Path]:
    """Every state directory of executors on this machine (the driver's view: to ask their
    worker hosts to stop, or to wipe them)."""
    root = Path(state_dir)
    if not per_executor:
        return [root]
    return sorted(p for p in root.glob(f"{EXECUTOR_DIR_PREFIX}*") if p.is_dir())


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)
