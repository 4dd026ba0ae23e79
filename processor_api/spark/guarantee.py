"""The processing guarantee as a strategy: how a task's micro-batch is made durable.

Both strategies see the same life of a batch (Kafka Streams' ``StreamsProducer`` with
``StreamTask.prepareCommit`` / ``postCommit``)::

    metadata = guarantee.recover(metadata)   # when the task is (re)built
    guarantee.begin()
    ... process; sink and changelog records go through guarantee.producer ...
    guarantee.flush()                          # every record acknowledged
    metadata = guarantee.commit(metadata)      # the batch is durable from here on
    # on any failure before that: guarantee.abandon()

* :class:`AtLeastOnce`: durable = acknowledged. A batch re-run after a crash re-sends.
* :class:`ExactlyOnce`: the batch's outputs, changelog records and a commit marker carrying
  the new task metadata form one Kafka transaction. A transactional producer per task (id
  ``<application.id>-<task>``) fences any older incarnation of the task when it starts; a
  committed marker newer than the state Spark hands back (a transaction committed, its Spark
  batch not) is adopted by :meth:`ExactlyOnce.recover`, so records it covered are skipped.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Protocol

from processor_api.engine.metadata import CommitState, TaskMetadata
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.names import commit_marker_topic, transactional_id
from processor_api.kafka.producer import DeliveryTracker, make_producer
from processor_api.kafka.transactions import (
    TransactionalProducers,
    marker_value,
    read_latest_marker,
    transaction_step,
)
from processor_api.logging import get_logger


class Guarantee(Protocol):
    """What the task runner needs of a processing guarantee."""

    isolation_level: str

    @property
    def producer(self) -> DeliveryTracker:
        """The producer every sink and changelog record of the task goes through."""

    def recover(self, metadata: TaskMetadata) -> TaskMetadata:
        """The metadata to resume from, given what Spark's state holds."""

    def begin(self) -> None:
        """Start a batch."""

    def flush(self) -> None:
        """Wait until every record sent in this batch is acknowledged (or raise)."""

    def commit(self, metadata: TaskMetadata) -> TaskMetadata:
        """Make the batch durable; returns the metadata to hand to Spark."""

    def abandon(self) -> None:
        """After a failure: undo what can be undone and forget the producer."""

    def close(self) -> None:
        """The task is dropped."""


class AtLeastOnce:
    """Durable once acknowledged: a re-run batch may send its records again."""

    isolation_level = "read_uncommitted"

    def __init__(
        self,
        bootstrap_servers: str,
        producer_config: dict,
        flush_timeout_s: float,
        kafka: KafkaClientConfig | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._config = producer_config
        self._kafka = kafka
        self._flush_timeout_s = flush_timeout_s
        self._tracker: DeliveryTracker | None = None

    @property
    def producer(self) -> DeliveryTracker:
        if self._tracker is None:
            self._tracker = DeliveryTracker(
                make_producer(self._bootstrap, extra_config=self._config, kafka=self._kafka)
            )
        return self._tracker

    def recover(self, metadata: TaskMetadata) -> TaskMetadata:
        return metadata

    def begin(self) -> None:
        self.producer.reset()

    def flush(self) -> None:
        self.producer.flush_and_check(self._flush_timeout_s)

    def commit(self, metadata: TaskMetadata) -> TaskMetadata:
        return metadata

    def abandon(self) -> None:
        self.close()

    def close(self) -> None:
        if self._tracker is not None:
            try:
                self._tracker.producer.purge()
                self._tracker.producer.flush(5)
            except Exception:  # noqa: BLE001 - the producer may already be unusable
                pass
        self._tracker = None


class ExactlyOnce:
    """One Kafka transaction per task and micro-batch, with a commit marker inside."""

    isolation_level = "read_committed"

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        producer_config: dict,
        flush_timeout_s: float,
        application_id: str,
        task_id: str,
        marker_partition: int,
        directory: Path,
        kafka: KafkaClientConfig | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._flush_timeout_s = flush_timeout_s
        self._app = application_id
        self._task_id = task_id
        self._txn_id = transactional_id(application_id, task_id)
        self._marker_topic = commit_marker_topic(application_id)
        self._marker_partition = marker_partition
        self._directory = directory
        self._kafka = kafka
        self._producers = TransactionalProducers(bootstrap_servers, producer_config, kafka=kafka)
        self._in_transaction = False
        self._log = get_logger("processor_api.guarantee", task=task_id)

    @property
    def producer(self) -> DeliveryTracker:
        # init_transactions (fencing older incarnations) happens on first use and whenever
        # another process took the task over since (its owner file changed)
        return self._producers.for_task(self._app, self._task_id, self._directory)

    def recover(self, metadata: TaskMetadata) -> TaskMetadata:
        marker = read_latest_marker(
            self._bootstrap,
            self._marker_topic,
            self._marker_partition,
            metadata.commit.marker_end,
            self._task_id,
            kafka=self._kafka,
        )
        if marker is None or marker.sequence <= metadata.commit.sequence:
            return metadata
        adopted = TaskMetadata.from_json(marker.metadata_json)
        adopted.commit = CommitState(marker.sequence, marker.offset + 1)
        self._log.warning(
            "committed_transaction_adopted",
            sequence=marker.sequence,
            state_sequence=metadata.commit.sequence,
            positions=adopted.input_positions,
            detail="the last batch committed its transaction but not its Spark state: "
            "records it processed are skipped",
        )
        return adopted

    def begin(self) -> None:
        tracker = self.producer
        tracker.reset()
        transaction_step(
            "begin_transaction", self._txn_id, self._bootstrap, None,
            tracker.producer.begin_transaction,
        )  # fmt: skip
        self._in_transaction = True

    def flush(self) -> None:
        self.producer.flush_and_check(self._flush_timeout_s)

    def commit(self, metadata: TaskMetadata) -> TaskMetadata:
        """Add the commit marker (the new metadata) to the transaction and commit it."""
        tracker = self.producer
        sequence = metadata.commit.sequence + 1
        marked = replace(metadata, commit=CommitState(sequence, 0))
        tracker.produce(
            self._marker_topic,
            self._task_id.encode(),
            marker_value(sequence, marked.to_json()),
            partition=self._marker_partition,
        )
        tracker.flush_and_check(self._flush_timeout_s)
        marker_end = tracker.acked_end_offsets()[(self._marker_topic, self._marker_partition)]
        transaction_step(
            "commit_transaction",
            self._txn_id,
            self._bootstrap,
            self._flush_timeout_s,
            lambda: tracker.producer.commit_transaction(self._flush_timeout_s),
        )
        self._in_transaction = False
        return replace(metadata, commit=CommitState(sequence, marker_end))

    def abandon(self) -> None:
        if self._in_transaction:
            self._in_transaction = False
            try:
                self._producers.for_task(
                    self._app, self._task_id, self._directory
                ).producer.abort_transaction(10)
            except Exception as exc:  # noqa: BLE001 - fenced or broker gone: it aborts later
                self._log.warning("transaction_abort_failed", error=str(exc))
        self._producers.drop(self._task_id)

    def close(self) -> None:
        self._producers.drop(self._task_id)
