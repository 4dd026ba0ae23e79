"""File locks on the state directory: one run per application, one writer per task."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from processor_api.errors import ConfigError, StreamsError

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
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
