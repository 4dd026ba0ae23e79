"""A task's local state on an executor: directory, lock, stores, checkpoint and restore.

Layout: ``<state-dir>/<application.id>/<task>/`` holds ``.lock``, ``.checkpoint`` (Kafka
Streams' OffsetCheckpoint format: changelog topic, partition, offset) and ``rocksdb/<store>``.

The committed state (Spark's GroupState) says, per store, the changelog end offset the
store must match. On open, the local copy is compared with it:

* local position == committed: use it as it is;
* local position < committed, or no local copy: replay the changelog from the local position
  (0 for a missing store) up to the committed offset;
* local position > committed (a failed attempt wrote ahead), or unknown (the checkpoint was
  invalidated by an attempt that died mid-batch): wipe the store and replay from 0.

Local state that cannot be trusted is never used and never fails the task: a ``.checkpoint``
that does not parse, a RocksDB store that reports corruption when opened (a truncated SST file),
or a store directory whose identity file (``rocksdb/<store>/.store-identity``: application id,
task, store, changelog topic, store kind, serdes) is missing or does not match the topology
running now (another application's or another topology version's store) is logged once as a
warning naming the task and the file, and the store is wiped and restored from its changelog.
A lock file left by a dead process is no obstacle: the locks are ``flock`` locks, which the
kernel releases when their process dies (``locks.py``).

Every store has a :class:`~processor_api.state.batch_buffer.BatchBufferBytesStore` right above
its innermost store: a batch's writes stay in memory until :meth:`TaskStores.commit`, which runs
once the batch's changelog records are durable (acknowledged, or committed in the batch's
transaction). ``commit`` deletes the checkpoint, applies every buffer in one write batch per
store, then writes the checkpoint: a crash in that short window leaves no checkpoint, which
forces a full restore; a crash anywhere else leaves the local store exactly at its checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.restore_listener import StateRestoreListener, TopicPartition
from processor_api.state.base import BytesStore
from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.state.builder import StoreBuilder, StoreStack
from processor_api.state.changelogging import ChangeLoggingBytesStore
from processor_api.state.checkpoint import delete_checkpoint, read_checkpoint, write_checkpoint
from processor_api.state.snapshots import SnapshotRestored, TaskSnapshots

_log = get_logger("processor_api.task_state")

TASK_DIR_PATTERN = re.compile(r"\d+_\d+")
#: A worker's copy of the global stores: ``global-<worker>`` (``runtime/worker_globals.py``).
WORKER_GLOBAL_PREFIX = "global-"
#: In every persistent store's directory: what the store holds (see :meth:`TaskStores.identity`).
IDENTITY_FILE = ".store-identity"
_CORRUPT_FILE = re.compile(r"Corruption: [^/]*(/\S+?)[.:,]?(?:\s|$)")

# In-memory stores live as long as the Python worker: (app, task, store) -> (store, position).
_IN_MEMORY: dict[tuple[str, str, str], tuple[BytesStore, int]] = {}
_IN_MEMORY_GUARD = threading.Lock()


def task_directory(state_dir: str | os.PathLike[str], application_id: str, task_id: str) -> Path:
    return Path(state_dir) / application_id / task_id


ChangelogReader = Callable[..., int]
"""``reader(topic, partition, start, end, apply_batch) -> records`` replays [start, end) as
``(key, value)`` batches; with ``with_timestamps=True`` (versioned stores) as
``(key, value, timestamp)`` batches; given ``on_batch=callback``, it calls
``callback(next_offset, records)`` after each batch is applied."""


class TaskStores:
    """Opens, validates, restores and checkpoints the stores of one task."""

    def __init__(
        self,
        *,
        application_id: str,
        task_id: str,
        partition: int,
        directory: Path,
        builders: Mapping[str, StoreBuilder],
        changelog_topics: Mapping[str, str],
        timestamp_fn: Callable[[], int],
        source_changelogs: frozenset[str] = frozenset(),
        snapshots: TaskSnapshots | None = None,
    ) -> None:
        self.application_id = application_id
        self.task_id = task_id
        self.partition = partition
        self.directory = directory
        self.checkpoint_path = directory / ".checkpoint"
        self._builders = dict(builders)
        self._changelog_topics = dict(changelog_topics)
        # Read-only state stores: not logged, their changelog is their source topic.
        self._source_changelogs = source_changelogs
        self._timestamp_fn = timestamp_fn
        self.stacks: dict[str, StoreStack] = {}
        self.buffers: dict[str, BatchBufferBytesStore] = {}
        self._had_local_copy: dict[str, bool] = {}
        self._warned_checkpoint = False  # a corrupt checkpoint is reported once, not per store
        self._snapshots = snapshots
        self._positions: dict[str, int] = {}  # per logged store, the changelog offset it holds
        #: Per store restored from a snapshot by :meth:`restore`, the snapshot's offset.
        self.snapshot_offsets: dict[str, int] = {}
        self._log = _log.bind(task=task_id)

    # ------------------------------------------------------------------- open
    def build(self, builder: StoreBuilder, timestamp_fn: Callable[[], int]) -> StoreStack:
        """Store factory for :class:`~processor_api.engine.task.Task` (buffered stores)."""
        self._timestamp_fn = timestamp_fn
        self._builders[builder.name] = builder  # as the task bound it (serdes, clocks)
        if builder.persistent:
            self._had_local_copy.setdefault(builder.name, self._store_files_exist(builder.name))
            raw = self._open_persistent(builder)
        else:
            raw = self._in_memory(builder)
        buffer = BatchBufferBytesStore(raw)
        self.buffers[builder.name] = buffer
        stack = builder.build(timestamp_fn=timestamp_fn, inner=buffer)
        if isinstance(stack.changelog, ChangeLoggingBytesStore):
            stack.changelog.keep_last_per_key()  # only those go out at a commit
        self.stacks[builder.name] = stack
        return stack

    def committed_view(self, name: str) -> Any:
        """A typed view of store ``name`` as the last commit left it: the layers a processor
        sees (without cache and change log) over the store below the batch buffer, so the
        batch's uncommitted writes are not in it. For reading only."""
        builder = copy.copy(self._builders[name])
        builder.logging_enabled = builder.caching_enabled = False
        return builder.build(timestamp_fn=self._timestamp_fn, inner=self.buffers[name].inner).store

    def identity(self, builder: StoreBuilder) -> dict[str, object]:
        """What a persistent store's local copy must hold to be used: written to its identity
        file when it is created, compared when it is opened again."""
        supplier = builder.supplier
        return {
            "application_id": self.application_id,
            "task": self.task_id,
            "store": builder.name,
            "changelog_topic": self._changelog_topics.get(builder.name),
            "kind": f"{type(builder).__name__}/{type(supplier).__name__}",
            "supplier": {
                key: value
                for key, value in sorted(vars(supplier).items())
                if isinstance(value, (str, int, float, bool)) and not key.startswith("_")
            },
            "serdes": [_type_name(builder.key_serde), _type_name(builder.value_serde)],
        }

    def _open_persistent(self, builder: StoreBuilder) -> BytesStore:
        """Open a persistent store; a foreign or corrupt local copy is wiped first (once)."""
        name = builder.name
        path = self.directory / "rocksdb" / name
        expected = self.identity(builder)
        remove_leftovers(path.parent, name)
        if path.exists():
            identity_file = path / IDENTITY_FILE
            found = _read_identity(identity_file)
            if found != expected:
                why = (
                    "no identity file: not a store this runtime made for this task"
                    if found is None
                    else "it belongs to "
                    + ", ".join(
                        f"{key} {found.get(key)!r} (expected {value!r})"
                        for key, value in expected.items()
                        if found.get(key) != value
                    )
                )
                self._discard_local_copy(name, identity_file, f"foreign store directory: {why}")
        try:
            with self._writing(f"opening store {name!r}"):
                raw = builder.supplier.get(self.directory)
        except StoreError as exc:
            if "Corruption" not in str(exc):
                raise  # e.g. locked by a live process, or the disk: not the copy's fault
            damaged = _CORRUPT_FILE.search(str(exc))  # RocksDB names the damaged file
            self._discard_local_copy(
                name, Path(damaged.group(1)) if damaged else path, f"corrupt RocksDB store: {exc}"
            )
            raw = builder.supplier.get(self.directory)  # a fresh, empty store
        try:
            self._write_identity(path, expected)
        except BaseException:
            raw.close()
            raise
        return raw

    def _write_identity(self, path: Path, expected: dict[str, object]) -> None:
        identity_file = path / IDENTITY_FILE
        if _read_identity(identity_file) != expected:
            tmp = identity_file.with_name(IDENTITY_FILE + ".tmp")
            with self._writing(f"writing {identity_file}"):
                tmp.write_text(json.dumps(expected, sort_keys=True), encoding="utf-8")
                tmp.replace(identity_file)

    def _discard_local_copy(self, name: str, file: Path, reason: str) -> None:
        """Delete a store's local copy (before it is opened) and its checkpoint entry: it is
        restored from its changelog offset 0."""
        self._log.warning(
            "corrupt_local_state_wiped",
            store=name,
            file=str(file),
            reason=reason,
            detail="the store is wiped and restored from its changelog",
        )
        remove_directory(self.directory / "rocksdb" / name)
        self._had_local_copy[name] = False
        topic = self._changelog_topics.get(name)
        try:
            offsets = read_checkpoint(self.checkpoint_path)
        except StoreError:
            offsets = None  # reported (once) and removed by local_positions
        if offsets is not None and topic is not None and (topic, self.partition) in offsets:
            # a crash before the next commit must not leave a checkpoint vouching for the
            # empty store
            del offsets[(topic, self.partition)]
            write_checkpoint(self.checkpoint_path, offsets)

    def _in_memory(self, builder: StoreBuilder) -> BytesStore:
        key = (self.application_id, self.task_id, builder.name)
        with _IN_MEMORY_GUARD:
            entry = _IN_MEMORY.get(key)
            if entry is None or not entry[0].is_open:
                # The supplier's store: plain, or segmented for window and session stores.
                entry = (builder.supplier.get(None), 0)
                _IN_MEMORY[key] = entry
        return entry[0]

    def local_positions(self) -> dict[str, int | None]:
        """Per logged store, the changelog offset the local copy holds (None: unknown)."""
        try:
            checkpoint = read_checkpoint(self.checkpoint_path)
        except StoreError as exc:
            # unreadable: every persistent store's position is unknown (wiped and restored)
            if not self._warned_checkpoint:
                self._warned_checkpoint = True
                self._log.warning(
                    "corrupt_local_state_wiped",
                    file=str(self.checkpoint_path),
                    reason=str(exc),
                    detail="the task's persistent stores are wiped and restored from their "
                    "changelogs",
                )
            delete_checkpoint(self.checkpoint_path)
            checkpoint = {}
        positions: dict[str, int | None] = {}
        for name, builder in self._builders.items():
            if not self._restorable(name):
                continue
            if builder.persistent:
                topic = self._changelog_topics[name]
                positions[name] = checkpoint.get((topic, self.partition))
            else:
                entry = _IN_MEMORY.get((self.application_id, self.task_id, name))
                position = entry[1] if entry is not None else 0
                positions[name] = position if position >= 0 else None
        return positions

    def _restorable(self, name: str) -> bool:
        return self._builders[name].logging_enabled or name in self._source_changelogs

    def restore(
        self,
        committed: Mapping[str, int],
        reader: ChangelogReader,
        listener: StateRestoreListener | None = None,
    ) -> dict[str, int]:
        """Bring every logged store in line with the committed changelog offsets.

        Returns the number of changelog records replayed per store; ``listener`` is told
        about each store's replay (start, every batch, end).
        """
        local = self.local_positions()
        replayed: dict[str, int] = {}
        for name, stack in self.stacks.items():
            if name not in local:
                continue  # logging disabled: nothing to restore from
            target = committed.get(name, 0)
            position = local[name]
            persistent = self._builders[name].persistent
            if persistent and not self._had_local_copy.get(name, False):
                position = 0  # no local copy at all, whatever a checkpoint says
            if position is not None and position == target:
                continue
            if position is None or position > target:
                reason = "unknown local position" if position is None else "local copy ahead"
                # routine (a task that moved, a stale copy): info; a corrupt checkpoint was
                # warned about once already
                self._log.info(
                    "store_wipe",
                    store=name,
                    local_offset=position,
                    committed_offset=target,
                    reason=reason,
                )
                stack = self._wipe(name)
                position = 0
            snapshot = None
            if position == 0 and target > 0 and persistent and self._snapshots is not None:
                snapshot = self._from_snapshot(name, target)
                if snapshot is not None:
                    stack, position = self.stacks[name], snapshot.manifest.offset
                    self.snapshot_offsets[name] = position
            if target > position or snapshot is not None:
                replayed[name] = self._replay(
                    name, stack, position, target, reader, listener, snapshot
                )
            self._set_in_memory_position(name, target)
            self._positions[name] = target
        return replayed

    def _from_snapshot(self, name: str, target: int) -> SnapshotRestored | None:
        """Replace the (empty) store by its newest usable snapshot at or below ``target``."""
        assert self._snapshots is not None
        builder = self._builders[name]
        path = self.directory / "rocksdb" / name
        self.buffers[name].close()
        remove_directory(path)
        expected = self.identity(builder)
        with self._writing(f"downloading a snapshot of store {name!r}"):
            restored = self._snapshots.restore(name, path, target, expected)
        if restored is not None:
            self._write_identity(path, expected)
        self._had_local_copy[name] = restored is not None
        self.build(builder, self._timestamp_fn)
        return restored

    def _store_files_exist(self, name: str) -> bool:
        return (self.directory / "rocksdb" / name).exists()

    def _wipe(self, name: str) -> StoreStack:
        builder = self._builders[name]
        self.buffers[name].close()  # closes the innermost store too
        if builder.persistent:
            remove_directory(self.directory / "rocksdb" / name)
        else:
            with _IN_MEMORY_GUARD:
                _IN_MEMORY.pop((self.application_id, self.task_id, name), None)
        return self.build(builder, self._timestamp_fn)

    def _replay(
        self,
        name: str,
        stack: StoreStack,
        start: int,
        end: int,
        reader: ChangelogReader,
        listener: StateRestoreListener | None,
        snapshot: SnapshotRestored | None = None,
    ) -> int:
        topic = self._changelog_topics[name]
        started = time.monotonic()
        # from a snapshot: which one, how big, how long its download took
        source = (
            {
                "snapshot_offset": snapshot.manifest.offset,
                "snapshot_bytes": snapshot.manifest.total_bytes,
                "snapshot_download_s": round(snapshot.duration_s, 3),
            }
            if snapshot is not None
            else {}
        )
        self._log.info(
            "restore_start",
            store=name,
            topic=topic,
            partition=self.partition,
            start_offset=start,
            end_offset=end,
            **source,
        )

        raw = self.buffers[name].inner
        builder = self._builders[name]
        write = builder.restore_writer(raw)

        skip_null_keys = name in self._source_changelogs  # a source topic may hold them

        def apply(batch: list) -> None:
            write([r for r in batch if r[0] is not None] if skip_null_keys else batch)

        options: dict[str, object] = {}
        if builder.changelog_has_versions:
            # Versioned stores: the record timestamp is the version, so replay needs it.
            options["with_timestamps"] = True
        topic_partition = TopicPartition(topic, self.partition)
        if listener is not None:
            listener.on_restore_start(topic_partition, name, start, end)

            def on_batch(next_offset: int, records: int) -> None:
                listener.on_batch_restored(topic_partition, name, next_offset, records)

            options["on_batch"] = on_batch
        with self._writing(f"restoring store {name!r}"):
            count = (
                reader(topic, self.partition, start, end, apply, **options) if end > start else 0
            )
            raw.flush()
        if listener is not None:
            listener.on_restore_end(topic_partition, name, count)
        duration = time.monotonic() - started
        self._log.info(
            "restore_done",
            store=name,
            topic=topic,
            partition=self.partition,
            records=count,
            **({"snapshot_offset": snapshot.manifest.offset} if snapshot is not None else {}),
            duration_s=round(duration, 3),
            rate_per_s=round(count / duration) if duration > 0 else None,
        )
        return count

    def _set_in_memory_position(self, name: str, position: int) -> None:
        key = (self.application_id, self.task_id, name)
        with _IN_MEMORY_GUARD:
            entry = _IN_MEMORY.get(key)
            if entry is not None:
                _IN_MEMORY[key] = (entry[0], position)

    # ------------------------------------------------------------- checkpoint
    def pending_writes(self) -> dict[str, dict[bytes, bytes | None]]:
        """Per store, a copy of the buffered writes: what a commit cut covers (the ``covered``
        of :meth:`commit`, when the commit completes after the next batch began)."""
        return {name: buffer.pending() for name, buffer in self.buffers.items()}

    def commit(
        self,
        positions: Mapping[str, int],
        covered: Mapping[str, Mapping[bytes, bytes | None]] | None = None,
    ) -> int:
        """Apply the batch's buffered writes and record the changelog offsets they reach.

        Call only once the batch's changelog records are durable. ``covered``
        (:meth:`pending_writes` at the batch's cut) applies only the batch's writes and keeps
        those made since. Returns the number of entries written to the local stores.
        """
        delete_checkpoint(self.checkpoint_path)
        self._set_in_memory_positions(-1)
        with self._writing("applying the batch's writes"):
            written = sum(
                buffer.commit(None if covered is None else covered.get(name, {}))
                for name, buffer in self.buffers.items()
            )
        offsets = {}
        for name, position in positions.items():
            builder = self._builders.get(name)
            if builder is None or not self._restorable(name):
                continue
            if builder.persistent:
                offsets[(self._changelog_topics[name], self.partition)] = position
            else:
                self._set_in_memory_position(name, position)
        with self._writing("writing the checkpoint"):
            write_checkpoint(self.checkpoint_path, offsets)
        self._positions.update(
            {name: position for name, position in positions.items() if name in self._builders}
        )
        if self._snapshots is not None and self._snapshots.due():
            self._snapshot()
        return written

    def snapshot_on_close(self) -> None:
        """A clean close: snapshot the stores whose committed state no snapshot of this task
        holds yet (as Kafka Streams writes its checkpoint when a task closes cleanly), so a
        run shorter than ``state.snapshot.interval.ms`` leaves one. RocksDB holds only
        committed writes (the batch buffer is applied at commit), so an open batch is left
        out. Nothing without snapshots."""
        if self._snapshots is not None:
            known = self._snapshots.offsets
            self._snapshot(lambda name: known.get(name) != self._positions[name])

    def _snapshot(self, wanted: Callable[[str], bool] = lambda name: True) -> None:
        """Checkpoint every persistent logged store (that is ``wanted``) and queue its upload
        (committed state)."""
        assert self._snapshots is not None
        self._snapshots.take(
            [
                (
                    name,
                    self.buffers[name].inner.create_checkpoint,
                    self._changelog_topics[name],
                    self._positions[name],
                    self.identity(builder),
                )
                for name, builder in self._builders.items()
                if builder.persistent
                and self._restorable(name)
                and name in self.buffers
                and name in self._positions
                and wanted(name)
            ]
        )

    @contextlib.contextmanager
    def _writing(self, action: str) -> Iterator[None]:
        """A full disk under the state directory becomes an error naming the directory."""
        try:
            yield
        except Exception as exc:
            if not _disk_full(exc):
                raise
            raise StoreError(
                f"task {self.task_id}: no space left on the device of state directory "
                f"{self.directory} while {action} ({exc}); free space there or use another "
                "state directory: the task resumes from its changelogs once it can write, and "
                "no checkpoint claims what the store did not get"
            ) from exc

    def discard(self) -> int:
        """Drop the batch's buffered writes (the batch failed); returns how many."""
        return sum(buffer.discard() for buffer in self.buffers.values())

    def _set_in_memory_positions(self, position: int) -> None:
        for name, builder in self._builders.items():
            if not builder.persistent:
                self._set_in_memory_position(name, position)

    def close(self) -> None:
        """Close persistent stores (in-memory ones stay with the worker process).

        Uncommitted buffered writes are dropped.
        """
        for name, buffer in self.buffers.items():
            if self._builders[name].persistent:
                try:
                    buffer.close()
                except Exception as exc:  # noqa: BLE001 - e.g. a full disk; keep closing
                    # only the checkpoint vouches for a local copy: nothing to lose here
                    self._log.warning("store_close_failed", store=name, error=str(exc))
            else:
                buffer.discard()


def _disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (an OSError, or RocksDB's IO error text) says the device is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc)


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _read_identity(path: Path) -> dict[str, object] | None:
    """A store's identity file, or None when it is missing or unreadable."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


#: A directory being removed (a store's, or a whole task's) is first renamed to
#: ``<REMOVING_PREFIX><name>-<id>`` next to it.
REMOVING_PREFIX = ".removing-"


def remove_directory(path: Path) -> None:
    """Remove a store's or a task's directory so that a crash at any moment leaves it whole
    or gone: it is renamed first (atomic), then deleted. A half-deleted RocksDB directory
    (``CURRENT`` without its ``MANIFEST``) would fail every later open; a renamed one is
    deleted by :func:`remove_leftovers`."""
    trash = path.with_name(f"{REMOVING_PREFIX}{path.name}-{uuid.uuid4().hex}")
    try:
        path.rename(trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def remove_leftovers(parent: Path, name: str = "") -> None:
    """Delete what interrupted :func:`remove_directory` calls left in ``parent`` (for the
    directory ``name`` only, or all of them)."""
    for leftover in parent.glob(f"{REMOVING_PREFIX}{name}{'-' if name else ''}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def wipe_application_state(state_dir: str | os.PathLike[str], application_id: str) -> int:
    """Delete the local stores of every task of an application (``run-topology --cleanup``).

    Like Kafka Streams' ``cleanUp()``: only local state goes; committed positions (the Spark
    checkpoint) stay, so each store is restored from its changelog on the next start; the
    workers' copies of the global stores go too. Returns how many task directories were
    deleted. Each goes by :func:`remove_directory`, so
    an interrupted cleanup leaves no task half-deleted.
    """
    target = Path(state_dir) / application_id
    wiped = 0
    if target.exists():
        remove_leftovers(target)
        for child in sorted(target.iterdir()):
            if child.is_dir() and TASK_DIR_PATTERN.fullmatch(child.name):
                remove_directory(child)
                wiped += 1
            elif child.is_dir() and child.name.startswith(WORKER_GLOBAL_PREFIX):
                remove_directory(child)  # a worker's copy of the global stores
    with _IN_MEMORY_GUARD:
        for key in [k for k in _IN_MEMORY if k[0] == application_id]:
            del _IN_MEMORY[key]
    return wiped
