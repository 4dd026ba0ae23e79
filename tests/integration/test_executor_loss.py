"""Executor loss on ``local-cluster[2,1,1024]`` under ``exactly_once_v2``: the run goes on,
the moved task restores from snapshot + changelog tail, and the committed outputs and the final
stores equal the reference fold (``tests/harness/executor_loss.py`` runs the scenario;
``bench/executor_loss.py`` times it)."""

from __future__ import annotations

import pytest

from tests.harness.executor_loss import run_executor_loss
from tests.harness.folds import fold_totals
from tests.integration.test_local_cluster import _executor_dirs

pytestmark = pytest.mark.integration


def test_an_executor_killed_mid_run_loses_and_doubles_nothing(kafka, tmp_path):
    loss = run_executor_loss(kafka, tmp_path, _executor_dirs)
    comparison = loss.comparison()
    assert comparison.equal and comparison.seen == comparison.expected, comparison
    assert comparison.totals_equal, (loss.store, fold_totals(loss.sales))
    assert loss.restores_from_snapshots, "no moved task restored from a snapshot"
    print(
        f"first outputs {loss.first_outputs_after_kill_s:.1f} s and all outputs "
        f"{loss.complete_after_kill_s:.1f} s after the kill; aborted shown: {len(loss.aborted)}; "
        f"restores from snapshots: {len(loss.restores_from_snapshots)}"
    )
