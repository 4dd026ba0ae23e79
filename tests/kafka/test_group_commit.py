"""Committing a task's input offsets to the consumer group (``kafka/group.py``)."""

from __future__ import annotations

import pytest

from processor_api.kafka.group import COMMIT_POLL_STEP_S, GroupCommitter, committed_offsets
from tests.harness.topics import uid

pytestmark = pytest.mark.integration


class _PollSpy:
    """The committer's consumer, with every ``poll`` timeout recorded."""

    def __init__(self, consumer):
        self._consumer = consumer
        self.timeouts: list[float] = []

    def poll(self, timeout):
        self.timeouts.append(timeout)
        return self._consumer.poll(timeout)

    def __getattr__(self, name):
        return getattr(self._consumer, name)


def test_a_commit_returns_within_a_short_poll_of_the_answer(kafka):
    """``make bench``'s latency run: every at_least_once commit stood 100 ms longer than the
    broker took, because the wait for the answer polled in 100 ms steps and ``poll`` only
    returns at its timeout on a consumer without partitions (the tasks' loops stand still for
    the whole commit). The wait now polls in steps of ``COMMIT_POLL_STEP_S``."""
    group, topic = f"gc-{uid()}", f"gc-in-{uid()}"
    kafka.create_topic(topic, 1)
    committer = GroupCommitter(kafka.bootstrap_servers, group, "group-commit-test")
    spy = _PollSpy(committer._consumer)
    committer._consumer = spy
    try:
        for offset in (3, 7):
            committer.commit({(topic, 0): offset})
    finally:
        committer.close()
    assert spy.timeouts and max(spy.timeouts) <= COMMIT_POLL_STEP_S <= 0.005
    assert committed_offsets(kafka.bootstrap_servers, group, [(topic, 0)]) == {(topic, 0): 7}
