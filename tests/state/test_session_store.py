"""Session stores, RocksDB and in-memory, cached or not.

Cases and expected values follow Kafka Streams' ``AbstractSessionBytesStoreTest`` (retention
10000 ms, String keys, Long aggregates).
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from processor_api import KeyValue, Serdes, SessionWindow, StoreError, Stores, Windowed

RETENTION = 10_000
SEGMENT_INTERVAL = 60_000
HUGE = 0x7A00000000000000
MAX = 2**63 - 1


def w(key, start, end):
    return Windowed(key, SessionWindow(start, end))


@pytest.fixture
def sessions(make_session_stack):
    return make_session_stack(RETENTION).store


def put_all(store, entries):
    for windowed, value in entries:
        store.put(windowed, value)


def test_put_and_find_sessions_in_range(sessions):
    a1, a2 = w("a", 10, 10), w("a", 500, 1000)
    put_all(sessions, [(a1, 1), (a2, 2), (w("a", 1500, 2000), 1), (w("a", 2500, 3000), 2)])
    assert list(sessions.find_sessions("a", 0, 1000)) == [KeyValue(a1, 1), KeyValue(a2, 2)]
    assert list(sessions.find_sessions("a", 400, 600)) == [KeyValue(a2, 2)]
    assert list(sessions.backward_find_sessions("a", 0, 1000)) == [KeyValue(a2, 2), KeyValue(a1, 1)]
    assert list(sessions.backward_find_sessions("a", 400, 600)) == [KeyValue(a2, 2)]


def test_fetch_all_sessions_with_same_record_key(sessions):
    expected = [KeyValue(w("a", t, t), v) for t, v in [(0, 1), (10, 2), (100, 3), (1000, 4)]]
    put_all(sessions, expected)
    sessions.put(w("aa", 0, 0), 5)  # must not show up
    assert list(sessions.fetch("a")) == expected
    assert list(sessions.backward_fetch("a")) == expected[::-1]


def test_fetch_all_sessions_within_key_range(sessions):
    expected = [
        KeyValue(w("aa", 10, 10), 2),
        KeyValue(w("b", 1000, 1000), 4),
        KeyValue(w("aaa", 100, 100), 3),
        KeyValue(w("bb", 1500, 2000), 5),
    ]
    put_all(sessions, expected)
    sessions.put(w("a", 0, 0), 1)
    sessions.put(w("bbb", 2500, 3000), 6)
    in_key_order = sorted(expected, key=lambda e: e.key.key)
    assert list(sessions.fetch("aa", "bb")) == in_key_order
    assert list(sessions.backward_fetch("aa", "bb")) == in_key_order[::-1]


def test_fetch_exact_session(sessions):
    put_all(
        sessions,
        [
            (w("a", 0, 4), 1),
            (w("aa", 0, 3), 2),
            (w("aa", 0, 4), 3),
            (w("aa", 1, 4), 4),
            (w("aaa", 0, 4), 5),
        ],
    )
    assert sessions.fetch_session("aa", 0, 4) == 3


def test_session_not_found_is_none(sessions):
    assert sessions.fetch_session("any key", 0, 5) is None


def test_find_values_within_merging_session_window_range(sessions):
    put_all(sessions, [(w("a", 0, 0), 1), (w("a", 1000, 1000), 2)])
    expected = [KeyValue(w("a", 0, 0), 1), KeyValue(w("a", 1000, 1000), 2)]
    assert list(sessions.find_sessions("a", -1, 1000)) == expected
    assert list(sessions.backward_find_sessions("a", -1, 1000)) == expected[::-1]


@pytest.mark.parametrize("how", ["remove", "put_none"])
def test_remove(sessions, how):
    put_all(sessions, [(w("a", 0, 1000), 1), (w("a", 1500, 2500), 2)])
    if how == "remove":
        sessions.remove(w("a", 0, 1000))
    else:
        sessions.put(w("a", 0, 1000), None)
    assert list(sessions.find_sessions("a", 0, 1000)) == []
    assert list(sessions.find_sessions("a", 1500, 2500)) == [KeyValue(w("a", 1500, 2500), 2)]


def test_find_sessions_to_merge(sessions):
    windows = [
        w("a", 0, 100),
        w("a", 101, 200),
        w("a", 201, 300),
        w("a", 301, 400),
        w("a", 401, 500),
    ]
    put_all(sessions, [(session, i + 1) for i, session in enumerate(windows)])
    expected = [KeyValue(windows[1], 2), KeyValue(windows[2], 3)]
    assert list(sessions.find_sessions("a", 150, 300)) == expected
    assert list(sessions.backward_find_sessions("a", 150, 300)) == expected[::-1]


def test_fetch_exact_keys(make_session_stack):
    sessions = make_session_stack(HUGE, name="exact").store
    put_all(
        sessions,
        [
            (w("a", 0, 0), 1),
            (w("aa", 0, 10), 2),
            (w("a", 10, 20), 3),
            (w("aa", 10, 20), 4),
            (w("a", HUGE - 2, HUGE - 1), 5),
        ],
    )
    for find in (sessions.find_sessions, sessions.backward_find_sessions):
        assert {e.value for e in find("a", 0, MAX)} == {1, 3, 5}
        assert {e.value for e in find("aa", 0, MAX)} == {2, 4}
        assert {e.value for e in find("a", "aa", 0, MAX)} == {1, 2, 3, 4, 5}
        assert {e.value for e in find("a", "aa", 10, 0)} == {2}


def test_fetch_and_iterate_over_exact_binary_keys(make_session_stack):
    sessions = make_session_stack(
        RETENTION, key_serde=Serdes.bytes(), value_serde=Serdes.string(), name="binary"
    ).store
    key1, key2, key3 = b"\x00", b"\x00\x00", b"\x00\x00\x00"
    for i, key in enumerate([key1, key2, key3] * 3, start=1):
        sessions.put(Windowed(key, SessionWindow(i, 100)), str(i))
    for find in (sessions.find_sessions, sessions.backward_find_sessions):
        assert {e.value for e in find(key1, 0, MAX)} == {"1", "4", "7"}
        assert {e.value for e in find(key2, 0, MAX)} == {"2", "5", "8"}
        assert {e.value for e in find(key3, 0, MAX)} == {"3", "6", "9"}


def test_iterator_peek(sessions):
    put_all(
        sessions,
        [(w("a", 0, 0), 1), (w("aa", 0, 10), 2), (w("a", 10, 20), 3), (w("aa", 10, 20), 4)],
    )
    forward = sessions.find_sessions("a", 0, 20)
    assert forward.peek_next_key() == w("a", 0, 0) == next(forward).key
    assert forward.peek_next_key() == w("a", 10, 20) == next(forward).key
    assert list(forward) == []
    backward = sessions.backward_find_sessions("a", 0, 20)
    assert backward.peek_next_key() == w("a", 10, 20) == next(backward).key
    assert backward.peek_next_key() == w("a", 0, 0) == next(backward).key
    assert list(backward) == []


def test_single_key_find_equals_equal_key_range_find(sessions):
    put_all(
        sessions, [(w("a", 0, 1), 0), (w("aa", 2, 3), 1), (w("aa", 4, 5), 2), (w("aaa", 6, 7), 3)]
    )
    single = list(sessions.find_sessions("aa", 0, 10))
    assert single == list(sessions.find_sessions("aa", "aa", 0, 10))
    assert [e.value for e in single] == [1, 2]


def test_expired_sessions_are_dropped(sessions):
    sessions.put(w("initial record", 0, 2 * SEGMENT_INTERVAL), 0)
    with capture_logs() as logs:
        sessions.put(w("late record", 0, 0), 0)
    assert [e["event"] for e in logs] == ["skipping_record_for_expired_session"]
    sessions.put(w("another on-time record", 0, 2 * SEGMENT_INTERVAL), 0)
    assert [e.key.key for e in sessions.fetch(None, None)] == [
        "another on-time record",
        "initial record",
    ]
    assert sessions.fetch_session("late record", 0, 0) is None


def test_removing_a_missing_session_is_a_no_op(sessions):
    sessions.remove(w("a", 0, 1))
    assert list(sessions.fetch("a")) == []


def test_none_keys_are_rejected(sessions):
    with pytest.raises(StoreError, match="'sessions': key must not be None"):
        sessions.find_sessions(None, 1, 2)
    with pytest.raises(StoreError, match="'sessions': key must not be None"):
        sessions.fetch(None)
    with pytest.raises(StoreError, match="'sessions': key must not be None"):
        sessions.put(w(None, 0, 1), 1)


@pytest.mark.parametrize("bad", ["a", None, 3, ("a", SessionWindow(0, 1))])
def test_non_windowed_session_keys_are_rejected(sessions, bad):
    with pytest.raises(
        StoreError,
        match=r"state store 'sessions': a session store key must be "
        r"Windowed\(key, SessionWindow\(start, end\)\), got ",
    ):
        sessions.put(bad, 1)
    with pytest.raises(StoreError, match="'sessions': a session store key must be Windowed"):
        sessions.remove(bad)


def test_bad_session_windows_are_rejected(sessions):
    with pytest.raises(
        StoreError,
        match=r"'sessions': session start must be a non-negative int "
        r"\(epoch ms\), got -1",
    ):
        sessions.put(w("a", -1, 5), 1)
    with pytest.raises(StoreError, match="'sessions': session start 9 is after its end 5"):
        sessions.put(w("a", 9, 5), 1)


def test_negative_retention_is_rejected():
    for factory in (Stores.persistent_session_store, Stores.in_memory_session_store):
        with pytest.raises(
            StoreError, match="'s': retention period must be a non-negative number of ms, got -10"
        ):
            factory("s", -10)


def test_inverted_key_range_warns_and_returns_nothing(sessions):
    key_from = Serdes.integer().serialize(-1).decode("latin-1")
    key_to = Serdes.integer().serialize(1).decode("latin-1")
    with capture_logs() as logs:
        assert list(sessions.find_sessions(key_from, key_to, 0, 10)) == []
    assert any("invalid key range: from > to" in e.get("detail", "") for e in logs)


def test_iterators_of_a_closed_store_raise(sessions):
    put_all(sessions, [(w("a", 0, 0), 1), (w("b", 10, 50), 2), (w("c", 100, 500), 3)])
    iterator = sessions.fetch("a")
    assert iterator.peek_next_key() == w("a", 0, 0)
    sessions.close()
    with pytest.raises(StoreError, match="'sessions' is closed"):
        next(iterator)
