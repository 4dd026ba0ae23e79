"""The driver's watch over Spark's executors (``spark/executor_watch.py``): which executors
went and came between two looks, and ``on_lost`` called once per loss, from the thread too."""

from __future__ import annotations

import threading

from processor_api.spark.executor_watch import ExecutorSet, ExecutorWatch, spark_executors


def test_the_first_look_reports_nothing_then_changes_are_reported_once():
    executors = ExecutorSet()
    assert executors.update({"driver:1", "a:2", "b:3"}) == (set(), set())
    assert executors.update({"driver:1", "a:2", "b:3"}) == (set(), set())
    assert executors.update({"driver:1", "b:3"}) == ({"a:2"}, set())
    assert executors.update({"driver:1", "b:3", "c:4"}) == (set(), {"c:4"})
    assert executors.update({"driver:1", "c:4"}) == ({"b:3"}, set())


def test_a_lost_executor_is_reported_to_on_lost_with_the_executors_left():
    listings = iter([{"d:1", "a:2", "b:3"}, {"d:1", "a:2", "b:3"}, {"d:1", "b:3"}, {"d:1", "b:3"}])
    calls: list[tuple[set[str], set[str]]] = []
    watch = ExecutorWatch(lambda: next(listings), lambda lost, now: calls.append((lost, now)))
    for _ in range(4):
        watch.poll()
    assert calls == [({"a:2"}, {"d:1", "b:3"})]


def test_the_thread_goes_on_after_a_failed_look_and_stops_when_asked():
    looks = [{"d:1", "a:2"}, RuntimeError("the session is stopping"), {"d:1"}]
    lost = threading.Event()

    def listing() -> set[str]:
        look = looks.pop(0) if looks else {"d:1"}
        if isinstance(look, BaseException):
            raise look
        return look

    watch = ExecutorWatch(listing, lambda gone, now: lost.set(), interval_s=0.01)
    watch.start()
    try:
        assert lost.wait(10), "the loss after a failed look was not reported"
    finally:
        watch.stop()
        watch.join(10)
    assert not watch.is_alive()


class _Info:
    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port

    def host(self) -> str:
        return self._host

    def port(self) -> int:
        return self._port


class _Session:
    """What ``spark_executors`` reads of a session: the status tracker's executor infos."""

    def __init__(self, infos: list[_Info]) -> None:
        tracker = type("Tracker", (), {"getExecutorInfos": lambda _: infos})()
        sc = type("SC", (), {"statusTracker": lambda _: tracker})()
        jsc = type("JSC", (), {"sc": lambda _: sc})()
        self.sparkContext = type("Context", (), {"_jsc": jsc})()


def test_an_executor_without_its_block_manager_yet_is_not_listed():
    # seen in a run: the replacement was listed with port 0, then with its port, which read
    # as an executor lost and cut the epochs a second time
    registering = _Session([_Info("h", 7077), _Info("h", 0)])
    registered = _Session([_Info("h", 7077), _Info("h", 38137)])
    executors = ExecutorSet()
    assert executors.update(spark_executors(registering)) == (set(), set())
    assert executors.update(spark_executors(registered)) == (set(), {"h:38137"})
