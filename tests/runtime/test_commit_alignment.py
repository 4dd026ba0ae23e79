"""When a worker commits (``worker_host.next_commit_at``): every ``commit.interval.ms``, or, for
exactly-once on Tansu, at the wall clock's multiples of it, the same moments for every worker."""

from __future__ import annotations

from processor_api.runtime import worker_host
from processor_api.runtime.worker_host import next_commit_at


def test_unaligned_commits_come_one_interval_after_now() -> None:
    assert next_commit_at(50.0, 0.1, aligned=False) == 50.1


def test_aligned_commits_come_at_the_next_multiple_of_the_interval(monkeypatch) -> None:
    for wall, monotonic in ((1000.03, 7.0), (1000.07, 123.4)):
        monkeypatch.setattr(worker_host.time, "time", lambda wall=wall: wall)
        at = next_commit_at(monotonic, 0.1, aligned=True)
        # the wall clock at that moment is 1000.1: two workers with any monotonic clocks agree
        assert abs((at - monotonic) + wall - 1000.1) < 1e-9
