"""A task's host process: owns one task on this executor for as long as the task stays here.

Started by the first Spark Python worker that gets the task (``host_client.connect_or_start``)
as ``python -m processor_api.runtime.task_host NAME TASK_DIR DAEMON_PID LOG_FORMAT``. It

* binds the abstract socket ``NAME`` (a second host for the same name exits at once);
* serves one request per connection: ``batch`` (run a micro-batch), ``close`` (close the
  task and exit: the end of a run) and ``release`` (another host on this machine wants the
  task: close it and exit); on ``close`` and ``release`` it stops listening first, so no
  request can queue behind a host that is about to exit;
* between requests, fires the task's wall-clock punctuations when they are due (see
  ``TaskRunner.punctuate_due``), so they do not wait for the next micro-batch;
* takes the task directory's lock on its first batch and holds it until it closes, asking a
  previous owner on this machine to release the task first;
* exits when the pyspark daemon that started it is gone (the executor ended or was killed),
  without closing anything: what it had not committed is re-run from Spark's state.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from processor_api.errors import StreamsError
from processor_api.logging import configure_logging, get_logger
from processor_api.runtime.host_client import (
    HOST_FILE,
    receive_message,
    request,
    send_message,
)
from processor_api.runtime.job import JobSpec
from processor_api.runtime.task_runner import TaskRunner
from processor_api.state.locks import LOCK_TIMEOUT_S, TaskLock

WATCH_INTERVAL_S = 0.5


class TaskHost:
    """The request handler of one host process."""

    def __init__(self, name: str, task_dir: Path) -> None:
        self.name = name
        self.task_dir = task_dir
        self.runner: TaskRunner | None = None
        self._topology_run: str | None = None
        self._topology: Any = None

    def handle(self, message: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The reply to one request, and whether the host should exit afterwards."""
        op = message.get("op")
        if op == "batch":
            return self._batch(message), False
        if op in ("close", "release"):
            self._close()
            return {"ok": True}, True
        return {"ok": False, "error_type": "StreamsError", "message": f"unknown op {op!r}",
                "traceback": ""}, False  # fmt: skip

    def _batch(self, message: dict[str, Any]) -> dict[str, Any]:
        spec: JobSpec = message["spec"]
        task_id: str = message["task_id"]
        try:
            if self.runner is not None and self.runner.spec.run_id != spec.run_id:
                self._close()  # a new run of the same application: the task starts afresh
            if self.runner is None:
                self.runner = self._open(spec, task_id)
            result = self.runner.run_batch(message["state"], message["ranges"])
            return {"ok": True, "result": result, "inits": self.runner.inits}
        except BaseException as exc:  # noqa: BLE001 - reported to the worker, which raises it
            # the runner has dropped its task; it rebuilds it on the next batch
            return {
                "ok": False,
                "error_type": type(exc).__name__,
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }

    def _open(self, spec: JobSpec, task_id: str) -> TaskRunner:
        configure_logging(spec.log_format)
        if self._topology_run != spec.run_id:
            self._topology = spec.load_topology()
            self._topology_run = spec.run_id
            gc.freeze()  # modules and the topology: out of every later collection
        lock = self._take_lock(task_id)
        try:
            (self.task_dir / HOST_FILE).write_text(self.name)
            return TaskRunner(spec, self._topology, task_id, lock)
        except BaseException:
            lock.__exit__(None, None, None)
            raise

    def _take_lock(self, task_id: str) -> TaskLock:
        """The task directory's lock; a host elsewhere on this machine is asked to let go."""
        self.task_dir.mkdir(parents=True, exist_ok=True)
        lock = TaskLock(self.task_dir, task_id, timeout_s=0.0)
        try:
            return lock.__enter__()
        except StreamsError:
            pass
        try:
            holder = (self.task_dir / HOST_FILE).read_text().strip()
        except OSError:
            holder = ""
        if holder and holder != self.name:
            get_logger("processor_api.task_host", task=task_id).info(
                "task_taken_over", previous_host=holder
            )
            try:
                request(holder, {"op": "release"}, timeout_s=LOCK_TIMEOUT_S)
            except (OSError, ConnectionError):
                pass  # it is gone or going; the lock tells
        return TaskLock(self.task_dir, task_id).__enter__()

    def seconds_to_next_punctuation(self) -> float | None:
        """How long the host may wait for a request before a punctuation is due."""
        return None if self.runner is None else self.runner.seconds_to_next_punctuation()

    def punctuate_due(self) -> None:
        """Between requests: fire the wall-clock punctuations that are due."""
        if self.runner is not None:
            self.runner.punctuate_due()

    def _close(self) -> None:
        runner, self.runner = self.runner, None
        if runner is not None:
            try:
                (self.task_dir / HOST_FILE).unlink(missing_ok=True)
            finally:
                runner.close()


def _watch(daemon_pid: int) -> None:
    """Exit when the pyspark daemon that started this host is gone."""
    while True:
        time.sleep(WATCH_INTERVAL_S)
        try:
            os.kill(daemon_pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass


def serve(name: str, task_dir: Path, daemon_pid: int) -> None:
    """Bind ``name`` and serve requests until told to close (see the module docs)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("\0" + name)
    except OSError:
        return  # another host of this task already serves the name
    server.listen(8)
    threading.Thread(target=_watch, args=(daemon_pid,), daemon=True).start()
    host = TaskHost(name, task_dir)
    while True:
        wait_s = host.seconds_to_next_punctuation()
        # a timeout of 0 would make accept() non-blocking; 1 ms keeps it a wait
        server.settimeout(None if wait_s is None else max(wait_s, 0.001))
        try:
            connection, _ = server.accept()
        except TimeoutError:
            host.punctuate_due()
            continue
        connection.settimeout(None)
        with connection:
            try:
                message = receive_message(connection)
            except (OSError, ConnectionError):
                continue
            if message is None:
                continue
            if message.get("op") in ("close", "release"):
                # Stop listening before closing the task: a worker that connects meanwhile is
                # refused and starts a new host (which waits for the task's lock), instead of
                # queueing behind this host and losing its connection when the host exits.
                server.close()
            reply, exit_after = host.handle(message)
            try:
                send_message(connection, reply)
            except OSError:
                pass  # the worker is gone; Spark re-runs the batch from its state
        if exit_after:
            return


def main(argv: list[str]) -> None:
    name, task_dir, daemon_pid, log_format = argv
    configure_logging(log_format)
    serve(name, Path(task_dir), int(daemon_pid))


if __name__ == "__main__":
    main(sys.argv[1:])
