"""The worker side of interactive queries: a read takes at most a page (a count, or a time
slice of the loop thread), and pages resume where the previous one stopped, on a real
RocksDB store."""

from __future__ import annotations

import base64
import socket

import pytest

from processor_api import Serdes, Stores
from processor_api.runtime import query_link
from processor_api.runtime.query_link import (
    FrameError,
    TaskStoreReader,
    receive_frame,
    send_frame,
)

KEYS = [f"k{i:05d}" for i in range(2500)]


@pytest.fixture
def reader(tmp_path):
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    ).with_logging_disabled()
    stack = builder.build(tmp_path)
    for i, key in enumerate(KEYS):
        stack.store.put(key, i)
    yield TaskStoreReader("0_3", {"counts": stack}, lambda name: stack.store, lambda name: 42)
    stack.close()


def _pages(reader: TaskStoreReader, limit: int, **bounds: str) -> list[dict]:
    pages, after = [], None
    while True:
        status, body = reader.answer(
            {"store": "counts", "kind": "range", "limit": limit, "after": after, **bounds}
        )
        assert status == 200
        pages.append(body)
        if not body["more"]:
            return pages
        after = body["last"]


def test_pages_of_a_range_resume_after_the_previous_page_without_gaps_or_repeats(
    reader, monkeypatch
):
    monkeypatch.setattr(query_link, "SLICE_S", 3600.0)  # only the count ends a page here
    pages = _pages(reader, 1000)
    assert [len(p["entries"]) for p in pages] == [1000, 1000, 500]
    keys = [e["key"] for p in pages for e in p["entries"]]
    assert keys == KEYS
    assert {p["position"] for p in pages} == {42}


def test_a_read_stops_when_its_time_slice_is_spent(reader, monkeypatch):
    monkeypatch.setattr(query_link, "SLICE_S", 0.0)  # every check finds the slice spent
    lo = base64.b64encode(b"k00100").decode()
    hi = base64.b64encode(b"k00299").decode()
    pages = _pages(reader, 10_000, **{"from": lo, "to": hi})
    assert all(len(p["entries"]) == 64 for p in pages[:-1])  # one batch per slice
    keys = [e["key"] for p in pages for e in p["entries"]]
    assert keys == KEYS[100:300]


def test_an_unknown_store_of_the_task_is_named(reader):
    status, body = reader.answer({"store": "nope", "kind": "key", "key": "", "limit": 1})
    assert status == 404
    assert body == {"error": "task 0_3 has no store 'nope'", "code": "unknown_store"}


def test_a_frame_over_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(query_link, "MAX_FRAME_BYTES", 10)
    left, right = socket.socketpair()
    with left, right:
        send_frame(left, {"op": "read", "store": "a store with a long name"})
        with pytest.raises(FrameError, match="over the limit of 10"):
            receive_frame(right)
