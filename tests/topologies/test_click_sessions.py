"""topologies.click_sessions: one summary per session window, after the window closes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from processor_api import Serdes
from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task
from processor_api.state import WindowStore
from processor_api.testing import TestInputTopic, TestOutputTopic, TopologyTestDriver
from tests.harness.click_sessions import click_stream, reference_summaries
from topologies.click_sessions import build_topology, last_emitted_store_name

MINUTE = 60_000
STORE = "click-session-windows"


def click(session: str, event: str, time_spent: int, uuid: str = "user-1") -> dict:
    return {"uuid": uuid, "session_id": session, "event": event, "time_spent": time_spent}


def summary(session: str, start: int, size: int, clicks: int, views: int, spent: int) -> dict:
    return {
        "session_id": session,
        "window_start": start,
        "window_end": start + size,
        "clicks": clicks,
        "page_views": views,
        "time_spent": spent,
    }


@pytest.fixture
def driver() -> Iterator[TopologyTestDriver]:
    with TopologyTestDriver(build_topology()) as test_driver:
        yield test_driver


def topics(driver: TopologyTestDriver) -> tuple[TestInputTopic, TestOutputTopic]:
    return (
        driver.create_input_topic("click-events"),
        driver.create_output_topic("click-session-summaries"),
    )


def stored(driver: TopologyTestDriver) -> dict:
    """The live windows: ``{(session, window start): aggregate}``."""
    windows = driver.get_window_store(STORE)
    return {(kv.key.key, kv.key.window.start): kv.value for kv in windows.all()}


def last_close(driver: TopologyTestDriver) -> int | None:
    return driver.get_key_value_store(last_emitted_store_name(STORE)).get(STORE)


def test_stores_are_a_window_store_and_its_last_emitted_close_time() -> None:
    topology = build_topology(window_ms=10_000, grace_ms=2_000, punctuate_interval_ms=500)
    windows = topology.store_builders[STORE]
    assert windows.kind == "window" and windows.caching_enabled and windows.logging_enabled
    assert windows.supplier.window_size == 10_000
    assert windows.supplier.retention_period == 12_500  # window + grace + one interval
    assert topology.store_builders[last_emitted_store_name(STORE)].kind == "key-value"


def test_one_summary_per_session_window(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    # window [0, 60000)
    clicks.pipe_input("s1", click("s1", "click", 3), 1_000)
    clicks.pipe_input("s2", click("s2", "page_view", 10, "user-2"), 2_000)
    clicks.pipe_input("s1", click("s1", "page_view", 7), 30_000)
    clicks.pipe_input("s1", click("s1", "click", 1), 59_999)
    assert summaries.is_empty()
    # window [60000, 120000): stream time 60_500 closes the first window
    clicks.pipe_input("s2", click("s2", "click", 4, "user-2"), 60_500)
    assert [(r.key, r.value, r.timestamp) for r in summaries.read_records_to_list()] == [
        ("s1", summary("s1", 0, MINUTE, 2, 1, 11), 60_500),
        ("s2", summary("s2", 0, MINUTE, 0, 1, 10), 60_500),
    ]
    assert last_close(driver) == 60_500
    # emitted windows stay until retention drops them; the open one is there too
    assert stored(driver)[("s2", MINUTE)] == {
        "clicks": 1,
        "page_views": 0,
        "time_spent": 4,
        "uuid": "user-2",
        "first_timestamp": 60_500,
        "last_timestamp": 60_500,
    }

    clicks.pipe_input("s1", click("s1", "page_view", 2), 70_000)
    clicks.pipe_input("s2", click("s2", "page_view", 6, "user-2"), 119_999)
    assert summaries.is_empty()  # punctuations ran, but no window ended: nothing re-emitted

    clicks.pipe_input("s3", click("s3", "click", 1), 120_000)  # end <= stream time: closes
    assert summaries.read_key_values_to_list() == [
        ("s1", summary("s1", MINUTE, MINUTE, 0, 1, 2)),
        ("s2", summary("s2", MINUTE, MINUTE, 1, 1, 10)),
    ]
    # windows [0, 60000) are past the retention (61 s) of the observed time 120000
    assert sorted(stored(driver)) == [("s1", MINUTE), ("s2", MINUTE), ("s3", 2 * MINUTE)]


def test_each_window_emitted_once_over_many_punctuations(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    clicks.pipe_input("s1", click("s1", "click", 1), 500)
    emitted = []
    for ts in range(MINUTE, 3 * MINUTE, 700):  # a punctuation at about every record
        clicks.pipe_input("s9", click("s9", "page_view", 1), ts)
        emitted += summaries.read_key_values_to_list()
    assert emitted == [
        ("s1", summary("s1", 0, MINUTE, 1, 0, 1)),
        ("s9", summary("s9", MINUTE, MINUTE, 0, 86, 86)),
    ]


def test_punctuation_fetches_only_windows_closed_since_the_last_emission(
    driver: TopologyTestDriver,
) -> None:
    clicks, summaries = topics(driver)
    windows: WindowStore = driver.get_window_store(STORE)
    fetched: list[tuple[int, int]] = []
    fetch_all = windows.fetch_all

    def recording_fetch_all(time_from: int, time_to: int):
        fetched.append((time_from, time_to))
        return fetch_all(time_from, time_to)

    windows.fetch_all = recording_fetch_all  # type: ignore[method-assign]
    for ts in range(0, 4 * MINUTE, 1_000):
        clicks.pipe_input(f"s{ts % 3}", click(f"s{ts % 3}", "click", 1), ts)
    # one fetch per closed minute, each over the starts of the windows closed since the last
    assert fetched == [(0, 0), (MINUTE, MINUTE), (2 * MINUTE, 2 * MINUTE)]
    assert len(summaries.read_key_values_to_list()) == 9


def test_nothing_before_window_end(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    for ts in range(0, MINUTE, 5_000):
        clicks.pipe_input("s1", click("s1", "click", 1), ts)
    assert summaries.is_empty()
    assert list(stored(driver)) == [("s1", 0)]
    assert last_close(driver) is None


def test_a_jump_in_stream_time_emits_the_windows_its_put_would_expire(
    driver: TopologyTestDriver,
) -> None:
    clicks, summaries = topics(driver)
    clicks.pipe_input("s1", click("s1", "click", 2), 10_000)
    clicks.pipe_input("s2", click("s2", "page_view", 3), 70_000)  # closes [0, 60000)
    assert summaries.read_value()["session_id"] == "s1"
    clicks.pipe_input("s1", click("s1", "click", 4), 80_000)
    # an hour later: the put of this record expires [60000, 120000), closed but not emitted
    with capture_logs() as logs:
        clicks.pipe_input("other", click("other", "click", 1), 60 * MINUTE + 5)
    assert [(r.key, r.value, r.timestamp) for r in summaries.read_records_to_list()] == [
        ("s1", summary("s1", MINUTE, MINUTE, 1, 0, 4), 60 * MINUTE + 5),
        ("s2", summary("s2", MINUTE, MINUTE, 0, 1, 3), 60 * MINUTE + 5),
    ]
    assert not [e for e in logs if e["event"] == "skipping_record_for_expired_window"]
    assert list(stored(driver)) == [("other", 60 * MINUTE)]
    clicks.pipe_input("other", click("other", "click", 1), 62 * MINUTE)
    assert summaries.read_key_values_to_list() == [
        ("other", summary("other", 60 * MINUTE, MINUTE, 1, 0, 1))
    ]


def test_late_events_are_dropped_and_counted(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    clicks.pipe_input("s1", click("s1", "click", 1), 10_000)
    clicks.pipe_input("s1", click("s1", "click", 1), 65_000)  # closes [0, 60000)
    assert summaries.read_value()["clicks"] == 1

    with capture_logs() as logs:
        clicks.pipe_input("s1", click("s1", "click", 100), 59_000)  # late: window closed
        clicks.pipe_input("s9", click("s9", "click", 100), 1_000)  # late, never-seen session
        clicks.pipe_input("s1", click("s1", "page_view", 5), 61_000)  # out of order, not late
    late = [e for e in logs if e["event"] == "late_click_event_dropped"]
    assert [e["dropped_total"] for e in late] == [1, 2]
    assert all(e["log_level"] == "warning" and e["topic"] == "click-events" for e in late)
    assert [e["offset"] for e in late] == [2, 3]

    assert summaries.is_empty()
    assert stored(driver)[("s1", MINUTE)] == {
        "clicks": 1,
        "page_views": 1,
        "time_spent": 6,
        "uuid": "user-1",
        "first_timestamp": 61_000,
        "last_timestamp": 65_000,
    }
    assert ("s9", 0) not in stored(driver)
    assert stored(driver)[("s1", 0)]["clicks"] == 1  # emitted, unchanged by the late record


def test_grace_period_keeps_window_open() -> None:
    topology = build_topology(window_ms=1_000, grace_ms=500, punctuate_interval_ms=100)
    with TopologyTestDriver(topology) as driver:
        clicks, summaries = topics(driver)
        clicks.pipe_input("s", click("s", "click", 1), 100)
        clicks.pipe_input("s", click("s", "click", 1), 1_200)
        clicks.pipe_input("s", click("s", "click", 1), 900)  # within grace: accepted
        clicks.pipe_input("s", click("s", "click", 1), 1_499)
        assert summaries.is_empty()
        clicks.pipe_input("s", click("s", "page_view", 1), 1_500)  # 1000 <= 1500 - 500
        assert summaries.read_value() == summary("s", 0, 1_000, 2, 0, 2)
        with capture_logs() as logs:
            clicks.pipe_input("s", click("s", "click", 1), 950)  # now late
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
            "late_click_event_dropped"
        ]
        assert summaries.is_empty()
        clicks.pipe_input("s", click("s", "click", 1), 2_600)
        assert summaries.read_value() == summary("s", 1_000, 1_000, 2, 1, 3)


def test_invalid_events_skipped(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    with capture_logs() as logs:
        clicks.pipe_input(None, click("s1", "click", 1), 0)
        clicks.pipe_input("s1", [1, 2], 0)
        clicks.pipe_input("s1", click("s1", "scroll", 1), 0)
        clicks.pipe_input("s1", {"event": ["click"]}, 0)
        clicks.pipe_input("s1", click("s1", "click", "long"), 0)
    skipped = [e for e in logs if e["log_level"] == "warning"]
    assert [e["event"] for e in skipped] == ["click_event_skipped"] * 5
    assert [e["offset"] for e in skipped] == [0, 1, 2, 3, 4]
    assert stored(driver) == {}
    clicks.pipe_input("s1", {"event": "click"}, 0)  # time_spent missing: counts as 0
    assert stored(driver)[("s1", 0)]["time_spent"] == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_out_of_order_stream_matches_the_reference(seed: int) -> None:
    window_ms, grace_ms = 10_000, 2_000
    records = click_stream(
        ["a", "b", "c", "d"], 0, 200_000, step_ms=150, max_lateness_ms=6_000, seed=seed
    )
    records.append(("flush", click("flush", "click", 0), 500_000))
    topology = build_topology(window_ms=window_ms, grace_ms=grace_ms, punctuate_interval_ms=1_000)
    with TopologyTestDriver(topology) as driver:
        clicks, summaries = topics(driver)
        for key, value, timestamp in records:
            clicks.pipe_input(key, value, timestamp)
        emitted = summaries.read_key_values_to_list()
    expected = reference_summaries(records, window_ms, grace_ms)
    assert len(expected) > 60 and any(s["window_start"] == 190_000 for _, s in expected)
    assert len(emitted) == len(expected)  # no window twice
    assert sorted(emitted, key=lambda kv: (kv[0], kv[1]["window_start"])) == expected


def _task(topology, state_dir: Path, collector: ListCollector, metadata=None) -> Task:
    (sub,) = topology.subtopologies()
    return Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(state_dir=state_dir, timestamp_fn=ts),
        collector=collector,
        config=StreamsConfig(application_id="click-sessions-test"),
        clock=lambda: 0,
        metadata=metadata,
    )


def test_restart_on_the_same_stores_emits_each_window_once(tmp_path: Path) -> None:
    """Closed (emitted) windows stay in the store until retention: the last emitted close
    time, committed with the stores, keeps a restarted task from emitting them again."""
    window_ms, grace_ms = 10_000, 1_000
    records = click_stream(["a", "b", "c"], 0, 60_000, step_ms=200, max_lateness_ms=0, seed=7)
    records.append(("flush", click("flush", "click", 0), 200_000))
    json_serde = Serdes.json()
    raw = [
        InputRecord("click-events", 0, offset, ts, key.encode(), json_serde.serialize(value))
        for offset, (key, value, ts) in enumerate(records)
    ]
    half = len(raw) // 2
    outputs = []
    metadata = None
    for part in (raw[:half], raw[half:]):
        collector = ListCollector()
        topology = build_topology(window_ms=window_ms, grace_ms=grace_ms, punctuate_interval_ms=500)
        task = _task(topology, tmp_path, collector, metadata)
        try:
            task.initialize()
            task.process_batch(part)
            task.flush()
            metadata = task.metadata()
        finally:
            task.close()
        outputs += [(r.key.decode(), json.loads(r.value)) for r in collector.drain()]
    expected = reference_summaries(records, window_ms, grace_ms)
    assert len(outputs) == len(expected)
    assert sorted(outputs, key=lambda kv: (kv[0], kv[1]["window_start"])) == expected
