"""A task's consumer in epochs (``runtime/continuous_input.py``) against the real broker."""

from __future__ import annotations

import time

import pytest

from processor_api.runtime.continuous_input import ContinuousInput
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
        handed_out += stream.poll(0.2)
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
        assert [r.offset for r in records] == list(range(bound))
        assert stream.read_end[topic] == bound
        assert stream.lags() == {topic: 0}
        # nothing past the bound comes out later either
        assert [stream.poll(0.2) for _ in range(5)] == [[]] * 5
    finally:
        stream.close()
