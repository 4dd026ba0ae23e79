"""A lost worker's tasks move into a running worker's epoch (``spark/failover.py``), under
exactly_once_v2 on the embedded broker: two real worker host processes, as on two executors
(each its own state directory), and no Spark.

Worker w1 runs task ``0_1`` and holds a record uncommitted when it is frozen with SIGSTOP (an
executor that Spark sees as lost while its processes live on: the worst case). The driver's
failover finds w0's host running and w1's silent, writes the layout that gives ``0_1`` to w0,
fences w1's transactional id and hands ``0_1`` to w0's running epoch, which rebuilds it from
w1's last commit and goes on. Thawed, w1 cannot commit; the committed output has every record
once. A host that begins an epoch after such a move closes the task the layout took from it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from processor_api.kafka.names import commit_marker_topic, worker_transactional_id
from processor_api.kafka.transactions import fence_transactional_ids
from processor_api.runtime.host_client import _connect, receive_message, request, send_message
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import (
    CloseRequest,
    EndEpochRequest,
    EpochAlive,
    EpochEnd,
    ErrorReply,
    TaskEpoch,
    WorkerEpochReply,
    WorkerEpochRequest,
    WorkerStatusReply,
    WorkerStatusRequest,
)
from processor_api.runtime.worker_layout import LayoutLocation, WorkerLayout
from processor_api.spark.assignment import ASSIGNMENT_FILE
from processor_api.spark.checkpoint_files import open_checkpoint
from processor_api.spark.failover import Failover, LossOutcome
from tests.harness.topics import TopicReader, committed_records, produce, uid
from tests.runtime.test_worker_fencing import HOLD_ENV, WAIT_S, _start_host, _wait_for

pytestmark = pytest.mark.integration

START = {"w0": ("0_0",), "w1": ("0_1",)}
EPOCH = EpochEnd(duration_s=300.0)  # longer than the test: epochs end when asked


def _topics(kafka, prefix: str) -> tuple[str, str, str, str]:
    """(run id, application, source with 2 partitions, sink), created with the markers."""
    run_id = uid()
    app, source, sink = f"{prefix}-{run_id}", f"{prefix}-in-{run_id}", f"{prefix}-out-{run_id}"
    kafka.create_topic(source, 2)
    kafka.create_topic(sink, 1)
    kafka.create_topic(commit_marker_topic(app), 2)
    return run_id, app, source, sink


def _close(hosts: dict[str, Any]) -> None:
    """Close the hosts (by name: process) and wait for them to exit."""
    for name in hosts:
        request(name, CloseRequest(), timeout_s=WAIT_S)
    for host in hosts.values():
        try:
            host.wait(WAIT_S)
        except Exception:  # noqa: BLE001 - a host that does not exit is killed
            host.kill()


def _specs(kafka, tmp_path: Path, run_id: str, app: str, source: str, sink: str):
    def spec(state_dir: Path) -> JobSpec:
        return JobSpec(
            run_id=run_id,
            topology_ref="tests.runtime.test_worker_fencing:build_holding",
            topology_kwargs={"input_topic": source, "output_topic": sink},
            topology_pickle=None,
            bootstrap_servers=kafka.bootstrap_servers,
            state_dir=str(state_dir),
            config={
                "application_id": app,
                "processing_guarantee": "exactly_once_v2",
                "commit_interval_ms": 100,
            },
            task_ids=("0_0", "0_1"),
            assignment=dict(START),
            reset_policies={source: "earliest"},
            layout=LayoutLocation(str(tmp_path / "checkpoint")),
        )

    return spec(tmp_path / "executor-a"), spec(tmp_path / "executor-b")


class _Call:
    """A worker's epoch call held in a thread, as a Spark task holds it: its reply, past the
    host's signs of life."""

    def __init__(self, name: str, message: WorkerEpochRequest) -> None:
        self.outcome: list[Any] = []
        self._thread = threading.Thread(target=self._call, args=(name, message), daemon=True)
        self._thread.start()

    def _call(self, name: str, message: WorkerEpochRequest) -> None:
        sock = _connect(name, WAIT_S * 2)
        assert sock is not None, f"no host {name}"
        with sock:
            send_message(sock, message)
            reply = receive_message(sock)
            while isinstance(reply, EpochAlive):
                reply = receive_message(sock)
        self.outcome.append(reply)

    def result(self) -> Any:
        self._thread.join(WAIT_S * 2)
        assert not self._thread.is_alive(), "the epoch call never ended"
        (reply,) = self.outcome
        return reply


def _epoch(spec: JobSpec, worker: str, tasks: tuple[str, ...], epoch: int) -> WorkerEpochRequest:
    return WorkerEpochRequest(spec, worker, tuple(TaskEpoch(t, None) for t in tasks), epoch, EPOCH)


def _values(partition: int, count: int, start: int = 0) -> list[tuple[bytes, bytes, int]]:
    return [(b"k", f"p{partition}-v{i}".encode(), partition) for i in range(start, start + count)]


def test_a_lost_workers_task_moves_into_a_running_epoch_and_the_frozen_worker_cannot_commit(
    kafka, tmp_path
):
    run_id, app, source, sink = _topics(kafka, "move")
    spec_a, spec_b = _specs(kafka, tmp_path, run_id, app, source, sink)
    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    name_a, name_b = f"worker-a-{uuid.uuid4().hex}", f"worker-b-{uuid.uuid4().hex}"
    started_at = time.time()
    host_a = _start_host(name_a, tmp_path / "a", {})
    host_b = _start_host(name_b, tmp_path / "b", {HOLD_ENV: str(hold_dir)})
    bootstrap = kafka.bootstrap_servers
    try:
        produce(bootstrap, source, _values(0, 3) + _values(1, 3))
        call_a = _Call(name_a, _epoch(spec_a, "w0", START["w0"], 1))
        call_b = _Call(name_b, _epoch(spec_b, "w1", START["w1"], 1))
        with TopicReader(
            bootstrap, sink, bytes.decode, bytes.decode, isolation="read_committed"
        ) as out:
            out.wait_for(lambda records: len(records) >= 6, timeout_s=WAIT_S)  # both committed
        produce(bootstrap, source, [(b"k", b"hold", 1)] + _values(1, 3, start=3))
        _wait_for(hold_dir / "holding")  # w1 processes the held record: nothing committed
        os.kill(host_b.pid, signal.SIGSTOP)

        status = request(name_a, WorkerStatusRequest(run_id), timeout_s=10.0)
        assert status == WorkerStatusReply(worker="w0", epoch_running=True, owner_alive=True)
        failover = Failover(
            location=spec_a.layout,  # type: ignore[arg-type]
            checkpoint=open_checkpoint(str(tmp_path / "checkpoint")),
            run_id=run_id,
            application_id=app,
            task_ids=["0_0", "0_1"],
            assignment=dict(START),
            stateful=set(),
            state_dirs=lambda: [tmp_path / "executor-a", tmp_path / "executor-b"],
            started_at=started_at,
            slots=lambda: 2,
            fence=lambda workers: fence_transactional_ids(
                bootstrap, [worker_transactional_id(app, w) for w in workers]
            ),
        )
        assert failover.on_lost() is LossOutcome.MOVED
        layout = spec_a.layout.read(run_id)  # type: ignore[union-attr]
        assert layout is not None
        assert layout.newest.workers == {"w0": ("0_0", "0_1"), "w1": ()}
        recorded = json.loads((tmp_path / "checkpoint" / ASSIGNMENT_FILE).read_text())
        assert recorded["workers"] == {"w0": ["0_0", "0_1"], "w1": []}

        produce(bootstrap, source, _values(0, 2, start=3) + _values(1, 2, start=6))
        expected = sorted(
            [f"p0-v{i}" for i in range(5)] + ["hold"] + [f"p1-v{i}" for i in range(8)]
        )
        with TopicReader(
            bootstrap, sink, bytes.decode, bytes.decode, isolation="read_committed"
        ) as out:
            # w0 runs 0_1 from w1's last commit: the held record and what came after
            out.wait_for(
                lambda records: sorted(r.value for r in records) == expected, timeout_s=WAIT_S
            )

        (hold_dir / "release").touch()
        os.kill(host_b.pid, signal.SIGCONT)
        refused = call_b.result()
        assert isinstance(refused, ErrorReply), f"the fenced worker answered {refused!r}"
        assert "fenced" in refused.message.lower(), refused.message

        assert request(name_a, EndEpochRequest(run_id), timeout_s=WAIT_S) is not None
        reply = call_a.result()
        assert isinstance(reply, WorkerEpochReply), reply
        assert sorted(reply.replies) == ["0_0", "0_1"]
        assert reply.replies["0_1"].rebuilt and reply.replies["0_1"].processed == 6

        kept, _ = committed_records(bootstrap, sink)
        assert sorted(r.value.decode() for r in kept) == expected
    finally:
        os.kill(host_b.pid, signal.SIGCONT)
        (hold_dir / "release").touch()
        _close({name_a: host_a, name_b: host_b})


def test_an_epoch_that_begins_after_its_task_moved_leaves_it_alone(kafka, tmp_path):
    run_id, app, source, sink = _topics(kafka, "moved")
    _, spec_b = _specs(kafka, tmp_path, run_id, app, source, sink)
    spec_b.layout.write(  # type: ignore[union-attr]
        WorkerLayout(run_id, ()).with_generation(0, {"w0": ("0_0", "0_1"), "w1": ()})
    )
    produce(kafka.bootstrap_servers, source, _values(1, 3))
    name_b = f"worker-b-{uuid.uuid4().hex}"
    host_b = _start_host(name_b, tmp_path / "b", {})
    try:
        # the call read the layout before the move (it names 0_1), its host began after it
        reply = _Call(name_b, _epoch(spec_b, "w1", ("0_1",), 4)).result()
        assert reply == WorkerEpochReply({}), reply
        kept, _ = committed_records(kafka.bootstrap_servers, sink)
        assert kept == []
    finally:
        _close({name_b: host_b})


def test_between_epochs_a_worker_leaves_alone_the_tasks_the_layout_moves_away(kafka, tmp_path):
    """Executors came back: the driver's spread gives ``0_1`` to w1 from epoch 2. w0 reads it
    at the end of epoch 1 and, between epochs, processes only ``0_0``: in epoch 2 it lets
    ``0_1`` go with nothing uncommitted, so its transaction (and with it ``0_0``'s work since
    epoch 1) is not aborted."""
    run_id, app, source, sink = _topics(kafka, "spread")
    spec, _ = _specs(kafka, tmp_path, run_id, app, source, sink)
    both = {"w0": ("0_0", "0_1"), "w1": ()}
    spec = dataclasses.replace(spec, assignment=both)
    layout = WorkerLayout(run_id, ()).with_generation(0, both)
    spec.layout.write(layout.with_generation(2, dict(START)))  # type: ignore[union-attr]
    name = f"worker-a-{uuid.uuid4().hex}"
    host = _start_host(name, tmp_path / "a", {})
    bootstrap = kafka.bootstrap_servers
    try:
        first = WorkerEpochRequest(
            spec, "w0", tuple(TaskEpoch(t, None) for t in both["w0"]), 1, EpochEnd(duration_s=2.0)
        )
        reply = _Call(name, first).result()
        assert isinstance(reply, WorkerEpochReply) and sorted(reply.replies) == ["0_0", "0_1"]

        produce(bootstrap, source, _values(0, 2) + _values(1, 2))  # between the epochs
        with TopicReader(bootstrap, sink, bytes.decode, bytes.decode) as out:  # uncommitted too
            out.wait_for(
                lambda records: {"p0-v0", "p0-v1"} <= {r.value for r in records}, timeout_s=WAIT_S
            )
        second = WorkerEpochRequest(
            spec,
            "w0",
            (TaskEpoch("0_0", reply.replies["0_0"].metadata_json),),
            2,
            EpochEnd(duration_s=2.0),
        )
        later = _Call(name, second).result()
        assert isinstance(later, WorkerEpochReply) and sorted(later.replies) == ["0_0"]
        kept = later.replies["0_0"]
        assert not kept.rebuilt, "0_0 was rebuilt: the worker's transaction was aborted"
        committed, _ = committed_records(bootstrap, sink)
        assert sorted(r.value.decode() for r in committed) == ["p0-v0", "p0-v1"]
    finally:
        _close({name: host})
