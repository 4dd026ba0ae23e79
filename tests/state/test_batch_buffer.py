"""The batch buffer keeps a task's writes since its last commit out of the inner store until the commit."""

from __future__ import annotations

import pytest

from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.state.in_memory import InMemoryBytesStore
from processor_api.state.rocksdb import RocksDBBytesStore


@pytest.fixture(params=["in_memory", "rocksdb"])
def inner(request, tmp_path):
    if request.param == "in_memory":
        store = InMemoryBytesStore("s")
    else:
        store = RocksDBBytesStore("s", tmp_path / "s")
    yield store
    store.close()


def test_reads_see_buffered_writes_inner_does_not(inner):
    inner.put(b"a", b"1")
    inner.put(b"c", b"3")
    buffer = BatchBufferBytesStore(inner)
    buffer.put(b"b", b"2")
    buffer.delete(b"c")
    buffer.flush()  # a flush is not a commit
    assert buffer.get(b"b") == b"2" and buffer.get(b"c") is None
    assert list(buffer.range(None, None)) == [(b"a", b"1"), (b"b", b"2")]
    assert inner.get(b"b") is None and inner.get(b"c") == b"3"


def test_commit_applies_and_discard_drops(inner):
    buffer = BatchBufferBytesStore(inner)
    buffer.put(b"k", b"v1")
    assert buffer.commit() == 1
    assert inner.get(b"k") == b"v1"
    buffer.put(b"k", b"v2")
    buffer.put(b"x", b"y")
    assert buffer.discard() == 2
    assert buffer.get(b"k") == b"v1" and buffer.get(b"x") is None
    assert inner.get(b"x") is None


def test_close_without_commit_loses_nothing_committed(inner):
    buffer = BatchBufferBytesStore(inner)
    buffer.put(b"k", b"v")
    buffer.commit()
    buffer.put(b"k", b"uncommitted")
    buffer.close()
    assert not inner.is_open


def test_a_commit_of_a_cut_applies_the_cut_and_keeps_later_writes_buffered(inner):
    buffer = BatchBufferBytesStore(inner)
    buffer.put(b"a", b"a1")
    buffer.put(b"b", b"b1")
    buffer.delete(b"c")
    cut = buffer.pending()
    buffer.put(b"b", b"b2")  # the next batch, written before the cut's commit completes
    buffer.put(b"d", b"d2")
    assert buffer.commit(cut) == 3
    assert (inner.get(b"a"), inner.get(b"b"), inner.get(b"d")) == (b"a1", b"b1", None)
    assert list(buffer.range(None, None)) == [(b"a", b"a1"), (b"b", b"b2"), (b"d", b"d2")]
    assert buffer.discard() == 2  # only the next batch's writes were still buffered
    assert list(buffer.range(None, None)) == [(b"a", b"a1"), (b"b", b"b1")]
