"""A task's consumer in epochs (``runtime/continuous_input.py``) against the real broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from processor_api.runtime.continuous_input import ContinuousInput, WorkerInput
from tests.harness.topics import produce, uid

pytestmark = pytest.mark.integration

#: How long a test waits for the consumer to reach its bounds: far more than a few fetches.
REACH_TIMEOUT_S = 30.0


def _poll_until_reached(stream: ContinuousInput) -> list:
    """Poll until every bounded topic is reached, failing (with what was read) at the timeout."""
    handed_out = []
    deadline = time.monotonic() + REACH_TIMEOUT_S
    while not stream.reached():
        if time.monotonic() > deadline:
            pytest.fail(
                f"bounds {stream._bounds} not reached within {REACH_TIMEOUT_S:g}s: "
                f"read_end={stream.read_end}, {len(handed_out)} record(s) handed out"
            )
        handed_out += stream.poll(0.2).messages()
    return handed_out


@pytest.mark.parametrize("bound", [0, 2])
def test_a_task_without_a_position_reaches_a_bound_below_the_records_already_there(
    kafka, bound: int
) -> None:
    """An available-now epoch of a task downstream of a repartition topic: the driver took the
    topic's end offset (here 0 or 2) before the upstream task wrote more, and the downstream
    task, without a committed position, starts at the beginning. Its first fetch returns
    records at and past the bound: the task has reached it, hands out only the records below
    it, and its epoch ends (it used to seek back to the bound and fetch the same records again,
    forever, when the bound was the partition's first offset)."""
    topic = f"ci-bound-{uid()}"
    kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, topic, [(f"k{i}".encode(), b"v", 0) for i in range(5)])
    stream = ContinuousInput(kafka.bootstrap_servers, "1_0", 0, isolation_level="read_uncommitted")
    try:
        stream.assign({topic: None}, {topic: "earliest"})
        stream.set_bounds({topic: bound})
        records = _poll_until_reached(stream)
        assert [r.offset() for r in records] == list(range(bound))
        assert stream.read_end[topic] == bound
        assert stream.lags() == {topic: 0}
        # nothing past the bound comes out later either
        assert [len(stream.poll(0.2)) for _ in range(5)] == [0] * 5
    finally:
        stream.close()


def test_tasks_sharing_a_worker_consumer_each_get_their_own_partition(kafka) -> None:
    """One consumer for a worker's tasks (``WorkerInput``): each task's input hands out only
    its partition's records, one fetch serves them all, and a task's partitions leave the
    consumer when its input closes while the other task reads on."""
    topic = f"ci-shared-{uid()}"
    kafka.create_topic(topic, 2)
    produce(kafka.bootstrap_servers, topic,
            [(f"k{i}".encode(), f"p{i % 2}-{i}".encode(), i % 2) for i in range(10)])  # fmt: skip
    shared = WorkerInput(kafka.bootstrap_servers, "worker-test", isolation_level="read_uncommitted")
    first, second = (
        ContinuousInput("", f"0_{p}", p, isolation_level="read_uncommitted", shared=shared)
        for p in (0, 1)
    )
    try:
        for stream in (first, second):
            stream.assign({topic: None}, {topic: "earliest"})
            stream.set_bounds({topic: 5})
        got: dict[int, list[str]] = {0: [], 1: []}
        deadline = time.monotonic() + REACH_TIMEOUT_S
        while not (first.reached() and second.reached()):
            assert time.monotonic() < deadline, got
            shared.fetch(0.2)  # the worker's one fetch ...
            for stream, partition in ((first, 0), (second, 1)):  # ... then each task's turn
                got[partition] += [r.value().decode() for r in stream.poll(0.0).messages()]
        assert got == {p: [f"p{p}-{i}" for i in range(p, 10, 2)] for p in (0, 1)}
        first.close()
        assert shared.consumer.assignment() == [TopicPartition(topic, 1)]
        produce(kafka.bootstrap_servers, topic, [(b"k", b"late", 1)])
        second.set_bounds({topic: 6})
        late: list[str] = []
        while not second.reached():
            assert time.monotonic() < deadline, late
            late += [r.value().decode() for r in second.poll(0.2).messages()]
        assert late == ["late"]
    finally:
        second.close()
        shared.close()
