"""The check of the Spark checkpoint a run finds, wherever the checkpoint is: in an object
store (read there through ``pyarrow.fs``, never as a local path) and before the run changes
anything on the broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from confluent_kafka.admin import AdminClient

from processor_api.config import StreamsConfig
from processor_api.errors import ConfigError
from processor_api.spark.resume import check_checkpoint_mode
from processor_api.spark.runner import TopologyRunner
from tests.harness.object_store import moto_server, s3_options
from tests.harness.runs import settings_for
from tests.harness.topics import create_topics_now, uid

BUCKET = "checkpoints"


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[pafs.S3FileSystem, dict[str, object]]]:
    """moto's S3 server with the bucket ``checkpoints``: its filesystem and options."""
    with moto_server() as endpoint:
        options = s3_options(endpoint)
        filesystem = pafs.S3FileSystem(**options)
        filesystem.create_dir(BUCKET)
        yield filesystem, options


def _config(options: dict[str, object]) -> StreamsConfig:
    # as run-topology gets them: --config state.snapshot.filesystem.options=<JSON>
    return StreamsConfig.from_dict({"state.snapshot.filesystem.options": json.dumps(options)})


def _write(filesystem: pafs.S3FileSystem, path: str, text: str) -> None:
    with filesystem.open_output_stream(path) as stream:
        stream.write(text.encode())


def _read(filesystem: pafs.S3FileSystem, path: str) -> str:
    with filesystem.open_input_stream(path) as stream:
        return stream.read().decode()


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_a_micro_batch_checkpoint_in_an_object_store_is_refused(
    s3, tmp_path, monkeypatch, scheme: str
) -> None:
    """``s3a://`` is how Spark users name the same bucket and key (Hadoop's S3 connector)."""
    filesystem, options = s3
    prefix = f"{BUCKET}/{uid('old')}"
    _write(filesystem, f"{prefix}/processor_api_mode", "continuous\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"written by a micro-batch run \(continuous\)"):
        check_checkpoint_mode(f"{scheme}://{prefix}", _config(options))
    assert _read(filesystem, f"{prefix}/processor_api_mode") == "continuous\n"  # left as it was
    assert list(tmp_path.iterdir()) == [], "the check wrote to a local directory"


def test_a_checkpoint_of_the_python_epoch_source_in_an_object_store_is_refused(
    s3, tmp_path, monkeypatch
) -> None:
    filesystem, options = s3
    prefix = f"{BUCKET}/{uid('python-source')}"
    _write(filesystem, f"{prefix}/processor_api_mode", "epochs\n")
    _write(filesystem, f"{prefix}/offsets/2", 'v1\n{"batchWatermarkMs":0}\n{"offset":3}\n')
    _write(filesystem, f"{prefix}/offsets/10", 'v1\n{"batchWatermarkMs":0}\n{"epoch":11}\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"epochs came from a Python source"):
        check_checkpoint_mode(f"s3://{prefix}", _config(options))


def test_a_new_checkpoint_in_an_object_store_is_marked_there(s3, tmp_path, monkeypatch) -> None:
    filesystem, options = s3
    prefix = f"{BUCKET}/{uid('new')}"
    monkeypatch.chdir(tmp_path)
    check_checkpoint_mode(f"s3://{prefix}", _config(options))
    assert _read(filesystem, f"{prefix}/processor_api_mode") == "epochs\n"
    check_checkpoint_mode(f"s3://{prefix}", _config(options))  # and resumed
    assert list(tmp_path.iterdir()) == [], "the check wrote to a local directory"


def test_an_hdfs_checkpoint_that_cannot_be_reached_is_refused_and_no_local_directory_made(
    tmp_path, monkeypatch
) -> None:
    """Without a reachable HDFS (here: no libhdfs, no namenode) the check cannot tell what
    the run would resume: it says so, naming the checkpoint, instead of creating a local
    directory called ``hdfs:`` and calling it a new checkpoint."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"hdfs://127\.0\.0\.1:9/checkpoint"):
        check_checkpoint_mode("hdfs://127.0.0.1:9/checkpoint")
    assert list(tmp_path.iterdir()) == []


def test_options_the_filesystem_refuses_are_an_error_naming_the_checkpoint_as_given() -> None:
    config = _config({"no_such_option": 1})
    with pytest.raises(
        ConfigError,
        match=r"state.snapshot.filesystem.options for 's3a://checkpoints/app' are not "
        r"accepted by S3FileSystem",
    ):
        check_checkpoint_mode("s3a://checkpoints/app", config)


@pytest.mark.integration
def test_a_refused_checkpoint_stops_the_run_before_it_creates_any_topic(kafka, tmp_path) -> None:
    bootstrap = kafka.bootstrap_servers
    app_id = uid("refused")
    input_topic = f"{app_id}-in"
    create_topics_now(bootstrap, {input_topic: 2})
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "processor_api_mode").write_text("available-now\n")
    settings = settings_for(bootstrap, app_id, tmp_path / "state", checkpoint_dir=str(checkpoint))
    runner = TopologyRunner(
        "topologies.count_per_key:build_topology",
        settings,
        topology_kwargs={"input_topic": input_topic, "output_topic": f"{app_id}-out"},
    )
    with pytest.raises(ConfigError, match=r"written by a micro-batch run \(available-now\)"):
        runner.run()
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    assert sorted(t for t in topics if t.startswith(app_id)) == [input_topic]
    assert sorted(p.name for p in Path(checkpoint).iterdir()) == ["processor_api_mode"]


def test_group_keys_and_the_assignment_are_kept_in_an_object_store_checkpoint(
    s3, tmp_path, monkeypatch
) -> None:
    """The runner's own checkpoint files go where Spark keeps the checkpoint: read back from the
    bucket on resume, and no local ``s3:`` directory is made (they were written with pathlib)."""
    from processor_api.spark.assignment import ASSIGNMENT_FILE, load_or_assign
    from processor_api.spark.checkpoint_files import open_checkpoint
    from processor_api.spark.task_keys import (
        TASK_KEYS_FILE,
        load_or_plan_group_keys,
        recorded_partitions,
    )

    filesystem, options = s3
    prefix = f"{BUCKET}/{uid('keys')}"
    monkeypatch.chdir(tmp_path)
    files = open_checkpoint(f"s3://{prefix}", _config(options))
    assert recorded_partitions(files) is None
    keys = load_or_plan_group_keys(files, ["w0", "w1"], 2)
    assignment = load_or_assign(files, ["0_0", "0_1", "0_2"], ["w0", "w1"], {"0_0"})
    assert json.loads(_read(filesystem, f"{prefix}/{TASK_KEYS_FILE}"))["keys"] == keys
    recorded = json.loads(_read(filesystem, f"{prefix}/{ASSIGNMENT_FILE}"))["workers"]
    assert {w: tuple(t) for w, t in recorded.items()} == assignment
    again = open_checkpoint(f"s3://{prefix}", _config(options))
    assert recorded_partitions(again) == 2
    assert load_or_plan_group_keys(again, ["w0", "w1"], 5) == keys
    assert list(tmp_path.iterdir()) == []
