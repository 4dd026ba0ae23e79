"""A local run's driver starts its worker hosts while Spark starts (``spark/early_start.py``),
with ``run-topology`` in a subprocess on the embedded broker and ``local[2]`` (two workers for
three tasks):

* a new checkpoint: every task is opened, and processes and commits its input, before the
  first epoch's call begins; that call takes the running tasks over (no task rebuilt, no
  marker adopted, one transactional producer per task), and the exactly-once output of the
  records produced before and after it is exact, each record processed once;
* an available-now run on a new checkpoint: the tasks are built (recovered, restored) and
  process and commit up to the run's end offsets (read by the driver before it starts the
  hosts) before the first epoch, which takes them over without a rebuild; then a continuous
  run on that checkpoint (Spark hands over state the driver does not read): the hosts take
  their tasks before the first epoch, which builds them from Spark's state, and process
  nothing before it; the output over both runs is exact, each record processed once.

The order of events is that of the run's log: the hosts, the pyspark workers and the driver
all write to the run's stderr.
"""

from __future__ import annotations

import signal

import pytest

from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from tests.harness.folds import (
    SALES,
    SALES_STORE,
    compare,
    expected_notifications,
    fold_totals,
    is_ok,
    make_sales,
    notifications_by_product,
    produce_sales,
)
from tests.harness.logs import LoggedEvent
from tests.harness.processes import CliRun, cli_args
from tests.harness.topics import committed_records, create_topics_now, uid

pytestmark = pytest.mark.integration

TASKS = {"0_0", "0_1", "0_2"}
#: Events of a task rebuilt from what Spark handed over instead of taken over as it ran.
REBUILD_EVENTS = ("task_rebuilt", "committed_batch_adopted", "uncommitted_work_dropped")


def _setup(bootstrap: str) -> dict[str, str]:
    run_id = uid()
    topics = {"input_topic": f"early-in-{run_id}", "output_topic": f"early-out-{run_id}"}
    create_topics_now(bootstrap, {topics["input_topic"]: 3, topics["output_topic"]: 3})
    return topics


def _before(run: CliRun, event: LoggedEvent) -> list[LoggedEvent]:
    return list(run.events[: event.index])


def _tasks_with(events: list[LoggedEvent], name: str) -> set[str]:
    return {e.event["task"] for e in events if e.name == name and "task" in e.event}


def _check_exact(bootstrap, topics, sales, state_dir, app_id) -> None:
    kept, _ = committed_records(bootstrap, topics["output_topic"])
    store = read_local_store(state_dir, app_id, SALES_STORE, Serdes.string(), Serdes.long())
    result = compare(
        expected_notifications(sales),
        notifications_by_product(kept),
        "exactly_once_v2",
        fold_totals(sales),
        store,
    )
    assert is_ok(result, "exactly_once_v2"), result


def test_a_new_run_processes_before_its_first_epoch_and_stays_exact(kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topics = _setup(bootstrap)
    sales = make_sales(800, 20, seed=35)
    produce_sales(bootstrap, topics["input_topic"], sales[:400])
    app_id = f"early-{uid()}"
    state_dir = tmp_path / "state"
    args = cli_args(
        SALES,
        bootstrap,
        app_id,
        state_dir,
        guarantee="exactly_once_v2",
        available_now=False,
        topology_args=topics,
        extra=["--log-level", "debug", "--epoch-interval", "5"],
    )
    with CliRun(args, tmp_path / "run.log") as run:
        first_call = run.wait_event("epoch_call_started", 300)
        produce_sales(bootstrap, topics["input_topic"], sales[400:])
        run.wait_processed(len(sales), 300)
        run.signal(signal.SIGTERM)
        assert run.wait(120) == 0, run.tail()

    before = _before(run, first_call)
    assert _tasks_with(before, "task_started_early") == TASKS, run.tail()
    # every task processed and committed (its output visible) before Spark's first call
    committed = {
        e.event["task"]
        for e in before
        if e.name == "task_committed" and int(e.event["processed"]) > 0
    }
    assert committed == TASKS, run.tail()
    # the calls took the running tasks over: none was rebuilt from Spark's state
    stop = run.wait_event("stop_requested", 0)
    rebuilt = [e.event for e in _before(run, stop) if e.name in REBUILD_EVENTS]
    assert rebuilt == [], rebuilt
    # one transactional producer per worker, made once (none renewed)
    producers = [
        e.event["transactional_id"] for e in run.events if e.name == "transactional_producer_ready"
    ]
    assert producers and len(set(producers)) == len(producers), producers
    assert all(p.startswith(f"{app_id}-w") for p in producers), producers
    assert run.processed() == len(sales), "records processed twice or lost"
    _check_exact(bootstrap, topics, sales, state_dir, app_id)


def test_an_available_now_run_processes_early_and_a_restart_opens_its_tasks_early(kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    topics = _setup(bootstrap)
    sales = make_sales(600, 20, seed=36)
    produce_sales(bootstrap, topics["input_topic"], sales[:300])
    app_id = f"early-restart-{uid()}"
    state_dir = tmp_path / "state"

    def args(*extra: str, available_now: bool) -> list[str]:
        return cli_args(
            SALES,
            bootstrap,
            app_id,
            state_dir,
            guarantee="exactly_once_v2",
            available_now=available_now,
            topology_args=topics,
            extra=["--log-level", "debug", *extra],
        )

    with CliRun(args(available_now=True), tmp_path / "run-1.log") as first:
        assert first.wait(300) == 0, first.tail()
    assert first.processed() == 300, first.tail()

    produce_sales(bootstrap, topics["input_topic"], sales[300:])
    with CliRun(
        args("--epoch-interval", "5", available_now=False), tmp_path / "run-2.log"
    ) as second:
        second.wait_processed(300, 300)
        second.signal(signal.SIGTERM)
        assert second.wait(120) == 0, second.tail()
    assert second.processed() == 300, "records processed twice or lost"

    for run, built in ((first, True), (second, False)):
        before = _before(run, run.wait_event("epoch_call_started", 0))
        started = [e.event for e in before if e.name == "task_started_early"]
        assert {e["task"] for e in started} == TASKS, run.tail()
        assert {e["built"] for e in started} == {built}, started
        # a new checkpoint's available-now tasks run up to the run's ends before the call
        early = TASKS if built else set()
        assert _tasks_with(before, "task_first_records") == early, run.tail()
        assert _tasks_with(before, "task_committed") == early, run.tail()
    # the first run's call took its running tasks over: none rebuilt from Spark's state
    # (until the run ends: closing a task drops its empty open batch, and says so)
    done = first.wait_event("available_now_pass_done", 0)
    rebuilt = [e.event for e in _before(first, done) if e.name in REBUILD_EVENTS]
    assert rebuilt == [], rebuilt
    # the restart's epoch built its tasks from Spark's state: nothing to adopt or to repair
    assert [n for n in second.names() if n in ("committed_batch_adopted", "store_wipe")] == []
    _check_exact(bootstrap, topics, sales, state_dir, app_id)
