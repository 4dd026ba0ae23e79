"""The driver's router and a worker host's query link over real sockets (no Spark): a host
proves the run's secret, says which tasks it holds, and gets the reads of those tasks; the
endpoint's own errors name what was wrong."""

from __future__ import annotations

import socket
import threading

import pytest
from structlog.testing import capture_logs

from processor_api.query import router as router_module
from processor_api.query.errors import (
    BadQueryError,
    NotFoundError,
    TaskUnavailableError,
    UnknownStoreError,
)
from processor_api.query.router import HostRouter
from processor_api.query.routing import StoreRoutes
from processor_api.query.server import QueryEndpoint
from processor_api.runtime.query_link import QueryLink, receive_frame, send_frame
from tests.harness.scrape import wait_for
from tests.integration.query_topologies import build_shop

TASKS = ("0_0", "0_1")


@pytest.fixture
def router():
    router = HostRouter("127.0.0.1")
    yield router
    router.close()


@pytest.fixture
def endpoint(router):
    return QueryEndpoint(StoreRoutes(build_shop(), TASKS), router)


class _Reader:
    """Answers every read with the task's name as the value."""

    def __init__(self, task: str) -> None:
        self.task = task

    def answer(self, request):
        entry = {"key": "k", "value": self.task}
        return 200, {"entries": [entry], "more": False, "last": None, "position": 7,
                     "consistency": "live"}  # fmt: skip


def _serve_until_stopped(link: QueryLink, stop: threading.Event, woken: threading.Event) -> None:
    while not stop.is_set():
        if woken.wait(0.05):
            woken.clear()
            link.serve(lambda task: _Reader(task))


def test_a_host_that_holds_a_task_answers_its_reads(router, endpoint):
    woken, stop = threading.Event(), threading.Event()
    link = QueryLink(router.address, router.secret, "host-a", lambda task: None, woken.set)
    loop = threading.Thread(target=_serve_until_stopped, args=(link, stop, woken))
    loop.start()
    try:
        link.set_tasks(TASKS)
        wait_for("the host's tasks", lambda: router.tasks() or None, timeout_s=10)
        assert router.tasks() == {"0_0": "host-a", "0_1": "host-a"}
        for key in ("c00", "c01", "c02", "c03"):
            answer = endpoint.get(f"/stores/totals/keys/{key}", {})
            assert answer["value"] == answer["task"]  # the routed task answered
            assert answer["position"] == 7
        link.set_tasks(["0_0"])
        wait_for("the task given up", lambda: router.tasks() == {"0_0": "host-a"} or None)
    finally:
        stop.set()
        loop.join()
        link.close()


def test_a_task_the_host_cannot_serve_answers_503_from_the_link(router, endpoint):
    refusal = "task 0_1 is restoring its stores"
    link = QueryLink(router.address, router.secret, "host-b", lambda task: refusal, lambda: None)
    try:
        link.set_tasks(TASKS)
        wait_for("the host's tasks", lambda: router.tasks() or None, timeout_s=10)
        with pytest.raises(TaskUnavailableError, match=refusal) as unavailable:
            endpoint.get("/stores/totals/keys/c00", {})
        assert unavailable.value.retry_after_s == 1
    finally:
        link.close()


def test_a_host_without_the_secret_is_refused(router):
    host, port = router.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        send_frame(sock, {"op": "hello", "secret": "guessed", "host": "intruder"})
        send_frame(sock, {"op": "tasks", "tasks": ["0_0"]})
        try:
            closed = receive_frame(sock) is None
        except ConnectionResetError:  # closed with the frames unread
            closed = True
        assert closed
    assert router.tasks() == {}


def test_the_endpoint_names_what_was_wrong(endpoint):
    with pytest.raises(
        UnknownStoreError,
        match="no store 'nope' in this application; its stores: by-amount, per-minute, prices",
    ):
        endpoint.get("/stores/nope/keys/a", {})
    with pytest.raises(TaskUnavailableError, match="task 0_. is on no worker right now"):
        endpoint.get("/stores/totals/keys/a", {})
    with pytest.raises(BadQueryError, match="does not fit the key serde"):
        endpoint.get("/stores/by-amount/keys/abc", {})
    with pytest.raises(BadQueryError, match=r"/stores/per-minute/window\?key="):
        endpoint.get("/stores/per-minute/keys/a", {})
    with pytest.raises(BadQueryError, match="limit must be 1-10000, got '0'"):
        endpoint.get("/stores/totals/all", {"limit": "0"})
    with pytest.raises(BadQueryError, match="is not a page token of this store"):
        endpoint.get("/stores/totals/all", {"page": "bm90IGEgdG9rZW4="})
    with pytest.raises(BadQueryError, match="committed must be true or false"):
        endpoint.get("/stores/totals/keys/a", {"committed": "maybe"})
    with pytest.raises(NotFoundError, match="no endpoint '/elsewhere'"):
        endpoint.get("/elsewhere", {})


def test_a_host_that_stops_reading_is_dropped_and_its_reads_answer_503(monkeypatch, router):
    monkeypatch.setattr(router_module, "SEND_DEADLINE_S", 0.5)
    host, port = router.address.rsplit(":", 1)
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a stall shows sooner
    stalled.connect((host, int(port)))
    given_up = threading.Event()  # the test ends: the HTTP thread stops whatever happened
    with capture_logs() as logs, stalled:
        send_frame(stalled, {"op": "hello", "secret": router.secret, "host": "host-stalled"})
        send_frame(stalled, {"op": "tasks", "tasks": ["0_0"]})
        wait_for("the stalled host's tasks", lambda: router.tasks() or None, timeout_s=10)
        errors: list[str] = []

        def ask_until_dropped() -> None:  # an HTTP thread of the endpoint
            while router.tasks() and not given_up.is_set():
                big = {"store": "totals", "kind": "key", "key": "k" * 65536}
                with pytest.raises(TaskUnavailableError) as unavailable:
                    router.ask("0_0", big, timeout_s=0.01)  # nobody answers
                errors.append(str(unavailable.value))

        asking = threading.Thread(target=ask_until_dropped, daemon=True)
        asking.start()
        asking.join(60)  # not a speed check: only that the thread was never stuck
        given_up.set()
        assert not asking.is_alive(), f"an ask blocked after {len(errors)} reads"
        assert "did not answer within 0.01s" in errors[0]
        assert errors[-1] == (
            "task 0_0: its worker host host-stalled takes no requests (it read none for 0.5s)"
        )
        (dropped,) = [e for e in logs if e["event"] == "query_host_dropped"]
        assert (dropped["log_level"], dropped["host"]) == ("warning", "host-stalled")
        assert router.tasks() == {}
        with pytest.raises(TaskUnavailableError, match="task 0_0 is on no worker right now"):
            router.ask("0_0", {"store": "totals", "kind": "key", "key": "k"})

    # a host that reads takes the task over and answers
    woken, stop = threading.Event(), threading.Event()
    link = QueryLink(router.address, router.secret, "host-a", lambda task: None, woken.set)
    loop = threading.Thread(target=_serve_until_stopped, args=(link, stop, woken))
    loop.start()
    try:
        link.set_tasks(["0_0"])
        wait_for("the new host's tasks", lambda: router.tasks() or None, timeout_s=10)
        status, body = router.ask("0_0", {"store": "totals", "kind": "key", "key": "k"})
        assert (status, body["entries"]) == (200, [{"key": "k", "value": "0_0"}])
    finally:
        stop.set()
        loop.join()
        link.close()


def test_replies_the_socket_takes_in_part_arrive_whole_among_the_senders_frames():
    """A point read answered on the link's thread is sent at once when the socket takes it;
    what it does not take (a peer slow to read, a large answer) the sender thread finishes:
    every frame arrives whole, none lost, with a frame of the sender's among them. (Whether
    the task list is asked for while the sender finishes a reply or before is a race this
    test does not steer.)"""
    server = socket.create_server(("127.0.0.1", 0))
    big = "v" * 300_000  # more than the socket buffers hold: the first send is partial
    link = QueryLink(
        f"127.0.0.1:{server.getsockname()[1]}", "s", "host", lambda task: None,
        lambda: None, lambda task, request: (200, {"entries": [{"value": big}]}),
    )  # fmt: skip
    try:
        peer, _ = server.accept()
        peer.settimeout(10)
        assert receive_frame(peer)["op"] == "hello"
        assert receive_frame(peer)["op"] == "tasks"
        for request_id in range(1, 6):
            send_frame(peer, {"op": "read", "id": request_id, "task": "0_0"})
        link.set_tasks(["0_0", "0_1"])  # a frame of the sender's among the replies
        seen = []
        while len(seen) < 6:
            message = receive_frame(peer)
            seen.append(message["op"] if message["op"] == "tasks" else message["id"])
            if message["op"] == "reply":
                assert message["body"]["entries"][0]["value"] == big
        assert sorted(x for x in seen if x != "tasks") == [1, 2, 3, 4, 5]
        assert seen.count("tasks") == 1
        peer.close()
    finally:
        link.close()
        server.close()
