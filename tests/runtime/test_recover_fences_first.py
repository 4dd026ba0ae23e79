"""A task taken over under exactly_once_v2: the new owner fences the old one before it reads
where the task stands.

The new owner's recovery reads the newest committed marker (where the task's input and stores
stood at its last commit) and resumes from it. If the old owner (a stalled process, a Spark
attempt that lives on) could still commit after that read, its output and input offsets would
be committed while the new owner processes the same input again from the older marker:
duplicates under exactly-once. Kafka Streams fences first (``initTransactions``) and reads
the committed offsets after. Before this test, the new owner's producer was initialized
lazily at its first transaction, after the marker had been read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from processor_api.engine.metadata import TaskMetadata
from processor_api.errors import StreamsError
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.guarantee import TaskCommitSettings, make_guarantee
from tests.harness.topics import uid

pytestmark = pytest.mark.integration

TASK = "0_0"


def settings(bootstrap: str, app: str, directory: Path) -> TaskCommitSettings:
    return TaskCommitSettings(
        bootstrap_servers=bootstrap,
        producer_config={},
        flush_timeout_s=3.0,  # a fenced commit gets no answer from Tansu: fail it soon
        application_id=app,
        task_id=TASK,
        marker_partition=0,
        directory=directory,
    )


def test_the_old_owner_cannot_commit_after_the_new_owner_read_the_markers(kafka, tmp_path):
    bootstrap, app, out, source = kafka.bootstrap_servers, uid("recover"), uid("out"), uid("in")
    kafka.create_topic(out, 1)
    kafka.create_topic(commit_marker_topic(app), 1)
    old_owner = make_guarantee(True, settings(bootstrap, app, tmp_path / "old"))
    old_owner.recover(TaskMetadata())
    old_owner.begin()
    old_owner.producer.producer.produce(out, value=b"from the old owner")
    old_owner.flush()

    new_owner = make_guarantee(True, settings(bootstrap, app, tmp_path / "new"))
    recovered = new_owner.recover(TaskMetadata())  # reads the markers: none committed yet

    try:
        committed = old_owner.commit(TaskMetadata(input_positions={source: 7}), {})
    except StreamsError:
        committed = None
    new_owner.begin()
    new_owner.abandon()
    old_owner.close()
    new_owner.close()

    assert committed is None or recovered.commit.sequence >= committed.commit.sequence, (
        f"the old owner committed batch {committed and committed.commit.sequence} after the new "
        f"owner recovered at batch {recovered.commit.sequence}: its records would be processed "
        "twice"
    )
