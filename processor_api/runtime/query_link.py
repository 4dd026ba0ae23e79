"""A worker host's side of interactive queries: its link to the driver's query router.

A run with ``--query-port`` names in its job spec the address of the driver's router
(``processor_api/query/router.py``) and a secret of the run. Each worker host dials out to
it (executors always reach the driver, the driver need not reach them), says who it is and
which tasks it holds, and then gets reads over that connection:

* the link's thread reads them from the socket; a point read of a key-value store it
  answers itself (``off_loop_reads.py``: no wait for the loop); any other read, of a task
  the host holds and that is not restoring, it queues and wakes the host's loop (``wake``);
  a read of a task not held or restoring is answered here at once with 503, so a restore
  never holds up an answer;
* the loop thread, between task turns and between processing chunks (the stores and their
  caches are not thread-safe), takes queued reads for a few milliseconds
  (:meth:`QueryLink.serve`) and answers each with at most one page: ``limit`` entries or
  ``SLICE_S`` of reading, whichever ends first, and whether more follows.

Neither thread ever waits on the router: the loop thread and the reader only put replies on
a bounded outbox (a full one drops the reply: the router answers 503 when its wait ends), and
a sender thread of the connection sends them, each frame within ``SEND_DEADLINE_S``. A send
that fails or misses its deadline closes the connection (a frame cut short is never followed
by another), logged once as ``query_router_lost``, and the link dials again.

Frames are a 4-byte big-endian length and a JSON object. Keys travel serialized (base64) in
the store's own key serde; entries come back rendered as ``read-store`` renders them
(:func:`processor_api.state.json_entries.entry_fields`, bytes as base64).
"""

from __future__ import annotations

import base64
import hmac
import json
import queue
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

from processor_api.logging import get_logger
from processor_api.runtime import query_bounds
from processor_api.runtime.job import parse_task_id
from processor_api.runtime.query_bounds import InputOffsets
from processor_api.schemas.registry_serdes import RegistryUnavailableError
from processor_api.state.base import KeyValue
from processor_api.state.json_entries import entry_fields, json_default
from processor_api.state.windowed_types import MAX_TIMESTAMP, Windowed

#: The longest one read holds the loop thread (seconds); a read cut short says so.
SLICE_S = 0.005
#: The longest the loop spends on queued reads at one stop (seconds).
SERVE_BUDGET_S = 0.005
#: How long the link waits before dialing the router again after losing it.
REDIAL_S = 1.0
#: The longest a sender waits for its peer to take one frame (seconds): a peer that stopped
#: reading loses the connection instead of holding the sender.
SEND_DEADLINE_S = 2.0
#: Replies waiting for the link's sender at most; one more is dropped.
OUTBOX_REPLIES = 64
_FRAME = struct.Struct(">I")
#: A frame larger than this is a broken peer, not a page.
MAX_FRAME_BYTES = 256 * 1024 * 1024


class FrameError(ConnectionError):
    """The peer sent something that is not a frame of this protocol."""


def send_frame(
    sock: socket.socket, message: dict[str, Any], deadline_s: float | None = None
) -> None:
    """Send ``message`` as one frame; with ``deadline_s``, all of it within that many seconds
    or ``TimeoutError`` (part of the frame may have gone: the connection is unusable then).
    The deadline leaves the socket blocking, so a thread may be receiving on it meanwhile."""
    frame = encode_frame(message)
    if deadline_s is None:
        sock.sendall(frame)
    else:
        _send_within(sock, frame, deadline_s)


def _send_within(sock: socket.socket, data: bytes, deadline_s: float) -> None:
    # MSG_DONTWAIT and poll rather than settimeout(): a timeout would apply to the
    # receiving thread's recv() on the same socket as well
    deadline = time.monotonic() + deadline_s
    view = memoryview(data)
    writable = select.poll()
    writable.register(sock, select.POLLOUT)
    while True:
        try:
            view = view[sock.send(view, socket.MSG_DONTWAIT) :]
        except BlockingIOError:
            pass
        if not view:
            return
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            raise TimeoutError(
                f"the peer took {len(data) - len(view)} of a frame's {len(data)} bytes "
                f"within {deadline_s:g}s"
            )
        writable.poll(max(1, int(left_s * 1000)))


def _receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive_frame(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame's message, or None when the peer closed the connection."""
    header = _receive_exactly(sock, _FRAME.size)
    if header is None:
        return None
    (size,) = _FRAME.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {size} bytes is over the limit of {MAX_FRAME_BYTES}")
    data = _receive_exactly(sock, size)
    if data is None:
        return None
    return _decode(data)


class FrameReader:
    """Reads frames from one socket through a buffer: one ``recv`` brings every frame that
    has arrived (a frame and its length usually come in one), not two per frame."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def next(self) -> dict[str, Any] | None:
        """The next frame's message, or None when the peer closed the connection."""
        buffer = self._buffer
        while True:
            if len(buffer) >= _FRAME.size:
                (size,) = _FRAME.unpack_from(buffer)
                if size > MAX_FRAME_BYTES:
                    raise FrameError(
                        f"a frame of {size} bytes is over the limit of {MAX_FRAME_BYTES}"
                    )
                end = _FRAME.size + size
                if len(buffer) >= end:
                    data = bytes(buffer[_FRAME.size : end])
                    del buffer[:end]
                    return _decode(data)
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                return None
            buffer += chunk


def _decode(data: bytes) -> dict[str, Any]:
    try:
        message = json.loads(data)
    except ValueError as exc:
        raise FrameError(f"a frame that is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError(f"a frame that is not a JSON object: {type(message).__name__}")
    return message


def encode_frame(message: dict[str, Any]) -> bytes:
    """``message`` as one frame (its length, then its JSON)."""
    data = json.dumps(message, default=json_default, ensure_ascii=False).encode()
    return _FRAME.pack(len(data)) + data


def secret_matches(given: object, expected: str) -> bool:
    """Whether ``given`` is the run's secret (compared in constant time)."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


class _Connection:
    """One connection of a link to the router, and why it ended."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.ended = False
        self.reason = ""
        self.failed_send = False
        self._lock = threading.Lock()

    def end(self, reason: str, failed_send: bool = False) -> None:
        """End the connection (the first reason is kept); both threads see it end."""
        with self._lock:
            if self.ended:
                return
            self.ended, self.reason, self.failed_send = True, reason, failed_send
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # the reader's recv() returns
        except OSError:
            pass


class QueryLink:
    """The connection of one worker host to the driver's query router (see the module docs).

    ``address`` is ``host:port``; ``holder(task_id)`` says whether the host holds the task
    and whether it can be read now (``None``: it can; else why not); ``wake`` is called from
    the link's thread when a read was queued; ``direct(task_id, request)``, if given, answers
    a read on the link's thread ((status, body)) or says None: queue it for the loop.
    """

    def __init__(
        self,
        address: str,
        secret: str,
        host_name: str,
        holder: Callable[[str], str | None],
        wake: Callable[[], None],
        direct: Callable[[str, dict[str, Any]], tuple[int, dict[str, Any]] | None] | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        self._address = (host, int(port))
        self._secret = secret
        self._host_name = host_name
        self._holder = holder
        self._wake = wake
        self._direct = direct
        self._tasks: tuple[str, ...] = ()
        self._router = f"{self._address[0]}:{self._address[1]}"
        self._sock: socket.socket | None = None
        # what waits for the sender: replies, and whether the tasks changed since last sent
        self._outbox: deque[bytes] = deque()
        self._tasks_changed = False
        self._outbox_ready = threading.Condition()
        # held by whoever sends on the socket (the sender thread, or the reader answering
        # a point read at once): frames never interleave
        self._send_lock = threading.Lock()
        # the rest of a frame the reader began to send: it goes before anything else
        self._partial: bytes | None = None
        self._connection: _Connection | None = None
        self._closed = threading.Event()
        self.inbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._log = get_logger("processor_api.query_link", host=host_name)
        self._thread = threading.Thread(target=self._run, name="query-link", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ link thread
    def _run(self) -> None:
        warned = False
        while not self._closed.is_set():
            try:
                sock = socket.create_connection(self._address, timeout=10.0)
            except OSError as exc:
                if not warned:
                    warned = True
                    self._log.warning(
                        "query_router_unreachable", router=self._router, error=str(exc)
                    )
                self._closed.wait(REDIAL_S)
                continue
            warned = False
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(sock)
            with self._outbox_ready:
                self._outbox.clear()  # replies to the reads of a connection that ended
                self._partial = None
                self._tasks_changed = True  # the hello is followed by the tasks
                self._sock = sock
                self._connection = connection
            sender = threading.Thread(
                target=self._send_all, args=(connection,), name="query-link-send", daemon=True
            )
            try:
                send_frame(sock, {"op": "hello", "secret": self._secret,
                                  "host": self._host_name}, SEND_DEADLINE_S)  # fmt: skip
                sender.start()
                self._read(sock)
                connection.end("the router closed the connection")
            except (OSError, FrameError) as exc:
                connection.end(f"{type(exc).__name__}: {exc}")
            finally:
                with self._outbox_ready:
                    self._sock = None
                    self._connection = None
                    self._outbox_ready.notify_all()
                if sender.is_alive():
                    sender.join()
                sock.close()
            if connection.failed_send and not self._closed.is_set():
                self._log.warning("query_router_lost", router=self._router, error=connection.reason)
            else:
                self._log.debug("query_router_lost", router=self._router, error=connection.reason)
            self._closed.wait(REDIAL_S)

    def _read(self, sock: socket.socket) -> None:
        frames = FrameReader(sock)
        while True:
            message = frames.next()
            if message is None:
                return
            if message.get("op") != "read":
                continue
            task = str(message.get("task"))
            refusal = self._holder(task)
            if refusal is not None:
                self.reply(message, 503, {"error": refusal, "code": "unavailable"})
                continue
            answer = None if self._direct is None else self._direct(task, message)
            if answer is not None:
                self._reply_now(message, *answer)
                continue
            self.inbox.put(message)
            self._wake()

    # ---------------------------------------------------------- sender thread
    def _send_all(self, connection: _Connection) -> None:
        """Send what the outbox holds until the connection ends; a send that fails or
        misses its deadline ends it (the reader then sees it closed)."""
        while True:
            with self._outbox_ready:
                while not (
                    connection.ended or self._partial or self._tasks_changed or self._outbox
                ):
                    self._outbox_ready.wait()
                if connection.ended:
                    return
            with self._send_lock:
                with self._outbox_ready:
                    if self._partial is not None:  # the rest of the reader's frame first
                        data, self._partial = self._partial, None
                    elif self._tasks_changed:
                        self._tasks_changed = False
                        data = encode_frame({"op": "tasks", "tasks": list(self._tasks)})
                    elif self._outbox:
                        data = self._outbox.popleft()
                    else:
                        continue
                try:
                    _send_within(connection.sock, data, SEND_DEADLINE_S)
                except OSError as exc:
                    connection.end(f"{type(exc).__name__}: {exc}", failed_send=True)
                    return

    # ---------------------------------------------------------------- either
    def set_tasks(self, tasks: Iterable[str]) -> None:
        """Tell the router which tasks this host holds now (never waits for it)."""
        with self._outbox_ready:
            self._tasks = tuple(sorted(tasks))
            self._tasks_changed = True
            self._outbox_ready.notify_all()

    def reply(self, request: dict[str, Any], status: int, body: dict[str, Any]) -> None:
        """Answer ``request`` (never waits for the router; dropped if it is gone or does not
        keep up: it answers 503 itself when its wait ends)."""
        data = encode_frame(
            {"op": "reply", "id": request.get("id"), "status": status, "body": body}
        )
        with self._outbox_ready:
            if self._sock is None or len(self._outbox) >= OUTBOX_REPLIES:
                return
            self._outbox.append(data)
            self._outbox_ready.notify_all()

    def _reply_now(self, request: dict[str, Any], status: int, body: dict[str, Any]) -> None:
        """Answer ``request`` from the link's thread: sent at once when nothing else waits
        to be sent and the socket takes it without waiting (no hand-off to the sender
        thread: one thread wake and two interpreter-lock hand-offs fewer per lookup), else
        as :meth:`reply`. What the socket does not take at once the sender sends next."""
        data = encode_frame(
            {"op": "reply", "id": request.get("id"), "status": status, "body": body}
        )
        with self._outbox_ready:
            connection = self._connection
            if connection is None or len(self._outbox) >= OUTBOX_REPLIES:
                return
            if (
                self._outbox
                or self._partial is not None
                or self._tasks_changed
                or not self._send_lock.acquire(blocking=False)
            ):
                self._outbox.append(data)
                self._outbox_ready.notify_all()
                return
        try:
            try:
                sent = connection.sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                connection.end(f"{type(exc).__name__}: {exc}", failed_send=True)
                return
            if sent < len(data):
                with self._outbox_ready:
                    self._partial = data[sent:]
                    self._outbox_ready.notify_all()
        finally:
            self._send_lock.release()

    def close(self) -> None:
        """Stop dialing and drop the connection."""
        self._closed.set()
        with self._outbox_ready:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ------------------------------------------------------------ loop thread
    def serve(self, reader: Callable[[str], Any], budget_s: float = SERVE_BUDGET_S) -> int:
        """Answer queued reads for up to ``budget_s`` (on the loop thread); ``reader(task)``
        gives the task's :class:`TaskStoreReader`, or None when the host no longer holds
        it. Returns how many were answered."""
        deadline = time.monotonic() + budget_s
        served = 0
        while True:
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return served
            task = str(message.get("task"))
            store_reader = reader(task)
            if store_reader is None:
                status, body = (
                    503,
                    {"error": f"task {task} left this worker", "code": "unavailable"},
                )
            else:
                status, body = store_reader.answer(message)
            self.reply(message, status, body)
            served += 1
            if time.monotonic() >= deadline:
                if not self.inbox.empty():
                    self._wake()  # the rest at the loop's next stop, without it waiting
                return served


class TaskStoreReader:
    """Answers reads of one task's stores (on the loop thread).

    ``stacks`` are the task's open store stacks by name, ``committed_view(name)`` a typed,
    read-only view of a store's committed contents, ``position(name)`` the changelog offset
    of the task's last commit, ``input_offsets(committed)`` the task's next input offsets
    per topic (``query_bounds.py``: a read's position bound is checked against them; None:
    unknown, a bound is never reached).
    """

    def __init__(
        self,
        task_id: str,
        stacks: dict[str, Any],
        committed_view: Callable[[str], Any],
        position: Callable[[str], int | None],
        input_offsets: InputOffsets | None = None,
    ) -> None:
        self.task_id = task_id
        self._stacks = stacks
        self._committed_view = committed_view
        self._position = position
        self._input_offsets = input_offsets
        self._partition = parse_task_id(task_id)[1]

    def answer(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) for one read request."""
        name = str(request.get("store"))
        stack = self._stacks.get(name)
        if stack is None:
            return 404, {"error": f"task {self.task_id} has no store {name!r}",
                         "code": "unknown_store"}  # fmt: skip
        committed = bool(request.get("committed"))
        input_position, refusal = query_bounds.check(
            self.task_id, self._partition, self._input_offsets, request
        )
        if refusal is not None:
            return refusal
        store = self._committed_view(name) if committed else stack.store
        try:
            entries, more = _read(store, request)
            last = entries[-1].key if entries else None
            rendered = [entry_fields(entry) for entry in entries]
            last_b64 = _encode(store.key_serde.serialize(_plain_key(last))) if more else None
        except RegistryUnavailableError as exc:  # the data may be right: ask again later
            return 503, {"error": f"store {name!r}, task {self.task_id}: {exc}",
                         "code": "registry_unavailable"}  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a serde or store error, named in the answer
            return 400, {"error": f"store {name!r}, task {self.task_id}: "
                                  f"{type(exc).__name__}: {exc}", "code": "bad_request"}  # fmt: skip
        body = {
            "entries": rendered,
            "more": more,
            "last": last_b64,
            "position": self._position(name),
            "consistency": "committed" if committed else "live",
        }
        return 200, query_bounds.with_position(body, input_position)


def _encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def decode_key(text: str | None, store: Any) -> Any:
    """A key sent serialized (base64) back to the store's key type (None stays None)."""
    if text is None:
        return None
    return store.key_serde.deserialize(base64.b64decode(text))


def _plain_key(key: Any) -> Any:
    return key.key if isinstance(key, Windowed) else key


def _read(store: Any, request: dict[str, Any]) -> tuple[list[KeyValue], bool]:
    """The request's entries (a page) and whether more follow."""
    kind = request.get("kind")
    limit = max(1, int(request.get("limit") or 1))
    if kind == "key":
        key = decode_key(request.get("key"), store)
        as_of = request.get("as_of")
        value = store.get(key) if as_of is None else store.get(key, int(as_of))
        return ([KeyValue(key, value)] if value is not None else []), False
    if kind == "range":
        after = decode_key(request.get("after"), store)
        lo = after if after is not None else decode_key(request.get("from"), store)
        hi = decode_key(request.get("to"), store)
        entries = store.range(lo, hi)
        skip = after
    elif kind == "window":
        key = decode_key(request.get("key"), store)
        time_from = int(request.get("time_from") or 0)
        time_to = MAX_TIMESTAMP if request.get("time_to") is None else int(request["time_to"])
        entries, skip = store.fetch(key, key, time_from, time_to), None
    elif kind == "session":
        key = decode_key(request.get("key"), store)
        entries, skip = store.fetch(key), None
    else:
        raise ValueError(f"unknown read kind {kind!r}")
    try:
        return _page(entries, skip, limit)
    finally:
        close = getattr(entries, "close", None)
        if close is not None:
            close()


def _page(entries: Iterator[KeyValue], skip: Any, limit: int) -> tuple[list[KeyValue], bool]:
    """Up to ``limit`` entries (the first left out if its key is ``skip``: the previous
    page's last), or fewer once ``SLICE_S`` is spent; and whether more follow."""
    deadline = time.monotonic() + SLICE_S
    page: list[KeyValue] = []
    iterator = iter(entries)
    if skip is not None:
        first = next(iterator, None)
        if first is None:
            return page, False
        if first.key != skip:
            page.append(first)
    while len(page) < limit:
        want = min(64, limit - len(page))
        batch = list(islice(iterator, want))
        page.extend(batch)
        if len(batch) < want:
            return page, False  # the iterator ran out
        if time.monotonic() >= deadline:
            break
    return page, next(iterator, None) is not None
