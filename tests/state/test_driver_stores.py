"""The TopologyTestDriver commits after every piped record without flushing RocksDB to disk.

The commit flushes a store's layers (a cache writes through its change log, whose records show
on the changelog topic), but not RocksDB's memtables: that wrote an SST file per record
(120-250 records/s). The writes must still be in RocksDB itself, and what a test sees (outputs,
changelog records, store contents, punctuation) the same.
"""

from __future__ import annotations

import pytest

from processor_api import Processor, PunctuationType, Record, Serdes, Stores, Topology
from processor_api.state.facade import find_layer
from processor_api.state.rocksdb import RocksDBBytesStore
from processor_api.testing import TopologyTestDriver

S, L = Serdes.string(), Serdes.long()
RECORDS = 40
KEYS = 4
WINDOW = 10


@pytest.fixture
def rocksdb_flushes(monkeypatch):
    """The names of the RocksDB stores flushed, one entry per ``RocksDBBytesStore.flush``."""
    flushed: list[str] = []
    flush = RocksDBBytesStore.flush

    def counted(self: RocksDBBytesStore) -> None:
        flushed.append(self.name)
        flush(self)

    monkeypatch.setattr(RocksDBBytesStore, "flush", counted)
    return flushed


class CountAndWindow(Processor):
    """Counts per key (cached store) and per key and 10 ms window; forwards the count and the
    global store's name for the key; every 10 ms of stream time forwards the key count total."""

    def init(self, context):
        self.context = context
        self.counts = context.get_state_store("counts")
        self.windows = context.get_state_store("windows")
        self.names = context.get_state_store("names")
        context.schedule(WINDOW, PunctuationType.STREAM_TIME, self.total)

    def process(self, record):
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        start = record.timestamp - record.timestamp % WINDOW
        self.windows.put(record.key, (self.windows.fetch(record.key, start) or 0) + 1, start)
        name = self.names.get(record.key)
        self.context.forward(Record(record.key, f"{name}:{count}", record.timestamp), "out")

    def total(self, timestamp):
        with self.counts.all() as entries:
            total = sum(entry.value for entry in entries)
        self.context.forward(Record("total", str(total), timestamp), "totals")


class PutName(Processor):
    def init(self, context):
        self.store = context.get_state_store("names")

    def process(self, record):
        self.store.put(record.key, record.value)


def build_topology() -> Topology:
    counts = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), S, L
    ).with_caching_enabled()
    windows = Stores.window_store_builder(
        Stores.persistent_window_store("windows", 1000, WINDOW), S, L
    )
    names = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("names"), S, S
    ).with_logging_disabled()
    return (
        Topology()
        .add_global_store(names, "names-source", "names", "put-name", PutName, S, S)
        .add_source("in", "events", key_serde=S, value_serde=S)
        .add_processor("count", CountAndWindow, "in")
        .add_state_store(counts, "count")
        .add_state_store(windows, "count")
        .add_sink("out", "counts", "count", key_serde=S, value_serde=S)
        .add_sink("totals", "totals", "count", key_serde=S, value_serde=S)
    )


def test_piped_records_reach_rocksdb_without_a_flush_per_record(rocksdb_flushes):
    with TopologyTestDriver(build_topology()) as driver:
        names = driver.create_input_topic("names")
        for k in range(KEYS):
            names.pipe_input(f"k{k}", f"name{k}")
        events = driver.create_input_topic("events")
        for i in range(RECORDS):
            events.pipe_input(f"k{i % KEYS}", "x", timestamp=i)

        assert rocksdb_flushes == [], (
            f"{len(rocksdb_flushes)} RocksDB flushes for {KEYS} global and {RECORDS} piped "
            "records: the driver's commit must not write the memtables to disk"
        )
        # what the test sees is what a flushed store gave
        outputs = driver.create_output_topic("counts").read_key_values_to_list()
        assert outputs == [
            (f"k{i % KEYS}", f"name{i % KEYS}:{i // KEYS + 1}") for i in range(RECORDS)
        ]
        totals = driver.create_output_topic("totals").read_values_to_list()
        assert totals == [str(t + 1) for t in range(0, RECORDS, WINDOW)]  # after the record at t
        changelog = driver.create_output_topic("topology-test-driver-counts-changelog", S, L)
        assert changelog.get_queue_size() == RECORDS  # cached: one per key and commit
        counts = driver.get_key_value_store("counts")
        expected = {f"k{k}": RECORDS // KEYS for k in range(KEYS)}
        with counts.all() as entries:
            assert {entry.key: entry.value for entry in entries} == expected
        # the estimate flushes first: 40 writes to 4 keys in the memtables would count 40
        assert counts.approximate_num_entries() == KEYS
        assert rocksdb_flushes == ["counts"]
        windows = driver.get_window_store("windows")
        assert windows.fetch("k0", 0) == WINDOW // KEYS + (1 if WINDOW % KEYS else 0)
        assert driver.get_key_value_store("names").get("k3") == "name3"

        # ... and the writes are in RocksDB itself, not held in a layer above it
        rocksdb = find_layer(counts.bytes_store, RocksDBBytesStore)
        assert rocksdb is not None
        assert {
            S.deserialize(k): L.deserialize(v) for k, v in rocksdb.range(None, None)
        } == expected
