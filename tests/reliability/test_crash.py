"""Crash tests, small enough for ``make test``; ``tests/reliability/soak.py``
is the long version.

Seed 000's sales aggregation (``topologies.sales_aggregation``; for exactly-once its paced
twin ``topologies_for_tests.build_paced_sales``, same output, 3 ms per record, so that a task's
transaction stays open long enough to be killed inside it) over 3 input partitions runs under
``run-topology --available-now --max-records-per-batch 400`` in a subprocess; the whole process
tree is killed with SIGKILL at moments read from its structlog events:

* ``mid_batch``: once >= 1 batch of the run committed, after a task's ``task_batch_done``, as
  soon as the next task's first output records are in the log (a raw Fetch sees them before
  they are committed): under exactly-once, inside that task's open transaction;
* ``between_batches``: once batch N's commit file exists in the Spark checkpoint;
* ``state_dir_deleted``: like ``mid_batch``, then ``--state-dir`` is deleted (the Spark
  checkpoint is kept elsewhere, as Kafka keeps a Kafka Streams app's committed offsets);
* ``restore``: at the first ``restore_start`` of the run (the test checks the kill landed
  before that restore's ``restore_done``).

After the kills one run goes to the end, then a ``read_committed`` reader reads the output
and it is compared with the reference fold (``tests.harness.folds.compare``):

* exactly-once: every product's notifications equal the expected list (the running totals
  >= 2000 in input order), the final store equals the fold;
* at-least-once: nothing missing, no total that should not exist, re-emissions only re-start
  at or before where the previous run stopped, the final store equals the fold.

Tansu does not hide aborted transactions from ``read_committed`` readers, so the exactly-once
check is made on the records whose transaction committed (``transaction_status`` reads the
COMMIT/ABORT markers from the raw log); the test also checks that every extra record the
plain ``read_committed`` reader saw belongs to an aborted transaction.
"""

from __future__ import annotations

import json

import pytest

from tests.harness.crash import CrashScenario
from tests.harness.folds import is_ok, make_sales

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("guarantee", "kills", "pause_ms"),
    [
        # paced (3 ms per record): the mid-batch kills land inside an open transaction;
        # make test-slow and the soak in bench/ (make test keeps kill -9 under exactly-once
        # in epochs below and in test_crash_word_count.py, within its time)
        pytest.param(
            "exactly_once_v2",
            ["mid_batch", "between_batches", "state_dir_deleted", "restore"],
            3.0,
            marks=pytest.mark.slow,
        ),
        # a mid-batch kill no longer leaves a store to rebuild (tasks that finished the batch
        # wrote their commit marker and adopt it on restart), so the state dir is deleted to
        # make the next start restore every store, and that restore is killed; make test-slow
        pytest.param(
            "at_least_once",
            ["mid_batch", "state_dir_deleted", "restore"],
            0.0,
            marks=pytest.mark.slow,
        ),
    ],
)
def test_kill_9_and_restart_matches_the_reference_fold(kafka, tmp_path, guarantee, kills, pause_ms):
    # 20 products: most updates are >= 2000 after the first ~400 events, so every batch the
    # kills hit has output
    sales = make_sales(3000, 20, seed=20)
    scenario = CrashScenario(
        kafka.bootstrap_servers,
        tmp_path,
        guarantee,
        sales,
        max_records_per_batch=400,
        seed=21,
        pause_ms=pause_ms,
        log=print,
    )
    report = scenario.run(kills)
    summary = {k: v for k, v in report.as_dict().items() if k not in ("kills", "logs")}
    print(json.dumps(summary, default=str))
    assert [k.kind for k in report.kills if k.done] == kills, report.kills
    for kill in report.kills:
        if kill.kind == "restore":
            assert kill.detail["in_flight"], f"the kill did not land in a restore: {kill}"
    assert report.store_totals_equal
    assert "open" not in report.output_status, report.output_status
    committed, visible = report.committed_only, report.read_committed
    assert is_ok(committed, guarantee), committed
    if guarantee == "exactly_once_v2":
        assert committed.equal and committed.seen == committed.expected
        # whatever else a read_committed reader saw on Tansu is from aborted transactions
        assert visible.extra == report.aborted_visible, (visible, report.aborted_visible)
        assert visible.missing == 0 and visible.wrong == 0
        # the mid-batch kills caught transactions with output in the log; after the restart
        # fenced them, Tansu still shows those records to read_committed readers
        assert any(k.detail.get("output_in_flight") for k in report.kills), report.kills
        assert report.aborted_visible > 0, report.output_status
    else:
        assert report.aborted_visible == 0 and visible == committed


@pytest.mark.parametrize(
    ("guarantee", "kills", "pause_ms", "commit_interval_ms"),
    [
        # paced, commits every 100 ms (Kafka Streams' exactly-once default): the mid-epoch
        # kills land inside a task's open transaction
        (
            "exactly_once_v2",
            ["mid_batch", "between_batches", "state_dir_deleted", "restore"],
            5.0,
            100,
        ),
        # commits every 300 ms, so that a run makes several and the kills fall between them;
        # make test-slow, as the micro-batch at_least_once case
        pytest.param(
            "at_least_once",
            ["mid_batch", "between_batches", "state_dir_deleted", "restore"],
            2.0,
            300,
            marks=pytest.mark.slow,
        ),
    ],
)
def test_kill_9_in_epochs_and_restart_matches_the_reference_fold(
    kafka, tmp_path, guarantee, kills, pause_ms, commit_interval_ms
):
    """The same kills in epochs (``--epochs``): one long epoch per run, the tasks commit
    every ``commit.interval.ms`` inside it; ``mid_batch`` = between two commits with output
    in the log, ``between_batches`` = right after a commit."""
    # 6,000 events: each task has ~10 s of paced work, so the four kills land before its end
    sales = make_sales(6000, 20, seed=30)
    scenario = CrashScenario(
        kafka.bootstrap_servers,
        tmp_path,
        guarantee,
        sales,
        seed=31,
        pause_ms=pause_ms,
        epochs=True,
        commit_interval_ms=commit_interval_ms,
        log=print,
    )
    report = scenario.run(kills)
    summary = {k: v for k, v in report.as_dict().items() if k not in ("kills", "logs")}
    print(json.dumps(summary, default=str))
    assert [k.kind for k in report.kills if k.done] == kills, report.kills
    for kill in report.kills:
        if kill.kind == "restore":
            assert kill.detail["in_flight"], f"the kill did not land in a restore: {kill}"
    assert report.store_totals_equal
    assert "open" not in report.output_status, report.output_status
    committed, visible = report.committed_only, report.read_committed
    assert is_ok(committed, guarantee), committed
    assert any(k.detail.get("output_in_flight") for k in report.kills), report.kills
    if guarantee == "exactly_once_v2":
        assert committed.equal and committed.seen == committed.expected
        assert visible.extra == report.aborted_visible, (visible, report.aborted_visible)
        assert visible.missing == 0 and visible.wrong == 0
        assert report.aborted_visible > 0, report.output_status
    else:
        assert report.aborted_visible == 0 and visible == committed
