"""The epoch source's offsets and the slot sizing of runs in epochs (no Spark started)."""

from __future__ import annotations

import os

from pyspark.sql.streaming.datasource import ReadAllAvailable

from processor_api.spark.epoch_source import EpochStreamReader
from processor_api.spark.epochs import local_master


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
