"""The driver's query loop (``query/event_loop.py``): calls from other threads and timers
run on its one thread, in order; a failing call is logged and the loop goes on; a
connection keeps what its socket does not take and sends it when the socket is writable."""

from __future__ import annotations

import socket
import threading

import pytest
from structlog.testing import capture_logs

from processor_api.query.event_loop import Connection, EventLoop
from tests.harness.scrape import wait_for


@pytest.fixture
def loop():
    loop = EventLoop("test-query-loop")
    yield loop
    loop.close()


def test_calls_and_timers_run_on_the_loops_thread_in_order(loop):
    made: list[tuple[str, bool]] = []
    done = threading.Event()

    def schedule() -> None:
        loop.call_later(0.05, lambda: (made.append(("late", loop.on_loop)), done.set()))
        cancelled = loop.call_later(0.01, lambda: made.append(("cancelled", loop.on_loop)))
        cancelled.cancel()
        loop.call_later(0.0, lambda: made.append(("early", loop.on_loop)))

    loop.call_soon(lambda: made.append(("first", loop.on_loop)))
    loop.call_soon(schedule)
    assert done.wait(10)
    assert made == [("first", True), ("early", True), ("late", True)]
    assert not loop.on_loop


def test_a_failing_call_is_logged_and_the_loop_goes_on(loop):
    def fail() -> None:
        raise ValueError("broken")

    with capture_logs() as logs:
        loop.call_soon(fail)
        loop.run_sync(lambda: None)  # made after the failing call: the loop went on
    (failed,) = [e for e in logs if e["event"] == "query_loop_call_failed"]
    assert failed["error"] == "ValueError: broken"
    with pytest.raises(KeyError, match="raised on the caller"):
        loop.run_sync(lambda: {}["raised on the caller"])


class _Collect(Connection):
    def __init__(self, loop: EventLoop, sock: socket.socket) -> None:
        self.data = bytearray()
        self.reason: str | None = None
        self.drains = 0
        super().__init__(loop, sock)

    def received(self, data: bytes) -> None:
        self.data += data

    def drained(self) -> None:
        self.drains += 1

    def ended(self, reason: str) -> None:
        self.reason = reason


def test_what_the_socket_does_not_take_is_sent_once_the_peer_reads(loop):
    ours, peer = socket.socketpair()
    big = bytes(range(256)) * 40_000  # 10 MB: more than the socket buffers hold
    connections: list[_Collect] = []
    loop.run_sync(lambda: connections.append(_Collect(loop, ours)))
    (connection,) = connections
    loop.run_sync(lambda: connection.write(big))
    assert connection.unsent > 0 and connection.stalled_since is not None
    received = bytearray()
    peer.settimeout(10)
    while len(received) < len(big):
        received += peer.recv(1 << 20)
    assert received == big
    # drained() is called once the socket took the last byte (after unsent is 0)
    wait_for("the connection drained", lambda: connection.drains or None, timeout_s=10)
    assert connection.unsent == 0 and connection.stalled_since is None
    assert connection.drains == 1
    peer.sendall(b"hello")
    wait_for("the peer's bytes", lambda: connection.data == b"hello" or None, timeout_s=10)
    peer.close()
    wait_for("the end", lambda: connection.reason or None, timeout_s=10)
    assert connection.closed and connection.reason == "the peer closed the connection"
