"""Tansu: the workers of this machine end their transactions on one broker together.

Tansu finalises a transaction only when every other transaction with records on one of its
partitions is prepared (``transaction_ends.py``). Workers that write the same output
partitions (an output not co-partitioned with the input, or input placed by librdkafka's
default partitioner) then chain their transactions: worker A commits and at once writes its
next transaction, which overlaps B's transaction still being ended; B's end waits for A's next
one, which waits for B's next, and no ``read_committed`` reader gets past the first of them
(the last stable offset stays there) while they keep writing. The workers already commit at
the same wall-clock multiples on Tansu (``worker_host.next_commit_at``); this barrier keeps the
chain from forming: a worker that has committed writes nothing more until no other worker on
the machine holds a transaction it opened before that commit (those are ending too), at most
:data:`WAIT_LIMIT_S`.

Each worker keeps a file in a directory per broker, named by its process id, holding the wall
time its open transaction got its first record (empty: none open). Files of processes that are
gone are ignored (and removed). Apache Kafka needs none of this and gets none of it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import uuid
from pathlib import Path

from processor_api.logging import get_logger

_log = get_logger(__name__)

#: The longest a worker waits for the others' transactions to end after its commit (a worker
#: of another application may commit at other times; a stopped process never ends its own).
WAIT_LIMIT_S = 0.25
POLL_S = 0.002


def barrier_directory(bootstrap_servers: str) -> Path:
    """The directory the workers of this machine share for one broker."""
    digest = hashlib.sha256(bootstrap_servers.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"processor-api-open-transactions-{digest}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CommitBarrier:
    """One worker's part in the barrier (see the module docs)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self._directory = barrier_directory(bootstrap_servers)
        self._directory.mkdir(parents=True, exist_ok=True)
        self._path = self._directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._opened_at: float | None = None
        self._write("")
        #: how many times and how long in all this worker waited after a commit
        self.waits = 0
        self.waited_s = 0.0

    def _write(self, text: str) -> None:
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self._path)

    def opened(self) -> None:
        """The worker's transaction is about to get its first record."""
        if self._opened_at is None:
            self._opened_at = time.time()
            self._write(repr(self._opened_at))

    def ended(self) -> None:
        """The worker's transaction ended (committed or aborted)."""
        if self._opened_at is not None:
            self._opened_at = None
            self._write("")

    def _open_before(self, moment: float) -> list[str]:
        """The other workers whose open transaction got its first record before
        ``moment``."""
        found = []
        for path in self._directory.iterdir():
            if path == self._path or path.suffix == ".tmp":
                continue
            try:
                pid = int(path.name.split("-", 1)[0])
            except ValueError:
                continue
            if not _alive(pid):  # its process is gone (a kill -9: no close)
                path.unlink(missing_ok=True)
                continue
            try:
                text = path.read_text()
            except OSError:
                continue  # replaced or removed meanwhile
            try:
                opened_at = float(text) if text else None
            except ValueError:
                continue
            if opened_at is not None and opened_at < moment:
                found.append(path.name)
        return found

    def wait_for_peers(self, committed_at: float) -> None:
        """After this worker's commit that began at ``committed_at`` (wall clock): wait until
        no other worker holds a transaction opened before it, at most :data:`WAIT_LIMIT_S`."""
        started = time.monotonic()
        deadline = started + WAIT_LIMIT_S
        waited = False
        while self._open_before(committed_at):
            waited = True
            if time.monotonic() >= deadline:
                _log.debug("commit_barrier_passed_open", waited_s=WAIT_LIMIT_S)
                break
            time.sleep(POLL_S)
        if waited:
            self.waits += 1
            self.waited_s += time.monotonic() - started

    def close(self) -> None:
        """The worker's producer closes."""
        for path in (self._path, self._path.with_suffix(".tmp")):
            path.unlink(missing_ok=True)
