"""``max.task.idle.ms``: a task with co-partitioned inputs waits for an input that ran empty.

The task-level cases are Kafka Streams' ``PartitionGroupTest`` (readyToProcess) and
``StreamTaskTest.shouldBeProcessableIfAllPartitionsBuffered``; the driver cases show the wait
and the enforced processing on the mocked wall clock.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from processor_api import Processor, Serdes, Topology
from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task
from processor_api.errors import ConfigError, StreamsError
from processor_api.testing import TopologyTestDriver


class Seen(Processor):
    log: list[str] = []

    def process(self, record):
        Seen.log.append(record.value)


@pytest.fixture(autouse=True)
def reset_log():
    Seen.log = []


def topology():
    return (
        Topology()
        .add_source("src", "a", "b", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("seen", Seen, "src")
    )


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def make_task(max_task_idle_ms, clock=None):
    (sub,) = topology().subtopologies()
    config = StreamsConfig.from_dict(
        {"application.id": "idle", "max.task.idle.ms": max_task_idle_ms}
    )
    return Task(
        subtopology=sub,
        partition=1,
        store_builders={},
        store_factory=lambda builder, ts: builder.build(timestamp_fn=ts),
        collector=ListCollector(),
        config=config,
        clock=clock or Clock(),
    )


def rec(topic, offset, ts):
    return InputRecord(topic, 1, offset, ts, b"k", f"{topic}{offset}".encode(), ())


def events(logs, name):
    return [e for e in logs if e["event"] == name]


# --------------------------------------------------------------- PartitionGroupTest's cases
def test_never_waits_if_idling_is_disabled():
    task = make_task(-1)
    task.update_lags({"a": 0, "b": 5})  # even with data on the broker
    assert task.process_batch([rec("a", 0, 1), rec("a", 1, 5)]) == 2
    assert task.buffered() == 0


def test_ready_if_all_partitions_are_buffered():
    task = make_task(0)
    task.update_lags({"a": None, "b": None})
    batch = [rec("a", 0, 1), rec("a", 1, 5), rec("b", 0, 1), rec("b", 1, 5)]
    # ready while both inputs have records, whatever the lags; once a ran empty (its lag
    # unknown), b1 waits
    assert task.process_batch(batch) == 3
    assert Seen.log == ["a0", "b0", "a1"]
    assert task.buffered() == 1


def test_waits_for_fetches_when_the_lag_is_unknown():
    task = make_task(0)
    task.update_lags({"b": None})
    with capture_logs() as logs:
        assert task.process_batch([rec("a", 0, 1), rec("a", 1, 5)]) == 0
    assert events(logs, "task_waiting_for_input")[0]["topic"] == "b"
    assert task.buffered() == 2
    task.update_lags({"b": 0})
    assert task.process_batch([]) == 2
    assert Seen.log == ["a0", "a1"]


def test_waits_for_the_poll_when_the_lag_is_nonzero():
    task = make_task(0)
    task.update_lags({"b": 1})
    with capture_logs() as logs:
        assert task.process_batch([rec("a", 0, 1), rec("a", 1, 5)]) == 0
    (waiting,) = events(logs, "task_waiting_for_input")
    assert (waiting["topic"], waiting["lag"]) == ("b", 1)
    assert task.metadata().input_positions == {}  # nothing processed, nothing committed


def test_idles_as_specified_when_the_lag_is_zero():
    clock = Clock(0)
    task = make_task(1, clock)
    task.update_lags({"a": 0, "b": 0})
    with capture_logs() as logs:
        assert task.process_batch([rec("a", 0, 1), rec("a", 1, 5)]) == 0
    (idling,) = events(logs, "task_idling_for_input")
    assert (idling["topic"], idling["now"], idling["deadline"]) == ("b", 0, 1)
    assert task.next_idle_deadline() == 1
    clock.now = 1
    with capture_logs() as logs:
        assert task.process_batch([]) == 2
    (enforced,) = events(logs, "enforced_processing")
    assert enforced["buffered_topics"] == ["a"]
    assert enforced["empty_topics_deadlines"] == {"b": 1}
    assert enforced["max_task_idle_ms"] == 1 and enforced["now"] == 1
    assert enforced["log_level"] == "info"
    assert task.partition_group.idling.enforced_total == 1
    assert task.next_idle_deadline() is None


def test_lags_are_checked_for_known_topics_and_values():
    task = make_task(0)
    with pytest.raises(StreamsError, match=r"task 0_1: lag given for topic 'c'"):
        task.update_lags({"c": 0})
    with pytest.raises(StreamsError, match=r"lag of topic 'a' must be an int >= 0 or None, got -1"):
        task.update_lags({"a": -1})


# -------------------------------------------------------------------- StreamTaskTest's case
def test_processable_once_all_partitions_are_buffered():
    task = make_task(100)
    assert task.process_batch([]) == 0
    assert task.process_batch([rec("a", 0, 0)]) == 0  # b is empty: idling until 100
    # both buffered: a0 goes (equal timestamps: source topic order), then a is empty
    assert task.process_batch([rec("b", 0, 0)]) == 1
    assert Seen.log == ["a0"]


# ------------------------------------------------------------------------ timestamp order
def test_waiting_for_a_lagging_input_keeps_timestamp_order():
    task = make_task(0)
    task.update_lags({"a": 0, "b": 3})
    # b0 (5) goes; then b is empty with 3 records on the broker: a0 (10) and a1 (30) wait
    assert task.process_batch([rec("a", 0, 10), rec("a", 1, 30), rec("b", 0, 5)]) == 1
    assert task.metadata().input_positions == {"b": 1}
    task.update_lags({"b": 0})
    # the host hands a1 in again (say it re-read it): it is not queued twice
    assert task.process_batch([rec("a", 1, 30), rec("b", 1, 20)]) == 3
    assert Seen.log == ["b0", "a0", "b1", "a1"]
    assert task.metadata().input_positions == {"a": 2, "b": 2}


def test_without_waiting_the_late_input_is_processed_out_of_order():
    task = make_task(-1)
    task.update_lags({"b": 3})
    task.process_batch([rec("a", 0, 10), rec("a", 1, 30), rec("b", 0, 5)])
    task.process_batch([rec("b", 1, 20)])
    assert Seen.log == ["b0", "a0", "a1", "b1"]


# ----------------------------------------------------------------------------- the driver
def test_driver_holds_a_record_back_until_the_idle_deadline():
    with TopologyTestDriver(topology(), {"max.task.idle.ms": 100}) as driver:
        a, b = driver.create_input_topic("a"), driver.create_input_topic("b")
        a.pipe_input("k", "late", timestamp=30)
        assert Seen.log == []
        b.pipe_input("k", "early", timestamp=20)  # both inputs have data: timestamp order
        assert Seen.log == ["early"]  # then b is empty: "late" waits up to 100 ms
        driver.advance_wall_clock_time(99)
        assert Seen.log == ["early"]
        with capture_logs() as logs:
            driver.advance_wall_clock_time(1)
        assert Seen.log == ["early", "late"]
        assert events(logs, "enforced_processing")[0]["empty_topics_deadlines"] == {"b": 100}


@pytest.mark.parametrize("idle, expected", [(0, ["late", "early"]), (-1, ["late", "early"])])
def test_driver_without_idling_processes_each_record_at_once(idle, expected):
    with TopologyTestDriver(topology(), {"max_task_idle_ms": idle}) as driver:
        driver.create_input_topic("a").pipe_input("k", "late", timestamp=30)
        driver.create_input_topic("b").pipe_input("k", "early", timestamp=20)
        assert Seen.log == expected


@pytest.mark.parametrize(
    "value, message",
    [
        (-2, "max_task_idle_ms must be -1 (never wait for lagging inputs)"),
        ("soon", "max_task_idle_ms must be an integer number of milliseconds, got 'soon'"),
        (1.5, "max_task_idle_ms must be an integer number of milliseconds, got 1.5"),
    ],
)
def test_bad_max_task_idle_ms_is_refused(value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StreamsConfig.from_dict({"max.task.idle.ms": value})


def test_max_task_idle_ms_from_the_command_line_is_a_string():
    assert StreamsConfig.from_dict({"max.task.idle.ms": "250"}).max_task_idle_ms == 250
    assert StreamsConfig().max_task_idle_ms == 0


def test_enforced_processing_logs_one_info_line_a_minute_and_the_rest_at_debug():
    with TopologyTestDriver(topology()) as driver:
        a, b = driver.create_input_topic("a"), driver.create_input_topic("b")
        with capture_logs() as logs:
            for n in range(400):  # "b" gets a record now and then, "a" runs ahead of it
                b.pipe_input("k", f"b{n}", timestamp=2 * n)
                a.pipe_input("k", f"a{n}", timestamp=2 * n + 1)
            driver.advance_wall_clock_time(60_000)
            b.pipe_input("k", "b-later", timestamp=1000)
            a.pipe_input("k", "a-later", timestamp=1001)
        enforced = events(logs, "enforced_processing")
        info = [e for e in enforced if e["log_level"] == "info"]
        debug = [e for e in enforced if e["log_level"] == "debug"]
        assert len(info) == 2, [e["log_level"] for e in enforced]
        assert len(debug) >= 390  # nearly every record of "a" went on without "b"
        assert info[0]["enforced_since_last_info"] == 0
        between = enforced.index(info[1]) - enforced.index(info[0]) - 1
        assert info[1]["enforced_since_last_info"] == between >= 390
        assert info[1]["now"] - info[0]["now"] >= 60_000
