"""The driver's watch over the run's executors: an executor lost frees the slots at once.

A worker holds its Spark task slot for its whole epoch, so when an executor is lost Spark can
re-run its workers' epochs only in slots the surviving workers give back at their epoch's end
(or in a replacement executor's, once it registered). :class:`ExecutorWatch` polls Spark's
executors every ``EXECUTOR_POLL_S`` on a daemon thread; when one of them is gone it calls
``on_lost``, which the runner uses to end the running epochs of the worker hosts on this
machine (each commits and ends its epoch: ``CutEpochRequest``), so that the lost workers find
free slots at once. Hosts on other machines are not reachable from the driver: they end at
their epoch's end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from processor_api.logging import get_logger

_log = get_logger("processor_api.runner")

#: How often the driver asks Spark for its executors (seconds).
EXECUTOR_POLL_S = 0.25
#: A poll of Spark's executors slower than this is logged (the call has no deadline of its own:
#: it is answered by the driver's JVM).
SLOW_POLL_S = 5.0


def spark_executors(spark: Any) -> set[str]:
    """The executors Spark's status tracker lists now (``host:port`` of their block managers;
    the driver is among them). An executor that registered but whose block manager has not
    yet is listed with port 0 for a moment: it is left out until it has its port."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return {f"{info.host()}:{info.port()}" for info in infos if info.port() > 0}


class ExecutorSet:
    """The executors seen so far: :meth:`update` with the executors listed now gives those gone
    and those new since the last update (none at the first)."""

    def __init__(self) -> None:
        self._known: set[str] | None = None

    def update(self, current: set[str]) -> tuple[set[str], set[str]]:
        """(lost, added) since the last update."""
        known, self._known = self._known, set(current)
        if known is None:
            return set(), set()
        return known - current, current - known


class ExecutorWatch(threading.Thread):
    """Calls ``on_lost(lost, now)`` when executors listed by ``list_executors()`` go, and
    ``on_added(added, now)`` when new ones come, from a daemon thread, every ``interval_s``,
    until :meth:`stop`. A poll that raises (the session is stopping) is logged at debug and
    tried again."""

    def __init__(
        self,
        list_executors: Callable[[], set[str]],
        on_lost: Callable[[set[str], set[str]], None],
        interval_s: float = EXECUTOR_POLL_S,
        on_added: Callable[[set[str], set[str]], None] | None = None,
    ) -> None:
        super().__init__(name="executor-watch", daemon=True)
        self._list, self._on_lost, self._interval_s = list_executors, on_lost, interval_s
        self._on_added = on_added
        self._stopping = threading.Event()
        self._executors = ExecutorSet()

    def poll(self) -> None:
        """One look at the executors (the thread's turn; callable directly)."""
        started = time.monotonic()
        current = self._list()
        took_s = time.monotonic() - started
        if took_s > SLOW_POLL_S:
            _log.warning("executor_poll_slow", took_s=round(took_s, 2))
        lost, added = self._executors.update(current)
        if added:
            _log.info("executors_added", added=sorted(added), executors=len(current))
            if self._on_added is not None:
                self._on_added(added, current)
        if lost:
            _log.warning("executors_lost", lost=sorted(lost), executors=len(current))
            self._on_lost(lost, current)

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - the next poll tries again
                _log.debug("executor_poll_failed", error=f"{type(exc).__name__}: {exc}")
            self._stopping.wait(self._interval_s)

    def stop(self) -> None:
        """Stop polling (returns at once; the thread ends after its current poll)."""
        self._stopping.set()
