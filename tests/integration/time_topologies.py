"""Topologies of the time-semantics integration tests (imported by reference by Spark's workers,
so this module must stay importable from the repository root)."""

from __future__ import annotations

from processor_api import Processor, ProcessorContext, PunctuationType, Record, Serdes, Topology


class Relay(Processor):
    """Forwards every record unchanged: the output topic shows the processing order."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        self.context.forward(record)


def build_merge_order(*, left: str, right: str, output: str) -> Topology:
    """Two co-partitioned inputs -> ``relay`` -> ``output`` (string keys and values)."""
    strings = {"key_serde": Serdes.string(), "value_serde": Serdes.string()}
    return (
        Topology()
        .add_source("in", left, right, **strings)
        .add_processor("relay", Relay, "in")
        .add_sink("out", output, "relay", **strings)
    )


class StreamTimeTicker(Processor):
    """Forwards ``(task id, stream time)`` on every STREAM_TIME punctuation."""

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        context.schedule(self.interval_ms, PunctuationType.STREAM_TIME, self.tick)

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record(self.context.task_id, timestamp, timestamp))

    def process(self, record: Record) -> None:
        pass


def build_stream_time_ticker(*, input_topic: str, output_topic: str, interval_ms: int) -> Topology:
    """``input_topic`` -> stream-time ticker -> ``output_topic`` (string, long)."""
    interval = int(interval_ms)
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("ticker", lambda: StreamTimeTicker(interval), "in")
        .add_sink(
            "ticks", output_topic, "ticker", key_serde=Serdes.string(), value_serde=Serdes.long()
        )
    )
