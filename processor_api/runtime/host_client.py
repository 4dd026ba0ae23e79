"""Talking to worker hosts: finding or starting a worker's host process, requests, closing.

Every worker runs its tasks in a host process of its own on the executor
(``worker_host.py``), which keeps them alive across epochs. Spark's Python worker that gets
the worker's group in an epoch only forwards the request and stays connected: pyspark hands
groups to whichever Python worker is free, so the tasks cannot live in one.

A host listens on an abstract Unix socket (no file, no path length limit) named after the
worker (:func:`worker_key`) and the pyspark daemon that started it; it writes that name to
``<task dir>/.host`` of every task it owns, so the driver can close it at the end of a run and
a host elsewhere can ask it to let a task go. Messages are 8-byte big-endian lengths followed
by a pickle.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from processor_api import errors
from processor_api.errors import StreamsError, TaskTimeoutError
from processor_api.runtime.protocol import CloseRequest, EpochAlive, ErrorReply

HOST_FILE = ".host"
START_TIMEOUT_S = 60.0
_LENGTH = struct.Struct(">Q")


def worker_key(state_dir: str | os.PathLike[str], application_id: str, worker: str) -> Path:
    """What names a worker's host on a machine: its application's state directory and the
    worker's id (a name only: no such directory is made)."""
    return Path(state_dir).resolve() / application_id / f".worker-{worker}"


def socket_name(key: Path, daemon_pid: int) -> str:
    """The abstract socket name of the host of worker ``key`` started under ``daemon_pid``."""
    digest = hashlib.sha1(str(key).encode()).hexdigest()[:20]
    return f"processor-api-{digest}-{daemon_pid}"


def send_message(sock: socket.socket, message: Any) -> None:
    """Write one framed message."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def receive_message(sock: socket.socket) -> Any | None:
    """Read one framed message; ``None`` when the peer closed the connection first."""
    header = _receive_exactly(sock, _LENGTH.size)
    if header is None:
        return None
    (length,) = _LENGTH.unpack(header)
    body = _receive_exactly(sock, length)
    if body is None:
        raise ConnectionError("the connection closed in the middle of a message")
    return pickle.loads(body)


def _receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            if remaining == size:
                return None
            raise ConnectionError("the connection closed in the middle of a message")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _connect(name: str, timeout_s: float | None = None) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        return None
    sock.settimeout(timeout_s)
    return sock


def request(name: str, message: Any, timeout_s: float | None = None) -> Any:
    """Send one request to the host ``name`` and return its reply (``None``: no such host)."""
    sock = _connect(name, timeout_s)
    if sock is None:
        return None
    with sock:
        send_message(sock, message)
        return receive_message(sock)


def start_host(
    key: Path, name: str, owner_pid: int, log_format: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start a host for worker ``key`` listening on ``name``; it exits when the process
    ``owner_pid`` is gone (the pyspark daemon, or the driver that started it early)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor_api.runtime.worker_host",
            name,
            str(key),
            str(owner_pid),
            log_format,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=env,
    )


def connect_or_start(
    key: Path, log_format: str, early_start_pid: int | None = None
) -> socket.socket:
    """A connection to the host of worker ``key`` under this Python worker's daemon, or to
    the one the driver ``early_start_pid`` started before its query; started if neither
    listens."""
    daemon_pid = os.getppid()
    name = socket_name(key, daemon_pid)
    sock = _connect(name)
    if sock is not None:
        return sock
    if early_start_pid is not None:
        sock = _connect(socket_name(key, early_start_pid))
        if sock is not None:
            return sock
    # Two Python workers may start a host for the same worker at once: only one can bind the
    # name, the other host exits at once and both connect to the winner.
    process = start_host(key, name, daemon_pid, log_format)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        sock = _connect(name)
        if sock is not None:
            return sock
        if process.poll() not in (None, 0):
            raise StreamsError(
                f"{_host_of(key)} exited with code {process.returncode} at start "
                "(its error is in the executor's log)"
            )
        time.sleep(0.01)
    raise StreamsError(f"{_host_of(key)} did not listen within {START_TIMEOUT_S:g}s")


REQUEST_ATTEMPTS = 3


def exchange(
    key: Path,
    log_format: str,
    message: Any,
    attempts: int = REQUEST_ATTEMPTS,
    timeout_s: float | None = None,
    stuck_after_s: float | None = None,
    early_start_pid: int | None = None,
) -> Any:
    """Send ``message`` to the host of ``key`` (started if needed, see
    :func:`connect_or_start`) and return its reply.

    ``timeout_s`` bounds each wait for a message from the host. While an epoch runs the host
    sends :class:`EpochAlive` messages, which are read and passed over; one that says the
    host's loop has not turned for more than ``stuck_after_s`` is a :class:`TaskTimeoutError`.

    A host that is closing (the end of a run, or letting the task go to another host) drops
    the connections that reached it just before it stopped listening, unread; such a request
    is sent again, to a new host. Sending an epoch twice is safe: a task adopts its last commit
    marker and skips what that says was processed, as when Spark re-runs an epoch.
    """
    failure = "it closed the connection without a reply"
    for _ in range(attempts):
        with connect_or_start(key, log_format, early_start_pid) as connection:
            connection.settimeout(timeout_s)
            try:
                send_message(connection, message)
                reply = receive_message(connection)
                while isinstance(reply, EpochAlive):
                    _check_not_stuck(key, message, reply, stuck_after_s)
                    reply = receive_message(connection)
            except TimeoutError as exc:
                raise TimeoutError(
                    f"{_host_of(key)} did not answer {_what(message)} within {timeout_s:g}s"
                ) from exc
            except (ConnectionError, OSError) as exc:
                failure = f"the connection failed: {exc}"
                continue
        if reply is not None:
            return reply
    raise ConnectionError(
        f"{_host_of(key)} gave no reply to {_what(message)} in {attempts} attempts ({failure})"
    )


def _check_not_stuck(
    key: Path, message: Any, alive: EpochAlive, stuck_after_s: float | None
) -> None:
    if stuck_after_s is not None and alive.loop_idle_s > stuck_after_s:
        raise TaskTimeoutError(
            f"{_host_of(key)} is stuck in {_what(message)}: its loop has not "
            f"turned for {alive.loop_idle_s:.0f}s (more than {stuck_after_s:g}s)"
        )


def _host_of(key: Path) -> str:
    return f"the host of worker {key.name.removeprefix('.worker-')} ({key.parent})"


def _what(message: Any) -> str:
    return type(message).__name__


def raise_remote_error(reply: Any) -> None:
    """Raise the error a host reported (an :class:`ErrorReply`), as the same processor_api
    error type when there is one; any other reply is an error of its own."""
    if not isinstance(reply, ErrorReply):
        raise StreamsError(f"a worker host answered with an unexpected {type(reply).__name__}")
    name, text, trace = reply.error_type, reply.message, reply.traceback
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, StreamsError):
        error = cls.__new__(cls)
        Exception.__init__(error, text)
    else:
        error = StreamsError(f"{name}: {text}")
    if hasattr(error, "add_note"):  # Python 3.11+
        error.add_note(f"in the worker host:\n{trace}")
    raise error


def host_names(
    state_dir: str | os.PathLike[str], application_id: str, task_ids: list[str]
) -> list[str]:
    """The hosts on this machine that hold tasks of the application (each named once)."""
    names: list[str] = []
    for task_id in task_ids:
        try:
            name = (Path(state_dir) / application_id / task_id / HOST_FILE).read_text().strip()
        except OSError:
            continue
        if name and name not in names:
            names.append(name)
    return names


def close_hosts(state_dir: str | os.PathLike[str], application_id: str, task_ids: list[str]) -> int:
    """Ask every worker host of the application's tasks on this machine to close its tasks
    and exit. Returns how many closed. ``close()`` of the processors runs in each.
    """
    closed = 0
    for name in host_names(state_dir, application_id, task_ids):
        try:
            reply = request(name, CloseRequest(), timeout_s=120.0)
        except (OSError, ConnectionError):
            continue
        if reply is not None:
            closed += 1
    return closed
