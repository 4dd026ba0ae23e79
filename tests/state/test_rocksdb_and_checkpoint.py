"""RocksDB persistence and locking, and the checkpoint file."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from processor_api.errors import StoreError
from processor_api.state import (
    RocksDBBytesStore,
    Stores,
    delete_checkpoint,
    read_checkpoint,
    write_checkpoint,
)


def test_rocksdb_data_survives_close_and_reopen(tmp_path):
    path = tmp_path / "nested" / "db"
    store = RocksDBBytesStore("s", path)
    store.put_all([(b"k%03d" % i, b"v%d" % i) for i in range(300)])
    store.put(b"k007", None)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="'s' is closed"):
        store.get(b"k001")
    store = RocksDBBytesStore("s", path)
    assert store.get(b"k001") == b"v1"
    assert store.get(b"k007") is None
    assert len(list(store.range(None, None))) == 299
    store.close()


def _wal_bytes(path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log"))


@pytest.mark.parametrize("flush", [True, False], ids=["flushed", "closed-unflushed"])
def test_store_without_wal_keeps_its_data_over_close_and_reopen(tmp_path, flush):
    store = Stores.persistent_key_value_store("counts").get(tmp_path)
    path = tmp_path / "rocksdb" / "counts"
    store.put_all([(b"k%03d" % i, b"v%d" % i) for i in range(300)])
    store.put(b"k001", b"new")
    store.put(b"k007", None)
    assert store.delete(b"k008") == b"v8"
    assert _wal_bytes(path) == 0  # Stores' RocksDB stores write no write-ahead log
    if flush:
        store.flush()
    store.close()
    store = RocksDBBytesStore("counts", path, disable_wal=True)
    assert store.get(b"k000") == b"v0"
    assert store.get(b"k001") == b"new"
    assert store.get(b"k007") is None and store.get(b"k008") is None
    assert len(list(store.range(None, None))) == 298
    store.close()


def test_flushed_data_without_wal_survives_a_hard_exit(tmp_path):
    """What the checkpoint relies on: after flush() the data is in SST files, WAL or not."""
    path = tmp_path / "db"
    script = textwrap.dedent(
        f"""
        import os
        from processor_api.state import RocksDBBytesStore
        store = RocksDBBytesStore("s", {str(path)!r}, disable_wal=True)
        store.put_all([(b"k%03d" % i, b"v") for i in range(100)])
        store.put(b"k050", None)
        store.flush()
        os._exit(0)  # no close(): as if the process was killed
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    store = RocksDBBytesStore("s", path)
    assert store.get(b"k000") == b"v" and store.get(b"k050") is None
    assert len(list(store.range(None, None))) == 99
    store.close()


def test_committed_task_state_survives_a_hard_exit(tmp_path):
    """TaskStores.commit flushes the WAL-less RocksDB memtables before the checkpoint."""
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from processor_api.state.manager import TaskStores
        from processor_api.serdes import Serdes
        from processor_api.state import Stores

        builder = Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        )
        stores = TaskStores(
            application_id="app", task_id="0_0", partition=0, directory=Path({str(tmp_path)!r}),
            builders={{"counts": builder}}, changelog_topics={{"counts": "app-counts-changelog"}},
            timestamp_fn=lambda: 0,
        )
        store = stores.build(builder, lambda: 0).store
        store.put_all([("key-%d" % i, i) for i in range(1000)])
        store.delete("key-5")
        stores.commit({{"counts": 1001}})
        store.put("key-0", 42)  # the next batch, not committed
        os._exit(0)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    from processor_api.serdes import Serdes
    from processor_api.state.manager import TaskStores

    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    stores = TaskStores(
        application_id="app",
        task_id="0_0",
        partition=0,
        directory=tmp_path,
        builders={"counts": builder},
        changelog_topics={"counts": "app-counts-changelog"},
        timestamp_fn=lambda: 0,
    )
    store = stores.build(builder, lambda: 0).store
    assert stores.local_positions() == {"counts": 1001}
    assert store.get("key-0") == 0 and store.get("key-999") == 999 and store.get("key-5") is None
    assert sum(1 for _ in store.all()) == 999
    stores.close()


def test_second_open_while_open_fails_with_store_error(tmp_path):
    store = RocksDBBytesStore("s", tmp_path / "db")
    with pytest.raises(StoreError, match="cannot open RocksDB store 's'"):
        RocksDBBytesStore("s", tmp_path / "db")
    store.close()


def test_close_releases_the_lock_for_another_process(tmp_path):
    path = tmp_path / "db"
    store = RocksDBBytesStore("s", path)
    store.put_all([(b"%04d" % i, b"x") for i in range(500)])
    unfinished = store.range(None, None)
    assert next(unfinished) == (b"0000", b"x")  # iterators left open must not pin the DB
    unstarted = store.range(b"0100", None, reverse=True)
    prefixed = store.prefix_scan(b"01")
    assert next(prefixed) == (b"0100", b"x")
    store.close()
    script = textwrap.dedent(
        f"""
        import rocksdict
        db = rocksdict.Rdict({str(path)!r}, rocksdict.Options(raw_mode=True))
        assert db.get(b"0499") == b"x"
        db.put(b"from-child", b"1")
        db.close()
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for iterator in (unfinished, unstarted, prefixed):
        with pytest.raises(StoreError, match="closed"):
            next(iterator)
    store = RocksDBBytesStore("s", path)
    assert store.get(b"from-child") == b"1"
    store.close()


def test_destroy_removes_the_store_directory(tmp_path):
    path = tmp_path / "db"
    store = RocksDBBytesStore("s", path)
    store.put(b"k", b"v")
    store.close()
    RocksDBBytesStore.destroy(path)
    assert not path.exists()
    RocksDBBytesStore.destroy(path)  # absent: no-op
    store = RocksDBBytesStore("s", path)
    assert store.get(b"k") is None
    store.close()


def test_checkpoint_round_trip(tmp_path):
    path = tmp_path / "app" / "0_1" / ".checkpoint"
    assert read_checkpoint(path) == {}
    offsets = {("app-counts-changelog", 1): 1234, ("app-other-changelog", 1): 0}
    write_checkpoint(path, offsets)
    assert read_checkpoint(path) == offsets
    assert path.read_text() == "0\n2\napp-counts-changelog 1 1234\napp-other-changelog 1 0\n"
    write_checkpoint(path, {("app-counts-changelog", 1): 2000})
    assert read_checkpoint(path) == {("app-counts-changelog", 1): 2000}
    assert [p.name for p in path.parent.iterdir()] == [".checkpoint"], "no temp file left"
    write_checkpoint(path, {})
    assert read_checkpoint(path) == {}
    delete_checkpoint(path)
    assert not path.exists()
    delete_checkpoint(path)  # absent: no-op


@pytest.mark.parametrize(
    ("content", "line", "why"),
    [
        ("", 1, "empty file"),
        ("1\n0\n", 1, "unsupported version"),
        ("0\n", 2, "missing the entry count"),
        ("0\ntwo\n", 2, "entry count 'two' is not an integer"),
        ("0\n2\nt 0 5\n", 4, "file ends after 1 of 2 entries"),
        ("0\n1\nt 0 5\nt 1 6\n", 4, "more entries than the count"),
        ("0\n2\nt 0 5\nt 1\n", 4, "expected 'topic partition offset'"),
        ("0\n1\nt x 5\n", 3, "partition and offset must be integers"),
    ],
)
def test_corrupt_checkpoint_names_file_and_line(tmp_path, content, line, why):
    path = tmp_path / ".checkpoint"
    path.write_text(content)
    with pytest.raises(StoreError, match=f"{re.escape(str(path))} at line {line}: {why}"):
        read_checkpoint(path)


def test_checkpoint_rejects_invalid_entries_on_write(tmp_path):
    with pytest.raises(StoreError, match="invalid topic"):
        write_checkpoint(tmp_path / "c", {("bad topic", 0): 1})
    with pytest.raises(StoreError, match="invalid partition/offset"):
        write_checkpoint(tmp_path / "c", {("t", 0): -1})
    assert not (tmp_path / "c").exists()


def test_a_local_copy_ahead_of_the_commit_is_wiped_and_said_so_at_info(tmp_path):
    from structlog.testing import capture_logs

    from processor_api.serdes import Serdes
    from processor_api.state.manager import TaskStores

    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )

    def open_stores() -> TaskStores:
        stores = TaskStores(
            application_id="app", task_id="0_0", partition=0, directory=tmp_path,
            builders={"counts": builder}, changelog_topics={"counts": "app-counts-changelog"},
            timestamp_fn=lambda: 0,
        )  # fmt: skip
        stores.build(builder, lambda: 0)
        return stores

    stores = open_stores()
    stores.stacks["counts"].store.put("uncommitted", 1)
    stores.commit({"counts": 10})  # checkpointed, but the batch never committed upstream
    stores.close()
    stores = open_stores()
    with capture_logs() as logs:
        assert stores.restore({"counts": 0}, reader=None) == {}
    (wipe,) = [e for e in logs if e["event"] == "store_wipe"]
    assert (wipe["reason"], wipe["local_offset"], wipe["committed_offset"]) == (
        "local copy ahead", 10, 0,
    )  # fmt: skip
    assert wipe["log_level"] == "info"  # routine after a crash: the changelog has the truth
    assert stores.stacks["counts"].store.get("uncommitted") is None
    stores.close()
