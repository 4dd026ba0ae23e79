"""Change logging, caching and the store builder."""

from __future__ import annotations

import itertools

import pytest

from processor_api.errors import StoreError
from processor_api.serdes import Serdes
from processor_api.state import (
    CachingBytesStore,
    ChangeLoggingBytesStore,
    ChangeRecord,
    InMemoryBytesStore,
    KeyValueStore,
    RocksDBBytesStore,
    Stores,
)


def _builder(kind: str, name: str = "counts"):
    supplier = (
        Stores.persistent_key_value_store(name)
        if kind == "rocksdb"
        else Stores.in_memory_key_value_store(name)
    )
    return Stores.key_value_store_builder(supplier, Serdes.string(), Serdes.long())


@pytest.mark.parametrize("kind", ["in_memory", "rocksdb"])
def test_changelog_records_every_write_in_order(tmp_path, kind):
    clock = itertools.count(100)
    stack = _builder(kind).build(tmp_path, timestamp_fn=lambda: next(clock))
    store = stack.store
    assert stack.cache is None and stack.changelog is not None
    store.put("a", 1)
    store.put("b", 2)
    store.put("a", 3)
    assert store.delete("a") == 3
    store.put("b", None)
    store.put_all([("c", 4), ("d", None)])
    store.delete("never-there")
    assert store.put_if_absent("c", 9) == 4  # no write, no record
    long = Serdes.long().serialize
    assert stack.changelog.pending_change_count == 8
    assert stack.changelog.drain_changes() == [
        ChangeRecord(b"a", long(1), 100),
        ChangeRecord(b"b", long(2), 101),
        ChangeRecord(b"a", long(3), 102),
        ChangeRecord(b"a", None, 103),
        ChangeRecord(b"b", None, 104),
        ChangeRecord(b"c", long(4), 105),
        ChangeRecord(b"d", None, 105),
        ChangeRecord(b"never-there", None, 106),
    ]
    assert stack.changelog.drain_changes() == []
    assert stack.changelog.pending_change_count == 0
    stack.close()


@pytest.mark.parametrize("kind", ["in_memory", "rocksdb"])
def test_cache_coalesces_a_hot_key_into_one_change_record(tmp_path, kind):
    stack = _builder(kind).with_caching_enabled().build(tmp_path)
    store = stack.store
    for i in range(1000):
        store.put("hot", i)
    assert store.get("hot") == 999
    assert stack.changelog.pending_change_count == 0, "nothing reaches the log before a flush"
    assert stack.inner.get(b"hot") is None, "nor the inner store"
    stack.flush()
    assert stack.changelog.drain_changes() == [
        ChangeRecord(b"hot", Serdes.long().serialize(999), 0)
    ]
    assert stack.inner.get(b"hot") == Serdes.long().serialize(999)
    stack.flush()
    assert stack.changelog.drain_changes() == [], "a clean cache flushes nothing"
    stack.close()


def test_cache_flush_is_one_put_all_in_key_order_with_tombstones():
    calls = []

    class Recording(InMemoryBytesStore):
        def put_all(self, entries):
            entries = list(entries)
            calls.append(entries)
            super().put_all(entries)

    inner = Recording("s")
    inner.put(b"old", b"1")
    changelog = ChangeLoggingBytesStore(inner)
    cache = CachingBytesStore(changelog, max_entries=100)
    for key in [b"c", b"a", b"b", b"a"]:
        cache.put(key, key + b"!")
    assert cache.delete(b"old") == b"1"
    assert cache.get(b"old") is None
    assert inner.get(b"old") == b"1"
    assert list(cache.range(None, None)) == [(b"a", b"a!"), (b"b", b"b!"), (b"c", b"c!")]
    assert list(cache.range(None, None, reverse=True))[0] == (b"c", b"c!")
    cache.flush()
    assert calls == [[(b"a", b"a!"), (b"b", b"b!"), (b"c", b"c!"), (b"old", None)]]
    assert [r.key for r in changelog.drain_changes()] == [b"a", b"b", b"c", b"old"]
    assert inner.get(b"old") is None


def test_cache_evicts_everything_when_over_capacity():
    inner = InMemoryBytesStore("s")
    changelog = ChangeLoggingBytesStore(inner)
    cache = CachingBytesStore(changelog, max_entries=10)
    for i in range(10):
        cache.put(b"k%02d" % i, b"v")
    assert changelog.pending_change_count == 0 and cache.dirty_count == 10
    cache.put(b"k05", b"again")  # an existing dirty key: no growth
    assert cache.dirty_count == 10
    cache.put(b"k10", b"v")  # the 11th distinct key
    assert cache.dirty_count == 0
    assert [r.key for r in changelog.drain_changes()] == [b"k%02d" % i for i in range(11)]
    assert inner.get(b"k05") == b"again"


def test_cache_merges_dirty_entries_over_the_inner_store():
    inner = InMemoryBytesStore("s")
    inner.put_all([(b"a", b"inner"), (b"b", b"inner"), (b"d", b"inner"), (b"e", b"inner")])
    cache = CachingBytesStore(inner)
    cache.put(b"b", b"cached")  # shadows inner
    cache.delete(b"d")  # hides inner
    cache.put(b"c", b"cached")  # new
    cache.put(b"f", None)  # tombstone for a key inner lacks
    expected = [(b"a", b"inner"), (b"b", b"cached"), (b"c", b"cached"), (b"e", b"inner")]
    assert list(cache.range(None, None)) == expected
    assert list(cache.range(None, None, reverse=True)) == expected[::-1]
    assert list(cache.range(b"b", b"d")) == expected[1:3]
    assert list(cache.prefix_scan(b"d")) == []
    typed = KeyValueStore("s", cache, Serdes.bytes(), Serdes.bytes())
    assert typed.approximate_num_entries() >= 0


def test_cache_close_writes_back_dirty_entries(tmp_path):
    path = tmp_path / "db"
    cache = CachingBytesStore(RocksDBBytesStore("s", path))
    cache.put(b"k", b"v")
    cache.close()
    reopened = RocksDBBytesStore("s", path)
    assert reopened.get(b"k") == b"v"
    reopened.close()


def test_builder_defaults_and_fluent_api(tmp_path):
    builder = _builder("rocksdb", "agg")
    assert builder.name == "agg" and builder.persistent
    assert builder.logging_enabled and not builder.caching_enabled and builder.logging_config == {}
    assert builder.key_serde is Serdes.string() and builder.value_serde is Serdes.long()
    assert builder.with_caching_enabled(5) is builder
    assert builder.with_logging_enabled({"segment.ms": 1000}) is builder
    assert builder.logging_config == {"segment.ms": "1000"}
    stack = builder.build(tmp_path / "0_1")
    assert (tmp_path / "0_1" / "rocksdb" / "agg" / "CURRENT").exists()
    assert isinstance(stack.inner, RocksDBBytesStore)
    assert stack.cache is not None and stack.cache.max_entries == 5
    assert stack.store.bytes_store is stack.cache and stack.cache.inner is stack.changelog
    assert stack.changelog.inner is stack.inner
    stack.close()
    assert builder.with_logging_disabled() is builder and builder.with_caching_disabled() is builder
    assert not builder.logging_enabled and not builder.caching_enabled
    stack = builder.build(tmp_path / "0_2")
    assert stack.changelog is None and stack.cache is None
    assert stack.store.bytes_store is stack.inner
    stack.close()


def test_in_memory_supplier_needs_no_state_dir():
    stack = _builder("in_memory").build()
    assert not stack.store.persistent and isinstance(stack.inner, InMemoryBytesStore)
    stack.close()


def test_build_can_reuse_an_existing_inner_store():
    kept = InMemoryBytesStore("counts")
    first = _builder("in_memory").with_caching_enabled().build(inner=kept)
    first.store.put("a", 1)
    first.flush()
    second = _builder("in_memory").build(inner=kept)
    assert second.inner is kept and second.store.get("a") == 1
    kept.close()
    with pytest.raises(StoreError, match="'counts'.*closed"):
        _builder("in_memory").build(inner=kept)


def test_persistent_store_without_state_dir_is_a_clear_error():
    with pytest.raises(StoreError, match="'needs-dir'.*state directory"):
        _builder("rocksdb", "needs-dir").build(state_dir=None)


@pytest.mark.parametrize("kind", ["in_memory", "rocksdb"])
def test_a_changelog_keeping_last_changes_holds_one_per_key_in_order_of_last_writes(tmp_path, kind):
    """What the runtime's stores keep until a commit: only what the commit sends (a key's
    last change), so memory follows the keys written, not the writes."""
    clock = itertools.count(100)
    stack = _builder(kind).build(tmp_path, timestamp_fn=lambda: next(clock))
    store = stack.store
    store.put("a", 1)
    stack.changelog.keep_last_per_key()  # what was recorded before is compacted too
    store.put("b", 2)
    store.put("a", 3)
    for i in range(1000):
        store.put("c", i)
    assert store.delete("b") == 2
    long = Serdes.long().serialize
    assert stack.changelog.pending_change_count == 3
    assert stack.changelog.drain_changes() == [
        ChangeRecord(b"a", long(3), 102),
        ChangeRecord(b"c", long(999), 1102),
        ChangeRecord(b"b", None, 1103),
    ]
    assert stack.changelog.drain_changes() == []


def test_a_task_s_stores_keep_only_last_changes(tmp_path):
    from processor_api.state.manager import TaskStores

    builder = _builder("rocksdb")
    stores = TaskStores(
        application_id="app",
        task_id="0_0",
        partition=0,
        directory=tmp_path,
        builders={builder.name: builder},
        changelog_topics={builder.name: "app-counts-changelog"},
        timestamp_fn=lambda: 7,
    )
    stack = stores.build(builder, lambda: 7)
    for i in range(100):
        stack.store.put("k", i)
    assert stack.changelog.pending_change_count == 1
    stores.close()


@pytest.mark.parametrize("closed", ["buffer", "innermost"])
def test_a_typed_store_is_closed_when_a_layer_below_its_change_log_is(tmp_path, closed):
    """The typed store checks one layer for the whole stack (below the change log, which
    only passes ``is_open`` on); closing a layer under it, as ``TaskStores`` closes a
    buffer, closes the store for every call."""
    from processor_api.state.batch_buffer import BatchBufferBytesStore

    raw = RocksDBBytesStore("counts", tmp_path)
    buffer = BatchBufferBytesStore(raw)
    stack = _builder("rocksdb").build(inner=buffer)
    store = stack.store
    store.put("a", 1)
    assert store.is_open and store.get("a") == 1
    (buffer if closed == "buffer" else raw).close()
    assert not store.is_open and not stack.changelog.is_open
    with pytest.raises(StoreError, match="'counts' is closed"):
        store.get("a")
    with pytest.raises(StoreError, match="'counts' is closed"):
        store.put("a", 2)
    if closed == "innermost":
        with pytest.raises(StoreError, match="'counts' is closed"):
            buffer.get(b"a")  # its own check sees the store below it closed
    assert stack.changelog.drain_changes() == [ChangeRecord(b"a", Serdes.long().serialize(1), 0)]


def test_a_layer_with_its_own_open_state_is_asked(tmp_path):
    """A layer that overrides ``is_open`` (not only passing its inner store's on) is the
    one the typed store asks."""

    class Unplugged(ChangeLoggingBytesStore):
        plugged = True

        @property
        def is_open(self) -> bool:
            return self.plugged and self.inner.is_open

    layer = Unplugged(InMemoryBytesStore("counts"))
    store = KeyValueStore("counts", layer, Serdes.string(), Serdes.long())
    store.put("a", 1)
    layer.plugged = False
    assert not store.is_open
    with pytest.raises(StoreError, match="'counts' is closed"):
        store.get("a")
