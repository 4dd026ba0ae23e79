"""topologies.product_count: counts in store ``Counts``, stream-time punctuation every second."""

from __future__ import annotations

from pathlib import Path

from processor_api import Serdes
from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task
from processor_api.testing import TopologyTestDriver
from topologies.product_count import build_topology


def counts(driver: TopologyTestDriver, store: str = "Counts") -> dict:
    return {kv.key: kv.value for kv in driver.get_key_value_store(store).all()}


def test_nothing_before_data() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        output = driver.create_output_topic("counter_topic")
        driver.advance_wall_clock_time(10_000)  # wall clock does not drive this schedule
        assert output.is_empty()
        assert counts(driver) == {}


def test_counts_and_punctuation_every_second_of_stream_time() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        logs = driver.create_input_topic("logs")
        output = driver.create_output_topic("counter_topic")

        # grid 0, 1000, 2000...: the first record (stream time 0) is already at a due time
        logs.pipe_input("p1", "chrome", 0)
        assert [(r.key, r.value, r.timestamp) for r in output.read_records_to_list()] == [
            ("p1", 1, 0)
        ]

        logs.pipe_input("p2", "firefox", 300)
        logs.pipe_input("p1", "safari", 999)
        assert output.is_empty()  # next due time is 1000
        assert counts(driver) == {"p1": 2, "p2": 1}

        logs.pipe_input("p3", "chrome", 1000)
        assert [(r.key, r.value, r.timestamp) for r in output.read_records_to_list()] == [
            ("p1", 2, 1000),
            ("p2", 1, 1000),
            ("p3", 1, 1000),
        ]

        logs.pipe_input("p2", "edge", 1500)
        logs.pipe_input("p2", "edge", 500)  # out of order: counted, stream time stays 1500
        assert output.is_empty()

        logs.pipe_input("p1", "chrome", 3700)  # skips 2000 and 3000: fires once, at 3700
        records = output.read_records_to_list()
        assert [(r.key, r.value) for r in records] == [("p1", 3), ("p2", 3), ("p3", 1)]
        assert {r.timestamp for r in records} == {3700}

        logs.pipe_input("p1", "chrome", 3999)
        assert output.is_empty()
        logs.pipe_input("p9", "chrome", 4000)
        assert output.read_key_values_to_map() == {"p1": 4, "p2": 3, "p3": 1, "p9": 1}
        assert counts(driver) == {"p1": 4, "p2": 3, "p3": 1, "p9": 1}


def test_null_key_skipped() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        logs = driver.create_input_topic("logs")
        output = driver.create_output_topic("counter_topic")
        logs.pipe_input(None, "x", 0)
        assert counts(driver) == {}
        assert output.is_empty()  # punctuation fired (stream time 0) but the store is empty


def test_custom_interval_and_long_keys() -> None:
    topology = build_topology(
        punctuate_interval_ms=50, key_serde=Serdes.long(), output_topic="out", store_name="c"
    )
    with TopologyTestDriver(topology) as driver:
        logs = driver.create_input_topic("logs")
        output = driver.create_output_topic("out")
        logs.pipe_input(7, "a", 10)  # fires at 10 (due 0)
        logs.pipe_input(3, "b", 40)
        logs.pipe_input(7, "c", 60)  # fires at 60 (due 50)
        records = output.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in records] == [
            (7, 1, 10),
            (3, 1, 60),
            (7, 2, 60),
        ]
        assert counts(driver, "c") == {3: 1, 7: 2}


def test_punctuation_requests_a_commit(tmp_path: Path) -> None:
    """The seed's punctuate ends with context.commit(): the task sees the request."""
    topology = build_topology()
    (sub,) = topology.subtopologies()
    collector = ListCollector()
    task = Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(state_dir=tmp_path, timestamp_fn=ts),
        collector=collector,
        config=StreamsConfig(application_id="product-count-test"),
        clock=lambda: 0,
    )
    try:
        task.initialize()

        def pipe(offset: int, timestamp: int) -> None:
            task.process_batch([InputRecord("logs", 0, offset, timestamp, b"p1", b"chrome")])

        pipe(0, 0)  # punctuates (due 0)
        assert task.commit_requested
        assert len(collector.drain()) == 1
        task.flush()
        assert not task.commit_requested
        pipe(1, 500)  # not due: no punctuation, no commit request
        assert not task.commit_requested
        assert collector.drain() == []
    finally:
        task.close()
