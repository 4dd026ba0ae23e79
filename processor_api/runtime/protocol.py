"""The typed messages between a Spark task (or the driver) and a worker host.

One request per connection, answered by one reply (framing: ``host_client.send_message``).
A :class:`WorkerEpochRequest` keeps its connection open for the whole epoch: the worker runs
its tasks only while that connection is up, sends an :class:`EpochAlive` every few seconds,
and answers at the epoch's end with a :class:`WorkerEpochReply` (or an :class:`ErrorReply`).
The other requests are short: :class:`EndEpochRequest` (the driver stops the run: commit and
end the epoch now), :class:`CutEpochRequest` (the driver saw an executor go: commit and end the
running epoch now, so that Spark has the slot for the lost workers), :class:`WorkerStatusRequest`
and :class:`AdoptTasksRequest` (the driver moves a lost worker's tasks into a running worker's
epoch), :class:`CloseRequest` (the run ended: close every task, exit) and
:class:`ReleaseRequest` (another worker on this machine takes a task: drop what it has not
committed and close it). :class:`EarlyStartRequest` comes from the driver of a local run to a
host it started itself before its query (``spark/early_start.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from processor_api.runtime.job import JobSpec

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class EpochEnd:
    """When an epoch ends (the first that applies).

    * ``duration_s``: a continuous epoch's length (``--epoch-interval``); None: no time limit;
    * ``end_offsets``: per input partition, the offset the task must reach (``--available-now``
      and bounded epochs); partitions it does not name are not waited for;
    * ``caught_up``: a bounded epoch (too few Spark slots for continuous ones): it ends once
      the task reached the end offsets its partitions had when the epoch began.
    """

    duration_s: float | None = None
    end_offsets: dict[TopicPartitionKey, int] | None = None
    caught_up: bool = False


#: The number of the epoch a host started by the driver runs on its own before its run's
#: first (``EarlyStartRequest``); Spark's epochs are numbered from 1.
EARLY_EPOCH = 0


@dataclass(frozen=True)
class EpochRequest:
    """Run ``task_id`` for one epoch from its committed metadata ``state_json`` (Spark's
    ``GroupState``; None for a task Spark has never run)."""

    spec: JobSpec
    task_id: str
    state_json: str | None
    epoch: int
    end: EpochEnd = field(default_factory=EpochEnd)


@dataclass(frozen=True)
class TaskEpoch:
    """One task of a worker's epoch: its id and its committed metadata as Spark knows it
    (None: Spark has none for it on this worker)."""

    task_id: str
    state_json: str | None


@dataclass(frozen=True)
class WorkerEpochRequest:
    """Run the tasks assigned to ``worker`` for one epoch; tasks the worker holds and this
    request does not name are closed first (they were assigned elsewhere)."""

    spec: JobSpec
    worker: str
    tasks: tuple[TaskEpoch, ...]
    epoch: int
    end: EpochEnd = field(default_factory=EpochEnd)

    def for_task(self, task: TaskEpoch) -> EpochRequest:
        """The epoch of one of the tasks."""
        return EpochRequest(self.spec, task.task_id, task.state_json, self.epoch, self.end)


@dataclass(frozen=True)
class EndEpochRequest:
    """The driver is stopping run ``run_id``: commit now and end the running epoch; an epoch
    of that run that begins afterwards ends at once without touching the task (Spark may
    start one before the query stops)."""

    run_id: str


@dataclass(frozen=True)
class CutEpochRequest:
    """The driver saw an executor of run ``run_id`` go: commit now and end the epoch running
    now, so that its Spark task slot is free for a lost worker's epoch (Spark re-runs those
    only in a free slot). Epochs that begin afterwards run as usual."""

    run_id: str


@dataclass(frozen=True)
class WorkerStatusRequest:
    """The driver asks which worker of run ``run_id`` this host runs an epoch for (after an
    executor was lost: the hosts that answer are the workers still running)."""

    run_id: str


@dataclass(frozen=True)
class WorkerStatusReply:
    """The worker of the run asked about that this host serves (None: none), whether an epoch
    of it runs now, and whether the process that started this host (its executor's pyspark
    daemon, or the driver) is still there (a host of a lost executor may answer for a
    moment)."""

    worker: str | None
    epoch_running: bool
    owner_alive: bool


@dataclass(frozen=True)
class AdoptTasksRequest:
    """Take ``tasks`` of run ``run_id`` into the epoch running now (their worker was lost;
    ``spark/failover.py``): each is rebuilt from its last commit and runs in this worker's
    loop and transaction until the epoch ends. Answered with an :class:`AdoptTasksReply`."""

    run_id: str
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class AdoptTasksReply:
    """Whether the tasks were taken (False: no epoch of that run runs here now; the next
    epoch's call names them, from the run's layout)."""

    accepted: bool


@dataclass(frozen=True)
class CloseRequest:
    """Close every task (``close()`` of their processors runs) and exit: the run ended."""


@dataclass(frozen=True)
class ReleaseRequest:
    """Another worker on this machine takes ``task_id``: drop what it has not committed and
    close it (its lock is free once answered by the closing, not by the reply)."""

    task_id: str


@dataclass(frozen=True)
class EarlyStartRequest:
    """Open ``worker``'s tasks before the run's first epoch (the driver started this host
    while its query starts): take their locks; with ``build`` (a new checkpoint: Spark will
    hand over no state) also build them as the first epoch would for tasks Spark has never
    run (recover, restore, init, the input's consumer); with ``process`` run them in an
    epoch of the host's own (``EARLY_EPOCH``, committing as any epoch) until the first
    epoch's call takes them over, or until ``end`` (an available-now run's end offsets, the
    same its epochs get). Answered with an :class:`OkReply` at once."""

    spec: JobSpec
    worker: str
    tasks: tuple[str, ...]
    build: bool
    process: bool
    end: EpochEnd = field(default_factory=EpochEnd)


@dataclass(frozen=True)
class EpochAlive:
    """Sent by a host every few seconds while an epoch runs, before its reply: the host is
    there, and its loop last turned (or its restore last read a batch) ``loop_idle_s`` ago.
    The Spark task reads these while it waits, so a silent or stuck host is an error within
    a bounded time instead of a wait without end."""

    loop_idle_s: float


@dataclass(frozen=True)
class EpochReply:
    """What one epoch of a task did, and its last committed metadata (for ``GroupState``)."""

    metadata_json: str
    processed: int
    outputs: int
    changelog_records: int
    restored: int
    commits: int
    inits: int
    rebuilt: bool
    dropped_records: int = 0
    #: Records the broker had past what the task read when the epoch ended (None: unknown).
    lag: int | None = None


@dataclass(frozen=True)
class WorkerEpochReply:
    """Per task of the epoch, what it did; a task released to another worker meanwhile has
    no entry (Spark keeps what it had for it)."""

    replies: dict[str, EpochReply]


@dataclass(frozen=True)
class OkReply:
    """A short request was carried out."""


@dataclass(frozen=True)
class ErrorReply:
    """The request failed in the host; the Spark task raises it (``host_client.raise_remote``)."""

    error_type: str
    message: str
    traceback: str
