"""What a ``read-store`` selection picks, on stores built in memory (no broker)."""

from __future__ import annotations

import pytest

from processor_api import Serdes, Stores
from processor_api.errors import StoreError
from processor_api.state import InMemoryBytesStore, ValueAndTimestamp
from processor_api.state.selection import StoreSelection, select, select_folded

KEYS = ["a", "ab", "abc", "b", "ba", "c"]


def _kv_store(timestamped: bool = False):
    if timestamped:
        builder = Stores.timestamped_key_value_store_builder(
            Stores.in_memory_key_value_store("s"), Serdes.string(), Serdes.long()
        )
    else:
        builder = Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("s"), Serdes.string(), Serdes.long()
        )
    inner = InMemoryBytesStore("s")
    store = builder.build(inner=inner).store
    for n, key in enumerate(KEYS):
        store.put(key, ValueAndTimestamp(n, 100 + n) if timestamped else n)
    store.flush()
    return builder, store, inner


@pytest.mark.parametrize(
    "selection",
    [
        StoreSelection(),
        StoreSelection(key="ab"),
        StoreSelection(key="zz"),
        StoreSelection(key_from="ab", key_to="b"),
        StoreSelection(key_from="b"),
        StoreSelection(key_to="abc"),
        StoreSelection(key_from="c", key_to="a"),
        StoreSelection(prefix="ab"),
        StoreSelection(prefix="b"),
        StoreSelection(prefix="x"),
    ],
)
@pytest.mark.parametrize("timestamped", [False, True])
def test_the_folded_changelog_selects_what_the_store_selects(selection, timestamped):
    builder, store, inner = _kv_store(timestamped)
    from_store = list(select(builder.kind, store, "s", selection))
    folded = {key: value for key, value in inner.range(None, None)}
    assert list(select_folded(store, folded, selection)) == from_store


def test_the_store_selection_is_what_range_and_prefix_scan_give():
    builder, store, _ = _kv_store()
    pick = lambda selection: [e.key for e in select(builder.kind, store, "s", selection)]  # noqa: E731
    assert pick(StoreSelection()) == KEYS
    assert pick(StoreSelection(key="b")) == ["b"]
    assert pick(StoreSelection(key_from="ab", key_to="b")) == ["ab", "abc", "b"]
    assert pick(StoreSelection(prefix="ab")) == ["ab", "abc"]


def test_one_way_of_selecting_at_a_time():
    with pytest.raises(
        StoreError, match=r"^select one of key, key range or prefix; got key and prefix$"
    ):
        StoreSelection(key="a", prefix="a")
    with pytest.raises(StoreError, match=r"got key range \(from/to\) and prefix$"):
        StoreSelection(key_to="a", prefix="a")


def test_windowed_stores_select_keys_and_ranges_but_no_prefix():
    builder = Stores.window_store_builder(
        Stores.in_memory_window_store("w", 10_000, 1000), Serdes.string(), Serdes.long()
    )
    store = builder.build().store
    for n, key in enumerate(KEYS):
        store.put(key, n, 1000 * n)
    picked = [
        (e.key.key, e.key.window.start)
        for e in select(builder.kind, store, "w", StoreSelection(key="ab"))
    ]
    assert picked == [("ab", 1000)]
    ranged = select(builder.kind, store, "w", StoreSelection(key_from="b", key_to="c"))
    assert [e.key.key for e in ranged] == ["b", "ba", "c"]
    with pytest.raises(
        StoreError, match="'w' is a window store: a prefix selects key-value stores only"
    ):
        list(select(builder.kind, store, "w", StoreSelection(prefix="a")))


def test_a_versioned_store_is_read_one_key_at_a_time():
    builder = Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store("v", 60_000), Serdes.string(), Serdes.long()
    )
    store = builder.build(inner=InMemoryBytesStore("v")).store
    store.put("a", 1, 10)
    store.put("a", 2, 20)
    [entry] = select(builder.kind, store, "v", StoreSelection(key="a"))
    assert entry.key == "a" and (entry.value.value, entry.value.timestamp) == (2, 20)
    with pytest.raises(StoreError, match="'v' is a versioned store: it can only be read one key"):
        select(builder.kind, store, "v", StoreSelection())


def test_a_versioned_store_is_read_as_of_a_time():
    builder = Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store("v", 60_000), Serdes.string(), Serdes.long()
    )
    store = builder.build(inner=InMemoryBytesStore("v")).store
    store.put("a", 1, 10)
    store.put("a", 2, 20)
    pick = lambda as_of: [  # noqa: E731
        tuple(e.value) for e in select(builder.kind, store, "v", StoreSelection("a", as_of=as_of))
    ]
    assert pick(None) == [(2, 20, None)]
    assert pick(19) == [(1, 10, 20)]
    assert pick(5) == []


@pytest.mark.parametrize(
    ("kind", "selection", "message"),
    [
        ("key-value", StoreSelection(key="a", as_of=1), "'s' is a key-value store: as_of reads"),
        ("window", StoreSelection(as_of=1), "'s' is a window store: as_of reads versioned"),
        ("session", StoreSelection(prefix="a"), "'s' is a session store: a prefix selects"),
        ("versioned-key-value", StoreSelection(key_from="a"), "can only be read one key at a"),
        ("versioned-key-value", StoreSelection(prefix="a"), "can only be read one key at a"),
    ],
)
def test_a_selection_the_kind_cannot_take_is_refused_before_reading(kind, selection, message):
    from processor_api.state.selection import check_selection

    with pytest.raises(StoreError, match=message):
        check_selection(kind, "s", selection)


def test_as_of_must_be_a_timestamp():
    with pytest.raises(StoreError, match="as_of must be a timestamp in epoch ms >= 0, got -1"):
        StoreSelection(key="a", as_of=-1)
