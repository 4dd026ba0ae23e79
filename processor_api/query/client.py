"""A Python client of a run's query endpoint (``run-topology --query-port``).

    client = QueryClient("http://127.0.0.1:8085")
    client.get("counts", "alice")           # {"key": "alice", "value": 3, "task": "0_1", ...}
    list(client.range("counts", "a", "m"))  # every entry, page after page
    # read-your-writes: the answer includes the record produced at offset 41 of words/1
    client.get("counts", "alice", position_bound="words:1:41", wait_s=2.0)

Keys are given as the store's processors know them: a ``str`` for string keys, anything
else as its JSON (numbers, lists, objects); they travel as ``read-store --key`` takes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode
from urllib.request import Request, urlopen

from processor_api.query.errors import (
    ERRORS_BY_CODE,
    EndpointUnreachableError,
    NotUpToBoundError,
    QueryError,
)
from processor_api.query.position import PARAMETER, PositionBound, as_bound
from processor_api.state.json_entries import json_default

#: How long a request waits for the endpoint (seconds).
TIMEOUT_S = 30.0
#: A read whose position bound is not reached is asked again after this pause, doubling up
#: to ``MAX_PAUSE_S`` (seconds): read-your-writes waits for about one loop turn of the task,
#: far less than the 503's ``Retry-After`` of a whole second.
FIRST_PAUSE_S, MAX_PAUSE_S = 0.01, 0.2

#: What ``position_bound=`` takes (see :func:`processor_api.query.position.as_bound`).
BoundLike = PositionBound | str | Iterable[tuple[str, int, int]] | None


class QueryClient:
    """Reads the stores of a running application through its query endpoint at ``url``;
    ``token``: the endpoint's bearer token, if it wants one.

    Every method raises :class:`~processor_api.query.errors.UnknownStoreError` for a store
    the application does not have, :class:`~processor_api.query.errors.BadQueryError` for a
    key of the wrong type or a read the store's kind does not serve,
    :class:`~processor_api.query.errors.TaskUnavailableError` while the task holding the key
    restores or moves (``retry_after_s`` says when to ask again),
    :class:`~processor_api.query.errors.NotUpToBoundError` (a ``TaskUnavailableError``) when
    ``position_bound`` (read-your-writes: a :class:`~processor_api.query.position.PositionBound`,
    its text ``topic:partition:offset[,...]`` or ``(topic, partition, offset)`` entries) is
    not reached, after asking again for up to ``wait_s`` seconds (0: not at all),
    :class:`~processor_api.query.errors.EndpointUnreachableError` when nothing answers at
    ``url``, and
    :class:`~processor_api.query.errors.QueryError` for anything else the endpoint refused.
    """

    def __init__(self, url: str, token: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def stores(self) -> list[dict[str, Any]]:
        """The application's queryable stores: name, kind and tasks."""
        return list(self._get("/stores", {})["stores"])

    def get(
        self,
        store: str,
        key: Any,
        *,
        committed: bool = False,
        position_bound: BoundLike = None,
        wait_s: float = 0.0,
    ) -> dict[str, Any] | None:
        """The entry of ``key`` (``key``, ``value``, ``task``, ``position``,
        ``input_position``, and the store's extra fields such as ``timestamp``), or None
        when the store holds none."""
        return self._key(store, key, {"committed": committed}, position_bound, wait_s)

    def get_as_of(
        self,
        store: str,
        key: Any,
        as_of: int,
        *,
        committed: bool = False,
        position_bound: BoundLike = None,
        wait_s: float = 0.0,
    ) -> dict[str, Any] | None:
        """A versioned store's version of ``key`` valid at ``as_of`` (epoch ms), or None."""
        params = {"committed": committed, "as_of": as_of}
        return self._key(store, key, params, position_bound, wait_s)

    def range(
        self,
        store: str,
        key_from: Any = None,
        key_to: Any = None,
        *,
        committed: bool = False,
        page_size: int = 1000,
        position_bound: BoundLike = None,
        wait_s: float = 0.0,
    ) -> Iterator[dict[str, Any]]:
        """The entries with keys in [``key_from``, ``key_to``] (None: open), task by task,
        in key order within a task; pages are fetched as the iteration goes (each page
        within the bound)."""
        params: dict[str, Any] = {"committed": committed, "limit": page_size}
        if key_from is not None:
            params["from"] = _key_text(key_from)
        if key_to is not None:
            params["to"] = _key_text(key_to)
        params = _with_bound(params, position_bound)
        return self._pages(f"/stores/{quote(store, safe='')}/range", params, wait_s)

    def all(
        self,
        store: str,
        *,
        committed: bool = False,
        page_size: int = 1000,
        position_bound: BoundLike = None,
        wait_s: float = 0.0,
    ) -> Iterator[dict[str, Any]]:
        """Every entry of a key-value store, task by task, page by page."""
        params = _with_bound({"committed": committed, "limit": page_size}, position_bound)
        return self._pages(f"/stores/{quote(store, safe='')}/all", params, wait_s)

    def fetch_window(
        self,
        store: str,
        key: Any,
        time_from: int | None = None,
        time_to: int | None = None,
        *,
        committed: bool = False,
        limit: int = 1000,
        position_bound: BoundLike = None,
        wait_s: float = 0.0,
    ) -> list[dict[str, Any]]:
        """A window store's windows of ``key`` starting in [``time_from``, ``time_to``]
        (epoch ms; None: open), each with ``window_start``/``window_end``."""
        params: dict[str, Any] = {"key": _key_text(key), "committed": committed, "limit": limit}
        if time_from is not None:
            params["from"] = time_from
        if time_to is not None:
            params["to"] = time_to
        params = _with_bound(params, position_bound)
        path = f"/stores/{quote(store, safe='')}/window"
        return list(self._get(path, params, wait_s)["entries"])

    def fetch_sessions(
        self,
        store: str,
        key: Any,
        *,
        committed: bool = False,
        limit: int = 1000,
        position_bound: BoundLike = None,
        wait_s: float = 0.0,
    ) -> list[dict[str, Any]]:
        """A session store's sessions of ``key``, each with ``session_start``/``session_end``."""
        params = {"key": _key_text(key), "committed": committed, "limit": limit}
        params = _with_bound(params, position_bound)
        path = f"/stores/{quote(store, safe='')}/sessions"
        return list(self._get(path, params, wait_s)["entries"])

    # --------------------------------------------------------------- HTTP
    def _key(
        self,
        store: str,
        key: Any,
        params: dict[str, Any],
        position_bound: BoundLike,
        wait_s: float,
    ) -> dict[str, Any] | None:
        path = f"/stores/{quote(store, safe='')}/keys/{quote(_key_text(key), safe='')}"
        try:
            return self._get(path, _with_bound(params, position_bound), wait_s)
        except QueryError as exc:
            if exc.code == "missing_key":
                return None
            raise

    def _pages(
        self, path: str, params: dict[str, Any], wait_s: float = 0.0
    ) -> Iterator[dict[str, Any]]:
        while True:
            answer = self._get(path, params, wait_s)
            yield from answer["entries"]
            if answer.get("next") is None:
                return
            params = {**params, "page": answer["next"]}

    def _get(self, path: str, params: dict[str, Any], wait_s: float = 0.0) -> dict[str, Any]:
        """The answer to ``GET path?params``; a position bound not reached is asked again
        until ``wait_s`` has passed (then its ``NotUpToBoundError``, saying how long)."""
        deadline = time.monotonic() + wait_s
        pause_s = FIRST_PAUSE_S
        while True:
            try:
                return self._get_once(path, params)
            except NotUpToBoundError as exc:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    if wait_s > 0:
                        raise NotUpToBoundError(
                            f"{exc} (still after waiting {wait_s:g}s)",
                            exc.retry_after_s,
                            exc.fields,
                        ) from None
                    raise
                time.sleep(min(pause_s, left_s))
                pause_s = min(pause_s * 2, MAX_PAUSE_S)

    def _get_once(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        query = urlencode({k: _param(v) for k, v in params.items() if v is not None})
        request = Request(f"{self.url}{path}{'?' + query if query else ''}")
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urlopen(request, timeout=self.timeout_s) as response:
                return dict(json.loads(response.read()))
        except HTTPError as exc:
            raise _error(exc) from None
        except URLError as exc:
            raise EndpointUnreachableError(
                f"the query endpoint {self.url} does not answer: {exc.reason}"
            ) from None


def _with_bound(params: dict[str, Any], position_bound: BoundLike) -> dict[str, Any]:
    bound = as_bound(position_bound)
    return params if bound is None else {**params, PARAMETER: str(bound)}


def _key_text(key: Any) -> str:
    # a Protobuf message as its JSON mapping, which the endpoint parses back into one
    return key if isinstance(key, str) else json.dumps(key, default=json_default)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error(exc: HTTPError) -> QueryError:
    fields: dict[str, Any] = {}
    try:
        body = json.loads(exc.read())
        message, code = str(body["error"]), str(body.get("code"))
        fields = {k: v for k, v in body.items() if k not in ("error", "code")}
    except (ValueError, KeyError, TypeError):
        message, code = f"HTTP {exc.code}: {exc.reason}", ""
    retry = exc.headers.get("Retry-After") if exc.headers else None
    error = ERRORS_BY_CODE.get(code, QueryError)(message, float(retry) if retry else None, fields)
    if code and error.code != code:
        error.code = code
    return error
