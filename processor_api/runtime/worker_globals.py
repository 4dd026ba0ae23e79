"""A worker's global stores: one copy per worker host, shared by all the tasks it runs.

Kafka Streams keeps one copy of the global stores per instance (``GlobalStreamThread``), read
by every task of every stream thread. Here a worker host runs all its tasks in one process and
one thread, so they share one copy the same way: it is restored once, when the first task that
needs it is built, caught up at most once a second by whichever task's loop turn comes first
(:attr:`GlobalStores.last_catch_up`), and closed with the host's run. A host with many tasks
therefore fills, stores and catches up one copy instead of one per task.

The copy lives in ``<state dir>/<application>/global-<worker>/`` (:func:`worker_global_directory`)
and outlives the host: a new host of the same worker on this machine opens it and only catches
up. Two hosts of one worker can overlap on a machine for a moment (the driver's early-start
host and a Spark worker's, or an old host not yet gone); the directory's lock decides, and the
host that does not get it keeps a copy of its own for its run, deleted when it closes.
"""

from __future__ import annotations

import os
from pathlib import Path

from processor_api.config import StreamsConfig
from processor_api.errors import StreamsError
from processor_api.logging import get_logger
from processor_api.runtime.global_stores import GlobalStores
from processor_api.runtime.job import JobSpec
from processor_api.state.locks import TaskLock
from processor_api.state.manager import WORKER_GLOBAL_PREFIX, remove_directory
from processor_api.topology import Topology

_log = get_logger("processor_api.worker_globals")

#: The name of a worker's copy of the global stores in the application's state directory.
GLOBAL_DIR_PREFIX = WORKER_GLOBAL_PREFIX


def worker_global_directory(
    state_dir: str | os.PathLike[str], application_id: str, worker: str
) -> Path:
    """Where worker ``worker`` keeps its copy of the application's global stores."""
    return Path(state_dir) / application_id / f"{GLOBAL_DIR_PREFIX}{worker}"


class WorkerGlobalStores:
    """The global stores of one worker host's run (see the module docs)."""

    def __init__(self, directory: Path, worker: str) -> None:
        self.directory = directory
        self.worker = worker
        self._stores: GlobalStores | None = None
        self._lock: TaskLock | None = None
        self._private = False  # the shared directory was locked: this host's own copy

    def open(
        self, topology: Topology, spec: JobSpec, config: StreamsConfig, isolation_level: str
    ) -> GlobalStores:
        """The worker's global stores, opened and restored at the first call."""
        if self._stores is None:
            directory = self._take_directory()
            try:
                self._stores = GlobalStores.restored(
                    topology, directory, spec, config,
                    isolation_level=isolation_level, role=f"global-{self.worker}",
                )  # fmt: skip
            except BaseException:
                self._release_directory(directory)
                raise
        return self._stores

    def _take_directory(self) -> Path:
        """The shared directory, locked; another host of this worker holding it: a private
        one for this host's run."""
        lock = TaskLock(self.directory, f"{GLOBAL_DIR_PREFIX}{self.worker}", timeout_s=0.0)
        try:
            self._lock = lock.__enter__()
            self._private = False
            return self.directory
        except StreamsError:
            private = self.directory.with_name(f"{self.directory.name}-{os.getpid()}")
            _log.info(
                "global_stores_private_copy",
                worker=self.worker,
                directory=str(private),
                detail=f"another host of this worker holds {self.directory}; this host keeps "
                "a copy of its own for its run",
            )
            self._private = True
            return private

    def _release_directory(self, directory: Path) -> None:
        if self._lock is not None:
            self._lock.__exit__(None, None, None)
            self._lock = None
        if self._private:
            remove_directory(directory)

    def close(self) -> None:
        """Close the stores (the run ended on this host), keeping the shared copy on disk."""
        stores, self._stores = self._stores, None
        if stores is None:
            return
        try:
            stores.close()
        finally:
            self._release_directory(stores.state.directory)
