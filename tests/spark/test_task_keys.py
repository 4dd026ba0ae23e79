"""Group keys: a Python port of Spark's string hash, and tasks spread over shuffle partitions."""

from __future__ import annotations

import json

import pytest

from processor_api.spark.task_keys import (
    TASK_KEYS_FILE,
    load_or_plan_group_keys,
    plan_group_keys,
    spark_partition_of,
    spark_string_hash,
    task_id_of,
)

STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "0_0",
    "0_1",
    "0_2",
    "12_345#67",
    "é",
    "ünïcödé-ß",
    "\u00ff\u00fe",
    "日本語のテキスト",
    "x" * 37,
]


@pytest.mark.integration
def test_the_port_equals_sparks_hash_function(spark):
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(s,) for s in STRINGS], "s string")
    by_spark = dict(frame.select("s", F.hash("s").alias("h")).collect())
    assert {s: spark_string_hash(s) for s in STRINGS} == by_spark


@pytest.mark.integration
@pytest.mark.parametrize("partitions", [3, 5])
def test_spark_puts_each_task_into_its_own_partition(spark, partitions):
    from pyspark.sql import functions as F

    task_ids = [f"{sub}_{p}" for sub in range(2) for p in range(partitions // 2 + 1)]
    keys = plan_group_keys(task_ids, partitions)
    assert [task_id_of(keys[t]) for t in task_ids] == task_ids
    frame = spark.createDataFrame([(keys[t],) for t in task_ids], "task string")
    placed = dict(
        frame.repartition(partitions, "task")
        .select("task", F.spark_partition_id().alias("p"))
        .collect()
    )
    assert {t: placed[keys[t]] for t in task_ids} == {
        t: i % partitions for i, t in enumerate(task_ids)
    }
    assert all(spark_partition_of(keys[t], partitions) == placed[keys[t]] for t in task_ids)


def test_bare_ids_collide_which_is_why_keys_are_salted():
    assert {spark_partition_of(t, 3) for t in ["0_0", "0_1", "0_2"]} == {1}
    keys = plan_group_keys(["0_0", "0_1", "0_2"], 3)
    assert sorted(spark_partition_of(k, 3) for k in keys.values()) == [0, 1, 2]


def test_keys_are_recorded_in_the_checkpoint_and_reused(tmp_path):
    keys = load_or_plan_group_keys(tmp_path, ["0_0", "0_1", "0_2"], 3)
    recorded = json.loads((tmp_path / TASK_KEYS_FILE).read_text())
    assert recorded == {"partitions": 3, "keys": keys}
    # a later start with another partition count keeps the checkpoint's keys
    assert load_or_plan_group_keys(tmp_path, ["0_0", "0_1", "0_2"], 7) == keys


def test_a_new_task_gets_a_key_for_the_recorded_partition_count(tmp_path):
    keys = load_or_plan_group_keys(tmp_path, ["0_0", "0_1"], 2)
    grown = load_or_plan_group_keys(tmp_path, ["0_0", "0_1", "0_2"], 9)
    assert {t: grown[t] for t in keys} == keys
    assert spark_partition_of(grown["0_2"], 2) == 0  # index 2 of 2 partitions
    assert json.loads((tmp_path / TASK_KEYS_FILE).read_text())["keys"] == grown


def test_a_checkpoint_from_before_group_keys_keeps_the_bare_ids(tmp_path):
    (tmp_path / "offsets").mkdir()
    assert load_or_plan_group_keys(tmp_path, ["0_0", "0_1"], 2) == {"0_0": "0_0", "0_1": "0_1"}
    assert not (tmp_path / TASK_KEYS_FILE).exists()
