"""A task that gives up its open transaction after another process took the task over.

When a worker moves, its old host abandons each task's open transaction. By then the new
owner's ``init_transactions`` has fenced the old producer and aborted that transaction; Tansu
never answers the fenced producer's EndTxn. The old host aborted with a 10 s timeout, inside the
machine-wide lock that every worker's commit on this broker takes (``kafka/transaction_ends.py``),
so a worker of three tasks held every other worker's commit back for 30 s. The abort of an
abandoned transaction now waits at most ``ABANDON_ABORT_S``: whoever runs the task next aborts
it anyway.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from processor_api.kafka.names import commit_marker_topic, transactional_id
from processor_api.kafka.transaction_ends import LOCK_WARN_AFTER_S, one_at_a_time
from processor_api.runtime.guarantee import (
    ABANDON_ABORT_S,
    TaskCommitSettings,
    make_guarantee,
)
from tests.harness.topics import uid

pytestmark = pytest.mark.integration

TASK = "0_0"


def test_a_fenced_transaction_is_abandoned_without_holding_other_commits(kafka, tmp_path, caplog):
    bootstrap, app, out = kafka.bootstrap_servers, uid("abandon"), uid("out")
    kafka.create_topic(out, 1)
    kafka.create_topic(commit_marker_topic(app), 1)
    settings = TaskCommitSettings(
        bootstrap_servers=bootstrap,
        producer_config={},
        flush_timeout_s=10.0,
        application_id=app,
        task_id=TASK,
        marker_partition=0,
        directory=tmp_path,
    )
    old_owner = make_guarantee(True, settings)
    old_owner.begin()
    old_owner.producer.producer.produce(out, value=b"uncommitted")
    old_owner.flush()

    new_owner = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id(app, TASK)}
    )
    new_owner.init_transactions(30)  # fences the old owner and aborts its transaction

    # another worker's commit on this broker, started while the old owner abandons
    abandoning = threading.Event()
    waited: list[float] = []

    def other_commit() -> None:
        abandoning.wait()
        started = time.monotonic()
        one_at_a_time(bootstrap, lambda: None)
        waited.append(time.monotonic() - started)

    other = threading.Thread(target=other_commit)
    other.start()
    started = time.monotonic()
    abandoning.set()
    old_owner.abandon()
    took_s = time.monotonic() - started
    other.join(60)
    old_owner.close()

    assert waited, "the other commit never got the transaction-end lock"
    # before: the abort waited 10 s for Tansu's answer under the lock (LOCK_WARN_AFTER_S)
    assert took_s < ABANDON_ABORT_S + 2.0 < LOCK_WARN_AFTER_S, took_s
    assert waited[0] < ABANDON_ABORT_S + 2.0, waited[0]
