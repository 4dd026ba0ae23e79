"""Snapshots of a task's RocksDB stores: taken after commits, restored with the changelog tail.

The changelog here is the list of change records the stores themselves logged, replayed by a
reader over that list: these tests are about the state layer, not the broker (the Spark and
Kafka runs are in tests/integration/test_snapshots_spark.py).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from processor_api import Serdes, Stores
from processor_api.kafka.names import changelog_topic
from processor_api.state.manager import TaskStores
from processor_api.state.snapshot_files import StoreSnapshotDir, open_location
from processor_api.state.snapshots import UPLOADER, SnapshotSettings, TaskSnapshots
from tests.state.test_store_kinds_changelog import KINDS, flushed_changes


def _key_value(kind: str):
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store("kv"), Serdes.string(), Serdes.long()
    )


def _write_key_value(store):
    for i in range(300):
        store.put(f"k{i % 50}", i)
    store.delete("k7")
    return lambda s: list(s.all())


def _ttl(kind: str):
    return _key_value(kind).with_ttl(10_000_000)


ALL_KINDS = {**KINDS, "key-value": (_key_value, _write_key_value), "ttl": (_ttl, _write_key_value)}


class Changelog:
    """The changes the stores logged, replayable like a changelog topic."""

    def __init__(self) -> None:
        self.records: list = []
        self.reads: list[tuple[int, int]] = []

    def append(self, changes) -> int:
        self.records.extend(changes)
        return len(self.records)

    def reader(self, topic, partition, start, end, apply, with_timestamps=False, on_batch=None):
        self.reads.append((start, end))
        records = self.records[start:end]
        if with_timestamps:
            apply([(c.key, c.value, c.timestamp) for c in records])
        else:
            apply([(c.key, c.value) for c in records])
        return len(records)


HOUR = 3_600_000  # an interval no test reaches


def _settings(location: Path, **overrides) -> SnapshotSettings:
    values = {"location": str(location), "interval_ms": 0, "retained": 2, "prune_grace_s": 0.0}
    return SnapshotSettings(**{**values, **overrides})


def _task_stores(directory: Path, builder, app: str, settings: SnapshotSettings | None):
    snapshots = (
        None
        if settings is None
        else TaskSnapshots(settings, task_id="0_0", partition=0, directory=directory)
    )
    return TaskStores(
        application_id=app,
        task_id="0_0",
        partition=0,
        directory=directory,
        builders={builder.name: builder},
        changelog_topics={builder.name: changelog_topic(app, builder.name)},
        timestamp_fn=lambda: 5,
        snapshots=snapshots,
    )


def _idle() -> None:
    assert UPLOADER.wait_idle(30), "the snapshot uploads did not finish within 30 s"


def _store_dir(location: Path, store: str) -> StoreSnapshotDir:
    filesystem, root = open_location(str(location))
    return StoreSnapshotDir(filesystem, f"{root}/0_0/{store}")


def _run_two_commits(tmp_path: Path, kind: str, settings: SnapshotSettings):
    """Write the kind's records, commit (snapshot), write them again, commit without one."""
    make_builder, write = ALL_KINDS[kind]
    builder = make_builder("rocksdb")
    app = f"app-{uuid.uuid4().hex[:8]}"
    changelog = Changelog()
    first = _task_stores(tmp_path / "first", builder, app, settings)
    stack = first.build(builder, lambda: 5)
    contents = write(stack.store)
    snapshot_offset = changelog.append(flushed_changes(stack))
    first.commit({builder.name: snapshot_offset})
    _idle()
    first._snapshots = None  # the second commit leaves a tail after the snapshot
    write(stack.store)
    end = changelog.append(flushed_changes(stack))
    first.commit({builder.name: end})
    expected = contents(stack.store)
    first.close()
    return builder, app, changelog, contents, expected, snapshot_offset, end


@pytest.mark.parametrize("kind", sorted(ALL_KINDS))
def test_restore_from_snapshot_and_tail_equals_a_full_replay(tmp_path, kind):
    location = tmp_path / "snapshots"
    builder, app, changelog, contents, expected, snapshot_offset, end = _run_two_commits(
        tmp_path, kind, _settings(location)
    )
    assert 0 < snapshot_offset < end

    warm = _task_stores(tmp_path / "warm", builder, app, _settings(location))
    warm.build(builder, lambda: 5)
    assert warm.restore({builder.name: end}, changelog.reader) == {
        builder.name: end - snapshot_offset
    }
    assert changelog.reads == [(snapshot_offset, end)]  # only the tail
    from_snapshot = contents(warm.stacks[builder.name].store)

    changelog.reads.clear()
    cold = _task_stores(tmp_path / "cold", builder, app, None)
    cold.build(builder, lambda: 5)
    cold.restore({builder.name: end}, changelog.reader)
    assert changelog.reads == [(0, end)]
    assert from_snapshot == contents(cold.stacks[builder.name].store) == expected
    assert any(expected)
    warm.close()
    cold.close()


def test_a_restored_store_keeps_committing_and_snapshotting(tmp_path):
    location = tmp_path / "snapshots"
    builder, app, changelog, contents, expected, _, end = _run_two_commits(
        tmp_path, "key-value", _settings(location)
    )
    warm = _task_stores(tmp_path / "warm", builder, app, _settings(location))
    stack = warm.build(builder, lambda: 5)
    warm.restore({builder.name: end}, changelog.reader)
    stack = warm.stacks[builder.name]
    stack.store.put("after", 1)
    later = changelog.append(flushed_changes(stack))
    warm.commit({builder.name: later})
    _idle()
    newest = _store_dir(location, builder.name).manifests()[0][1]
    assert newest is not None and newest.offset == later
    warm.close()

    again = _task_stores(tmp_path / "again", builder, app, _settings(location))
    again.build(builder, lambda: 5)
    changelog.reads.clear()
    again.restore({builder.name: later}, changelog.reader)
    assert changelog.reads == []  # the snapshot holds everything
    assert contents(again.stacks[builder.name].store) == sorted([*expected, ("after", 1)])
    again.close()


def _big_store_snapshotted(tmp_path: Path, location: Path):
    """A 20,000-key store, committed once and snapshotted (its SST files uploaded)."""
    builder = _key_value("rocksdb")
    stores = _task_stores(tmp_path / "t", builder, "app-big", _settings(location, retained=5))
    stack = stores.build(builder, lambda: 5)
    changelog = Changelog()
    for i in range(20_000):
        stack.store.put(f"key-{i:06d}", i)
    stores.commit({builder.name: changelog.append(flushed_changes(stack))})
    _idle()
    return builder, stores, stack, changelog


def test_a_second_snapshot_uploads_only_what_changed(tmp_path):
    location = tmp_path / "snapshots"
    builder, stores, stack, changelog = _big_store_snapshotted(tmp_path, location)
    stack.store.put("one-more", 1)
    stores.commit({builder.name: changelog.append(flushed_changes(stack))})
    _idle()
    newest, older = [m for _, m in _store_dir(location, builder.name).manifests()]
    assert newest is not None and older is not None
    shared = {f.object for f in newest.files} & {f.object for f in older.files}
    big = max(older.files, key=lambda f: f.size)
    assert big.name.endswith(".sst") and big.object in shared  # the big SST went up once
    stores.close()


def _two_snapshots(tmp_path: Path, location: Path):
    builder = _key_value("rocksdb")
    stores = _task_stores(tmp_path / "t", builder, "app-fallback", _settings(location))
    stack = stores.build(builder, lambda: 5)
    changelog = Changelog()
    for round_ in range(2):
        for i in range(100):
            stack.store.put(f"k{i}", round_ * 1000 + i)
        stores.commit({builder.name: changelog.append(flushed_changes(stack))})
        _idle()
    expected = list(stack.store.all())
    stores.close()
    return builder, changelog, expected


def _restore(tmp_path: Path, name: str, builder, changelog, location: Path, target: int):
    stores = _task_stores(tmp_path / name, builder, "app-fallback", _settings(location))
    stores.build(builder, lambda: 5)
    changelog.reads.clear()
    stores.restore({builder.name: target}, changelog.reader)
    contents = list(stores.stacks[builder.name].store.all())
    stores.close()
    return contents


def _unusable(logs) -> list[str]:
    return [e["reason"] for e in logs if e["event"] == "snapshot_unusable"]


def test_a_corrupt_snapshot_file_falls_back_to_the_older_snapshot(tmp_path):
    location = tmp_path / "snapshots"
    builder, changelog, expected = _two_snapshots(tmp_path, location)
    newest, older = [m for _, m in _store_dir(location, builder.name).manifests()]
    assert newest is not None and older is not None
    older_objects = {g.object for g in older.files}
    only_newest = max(
        (f for f in newest.files if f.object not in older_objects), key=lambda f: f.size
    )
    damaged = location / "0_0" / builder.name / only_newest.object
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))

    with capture_logs() as logs:
        contents = _restore(tmp_path, "r", builder, changelog, location, newest.offset)
    assert contents == expected
    assert changelog.reads == [(older.offset, newest.offset)]
    (warned,) = _unusable(logs)
    assert "is corrupt" in warned and only_newest.object in warned


def test_missing_snapshot_files_and_a_broken_manifest_fall_back_to_a_full_replay(tmp_path):
    location = tmp_path / "snapshots"
    builder, changelog, expected = _two_snapshots(tmp_path, location)
    store_root = location / "0_0" / builder.name
    manifests = sorted((store_root / "manifests").iterdir())
    manifests[-1].write_text("{not json", encoding="utf-8")  # the newest
    older = json.loads(manifests[0].read_text(encoding="utf-8"))
    (store_root / older["files"][0]["object"]).unlink()

    end = len(changelog.records)
    with capture_logs() as logs:
        contents = _restore(tmp_path, "r", builder, changelog, location, end)
    assert contents == expected
    assert changelog.reads == [(0, end)]
    broken, missing = _unusable(logs)
    assert "does not parse" in broken and "cannot be read" in missing


def test_a_snapshot_past_the_committed_offset_is_not_used(tmp_path):
    location = tmp_path / "snapshots"
    builder, changelog, expected = _two_snapshots(tmp_path, location)
    newest, older = [m for _, m in _store_dir(location, builder.name).manifests()]
    assert newest is not None and older is not None
    # the newer snapshot's commit is not the committed one (an attempt that wrote ahead)
    contents = _restore(tmp_path, "r", builder, changelog, location, older.offset)
    assert changelog.reads == []
    assert contents == sorted((f"k{i}", i) for i in range(100))
    assert contents != expected


def test_a_snapshot_of_another_store_definition_is_not_used(tmp_path):
    location = tmp_path / "snapshots"
    builder, changelog, _ = _two_snapshots(tmp_path, location)
    other = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("kv"), Serdes.string(), Serdes.string()
    )
    with capture_logs() as logs:
        stores = _task_stores(tmp_path / "r", other, "app-fallback", _settings(location))
        stores.build(other, lambda: 5)
        stores.restore({other.name: len(changelog.records)}, changelog.reader)
        stores.close()
    assert changelog.reads == [(0, len(changelog.records))]
    assert ["another store" in reason for reason in _unusable(logs)] == [True, True]


def test_old_snapshots_and_their_files_are_deleted(tmp_path):
    location = tmp_path / "snapshots"
    builder = _key_value("rocksdb")
    stores = _task_stores(tmp_path / "t", builder, "app-ret", _settings(location, retained=2))
    stack = stores.build(builder, lambda: 5)
    changelog = Changelog()
    for round_ in range(5):
        for i in range(200):
            stack.store.put(f"r{round_}-{i}", i)
        stores.commit({builder.name: changelog.append(flushed_changes(stack))})
        _idle()
    stores.close()
    directory = _store_dir(location, builder.name)
    manifests = [m for _, m in directory.manifests()]
    assert [m.offset for m in manifests if m is not None] == [1000, 800]
    on_disk = {f"files/{p.name}" for p in (location / "0_0" / "kv" / "files").iterdir()}
    assert on_disk == directory.referenced_objects()


def test_snapshots_wait_for_their_interval(tmp_path):
    location = tmp_path / "snapshots"
    builder = _key_value("rocksdb")
    now = [0.0]
    snapshots = TaskSnapshots(
        _settings(location, interval_ms=60_000),
        task_id="0_0",
        partition=0,
        directory=tmp_path / "t",
        clock=lambda: now[0],
    )
    stores = TaskStores(
        application_id="app-int",
        task_id="0_0",
        partition=0,
        directory=tmp_path / "t",
        builders={builder.name: builder},
        changelog_topics={builder.name: "app-int-kv-changelog"},
        timestamp_fn=lambda: 5,
        snapshots=snapshots,
    )
    stack = stores.build(builder, lambda: 5)
    changelog = Changelog()
    offsets = []
    for step in range(5):  # commits at 0, 30, 60, 90, 120 s
        now[0] = step * 30.0
        stack.store.put(f"k{step}", step)
        offsets.append(changelog.append(flushed_changes(stack)))
        stores.commit({builder.name: offsets[-1]})
        _idle()
    stores.close()
    taken = sorted(m.offset for _, m in _store_dir(location, "kv").manifests() if m is not None)
    assert taken == [offsets[2], offsets[4]]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("state.snapshot.interval.ms", "-2", "state_snapshot_interval_ms must be -1"),
        ("state.snapshot.interval.ms", "soon", "state_snapshot_interval_ms must be an integer"),
        ("state.snapshot.retained", "0", "state_snapshot_retained must be at least 1"),
        ("state.snapshot.max.bytes.per.second", "-1", "must be >= 0"),
        ("state.snapshot.filesystem.options", "{region: x}", "must be a JSON object"),
        ("state.snapshot.filesystem.options", "[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_snapshot_settings_name_the_key(key, value, message):
    from processor_api.config import StreamsConfig
    from processor_api.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        StreamsConfig.from_dict({key: value})


def test_filesystem_options_for_a_scheme_without_them_name_the_location():
    from processor_api.errors import ConfigError

    with pytest.raises(ConfigError, match="ftp"):
        open_location("ftp://host/snapshots", {"user": "x"})
    with pytest.raises(ConfigError, match="not accepted by S3FileSystem"):
        open_location("s3://bucket/x", {"no_such_option": 1})


def test_snapshots_are_off_without_a_location_or_below_zero():
    from processor_api.config import StreamsConfig
    from processor_api.state.snapshots import settings_from_config

    assert settings_from_config(StreamsConfig.from_dict({})) is None
    off = {"state.snapshot.location": "/tmp/x", "state.snapshot.interval.ms": -1}
    assert settings_from_config(StreamsConfig.from_dict(off)) is None
    on = settings_from_config(StreamsConfig.from_dict({"state.snapshot.location": "/tmp/x"}))
    assert on is not None and on.interval_ms == 60_000 and on.retained == 2


def test_the_restore_listener_sees_a_restore_start_at_the_snapshot(tmp_path):
    from processor_api import StateRestoreListener

    class Recorder(StateRestoreListener):
        def __init__(self) -> None:
            self.calls: list[tuple] = []

        def on_restore_start(self, topic_partition, store_name, start_offset, end_offset):
            self.calls.append(("start", store_name, start_offset, end_offset))

        def on_batch_restored(self, topic_partition, store_name, batch_end_offset, num_restored):
            self.calls.append(("batch", store_name, batch_end_offset, num_restored))

        def on_restore_end(self, topic_partition, store_name, total_restored):
            self.calls.append(("end", store_name, total_restored))

    location = tmp_path / "snapshots"
    builder, app, changelog, _, _, snapshot_offset, end = _run_two_commits(
        tmp_path, "key-value", _settings(location)
    )
    stores = _task_stores(tmp_path / "warm", builder, app, _settings(location))
    stores.build(builder, lambda: 5)
    listener = Recorder()
    stores.restore({builder.name: end}, changelog.reader, listener)
    stores.close()
    assert listener.calls[0] == ("start", builder.name, snapshot_offset, end)
    assert listener.calls[-1] == ("end", builder.name, end - snapshot_offset)


def test_a_store_that_outlived_its_process_is_not_uploaded_again(tmp_path):
    """The uploader's memory is per process; the newest manifest's checksums stand in."""
    from processor_api.state.snapshot_files import UploadedFiles

    location = tmp_path / "snapshots"
    builder, stores, stack, changelog = _big_store_snapshotted(tmp_path, location)
    root = str(location / "0_0" / builder.name)
    UPLOADER._uploaded[root] = UploadedFiles()  # as in a new process
    stack.store.put("one-more", 1)
    stores.commit({builder.name: changelog.append(flushed_changes(stack))})
    _idle()
    stores.close()
    newest, older = [m for _, m in _store_dir(location, builder.name).manifests()]
    assert newest is not None and older is not None
    big = max(older.files, key=lambda f: f.size)
    assert big.object in {f.object for f in newest.files}  # named again, not sent again


def test_a_download_reports_its_progress(tmp_path):
    location = tmp_path / "snapshots"
    builder, _, _ = _two_snapshots(tmp_path, location)
    directory = _store_dir(location, builder.name)
    newest = directory.manifests()[0][1]
    assert newest is not None
    reports: list[tuple[int, int]] = []
    directory.download(
        newest,
        tmp_path / "downloaded",
        on_progress=lambda done, total: reports.append((done, total)),
        progress_every_s=0.0,
    )
    assert reports, "no progress was reported"
    done = [d for d, _ in reports]
    assert done == sorted(done) and done[-1] == newest.total_bytes
    assert {total for _, total in reports} == {newest.total_bytes}


def test_a_clean_close_snapshots_the_stores_that_moved_since_their_last_snapshot(tmp_path):
    """Issue 37 item 7: with an interval no run reaches, the close leaves the snapshot."""
    location = tmp_path / "snapshots"
    builder = _key_value("rocksdb")
    app = f"app-{uuid.uuid4().hex[:8]}"
    changelog = Changelog()
    stores = _task_stores(tmp_path / "task", builder, app, _settings(location, interval_ms=HOUR))
    stack = stores.build(builder, lambda: 5)
    _write_key_value(stack.store)
    committed = changelog.append(flushed_changes(stack))
    stores.commit({builder.name: committed})
    stack.store.put("uncommitted", 1)  # an open batch: not in RocksDB, not in the snapshot
    _idle()
    assert _store_dir(location, builder.name).manifests() == []  # no snapshot was due

    stores.snapshot_on_close()
    _idle()
    ((_, manifest),) = _store_dir(location, builder.name).manifests()
    assert manifest is not None and manifest.offset == committed
    stores.snapshot_on_close()  # nothing moved since: no second snapshot
    _idle()
    assert len(_store_dir(location, builder.name).manifests()) == 1
    stores.discard()
    stores.close()

    restored = _task_stores(tmp_path / "elsewhere", builder, app, _settings(location))
    restored.build(builder, lambda: 5)
    assert restored.restore({builder.name: committed}, changelog.reader) == {builder.name: 0}
    store = restored.stacks[builder.name].store
    assert store.get("k49") == 299 and store.get("k7") is None and store.get("uncommitted") is None
    restored.close()
