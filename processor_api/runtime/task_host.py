"""A task's host process: owns one task on this executor for as long as the task stays here.

Started by the first Spark Python worker that gets the task (``host_client.connect_or_start``)
as ``python -m processor_api.runtime.task_host NAME TASK_DIR DAEMON_PID LOG_FORMAT``. It

* binds the abstract socket ``NAME`` (a second host for the same name exits at once);
* serves one request per connection (``protocol.py``): an ``EpochRequest`` keeps its
  connection for the whole epoch, and the task runs (``EpochTaskRunner.run_epoch``) only while
  that connection is up; ``EndEpochRequest`` (the driver stops the run: commit and end the
  epoch now) is answered by the acceptor thread at once, even mid-epoch, and an epoch of that
  run that begins afterwards is answered at once with the task's committed metadata, the task
  untouched (the query's stop may cancel it); ``CloseRequest`` (the run ended) and
  ``ReleaseRequest`` (another host on this machine wants the task) close the task and exit,
  after the host stopped listening, so no request queues behind a host that is about to
  exit;
* between two epochs of a continuous run goes on processing for up to ``EPOCH_GAP_S``
  (committed by the next epoch, dropped if none comes), so records arriving while Spark plans
  the next epoch are not held up;
* takes the task directory's lock on its first request and holds it until it closes, asking a
  previous owner on this machine to release the task first;
* exits when the pyspark daemon that started it is gone (the executor ended or was killed),
  without closing anything: what it had not committed is done again from the committed state.
"""

from __future__ import annotations

import gc
import os
import queue
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from processor_api.engine.metadata import TaskMetadata
from processor_api.errors import StreamsError
from processor_api.logging import configure_logging, get_logger
from processor_api.runtime.epoch_runner import EpochAbandoned, EpochControl, EpochTaskRunner
from processor_api.runtime.host_client import (
    HOST_FILE,
    receive_message,
    request,
    send_message,
)
from processor_api.runtime.job import JobSpec
from processor_api.runtime.metrics_publisher import MetricsPublisher
from processor_api.runtime.protocol import (
    CloseRequest,
    EndEpochRequest,
    EpochAlive,
    EpochReply,
    EpochRequest,
    ErrorReply,
    OkReply,
    ReleaseRequest,
)
from processor_api.state.locks import LOCK_TIMEOUT_S, TaskLock
from processor_api.state.manager import remove_leftovers

WATCH_INTERVAL_S = 0.5


class TaskHost:
    """The request handler of one host process."""

    def __init__(self, name: str, task_dir: Path) -> None:
        self.name = name
        self.task_dir = task_dir
        self.runner: EpochTaskRunner | None = None
        self._topology_run: str | None = None
        self._topology: Any = None
        self.ended_run: str | None = None  # the driver stops this run: end its epochs now
        self._publisher: MetricsPublisher | None = None  # the run asked for metrics
        self.stopping = threading.Event()  # a close or release request is queued

    def handle(self, message: CloseRequest | ReleaseRequest) -> OkReply:
        """Close the task (the host exits after answering)."""
        self._close()
        return OkReply()

    def epoch(self, request: EpochRequest, connection: socket.socket) -> tuple[Any, float | None]:
        """Run one epoch while ``connection`` (the Spark task) is up; the reply (None when
        the Spark task is gone) and until when to go on between epochs (None: do not)."""
        spec = request.spec
        if self.ended_run == spec.run_id:
            return self._empty_epoch(request), None
        started = time.monotonic()
        try:
            with _signs_of_life(
                connection, lambda: started if self.runner is None else self.runner.alive_at
            ):
                if self.runner is not None and self.runner.spec.run_id != spec.run_id:
                    self._close()  # a new run of the same application: the task starts afresh
                if self.runner is None:
                    self.runner = self._open(spec, request.task_id)
                control = EpochControl(
                    connected=lambda: _connected(connection),
                    end_requested=lambda: self.ended_run == spec.run_id,
                    release_requested=self.stopping.is_set,
                )
                reply = self.runner.run_epoch(request, control)
        except EpochAbandoned as exc:
            get_logger("processor_api.task_host", task=request.task_id).info(
                "epoch_abandoned", epoch=request.epoch, detail=str(exc)
            )
            return None, None
        except BaseException as exc:  # noqa: BLE001 - reported to the worker, which raises it
            return _error_reply(exc), None
        continuous = request.end.duration_s is not None and self.ended_run != spec.run_id
        return reply, (time.monotonic() + EPOCH_GAP_S) if continuous else None

    def _empty_epoch(self, request: EpochRequest) -> EpochReply:
        """An epoch that begins after its run was asked to stop: nothing is done, and what
        Spark keeps for the task stays the last commit it knows of."""
        get_logger("processor_api.task_host", task=request.task_id).debug(
            "epoch_after_stop", epoch=request.epoch
        )
        return EpochReply(
            metadata_json=request.state_json or TaskMetadata().to_json(),
            processed=0,
            outputs=0,
            changelog_records=0,
            restored=0,
            commits=0,
            inits=self.runner.inits if self.runner is not None else 0,
            rebuilt=False,
        )

    def between_epochs(self, until: float, stop: Any) -> None:
        """Go on processing until ``until`` or until a request comes (see ``EPOCH_GAP_S``)."""
        runner = self.runner
        if runner is None:
            return
        try:
            runner.keep_going(until, lambda: stop() or self.stopping.is_set())
        except BaseException as exc:  # noqa: BLE001 - the next epoch rebuilds and reports it
            get_logger("processor_api.task_host", task=runner.task_id).warning(
                "processing_between_epochs_failed", error=f"{type(exc).__name__}: {exc}"
            )
            runner.drop_uncommitted()

    def epoch_gap_expired(self) -> None:
        """No epoch came in time: drop what was done since the last commit."""
        if self.runner is not None and self.runner.drop_uncommitted():
            get_logger("processor_api.task_host", task=self.runner.task_id).info(
                "uncommitted_work_dropped",
                detail=f"no epoch came within {EPOCH_GAP_S:g}s of the last one",
            )

    def _open(self, spec: JobSpec, task_id: str) -> EpochTaskRunner:
        configure_logging(spec.log_format)
        if self._topology_run != spec.run_id:
            self._topology = spec.load_topology()
            self._topology_run = spec.run_id
            gc.freeze()  # modules and the topology: out of every later collection
        lock = self._take_lock(task_id)
        try:
            (self.task_dir / HOST_FILE).write_text(self.name)
            runner = EpochTaskRunner(spec, self._topology, task_id, lock)
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        if spec.metrics_interval_s is not None and self._publisher is None:
            metrics = runner.metrics  # kept for the last report, sent after the task closed
            try:
                self._publisher = MetricsPublisher(spec, lambda: [metrics])
            except Exception as exc:  # noqa: BLE001 - the task runs on without metrics
                get_logger("processor_api.task_host", task=task_id).warning(
                    "metrics_publisher_not_started", error=f"{type(exc).__name__}: {exc}"
                )
        return runner

    def _take_lock(self, task_id: str) -> TaskLock:
        """The task directory's lock; a host elsewhere on this machine is asked to let go."""
        self.task_dir.mkdir(parents=True, exist_ok=True)
        remove_leftovers(self.task_dir.parent, task_id)  # of a `--cleanup` cut short
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
                request(holder, ReleaseRequest(), timeout_s=LOCK_TIMEOUT_S)
            except (OSError, ConnectionError):
                pass  # it is gone or going; the lock tells
        return TaskLock(self.task_dir, task_id).__enter__()

    def close(self) -> None:
        """Close the task (if any) and the metrics publisher."""
        self._close()

    def _close(self) -> None:
        runner, self.runner = self.runner, None
        publisher, self._publisher = self._publisher, None
        try:
            if runner is not None:
                try:
                    (self.task_dir / HOST_FILE).unlink(missing_ok=True)
                finally:
                    runner.close()
        finally:
            if publisher is not None:
                publisher.close()


#: How often a host tells the Spark task of a running epoch that it is there.
ALIVE_INTERVAL_S = 5.0


@contextmanager
def _signs_of_life(connection: socket.socket, alive_at: Callable[[], float]) -> Iterator[None]:
    """While the block runs (an epoch), send an :class:`EpochAlive` on ``connection`` every
    ``ALIVE_INTERVAL_S``, saying how long ago the runner's loop last turned; stopped before
    the block's end, so the epoch's reply is the only message sent after it."""
    done = threading.Event()

    def send() -> None:
        while not done.wait(ALIVE_INTERVAL_S):
            idle_s = max(0.0, time.monotonic() - alive_at())
            try:
                send_message(connection, EpochAlive(loop_idle_s=round(idle_s, 3)))
            except OSError:
                return  # the Spark task is gone: the loop sees it as well

    thread = threading.Thread(target=send, name="epoch-alive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _connected(connection: socket.socket) -> bool:
    """Whether the peer of ``connection`` is still there (it sends nothing during an epoch,
    so readable means closed)."""
    try:
        data = connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return data != b""


def _error_reply(exc: BaseException) -> ErrorReply:
    return ErrorReply(type(exc).__name__, str(exc), traceback.format_exc())


def _error_reply_for(message: Any) -> ErrorReply:
    """The reply to a message this host does not serve (a client of another version)."""
    return ErrorReply("StreamsError", f"a task host serves no {type(message).__name__}", "")


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


#: A host that gets no request for this long closes its task and exits: Spark runs the task
#: elsewhere now, or the run ended without closing its hosts (a killed driver). Epochs
#: (60 s by default) come far more often; a task that does come back after this reopens its
#: stores from the local checkpoint.
IDLE_RELEASE_S = 300.0

#: How long a host goes on processing after an epoch while the next one has not come
#: (Spark's planning between epochs takes about a second); what it did then is committed by
#: the next epoch, or dropped when none comes.
EPOCH_GAP_S = 15.0


def _is_stop(message: Any) -> bool:
    return isinstance(message, CloseRequest | ReleaseRequest)


def _accept(server: socket.socket, host: TaskHost, requests: queue.Queue) -> None:
    """The acceptor thread: reads each connection's request; an :class:`EndEpochRequest`
    is answered here (the main thread may be inside an epoch); the others are queued."""
    while True:
        try:
            connection, _ = server.accept()
        except OSError:
            return  # the server socket closed: the host is stopping
        connection.settimeout(None)
        try:
            message = receive_message(connection)
        except (OSError, ConnectionError):
            connection.close()
            continue
        if message is None:
            connection.close()
            continue
        if isinstance(message, EndEpochRequest):
            host.ended_run = message.run_id
            with connection:
                try:
                    send_message(connection, OkReply())
                except OSError:
                    pass
            continue
        if _is_stop(message):
            # Stop listening before closing the task: a worker that connects meanwhile is
            # refused and starts a new host (which waits for the task's lock), instead of
            # queueing behind this host and losing its connection when the host exits.
            host.stopping.set()
            server.close()
            requests.put((message, connection))
            return
        requests.put((message, connection))


def serve(name: str, task_dir: Path, daemon_pid: int) -> None:
    """Bind ``name`` and serve requests until told to close (see the module docs)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("\0" + name)
    except OSError:
        return  # another host of this task already serves the name
    server.listen(8)
    get_logger("processor_api.task_host").debug("task_host_listening", task_dir=str(task_dir))
    threading.Thread(target=_watch, args=(daemon_pid,), daemon=True).start()
    host = TaskHost(name, task_dir)
    requests: queue.Queue = queue.Queue()
    acceptor = threading.Thread(target=_accept, args=(server, host, requests), daemon=True)
    acceptor.start()
    gap_until: float | None = None
    last_request = time.monotonic()
    while True:
        if gap_until is not None and requests.empty():
            host.between_epochs(gap_until, lambda: not requests.empty())
            if requests.empty():
                host.epoch_gap_expired()
            gap_until = None
        idle_left = IDLE_RELEASE_S - (time.monotonic() - last_request)
        if idle_left <= 0:
            _release_idle(server, acceptor, host, requests, time.monotonic() - last_request)
            return
        try:
            # a timeout of 0 would make get() non-blocking; 1 ms keeps it a wait
            message, connection = requests.get(timeout=max(idle_left, 0.001))
        except queue.Empty:
            continue
        reply: Any
        with connection:
            if isinstance(message, EpochRequest):
                reply, gap_until = host.epoch(message, connection)
                exit_after = False
            elif _is_stop(message):
                reply, exit_after = host.handle(message), True
            else:
                reply, exit_after = _error_reply_for(message), False
            if reply is not None:
                try:
                    send_message(connection, reply)
                except OSError:
                    gap_until = None  # the Spark task is gone: Spark re-runs the epoch
        if exit_after:
            server.close()
            return
        last_request = time.monotonic()


def _release_idle(
    server: socket.socket,
    acceptor: threading.Thread,
    host: TaskHost,
    requests: queue.Queue,
    idle_s: float,
) -> None:
    """Let the task go after ``IDLE_RELEASE_S`` without a request: it runs elsewhere now (on
    another executor) or its run ended without closing the hosts. Requests that reached the
    host meanwhile are dropped unread, so their workers send them to a new host."""
    host.stopping.set()
    try:
        server.shutdown(socket.SHUT_RDWR)  # wakes the acceptor's accept(); close() alone would not
    except OSError:
        pass
    server.close()
    acceptor.join(WATCH_INTERVAL_S * 4)
    while True:
        try:
            _, connection = requests.get_nowait()
        except queue.Empty:
            break
        connection.close()
    task_id = host.runner.task_id if host.runner is not None else None
    get_logger("processor_api.task_host", task=task_id).info(
        "task_released_idle", idle_s=round(idle_s, 1), host=host.name
    )
    host.close()


def main(argv: list[str]) -> None:
    name, task_dir, daemon_pid, log_format = argv
    configure_logging(log_format)
    serve(name, Path(task_dir), int(daemon_pid))


if __name__ == "__main__":
    main(sys.argv[1:])
