"""click_sessions on Spark: the window store and the last emitted close time
restored after the local state is lost; every closed window emitted exactly once."""

from __future__ import annotations

import json

import pytest

from processor_api.state.manager import wipe_application_state
from tests.harness.click_sessions import ClickRecord, click_stream, reference_summaries
from tests.harness.runs import NO_SNAPSHOTS, BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid
from tests.harness.wire import high_watermarks

pytestmark = pytest.mark.integration

WINDOW_MS, GRACE_MS, PUNCTUATE_MS = 10_000, 2_000, 1_000
BASE = 1_700_000_000_000  # a window boundary; real timestamps (the broker turns 0 into now)
PARTITIONS = 2


def _value(session: str, event: str, time_spent: int) -> dict:
    return {"uuid": "u", "session_id": session, "event": event, "time_spent": time_spent}


def _parts(partition: int) -> tuple[list[ClickRecord], list[ClickRecord]]:
    """One partition's records before and after the state loss."""
    sessions = [f"p{partition}-s{i}" for i in range(3)]
    first = click_stream(
        sessions, BASE, BASE + 45_000, step_ms=250, max_lateness_ms=4_000, seed=partition
    )
    # stream time 52000: closes [40000, 50000) (end <= 52000 - grace), which stays in the
    # store (retention 13 s from the observed 50000): lost emission bookkeeping re-emits it
    first.append((sessions[0], _value(sessions[0], "click", 1), BASE + 52_000))
    second: list[ClickRecord] = [
        (sessions[1], _value(sessions[1], "click", 50), BASE + 45_000),  # late: dropped
        (sessions[2], _value(sessions[2], "page_view", 7), BASE + 51_000),  # restored window
    ]
    second += click_stream(
        sessions,
        BASE + 52_000,
        BASE + 80_000,
        step_ms=250,
        max_lateness_ms=4_000,
        seed=10 + partition,
    )
    second.append((sessions[0], _value(sessions[0], "click", 0), BASE + 200_000))
    return first, second


def _produce(bootstrap: str, topic: str, records_by_partition: dict[int, list[ClickRecord]]):
    produce(
        bootstrap,
        topic,
        [
            (key.encode(), json.dumps(value).encode(), partition, timestamp)
            for partition, records in records_by_partition.items()
            for key, value, timestamp in records
        ],
    )


def _sorted(pairs: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return sorted(pairs, key=lambda kv: (kv[0], kv[1]["window_start"]))


def test_click_sessions_restored_after_state_loss(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"click-events-{run_id}", f"click-summaries-{run_id}"
    app_id = f"click-sessions-{run_id}"
    state_dir = tmp_path / "state"
    kafka.create_topic(input_topic, PARTITIONS)
    kafka.create_topic(output_topic, PARTITIONS)
    parts = {p: _parts(p) for p in range(PARTITIONS)}
    expected_first = _sorted(
        [kv for p in parts for kv in reference_summaries(parts[p][0], WINDOW_MS, GRACE_MS)]
    )
    expected_all = _sorted(
        [
            kv
            for p in parts
            for kv in reference_summaries(parts[p][0] + parts[p][1], WINDOW_MS, GRACE_MS)
        ]
    )
    assert any(s["window_start"] == BASE + 40_000 for _, s in expected_first)
    kwargs = {
        "input_topic": input_topic,
        "output_topic": output_topic,
        "window_ms": WINDOW_MS,
        "grace_ms": GRACE_MS,
        "punctuate_interval_ms": PUNCTUATE_MS,
    }
    settings = settings_for(kafka.bootstrap_servers, app_id, state_dir, config=NO_SNAPSHOTS)

    with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, json.loads) as out:
        _produce(kafka.bootstrap_servers, input_topic, {p: parts[p][0] for p in parts})
        with BackgroundRun(
            "topologies.click_sessions:build_topology",
            settings,
            spark=spark,
            topology_kwargs=kwargs,
        ) as run:
            out.wait_for(lambda r: len(r) >= len(expected_first), timeout_s=120, while_alive=run)
            first = run.stop()
        out.wait_until_read(high_watermarks(kafka.bootstrap_servers, output_topic, 2), 30)
        assert _sorted(out.pairs()) == expected_first
        assert first.restored == 0

        assert wipe_application_state(state_dir, app_id) == PARTITIONS

        _produce(kafka.bootstrap_servers, input_topic, {p: parts[p][1] for p in parts})
        with BackgroundRun(
            "topologies.click_sessions:build_topology",
            settings,
            spark=spark,
            topology_kwargs=kwargs,
        ) as run:
            out.wait_for(lambda r: len(r) >= len(expected_all), timeout_s=120, while_alive=run)
            second = run.stop()
        out.wait_until_read(high_watermarks(kafka.bootstrap_servers, output_topic, 2), 30)

    print(f"first run {first}, second run {second}")
    assert second.restored > 0  # both stores came back from their changelogs
    assert second.records == sum(len(parts[p][1]) for p in parts)
    assert _sorted(out.pairs()) == expected_all  # nothing lost, nothing emitted twice
