"""File locks on the state directory: one run per application, one writer per task.

Both are ``flock`` locks, which the kernel releases when the holding process dies, so a lock
file left behind by a killed process never blocks the next run. The task lock file holds the
pid of its holder while it is held; a pid of a dead process found there is reported once.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from processor_api.errors import ConfigError, StreamsError
from processor_api.logging import get_logger

_log = get_logger("processor_api.task_state")

LOCK_NAME = ".run.lock"


class ApplicationLock:
    """A non-blocking exclusive lock on ``<state-dir>/<application.id>/.run.lock``.

    A second process with the same application id and state directory is refused with a
    clear error instead of writing to the same stores.
    """

    def __init__(self, state_dir: str | os.PathLike[str], application_id: str) -> None:
        self.path = Path(state_dir) / application_id / LOCK_NAME
        self.application_id = application_id
        self._fd: int | None = None

    def __enter__(self) -> ApplicationLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"application {self.application_id!r} is already running with state dir "
                f"{self.path.parent.parent} (pid {holder}); stop it or use another "
                "--application-id / --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


LOCK_TIMEOUT_S = 120.0


class TaskLock:
    """An exclusive ``flock`` on the task directory: one writer per task across processes."""

    def __init__(self, directory: Path, task_id: str, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self._path = directory / ".lock"
        self._task_id = task_id
        self._timeout_s = timeout_s
        self._fd: int | None = None

    def __enter__(self) -> TaskLock:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StreamsError(
                        f"task {self._task_id}: state directory {self._path.parent} stayed "
                        f"locked by another process for {self._timeout_s:g}s"
                    ) from None
                time.sleep(0.05)
        self._fd = fd
        self._report_dead_holder(os.pread(fd, 32, 0).decode(errors="replace").strip())
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return self

    def _report_dead_holder(self, holder: str) -> None:
        """A pid left in the file: its process died holding the lock (a clean exit clears
        it). The lock is taken over all the same; the task's stores are checked as always
        (checkpoint, identity) when they are opened."""
        if not holder.isdigit() or int(holder) == os.getpid():
            return
        try:
            os.kill(int(holder), 0)
            return  # alive (and not holding the lock any more), or the pid was reused
        except ProcessLookupError:
            pass
        except PermissionError:
            return
        _log.warning(
            "stale_task_lock_taken_over",
            task=self._task_id,
            file=str(self._path),
            dead_pid=int(holder),
            detail="the process that held the task's lock died; its lock was released with it",
        )

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
