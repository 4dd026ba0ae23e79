"""Broker outages under the epoch loop, without Spark: one task of ``in -> tick -> out`` whose
every client reaches a real broker through a fault-injection proxy (tests/harness/proxy.py).

The ticker punctuates every 200 ms, so the task has something to commit during every outage:
the commit waits for the broker (task.timeout.ms), the loop resumes by itself afterwards,
nothing is lost and, under exactly_once_v2, nothing doubled. An outage past task.timeout.ms
fails the epoch with one line naming the task, the broker, the client and what it waited for;
a run that stops during an outage ends the epoch at once without its uncommitted work.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from structlog.testing import capture_logs

from processor_api.errors import TaskTimeoutError
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime import patience
from processor_api.runtime.epoch_runner import EpochControl, EpochTaskRunner
from processor_api.runtime.protocol import EpochEnd, EpochRequest
from tests.harness.proxy import broker_behind_proxy
from tests.harness.task_runs import one_task
from tests.harness.topics import TopicReader, committed_records, produce, uid
from tests.runtime.test_epoch_runner import _values, build

pytestmark = pytest.mark.integration

GUARANTEES = ["at_least_once", "exactly_once_v2"]


@pytest.fixture(scope="module")
def faulty():
    """A broker of its own behind a proxy (an outage must not disturb other tests)."""
    with broker_behind_proxy() as (broker, proxy):
        yield broker, proxy


class OutageHarness:
    """Task ``0_0`` of ``in -> tick -> out``, its clients bootstrapped at the proxy."""

    def __init__(self, faulty, tmp_path, guarantee: str, task_timeout_ms: int = 60_000) -> None:
        broker, self.proxy = faulty
        run_id = uid()
        self.bootstrap = self.proxy.address
        self.direct = broker.bootstrap_servers  # the test's own reads, after the outage
        self.app = f"outage-{run_id}"
        self.input, self.output = f"in-{run_id}", f"out-{run_id}"
        for topic in (self.input, self.output, commit_marker_topic(self.app)):
            broker.create_topic(topic, 1)
        self.spec, self.runner = one_task(
            EpochTaskRunner,
            build(self.input, self.output),
            run_id=run_id,
            bootstrap=self.bootstrap,
            state_dir=tmp_path,
            config={
                "application_id": self.app,
                "processing_guarantee": guarantee,
                "commit_interval_ms": 100 if guarantee == "exactly_once_v2" else 1000,
                "task_timeout_ms": task_timeout_ms,
            },
            input_topic=self.input,
        )
        self.end = threading.Event()

    def in_background(self, state: str | None, end: EpochEnd):
        outcome: dict = {}
        control = EpochControl(connected=lambda: True, end_requested=self.end.is_set)

        def run() -> None:
            try:
                outcome["reply"] = self.runner.run_epoch(
                    EpochRequest(self.spec, "0_0", state, 1, end), control
                )
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread, outcome

    def produce(self, values: list[str]) -> None:
        produce(self.direct, self.input, [(b"k", v.encode()) for v in values])

    def outputs(self) -> tuple[list[str], list[str]]:
        kept, aborted = committed_records(self.direct, self.output)
        return _values(kept), _values(aborted)


@pytest.fixture
def harnesses(faulty):
    made: list[OutageHarness] = []
    yield lambda *args, **kw: made.append(OutageHarness(faulty, *args, **kw)) or made[-1]
    faulty[1].accept_again()
    for harness in made:
        harness.runner.close()


def _wait_outputs(run: OutageHarness, values: list[str]) -> None:
    with TopicReader(run.direct, run.output, bytes.decode, bytes.decode) as out:
        out.wait_for(lambda r: set(values) <= set(_values(r)), timeout_s=60)


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_an_outage_during_commits_is_ridden_out(faulty, tmp_path, harnesses, guarantee):
    run = harnesses(tmp_path, guarantee)
    before = [f"b{i}" for i in range(20)]
    after = [f"a{i}" for i in range(20)]
    run.produce(before)
    thread, outcome = run.in_background(None, EpochEnd(duration_s=300))
    _wait_outputs(run, before)
    run.proxy.outage(5)  # the ticker's outputs keep the task committing into the outage
    run.proxy.wait_outage_over(30)
    run.produce(after)
    _wait_outputs(run, after)  # resumed by itself
    run.end.set()
    thread.join(60)
    assert not thread.is_alive() and "error" not in outcome, outcome
    kept, _ = run.outputs()
    counts = Counter(kept)
    assert set(before + after) <= set(counts), sorted(set(before + after) - set(counts))
    if guarantee == "exactly_once_v2":
        assert all(counts[v] == 1 for v in before + after), counts


def test_an_outage_past_task_timeout_fails_with_one_line_naming_what_waited(
    faulty, tmp_path, harnesses, monkeypatch
):
    monkeypatch.setattr(patience, "STALL_WARNING_S", 1.0)
    run = harnesses(tmp_path, "exactly_once_v2", task_timeout_ms=3000)
    run.produce(["x"])
    thread, outcome = run.in_background(None, EpochEnd(duration_s=300))
    _wait_outputs(run, ["x"])
    with capture_logs() as logs:
        run.proxy.refuse()
        thread.join(60)
    assert not thread.is_alive()
    error = outcome.get("error")
    assert isinstance(error, TaskTimeoutError), outcome
    text = str(error)
    assert "\n" not in text
    for part in ("task 0_0", run.bootstrap, "task.timeout.ms=3000", "client"):
        assert part in text, text
    warned = [e for e in logs if e["event"] == "task_waiting_for_broker"]
    assert warned and warned[0]["broker"] == run.bootstrap, logs
    assert warned[0]["waiting_for"], warned


def test_a_stop_during_an_outage_ends_the_epoch_without_its_uncommitted_work(
    faulty, tmp_path, harnesses
):
    run = harnesses(tmp_path, "exactly_once_v2")
    first = [f"f{i}" for i in range(10)]
    run.produce(first)
    thread, outcome = run.in_background(None, EpochEnd(duration_s=300))
    _wait_outputs(run, first)
    run.proxy.refuse()
    run.end.set()
    thread.join(30)
    assert not thread.is_alive(), "the epoch waited the outage out instead of ending"
    reply = outcome["reply"]
    run.proxy.accept_again()
    # the next run goes on from the last commit: everything once, nothing twice
    second = [f"s{i}" for i in range(10)]
    run.produce(second)
    run.end.clear()
    thread, outcome = run.in_background(
        reply.metadata_json, EpochEnd(end_offsets={(run.input, 0): 20})
    )
    thread.join(60)
    assert "reply" in outcome, outcome
    kept, _ = run.outputs()
    counts = Counter(kept)
    assert all(counts[v] == 1 for v in first + second), counts


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_slow_broker_gives_the_same_result(faulty, tmp_path, harnesses, guarantee):
    run = harnesses(tmp_path, guarantee)
    values = [f"v{i}" for i in range(30)]
    run.produce(values)
    run.proxy.latency_s = 0.2
    try:
        thread, outcome = run.in_background(None, EpochEnd(end_offsets={(run.input, 0): 30}))
        thread.join(120)
    finally:
        run.proxy.latency_s = 0.0
    assert "reply" in outcome, outcome
    assert outcome["reply"].processed == 30
    kept, _ = run.outputs()
    counts = Counter(kept)
    assert set(values) <= set(counts)
    if guarantee == "exactly_once_v2":
        assert all(counts[v] == 1 for v in values), counts
