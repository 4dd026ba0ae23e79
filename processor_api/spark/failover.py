"""The driver's part of moving tasks while a run goes on, as Kafka Streams rebalances when
stream threads come and go.

A worker holds a Spark task slot for its whole epoch, so when an executor is lost its workers'
epochs wait for a free slot (the survivors' epochs end, or a replacement registers) and their
tasks stand still meanwhile. Instead, :class:`Failover` moves the lost workers' tasks to the
workers still running (``on_lost``, from the executor watch):

1. it asks the worker hosts on this machine which worker each serves in this run and whether
   the process that started it is alive: the workers with a host there are *running*; a
   worker whose tasks' host files (written since the run started) name a host that is gone is
   *lost*; workers with no host here (other machines) keep their tasks, and so do workers
   Spark already re-ran in a free slot (their new host answers). A host tells that its
   executor is gone as soon as its pyspark daemon has another parent; while every host still
   answers the driver asks again, up to ``LOSS_SETTLE_S``;
2. writes the run's next layout generation (``runtime/worker_layout.py``), applying at once:
   the lost workers' tasks spread over the running workers, every other task where it is;
3. under exactly-once fences the lost workers' transactional ids (``init_transactions``), so
   a lost worker's host that still lives (a network partition, a stalled process) can commit
   nothing more;
4. hands each running worker's host its new tasks (``AdoptTasksRequest``): it rebuilds them
   from their last commit (snapshot and changelog tail) inside the epoch it runs and commits
   them in its transaction. A host whose epoch just ended gets them from its next epoch call,
   which reads the layout. The lost workers' epochs, re-run by Spark, find no tasks in the
   layout and end at once.

When executors come back (``on_added``) and Spark has a slot for every worker again, the end
of the next batch (``after_batch``) writes a generation that spreads the tasks over every
worker again (balanced, sticky: only what must move does) from the epoch after the next: each
moved task's last commit was made in an epoch that ended before that epoch began, so no two
workers hold a task in one epoch; and a running worker that reads at its epoch's end that a
task leaves it does not process that task between epochs (its work there would be dropped,
and with it, in one transaction, the other tasks').

Only hosts on the driver's machine can be asked; with none there (the driver on a machine of
its own) nothing is moved and the runner cuts the epochs instead (``executor_watch.py``).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from processor_api.logging import get_logger
from processor_api.runtime.host_client import HOST_FILE, request
from processor_api.runtime.protocol import (
    AdoptTasksReply,
    AdoptTasksRequest,
    WorkerStatusReply,
    WorkerStatusRequest,
)
from processor_api.runtime.worker_layout import LayoutGeneration, LayoutLocation, WorkerLayout
from processor_api.spark.assignment import (
    Assignment,
    assign_tasks,
    move_lost_tasks,
    record_assignment,
)
from processor_api.spark.checkpoint_files import CheckpointFiles

_log = get_logger("processor_api.runner")


class LossOutcome(enum.Enum):
    """What :meth:`Failover.on_lost` found and did."""

    #: the lost workers' tasks went to running workers
    MOVED = "moved"
    #: every worker seen on this machine runs: nothing to move
    NONE_LOST = "none lost"
    #: no worker of the run seen on this machine: the driver cannot tell (it cuts the epochs)
    UNKNOWN = "unknown"


#: How long the driver waits for a host's answer about its worker (seconds).
STATUS_TIMEOUT_S = 2.0
#: How long the driver waits for a host to take tasks (seconds).
ADOPT_TIMEOUT_S = 5.0
#: How long after Spark reported a loss the driver waits for the lost executor's worker hosts
#: on this machine to be gone (seconds), looking every ``SURVEY_INTERVAL_S``.
LOSS_SETTLE_S = 2.0
SURVEY_INTERVAL_S = 0.25


class Failover:
    """Moves a run's tasks between its workers when executors are lost or come back (see
    the module docs)."""

    def __init__(
        self,
        *,
        location: LayoutLocation,
        checkpoint: CheckpointFiles,
        run_id: str,
        application_id: str,
        task_ids: Sequence[str],
        assignment: Assignment,
        stateful: Collection[str],
        state_dirs: Callable[[], list[Path]],
        started_at: float,
        slots: Callable[[], int],
        fence: Callable[[list[str]], None] | None,
    ) -> None:
        self._location = location
        self._checkpoint = checkpoint
        self._run_id = run_id
        self._application_id = application_id
        self._workers = list(assignment)
        self._task_ids = list(task_ids)
        self._stateful = set(stateful)
        self._state_dirs = state_dirs
        self._started_at = started_at
        self._slots = slots
        self._fence = fence
        self._layout = WorkerLayout(run_id, (LayoutGeneration(0, 0, dict(assignment)),))
        self._spread_wanted = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ loss
    def on_lost(self) -> LossOutcome:
        """Executors were lost: move the lost workers' tasks to running workers (see
        :class:`LossOutcome` for what else may be found)."""
        with self._lock:
            current = self._layout.newest.workers
            deadline = time.monotonic() + LOSS_SETTLE_S
            while True:
                hosts, lost = self._survey()
                lost = [w for w in lost if current.get(w)]
                running = [w for w in self._workers if w in hosts]
                if lost or not running or time.monotonic() >= deadline:
                    break
                # Spark sees the loss before the lost executor's processes are gone: its
                # pyspark daemon notices within a second, its hosts half a second later
                time.sleep(SURVEY_INTERVAL_S)
            if not running:
                _log.info(
                    "tasks_not_moved",
                    detail="no worker of the run seen on this machine: the running epochs "
                    "are cut instead",
                )
                return LossOutcome.UNKNOWN
            if not lost:
                _log.info(
                    "tasks_not_moved",
                    running=running,
                    detail="every worker with a host on this machine runs (Spark re-ran the "
                    "lost ones in free slots, or they were elsewhere)",
                )
                return LossOutcome.NONE_LOST
            moved = move_lost_tasks(current, lost, running, self._stateful)
            self._write(0, moved)
            if self._fence is not None:
                self._fence(lost)
            adopted: dict[str, list[str]] = {}
            for worker in running:
                new = tuple(t for t in moved[worker] if t not in current.get(worker, ()))
                if new and self._adopt(hosts[worker], new):
                    adopted[worker] = list(new)
            self._spread_wanted = False
            _log.info(
                "tasks_moved",
                lost=lost,
                to={w: [t for t in moved[w] if t not in current.get(w, ())] for w in running},
                adopted_at_once=adopted,
                generation=self._layout.newest.generation,
            )
            return LossOutcome.MOVED

    def _survey(self) -> tuple[dict[str, str], list[str]]:
        """(the running workers' host names, the workers whose hosts here are all gone).

        Every host named by a task's host file written since the run started is asked (a
        task may have one in each executor's state directory: the lost executor's, and the
        one Spark already re-ran its worker on)."""
        names_of_tasks: dict[str, set[str]] = {}
        for directory in self._state_dirs():
            for task_id in self._task_ids:
                path = directory / self._application_id / task_id / HOST_FILE
                try:
                    if path.stat().st_mtime < self._started_at:
                        continue  # written by an earlier run
                    names_of_tasks.setdefault(task_id, set()).add(path.read_text().strip())
                except OSError:
                    continue
        running: dict[str, str] = {}
        gone: set[str] = set()
        for name in sorted(set().union(*names_of_tasks.values())):
            status = self._status(name)
            if status is not None and status.worker is not None and status.owner_alive:
                running[status.worker] = name
            else:
                gone.add(name)
        owner = {t: w for w, tasks in self._layout.newest.workers.items() for t in tasks}
        lost = {
            owner[t]
            for t, names in names_of_tasks.items()
            if t in owner and owner[t] not in running and names <= gone
        }
        return running, sorted(lost)

    def _status(self, name: str) -> WorkerStatusReply | None:
        try:
            reply = request(name, WorkerStatusRequest(self._run_id), timeout_s=STATUS_TIMEOUT_S)
        except TimeoutError:
            _log.info(
                "worker_host_silent",
                host=name,
                timeout_s=STATUS_TIMEOUT_S,
                detail="it took the request and did not answer (a stalled process): its "
                "worker counts as lost",
            )
            return None
        except (OSError, ConnectionError):
            return None  # no such host any more
        return reply if isinstance(reply, WorkerStatusReply) else None

    def _adopt(self, name: str, tasks: tuple[str, ...]) -> bool:
        try:
            reply = request(name, AdoptTasksRequest(self._run_id, tasks), timeout_s=ADOPT_TIMEOUT_S)
        except (OSError, ConnectionError) as exc:
            _log.info(
                "tasks_not_handed_over",
                host=name,
                tasks=list(tasks),
                error=f"{type(exc).__name__}: {exc}",
                detail="the worker's next epoch takes them, from the layout",
            )
            return False
        return isinstance(reply, AdoptTasksReply) and reply.accepted

    # --------------------------------------------------------------- spread
    def on_added(self) -> None:
        """Executors registered: if some worker holds no task, spread the tasks over every
        worker again once Spark has a slot for each (:meth:`after_batch`)."""
        with self._lock:
            if any(not self._layout.newest.workers.get(w) for w in self._workers):
                self._spread_wanted = True

    def after_batch(self, last_epoch: int) -> None:
        """A batch ended (every epoch call of it returned; the next has not begun): write the
        spread asked for by :meth:`on_added`, if Spark has the slots, for the epochs from the
        one after the next. Not the next: the running workers read the layout when their
        epoch ends, to leave the tasks that move alone between epochs (their work there
        would be dropped, and with it, in one transaction, their other tasks'), and the
        workers of ``last_epoch`` had ended theirs before this was written."""
        with self._lock:
            if not self._spread_wanted or self._slots() < len(self._workers):
                return
            current = self._layout.newest.workers
            previous = {t: w for w, tasks in current.items() for t in tasks}
            spread = assign_tasks(self._task_ids, self._workers, self._stateful, previous)
            self._spread_wanted = False
            if spread == {w: current.get(w, ()) for w in self._workers}:
                return
            self._write(last_epoch + 2, spread)
            _log.info(
                "tasks_spread",
                from_epoch=last_epoch + 2,
                workers={w: len(t) for w, t in spread.items()},
                generation=self._layout.newest.generation,
            )

    def _write(self, from_epoch: int, workers: Assignment) -> None:
        self._layout = self._layout.with_generation(from_epoch, workers)
        self._location.write(self._layout)
        record_assignment(self._checkpoint, dict(workers))
