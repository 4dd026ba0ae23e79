"""The rows that start a run's epochs, the slot sizing of runs in epochs, and the settings of
the two runtimes (epochs, the default, and the deprecated micro-batches)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from processor_api.errors import ConfigError
from processor_api.spark.epochs import epoch_rows, local_master
from processor_api.spark.resume import check_checkpoint_mode
from processor_api.spark.runner import RunSettings, TopologyRunner


def _one_available_now_query(spark, checkpoint: Path, keys: dict[str, str]) -> list[tuple]:
    seen: list[tuple] = []
    query = (
        epoch_rows(spark, keys, sorted(keys))
        .writeStream.foreachBatch(
            lambda frame, _: seen.extend(tuple(row) for row in frame.collect())
        )
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the available-now query did not end"
    return sorted(seen)


@pytest.mark.integration
def test_an_available_now_query_runs_one_epoch_with_one_row_per_task(spark, tmp_path) -> None:
    keys = {"0_0": "0_0#1", "0_1": "0_1#4", "1_0": "1_0"}
    checkpoint = tmp_path / "checkpoint"
    first = _one_available_now_query(spark, checkpoint, keys)
    assert first == [("0_0#1", 1), ("0_1#4", 1), ("1_0", 1)]
    second = _one_available_now_query(spark, checkpoint, keys)  # resumed: the next epoch
    assert second == [("0_0#1", 2), ("0_1#4", 2), ("1_0", 2)]


def test_a_checkpoint_of_the_python_epoch_source_is_refused_with_what_to_do(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "processor_api_mode").write_text("epochs\n")
    (checkpoint / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"epoch":4}\n')
    with pytest.raises(ConfigError, match=r"earlier version.*Delete that directory"):
        check_checkpoint_mode(str(checkpoint), available_now=False, epochs=True)
    (checkpoint / "offsets" / "3").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"offset":12,"timestamp":0}\n'
    )
    check_checkpoint_mode(str(checkpoint), available_now=False, epochs=True)


@pytest.mark.parametrize(
    ("recorded", "flags"),
    [
        ("continuous", "--micro-batches, without --available-now"),
        ("available-now", "--micro-batches --available-now"),
    ],
)
def test_a_micro_batch_checkpoint_is_refused_by_the_default_run_naming_its_flags(
    tmp_path, recorded: str, flags: str
) -> None:
    """Runs in epochs are the default now: a checkpoint an earlier version's default run wrote
    stops the run before anything starts, saying how to resume it or what to delete."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "processor_api_mode").write_text(f"{recorded}\n")
    expected = (
        f"written by a micro-batch run \\({recorded}\\) and cannot be resumed by a run in "
        f"epochs .* run as it was \\({flags}\\), or delete that directory"
    )
    for available_now in (False, True):
        with pytest.raises(ConfigError, match=expected):
            check_checkpoint_mode(str(checkpoint), available_now=available_now, epochs=True)


def test_a_checkpoint_of_an_unknown_mode_is_refused_naming_it(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "processor_api_mode").write_text("garbage\n")
    with pytest.raises(ConfigError, match=r"micro-batch run \(garbage\).*unknown mode 'garbage'"):
        check_checkpoint_mode(str(checkpoint), available_now=False, epochs=True)


def test_local_masters_get_a_slot_per_task() -> None:
    cores = os.cpu_count() or 1
    assert local_master("local[2]", 3) == "local[3]"
    assert local_master("local", 2) == "local[2]"
    assert local_master("local[*]", cores + 1) == f"local[{cores + 1}]"
    assert local_master("local[8]", 3) == "local[8]"
    assert local_master("local[2,4]", 3) == "local[3,4]"
    assert local_master("spark://host:7077", 30) == "spark://host:7077"
    assert local_master("local-cluster[2,1,1024]", 30) == "local-cluster[2,1,1024]"


@pytest.mark.parametrize(
    ("settings", "config", "refused"),
    [
        ({"trigger_interval_s": 1.0}, {}, "--trigger-interval applies to micro-batch runs"),
        ({"max_records_per_batch": 10}, {}, "--max-records-per-batch applies to micro"),
        (
            {"trigger_interval_s": 1.0, "max_records_per_batch": 10},
            {},
            "--trigger-interval and --max-records-per-batch apply to micro",
        ),
        ({"epoch_interval_s": 0}, {}, "--epoch-interval must be > 0"),
        ({"epochs": False}, {"commit.interval.ms": "100"}, "commit.interval.ms applies to runs"),
    ],
)
def test_settings_of_the_other_mode_are_refused(settings, config, refused) -> None:
    run_settings = RunSettings("127.0.0.1:9", config=config, **settings)
    with pytest.raises(ConfigError, match=refused):
        TopologyRunner("topologies.count_per_key:build_topology", run_settings)


def test_a_micro_batch_run_says_once_that_the_runtime_is_deprecated() -> None:
    topology = "tests.integration.topologies_for_tests:build_echo"
    kwargs = {"input_topic": "in", "output_topic": "out"}
    with capture_logs() as logs:
        TopologyRunner(topology, RunSettings("127.0.0.1:9"), topology_kwargs=kwargs)
    assert [e for e in logs if e["event"] == "micro_batches_deprecated"] == []
    with capture_logs() as logs:
        TopologyRunner(topology, RunSettings("127.0.0.1:9", epochs=False), topology_kwargs=kwargs)
    (warning,) = [e for e in logs if e["event"] == "micro_batches_deprecated"]
    assert warning["log_level"] == "warning" and "--micro-batches" in warning["detail"]


class _QueryOverdueTrigger:
    """A query whose running batch 5 ends while its next, overdue trigger starts at once
    (batch 6), after which no trigger is active. Each look at ``status`` is one poll."""

    isActive = True  # noqa: N815 - pyspark's name

    def __init__(self) -> None:
        self.polls = 0
        self.stopped_at: tuple[int, bool] | None = None

    def _phase(self) -> tuple[int, bool]:
        """(last finished batch, a trigger active) at this poll."""
        if self.polls < 5:
            return 4, True
        if self.polls < 10:
            return 5, True
        return 6, False

    @property
    def status(self) -> dict:
        self.polls += 1
        return {"isTriggerActive": self._phase()[1]}

    @property
    def lastProgress(self) -> dict:  # noqa: N802 - pyspark's name
        return {"batchId": self._phase()[0]}

    def stop(self) -> None:
        self.stopped_at = self._phase()


@pytest.mark.parametrize(
    ("epochs", "timed", "stopped_at"),
    [(True, True, (6, False)), (True, False, (5, True)), (False, False, (5, True))],
    ids=["timed epochs", "bounded epochs", "micro-batches"],
)
def test_a_stop_in_timed_epochs_waits_for_the_overdue_epoch_that_started_meanwhile(
    epochs: bool, timed: bool, stopped_at: tuple[int, bool]
) -> None:
    """Stopping inside a running batch interrupts its foreachBatch; Spark then matches the
    long Py4J error with a regex that overflows its stream thread's stack (seen in CI: a
    StackOverflowError on the terminal of a run stopped during an outage). In timed epochs
    the runner waits until no trigger is active (the next epoch ends at once after the stop);
    bounded epochs (their batches follow each other at once) and micro-batches keep stopping
    as soon as the batch in flight is done."""
    runner = TopologyRunner(
        "tests.integration.topologies_for_tests:build_echo",
        RunSettings("127.0.0.1:9", epochs=epochs),
        topology_kwargs={"input_topic": "in", "output_topic": "out"},
    )
    runner._timed_epochs = timed
    query = _QueryOverdueTrigger()
    runner._query = query
    runner._graceful_stop()
    assert query.stopped_at == stopped_at
