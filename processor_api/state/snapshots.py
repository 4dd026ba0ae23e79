"""Warm failover: a task's persistent stores snapshotted after commits, restored from them.

After a commit, at most every ``state.snapshot.interval.ms``, each persistent logged store of a
task is checkpointed by RocksDB (hard links of its SST files, on the task's own disk, in
milliseconds) and the checkpoint is handed to this process's uploader thread, which sends the
files its store's snapshot directory does not hold yet and then the manifest
(``snapshot_files.py``), keeps the newest ``state.snapshot.retained`` snapshots and deletes the
rest. The commit never waits for an upload: a store whose previous checkpoint is still queued
has that one replaced by the newer one, so at most one checkpoint per store waits. The local
stores hold only committed writes when they are checkpointed (the batch buffers are applied
after the transaction commits), so under ``exactly_once_v2`` a snapshot holds committed state
only.

A task whose store has no usable local copy asks for the newest snapshot at or below its
committed changelog offset; a snapshot that is unreadable, incomplete, corrupt (checksums) or
made for another store (its identity) is passed over with a warning for the next older one,
and without any the store is replayed from offset 0 as before.

In-memory stores are not snapshotted: they live in the Python worker, are rebuilt from the
changelog wherever the task runs, and are meant for state small enough for that.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.state.snapshot_files import (
    DEFAULT_PRUNE_GRACE_S,
    SnapshotManifest,
    StoreSnapshotDir,
    Throttle,
    UploadedFiles,
    open_location,
)

_log = get_logger("processor_api.snapshots")

#: Under a task's directory: RocksDB checkpoints waiting for (or in) their upload.
STAGING_DIR = "snapshot-staging"


@dataclass(frozen=True)
class SnapshotSettings:
    """Where and how often a run's tasks snapshot their stores (``state.snapshot.*``)."""

    location: str
    interval_ms: int
    retained: int = 2
    filesystem_options: dict[str, Any] = field(default_factory=dict)
    max_bytes_per_s: int = 0
    prune_grace_s: float = DEFAULT_PRUNE_GRACE_S


@dataclass(frozen=True)
class SnapshotRestored:
    """A store brought back from a snapshot: which one, and what it cost."""

    manifest: SnapshotManifest
    duration_s: float
    passed_over: int  # newer snapshots that could not be used


@dataclass
class _Upload:
    #: The store's snapshot directory, opened by the upload thread: opening a location
    #: imports ``pyarrow.fs`` (about 0.3 s the first time), which the task's loop must not wait for.
    directory: Callable[[], StoreSnapshotDir]
    key: str  # the store's location, as configured (one pending upload per key)
    checkpoint: Path
    template: SnapshotManifest
    settings: SnapshotSettings
    log: Any
    on_done: Callable[[SnapshotManifest], None] | None = None


class SnapshotUploader:
    """The process's one upload thread: the checkpoints it is given, one at a time."""

    def __init__(self) -> None:
        self._pending: dict[str, _Upload] = {}  # newest waiting checkpoint per store directory
        self._order: queue.Queue[str] = queue.Queue()
        self._guard = threading.Lock()
        self._uploaded: dict[str, UploadedFiles] = {}
        self._busy = 0
        self._idle = threading.Condition(self._guard)
        self._thread: threading.Thread | None = None

    def submit(self, upload: _Upload) -> None:
        root = upload.key
        with self._guard:
            replaced = self._pending.get(root)
            self._pending[root] = upload
            if replaced is None:
                self._order.put(root)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="processor-api-snapshots", daemon=True
                )
                self._thread.start()
        if replaced is not None:  # a newer checkpoint of the same store supersedes it
            shutil.rmtree(replaced.checkpoint, ignore_errors=True)

    def uploaded_files(self, root: str) -> UploadedFiles:
        with self._guard:
            return self._uploaded.setdefault(root, UploadedFiles())

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or uploading (tests, and a clean close)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _run(self) -> None:
        while True:
            root = self._order.get()
            with self._guard:
                upload = self._pending.pop(root, None)
                if upload is not None:
                    self._busy += 1
            if upload is None:
                continue
            try:
                self._upload(upload)
            finally:
                shutil.rmtree(upload.checkpoint, ignore_errors=True)
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

    def _upload(self, upload: _Upload) -> None:
        started = time.monotonic()
        settings = upload.settings
        try:
            directory = upload.directory()
        except Exception as exc:  # noqa: BLE001 - as a failed upload below
            upload.log.warning(
                "snapshot_upload_failed",
                location=upload.key,
                error=f"{type(exc).__name__}: {exc}",
                detail="the store stays restorable from its changelog and older snapshots",
            )
            return
        uploaded = self.uploaded_files(directory.root)
        try:
            manifest, sent = directory.upload(
                upload.checkpoint,
                template=upload.template,
                uploaded=uploaded,
                throttle=Throttle(settings.max_bytes_per_s),
            )
            pruned = directory.prune(settings.retained, grace_s=settings.prune_grace_s)
            uploaded.forget_missing(directory.referenced_objects())
        except Exception as exc:  # noqa: BLE001 - a failed upload costs warmth, not data
            upload.log.warning(
                "snapshot_upload_failed",
                location=directory.root,
                error=f"{type(exc).__name__}: {exc}",
                detail="the store stays restorable from its changelog and older snapshots",
            )
            return
        upload.log.info(
            "snapshot_uploaded",
            store=manifest.store,
            offset=manifest.offset,
            files=len(manifest.files),
            bytes=manifest.total_bytes,
            bytes_sent=sent,
            manifests_deleted=pruned[0],
            files_deleted=pruned[1],
            duration_s=round(time.monotonic() - started, 3),
        )
        if upload.on_done is not None:
            upload.on_done(manifest)


#: This process's uploader (the worker hosts of one executor share it).
UPLOADER = SnapshotUploader()


class TaskSnapshots:
    """One task's side of snapshots: when one is due, taking it, and restoring from one."""

    def __init__(
        self,
        settings: SnapshotSettings,
        *,
        task_id: str,
        partition: int,
        directory: Path,
        uploader: SnapshotUploader = UPLOADER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.task_id = task_id
        self.partition = partition
        self.staging = directory / STAGING_DIR
        self._uploader = uploader
        self._clock = clock
        self._last = clock()  # the first snapshot is due one interval after the task started
        #: Per store, the changelog offset of the newest snapshot this task took or restored
        #: from: a clean close snapshots only the stores that moved past it.
        self.offsets: dict[str, int] = {}
        self._filesystem: tuple[Any, str] | None = None
        self._log = _log.bind(task=task_id)
        shutil.rmtree(self.staging, ignore_errors=True)  # a dead process's leftovers

    def store_dir(self, store: str) -> StoreSnapshotDir:
        if self._filesystem is None:
            self._filesystem = open_location(
                self.settings.location, self.settings.filesystem_options
            )
        filesystem, root = self._filesystem
        return StoreSnapshotDir(filesystem, f"{root}/{self.task_id}/{store}")

    def due(self) -> bool:
        return (self._clock() - self._last) * 1000 >= self.settings.interval_ms

    def take(
        self,
        checkpoints: list[tuple[str, Callable[[Path], None], str, int, dict[str, Any]]],
    ) -> None:
        """Checkpoint each ``(store, make_checkpoint, changelog topic, offset, identity)`` now
        and queue the uploads (call right after a commit)."""
        self._last = self._clock()
        for store, make_checkpoint, topic, offset, identity in checkpoints:
            target = self.staging / f"{store}-{offset}-{time.monotonic_ns()}"
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                make_checkpoint(target)
            except Exception as exc:  # noqa: BLE001 - e.g. a full disk; the commit stands
                shutil.rmtree(target, ignore_errors=True)
                self._log.warning("snapshot_checkpoint_failed", store=store, error=str(exc))
                continue
            self.offsets[store] = offset
            template = SnapshotManifest(
                task=self.task_id,
                store=store,
                changelog_topic=topic,
                partition=self.partition,
                offset=offset,
                created_ms=0,
                identity=identity,
                files=(),
            )
            self._uploader.submit(
                _Upload(
                    partial(self.store_dir, store),
                    f"{self.settings.location}/{self.task_id}/{store}",
                    target,
                    template,
                    self.settings,
                    self._log,
                )
            )

    def restore(
        self, store: str, target: Path, max_offset: int, identity: dict[str, Any]
    ) -> SnapshotRestored | None:
        """Download the newest usable snapshot of ``store`` at or below ``max_offset`` into the
        new directory ``target``; ``None`` (and ``target`` absent) when there is none."""
        started = time.monotonic()
        directory = self.store_dir(store)
        try:
            candidates = directory.manifests()
        except Exception as exc:  # noqa: BLE001 - an unreachable location means a full replay
            self._log.warning(
                "snapshot_unusable",
                store=store,
                location=directory.root,
                reason=f"cannot list the snapshots: {type(exc).__name__}: {exc}",
                detail="the store is replayed from its changelog",
            )
            return None
        passed_over = 0
        for relative, manifest in candidates:
            if manifest is not None and manifest.offset > max_offset:
                continue  # written ahead of what was committed (or by a newer attempt)
            reason = None
            if manifest is None:
                reason = "the manifest does not parse"
            elif manifest.identity != _comparable(identity):
                reason = "it was made for another store (identity differs)"
            else:
                try:
                    directory.download(
                        manifest,
                        target,
                        on_progress=partial(self._download_progress, store, manifest.offset),
                    )
                except (StoreError, OSError) as exc:
                    reason = str(exc)
            if reason is None and manifest is not None:
                uploaded = self._uploader.uploaded_files(directory.root)
                for entry in manifest.files:
                    if entry.name.endswith(".sst"):
                        uploaded.remember(target / entry.name, entry)
                self.offsets[store] = manifest.offset
                return SnapshotRestored(manifest, time.monotonic() - started, passed_over)
            shutil.rmtree(target, ignore_errors=True)
            passed_over += 1
            self._log.warning(
                "snapshot_unusable",
                store=store,
                snapshot=f"{directory.root}/{relative}",
                reason=reason,
                detail="an older snapshot is tried, else the store is replayed from its changelog",
            )
        return None

    def _download_progress(self, store: str, offset: int, done: int, total: int) -> None:
        self._log.info(
            "snapshot_download_progress",
            store=store,
            offset=offset,
            downloaded_bytes=done,
            total_bytes=total,
        )


#: How long a host that closes its tasks at the end of a run waits for their snapshots'
#: uploads: below the driver's wait for the host's answer (``host_client.close_hosts``, 120 s).
CLOSE_UPLOAD_WAIT_S = 100.0


def finish_uploads(
    timeout_s: float = CLOSE_UPLOAD_WAIT_S, uploader: SnapshotUploader = UPLOADER
) -> bool:
    """Wait until this process's queued snapshots are uploaded (before the process exits at
    the end of a run); False, with a warning, when ``timeout_s`` ran out first."""
    if uploader.wait_idle(timeout_s):
        return True
    _log.warning(
        "snapshot_uploads_unfinished",
        waited_s=timeout_s,
        detail="the process exits with snapshots not uploaded: a task restored elsewhere uses "
        "an older snapshot and replays a longer changelog tail",
    )
    return False


def _comparable(identity: dict[str, Any]) -> dict[str, Any]:
    """``identity`` as it reads back from JSON (tuples become lists)."""
    return dict(json.loads(json.dumps(identity, sort_keys=True)))


def settings_from_config(config: Any) -> SnapshotSettings | None:
    """The snapshot settings of a :class:`~processor_api.config.StreamsConfig`, or ``None``
    when snapshots are off (no location, or ``state.snapshot.interval.ms`` below 0)."""
    location = config.state_snapshot_location
    if not location or config.state_snapshot_interval_ms < 0:
        return None
    return SnapshotSettings(
        location=os.fspath(location),
        interval_ms=config.state_snapshot_interval_ms,
        retained=config.state_snapshot_retained,
        filesystem_options=dict(config.state_snapshot_filesystem_options),
        max_bytes_per_s=config.state_snapshot_max_bytes_per_second,
    )


__all__ = [
    "SnapshotRestored",
    "SnapshotSettings",
    "SnapshotUploader",
    "TaskSnapshots",
    "UPLOADER",
    "finish_uploads",
    "settings_from_config",
]
