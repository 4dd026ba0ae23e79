"""Time semantics on Spark: waiting for a lagging input
(``max.task.idle.ms``) and stream time that advances on an idle input
(``stream.time.idle.advance.ms``)."""

from __future__ import annotations

import pytest

from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration


def _merged(kafka, spark, settings, topics: tuple[str, str, str], *, count: int, timeout_s: float):
    """Run ``build_merge_order`` over (left, right, output) until ``count`` outputs arrived."""
    left, right, output = topics
    with TopicReader(kafka.bootstrap_servers, output, bytes.decode, bytes.decode) as out:
        with BackgroundRun(
            "tests.integration.time_topologies:build_merge_order",
            settings,
            spark=spark,
            topology_kwargs={"left": left, "right": right, "output": output},
        ) as run:
            records = out.wait_for(lambda r: len(r) >= count, timeout_s=timeout_s, while_alive=run)
            run.stop()
    return records


def test_a_task_waits_for_the_input_the_batch_cut_short(kafka, spark, tmp_path):
    """max.records.per.batch = 3 plans the first batch as left[0, 2) and right[0, 1): after
    right's only record the task must not process left's 10 and 30 while right's 20 is on the
    broker; it holds them and goes on in the next batch, in timestamp order."""
    run_id = uid()
    left, right, output = f"wait-l-{run_id}", f"wait-r-{run_id}", f"wait-out-{run_id}"
    for topic in (left, right, output):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, left, [(b"k", b"l10", 0, 10), (b"k", b"l30", 0, 30)])
    produce(kafka.bootstrap_servers, right, [(b"k", b"r5", 0, 5), (b"k", b"r20", 0, 20)])
    settings = settings_for(
        kafka.bootstrap_servers,
        f"wait-{run_id}",
        tmp_path / "state",
        max_records_per_batch=3,
        config={"max.task.idle.ms": 0},
    )
    records = _merged(kafka, spark, settings, (left, right, output), count=4, timeout_s=120)
    # without waiting: r5, l10, l30, r20 (l30 before r20, out of timestamp order)
    assert [r.value for r in records] == ["r5", "l10", "r20", "l30"]
    assert [r.timestamp for r in records] == [5, 10, 20, 30]


def test_max_task_idle_ms_runs_out_without_new_input(kafka, spark, tmp_path):
    """Left has a record, right has none (lag 0): with max.task.idle.ms = 2_000 the task holds
    the record back, and, no new input coming, the processing-time timeout wakes it when the
    idle time runs out, so the record is processed (enforced) without any further data."""
    run_id = uid()
    left, right, output = f"idle-l-{run_id}", f"idle-r-{run_id}", f"idle-o-{run_id}"
    for topic in (left, right, output):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, left, [(b"k", b"l10", 0, 10)])
    settings = settings_for(
        kafka.bootstrap_servers,
        f"idle-{run_id}",
        tmp_path / "state",
        config={"max.task.idle.ms": 2_000},
    )
    records = _merged(kafka, spark, settings, (left, right, output), count=1, timeout_s=90)
    assert [r.value for r in records] == ["l10"]


def test_stream_time_advances_on_an_idle_input(kafka, spark, tmp_path):
    """One record at 5_000, then nothing: with stream.time.idle.advance.ms = 1_000 the task's
    stream time moves with the wall clock, so its 1 s STREAM_TIME punctuation keeps firing
    (the processing-time timeout wakes the task); off, it would fire once, at 5_000."""
    from processor_api.serdes import Serdes

    run_id = uid()
    input_topic, output_topic = f"idle-in-{run_id}", f"idle-out-{run_id}"
    kafka.create_topic(input_topic, 1)
    kafka.create_topic(output_topic, 1)
    produce(kafka.bootstrap_servers, input_topic, [(b"k", b"v", 0, 5_000)])
    settings = settings_for(
        kafka.bootstrap_servers,
        f"idle-{run_id}",
        tmp_path / "state",
        config={"stream.time.idle.advance.ms": 1_000},
    )
    long = Serdes.long()
    with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, long.deserialize) as out:
        with BackgroundRun(
            "tests.integration.time_topologies:build_stream_time_ticker",
            settings,
            spark=spark,
            topology_kwargs={
                "input_topic": input_topic,
                "output_topic": output_topic,
                "interval_ms": 1_000,
            },
        ) as run:
            records = out.wait_for(lambda r: len(r) >= 3, timeout_s=120, while_alive=run)
            run.stop()
    ticks = [r.value for r in records]
    assert {r.key for r in records} == {"0_0"}
    assert ticks[0] == 5_000
    # each later tick is the stream time it fired at: past the next grid point, rising
    assert all(b >= (a // 1_000 + 1) * 1_000 for a, b in zip(ticks, ticks[1:], strict=False))
