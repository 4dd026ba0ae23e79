"""The commit barrier of the workers on one Tansu broker (``kafka/commit_barrier.py``): a
worker that committed waits for the other workers' transactions opened before its commit to
end, never for one opened after it, never for a process that is gone, and never for ever."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

from processor_api.kafka.commit_barrier import WAIT_LIMIT_S, CommitBarrier, barrier_directory


def _broker() -> str:
    return f"barrier-test-{uuid.uuid4().hex}:9092"  # a directory of its own per test


def test_a_worker_waits_for_a_transaction_opened_before_its_commit_to_end():
    broker = _broker()
    committing, other = CommitBarrier(broker), CommitBarrier(broker)
    try:
        committing.opened()
        other.opened()
        committed_at = time.time()
        committing.ended()
        ended = threading.Timer(0.05, other.ended)
        ended.start()
        started = time.monotonic()
        committing.wait_for_peers(committed_at)
        waited = time.monotonic() - started
        ended.join()
        assert committing.waits == 1 and 0.04 <= waited < WAIT_LIMIT_S, waited
    finally:
        committing.close()
        other.close()


def test_a_transaction_opened_after_the_commit_does_not_hold_it():
    broker = _broker()
    committing, other = CommitBarrier(broker), CommitBarrier(broker)
    try:
        committing.opened()
        committed_at = time.time()
        committing.ended()
        time.sleep(0.002)  # the other's transaction begins strictly after the commit
        other.opened()
        committing.wait_for_peers(committed_at)
        assert committing.waits == 0
    finally:
        committing.close()
        other.close()


def test_a_peer_that_never_ends_holds_a_worker_at_most_the_limit():
    broker = _broker()
    committing, stuck = CommitBarrier(broker), CommitBarrier(broker)
    try:
        stuck.opened()
        committed_at = time.time()
        started = time.monotonic()
        committing.wait_for_peers(committed_at)
        assert WAIT_LIMIT_S <= time.monotonic() - started < WAIT_LIMIT_S + 1.0
    finally:
        committing.close()
        stuck.close()


def test_the_file_of_a_process_that_is_gone_is_ignored_and_removed():
    broker = _broker()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    directory = barrier_directory(broker)
    directory.mkdir(parents=True, exist_ok=True)
    leftover = directory / f"{gone.stdout.strip()}-deadbeef"
    leftover.write_text(repr(time.time() - 10))
    idle_leftover = directory / f"{gone.stdout.strip()}-cafebabe"
    idle_leftover.write_text("")
    committing = CommitBarrier(broker)
    try:
        committing.wait_for_peers(time.time())
        assert committing.waits == 0
        assert not leftover.exists() and not idle_leftover.exists()
    finally:
        committing.close()
    assert list(directory.iterdir()) == []
