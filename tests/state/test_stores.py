"""Behaviour of the typed KeyValueStore over in-memory and RocksDB, with and without caching."""

from __future__ import annotations

import random

import pytest

from processor_api.errors import StoreError
from processor_api.serdes import Serdes
from processor_api.state import KeyValue


def keys(iterator) -> list:
    return [kv.key for kv in iterator]


def test_string_keys_are_ordered_by_their_utf8_bytes(store):
    for key in ["b", "a", "c", "aa", "B", "é", "ab"]:
        store.put(key, key.upper())
    # "B" (0x42) < "a" (0x61) ... < "é" (0xc3 0xa9): byte order, not Python str order of case
    assert keys(store.all()) == ["B", "a", "aa", "ab", "b", "c", "é"]
    assert keys(store.reverse_all()) == ["é", "c", "b", "ab", "aa", "a", "B"]
    assert list(store.all())[0] == KeyValue("B", "B")


def test_long_keys_sort_negative_after_positive_like_kafka_streams(make_stack):
    store = make_stack(Serdes.long(), Serdes.long()).store
    for key in [-5, 100, -1, 0, 3, -(2**63), 2**63 - 1]:
        store.put(key, key * 2 if abs(key) < 2**40 else 0)
    # big-endian two's complement: the sign bit makes negatives the largest unsigned bytes
    assert keys(store.all()) == [0, 3, 100, 2**63 - 1, -(2**63), -5, -1]
    assert store.get(-5) == -10
    assert keys(store.range(-5, -1)) == [-5, -1]
    assert keys(store.range(3, -5)) == [3, 100, 2**63 - 1, -(2**63), -5]
    assert keys(store.range(-1, 3)) == []  # lo after hi once serialized


def test_range_is_inclusive_with_open_bounds(store):
    for i in range(10):
        store.put(f"k{i}", str(i))
    assert keys(store.range("k2", "k5")) == ["k2", "k3", "k4", "k5"]
    assert keys(store.range("k2x", "k5")) == ["k3", "k4", "k5"]
    assert keys(store.range(None, "k2")) == ["k0", "k1", "k2"]
    assert keys(store.range("k8", None)) == ["k8", "k9"]
    assert keys(store.range()) == [f"k{i}" for i in range(10)]
    assert keys(store.range("k5", "k5")) == ["k5"]
    assert keys(store.range("k5", "k2")) == []
    assert keys(store.range("x", None)) == []


def test_reverse_range(store):
    for i in range(10):
        store.put(f"k{i}", str(i))
    assert keys(store.reverse_range("k2", "k5")) == ["k5", "k4", "k3", "k2"]
    assert keys(store.reverse_range(None, "k1")) == ["k1", "k0"]
    assert keys(store.reverse_range("k8", None)) == ["k9", "k8"]
    assert keys(store.reverse_range("k45", "k7")) == ["k7", "k6", "k5"]
    assert keys(store.reverse_range("k5", "k2")) == []


def test_long_scans_cross_chunk_boundaries(store):
    """Enough entries for RocksDB's chunked iteration (64, 256, ... per chunk) to matter."""
    expected = [f"{i:05d}" for i in range(1500)]
    store.put_all((k, "v") for k in reversed(expected))
    assert keys(store.all()) == expected
    assert keys(store.reverse_all()) == expected[::-1]
    assert keys(store.range("00100", "01300")) == expected[100:1301]
    assert keys(store.reverse_range("00100", "01300")) == expected[100:1301][::-1]


def test_prefix_scan(store):
    for key in ["user:1", "user:2", "user", "usa", "user:10", "uses", "v"]:
        store.put(key, "x")
    assert keys(store.prefix_scan("user:")) == ["user:1", "user:10", "user:2"]
    assert keys(store.prefix_scan("user")) == ["user", "user:1", "user:10", "user:2"]
    assert keys(store.prefix_scan("nope")) == []
    assert keys(store.prefix_scan("")) == keys(store.all())
    assert keys(store.prefix_scan(b"us", prefix_serializer=Serdes.bytes())) == [
        "usa",
        "user",
        "user:1",
        "user:10",
        "user:2",
        "uses",
    ]
    assert keys(store.prefix_scan("U", prefix_serializer=lambda p: p.lower().encode())) == [
        "usa",
        "user",
        "user:1",
        "user:10",
        "user:2",
        "uses",
    ]


def test_prefix_scan_bytes_keys_with_ff_bytes(make_stack):
    store = make_stack(Serdes.bytes(), Serdes.bytes()).store
    for key in [b"\xff", b"\xff\xff", b"\xff\xff\x00", b"\xfe\xff", b"\x01", b"\xff\x01"]:
        store.put(key, b"v")
    assert keys(store.prefix_scan(b"\xff\xff")) == [b"\xff\xff", b"\xff\xff\x00"]
    assert keys(store.prefix_scan(b"\xff")) == [b"\xff", b"\xff\x01", b"\xff\xff", b"\xff\xff\x00"]
    assert keys(store.prefix_scan(b"\xfe")) == [b"\xfe\xff"]


def test_put_none_deletes_and_delete_returns_old_value(store):
    store.put("a", "1")
    store.put("b", "2")
    store.put("a", None)
    assert store.get("a") is None
    assert keys(store.all()) == ["b"]
    assert store.delete("b") == "2"
    assert store.delete("b") is None
    assert store.delete("never") is None
    assert keys(store.all()) == []
    store.put("a", "again")
    assert store.get("a") == "again"
    assert keys(store.all()) == ["a"]


def test_put_if_absent(store):
    assert store.put_if_absent("k", "first") is None
    assert store.put_if_absent("k", "second") == "first"
    assert store.get("k") == "first"
    store.delete("k")
    assert store.put_if_absent("k", "third") is None
    assert store.get("k") == "third"


def test_put_all_applies_in_order_with_deletes(store):
    store.put("gone", "x")
    store.put_all([("a", "1"), ("b", "2"), ("a", "3"), ("gone", None), ("c", "4")])
    assert list(store.all()) == [("a", "3"), ("b", "2"), ("c", "4")]
    store.put_all([])
    assert list(store.all()) == [("a", "3"), ("b", "2"), ("c", "4")]


def test_approximate_num_entries(make_stack, inner_kind):
    stack = make_stack(Serdes.integer(), Serdes.integer())
    store = stack.store
    assert store.approximate_num_entries() == 0
    for i in range(500):
        store.put(i, i)
    for i in range(0, 500, 5):
        store.put(i, -i)  # overwrites
    exact = inner_kind == "in_memory"
    if exact:  # in-memory is exact, with or without a cache in front
        assert store.approximate_num_entries() == 500
    store.flush()
    estimate = store.approximate_num_entries()
    assert estimate == 500 if exact else 400 <= estimate <= 600
    for i in range(100):
        store.delete(i)
    if exact:
        assert store.approximate_num_entries() == 400
    stack.flush()
    assert 300 <= store.approximate_num_entries() <= 600


def test_json_values_round_trip(make_stack):
    store = make_stack(Serdes.string(), Serdes.json()).store
    store.put("order", {"id": 7, "items": [1, 2], "total": 9.5})
    assert store.get("order") == {"id": 7, "items": [1, 2], "total": 9.5}


def test_modification_during_iteration_does_not_crash(make_stack):
    """Iterators are snapshots: writes while iterating are safe and never extend the scan."""
    store = make_stack(Serdes.integer(), Serdes.string()).store
    original = list(range(0, 600, 2))
    for i in original:
        store.put(i, "even")
    seen, deleted = [], set()
    for kv in store.all():
        seen.append(kv.key)
        if kv.key % 50 == 0:
            store.put(kv.key + 1, "odd")  # insert just after the current key
            store.delete(kv.key + 10)  # delete a key further on
            deleted.add(kv.key + 10)
            store.put(10_000 + kv.key, "late")  # append beyond the end
    assert seen == sorted(set(seen)), "order kept, no duplicates"
    assert set(seen) <= set(original), "keys written during the scan are not part of it"
    assert set(original) - deleted <= set(seen)
    assert store.get(10_000) == "late" and store.get(1) == "odd"
    # reverse iteration while deleting everything, including keys not yet reached
    count = 0
    for kv in store.reverse_all():
        store.delete(kv.key)
        store.delete(kv.key - 1)
        count += 1
    assert count > 0
    assert keys(store.all()) == []


def test_open_iterator_keeps_its_snapshot_while_other_scans_reorganize_the_index(make_stack):
    stack = make_stack(Serdes.integer(), Serdes.string(), max_entries=20)
    store = stack.store
    for i in range(0, 200, 2):
        store.put(i, "a")
    first = store.all()
    assert [next(first).key for _ in range(5)] == [0, 2, 4, 6, 8]
    for i in range(1, 200, 2):  # many new keys: the in-memory index re-sorts, the cache evicts
        store.put(i, "b")
    second = store.range(0, 20)
    assert keys(second) == list(range(21))
    for i in range(100, 200):  # delete over a quarter of the keys: the index is compacted
        store.delete(i)
    stack.flush()
    assert keys(store.range(90, None)) == list(range(90, 100))
    rest = keys(first)
    assert rest[:45] == list(range(10, 100, 2)), "the old snapshot, in order, no odd keys"
    # keys deleted meanwhile: skipped (in-memory) or still in the snapshot (RocksDB)
    tail = rest[45:]
    assert tail == sorted(tail) and set(tail) <= set(range(100, 200, 2))


def test_iterator_peek_and_close(store):
    for key in "abc":
        store.put(key, key)
    with store.all() as it:
        assert it.peek_next_key() == "a"
        assert it.peek_next_key() == "a"
        assert next(it) == ("a", "a")
        assert it.peek_next_key() == "b"
    assert list(it) == []
    it = store.range("c", None)
    assert next(it).key == "c"
    with pytest.raises(StopIteration):
        it.peek_next_key()


def test_null_key_is_rejected(store):
    with pytest.raises(StoreError, match="store.*key must not be None"):
        store.put(None, "v")
    with pytest.raises(StoreError, match="key must not be None"):
        store.get(None)
    with pytest.raises(StoreError, match="key must not be None"):
        store.put_all([("a", "1"), (None, "2")])
    assert store.get("a") is None, "put_all with a bad key writes nothing"


def test_closed_store_raises_store_error(make_stack):
    store = make_stack(name="closing").store
    for i in range(200):
        store.put(f"{i:03d}", "v")
    it = store.all()
    assert next(it).key == "000"
    store.close()
    store.close()  # idempotent
    assert not store.is_open
    for call in (
        lambda: store.get("a"),
        lambda: store.put("a", "b"),
        lambda: store.delete("a"),
        lambda: store.put_if_absent("a", "b"),
        lambda: store.put_all([("a", "b")]),
        lambda: store.range("a", "b"),
        lambda: store.all(),
        lambda: store.prefix_scan("a"),
        lambda: store.approximate_num_entries(),
        lambda: store.flush(),
        lambda: next(it),
    ):
        with pytest.raises(StoreError, match="'closing' is closed"):
            call()


def test_persistent_property(make_stack, inner_kind):
    assert make_stack().store.persistent is (inner_kind == "rocksdb")


def test_matches_a_model_under_random_operations(make_stack):
    """Differential test against a dict: random puts/deletes/put_all/scans, small key space."""
    stack = make_stack(Serdes.bytes(), Serdes.bytes(), max_entries=50)
    store = stack.store
    rng = random.Random(42)
    model: dict[bytes, bytes] = {}
    universe = [bytes([rng.randrange(4) for _ in range(rng.randrange(1, 4))]) for _ in range(300)]
    for step in range(3000):
        op = rng.random()
        key = rng.choice(universe)
        if op < 0.45:
            value = b"%d" % step
            store.put(key, value)
            model[key] = value
        elif op < 0.65:
            assert store.delete(key) == model.pop(key, None)
        elif op < 0.7:
            batch = [(rng.choice(universe), rng.choice([None, b"b%d" % step])) for _ in range(20)]
            store.put_all(batch)
            for k, v in batch:
                if v is None:
                    model.pop(k, None)
                else:
                    model[k] = v
        elif op < 0.8:
            assert store.get(key) == model.get(key)
        elif op < 0.9:
            lo, hi = sorted([rng.choice(universe), rng.choice(universe)])
            expected = sorted((k, v) for k, v in model.items() if lo <= k <= hi)
            assert list(store.range(lo, hi)) == expected
            assert list(store.reverse_range(lo, hi)) == expected[::-1]
        elif op < 0.95:
            prefix = key[:1]
            expected = sorted((k, v) for k, v in model.items() if k.startswith(prefix))
            assert list(store.prefix_scan(prefix)) == expected
        else:
            stack.flush()
    assert list(store.all()) == sorted(model.items())
