"""One ``run-topology`` process per application id and state directory."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from processor_api.errors import ConfigError

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
