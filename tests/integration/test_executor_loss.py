"""Executor loss on ``local-cluster[2,1,1024]`` under ``exactly_once_v2``: the run goes on,
the moved task restores from snapshot + changelog tail, and the committed outputs and the final
stores equal the reference fold (``tests/harness/executor_loss.py`` runs the scenario;
``bench/executor_loss.py`` times it). Interactive queries during the move: a key of the moved
task answers 503 with ``Retry-After`` while the task is away, never a wrong value, and then
the right one."""

from __future__ import annotations

from itertools import accumulate

import pytest

from tests.harness.executor_loss import run_executor_loss
from tests.harness.folds import Sale, fold_totals

pytestmark = pytest.mark.integration


def _running_totals(sales: list[Sale], product: str) -> set[int]:
    """Every total the product's store entry goes through (its sales are in one partition,
    processed in produce order)."""
    return set(accumulate(s.value for s in sales if s.product == product))


def test_an_executor_killed_mid_run_loses_and_doubles_nothing(kafka, tmp_path, local_cluster):
    loss = run_executor_loss(kafka, tmp_path, watch_queries=True)
    comparison = loss.comparison()
    assert comparison.equal and comparison.seen == comparison.expected, comparison
    assert comparison.totals_equal, (loss.store, fold_totals(loss.sales))
    assert loss.restores_from_snapshots, "no moved task restored from a snapshot"

    # queries during the move
    queries = loss.queries
    assert queries is not None
    assert sorted(set(queries.keys.values())) == ["0_0", "0_1"], queries.keys
    assert [e for e in queries.lookups if e.error] == []
    for key, task in queries.keys.items():
        answers = [e for e in queries.lookups if e.key == key]
        valid = _running_totals(loss.sales, key)
        wrong = [e for e in answers if not e.unavailable and e.value not in valid]
        assert wrong == [], f"{key}: answers that are no running total of its sales"
        assert all(e.task == task for e in answers if not e.unavailable)
        if task in queries.moved:
            away = [e for e in answers if e.unavailable]
            assert away, f"{key} of the moved task {task} never answered 503"
            assert {e.retry_after_s for e in away} == {1.0}
            # back: answered again after the 503s
            assert any(not e.unavailable and e.at > away[0].at for e in answers), answers[-3:]
    assert queries.final == {key: fold_totals(loss.sales)[key] for key in queries.keys}
    print(
        f"first outputs {loss.first_outputs_after_kill_s:.1f} s and all outputs "
        f"{loss.complete_after_kill_s:.1f} s after the kill; aborted shown: {len(loss.aborted)}; "
        f"restores from snapshots: {len(loss.restores_from_snapshots)}; lookups during the "
        f"move: {len(queries.lookups)}, of which 503: "
        f"{sum(1 for e in queries.lookups if e.unavailable)} "
        f"({sorted({e.unavailable for e in queries.lookups if e.unavailable})})"
    )
