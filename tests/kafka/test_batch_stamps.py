"""Batch stamps against a real broker: a downstream task keeps a repartition record only if the
upstream task's commit markers say its batch was committed by the writer that stamped it.

The markers are written as the runtime writes them (a transactional producer, the task id as
key, ``marker_value``); Tansu shows records of aborted transactions to ``read_committed``
readers, so these decisions are what keeps such records out of a downstream count."""

from __future__ import annotations

import json
import threading

import pytest
from confluent_kafka import Message, Producer

from processor_api.engine.metadata import MAX_WRITER_RUNS, CommitState, TaskMetadata
from processor_api.engine.records import MessageBatch
from processor_api.errors import StreamsError
from processor_api.kafka.batch_stamps import STAMP_HEADER, BatchStamp, CommittedBatches
from processor_api.kafka.markers import marker_value
from processor_api.kafka.names import commit_marker_topic
from processor_api.kafka.transaction_ends import RELEASE_HEADER
from processor_api.runtime.input_records import RELEASE_WRITER, drop_aborted
from tests.harness.topics import uid

TASKS = {"0_0": 0, "0_1": 1}


def _commit_state(*batches: tuple[int, str]) -> CommitState:
    state = CommitState()
    for sequence, writer in batches:
        state = state.committing(sequence, writer)
    return state


def _marker(state: CommitState) -> bytes:
    return marker_value(state.sequence, TaskMetadata(commit=state).to_json())


class _Markers:
    """A task's marker partition written through a transactional producer."""

    def __init__(self, bootstrap: str, topic: str, task_id: str) -> None:
        self.topic, self.task_id = topic, task_id
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{task_id}"}
        )
        self.producer.init_transactions(30)

    def open(self, state: CommitState) -> None:
        self.producer.begin_transaction()
        self.producer.produce(
            self.topic, _marker(state), self.task_id.encode(), partition=TASKS[self.task_id]
        )
        self.producer.flush(30)

    def commit(self) -> None:
        self.producer.commit_transaction(30)

    def abort(self) -> None:
        self.producer.abort_transaction(30)


@pytest.fixture
def markers(kafka):
    topic = commit_marker_topic(uid("stamps"))
    kafka.create_topic(topic, len(TASKS))
    return kafka.bootstrap_servers, topic


@pytest.mark.integration
def test_committed_writer_kept_aborted_attempts_dropped(markers):
    bootstrap, topic = markers
    upstream = _Markers(bootstrap, topic, "0_1")
    # batch 1 by w1; batch 2 first tried by w1 (aborted), retried by w2; batch 3 by w2
    upstream.open(_commit_state((1, "w1")))
    upstream.commit()
    upstream.open(_commit_state((1, "w1"), (2, "w1")))
    upstream.abort()
    upstream.open(_commit_state((1, "w1"), (2, "w2")))
    upstream.commit()
    upstream.open(_commit_state((1, "w1"), (2, "w2"), (3, "w2")))
    upstream.commit()

    batches = CommittedBatches(bootstrap, topic, TASKS)
    try:
        assert batches.is_committed(BatchStamp("0_1", 1, "w1"))
        assert not batches.is_committed(BatchStamp("0_1", 2, "w1"))  # the aborted attempt
        assert batches.is_committed(BatchStamp("0_1", 2, "w2"))
        assert batches.is_committed(BatchStamp("0_1", 3, "w2"))
        # batch 4: its transaction ended (nothing open on the marker partition), no marker
        assert not batches.is_committed(BatchStamp("0_1", 4, "w2"))
        # an upstream task that never committed anything
        assert not batches.is_committed(BatchStamp("0_0", 1, "w9"))
    finally:
        batches.close()


class _SeesOpenTransaction(CommittedBatches):
    saw_open = threading.Event()

    def _no_open_transaction(self, partition: int) -> bool:
        settled = super()._no_open_transaction(partition)
        if not settled:
            self.saw_open.set()
        return settled


@pytest.mark.integration
def test_a_marker_still_in_an_open_transaction_is_waited_for(markers):
    """The commit can reach the repartition partition before the marker partition: a stamp
    past the latest visible marker waits while the marker partition has an open transaction."""
    bootstrap, topic = markers
    upstream = _Markers(bootstrap, topic, "0_0")
    upstream.open(_commit_state((1, "w1")))  # not committed yet
    batches = _SeesOpenTransaction(bootstrap, topic, TASKS)
    decided: list[bool] = []
    checker = threading.Thread(
        target=lambda: decided.append(batches.is_committed(BatchStamp("0_0", 1, "w1")))
    )
    checker.start()
    try:
        assert _SeesOpenTransaction.saw_open.wait(30)
        upstream.commit()
        checker.join(60)
        assert decided == [True]
    finally:
        batches.close()


def _message(
    topic: str, partition: int, offset: int, headers: list[tuple[str, bytes]] | None
) -> Message:
    """A consumed record as the consumer hands it to a task."""
    return Message(
        topic=topic, partition=partition, offset=offset, key=b"k", value=b"v",
        headers=headers, timestamp=(1, 5),
    )  # fmt: skip


@pytest.mark.integration
def test_drop_aborted_strips_the_stamp_and_counts_what_it_dropped(markers):
    bootstrap, topic = markers
    upstream = _Markers(bootstrap, topic, "0_1")
    upstream.open(_commit_state((1, "w2")))
    upstream.commit()
    repartition = "app-words-repartition"

    def record(offset: int, stamp: BatchStamp | None) -> Message:
        headers = [("h", b"1")] + ([] if stamp is None else [(STAMP_HEADER, stamp.encode())])
        return _message(repartition, 0, offset, headers)

    records = [
        record(0, BatchStamp("0_1", 1, "w1")),  # aborted attempt of batch 1
        record(1, BatchStamp("0_1", 1, "w2")),
        record(2, None),  # written without exactly-once: kept as it is
    ]
    batches = CommittedBatches(bootstrap, topic, TASKS)
    try:
        kept, dropped = drop_aborted(
            MessageBatch({repartition: records}), 0, frozenset({repartition}), batches
        )
    finally:
        batches.close()
    assert [(r.offset(), r.headers()) for r in kept.messages()] == [
        (1, [("h", b"1")]),
        (2, [("h", b"1")]),
    ]
    assert dropped == {(repartition, 0, "0_1"): 1}


def test_a_malformed_stamp_names_the_record():
    bad = _message("t-repartition", 2, 17, [(STAMP_HEADER, b"nonsense")])
    with pytest.raises(StreamsError, match=r"malformed .*batch header.*partition=2 offset=17"):
        drop_aborted(MessageBatch({"t-repartition": [bad]}), 2, frozenset({"t-repartition"}), None)


def test_records_that_released_a_pinned_partition_are_dropped_and_counted():
    release = _message("t-repartition", 1, 9, [(RELEASE_HEADER, b"")])
    kept_record = _message("t-repartition", 1, 11, None)
    elsewhere = _message("t-input", 1, 3, [(RELEASE_HEADER, b"")])
    batch = MessageBatch({"t-repartition": [release, kept_record], "t-input": [elsewhere]})
    kept, dropped = drop_aborted(batch, 1, frozenset({"t-repartition"}), None)
    # only the runtime's own topics carry them
    assert kept.by_topic == {"t-repartition": [kept_record], "t-input": [elsewhere]}
    assert dropped == {("t-repartition", 1, RELEASE_WRITER): 1}
    assert len(kept) == 2


@pytest.mark.integration
def test_a_stamp_of_an_unknown_task_is_an_error_naming_it(markers):
    bootstrap, topic = markers
    batches = CommittedBatches(bootstrap, topic, TASKS)
    with pytest.raises(StreamsError, match=r"stamped by task '7_0'.*tasks: 0_0, 0_1"):
        batches.is_committed(BatchStamp("7_0", 1, "w1"))


def test_writer_runs_grow_only_when_the_writer_changes_and_survive_json():
    state = _commit_state((1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "a"))
    assert state.writers == [[1, "a"], [3, "b"], [5, "a"]]
    restored = TaskMetadata.from_json(TaskMetadata(commit=state).to_json()).commit
    assert restored == state
    assert json.loads(_marker(state))["sequence"] == 5
    many = _commit_state(*((n, f"w{n}") for n in range(1, MAX_WRITER_RUNS + 11)))
    assert len(many.writers) == MAX_WRITER_RUNS
    assert many.writers[0] == [11, "w11"]
    # no writer (at-least-once): the runs stay as they were
    assert state.committing(6, None).writers == state.writers
