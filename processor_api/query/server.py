"""The query endpoint of a run (``run-topology --query-port``): HTTP with JSON on the driver.

    GET /stores                                   the stores, their kinds and tasks
    GET /stores/{store}/keys/{key}[?as_of=T]      one key (versioned stores: as of T)
    GET /stores/{store}/range?from=&to=           keys in [from, to], paged
    GET /stores/{store}/all                       every entry, paged
    GET /stores/{store}/window?key=&from=&to=     a window store's windows of a key
    GET /stores/{store}/sessions?key=             a session store's sessions of a key

Every read takes ``committed=true`` (only what the task's last commit covered),
``position_bound=topic:partition:offset[,...]`` (read-your-writes: only an answer whose task
has processed those input offsets, :mod:`processor_api.query.position`; else 503
``not_up_to_bound`` at once, naming the bound and the task's ``input_position``), and the
paged ones ``limit`` (at most :data:`MAX_PAGE`) and ``page`` (the previous answer's
``next``). A key is routed to its task (:mod:`processor_api.query.routing`) and read by the
worker holding it (:mod:`processor_api.query.router`). Errors are JSON ``{"error", "code"}``
with 400 (bad query, malformed bound), 401 (token), 404 (unknown store, missing key), 503
with ``Retry-After`` (task restoring, moving or not started; position bound not reached).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import json
import selectors
import socket
import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from processor_api.logging import get_logger
from processor_api.query.errors import (
    ERRORS_BY_CODE,
    BadQueryError,
    KeyNotFoundError,
    NotFoundError,
    QueryError,
    UnauthorizedError,
)
from processor_api.query.event_loop import Connection, EventLoop
from processor_api.query.position import PARAMETER, PositionBound
from processor_api.query.router import HostRouter, Outcome
from processor_api.query.routing import StoreRoute, StoreRoutes, encode_key
from processor_api.runtime.query_link import RenderedEntries, entry_tail, render_entry
from processor_api.state.json_entries import json_default
from processor_api.state.selection import (
    KEY_VALUE_KINDS,
    SESSION_KINDS,
    VERSIONED_KINDS,
    WINDOW_KINDS,
)

#: The largest page a read returns (entries); the default is :data:`DEFAULT_PAGE`.
MAX_PAGE = 10_000
DEFAULT_PAGE = 1_000

_log = get_logger("processor_api.query_server")


class EncodedJSON:
    """An answer's JSON body, already encoded (UTF-8) as ``json.dumps`` would write it."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


Answer = dict[str, Any] | EncodedJSON
#: A read sent to a worker: (task, request).
Ask = tuple[str, dict[str, Any]]
#: A read's steps: they yield each read they send to a worker (:data:`Ask`), are sent its
#: outcome (its (status, body), or the ``QueryError`` it ended in), and return the JSON
#: answer. The query loop runs them without waiting (:class:`QueryServer`);
#: :meth:`QueryEndpoint.answer` runs them on the calling thread.
Steps = Generator[Ask, Outcome, Answer]
_Asking = Generator[Ask, Outcome, dict[str, Any]]


class QueryEndpoint:
    """Answers the endpoint's reads (without HTTP: the server runs :meth:`steps`)."""

    def __init__(self, routes: StoreRoutes, router: HostRouter) -> None:
        self.routes = routes
        self.router = router

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """The JSON answer to ``GET path?params`` as Python objects; raises a
        :class:`QueryError`."""
        answer = self.answer(path, params)
        return json.loads(answer.data) if isinstance(answer, EncodedJSON) else answer

    def answer(self, path: str, params: dict[str, str]) -> Answer:
        """The JSON answer to ``GET path?params``, as Python objects or (a range's page)
        already encoded, waiting for the workers on this thread (not the query loop's);
        raises a :class:`QueryError`."""
        steps = self.steps(path, params)
        try:
            task, request = next(steps)
            while True:
                task, request = steps.send(self._outcome(task, request))
        except StopIteration as stop:
            answer: Answer = stop.value
            return answer

    def _outcome(self, task: str, request: dict[str, Any]) -> Outcome:
        try:
            return self.router.ask(task, request)
        except QueryError as exc:
            return exc

    def may_wait(self, path: str) -> bool:
        """Whether ``GET path``'s first step may wait: its store's keys are serialized
        with a Schema Registry serde (the first key of a schema asks the registry)."""
        parts = path.split("/")
        if len(parts) < 4 or parts[1] != "stores":
            return False
        route = self.routes.find(unquote(parts[2]))
        return route is not None and route.keys_need_registry

    def steps(self, path: str, params: dict[str, str]) -> Steps:
        """The steps of ``GET path?params`` (see :data:`Steps`)."""
        parts = [unquote(p) for p in path.split("/")[1:]]
        if parts == ["stores"]:
            return {"stores": self.routes.describe()}
        if len(parts) < 3 or parts[0] != "stores":
            raise NotFoundError(f"no endpoint {path!r}; see /stores")
        route = self.routes.route(parts[1])
        committed = _flag(params, "committed")
        bound = _bound(route, params)
        if parts[2] == "keys" and len(parts) == 4:
            return (yield from self._key(route, parts[3], committed, params.get("as_of"), bound))
        if len(parts) == 3 and parts[2] in ("range", "all"):
            if parts[2] == "all":
                params = {k: v for k, v in params.items() if k not in ("from", "to")}
            return (yield from self._range(route, params, committed, bound))
        if len(parts) == 3 and parts[2] in ("window", "sessions"):
            return (yield from self._fetch(route, parts[2], params, committed, bound))
        raise NotFoundError(
            f"no endpoint {path!r} for a store; see the manual's Interactive queries page"
        )

    # ------------------------------------------------------------------ key
    def _key(
        self,
        route: StoreRoute,
        text: str,
        committed: bool,
        as_of: str | None,
        bound: PositionBound | None,
    ) -> _Asking:
        if route.kind not in KEY_VALUE_KINDS + VERSIONED_KINDS:
            what = "sessions" if route.kind in SESSION_KINDS else "window"
            raise BadQueryError(
                f"store {route.name!r} is a {route.kind} store: read it with "
                f"/stores/{route.name}/{what}?key=..."
            )
        if as_of is not None and route.kind not in VERSIONED_KINDS:
            raise BadQueryError(
                f"as_of reads versioned stores only; {route.name!r} is {route.kind}"
            )
        key = route.key_bytes(text)
        task = route.task_for(key)
        request = {"store": route.name, "kind": "key", "key": encode_key(key),
                   "committed": committed, "limit": 1}  # fmt: skip
        if as_of is not None:
            request["as_of"] = _timestamp("as_of", as_of)
        answer = yield from self._ask(task, request, bound)
        if not answer["entries"]:
            raise KeyNotFoundError(
                f"store {route.name!r} holds no value for key {text!r} (task {task})"
            )
        return _entry(answer["entries"][0], task, answer)

    # ---------------------------------------------------------------- range
    def _range(
        self,
        route: StoreRoute,
        params: dict[str, str],
        committed: bool,
        bound: PositionBound | None,
    ) -> Generator[Ask, Outcome, EncodedJSON]:
        if route.kind not in KEY_VALUE_KINDS:
            raise BadQueryError(
                f"store {route.name!r} is a {route.kind} store: range and all read key-value "
                "stores (window stores: /window, session stores: /sessions, versioned: /keys)"
            )
        limit = _limit(params)
        bounds = {
            side: None
            if params.get(side) is None
            else encode_key(route.key_bytes(params[side], side))
            for side in ("from", "to")
        }
        index, after = _page_token(params.get("page"), len(route.tasks))
        # the hosts render their pages' entries as this answer writes them (task, position
        # and consistency included): they are joined here, not decoded and encoded again
        pages: list[bytes] = []
        count = 0
        next_token = None
        while index < len(route.tasks):
            task = route.tasks[index]
            answer = yield from self._ask(
                task,
                {
                    "store": route.name,
                    "kind": "range",
                    **bounds,
                    "after": after,
                    "committed": committed,
                    "limit": limit - count,
                },  # fmt: skip
                bound,
            )
            entries = _rendered(answer, task)
            if entries.count:
                pages.append(entries.data)
                count += entries.count
            if answer["more"]:
                after = answer["last"]
                if count >= limit:
                    next_token = _token(index, after)
                    break
                continue  # the worker's time slice ended: the rest of this task
            index, after = index + 1, None
            if count >= limit:
                next_token = _token(index, None) if index < len(route.tasks) else None
                break
        return EncodedJSON(
            b"".join(
                (
                    b'{"entries": [',
                    b", ".join(pages),
                    b'], "next": ',
                    json.dumps(next_token).encode(),
                    b"}",
                )
            )  # fmt: skip
        )

    # ---------------------------------------------------------------- fetch
    def _fetch(
        self,
        route: StoreRoute,
        what: str,
        params: dict[str, str],
        committed: bool,
        bound: PositionBound | None,
    ) -> _Asking:
        kinds = WINDOW_KINDS if what == "window" else SESSION_KINDS
        if route.kind not in kinds:
            raise BadQueryError(
                f"/{what} reads {'window' if what == 'window' else 'session'} stores; "
                f"{route.name!r} is a {route.kind} store"
            )
        text = params.get("key")
        if text is None:
            raise BadQueryError(f"/{what} needs a key (?key=...)")
        key = route.key_bytes(text)
        task = route.task_for(key)
        request: dict[str, Any] = {
            "store": route.name,
            "kind": "window" if what == "window" else "session",
            "key": encode_key(key),
            "committed": committed,
            "limit": _limit(params),
        }
        if what == "window":
            for side, field in (("from", "time_from"), ("to", "time_to")):
                if params.get(side) is not None:
                    request[field] = _timestamp(side, params[side])
        answer = yield from self._ask(task, request, bound)
        return {
            "entries": [_entry(e, task, answer) for e in answer["entries"]],
            "truncated": bool(answer["more"]),
        }

    def _ask(self, task: str, request: dict[str, Any], bound: PositionBound | None) -> _Asking:
        outcome = yield task, _bounded(request, bound)
        return _checked(task, outcome)


def _bounded(request: dict[str, Any], bound: PositionBound | None) -> dict[str, Any]:
    return request if bound is None else {**request, "bound": bound.entries()}


def _checked(task: str, outcome: Outcome) -> dict[str, Any]:
    """A read's answer body; raises the ``QueryError`` it ended in or its answer names."""
    if isinstance(outcome, QueryError):
        raise outcome
    status, body = outcome
    if status == 200:
        return body
    error = str(body.get("error") or f"task {task} answered {status}")
    raise ERRORS_BY_CODE.get(str(body.get("code")), BadQueryError)(error, 1)


def _rendered(answer: dict[str, Any], task: str) -> RenderedEntries:
    """A range page's entries as the answer writes them: as the host rendered them, or (a
    host that sent them as objects) rendered here the same way."""
    entries = answer.get("entries") or []
    if isinstance(entries, RenderedEntries):
        return entries
    tail = entry_tail(task, answer)
    texts = [render_entry(fields, tail) for fields in entries]
    return RenderedEntries(", ".join(texts).encode(), len(texts))


def _entry(fields: dict[str, Any], task: str, answer: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "task": task, "position": answer.get("position"),
            "input_position": answer.get("input_position"),
            "consistency": answer.get("consistency")}  # fmt: skip


def _bound(route: StoreRoute, params: dict[str, str]) -> PositionBound | None:
    """The read's position bound (``position_bound``), checked against the store's inputs."""
    text = params.get(PARAMETER)
    if text is None:
        return None
    bound = PositionBound.parse(text)
    route.check_bound(bound)
    return bound


def _flag(params: dict[str, str], name: str) -> bool:
    text = params.get(name, "false").lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise BadQueryError(f"{name} must be true or false, got {text!r}")


def _limit(params: dict[str, str]) -> int:
    text = params.get("limit")
    if text is None:
        return DEFAULT_PAGE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise BadQueryError(f"limit must be 1-{MAX_PAGE}, got {text!r}")
    return int(text)


def _timestamp(name: str, text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 date-time (UTC without an offset)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadQueryError(
            f"{name} must be epoch milliseconds or an ISO-8601 date-time, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _token(index: int, after: str | None) -> str:
    return base64.urlsafe_b64encode(json.dumps([index, after]).encode()).decode()


def _page_token(text: str | None, tasks: int) -> tuple[int, str | None]:
    if text is None:
        return 0, None
    try:
        index, after = json.loads(base64.urlsafe_b64decode(text.encode()))
        if not isinstance(index, int) or not 0 <= index < tasks:
            raise ValueError(index)
        if after is not None:
            base64.b64decode(after, validate=True)
    except (ValueError, TypeError, binascii.Error):
        raise BadQueryError(f"page {text!r} is not a page token of this store") from None
    return index, after


class QueryServer:
    """Serves a :class:`QueryEndpoint` over HTTP on ``host:port`` (0: a free port, in
    :attr:`port`), on the query loop of its router (``event_loop.py``: every connection
    and every worker link on one thread); ``token``: the bearer token every request must
    carry (None: none)."""

    def __init__(self, endpoint: QueryEndpoint, host: str, port: int, token: str | None) -> None:
        self.endpoint = endpoint
        self.token = token
        self.loop: EventLoop = endpoint.router.loop
        self._listener = socket.create_server((host, port))
        self._listener.setblocking(False)
        self.host, self.port = host, int(self._listener.getsockname()[1])
        self._connections: set[_HttpConnection] = set()
        self._closed = False
        self._waiting_pool: ThreadPoolExecutor | None = None
        self.loop.run_sync(self._start)
        _log.info("query_server_started", url=f"http://{host}:{self.port}", token=token is not None)

    def _start(self) -> None:
        self.loop.register(self._listener, selectors.EVENT_READ, self._accept)
        self._sweep()

    def _accept(self, _events: int) -> None:
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, OSError):
            return
        self._connections.add(_HttpConnection(self, sock))

    def _sweep(self) -> None:
        """Close the connections quiet for ``CONNECTION_TIMEOUT_S`` (no request, or an
        answer the client does not take)."""
        if self._closed:
            return
        timeout_s = CONNECTION_TIMEOUT_S
        now = time.monotonic()
        for connection in list(self._connections):
            if connection.quiet_since(now) >= timeout_s:
                connection.close("quiet")
        self.loop.call_later(min(1.0, timeout_s / 4), self._sweep)

    def waiting_pool(self) -> ThreadPoolExecutor:
        """The threads that run what may wait (a registry key serde), made at first use."""
        if self._waiting_pool is None:
            self._waiting_pool = ThreadPoolExecutor(WAITING_THREADS, "query-registry")
        return self._waiting_pool

    def connection_ended(self, connection: _HttpConnection) -> None:
        """Forget ``connection`` (it closed)."""
        self._connections.discard(connection)

    def close(self) -> None:
        """Stop serving: the listener and every connection close."""

        def stop() -> None:
            self._closed = True
            self.loop.unregister(self._listener)
            self._listener.close()
            for connection in list(self._connections):
                connection.close("the server closed")

        self.loop.run_sync(stop)
        if self._waiting_pool is not None:
            self._waiting_pool.shutdown(wait=False, cancel_futures=True)


#: Threads that serialize keys with a Schema Registry serde (which may wait for the
#: registry) off the query loop.
WAITING_THREADS = 4
#: The longest a request's head (request line and headers) may be (bytes).
MAX_HEAD_BYTES = 64 * 1024
#: The largest request body read and dropped (the endpoint takes none; a larger one: 413).
MAX_BODY_BYTES = 64 * 1024
#: A connection that sends nothing for this long, or takes no answer within it, is closed
#: (seconds): a client that went quiet does not hold a connection for ever.
CONNECTION_TIMEOUT_S = 60.0


class _BadRequest(Exception):
    """A request that is not HTTP/1.x as this server reads it: answered, then closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _HttpConnection(Connection):
    """One client connection on the query loop: HTTP/1.1 requests read and answered one
    after the other, in order (kept alive unless the client says ``Connection: close`` or
    speaks HTTP/1.0 without keep-alive). A request's reads go to the workers without
    waiting (:meth:`HostRouter.ask_later`); the next request is read once it is answered.

    Not :mod:`http.server`: its header parsing (``email.parser``), its answer written in two
    sends and its thread per connection cost the driver most of its CPU per lookup
    (bench/NOTES-issues-35-36.md), CPU the worker hosts want on a small machine. This reads
    only what the endpoint needs: the request line, the headers (``Authorization``,
    ``Connection``, a body's ``Content-Length``), and answers in one write.
    """

    def __init__(self, server: QueryServer, sock: socket.socket) -> None:
        self.server = server
        self._buffer = bytearray()
        self._busy = False  # a request is being answered
        self._keep_alive = True
        self._closing = False  # close once the last answer is taken
        self._active = time.monotonic()
        super().__init__(server.loop, sock)

    def quiet_since(self, now: float) -> float:
        """How long the connection has been quiet (seconds): no request while idle, or
        none of a waiting answer taken."""
        if self.stalled_since is not None:
            return now - self.stalled_since
        return 0.0 if self._busy else now - self._active

    def received(self, data: bytes) -> None:
        self._active = time.monotonic()
        if self._closing:
            return  # after a last answer, nothing more is read
        self._buffer += data
        self._next()

    def _next(self) -> None:
        """Answer the next whole request in the buffer, if none is being answered."""
        while not self._busy and not self._closing and not self.closed:
            try:
                request = _parse_request(self._buffer)
            except _BadRequest as exc:
                self._closing = True
                self.write(
                    _answer(exc.status, {"error": str(exc), "code": "bad_request"}, {}, False)
                )
                self._close_when_sent()
                return
            if request is None:
                return
            method, target, headers, self._keep_alive = request
            if method != "GET":
                self._send(405, {"error": "the query endpoint is read-only: GET only",
                                 "code": "method_not_allowed"}, {"Allow": "GET"})  # fmt: skip
                continue
            self._busy = True
            self._get(target, headers)

    def _get(self, target: str, headers: dict[str, str]) -> None:
        url = urlsplit(target)
        path = url.path.rstrip("/") or "/"
        try:
            self._authorize(headers)
            params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            steps = self.server.endpoint.steps(path, params)
        except Exception as exc:  # noqa: BLE001 - answered (500 for a bug)
            self._failed(path, exc)
            return
        if self.server.endpoint.may_wait(path):
            # its key serde may ask a registry (seconds when it does not answer): the first
            # step, which serializes the keys, runs on a thread that may wait
            done = self.server.waiting_pool().submit(_advance, steps, None)
            done.add_done_callback(
                lambda step: self.loop.call_soon(lambda: self._advanced(path, steps, step.result()))
            )
            return
        self._step(path, steps, None)

    def _step(self, path: str, steps: Steps, outcome: Outcome | None) -> None:
        """Run ``steps`` on with ``outcome`` (of the read they asked for last; None: their
        first step) up to their next read, whose outcome calls this back, or to their
        answer."""
        self._advanced(path, steps, _advance(steps, outcome))

    def _advanced(self, path: str, steps: Steps, step: _Step) -> None:
        if isinstance(step, _Done):
            self._send(200, step.answer, {})
            return
        if isinstance(step, Exception):
            self._failed(path, step)
            return
        task, request = step
        self.server.endpoint.router.ask_later(
            task, request, functools.partial(self._step, path, steps)
        )

    def _failed(self, path: str, exc: Exception) -> None:
        if isinstance(exc, QueryError):
            extra = {}
            if exc.status == 503:
                extra["Retry-After"] = str(int(exc.retry_after_s or 1))
            self._send(exc.status, {**exc.fields, "error": str(exc), "code": exc.code}, extra)
            return
        _log.warning("query_failed", path=path, error=f"{type(exc).__name__}: {exc}")
        self._send(500, {"error": f"{type(exc).__name__}: {exc}", "code": "error"}, {})

    def _send(self, status: int, body: Answer, extra: dict[str, str]) -> None:
        """Write a request's answer; then the next request, or the end of the connection."""
        self._busy = False
        self._active = time.monotonic()
        self.write(_answer(status, body, extra, self._keep_alive))
        if not self._keep_alive:
            self._closing = True
            self._close_when_sent()
        else:
            self.loop.call_soon(self._next)  # not within the answer's own call chain

    def _close_when_sent(self) -> None:
        if not self.unsent:
            self.close("answered")

    def drained(self) -> None:
        if self._closing:
            self.close("answered")

    def ended(self, reason: str) -> None:
        self.server.connection_ended(self)

    def _authorize(self, headers: dict[str, str]) -> None:
        token = self.server.token
        if token is None:
            return
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), token.encode()
        ):
            raise UnauthorizedError("this endpoint wants Authorization: Bearer <token>")


class _Done:
    """A read's steps ended with this answer."""

    __slots__ = ("answer",)

    def __init__(self, answer: Answer) -> None:
        self.answer = answer


#: Where a read's steps stand: the read they ask for next, their answer, or their failure.
_Step = Ask | _Done | Exception


def _advance(steps: Steps, outcome: Outcome | None) -> _Step:
    """Run ``steps`` on with ``outcome`` (None: their first step) to where they stand next."""
    try:
        return next(steps) if outcome is None else steps.send(outcome)
    except StopIteration as stop:
        return _Done(stop.value)
    except Exception as exc:  # noqa: BLE001 - answered (500 for a bug)
        return exc


def _parse_request(buffer: bytearray) -> tuple[str, str, dict[str, str], bool] | None:
    """The next whole request in ``buffer`` (taken out of it, its body dropped): (method,
    target, headers by lower-case name, keep alive); None when not all of it has arrived;
    ``_BadRequest`` when it is not a request this server reads."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise _BadRequest(431, f"a request head over {MAX_HEAD_BYTES} bytes")
        return None
    head = buffer[:end].decode("latin-1")
    line, *fields = head.lstrip("\r\n").split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, f"not an HTTP/1.x request line: {line[:200]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for field in fields:
        name, colon, value = field.partition(":")
        if not colon or not name or name != name.strip():
            raise _BadRequest(400, f"a malformed header line: {field[:200]!r}")
        headers[name.lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise _BadRequest(400, "a request body in chunks: the endpoint takes no body")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise _BadRequest(400, f"Content-Length {length_text!r} is not a number")
    length = int(length_text)
    if length > MAX_BODY_BYTES:
        raise _BadRequest(413, f"a request body of {length} bytes: the endpoint takes none")
    if len(buffer) < end + 4 + length:
        return None  # the body is still coming
    del buffer[: end + 4 + length]  # a body is dropped
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        keep_alive = "keep-alive" in connection
    else:
        keep_alive = "close" not in connection
    return method, target, headers, keep_alive


def _answer(
    status: int, body: dict[str, Any] | EncodedJSON, headers: dict[str, str], keep_alive: bool
) -> bytes:
    """An HTTP/1.1 answer with a JSON body, as one piece (one send)."""
    if isinstance(body, EncodedJSON):
        data = body.data
    else:
        data = json.dumps(body, default=json_default, ensure_ascii=False).encode()
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, '')}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data


_REASONS = {status.value: status.phrase for status in HTTPStatus}
