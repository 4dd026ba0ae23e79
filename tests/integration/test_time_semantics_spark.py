"""Time semantics on Spark, in the poll loop of a task's epoch: waiting for a lagging input
(``max.task.idle.ms``) and stream time that advances on an idle input
(``stream.time.idle.advance.ms``)."""

from __future__ import annotations

import pytest

from processor_api.runtime.continuous_input import POLL_RECORDS
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

#: Long enough that no epoch of these runs ends by time: what they check happens inside one.
LONG_EPOCH_S = 600.0


def _merged(kafka, spark, settings, topics: tuple[str, str, str], *, count: int, timeout_s: float):
    """Run ``build_merge_order`` over (left, right, output) until ``count`` outputs arrived;
    returns them and how many epochs had ended by then."""
    left, right, output = topics
    with TopicReader(kafka.bootstrap_servers, output, bytes.decode, bytes.decode) as out:
        with BackgroundRun(
            "tests.integration.time_topologies:build_merge_order",
            settings,
            spark=spark,
            topology_kwargs={"left": left, "right": right, "output": output},
        ) as run:
            records = out.wait_for(lambda r: len(r) >= count, timeout_s=timeout_s, while_alive=run)
            ended = run.runner._progress.result.batches
            run.stop()
    return records, ended


def test_a_task_waits_for_the_input_its_poll_cut_short(kafka, spark, tmp_path):
    """A poll hands out at most ``POLL_RECORDS`` records. With more than that on each of two
    inputs (timestamps interleaved: left even, right odd), the first poll leaves records of
    both inputs on the broker, so one input's queue runs empty while the other's still has
    records. With max.task.idle.ms = 0 the task must not process those while the empty
    input has records on the broker (its lag is known from the fetch): it polls again, and
    the output is in timestamp order."""
    run_id = uid()
    left, right, output = f"wait-l-{run_id}", f"wait-r-{run_id}", f"wait-out-{run_id}"
    for topic in (left, right, output):
        kafka.create_topic(topic, 1)
    per_input = POLL_RECORDS + 1_000
    # timestamps from 2 (librdkafka turns 0 into now): left 2, 4, ...; right 3, 5, ...
    produce(kafka.bootstrap_servers, left,
            [(b"k", f"l{2 * i + 2}".encode(), 0, 2 * i + 2) for i in range(per_input)])  # fmt: skip
    produce(kafka.bootstrap_servers, right,
            [(b"k", f"r{2 * i + 3}".encode(), 0, 2 * i + 3) for i in range(per_input)])  # fmt: skip
    settings = settings_for(
        kafka.bootstrap_servers,
        f"wait-{run_id}",
        tmp_path / "state",
        epoch_interval_s=LONG_EPOCH_S,
        config={"max.task.idle.ms": 0},
    )
    records, _ = _merged(
        kafka, spark, settings, (left, right, output), count=2 * per_input, timeout_s=180
    )
    timestamps = [r.timestamp for r in records]
    out_of_order = [
        (i, a, b) for i, (a, b) in enumerate(zip(timestamps, timestamps[1:], strict=False)) if b < a
    ]
    assert not out_of_order, (
        f"{len(out_of_order)} records processed before an earlier one of the other input, "
        f"e.g. (position, timestamp, next timestamp) {out_of_order[:5]}"
    )
    assert timestamps == list(range(2, 2 * per_input + 2)), "records lost or repeated"


def test_max_task_idle_ms_runs_out_without_new_input(kafka, spark, tmp_path):
    """Left has a record, right has none (lag 0): with max.task.idle.ms = 2_000 the task holds
    the record back, and, no new input coming, its poll loop processes it (enforced) when the
    idle time runs out, inside the epoch, without any further data."""
    run_id = uid()
    left, right, output = f"idle-l-{run_id}", f"idle-r-{run_id}", f"idle-o-{run_id}"
    for topic in (left, right, output):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, left, [(b"k", b"l10", 0, 10)])
    settings = settings_for(
        kafka.bootstrap_servers,
        f"idle-{run_id}",
        tmp_path / "state",
        epoch_interval_s=LONG_EPOCH_S,
        config={"max.task.idle.ms": 2_000},
    )
    records, ended = _merged(kafka, spark, settings, (left, right, output), count=1, timeout_s=90)
    assert [r.value for r in records] == ["l10"]
    assert ended == 0, f"{ended} epochs ended before the record was processed"


def test_stream_time_advances_on_an_idle_input(kafka, spark, tmp_path):
    """One record at 5_000, then nothing: with stream.time.idle.advance.ms = 1_000 the task's
    stream time moves with the wall clock, so its 1 s STREAM_TIME punctuation keeps firing
    (from the poll loop, inside the epoch); off, it would fire once, at 5_000."""
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
        epoch_interval_s=LONG_EPOCH_S,
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
            ended = run.runner._progress.result.batches
            run.stop()
    assert ended == 0, f"{ended} epochs ended before the third tick"
    ticks = [r.value for r in records]
    assert {r.key for r in records} == {"0_0"}
    assert ticks[0] == 5_000
    # each later tick is the stream time it fired at: past the next grid point, rising
    assert all(b >= (a // 1_000 + 1) * 1_000 for a, b in zip(ticks, ticks[1:], strict=False))
