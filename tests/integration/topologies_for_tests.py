"""Topologies used only by the integration tests.

Spark's Python workers import them by reference (``tests.integration.topologies_for_tests:
build_...``), so this module must stay importable from the repository root (``tests/conftest.py``
puts the root on ``PYTHONPATH`` before the shared SparkSession starts).
"""

from __future__ import annotations

from processor_api import Processor, ProcessorContext, PunctuationType, Record, Serdes, Topology

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
