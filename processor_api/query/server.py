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
import hmac
import json
import socket
import socketserver
import threading
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import ThreadingHTTPServer
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
from processor_api.query.position import PARAMETER, PositionBound
from processor_api.query.router import HostRouter
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


class QueryEndpoint:
    """Answers the endpoint's reads (without HTTP: the server's handler calls :meth:`answer`)."""

    def __init__(self, routes: StoreRoutes, router: HostRouter) -> None:
        self.routes = routes
        self.router = router

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """The JSON answer to ``GET path?params`` as Python objects; raises a
        :class:`QueryError`."""
        answer = self.answer(path, params)
        return json.loads(answer.data) if isinstance(answer, EncodedJSON) else answer

    def answer(self, path: str, params: dict[str, str]) -> dict[str, Any] | EncodedJSON:
        """The JSON answer to ``GET path?params``, as Python objects or (a range's page)
        already encoded; raises a :class:`QueryError`."""
        parts = [unquote(p) for p in path.split("/")[1:]]
        if parts == ["stores"]:
            return {"stores": self.routes.describe()}
        if len(parts) < 3 or parts[0] != "stores":
            raise NotFoundError(f"no endpoint {path!r}; see /stores")
        route = self.routes.route(parts[1])
        committed = _flag(params, "committed")
        bound = _bound(route, params)
        if parts[2] == "keys" and len(parts) == 4:
            return self._key(route, parts[3], committed, params.get("as_of"), bound)
        if len(parts) == 3 and parts[2] in ("range", "all"):
            if parts[2] == "all":
                params = {k: v for k, v in params.items() if k not in ("from", "to")}
            return self._range(route, params, committed, bound)
        if len(parts) == 3 and parts[2] in ("window", "sessions"):
            return self._fetch(route, parts[2], params, committed, bound)
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
    ) -> dict[str, Any]:
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
        answer = self._ask(task, request, bound)
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
    ) -> EncodedJSON:
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
            answer = self._ask(
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
    ) -> dict[str, Any]:
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
        answer = self._ask(task, request, bound)
        return {
            "entries": [_entry(e, task, answer) for e in answer["entries"]],
            "truncated": bool(answer["more"]),
        }

    def _ask(
        self, task: str, request: dict[str, Any], bound: PositionBound | None
    ) -> dict[str, Any]:
        if bound is not None:
            request = {**request, "bound": bound.entries()}
        status, body = self.router.ask(task, request)
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
    :attr:`port`), in a thread per request; ``token``: the bearer token every request
    must carry (None: none)."""

    def __init__(self, endpoint: QueryEndpoint, host: str, port: int, token: str | None) -> None:
        handler = type("_Handler", (_Handler,), {"endpoint": endpoint, "token": token})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self.host, self.port = host, int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="query-server", daemon=True
        )
        self._thread.start()
        _log.info("query_server_started", url=f"http://{host}:{self.port}", token=token is not None)

    def close(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


#: The longest a request's head (request line and headers) may be (bytes).
MAX_HEAD_BYTES = 64 * 1024
#: The largest request body read and dropped (the endpoint takes none; a larger one: 413).
MAX_BODY_BYTES = 64 * 1024
#: A connection that sends nothing for this long, or takes no answer within it, is closed
#: (seconds): a client that went quiet does not hold a thread of the server for ever.
CONNECTION_TIMEOUT_S = 60.0


class _BadRequest(Exception):
    """A request that is not HTTP/1.x as this server reads it: answered, then closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(socketserver.BaseRequestHandler):
    """One connection: HTTP/1.1 requests read and answered one after the other (kept alive
    unless the client says ``Connection: close`` or speaks HTTP/1.0 without keep-alive).

    Not :class:`http.server.BaseHTTPRequestHandler`: its header parsing (``email.parser``),
    its answer written in two sends and its per-request bookkeeping cost the driver about
    0.4 ms of CPU per lookup (bench/NOTES-issues-35-36.md), CPU the worker hosts want on a
    small machine. This reads only what the endpoint needs: the request line, the headers
    (``Authorization``, ``Connection``, a body's ``Content-Length``), and answers in one send.
    """

    endpoint: QueryEndpoint
    token: str | None

    def handle(self) -> None:
        """Serve the connection's requests until it closes, errs or idles out."""
        sock: socket.socket = self.request
        sock.settimeout(CONNECTION_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        try:
            while True:
                try:
                    request = _read_request(sock, buffer)
                except _BadRequest as exc:
                    sock.sendall(
                        _answer(exc.status, {"error": str(exc), "code": "bad_request"}, {}, False)
                    )
                    return
                if request is None:
                    return  # closed between requests
                method, target, headers, keep_alive, buffer = request
                body: dict[str, Any] | EncodedJSON
                if method == "GET":
                    status, body, extra = self._get(target, headers)
                else:
                    status, body, extra = 405, {"error": "the query endpoint is read-only: GET only",
                                                "code": "method_not_allowed"}, {"Allow": "GET"}  # fmt: skip
                sock.sendall(_answer(status, body, extra, keep_alive))
                if not keep_alive:
                    return
        except (OSError, TimeoutError):
            return  # the client went away or went quiet

    def _get(
        self, target: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, Any] | EncodedJSON, dict[str, str]]:
        url = urlsplit(target)
        try:
            self._authorize(headers)
            params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            return 200, self.endpoint.answer(url.path.rstrip("/") or "/", params), {}
        except QueryError as exc:
            extra = {}
            if exc.status == 503:
                extra["Retry-After"] = str(int(exc.retry_after_s or 1))
            return exc.status, {**exc.fields, "error": str(exc), "code": exc.code}, extra
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the server
            _log.warning("query_failed", path=url.path, error=f"{type(exc).__name__}: {exc}")
            return 500, {"error": f"{type(exc).__name__}: {exc}", "code": "error"}, {}

    def _authorize(self, headers: dict[str, str]) -> None:
        if self.token is None:
            return
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), self.token.encode()
        ):
            raise UnauthorizedError("this endpoint wants Authorization: Bearer <token>")


def _read_request(
    sock: socket.socket, buffer: bytes
) -> tuple[str, str, dict[str, str], bool, bytes] | None:
    """The next request on ``sock`` (``buffer``: what was read past the previous one):
    (method, target, headers by lower-case name, keep alive, what was read past it); None
    when the client closed the connection before a request began; ``_BadRequest`` when it
    is not a request this server reads."""
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise _BadRequest(431, f"a request head over {MAX_HEAD_BYTES} bytes")
        chunk = sock.recv(65536)
        if not chunk:
            if buffer.strip():
                raise _BadRequest(400, "the connection ended inside a request head")
            return None
        buffer += chunk
    head, buffer = buffer[:end].decode("latin-1"), buffer[end + 4 :]
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
    while len(buffer) < length:  # a body is read and dropped
        chunk = sock.recv(65536)
        if not chunk:
            raise _BadRequest(400, "the connection ended inside a request body")
        buffer += chunk
    buffer = buffer[length:]
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        keep_alive = "keep-alive" in connection
    else:
        keep_alive = "close" not in connection
    return method, target, headers, keep_alive, buffer


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
