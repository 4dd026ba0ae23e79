"""The epoch source's offsets and the slot sizing of runs in epochs (no Spark started)."""

from __future__ import annotations

import os

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from processor_api.errors import ConfigError
from processor_api.spark.epoch_source import EpochStreamReader
from processor_api.spark.epochs import local_master
from processor_api.spark.runner import RunSettings, TopologyRunner


def test_every_trigger_plans_the_next_epoch_with_one_row_per_task() -> None:
    reader = EpochStreamReader(["0_0#1", "0_1#4"])
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert (start, end) == ({"epoch": 0}, {"epoch": 1})
    (partition,) = reader.partitions(start, end)
    assert list(reader.read(partition)) == [("0_0#1", 1), ("0_1#4", 1)]
    assert reader.latestOffset(end, ReadAllAvailable()) == {"epoch": 2}


def test_an_available_now_query_runs_exactly_one_epoch() -> None:
    reader = EpochStreamReader(["0_0"])
    reader.prepareForTriggerAvailableNow()
    first = reader.latestOffset({"epoch": 7}, ReadAllAvailable())
    assert first == {"epoch": 8}
    assert reader.latestOffset(first, ReadAllAvailable()) == first  # no new data: the end
    assert reader.partitions(first, first) == []


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
        ({"epochs": True, "trigger_interval_s": 1.0}, {}, "--trigger-interval apply to micro"),
        ({"epochs": True, "max_records_per_batch": 10}, {}, "--max-records-per-batch apply"),
        ({"epochs": True, "epoch_interval_s": 0}, {}, "--epoch-interval must be > 0"),
        ({}, {"commit.interval.ms": "100"}, "commit.interval.ms applies to runs in epochs"),
    ],
)
def test_settings_of_the_other_mode_are_refused(settings, config, refused) -> None:
    run_settings = RunSettings("127.0.0.1:9", config=config, **settings)
    with pytest.raises(ConfigError, match=refused):
        TopologyRunner("topologies.count_per_key:build_topology", run_settings)
