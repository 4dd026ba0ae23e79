"""The epoch runner's poll loop on the embedded broker, without Spark: outputs as they are
made, a commit every ``commit.interval.ms``, end offsets, wall-clock punctuation without
input, and a Spark task that disconnects mid-epoch (nothing uncommitted kept)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from processor_api import Processor, ProcessorContext, PunctuationType, Record, Serdes, Topology
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.epoch_runner import EpochAbandoned, EpochControl, EpochTaskRunner
from processor_api.runtime.protocol import EpochEnd, EpochRequest
from tests.harness.task_runs import one_task
from tests.harness.topics import TopicReader, committed_records, produce, uid

pytestmark = pytest.mark.integration

HERE = __name__
STRINGS = {"key_serde": Serdes.string(), "value_serde": Serdes.string()}


class Ticker(Processor):
    """Forwards records; on every WALL_CLOCK_TIME punctuation forwards ``tick``."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        context.schedule(200, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record("tick", str(timestamp), timestamp))

    def process(self, record: Record) -> None:
        self.context.forward(record)


class SlowTicker(Ticker):
    """A ticker whose processing takes 3 ms per record (real work, as a slow processor)."""

    def process(self, record: Record) -> None:
        time.sleep(0.003)
        super().process(record)


def build(input_topic: str, output_topic: str, processor: type = Ticker) -> Topology:
    return (
        Topology()
        .add_source("in", input_topic, **STRINGS)
        .add_processor("tick", processor, "in")
        .add_sink("out", output_topic, "tick", **STRINGS)
    )


class Harness:
    """One task ``0_0`` of ``in -> tick -> out`` in an :class:`EpochTaskRunner`."""

    def __init__(
        self, kafka, tmp_path, guarantee: str, commit_interval_ms: int, processor: type = Ticker
    ) -> None:
        run_id = uid()
        self.bootstrap = kafka.bootstrap_servers
        self.app = f"epoch-{run_id}"
        self.input, self.output = f"in-{run_id}", f"out-{run_id}"
        for topic in (self.input, self.output, commit_marker_topic(self.app)):
            kafka.create_topic(topic, 1)
        self.spec, self.runner = one_task(
            EpochTaskRunner,
            build(self.input, self.output, processor),
            run_id=run_id,
            bootstrap=self.bootstrap,
            state_dir=tmp_path,
            config={
                "application_id": self.app,
                "processing_guarantee": guarantee,
                "commit_interval_ms": commit_interval_ms,
            },
            input_topic=self.input,
        )
        self.connected = True
        self.end = threading.Event()

    def epoch(self, state: str | None, end: EpochEnd, epoch: int = 1):
        control = EpochControl(connected=lambda: self.connected, end_requested=self.end.is_set)
        request = EpochRequest(self.spec, "0_0", state, epoch, end)
        return self.runner.run_epoch(request, control)

    def in_background(self, state: str | None, end: EpochEnd):
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["reply"] = self.epoch(state, end)
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread, outcome


@pytest.fixture
def harnesses():
    made: list[Harness] = []
    yield lambda *args: made.append(Harness(*args)) or made[-1]
    for harness in made:
        harness.runner.close()


def _text(data: bytes | str | None) -> str | None:
    return data.decode() if isinstance(data, bytes) else data


def _values(records) -> list[str]:
    return [_text(r.value) for r in records if _text(r.key) != "tick"]


def test_outputs_go_out_as_they_are_made_and_the_epoch_commits_at_its_end(
    kafka, tmp_path, harnesses
):
    run = harnesses(kafka, tmp_path, "at_least_once", 60_000)
    thread, outcome = run.in_background(None, EpochEnd(duration_s=120))
    with TopicReader(run.bootstrap, run.output, bytes.decode, bytes.decode) as out:
        for wave in range(3):
            produce(run.bootstrap, run.input, [(b"k", f"w{wave}".encode())])
            out.wait_for(lambda r, n=wave + 1: len(_values(r)) >= n, timeout_s=30)
        # nothing committed yet: the commit interval (60 s) and the epoch (120 s) run on
        assert committed_offsets(run.bootstrap, run.app, [(run.input, 0)]) == {}
        run.end.set()
        thread.join(30)
    reply = outcome["reply"]
    assert (reply.processed, reply.commits, reply.inits, reply.rebuilt) == (3, 1, 1, True)
    assert committed_offsets(run.bootstrap, run.app, [(run.input, 0)]) == {(run.input, 0): 3}


def test_exactly_once_commits_every_commit_interval_within_one_epoch(kafka, tmp_path, harnesses):
    run = harnesses(kafka, tmp_path, "exactly_once_v2", 100)
    thread, outcome = run.in_background(None, EpochEnd(duration_s=120))
    with TopicReader(
        run.bootstrap, run.output, bytes.decode, bytes.decode, isolation="read_committed"
    ) as out:
        for wave in range(3):
            produce(run.bootstrap, run.input, [(b"k", f"w{wave}".encode())])
            out.wait_for(lambda r, n=wave + 1: len(_values(r)) >= n, timeout_s=30)
        run.end.set()
        thread.join(30)
    reply = outcome["reply"]
    assert reply.commits >= 3
    kept, _ = committed_records(run.bootstrap, commit_marker_topic(run.app))
    assert len(kept) == reply.commits


def test_an_epoch_with_end_offsets_ends_when_they_are_processed(kafka, tmp_path, harnesses):
    run = harnesses(kafka, tmp_path, "at_least_once", 60_000)
    produce(run.bootstrap, run.input, [(b"k", f"v{i}".encode()) for i in range(50)])
    reply = run.epoch(None, EpochEnd(end_offsets={(run.input, 0): 30}))
    assert reply.processed == 30
    produce(run.bootstrap, run.input, [(b"k", b"late")])
    reply = run.epoch(reply.metadata_json, EpochEnd(end_offsets={(run.input, 0): 51}))
    assert (reply.processed, reply.rebuilt) == (21, False)
    assert committed_offsets(run.bootstrap, run.app, [(run.input, 0)]) == {(run.input, 0): 51}


def test_wall_clock_punctuation_fires_without_input(kafka, tmp_path, harnesses):
    run = harnesses(kafka, tmp_path, "at_least_once", 60_000)
    thread, outcome = run.in_background(None, EpochEnd(duration_s=120))
    with TopicReader(run.bootstrap, run.output, bytes.decode, bytes.decode) as out:
        ticks = out.wait_for(lambda r: sum(x.key == "tick" for x in r) >= 3, timeout_s=30)
        run.end.set()
        thread.join(30)
    times = [int(r.value) for r in ticks if r.key == "tick"][:3]
    assert times == sorted(set(times)), times  # one firing per due time, in order
    assert outcome["reply"].processed == 0


def test_a_disconnected_spark_task_stops_the_loop_and_aborts_the_transaction(
    kafka, tmp_path, harnesses
):
    run = harnesses(kafka, tmp_path, "exactly_once_v2", 60_000)
    produce(run.bootstrap, run.input, [(b"k", f"a{i}".encode()) for i in range(5)])
    thread, outcome = run.in_background(None, EpochEnd(duration_s=120))
    with TopicReader(run.bootstrap, run.output, bytes.decode, bytes.decode) as out:
        out.wait_for(lambda r: len(_values(r)) >= 5, timeout_s=30)  # sent, not committed
    run.connected = False
    thread.join(30)
    assert not thread.is_alive(), "the loop went on without its Spark task"
    assert isinstance(outcome.get("error"), EpochAbandoned)
    assert committed_offsets(run.bootstrap, run.app, [(run.input, 0)]) == {}
    # a new attempt (Spark re-runs the epoch) does it once more and commits
    run.connected = True
    reply = run.epoch(None, EpochEnd(end_offsets={(run.input, 0): 5}))
    assert (reply.processed, reply.rebuilt) == (5, True)
    kept, aborted = committed_records(run.bootstrap, run.output)
    assert Counter(_values(kept)) == Counter(f"a{i}" for i in range(5))
    assert Counter(_values(aborted)) == Counter(f"a{i}" for i in range(5))


def test_a_slow_processor_holds_back_neither_commits_nor_wall_clock_punctuation(
    kafka, tmp_path, harnesses
):
    """1,000 records at 3 ms each take 3 s, arriving in a few large polls: the loop still
    commits about every commit.interval.ms (300) and fires the 200 ms wall-clock punctuation
    while it works through them, as Kafka Streams does (before: once per poll)."""
    run = harnesses(kafka, tmp_path, "at_least_once", 300, SlowTicker)
    produce(run.bootstrap, run.input, [(b"k", f"v{i}".encode()) for i in range(1000)])
    reply = run.epoch(None, EpochEnd(end_offsets={(run.input, 0): 1000}))
    assert reply.processed == 1000
    assert reply.commits >= 4, reply
    with TopicReader(run.bootstrap, run.output, bytes.decode, bytes.decode) as out:
        records = out.wait_for(lambda r: len(_values(r)) >= 1000, timeout_s=30)
    values = [r.key for r in records]
    first, last = values.index("k"), len(values) - 1 - values[::-1].index("k")
    ticks_while_busy = sum(1 for key in values[first:last] if key == "tick")
    assert ticks_while_busy >= 5, ticks_while_busy
