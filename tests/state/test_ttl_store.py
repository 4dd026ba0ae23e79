"""Key-value stores with a time to live (``StoreBuilder.with_ttl``) in the test driver."""

from __future__ import annotations

from datetime import timedelta

import pytest

from processor_api import Processor, PunctuationType, Serdes, StoreError, Stores, Topology
from processor_api.kafka.names import changelog_topic
from processor_api.state import InMemoryBytesStore
from processor_api.testing import TopologyTestDriver

TTL = 10
APP = "topology-test-driver"


class Remember(Processor):
    """Puts every record's value under its key; a value "tick" schedules a punctuation that
    writes key "p" (its write time is the punctuation's)."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("seen")

    def process(self, record):
        self.store.put(record.key, record.value)


def _topology(supplier, caching: bool, clock: str = "stream_time", ttl=TTL) -> Topology:
    builder = Stores.key_value_store_builder(supplier("seen"), Serdes.string(), Serdes.string())
    builder.with_ttl(ttl, clock=clock)
    if caching:
        builder.with_caching_enabled()
    topology = Topology()
    topology.add_source("in", "events", key_serde=Serdes.string(), value_serde=Serdes.string())
    topology.add_processor("remember", Remember, "in")
    topology.add_state_store(builder, "remember")
    return topology


SUPPLIERS = {
    "in-memory": Stores.in_memory_key_value_store,
    "rocksdb": Stores.persistent_key_value_store,
}


@pytest.fixture(params=[(s, c) for s in SUPPLIERS for c in (False, True)], ids=str)
def layout(request):
    supplier, caching = request.param
    return SUPPLIERS[supplier], caching


def _visible(store) -> dict:
    return {entry.key: entry.value for entry in store.all()}


def test_an_entry_is_visible_until_stream_time_passes_its_write_time_plus_ttl(layout):
    with TopologyTestDriver(_topology(*layout)) as driver:
        events = driver.create_input_topic("events")
        store = driver.get_key_value_store("seen")
        events.pipe_input("a", "1", timestamp=100)
        events.pipe_input("ab", "2", timestamp=104)
        events.pipe_input("z", "3", timestamp=100 + TTL)  # stream time 110: a at the boundary
        assert store.get("a") == "1"
        assert _visible(store) == {"a": "1", "ab": "2", "z": "3"}
        events.pipe_input("z", "4", timestamp=101 + TTL)  # 111: a is one ms too old
        assert store.get("a") is None
        assert _visible(store) == {"ab": "2", "z": "4"}
        assert [e.key for e in store.prefix_scan("a", Serdes.string())] == ["ab"]
        assert [e.key for e in store.range("a", "b")] == ["ab"]
        assert store.put_if_absent("a", "again") is None  # expired counts as absent


def test_expired_entries_are_deleted_with_a_changelog_tombstone(layout):
    with TopologyTestDriver(_topology(*layout)) as driver:
        events = driver.create_input_topic("events")
        events.pipe_input("a", "1", timestamp=100)
        events.pipe_input("b", "2", timestamp=120)  # a expires at this commit
        changelog = driver.create_output_topic(
            changelog_topic(APP, "seen"), Serdes.string(), Serdes.bytes()
        )
        records = changelog.read_key_values_to_list()
        writes = [(r.key, r.value is None) for r in records]
        assert writes.index(("a", True)) > writes.index(("a", False))
        assert records[0].value[8:] == b"1"  # values carry their 8-byte write time


def test_a_key_written_again_lives_from_its_last_write(layout):
    with TopologyTestDriver(_topology(*layout)) as driver:
        events = driver.create_input_topic("events")
        store = driver.get_key_value_store("seen")
        events.pipe_input("a", "1", timestamp=100)
        events.pipe_input("a", "2", timestamp=105)
        events.pipe_input("x", "-", timestamp=115)
        assert store.get("a") == "2"
        events.pipe_input("x", "-", timestamp=116)
        assert store.get("a") is None


def test_a_restored_store_agrees_with_the_one_that_expired(layout):
    supplier, caching = layout
    with TopologyTestDriver(_topology(supplier, caching)) as driver:
        events = driver.create_input_topic("events")
        for i, t in enumerate((100, 103, 109, 125, 126)):
            events.pipe_input(f"k{i}", str(i), timestamp=t)
        expected = _visible(driver.get_key_value_store("seen"))
        changelog = driver.create_output_topic(
            changelog_topic(APP, "seen"), Serdes.bytes(), Serdes.bytes()
        )
        replay = [(r.key, r.value) for r in changelog.read_key_values_to_list()]
    assert expected == {"k3": "3", "k4": "4"}
    assert (b"k0", None) in replay  # the expiry reached the changelog
    builder = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("seen"), Serdes.string(), Serdes.string()
    ).with_ttl(TTL)
    inner = InMemoryBytesStore("seen")
    inner.put_all(replay)
    stack = builder.build(inner=inner)
    stack.ttl.attach(lambda: 126, lambda: 126, lambda: 0)
    assert _visible(stack.store) == expected
    assert inner.approximate_num_entries() == 2  # k1, k2 expired physically before the restore


def test_wall_clock_ttl_follows_the_drivers_wall_clock(layout):
    topology = _topology(*layout, clock="wall_clock", ttl=timedelta(seconds=1))
    with TopologyTestDriver(topology, initial_wall_clock_ms=5_000) as driver:
        events = driver.create_input_topic("events")
        store = driver.get_key_value_store("seen")
        events.pipe_input("a", "1", timestamp=1)  # the record timestamp does not matter
        events.pipe_input("b", "2", timestamp=10_000_000)
        driver.advance_wall_clock_time(1_000)
        assert _visible(store) == {"a": "1", "b": "2"}
        driver.advance_wall_clock_time(1)
        assert _visible(store) == {}


class PunctuationWriter(Processor):
    def init(self, context):
        store = context.get_state_store("seen")
        context.schedule(50, PunctuationType.STREAM_TIME, lambda ts: store.put("p", str(ts)))

    def process(self, record):
        pass


def test_a_punctuation_writes_with_its_own_timestamp():
    builder = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("seen"), Serdes.string(), Serdes.string()
    ).with_ttl(TTL)
    topology = Topology()
    topology.add_source("in", "events", key_serde=Serdes.string(), value_serde=Serdes.string())
    topology.add_processor("writer", PunctuationWriter, "in")
    topology.add_state_store(builder, "writer")
    with TopologyTestDriver(topology) as driver:
        events = driver.create_input_topic("events")
        store = driver.get_key_value_store("seen")
        events.pipe_input("x", "-", timestamp=50)  # punctuates at 50: p written at 50
        events.pipe_input("x", "-", timestamp=60)
        assert store.get("p") == "50"
        events.pipe_input("x", "-", timestamp=61)
        assert store.get("p") is None


def test_ttl_is_refused_for_window_stores_and_bad_values():
    window = Stores.window_store_builder(
        Stores.in_memory_window_store("w", 100, 10, False), Serdes.string(), Serdes.string()
    )
    with pytest.raises(StoreError, match="with_ttl is for key-value stores"):
        window.with_ttl(10)
    kv = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("s"), Serdes.string(), Serdes.string()
    )
    with pytest.raises(StoreError, match="at least 1 ms"):
        kv.with_ttl(0)
    with pytest.raises(StoreError, match="clock must be one of"):
        kv.with_ttl(10, clock="event_time")
