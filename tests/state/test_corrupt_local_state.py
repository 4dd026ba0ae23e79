"""Issue 21: corrupt or foreign local state is detected, wiped and restored from the changelog,
with one warning naming the task and the file; never a crash loop, never wrong results.

Real RocksDB stores on disk; the changelog is the list of change records the store's logging
layer produced (the embedded-broker version is ``tests/kafka/test_corrupt_state_restore.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from processor_api.errors import StoreError
from processor_api.serdes import Serdes
from processor_api.state import Stores
from processor_api.state.locks import TaskLock
from processor_api.state.manager import IDENTITY_FILE, wipe_application_state
from tests.harness.corrupt_state import CORRUPTIONS, STORE, task_stores

APP = "corrupt-app"
ENTRIES = 5_000


def _committed_task(task_dir):
    """A task whose store was written, committed and closed; returns (changelog, contents)."""
    stores = task_stores(task_dir, APP)
    store = stores.stacks[STORE].store
    store.put_all([(f"key-{i}", i) for i in range(ENTRIES)])
    store.delete("key-7")
    stack = stores.stacks[STORE]
    stack.flush()
    changes = [(c.key, c.value) for c in stack.changelog.drain_changes()]
    stores.commit({STORE: len(changes)})
    contents = dict(store.all())
    stores.close()
    return changes, contents


def _reader(changes, calls):
    def read(topic, partition, start, end, apply, **options):
        calls.append((topic, partition, start, end))
        apply(changes[start:end])
        return end - start

    return read


def _warnings(logs):
    return [e for e in logs if e["log_level"] == "warning"]


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_damaged_local_state_is_wiped_and_restored_with_one_warning(tmp_path, corruption):
    task_dir = tmp_path / APP / "0_0"
    changes, contents = _committed_task(task_dir)
    damaged = CORRUPTIONS[corruption](task_dir)
    calls: list[tuple] = []
    with capture_logs() as logs:
        stores = task_stores(task_dir, APP)
        restored = stores.restore({STORE: len(changes)}, _reader(changes, calls))
    try:
        assert restored == {STORE: len(changes)}
        assert calls == [(f"{APP}-{STORE}-changelog", 0, 0, len(changes))]
        assert dict(stores.stacks[STORE].store.all()) == contents
        (warning,) = _warnings(logs)
        assert warning["event"] == "corrupt_local_state_wiped"
        assert warning["task"] == "0_0" and warning["file"] == str(damaged)
        stores.commit({STORE: len(changes)})
    finally:
        stores.close()
    # repaired for good: the next open uses the local copy as it is, quietly
    calls.clear()
    with capture_logs() as logs:
        again = task_stores(task_dir, APP)
        try:
            assert again.restore({STORE: len(changes)}, _reader(changes, calls)) == {}
            assert dict(again.stacks[STORE].store.all()) == contents
        finally:
            again.close()
    assert calls == [] and _warnings(logs) == []


def test_a_crash_after_the_wipe_does_not_leave_a_checkpoint_vouching_for_the_empty_store(
    tmp_path,
):
    task_dir = tmp_path / APP / "0_0"
    changes, contents = _committed_task(task_dir)
    CORRUPTIONS["no_identity"](task_dir)
    wiped = task_stores(task_dir, APP)  # wiped at open; the "crash" comes before the restore
    wiped.close()
    calls: list[tuple] = []
    stores = task_stores(task_dir, APP)
    try:
        stores.restore({STORE: len(changes)}, _reader(changes, calls))
        assert calls == [(f"{APP}-{STORE}-changelog", 0, 0, len(changes))]
        assert dict(stores.stacks[STORE].store.all()) == contents
    finally:
        stores.close()


def test_a_store_of_another_topology_version_is_wiped(tmp_path):
    task_dir = tmp_path / APP / "0_0"
    _committed_task(task_dir)
    # the new version keeps the store's name but makes it a timestamped key-value store
    builder = Stores.timestamped_key_value_store_builder(
        Stores.persistent_timestamped_key_value_store(STORE), Serdes.string(), Serdes.long()
    )
    with capture_logs() as logs:
        stores = task_stores(task_dir, APP, builder)
        try:
            assert stores.restore({STORE: 0}, _reader([], [])) == {}
            assert list(stores.stacks[STORE].store.all()) == []
        finally:
            stores.close()
    (warning,) = _warnings(logs)
    assert warning["file"] == str(task_dir / "rocksdb" / STORE / IDENTITY_FILE)
    assert "kind" in warning["reason"] and "TimestampedKeyValue" in warning["reason"]
    identity = json.loads((task_dir / "rocksdb" / STORE / IDENTITY_FILE).read_text())
    assert identity["kind"].startswith("TimestampedKeyValueStoreBuilder")


def test_a_store_that_cannot_be_opened_for_another_reason_is_not_wiped(tmp_path):
    task_dir = tmp_path / APP / "0_0"
    _committed_task(task_dir)
    holder = task_stores(task_dir, APP)  # the RocksDB LOCK is held: not corruption
    try:
        with pytest.raises(StoreError, match="lock"):
            task_stores(task_dir, APP)
        assert len(list(holder.stacks[STORE].store.all())) == ENTRIES - 1
    finally:
        holder.close()


_DIES_HOLDING_THE_LOCK = """
import os, signal, sys
from pathlib import Path
from processor_api.state.locks import TaskLock

TaskLock(Path(sys.argv[1]), "0_0").__enter__()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_lock_of_a_dead_process_is_taken_over_with_one_warning(tmp_path):
    task_dir = tmp_path / APP / "0_0"
    died = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_DIES_HOLDING_THE_LOCK), str(task_dir)],
        capture_output=True,
        text=True,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    dead_pid = int((task_dir / ".lock").read_text())
    with capture_logs() as logs:
        lock = TaskLock(task_dir, "0_0", timeout_s=0.0).__enter__()  # no waiting
    lock.__exit__(None, None, None)
    (warning,) = _warnings(logs)
    assert warning["event"] == "stale_task_lock_taken_over"
    assert (warning["task"], warning["file"], warning["dead_pid"]) == (
        "0_0",
        str(task_dir / ".lock"),
        dead_pid,
    )
    # a clean exit leaves no pid behind: nothing to report next time
    with capture_logs() as logs:
        TaskLock(task_dir, "0_0", timeout_s=0.0).__enter__().__exit__(None, None, None)
    assert _warnings(logs) == [] and os.path.getsize(task_dir / ".lock") == 0


class _Killed(BaseException):
    """The process killed in the middle of deleting a store (kill -9, as the soak does)."""


def _killed_halfway(path, *args, **kwargs):
    """``shutil.rmtree`` killed after it deleted the ``MANIFEST`` files under ``path``."""
    for manifest in Path(path).rglob("MANIFEST-*"):
        manifest.unlink()
    raise _Killed


def _restores_everything_from_offset_0(task_dir, changes, contents):
    calls: list[tuple] = []
    again = task_stores(task_dir, APP)
    try:
        assert again.restore({STORE: len(changes)}, _reader(changes, calls)) == {
            STORE: len(changes)
        }
        assert calls == [(f"{APP}-{STORE}-changelog", 0, 0, len(changes))]
        assert dict(again.stacks[STORE].store.all()) == contents
    finally:
        again.close()


def test_a_kill_in_the_middle_of_wiping_a_store_leaves_no_half_deleted_copy(tmp_path, monkeypatch):
    """Seen in ``make soak``: a run killed while it wiped a store (a local copy ahead of the
    commit) left ``CURRENT`` without its ``MANIFEST``, and every later run failed to open the
    store. The removal is a rename first: whole or gone, whenever the kill lands."""
    import processor_api.state.manager as manager

    task_dir = tmp_path / APP / "0_0"
    changes, contents = _committed_task(task_dir)
    stores = task_stores(task_dir, APP)
    with monkeypatch.context() as patched:
        patched.setattr(manager.shutil, "rmtree", _killed_halfway)
        with pytest.raises(_Killed):
            # the commit is behind the local copy (a copy from a later, uncommitted run): wiped
            stores.restore({STORE: len(changes) - 1}, _reader(changes, []))
    _restores_everything_from_offset_0(task_dir, changes, contents)
    assert not list((task_dir / "rocksdb").glob(".removing-*")), "the interrupted removal stays"


def test_a_kill_in_the_middle_of_cleanup_leaves_no_half_deleted_task(tmp_path, monkeypatch):
    """``run-topology --cleanup`` deletes whole task directories. Killed half-way (Ctrl-C, kill
    -9), it must not leave a checkpoint next to a store without its ``MANIFEST``: that copy
    would fail every later run. Each task directory is renamed first, then deleted."""
    import processor_api.state.manager as manager

    task_dir = tmp_path / APP / "0_0"
    changes, contents = _committed_task(task_dir)
    with monkeypatch.context() as patched:
        patched.setattr(manager.shutil, "rmtree", _killed_halfway)
        with pytest.raises(_Killed):
            wipe_application_state(tmp_path, APP)
    _restores_everything_from_offset_0(task_dir, changes, contents)
    assert wipe_application_state(tmp_path, APP) == 1, "the restored task is wiped again"
    assert sorted(p.name for p in (tmp_path / APP).iterdir()) == [], "leftovers stay"
