"""Issue 21: a task that comes back to a host it ran on before gets a producer that is not
fenced, under exactly_once_v2, on the embedded broker, through the Spark task runner (without
Spark).

Two runners of task ``0_0`` stand for two executors, each with its own state directory (as on
``local-cluster`` with a state directory per executor): neither ever sees the other's owner
file. The task alternates between them, each batch handed the state the other committed, as
Spark does. The runner that gets the task back must not reuse the transactional producer the
other one fenced: it used to, and its batch then deadlocked in the producer's flush or failed
fenced.
"""

from __future__ import annotations

import threading

import pytest

from processor_api import Serdes, Topology
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.job import JobSpec
from processor_api.runtime.task_runner import BatchResult, InputRange, TaskRunner
from processor_api.state.locks import TaskLock
from processor_api.state.manager import task_directory
from tests.harness.topics import committed_records, produce, uid

pytestmark = pytest.mark.integration

#: A batch that hangs (the deadlock this guards against) fails the test after this long.
BATCH_GUARD_S = 90.0
RECORDS_PER_BATCH = 300  # enough delivery callbacks for the interpreter to specialize them


def _build(input_topic: str, output_topic: str) -> Topology:
    strings = {"key_serde": Serdes.string(), "value_serde": Serdes.string()}
    return (
        Topology()
        .add_source("in", input_topic, **strings)
        .add_sink("out", output_topic, "in", **strings)
    )


def _runner(kafka, state_dir: str, app: str, input_topic: str, output_topic: str) -> TaskRunner:
    spec = JobSpec(
        run_id=uid(),
        topology_ref=None,
        topology_kwargs={},
        topology_pickle=None,
        bootstrap_servers=kafka.bootstrap_servers,
        state_dir=state_dir,
        config={"application_id": app, "processing.guarantee": "exactly_once_v2"},
        task_ids=("0_0",),
        flush_timeout_s=10,
    )
    lock = TaskLock(task_directory(state_dir, app, "0_0"), "0_0").__enter__()
    return TaskRunner(spec, _build(input_topic, output_topic), "0_0", lock)


def _guarded_batch(runner: TaskRunner, state: str | None, ranges: list[InputRange]) -> BatchResult:
    outcome: list[BatchResult | BaseException] = []

    def run() -> None:
        try:
            outcome.append(runner.run_batch(state, ranges))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BATCH_GUARD_S)
    assert not thread.is_alive(), f"the batch of {runner.directory} hung"
    (result,) = outcome
    if isinstance(result, BaseException):
        raise result
    return result


def test_a_task_back_on_a_host_fences_the_other_host_and_commits(kafka, tmp_path):
    app, source, sink = uid("returns"), uid("in"), uid("out")
    for topic in (source, sink, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    batches = 4
    values = [f"v{i}" for i in range(batches * RECORDS_PER_BATCH)]
    produce(kafka.bootstrap_servers, source, [(b"k", v.encode()) for v in values])
    host_a = _runner(kafka, str(tmp_path / "executor-a"), app, source, sink)
    host_b = _runner(kafka, str(tmp_path / "executor-b"), app, source, sink)
    try:
        state = None
        # A, then B (fences A), then A again (must fence B), then B again
        for index, runner in enumerate([host_a, host_b, host_a, host_b]):
            start = index * RECORDS_PER_BATCH
            result = _guarded_batch(
                runner, state, [InputRange(source, 0, start, start + RECORDS_PER_BATCH)]
            )
            assert result.processed == RECORDS_PER_BATCH
            assert result.rebuilt == (index > 0 or runner is host_a)
            state = result.metadata_json
    finally:
        host_a.close()
        host_b.close()
    kept, _ = committed_records(kafka.bootstrap_servers, sink)
    assert [r.value for r in kept] == [v.encode() for v in values]
