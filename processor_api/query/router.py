"""The driver's side of the worker hosts' query links: who holds which task, and asking them.

Every worker host of a run with ``--query-port`` dials this router (its address and the
run's secret are in the job spec), proves the secret, and says which tasks it holds, again
whenever that changes (``runtime/query_link.py``). A read is sent to the host that last said
it holds the task and waits for its answer; a task nobody holds, a host that goes away, or
no answer within the timeout is a :class:`TaskUnavailableError` (HTTP 503). A host that does
not take a read within ``SEND_DEADLINE_S`` (it stopped reading) is dropped, so no request
waits on it again: its tasks are on no worker until it dials again.
"""

from __future__ import annotations

import itertools
import secrets
import socket
import threading
from typing import Any

from processor_api.logging import get_logger
from processor_api.query.errors import NotUpToBoundError, TaskUnavailableError
from processor_api.runtime.query_link import (
    SEND_DEADLINE_S,
    FrameError,
    FrameReader,
    receive_frame,
    secret_matches,
    send_frame,
)

#: How long a read waits for its worker's answer (seconds).
ANSWER_TIMEOUT_S = 5.0
#: A client that does not say hello within this long is dropped.
HELLO_TIMEOUT_S = 10.0
#: What a 503 tells clients to wait before asking again (seconds).
RETRY_AFTER_S = 1

_log = get_logger("processor_api.query_router")


class _Host:
    """One connected worker host."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.name = name
        self.lock = threading.Lock()  # one request at a time on the socket
        self.pending: dict[int, _Answer] = {}
        self.dropped = False  # it took no request in time: nothing is sent to it again


class _Answer:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.status = 503
        self.body: dict[str, Any] = {}


class HostRouter:
    """Listens for worker hosts on ``bind_host`` (port chosen by the system) and routes
    reads to them; ``address`` is what the job spec tells the hosts to dial."""

    def __init__(self, bind_host: str, advertised_host: str | None = None) -> None:
        self.secret = secrets.token_hex(16)
        self._server = socket.create_server((bind_host, 0))
        port = self._server.getsockname()[1]
        self.address = f"{advertised_host or bind_host}:{port}"
        self._lock = threading.Lock()
        self._owners: dict[str, _Host] = {}  # task -> the host that last said it holds it
        self._hosts: set[_Host] = set()  # every connected host
        self._ids = itertools.count(1)
        threading.Thread(target=self._accept, name="query-router", daemon=True).start()

    # ------------------------------------------------------------- hosts
    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(
                target=self._serve_host, args=(sock, peer), name="query-router-host", daemon=True
            ).start()

    def _serve_host(self, sock: socket.socket, peer: Any) -> None:
        host: _Host | None = None
        try:
            sock.settimeout(HELLO_TIMEOUT_S)
            hello = receive_frame(sock)
            if (
                hello is None
                or hello.get("op") != "hello"
                or not secret_matches(hello.get("secret"), self.secret)
            ):
                _log.warning("query_link_refused", peer=str(peer), reason="wrong or no secret")
                return
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host = _Host(sock, str(hello.get("host")))
            with self._lock:
                self._hosts.add(host)
            _log.debug("query_link_up", host=host.name, peer=str(peer))
            frames = FrameReader(sock)
            while True:
                message = frames.next()
                if message is None:
                    return
                if message.get("op") == "tasks":
                    self._holds(host, [str(t) for t in message.get("tasks") or []])
                elif message.get("op") == "reply":
                    answer = host.pending.pop(int(message.get("id") or 0), None)
                    if answer is not None:
                        answer.status = int(message.get("status") or 500)
                        answer.body = message.get("body") or {}
                        answer.done.set()
        except (OSError, FrameError, ValueError) as exc:
            _log.debug("query_link_lost", peer=str(peer), error=str(exc))
        finally:
            sock.close()
            if host is not None:
                self._holds(host, [])
                with self._lock:
                    self._hosts.discard(host)
                for answer in list(host.pending.values()):
                    answer.body = {"error": f"worker host {host.name} went away"}
                    answer.done.set()

    def _holds(self, host: _Host, tasks: list[str]) -> None:
        with self._lock:
            if host.dropped:
                tasks = []
            for task, owner in list(self._owners.items()):
                if owner is host and task not in tasks:
                    del self._owners[task]
            for task in tasks:
                self._owners[task] = host

    def tasks(self) -> dict[str, str]:
        """Task -> the host holding it, as the hosts last said."""
        with self._lock:
            return {task: host.name for task, host in self._owners.items()}

    # ------------------------------------------------------------- reads
    def ask(
        self, task: str, request: dict[str, Any], timeout_s: float = ANSWER_TIMEOUT_S
    ) -> tuple[int, dict[str, Any]]:
        """Send ``request`` to the host holding ``task``: (status, body) of its answer, or
        ``TaskUnavailableError``."""
        with self._lock:
            host = self._owners.get(task)
        if host is None:
            raise TaskUnavailableError(
                f"task {task} is on no worker right now (starting or moving)", RETRY_AFTER_S
            )
        answer = _Answer()
        request_id = next(self._ids)
        host.pending[request_id] = answer
        try:
            self._send(host, {**request, "op": "read", "id": request_id, "task": task})
        except OSError as exc:
            host.pending.pop(request_id, None)
            if isinstance(exc, TimeoutError):
                reason = f"takes no requests (it read none for {SEND_DEADLINE_S:g}s)"
            else:
                reason = "went away"
            raise TaskUnavailableError(
                f"task {task}: its worker host {host.name} {reason}", RETRY_AFTER_S
            ) from None
        if not answer.done.wait(timeout_s):
            host.pending.pop(request_id, None)
            raise TaskUnavailableError(
                f"task {task} did not answer within {timeout_s:g}s (busy restoring?)",
                RETRY_AFTER_S,
            )
        if answer.status == 503 and answer.body.get("code") == NotUpToBoundError.code:
            fields = {k: answer.body.get(k) for k in ("bound", "input_position", "task")}
            raise NotUpToBoundError(str(answer.body.get("error")), RETRY_AFTER_S, fields)
        if answer.status == 503:
            raise TaskUnavailableError(
                str(answer.body.get("error") or f"task {task} is not available"), RETRY_AFTER_S
            )
        return answer.status, answer.body

    def _send(self, host: _Host, message: dict[str, Any]) -> None:
        """Send ``message`` to ``host`` within ``SEND_DEADLINE_S`` (waiting for the socket
        included), or drop the host and raise ``OSError`` (``TimeoutError``: it took none)."""
        if not host.lock.acquire(timeout=SEND_DEADLINE_S):
            # the request holding it drops the host when its own deadline passes
            raise TimeoutError(f"another request to {host.name} held it for {SEND_DEADLINE_S:g}s")
        try:
            if host.dropped:
                raise ConnectionError(f"worker host {host.name} was dropped")
            send_frame(host.sock, message, SEND_DEADLINE_S)
        except OSError as exc:
            self._drop(host, exc)
            raise
        finally:
            host.lock.release()

    def _drop(self, host: _Host, exc: OSError) -> None:
        """Give up ``host``'s connection: a frame may be cut short, so nothing may follow it."""
        if host.dropped:
            return
        host.dropped = True
        self._holds(host, [])
        _log.warning("query_host_dropped", host=host.name, error=f"{type(exc).__name__}: {exc}")
        try:
            host.sock.shutdown(socket.SHUT_RDWR)  # its reader thread ends and cleans up
        except OSError:
            pass

    def close(self) -> None:
        """Stop listening and drop every host's connection."""
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes accept(); close() alone does not
        except OSError:
            pass
        self._server.close()
        with self._lock:
            hosts = set(self._hosts)
        for host in hosts:
            try:
                host.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
