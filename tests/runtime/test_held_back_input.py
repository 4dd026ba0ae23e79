"""A task's held-back input across a commit, on the embedded broker, without Spark.

With ``max.task.idle.ms`` > 0, a task whose other input ran empty holds back the records it
has (Kafka Streams' task idling). An epoch that ends meanwhile commits the group offset at the
first held-back record and a committed position before it; a task rebuilt from that commit
(a new runner, as on another executor) reads those records again and processes them in
timestamp order once the other input has records.
"""

from __future__ import annotations

import threading

import pytest

from processor_api.engine.metadata import TaskMetadata
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.epoch_runner import EpochControl, EpochTaskRunner
from processor_api.runtime.protocol import EpochEnd, EpochReply, EpochRequest
from tests.harness.task_runs import EpochInThread, one_task
from tests.harness.topics import TopicReader, produce, read_topic, uid
from tests.integration.time_topologies import build_merge_order

pytestmark = pytest.mark.integration  # every test here uses the embedded broker

#: Far longer than the test: a held-back record is never processed because the wait ran out.
IDLE_MS = 600_000
#: How long the test waits for an output, and for an epoch to end once asked to.
WAIT_S = 30.0


class Executor:
    """A runner of task ``0_0`` of ``build_merge_order`` with a state directory of its own."""

    def __init__(self, kafka, state_dir, app: str, topics: tuple[str, str, str]) -> None:
        left, right, output = topics
        self.spec, self.runner = one_task(
            EpochTaskRunner,
            build_merge_order(left=left, right=right, output=output),
            run_id=uid(),
            bootstrap=kafka.bootstrap_servers,
            state_dir=state_dir,
            config={"application_id": app, "max_task_idle_ms": IDLE_MS},
        )

    def epoch_until(
        self, state: str | None, epoch: int, output: TopicReader, count: int
    ) -> EpochReply:
        """Run an epoch until ``count`` records are in ``output``, then end it (the driver
        stops the run: it commits)."""
        end = threading.Event()
        control = EpochControl(connected=lambda: True, end_requested=end.is_set)
        request = EpochRequest(self.spec, "0_0", state, epoch, EpochEnd(duration_s=None))
        epoch_run = EpochInThread(self.runner, request, control)
        thread = epoch_run.thread
        try:
            output.wait_for(lambda r: len(r) >= count or not thread.is_alive(), WAIT_S)
        finally:
            end.set()
            thread.join(WAIT_S)
        assert not thread.is_alive(), f"epoch {epoch} did not end within {WAIT_S:g}s of the stop"
        return epoch_run.result()


def test_a_rebuilt_task_reads_its_held_back_input_again(kafka, tmp_path):
    run_id = uid()
    app = f"held-{run_id}"
    left, right, output = f"held-l-{run_id}", f"held-r-{run_id}", f"held-out-{run_id}"
    for topic in (left, right, output, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, left, [(b"k", b"l10", 0, 10), (b"k", b"l30", 0, 30)])
    produce(kafka.bootstrap_servers, right, [(b"k", b"r5", 0, 5)])

    def group() -> dict:
        return committed_offsets(kafka.bootstrap_servers, app, [(left, 0), (right, 0)])

    def outputs() -> list[tuple[str, int]]:
        """Everything in the output topic (the epoch ended: its records were flushed)."""
        return [
            (r.value.decode(), r.timestamp) for r in read_topic(kafka.bootstrap_servers, output)
        ]

    def positions(reply: EpochReply) -> dict[str, int]:
        return TaskMetadata.from_json(reply.metadata_json).input_positions

    with TopicReader(kafka.bootstrap_servers, output, bytes.decode, bytes.decode) as out:
        first = Executor(kafka, tmp_path / "executor-a", app, (left, right, output))
        try:
            # r5 goes (both inputs have records); then right is empty: l10 and l30 wait for it
            reply = first.epoch_until(None, 1, out, 1)
        finally:
            first.runner.close()
        assert outputs() == [("r5", 5)]
        assert (reply.processed, reply.commits) == (1, 1)
        assert positions(reply) == {right: 1}  # nothing of left processed
        assert group() == {(left, 0): 0, (right, 0): 1}  # left's offset at l10, held back

        produce(kafka.bootstrap_servers, right, [(b"k", b"r20", 0, 20), (b"k", b"r40", 0, 40)])
        # rebuilt from the committed metadata, as on another executor: it reads l10 and l30
        # again; after l30, left is empty and r40 is held back in turn
        second = Executor(kafka, tmp_path / "executor-b", app, (left, right, output))
        try:
            reply = second.epoch_until(reply.metadata_json, 2, out, 4)
        finally:
            second.runner.close()
    assert (reply.rebuilt, reply.processed) == (True, 3)
    assert outputs() == [("r5", 5), ("l10", 10), ("r20", 20), ("l30", 30)]
    assert positions(reply) == {left: 2, right: 2}
    assert group() == {(left, 0): 2, (right, 0): 2}  # right's offset at r40, held back
