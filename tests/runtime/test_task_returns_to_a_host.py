"""Issue 21: a task that comes back to a host it ran on before gets a producer that is not
fenced, under exactly_once_v2, on the embedded broker, through the epoch task runner (without
Spark).

Two runners of task ``0_0`` stand for two executors, each with its own state directory (as on
``local-cluster`` with a state directory per executor): neither ever sees the other's owner
file. The task alternates between them, one epoch each, every epoch handed the state the other
committed, as Spark does. The runner that gets the task back must not reuse the transactional
producer the other one fenced: it used to, and its commit then deadlocked in the producer's
flush (a lock taken again inside a delivery callback) or failed fenced.
"""

from __future__ import annotations

import threading

import pytest

from processor_api import Serdes, Topology
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.epoch_runner import EpochControl, EpochTaskRunner
from processor_api.runtime.protocol import EpochEnd, EpochReply, EpochRequest
from tests.harness.task_runs import EpochInThread, one_task
from tests.harness.topics import committed_records, produce, uid

pytestmark = pytest.mark.integration

#: An epoch that hangs (the deadlock this guards against) fails the test after this long.
EPOCH_GUARD_S = 90.0
RECORDS_PER_EPOCH = 300  # enough delivery callbacks for the interpreter to specialize them


def _build(input_topic: str, output_topic: str) -> Topology:
    strings = {"key_serde": Serdes.string(), "value_serde": Serdes.string()}
    return (
        Topology()
        .add_source("in", input_topic, **strings)
        .add_sink("out", output_topic, "in", **strings)
    )


class Executor:
    """One executor's runner of task ``0_0`` (a state directory of its own)."""

    def __init__(self, kafka, state_dir, app: str, input_topic: str, output_topic: str) -> None:
        self.input = input_topic
        self.spec, self.runner = one_task(
            EpochTaskRunner,
            _build(input_topic, output_topic),
            run_id=uid(),
            bootstrap=kafka.bootstrap_servers,
            state_dir=state_dir,
            config={"application_id": app, "processing.guarantee": "exactly_once_v2"},
            input_topic=input_topic,
        )
        self.hung = False

    def guarded_epoch(self, state: str | None, epoch: int, end_offset: int) -> EpochReply:
        """One epoch up to ``end_offset`` of the input, in a thread: an epoch that has not
        ended after ``EPOCH_GUARD_S`` fails the test (its Spark task is then gone, which ends
        a loop that still turns; a deadlocked one stays behind, in a daemon thread)."""
        gone = threading.Event()
        control = EpochControl(connected=lambda: not gone.is_set())
        # a time limit past the guard: the epoch ends by its end offset, or the guard fails it
        end = EpochEnd(duration_s=EPOCH_GUARD_S * 2, end_offsets={(self.input, 0): end_offset})
        epoch_run = EpochInThread(
            self.runner, EpochRequest(self.spec, "0_0", state, epoch, end), control
        )
        epoch_run.thread.join(EPOCH_GUARD_S)
        if epoch_run.thread.is_alive():
            gone.set()
            self.hung = True
            pytest.fail(
                f"epoch {epoch} of {self.runner.directory} did not end within "
                f"{EPOCH_GUARD_S:g}s (the task came back to this host: a deadlock?)"
            )
        return epoch_run.result()

    def close(self) -> None:
        if not self.hung:  # closing a deadlocked runner would hang the test as well
            self.runner.close()


def test_a_task_back_on_a_host_fences_the_other_host_and_commits(kafka, tmp_path):
    app, source, sink = uid("returns"), uid("in"), uid("out")
    for topic in (source, sink, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    epochs = 4
    values = [f"v{i}" for i in range(epochs * RECORDS_PER_EPOCH)]
    produce(kafka.bootstrap_servers, source, [(b"k", v.encode()) for v in values])
    host_a = Executor(kafka, tmp_path / "executor-a", app, source, sink)
    host_b = Executor(kafka, tmp_path / "executor-b", app, source, sink)
    try:
        state = None
        # A, then B (fences A), then A again (must fence B), then B again
        for index, host in enumerate([host_a, host_b, host_a, host_b]):
            reply = host.guarded_epoch(state, index + 1, (index + 1) * RECORDS_PER_EPOCH)
            assert reply.processed == RECORDS_PER_EPOCH, reply
            # every epoch gets the state the other host committed: the task is rebuilt
            assert reply.rebuilt and reply.commits >= 1, reply
            state = reply.metadata_json
    finally:
        host_a.close()
        host_b.close()
    kept, _ = committed_records(kafka.bootstrap_servers, sink)
    assert [r.value for r in kept] == [v.encode() for v in values]
