"""Punctuation semantics, reproducing Kafka Streams' own test cases."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from processor_api import Processor, PunctuationType, Record, Serdes, Stores, Topology
from processor_api.engine.punctuation import next_due_after
from processor_api.errors import ProcessingError
from processor_api.testing import TopologyTestDriver


class Recorder(Processor):
    """Registers one schedule in init and records every punctuation timestamp."""

    def __init__(self, interval, type_, cancel_after=None, registered=None):
        self.interval = interval
        self.type = type_
        self.cancel_after = cancel_after
        self.fired: list[int] = []
        self.registered = registered

    def init(self, context):
        self.context = context
        self.schedule = context.schedule(self.interval, self.type, self.on_punctuate)
        if self.registered is not None:
            self.registered.append(self)

    def on_punctuate(self, timestamp):
        self.fired.append(timestamp)
        if self.cancel_after is not None and len(self.fired) >= self.cancel_after:
            self.schedule.cancel()

    def process(self, record):
        self.context.forward(record)


def build(interval, type_, registered, cancel_after=None):
    return (
        Topology()
        .add_source("src", "in", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("proc", lambda: Recorder(interval, type_, cancel_after, registered), "src")
    )


def test_stream_time_punctuation_matches_kafka_streams():
    registered: list[Recorder] = []
    with TopologyTestDriver(build(10, PunctuationType.STREAM_TIME, registered)) as driver:
        topic = driver.create_input_topic("in")
        for ts in (20, 25, 142, 145, 155, 159, 160, 161):
            topic.pipe_input("k", "v", timestamp=ts)
        assert registered[0].fired == [20, 142, 155, 160]


def test_wall_clock_punctuation_matches_kafka_streams():
    registered: list[Recorder] = []
    with TopologyTestDriver(build(10, PunctuationType.WALL_CLOCK_TIME, registered)) as driver:
        for advance in (100, 10, 12, 8, 105, 5):
            driver.advance_wall_clock_time(advance)
        assert registered[0].fired == [100, 110, 122, 130, 235, 240]


def test_wall_clock_first_due_is_registration_time_plus_interval():
    registered: list[Recorder] = []
    topology = build(10, PunctuationType.WALL_CLOCK_TIME, registered)
    with TopologyTestDriver(topology, initial_wall_clock_ms=1_000_005) as driver:
        driver.advance_wall_clock_time(9)
        assert registered[0].fired == []
        driver.advance_wall_clock_time(1)
        assert registered[0].fired == [1_000_015]
        driver.advance_wall_clock_time(timedelta(milliseconds=25))
        assert registered[0].fired == [1_000_015, 1_000_040]


def test_no_data_no_stream_time_punctuation():
    registered: list[Recorder] = []
    with TopologyTestDriver(build(10, PunctuationType.STREAM_TIME, registered)) as driver:
        driver.advance_wall_clock_time(10_000)
        assert registered[0].fired == []


def test_stream_time_never_goes_back_and_late_records_do_not_fire():
    registered: list[Recorder] = []
    with TopologyTestDriver(build(10, PunctuationType.STREAM_TIME, registered)) as driver:
        topic = driver.create_input_topic("in")
        for ts in (50, 5, 3, 59, 60):
            topic.pipe_input("k", "v", timestamp=ts)
        assert registered[0].fired == [50, 60]
        assert registered[0].context.current_stream_time_ms() == 60


def test_cancel_from_inside_punctuator():
    registered: list[Recorder] = []
    topology = build(10, PunctuationType.STREAM_TIME, registered, cancel_after=2)
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        for ts in (0, 10, 20, 30, 40):
            topic.pipe_input("k", "v", timestamp=ts)
        assert registered[0].fired == [0, 10]
        assert registered[0].schedule.cancelled


def test_cancel_wall_clock_from_inside_punctuator():
    registered: list[Recorder] = []
    topology = build(10, PunctuationType.WALL_CLOCK_TIME, registered, cancel_after=1)
    with TopologyTestDriver(topology) as driver:
        for _ in range(5):
            driver.advance_wall_clock_time(10)
        assert registered[0].fired == [10]


def test_default_punctuate_method_is_called_without_punctuator():
    fired = []

    class UsesPunctuate(Processor):
        def init(self, context):
            context.schedule(timedelta(seconds=1))

        def process(self, record):
            pass

        def punctuate(self, timestamp):
            fired.append(timestamp)

    topology = Topology().add_source("s", "in").add_processor("p", UsesPunctuate, "s")
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        for ts in (500, 999, 1000, 2500):
            topic.pipe_input(b"k", b"v", timestamp=ts)
    assert fired == [500, 1000, 2500]


@pytest.mark.parametrize(
    ("bad", "cause", "reason"),
    [
        (0, ValueError, "must be at least 1 ms, got 0"),
        (-5, ValueError, "must be at least 1 ms, got -5"),
        (timedelta(0), ValueError, "must be at least 1 ms, got datetime.timedelta(0)"),
        ("10", TypeError, "must be int milliseconds or timedelta, got '10'"),
        (1.5, TypeError, "must be int milliseconds or timedelta, got 1.5"),
    ],
)
def test_invalid_intervals_are_rejected(bad, cause, reason):
    class Bad(Processor):
        def init(self, context):
            context.schedule(bad, PunctuationType.STREAM_TIME, lambda ts: None)

        def process(self, record):
            pass

    topology = Topology().add_source("s", "in").add_processor("p", Bad, "s")
    message = (
        f"init() raised {cause.__name__}: punctuation interval {reason} (task=0_0, processor=p)"
    )
    with pytest.raises(ProcessingError, match=re.escape(message)) as raised:
        TopologyTestDriver(topology)
    assert type(raised.value.__cause__) is cause


def test_punctuation_forward_reaches_sink_with_punctuation_context():
    class Emitter(Processor):
        def init(self, context):
            self.context = context
            context.schedule(10, PunctuationType.STREAM_TIME, self.emit)

        def emit(self, timestamp):
            assert self.context.record_metadata() is None
            self.context.forward(Record("tick", timestamp, timestamp))

        def process(self, record):
            assert self.context.record_metadata().topic == "in"

    topology = (
        Topology()
        .add_source("s", "in")
        .add_processor("p", Emitter, "s")
        .add_sink("out", "ticks", "p", key_serde=Serdes.string(), value_serde=Serdes.long())
    )
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        for ts in (3, 12, 13, 31):
            topic.pipe_input(b"k", b"v", timestamp=ts)
        out = driver.create_output_topic("ticks")
        records = out.read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("tick", 3, 3),
        ("tick", 12, 12),
        ("tick", 31, 31),
    ]


@pytest.mark.parametrize(
    "due,interval,now,expected",
    [
        (0, 10, 20, 30),
        (30, 10, 142, 150),
        (150, 10, 155, 160),
        (10, 10, 100, 110),
        (140, 10, 235, 240),
        (0, 10, 0, 10),
        (0, 10, 9, 10),
    ],
)
def test_next_due_after_skips_missed_intervals(due, interval, now, expected):
    assert next_due_after(due, interval, now) == expected


def test_persistent_store_survives_within_driver_and_schedules_register_per_task():
    class Counter(Processor):
        def init(self, context):
            self.store = context.get_state_store("counts")

        def process(self, record):
            self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    topology = (
        Topology()
        .add_source("s", "in", key_serde=Serdes.string())
        .add_processor("p", Counter, "s")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            ),
            "p",
        )
    )
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_key_value_list([("a", b"1"), ("b", b"1"), ("a", b"1")])
        store = driver.get_key_value_store("counts")
        assert list(store.all()) == [("a", 2), ("b", 1)]


def test_stream_time_schedules_added_later_fire_on_their_own_grid():
    """Schedules made in process() or in a punctuator are checked from the next record on."""
    fired: list[tuple[str, int]] = []

    class Adder(Processor):
        def init(self, context):
            self.context = context
            self.slow = context.schedule(100, PunctuationType.STREAM_TIME, self.on_slow)

        def on_slow(self, ts):
            fired.append(("slow", ts))
            if ts >= 100:  # registered from inside a punctuator: first due 0
                self.context.schedule(
                    7, PunctuationType.STREAM_TIME, lambda t: fired.append(("seven", t))
                )

        def process(self, record):
            if record.value == b"add":
                self.fast = self.context.schedule(
                    5, PunctuationType.STREAM_TIME, lambda t: fired.append(("fast", t))
                )
            if record.value == b"cancel":
                self.fast.cancel()
                self.slow.cancel()

    topology = Topology().add_source("s", "in").add_processor("p", Adder, "s")
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        for ts, value in (
            (1, b"-"),
            (10, b"add"),
            (12, b"-"),
            (15, b"-"),
            (101, b"-"),
            (102, b"-"),
            (108, b"cancel"),
            (130, b"-"),
            (220, b"-"),
        ):
            topic.pipe_input(b"k", value, timestamp=ts)
    assert fired == [
        ("slow", 1),
        ("fast", 10),
        ("fast", 15),
        ("fast", 101),
        ("slow", 101),
        ("seven", 101),  # due 20, due 100, then the new one
        ("seven", 108),
        ("seven", 130),
        ("seven", 220),  # fast and slow cancelled at 108
    ]
