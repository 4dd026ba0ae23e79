"""A worker host the driver starts before its query (``EarlyStartRequest``), on the embedded
broker without Spark: count per key (a store, a changelog) under exactly_once_v2, task ``0_0``
of worker ``w0``, the host serving in a thread of the test on the name the epoch calls try
after their daemon's (``socket_name(key, early_start_pid)``).

* built and processing before the first epoch, the task commits its output before any epoch;
  the first epoch (no state from Spark) takes it over as it runs: not rebuilt, one ``init``,
  and it reports what the task processed before it; the output is exact;
* an available-now run's host processes up to the run's end offsets before the first epoch,
  and nothing past them; the first epoch (the same ends) reports that, and nothing more;
* the run stops before its first epoch: the epoch that ends at once reports what the task
  committed before it (the metadata Spark keeps), not the state it was handed;
* an epoch whose state is not what the task was started from rebuilds it.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from processor_api.engine.metadata import TaskMetadata
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime import worker_host
from processor_api.runtime.host_client import (
    HOST_FILE,
    exchange,
    request,
    socket_name,
    worker_key,
)
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import (
    CloseRequest,
    EarlyStartRequest,
    EndEpochRequest,
    EpochEnd,
    OkReply,
    TaskEpoch,
    WorkerEpochRequest,
)
from processor_api.state.manager import task_directory
from tests.harness.task_runs import TASK, the_reply
from tests.harness.topics import TopicReader, committed_records, produce, uid

pytestmark = pytest.mark.integration

WAIT_S = 60.0


class EarlyHost:
    """A host serving in a thread, as the driver starts one before its query."""

    def __init__(self, kafka, tmp_path: Path, records: int) -> None:
        self.app, self.input, self.output = uid("early"), uid("in"), uid("out")
        for topic in (self.input, self.output, commit_marker_topic(self.app)):
            kafka.create_topic(topic, 1)
        self.bootstrap = kafka.bootstrap_servers
        self.keys: list[str] = []
        self.produce(records)
        self.spec = JobSpec(
            run_id=uuid.uuid4().hex,
            topology_ref="topologies.count_per_key:build_topology",
            topology_kwargs={"input_topic": self.input, "output_topic": self.output},
            topology_pickle=None,
            bootstrap_servers=self.bootstrap,
            state_dir=str(tmp_path / "state"),
            config={"application_id": self.app, "processing_guarantee": "exactly_once_v2"},
            task_ids=(TASK,),
            flush_timeout_s=10,
            reset_policies={self.input: "earliest"},
            assignment={"w0": (TASK,)},
            early_start_pid=os.getpid(),
        )
        self.key = worker_key(self.spec.state_dir, self.app, "w0")
        self.name = socket_name(self.key, os.getpid())
        self.thread = threading.Thread(
            target=worker_host.serve, args=(self.name, os.getpid()), daemon=True
        )
        self.thread.start()

    def produce(self, count: int) -> None:
        keys = [f"k{(len(self.keys) + i) % 7}" for i in range(count)]
        produce(self.bootstrap, self.input, [(k.encode(), b"x") for k in keys])
        self.keys += keys

    def start_early(self, *, process: bool, end: EpochEnd | None = None) -> None:
        message = EarlyStartRequest(
            self.spec, "w0", (TASK,), build=True, process=process, end=end or EpochEnd()
        )
        for _ in range(500):  # until it listens
            reply = request(self.name, message, timeout_s=WAIT_S)
            if reply is not None:
                assert isinstance(reply, OkReply), reply
                break
            threading.Event().wait(0.01)
        else:
            raise AssertionError("the host never listened")
        # The host answers before it starts the task, and skips a task it has not started
        # once a request is waiting: an epoch sent now could come first. The task's host
        # file is written when it starts, after which the host builds it before anything else.
        host_file = task_directory(self.spec.executor_state_dir, self.app, TASK) / HOST_FILE
        deadline = time.monotonic() + WAIT_S
        while not host_file.exists():
            assert time.monotonic() < deadline, f"the host never started {TASK} early"
            threading.Event().wait(0.01)

    def ends_now(self) -> EpochEnd:
        """An available-now end: the input's end offset now."""
        return EpochEnd(end_offsets={(self.input, 0): len(self.keys)})

    def epoch(self, state_json: str | None, epoch: int, end: EpochEnd | None = None):
        """One epoch up to ``end`` (by default the input's end), sent the way an epoch call
        sends it."""
        end = end or self.ends_now()
        message = WorkerEpochRequest(self.spec, "w0", (TaskEpoch(TASK, state_json),), epoch, end)
        reply = exchange(
            self.key, "console", message, timeout_s=WAIT_S, early_start_pid=os.getpid()
        )
        return the_reply(reply)

    def committed_output(self) -> list[tuple[str, int]]:
        kept, _ = committed_records(self.bootstrap, self.output)
        return [(r.key.decode(), int.from_bytes(r.value, "big", signed=True)) for r in kept]

    def expected_output(self) -> Counter:
        seen: Counter = Counter()
        expected = []
        for key in self.keys:
            seen[key] += 1
            expected.append((key, seen[key]))
        return Counter(expected)

    def close(self) -> None:
        request(self.name, CloseRequest(), timeout_s=WAIT_S)
        self.thread.join(WAIT_S)


@pytest.fixture
def early_host(kafka, tmp_path):
    hosts: list[EarlyHost] = []

    def make(records: int) -> EarlyHost:
        hosts.append(EarlyHost(kafka, tmp_path, records))
        return hosts[-1]

    yield make
    for host in hosts:
        host.close()


def test_the_first_epoch_takes_over_a_task_that_ran_before_it(early_host):
    host = early_host(40)
    host.start_early(process=True)
    with TopicReader(
        host.bootstrap, host.output, bytes.decode, bytes, isolation="read_committed"
    ) as out:
        out.wait_for(lambda records: len(records) >= 40, timeout_s=WAIT_S)  # before any epoch
    host.produce(25)
    reply = host.epoch(None, 1)
    assert (reply.processed, reply.rebuilt, reply.inits) == (65, False, 1), reply
    assert reply.commits >= 2, reply
    assert TaskMetadata.from_json(reply.metadata_json).input_positions == {host.input: 65}
    assert Counter(host.committed_output()) == host.expected_output()


def test_an_available_now_task_processes_up_to_the_run_ends_before_its_first_epoch(early_host):
    host = early_host(40)
    ends = host.ends_now()  # fixed by the driver when it starts the hosts
    host.start_early(process=True, end=ends)
    with TopicReader(
        host.bootstrap, host.output, bytes.decode, bytes, isolation="read_committed"
    ) as out:
        out.wait_for(lambda records: len(records) >= 40, timeout_s=WAIT_S)  # before any epoch
    expected = host.expected_output()
    host.produce(25)  # after the run's "now": not this run's
    reply = host.epoch(None, 1, ends)
    assert (reply.processed, reply.rebuilt, reply.inits) == (40, False, 1), reply
    assert TaskMetadata.from_json(reply.metadata_json).input_positions == {host.input: 40}
    assert Counter(host.committed_output()) == expected


def test_a_run_stopped_before_its_first_epoch_reports_what_its_task_committed(early_host):
    host = early_host(30)
    host.start_early(process=True)
    with TopicReader(
        host.bootstrap, host.output, bytes.decode, bytes, isolation="read_committed"
    ) as out:
        out.wait_for(lambda records: len(records) >= 30, timeout_s=WAIT_S)
    assert isinstance(request(host.name, EndEpochRequest(host.spec.run_id), WAIT_S), OkReply)
    reply = host.epoch(None, 1)  # the epoch Spark begins before its query stops
    assert (reply.processed, reply.rebuilt) == (30, False), reply
    assert TaskMetadata.from_json(reply.metadata_json).input_positions == {host.input: 30}
    assert Counter(host.committed_output()) == host.expected_output()


def test_an_epoch_with_another_state_rebuilds_a_task_started_early(early_host):
    host = early_host(20)
    host.start_early(process=False)
    state = TaskMetadata(input_positions={host.input: 5}).to_json()
    reply = host.epoch(state, 3)
    assert (reply.processed, reply.rebuilt, reply.inits) == (15, True, 2), reply
