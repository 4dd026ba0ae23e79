"""Window stores, RocksDB and in-memory, cached or not.

Cases and expected values follow Kafka Streams' ``AbstractWindowBytesStoreTest``: window size
3, retention 2 x 60000 ms, records around the first segment boundary (start = 60000 - 4).
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from processor_api import KeyValue, Serdes, StoreError, Stores, TimeWindow, Windowed
from processor_api.state.key_schemas import window_key_parts

WINDOW_SIZE = 3
SEGMENT_INTERVAL = 60_000
RETENTION = 2 * SEGMENT_INTERVAL
START = SEGMENT_INTERVAL - 4
HUGE = 0x7A00000000000000
MAX = 2**63 - 1


def pair(key, value, start, size=WINDOW_SIZE):
    return KeyValue(Windowed.time_window(key, start, size), value)


ZERO = pair(0, "zero", START)
ONE = pair(1, "one", START + 1)
TWO = pair(2, "two", START + 2)
THREE = pair(3, "three", START + 2)
FOUR = pair(4, "four", START + 4)
FIVE = pair(5, "five", START + 5)


@pytest.fixture
def stack(make_window_stack):
    return make_window_stack(RETENTION, WINDOW_SIZE)


@pytest.fixture
def window(stack):
    return stack.store


def put_first_batch(window):
    for key, value, offset in [
        (0, "zero", 0),
        (1, "one", 1),
        (2, "two", 2),
        (3, "three", 2),
        (4, "four", 4),
        (5, "five", 5),
    ]:
        window.put(key, value, START + offset)


def put_second_batch(window):
    for i in range(1, 7):
        window.put(2, f"two+{i}", START + 2 + i)


def values(iterator):
    return {entry.value for entry in iterator}


def changelog_by_key(stack):
    key_serde = Serdes.integer()
    stack.flush()
    entries: dict = {}
    for change in stack.changelog.drain_changes():
        key_bytes, start, _ = window_key_parts(change.key)
        value = None if change.value is None else change.value.decode()
        entries.setdefault(key_serde.deserialize(key_bytes), []).append(f"{value}@{start - START}")
    return entries


def test_range_and_single_point_fetch(stack, window):
    put_first_batch(window)
    assert values(window.fetch(0, START - WINDOW_SIZE, START + WINDOW_SIZE)) == {"zero"}
    put_second_batch(window)
    for i in range(1, 7):
        assert window.fetch(2, START + 2 + i) == f"two+{i}"
    expected = {
        -2: set(),
        -1: {"two"},
        0: {"two", "two+1"},
        1: {"two", "two+1", "two+2"},
        2: {"two", "two+1", "two+2", "two+3"},
        3: {"two", "two+1", "two+2", "two+3", "two+4"},
        4: {"two", "two+1", "two+2", "two+3", "two+4", "two+5"},
        5: {"two", "two+1", "two+2", "two+3", "two+4", "two+5", "two+6"},
        6: {"two+1", "two+2", "two+3", "two+4", "two+5", "two+6"},
        7: {"two+2", "two+3", "two+4", "two+5", "two+6"},
        8: {"two+3", "two+4", "two+5", "two+6"},
        9: {"two+4", "two+5", "two+6"},
        10: {"two+5", "two+6"},
        11: {"two+6"},
        12: set(),
    }
    for offset, wanted in expected.items():
        t = START + offset
        assert values(window.fetch(2, t - WINDOW_SIZE, t + WINDOW_SIZE)) == wanted, offset
    entries = changelog_by_key(stack)
    assert set(entries[0]) == {"zero@0"} and set(entries[1]) == {"one@1"}
    assert set(entries[2]) == {"two@2"} | {f"two+{i}@{2 + i}" for i in range(1, 7)}
    assert set(entries[3]) == {"three@2"} and set(entries[4]) == {"four@4"}
    assert set(entries[5]) == {"five@5"} and 6 not in entries


def test_put_and_fetch_before(window):
    put_first_batch(window)
    for key, name, offset in [
        (0, "zero", 0),
        (1, "one", 1),
        (2, "two", 2),
        (3, "three", 3),
        (4, "four", 4),
        (5, "five", 5),
    ]:
        got = values(window.fetch(key, START + offset - WINDOW_SIZE, START + offset))
        assert got == {name}, key
    put_second_batch(window)
    expected = {
        -1: set(),
        0: set(),
        1: set(),
        2: {"two"},
        3: {"two", "two+1"},
        4: {"two", "two+1", "two+2"},
        5: {"two", "two+1", "two+2", "two+3"},
        6: {"two+1", "two+2", "two+3", "two+4"},
        7: {"two+2", "two+3", "two+4", "two+5"},
        8: {"two+3", "two+4", "two+5", "two+6"},
        9: {"two+4", "two+5", "two+6"},
        10: {"two+5", "two+6"},
        11: {"two+6"},
        12: set(),
        13: set(),
    }
    for offset, wanted in expected.items():
        t = START + offset
        assert values(window.fetch(2, t - WINDOW_SIZE, t)) == wanted, offset


def test_put_and_fetch_after(window):
    put_first_batch(window)
    for key, wanted, offset in [
        (0, {"zero"}, 0),
        (1, {"one"}, 1),
        (2, {"two"}, 2),
        (3, set(), 3),
        (4, {"four"}, 4),
        (5, {"five"}, 5),
    ]:
        got = values(window.fetch(key, START + offset, START + offset + WINDOW_SIZE))
        assert got == wanted, key
    put_second_batch(window)
    expected = {
        -2: set(),
        -1: {"two"},
        0: {"two", "two+1"},
        1: {"two", "two+1", "two+2"},
        2: {"two", "two+1", "two+2", "two+3"},
        3: {"two+1", "two+2", "two+3", "two+4"},
        4: {"two+2", "two+3", "two+4", "two+5"},
        5: {"two+3", "two+4", "two+5", "two+6"},
        6: {"two+4", "two+5", "two+6"},
        7: {"two+5", "two+6"},
        8: {"two+6"},
        9: set(),
        10: set(),
        11: set(),
        12: set(),
    }
    for offset, wanted in expected.items():
        t = START + offset
        assert values(window.fetch(2, t, t + WINDOW_SIZE)) == wanted, offset


def test_all_and_backward_all(window):
    put_first_batch(window)
    assert list(window.all()) == [ZERO, ONE, TWO, THREE, FOUR, FIVE]
    assert list(window.backward_all()) == [FIVE, FOUR, THREE, TWO, ONE, ZERO]


def test_all_skips_deleted_records(window):
    for key, value in enumerate(["zero", "one", "two", "three", "four"]):
        window.put(key, value, START + key)
    window.put(1, None, START + 1)
    window.put(3, None, START + 3)
    assert list(window.all()) == [ZERO, pair(2, "two", START + 2), FOUR]


def test_all_is_ordered_whatever_the_put_order(window):
    for key in (4, 0, 2, 3, 1):
        window.put(key, ["zero", "one", "two", "three", "four"][key], START + key)
    assert list(window.all()) == [
        ZERO,
        ONE,
        pair(2, "two", START + 2),
        pair(3, "three", START + 3),
        FOUR,
    ]


def test_an_early_closed_iterator_does_not_affect_the_next(window):
    window.put(0, "zero", START)
    window.put(1, "one", START + 1)
    iterator = window.all()
    assert next(iterator) == ZERO
    iterator.close()
    assert list(window.all()) == [ZERO, ONE]


def test_fetch_all_in_time_range(window):
    put_first_batch(window)
    assert list(window.fetch_all(START + 1, START + 4)) == [ONE, TWO, THREE, FOUR]
    assert list(window.fetch_all(START, START + 3)) == [ZERO, ONE, TWO, THREE]
    assert list(window.fetch_all(START + 1, START + 5)) == [ONE, TWO, THREE, FOUR, FIVE]
    assert list(window.backward_fetch_all(START + 1, START + 4)) == [FOUR, THREE, TWO, ONE]
    assert list(window.backward_fetch_all(START, START + 3)) == [THREE, TWO, ONE, ZERO]
    assert list(window.backward_fetch_all(START + 1, START + 5)) == [FIVE, FOUR, THREE, TWO, ONE]


def test_fetch_key_range(window):
    put_first_batch(window)
    low, high = START - WINDOW_SIZE, START + WINDOW_SIZE
    cases = [
        ((0, 1, low, high), [ZERO, ONE]),
        ((1, 1, low, high), [ONE]),
        ((1, 3, low, high), [ONE, TWO, THREE]),
        ((0, 5, low, high), [ZERO, ONE, TWO, THREE]),
        ((0, 5, low, high + 5), [ZERO, ONE, TWO, THREE, FOUR, FIVE]),
        ((0, 5, START + 2, high + 5), [TWO, THREE, FOUR, FIVE]),
        ((4, 5, START + 2, START + WINDOW_SIZE), []),
        ((0, 3, START + 3, START + WINDOW_SIZE + 5), []),
    ]
    for args, expected in cases:
        assert list(window.fetch(*args)) == expected, args
        assert list(window.backward_fetch(*args)) == expected[::-1], args


def test_put_same_key_and_timestamp_retains_duplicates(make_window_stack):
    stack = make_window_stack(RETENTION, WINDOW_SIZE, duplicates=True, name="dups")
    window = stack.store
    window.put(0, "zero", START)
    assert values(window.fetch(0, START - WINDOW_SIZE, START + WINDOW_SIZE)) == {"zero"}
    for value in ("zero", "zero+", "zero++"):
        window.put(0, value, START)
    for offset in range(4):
        t = START + offset
        got = [e.value for e in window.fetch(0, t - WINDOW_SIZE, t + WINDOW_SIZE)]
        assert got == ["zero", "zero", "zero+", "zero++"], offset
    assert list(window.fetch(0, START + 4 - WINDOW_SIZE, START + 4 + WINDOW_SIZE)) == []
    assert sorted(changelog_by_key(stack)[0]) == sorted(["zero@0", "zero@0", "zero+@0", "zero++@0"])


def test_fetch_duplicates_in_insertion_order(make_window_stack):
    window = make_window_stack(RETENTION, WINDOW_SIZE, duplicates=True, name="dups").store
    for i, name in enumerate(["one", "two", "three"]):
        window.put(1, name, i * WINDOW_SIZE * 10)
        window.put(1, f"{name}-2", i * WINDOW_SIZE * 10)
    assert list(window.fetch(1, 0, WINDOW_SIZE * 10)) == [
        KeyValue(0, "one"),
        KeyValue(0, "one-2"),
        KeyValue(30, "two"),
        KeyValue(30, "two-2"),
    ]
    assert window.fetch(1, 30) == "two-2"  # the latest duplicate of that window
    window.put(1, None, 30)  # ignored with duplicates
    assert [e.value for e in window.fetch(1, 30, 30)] == ["two", "two-2"]


def test_fetch_and_iterate_over_exact_keys(make_window_stack):
    window = make_window_stack(HUGE, HUGE, key_serde=Serdes.string(), name="exact").store
    window.put("a", "0001", 0)
    window.put("aa", "0002", 0)
    window.put("a", "0003", 1)
    window.put("aa", "0004", 1)
    window.put("a", "0005", HUGE - 1)
    assert values(window.fetch("a", 0, MAX)) == {"0001", "0003", "0005"}
    assert set(window.fetch("a", "a", 0, MAX)) == {
        pair("a", "0001", 0, HUGE),
        pair("a", "0003", 1, HUGE),
        pair("a", "0005", HUGE - 1, HUGE),
    }
    assert pair("a", "0005", HUGE - 1, HUGE).key.window == TimeWindow(HUGE - 1, MAX)
    assert set(window.fetch("aa", "aa", 0, MAX)) == {
        pair("aa", "0002", 0, HUGE),
        pair("aa", "0004", 1, HUGE),
    }


def test_fetch_and_iterate_over_exact_binary_keys(make_window_stack):
    window = make_window_stack(
        RETENTION, WINDOW_SIZE, duplicates=True, key_serde=Serdes.bytes(), name="binary"
    ).store
    key1, key2, key3 = b"\x00", b"\x00\x00", b"\x00\x00\x00"
    for key, value, start in [
        (key1, "1", 0),
        (key2, "2", 0),
        (key3, "3", 0),
        (key1, "4", 1),
        (key2, "5", 1),
        (key3, "6", 59999),
        (key1, "7", 59999),
        (key2, "8", 59999),
        (key3, "9", 59999),
    ]:
        window.put(key, value, start)
    assert values(window.fetch(key1, 0, MAX)) == {"1", "4", "7"}
    assert values(window.fetch(key2, 0, MAX)) == {"2", "5", "8"}
    assert values(window.fetch(key3, 0, MAX)) == {"3", "6", "9"}


def test_delete_and_update(window):
    window.put(1, "one", 0)
    window.put(1, "one v2", 0)
    assert next(window.fetch(1, 0, 0)) == KeyValue(0, "one v2")
    window.put(1, None, 0)
    assert list(window.fetch(1, 0, 0)) == []


def test_window_not_found_is_none(window):
    assert window.fetch(1, 0) is None


def test_none_keys_are_rejected(window):
    with pytest.raises(StoreError, match="'window': key must not be None"):
        window.put(None, "anyValue", 0)
    with pytest.raises(StoreError, match="'window': key must not be None"):
        window.fetch(None, 1, 2)


def test_single_key_fetch_equals_equal_key_range_fetch(window):
    window.put(1, "one", 0)
    window.put(2, "two", 1)
    window.put(2, "two", 2)
    window.put(3, "three", 3)
    single = [e.value for e in window.fetch(2, 0, 5)]
    ranged = [e.value for e in window.fetch(2, 2, 0, 5)]
    assert single == ranged == ["two", "two"]


def test_inverted_key_range_warns_and_returns_nothing(window):
    with capture_logs() as logs:
        assert list(window.fetch(-1, 1, 0, 10)) == []  # -1 serializes after 1
    assert any("invalid key range: from > to" in e.get("detail", "") for e in logs)


def test_expired_records_are_dropped(window):
    window.put(1, "initial record", 2 * RETENTION)
    with capture_logs() as logs:
        window.put(1, "late record", 0)
    assert [e["event"] for e in logs] == ["skipping_record_for_expired_window"]
    window.put(1, "another on-time record", RETENTION + 1)
    assert [e.value for e in window.all()] == ["another on-time record", "initial record"]
    assert window.fetch(1, 0) is None


def test_fetch_range_that_is_expired_is_empty(window):
    window.put(1, "one", 0)
    window.put(1, "two", 4 * RETENTION)
    assert list(window.fetch(1, 0, 10)) == []
    assert list(window.fetch_all(0, 10)) == []


def test_iterator_peek(window):
    window.put(1, "one", 0)
    windowed = window.fetch_all(0, 0)
    key = windowed.peek_next_key()
    assert windowed.peek_next_key() == key == next(windowed).key == Windowed(1, TimeWindow(0, 3))
    assert list(windowed) == []
    single = window.fetch(1, 0, 10)
    assert single.peek_next_key() == 0 == next(single).key
    with pytest.raises(StopIteration):
        single.peek_next_key()


def test_writes_while_iterating_never_fail_nor_extend_the_iteration(window):
    # Kafka Streams' in-memory store would also show the later writes; here iterators read a
    # snapshot (as RocksDB's do), so only the records present when it was created come back.
    window.put(1, "one", 0)
    window.put(1, "two", WINDOW_SIZE * 10)
    with window.all() as iterator:
        window.put(1, "three", WINDOW_SIZE * 20)
        window.put(2, "four", WINDOW_SIZE * 30)
        assert list(iterator) == [pair(1, "one", 0), pair(1, "two", 30)]
    assert len(list(window.all())) == 4


def test_iterators_of_a_closed_store_raise(window):
    window.put(1, "one", 1)
    window.put(1, "two", 2)
    iterator = window.fetch(1, 1, 3)
    assert next(iterator) == KeyValue(1, "one")
    window.close()
    with pytest.raises(StoreError, match="'window' is closed"):
        next(iterator)


def test_expired_segments_are_dropped_from_the_inner_store(stack, window, caching):
    window.put(1, "old", 0)
    window.put(1, "new", 3 * RETENTION)
    stack.flush()
    assert stack.inner.segment_ids == [3 * RETENTION // SEGMENT_INTERVAL]
    assert stack.inner.observed_stream_time == 3 * RETENTION


def test_observed_stream_time_survives_a_reopen(tmp_path):
    builder = Stores.window_store_builder(
        Stores.persistent_window_store("w", RETENTION, WINDOW_SIZE),
        Serdes.integer(),
        Serdes.string(),
    )
    stack = builder.build(state_dir=tmp_path)
    stack.store.put(1, "new", 3 * RETENTION)
    stack.close()
    window = builder.build(state_dir=tmp_path).store
    window.put(1, "late", 0)  # still expired after the reopen
    assert window.observed_stream_time == 3 * RETENTION
    assert list(window.all()) == [pair(1, "new", 3 * RETENTION)]
    window.close()


@pytest.mark.parametrize(
    ("retention", "size", "message"),
    [
        (-1, 0, r"'w': retention period must be a non-negative number of ms, got -1"),
        (10, -3, r"'w': window size must be a non-negative number of ms, got -3"),
        (
            10,
            11,
            r"'w': the retention period \(10 ms\) must be no smaller than the window size "
            r"\(11 ms\)",
        ),
    ],
)
def test_bad_window_store_parameters(retention, size, message):
    for factory in (Stores.persistent_window_store, Stores.in_memory_window_store):
        with pytest.raises(StoreError, match=message):
            factory("w", retention, size)


def test_negative_window_start_is_rejected(window):
    with pytest.raises(
        StoreError,
        match=r"'window': window start must be a non-negative int "
        r"\(epoch ms\), got -5",
    ):
        window.put(1, "x", -5)


def test_time_ranged_fetches_read_only_the_segments_of_their_times(stack, window, caching):
    """As Kafka Streams' ``segments(timeFrom, timeTo)``: fetch_all and fetch over a time
    range open only the segments holding window starts in that range."""
    starts = [10, SEGMENT_INTERVAL + 10, 2 * SEGMENT_INTERVAL + 5]  # segments 0, 1, 2
    for key, start in enumerate(starts):
        window.put(key, f"v{key}", start)
    stack.flush()
    segmented = stack.inner
    assert segmented.segment_ids == [0, 1, 2]
    read: list[int] = []
    backing_range = segmented.backing.range

    def recording_range(lo, hi, reverse=False):
        read.append(int.from_bytes(lo[:8], "big"))
        return backing_range(lo, hi, reverse)

    segmented.backing.range = recording_range
    assert list(window.fetch_all(SEGMENT_INTERVAL, SEGMENT_INTERVAL + 100)) == [
        pair(1, "v1", SEGMENT_INTERVAL + 10)
    ]
    assert read == [1]
    read.clear()
    assert list(window.backward_fetch_all(0, SEGMENT_INTERVAL + 10)) == [
        pair(1, "v1", SEGMENT_INTERVAL + 10),
        pair(0, "v0", 10),
    ]
    assert sorted(read) == [0, 1]
    read.clear()
    assert list(window.fetch(2, 2 * SEGMENT_INTERVAL, MAX)) == [(2 * SEGMENT_INTERVAL + 5, "v2")]
    assert list(window.fetch(0, 0, 20)) == [(10, "v0")]
    assert read == [2, 0]
    read.clear()
    assert len(list(window.all())) == 3
    assert read == [0, 1, 2]
