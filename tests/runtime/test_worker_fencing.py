"""Fencing with workers: a worker that lost a task cannot commit for it once the new owner
started (issue: many tasks per worker, item 3), under exactly_once_v2 on the embedded broker.

Two real worker host processes, as on two executors (each its own state directory), and no
Spark: worker A runs task ``0_0`` and commits its first records; its processor then holds
a record (as a stalled process would) and A is frozen with SIGSTOP while its epoch call is
still connected (the worst case: nothing tells it that it lost the task). Worker B gets the
task without any Spark state, adopts A's last commit marker and runs the task to the end of
its input. A is then thawed: it finishes the held record and tries to commit, and must be
refused. Kafka Streams gets this from the group generation in ``TxnOffsetCommit``; here every
task keeps its own transactional id, so the new owner's ``init_transactions`` fences the old
producer on the broker. The committed output has every record exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from processor_api import Processor, ProcessorContext, Record, Serdes, Topology
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.host_client import _connect, request
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import CloseRequest, EpochEnd, ErrorReply
from tests.harness.task_runs import one_task_epoch, the_reply
from tests.harness.topics import TopicReader, committed_records, produce, uid

pytestmark = pytest.mark.integration

WAIT_S = 60.0
STRINGS = {"key_serde": Serdes.string(), "value_serde": Serdes.string()}
HOLD_ENV = "PROCESSOR_API_TEST_HOLD_DIR"


class HoldOnce(Processor):
    """Forwards every record; in a process started with ``$PROCESSOR_API_TEST_HOLD_DIR``, the
    record ``hold`` waits (saying so with a file ``holding``) until a file ``release``
    exists."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        hold_dir = os.environ.get(HOLD_ENV)
        if hold_dir and record.value == "hold":
            (Path(hold_dir) / "holding").touch()
            while not (Path(hold_dir) / "release").exists():
                time.sleep(0.05)
        self.context.forward(record)


def build_holding(input_topic: str, output_topic: str) -> Topology:
    return (
        Topology()
        .add_source("in", input_topic, **STRINGS)
        .add_processor("hold", HoldOnce, "in")
        .add_sink("out", output_topic, "hold", **STRINGS)
    )


def _start_host(name: str, key: Path, env: dict[str, str]) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "processor_api.runtime.worker_host", name, str(key),
         str(os.getpid()), "console"],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + WAIT_S
    while True:
        probe = _connect(name)
        if probe is not None:
            probe.close()
            return process
        assert process.poll() is None and time.monotonic() < deadline, f"host {name} never listened"
        time.sleep(0.01)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


class _Call:
    """A worker's epoch call held in a thread, as a Spark task holds it."""

    def __init__(self, name: str, message: Any) -> None:
        self.outcome: list[Any] = []
        self._thread = threading.Thread(
            target=lambda: self.outcome.append(request(name, message, timeout_s=WAIT_S * 2)),
            daemon=True,
        )
        self._thread.start()

    def result(self) -> Any:
        self._thread.join(WAIT_S * 2)
        assert not self._thread.is_alive(), "the epoch call never ended"
        (reply,) = self.outcome
        return reply


def test_a_frozen_worker_resumed_after_its_task_moved_cannot_commit_it(kafka, tmp_path):
    run_id = uid()
    app, source, sink = f"fence-{run_id}", f"fence-in-{run_id}", f"fence-out-{run_id}"
    for topic in (source, sink, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)

    def spec(state_dir: Path) -> JobSpec:
        return JobSpec(
            run_id=run_id,
            topology_ref=f"{__name__}:build_holding",
            topology_kwargs={"input_topic": source, "output_topic": sink},
            topology_pickle=None,
            bootstrap_servers=kafka.bootstrap_servers,
            state_dir=str(state_dir),
            config={
                "application_id": app,
                "processing_guarantee": "exactly_once_v2",
                "commit_interval_ms": 100,
            },
            task_ids=("0_0",),
            reset_policies={source: "earliest"},
        )

    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    spec_a, spec_b = spec(tmp_path / "executor-a"), spec(tmp_path / "executor-b")
    name_a, name_b = f"worker-a-{uuid.uuid4().hex}", f"worker-b-{uuid.uuid4().hex}"
    host_a = _start_host(name_a, tmp_path / "a", {HOLD_ENV: str(hold_dir)})
    host_b = _start_host(name_b, tmp_path / "b", {})
    try:
        produce(kafka.bootstrap_servers, source, [(b"k", f"v{i}".encode()) for i in range(5)])
        end = EpochEnd(end_offsets={(source, 0): 10})
        call_a = _Call(name_a, one_task_epoch(spec_a, None, 1, end))
        with TopicReader(
            kafka.bootstrap_servers, sink, bytes.decode, bytes.decode, isolation="read_committed"
        ) as out:
            out.wait_for(lambda records: len(records) >= 5, timeout_s=WAIT_S)  # A committed
        produce(
            kafka.bootstrap_servers,
            source,
            [(b"k", b"hold")] + [(b"k", f"v{i}".encode()) for i in range(6, 10)],
        )
        _wait_for(hold_dir / "holding")  # A processes the held record: nothing committed yet
        os.kill(host_a.pid, signal.SIGSTOP)

        taken = the_reply(_Call(name_b, one_task_epoch(spec_b, None, 1, end)).result())
        assert taken.rebuilt and taken.processed == 5 and taken.commits >= 1, taken

        (hold_dir / "release").touch()
        os.kill(host_a.pid, signal.SIGCONT)
        refused = call_a.result()
        assert isinstance(refused, ErrorReply), f"the fenced worker answered {refused!r}"
        assert "fenced" in refused.message.lower(), refused.message

        kept, _ = committed_records(kafka.bootstrap_servers, sink)
        values = sorted(r.value.decode() for r in kept)
        assert values == sorted(
            [f"v{i}" for i in range(5)] + ["hold"] + [f"v{i}" for i in range(6, 10)]
        )
    finally:
        os.kill(host_a.pid, signal.SIGCONT)
        (hold_dir / "release").touch()
        for name in (name_a, name_b):
            request(name, CloseRequest(), timeout_s=WAIT_S)
        for host in (host_a, host_b):
            try:
                host.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                host.kill()
