"""A worker host that is closing takes no new requests, and a Spark task re-sends a dropped one.

The race these cover: the driver closes the hosts at the end of a run; a worker of the next
run connected to a host still closing its task, was queued in its listen backlog, and lost
the connection unanswered when the host exited ("the task host closed the connection
mid-batch", seen in CI under micro-batches; an epoch's request meets the same race).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from processor_api.errors import StreamsError
from processor_api.runtime import worker_host
from processor_api.runtime.host_client import (
    _connect,
    exchange,
    raise_remote_error,
    receive_message,
    request,
    send_message,
    socket_name,
)
from processor_api.runtime.protocol import (
    CloseRequest,
    EpochEnd,
    EpochRequest,
    ErrorReply,
    OkReply,
)
from tests.harness.task_runs import epoch_request

WAIT_S = 10.0


@dataclass(frozen=True)
class NotARequest:
    """A message no task host serves (as from a client of another version)."""


def _epoch_request(epoch: int) -> EpochRequest:
    return epoch_request(epoch, EpochEnd(duration_s=60.0))


class _ClosingSlowly(worker_host.WorkerHost):
    """A host whose task close waits until the test lets it finish."""

    closing = threading.Event()
    may_finish = threading.Event()

    def _close(self) -> None:
        self.closing.set()
        assert self.may_finish.wait(WAIT_S)


def _wait_listening(name: str) -> None:
    for _ in range(1000):
        probe = _connect(name)
        if probe is not None:
            probe.close()
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"host {name} never listened")


def test_a_host_closing_its_tasks_refuses_new_connections(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(worker_host, "WorkerHost", _ClosingSlowly)
    _ClosingSlowly.closing.clear()
    _ClosingSlowly.may_finish.clear()
    name = f"processor-api-test-{uuid.uuid4().hex}"
    server = threading.Thread(target=worker_host.serve, args=(name, os.getpid()), daemon=True)
    server.start()
    _wait_listening(name)
    replies: list[Any] = []
    closer = threading.Thread(target=lambda: replies.append(request(name, CloseRequest())))
    closer.start()
    try:
        assert _ClosingSlowly.closing.wait(WAIT_S)
        # a worker connecting now must be refused (and start a new host), not be queued
        late = _connect(name)
        if late is not None:
            late.close()
        assert late is None, "the closing host still accepted a connection into its backlog"
    finally:
        _ClosingSlowly.may_finish.set()
        closer.join(WAIT_S)
        server.join(WAIT_S)
    assert replies == [OkReply()]
    assert not server.is_alive()


def _fake_host(task_dir: Path, drop_first: int) -> tuple[threading.Thread, list[Any]]:
    """A listener under the name a worker computes for ``task_dir``: it drops ``drop_first``
    connections unread, then answers one request with an :class:`OkReply`; it records
    ``(connection number, request)`` of what it read."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + socket_name(task_dir, os.getppid()))
    listener.listen(8)
    received: list[Any] = []

    def serve() -> None:
        with listener:
            for connection_number in range(1, drop_first + 2):
                connection, _ = listener.accept()
                with connection:
                    if connection_number <= drop_first:
                        continue
                    received.append((connection_number, receive_message(connection)))
                    send_message(connection, OkReply())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, received


def test_a_request_dropped_unread_is_sent_again(tmp_path: Path) -> None:
    thread, received = _fake_host(tmp_path, drop_first=2)
    reply = exchange(tmp_path, "console", _epoch_request(7), attempts=3)
    thread.join(WAIT_S)
    assert reply == OkReply()
    assert received == [(3, _epoch_request(7))]


def test_a_host_that_never_replies_is_an_error_naming_the_request(tmp_path: Path) -> None:
    thread, _ = _fake_host(tmp_path, drop_first=2)
    with pytest.raises(ConnectionError, match=r"gave no reply to EpochRequest in 2 attempts"):
        exchange(tmp_path, "console", _epoch_request(1), attempts=2)
    # let the fake host's last accept return
    extra = _connect(socket_name(tmp_path, os.getppid()))
    if extra is not None:
        with extra:
            send_message(extra, CloseRequest())
            receive_message(extra)
    thread.join(WAIT_S)


def test_a_host_without_requests_lets_its_tasks_go(monkeypatch, tmp_path: Path) -> None:
    """A task that Spark runs elsewhere now leaves no host holding it here."""
    monkeypatch.setattr(worker_host, "IDLE_RELEASE_S", 0.5)
    name = f"processor-api-test-{uuid.uuid4().hex}"
    server = threading.Thread(target=worker_host.serve, args=(name, os.getpid()), daemon=True)
    server.start()
    _wait_listening(name)
    # a request resets the clock (one it does not serve: answered with an error naming its
    # type, the host stays)
    asked = time.monotonic()
    reply = request(name, NotARequest(), timeout_s=WAIT_S)
    assert isinstance(reply, ErrorReply), reply
    with pytest.raises(StreamsError) as raised:
        raise_remote_error(reply)
    assert str(raised.value) == "a worker host serves no NotARequest"
    server.join(WAIT_S)
    assert not server.is_alive(), "the idle host did not exit"
    assert time.monotonic() - asked >= 0.5  # idle from its last request on
    assert _connect(name) is None  # nobody listens under the task's name any more
