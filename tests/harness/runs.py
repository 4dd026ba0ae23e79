"""A topology run in this process: :class:`BackgroundRun` runs a :class:`TopologyRunner` in
continuous mode in a thread (on the session's SparkSession) and stops it with
``request_stop()``; :func:`settings_for` gives its settings."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from processor_api.spark.runner import RunResult, RunSettings, TopologyRunner

#: The config of a run whose later restores must replay the changelogs: snapshots off (a task
#: that closes cleanly snapshots its stores, and a run without the local state would restore
#: from those).
NO_SNAPSHOTS = {"state.snapshot.interval.ms": -1}

# How long a stopped run may take to wind down: the runner ends the epochs and waits for the
# batch in flight (bounded by runner.STOP_GRACE_S = 60 s).
STOP_TIMEOUT_S = 90.0


class BackgroundRun:
    """``TopologyRunner(...).run()`` in a thread (continuous mode); stopped on exit."""

    def __init__(
        self,
        topology: str,
        settings: RunSettings,
        *,
        spark: Any,
        topology_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.runner = TopologyRunner(
            topology, settings, topology_kwargs=topology_kwargs, spark=spark
        )
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.stop_s: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="topology-run")

    def _run(self) -> None:
        try:
            self.result = self.runner.run()
        except BaseException as exc:  # reported by check()
            self.error = exc

    def __enter__(self) -> BackgroundRun:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> RunResult:
        """request_stop(), wait for run() to return, re-raise its error."""
        began = time.monotonic()
        self.runner.request_stop()
        self._thread.join(STOP_TIMEOUT_S)
        self.stop_s = time.monotonic() - began
        if self._thread.is_alive():
            pytest.fail(f"the run did not stop within {STOP_TIMEOUT_S:g}s of request_stop()")
        self.check()
        assert self.result is not None
        return self.result

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the run failed: {self.error!r}") from self.error

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if self._thread.is_alive():
            self.runner.request_stop()
            self._thread.join(STOP_TIMEOUT_S)


def settings_for(bootstrap: str, app_id: str, state_dir: Path, **overrides: Any) -> RunSettings:
    """A test run's settings (in epochs, run-topology's only runtime), console logs."""
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "application_id": app_id,
        "state_dir": str(state_dir),
        "log_format": "console",
    }
    values.update(overrides)
    return RunSettings(**values)
