"""Shutdown and setup faults, with ``run-topology`` in a subprocess:

* SIGTERM ends the epoch in flight: every task commits what it processed and the run exits 0;
  the stores are consistent (the restart repairs nothing) and a restart resumes where the
  commits left off: exactly-once output over both runs;
* a Spark checkpoint an earlier version's micro-batch runtime wrote is refused up front
  (exit 2, one line, the checkpoint untouched); deleting it, as the line says, loses nothing;
* the broker gone at start or in the middle of an epoch -> a clear error in bounded time;
* a second ``run-topology`` with the same application id and state dir is refused.

Placing a stop mid-epoch: the hosts log ``task_committed`` after each commit of a task (a debug
event: ``--log-level debug``); the driver logs ``batch_done`` when an epoch ends, so runs that
wait for it use ``--epoch-interval 5`` instead of the default 60 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from processor_api.testing.embedded import EmbeddedKafka, free_port
from tests.harness.crash import PACED_SALES
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

REPAIR_EVENTS = ("store_wipe", "restore_start", "committed_batch_adopted")


def _sales_setup(bootstrap: str, sales, partitions: int = 3) -> dict[str, str]:
    run_id = uid()
    topics = {"input_topic": f"sd-in-{run_id}", "output_topic": f"sd-out-{run_id}"}
    create_topics_now(
        bootstrap, {topics["input_topic"]: partitions, topics["output_topic"]: partitions}
    )
    produce_sales(bootstrap, topics["input_topic"], sales)
    return topics


def _check_output(bootstrap, topics, sales, guarantee, state_dir, app_id):
    kept, aborted = committed_records(bootstrap, topics["output_topic"])
    store = read_local_store(state_dir, app_id, SALES_STORE, Serdes.string(), Serdes.long())
    result = compare(
        expected_notifications(sales),
        notifications_by_product(kept),
        guarantee,
        fold_totals(sales),
        store,
    )
    assert is_ok(result, guarantee), result
    return result, len(aborted)


def _stop_when_processed(run: CliRun, total: int, timeout_s: float) -> int:
    """Wait until the run's ended epochs processed ``total`` records, then SIGTERM it."""
    run.wait_processed(total, timeout_s)
    run.signal(signal.SIGTERM)
    return run.wait(120)


def _committed_mid_epoch(event: LoggedEvent) -> bool:
    """A task's commit of records it processed (inside an epoch)."""
    return event.name == "task_committed" and event.event.get("processed", 0) > 0


def _every_task_committed(tasks: set[str]) -> Callable[[LoggedEvent], bool]:
    """A predicate for ``wait_event``: true at the event by which each of ``tasks`` has
    committed records it processed (``task_committed`` with ``processed`` > 0)."""
    waiting = set(tasks)

    def predicate(event: LoggedEvent) -> bool:
        if _committed_mid_epoch(event):
            waiting.discard(event.event["task"])
        return not waiting

    return predicate


def _epoch_ends(run: CliRun) -> list[tuple[str, int, int]]:
    """``(task, records, committed)`` of each epoch end of a task (``task_epoch_done``):
    the records its epoch processed, and how many of them its last commit in that epoch
    covered (``task_committed``'s count of the epoch's records; 0 without a commit)."""
    ends = []
    committed: dict[str, int] = {}
    for logged in list(run.events):
        event = logged.event
        if logged.name == "task_committed":
            committed[event["task"]] = int(event["processed"])
        elif logged.name == "task_epoch_done":
            task = event["task"]
            ends.append((task, int(event["records"]), committed.pop(task, 0)))
    return ends


def test_sigterm_ends_the_epoch_in_flight_with_a_commit_and_a_restart_resumes(kafka, tmp_path):
    """The paced sales aggregation (5 ms per record, ~5 s of work per task) in one 60 s epoch;
    SIGTERM once every task has committed processed records, while they are still at work."""
    bootstrap = kafka.bootstrap_servers
    sales = make_sales(3000, 30, seed=11)
    topics = _sales_setup(bootstrap, sales)
    app_id = f"sigterm-{uid()}"
    state_dir = tmp_path / "state"

    def args(*extra: str) -> list[str]:
        return cli_args(
            PACED_SALES,
            bootstrap,
            app_id,
            state_dir,
            guarantee="exactly_once_v2",
            available_now=False,
            topology_args={**topics, "pause_ms": 5.0},
            extra=["--log-level", "debug", *extra],
        )

    tasks = {"0_0", "0_1", "0_2"}
    with CliRun(args(), tmp_path / "run-1.log") as first:
        # the default 60 s epoch has just begun; every task is at work (a task that processed
        # nothing before the stop has nothing to commit, and so no checkpoint to check)
        first.wait_event(_every_task_committed(tasks), 300)
        first.signal(signal.SIGTERM)
        sent = time.monotonic()
        code = first.wait(120)
        stop_s = time.monotonic() - sent
    assert code == 0, first.tail()
    names = first.names()
    assert "stop_requested" in names and "query_stopped" in names, first.tail()
    assert "run_failed" not in names
    assert stop_s < 90, f"took {stop_s:.1f}s to stop"
    for task in sorted(tasks):
        assert (state_dir / app_id / task / ".checkpoint").exists(), (task, first.tail())
    processed = first.processed()
    assert 0 < processed < len(sales), f"SIGTERM came after all the work: {processed}"
    # the epoch in flight when SIGTERM came was ended and reported, not abandoned ...
    assert names.index("stop_requested") < names.index("query_stopped")
    assert names[names.index("stop_requested") :].count("batch_done") == 1, first.tail()
    assert "epoch_ended_uncommitted" not in names, first.tail()
    # ... and every task committed all it had processed in it (an epoch that Spark began
    # after the stop ended at once, with nothing)
    ends = _epoch_ends(first)
    assert {task for task, _, _ in ends} == tasks, ends
    assert all(records == committed for _, records, committed in ends), ends
    assert sum(records for _, records, _ in ends) == processed, (ends, processed)

    # the restart: 5 s epochs, so that batch_done tells when it has processed the rest
    with CliRun(args("--epoch-interval", "5"), tmp_path / "run-2.log") as second:
        code = _stop_when_processed(second, len(sales) - processed, 420)
    assert code == 0, second.tail()
    repaired = [n for n in second.names() if n in REPAIR_EVENTS]
    assert repaired == [], f"the stop left something to repair: {repaired}"
    assert second.processed() == len(sales) - processed, "records processed twice or lost"
    _check_output(bootstrap, topics, sales, "exactly_once_v2", state_dir, app_id)


def test_a_micro_batch_runs_checkpoint_is_refused_clearly_and_deleting_it_loses_nothing(
    kafka, tmp_path
):
    """A Spark checkpoint an earlier version's micro-batch runtime wrote (its mode marker
    says so) cannot be resumed in epochs (Spark's state schema differs): refused before
    anything starts, exit 2, one line naming it; then, as that line says, the checkpoint is
    deleted and the next run resumes from the progress kept in Kafka: nothing lost, nothing
    processed twice."""
    bootstrap = kafka.bootstrap_servers
    sales = make_sales(600, 20, seed=16)
    topics = _sales_setup(bootstrap, sales)
    app_id = f"modes-{uid()}"
    state_dir = tmp_path / "state"
    checkpoint = tmp_path / "checkpoint"
    args = cli_args(SALES, bootstrap, app_id, state_dir, checkpoint, topology_args=topics)

    with CliRun(args, tmp_path / "run-1.log") as first:
        assert first.wait(300) == 0, first.tail()
    assert first.processed() == len(sales), first.tail()
    marker = checkpoint / "processor_api_mode"
    assert marker.read_text().strip() == "epochs"
    marker.write_text("continuous\n")  # what a continuous micro-batch run wrote there
    written = _files(checkpoint)

    more = make_sales(300, 20, seed=17, start_ts=1_800_000_000_000)
    produce_sales(bootstrap, topics["input_topic"], more)
    started = time.monotonic()
    with CliRun(args, tmp_path / "run-2.log") as second:
        code = second.wait(300)
    elapsed = time.monotonic() - started
    assert code == 2, second.tail()
    line = second.error_line() or ""
    assert line.startswith("run-topology: error: "), second.tail()
    for part in ("micro-batch", str(checkpoint)):
        assert part in line, f"{part!r} missing from: {line}"
    assert second.find("query_started") == [], second.tail()
    assert elapsed < 60, f"refused only after {elapsed:.1f}s"
    assert _files(checkpoint) == written, "the refused run changed the checkpoint"

    shutil.rmtree(checkpoint)
    with CliRun(args, tmp_path / "run-3.log") as third:
        assert third.wait(300) == 0, third.tail()
    assert "run_failed" not in third.names()
    assert third.processed() == len(more), "the run did not resume where the first one ended"
    _check_output(bootstrap, topics, sales + more, "at_least_once", state_dir, app_id)


def _files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` by relative path, with its content."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_sigterm_to_the_whole_process_group_stops_cleanly(kafka, tmp_path):
    """``kill -TERM -PGID`` (systemd's control-group stop) reaches the driver only: the Spark
    JVM runs in a session of its own (before 4f494bb it died at once and the run exited 1 with
    a py4j traceback), so the epoch in flight still ends and is reported."""
    bootstrap = kafka.bootstrap_servers
    sales = make_sales(900, 20, seed=12)
    topics = _sales_setup(bootstrap, sales)
    args = cli_args(
        SALES,
        bootstrap,
        f"sigterm-group-{uid()}",
        tmp_path / "state",
        available_now=False,
        topology_args=topics,
        config={"commit.interval.ms": "300"},  # a first commit well inside the 60 s epoch
        extra=["--log-level", "debug"],
    )
    with CliRun(args, tmp_path / "run.log") as run:
        run.wait_event(_committed_mid_epoch, 300)
        os.killpg(run.pid, signal.SIGTERM)  # as systemd / `kill -TERM -PGID` do
        code = run.wait(120)
    names = run.names()
    assert code == 0 and "query_stopped" in names, run.tail()
    assert "run_failed" not in names, run.tail()
    assert "batch_done" in names[names.index("stop_requested") :], "the epoch was not ended"


class _BlackHole:
    """A TCP port that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.sock.close()
        for connection in self.accepted:
            connection.close()


@pytest.mark.parametrize("broker", ["refused", "black_hole"])
def test_broker_unreachable_at_start_exits_2_quickly_naming_it(broker, tmp_path):
    hole = _BlackHole() if broker == "black_hole" else None
    address = hole.address if hole else f"127.0.0.1:{free_port()}"
    try:
        args = cli_args(
            SALES,
            address,
            f"nobroker-{uid()}",
            tmp_path / "state",
            topology_args={"input_topic": "in", "output_topic": "out"},
        )
        started = time.monotonic()
        with CliRun(args, tmp_path / "run.log") as run:
            code = run.wait(60)
        elapsed = time.monotonic() - started
    finally:
        if hole:
            hole.close()
    assert code == 2, run.tail()
    line = run.error_line() or ""
    assert line.startswith("run-topology: error: ") and address in line, run.tail()
    assert elapsed < 30, f"took {elapsed:.1f}s"


def test_broker_gone_in_the_middle_of_an_epoch_fails_within_bounded_time(tmp_path):
    """Exactly-once, the paced sales aggregation (5 ms per record): the broker stopped right
    after a task's first commit of processed records, with work left in the epoch, and never
    comes back: once ``task.timeout.ms`` (20 s here) has passed, the run ends with exit 1 and
    one clear ``run-topology: failed:`` line naming the broker and what the task waited for,
    not a hang."""
    with EmbeddedKafka() as broker:
        bootstrap = broker.bootstrap_servers
        sales = make_sales(900, 20, seed=13)
        topics = _sales_setup(bootstrap, sales)
        args = cli_args(
            PACED_SALES,
            bootstrap,
            f"gone-{uid()}",
            tmp_path / "state",
            guarantee="exactly_once_v2",
            available_now=False,
            topology_args={**topics, "pause_ms": 5.0},
            config={"task.timeout.ms": "20000"},
            extra=["--log-level", "debug"],
        )
        with CliRun(args, tmp_path / "run.log") as run:
            run.wait_event(_committed_mid_epoch, 300)
            broker.stop()
            stopped = time.monotonic()
            code = run.wait(240)
            elapsed = time.monotonic() - stopped
    assert code == 1, run.tail()
    line = run.error_line()
    assert line and line.startswith("run-topology: failed: "), run.tail()
    assert elapsed < 150, f"took {elapsed:.1f}s after the broker stopped"
    # clear: the Python error from the worker or driver, not Spark's wrapper text
    assert "Traceback" not in line, line
    assert any(part in line for part in (bootstrap, "Kafka", "DeliveryError", "broker")), line
    print(f"broker gone mid-epoch: exit {code} after {elapsed:.1f}s: {line[:300]}")


def test_a_second_run_with_the_same_application_id_and_state_dir_is_refused(kafka, tmp_path):
    bootstrap = kafka.bootstrap_servers
    first_sales = make_sales(600, 20, seed=14)
    topics = _sales_setup(bootstrap, first_sales)
    app_id = f"twice-{uid()}"
    state_dir = tmp_path / "state"
    args = cli_args(
        SALES,
        bootstrap,
        app_id,
        state_dir,
        available_now=False,
        topology_args=topics,
        extra=["--epoch-interval", "5"],  # batch_done every ~7 s, not every minute
    )
    with CliRun(args, tmp_path / "first.log") as first:
        first.wait_event(lambda e: e.name == "batch_done" and e.event["records"] > 0, 300)
        checkpoints = sorted(Path(state_dir, app_id).glob("*/.checkpoint"))
        assert len(checkpoints) == 3
        for extra in ([], ["--cleanup"]):
            started = time.monotonic()
            with CliRun(args + extra, tmp_path / "second.log") as second:
                code = second.wait(120)
            elapsed = time.monotonic() - started
            assert code == 2, second.tail()
            line = second.error_line() or ""
            for part in ("already running", repr(app_id), f"pid {first.pid}"):
                assert part in line, f"{part!r} missing from: {line}"
            assert elapsed < 60, f"refused only after {elapsed:.1f}s"
            assert second.find("query_started") == []
            assert sorted(Path(state_dir, app_id).glob("*/.checkpoint")) == checkpoints
        # the first run is unharmed: it goes on with new input, then stops normally
        mark = len(first.events)
        more = make_sales(300, 20, seed=15, start_ts=1_800_000_000_000)
        produce_sales(bootstrap, topics["input_topic"], more)
        first.wait_event(
            lambda e: e.name == "batch_done" and e.event["records"] > 0, 120, after=mark
        )
        first.wait_processed(len(first_sales) + len(more), 120)
        first.signal(signal.SIGTERM)
        assert first.wait(120) == 0, first.tail()
    assert "run_failed" not in first.names()
    _check_output(bootstrap, topics, first_sales + more, "at_least_once", state_dir, app_id)
