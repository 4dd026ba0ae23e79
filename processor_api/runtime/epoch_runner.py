"""One task in long-running epochs: Kafka Streams' poll loop inside a Spark epoch.

An :class:`EpochTaskRunner` lives in the task's host process (``worker_host.py``); with what
it inherits from :class:`~processor_api.runtime.task_runner.TaskRunner` it keeps what Kafka
Streams' stream thread keeps for a task: processors after one ``init()``, open stores, a
producer and a consumer of its partitions (:class:`ContinuousInput`). An epoch is::

    resume    the last committed metadata == the state Spark hands over? go on; otherwise
              drop the task and rebuild it (recover: adopt a newer committed marker; restore
              the stores; init the processors) and seek the input to its positions
    loop      poll what arrived -> process (max.task.idle.ms from the known lags) ->
              punctuate (stream time after records, wall clock when due) ->
              commit every commit.interval.ms, or when a processor asked for it (at_least_once:
              cut the batch, go on processing, complete the commit once the cut's records
              are acknowledged; see _CommitInFlight)
    end       the epoch's time is up, the task reached its end offsets (available-now,
              bounded epochs) or the driver asked to stop: commit, hand back the metadata

Sink records are produced as they are made: under at_least_once a consumer sees them at once;
under exactly_once_v2 at the commit of their transaction. The loop stops at once, dropping
what it has not committed (the transaction aborts), when the Spark task that opened the epoch
disconnects (:class:`EpochControl`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.task import Task
from processor_api.errors import ProducerWedgedError, StreamsError, WaitInterrupted
from processor_api.kafka.offsets import end_offsets
from processor_api.runtime.continuous_input import ContinuousInput, WorkerInput
from processor_api.runtime.protocol import EARLY_EPOCH, EpochEnd, EpochReply, EpochRequest
from processor_api.runtime.task_runner import LastCommit, TaskRunner

#: The longest the loop waits for input before it looks at its clocks again.
MAX_POLL_WAIT_S = 0.2
#: Global stores are caught up at most this often in a running epoch.
GLOBAL_CATCH_UP_S = 1.0
#: A run that stops ends a wait for an unreachable broker after this long: the epoch ends
#: without committing what followed its last commit (done again by the next run).
STOP_WAIT_S = 5.0
#: An at_least_once commit in flight (see :class:`_CommitInFlight`) waits this long for its
#: acknowledgements between turns; after that the loop waits for them (an outage is ridden
#: out up to ``task.timeout.ms`` as in any commit).
IN_FLIGHT_MAX_S = 5.0
#: While a commit is in flight the loop looks for its acknowledgements at least this often.
IN_FLIGHT_POLL_S = 0.005


def _interruption(control: EpochControl, waited_s: float) -> str | None:
    """Why a wait for the broker must end now, if it must."""
    if not control.connected():
        return "the Spark task of the epoch is gone"
    if control.release_requested():
        return "another host takes the task"
    if control.end_requested() and waited_s >= STOP_WAIT_S:
        return f"the run stops (waited {waited_s:.0f}s)"
    return None


class EpochAbandoned(StreamsError):
    """The Spark task that opened the epoch is gone: nothing uncommitted was kept."""


@dataclass
class EpochControl:
    """What the loop asks of the world while it runs.

    ``connected``: whether the Spark task that opened the epoch is still there;
    ``end_requested``: whether the driver asked the epoch to end now (a stopping run);
    ``release_requested``: whether another host on this machine wants the task.
    """

    connected: Callable[[], bool]
    end_requested: Callable[[], bool] = lambda: False
    release_requested: Callable[[], bool] = lambda: False


@dataclass
class _Counts:
    processed: int = 0
    outputs: int = 0
    changelog_records: int = 0
    commits: int = 0
    dropped: int = 0


@dataclass
class TurnOutcome:
    """What one turn of a task's loop did."""

    finished: bool  # the task's epoch ended (committed); no more turns this epoch
    busy: bool  # it processed, punctuated or committed something


@dataclass
class _CommitInFlight:
    """An at_least_once commit cut but not complete: its changelog records are sent and the
    next batch is being processed while their acknowledgements come."""

    generation: int  # the producer's generation of the batch's records (DeliveryTracker.cut)
    metadata: TaskMetadata  # the task's metadata at the cut
    offsets: dict[tuple[str, int], int]  # the group offsets at the cut
    covered: dict[str, dict[bytes, bytes | None]]  # the buffered store writes at the cut
    changelog_records: int
    started: float  # monotonic
    sent: float  # monotonic: the changelog records handed to the producer


@dataclass
class _StagedCommit:
    """A task's part of its worker's transaction being committed (``worker_transaction.py``)."""

    started: float  # monotonic
    changelog_records: int
    dropped_before: int  # records dropped by the production handler before the commit
    step_ends: list[float]
    offsets: dict[tuple[str, int], int] | None = None  # the group offsets (after mark)
    positions: dict[str, int] | None = None  # the changelog offsets (after mark)
    marked: TaskMetadata | None = None  # the metadata its marker carries (after mark)


@dataclass
class _Epoch:
    """The epoch a task is in."""

    request: EpochRequest
    control: EpochControl
    deadline: float | None  # monotonic; None: no time limit
    rebuilt: bool
    restored: int


class EpochTaskRunner(TaskRunner):
    """Runs the epochs of one task while this process owns it (see the module docs).

    Alone (:meth:`run_epoch`) the task has its loop to itself. A worker running many tasks
    (``worker_host.py``) drives each through :meth:`begin_epoch`, :meth:`turn` and
    :meth:`end_epoch` in one loop, with their inputs on one consumer (``shared_input``) and
    their commits at the same times.
    """

    def __init__(self, *args: Any, shared_input: WorkerInput | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shared_input = shared_input
        self._stream: ContinuousInput | None = None
        self._dirty = False  # something to commit since the last commit
        self._counts = _Counts()
        self._last_commit_json: str | None = None  # survives the task being dropped
        self._first_records_seen = False  # the first input this host processes is logged
        self._epoch: _Epoch | None = None
        self._in_flight: _CommitInFlight | None = None
        #: Started before the run's first epoch (:meth:`start_early`), as for a task Spark has
        #: never run, and held since: until that epoch ends, no state from Spark means go on.
        self._started_early = False
        self._restored_early = 0  # reported with the first epoch

    # ------------------------------------------------------------------ epoch
    def run_epoch(self, request: EpochRequest, control: EpochControl) -> EpochReply:
        """One epoch of the task with the loop to itself (see the module docs)."""
        interval_s = self.config.commit_interval / 1000
        ended = self.begin_epoch(request, control)
        if ended is not None:
            return ended
        commit_at = time.monotonic() + interval_s
        while True:
            outcome = self.turn(MAX_POLL_WAIT_S, commit_at)
            if isinstance(outcome, EpochReply):
                return outcome
            if outcome.finished:
                return self.end_epoch()
            if time.monotonic() >= commit_at:
                commit_at = time.monotonic() + interval_s

    def begin_epoch(self, request: EpochRequest, control: EpochControl) -> EpochReply | None:
        """Resume or rebuild the task for the epoch of ``request``; an :class:`EpochReply` when
        the epoch already ended (the run stops while the broker does not answer)."""
        self._patience.interrupted = lambda waited_s: _interruption(control, waited_s)
        self._last_commit_json = request.state_json
        self.alive_at = time.monotonic()
        end = request.end

        def begin() -> None:
            rebuilt, restored = self._resume(request.state_json)
            stream = self._stream
            assert stream is not None
            stream.set_bounds(self._bounds(end))
            deadline = None if end.duration_s is None else time.monotonic() + end.duration_s
            self._epoch = _Epoch(request, control, deadline, rebuilt, restored)
            self._open_batch()

        return self._guarded(control, begin)

    def start_early(self) -> int:
        """Before the run's first epoch (the driver started this host while its query
        starts): rebuild the task as the first epoch would for a task Spark has never run
        (recover, restore, init, seek the input); returns the records restored. The first
        epoch goes on with it if it hands over no state, or the state it was rebuilt to."""
        _, restored = self._resume(None)
        self._started_early = True
        self._restored_early = restored
        return restored

    def reply_started_early(self, state_json: str | None) -> EpochReply | None:
        """The reply of an epoch that ends at once (its run stops) for a task started early
        and held since, which Spark hands no state (``state_json`` None): what the task
        committed and did before the first epoch (None for any other task)."""
        if not (self._started_early and state_json is None and self._task is not None):
            return None
        counts, self._counts = self._counts, _Counts()
        self._started_early = False
        restored, self._restored_early = self._restored_early, 0
        return EpochReply(
            metadata_json=self._committed.json if self._committed else TaskMetadata().to_json(),
            processed=counts.processed,
            outputs=counts.outputs,
            changelog_records=counts.changelog_records,
            restored=restored,
            commits=counts.commits,
            inits=self.inits,
            rebuilt=False,
            dropped_records=counts.dropped,
        )

    def turn(self, wait_s: float, commit_at: float) -> TurnOutcome | EpochReply:
        """One turn of the loop: poll (waiting up to ``wait_s`` for input), process until a
        commit, punctuation or the epoch's end is due, punctuate, and commit when the epoch
        ends, a processor asked for it or ``commit_at`` (monotonic) has come. An
        :class:`EpochReply` when the epoch ended without its uncommitted work."""
        epoch = self._epoch
        assert epoch is not None, "turn() outside an epoch"
        return self._guarded(epoch.control, lambda: self._turn(epoch, wait_s, commit_at))

    def end_epoch(self) -> EpochReply:
        """The reply of the epoch whose last turn finished it."""
        epoch, self._epoch = self._epoch, None
        assert epoch is not None, "end_epoch() outside an epoch"
        self._patience.interrupted = lambda waited_s: None
        stream = self._stream
        # what the loop did between the last epoch and this one (or before the first, in the
        # host's own epoch) counts in this one
        counts = self._counts
        restored = epoch.restored
        if epoch.request.epoch != EARLY_EPOCH:
            self._counts = _Counts()
            self._started_early = False
            restored, self._restored_early = restored + self._restored_early, 0
        return EpochReply(
            metadata_json=self._committed.json if self._committed else TaskMetadata().to_json(),
            processed=counts.processed,
            outputs=counts.outputs,
            changelog_records=counts.changelog_records,
            restored=restored,
            commits=counts.commits,
            inits=self.inits,
            rebuilt=epoch.rebuilt,
            dropped_records=counts.dropped,
            lag=None if stream is None else self._input_lag(stream),
        )

    def next_due_s(self, cap_s: float) -> float:
        """How long the task can wait for input before something else is due (a wall-clock
        punctuation, ``max.task.idle.ms``, the epoch's end); 0 with records in hand."""
        task, stream, epoch = self._task, self._stream, self._epoch
        if task is None or stream is None or self._unfinished or stream.pending:
            return 0.0
        if self._in_flight is not None:
            cap_s = min(cap_s, IN_FLIGHT_POLL_S)
        wait_s = self._punctuation_wait_s(task, cap_s)
        if epoch is not None and epoch.deadline is not None:
            wait_s = min(wait_s, max(0.0, epoch.deadline - time.monotonic()))
        return wait_s

    def abandon_epoch(self) -> None:
        """Another task's failure ends the worker's epoch: drop what this task did not commit
        (it is rebuilt from its last commit)."""
        self._epoch = None
        self._patience.interrupted = lambda waited_s: None
        if self._task is not None:
            self._log.info(
                "uncommitted_work_dropped", buffered_writes_dropped=self._abandon_batch()
            )

    def _guarded(self, control: EpochControl, step: Callable[[], Any]) -> Any:
        """Run a step of the epoch: a wait interrupted because the Spark task is gone or the
        task is released abandons the epoch (:class:`EpochAbandoned`); one interrupted because
        the run stops ends it without its uncommitted work (the reply); any other failure
        drops the task and is raised."""
        try:
            return step()
        except WaitInterrupted as exc:
            self._epoch = None
            self._patience.interrupted = lambda waited_s: None
            if not control.connected() or control.release_requested():
                if control.connected():  # released: a clean close, its last commit snapshotted
                    self._snapshot_on_close()
                dropped = self._release_batch() if self._task is not None else 0
                raise EpochAbandoned(
                    f"task {self.task_id}: {exc}; {dropped} uncommitted store writes dropped"
                ) from None
            return self._end_uncommitted(exc)
        except EpochAbandoned:
            self._epoch = None
            self._patience.interrupted = lambda waited_s: None
            raise
        except BaseException:
            self._epoch = None
            self._patience.interrupted = lambda waited_s: None
            if self._task is not None:  # a failed commit has dropped it already
                self._log.warning(
                    "task_epoch_failed", buffered_writes_dropped=self._abandon_batch()
                )
            raise

    def _end_uncommitted(self, interrupted: WaitInterrupted) -> EpochReply:
        """The run stops while the broker does not answer: end the epoch at once, dropping
        what followed the last commit (the task is rebuilt from there by the next run)."""
        dropped = self._abandon_batch() if self._task is not None else 0
        self._dirty = False
        self._log.warning(
            "epoch_ended_uncommitted", buffered_writes_dropped=dropped, detail=str(interrupted)
        )
        counts, self._counts = self._counts, _Counts()
        return EpochReply(
            metadata_json=self._last_commit_json or TaskMetadata().to_json(),
            processed=counts.processed,  # some of it is done again (counted again) next run
            outputs=counts.outputs,
            changelog_records=counts.changelog_records,
            restored=0,
            commits=counts.commits,
            inits=self.inits,
            rebuilt=False,
        )

    def _turn(self, epoch: _Epoch, wait_s: float, commit_at: float) -> TurnOutcome:
        control = epoch.control
        if not control.connected() or control.release_requested():
            dropped = self._release_batch() if self._task is not None else 0
            raise EpochAbandoned(
                f"task {self.task_id}: the Spark task of epoch {epoch.request.epoch} is gone; "
                f"{dropped} uncommitted store writes dropped"
            )
        if self._shared is not None:
            if self._task is None:
                # another task's failure or departure aborted the worker's transaction: the
                # task is rebuilt from its last commit and does again what it had not committed
                self._rebuild_in_epoch(epoch)
            elif not self._batch_open:  # another task's turn committed the transaction
                self._open_batch()
        task, stream = self._task, self._stream
        assert task is not None and stream is not None
        if self._in_flight is not None:
            self._advance_commit()
            wait_s = min(wait_s, IN_FLIGHT_POLL_S)
        now = self.alive_at = time.monotonic()
        # process until the next commit or punctuation is due, then look at the clocks
        busy_until = now + self._punctuation_wait_s(task, max(0.0, commit_at - now))
        if epoch.deadline is not None:
            busy_until = min(busy_until, epoch.deadline)
        wait_s = min(wait_s, max(0.0, busy_until - now))
        busy = self._step(task, stream, self._punctuation_wait_s(task, wait_s), busy_until)
        self._patience.observe("consumer", self._waiting_for_input, stream.unreachable_since)
        now = time.monotonic()
        finished = (
            control.end_requested()
            or (epoch.deadline is not None and now >= epoch.deadline)
            or (stream.has_bounds and stream.reached() and not task.buffered())
        )
        if not (finished or now >= commit_at or task.commit_requested):
            return TurnOutcome(finished=False, busy=busy)
        if not finished and not self.config.exactly_once and self._committed is not None:
            # at_least_once: cut the batch and go on processing while its records are
            # acknowledged (_advance_commit completes it in a later turn)
            return TurnOutcome(finished=False, busy=self._start_commit() or busy)
        committed = self._dirty or self._committed is None
        try:
            self._commit()
        except ProducerWedgedError as exc:
            # the commit dropped the task: rebuilt from its last commit with a new producer
            # (fencing the wedged one), it does again what was not committed
            self._log.warning("transaction_abandoned", detail=str(exc))
            self._rebuild_in_epoch(epoch)
            return TurnOutcome(finished=False, busy=True)
        if not finished:
            self._open_batch()
        return TurnOutcome(finished=finished, busy=busy or committed)

    def _rebuild_in_epoch(self, epoch: _Epoch) -> None:
        """Rebuild the task from its last commit and go on with the epoch."""
        self._resume(self._last_commit_json)
        reopened = self._stream
        assert reopened is not None
        reopened.set_bounds(self._bounds(epoch.request.end))
        self._open_batch()

    @staticmethod
    def _input_lag(stream: ContinuousInput) -> int | None:
        lags = stream.lags()
        known = [lag for lag in lags.values() if lag is not None]
        return sum(known) if len(known) == len(lags) else None

    def _waiting_for_input(self) -> str:
        topics = self._stream.topics if self._stream is not None else []
        return f"records of its input {', '.join(topics)} (partition {self.partition})"

    def keep_going(self, until: float, stop: Callable[[], bool]) -> None:
        """Between two epochs: go on processing (nothing is committed) until ``until``
        (monotonic) or ``stop()``; the next epoch commits what this did, or a rebuild drops it."""
        self.begin_gap(stop)
        try:
            while not stop() and time.monotonic() < until:
                self.gap_turn(MAX_POLL_WAIT_S)
        finally:
            self.end_gap()

    def begin_gap(self, stop: Callable[[], bool]) -> None:
        """Before processing between epochs: a wait for the broker ends once ``stop()``."""
        self._patience.interrupted = lambda waited_s: "an epoch came" if stop() else None
        if self._task is not None:
            self._open_batch()

    def gap_turn(self, wait_s: float) -> bool:
        """One turn between epochs (poll, process, punctuate; no commit); whether it did
        anything."""
        task, stream = self._task, self._stream
        if task is None or stream is None:
            return False
        now = self.alive_at = time.monotonic()
        busy_s = self._punctuation_wait_s(task, MAX_POLL_WAIT_S)
        return self._step(task, stream, min(wait_s, busy_s), now + busy_s)

    def end_gap(self) -> None:
        """After processing between epochs."""
        self._patience.interrupted = lambda waited_s: None

    def _abandon_batch(self) -> int:
        """Drop the open batch, a commit in flight with it (see :class:`TaskRunner`)."""
        self._in_flight = None
        return super()._abandon_batch()

    def ran_elsewhere(self, state_json: str | None) -> bool:
        """Whether the state Spark hands over is a commit of the task this host did not make
        (another host ran the task since this one last committed it)."""
        last = self._last_commit_json
        return last is not None and state_json is not None and state_json != last

    def drop_uncommitted(self) -> bool:
        """Drop the task if it did anything since its last commit (the next epoch rebuilds it
        from the committed state); True if it did."""
        if not (self._batch_open and self._dirty):
            return False
        self._abandon_batch()
        self._dirty = False
        return True

    def _step(self, task: Task, stream: ContinuousInput, wait_s: float, busy_until: float) -> bool:
        """One turn of the loop: poll, process until ``busy_until`` (monotonic), punctuate;
        whether it did anything."""
        records = stream.poll(0.0 if self._unfinished else wait_s)
        if records:
            records = self._input.keep_committed(records, self.partition)
            if not self._first_records_seen:  # start-up timelines (bench/first_output.py)
                self._first_records_seen = True
                self._log.debug("task_first_records", records=len(records))
        if len(task.partition_group.queues) > 1 and task.config.max_task_idle_ms != -1:
            task.update_lags(stream.lags())
        collector = self._collector
        assert collector is not None
        sent_before = collector.sent
        processed, punctuated = self._process(task, records, busy_until)
        self._catch_up_global()
        self._counts.processed += processed
        self._counts.outputs += collector.sent - sent_before
        if processed or punctuated or collector.sent != sent_before:
            self._dirty = True
            return True
        return bool(records)

    def _punctuation_wait_s(self, task: Task, wait_s: float) -> float:
        """``wait_s``, shortened to when a wall-clock punctuation, ``max.task.idle.ms`` or
        an idle stream-time advance is due."""
        now = task.clock()
        for due in (task.next_wall_clock_due(), task.next_idle_deadline(),
                    task.next_idle_advance_due()):  # fmt: skip
            if due is not None:
                wait_s = min(wait_s, max(0.0, (due - now) / 1000))
        return wait_s

    def _catch_up_global(self) -> None:
        if self._global is None:
            return
        stores = self._global
        if time.monotonic() - stores.last_catch_up >= GLOBAL_CATCH_UP_S:
            collector = self._collector
            assert collector is not None
            self._patience.call(
                "global store reader", "the records of the global stores' topics",
                lambda: stores.before_batch(collector.send),
            )  # fmt: skip
            stores.last_catch_up = time.monotonic()

    # ----------------------------------------------------------------- commit
    def _commit(self) -> None:
        """Make what the task did since the last commit durable, in Kafka Streams' order."""
        if self._shared is not None:
            self._commit_worker_transaction()
            return
        task, stores, collector = self._task, self._stores, self._collector
        failures, stream = self._delivery_failures, self._stream
        assert task is not None and stores is not None and collector is not None
        assert failures is not None and stream is not None
        self._finish_commit(wait=True)  # a commit in flight completes first
        if not self._dirty and self._committed is not None:
            return
        dropped_before = failures.dropped
        started = time.monotonic()
        try:
            # 1. store caches flushed; their changelog records produced
            changelog_count = self._produce_changelogs(task, collector)
            step_ends = [time.monotonic()]
            # 2. every record of the commit acknowledged (failures to the production handler)
            self._guarantee.flush(failures)
            step_ends.append(time.monotonic())
            # 3. the changelog offsets the stores will hold once this commit is durable
            positions = self._acked_changelog_positions(task)
            task.set_changelog_offsets(positions)
            # 4. marker + input offsets (+ the transaction under exactly_once_v2) committed
            last = self._committed
            assert last is not None, "a live task has a last commit"
            metadata = replace(task.metadata(), commit=last.metadata.commit)
            metadata = self._guarantee.commit(metadata, self._group_offsets(task, stream))
            step_ends.append(time.monotonic())
            # 5. the buffered store writes applied, the local checkpoint written
            stores.commit(positions)
            step_ends.append(time.monotonic())
        except WaitInterrupted:
            raise  # the epoch ends without this commit (run_epoch)
        except BaseException:
            self._log.warning("task_commit_failed", buffered_writes_dropped=self._abandon_batch())
            raise
        # 6. the committed state remembered: the next epoch's GroupState must equal it
        self._batch_open = False
        self._dirty = False
        self._remember_commit(metadata, changelog_count, dropped_before, started, step_ends)

    # ---------------------------------------- commit in the worker's transaction
    def _commit_worker_transaction(self) -> None:
        """Commit the worker's transaction: this task's work and every other task's in it
        (Kafka Streams' ``commitAll`` under exactly_once_v2; ``worker_transaction.py``)."""
        assert self._shared is not None
        try:
            self._shared.transaction.commit(self._patience)
        except WaitInterrupted:
            raise  # the epoch ends without this commit (the transaction is aborted)
        except BaseException:
            self._log.warning("task_commit_failed", buffered_writes_dropped=self._abandon_batch())
            raise

    def stage_commit(self) -> _StagedCommit | None:
        """Commit step 1 in the worker's transaction: the store caches flushed, their
        changelog records produced; None: nothing to commit."""
        task, collector, failures = self._task, self._collector, self._delivery_failures
        if task is None or not self._dirty:
            return None
        assert collector is not None and failures is not None
        started = time.monotonic()
        dropped_before = failures.dropped
        changelog_count = self._produce_changelogs(task, collector)
        return _StagedCommit(started, changelog_count, dropped_before, [time.monotonic()])

    def mark_commit(self, staged: _StagedCommit) -> None:
        """Commit steps 2-4: every record acknowledged (failures to the production handler),
        the changelog offsets taken, the commit marker sent into the transaction."""
        task, failures, stream = self._task, self._delivery_failures, self._stream
        assert task is not None and failures is not None and stream is not None
        self._guarantee.flush(failures)
        staged.step_ends.append(time.monotonic())
        positions = self._acked_changelog_positions(task)
        task.set_changelog_offsets(positions)
        last = self._committed
        assert last is not None, "a live task has a last commit"
        metadata = replace(task.metadata(), commit=last.metadata.commit)
        staged.offsets = self._group_offsets(task, stream)
        staged.positions = positions
        staged.marked = self._guarantee.commit(metadata, staged.offsets)

    def complete_commit(self, staged: _StagedCommit | None) -> None:
        """The worker's transaction committed: the buffered store writes applied, the commit
        remembered (``staged`` None: the task had nothing in it)."""
        self._batch_open = False
        if staged is None:
            return
        stores, shared = self._stores, self._shared
        assert stores is not None and shared is not None
        assert staged.marked is not None and staged.positions is not None
        metadata = shared.committed(staged.marked)
        staged.step_ends.append(time.monotonic())
        stores.commit(staged.positions)
        staged.step_ends.append(time.monotonic())
        self._dirty = False
        self._remember_commit(
            metadata, staged.changelog_records, staged.dropped_before, staged.started,
            staged.step_ends,
        )  # fmt: skip

    def transaction_aborted(self) -> None:
        """Another task's failure or departure aborted the worker's transaction: drop what
        this task did since its last commit (it is rebuilt from there); a task that did
        nothing since only joins the next transaction."""
        if self._task is None:
            return
        if not self._dirty:
            self._batch_open = False
            return
        stores = self._stores
        dropped = stores.discard() if stores is not None else 0
        self._batch_open = False
        self._in_flight = None
        self._dirty = False
        self._drop_task()
        self._log.info(
            "uncommitted_work_dropped",
            buffered_writes_dropped=dropped,
            detail="the worker's transaction was aborted",
        )

    def _abandon_open_batch(self) -> None:
        if self._batch_open:
            dropped = self._release_batch()
            self._log.info("uncommitted_work_dropped", buffered_writes_dropped=dropped)

    def _release_batch(self) -> int:
        """Drop the task where nothing failed (it is released or closed); returns the buffered
        store writes dropped. In the worker's transaction a task that did nothing since its
        last commit leaves it without aborting the other tasks' work."""
        if self._shared is not None and self._task is not None and not self._dirty:
            stores = self._stores
            dropped = stores.discard() if stores is not None else 0
            self._batch_open = False
            self._shared.transaction.leave(self.task_id)
            self._drop_task()
            return dropped
        return self._abandon_batch()

    def _remember_commit(
        self,
        metadata: TaskMetadata,
        changelog_count: int,
        dropped_before: int,
        started: float,
        step_ends: list[float],
        in_flight: bool = False,
    ) -> None:
        """A commit is complete: its state remembered, counted and logged."""
        task, stores, failures = self._task, self._stores, self._delivery_failures
        assert task is not None and stores is not None and failures is not None
        self._committed = LastCommit.of(metadata)
        self._last_commit_json = self._committed.json
        counts = self._counts
        counts.commits += 1
        counts.changelog_records += changelog_count
        counts.dropped += failures.dropped - dropped_before
        took_s = time.monotonic() - started
        self._committed_metrics(task, stores, failures, took_s)
        self._log.debug(
            "task_committed",
            duration_ms=round(took_s * 1000, 1),
            step_ms=[round((b - a) * 1000, 1) for a, b in pairwise([started, *step_ends])],
            changelog_records=changelog_count,
            commits=counts.commits,
            processed=counts.processed,
            stream_time=metadata.stream_time,
            in_flight=in_flight,
        )

    # --------------------------------------------------- commit without a stall
    def _start_commit(self) -> bool:
        """Cut the batch (at_least_once): its changelog records are sent, its metadata, group
        offsets and buffered store writes taken as they are now, and the loop goes on with the
        next batch; :meth:`_advance_commit` completes the commit once every record of the
        batch is acknowledged. Whether anything was cut."""
        self._finish_commit(wait=True)  # one commit in flight at a time
        task, stores, collector, stream = self._task, self._stores, self._collector, self._stream
        assert task is not None and stores is not None and collector is not None
        assert stream is not None
        if not self._dirty:
            return False
        last = self._committed
        assert last is not None, "a live task has a last commit"
        started = time.monotonic()
        try:
            changelog_count = self._produce_changelogs(task, collector)
            generation = self._guarantee.producer.cut()
            self._in_flight = _CommitInFlight(
                generation=generation,
                metadata=replace(task.metadata(), commit=last.metadata.commit),
                offsets=self._group_offsets(task, stream),
                covered=stores.pending_writes(),
                changelog_records=changelog_count,
                started=started,
                sent=time.monotonic(),
            )
        except BaseException:
            self._log.warning("task_commit_failed", buffered_writes_dropped=self._abandon_batch())
            raise
        self._dirty = False
        return True

    def _advance_commit(self) -> None:
        """Complete the commit in flight if its records are acknowledged (or it waited past
        ``IN_FLIGHT_MAX_S``: then wait for them, with the patience of any commit)."""
        in_flight = self._in_flight
        assert in_flight is not None
        try:
            waiting = self._guarantee.producer.unacknowledged(in_flight.generation)
        except BaseException:
            self._log.warning("task_commit_failed", buffered_writes_dropped=self._abandon_batch())
            raise
        if waiting == 0 or time.monotonic() - in_flight.started >= IN_FLIGHT_MAX_S:
            self._finish_commit(wait=waiting > 0)

    def _finish_commit(self, wait: bool) -> None:
        """Complete the commit in flight, if any: (``wait``: once every record is
        acknowledged) the failed deliveries handled, the marker and the group offsets of the
        cut committed, the cut's store writes applied."""
        in_flight = self._in_flight
        if in_flight is None:
            return
        task, stores, failures = self._task, self._stores, self._delivery_failures
        assert task is not None and stores is not None and failures is not None
        dropped_before = failures.dropped
        try:
            if wait:
                self._guarantee.flush(failures)
            else:
                self._guarantee.producer.check_failures(failures)
            step_ends = [in_flight.sent, time.monotonic()]
            positions = self._acked_changelog_positions(task)
            task.set_changelog_offsets(positions)
            metadata = replace(in_flight.metadata, changelog_offsets=dict(positions))
            metadata = self._guarantee.commit(metadata, in_flight.offsets)
            step_ends.append(time.monotonic())
            stores.commit(positions, in_flight.covered)
            step_ends.append(time.monotonic())
        except WaitInterrupted:
            raise
        except BaseException:
            self._log.warning("task_commit_failed", buffered_writes_dropped=self._abandon_batch())
            raise
        self._in_flight = None
        self._remember_commit(metadata, in_flight.changelog_records, dropped_before,
                              in_flight.started, step_ends, in_flight=True)  # fmt: skip

    def _group_offsets(self, task: Task, stream: ContinuousInput) -> dict[tuple[str, int], int]:
        """The consumer-group offsets of this commit: per input, the first record the task
        holds back, else how far the input was read (past transaction markers too)."""
        held_back = task.partition_group.first_buffered_offsets()
        positions = task.metadata().input_positions
        offsets = {}
        for topic in self.subtopology.source_topics:
            if topic in held_back:
                offset = held_back[topic]
            else:
                offset = max(stream.read_end.get(topic, -1), positions.get(topic, -1))
            if offset >= 0:
                offsets[(topic, self.partition)] = offset
        return offsets

    # ----------------------------------------------------------------- resume
    def _resume(self, state_json: str | None) -> tuple[bool, int]:
        """Go on with the live task, or rebuild it from ``state_json``; (rebuilt, restored)."""
        if self._task is not None and (
            (self._committed is not None and state_json == self._committed.json)
            or (self._started_early and state_json is None)
        ):
            # started early from no state and held since, it is what a rebuild from none
            # would build now: that adopts its newest commit marker, which is its own
            return False, 0
        self._started_early = False
        if self._task is not None:
            self._abandon_open_batch()
        restored = self._rebuild_waiting(TaskMetadata.from_json(state_json))
        self._seek_input()
        self._dirty = False
        self._counts = _Counts()  # what was dropped is done again
        return True, restored

    def _seek_input(self) -> None:
        """Point the input at the rebuilt task's positions (else the run's starting offsets,
        else the source's reset policy)."""
        task = self._task
        assert task is not None
        if self._stream is None:
            self._stream = ContinuousInput(
                self.spec.bootstrap_servers,
                self.task_id,
                self.partition,
                isolation_level=self._guarantee.isolation_level,
                kafka=self.spec.kafka,
                shared=self._shared_input,
            )
        positions = task.metadata().input_positions
        starts = self.spec.start_offsets
        self._stream.assign(
            {
                topic: positions.get(topic, starts.get((topic, self.partition)))
                for topic in self.subtopology.source_topics
            },
            self.spec.reset_policies,
        )

    def _bounds(self, end: EpochEnd) -> dict[str, int] | None:
        """Per input topic, the offset this epoch ends at (None: no bound)."""
        topics = self.subtopology.source_topics
        if end.caught_up:
            ends = self._patience.call(
                "offsets",
                "the end offsets of its input",
                lambda: end_offsets(
                    self.spec.bootstrap_servers,
                    [(topic, self.partition) for topic in topics],
                    isolation_level=self._guarantee.isolation_level,
                    kafka=self.spec.kafka,
                ),
            )
            return {topic: offset for (topic, _), offset in ends.items()}
        if end.end_offsets is None:
            return None
        return {
            topic: offset
            for (topic, partition), offset in end.end_offsets.items()
            if partition == self.partition and topic in topics
        }

    # --------------------------------------------------------------- lifetime
    def close(self) -> None:
        """The task leaves this process (see :meth:`TaskRunner.close`); its input too."""
        try:
            super().close()
        finally:
            if self._stream is not None:
                self._stream.close()
                self._stream = None
