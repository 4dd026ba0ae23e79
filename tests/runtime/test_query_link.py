"""The worker side of interactive queries: a read takes at most a page (a count, or a time
slice of the loop thread), and pages resume where the previous one stopped, on a real
RocksDB store."""

from __future__ import annotations

import base64
import socket
import threading

import pytest
from structlog.testing import capture_logs

from processor_api import Serdes, Stores
from processor_api.runtime import query_link
from processor_api.runtime.query_link import (
    FrameError,
    QueryLink,
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
    assert [p["entries"].count for p in pages] == [1000, 1000, 500]
    entries = [e for p in pages for e in p["entries"].parsed()]
    assert [e["key"] for e in entries] == KEYS
    assert [e["value"] for e in entries] == list(range(len(KEYS)))
    assert {p["position"] for p in pages} == {42}
    # rendered as the driver's answer writes them: the task and its page's read with each
    assert {(e["task"], e["position"], e["consistency"]) for e in entries} == {("0_3", 42, "live")}


def test_a_read_stops_when_its_time_slice_is_spent(reader, monkeypatch):
    monkeypatch.setattr(query_link, "SLICE_S", 0.0)  # every check finds the slice spent
    lo = base64.b64encode(b"k00100").decode()
    hi = base64.b64encode(b"k00299").decode()
    pages = _pages(reader, 10_000, **{"from": lo, "to": hi})
    assert all(p["entries"].count == 64 for p in pages[:-1])  # one batch per slice
    keys = [e["key"] for p in pages for e in p["entries"].parsed()]
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


# ------------------------------------------------------------ a router that stops reading
class _StalledRouter:
    """A stand-in for the driver's router on a real socket: it accepts a host's link, takes
    its hello and its tasks, and then reads nothing more until told to."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        # a small receive buffer (inherited by accepted sockets): a stall shows sooner
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.server.settimeout(30)
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"

    def accept(self) -> tuple[socket.socket, dict, dict]:
        """The next link's connection, its hello and its tasks."""
        connection, _ = self.server.accept()
        connection.settimeout(30)
        return connection, receive_frame(connection), receive_frame(connection)


def _replies_until(link, stop, calls: list[int], body: dict) -> None:
    """The host's loop thread: answers (which nobody reads) until ``stop()``."""
    while not stop():
        link.reply({"id": len(calls) + 1}, 200, body)
        calls.append(1)


def test_a_router_that_stops_reading_never_blocks_the_loop_thread(monkeypatch):
    monkeypatch.setattr(query_link, "SEND_DEADLINE_S", 0.5)
    monkeypatch.setattr(query_link, "REDIAL_S", 0.05)
    router = _StalledRouter()
    given_up = threading.Event()  # the test ends: the loop thread stops whatever happened
    woken = threading.Event()
    with capture_logs() as logs, router.server:
        link = QueryLink(router.address, "s3cret", "host-a", lambda task: None, woken.set)
        link.set_tasks(["0_0", "0_1"])
        stalled, hello, tasks = router.accept()
        try:
            assert (hello["op"], hello["secret"], hello["host"]) == ("hello", "s3cret", "host-a")
            while tasks["tasks"] == []:  # it dialed before it was told its tasks
                tasks = receive_frame(stalled)
            assert tasks == {"op": "tasks", "tasks": ["0_0", "0_1"]}

            def lost() -> bool:
                return any(e["event"] == "query_router_lost" for e in logs)

            calls: list[int] = []
            body = {"entries": [{"key": "k", "value": "v" * 65536}], "more": False}
            loop = threading.Thread(
                target=_replies_until,
                args=(link, lambda: lost() or given_up.is_set(), calls, body),
                daemon=True,
            )
            loop.start()
            loop.join(60)  # not a speed check: only that the loop thread was never stuck
            assert not loop.is_alive(), f"the loop thread blocked after {len(calls)} replies"
            (warning,) = [e for e in logs if e["event"] == "query_router_lost"]
            assert warning["log_level"] == "warning"
            assert warning["router"] == router.address
            assert len(calls) > 10  # far more than the socket buffers took

            # the link closed the stalled connection: whole frames, then its end (a frame cut
            # short by the deadline may end it, but nothing follows one)
            frames = 0
            try:
                while receive_frame(stalled) is not None:
                    frames += 1
            except ConnectionResetError:
                pass
            assert frames >= 1

            # the router reads again: the link dials again, says what it holds, and serves
            connection, hello, tasks = router.accept()
            with connection:
                assert hello["op"] == "hello"
                assert tasks == {"op": "tasks", "tasks": ["0_0", "0_1"]}
                send_frame(connection, {"op": "read", "id": 7, "task": "0_1", "store": "s"})
                assert woken.wait(30)
                assert link.serve(lambda task: _OneEntry(task)) == 1
                answer = receive_frame(connection)
                while answer["id"] != 7:  # one the loop thread queued as it stopped
                    answer = receive_frame(connection)
                assert answer == {"op": "reply", "id": 7, "status": 200,
                                  "body": {"entries": [{"key": "k", "value": "0_1"}]}}  # fmt: skip
        finally:
            given_up.set()
            stalled.close()  # a send blocked on it ends (without the fix: else close() waits)
            link.close()


class _OneEntry:
    def __init__(self, task: str) -> None:
        self.task = task

    def answer(self, request):
        return 200, {"entries": [{"key": "k", "value": self.task}]}
