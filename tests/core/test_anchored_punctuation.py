"""Anchored punctuation (Kafka Streams 4.2, KIP-1146): ``schedule(..., start_time=...)``.

The grid is ``start_time + k * interval`` for both punctuation types, first due at
``start_time``; due times move with Kafka Streams' skip rule (``PunctuationSchedule.next``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from processor_api import ProcessingError, Processor, PunctuationType, Serdes, Topology
from processor_api.config import StreamsConfig
from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task
from processor_api.testing import TopologyTestDriver


class Anchored(Processor):
    """One schedule registered in init(); every punctuation timestamp goes to ``fired``."""

    fired: list[int] = []

    def __init__(self, interval, type_, start_time):
        self.interval, self.type, self.start_time = interval, type_, start_time

    def init(self, context):
        context.schedule(
            self.interval, self.type, Anchored.fired.append, start_time=self.start_time
        )

    def process(self, record):
        pass


@pytest.fixture(autouse=True)
def reset_fired():
    Anchored.fired = []


def build(interval, type_, start_time):
    return (
        Topology()
        .add_source("src", "in", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("anchored", lambda: Anchored(interval, type_, start_time), "src")
    )


def test_stream_time_grid_starts_at_the_anchor():
    # unanchored this schedule would fire at 3 (grid 0, 10, 20, ...)
    with TopologyTestDriver(build(10, PunctuationType.STREAM_TIME, 5)) as driver:
        topic = driver.create_input_topic("in")
        for ts in (3, 4):
            topic.pipe_input("k", "v", timestamp=ts)
        assert Anchored.fired == []
        for ts in (5, 14, 15, 37, 44, 45):
            topic.pipe_input("k", "v", timestamp=ts)
        assert Anchored.fired == [5, 15, 37, 45]


def test_wall_clock_grid_starts_at_the_anchor_not_at_registration():
    start = 1_000_000
    topology = build(60, PunctuationType.WALL_CLOCK_TIME, start + 60)
    with TopologyTestDriver(topology, initial_wall_clock_ms=start + 3) as driver:
        driver.advance_wall_clock_time(56)  # 1_000_059
        assert Anchored.fired == []
        driver.advance_wall_clock_time(1)  # unanchored, the first due would be 1_000_063
        assert Anchored.fired == [start + 60]
        driver.advance_wall_clock_time(130)  # 1_000_190: fires, next due on the grid: 240
        driver.advance_wall_clock_time(49)
        assert Anchored.fired == [start + 60, start + 190]
        driver.advance_wall_clock_time(1)
        assert Anchored.fired == [start + 60, start + 190, start + 240]


def test_a_start_time_already_passed_is_due_at_the_first_check():
    topology = build(1_000, PunctuationType.WALL_CLOCK_TIME, 0)
    with TopologyTestDriver(topology, initial_wall_clock_ms=1_000_005) as driver:
        driver.advance_wall_clock_time(0)
        assert Anchored.fired == [1_000_005]
        driver.advance_wall_clock_time(994)  # 1_000_999
        assert Anchored.fired == [1_000_005]
        driver.advance_wall_clock_time(1)
        assert Anchored.fired == [1_000_005, 1_001_000]


def test_on_the_hour_in_a_time_zone():
    oslo = ZoneInfo("Europe/Oslo")
    start = datetime(2026, 11, 23, 11, 0, tzinfo=oslo)  # 10:00 UTC
    now = datetime(2026, 11, 23, 9, 17, tzinfo=timezone.utc)
    ms = int(now.timestamp() * 1000)
    hour = 3_600_000
    topology = build(timedelta(hours=1), PunctuationType.WALL_CLOCK_TIME, start)
    with TopologyTestDriver(topology, initial_wall_clock_ms=ms) as driver:
        driver.advance_wall_clock_time(timedelta(minutes=42, seconds=59))
        assert Anchored.fired == []
        driver.advance_wall_clock_time(timedelta(seconds=1))
        ten_utc = int(datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc).timestamp() * 1000)
        assert Anchored.fired == [ten_utc]
        driver.advance_wall_clock_time(timedelta(minutes=90))  # 11:30 UTC: fires, next 12:00
        driver.advance_wall_clock_time(timedelta(minutes=30))
        assert Anchored.fired == [ten_utc, ten_utc + 90 * 60_000, ten_utc + 2 * hour]


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (datetime(2026, 1, 1, 12, 0), ValueError, "has no time zone"),
        (-1, ValueError, "must not be before the epoch"),
        ("2026-01-01T00:00:00Z", TypeError, "must be an aware datetime or int epoch"),
        (True, TypeError, "got bool True"),
        (1.5, TypeError, "got float 1.5"),
    ],
)
def test_bad_start_times_are_refused_naming_the_processor(bad, error, message):
    with pytest.raises(ProcessingError, match="anchored") as caught:
        TopologyTestDriver(build(10, PunctuationType.STREAM_TIME, bad))
    cause = caught.value.__cause__
    assert isinstance(cause, error)
    assert "processor 'anchored'" in str(cause)
    assert message in str(cause)


# ------------------------------------------------------------------ restarts (task metadata)
class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def make_task(topology, clock, metadata=None):
    (sub,) = topology.subtopologies()
    return Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(timestamp_fn=ts),
        collector=ListCollector(),
        config=StreamsConfig(application_id="anchored"),
        clock=clock,
        metadata=metadata,
    )


def restart(task, topology, clock):
    saved = TaskMetadata.from_json(task.metadata().to_json())
    task.close()
    again = make_task(topology, clock, metadata=saved)
    again.initialize()
    return again


def test_anchored_wall_clock_schedule_resumes_after_a_restart():
    clock = Clock(1_000)
    topology = build(100, PunctuationType.WALL_CLOCK_TIME, 1_050)
    task = make_task(topology, clock)
    task.initialize()
    clock.now = 1_060
    task.maybe_punctuate_wall_clock()
    assert Anchored.fired == [1_060]  # next due 1_150
    assert task.metadata().schedules["anchored#0"] == {
        "type": "wall_clock_time",
        "interval": 100,
        "next": 1_150,
        "cancelled": False,
        "anchor": 1_050,
    }
    clock.now = 1_100
    task = restart(task, topology, clock)
    task.maybe_punctuate_wall_clock()  # the anchor 1_050 is passed, but it already fired
    assert Anchored.fired == [1_060]
    clock.now = 1_150
    task.maybe_punctuate_wall_clock()
    assert Anchored.fired == [1_060, 1_150]


def test_an_anchor_moved_by_whole_intervals_keeps_the_persisted_due_time():
    """``start_time`` = "the last full interval before now" moves on the same grid."""
    clock = Clock(1_000)
    task = make_task(build(100, PunctuationType.WALL_CLOCK_TIME, 1_000), clock)
    task.initialize()
    clock.now = 1_000
    task.maybe_punctuate_wall_clock()
    assert Anchored.fired == [1_000]  # next due 1_100
    clock.now = 1_250
    task = restart(task, build(100, PunctuationType.WALL_CLOCK_TIME, 1_200), clock)
    task.maybe_punctuate_wall_clock()  # 1_100 was missed: fires once, then 1_300
    assert Anchored.fired == [1_000, 1_250]
    clock.now = 1_299
    task.maybe_punctuate_wall_clock()
    assert Anchored.fired == [1_000, 1_250]
    # an anchor later than the persisted due time holds the schedule back until then
    task = restart(task, build(100, PunctuationType.WALL_CLOCK_TIME, 1_500), clock)
    clock.now = 1_499
    task.maybe_punctuate_wall_clock()
    assert Anchored.fired == [1_000, 1_250]
    clock.now = 1_500
    task.maybe_punctuate_wall_clock()
    assert Anchored.fired == [1_000, 1_250, 1_500]


def test_a_new_grid_after_a_restart_starts_at_its_anchor():
    clock = Clock(0)
    task = make_task(build(100, PunctuationType.STREAM_TIME, None), clock)
    task.process_batch([InputRecord("in", 0, 0, 40, b"k", b"v", ())])
    assert Anchored.fired == [40]  # unanchored grid 0, 100, 200: next due 100
    # anchored now (phase 30): not the persisted unanchored schedule, a new one from 130
    task = restart(task, build(100, PunctuationType.STREAM_TIME, 130), clock)
    task.process_batch([InputRecord("in", 0, 1, 110, b"k", b"v", ())])
    assert Anchored.fired == [40]
    task.process_batch([InputRecord("in", 0, 2, 130, b"k", b"v", ())])
    assert Anchored.fired == [40, 130]
    # a different phase again (anchor 150): a new schedule, first due 150
    task = restart(task, build(100, PunctuationType.STREAM_TIME, 150), clock)
    task.process_batch([InputRecord("in", 0, 3, 149, b"k", b"v", ())])
    task.process_batch([InputRecord("in", 0, 4, 150, b"k", b"v", ())])
    assert Anchored.fired == [40, 130, 150]
    # back to unanchored: a new schedule on the grid 0, 100, ...: due 0 fires at once
    task = restart(task, build(100, PunctuationType.STREAM_TIME, None), clock)
    task.process_batch([InputRecord("in", 0, 5, 151, b"k", b"v", ())])
    assert Anchored.fired == [40, 130, 150, 151]
