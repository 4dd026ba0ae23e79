"""Exactly-once with one transactional producer per worker (issue: many tasks per worker,
item 1; KIP-447 as Kafka Streams' stream thread), on the embedded broker without Spark.

A worker host (in the test's process) runs tasks ``0_0`` and ``0_1`` of a counting topology:

* both tasks' commits go through one producer, ``<application.id>-w0``, in one transaction per
  commit: fewer transactions than task commits, one writer in both tasks' markers, and the
  output of both tasks committed exactly once;
* a task that leaves the worker with uncommitted work aborts the worker's transaction: the
  other task drops its own uncommitted work with it, is rebuilt from its last commit within
  the epoch and does that work again, and its output is still exactly once;
* a worker that loses tasks between runs is fenced by the driver with its transactional id:
  its open transaction is aborted and it cannot commit.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.kafka.markers import latest_markers
from processor_api.kafka.names import commit_marker_topic, worker_transactional_id
from processor_api.kafka.producer import make_producer
from processor_api.kafka.transactions import fence_transactional_ids
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import EpochEnd, TaskEpoch, WorkerEpochRequest
from processor_api.runtime.worker_host import WorkerHost
from processor_api.runtime.worker_transaction import SharedExactlyOnce
from processor_api.spark.assignment import moved_from
from tests.harness.topics import committed_records, produce, uid

pytestmark = pytest.mark.integration

WAIT_S = 60.0
TASKS = ("0_0", "0_1")


class CountPerKey(Processor):
    """Forwards ``key -> how many times the key came`` (a store of counts)."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.counts = context.get_state_store("counts")

    def process(self, record: Record) -> None:
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        self.context.forward(record.with_value(count))


def build(input_topic: str, output_topic: str) -> Topology:
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("count", CountPerKey, "in")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            ),
            "count",
        )
        .add_sink("out", output_topic, "count", key_serde=Serdes.string(),
                  value_serde=Serdes.long())
    )  # fmt: skip


class WorkerRun:
    """Worker ``w0`` of a two-task run, its host in the test's process."""

    def __init__(self, kafka: Any, state_dir: Path, commit_interval_ms: int = 100) -> None:
        self.app, self.source, self.sink = uid("wtxn"), uid("wtxn-in"), uid("wtxn-out")
        kafka.create_topic(self.source, 2)
        kafka.create_topic(self.sink, 1)
        kafka.create_topic(commit_marker_topic(self.app), 2)
        self.bootstrap = kafka.bootstrap_servers
        self.spec = JobSpec(
            run_id=uuid.uuid4().hex,
            topology_ref=f"{__name__}:build",
            topology_kwargs={"input_topic": self.source, "output_topic": self.sink},
            topology_pickle=None,
            bootstrap_servers=self.bootstrap,
            state_dir=str(state_dir),
            config={
                "application_id": self.app,
                "processing_guarantee": "exactly_once_v2",
                "commit_interval_ms": commit_interval_ms,
            },
            task_ids=TASKS,
            flush_timeout_s=10,
            reset_policies={self.source: "earliest"},
            assignment={"w0": TASKS},
        )
        self.host = WorkerHost(f"wtxn-{uuid.uuid4().hex}")
        self.sent = [0, 0]

    def produce(self, partition: int, keys: list[str]) -> None:
        produce(self.bootstrap, self.source, [(k.encode(), b"v", partition) for k in keys])
        self.sent[partition] += len(keys)

    def request(self, epoch: int, ends: list[int]) -> WorkerEpochRequest:
        bounds = {(self.source, p): n for p, n in enumerate(ends)}
        return WorkerEpochRequest(
            self.spec, "w0", tuple(TaskEpoch(t, None) for t in TASKS), epoch,
            EpochEnd(end_offsets=bounds),
        )  # fmt: skip

    def output(self) -> list[tuple[str, int]]:
        """The committed output records, ``(key, count)``, in their order."""
        kept, _ = committed_records(self.bootstrap, self.sink)
        return [(r.key.decode(), int.from_bytes(r.value, "big", signed=True)) for r in kept]

    def marker_count(self, partition: int) -> int:
        kept, _ = committed_records(self.bootstrap, commit_marker_topic(self.app))
        return sum(1 for r in kept if r.partition == partition)


def test_the_tasks_of_a_worker_commit_in_one_transaction_of_one_producer(kafka, tmp_path):
    # no timed commit (an hour apart): the epoch's end commits both tasks' work at once
    run = WorkerRun(kafka, tmp_path / "state", commit_interval_ms=3_600_000)
    try:
        run.produce(0, ["a", "b", "a"])
        run.produce(1, ["c"])
        epoch = EpochThread(run, run.request(1, [10, 10]))  # no task reaches its end
        epoch.wait_for(
            lambda: all(
                (r := run.host.runners.get(t)) is not None and r.metrics.processed >= n
                for t, n in (("0_0", 3), ("0_1", 1))
            )
        )
        run.host.ended_run = run.spec.run_id  # the run stops: the epoch ends with a commit
        reply = epoch.reply()
        assert set(reply.replies) == set(TASKS)
        transaction = run.host._transaction
        assert transaction is not None
        assert transaction.txn_id == worker_transactional_id(run.app, "w0")
        guarantees = [run.host.runners[t]._guarantee for t in TASKS]
        assert all(
            isinstance(g, SharedExactlyOnce) and g.transaction is transaction for g in guarantees
        )
        # one transaction for both tasks' commits (with a producer per task: one each)
        assert (transaction.commits, run.marker_count(0), run.marker_count(1)) == (1, 1, 1)
        markers = latest_markers(run.bootstrap, commit_marker_topic(run.app), 2)
        writers = {m.task_id: m.writer_runs[-1][1] for m in markers}
        assert writers == dict.fromkeys(TASKS, transaction.writer), writers
        assert sorted(run.output()) == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
    finally:
        run.host.close()


class EpochThread:
    """``host._run_epoch(request)`` in a thread, as a Spark task holds a worker's epoch."""

    def __init__(self, run: WorkerRun, request: WorkerEpochRequest) -> None:
        self._outcome: list[Any] = []
        self._thread = threading.Thread(
            target=lambda: self._outcome.append(run.host._run_epoch(request, lambda: True)),
            daemon=True,
        )
        self._thread.start()

    def wait_for(self, condition: Any) -> Any:
        deadline = time.monotonic() + WAIT_S
        while not (value := condition()):
            assert time.monotonic() < deadline, "the condition never held"
            assert self._thread.is_alive(), f"the epoch ended: {self._outcome}"
            time.sleep(0.02)
        return value

    def reply(self) -> Any:
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the epoch never ended"
        (reply,) = self._outcome
        assert reply is not None, "the epoch was abandoned"
        return reply


def test_a_task_leaving_with_open_work_aborts_it_for_every_task_of_the_worker(kafka, tmp_path):
    # commits a minute apart: no commit comes between the records and the release
    run = WorkerRun(kafka, tmp_path / "state", commit_interval_ms=60_000)
    try:
        run.produce(0, ["a", "b"])
        run.produce(1, ["c"])
        epoch = EpochThread(run, run.request(1, [4, 2]))  # both tasks wait for more records
        epoch.wait_for(
            lambda: all(
                (r := run.host.runners.get(t)) is not None and r.metrics.processed >= n
                for t, n in (("0_0", 2), ("0_1", 1))
            )
        )
        rebuilds = run.host.runners["0_0"].metrics.rebuilds
        run.host.release_requested("0_1")  # another worker takes 0_1, which has open work
        epoch.wait_for(lambda: "0_1" not in run.host.runners)
        run.produce(0, ["a", "d"])
        reply = epoch.reply()
        assert set(reply.replies) == {"0_0"}, reply
        transaction = run.host._transaction
        assert transaction is not None and transaction.aborts >= 1
        assert run.host.runners["0_0"].metrics.rebuilds == rebuilds + 1, "0_0 kept aborted work"
        # 0_0's first two records were in the aborted transaction and were processed again;
        # 0_1's record was aborted and left for its next owner
        assert sorted(run.output()) == [("a", 1), ("a", 2), ("b", 1), ("d", 1)]
        assert run.marker_count(1) == 0
    finally:
        run.host.close()


def test_the_driver_fences_a_worker_that_lost_tasks_between_runs(kafka):
    assert moved_from({"0_0": "w0", "0_1": "w1", "0_2": "w1"}, {"w0": ("0_0", "0_1")}) == ["w1"]
    assert moved_from({"0_0": "w0"}, {"w0": ("0_0",), "w1": ()}) == []
    topic, app = uid("fence-out"), uid("fence")
    kafka.create_topic(topic, 1)
    txn_id = worker_transactional_id(app, "w1")
    stalled = make_producer(kafka.bootstrap_servers, transactional_id=txn_id)
    stalled.init_transactions(30)
    stalled.begin_transaction()
    stalled.produce(topic, key=b"late", value=b"v")
    stalled.flush(10)
    fence_transactional_ids(kafka.bootstrap_servers, [txn_id])
    with pytest.raises(KafkaException, match="(?i)fenc|timed out|_TIMED_OUT"):
        stalled.produce(topic, key=b"later", value=b"v")
        stalled.flush(10)
        stalled.commit_transaction(5)
    kept, aborted = committed_records(kafka.bootstrap_servers, topic)
    assert kept == [], "a fenced worker's records were committed"
    assert [r.key for r in aborted] == [b"late"]


def test_a_worker_back_on_a_host_renews_its_producer_and_commits(kafka, tmp_path):
    # two hosts of worker w0, as on two executors (each its own state directory): Spark runs
    # the worker's epochs on A, B, A, B, each handed the state the other committed; A's
    # producer was fenced by B's, so A must renew it (fencing B) before it commits again
    run = WorkerRun(kafka, tmp_path / "executor-a")
    host_b = WorkerHost(f"wtxn-b-{uuid.uuid4().hex}")
    spec_b = JobSpec(**{**run.spec.__dict__, "state_dir": str(tmp_path / "executor-b")})
    try:
        states: dict[str, str | None] = dict.fromkeys(TASKS)
        for epoch, host in enumerate([run.host, host_b, run.host, host_b], start=1):
            run.produce(0, [f"a{epoch}"])
            run.produce(1, [f"b{epoch}"])
            spec = run.spec if host is run.host else spec_b
            bounds = {(run.source, p): n for p, n in enumerate(run.sent)}
            request = WorkerEpochRequest(
                spec, "w0", tuple(TaskEpoch(t, states[t]) for t in TASKS), epoch,
                EpochEnd(end_offsets=bounds),
            )  # fmt: skip
            reply = host._run_epoch(request, lambda: True)
            assert reply is not None, f"epoch {epoch} was abandoned"
            for task in TASKS:
                assert reply.replies[task].processed == 1, (epoch, reply.replies[task])
                states[task] = reply.replies[task].metadata_json
        expected = [(f"{k}{e}", 1) for k in "ab" for e in range(1, 5)]
        assert sorted(run.output()) == sorted(expected)
    finally:
        run.host.close()
        host_b.close()


def test_at_least_once_the_tasks_of_a_worker_share_one_producer(kafka, tmp_path):
    run = WorkerRun(kafka, tmp_path / "state")
    run.spec = JobSpec(
        **{
            **run.spec.__dict__,
            "config": {**run.spec.config, "processing_guarantee": "at_least_once"},
        }
    )
    try:
        run.produce(0, ["a", "b", "a"])
        run.produce(1, ["c"])
        reply = run.host._run_epoch(run.request(1, run.sent), lambda: True)
        assert reply is not None and set(reply.replies) == set(TASKS)
        clients = run.host._clients
        assert clients is not None and run.host._transaction is None
        trackers = [run.host.runners[t]._guarantee.producer for t in TASKS]
        assert trackers[0] is not trackers[1], "each task counts its own records"
        assert all(t.producer is clients.producer for t in trackers)
        assert sorted(run.output()) == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
    finally:
        run.host.close()
