"""Timestamped key-value stores; changelog formats of every store kind; restore from them.

Changelog records must have Kafka Streams' bytes (window: key + 8-byte start + 4-byte seqnum;
session: key + 8-byte end + 8-byte start; timestamped: 8-byte timestamp + value; versioned:
plain key and value, the version as record timestamp), and replaying them into a fresh
innermost store the way ``TaskStores.restore`` does must rebuild the same contents.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from processor_api import (
    KeyValue,
    Serdes,
    SessionWindow,
    StoreError,
    Stores,
    TimestampedKeyValueStore,
    ValueAndTimestamp,
    Windowed,
)
from processor_api.kafka.names import changelog_topic
from processor_api.state import ChangeRecord
from processor_api.state.manager import TaskStores


def long8(value: int) -> bytes:
    return struct.pack(">q", value)


def int4(value: int) -> bytes:
    return struct.pack(">i", value)


def flushed_changes(stack) -> list[ChangeRecord]:
    stack.flush()
    return stack.changelog.drain_changes()


# ------------------------------------------------------------------------ timestamped


@pytest.fixture
def timestamped_stack(tmp_path, inner_kind, caching):
    factory = (
        Stores.persistent_timestamped_key_value_store
        if inner_kind == "rocksdb"
        else Stores.in_memory_timestamped_key_value_store
    )
    builder = Stores.timestamped_key_value_store_builder(
        factory("ts"), Serdes.string(), Serdes.long()
    )
    if caching:
        builder.with_caching_enabled()
    stack = builder.build(state_dir=tmp_path)
    yield stack
    stack.close()


def test_timestamped_store_keeps_values_with_timestamps(timestamped_stack):
    store = timestamped_stack.store
    assert isinstance(store, TimestampedKeyValueStore)
    store.put("a", ValueAndTimestamp(1, 100))
    store.put("b", ValueAndTimestamp(2, 50))
    assert store.get("a") == ValueAndTimestamp(1, 100)
    assert list(store.all()) == [
        KeyValue("a", ValueAndTimestamp(1, 100)),
        KeyValue("b", ValueAndTimestamp(2, 50)),
    ]
    assert store.put_if_absent("a", ValueAndTimestamp(9, 9)) == ValueAndTimestamp(1, 100)
    store.put("a", ValueAndTimestamp(None, 200))  # a null value deletes, as make(null, ts)
    store.put("b", None)
    assert store.get("a") is None and store.get("b") is None
    assert list(store.all()) == []


def test_timestamped_changelog_value_is_timestamp_then_value(timestamped_stack):
    timestamped_stack.store.put("a", ValueAndTimestamp(7, 1234))
    timestamped_stack.store.delete("a")
    changes = flushed_changes(timestamped_stack)
    assert [(c.key, c.value) for c in changes][-1] == (b"a", None)
    if len(changes) == 2:  # without a cache both writes are logged
        assert (changes[0].key, changes[0].value) == (b"a", long8(1234) + long8(7))


def test_timestamped_store_rejects_plain_values(timestamped_stack):
    with pytest.raises(
        StoreError,
        match=r"state store 'ts' is timestamped: values must be "
        r"ValueAndTimestamp\(value, timestamp\), got 5",
    ):
        timestamped_stack.store.put("a", 5)


# ------------------------------------------------------------------------ byte-exact keys


def test_window_changelog_keys_are_kafka_streams_format(make_window_stack, caching):
    stack = make_window_stack(120_000, 3)
    stack.store.put(1, "one", 5)
    stack.store.put(2, "two", 70_000)
    stack.store.put(1, None, 5)
    changes = flushed_changes(stack)
    expected = {
        (int4(1) + long8(5) + int4(0), None),
        (int4(2) + long8(70_000) + int4(0), b"two"),
    }
    if not caching:
        expected.add((int4(1) + long8(5) + int4(0), b"one"))
    assert {(c.key, c.value) for c in changes} == expected


def test_window_changelog_keys_carry_sequence_numbers_with_duplicates(make_window_stack):
    stack = make_window_stack(120_000, 3, duplicates=True, key_serde=Serdes.string(), name="d")
    stack.store.put("k", "a", 9)
    stack.store.put("k", "b", 9)
    changes = flushed_changes(stack)
    assert [(c.key, c.value) for c in changes] == [
        (b"k" + long8(9) + int4(1), b"a"),
        (b"k" + long8(9) + int4(2), b"b"),
    ]


def test_session_changelog_keys_are_kafka_streams_format(make_session_stack):
    stack = make_session_stack(10_000)
    stack.store.put(Windowed("a", SessionWindow(3, 7)), 42)
    changes = flushed_changes(stack)
    assert [(c.key, c.value) for c in changes] == [(b"a" + long8(7) + long8(3), long8(42))]


def test_versioned_changelog_records_carry_the_version_as_timestamp(tmp_path):
    stack = Stores.versioned_key_value_store_builder(
        Stores.in_memory_versioned_key_value_store("v", 1000), Serdes.string(), Serdes.string()
    ).build(state_dir=tmp_path, timestamp_fn=lambda: 999_999)
    stack.store.put("k", "v1", 2010)
    stack.store.put("k", "v0", 2005)
    stack.store.delete("k", 2020)
    stack.store.put("k", "late", 1019)  # beyond the grace period: not put, not logged
    assert stack.store.delete("k", 1019) is None  # nor is a late delete
    assert stack.changelog.drain_changes() == [
        ChangeRecord(b"k", b"v1", 2010),
        ChangeRecord(b"k", b"v0", 2005),
        ChangeRecord(b"k", None, 2020),
    ]


# ------------------------------------------------------------------------ restore


def _window(kind):
    factory = Stores.persistent_window_store if kind == "rocksdb" else Stores.in_memory_window_store
    return Stores.window_store_builder(factory("win", 120_000, 10), Serdes.string(), Serdes.long())


def _session(kind):
    factory = (
        Stores.persistent_session_store if kind == "rocksdb" else Stores.in_memory_session_store
    )
    return Stores.session_store_builder(factory("ses", 120_000), Serdes.string(), Serdes.long())


def _timestamped(kind):
    factory = (
        Stores.persistent_timestamped_key_value_store
        if kind == "rocksdb"
        else Stores.in_memory_timestamped_key_value_store
    )
    return Stores.timestamped_key_value_store_builder(
        factory("tkv"), Serdes.string(), Serdes.long()
    )


def _versioned(kind):
    factory = (
        Stores.persistent_versioned_key_value_store
        if kind == "rocksdb"
        else Stores.in_memory_versioned_key_value_store
    )
    return Stores.versioned_key_value_store_builder(
        factory("ver", 300_000), Serdes.string(), Serdes.long()
    )


def _write_window(store):
    for i in range(40):
        store.put(f"k{i % 4}", i, i * 10_000)  # crosses segments; the early ones expire
    store.put("k1", None, 390_000 - 30_000)
    return lambda s: list(s.all())


def _write_session(store):
    for i in range(30):
        store.put(Windowed(f"u{i % 3}", SessionWindow(i * 10_000, i * 10_000 + 500)), i)
    store.remove(Windowed("u2", SessionWindow(290_000, 290_500)))
    return lambda s: list(s.fetch(None, None))


def _write_timestamped(store):
    for i in range(20):
        store.put(f"k{i % 7}", ValueAndTimestamp(i, 1000 + i))
    store.delete("k3")
    return lambda s: list(s.all())


def _write_versioned(store):
    for i in range(20):
        store.put(f"k{i % 3}", i, 100 * (20 - i))  # older and older versions
    store.delete("k0", 1050)
    return lambda s: [s.get(k, t) for k in ("k0", "k1", "k2") for t in range(0, 2200, 50)]


KINDS = {
    "window": (_window, _write_window),
    "session": (_session, _write_session),
    "timestamped": (_timestamped, _write_timestamped),
    "versioned": (_versioned, _write_versioned),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_replaying_the_changelog_into_a_fresh_inner_store_restores_it(tmp_path, inner_kind, kind):
    make_builder, write = KINDS[kind]
    builder = make_builder(inner_kind)
    if kind != "versioned":
        builder.with_caching_enabled(max_entries=5)  # evictions and flushes both log
    original = builder.build(state_dir=tmp_path / "a", timestamp_fn=lambda: 77)
    contents = write(original.store)
    changes = flushed_changes(original)
    assert changes
    fresh = make_builder(inner_kind)
    raw = fresh.supplier.get(tmp_path / "b")
    apply = fresh.restore_writer(raw)
    if fresh.changelog_has_versions:
        apply([(c.key, c.value, c.timestamp) for c in changes])
    else:
        apply([(c.key, c.value) for c in changes])
    rebuilt = fresh.build(inner=raw)
    assert contents(rebuilt.store) == contents(original.store)
    assert any(contents(original.store))
    original.close()
    rebuilt.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_task_stores_restore_each_kind_from_its_changelog(tmp_path, inner_kind, kind):
    make_builder, write = KINDS[kind]
    builder = make_builder(inner_kind)
    app = f"app-{uuid.uuid4().hex[:8]}"
    first = TaskStores(
        application_id=app,
        task_id="0_0",
        partition=0,
        directory=tmp_path / "one",
        builders={builder.name: builder},
        changelog_topics={builder.name: changelog_topic(app, builder.name)},
        timestamp_fn=lambda: 5,
    )
    stack = first.build(builder, lambda: 5)
    contents = write(stack.store)
    changes = flushed_changes(stack)
    first.commit({builder.name: len(changes)})
    expected = contents(stack.store)
    first.close()

    calls = []

    def reader(topic, partition, start, end, apply, with_timestamps=False):
        calls.append((topic, start, end, with_timestamps))
        records = changes[start:end]
        if with_timestamps:
            apply([(c.key, c.value, c.timestamp) for c in records])
        else:
            apply([(c.key, c.value) for c in records])
        return len(records)

    second_app = f"{app}-b"
    second = TaskStores(
        application_id=second_app,
        task_id="0_0",
        partition=0,
        directory=tmp_path / "two",
        builders={builder.name: builder},
        changelog_topics={builder.name: changelog_topic(second_app, builder.name)},
        timestamp_fn=lambda: 5,
    )
    restored_stack = second.build(builder, lambda: 5)
    assert second.restore({builder.name: len(changes)}, reader) == {builder.name: len(changes)}
    topic = changelog_topic(second_app, builder.name)
    assert calls == [(topic, 0, len(changes), kind == "versioned")]
    assert contents(second.stacks[builder.name].store) == expected
    assert restored_stack.store is second.stacks[builder.name].store
    second.close()


def test_timestamped_window_store_values_and_changelog(tmp_path, inner_kind):
    factory = (
        Stores.persistent_window_store if inner_kind == "rocksdb" else Stores.in_memory_window_store
    )
    stack = Stores.timestamped_window_store_builder(
        factory("tw", 1000, 10), Serdes.string(), Serdes.long()
    ).build(state_dir=tmp_path)
    stack.store.put("k", ValueAndTimestamp(3, 17), 10)
    assert stack.store.fetch("k", 10) == ValueAndTimestamp(3, 17)
    assert list(stack.store.all()) == [
        KeyValue(Windowed.time_window("k", 10, 10), ValueAndTimestamp(3, 17))
    ]
    assert [(c.key, c.value) for c in flushed_changes(stack)] == [
        (b"k" + long8(10) + int4(0), long8(17) + long8(3))
    ]
    with pytest.raises(StoreError, match="state store 'tw' is timestamped"):
        stack.store.put("k", 3, 10)
    stack.close()
