"""Wall-clock punctuation without input: the processing-time timeout of
``applyInPandasWithState`` must wake a task whose partition never gets a record."""

from __future__ import annotations

import pytest

from processor_api.serdes import Serdes
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

INTERVAL_MS = 500


def test_wall_clock_punctuation_fires_in_a_task_without_input(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"ticker-in-{run_id}", f"ticker-out-{run_id}"
    kafka.create_topic(input_topic, 2)
    kafka.create_topic(output_topic, 1)
    # data in partition 0 only: task 0_1 never gets a record
    produce(kafka.bootstrap_servers, input_topic, [(b"k", b"v", 0), (b"k", b"w", 0)])

    settings = settings_for(kafka.bootstrap_servers, f"ticker-{run_id}", tmp_path / "state")
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
            # three ticks of the idle task: it was woken again and again, not only once
            records = out.wait_for(
                lambda r: len(ticks_of(r, "0_1")) >= 3 and len(ticks_of(r, "0_0")) >= 1,
                timeout_s=60,
                while_alive=run,
            )
            run.stop()

    assert {key for key, *_ in records} == {"0_0", "0_1"}
    idle = ticks_of(records, "0_1")
    # one firing per due time, each with the (strictly later) wall-clock time it fired at
    assert all(a < b for a, b in zip(idle, idle[1:], strict=False))


TRIGGER_S = 30.0


def test_wall_clock_punctuation_fires_between_micro_batches(kafka, spark, tmp_path):
    """With micro-batches 30 s apart, a 500 ms schedule still fires every 500 ms: the task's
    host fires it when due, as Kafka Streams' stream thread does, not at the next batch."""
    run_id = uid()
    input_topic, output_topic = f"between-in-{run_id}", f"between-out-{run_id}"
    kafka.create_topic(input_topic, 1)
    kafka.create_topic(output_topic, 1)
    settings = settings_for(
        kafka.bootstrap_servers,
        f"between-{run_id}",
        tmp_path / "state",
        trigger_interval_s=TRIGGER_S,
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
            run.stop()
    fired = [value for _, value, *_ in records]
    # Spark starts a processing-time batch at most once per trigger interval: five firings
    # within 5 s of each other, 500 ms apart, cannot all be micro-batches
    assert all(a < b for a, b in zip(fired, fired[1:], strict=False))
    assert fired[4] - fired[0] < 5_000
    assert all(b - a < 2 * INTERVAL_MS for a, b in zip(fired[:5], fired[1:5], strict=False))
