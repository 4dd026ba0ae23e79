"""Every store kind used from a Processor through the TopologyTestDriver, and listed by describe()."""

from __future__ import annotations

import pytest

from processor_api import (
    KeyValue,
    Processor,
    Record,
    Serdes,
    SessionWindow,
    StoreError,
    Stores,
    TimeWindow,
    Topology,
    ValueAndTimestamp,
    VersionedRecord,
    Windowed,
)
from processor_api.kafka.collector import KafkaCollector
from processor_api.state import ChangeRecord
from processor_api.testing import TopologyTestDriver

WINDOW = 10
INACTIVITY = 5


class WindowCount(Processor):
    """Counts per key and tumbling 10 ms window; forwards the running count."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("counts")

    def process(self, record):
        start = record.timestamp - record.timestamp % WINDOW
        count = (self.store.fetch(record.key, start) or 0) + 1
        self.store.put(record.key, count, start)
        self.context.forward(Record(f"{record.key}@{start}", count, record.timestamp))


class Sessionize(Processor):
    """Merges a key's events closer than INACTIVITY ms into sessions counting them."""

    def init(self, context):
        self.store = context.get_state_store("sessions")

    def process(self, record):
        t = record.timestamp
        start, end, count = t, t, 1
        for entry in list(self.store.find_sessions(record.key, t - INACTIVITY, t + INACTIVITY)):
            start = min(start, entry.key.window.start)
            end = max(end, entry.key.window.end)
            count += entry.value
            self.store.remove(entry.key)
        self.store.put(Windowed(record.key, SessionWindow(start, end)), count)


class Latest(Processor):
    """Keeps the newest value per key (by record timestamp) and every version of it."""

    def init(self, context):
        self.latest = context.get_state_store("latest")
        self.versions = context.get_state_store("versions")

    def process(self, record):
        current = self.latest.get(record.key)
        if current is None or current.timestamp <= record.timestamp:
            self.latest.put(record.key, ValueAndTimestamp(record.value, record.timestamp))
        self.versions.put(record.key, record.value, record.timestamp)


def topology(persistent: bool) -> Topology:
    window = Stores.persistent_window_store if persistent else Stores.in_memory_window_store
    session = Stores.persistent_session_store if persistent else Stores.in_memory_session_store
    timestamped = (
        Stores.persistent_timestamped_key_value_store
        if persistent
        else Stores.in_memory_timestamped_key_value_store
    )
    versioned = (
        Stores.persistent_versioned_key_value_store
        if persistent
        else Stores.in_memory_versioned_key_value_store
    )
    s, i = Serdes.string(), Serdes.integer()
    return (
        Topology()
        .add_source("events", "events", key_serde=s, value_serde=s)
        .add_processor("window-count", WindowCount, "events")
        .add_processor("sessionize", Sessionize, "events")
        .add_processor("latest", Latest, "events")
        .add_sink("counts-out", "counts", "window-count", key_serde=s, value_serde=i)
        .add_state_store(
            Stores.window_store_builder(
                window("counts", 1000, WINDOW), s, i
            ).with_caching_enabled(),
            "window-count",
        )
        .add_state_store(
            Stores.session_store_builder(session("sessions", 1000), s, i), "sessionize"
        )
        .add_state_store(
            Stores.timestamped_key_value_store_builder(timestamped("latest"), s, s), "latest"
        )
        .add_state_store(
            Stores.versioned_key_value_store_builder(versioned("versions", 1000), s, s), "latest"
        )
    )


@pytest.fixture(params=[True, False], ids=["rocksdb", "in_memory"])
def driver(request):
    with TopologyTestDriver(topology(request.param)) as driver:
        events = driver.create_input_topic("events")
        for key, value, timestamp in [
            ("a", "x", 1),
            ("a", "y", 3),
            ("b", "z", 4),
            ("a", "w", 12),
            ("a", "old", 2),
            ("b", "v", 30),
        ]:
            events.pipe_input(key, value, timestamp)
        yield driver


def test_window_store_from_a_processor(driver):
    out = driver.create_output_topic("counts")
    assert out.read_key_values_to_list() == [
        KeyValue("a@0", 1),
        KeyValue("a@0", 2),
        KeyValue("b@0", 1),
        KeyValue("a@10", 1),
        KeyValue("a@0", 3),
        KeyValue("b@30", 1),
    ]
    windows = driver.get_window_store("counts")
    assert list(windows.all()) == [
        KeyValue(Windowed("a", TimeWindow(0, 10)), 3),
        KeyValue(Windowed("a", TimeWindow(10, 20)), 1),
        KeyValue(Windowed("b", TimeWindow(0, 10)), 1),
        KeyValue(Windowed("b", TimeWindow(30, 40)), 1),
    ]
    assert list(windows.fetch("a", 0, 100)) == [KeyValue(0, 3), KeyValue(10, 1)]


def test_session_store_from_a_processor(driver):
    sessions = driver.get_session_store("sessions")
    assert list(sessions.fetch("a")) == [
        KeyValue(Windowed("a", SessionWindow(1, 3)), 3),
        KeyValue(Windowed("a", SessionWindow(12, 12)), 1),
    ]
    assert list(sessions.fetch("b")) == [
        KeyValue(Windowed("b", SessionWindow(4, 4)), 1),
        KeyValue(Windowed("b", SessionWindow(30, 30)), 1),
    ]


def test_timestamped_and_versioned_stores_from_a_processor(driver):
    latest = driver.get_timestamped_key_value_store("latest")
    assert latest.get("a") == ValueAndTimestamp("w", 12)
    versions = driver.get_versioned_key_value_store("versions")
    assert versions.get("a") == VersionedRecord("w", 12, None)
    assert versions.get("a", 2) == VersionedRecord("old", 2, 3)
    assert versions.get("a", 11) == VersionedRecord("y", 3, 12)
    assert versions.get("b", 29) == VersionedRecord("z", 4, 30)


@pytest.mark.parametrize(
    ("getter", "name", "described", "actual"),
    [
        ("get_window_store", "sessions", "a window store", "SessionStore"),
        ("get_session_store", "counts", "a session store", "WindowStore"),
        (
            "get_timestamped_key_value_store",
            "versions",
            "a timestamped key-value store",
            "VersionedKeyValueStore",
        ),
        (
            "get_versioned_key_value_store",
            "latest",
            "a versioned key-value store",
            "TimestampedKeyValueStore",
        ),
        ("get_key_value_store", "counts", "a key-value store", "WindowStore"),
    ],
)
def test_getters_name_the_kind_they_found(driver, getter, name, described, actual):
    with pytest.raises(
        StoreError, match=f"state store '{name}' is not {described}: it is a {actual}"
    ):
        getattr(driver, getter)(name)


def test_unknown_store_names_the_known_ones(driver):
    with pytest.raises(
        StoreError,
        match=r"no state store named 'nope' in the topology \(stores: "
        r"\['counts', 'latest', 'sessions', 'versions'\]\)",
    ):
        driver.get_window_store("nope")


def test_describe_lists_every_store_kind():
    text = str(topology(True).describe())
    assert "Processor: window-count (stores: [counts])" in text
    assert "Processor: sessionize (stores: [sessions])" in text
    assert "Processor: latest (stores: [latest, versions])" in text


def test_store_kinds_set_kafka_streams_changelog_topic_configs():
    window = Stores.window_store_builder(
        Stores.persistent_window_store("w", 1000, 10), Serdes.string(), Serdes.long()
    )
    assert window.logging_config == {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(1000 + 86_400_000),
    }
    window.with_logging_enabled({"retention.ms": "5"})
    assert window.logging_config == {"cleanup.policy": "compact,delete", "retention.ms": "5"}
    versioned = Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store("v", 1000), Serdes.string(), Serdes.long()
    )
    assert versioned.logging_config == {"min.compaction.lag.ms": str(1000 + 86_400_000)}


def test_builders_refuse_suppliers_of_another_kind():
    window_supplier = Stores.persistent_window_store("w", 1000, 10)
    with pytest.raises(
        StoreError,
        match="key_value_store_builder needs a key-value store "
        "supplier, got WindowBytesStoreSupplier",
    ):
        Stores.key_value_store_builder(window_supplier, Serdes.string(), Serdes.long())
    with pytest.raises(
        StoreError,
        match="session_store_builder needs a supplier of kind "
        "session, got WindowBytesStoreSupplier",
    ):
        Stores.session_store_builder(window_supplier, Serdes.string(), Serdes.long())


class _Tracker:
    def __init__(self):
        self.sent = []

    def produce_many(self, topic, partition, records):
        self.sent.extend(records)


def test_versioned_changelog_batches_keep_every_version_of_a_key():
    changes = [
        ChangeRecord(b"k", b"1", 10),
        ChangeRecord(b"k", b"2", 5),
        ChangeRecord(b"k", b"3", 10),
    ]
    plain, versioned = _Tracker(), _Tracker()
    KafkaCollector(plain, "unused:9092").send_changes("t", 0, changes)
    KafkaCollector(versioned, "unused:9092").send_changes("t", 0, changes, versioned=True)
    assert plain.sent == [(b"k", b"3", 10)]
    assert versioned.sent == [(b"k", b"2", 5), (b"k", b"3", 10)]
