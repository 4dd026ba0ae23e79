"""The processing guarantee as a strategy: how a task's work since its last commit is made
durable.

Both strategies see the same life of the work between two commits (Kafka Streams'
``StreamsProducer`` with ``StreamTask.prepareCommit`` / ``postCommit``)::

    metadata = guarantee.recover(metadata)   # when the task is (re)built
    guarantee.begin()
    ... process; sink and changelog records go through guarantee.producer ...
    guarantee.flush()                          # every record acknowledged
    metadata = guarantee.commit(metadata)      # the batch is durable from here on
    # on any failure before that: guarantee.abandon()

Both write a **commit marker** per task and batch to ``<application.id>-task-commits`` (task
``i`` on partition ``i``) carrying the task's metadata after the batch (``kafka/markers.py``:
what a marker holds, how it is encoded, written and read), and commit the task's
input positions to the consumer group ``<application.id>``. A marker newer than the state Spark
hands back (the batch was made durable, its Spark commit was not: a crash in between, or the
Spark checkpoint was lost) is adopted by :meth:`recover`, so the records it covered are not
processed again and the stores are brought to the marker's changelog offsets.

* :class:`AtLeastOnce`: durable = acknowledged; the marker is sent once the batch's records
  are acknowledged. A batch re-run after a crash before its marker re-sends.
* :class:`ExactlyOnce`: the batch's outputs, changelog records and a commit marker carrying
  the new task metadata form one Kafka transaction. A transactional producer per task (id
  ``<application.id>-<task>``) fences any older incarnation of the task when it starts; the
  input offsets go into the transaction too (``send_offsets_to_transaction``). That is the
  guarantee of a task runner on its own; in a worker host the tasks share the worker's
  producer and transaction (``worker_transaction.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from processor_api.engine.metadata import TaskMetadata
from processor_api.errors import ProducerWedgedError
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.delivery import DeliveryFailureHandler
from processor_api.kafka.group import GroupCommitter, to_topic_partitions
from processor_api.kafka.markers import CommitLog
from processor_api.kafka.names import transactional_id
from processor_api.kafka.producer import DEFAULT_MESSAGE_TIMEOUT_MS, DeliveryTracker, make_producer
from processor_api.kafka.transaction_ends import ends_one_at_a_time, one_at_a_time
from processor_api.kafka.transactions import TransactionalProducers, transaction_step
from processor_api.logging import get_logger
from processor_api.runtime.patience import Patience

#: How long the first transaction of a guarantee may wait to learn whether the broker is Tansu.
CLUSTER_ID_TIMEOUT_S = 2.0

_log = get_logger("processor_api.guarantee")


class Guarantee(Protocol):
    """What the task runner needs of a processing guarantee."""

    isolation_level: str

    @property
    def producer(self) -> DeliveryTracker:
        """The producer every sink and changelog record of the task goes through."""

    @property
    def writer(self) -> str | None:
        """Who writes the open batch's transaction (see ``kafka/batch_stamps.py``); None when
        batches are not transactions."""

    def recover(self, metadata: TaskMetadata) -> TaskMetadata:
        """The metadata to resume from, given what Spark's state holds."""

    def begin(self) -> None:
        """Start a batch."""

    def flush(self, on_failures: DeliveryFailureHandler | None = None) -> None:
        """Wait until every record sent in this batch is acknowledged (or raise).

        Records the producer reported undeliverable go to ``on_failures`` (which raises to
        fail the batch or returns to drop them); without it any failure raises.
        """

    def commit(self, metadata: TaskMetadata, offsets: dict[tuple[str, int], int]) -> TaskMetadata:
        """Make the batch durable with its input ``offsets``; returns the metadata for Spark."""

    def abandon(self) -> None:
        """After a failure: undo what can be undone and forget the producer."""

    def close(self) -> None:
        """The task is dropped."""


@dataclass(frozen=True)
class TaskCommitSettings:
    """What a guarantee needs to know of the task it makes durable."""

    bootstrap_servers: str
    producer_config: dict
    flush_timeout_s: float
    application_id: str
    task_id: str
    marker_partition: int  # the task's partition of the commit marker topic
    directory: Path  # the task's state directory
    kafka: KafkaClientConfig | None = None  # the user's Kafka client settings
    #: how long the task waits for the broker (task.timeout.ms); None: one try per call
    patience: Patience | None = None
    message_timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_MS  # the producer's delivery timeout


def adopt_newer_marker(markers: CommitLog, metadata: TaskMetadata) -> TaskMetadata:
    """``metadata``, or the metadata of a committed marker newer than it, adopted."""
    marker = markers.newer(metadata.commit.sequence, metadata.commit.marker_end)
    if marker is None:
        return metadata
    adopted = TaskMetadata.from_dict(marker.metadata)
    adopted.commit = replace(adopted.commit, sequence=marker.sequence, marker_end=marker.end)
    _log.info(
        "committed_batch_adopted",
        task=marker.task_id,
        sequence=marker.sequence,
        state_sequence=metadata.commit.sequence,
        positions=adopted.input_positions,
        detail="a batch was made durable but Spark did not commit it (a crash, or a lost "
        "checkpoint): the records it processed are not processed again",
    )
    return adopted


def send_marker(
    markers: CommitLog,
    tracker: DeliveryTracker,
    metadata: TaskMetadata,
    writer: str | None = None,
    offsets: dict[str, int] | None = None,
) -> TaskMetadata:
    """Send the next marker for ``metadata`` (not waited for); returns the metadata it carries.

    ``writer``: the transactional producer instance committing the batch, ``offsets`` the
    input offsets its transaction commits to the group (exactly-once).
    """
    sequence = metadata.commit.sequence + 1
    marked = replace(metadata, commit=metadata.commit.committing(sequence, writer, offsets))
    markers.send(tracker, sequence, marked.to_json())
    return marked


def _commit_log(settings: TaskCommitSettings, *, transactional: bool = False) -> CommitLog:
    return CommitLog(
        settings.bootstrap_servers,
        settings.application_id,
        settings.task_id,
        settings.marker_partition,
        settings.kafka,
        transactional=transactional,
    )


def _group_committer(settings: TaskCommitSettings) -> GroupCommitter:
    return GroupCommitter(
        settings.bootstrap_servers,
        settings.application_id,
        f"group-{settings.task_id}",
        kafka=settings.kafka,
    )


#: A transaction or offset commit call waits at most this long per try during an outage.
COMMIT_STEP_S = 3.0
#: An abandoned transaction's abort waits at most this long: when another process has taken the
#: task over, its ``init_transactions`` has fenced this producer and aborted the transaction, and
#: Tansu never answers the fenced producer's abort. The abort holds the machine's transaction-end
#: lock (every worker's commit on the broker waits for it), and whoever runs the task next aborts
#: a transaction still open anyway.
ABANDON_ABORT_S = 1.0
#: ``send_offsets_to_transaction`` may block past its timeout while the group coordinator is
#: unreachable (confluentinc/librdkafka#5456, measured here: over 60 s for a 3 s timeout);
#: beyond its timeout plus this, the producer is given up (:class:`ProducerWedgedError`).
WEDGED_AFTER_S = 10.0


def wait_acknowledged(
    tracker: DeliveryTracker,
    patience: Patience | None,
    timeout_s: float,
    on_failures: DeliveryFailureHandler | None = None,
) -> None:
    """Every record sent acknowledged (or reported failed, then handled): within
    ``task.timeout.ms`` with ``patience`` (an outage is waited out), else ``timeout_s``."""
    if patience is not None:
        patience.until(
            "producer",
            lambda: f"the acknowledgement of {tracker.pending} record(s)",
            lambda step_s: tracker.flush(step_s) == 0,
        )
    tracker.flush_and_check(timeout_s, on_failures)


def commit_group(
    group: GroupCommitter,
    offsets: dict[tuple[str, int], int],
    patience: Patience | None,
    timeout_s: float,
) -> None:
    """Commit the task's input offsets to the group, an outage waited out with ``patience``."""
    if patience is None:
        group.commit(offsets, timeout_s)
        return
    patience.call(
        "consumer group",
        f"the commit of its input offsets to consumer group {group.group_id!r}",
        lambda: group.commit(offsets, COMMIT_STEP_S),
        step_s=COMMIT_STEP_S,
    )


def transaction_call(
    step: str,
    txn_id: str,
    bootstrap_servers: str,
    patience: Patience | None,
    timeout_s: float,
    call: Callable[[float], None],
) -> None:
    """One transaction call (given its timeout); with ``patience`` a timed-out call is made
    again (librdkafka allows it for retriable errors) until ``task.timeout.ms`` ran out,
    without it one try of ``timeout_s``."""
    if patience is None:
        transaction_step(
            step, txn_id, bootstrap_servers, timeout_s, lambda: call(timeout_s)
        )  # fmt: skip
        return
    patience.call(
        "transactional producer",
        f"{step} of transactional id {txn_id!r}",
        lambda: transaction_step(
            step, txn_id, bootstrap_servers, COMMIT_STEP_S, lambda: call(COMMIT_STEP_S)
        ),
        step_s=COMMIT_STEP_S,
    )


def send_offsets_guarded(
    producer: Any,
    offsets: dict[tuple[str, int], int],
    group_metadata: object,
    txn_id: str,
    bootstrap_servers: str,
) -> Callable[[float], None]:
    """``send_offsets_to_transaction`` as a :func:`transaction_call`, given up as wedged
    (:class:`ProducerWedgedError`) when it does not return (see ``WEDGED_AFTER_S``)."""
    partitions = to_topic_partitions(offsets)

    def call(timeout_s: float) -> None:
        returning_within(
            timeout_s + WEDGED_AFTER_S,
            lambda: producer.send_offsets_to_transaction(partitions, group_metadata, timeout_s),
            f"send_offsets_to_transaction of transactional id {txn_id!r} on "
            f"{bootstrap_servers} (timeout {timeout_s:g}s)",
        )

    return call


def make_guarantee(exactly_once: bool, settings: TaskCommitSettings) -> Guarantee:
    """The strategy for the configured processing guarantee."""
    return ExactlyOnce(settings) if exactly_once else AtLeastOnce(settings)


class WorkerClients:
    """At least once in a worker host: one producer and one group committer for all its
    tasks (Kafka Streams' stream thread has one producer whatever the guarantee); each task
    counts its own records through a :class:`DeliveryTracker` of its own over the producer."""

    def __init__(
        self,
        bootstrap_servers: str,
        application_id: str,
        worker: str,
        *,
        producer_config: dict | None = None,
        kafka: KafkaClientConfig | None = None,
        message_timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_MS,
    ) -> None:
        self.worker = worker
        self.producer = make_producer(
            bootstrap_servers,
            extra_config=producer_config,
            kafka=kafka,
            message_timeout_ms=message_timeout_ms,
        )
        self.group = GroupCommitter(
            bootstrap_servers, application_id, f"group-{worker}", kafka=kafka
        )

    def close(self) -> None:
        """The host's run ended (its tasks closed, their commits acknowledged): records still
        queued belong to no commit and are processed again by the next run, so they are
        purged, as a task's own producer is when it is dropped."""
        try:
            self.producer.purge()
            self.producer.flush(5)
        except Exception:  # noqa: BLE001 - the producer may already be unusable
            pass
        finally:
            self.group.close()


class AtLeastOnce:
    """Durable once acknowledged: a re-run batch may send its records again."""

    isolation_level = "read_uncommitted"

    def __init__(self, settings: TaskCommitSettings, shared: WorkerClients | None = None) -> None:
        self._bootstrap = settings.bootstrap_servers
        self._config = settings.producer_config
        self._kafka = settings.kafka
        self._flush_timeout_s = settings.flush_timeout_s
        self._patience = settings.patience
        self._message_timeout_ms = settings.message_timeout_ms
        self._tracker: DeliveryTracker | None = None
        self._markers = _commit_log(settings)
        #: the worker's producer and group committer, or None: the task's own
        self._shared = shared
        self._group = shared.group if shared is not None else _group_committer(settings)

    @property
    def producer(self) -> DeliveryTracker:
        if self._tracker is None and self._shared is not None:
            self._tracker = DeliveryTracker(self._shared.producer)
        elif self._tracker is None:
            self._tracker = DeliveryTracker(
                make_producer(
                    self._bootstrap,
                    extra_config=self._config,
                    kafka=self._kafka,
                    message_timeout_ms=self._message_timeout_ms,
                )
            )
        return self._tracker

    writer = None  # no transactions: a re-sent batch's records are duplicates by contract

    def recover(self, metadata: TaskMetadata) -> TaskMetadata:
        return adopt_newer_marker(self._markers, metadata)

    def begin(self) -> None:
        self.producer.reset()

    def flush(self, on_failures: DeliveryFailureHandler | None = None) -> None:
        wait_acknowledged(self.producer, self._patience, self._flush_timeout_s, on_failures)

    def commit(self, metadata: TaskMetadata, offsets: dict[tuple[str, int], int]) -> TaskMetadata:
        """The batch's records are acknowledged: send its marker, then commit the offsets."""
        tracker = self.producer
        marked = send_marker(self._markers, tracker, metadata)
        wait_acknowledged(tracker, self._patience, self._flush_timeout_s)
        committed = replace(
            marked, commit=replace(marked.commit, marker_end=self._markers.end_after_ack(tracker))
        )
        commit_group(self._group, offsets, self._patience, self._flush_timeout_s)
        return committed

    def abandon(self) -> None:
        self._drop_producer()

    def close(self) -> None:
        self._drop_producer()
        if self._shared is None:
            self._group.close()

    def _drop_producer(self) -> None:
        if self._shared is not None:
            # the worker's producer goes on for the other tasks: this task's records in
            # flight are delivered (duplicates when its batch is processed again, as the
            # guarantee allows) and their reports go to the forgotten tracker
            self._tracker = None
            return
        if self._tracker is not None:
            try:
                self._tracker.producer.purge()
                self._tracker.producer.flush(5)
            except Exception:  # noqa: BLE001 - the producer may already be unusable
                pass
        self._tracker = None


def returning_within(limit_s: float, call: Callable[[], None], what: str) -> None:
    """``call()`` in a thread of its own; :class:`ProducerWedgedError` when it has not
    returned after ``limit_s`` (the thread stays blocked in librdkafka: the producer is given
    up and the next one fences it)."""
    outcome: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - raised by the caller
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="transaction-call").start()
    if not done.wait(limit_s):
        raise ProducerWedgedError(
            f"{what} did not return within {limit_s:g}s (librdkafka ignores the timeout while "
            "the group coordinator is unreachable, confluentinc/librdkafka#5456): the "
            "transaction is abandoned and a new producer fences this one"
        )
    if outcome:
        raise outcome[0]


class ExactlyOnce:
    """One Kafka transaction per task and commit interval, with a commit marker inside."""

    isolation_level = "read_committed"

    def __init__(self, settings: TaskCommitSettings) -> None:
        self._bootstrap = settings.bootstrap_servers
        self._flush_timeout_s = settings.flush_timeout_s
        self._app = settings.application_id
        self._task_id = settings.task_id
        self._txn_id = transactional_id(settings.application_id, settings.task_id)
        self._directory = settings.directory
        self._markers = _commit_log(settings, transactional=True)
        self._group = _group_committer(settings)
        self._patience = settings.patience
        self._producers = TransactionalProducers(
            settings.bootstrap_servers,
            settings.producer_config,
            kafka=settings.kafka,
            patience=settings.patience,
            message_timeout_ms=settings.message_timeout_ms,
        )
        self._in_transaction = False
        self._kafka = settings.kafka
        self._ends_one_at_a_time: bool | None = None  # asked once the producer is ready
        self._log = get_logger("processor_api.guarantee", task=settings.task_id)

    @property
    def producer(self) -> DeliveryTracker:
        # init_transactions (fencing older incarnations) happens on first use after every
        # (re)build of the task (recover), and whenever another process on this state
        # directory took the task over since (its owner file changed)
        return self._producers.for_task(self._app, self._task_id, self._directory)

    @property
    def writer(self) -> str:
        """The id of the task's transactional producer instance: a new one after every abort,
        restart or takeover, so a retried batch never has the writer of its aborted attempt."""
        self.producer  # noqa: B018 - makes (and initializes) the producer if there is none
        return self._producers.instance_of(self._task_id)

    def recover(self, metadata: TaskMetadata) -> TaskMetadata:
        # the task is (re)built: another executor may have run it since and fenced the cached
        # producer, whatever this host's owner file says, so a new one fences it in turn.
        # Fenced before the markers are read: a previous owner still running could otherwise
        # commit after the read, and this owner would process that batch's input again.
        self._producers.renew(self._task_id)
        self.producer  # noqa: B018 - makes the producer: init_transactions fences the others
        return adopt_newer_marker(self._markers, metadata)

    def begin(self) -> None:
        tracker = self.producer
        if self._ends_one_at_a_time is None:  # init_transactions has just reached the broker
            self._ends_one_at_a_time = ends_one_at_a_time(
                self._bootstrap, self._kafka, timeout_s=CLUSTER_ID_TIMEOUT_S
            )
        tracker.reset()
        transaction_step(
            "begin_transaction", self._txn_id, self._bootstrap, None,
            tracker.producer.begin_transaction,
        )  # fmt: skip
        self._in_transaction = True

    def flush(self, on_failures: DeliveryFailureHandler | None = None) -> None:
        wait_acknowledged(self.producer, self._patience, self._flush_timeout_s, on_failures)

    def commit(self, metadata: TaskMetadata, offsets: dict[tuple[str, int], int]) -> TaskMetadata:
        """Add the commit marker and the input offsets to the transaction and commit it."""
        tracker = self.producer
        marked = send_marker(
            self._markers,
            tracker,
            metadata,
            self.writer,
            {topic: offset for (topic, _), offset in offsets.items()},
        )
        wait_acknowledged(tracker, self._patience, self._flush_timeout_s)
        marker_end = self._markers.end_after_ack(tracker)
        if offsets:
            self._transaction_call(
                "send_offsets_to_transaction",
                send_offsets_guarded(
                    tracker.producer,
                    offsets,
                    self._group.group_metadata(),
                    self._txn_id,
                    self._bootstrap,
                ),
            )
        self._transaction_call(
            "commit_transaction",
            lambda timeout_s: self._end(lambda: tracker.producer.commit_transaction(timeout_s)),
        )
        self._in_transaction = False
        return replace(marked, commit=replace(marked.commit, marker_end=marker_end))

    def _transaction_call(self, step: str, call: Callable[[float], None]) -> None:
        transaction_call(
            step, self._txn_id, self._bootstrap, self._patience, self._flush_timeout_s, call
        )

    def _end(self, call: Callable[[], None]) -> None:
        """A commit or abort; against Tansu one at a time per machine (see
        ``kafka/transaction_ends.py``)."""
        if self._ends_one_at_a_time:
            one_at_a_time(self._bootstrap, call)
        else:
            call()

    def abandon(self) -> None:
        if self._in_transaction:
            self._in_transaction = False
            # only the producer that opened the transaction: making one here would fence
            # whoever owns the task now
            tracker = self._producers.cached(self._task_id)
            try:
                if tracker is not None:
                    self._end(lambda: tracker.producer.abort_transaction(ABANDON_ABORT_S))
            except Exception as exc:  # noqa: BLE001 - fenced or broker gone: it aborts later
                self._log.info(
                    "transaction_abort_failed",
                    error=str(exc),
                    timeout_s=ABANDON_ABORT_S,
                    detail="the next producer of this transactional id aborts it",
                )
        self._producers.drop(self._task_id)

    def close(self) -> None:
        self._producers.drop(self._task_id)
        self._group.close()
