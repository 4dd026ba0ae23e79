"""The query endpoint's HTTP handling over a real socket (no Spark, no hosts): requests on
a kept-alive connection, bodies dropped, HTTP/1.0 and ``Connection: close``, malformed
requests answered 400 naming what was wrong, the bearer token."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from processor_api.query.router import HostRouter
from processor_api.query.routing import StoreRoutes
from processor_api.query.server import QueryEndpoint, QueryServer
from processor_api.runtime.query_link import FrameReader, send_frame
from tests.harness.scrape import wait_for
from tests.integration.query_topologies import build_shop

TASKS = ("0_0", "0_1")


@pytest.fixture
def serve():
    servers = []
    router = HostRouter("127.0.0.1")

    def start(token: str | None = None) -> QueryServer:
        endpoint = QueryEndpoint(StoreRoutes(build_shop(), TASKS), router)
        server = QueryServer(endpoint, "127.0.0.1", 0, token)
        servers.append(server)
        return server

    start.router = router  # type: ignore[attr-defined]
    yield start
    for server in servers:
        server.close()
    router.close()


def _connect(server: QueryServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def _answer(sock: socket.socket, buffer: bytes = b"") -> tuple[int, dict, dict, bytes]:
    """(status, headers, JSON body, what was read past it) of one answer."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection; read {buffer!r}"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {n.lower(): v.strip() for n, _, v in (line.partition(":") for line in lines)}
    length = int(headers["content-length"])
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(status_line.split(" ")[1]), headers, json.loads(rest[:length]), rest[length:]


def _closed(sock: socket.socket) -> bool:
    return sock.recv(1) == b""


def test_requests_on_a_kept_alive_connection_are_answered_in_order(serve):
    server = serve()
    with _connect(server) as sock:
        # two requests in one send: both answered, in order, the connection kept
        sock.sendall(
            b"GET /stores HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /stores/nothing/keys/k HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        status, headers, body, rest = _answer(sock)
        assert status == 200 and headers["content-type"] == "application/json"
        assert body["stores"] and all(s["tasks"] == list(TASKS) for s in body["stores"])
        status, _, body, rest = _answer(sock, rest)
        assert (status, body["code"]) == (404, "unknown_store")
        assert "nothing" in body["error"]
        sock.sendall(b"GET /stores HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _answer(sock, rest)[0] == 200


def test_a_body_is_dropped_and_a_write_answers_405_on_the_same_connection(serve):
    server = serve()
    with _connect(server) as sock:
        sock.sendall(b"POST /stores HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
        status, headers, body, rest = _answer(sock)
        assert (status, headers["allow"], body["code"]) == (405, "GET", "method_not_allowed")
        sock.sendall(b"GET /stores HTTP/1.1\r\n\r\n")
        assert _answer(sock, rest)[0] == 200


@pytest.mark.parametrize(
    "request_head",
    [b"GET /stores HTTP/1.0\r\n\r\n", b"GET /stores HTTP/1.1\r\nConnection: close\r\n\r\n"],
    ids=["HTTP/1.0", "Connection: close"],
)
def test_http_1_0_and_connection_close_end_the_connection_after_the_answer(serve, request_head):
    server = serve()
    with _connect(server) as sock:
        sock.sendall(request_head)
        status, headers, _, rest = _answer(sock)
        assert (status, headers["connection"]) == (200, "close")
        assert rest == b"" and _closed(sock)


@pytest.mark.parametrize(
    ("request_head", "status", "named"),
    [
        (b"HELLO\r\n\r\n", 400, "HELLO"),
        (b"GET /stores HTTP/1.1\r\nno colon here\r\n\r\n", 400, "no colon here"),
        (b"GET /stores HTTP/1.1\r\nContent-Length: many\r\n\r\n", 400, "many"),
        (b"POST /stores HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "chunks"),
        (b"POST /stores HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413, "999999999"),
    ],
    ids=["request line", "header", "content length", "chunked", "too large"],
)
def test_a_malformed_request_answers_naming_what_was_wrong_and_closes(
    serve, request_head, status, named
):
    server = serve()
    with _connect(server) as sock:
        sock.sendall(request_head)
        answer_status, _, body, _ = _answer(sock)
        assert answer_status == status and named in body["error"]
        assert _closed(sock)


def test_the_bearer_token_is_checked_on_every_request(serve):
    server = serve(token="s3cret")
    with _connect(server) as sock:
        sock.sendall(b"GET /stores HTTP/1.1\r\n\r\n")
        status, _, body, rest = _answer(sock)
        assert (status, body["code"]) == (401, "unauthorized")
        sock.sendall(b"GET /stores HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n")
        assert _answer(sock, rest)[0] == 200


def test_a_connection_that_goes_quiet_is_closed_after_the_timeout(serve, monkeypatch):
    from processor_api.query import server as server_module

    monkeypatch.setattr(server_module, "CONNECTION_TIMEOUT_S", 0.2)
    server = serve()
    with _connect(server) as sock:
        sock.sendall(b"GET /stores HTTP/1.1\r\n\r\n")
        assert _answer(sock)[0] == 200
        sock.settimeout(10)  # the server's 0.2 s idle timeout ends it long before this
        assert _closed(sock)


def test_connections_take_no_thread_of_their_own(serve):
    """Every connection is served on the query loop's one thread (a thread per connection
    cost the driver most of its CPU per lookup)."""
    server = serve()
    threads = threading.active_count()
    connections = [_connect(server) for _ in range(20)]
    try:
        for sock in connections:
            sock.sendall(b"GET /stores HTTP/1.1\r\n\r\n")
        assert all(_answer(sock)[0] == 200 for sock in connections)
        assert threading.active_count() == threads
    finally:
        for sock in connections:
            sock.close()


def test_a_read_waiting_for_its_worker_holds_up_only_the_requests_behind_it(serve):
    """A lookup waits for its worker without holding the loop: another client is answered
    meanwhile; the requests sent behind it on its own connection are answered after it,
    in order."""
    server = serve()
    router = serve.router
    worker = socket.create_connection(tuple(router.address.rsplit(":", 1)), timeout=10)
    with worker:
        send_frame(worker, {"op": "hello", "secret": router.secret, "host": "slow-host"})
        send_frame(worker, {"op": "tasks", "tasks": list(TASKS)})
        wait_for("the worker's tasks", lambda: router.tasks() or None, timeout_s=10)
        with _connect(server) as waiting, _connect(server) as other:
            waiting.sendall(
                b"GET /stores/totals/keys/c01 HTTP/1.1\r\n\r\nGET /stores HTTP/1.1\r\n\r\n"
            )
            read = FrameReader(worker).next()  # the lookup reached the worker: not answered
            assert read is not None and read["op"] == "read" and read["store"] == "totals"
            other.sendall(b"GET /stores HTTP/1.1\r\n\r\n")
            assert _answer(other)[0] == 200  # the loop was not held
            entry = {"key": "c01", "value": 41}
            send_frame(worker, {"op": "reply", "id": read["id"], "status": 200,
                                "body": {"entries": [entry], "more": False, "last": None,
                                         "position": 9, "consistency": "live"}})  # fmt: skip
            status, _, body, rest = _answer(waiting)
            assert (status, body["value"], body["task"]) == (200, 41, read["task"])
            assert _answer(waiting, rest)[0] == 200  # the request behind it, after it
