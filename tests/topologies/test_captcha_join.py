"""topologies.captcha_join: ask unverified browsers once, at the action threshold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task
from processor_api.serdes import Serdes
from processor_api.testing import TestInputTopic, TestOutputTopic, TopologyTestDriver
from topologies.captcha_join import build_topology


@pytest.fixture
def driver() -> Iterator[TopologyTestDriver]:
    with TopologyTestDriver(build_topology()) as test_driver:
        yield test_driver


def topics(driver: TopologyTestDriver) -> tuple[TestInputTopic, TestInputTopic, TestOutputTopic]:
    return (
        driver.create_input_topic("browser-actions"),
        driver.create_input_topic("captcha-verified"),
        driver.create_output_topic("ask-captcha"),
    )


def test_unverified_browser_asked_once_at_five(driver: TopologyTestDriver) -> None:
    actions, _, ask = topics(driver)
    for ts in range(4):
        actions.pipe_input("browser-A", {"action": "login"}, ts)
    assert ask.is_empty()
    actions.pipe_input("browser-A", "anything", 4)
    record = ask.read_record()
    assert (record.key, record.value, record.timestamp) == (
        "browser-A",
        {"browser_hash": "browser-A", "actions": 5},
        4,
    )
    for ts in range(5, 9):  # counts above the threshold: no second question
        actions.pipe_input("browser-A", b"\xff\x00 raw bytes", ts)
    assert ask.is_empty()
    assert driver.get_key_value_store("browser-actions-count").get("browser-A") == 9
    assert driver.get_key_value_store("captcha-verified").get("browser-A") is None


def test_verified_browser_never_asked(driver: TopologyTestDriver) -> None:
    actions, verified, ask = topics(driver)
    verified.pipe_input("browser-B", "solved", 1)
    verified.pipe_input("browser-B", "solved again", 2)
    for ts in range(3, 13):
        actions.pipe_input("browser-B", "click", ts)
        actions.pipe_input("browser-C", "click", ts)  # unverified neighbour is asked
    assert ask.read_key_values_to_list() == [
        ("browser-C", {"browser_hash": "browser-C", "actions": 5})
    ]
    counts = driver.get_key_value_store("browser-actions-count")
    assert {kv.key: kv.value for kv in counts.all()} == {"browser-B": 10, "browser-C": 10}
    verified_store = driver.get_key_value_store("captcha-verified")
    assert {kv.key: kv.value for kv in verified_store.all()} == {"browser-B": 1}  # first kept


def test_verification_after_threshold_emits_nothing_more(driver: TopologyTestDriver) -> None:
    actions, verified, ask = topics(driver)
    for ts in range(5):
        actions.pipe_input("browser-D", "click", ts)
    assert ask.get_queue_size() == 1
    ask.read_record()
    verified.pipe_input("browser-D", "solved", 10)
    actions.pipe_input("browser-D", "click", 11)
    assert ask.is_empty()
    assert driver.get_key_value_store("captcha-verified").get("browser-D") == 10


def test_custom_threshold() -> None:
    with TopologyTestDriver(build_topology(threshold=2, output_topic="challenge")) as driver:
        actions = driver.create_input_topic("browser-actions")
        ask = driver.create_output_topic("challenge")
        actions.pipe_input("x", "a", 0)
        assert ask.is_empty()
        actions.pipe_input("x", "a", 1)
        assert ask.read_value() == {"browser_hash": "x", "actions": 2}


def test_one_subtopology_sharing_the_verified_store() -> None:
    topology = build_topology()
    (sub,) = topology.subtopologies()
    assert set(sub.source_topics) == {"browser-actions", "captcha-verified"}
    assert set(sub.store_names) == {"browser-actions-count", "captcha-verified"}
    counter = topology.nodes["count-actions"]
    assert set(counter.stores) == {"browser-actions-count", "captcha-verified"}


def _run_batch(tmp_path: Path, records: list[InputRecord]) -> tuple[list, dict]:
    topology = build_topology()
    (sub,) = topology.subtopologies()
    collector = ListCollector()
    task = Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(state_dir=tmp_path, timestamp_fn=ts),
        collector=collector,
        config=StreamsConfig(application_id="captcha-test"),
        clock=lambda: 0,
    )
    try:
        task.initialize()
        task.process_batch(records)
        task.flush()
        counts = {kv.key: kv.value for kv in task.stores["browser-actions-count"].store.all()}
        return collector.drain(), counts
    finally:
        task.close()


def _raw(topic: str, offset: int, timestamp: int, browser: str) -> InputRecord:
    return InputRecord(topic, 0, offset, timestamp, browser.encode(), b"{}")


@pytest.mark.parametrize(("verified_at", "asked"), [(45, False), (55, True)])
def test_topics_interleaved_by_timestamp_within_a_batch(
    tmp_path: Path, verified_at: int, asked: bool
) -> None:
    """In one batch of both topics, the task takes the smallest timestamp first.

    Actions at 10, 20, ..., 50; the verification is listed after all the actions, but when its
    timestamp (45) is before the 5th action's (50) it is processed first and suppresses the
    question; at 55 it comes too late.
    """
    records = [_raw("browser-actions", i, 10 * (i + 1), "browser-E") for i in range(5)]
    records.append(_raw("captcha-verified", 0, verified_at, "browser-E"))
    produced, counts = _run_batch(tmp_path, records)
    assert counts == {"browser-E": 5}
    if asked:
        assert [(r.topic, Serdes.string().deserialize(r.key), r.timestamp) for r in produced] == [
            ("ask-captcha", "browser-E", 50)
        ]
        assert Serdes.json().deserialize(produced[0].value) == {
            "browser_hash": "browser-E",
            "actions": 5,
        }
    else:
        assert produced == []


def test_driver_order_by_timestamp(driver: TopologyTestDriver) -> None:
    """Piped in timestamp order: a verification at t=3 beats the 5th action at t=4."""
    actions, verified, ask = topics(driver)
    for ts in range(3):
        actions.pipe_input("browser-F", "click", ts)
        actions.pipe_input("browser-G", "click", ts)
    verified.pipe_input("browser-F", "ok", 3)
    for ts in (4, 5):
        actions.pipe_input("browser-F", "click", ts)
        actions.pipe_input("browser-G", "click", ts)
    verified.pipe_input("browser-G", "ok", 6)  # after G reached 5 at t=5
    assert ask.read_key_values_to_list() == [
        ("browser-G", {"browser_hash": "browser-G", "actions": 5})
    ]


def test_an_idle_browser_counts_from_zero_again() -> None:
    with TopologyTestDriver(build_topology(threshold=3, idle_ms=1_000)) as driver:
        actions = driver.create_input_topic("browser-actions")
        asks = driver.create_output_topic("ask-captcha")
        actions.pipe_input("b1", b"", timestamp=0)
        actions.pipe_input("b1", b"", timestamp=500)
        actions.pipe_input("b2", b"", timestamp=1_600)  # b1 idle for 1100 ms: forgotten
        actions.pipe_input("b1", b"", timestamp=1_700)
        assert asks.is_empty()
        assert driver.get_key_value_store("browser-actions-count").get("b1") == 1
        actions.pipe_input("b1", b"", timestamp=1_800)
        actions.pipe_input("b1", b"", timestamp=1_900)
        assert asks.read_value() == {"browser_hash": "b1", "actions": 3}
