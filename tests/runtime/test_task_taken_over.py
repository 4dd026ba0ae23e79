"""Two worker hosts on one machine and one state directory: the second asks the first to let
the task go (a ``ReleaseRequest``), the first closes it (and serves on), the second takes the
lock and goes on from the first one's commit, as when the task moves between workers, or Spark
moves a worker between executors that share a state directory."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime import worker_host
from processor_api.runtime.host_client import HOST_FILE, request
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import (
    CloseRequest,
    EndEpochRequest,
    EpochEnd,
    EpochReply,
    OkReply,
)
from processor_api.state.manager import task_directory
from tests.harness.task_runs import one_task_epoch, the_reply
from tests.harness.topics import produce, read_topic, uid

pytestmark = pytest.mark.integration

WAIT_S = 60.0
ECHO = "tests.integration.topologies_for_tests:build_echo"


def _host(name: str) -> threading.Thread:
    """A worker host serving ``name`` in a thread of this process (it returns once closed),
    listening when this returns."""
    thread = threading.Thread(target=worker_host.serve, args=(name, os.getpid()), daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while f"@{name}" not in Path("/proc/net/unix").read_text():  # its abstract socket
        assert thread.is_alive() and time.monotonic() < deadline, f"host {name} never listened"
        time.sleep(0.01)
    return thread


def _epoch(name: str, spec: JobSpec, state: str | None, epoch: int, end: int) -> EpochReply:
    """One epoch of task ``0_0`` on the host ``name``, up to offset ``end`` of the input."""
    source = spec.topology_kwargs["input_topic"]
    ask = one_task_epoch(spec, state, epoch, EpochEnd(end_offsets={(source, 0): end}))
    return the_reply(request(name, ask, timeout_s=WAIT_S))


def test_a_second_host_on_the_same_directory_takes_the_task_over(kafka, tmp_path):
    run_id = uid()
    app, source, sink = f"takeover-{run_id}", f"takeover-in-{run_id}", f"takeover-out-{run_id}"
    for topic in (source, sink, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, source, [(b"k", f"v{i}".encode(), 0, i) for i in range(6)])
    spec = JobSpec(
        run_id=run_id,
        topology_ref=ECHO,
        topology_kwargs={"input_topic": source, "output_topic": sink},
        topology_pickle=None,
        bootstrap_servers=kafka.bootstrap_servers,
        state_dir=str(tmp_path),
        config={"application_id": app, "processing_guarantee": "exactly_once_v2"},
        task_ids=("0_0",),
        reset_policies={source: "earliest"},
    )
    task_dir = task_directory(str(tmp_path), app, "0_0")
    first_name, second_name = f"host-a-{uuid.uuid4().hex}", f"host-b-{uuid.uuid4().hex}"
    first = _host(first_name)
    second = _host(second_name)
    try:
        reply = _epoch(first_name, spec, None, 1, 3)
        assert reply.processed == 3 and reply.commits >= 1, reply
        assert (task_dir / HOST_FILE).read_text() == first_name  # the first host holds it
        taken = _epoch(second_name, spec, reply.metadata_json, 2, 6)
        assert taken.processed == 3 and taken.rebuilt, taken
        # the first host let the task go and serves on (its other tasks would run on)
        assert first.is_alive()
        assert request(first_name, EndEpochRequest(run_id), timeout_s=WAIT_S) == OkReply()
        assert (task_dir / HOST_FILE).read_text() == second_name
        values = [r.value for r in read_topic(kafka.bootstrap_servers, sink)]
        assert values == [f"v{i}".encode() for i in range(6)]
    finally:
        for name in (first_name, second_name):
            request(name, CloseRequest(), timeout_s=WAIT_S)
        first.join(WAIT_S)
        second.join(WAIT_S)
