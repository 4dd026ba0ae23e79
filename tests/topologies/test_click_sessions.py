"""topologies.click_sessions: one summary per session window, after the window closes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from processor_api.testing import TestInputTopic, TestOutputTopic, TopologyTestDriver
from topologies.click_sessions import (
    SESSION_WINDOW_KEY_SERDE,
    SessionWindowKey,
    build_topology,
)

MINUTE = 60_000


def click(session: str, event: str, time_spent: int, uuid: str = "user-1") -> dict:
    return {"uuid": uuid, "session_id": session, "event": event, "time_spent": time_spent}


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
    return {kv.key: kv.value for kv in driver.get_key_value_store("click-session-windows").all()}


def test_one_summary_per_session_window(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    # window [0, 60000)
    clicks.pipe_input("s1", click("s1", "click", 3), 1_000)
    clicks.pipe_input("s2", click("s2", "page_view", 10, "user-2"), 2_000)
    clicks.pipe_input("s1", click("s1", "page_view", 7), 30_000)
    clicks.pipe_input("s1", click("s1", "click", 1), 59_999)
    # window [60000, 120000)
    clicks.pipe_input("s2", click("s2", "click", 4, "user-2"), 60_500)
    assert summaries.is_empty() is False  # 60_500 closed the first window
    first = summaries.read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in first] == [
        (
            "s1",
            {
                "session_id": "s1",
                "window_start": 0,
                "window_end": MINUTE,
                "clicks": 2,
                "page_views": 1,
                "time_spent": 11,
            },
            60_500,
        ),
        (
            "s2",
            {
                "session_id": "s2",
                "window_start": 0,
                "window_end": MINUTE,
                "clicks": 0,
                "page_views": 1,
                "time_spent": 10,
            },
            60_500,
        ),
    ]
    # emitted windows are gone; the open one is still there
    assert stored(driver) == {
        SessionWindowKey(2 * MINUTE, "s2"): {
            "window_start": MINUTE,
            "clicks": 1,
            "page_views": 0,
            "time_spent": 4,
            "uuid": "user-2",
            "first_timestamp": 60_500,
            "last_timestamp": 60_500,
        }
    }

    clicks.pipe_input("s1", click("s1", "page_view", 2), 70_000)
    clicks.pipe_input("s2", click("s2", "page_view", 6, "user-2"), 119_999)
    assert summaries.is_empty()  # nothing before stream time reaches the window end

    clicks.pipe_input("s3", click("s3", "click", 1), 120_000)  # end <= stream time: closes
    assert summaries.read_key_values_to_list() == [
        (
            "s1",
            {
                "session_id": "s1",
                "window_start": MINUTE,
                "window_end": 2 * MINUTE,
                "clicks": 0,
                "page_views": 1,
                "time_spent": 2,
            },
        ),
        (
            "s2",
            {
                "session_id": "s2",
                "window_start": MINUTE,
                "window_end": 2 * MINUTE,
                "clicks": 1,
                "page_views": 1,
                "time_spent": 10,
            },
        ),
    ]
    assert list(stored(driver)) == [SessionWindowKey(3 * MINUTE, "s3")]


def test_nothing_before_window_end_then_store_emptied(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    for ts in range(0, MINUTE, 5_000):
        clicks.pipe_input("s1", click("s1", "click", 1), ts)
    assert summaries.is_empty()
    assert len(stored(driver)) == 1
    clicks.pipe_input("other", click("other", "click", 1), 10 * MINUTE)
    assert summaries.read_value() == {
        "session_id": "s1",
        "window_start": 0,
        "window_end": MINUTE,
        "clicks": 12,
        "page_views": 0,
        "time_spent": 12,
    }
    assert summaries.is_empty()
    assert list(stored(driver)) == [SessionWindowKey(11 * MINUTE, "other")]


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
    assert stored(driver) == {
        SessionWindowKey(2 * MINUTE, "s1"): {
            "window_start": MINUTE,
            "clicks": 1,
            "page_views": 1,
            "time_spent": 6,
            "uuid": "user-1",
            "first_timestamp": 61_000,
            "last_timestamp": 65_000,
        }
    }


def test_grace_period_keeps_window_open() -> None:
    topology = build_topology(window_ms=1_000, grace_ms=500, punctuate_interval_ms=100)
    with TopologyTestDriver(topology) as driver:
        clicks, summaries = topics(driver)
        clicks.pipe_input("s", click("s", "click", 1), 100)
        clicks.pipe_input("s", click("s", "click", 1), 1_200)
        clicks.pipe_input("s", click("s", "click", 1), 900)  # within grace: accepted
        assert summaries.is_empty()
        clicks.pipe_input("s", click("s", "page_view", 1), 1_500)  # 1000 <= 1500 - 500
        assert summaries.read_value() == {
            "session_id": "s",
            "window_start": 0,
            "window_end": 1_000,
            "clicks": 2,
            "page_views": 0,
            "time_spent": 2,
        }
        with capture_logs() as logs:
            clicks.pipe_input("s", click("s", "click", 1), 950)  # now late
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
            "late_click_event_dropped"
        ]
        assert summaries.is_empty()


def test_invalid_events_skipped(driver: TopologyTestDriver) -> None:
    clicks, summaries = topics(driver)
    with capture_logs() as logs:
        clicks.pipe_input(None, click("s1", "click", 1), 0)
        clicks.pipe_input("s1", [1, 2], 0)
        clicks.pipe_input("s1", click("s1", "scroll", 1), 0)
        clicks.pipe_input("s1", {"event": ["click"]}, 0)
        clicks.pipe_input("s1", click("s1", "click", "long"), 0)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["click_event_skipped"] * 5
    assert stored(driver) == {}
    clicks.pipe_input("s1", {"event": "click"}, 0)  # time_spent missing: counts as 0
    assert stored(driver)[SessionWindowKey(MINUTE, "s1")]["time_spent"] == 0


def test_window_key_serde_orders_by_window_end() -> None:
    keys = [
        SessionWindowKey(2 * MINUTE, "a"),
        SessionWindowKey(MINUTE, "zz"),
        SessionWindowKey(256 * MINUTE, "a"),
        SessionWindowKey(MINUTE, "b"),
        SessionWindowKey(MINUTE, ""),
    ]
    encoded = sorted(SESSION_WINDOW_KEY_SERDE.serialize(k) for k in keys)
    assert [SESSION_WINDOW_KEY_SERDE.deserialize(b) for b in encoded] == sorted(keys)
    assert SESSION_WINDOW_KEY_SERDE.serialize(SessionWindowKey(1, "é")) == (
        b"\x00" * 7 + b"\x01" + "é".encode()
    )
