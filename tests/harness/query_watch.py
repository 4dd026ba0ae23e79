"""Point lookups of a running application's keys (``run-topology --query-port``), made over
and over in a thread while something happens to the run (an executor lost, a task moving):
every answer, in order, for the test to judge afterwards."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from processor_api.query import QueryClient, QueryError, TaskUnavailableError

#: How long the watch waits between two rounds of lookups (seconds).
ROUND_GAP_S = 0.05


@dataclass(frozen=True)
class Lookup:
    """One lookup's answer: a value (None for a missing key), a 503, or another error."""

    key: str
    at: float  # monotonic seconds
    value: Any = None
    task: str | None = None
    unavailable: str | None = None  # a 503's message
    retry_after_s: float | None = None
    error: str | None = None  # anything else: never expected


class QueryWatch:
    """Looks up ``keys`` of ``store`` at ``url`` until :meth:`stop` (see the module docs)."""

    def __init__(self, url: str, store: str, keys: list[str]) -> None:
        self.client = QueryClient(url, timeout_s=30.0)
        self.store = store
        self.keys = list(keys)
        self.lookups: list[Lookup] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="query-watch", daemon=True)

    def start(self) -> QueryWatch:
        self._thread.start()
        return self

    def stop(self) -> list[Lookup]:
        """Stop looking up; every answer so far."""
        self._stop.set()
        self._thread.join(60)
        return self.answers()

    def answers(self) -> list[Lookup]:
        with self._lock:
            return list(self.lookups)

    def unavailable(self, key: str) -> Lookup | None:
        """The first 503 seen for ``key``, if any."""
        return next((a for a in self.answers() if a.key == key and a.unavailable), None)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for key in self.keys:
                lookup = self._look_up(key)
                with self._lock:
                    self.lookups.append(lookup)
            self._stop.wait(ROUND_GAP_S)

    def _look_up(self, key: str) -> Lookup:
        try:
            entry = self.client.get(self.store, key)
        except TaskUnavailableError as exc:
            return Lookup(
                key, time.monotonic(), unavailable=str(exc), retry_after_s=exc.retry_after_s
            )
        except QueryError as exc:
            return Lookup(key, time.monotonic(), error=f"{type(exc).__name__}: {exc}")
        if entry is None:
            return Lookup(key, time.monotonic())
        return Lookup(key, time.monotonic(), value=entry["value"], task=entry["task"])
