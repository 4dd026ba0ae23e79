"""topologies.count_per_key: the throughput benchmark's topology (bench/)."""

from __future__ import annotations

from processor_api.testing import TopologyTestDriver
from topologies.count_per_key import build_topology


def counts(driver: TopologyTestDriver, store: str = "counts") -> dict:
    return {kv.key: kv.value for kv in driver.get_key_value_store(store).all()}


def test_counts_per_key_without_output() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        events = driver.create_input_topic("count-input")
        for i, key in enumerate(["a", "b", "a", "c", "a", "b"]):
            events.pipe_input(key, b"x", timestamp=i)
        assert counts(driver) == {"a": 3, "b": 2, "c": 1}
        # no sink: only the store's changelog was written
        assert driver.produced_topics() == ["topology-test-driver-counts-changelog"]


def test_null_key_skipped() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        events = driver.create_input_topic("count-input")
        events.pipe_input(None, b"x", timestamp=1)
        events.pipe_input("a", None, timestamp=2)  # a null value still counts
        assert counts(driver) == {"a": 1}


def test_forwards_every_count_with_an_output_topic() -> None:
    topology = build_topology(input_topic="in", store_name="c", output_topic="out")
    with TopologyTestDriver(topology) as driver:
        events = driver.create_input_topic("in")
        output = driver.create_output_topic("out")
        events.pipe_input("k1", b"1", timestamp=10)
        events.pipe_input("k2", b"2", timestamp=11)
        events.pipe_input("k1", b"3", timestamp=12)
        records = output.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in records] == [
            ("k1", 1, 10),
            ("k2", 1, 11),
            ("k1", 2, 12),
        ]
        assert counts(driver, "c") == {"k1": 2, "k2": 1}


def test_caching_counts_the_same() -> None:
    with TopologyTestDriver(build_topology(caching=True)) as driver:
        events = driver.create_input_topic("count-input")
        for key in ["a", "b", "a", "a"]:
            events.pipe_input(key, b"x", timestamp=1)
        assert counts(driver) == {"a": 3, "b": 1}


def test_describe() -> None:
    text = str(build_topology().describe())
    assert "Source: SOURCE (topics: [count-input])" in text
    assert "Processor: COUNTER (stores: [counts])" in text
    assert "Sink" not in text


def test_windowed_counts_per_key_and_tumbling_window() -> None:
    topology = build_topology(windowed=True, window_ms=1000, output_topic="out")
    with TopologyTestDriver(topology) as driver:
        events = driver.create_input_topic("count-input")
        output = driver.create_output_topic("out")
        for key, timestamp in [("a", 100), ("a", 999), ("b", 500), ("a", 1000), ("a", 1500)]:
            events.pipe_input(key, b"x", timestamp=timestamp)
        events.pipe_input(None, b"x", timestamp=1600)  # skipped: no key
        windows = driver.get_window_store("counts")
        assert list(windows.fetch("a", 0, 2000)) == [(0, 2), (1000, 2)]
        assert list(windows.fetch("b", 0, 2000)) == [(0, 1)]
        assert [kv.value for kv in output.read_key_values_to_list()] == [1, 2, 1, 1, 2]
