"""A Spark task's held-back input on the embedded broker, without Spark: the task runner that
waits for a lagging input commits the group offset at the first held-back record, and a task
rebuilt elsewhere (a new runner, as on another executor) reads those records again."""

from __future__ import annotations

import pytest

from processor_api.engine.metadata import TaskMetadata
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.job import JobSpec
from processor_api.runtime.task_runner import InputRange, TaskRunner
from processor_api.state.locks import TaskLock
from processor_api.state.manager import task_directory
from tests.harness.topics import TopicReader, produce, uid
from tests.integration.time_topologies import build_merge_order

pytestmark = pytest.mark.integration  # every test here uses the embedded broker


def test_a_rebuilt_task_reads_its_held_back_input_again(kafka, tmp_path):
    run_id = uid()
    app = f"held-{run_id}"
    left, right, output = f"held-l-{run_id}", f"held-r-{run_id}", f"held-out-{run_id}"
    for topic in (left, right, output, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, left, [(b"k", b"l10", 0, 10), (b"k", b"l30", 0, 30)])
    produce(kafka.bootstrap_servers, right, [(b"k", b"r5", 0, 5), (b"k", b"r20", 0, 20)])
    topology = build_merge_order(left=left, right=right, output=output)
    spec = JobSpec(
        run_id=run_id,
        topology_ref=None,
        topology_kwargs={},
        topology_pickle=None,
        bootstrap_servers=kafka.bootstrap_servers,
        state_dir=str(tmp_path),
        config={"application_id": app, "max_task_idle_ms": 0},
        task_ids=("0_0",),
    )
    directory = task_directory(str(tmp_path), app, "0_0")

    def runner() -> TaskRunner:
        return TaskRunner(spec, topology, "0_0", TaskLock(directory, "0_0").__enter__())

    def group() -> dict:
        return committed_offsets(kafka.bootstrap_servers, app, [(left, 0), (right, 0)])

    first = runner()
    # the batch as max.records.per.batch = 3 plans it: right's r20 is left out
    result = first.run_batch(None, [InputRange(left, 0, 0, 2), InputRange(right, 0, 0, 1)])
    first.close()
    assert result.processed == 1  # r5; l10 and l30 wait for right
    assert TaskMetadata.from_json(result.metadata_json).extra["pending"] == {left: [0, 2]}
    assert group() == {(left, 0): 0, (right, 0): 1}

    second = runner()  # rebuilt from the committed metadata, as on another executor
    result = second.run_batch(result.metadata_json, [InputRange(right, 0, 1, 2)])
    second.close()
    assert result.rebuilt and result.processed == 3
    assert "pending" not in TaskMetadata.from_json(result.metadata_json).extra
    assert group() == {(left, 0): 2, (right, 0): 2}
    with TopicReader(kafka.bootstrap_servers, output, bytes.decode, bytes.decode) as out:
        records = out.wait_for(lambda r: len(r) >= 4, timeout_s=30)
    assert [r.value for r in records] == ["r5", "l10", "r20", "l30"]
