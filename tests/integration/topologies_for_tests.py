"""Topologies used only by the integration tests.

Spark's Python workers import them by reference (``tests.integration.topologies_for_tests:
build_...``), so this module must stay importable from the repository root (``tests/conftest.py``
puts the root on ``PYTHONPATH`` before the shared SparkSession starts).
"""

from __future__ import annotations

import os

from processor_api import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Serdes,
    Stores,
    Topology,
)

DEFAULT_TICK_INTERVAL_MS = 500


class WallClockTicker(Processor):
    """Forwards ``(task id, wall-clock time)`` on every WALL_CLOCK_TIME punctuation.

    Input records are ignored: the point is that the punctuation fires in a task that never
    gets any input.
    """

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        context.schedule(self.interval_ms, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def tick(self, timestamp: int) -> None:
        assert self.context is not None
        self.context.forward(Record(self.context.task_id, timestamp, timestamp))

    def process(self, record: Record) -> None:
        pass


def build_ticker(
    *,
    input_topic: str = "ticker-input",
    output_topic: str = "ticker-output",
    interval_ms: int = DEFAULT_TICK_INTERVAL_MS,
) -> Topology:
    """``input_topic`` -> ``ticker`` (wall-clock punctuation) -> ``output_topic`` (string, long)."""
    interval_ms = int(interval_ms)
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("ticker", lambda: WallClockTicker(interval_ms), "in")
        .add_sink(
            "ticks", output_topic, "ticker", key_serde=Serdes.string(), value_serde=Serdes.long()
        )
    )


class LifetimeProcessor(Processor):
    """Counts per key and ticks on stream time; logs every ``init()``/``close()`` to a file.

    The log lines are ``init <task> <pid>`` and ``close <task> <pid>``, so a test can count
    how often Spark (re)built each task.
    """

    def __init__(self, log_path: str, interval_ms: int) -> None:
        self.log_path = log_path
        self.interval_ms = interval_ms

    def _log(self, what: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"{what} {self.context.task_id} {os.getpid()}\n")

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("lifetime-counts")
        context.schedule(self.interval_ms, PunctuationType.STREAM_TIME, self.tick)
        self._log("init")

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record(self.context.task_id, timestamp, timestamp), child="ticks")

    def process(self, record: Record) -> None:
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        key = f"{self.context.task_id}/{record.key}"  # keys are counted per task
        self.context.forward(record.with_key(key).with_value(count), child="counts")

    def close(self) -> None:
        self._log("close")


def build_lifetime(
    input_topic: str, ticks_topic: str, counts_topic: str, log_path: str, interval_ms: int
) -> Topology:
    """Input -> LifetimeProcessor (store ``lifetime-counts``) -> sinks ``ticks`` and ``counts``."""
    string, long = Serdes.string(), Serdes.long()
    topology = Topology()
    topology.add_source("input", input_topic, key_serde=string, value_serde=string)
    topology.add_processor("lifetime", lambda: LifetimeProcessor(log_path, interval_ms), "input")
    topology.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("lifetime-counts"), string, long
        ),
        "lifetime",
    )
    topology.add_sink("ticks", ticks_topic, "lifetime", key_serde=string, value_serde=long)
    topology.add_sink("counts", counts_topic, "lifetime", key_serde=string, value_serde=long)
    return topology


def build_echo(*, input_topic: str = "echo-input", output_topic: str = "echo-output") -> Topology:
    """``input_topic`` -> ``output_topic`` unchanged (string keys and values)."""
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_sink("out", output_topic, "in", key_serde=Serdes.string(), value_serde=Serdes.string())
    )


class PutLatest(Processor):
    """The processor of a read-only state store: the latest value of each key."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: ProcessorContext) -> None:
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        if record.key is not None:
            self.store.put(record.key, record.value)


class LookUp(Processor):
    """Forwards each record with the value its key has in a store: ``"<value>@<looked up>"``."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(f"{record.value}@{self.store.get(record.key)}"))


def build_read_only_lookup(
    prices_topic: str = "prices", orders_topic: str = "orders", output_topic: str = "priced"
) -> Topology:
    """A read-only state store ``prices`` fed by ``prices_topic``, looked up by the orders of
    the same key (the two topics are co-partitioned: one task per partition holds both)."""
    string = Serdes.string()
    prices = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("prices"), string, string
    )
    return (
        Topology()
        .add_read_only_state_store(
            prices, "prices-source", string, string, prices_topic, "prices-updater",
            lambda: PutLatest("prices"),
        )
        .add_source("orders", orders_topic, key_serde=string, value_serde=string)
        .add_processor("lookup", lambda: LookUp("prices"), "orders")
        .connect_processor_and_state_stores("lookup", "prices")
        .add_sink("priced", output_topic, "lookup", key_serde=string, value_serde=string)
    )  # fmt: skip
