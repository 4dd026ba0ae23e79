"""``stream.time.idle.advance.ms``: stream time moves with the wall clock on an idle input, so
stream-time punctuations (closing windows) fire on quiet partitions. Off by default."""

from __future__ import annotations

import pytest

from processor_api import Processor, PunctuationType, Serdes, Topology
from processor_api.config import StreamsConfig
from processor_api.errors import ConfigError
from processor_api.testing import TopologyTestDriver


class Ticker(Processor):
    fired: list[int] = []
    seen_stream_time: list[int] = []

    def init(self, context):
        self.context = context
        context.schedule(1_000, PunctuationType.STREAM_TIME, self.tick)

    def tick(self, timestamp):
        Ticker.fired.append(timestamp)
        Ticker.seen_stream_time.append(self.context.current_stream_time_ms())

    def process(self, record):
        pass


@pytest.fixture(autouse=True)
def reset():
    Ticker.fired, Ticker.seen_stream_time = [], []


def topology(*topics):
    return (
        Topology()
        .add_source("src", *topics, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("ticker", Ticker, "src")
    )


def test_off_by_default_stream_time_waits_for_records():
    with TopologyTestDriver(topology("in")) as driver:
        driver.create_input_topic("in").pipe_input("k", "v", timestamp=10_000)
        driver.advance_wall_clock_time(3_600_000)
        assert Ticker.fired == [10_000]


def test_idle_input_moves_stream_time_with_the_wall_clock():
    config = {"stream.time.idle.advance.ms": 1_000}
    with TopologyTestDriver(topology("in"), config) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input("k", "v", timestamp=10_000)  # at wall clock 0: fires 10_000, next 11_000
        driver.advance_wall_clock_time(999)
        assert Ticker.fired == [10_000]
        driver.advance_wall_clock_time(1)  # idle for 1 s: stream time 10_000 + 1_000
        assert Ticker.fired == [10_000, 11_000]
        driver.advance_wall_clock_time(500)
        assert Ticker.fired == [10_000, 11_000]
        driver.advance_wall_clock_time(500)
        assert Ticker.fired == [10_000, 11_000, 12_000]
        assert Ticker.seen_stream_time == Ticker.fired
        # a late record: stream time stays 12_000, but the input is no longer idle
        topic.pipe_input("k", "late", timestamp=11_800)
        driver.advance_wall_clock_time(999)
        assert Ticker.fired == [10_000, 11_000, 12_000]
        driver.advance_wall_clock_time(1)  # 12_000 + 1_000
        assert Ticker.fired == [10_000, 11_000, 12_000, 13_000]


def test_no_record_yet_no_stream_time_to_advance():
    with TopologyTestDriver(topology("in"), {"stream_time_idle_advance_ms": 10}) as driver:
        driver.advance_wall_clock_time(60_000)
        assert Ticker.fired == []


def test_a_task_holding_records_back_is_not_idle():
    config = {"stream.time.idle.advance.ms": 100, "max.task.idle.ms": 10_000}
    with TopologyTestDriver(topology("a", "b"), config) as driver:
        driver.create_input_topic("a").pipe_input("k", "v", timestamp=10_000)
        driver.create_input_topic("b").pipe_input("k", "v", timestamp=10_500)
        # a's record went (fired 10_000); b's waits for a, up to 10 s of wall clock
        driver.advance_wall_clock_time(5_000)
        assert Ticker.fired == [10_000]
        driver.advance_wall_clock_time(5_000)  # enforced: b's record (10_500) is processed
        assert Ticker.fired == [10_000]
        driver.advance_wall_clock_time(100)  # now idle: 10_500 + 100 ... not yet 11_000
        assert Ticker.fired == [10_000]
        driver.advance_wall_clock_time(400)
        assert Ticker.fired == [10_000, 11_000]


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "stream_time_idle_advance_ms must be at least 1 ms"),
        ("later", "stream_time_idle_advance_ms must be an integer number of milliseconds"),
    ],
)
def test_bad_stream_time_idle_advance_ms_is_refused(value, message):
    with pytest.raises(ConfigError, match=message):
        StreamsConfig.from_dict({"stream.time.idle.advance.ms": value})


def test_stream_time_idle_advance_ms_is_off_unless_set():
    assert StreamsConfig().stream_time_idle_advance_ms is None
    assert (
        StreamsConfig.from_dict({"stream.time.idle.advance.ms": "250"}).stream_time_idle_advance_ms
        == 250
    )
