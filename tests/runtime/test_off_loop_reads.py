"""Point reads answered on the query link's thread (``runtime/off_loop_reads.py``), on real
RocksDB stores layered as the runtime layers them (cache, change log, batch buffer), while
another thread writes, writes back and commits as a task's loop does; and over a real
socket from a router, with no loop serving the link."""

from __future__ import annotations

import base64
import socket
import sys
import threading
from datetime import timedelta

import pytest

from processor_api import Serdes, Stores
from processor_api.runtime.off_loop_reads import answer_point_read, readable_off_loop
from processor_api.runtime.query_link import QueryLink, receive_frame, send_frame
from processor_api.state.batch_buffer import BatchBufferBytesStore

KEYS = [f"k{i:04d}" for i in range(2000)]


def _stack(tmp_path, builder, name):
    """The store as ``TaskStores.build`` makes it: the batch buffer over the innermost
    store, the builder's layers over the buffer."""
    buffer = BatchBufferBytesStore(builder.supplier.get(tmp_path))
    return builder.build(tmp_path, inner=buffer), buffer


@pytest.fixture
def counts(tmp_path):
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    ).with_caching_enabled(max_entries=700)  # evictions within a batch, too
    stack, buffer = _stack(tmp_path, builder, "counts")
    yield stack, buffer
    stack.close()


def _key_read(key: str, committed: bool = False) -> dict:
    encoded = base64.b64encode(key.encode()).decode()
    return {"store": "counts", "kind": "key", "key": encoded, "committed": committed}


def _answer(stack, buffer, request):
    return answer_point_read("0_1", {"counts": stack}, {"counts": buffer}, lambda name: 7, request)


@pytest.fixture
def frequent_switches():
    """Threads take turns every 10 microseconds, not every 5 ms: a reader lands inside
    each write-back and commit many times."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def test_a_reader_thread_sees_each_key_old_or_new_never_missing_while_the_loop_writes_back_and_commits(
    counts, frequent_switches
):
    stack, buffer = counts
    store = stack.store
    for key in KEYS:
        store.put(key, 0)
    store.flush()
    buffer.commit()
    rounds = 30
    done = threading.Event()
    seen: dict[tuple[str, bool], int] = {}
    problems: list[str] = []

    def read() -> None:
        i = 0
        while not done.is_set() and len(problems) < 5:
            key = KEYS[(i // 2) % 16 * 125]  # a few keys again and again: each read of a
            committed = i % 2 == 1  # key is compared with the one just before
            i += 1
            answer = _answer(stack, buffer, _key_read(key, committed))
            if answer is None or answer[0] != 200 or len(answer[1]["entries"]) != 1:
                problems.append(f"{key} committed={committed}: {answer}")
                continue
            body = answer[1]
            value = body["entries"][0]["value"]
            before = seen.get((key, committed), 0)
            if value < before:
                problems.append(f"{key} committed={committed}: {value} after {before}")
            seen[(key, committed)] = value

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(1, rounds + 1):
            for key in KEYS:  # the batch: every key counted once more
                store.put(key, round_)
            store.flush()  # the commit's first step: the cache written back
            buffer.commit()  # its last: the batch applied to RocksDB
    finally:
        done.set()
        reader.join()
    assert problems == []
    assert len(seen) == 32  # the reader did read while the loop wrote
    assert store.get(KEYS[0]) == rounds


def test_a_commit_completed_after_its_cut_never_hides_a_key(tmp_path, frequent_switches):
    builder = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("counts"), Serdes.string(), Serdes.long()
    ).with_logging_disabled()
    stack, buffer = _stack(tmp_path, builder, "counts")
    store = stack.store
    done = threading.Event()
    problems: list[str] = []
    first_commit = threading.Event()

    def read() -> None:
        first_commit.wait()
        while not done.is_set() and len(problems) < 5:
            for key in KEYS[::97]:
                answer = _answer(stack, buffer, _key_read(key))
                if answer is None or answer[0] != 200 or not answer[1]["entries"]:
                    problems.append(f"{key}: {answer}")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(1, 21):
            for key in KEYS:
                store.put(key, round_)
            cut = buffer.pending()  # at_least_once: the batch is cut ...
            for key in KEYS[::2]:
                store.put(key, -round_)  # ... the next one goes on ...
            buffer.commit(cut)  # ... and the cut's commit completes meanwhile
            first_commit.set()
    finally:
        first_commit.set()
        done.set()
        reader.join()
    stack.close()
    assert problems == []


def test_a_read_off_the_loop_leaves_the_tasks_last_read_alone(counts):
    stack, buffer = counts
    store = stack.store
    store.put("a", 1)
    store.put("b", 2)
    assert store.get("a") == 1  # the task reads "a", then will write it
    status, body = _answer(stack, buffer, _key_read("b"))
    assert (status, body["entries"]) == (200, [{"key": "b", "value": 2}])
    assert store._last_key == b"a"  # noqa: SLF001 - what the task's next put of "a" relies on
    assert store._last_value == Serdes.long().serialize(1)  # noqa: SLF001


def test_a_point_read_answers_as_the_loop_would(counts):
    stack, buffer = counts
    store = stack.store
    store.put("a", 1)
    store.flush()
    buffer.commit()
    store.put("a", 2)
    store.put("new", 5)
    live = _answer(stack, buffer, _key_read("a"))
    committed = _answer(stack, buffer, _key_read("a", committed=True))
    assert live == (200, {"entries": [{"key": "a", "value": 2}], "more": False, "last": None,
                          "position": 7, "consistency": "live"})  # fmt: skip
    assert committed == (200, {"entries": [{"key": "a", "value": 1}], "more": False,
                               "last": None, "position": 7, "consistency": "committed"})  # fmt: skip
    assert _answer(stack, buffer, _key_read("new", committed=True))[1]["entries"] == []
    assert _answer(stack, buffer, _key_read("missing"))[1]["entries"] == []


def test_reads_that_need_the_loop_are_left_to_it(counts, tmp_path):
    stack, buffer = counts
    assert _answer(stack, buffer, {"store": "counts", "kind": "range", "limit": 10}) is None
    assert _answer(stack, buffer, {**_key_read("a"), "store": "other"}) is None
    assert _answer(stack, buffer, {**_key_read("a"), "key": "not base64!"}) is None
    ttl = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("ttl"), Serdes.string(), Serdes.long()
    ).with_ttl(timedelta(minutes=1))
    windows = Stores.window_store_builder(
        Stores.persistent_window_store("w", timedelta(hours=1), timedelta(minutes=1), False),
        Serdes.string(),
        Serdes.long(),
    )
    for builder in (ttl, windows):
        other, other_buffer = _stack(tmp_path / builder.name, builder, builder.name)
        try:
            assert not readable_off_loop(other)
        finally:
            other.close()
    assert readable_off_loop(stack)
    stack.close()  # the task's stores closed under the read: the loop answers it
    assert _answer(stack, buffer, _key_read("a")) is None


def test_a_point_read_over_the_link_is_answered_with_no_loop_serving_it(counts):
    stack, buffer = counts
    stack.store.put("a", 3)
    router = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{router.getsockname()[1]}"

    def direct(task: str, request: dict) -> tuple[int, dict] | None:
        return answer_point_read(task, {"counts": stack}, {"counts": buffer}, lambda n: 7, request)

    link = QueryLink(address, "s3cret", "host-a", lambda task: None, lambda: None, direct)
    try:
        router.settimeout(10)
        connection, _ = router.accept()
        with connection:
            connection.settimeout(10)
            assert receive_frame(connection)["op"] == "hello"
            assert receive_frame(connection)["op"] == "tasks"
            send_frame(connection, {"op": "read", "id": 1, "task": "0_1", **_key_read("a")})
            reply = receive_frame(connection)  # nothing calls link.serve(): no loop
            assert reply == {"op": "reply", "id": 1, "status": 200,
                             "body": {"entries": [{"key": "a", "value": 3}], "more": False,
                                      "last": None, "position": 7, "consistency": "live"}}  # fmt: skip
            range_read = {"op": "read", "id": 2, "task": "0_1", "store": "counts",
                          "kind": "range", "limit": 10}  # fmt: skip
            send_frame(connection, range_read)
            assert link.inbox.get(timeout=10)["id"] == 2  # a range waits for the loop
    finally:
        link.close()
        router.close()
