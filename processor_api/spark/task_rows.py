"""The rows of a micro-batch: each input range keyed by its task, plus one bootstrap row per task.

Every planned offset range ``(topic, partition, start, end)`` of the Kafka source goes to the
group key of task ``"<subtopology>_<partition>"`` (``task_keys.py``: salted so that tasks spread
over Spark's shuffle partitions); the bootstrap source adds a row per task so that every task
runs in the first micro-batch, with or without input.
"""

from __future__ import annotations

import json
from typing import Any

from processor_api.kafka.topics import TopicPlan

RANGE_COLUMNS = ["topic", "partition", "start", "end"]


def task_rows(
    spark: Any,
    reader: Any,
    plan: TopicPlan,
    checkpoint_dir: str,
    end_offsets_cap: dict[tuple[str, int], int] | None,
) -> Any:
    """The streaming DataFrame ``(task, topic, partition, start, end)`` of a run."""
    from pyspark.sql import functions as F

    from processor_api.spark.bootstrap_source import BOOTSTRAP_FORMAT
    from processor_api.spark.task_keys import load_or_plan_group_keys

    if end_offsets_cap:
        caps: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in end_offsets_cap.items():
            caps.setdefault(topic, {})[str(partition)] = offset
        reader = reader.option("end.offsets", json.dumps(caps))
    ranges = reader.load()
    subtopology_of = F.create_map(
        *[
            item
            for topic, sub in plan.topic_to_subtopology.items()
            for item in (F.lit(topic), F.lit(str(sub)))
        ]
    )
    group_keys = load_or_plan_group_keys(
        checkpoint_dir, plan.task_ids, int(spark.conf.get("spark.sql.shuffle.partitions"))
    )
    group_key_of = F.create_map(
        *[item for task_id, key in group_keys.items() for item in (F.lit(task_id), F.lit(key))]
    )
    task_column = F.element_at(
        group_key_of,
        F.concat(
            F.element_at(subtopology_of, F.col("topic")),
            F.lit("_"),
            F.col("partition").cast("string"),
        ),
    )
    keyed = ranges.select(task_column.alias("task"), *RANGE_COLUMNS)
    bootstrap = (
        spark.readStream.format(BOOTSTRAP_FORMAT)
        .option("tasks", json.dumps([group_keys[task_id] for task_id in plan.task_ids]))
        .load()
    )
    return keyed.unionByName(bootstrap.select("task", *RANGE_COLUMNS))
