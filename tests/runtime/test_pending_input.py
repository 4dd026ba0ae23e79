"""Held-back input of a task waiting for a lagging input, as the Spark runtime commits and
re-reads it (``runtime/pending_input.py``); no broker, no Spark."""

from __future__ import annotations

from processor_api import Processor, Serdes, Topology
from processor_api.config import StreamsConfig
from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task
from processor_api.runtime.pending_input import HeldBackInput
from processor_api.runtime.task_runner import InputRange


class Nothing(Processor):
    def process(self, record):
        pass


def make_task():
    topology = (
        Topology()
        .add_source("src", "l", "r", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("p", Nothing, "src")
    )
    (sub,) = topology.subtopologies()
    return Task(
        subtopology=sub,
        partition=2,
        store_builders={},
        store_factory=lambda builder, ts: builder.build(timestamp_fn=ts),
        collector=ListCollector(),
        config=StreamsConfig(application_id="pending"),
        clock=lambda: 0,
    )


def rec(topic, offset, ts):
    return InputRecord(topic, 2, offset, ts, b"k", b"v", ())


def test_held_back_records_become_the_group_offset_and_the_metadata():
    task = make_task()
    task.update_lags({"r": 4})
    task.process_batch([rec("l", 7, 10), rec("l", 8, 30), rec("r", 3, 5)])  # r3 only
    held = HeldBackInput()
    ranges = [InputRange("l", 2, 7, 9), InputRange("r", 2, 3, 4)]
    pending = held.after_batch(task, ranges)
    assert pending == {"l": [7, 9]}
    assert held.group_offsets(ranges, pending, 2) == {("l", 2): 7, ("r", 2): 4}
    # a partition without a range in this batch gets its held-back offset too
    later = [InputRange("r", 2, 4, 6)]
    assert held.group_offsets(later, pending, 2) == {("l", 2): 7, ("r", 2): 6}
    held.committed(pending)
    # once l's records went, its offset moves to what was read of it
    assert held.group_offsets(later, {}, 2) == {("l", 2): 9, ("r", 2): 6}
    saved = TaskMetadata.from_json(task.metadata().to_json())
    rebuilt = HeldBackInput()
    rebuilt.restore(saved.extra)
    assert rebuilt.pending == {"l": (7, 9)}
    # everything processed: nothing pending, nothing in the metadata
    task.update_lags({"r": 0})
    task.process_batch([rec("r", 4, 40)])
    assert held.after_batch(task, [InputRange("r", 2, 4, 5)]) == {}
    assert "pending" not in task.metadata().extra


def test_a_rebuilt_task_rereads_only_what_the_new_ranges_do_not_cover():
    held = HeldBackInput()
    held.restore({"pending": {"l": [7, 9]}})
    # the run goes on from the checkpoint: l's next range starts at 9
    assert held.reread([InputRange("l", 2, 9, 12)]) == [("l", 7, 9)]
    assert held.reread([InputRange("r", 2, 4, 6)]) == [("l", 7, 9)]
    # the run resumed from the group offsets: the range starts at the held-back record
    assert held.reread([InputRange("l", 2, 7, 12)]) == []
    assert HeldBackInput().reread([InputRange("l", 2, 7, 12)]) == []
