"""Input order across co-partitioned topics: the smallest *extracted* timestamp
goes first, as in Kafka Streams' PartitionGroup, whose queues stamp their head record with the
source's timestamp extractor. The ordering cases of Kafka Streams' PartitionGroupTest that
apply to a task fed whole batches are reproduced with an extractor that reads the timestamp
from the value (their MockTimestampExtractor reads it from the offset)."""

from __future__ import annotations

import pytest

from processor_api import ProcessingError, Processor, Record, Serdes, Topology
from processor_api.config import StreamsConfig
from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task


class Recorder(Processor):
    """Logs (topic, value, timestamp, stream time) of every record it gets."""

    log: list[tuple[str, str, int, int]] = []

    def init(self, context):
        self.context = context

    def process(self, record):
        topic = self.context.record_metadata().topic
        stream_time = self.context.current_stream_time_ms()
        Recorder.log.append((topic, record.value, record.timestamp, stream_time))


@pytest.fixture(autouse=True)
def reset_log():
    Recorder.log = []


def value_as_timestamp(seen):
    """An extractor returning the value as the timestamp; logs (value, partition time)."""

    def extract(record: Record, partition_time: int) -> int:
        seen.append((record.value, partition_time))
        return int(record.value)

    return extract


def make_task(extractor=None, metadata=None, config=None, topics=("p1", "p2")):
    topology = (
        Topology()
        .add_source(
            "src",
            *topics,
            key_serde=Serdes.string(),
            value_serde=Serdes.string(),
            timestamp_extractor=extractor,
        )
        .add_processor("rec", Recorder, "src")
    )
    (sub,) = topology.subtopologies()
    return Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(timestamp_fn=ts),
        collector=ListCollector(),
        config=config or StreamsConfig(application_id="t"),
        clock=lambda: 0,
        metadata=metadata,
    )


def records(topic, values, first_offset=0, raw_timestamps=None):
    """Input records of ``topic`` with string values, offsets from ``first_offset``."""
    raw_timestamps = raw_timestamps or [0] * len(values)
    return [
        InputRecord(topic, 0, first_offset + i, ts, b"k", str(v).encode(), ())
        for i, (v, ts) in enumerate(zip(values, raw_timestamps, strict=True))
    ]


def taken():
    return [(topic, int(value)) for topic, value, _, _ in Recorder.log]


def test_extracted_timestamps_order_co_partitioned_topics_not_the_kafka_timestamps():
    # Kafka timestamps say p1 first every time; the extracted ones (the values) say p2.
    seen = []
    task = make_task(value_as_timestamp(seen))
    batch = records("p1", [20, 40], raw_timestamps=[10, 30]) + records(
        "p2", [10, 30], raw_timestamps=[20, 40]
    )
    assert task.process_batch(batch) == 4
    assert taken() == [("p2", 10), ("p1", 20), ("p2", 30), ("p1", 40)]
    assert [ts for _, _, ts, _ in Recorder.log] == [10, 20, 30, 40]


def test_time_tracking_across_two_batches():
    """PartitionGroupTest.testTimeTracking: stream time never goes back, partition time is
    the largest timestamp taken from a partition, a late record goes in its offset order."""
    seen = []
    task = make_task(value_as_timestamp(seen))
    task.process_batch(records("p1", [1]) + records("p2", [2]))
    assert [(v, st) for _, v, _, st in Recorder.log] == [("1", 1), ("2", 2)]
    assert task.metadata().partition_times == {"p1": 1, "p2": 2}
    Recorder.log, seen[:] = [], []

    # p1: [3, 5, 2, 4], p2: [4, 6] (timestamps)
    task.process_batch(records("p1", [3, 5, 2, 4], first_offset=1) + records("p2", [4, 6], 1))
    assert taken() == [("p1", 3), ("p2", 4), ("p1", 5), ("p1", 2), ("p1", 4), ("p2", 6)]
    assert [st for _, _, _, st in Recorder.log] == [3, 4, 5, 5, 5, 6]  # stream time
    assert task.stream_time == 6
    # the extractor got the partition time of each record's own partition when it became head
    assert seen == [("3", 1), ("4", 2), ("5", 3), ("6", 4), ("2", 5), ("4", 5)]
    assert task.metadata().partition_times == {"p1": 5, "p2": 6}
    assert task.metadata().input_positions == {"p1": 5, "p2": 3}


def test_next_record_is_chosen_by_head_timestamp_not_partition_time():
    """PartitionGroupTest.shouldChooseNextRecordBasedOnHeadTimestamp: p1 has seen 5, its head
    is 3; p2's head is 2: 2 goes first, then 3 (not p2's 4, although p1's time is 5)."""
    task = make_task(value_as_timestamp([]))
    task.process_batch(records("p1", [1, 5]))
    task.process_batch(records("p1", [3], first_offset=2) + records("p2", [2, 4, 6]))
    assert taken() == [("p1", 1), ("p1", 5), ("p2", 2), ("p1", 3), ("p2", 4), ("p2", 6)]


def test_equal_head_timestamps_follow_the_source_topic_order():
    task = make_task(value_as_timestamp([]))
    task.process_batch(records("p2", [7, 8]) + records("p1", [7, 8]))
    assert taken() == [("p1", 7), ("p2", 7), ("p1", 8), ("p2", 8)]


def test_dropped_records_do_not_hold_back_the_other_partition():
    """A record the deserialization handler skips and one whose extracted timestamp is negative
    are dropped when they would become the head; their offsets count as done."""

    def extract(record, partition_time):
        return int(record.value)

    config = StreamsConfig.from_dict({"deserialization_exception_handler": "log_and_continue"})
    topology = (
        Topology()
        .add_source("src", "p1", "p2", value_serde=Serdes.long(), timestamp_extractor=extract)
        .add_processor("rec", Recorder, "src")
    )
    (sub,) = topology.subtopologies()
    task = Task(
        subtopology=sub,
        partition=0,
        store_builders={},
        store_factory=lambda builder, ts: builder.build(timestamp_fn=ts),
        collector=ListCollector(),
        config=config,
        clock=lambda: 0,
    )
    long = Serdes.long().serialize
    batch = [
        InputRecord("p1", 0, 0, 0, None, b"bad", ()),  # not 8 bytes: skipped by the handler
        InputRecord("p1", 0, 1, 0, None, long(-5), ()),  # negative timestamp: dropped
        InputRecord("p1", 0, 2, 0, None, long(30), ()),
        InputRecord("p2", 0, 0, 0, None, long(10), ()),
        InputRecord("p2", 0, 1, 0, None, long(20), ()),
    ]
    assert task.process_batch(batch) == 3
    assert [(topic, value) for topic, value, _, _ in Recorder.log] == [
        ("p2", 10),
        ("p2", 20),
        ("p1", 30),
    ]
    assert task.records_skipped == 2
    assert task.metadata().input_positions == {"p1": 3, "p2": 2}


def test_log_and_fail_on_a_head_record_stops_before_it():
    task = make_task()
    batch = records("p1", ["a"], raw_timestamps=[5]) + [
        InputRecord("p2", 0, 0, 1, b"\xff", b"x", ()),  # key: not UTF-8 for the string serde
    ]
    with pytest.raises(ProcessingError, match="cannot deserialize.*topic=p2.*offset=0"):
        task.process_batch(batch)
    assert task.metadata().input_positions == {}


def test_partition_time_survives_a_new_task_incarnation():
    seen = []
    first = make_task(value_as_timestamp(seen))
    first.process_batch(records("p1", [50]) + records("p2", [40]))
    saved = TaskMetadata.from_json(first.metadata().to_json())
    seen.clear()
    second = make_task(value_as_timestamp(seen), metadata=saved)
    second.process_batch(records("p1", [60], first_offset=1) + records("p2", [45], 1))
    assert sorted(seen) == [("45", 40), ("60", 50)]
    assert second.metadata().partition_times == {"p1": 60, "p2": 45}


def test_records_already_processed_are_not_taken_again():
    task = make_task(value_as_timestamp([]))
    task.process_batch(records("p1", [1, 2]) + records("p2", [3]))
    Recorder.log = []
    # a re-delivered batch overlapping what was processed: only the new offsets go through
    task.process_batch(records("p1", [1, 2, 4]) + records("p2", [3, 5]))
    assert taken() == [("p1", 4), ("p2", 5)]
