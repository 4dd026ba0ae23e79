"""A worker's host process: Kafka Streams' stream thread for the tasks assigned to it.

One Spark task slot per worker holds the worker's epoch call (``spark/epoch_function.py``);
the call forwards the epoch to this process, which runs every task assigned to the worker in
one poll loop: one consumer over all their partitions (``continuous_input.WorkerInput``),
their commits at the same times. Everything Kafka Streams keeps per task stays per task (each
task's ``EpochTaskRunner``: stream time, punctuation, ``max.task.idle.ms``, handlers, its
commit markers, restore, snapshots, metrics); under exactly-once the tasks share the worker's
transactional producer and commit in one transaction (``worker_transaction.py``). Started by the first Spark Python
worker that runs the worker's epoch (``host_client.connect_or_start``) as
``python -m processor_api.runtime.worker_host NAME WORKER_KEY DAEMON_PID LOG_FORMAT`` (the
key, ``<state dir>/<application>/.worker-<id>``, only names it for people). It

* binds the abstract socket ``NAME`` (a second host for the same name exits at once);
* serves one request per connection (``protocol.py``): a ``WorkerEpochRequest`` keeps its
  connection for the whole epoch, and the tasks run only while that connection is up;
  ``EndEpochRequest`` (the driver stops the run: commit and end the epoch now) is answered by
  the acceptor thread at once, even mid-epoch, and an epoch of that run that begins afterwards
  is answered at once with the tasks' committed metadata, the tasks untouched;
  ``CutEpochRequest`` (the driver saw an executor go) is answered the same way and ends the
  running epoch with a commit, and only that one, so that Spark has its slot for a lost
  worker;
  ``CloseRequest`` (the run ended) closes every task and exits, after the host stopped
  listening; ``ReleaseRequest`` (another worker on this machine takes a task) closes that
  task at its next turn, dropping what it had not committed; ``WorkerStatusRequest`` (the
  driver saw an executor go) says which worker of the run this host serves and whether its
  owner is alive; ``AdoptTasksRequest`` (the driver moved a lost worker's tasks here,
  ``spark/failover.py``) queues them for the running epoch, whose loop begins them at its next
  turn, each rebuilt from its last commit;
* started by the driver of a local run before its query (``spark/early_start.py``), serves an
  ``EarlyStartRequest``: opens the worker's tasks as a first epoch would and, when told to,
  runs them in an epoch of its own until the first epoch's request comes or, in an
  available-now run, until they reach the run's end offsets; that request gets signs of life
  from the acceptor meanwhile;
* takes each task directory's lock when it opens the task and holds it until it closes the
  task, asking a previous owner on this machine to release it first; closes the tasks an
  epoch does not name (assigned elsewhere now);
* between two epochs of a continuous run goes on processing for up to ``EPOCH_GAP_S``
  (committed by the next epoch, dropped if none comes), so records arriving while Spark plans
  the next epoch are not held up;
* exits when the pyspark daemon that started it is gone, or has another parent (its executor
  ended or was killed), without closing anything: what it had not committed is done again
  from the committed state.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.metadata import TaskMetadata
from processor_api.errors import StreamsError
from processor_api.kafka.transaction_ends import known_one_at_a_time
from processor_api.logging import configure_logging, get_logger
from processor_api.runtime.continuous_input import WorkerInput
from processor_api.runtime.epoch_runner import (
    MAX_POLL_WAIT_S,
    EpochAbandoned,
    EpochControl,
    EpochTaskRunner,
)
from processor_api.runtime.guarantee import WorkerClients
from processor_api.runtime.host_client import (
    HOST_FILE,
    receive_message,
    request,
    send_message,
)
from processor_api.runtime.job import JobSpec
from processor_api.runtime.metrics import TaskMetrics
from processor_api.runtime.metrics_publisher import MetricsPublisher
from processor_api.runtime.protocol import (
    EARLY_EPOCH,
    AdoptTasksReply,
    AdoptTasksRequest,
    CloseRequest,
    CutEpochRequest,
    EarlyStartRequest,
    EndEpochRequest,
    EpochAlive,
    EpochReply,
    ErrorReply,
    OkReply,
    ReleaseRequest,
    TaskEpoch,
    WorkerEpochReply,
    WorkerEpochRequest,
    WorkerStatusReply,
    WorkerStatusRequest,
)
from processor_api.runtime.query_link import QueryLink
from processor_api.runtime.task_runner import delivery_timeout_ms
from processor_api.runtime.worker_globals import WorkerGlobalStores, worker_global_directory
from processor_api.runtime.worker_transaction import WorkerTransaction
from processor_api.state.locks import LOCK_TIMEOUT_S, TaskLock
from processor_api.state.manager import remove_leftovers, task_directory
from processor_api.state.rocksdb import RocksDBMemory, configure_memory
from processor_api.state.snapshots import finish_uploads

WATCH_INTERVAL_S = 0.5
#: The interpreter's switch interval of a host whose query link is up (``_link_queries``).
LINK_SWITCH_INTERVAL_S = 0.001


class WorkerHost:
    """The request handler and the poll loop of one worker's host process."""

    def __init__(self, name: str, owner: Owner | None = None) -> None:
        self.name = name
        self._owner = owner  # the pyspark daemon (or driver) that started this host
        self.runners: dict[str, EpochTaskRunner] = {}
        self._input: WorkerInput | None = None
        self._topology_run: str | None = None
        self._topology: Any = None
        self._spec: JobSpec | None = None
        self.ended_run: str | None = None  # the driver stops this run: end its epochs now
        #: the run whose epoch runs now (None between epochs), and whether the driver asked
        #: to end that epoch now (an executor was lost: Spark needs the slot)
        self._epoch_run: str | None = None
        self._epoch_cut = False
        self._serving: tuple[str, str] | None = None  # (run, worker) of the last epoch begun
        self._last_epoch = 0  # the number of the last epoch begun
        #: tasks the driver moved here from a lost worker, for the running epoch to take
        self._adoptions: list[str] = []
        self._adoptions_lock = threading.Lock()
        #: what the running epoch's loop needs to begin an adopted task
        self._epoch_context: _EpochContext | None = None
        self._publisher: MetricsPublisher | None = None  # the run asked for metrics
        self._metrics: dict[str, TaskMetrics] = {}  # of every task this host ran in the run
        self.stopping = threading.Event()  # a close request is queued
        self._releases: set[str] = set()  # tasks another worker asked for
        self._releases_lock = threading.Lock()
        #: monotonic time of the last sign of life of the loop (or of a restore)
        self._loop_at = time.monotonic()
        self._queries: QueryLink | None = None  # the run serves interactive queries
        #: the worker's copy of the global stores, shared by its tasks (opened by the first)
        self._globals: WorkerGlobalStores | None = None
        #: exactly-once: the worker's transactional producer, shared by its tasks
        self._transaction: WorkerTransaction | None = None
        #: at least once: the worker's producer and group committer, shared by its tasks
        self._clients: WorkerClients | None = None
        self._query_woken = threading.Event()  # a query waits: the loop does not wait
        self.idle = False  # the main thread waits for a request (no loop runs)
        self.wake_main: Callable[[], None] = lambda: None  # set by serve()
        #: the host is starting its tasks before the run's first epoch (start_early)
        self.starting_early = threading.Event()
        #: signs of life sent by the acceptor to epoch calls queued while starting early
        self.queued_alive: dict[socket.socket, _QueuedAlive] = {}
        self._log = get_logger("processor_api.worker_host")

    @property
    def alive_at(self) -> float:
        """When the loop, or any task's restore, last showed it was moving (monotonic)."""
        runners = tuple(self.runners.values())  # read by the signs-of-life thread
        return max([self._loop_at, *(r.alive_at for r in runners)])

    # --------------------------------------------------------------- requests
    def release_requested(self, task_id: str) -> None:
        """Another worker wants ``task_id`` (called by the acceptor thread)."""
        with self._releases_lock:
            self._releases.add(task_id)

    def _released(self, task_id: str) -> bool:
        with self._releases_lock:
            return task_id in self._releases

    def apply_releases(self) -> None:
        """Close the tasks another worker asked for (outside an epoch)."""
        with self._releases_lock:
            released, self._releases = self._releases, set()
        for task_id in released:
            if task_id in self.runners:
                self._close_task(task_id, reason="another worker on this machine takes it")

    def handle(self, message: CloseRequest) -> OkReply:
        """Close every task (the host exits after answering)."""
        self._close()
        return OkReply()

    # ------------------------------------------------------------ early start
    def start_early(self, request: EarlyStartRequest, stop: Callable[[], bool]) -> None:
        """Open the worker's tasks before the run's first epoch, build them with
        ``request.build`` and, with ``request.process`` too, run them in an epoch of this
        host's own (``EARLY_EPOCH``, no time limit) until ``stop()`` (a request came: the
        first epoch's, as a rule) or ``request.end`` (an available-now run's end offsets). A
        task that fails is left to the first epoch, which starts it again and reports its
        error."""
        spec = request.spec
        if self._spec is not None and self._spec.run_id == spec.run_id:
            return  # an epoch of the run came first: its tasks are running already
        if self._spec is not None:
            self._close()
        self._spec = spec
        self.starting_early.set()
        try:
            for task_id in request.tasks:
                if stop():
                    return  # an epoch came: it opens the tasks not started yet
                self._loop_at = time.monotonic()
                log = get_logger("processor_api.worker_host", task=task_id)
                try:
                    runner = self.runners.get(task_id) or self._open(spec, request.worker, task_id)
                    restored = runner.start_early() if request.build else 0
                except Exception as exc:  # noqa: BLE001 - the first epoch tries again
                    _early_failure(log, "task_start_early_failed", exc)
                    self._close_task(task_id, reason="it failed to start before the first epoch")
                    continue
                log.debug(
                    "task_started_early",
                    worker=request.worker,
                    built=request.build,
                    restored=restored,
                )
            if request.build and request.process and not stop():
                early = WorkerEpochRequest(
                    spec=spec,
                    worker=request.worker,
                    tasks=tuple(TaskEpoch(t, None) for t in request.tasks if t in self.runners),
                    epoch=EARLY_EPOCH,
                    end=request.end,
                )
                ended = lambda: stop() or self.ended_run == spec.run_id  # noqa: E731
                try:
                    self._run_epoch(early, lambda: True, ended)
                except Exception as exc:  # noqa: BLE001 - the first epoch rebuilds the tasks
                    _early_failure(self._log, "early_epoch_failed", exc)
        finally:
            self.starting_early.clear()

    def _stop_queued_alive(self, connection: socket.socket) -> None:
        alive = self.queued_alive.pop(connection, None)
        if alive is not None:
            alive.stop()

    # ------------------------------------------------------------------ epoch
    def epoch(
        self, request: WorkerEpochRequest, connection: socket.socket
    ) -> tuple[Any, float | None]:
        """Run one epoch of the worker's tasks while ``connection`` (the Spark task) is up;
        the reply (None when the Spark task is gone) and until when to go on between epochs
        (None: do not)."""
        self._stop_queued_alive(connection)
        spec = request.spec
        if self.ended_run == spec.run_id:
            return self._empty_epoch(request), None
        self._loop_at = time.monotonic()
        try:
            with _signs_of_life(connection, lambda: self.alive_at):
                reply = self._run_epoch(request, lambda: _connected(connection))
        except BaseException as exc:  # noqa: BLE001 - reported to the worker, which raises it
            return _error_reply(exc), None
        if reply is None:
            return None, None
        continuous = request.end.duration_s is not None and self.ended_run != spec.run_id
        return reply, (time.monotonic() + EPOCH_GAP_S) if continuous else None

    def _run_epoch(
        self,
        request: WorkerEpochRequest,
        connected: Callable[[], bool],
        end_requested: Callable[[], bool] | None = None,
    ) -> WorkerEpochReply | None:
        spec = request.spec
        if end_requested is None:
            self._epoch_run, self._epoch_cut = spec.run_id, False
            end_requested = lambda: self.ended_run == spec.run_id or self._epoch_cut  # noqa: E731
        if self._spec is not None and self._spec.run_id != spec.run_id:
            self._close()  # a new run of the same application: the tasks start afresh
        self._spec = spec
        wanted = {task.task_id for task in request.tasks}
        for task_id in [t for t in self.runners if t not in wanted]:
            self._close_task(task_id, reason="assigned to another worker")
        self.apply_releases()
        if self._transaction is not None and any(
            (runner := self.runners.get(task.task_id)) is not None
            and runner.ran_elsewhere(task.state_json)
            for task in request.tasks
        ):
            self._transaction.renew()
        self._serving, self._last_epoch = (spec.run_id, request.worker), request.epoch
        replies: dict[str, EpochReply] = {}
        active: dict[str, EpochTaskRunner] = {}
        context = _EpochContext(request, connected, end_requested)
        try:
            for task in request.tasks:
                self._begin_task(context, task, active, replies)
            self._drop_unassigned(request, active, replies)
            with self._adoptions_lock:
                self._epoch_context = context
            self._loop(active, replies, connected)
        except EpochAbandoned as exc:
            self._log.info("epoch_abandoned", epoch=request.epoch, detail=str(exc))
            self._abandon(active)
            return None
        except BaseException:
            self._abandon(active)
            raise
        finally:
            with self._adoptions_lock:
                self._epoch_run, self._epoch_context = None, None
                self._adoptions = []
        return WorkerEpochReply(replies)

    def _begin_task(
        self,
        context: _EpochContext,
        task: TaskEpoch,
        active: dict[str, EpochTaskRunner],
        replies: dict[str, EpochReply],
    ) -> None:
        """Open ``task`` (if this host does not hold it) and begin its part of the epoch: into
        ``active``, or into ``replies`` when its epoch ended at once."""
        request, connected = context.request, context.connected
        runner = self.runners.get(task.task_id) or self._open(
            request.spec, request.worker, task.task_id
        )
        control = EpochControl(
            connected=connected,
            end_requested=context.end_requested,
            release_requested=lambda t=task.task_id: (  # type: ignore[misc]
                self.stopping.is_set() or self._released(t)
            ),
        )
        try:
            ended = runner.begin_epoch(request.for_task(task), control)
        except EpochAbandoned as exc:
            if not connected():
                raise
            self._log_abandoned(task.task_id, request.epoch, exc)
            self._close_task(task.task_id, reason="another worker takes it")
            return
        if ended is not None:
            replies[task.task_id] = ended
        else:
            active[task.task_id] = runner

    def _drop_unassigned(
        self,
        request: WorkerEpochRequest,
        active: dict[str, EpochTaskRunner],
        replies: dict[str, EpochReply],
    ) -> None:
        """Close the epoch's tasks that the run's layout, read now, gives another worker.

        Read after the tasks began, so after this host's producer was initialized: if the
        driver fenced this worker (its tasks moved to a running worker when its executor was
        lost) before that, the layout it wrote first is the one read here; if after, this
        host's commits fail. Either way a host that began from an older layout never commits
        a task another worker holds (``runtime/worker_layout.py``)."""
        spec = request.spec
        if spec.layout is None or request.epoch == EARLY_EPOCH:
            return
        layout = spec.layout.read(spec.run_id)
        tasks = None if layout is None else layout.tasks_of(request.worker, request.epoch)
        if tasks is None:
            return
        for task_id in [t for t in (*active, *replies) if t not in tasks]:
            runner = active.pop(task_id, None)
            if runner is not None:
                runner.abandon_epoch()
            replies.pop(task_id, None)
            self._close_task(task_id, reason="the run's layout gives it to another worker")

    def _adopt_queued(
        self, active: dict[str, EpochTaskRunner], replies: dict[str, EpochReply]
    ) -> None:
        """Begin the tasks the driver moved here since the last turn (see :meth:`adopt`)."""
        context = self._epoch_context
        for task_id in self._take_adoptions():
            if context is None or task_id in active or task_id in replies:
                continue
            self._begin_task(context.joined_now(), TaskEpoch(task_id, None), active, replies)
            get_logger("processor_api.worker_host", task=task_id).info(
                "task_adopted", worker=context.request.worker, epoch=context.request.epoch
            )

    def status(self, run_id: str) -> WorkerStatusReply:
        """Which worker of run ``run_id`` this host serves (acceptor thread)."""
        serving = self._serving
        worker = serving[1] if serving is not None and serving[0] == run_id else None
        running = worker is not None and self._epoch_run == run_id and not self._epoch_cut
        alive = self._owner is None or self._owner.alive()
        return WorkerStatusReply(worker=worker, epoch_running=running, owner_alive=alive)

    def adopt(self, run_id: str, tasks: tuple[str, ...]) -> bool:
        """Queue ``tasks`` for the running epoch of run ``run_id`` (acceptor thread); False
        when none runs (the next epoch's call names them)."""
        with self._adoptions_lock:
            if self._epoch_run != run_id or self._epoch_cut or self._epoch_context is None:
                return False
            self._adoptions.extend(t for t in tasks if t not in self._adoptions)
        self._log.info("tasks_to_adopt", tasks=list(tasks), detail="their worker was lost")
        return True

    def _take_adoptions(self) -> list[str]:
        with self._adoptions_lock:
            taken, self._adoptions = self._adoptions, []
        return taken

    def cut_epoch(self, run_id: str) -> bool:
        """End the epoch of run ``run_id`` running now (with a commit, as at its end); whether
        one was running."""
        if self._epoch_run != run_id:
            return False
        self._epoch_cut = True
        self._log.info("epoch_cut", run_id=run_id, detail="an executor was lost")
        return True

    def _loop(
        self,
        active: dict[str, EpochTaskRunner],
        replies: dict[str, EpochReply],
        connected: Callable[[], bool],
    ) -> None:
        """Kafka Streams' stream thread loop over the worker's tasks: one fetch for all of
        them, a turn for each, one commit time for all, until every task's epoch ended."""
        if not active:
            return
        first = next(iter(active.values()))
        interval_s = first.config.commit_interval / 1000
        aligned = first.config.exactly_once and known_one_at_a_time(first.spec.bootstrap_servers)
        commit_at = next_commit_at(time.monotonic(), interval_s, aligned)
        wait_s = 0.0
        while active:
            self._loop_at = time.monotonic()
            if not connected():
                raise EpochAbandoned("the Spark task of the worker's epoch is gone")
            if self._adoptions:
                self._adopt_queued(active, replies)
            if len(active) > 1:
                self._shared_input().fetch(wait_s)
                turn_wait_s = 0.0
            else:
                turn_wait_s = MAX_POLL_WAIT_S  # one task: its own poll waits for input
            busy = False
            for task_id, runner in list(active.items()):
                try:
                    outcome = runner.turn(turn_wait_s, commit_at)
                except EpochAbandoned as exc:
                    if not connected():
                        raise
                    del active[task_id]
                    self._log_abandoned(task_id, None, exc)
                    self._close_task(task_id, reason="another worker takes it")
                    continue
                if isinstance(outcome, EpochReply):
                    replies[task_id] = outcome
                    del active[task_id]
                elif outcome.finished:
                    replies[task_id] = runner.end_epoch()
                    del active[task_id]
                else:
                    busy = busy or outcome.busy
            now = time.monotonic()
            if now >= commit_at:
                commit_at = next_commit_at(now, interval_s, aligned)
            if busy or not active:
                wait_s = 0.0
            else:
                wait_s = min(
                    [
                        max(0.0, commit_at - now),
                        *(r.next_due_s(MAX_POLL_WAIT_S) for r in active.values()),
                    ]
                )
            self.serve_queries()

    def _abandon(self, active: dict[str, EpochTaskRunner]) -> None:
        """Drop what the tasks of a failed or abandoned epoch did not commit."""
        for runner in active.values():
            runner.abandon_epoch()

    def _log_abandoned(self, task_id: str, epoch: int | None, exc: BaseException) -> None:
        get_logger("processor_api.worker_host", task=task_id).info(
            "epoch_abandoned", epoch=epoch, detail=str(exc)
        )

    def _empty_epoch(self, request: WorkerEpochRequest) -> WorkerEpochReply:
        """An epoch that begins after its run was asked to stop: nothing is done, and what
        Spark keeps for the tasks stays the last commit it knows of."""
        self._log.debug("epoch_after_stop", epoch=request.epoch)
        replies = {}
        for task in request.tasks:
            runner = self.runners.get(task.task_id)
            early = runner.reply_started_early(task.state_json) if runner is not None else None
            if early is not None:  # it committed before the first epoch: Spark keeps that
                replies[task.task_id] = early
                continue
            replies[task.task_id] = EpochReply(
                metadata_json=task.state_json or TaskMetadata().to_json(),
                processed=0,
                outputs=0,
                changelog_records=0,
                restored=0,
                commits=0,
                inits=runner.inits if runner is not None else 0,
                rebuilt=False,
            )
        return WorkerEpochReply(replies)

    # ------------------------------------------------------------ between epochs
    def between_epochs(self, until: float, stop: Callable[[], bool]) -> None:
        """Go on processing until ``until`` or until a request comes (see ``EPOCH_GAP_S``);
        not the tasks the run's layout gives other workers from the next epoch on: what they
        did now would be dropped, and with it what the others did (one transaction)."""
        staying = self._staying_next_epoch()
        runners = {t: r for t, r in self.runners.items() if staying is None or t in staying}
        if not runners:
            return
        for runner in runners.values():
            runner.begin_gap(lambda: stop() or self.stopping.is_set())
        try:
            wait_s = 0.0
            while runners and not stop() and not self.stopping.is_set():
                now = self._loop_at = time.monotonic()
                if now >= until:
                    return
                if len(runners) > 1:
                    self._shared_input().fetch(wait_s)
                busy = False
                for task_id, runner in list(runners.items()):
                    try:
                        busy = (
                            runner.gap_turn(MAX_POLL_WAIT_S if len(runners) == 1 else 0.0) or busy
                        )
                    except BaseException as exc:  # noqa: BLE001 - the next epoch rebuilds it
                        get_logger("processor_api.worker_host", task=task_id).warning(
                            "processing_between_epochs_failed", error=f"{type(exc).__name__}: {exc}"
                        )
                        runner.drop_uncommitted()
                        del runners[task_id]
                wait_s = 0.0 if busy else min(MAX_POLL_WAIT_S, max(0.0, until - now))
                self.serve_queries()
        finally:
            for runner in runners.values():
                runner.end_gap()

    def _staying_next_epoch(self) -> tuple[str, ...] | None:
        """The tasks this host's worker holds in the epoch after its last, by the run's layout
        (None: no layout says)."""
        spec, serving = self._spec, self._serving
        if spec is None or spec.layout is None or serving is None or serving[0] != spec.run_id:
            return None
        try:
            layout = spec.layout.read(spec.run_id)
        except (OSError, ValueError) as exc:
            self._log.warning("layout_unreadable", error=f"{type(exc).__name__}: {exc}")
            return None
        return None if layout is None else layout.tasks_of(serving[1], self._last_epoch + 1)

    def epoch_gap_expired(self) -> None:
        """No epoch came in time: drop what was done since the last commit."""
        for runner in self.runners.values():
            if runner.drop_uncommitted():
                get_logger("processor_api.worker_host", task=runner.task_id).info(
                    "uncommitted_work_dropped",
                    detail=f"no epoch came within {EPOCH_GAP_S:g}s of the last one",
                )

    # ------------------------------------------------------------------ tasks
    def _shared_input(self) -> WorkerInput:
        assert self._input is not None, "no task is open"
        return self._input

    def _open(self, spec: JobSpec, worker: str, task_id: str) -> EpochTaskRunner:
        configure_logging(spec.log_format)
        if self._topology_run != spec.run_id:
            self._topology = spec.load_topology()
            self._topology_run = spec.run_id
            gc.freeze()  # modules and the topology: out of every later collection
        if self._input is None:
            config = StreamsConfig.from_dict(spec.config)
            configure_memory(
                RocksDBMemory(
                    block_cache_bytes=config.rocksdb_block_cache_bytes,
                    write_buffer_bytes=config.rocksdb_write_buffer_manager_bytes,
                )
            )
            self._input = WorkerInput(
                spec.bootstrap_servers,
                f"worker-{os.getpid()}",
                isolation_level=config.processing_guarantee.isolation_level,
                kafka=spec.kafka,
            )
        directory = task_directory(spec.executor_state_dir, spec.config["application_id"], task_id)
        lock = self._take_lock(directory, task_id)
        try:
            (directory / HOST_FILE).write_text(self.name)
            runner = EpochTaskRunner(
                spec,
                self._topology,
                task_id,
                lock,
                shared_input=self._input,
                shared_global=self._worker_globals(spec, worker),
                shared_transaction=self._worker_transaction(spec, worker),
                shared_clients=self._worker_clients(spec, worker),
            )
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        self.runners[task_id] = runner
        self._metrics[task_id] = runner.metrics  # kept for the last report after it closes
        self._link_queries(spec, runner)
        if spec.metrics_interval_s is not None and self._publisher is None:
            try:
                self._publisher = MetricsPublisher(spec, lambda: list(self._metrics.values()))
            except Exception as exc:  # noqa: BLE001 - the tasks run on without metrics
                get_logger("processor_api.worker_host", task=task_id).warning(
                    "metrics_publisher_not_started", error=f"{type(exc).__name__}: {exc}"
                )
        return runner

    def _worker_globals(self, spec: JobSpec, worker: str) -> WorkerGlobalStores | None:
        """The worker's copy of the global stores, if the topology has any."""
        if self._globals is None and self._topology.global_stores():
            app = spec.config["application_id"]
            directory = worker_global_directory(spec.executor_state_dir, app, worker)
            self._globals = WorkerGlobalStores(directory, worker)
        return self._globals

    def _worker_transaction(self, spec: JobSpec, worker: str) -> WorkerTransaction | None:
        """Under exactly-once, the worker's producer and transaction (one for its tasks)."""
        config = StreamsConfig.from_dict(spec.config)
        if not config.exactly_once:
            return None
        transaction = self._transaction
        if transaction is not None and transaction.worker != worker:
            self._log.warning(
                "worker_changed",
                previous=transaction.worker,
                worker=worker,
                detail="a host serves one worker; its tasks of the other are closed",
            )
            for task_id in list(self.runners):
                self._close_task(task_id, reason=f"the host now serves worker {worker}")
            transaction.close()
            transaction = None
        if transaction is None:
            transaction = self._transaction = WorkerTransaction(
                spec.bootstrap_servers,
                config.application_id,
                worker,
                producer_config=spec.producer_config,
                kafka=spec.kafka,
                flush_timeout_s=spec.flush_timeout_s,
                message_timeout_ms=delivery_timeout_ms(config),
            )
        return transaction

    def _worker_clients(self, spec: JobSpec, worker: str) -> WorkerClients | None:
        """Under at_least_once, the worker's producer and group committer (one for its
        tasks)."""
        config = StreamsConfig.from_dict(spec.config)
        if config.exactly_once:
            return None
        if self._clients is None:
            self._clients = WorkerClients(
                spec.bootstrap_servers,
                config.application_id,
                worker,
                producer_config=spec.producer_config,
                kafka=spec.kafka,
                message_timeout_ms=delivery_timeout_ms(config),
            )
        return self._clients

    def _take_lock(self, directory: Path, task_id: str) -> TaskLock:
        """The task directory's lock; a worker elsewhere on this machine is asked to let go."""
        directory.mkdir(parents=True, exist_ok=True)
        remove_leftovers(directory.parent, task_id)  # of a `--cleanup` cut short
        lock = TaskLock(directory, task_id, timeout_s=0.0)
        try:
            return lock.__enter__()
        except StreamsError:
            pass
        try:
            holder = (directory / HOST_FILE).read_text().strip()
        except OSError:
            holder = ""
        if holder and holder != self.name:
            get_logger("processor_api.worker_host", task=task_id).info(
                "task_taken_over", previous_host=holder
            )
            try:
                request(holder, ReleaseRequest(task_id), timeout_s=LOCK_TIMEOUT_S)
            except (OSError, ConnectionError):
                pass  # it is gone or going; the lock tells
        return TaskLock(directory, task_id).__enter__()

    def _close_task(self, task_id: str, reason: str) -> None:
        runner = self.runners.pop(task_id, None)
        if runner is None:
            return
        if self._queries is not None:
            self._queries.set_tasks(self.runners)
        get_logger("processor_api.worker_host", task=task_id).info(
            "task_leaves_worker", reason=reason
        )
        try:
            try:
                (runner.directory / HOST_FILE).unlink(missing_ok=True)
            finally:
                runner.close()
        except Exception as exc:  # noqa: BLE001 - the other tasks go on; the cause is logged
            get_logger("processor_api.worker_host", task=task_id).warning(
                "task_close_failed", error=f"{type(exc).__name__}: {exc}"
            )

    # --------------------------------------------------------------- queries
    def _link_queries(self, spec: JobSpec, runner: EpochTaskRunner) -> None:
        """Interactive queries: dial the driver's router once, and tell it the tasks."""
        if spec.query_router is None or spec.query_secret is None:
            return
        runner.between_chunks = self.serve_queries
        if self._queries is None:
            # the link's thread answers point reads while the loop runs: it waits for the
            # interpreter's lock at most this long, not the default 5 ms, at each receive
            # and send (only while it waits does the loop give the lock up sooner)
            sys.setswitchinterval(LINK_SWITCH_INTERVAL_S)
            self._queries = QueryLink(
                spec.query_router,
                spec.query_secret,
                self.name,
                self._refusal,
                self._wake,
                self._read_off_loop,
            )
            if self._input is not None:
                self._input.woken = self._query_woken
        self._queries.set_tasks(self.runners)

    def _refusal(self, task_id: str) -> str | None:
        """Why a read of ``task_id`` cannot be answered now (link thread), if it cannot."""
        runner = self.runners.get(task_id)
        if runner is None:
            return f"task {task_id} is not on this worker (it moved)"
        if runner.metrics.phase in ("starting", "restoring"):
            return f"task {task_id} is restoring its stores"
        return None

    def _read_off_loop(self, task_id: str, request: dict[str, Any]) -> Any:
        """A point read answered on the link's thread, or None (``off_loop_reads.py``)."""
        runner = self.runners.get(task_id)
        return None if runner is None else runner.read_off_loop(request)

    def _wake(self) -> None:
        """A read was queued (link thread): end the loop's wait, or wake the idle host."""
        self._query_woken.set()
        if self.idle:
            self.wake_main()

    def query_waiting(self) -> bool:
        """Whether a read is queued."""
        return self._query_woken.is_set()

    def serve_queries(self) -> None:
        """Answer queued reads for a few milliseconds (loop thread)."""
        queries = self._queries
        if queries is None:
            return
        self._query_woken.clear()
        queries.serve(self._store_reader)

    def _store_reader(self, task_id: str) -> Any:
        runner = self.runners.get(task_id)
        return None if runner is None else runner.store_reader()

    def close(self) -> None:
        """Close every task and the metrics publisher."""
        self._close()

    def _close(self) -> None:
        publisher, self._publisher = self._publisher, None
        queries, self._queries = self._queries, None
        if queries is not None:
            queries.close()
        try:
            for task_id in list(self.runners):
                self._close_task(task_id, reason="the run ended")
            finish_uploads()  # the tasks' snapshots at close, before the host exits
            if self._input is not None:
                self._input.close()
                self._input = None
            globals_, self._globals = self._globals, None
            if globals_ is not None:
                globals_.close()
            transaction, self._transaction = self._transaction, None
            if transaction is not None:
                transaction.close()
            clients, self._clients = self._clients, None
            if clients is not None:
                clients.close()
        finally:
            self._spec = None
            self._metrics = {}
            if publisher is not None:
                publisher.close()


def next_commit_at(now: float, interval_s: float, aligned: bool) -> float:
    """When (monotonic) a worker commits next: ``interval_s`` from ``now``, or, ``aligned``,
    at the next multiple of ``interval_s`` of the wall clock, so that every worker of the
    machine commits at the same moments. That is for exactly-once on Tansu, whose last stable
    offset waits while transactions on a partition overlap: transactions that begin and end
    together are finalised together instead of holding each other back."""
    if not aligned or interval_s <= 0:
        return now + interval_s
    return now + (interval_s - time.time() % interval_s)


#: How often a host tells the Spark task of a running epoch that it is there.
ALIVE_INTERVAL_S = 5.0


class _QueuedAlive:
    """Signs of life (:class:`EpochAlive`) for an epoch call whose request waits while the
    host starts its tasks early: a restore may take longer than the call waits for a word."""

    def __init__(self, connection: socket.socket, alive_at: Callable[[], float]) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._send, args=(connection, alive_at), name="queued-alive", daemon=True
        )
        self._thread.start()

    def _send(self, connection: socket.socket, alive_at: Callable[[], float]) -> None:
        while not self._done.wait(ALIVE_INTERVAL_S):
            idle_s = max(0.0, time.monotonic() - alive_at())
            try:
                send_message(connection, EpochAlive(loop_idle_s=round(idle_s, 3)))
            except OSError:
                return

    def stop(self) -> None:
        """Stop sending (before anything else is sent on the connection)."""
        self._done.set()
        self._thread.join()


def _early_failure(log: Any, event: str, exc: Exception) -> None:
    """A failure before the first epoch: the first epoch builds the task again and, if the
    failure comes back, reports it as a run's failure; its cause is told there once, so here
    it is named by its type (the whole of it at debug)."""
    log.info(
        event,
        error_type=type(exc).__name__,
        detail="the first epoch builds the task again and reports the error if it recurs",
    )
    log.debug(event, error=f"{type(exc).__name__}: {exc}")


@contextmanager
def _signs_of_life(connection: socket.socket, alive_at: Callable[[], float]) -> Iterator[None]:
    """While the block runs (an epoch), send an :class:`EpochAlive` on ``connection`` every
    ``ALIVE_INTERVAL_S``, saying how long ago the loop last turned; stopped before the
    block's end, so the epoch's reply is the only message sent after it."""
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
    return ErrorReply("StreamsError", f"a worker host serves no {type(message).__name__}", "")


def _parent_of(pid: int) -> int | None:
    """The parent process id of ``pid`` (None: unknown, or no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # after the name, which may hold spaces


def _is_jvm(pid: int | None) -> bool:
    """Whether process ``pid`` is a Java virtual machine (by its command name)."""
    if pid is None:
        return False
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


class Owner:
    """The process that started this host (an executor's pyspark daemon, or the driver) and,
    for a daemon, its parent when the host started: the executor's JVM.

    When an executor's JVM is killed, its pyspark daemon notices within about a second and
    exits; but it is given another parent at once, so a changed parent tells sooner that the
    executor is gone. A driver that started its hosts itself (a local run) may be given
    another parent and run on (its shell ended): only a JVM parent is watched."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        parent = _parent_of(pid)
        self.parent = parent if _is_jvm(parent) else None

    def alive(self) -> bool:
        """Whether the owner runs, under the parent it had."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return self.parent is None or _parent_of(self.pid) in (self.parent, None)


@dataclass(frozen=True)
class _EpochContext:
    """The running epoch's request and its connection checks (to begin adopted tasks)."""

    request: WorkerEpochRequest
    connected: Callable[[], bool]
    end_requested: Callable[[], bool]
    began_at: float = field(default_factory=time.monotonic)

    def joined_now(self) -> _EpochContext:
        """The context for a task that joins the epoch now: it ends with the epoch's other
        tasks (what is left of a timed epoch's length)."""
        end = self.request.end
        if end.duration_s is None:
            return self
        left_s = max(0.0, end.duration_s - (time.monotonic() - self.began_at))
        request = replace(self.request, end=replace(end, duration_s=left_s))
        return replace(self, request=request)


def _watch(owner: Owner) -> None:
    """Exit when the pyspark daemon that started this host, or its executor, is gone."""
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if not owner.alive():
            os._exit(0)


#: A host that gets no request for this long closes its tasks and exits: Spark runs the
#: worker elsewhere now, or the run ended without closing its hosts (a killed driver). Epochs
#: (60 s by default) come far more often; a task that does come back after this reopens its
#: stores from the local checkpoint.
IDLE_RELEASE_S = 300.0

#: How long a host goes on processing after an epoch while the next one has not come
#: (Spark's planning between epochs takes about a second); what it did then is committed by
#: the next epoch, or dropped when none comes.
EPOCH_GAP_S = 15.0


class _Wake:
    """Queued by the acceptor so that the main thread looks at the released tasks."""


def _accept(server: socket.socket, host: WorkerHost, requests: queue.Queue) -> None:
    """The acceptor thread: reads each connection's request; an :class:`EndEpochRequest`
    and a :class:`ReleaseRequest` are answered here (the main thread may be inside an
    epoch); the others are queued."""
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
        if isinstance(
            message,
            EndEpochRequest
            | CutEpochRequest
            | ReleaseRequest
            | WorkerStatusRequest
            | AdoptTasksRequest,
        ):
            reply: Any = OkReply()
            if isinstance(message, EndEpochRequest):
                host.ended_run = message.run_id
            elif isinstance(message, CutEpochRequest):
                host.cut_epoch(message.run_id)
            elif isinstance(message, WorkerStatusRequest):
                reply = host.status(message.run_id)
            elif isinstance(message, AdoptTasksRequest):
                reply = AdoptTasksReply(host.adopt(message.run_id, message.tasks))
            else:
                host.release_requested(message.task_id)
                requests.put((_Wake(), None))
            with connection:
                try:
                    send_message(connection, reply)
                except OSError:
                    pass
            continue
        if isinstance(message, WorkerEpochRequest) and host.starting_early.is_set():
            # registered before it is queued: the main thread stops it when it takes the request
            host.queued_alive[connection] = _QueuedAlive(connection, lambda: host.alive_at)
        if isinstance(message, CloseRequest):
            # Stop listening before closing the tasks: a worker that connects meanwhile is
            # refused and starts a new host (which waits for the tasks' locks), instead of
            # queueing behind this host and losing its connection when the host exits.
            host.stopping.set()
            server.close()
            requests.put((message, connection))
            return
        requests.put((message, connection))


def serve(name: str, daemon_pid: int) -> None:
    """Bind ``name`` and serve requests until told to close (see the module docs)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("\0" + name)
    except OSError:
        return  # another host of this worker already serves the name
    server.listen(8)
    get_logger("processor_api.worker_host").debug("task_host_listening", host=name)
    owner = Owner(daemon_pid)
    threading.Thread(target=_watch, args=(owner,), daemon=True).start()
    host = WorkerHost(name, owner)
    requests: queue.Queue = queue.Queue()
    host.wake_main = lambda: requests.put((_Wake(), None))
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
        host.idle = True
        if host.query_waiting():  # queued just before the host said it was idle
            host.idle = False
            host.serve_queries()
            continue
        try:
            # a timeout of 0 would make get() non-blocking; 1 ms keeps it a wait
            message, connection = requests.get(timeout=max(idle_left, 0.001))
        except queue.Empty:
            continue
        finally:
            host.idle = False
        if isinstance(message, _Wake):
            host.apply_releases()
            host.serve_queries()
            continue
        if isinstance(message, EarlyStartRequest):
            with connection:
                try:
                    send_message(connection, OkReply())
                except OSError:
                    pass
            host.start_early(message, lambda: not requests.empty())
            host.apply_releases()
            last_request = time.monotonic()
            continue
        reply: Any
        with connection:
            if isinstance(message, WorkerEpochRequest):
                reply, gap_until = host.epoch(message, connection)
                exit_after = False
            elif isinstance(message, CloseRequest):
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
        host.apply_releases()
        last_request = time.monotonic()


def _release_idle(
    server: socket.socket,
    acceptor: threading.Thread,
    host: WorkerHost,
    requests: queue.Queue,
    idle_s: float,
) -> None:
    """Let the tasks go after ``IDLE_RELEASE_S`` without a request: they run elsewhere now
    (on another executor) or their run ended without closing the hosts. Requests that reached
    the host meanwhile are dropped unread, so their workers send them to a new host."""
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
        if connection is not None:
            connection.close()
    get_logger("processor_api.worker_host").info(
        "task_released_idle", idle_s=round(idle_s, 1), host=host.name, tasks=sorted(host.runners)
    )
    host.close()


def main(argv: list[str]) -> None:
    name, _key, daemon_pid, log_format = argv
    configure_logging(log_format)
    serve(name, int(daemon_pid))


if __name__ == "__main__":
    main(sys.argv[1:])
