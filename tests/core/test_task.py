"""The task engine on its own: ordering, resume from metadata, errors, dead letters."""

from __future__ import annotations

import json

import pytest

from processor_api import (
    ProcessingError,
    Processor,
    PunctuationType,
    Record,
    Serdes,
    Stores,
    Topology,
)
from processor_api.config import StreamsConfig
from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.records import InputRecord, ListCollector, OutputRecord
from processor_api.engine.task import Task
from processor_api.errors import StoreError


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


class Tracker(Processor):
    log: list = []

    def init(self, context):
        self.context = context
        self.stream = context.schedule(10, PunctuationType.STREAM_TIME, self.on_stream)
        self.wall = context.schedule(100, PunctuationType.WALL_CLOCK_TIME, self.on_wall)

    def on_stream(self, ts):
        Tracker.log.append(("stream", ts))

    def on_wall(self, ts):
        Tracker.log.append(("wall", ts))

    def process(self, record):
        Tracker.log.append(("record", record.value, record.timestamp))
        self.context.forward(record)


def topology(*topics):
    return (
        Topology()
        .add_source("src", *topics, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("track", Tracker, "src")
        .add_sink("sink", "out", "track", key_serde=Serdes.string(), value_serde=Serdes.string())
    )


def make_task(top, clock, metadata=None, config=None, collector=None):
    (sub,) = top.subtopologies()
    return Task(
        subtopology=sub,
        partition=3,
        store_builders=top.store_builders,
        store_factory=lambda builder, ts: builder.build(timestamp_fn=ts),
        collector=collector or ListCollector(),
        config=config or StreamsConfig(application_id="t"),
        clock=clock,
        metadata=metadata,
    )


def raw(topic, offset, ts, value, key="k"):
    return InputRecord(topic, 3, offset, ts, key.encode(), value.encode(), ())


@pytest.fixture(autouse=True)
def reset_log():
    Tracker.log = []


def test_task_id_and_offset_order_whatever_the_input_order():
    task = make_task(topology("a"), Clock())
    assert task.task_id == "0_3"
    task.process_batch([raw("a", 2, 5, "c"), raw("a", 0, 1, "a"), raw("a", 1, 9, "b")])
    assert [e[1] for e in Tracker.log if e[0] == "record"] == ["a", "b", "c"]
    assert task.metadata().input_positions == {"a": 3}


def test_co_partitioned_topics_smallest_timestamp_first():
    task = make_task(topology("a", "b"), Clock())
    task.process_batch(
        [
            raw("a", 0, 10, "a0"),
            raw("a", 1, 30, "a1"),
            raw("b", 0, 5, "b0"),
            raw("b", 1, 20, "b1"),
            raw("b", 2, 40, "b2"),
        ]
    )
    assert [e[1] for e in Tracker.log if e[0] == "record"] == ["b0", "a0", "b1", "a1", "b2"]


def test_recreated_task_resumes_schedules_stream_time_and_positions():
    clock = Clock(1000)
    first = make_task(topology("a"), clock)
    first.initialize()
    first.process_batch([raw("a", 0, 20, "x"), raw("a", 1, 25, "y")])
    clock.now = 1150
    first.maybe_punctuate_wall_clock()  # due 1100 -> fires at 1150, next 1200
    saved = TaskMetadata.from_json(first.metadata().to_json())
    first.close()
    assert ("stream", 20) in Tracker.log and ("wall", 1150) in Tracker.log
    Tracker.log = []

    clock.now = 1190
    second = make_task(topology("a"), clock, metadata=saved)
    second.initialize()
    second.maybe_punctuate_wall_clock()  # 1190 < 1200: nothing, not a fresh 1290 schedule
    assert Tracker.log == []
    clock.now = 1200
    second.maybe_punctuate_wall_clock()
    assert Tracker.log == [("wall", 1200)]
    # offset 1 was already processed: it is skipped; stream time 25 survived; due 30 stays
    second.process_batch([raw("a", 1, 25, "y"), raw("a", 2, 29, "z"), raw("a", 3, 30, "w")])
    assert Tracker.log[1:] == [("record", "z", 29), ("record", "w", 30), ("stream", 30)]
    assert second.stream_time == 30


def test_cancelled_schedule_stays_cancelled_after_restart():
    class OneShot(Processor):
        def init(self, context):
            self.handle = context.schedule(10, PunctuationType.STREAM_TIME, self.fire)

        def fire(self, ts):
            Tracker.log.append(("fired", ts))
            self.handle.cancel()

        def process(self, record):
            pass

    top = Topology().add_source("s", "a").add_processor("p", OneShot, "s")
    task = make_task(top, Clock())
    task.process_batch([raw("a", 0, 10, "x")])
    saved = task.metadata()
    again = make_task(top, Clock(), metadata=saved)
    again.process_batch([raw("a", 1, 50, "x")])
    assert Tracker.log == [("fired", 10)]


def test_log_and_fail_names_topic_partition_offset_processor():
    class Boom(Processor):
        def process(self, record):
            if record.value == "bad":
                raise ValueError("cannot handle bad")

    top = (
        Topology()
        .add_source("s", "a", value_serde=Serdes.string())
        .add_processor("boom", Boom, "s")
    )
    task = make_task(top, Clock())
    with pytest.raises(ProcessingError) as info:
        task.process_batch([raw("a", 0, 1, "ok"), raw("a", 1, 2, "bad"), raw("a", 2, 3, "ok")])
    message = str(info.value)
    for part in ("topic=a", "partition=3", "offset=1", "processor=boom", "cannot handle bad"):
        assert part in message
    assert task.metadata().input_positions == {"a": 1}  # nothing past the bad record


def test_log_and_continue_with_dead_letter_topic():
    collector = ListCollector()
    top = (
        Topology()
        .add_source("s", "a", value_serde=Serdes.json())
        .add_processor("p", Tracker, "s")
        .add_sink("k", "out", "p", value_serde=Serdes.json())
    )
    config = StreamsConfig.from_dict(
        {
            "application.id": "t",
            "deserialization.exception.handler": "log_and_continue",
            "dead_letter_topic": "dlq",
        }
    )
    task = make_task(top, Clock(), config=config, collector=collector)
    task.process_batch(
        [
            InputRecord("a", 3, 0, 1, b"k", b"{not json", (("h", b"1"),)),
            InputRecord("a", 3, 1, 2, b"k", json.dumps({"ok": 1}).encode(), ()),
        ]
    )
    dead = [r for r in collector.records if r.topic == "dlq"]
    assert len(dead) == 1
    assert dead[0].value == b"{not json" and dead[0].key == b"k"
    headers = dict(dead[0].headers)
    assert headers["h"] == b"1"
    assert headers["__streams.errors.topic"] == b"a"
    assert headers["__streams.errors.offset"] == b"0"
    assert headers["__streams.errors.processor"] == b"s"
    assert headers["__streams.errors.exception"] == b"SerializationError"
    assert b"json serde cannot deserialize" in headers["__streams.errors.message"]
    assert [r.topic for r in collector.records].count("out") == 1
    assert task.metadata().input_positions == {"a": 2}


def test_punctuator_exception_goes_through_processing_handler():
    class BadPunctuator(Processor):
        def init(self, context):
            context.schedule(10, PunctuationType.STREAM_TIME, self.fail)

        def fail(self, ts):
            raise RuntimeError("punctuation broke")

        def process(self, record):
            pass

    top = Topology().add_source("s", "a").add_processor("bp", BadPunctuator, "s")
    with pytest.raises(ProcessingError, match="punctuation broke.*processor=bp"):
        make_task(top, Clock()).process_batch([raw("a", 0, 10, "x")])
    config = StreamsConfig.from_dict({"processing_exception_handler": "log_and_continue"})
    task = make_task(top, Clock(), config=config)
    task.process_batch([raw("a", 0, 10, "x"), raw("a", 1, 20, "y")])
    assert task.records_processed == 2


def test_forward_to_named_child_and_unknown_child():
    class Router(Processor):
        def init(self, context):
            self.context = context

        def process(self, record):
            self.context.forward(record, child=record.value)

    top = (
        Topology()
        .add_source("s", "a", value_serde=Serdes.string())
        .add_processor("router", Router, "s")
        .add_sink("left", "left-topic", "router", value_serde=Serdes.string())
        .add_sink("right", "right-topic", "router", value_serde=Serdes.string())
    )
    collector = ListCollector()
    task = make_task(top, Clock(), collector=collector)
    task.process_batch([raw("a", 0, 1, "left"), raw("a", 1, 2, "right"), raw("a", 2, 3, "left")])
    assert [r.topic for r in collector.records] == ["left-topic", "right-topic", "left-topic"]
    with pytest.raises(ProcessingError, match="unknown child 'middle'.*'left', 'right'"):
        task.process_batch([raw("a", 3, 4, "middle")])


def test_forward_is_depth_first():
    order = []

    class Named(Processor):
        def __init__(self, name):
            self.name = name

        def init(self, context):
            self.context = context

        def process(self, record):
            order.append(self.name)
            self.context.forward(record)

    top = (
        Topology()
        .add_source("s", "a")
        .add_processor("A", lambda: Named("A"), "s")
        .add_processor("A1", lambda: Named("A1"), "A")
        .add_processor("B", lambda: Named("B"), "s")
        .add_processor("A2", lambda: Named("A2"), "A")
    )
    make_task(top, Clock()).process_batch([raw("a", 0, 1, "x")])
    assert order == ["A", "A1", "A2", "B"]


def test_get_state_store_only_for_connected_processors():
    class Peeker(Processor):
        def init(self, context):
            context.get_state_store("private")

        def process(self, record):
            pass

    top = (
        Topology()
        .add_source("s", "a")
        .add_processor("owner", Tracker, "s")
        .add_processor("peeker", Peeker, "owner")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.in_memory_key_value_store("private"), Serdes.string(), Serdes.long()
            ),
            "owner",
        )
    )
    with pytest.raises(
        StoreError,
        match=r"processor 'peeker' cannot access state store 'private': it is not connected "
        r"to this processor \(connected stores: \[\]\)",
    ):
        make_task(top, Clock()).initialize()


def test_changelog_records_carry_record_timestamps_and_tombstones():
    class Writer(Processor):
        def init(self, context):
            self.store = context.get_state_store("kv")

        def process(self, record):
            if record.value == "delete":
                self.store.delete(record.key)
            else:
                self.store.put(record.key, record.value)

    top = (
        Topology()
        .add_source("s", "a", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("w", Writer, "s")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.in_memory_key_value_store("kv"), Serdes.string(), Serdes.string()
            ),
            "w",
        )
    )
    task = make_task(top, Clock())
    task.process_batch([raw("a", 0, 7, "v1"), raw("a", 1, 9, "delete")])
    changes = task.flush()
    assert [(c.key, c.value, c.timestamp) for c in changes["kv"]] == [
        (b"k", b"v1", 7),
        (b"k", None, 9),
    ]
    assert task.flush() == {}


def test_records_with_negative_timestamps_are_skipped():
    task = make_task(topology("a"), Clock())
    task.process_batch([raw("a", 0, -1, "neg"), raw("a", 1, 4, "ok")])
    assert [e[1] for e in Tracker.log if e[0] == "record"] == ["ok"]
    assert task.records_skipped == 1


def test_timestamp_extractor_gets_record_and_partition_time():
    seen = []

    def extractor(record: Record, partition_time: int) -> int:
        seen.append(partition_time)
        return int(record.value)

    top = (
        Topology()
        .add_source("s", "a", value_serde=Serdes.string(), timestamp_extractor=extractor)
        .add_processor("t", Tracker, "s")
    )
    task = make_task(top, Clock())
    task.process_batch([raw("a", 0, 999, "5"), raw("a", 1, 999, "3")])
    assert seen == [-1, 5]
    assert task.stream_time == 5


@pytest.mark.parametrize("partitioner", [None, lambda topic, key, value, count: 0])
def test_sink_serialization_error_names_the_sink(partitioner):
    from processor_api import SerializationError

    collector = ListCollector()
    top = (
        Topology()
        .add_source("s", "a", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_sink(
            "longs",
            "out",
            "s",
            key_serde=Serdes.string(),
            value_serde=Serdes.long(),
            partitioner=partitioner,
        )
    )
    task = make_task(top, Clock(), collector=collector)
    with pytest.raises(ProcessingError) as info:
        task.process_batch([raw("a", 0, 1, "not a long")])
    assert info.value.processor == "longs"
    assert "sink could not serialize or route the record: long serde expects int" in str(info.value)
    assert isinstance(info.value.__cause__, SerializationError)
    assert collector.records == []


@pytest.mark.parametrize("partitioner", [None, lambda topic, key, value, count: 0])
def test_sink_output_records(partitioner):
    collector = ListCollector()
    top = (
        Topology()
        .add_source("s", "a", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_sink(
            "out",
            "out",
            "s",
            key_serde=Serdes.string(),
            value_serde=Serdes.string(),
            partitioner=partitioner,
        )
    )
    task = make_task(top, Clock(), collector=collector)
    task.process_batch([raw("a", 0, 7, "v", key="k")])
    expected_partition = None if partitioner is None else 0
    assert collector.records == [OutputRecord("out", b"k", b"v", 7, (), expected_partition)]
