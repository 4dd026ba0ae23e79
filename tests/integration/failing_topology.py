"""A topology whose processor raises on the value ``boom`` (run-topology failure output)."""

from __future__ import annotations

from processor_api import Processor, ProcessorContext, Record, Serdes, Topology


class ExplodeOnBoom(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        if record.value == "boom":
            raise ValueError(f"cannot handle {record.value!r}")
        self.context.forward(record)


def build(input_topic: str = "fail-in", output_topic: str = "fail-out") -> Topology:
    topology = Topology()
    topology.add_source(
        "source", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string()
    )
    topology.add_processor("explode", ExplodeOnBoom, "source")
    topology.add_sink(
        "sink", output_topic, "explode", key_serde=Serdes.string(), value_serde=Serdes.string()
    )
    return topology
