"""The driver's side of a run in epochs: slots, the query, and ending epochs early.

Every task's call stays open for its epoch (``epoch_function.py``), so the run needs a Spark
task slot per task at once. In local mode the runner sizes the slots (:func:`local_master`);
on a cluster it counts them at start (:func:`slots_of`) and, when short, runs *bounded*
epochs: each ends once its task caught up with what its partitions held when it began, so
tasks take turns on the slots.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from processor_api.logging import get_logger
from processor_api.runtime.host_client import HOST_FILE, request
from processor_api.runtime.protocol import EndEpochRequest, EpochEnd
from processor_api.topology import Topology

_log = get_logger("processor_api.runner")

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(,\s*\d+)?\])?$")


def local_master(master: str, task_count: int) -> str:
    """``master`` with at least ``task_count`` slots if it is a local master (``local``,
    ``local[N]``, ``local[*]``, ``local[N,F]``); other masters unchanged."""
    match = _LOCAL.match(master.strip())
    if match is None:
        return master
    given = match.group(1)
    cores = os.cpu_count() or 1
    slots = 1 if given is None else cores if given == "*" else int(given)
    if slots >= task_count:
        return master
    return f"local[{task_count}{match.group(2) or ''}]"  # keeps ``,F`` (task failures)


def slots_of(spark: Any) -> int:
    """How many of the run's tasks can run at once: Spark's task slots, and the shuffle
    partitions the tasks are grouped into (tasks sharing one run one after the other)."""
    parallelism = int(spark.sparkContext.defaultParallelism)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    return min(parallelism, partitions)


def reset_policies(topology: Topology, internal_topics: list[str]) -> dict[str, str]:
    """Per source topic, where a task without a committed position starts."""
    policies = {topic: "earliest" for topic in internal_topics}
    for node in topology.nodes.values():
        if hasattr(node, "offset_reset") and hasattr(node, "topics"):
            for topic in node.topics:
                policies.setdefault(topic, node.offset_reset)
    return policies


#: Spark's built-in source of a fixed number of rows per micro-batch (since Spark 3.3).
RATE_PER_BATCH_FORMAT = "rate-micro-batch"


def epoch_rows(spark: Any, group_keys: dict[str, str], task_ids: list[str]) -> Any:
    """The streaming DataFrame ``(task, epoch)`` of the run: one row per task per epoch.

    Spark's ``rate-micro-batch`` source gives every micro-batch exactly ``rowsPerBatch``
    consecutive numbers (0.. in the first), and under ``Trigger.AvailableNow`` exactly one
    batch: number ``v`` is task ``v mod n``'s row of epoch ``v div n + 1``. A JVM source: no
    Python planner process and no Python reader for these rows (a Python data source needs
    both; measured in bench/RESULTS.md). Its checkpoint offsets are the row numbers."""
    from pyspark.sql import functions as F  # noqa: N812 - pyspark's convention

    count = len(task_ids)
    keys = F.array(*[F.lit(group_keys[task_id]) for task_id in task_ids])
    numbers = (
        spark.readStream.format(RATE_PER_BATCH_FORMAT)
        .option("rowsPerBatch", count)
        .option("numPartitions", 1)
        .load()
    )
    return numbers.select(
        F.element_at(keys, (F.col("value") % count + 1).cast("int")).alias("task"),
        (F.floor(F.col("value") / count) + 1).cast("long").alias("epoch"),
    )


#: How much longer than an epoch the trigger interval of continuous epochs is. Spark's
#: rate-micro-batch source always has a next batch, so without a trigger each epoch would be
#: planned the moment the previous one ends and a stop would nearly always cancel one; with
#: this slack Spark idles ~1 s between epochs (the hosts go on processing meanwhile) and a
#: stop finds the query between batches.
TRIGGER_SLACK_S = 2.0


def epoch_trigger_s(end: EpochEnd) -> float:
    """The processing-time trigger interval of continuous epochs of length ``end``."""
    assert end.duration_s is not None, "continuous epochs have a length"
    return end.duration_s + TRIGGER_SLACK_S


def end_epochs(
    state_dir: str | os.PathLike[str], application_id: str, task_ids: list[str], run_id: str
) -> int:
    """Ask every host of the application's tasks on this machine to commit and end its
    running epoch of run ``run_id`` now, and any epoch of that run that begins later at once;
    returns how many answered. Hosts elsewhere end with the query."""
    answered = 0
    for task_id in task_ids:
        try:
            name = (Path(state_dir) / application_id / task_id / HOST_FILE).read_text().strip()
        except OSError:
            continue
        try:
            reply = request(name, EndEpochRequest(run_id), timeout_s=10.0)
        except (OSError, ConnectionError):
            continue
        if reply is not None:
            answered += 1
    return answered
