"""Crash tests, small enough for ``make test``; ``tests/reliability/soak.py``
is the long version.

Seed 000's sales aggregation in its paced twin (``topologies_for_tests.build_paced_sales``,
same output, a few ms per record, so that each task's work spans many commits and a
transaction stays open long enough to be killed inside it) over 3 input partitions runs under
``run-topology --available-now`` in a subprocess: one epoch per run, in which every task
commits every ``commit.interval.ms``. The whole process tree is killed with SIGKILL at moments
read from its structlog events (``tests/harness/crash.py``):

* ``mid_commit``: after 1-3 commits of a task (``task_committed``), between two commits, as
  soon as output records that no transaction marker follows are in the log: under
  exactly-once, inside a task's open transaction;
* ``after_commit``: right after the 1st-3rd commit;
* ``state_dir_deleted``: like ``mid_commit``, then ``--state-dir`` is deleted (the Spark
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
    ("guarantee", "kills", "pause_ms", "commit_interval_ms"),
    [
        # paced, commits every 100 ms (Kafka Streams' exactly-once default): the mid-commit
        # kills land inside a task's open transaction
        (
            "exactly_once_v2",
            ["mid_commit", "after_commit", "state_dir_deleted", "restore"],
            5.0,
            100,
        ),
        # commits every 300 ms (Kafka Streams' at_least_once default, 30 s, would put none
        # inside a run), so that a run makes several and the kills fall between them; the
        # same kills with less to check: make test-slow
        pytest.param(
            "at_least_once",
            ["mid_commit", "after_commit", "state_dir_deleted", "restore"],
            2.0,
            300,
            marks=pytest.mark.slow,
        ),
    ],
)
def test_kill_9_and_restart_matches_the_reference_fold(
    kafka, tmp_path, guarantee, kills, pause_ms, commit_interval_ms
):
    # 6,000 events: each task has ~10 s of paced work, so the four kills land before its end
    sales = make_sales(6000, 20, seed=30)
    scenario = CrashScenario(
        kafka.bootstrap_servers,
        tmp_path,
        guarantee,
        sales,
        seed=31,
        pause_ms=pause_ms,
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
    assert report.store_totals_equal, "the final store differs from the reference fold"
    assert "open" not in report.output_status, report.output_status
    committed, visible = report.committed_only, report.read_committed
    assert is_ok(committed, guarantee), committed
    # a mid-commit kill caught output of an open commit interval in the log
    assert any(k.detail.get("output_in_flight") for k in report.kills), report.kills
    if guarantee == "exactly_once_v2":
        assert committed.equal and committed.seen == committed.expected, committed
        # whatever else a read_committed reader saw on Tansu is from aborted transactions:
        # the restart fenced the killed ones, and Tansu still shows their records
        assert visible.extra == report.aborted_visible, (visible, report.aborted_visible)
        assert visible.missing == 0 and visible.wrong == 0, visible
        assert report.aborted_visible > 0, report.output_status
    else:
        assert report.aborted_visible == 0 and visible == committed, (visible, committed)
