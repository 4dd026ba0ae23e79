"""Snapshots in an S3-compatible object store: moto's server, a real HTTP server process,
reached through ``pyarrow.fs.S3FileSystem`` with an endpoint override."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from structlog.testing import capture_logs

from processor_api.config import StreamsConfig
from processor_api.state.manager import TaskStores
from processor_api.state.snapshot_files import StoreSnapshotDir, open_location
from processor_api.state.snapshots import TaskSnapshots, settings_from_config
from tests.harness.object_store import moto_server, s3_options
from tests.state.test_snapshots import (
    Changelog,
    _idle,
    _key_value,
    _task_stores,
    flushed_changes,
)

BUCKET = "snapshots"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


def test_snapshots_round_trip_through_an_s3_server(tmp_path, s3_endpoint):
    config = StreamsConfig.from_dict(
        {
            "state.snapshot.location": f"s3://{BUCKET}/app-s3",
            "state.snapshot.interval.ms": 0,
            "state.snapshot.retained": 1,
            # as --config gives it: JSON text
            "state.snapshot.filesystem.options": json.dumps(s3_options(s3_endpoint)),
        }
    )
    settings = settings_from_config(config)
    assert settings is not None
    settings = type(settings)(**{**settings.__dict__, "prune_grace_s": 0.0})
    filesystem, root = open_location(settings.location, settings.filesystem_options)
    assert isinstance(filesystem, pafs.S3FileSystem) and root == f"{BUCKET}/app-s3"
    filesystem.create_dir(BUCKET)

    builder = _key_value("rocksdb")
    changelog = Changelog()

    def task_stores(directory: Path) -> TaskStores:
        return TaskStores(
            application_id="app-s3",
            task_id="0_0",
            partition=0,
            directory=directory,
            builders={builder.name: builder},
            changelog_topics={builder.name: "app-s3-kv-changelog"},
            timestamp_fn=lambda: 5,
            snapshots=TaskSnapshots(settings, task_id="0_0", partition=0, directory=directory),
        )

    first = task_stores(tmp_path / "first")
    stack = first.build(builder, lambda: 5)
    for round_ in range(3):
        for i in range(2000):
            stack.store.put(f"k{i}", round_ * 10_000 + i)
        first.commit({builder.name: changelog.append(flushed_changes(stack))})
        _idle()
    expected = list(stack.store.all())
    first.close()

    directory = StoreSnapshotDir(filesystem, f"{root}/0_0/{builder.name}")
    manifests = directory.manifests()
    assert len(manifests) == 1 and manifests[0][1] is not None  # retained: 1
    assert manifests[0][1].offset == len(changelog.records)
    listed = filesystem.get_file_info(pafs.FileSelector(f"{root}/0_0/kv/files"))
    assert {f"files/{info.base_name}" for info in listed} == directory.referenced_objects()

    second = task_stores(tmp_path / "second")
    second.build(builder, lambda: 5)
    second.restore({builder.name: len(changelog.records)}, changelog.reader)
    assert changelog.reads == []  # all from the object store
    assert list(second.stacks[builder.name].store.all()) == expected
    second.close()


def test_an_object_store_that_never_answers_means_a_replay_not_a_hang(tmp_path):
    """An endpoint that accepts connections and never replies (a hung proxy, a black-holed
    route): the S3 client gives up after a few seconds and the store replays its changelog."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        settings = settings_from_config(
            StreamsConfig.from_dict(
                {
                    "state.snapshot.location": f"s3://{BUCKET}/app-silent",
                    "state.snapshot.filesystem.options": json.dumps(s3_options(endpoint)),
                }
            )
        )
        assert settings is not None
        builder = _key_value("rocksdb")
        changelog = Changelog()
        written = _task_stores(tmp_path / "written", builder, "app-silent", None)
        stack = written.build(builder, lambda: 5)
        for i in range(100):
            stack.store.put(f"k{i}", i)
        end = changelog.append(flushed_changes(stack))
        expected = list(stack.store.all())
        written.close()

        restored = _task_stores(tmp_path / "restored", builder, "app-silent", settings)
        restored.build(builder, lambda: 5)
        with capture_logs() as logs:
            restored.restore({builder.name: end}, changelog.reader)
        assert list(restored.stacks[builder.name].store.all()) == expected
        restored.close()
    assert changelog.reads == [(0, end)]
    (warning,) = [e for e in logs if e["event"] == "snapshot_unusable"]
    assert "cannot list the snapshots" in warning["reason"]
    assert warning["location"] == f"{BUCKET}/app-silent/0_0/kv"
