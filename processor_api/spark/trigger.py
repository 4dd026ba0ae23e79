"""The micro-batch trigger interval when the user gave none.

Wall-clock punctuation on Spark can only fire when a micro-batch reaches the task, so a
punctuation is late by up to one trigger interval plus the batch's own time. With no
``--trigger-interval``, the runtime initializes each sub-topology's processors once on the
driver (against throw-away stores in a temporary directory, nothing sent anywhere) to learn the
WALL_CLOCK_TIME intervals they schedule in ``init()``, and triggers every quarter of the
smallest one, between :data:`MIN_TRIGGER_S` and :data:`DEFAULT_TRIGGER_S`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from processor_api.config import StreamsConfig
from processor_api.engine.global_task import GlobalTask
from processor_api.engine.records import ListCollector
from processor_api.engine.task import Task
from processor_api.logging import get_logger
from processor_api.state.builder import store_factory_in
from processor_api.topology import Topology

_log = get_logger(__name__)

#: The trigger interval without wall-clock punctuation (Spark's usual one-second cadence).
DEFAULT_TRIGGER_S = 1.0
#: The shortest trigger chosen: below it, empty micro-batches cost more than they gain.
MIN_TRIGGER_S = 0.1
#: Batches per smallest wall-clock interval.
BATCHES_PER_INTERVAL = 4


def wall_clock_intervals_ms(topology: Topology, config: StreamsConfig) -> list[int]:
    """The WALL_CLOCK_TIME intervals (ms) the processors of ``topology`` schedule in ``init()``.

    Schedules registered later (in ``process`` or a punctuator) are not seen.
    """
    intervals: list[int] = []
    with tempfile.TemporaryDirectory(prefix="processor-api-trigger-") as scratch:
        # empty global stores: processors may look them up in init()
        global_task = GlobalTask(
            global_stores=topology.global_stores(),
            store_factory=lambda builder, timestamp_fn: builder.build(
                state_dir=Path(scratch) / "global", timestamp_fn=timestamp_fn
            ),
            config=config,
        )
        try:
            for subtopology in topology.subtopologies():
                task_dir = Path(scratch) / subtopology.task_id(0)
                task = Task(
                    subtopology=subtopology,
                    partition=0,
                    store_builders=topology.store_builders,
                    store_factory=store_factory_in(task_dir),
                    collector=ListCollector(),
                    config=config,
                    global_task=global_task,
                )
                try:
                    task.initialize()
                    intervals.extend(task.wall_clock_intervals())
                finally:
                    task.close()
        finally:
            global_task.close()
    return sorted(intervals)


def choose_trigger_s(topology: Topology, config: StreamsConfig) -> float:
    """The trigger interval (seconds) for ``topology`` when the user gave none."""
    try:
        intervals = wall_clock_intervals_ms(topology, config)
    except Exception as exc:  # noqa: BLE001 - a user's init() may need what only executors have
        _log.warning(
            "trigger_probe_failed",
            error=f"{type(exc).__name__}: {exc}",
            trigger_interval_s=DEFAULT_TRIGGER_S,
            detail="could not initialize the processors on the driver to find their "
            "wall-clock schedules; set --trigger-interval to choose",
        )
        return DEFAULT_TRIGGER_S
    if not intervals:
        return DEFAULT_TRIGGER_S
    chosen = intervals[0] / 1000 / BATCHES_PER_INTERVAL
    chosen = min(DEFAULT_TRIGGER_S, max(MIN_TRIGGER_S, chosen))
    _log.info(
        "trigger_chosen",
        trigger_interval_s=chosen,
        smallest_wall_clock_interval_ms=intervals[0],
    )
    return chosen
