"""The driver's side of a run in epochs: workers, slots, the query, and ending epochs early.

Every worker's call stays open for its epoch (``epoch_function.py``), so the run needs a Spark
task slot per worker at once. A run has one worker per core by default (Kafka Streams'
``num.stream.threads`` per executor otherwise: :func:`worker_count`); in local mode the runner
sizes the slots to the workers (:func:`local_master`); on a cluster it counts them at start
(:func:`slots_of`) and, when short, runs *bounded* epochs: each ends once its tasks caught up
with what their partitions held when it began, so workers take turns on the slots.
"""

from __future__ import annotations

import os
import re
from typing import Any

from processor_api.logging import get_logger
from processor_api.runtime.host_client import host_names, request
from processor_api.runtime.protocol import CutEpochRequest, EndEpochRequest, EpochEnd
from processor_api.topology import Topology

_log = get_logger("processor_api.runner")

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(,\s*\d+)?\])?$")


def local_cores(master: str) -> int | None:
    """The cores of a local master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``);
    None for other masters."""
    match = _LOCAL.match(master.strip())
    if match is None:
        return None
    given = match.group(1)
    return 1 if given is None else (os.cpu_count() or 1) if given == "*" else int(given)


def local_master(master: str, worker_count: int) -> str:
    """``master`` with at least ``worker_count`` slots if it is a local master; other
    masters unchanged."""
    match = _LOCAL.match(master.strip())
    cores = local_cores(master)
    if match is None or cores is None or cores >= worker_count:
        return master
    return f"local[{worker_count}{match.group(2) or ''}]"  # keeps ``,F`` (task failures)


def worker_count(task_count: int, cores: int, executors: int, threads: int | None) -> int:
    """How many workers a run has: ``threads`` per executor (``num.stream.threads``), by
    default one per core (``cores``: all executors' together), never more than tasks."""
    wanted = cores if threads is None else threads * max(1, executors)
    return max(1, min(task_count, wanted))


def executors_of(spark: Any) -> int:
    """How many executors the run has now (1 in local mode)."""
    if local_cores(spark.sparkContext.master) is not None:
        return 1
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(1, len(infos) - 1)  # the driver is listed too


def slots_of(spark: Any) -> int:
    """How many of the run's workers can run at once: Spark's task slots. (The shuffle
    partitions the workers are grouped into are the runner's to set: one per worker.)"""
    return int(spark.sparkContext.defaultParallelism)


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


def epoch_rows(spark: Any, group_keys: dict[str, str], workers: list[str]) -> Any:
    """The streaming DataFrame ``(task, epoch)`` of the run: one row per worker per epoch
    (the column keeps its name ``task``: it holds the worker's group key).

    Spark's ``rate-micro-batch`` source gives every micro-batch exactly ``rowsPerBatch``
    consecutive numbers (0.. in the first), and under ``Trigger.AvailableNow`` exactly one
    batch: number ``v`` is worker ``v mod n``'s row of epoch ``v div n + 1``. A JVM source: no
    Python planner process and no Python reader for these rows (a Python data source needs
    both; measured in bench/RESULTS.md). Its checkpoint offsets are the row numbers."""
    from pyspark.sql import functions as F  # noqa: N812 - pyspark's convention

    count = len(workers)
    keys = F.array(*[F.lit(group_keys[worker]) for worker in workers])
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
    """Ask every worker host of the application's tasks on this machine to commit and end
    its running epoch of run ``run_id`` now, and any epoch of that run that begins later at
    once; returns how many answered. Hosts elsewhere end with the query."""
    return _ask_hosts(state_dir, application_id, task_ids, EndEpochRequest(run_id))


def cut_epochs(
    state_dir: str | os.PathLike[str], application_id: str, task_ids: list[str], run_id: str
) -> int:
    """Ask every worker host of the application's tasks on this machine to commit and end
    the epoch of run ``run_id`` it runs now (an executor was lost: Spark needs the slots for
    the lost workers); later epochs run as usual. Returns how many answered. Hosts elsewhere
    end their epoch at its end."""
    return _ask_hosts(state_dir, application_id, task_ids, CutEpochRequest(run_id))


def _ask_hosts(
    state_dir: str | os.PathLike[str],
    application_id: str,
    task_ids: list[str],
    message: EndEpochRequest | CutEpochRequest,
) -> int:
    answered = 0
    for name in host_names(state_dir, application_id, task_ids):
        try:
            reply = request(name, message, timeout_s=10.0)
        except (OSError, ConnectionError):
            continue  # a host that is gone (its executor was lost) or not started
        if reply is not None:
            answered += 1
    return answered
