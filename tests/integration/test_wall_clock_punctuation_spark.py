"""Wall-clock punctuation in epochs: the poll loop of a task's epoch fires a schedule when it
is due, also in a task whose partition never gets a record, and inside a long epoch, not at
its end."""

from __future__ import annotations

import pytest

from processor_api.serdes import Serdes
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

INTERVAL_MS = 500
#: Far longer than a test: every firing it sees happens inside the first epoch.
LONG_EPOCH_S = 600.0


def test_wall_clock_punctuation_fires_in_a_task_without_input(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"ticker-in-{run_id}", f"ticker-out-{run_id}"
    kafka.create_topic(input_topic, 2)
    kafka.create_topic(output_topic, 1)
    # data in partition 0 only: task 0_1 never gets a record
    produce(kafka.bootstrap_servers, input_topic, [(b"k", b"v", 0), (b"k", b"w", 0)])

    settings = settings_for(
        kafka.bootstrap_servers,
        f"ticker-{run_id}",
        tmp_path / "state",
        epoch_interval_s=LONG_EPOCH_S,
    )
    long = Serdes.long()

    def ticks_of(records: list[tuple], task: str) -> list[int]:
        return [value for key, value, *_ in records if key == task]

    with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, long.deserialize) as out:
        with BackgroundRun(
            "tests.integration.topologies_for_tests:build_ticker",
            settings,
            spark=spark,
            topology_kwargs={
                "input_topic": input_topic,
                "output_topic": output_topic,
                "interval_ms": INTERVAL_MS,
            },
        ) as run:
            # three ticks of the idle task: its loop fired the schedule again and again
            records = out.wait_for(
                lambda r: len(ticks_of(r, "0_1")) >= 3 and len(ticks_of(r, "0_0")) >= 1,
                timeout_s=60,
                while_alive=run,
            )
            ended = run.runner._progress.result.batches
            run.stop()

    assert ended == 0, f"{ended} epochs ended before the idle task's third firing"
    assert {key for key, *_ in records} == {"0_0", "0_1"}
    idle = ticks_of(records, "0_1")
    # one firing per due time, each with the (strictly later) wall-clock time it fired at
    assert all(a < b for a, b in zip(idle, idle[1:], strict=False))


def test_wall_clock_punctuation_fires_when_due_inside_a_long_epoch(kafka, spark, tmp_path):
    """With one epoch of 10 minutes, a 500 ms schedule still fires every 500 ms: the task's
    poll loop fires it when due, as Kafka Streams' stream thread does, not when the epoch
    ends."""
    run_id = uid()
    input_topic, output_topic = f"inside-in-{run_id}", f"inside-out-{run_id}"
    kafka.create_topic(input_topic, 1)
    kafka.create_topic(output_topic, 1)
    settings = settings_for(
        kafka.bootstrap_servers,
        f"inside-{run_id}",
        tmp_path / "state",
        epoch_interval_s=LONG_EPOCH_S,
    )
    long = Serdes.long()
    with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, long.deserialize) as out:
        with BackgroundRun(
            "tests.integration.topologies_for_tests:build_ticker",
            settings,
            spark=spark,
            topology_kwargs={
                "input_topic": input_topic,
                "output_topic": output_topic,
                "interval_ms": INTERVAL_MS,
            },
        ) as run:
            records = out.wait_for(lambda r: len(r) >= 5, timeout_s=60, while_alive=run)
            ended = run.runner._progress.result.batches
            run.stop()
    assert ended == 0, f"{ended} epochs ended before the fifth firing"
    fired = [value for _, value, *_ in records]
    # one firing per due time, each at the (strictly later) wall-clock time it fired at;
    # five firings within 5 s, none more than two intervals after the one before
    assert all(a < b for a, b in zip(fired, fired[1:], strict=False)), fired
    assert fired[4] - fired[0] < 5_000, fired
    gaps = [b - a for a, b in zip(fired[:5], fired[1:5], strict=False)]
    assert all(gap < 2 * INTERVAL_MS for gap in gaps), f"gaps between firings (ms): {gaps}"
