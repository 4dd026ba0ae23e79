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
(:func:`processor_api.state.json_entries.entry_fields`, bytes as base64). A range's page
comes back already rendered as the entries of the HTTP answer (:class:`RenderedEntries`:
each entry's JSON object with its task, position and consistency, as the driver would have
written it), carried after the frame's JSON and a newline (JSON as ``json.dumps`` writes it
holds no raw newline), so that neither the frame's JSON nor the driver decodes and encodes
every entry again: the driver joins the pages' text into its answer.
"""

from __future__ import annotations

import base64
import hmac
import itertools
import json
import math
import queue
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from json.encoder import encode_basestring
from typing import Any

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.runtime import query_bounds
from processor_api.runtime.job import parse_task_id
from processor_api.runtime.query_bounds import InputOffsets
from processor_api.schemas.registry_serdes import RegistryUnavailableError
from processor_api.state.base import KeyValue
from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.state.caching import CachingBytesStore
from processor_api.state.changelogging import ChangeLoggingBytesStore
from processor_api.state.json_entries import entry_fields, json_default
from processor_api.state.key_value import KeyValueIterator, KeyValueStore
from processor_api.state.rocksdb import RocksDBBytesStore
from processor_api.state.timestamped import TimestampedKeyValueStore
from processor_api.state.windowed_types import (
    MAX_TIMESTAMP,
    ValueAndTimestamp,
    VersionedRecord,
    Windowed,
)

#: The longest one read holds the loop thread (seconds); a read cut short says so.
SLICE_S = 0.005
#: The longest the loop spends on queued reads at one stop (seconds).
SERVE_BUDGET_S = 0.005
#: How long the link waits before dialing the router again after losing it.
REDIAL_S = 1.0
#: The longest a sender waits for its peer to take one frame (seconds): a peer that stopped
#: reading loses the connection instead of holding the sender.
SEND_DEADLINE_S = 2.0
#: A page read off the loop ends once its rendered entries pass this many characters (its
#: time is not bounded there, its frame is: the sender has SEND_DEADLINE_S for it).
MAX_PAGE_CHARS = 4 * 1024 * 1024
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
    return decode_frame(data)


def next_frame(buffer: bytearray) -> bytes | None:
    """The next whole frame's data in ``buffer`` (taken out of it), or None: not all of it
    has arrived. ``FrameError`` for a frame over :data:`MAX_FRAME_BYTES`."""
    if len(buffer) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack_from(buffer)
    if size > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {size} bytes is over the limit of {MAX_FRAME_BYTES}")
    end = _FRAME.size + size
    if len(buffer) < end:
        return None
    data = bytes(buffer[_FRAME.size : end])
    del buffer[:end]
    return data


class FrameReader:
    """Reads frames from one socket through a buffer: one ``recv`` brings every frame that
    has arrived (a frame and its length usually come in one), not two per frame."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def next(self) -> dict[str, Any] | None:
        """The next frame's message, or None when the peer closed the connection."""
        while (data := next_frame(self._buffer)) is None:
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        return decode_frame(data)


def decode_frame(data: bytes) -> dict[str, Any]:
    """A frame's message from its data (as :func:`next_frame` gives it)."""
    head, newline, attachment = data.partition(b"\n")
    try:
        message = json.loads(head)
    except ValueError as exc:
        raise FrameError(f"a frame that is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError(f"a frame that is not a JSON object: {type(message).__name__}")
    if newline:
        body = message.get("body")
        count = body.pop(_RENDERED, None) if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(count, int):
            raise FrameError("a frame with entries after its JSON that does not count them")
        body["entries"] = RenderedEntries(attachment, count)
    return message


def encode_frame(message: dict[str, Any]) -> bytes:
    """``message`` as one frame (its length, then its JSON); a reply whose body's
    ``entries`` are :class:`RenderedEntries` carries their text after the JSON."""
    body = message.get("body")
    rendered = body.get("entries") if isinstance(body, dict) else None
    if isinstance(rendered, RenderedEntries):
        body = {**body, "entries": None, _RENDERED: rendered.count}  # type: ignore[dict-item]
        head = json.dumps({**message, "body": body}, default=json_default, ensure_ascii=False)
        data = b"".join((head.encode(), b"\n", rendered.data))
    else:
        data = json.dumps(message, default=json_default, ensure_ascii=False).encode()
    return _FRAME.pack(len(data)) + data


#: The field of a reply's body that counts the rendered entries after the frame's JSON.
_RENDERED = "rendered_entries"


class RenderedEntries:
    """A page's entries as the HTTP answer writes them: ``data`` is their JSON objects
    (UTF-8) joined by ``", "``, as ``json.dumps`` (``ensure_ascii=False``, bytes as base64)
    writes the items of a list; ``count`` how many there are."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.count = count

    def parsed(self) -> list[dict[str, Any]]:
        """The entries as Python objects (for tests and in-process callers)."""
        return list(json.loads(b"[" + self.data + b"]"))

    def __repr__(self) -> str:
        return f"RenderedEntries({self.count} entries, {len(self.data)} bytes)"


_ENCODE = json.JSONEncoder(default=json_default, ensure_ascii=False).encode
#: Types whose JSON is made without the encoder's dispatch (as ``json.dumps`` makes it).
_FAST_JSON: dict[type, Callable[[Any], str]] = {str: encode_basestring, int: int.__repr__}


def entry_tail(task: str, body: dict[str, Any]) -> str:
    """What follows an entry's own fields in the HTTP answer: the task that answered and
    the ``position``, ``input_position`` and ``consistency`` of its page (the driver's
    ``query.server._entry``), from ``", "`` to the closing brace."""
    fields = {"task": task, "position": body.get("position"),
              "input_position": body.get("input_position"),
              "consistency": body.get("consistency")}  # fmt: skip
    return ", " + _ENCODE(fields)[1:]


def render_entry(fields: dict[str, Any], tail: str) -> str:
    """One entry (its fields, as :func:`entry_fields` gives them) as the HTTP answer writes
    it, ``tail`` (:func:`entry_tail`) after its fields."""
    return _ENCODE(fields)[:-1] + tail


def render_entries(entries: Iterable[tuple[Any, Any]], tail: str) -> list[str]:
    """Each entry as :func:`render_entry` writes it (the same text), made without a dict
    per entry for a plain key and a plain or timestamped value."""
    fast = _FAST_JSON
    encode = _ENCODE
    texts = []
    for key, value in entries:
        if isinstance(key, Windowed):
            texts.append(render_entry(entry_fields(KeyValue(key, value)), tail))
            continue
        key_json = (fast.get(type(key)) or encode)(key)
        if isinstance(value, ValueAndTimestamp):
            inner, stamp = value.value, value.timestamp
            value_json = (fast.get(type(inner)) or encode)(inner)
            stamp_json = (fast.get(type(stamp)) or encode)(stamp)
            texts.append(
                f'{{"key": {key_json}, "value": {value_json}, "timestamp": {stamp_json}{tail}'
            )
        elif isinstance(value, VersionedRecord):
            texts.append(render_entry(entry_fields(KeyValue(key, value)), tail))
        else:
            value_json = (fast.get(type(value)) or encode)(value)
            texts.append(f'{{"key": {key_json}, "value": {value_json}{tail}')
    return texts


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
        # range pages whose iterators the loop opened, read and answered by a thread of
        # their own (TaskStoreReader.defer)
        self._page_jobs: queue.SimpleQueue[tuple[dict[str, Any], PageJob] | None] = (
            queue.SimpleQueue()
        )
        self._pages_thread: threading.Thread | None = None
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

    def _read_page_later(self, message: dict[str, Any], job: PageJob) -> None:
        """Hand a range page whose iterator the loop opened to the pages thread, which reads,
        renders and answers it (started with the first)."""
        with self._outbox_ready:
            if self._pages_thread is None:
                self._pages_thread = threading.Thread(
                    target=self._read_pages, name="query-link-pages", daemon=True
                )
                self._pages_thread.start()
        self._page_jobs.put((message, job))

    def _read_pages(self) -> None:
        while True:
            item = self._page_jobs.get()
            if item is None:
                return
            message, job = item
            self.reply(message, *job())

    def close(self) -> None:
        """Stop dialing and drop the connection."""
        self._page_jobs.put(None)
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
            defer = getattr(store_reader, "defer", None)
            job = None if defer is None else defer(message)
            if job is not None:
                self._read_page_later(message, job)
            elif store_reader is None:
                self.reply(
                    message, 503, {"error": f"task {task} left this worker", "code": "unavailable"}
                )
            else:
                self.reply(message, *store_reader.answer(message))
            served += 1
            if time.monotonic() >= deadline:
                if not self.inbox.empty():
                    self._wake()  # the rest at the loop's next stop, without it waiting
                return served


@dataclass(slots=True)
class _ReadTarget:
    """What a read request reads: the store (or its committed view) and the answer's body
    without its entries."""

    name: str
    store: Any
    body: dict[str, Any]


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

    def defer(self, request: dict[str, Any]) -> PageJob | None:
        """A range read of a store whose open iterator may be read on another thread: the
        iterator opened now (on the loop thread: a snapshot of the store's view, the batch's
        entries copied and a RocksDB iterator, which reads the DB as it was when opened),
        and what reads, renders and answers its page later, on the link's pages thread,
        without a time slice (the loop is not held). None: :meth:`answer` it on the loop."""
        if request.get("kind") != "range":
            return None
        target = self._target(request)
        if not isinstance(target, _ReadTarget) or not ranges_off_loop(target.store):
            return None  # answer() says what is wrong, on the loop
        name, store, body = target.name, target.store, target.body
        after = request.get("after")
        try:
            lo = decode_key(after if after is not None else request.get("from"), store)
            entries = store.range(lo, decode_key(request.get("to"), store))
            raw = entries.raw_entries()
        except Exception:  # noqa: BLE001 - answer() names it, on the loop
            return None
        if raw is None:
            entries.close()
            return None
        skip = None if after is None else base64.b64decode(after)
        limit = max(1, int(request.get("limit") or 1))
        tail = entry_tail(self.task_id, body)
        where = f"store {name!r}, task {self.task_id}"

        def read() -> tuple[int, dict[str, Any]]:
            try:
                texts, more, last = _raw_page(raw[0], raw[1], skip, limit, tail, None)
            except StoreError as exc:  # closed meanwhile: the task left or is rebuilt
                return 503, {"error": f"{where}: {exc}", "code": "unavailable"}
            except Exception as exc:  # noqa: BLE001 - named in the answer
                return _failure(where, exc)
            finally:
                entries.close()
            body["entries"] = RenderedEntries(", ".join(texts).encode(), len(texts))
            body["more"], body["last"] = more, _encode(last) if more and last else None
            return 200, body

        return read

    def _target(self, request: dict[str, Any]) -> _ReadTarget | tuple[int, dict[str, Any]]:
        """The store view a read request asks for and its answer's body without entries; or
        the refusal (HTTP status, body): an unknown store, a position bound not reached."""
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
        return _ReadTarget(name, store, self._body(name, committed, input_position))

    def _body(self, name: str, committed: bool, input_position: Any) -> dict[str, Any]:
        """An answer's body without its entries: where the read stands (position,
        consistency, the input position a bound was checked against)."""
        body: dict[str, Any] = {
            "entries": [],
            "more": False,
            "last": None,
            "position": self._position(name),
            "consistency": "committed" if committed else "live",
        }
        return query_bounds.with_position(body, input_position)

    def answer(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) for one read request."""
        target = self._target(request)
        if not isinstance(target, _ReadTarget):
            return target
        name, store, body = target.name, target.store, target.body
        try:
            if request.get("kind") == "range":
                entries, more, last = _range_page(store, request, entry_tail(self.task_id, body))
                body["entries"] = entries
                body["more"], body["last"] = more, _encode(last) if more and last else None
            else:
                found, more = _read(store, request)
                body["entries"] = [entry_fields(entry) for entry in found]
                if more and found:
                    last_key = found[-1].key
                    body["last"] = _encode(store.key_serde.serialize(_plain_key(last_key)))
                body["more"] = more
        except Exception as exc:  # noqa: BLE001 - named in the answer
            return _failure(f"store {name!r}, task {self.task_id}", exc)
        return 200, body


def _range_page(
    store: Any, request: dict[str, Any], tail: str
) -> tuple[RenderedEntries, bool, bytes | None]:
    """A range read's page rendered (:class:`RenderedEntries`), whether more follow, and
    the serialized key of its last entry. A key-value store's entries are read as the raw
    bytes of its merged view (:meth:`KeyValueIterator.raw_entries`), deserialized and
    rendered a batch at a time, all of it within the read's time slice; any other store
    through its typed iterator."""
    limit = max(1, int(request.get("limit") or 1))
    after = request.get("after")
    lo = decode_key(after if after is not None else request.get("from"), store)
    entries = store.range(lo, decode_key(request.get("to"), store))
    try:
        raw = entries.raw_entries() if isinstance(entries, KeyValueIterator) else None
        if raw is None:
            page, more = _page(entries, decode_key(after, store), limit)
            texts = render_entries(page, tail)
            last = store.key_serde.serialize(_plain_key(page[-1].key)) if page else None
        else:
            skip = None if after is None else base64.b64decode(after)
            texts, more, last = _raw_page(raw[0], raw[1], skip, limit, tail)
    finally:
        close = getattr(entries, "close", None)
        if close is not None:
            close()
    return RenderedEntries(", ".join(texts).encode(), len(texts)), more, last


def _raw_page(
    store: Any,
    pairs: Iterator[tuple[bytes, bytes]],
    skip: bytes | None,
    limit: int,
    tail: str,
    slice_s: float | None = -1.0,
) -> tuple[list[str], bool, bytes | None]:
    """As :func:`_page`, over raw ``(key, value)`` bytes deserialized with ``store``'s
    serdes and rendered (:func:`render_entries`) batch by batch; and the last key's bytes.
    ``slice_s``: the time slice (-1: ``SLICE_S``; None: none, ``limit`` entries or
    :data:`MAX_PAGE_CHARS` of text, whichever comes first)."""
    if slice_s is not None and slice_s < 0:
        slice_s = SLICE_S
    deadline = math.inf if slice_s is None else time.monotonic() + slice_s
    key_of, value_of = store.key_serde.deserialize, store.value_serde.deserialize
    texts: list[str] = []
    last = None
    iterator = iter(pairs)
    if skip is not None:
        first = next(iterator, None)
        if first is None:
            return texts, False, None
        if first[0] != skip:
            iterator = itertools.chain((first,), iterator)
    chars = 0
    while len(texts) < limit:
        want = min(64, limit - len(texts))
        batch = list(islice(iterator, want))
        if batch:
            rendered = render_entries([(key_of(k), value_of(v)) for k, v in batch], tail)
            texts.extend(rendered)
            chars += sum(map(len, rendered))
            last = batch[-1][0]
        if len(batch) < want:
            return texts, False, last  # the store ran out
        if time.monotonic() >= deadline or chars >= MAX_PAGE_CHARS:
            break
    return texts, next(iterator, None) is not None, last


def _failure(where: str, exc: Exception) -> tuple[int, dict[str, Any]]:
    """The answer to a read that failed: 503 when the store's registry does not answer (the
    data may be right: ask again later), else 400 naming the serde's or store's error."""
    if isinstance(exc, RegistryUnavailableError):
        return 503, {"error": f"{where}: {exc}", "code": "registry_unavailable"}
    return 400, {"error": f"{where}: {type(exc).__name__}: {exc}", "code": "bad_request"}


#: Reads, renders and answers a range page off the loop (:meth:`TaskStoreReader.defer`).
PageJob = Callable[[], tuple[int, dict[str, Any]]]

_RANGE_FACADES = (KeyValueStore, TimestampedKeyValueStore)
_RANGE_LAYERS = (CachingBytesStore, ChangeLoggingBytesStore, BatchBufferBytesStore)


def ranges_off_loop(store: Any) -> bool:
    """Whether an open range iterator of ``store`` may be read on another thread than the
    task's loop: a plain or timestamped key-value facade over only write-back caches,
    change logging and batch buffers (each copies its entries of the range when the
    iterator opens) over RocksDB (whose iterator reads the DB as it was when opened, while
    the loop writes on, and after the store closes raises ``StoreError``). No TTL layer, no
    in-memory store (its iterators share its data with the loop's writes)."""
    if type(store) not in _RANGE_FACADES:
        return False
    layer = store.bytes_store
    while type(layer) in _RANGE_LAYERS:
        layer = layer.inner
    return type(layer) is RocksDBBytesStore


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
    """The request's entries (a page) and whether more follow; ranges: :func:`_range_page`."""
    kind = request.get("kind")
    limit = max(1, int(request.get("limit") or 1))
    if kind == "key":
        key = decode_key(request.get("key"), store)
        as_of = request.get("as_of")
        value = store.get(key) if as_of is None else store.get(key, int(as_of))
        return ([KeyValue(key, value)] if value is not None else []), False
    if kind == "window":
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
