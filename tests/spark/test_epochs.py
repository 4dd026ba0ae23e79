"""The rows that start a run's epochs, the slot sizing of runs, the checkpoints a run refuses
and the settings and flags it refuses (those of the removed micro-batch runtime among them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from processor_api.cli.run_topology import main
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
    with pytest.raises(ConfigError, match=r"earlier version.*delete that directory"):
        check_checkpoint_mode(str(checkpoint))
    (checkpoint / "offsets" / "3").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"offset":12,"timestamp":0}\n'
    )
    check_checkpoint_mode(str(checkpoint))


@pytest.mark.parametrize("recorded", ["continuous", "available-now"])
def test_a_micro_batch_checkpoint_is_refused_saying_the_runtime_was_removed(
    tmp_path, recorded: str
) -> None:
    """A checkpoint an earlier version's micro-batch run wrote stops the run before anything
    starts, saying what to delete and that the progress kept in Kafka carries on."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "processor_api_mode").write_text(f"{recorded}\n")
    expected = (
        f"written by a micro-batch run \\({recorded}\\) of an earlier version; the micro-batch "
        f"runtime was removed .* delete that directory .* resumes from the progress kept in Kafka"
    )
    with pytest.raises(ConfigError, match=expected):
        check_checkpoint_mode(str(checkpoint))
    assert (checkpoint / "processor_api_mode").read_text() == f"{recorded}\n"  # left as it was


def test_a_checkpoint_of_an_unknown_mode_is_refused_naming_it(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "processor_api_mode").write_text("garbage\n")
    with pytest.raises(ConfigError, match=r"unknown mode 'garbage'.*delete that directory"):
        check_checkpoint_mode(str(checkpoint))


def test_a_checkpoint_without_a_mode_marker_is_refused(tmp_path) -> None:
    """Every run since the marker exists writes it first: batches without it are another
    version's or another program's, which Spark would fail on obscurely."""
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"has no processor_api_mode file.*delete that dir"):
        check_checkpoint_mode(str(checkpoint))


def test_a_new_checkpoint_is_marked_as_one_of_epochs(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    check_checkpoint_mode(str(checkpoint))
    assert (checkpoint / "processor_api_mode").read_text() == "epochs\n"
    check_checkpoint_mode(str(checkpoint))  # and resumed


def test_local_masters_get_a_slot_per_task() -> None:
    cores = os.cpu_count() or 1
    assert local_master("local[2]", 3) == "local[3]"
    assert local_master("local", 2) == "local[2]"
    assert local_master("local[*]", cores + 1) == f"local[{cores + 1}]"
    assert local_master("local[8]", 3) == "local[8]"
    assert local_master("local[2,4]", 3) == "local[3,4]"
    assert local_master("spark://host:7077", 30) == "spark://host:7077"
    assert local_master("local-cluster[2,1,1024]", 30) == "local-cluster[2,1,1024]"


def test_a_non_positive_epoch_interval_is_refused() -> None:
    settings = RunSettings("127.0.0.1:9", epoch_interval_s=0)
    with pytest.raises(ConfigError, match="--epoch-interval must be > 0"):
        TopologyRunner("topologies.count_per_key:build_topology", settings)


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        (["--micro-batches"], "--micro-batches was removed with the micro-batch runtime: every"),
        (
            ["--trigger-interval", "0.5"],
            r"--trigger-interval was removed .* commit.interval.ms .* --epoch-interval",
        ),
        (["--max-records-per-batch", "500"], r"--max-records-per-batch was removed .* commit"),
    ],
)
def test_flags_of_the_removed_micro_batch_runtime_stop_the_run_saying_what_to_use(
    monkeypatch, capsys, flags: list[str], refused: str
) -> None:
    import re

    monkeypatch.setattr(
        "processor_api.cli.run_topology.configure_logging", lambda *args, **kwargs: None
    )
    code = main(
        ["topologies.count_per_key:build_topology", "--bootstrap-servers", "127.0.0.1:1", *flags]
    )
    error = capsys.readouterr().err
    assert code == 2, error
    assert re.search(refused, error), error


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
    ("timed", "stopped_at"),
    [(True, (6, False)), (False, (5, True))],
    ids=["timed epochs", "bounded or available-now epochs"],
)
def test_a_stop_in_timed_epochs_waits_for_the_overdue_epoch_that_started_meanwhile(
    timed: bool, stopped_at: tuple[int, bool]
) -> None:
    """Stopping inside a running batch interrupts its foreachBatch; Spark then matches the
    long Py4J error with a regex that overflows its stream thread's stack (seen in CI: a
    StackOverflowError on the terminal of a run stopped during an outage). In timed epochs
    the runner waits until no trigger is active (the next epoch ends at once after the stop);
    bounded and available-now epochs (their batches follow each other at once) stop as soon
    as the batch in flight is done."""
    runner = TopologyRunner(
        "tests.integration.topologies_for_tests:build_echo",
        RunSettings("127.0.0.1:9"),
        topology_kwargs={"input_topic": "in", "output_topic": "out"},
    )
    runner._timed_epochs = timed
    query = _QueryOverdueTrigger()
    runner._query = query
    runner._graceful_stop()
    assert query.stopped_at == stopped_at
