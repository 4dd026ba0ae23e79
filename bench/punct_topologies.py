"""Topologies used only by the punctuation benchmarks (importable by Spark executors).

* :func:`build_check_overhead` - count per key (as ``topologies.count_per_key``) plus
  ``schedules`` STREAM_TIME schedules that are never due after the first record: what the
  per-record punctuation check costs.
* :func:`build_lag_probe` - a WALL_CLOCK_TIME schedule whose punctuator forwards
  ``{"task", "due_ms", "fire_ms", "lag_ms"}``: ``fire_ms`` is the wall clock when the punctuator
  runs, ``due_ms`` the grid point it is due at (registration time + k x interval, tracked in the
  task's store so it survives the task being re-created, as it was every micro-batch in the
  micro-batch runtime).
"""

from __future__ import annotations

import time

from processor_api import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Serdes,
    Stores,
    Topology,
)
from processor_api.engine.punctuation import next_due_after
from topologies.count_per_key import CountProcessor

NEVER_MS = 10**12  # an interval no benchmark reaches after the first firing


class _CheckedCounter(CountProcessor):
    def __init__(self, store_name: str, schedules: int) -> None:
        super().__init__(store_name)
        self.schedules = schedules

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        for _ in range(self.schedules):
            context.schedule(NEVER_MS, PunctuationType.STREAM_TIME, self._noop)

    def _noop(self, timestamp: int) -> None:
        pass


def build_check_overhead(
    *, input_topic: str = "count-input", store_name: str = "counts", schedules: int = 1
) -> Topology:
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        .add_source("SOURCE", input_topic, key_serde=Serdes.string(), value_serde=Serdes.bytes())
        .add_processor("COUNTER", lambda: _CheckedCounter(store_name, schedules), "SOURCE")
        .add_state_store(store, "COUNTER")
    )


class LagProbe(Processor):
    """Forwards one JSON record per WALL_CLOCK_TIME punctuation with its lag behind the grid."""

    NEXT_DUE = "__next_due"

    def __init__(self, interval_ms: int, store_name: str) -> None:
        self.interval_ms = interval_ms
        self.store_name = store_name

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)
        if self.store.get(self.NEXT_DUE) is None:
            # the schedule below is first due at its registration time + interval
            self.store.put(self.NEXT_DUE, context.current_system_time_ms() + self.interval_ms)
        context.schedule(self.interval_ms, PunctuationType.WALL_CLOCK_TIME, self.on_wall_clock)

    def process(self, record: Record) -> None:
        if record.key is not None:
            self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def on_wall_clock(self, timestamp: int) -> None:
        fire_ms = time.time_ns() // 1_000_000
        due = self.store.get(self.NEXT_DUE)
        self.context.forward(
            Record(
                self.context.task_id,
                {
                    "task": self.context.task_id,
                    "due_ms": due,
                    "fire_ms": fire_ms,
                    "now_ms": timestamp,
                    "lag_ms": fire_ms - due,
                },
                timestamp,
            )
        )
        self.store.put(self.NEXT_DUE, next_due_after(due, self.interval_ms, timestamp))


def build_lag_probe(
    *,
    input_topic: str = "lag-input",
    output_topic: str = "lag-output",
    interval_ms: int = 1000,
    store_name: str = "probe",
) -> Topology:
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        .add_source("SOURCE", input_topic, key_serde=Serdes.string(), value_serde=Serdes.bytes())
        .add_processor("PROBE", lambda: LagProbe(interval_ms, store_name), "SOURCE")
        .add_state_store(store, "PROBE")
        .add_sink(
            "SINK", output_topic, "PROBE", key_serde=Serdes.string(), value_serde=Serdes.json()
        )
    )
