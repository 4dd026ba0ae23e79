"""Exactly-once with one transactional producer per worker (KIP-447, as Kafka Streams' stream
thread under ``exactly_once_v2``).

A worker host's tasks share one producer, ``transactional.id = <application.id>-<worker>``, and
one open transaction per commit interval: every task's sink, repartition and changelog records
and its commit marker go into it, and one ``send_offsets_to_transaction`` carries every task's
input offsets. A commit is Kafka Streams' ``commitAll``: whichever task's turn finds the commit
due commits every task of the transaction, in this order::

    stage     each task: its store caches flushed, their changelog records produced
    mark      each task: every record acknowledged (failures to its production handler), the
              changelog offsets taken, its commit marker sent into the transaction
    commit    the markers acknowledged; the offsets of all tasks sent; the transaction committed
    complete  each task: its buffered store writes applied, its last commit remembered

An abort (a failure, a task that leaves the worker with work open) aborts the transaction of
every task: each drops what it did since its last commit and is rebuilt from there.

**Fencing.** Within a run a task stays on its worker (the driver's assignment is fixed per
run); Spark may run the worker on another executor, and that host's ``init_transactions`` on the
same id fences the previous host's producer (a stalled process, an attempt that lives on): the
old host's next produce or commit fails and it drops every task. A host initializes the producer
before it reads any task's commit markers, and a producer initialized after it (another host of
the worker) makes its commits fail, so a host never builds on markers that a later commit of
another host would have changed. A task that moves to another worker between runs is fenced by
the driver (:func:`processor_api.kafka.transactions.fence_transactional_ids`, before it records
the new assignment) with the transactional id of the worker that had it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from processor_api.engine.metadata import TaskMetadata
from processor_api.errors import ProducerWedgedError
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.commit_barrier import CommitBarrier
from processor_api.kafka.delivery import DeliveryFailureHandler
from processor_api.kafka.group import GroupCommitter
from processor_api.kafka.markers import CommitLog
from processor_api.kafka.names import worker_transactional_id
from processor_api.kafka.producer import DeliveryTracker, make_producer
from processor_api.kafka.transaction_ends import ends_one_at_a_time, one_at_a_time
from processor_api.kafka.transactions import init_transactions, transaction_step
from processor_api.logging import get_logger
from processor_api.runtime.guarantee import (
    ABANDON_ABORT_S,
    CLUSTER_ID_TIMEOUT_S,
    TaskCommitSettings,
    adopt_newer_marker,
    send_marker,
    send_offsets_guarded,
    transaction_call,
    wait_acknowledged,
)

if TYPE_CHECKING:
    from processor_api.runtime.patience import Patience

_log = get_logger("processor_api.worker_transaction")


class CommitParticipant(Protocol):
    """A task in the worker's transaction (``EpochTaskRunner``): the steps of a commit."""

    task_id: str

    def stage_commit(self) -> Any | None:
        """Produce the changelog records of the commit; None: nothing to commit."""

    def mark_commit(self, staged: Any) -> None:
        """Every record acknowledged: send the commit marker (not waited for)."""

    def complete_commit(self, staged: Any | None) -> None:
        """The transaction committed (``staged`` None: the task had nothing in it)."""

    def transaction_aborted(self) -> None:
        """The transaction was aborted: drop what the task did since its last commit."""


class WorkerTransaction:
    """The worker's transactional producer and its open transaction (see the module docs)."""

    def __init__(
        self,
        bootstrap_servers: str,
        application_id: str,
        worker: str,
        *,
        producer_config: dict | None = None,
        kafka: KafkaClientConfig | None = None,
        flush_timeout_s: float = 30.0,
        message_timeout_ms: int,
    ) -> None:
        self.worker = worker
        self.txn_id = worker_transactional_id(application_id, worker)
        self._bootstrap = bootstrap_servers
        self._config = dict(producer_config or {})
        self._kafka = kafka
        self._flush_timeout_s = flush_timeout_s
        self._message_timeout_ms = message_timeout_ms
        self._producer: Any = None
        self._writer: str | None = None
        self._trackers: dict[str, DeliveryTracker] = {}
        self._participants: dict[str, CommitParticipant] = {}
        self._open = False
        self._group = GroupCommitter(
            bootstrap_servers, application_id, f"group-{worker}", kafka=kafka
        )
        self._ends_one_at_a_time: bool | None = None
        #: on Tansu: the workers of the machine end their transactions together
        self._barrier: CommitBarrier | None = None
        #: transactions committed and aborted by this host (tests and logs)
        self.commits = 0
        self.aborts = 0
        self._log = get_logger("processor_api.worker_transaction", worker=worker)

    # -------------------------------------------------------------- producer
    def ready(self, patience: Patience | None) -> None:
        """Make and initialize the producer if there is none: its ``init_transactions`` fences
        every other instance of the worker's transactional id and aborts its open
        transaction."""
        if self._producer is not None:
            return
        producer = make_producer(
            self._bootstrap,
            transactional_id=self.txn_id,
            extra_config=self._config,
            kafka=self._kafka,
            message_timeout_ms=self._message_timeout_ms,
        )
        init_transactions(producer, self.txn_id, self._bootstrap, patience)
        self._producer = producer
        self._writer = uuid.uuid4().hex[:16]
        for tracker in self._trackers.values():  # the tasks' collectors hold them
            tracker.rebind(producer)
        self._log.info("transactional_producer_ready", transactional_id=self.txn_id)

    def tracker(self, task_id: str, patience: Patience | None) -> DeliveryTracker:
        """The task's view of the producer: its own records' acknowledgements and failures."""
        self.ready(patience)
        tracker = self._trackers.get(task_id)
        if tracker is None:
            tracker = self._trackers[task_id] = DeliveryTracker(self._producer)
        return tracker

    @property
    def writer(self) -> str:
        """Who writes the open transaction (``kafka/batch_stamps.py``): a new id after every
        abort, so a retried batch never has the writer of its aborted attempt."""
        assert self._writer is not None, "the producer is not ready"
        return self._writer

    # ----------------------------------------------------------- transaction
    def join(self, participant: CommitParticipant, patience: Patience | None) -> None:
        """``participant`` starts a batch: in the open transaction (begun if none is)."""
        tracker = self.tracker(participant.task_id, patience)
        if not self._open:
            if self._ends_one_at_a_time is None:  # init_transactions has reached the broker
                self._ends_one_at_a_time = ends_one_at_a_time(
                    self._bootstrap, self._kafka, timeout_s=CLUSTER_ID_TIMEOUT_S
                )
                if self._ends_one_at_a_time and self._barrier is None:
                    self._barrier = CommitBarrier(self._bootstrap)
            transaction_step(
                "begin_transaction", self.txn_id, self._bootstrap, None,
                self._producer.begin_transaction,
            )  # fmt: skip
            self._open = True
            for each in self._trackers.values():
                self._watch_first_record(each)
        elif self._barrier is not None and tracker.before_first_record is None:
            self._watch_first_record(tracker)  # a task that joins an open transaction
        tracker.reset()
        self._participants[participant.task_id] = participant

    def _watch_first_record(self, tracker: DeliveryTracker) -> None:
        """Tell the barrier before the transaction's first record (if there is a barrier)."""
        barrier = self._barrier
        if barrier is not None:
            tracker.before_first_record = barrier.opened

    def commit(self, patience: Patience | None) -> bool:
        """Commit every task of the open transaction (see the module docs); whether there was
        anything to commit. Any failure aborts the transaction of every task and is raised."""
        if not self._open:
            return False
        participants = list(self._participants.values())
        committed_at = time.time()
        try:
            staged = [(p, p.stage_commit()) for p in participants]
            if all(s is None for _, s in staged):
                return False  # the transaction stays open, its tasks in it
            offsets: dict[tuple[str, int], int] = {}
            for participant, stage in staged:
                if stage is not None:
                    participant.mark_commit(stage)
                    offsets.update(stage.offsets)
            for participant, stage in staged:
                if stage is not None:  # the markers acknowledged
                    wait_acknowledged(
                        self._trackers[participant.task_id], patience, self._flush_timeout_s
                    )
            producer = self._producer
            if offsets:
                transaction_call(
                    "send_offsets_to_transaction", self.txn_id, self._bootstrap, patience,
                    self._flush_timeout_s,
                    send_offsets_guarded(
                        producer, offsets, self._group.group_metadata(), self.txn_id,
                        self._bootstrap,
                    ),
                )  # fmt: skip
            transaction_call(
                "commit_transaction", self.txn_id, self._bootstrap, patience,
                self._flush_timeout_s,
                lambda timeout_s: self._end(lambda: producer.commit_transaction(timeout_s)),
            )  # fmt: skip
        except BaseException as exc:
            self.abort(wedged=isinstance(exc, ProducerWedgedError))
            raise
        self._open = False
        self._participants = {}
        self.commits += 1
        barrier = self._barrier
        if barrier is not None:
            barrier.ended()
            barrier.wait_for_peers(committed_at)
        for participant, stage in staged:
            participant.complete_commit(stage)
        return True

    def abort(self, *, wedged: bool = False, cause: str | None = None) -> None:
        """Abort the open transaction, if any: every task in it but ``cause`` (the task whose
        failure aborts it, which drops its own work) drops what it did since its last commit.
        ``wedged``: the producer does not return from librdkafka and is given up."""
        participants, self._participants = self._participants, {}
        was_open, self._open = self._open, False
        if self._barrier is not None:
            self._barrier.ended()
        if wedged:
            self._producer = None  # the next one fences it
        elif was_open and self._producer is not None:
            self.aborts += 1
            producer = self._producer
            try:
                self._end(lambda: producer.abort_transaction(ABANDON_ABORT_S))
                self._writer = uuid.uuid4().hex[:16]
            except Exception as exc:  # noqa: BLE001 - fenced or broker gone
                self._log.info(
                    "transaction_abort_failed",
                    error=str(exc),
                    timeout_s=ABANDON_ABORT_S,
                    detail="the next producer of this transactional id aborts it",
                )
                self._drop_producer()
        if self._producer is not None:  # the aborted records are forgotten (else at ready())
            for tracker in self._trackers.values():
                tracker.rebind(self._producer)
        for task_id, participant in participants.items():
            if task_id != cause:
                participant.transaction_aborted()

    def renew(self) -> None:
        """A task comes back after another host of the worker ran it, whose producer has
        fenced this one: abort the open transaction (its tasks drop their uncommitted work) and
        make the next use initialize a new producer, fencing that host in turn."""
        self._log.info("transactional_producer_renewed", transactional_id=self.txn_id)
        self.abort()
        self._drop_producer()

    def leave(self, task_id: str) -> None:
        """The task is dropped (its transaction aborted or committed before)."""
        self._participants.pop(task_id, None)
        self._trackers.pop(task_id, None)

    def _end(self, call: Any) -> None:
        """A commit or abort; against Tansu one at a time per machine (see
        ``kafka/transaction_ends.py``)."""
        if self._ends_one_at_a_time:
            one_at_a_time(self._bootstrap, call)
        else:
            call()

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.flush(1)
            except Exception:  # noqa: BLE001 - a fenced producer may refuse anything
                pass

    def close(self) -> None:
        """The host's run ended (its tasks closed)."""
        self.abort()
        self._drop_producer()
        self._group.close()
        if self._barrier is not None:
            self._barrier.close()
            self._barrier = None


class SharedExactlyOnce:
    """A task's exactly-once guarantee inside its worker's transaction (the runner commits
    through :meth:`WorkerTransaction.commit`, not through :meth:`commit` alone)."""

    isolation_level = "read_committed"

    def __init__(
        self,
        settings: TaskCommitSettings,
        transaction: WorkerTransaction,
        participant: CommitParticipant,
    ) -> None:
        self._task_id = settings.task_id
        self._transaction = transaction
        self._participant = participant
        self._patience = settings.patience
        self._flush_timeout_s = settings.flush_timeout_s
        self._markers = CommitLog(
            settings.bootstrap_servers,
            settings.application_id,
            settings.task_id,
            settings.marker_partition,
            settings.kafka,
            transactional=True,
        )

    @property
    def transaction(self) -> WorkerTransaction:
        """The worker's transaction this task commits in."""
        return self._transaction

    @property
    def producer(self) -> DeliveryTracker:
        return self._transaction.tracker(self._task_id, self._patience)

    @property
    def writer(self) -> str:
        self._transaction.ready(self._patience)
        return self._transaction.writer

    def recover(self, metadata: TaskMetadata) -> TaskMetadata:
        # fenced before the markers are read (see the module docs)
        self._transaction.ready(self._patience)
        return adopt_newer_marker(self._markers, metadata)

    def begin(self) -> None:
        self._transaction.join(self._participant, self._patience)

    def flush(self, on_failures: DeliveryFailureHandler | None = None) -> None:
        wait_acknowledged(self.producer, self._patience, self._flush_timeout_s, on_failures)

    def commit(self, metadata: TaskMetadata, offsets: dict[tuple[str, int], int]) -> TaskMetadata:
        """Send the task's commit marker into the worker's transaction (not waited for): the
        metadata it carries; :meth:`committed` completes it once the transaction committed."""
        return send_marker(
            self._markers,
            self.producer,
            metadata,
            self.writer,
            {topic: offset for (topic, _), offset in offsets.items()},
        )

    def committed(self, marked: TaskMetadata) -> TaskMetadata:
        """``marked`` with where its marker ended (the marker is acknowledged)."""
        marker_end = self._markers.end_after_ack(self.producer)
        return replace(marked, commit=replace(marked.commit, marker_end=marker_end))

    def abandon(self) -> None:
        self._transaction.abort(cause=self._task_id)
        self._transaction.leave(self._task_id)

    def close(self) -> None:
        self._transaction.leave(self._task_id)
