"""A Python client of a run's query endpoint (``run-topology --query-port``).

    client = QueryClient("http://127.0.0.1:8085")
    client.get("counts", "alice")           # {"key": "alice", "value": 3, "task": "0_1", ...}
    list(client.range("counts", "a", "m"))  # every entry, page after page

Keys are given as the store's processors know them: a ``str`` for string keys, anything
else as its JSON (numbers, lists, objects); they travel as ``read-store --key`` takes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode
from urllib.request import Request, urlopen

from processor_api.query.errors import ERRORS_BY_CODE, EndpointUnreachableError, QueryError

#: How long a request waits for the endpoint (seconds).
TIMEOUT_S = 30.0


class QueryClient:
    """Reads the stores of a running application through its query endpoint at ``url``;
    ``token``: the endpoint's bearer token, if it wants one.

    Every method raises :class:`~processor_api.query.errors.UnknownStoreError` for a store
    the application does not have, :class:`~processor_api.query.errors.BadQueryError` for a
    key of the wrong type or a read the store's kind does not serve,
    :class:`~processor_api.query.errors.TaskUnavailableError` while the task holding the key
    restores or moves (``retry_after_s`` says when to ask again),
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

    def get(self, store: str, key: Any, *, committed: bool = False) -> dict[str, Any] | None:
        """The entry of ``key`` (``key``, ``value``, ``task``, ``position``, and the store's
        extra fields such as ``timestamp``), or None when the store holds none."""
        return self._key(store, key, {"committed": committed})

    def get_as_of(
        self, store: str, key: Any, as_of: int, *, committed: bool = False
    ) -> dict[str, Any] | None:
        """A versioned store's version of ``key`` valid at ``as_of`` (epoch ms), or None."""
        return self._key(store, key, {"committed": committed, "as_of": as_of})

    def range(
        self,
        store: str,
        key_from: Any = None,
        key_to: Any = None,
        *,
        committed: bool = False,
        page_size: int = 1000,
    ) -> Iterator[dict[str, Any]]:
        """The entries with keys in [``key_from``, ``key_to``] (None: open), task by task,
        in key order within a task; pages are fetched as the iteration goes."""
        params: dict[str, Any] = {"committed": committed, "limit": page_size}
        if key_from is not None:
            params["from"] = _key_text(key_from)
        if key_to is not None:
            params["to"] = _key_text(key_to)
        return self._pages(f"/stores/{quote(store, safe='')}/range", params)

    def all(
        self, store: str, *, committed: bool = False, page_size: int = 1000
    ) -> Iterator[dict[str, Any]]:
        """Every entry of a key-value store, task by task, page by page."""
        params = {"committed": committed, "limit": page_size}
        return self._pages(f"/stores/{quote(store, safe='')}/all", params)

    def fetch_window(
        self,
        store: str,
        key: Any,
        time_from: int | None = None,
        time_to: int | None = None,
        *,
        committed: bool = False,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """A window store's windows of ``key`` starting in [``time_from``, ``time_to``]
        (epoch ms; None: open), each with ``window_start``/``window_end``."""
        params: dict[str, Any] = {"key": _key_text(key), "committed": committed, "limit": limit}
        if time_from is not None:
            params["from"] = time_from
        if time_to is not None:
            params["to"] = time_to
        return list(self._get(f"/stores/{quote(store, safe='')}/window", params)["entries"])

    def fetch_sessions(
        self, store: str, key: Any, *, committed: bool = False, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """A session store's sessions of ``key``, each with ``session_start``/``session_end``."""
        params = {"key": _key_text(key), "committed": committed, "limit": limit}
        return list(self._get(f"/stores/{quote(store, safe='')}/sessions", params)["entries"])

    # --------------------------------------------------------------- HTTP
    def _key(self, store: str, key: Any, params: dict[str, Any]) -> dict[str, Any] | None:
        path = f"/stores/{quote(store, safe='')}/keys/{quote(_key_text(key), safe='')}"
        try:
            return self._get(path, params)
        except QueryError as exc:
            if exc.code == "missing_key":
                return None
            raise

    def _pages(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        while True:
            answer = self._get(path, params)
            yield from answer["entries"]
            if answer.get("next") is None:
                return
            params = {**params, "page": answer["next"]}

    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
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


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(key)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error(exc: HTTPError) -> QueryError:
    try:
        body = json.loads(exc.read())
        message, code = str(body["error"]), str(body.get("code"))
    except (ValueError, KeyError, TypeError):
        message, code = f"HTTP {exc.code}: {exc.reason}", ""
    retry = exc.headers.get("Retry-After") if exc.headers else None
    error = ERRORS_BY_CODE.get(code, QueryError)(message, float(retry) if retry else None)
    if code and error.code != code:
        error.code = code
    return error
