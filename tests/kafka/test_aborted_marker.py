"""Recovery under exactly-once never adopts the commit marker of an aborted transaction.

Tansu shows records of aborted transactions to ``read_committed`` readers, the commit marker
too: a task killed after sending its marker and before committing left a marker that the next
start adopted, skipping the batch whose outputs had aborted (the crash test's exactly-once
check saw them missing, CI). The consumer group tells: offsets committed in a transaction
only take effect when it commits. Markers are written here as a task writes them
(``send_marker`` in a transaction with ``send_offsets_to_transaction``)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from structlog.testing import capture_logs

from processor_api.engine.metadata import TaskMetadata
from processor_api.kafka.markers import CommitLog, aborted_by_group
from processor_api.kafka.names import commit_marker_topic
from processor_api.kafka.producer import DeliveryTracker
from processor_api.runtime.guarantee import adopt_newer_marker, send_marker
from tests.harness.topics import uid

TASK = "0_1"


class _Task:
    """A task's transactional producer, its commit log and its group's metadata."""

    def __init__(self, bootstrap: str, app: str, *, transactional_log: bool = True) -> None:
        self.input = f"{app}-orders"
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{app}-{TASK}"}
        )
        self.producer.init_transactions(30)
        self.tracker = DeliveryTracker(self.producer)
        self.group = Consumer({"bootstrap.servers": bootstrap, "group.id": app})
        self.log = CommitLog(bootstrap, app, TASK, 1, transactional=transactional_log)
        self.metadata = TaskMetadata()

    def batch(self, position: int, *, commit: bool) -> None:
        self.producer.begin_transaction()
        metadata = TaskMetadata(input_positions={self.input: position}, commit=self.metadata.commit)
        marked = send_marker(self.log, self.tracker, metadata, "writer", {self.input: position})
        self.tracker.flush_and_check(30)
        self.producer.send_offsets_to_transaction(
            [TopicPartition(self.input, 1, position)], self.group.consumer_group_metadata(), 30
        )
        if commit:
            self.producer.commit_transaction(30)
            self.metadata = marked
        else:
            self.producer.abort_transaction(30)

    def close(self) -> None:
        self.group.close()


@pytest.fixture
def app(kafka):
    name = uid("aborted-marker")
    kafka.create_topic(commit_marker_topic(name), 2)
    kafka.create_topic(f"{name}-orders", 2)
    return kafka.bootstrap_servers, name


@pytest.mark.integration
def test_the_marker_of_an_aborted_transaction_is_passed_over(app):
    bootstrap, name = app
    task = _Task(bootstrap, name)
    try:
        task.batch(5, commit=True)
        task.batch(9, commit=False)  # a kill after the marker was sent, before the commit
        with capture_logs() as logs:
            recovered = adopt_newer_marker(task.log, TaskMetadata())
        assert recovered.commit.sequence == 1
        assert recovered.input_positions == {task.input: 5}
        # routine recovery, nothing for a person to do: info, not warning
        levels = {e["event"]: e["log_level"] for e in logs}
        assert levels["aborted_batch_marker_ignored"] == "info"
        assert levels["committed_batch_adopted"] == "info"
        # the batch done again, committed this time: adopted
        task.batch(9, commit=True)
        recovered = adopt_newer_marker(task.log, TaskMetadata())
        assert (recovered.commit.sequence, recovered.input_positions) == (2, {task.input: 9})
    finally:
        task.close()


@pytest.mark.integration
def test_a_first_batch_that_aborted_leaves_nothing_to_adopt(app):
    bootstrap, name = app
    task = _Task(bootstrap, name)
    try:
        task.batch(4, commit=False)
        assert adopt_newer_marker(task.log, TaskMetadata()) == TaskMetadata()
    finally:
        task.close()


@pytest.mark.integration
def test_at_least_once_markers_are_adopted_as_they_are(app):
    """No transaction: the marker is durable once acknowledged, the group commit follows."""
    bootstrap, name = app
    task = _Task(bootstrap, name, transactional_log=False)
    try:
        task.batch(5, commit=True)
        task.batch(9, commit=False)
        assert (
            adopt_newer_marker(task.log, TaskMetadata()).commit.sequence == 2
        )  # as the broker shows it
    finally:
        task.close()


def test_aborted_by_group_compares_with_the_previous_batch():
    # the group still at the previous batch's offsets for every topic this batch moved
    assert aborted_by_group({"a": 5}, {"a": 9}, {"a": 5})
    assert aborted_by_group({}, {"a": 9}, {})  # a first batch: the group has nothing
    assert not aborted_by_group({"a": 9}, {"a": 9}, {"a": 5})
    # a topic this batch did not move says nothing; one that moved and committed does
    assert aborted_by_group({"a": 5, "b": 3}, {"a": 9, "b": 3}, {"a": 5, "b": 3})
    assert not aborted_by_group({"a": 9, "b": 3}, {"a": 9, "b": 3}, {"a": 5, "b": 3})
    # nothing moved (a punctuation between batches): cannot tell, not aborted
    assert not aborted_by_group({"a": 5}, {"a": 5}, {"a": 5})
    # a group somewhere else (reset by a tool): not this pattern, not aborted
    assert not aborted_by_group({"a": 0}, {"a": 9}, {"a": 5})
