"""The driver's side of the worker hosts' query links: who holds which task, and asking them.

Every worker host of a run with ``--query-port`` dials this router (its address and the
run's secret are in the job spec), proves the secret, and says which tasks it holds, again
whenever that changes (``runtime/query_link.py``). A read is sent to the host that last said
it holds the task and waits for its answer; a task nobody holds, a host that goes away, or
no answer within the timeout is a :class:`TaskUnavailableError` (HTTP 503). A host that
takes none of what is sent to it for ``SEND_DEADLINE_S`` (it stopped reading) is dropped,
so no request waits on it again: its tasks are on no worker until it dials again.

The links are served on the query loop's thread (``event_loop.py``), with the HTTP
clients: :meth:`HostRouter.ask_later` sends a read and calls back with its answer there;
:meth:`HostRouter.ask` waits for it on any other thread.
"""

from __future__ import annotations

import itertools
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from processor_api.logging import get_logger
from processor_api.query.errors import NotUpToBoundError, QueryError, TaskUnavailableError
from processor_api.query.event_loop import Connection, EventLoop, Timer
from processor_api.runtime.query_link import (
    SEND_DEADLINE_S,
    FrameError,
    decode_frame,
    encode_frame,
    next_frame,
    secret_matches,
)

#: How long a read waits for its worker's answer (seconds).
ANSWER_TIMEOUT_S = 5.0
#: A client that does not say hello within this long is dropped.
HELLO_TIMEOUT_S = 10.0
#: What a 503 tells clients to wait before asking again (seconds).
RETRY_AFTER_S = 1
#: Reads sent to a host and not yet taken by its socket at most (bytes); one more is
#: answered 503 at once, not queued without bound.
MAX_UNSENT_BYTES = 16 * 1024 * 1024

_log = get_logger("processor_api.query_router")

#: A read's outcome: its answer (HTTP status, body) or the error it ends in.
Outcome = tuple[int, dict[str, Any]] | QueryError
AnswerCallback = Callable[[Outcome], None]


class _Pending:
    """A read sent to a host and not answered yet."""

    __slots__ = ("task", "done", "timer")

    def __init__(self, task: str, done: AnswerCallback, timer: Timer) -> None:
        self.task = task
        self.done = done
        self.timer = timer


class _HostLink(Connection):
    """One connected worker host, on the loop."""

    def __init__(self, router: HostRouter, sock: socket.socket, peer: str) -> None:
        self.router = router
        self.peer = peer
        self.name = "?"  # until its hello
        self.hello = False
        self.dropped = False  # it took nothing in time: nothing is sent to it again
        self.pending: dict[int, _Pending] = {}
        self._buffer = bytearray()
        super().__init__(router.loop, sock)
        self._hello_timer = router.loop.call_later(HELLO_TIMEOUT_S, self._no_hello)

    def _no_hello(self) -> None:
        if not self.hello:
            _log.warning("query_link_refused", peer=self.peer, reason="no hello in time")
            self.close("no hello")

    def received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        try:
            while (frame := next_frame(buffer)) is not None:
                self._frame(decode_frame(frame))
                if self.closed:
                    return
        except (FrameError, ValueError, TypeError) as exc:  # not this protocol's frames
            self.close(f"{type(exc).__name__}: {exc}")

    def _frame(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if not self.hello:
            if op != "hello" or not secret_matches(message.get("secret"), self.router.secret):
                _log.warning("query_link_refused", peer=self.peer, reason="wrong or no secret")
                self.close("refused")
                return
            self.hello = True
            self._hello_timer.cancel()
            self.name = str(message.get("host"))
            _log.debug("query_link_up", host=self.name, peer=self.peer)
        elif op == "tasks":
            self.router._holds(self, [str(t) for t in message.get("tasks") or []])
        elif op == "reply":
            pending = self.pending.pop(int(message.get("id") or 0), None)
            if pending is not None:
                pending.timer.cancel()
                status = int(message.get("status") or 500)
                pending.done(_outcome(pending.task, status, message.get("body") or {}))

    def ended(self, reason: str) -> None:
        _log.debug("query_link_lost", host=self.name, peer=self.peer, error=reason)
        self._hello_timer.cancel()
        self.router._gone(self, f"its worker host {self.name} went away")


def _outcome(task: str, status: int, body: dict[str, Any]) -> Outcome:
    """A host's answer as the read's outcome: a 503 as the error it names."""
    if status == 503 and body.get("code") == NotUpToBoundError.code:
        fields = {k: body.get(k) for k in ("bound", "input_position", "task")}
        return NotUpToBoundError(str(body.get("error")), RETRY_AFTER_S, fields)
    if status == 503:
        return TaskUnavailableError(
            str(body.get("error") or f"task {task} is not available"), RETRY_AFTER_S
        )
    return status, body


class HostRouter:
    """Listens for worker hosts on ``bind_host`` (port chosen by the system) and routes
    reads to them, on the query loop (:attr:`loop`, which the HTTP server shares);
    ``address`` is what the job spec tells the hosts to dial."""

    def __init__(self, bind_host: str, advertised_host: str | None = None) -> None:
        self.secret = secrets.token_hex(16)
        self._server = socket.create_server((bind_host, 0))
        self._server.setblocking(False)
        port = self._server.getsockname()[1]
        self.address = f"{advertised_host or bind_host}:{port}"
        self._owners: dict[str, _HostLink] = {}  # task -> the host that last said it holds it
        self._hosts: set[_HostLink] = set()  # every connected host
        self._ids = itertools.count(1)
        self._tasks_lock = threading.Lock()  # the owners as other threads read them
        self._tasks_seen: dict[str, str] = {}
        self.loop = EventLoop("query-loop")
        self.loop.call_soon(
            lambda: self.loop.register(self._server, selectors.EVENT_READ, self._accept)
        )
        self.loop.call_soon(self._watch_sends)

    # ------------------------------------------------------------- hosts
    def _accept(self, _events: int) -> None:
        try:
            sock, peer = self._server.accept()
        except (BlockingIOError, OSError):
            return
        self._hosts.add(_HostLink(self, sock, str(peer)))

    def _holds(self, host: _HostLink, tasks: list[str]) -> None:
        if host.dropped:
            tasks = []
        for task, owner in list(self._owners.items()):
            if owner is host and task not in tasks:
                del self._owners[task]
        for task in tasks:
            self._owners[task] = host
        with self._tasks_lock:
            self._tasks_seen = {task: owner.name for task, owner in self._owners.items()}

    def _gone(self, host: _HostLink, reason: str) -> None:
        """``host``'s connection ended: its tasks are on no worker, its reads fail."""
        self._holds(host, [])
        self._hosts.discard(host)
        pending, host.pending = host.pending, {}
        for request in pending.values():
            request.timer.cancel()
            request.done(TaskUnavailableError(f"task {request.task}: {reason}", RETRY_AFTER_S))

    def _watch_sends(self) -> None:
        """Drop every host that took none of what waits for it for ``SEND_DEADLINE_S``."""
        now = time.monotonic()
        for host in list(self._hosts):
            since = host.stalled_since
            if since is not None and now - since >= SEND_DEADLINE_S and not host.closed:
                self._drop(host)
        self.loop.call_later(min(0.1, SEND_DEADLINE_S / 4), self._watch_sends)

    def _drop(self, host: _HostLink) -> None:
        """Give up ``host``'s connection: a frame may be cut short, so nothing may follow it."""
        host.dropped = True
        _log.warning(
            "query_host_dropped",
            host=host.name,
            error=f"it took none of {host.unsent} bytes for {SEND_DEADLINE_S:g}s",
        )
        self._holds(host, [])
        pending, host.pending = host.pending, {}
        host.close("dropped")  # ended() finds no reads left: they are answered here
        reason = (
            f"its worker host {host.name} takes no requests (it read none for {SEND_DEADLINE_S:g}s)"
        )
        for request in pending.values():
            request.timer.cancel()
            request.done(TaskUnavailableError(f"task {request.task}: {reason}", RETRY_AFTER_S))

    def tasks(self) -> dict[str, str]:
        """Task -> the host holding it, as the hosts last said (from any thread)."""
        with self._tasks_lock:
            return dict(self._tasks_seen)

    # ------------------------------------------------------------- reads
    def ask_later(
        self,
        task: str,
        request: dict[str, Any],
        done: AnswerCallback,
        timeout_s: float = ANSWER_TIMEOUT_S,
    ) -> None:
        """Send ``request`` to the host holding ``task`` and call ``done`` with its outcome,
        once, on the loop (where this is called)."""
        host = self._owners.get(task)
        if host is None:
            done(
                TaskUnavailableError(
                    f"task {task} is on no worker right now (starting or moving)", RETRY_AFTER_S
                )
            )
            return
        if host.unsent > MAX_UNSENT_BYTES:
            done(
                TaskUnavailableError(
                    f"task {task}: its worker host {host.name} is behind "
                    f"({host.unsent} bytes of reads not taken yet)",
                    RETRY_AFTER_S,
                )
            )
            return
        request_id = next(self._ids)

        def expire() -> None:
            if host.pending.pop(request_id, None) is not None:
                done(
                    TaskUnavailableError(
                        f"task {task} did not answer within {timeout_s:g}s (busy restoring?)",
                        RETRY_AFTER_S,
                    )
                )

        host.pending[request_id] = _Pending(task, done, self.loop.call_later(timeout_s, expire))
        host.write(encode_frame({**request, "op": "read", "id": request_id, "task": task}))

    def ask(
        self, task: str, request: dict[str, Any], timeout_s: float = ANSWER_TIMEOUT_S
    ) -> tuple[int, dict[str, Any]]:
        """Send ``request`` to the host holding ``task`` and wait for its answer (on any
        thread but the loop's): (status, body), or the ``TaskUnavailableError`` it ends in."""
        if self.loop.on_loop:
            raise RuntimeError("HostRouter.ask would block the query loop: use ask_later")
        answered = threading.Event()
        outcome: list[Outcome] = []

        def done(result: Outcome) -> None:
            outcome.append(result)
            answered.set()

        self.loop.call_soon(lambda: self.ask_later(task, request, done, timeout_s))
        # the loop always calls back (the answer, the timeout, the host gone); the margin
        # only covers a loop that stopped
        if not answered.wait(timeout_s + 5.0):
            raise TaskUnavailableError(
                f"task {task} did not answer within {timeout_s:g}s (the query loop is stopped)",
                RETRY_AFTER_S,
            )
        result = outcome[0]
        if isinstance(result, QueryError):
            raise result
        return result

    def close(self) -> None:
        """Stop listening, drop every host's connection and stop the loop."""

        def stop() -> None:
            self.loop.unregister(self._server)
            self._server.close()
            for host in list(self._hosts):
                host.close("the router closed")

        try:
            self.loop.run_sync(stop)
        except TimeoutError:
            self._server.close()
        self.loop.close()
