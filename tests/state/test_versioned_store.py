"""Versioned key-value stores, RocksDB and in-memory.

Cases and expected values follow Kafka Streams' ``RocksDBVersionedStoreTest`` (history
retention 300000 ms, which is also the grace period; its segment interval 100000 ms only
places the timestamps, this store does not segment).
"""

from __future__ import annotations

import pytest

from processor_api import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    Serdes,
    StoreError,
    Stores,
    VersionedRecord,
)
from processor_api.state.changelogging import ChangeRecord
from processor_api.state.undo import UndoLog
from processor_api.state.versioned import VersionedBytesStore

HISTORY = 300_000
GRACE = HISTORY
SEG = HISTORY // 3
BASE = 10
UNDEFINED = PUT_RETURN_CODE_VALID_TO_UNDEFINED
NOT_PUT = PUT_RETURN_CODE_NOT_PUT


class Checker:
    """The put/get/delete assertions of the Kafka Streams test, over one store."""

    def __init__(self, store):
        self.store = store

    def put(self, key, value, timestamp, expected_valid_to):
        assert self.store.put(key, value, timestamp) == expected_valid_to, (key, value, timestamp)

    def latest(self, key, value, timestamp):
        assert self.store.get(key) == VersionedRecord(value, timestamp, None)

    def latest_none(self, key):
        assert self.store.get(key) is None

    def at(self, key, as_of, value, timestamp, valid_to):
        expected = VersionedRecord(value, timestamp, None if valid_to == UNDEFINED else valid_to)
        assert self.store.get(key, as_of) == expected, as_of

    def none_at(self, key, as_of):
        assert self.store.get(key, as_of) is None, as_of


@pytest.fixture
def make_versioned(tmp_path, inner_kind):
    stacks = []

    def make(history=HISTORY, name="versioned", logging=True):
        factory = (
            Stores.persistent_versioned_key_value_store
            if inner_kind == "rocksdb"
            else Stores.in_memory_versioned_key_value_store
        )
        builder = Stores.versioned_key_value_store_builder(
            factory(name, history), Serdes.string(), Serdes.string()
        )
        if not logging:
            builder.with_logging_disabled()
        stack = builder.build(state_dir=tmp_path / "task")
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()


@pytest.fixture
def c(make_versioned):
    return Checker(make_versioned().store)


def test_put_latest(c):
    c.put("k", "v", BASE, UNDEFINED)
    c.put("k", "v2", BASE + 1, UNDEFINED)
    c.latest("k", "v2", BASE + 1)
    c.at("k", BASE, "v", BASE, BASE + 1)
    c.at("k", BASE + 1, "v2", BASE + 1, UNDEFINED)
    c.at("k", BASE + 2, "v2", BASE + 1, UNDEFINED)


def test_put_null_as_latest(c):
    c.put("k", None, BASE, UNDEFINED)
    c.put("k", None, BASE + 1, UNDEFINED)
    c.latest_none("k")
    for as_of in (BASE, BASE + 1, BASE + 2):
        c.none_at("k", as_of)


@pytest.mark.parametrize("latest", ["v", None])
def test_put_older_with_latest(c, latest):
    c.put("k", latest, BASE, UNDEFINED)
    c.put("k", "v2", BASE - 2, BASE)
    c.put("k", "v1", BASE - 1, BASE)
    c.put("k", "v4", BASE - 4, BASE - 2)
    if latest is None:
        c.latest_none("k")
        c.none_at("k", BASE)
    else:
        c.latest("k", "v", BASE)
        c.at("k", BASE, "v", BASE, UNDEFINED)
    c.at("k", BASE - 1, "v1", BASE - 1, BASE)
    c.at("k", BASE - 2, "v2", BASE - 2, BASE - 1)
    c.at("k", BASE - 3, "v4", BASE - 4, BASE - 2)


def test_put_older_null_with_non_null_latest(c):
    c.put("k", "v", BASE, UNDEFINED)
    c.put("k", None, BASE - 2, BASE)
    c.put("k", None, BASE - 1, BASE)
    c.put("k", None, BASE - 4, BASE - 2)
    c.put("k", "v5", BASE - 5, BASE - 4)
    c.put("k", "v3", BASE - 3, BASE - 2)
    c.put("k", None, BASE - 6, BASE - 5)
    c.latest("k", "v", BASE)
    c.at("k", BASE, "v", BASE, UNDEFINED)
    c.none_at("k", BASE - 1)
    c.none_at("k", BASE - 2)
    c.at("k", BASE - 3, "v3", BASE - 3, BASE - 2)
    c.none_at("k", BASE - 4)
    c.at("k", BASE - 5, "v5", BASE - 5, BASE - 4)
    c.none_at("k", BASE - 6)


def test_put_older_null_with_null_latest(c):
    c.put("k", None, BASE, UNDEFINED)
    c.put("k", None, BASE - 2, BASE)
    c.put("k", None, BASE - 1, BASE)
    c.put("k", None, BASE - 4, BASE - 2)
    c.put("k", "v3", BASE - 3, BASE - 2)
    c.put("k", "v5", BASE - 5, BASE - 4)
    c.put("k", None, BASE - 6, BASE - 5)
    c.latest_none("k")
    for as_of in (BASE, BASE - 1, BASE - 2, BASE - 4, BASE - 6):
        c.none_at("k", as_of)
    c.at("k", BASE - 3, "v3", BASE - 3, BASE - 2)
    c.at("k", BASE - 5, "v5", BASE - 5, BASE - 4)


def test_put_repeat_timestamp_as_latest(c):
    c.put("k", "to_be_replaced", BASE, UNDEFINED)
    c.put("k", "b", BASE, UNDEFINED)
    c.latest("k", "b", BASE)
    c.at("k", BASE, "b", BASE, UNDEFINED)
    c.none_at("k", BASE - 1)
    for _ in range(2):
        c.put("k", None, BASE, UNDEFINED)
        c.latest_none("k")
        c.none_at("k", BASE)
        c.none_at("k", BASE - 1)
    c.put("k", "b", BASE, UNDEFINED)
    c.latest("k", "b", BASE)
    c.at("k", BASE, "b", BASE, UNDEFINED)
    c.none_at("k", BASE - 1)


REPEAT_TIMESTAMP_RECORDS = [
    ("to_be_replaced", SEG + 20, UNDEFINED),
    (None, SEG - 10, SEG + 20),
    ("to_be_replaced", SEG - 10, SEG + 20),
    (None, SEG - 10, SEG + 20),
    ("to_be_replaced", SEG - 1, SEG + 20),
    ("to_be_replaced", SEG + 1, SEG + 20),
    (None, SEG - 1, SEG + 1),
    (None, SEG + 1, SEG + 20),
    (None, SEG + 10, SEG + 20),
    (None, SEG + 5, SEG + 10),
    ("vp5", SEG + 5, SEG + 10),
    ("to_be_replaced", SEG - 5, SEG - 1),
    ("vn5", SEG - 5, SEG - 1),
    (None, SEG + 20, UNDEFINED),
    (None, SEG + 20, UNDEFINED),
    ("vn6", SEG - 6, SEG - 5),
]

NULLS_RECORDS = [
    (None, SEG + 20, UNDEFINED),
    (None, SEG - 1, SEG + 20),
    (None, SEG + 1, SEG + 20),
    (None, SEG - 10, SEG - 1),
    (None, SEG + 10, SEG + 20),
    ("vp5", SEG + 5, SEG + 10),
    ("vn5", SEG - 5, SEG - 1),
    ("vn6", SEG - 6, SEG - 5),
]


def check_nulls_and_vp5(c):
    c.latest_none("k")
    for as_of in (SEG + 30, SEG + 15, SEG + 2, SEG, SEG - 1, SEG - 8):
        c.none_at("k", as_of)
    c.at("k", SEG + 6, "vp5", SEG + 5, SEG + 10)
    c.at("k", SEG - 5, "vn5", SEG - 5, SEG - 1)
    c.at("k", SEG - 6, "vn6", SEG - 6, SEG - 5)


def test_put_repeat_timestamps(c):
    for value, timestamp, valid_to in REPEAT_TIMESTAMP_RECORDS:
        c.put("k", value, timestamp, valid_to)
    check_nulls_and_vp5(c)


def test_move_record_to_older_segment_with_nulls(c):
    for value, timestamp, valid_to in NULLS_RECORDS:
        c.put("k", value, timestamp, valid_to)
    check_nulls_and_vp5(c)


MOVE_RECORDS = [
    ("vp20", SEG + 20, UNDEFINED),
    ("vp10", SEG + 10, SEG + 20),
    ("vn10", SEG - 10, SEG + 10),
    ("vn2", SEG - 2, SEG + 10),
    ("vn1", SEG - 1, SEG + 10),
    ("vp1", SEG + 1, SEG + 10),
]


def check_moved(c):
    c.latest("k", "vp20", SEG + 20)
    c.at("k", SEG + 30, "vp20", SEG + 20, UNDEFINED)
    c.at("k", SEG + 15, "vp10", SEG + 10, SEG + 20)
    c.at("k", SEG + 5, "vp1", SEG + 1, SEG + 10)
    c.at("k", SEG, "vn1", SEG - 1, SEG + 1)
    c.at("k", SEG - 1, "vn1", SEG - 1, SEG + 1)
    c.at("k", SEG - 2, "vn2", SEG - 2, SEG - 1)
    c.at("k", SEG - 5, "vn10", SEG - 10, SEG - 2)


def test_move_record_to_older_segment(c):
    for value, timestamp, valid_to in MOVE_RECORDS:
        c.put("k", value, timestamp, valid_to)
    check_moved(c)


MULTI_SEGMENT_RECORDS = [
    (None, SEG - 20),
    ("vn10", SEG - 10),
    (None, SEG - 1),
    (None, SEG + 1),
    ("vp10", SEG + 10),
    (None, SEG + 20),
]


def check_multi_segment(c):
    c.latest_none("k")
    for as_of in (SEG + 30, SEG + 5, SEG + 2, SEG, SEG - 1, SEG - 15):
        c.none_at("k", as_of)
    c.at("k", SEG + 15, "vp10", SEG + 10, SEG + 20)
    c.at("k", SEG - 5, "vn10", SEG - 10, SEG - 1)


def test_put_into_multiple_segments(c):
    for value, timestamp in MULTI_SEGMENT_RECORDS:
        c.put("k", value, timestamp, UNDEFINED)
    check_multi_segment(c)


def test_fall_through_to_existing_older_segment_as_latest(c):
    c.put("k", None, SEG - 5, UNDEFINED)
    c.put("k", "vn6", SEG - 6, SEG - 5)
    c.put("k", "vp20", SEG + 20, UNDEFINED)
    c.put("k", None, SEG + 10, SEG + 20)
    c.put("k", None, SEG - 1, SEG + 10)
    c.put("k", "vn2", SEG - 2, SEG - 1)
    c.latest("k", "vp20", SEG + 20)
    c.at("k", SEG + 30, "vp20", SEG + 20, UNDEFINED)
    for as_of in (SEG + 12, SEG, SEG - 1):
        c.none_at("k", as_of)
    c.at("k", SEG - 2, "vn2", SEG - 2, SEG - 1)
    c.none_at("k", SEG - 5)
    c.at("k", SEG - 6, "vn6", SEG - 6, SEG - 5)


def test_put_non_latest_tombstone_with_valid_to(c):
    c.put("k", "vp30", SEG + 30, UNDEFINED)
    c.put("k", None, SEG - 10, SEG + 30)
    c.put("k", "vn5", SEG - 5, SEG + 30)
    c.put("k", "vn1", SEG - 1, SEG + 30)
    c.put("k", None, SEG - 2, SEG - 1)
    c.latest("k", "vp30", SEG + 30)
    c.at("k", SEG + 10, "vn1", SEG - 1, SEG + 30)
    c.at("k", SEG - 1, "vn1", SEG - 1, SEG + 30)
    c.none_at("k", SEG - 2)
    c.at("k", SEG - 5, "vn5", SEG - 5, SEG - 2)
    c.none_at("k", SEG - 10)


def test_delete(c):
    for value, timestamp, valid_to in MOVE_RECORDS[:4]:
        c.put("k", value, timestamp, valid_to)
    deleted = c.store.delete("k", SEG - 5)
    assert (deleted.value, deleted.timestamp) == ("vn10", SEG - 10)
    deleted = c.store.delete("k", SEG + 10)
    assert (deleted.value, deleted.timestamp) == ("vp10", SEG + 10)
    assert c.store.delete("k", SEG + 10) is None
    deleted = c.store.delete("k", SEG + 25)
    assert (deleted.value, deleted.timestamp) == ("vp20", SEG + 20)
    c.latest_none("k")


def test_expired_puts_are_not_applied(c):
    c.put("k", "v", HISTORY + 10, UNDEFINED)
    c.put("k1", "v1", HISTORY + 10 - GRACE, UNDEFINED)
    c.latest("k1", "v1", HISTORY + 10 - GRACE)
    c.put("k2", "v2", HISTORY + 9 - GRACE, NOT_PUT)
    c.latest_none("k2")


def test_expired_deletes_are_not_applied(c):
    c.put("k1", "v1", 1, UNDEFINED)
    c.put("k2", "v2", 1, UNDEFINED)
    c.put("kother", "vother", HISTORY + 10, UNDEFINED)
    deleted = c.store.delete("k1", HISTORY + 10 - GRACE)
    assert (deleted.value, deleted.timestamp) == ("v1", 1)
    c.latest_none("k1")
    assert c.store.delete("k2", HISTORY + 9 - GRACE) is None
    c.latest("k2", "v2", 1)


def test_get_from_older_segments(c):
    for timestamp in (SEG - 10, 2 * SEG - 10, 3 * SEG - 10):
        c.put("ko", None, timestamp, UNDEFINED)
    c.none_at("k", SEG - 20)
    c.put("k", "v", SEG - 20, UNDEFINED)
    c.put("k", None, SEG - 10, UNDEFINED)
    c.none_at("k", SEG - 30)
    c.at("k", SEG - 15, "v", SEG - 20, SEG - 10)
    c.none_at("k", SEG - 5)
    c.put("k", "v2", 3 * SEG - 20, UNDEFINED)
    c.put("k", None, 3 * SEG - 10, UNDEFINED)
    c.none_at("k", SEG - 30)
    c.at("k", SEG - 15, "v", SEG - 20, SEG - 10)
    c.none_at("k", SEG - 5)


def test_expired_history_is_not_returned(c):
    c.put("k", "v_old", 0, UNDEFINED)
    c.put("k", "v", SEG - 10, UNDEFINED)
    c.at("k", SEG - 11, "v_old", 0, SEG - 10)
    c.put("ko", "vo", HISTORY + SEG - 11, UNDEFINED)
    c.at("k", SEG - 11, "v_old", 0, SEG - 10)
    c.put("ko", "vo2", HISTORY + SEG - 10, UNDEFINED)
    c.none_at("k", SEG - 11)


def test_expired_query_still_returns_a_latest_value_that_matches(c):
    c.put("k", "v", 1, UNDEFINED)
    c.put("ko", "vo_old", 1, UNDEFINED)
    c.put("ko", "vo_new", HISTORY + 12, UNDEFINED)
    c.at("k", 10, "v", 1, UNDEFINED)
    c.none_at("ko", 10)


def test_distinguish_empty_and_null(c):
    for timestamp, valid_to in [
        (SEG + 20, UNDEFINED),
        (SEG - 10, SEG + 20),
        (SEG - 1, SEG + 20),
        (SEG + 1, SEG + 20),
        (SEG + 10, SEG + 20),
    ]:
        c.put("k", None, timestamp, valid_to)
    c.put("k", "", SEG + 5, SEG + 10)
    c.put("k", "", SEG - 5, SEG - 1)
    c.put("k", "", SEG - 6, SEG - 5)
    c.latest_none("k")
    for as_of in (SEG + 30, SEG + 15, SEG + 2, SEG, SEG - 1, SEG - 8):
        c.none_at("k", as_of)
    c.at("k", SEG + 6, "", SEG + 5, SEG + 10)
    c.at("k", SEG - 5, "", SEG - 5, SEG - 1)
    c.at("k", SEG - 6, "", SEG - 6, SEG - 5)


def test_zero_history_retention(make_versioned):
    c = Checker(make_versioned(history=0, name="zero").store)
    c.put("k", "v", BASE, UNDEFINED)
    c.latest("k", "v", BASE)
    c.at("k", BASE, "v", BASE, UNDEFINED)
    c.at("k", BASE + 1, "v", BASE, UNDEFINED)
    c.put("k", "updated", BASE, UNDEFINED)
    c.latest("k", "updated", BASE)
    c.put("k", "v2", BASE + 2, UNDEFINED)
    c.latest("k", "v2", BASE + 2)
    c.none_at("k", BASE + 1)
    c.store.delete("k", BASE + 3)
    c.latest_none("k")
    c.put("k2", "v", BASE + 2, NOT_PUT)
    c.latest_none("k2")


# ---------------------------------------------------------------------------- restore


def restored(make_versioned, records, batches=1):
    """Replay Kafka-Streams-format changelog records (key, value, timestamp) into a store."""
    stack = make_versioned(name="restored", logging=False)
    serde = Serdes.string()
    raw = [(serde.serialize(k), serde.serialize(v), t) for k, v, t in records]
    write = VersionedBytesStore(stack.inner, HISTORY).restore_batch
    size = -(-len(raw) // batches)
    for start in range(0, len(raw), size):
        write(raw[start : start + size])
    return Checker(stack.store)


def test_restore(make_versioned):
    c = restored(make_versioned, [("k", v, t) for v, t, _ in MOVE_RECORDS])
    check_moved(c)


def test_restore_with_nulls(make_versioned):
    check_nulls_and_vp5(restored(make_versioned, [("k", v, t) for v, t, _ in NULLS_RECORDS]))


def test_restore_with_nulls_and_repeat_timestamps(make_versioned):
    records = [("k", v, t) for v, t, _ in REPEAT_TIMESTAMP_RECORDS]
    check_nulls_and_vp5(restored(make_versioned, records))


def test_restore_multiple_batches(make_versioned):
    records = [("k", v, t) for v, t in MULTI_SEGMENT_RECORDS]
    check_multi_segment(restored(make_versioned, records, batches=2))


def test_restore_skips_expired(make_versioned):
    c = restored(
        make_versioned,
        [
            ("k", "v", HISTORY + 10),
            ("k1", "v1", HISTORY + 10 - GRACE),
            ("k2", "v2", HISTORY + 9 - GRACE),
        ],
    )
    c.latest("k", "v", HISTORY + 10)
    c.latest("k1", "v1", HISTORY + 10 - GRACE)
    c.latest_none("k2")


def test_restore_even_if_expired_by_end_of_batch(make_versioned):
    c = restored(make_versioned, [("k2", "v2", HISTORY - GRACE), ("k", "v", HISTORY + 10)])
    c.latest("k2", "v2", HISTORY - GRACE)
    c.latest("k", "v", HISTORY + 10)


# ---------------------------------------------------------------------------- ours


def test_unreachable_versions_are_deleted_from_the_inner_store(make_versioned):
    stack = make_versioned(name="cleanup", logging=False)
    store = stack.store
    for i in range(5):
        store.put("k", f"v{i}", i * 1000)
    store.put("k", "now", HISTORY + 3500)  # versions superseded at <= 3500 are unreachable
    keys = [key for key, _ in stack.inner.range(b"\x00", b"\x00\xff")]
    assert [int.from_bytes(key[-8:], "big") for key in keys] == [3000, 4000, HISTORY + 3500]
    assert store.get("k", 3500) == VersionedRecord("v3", 3000, 4000)


def test_caching_is_refused():
    builder = Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store("v", HISTORY),
        Serdes.string(),
        Serdes.string(),
    )
    with pytest.raises(StoreError, match="'v': versioned stores do not support caching"):
        builder.with_caching_enabled()


def test_bad_arguments(c):
    with pytest.raises(StoreError, match="'versioned': history retention"):
        Stores.persistent_versioned_key_value_store("versioned", -1)
    with pytest.raises(
        StoreError,
        match=r"'versioned': timestamp must be a non-negative int "
        r"\(epoch ms\), got -1",
    ):
        c.store.put("k", "v", -1)
    with pytest.raises(StoreError, match="'versioned': key must not be None"):
        c.store.get(None)
    assert c.store.get("k", -5) is None


# ------------------------------------------------------------------- undo (state.undo)


def raw(stack):
    """Every entry of the inner store: the versions kept and the observed stream time."""
    return list(stack.inner.range(None, None))


def pending(stack):
    return list(stack.changelog._changes) if stack.changelog is not None else []


@pytest.mark.parametrize("logging", [True, False], ids=["logged", "unlogged"])
def test_an_undo_log_takes_every_kind_of_versioned_write_back(make_versioned, logging):
    t = HISTORY  # timestamps t + n, so that the grace period reaches back to 0 and beyond
    stack = make_versioned(name="undo", logging=logging)
    store = stack.store
    store.put("k", "v10", t + 10)
    store.put("k", "v30", t + 30)
    store.put("j", "j10", t + 10)
    undo = UndoLog()
    undo.track(store)
    store.put("k", "kept", t + 20)  # before the unit of work: stays, as does its change record
    undo.clear()
    as_of = (None, t + 15, t + 20, t + 30)
    before = (raw(stack), pending(stack), [store.get("k", a) for a in as_of])
    assert store.put("k", "v40", t + 40) == UNDEFINED  # the latest v30 moves into history
    assert store.put("k", "v25", t + 25) == t + 30  # an older version into history
    assert store.put("k", "x30", t + 30) == t + 40  # replaces the version at 30
    assert store.delete("j", t + 35) == VersionedRecord("j10", t + 10, None)  # tombstone, latest
    assert store.delete("k", t + 15) == VersionedRecord("v10", t + 10, t + 20)  # into history
    store.put("n", "n5", t + 5)  # a new key
    store.put("k", "far", t + 40 + HISTORY)  # stream time moves on: unreachable versions go
    assert store.get("k", t + 15) is None and raw(stack) != before[0]
    assert undo.rollback() > 0 and undo.entries == []
    assert (raw(stack), pending(stack)) == before[:2]
    assert (
        [store.get("k", a) for a in as_of]
        == before[2]
        == [
            VersionedRecord("v30", t + 30, None),
            VersionedRecord("v10", t + 10, t + 20),
            VersionedRecord("kept", t + 20, t + 30),
            VersionedRecord("v30", t + 30, None),
        ]
    )
    assert store.get("j") == VersionedRecord("j10", t + 10, None) and store.get("n") is None
    # the grace period follows stream time t + 30 again: this put is applied
    assert store.put("k", "old", 30) == t + 10


def test_undoing_a_versioned_write_whose_change_record_was_drained_is_refused(make_versioned):
    stack = make_versioned(name="drained")
    undo = UndoLog()
    undo.track(stack.store)
    stack.store.put("k", "v", 10)
    assert stack.changelog.drain_changes() == [ChangeRecord(b"k", b"v", 10)]
    with pytest.raises(
        StoreError, match="'drained': cannot undo the versioned write of timestamp 10"
    ):
        undo.rollback()


class CountingGets:
    """An inner byte store counting the point reads of version entries."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.version_gets = 0

    def get(self, key):
        if key.startswith(b"\x00"):
            self.version_gets += 1
        return self.inner.get(key)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_journaling_reads_nothing_for_puts_newer_than_stream_time(make_versioned):
    inner = CountingGets(make_versioned(name="counted", logging=False).inner)
    versioned = VersionedBytesStore(inner, HISTORY)
    versioned.undo = []
    for timestamp in (10, 20, 30):
        versioned.put(b"k", b"v", timestamp)
    assert inner.version_gets == 0 and len(versioned.undo) == 6  # version + stream time, each
    versioned.put(b"k", b"w", 20)  # not the newest: the version it replaces is read
    assert inner.version_gets == 1 and versioned.undo[-1] == (
        versioned,
        b"\x00k" + (20).to_bytes(8, "big"),
        b"\x01v",
    )
    versioned.undo = None
    versioned.put(b"k", b"x", 15)
    assert inner.version_gets == 1  # untracked: no read
