"""Schema Registry serde round trip through a topology: Avro vs the JSON serde, same run.

One Task (source -> pass-through processor -> sink, value serde under test) is fed batches of
pre-serialized records; each record is deserialized at the source and serialized at the sink.
The registry is confluent-kafka's in-process ``mock://`` one; after the first record the
schema cache is warm, so no registry call happens in the timed part. One core, one process.

Contenders, alternating (the order rotates each repetition), median of the repetitions:
``avro`` (``Serdes.avro``: fastavro after confluent_kafka's first record), ``avro-confluent``
(every record through confluent_kafka's ``AvroSerializer``/``AvroDeserializer``, what
``Serdes.avro`` did before), ``json`` (``Serdes.json``) and ``bytes`` (no serde work: the
Task's own cost per record). ``serde_only`` times the bound serde's deserialize + serialize
alone, outside the Task.

    .venv/bin/python -m bench.registry_serdes [RECORDS] [REPEATS]

Writes bench/results/registry-serdes-<date>.json and .md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid

from bench.common import machine_info, result_path, write_result
from processor_api import Processor, Serdes, Topology
from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector
from processor_api.engine.task import Task

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "ms", "type": "long"},
        ],
    }
)
BATCH = 10_000


class PassThrough(Processor):
    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record)


def _confluent_only(registry: str):
    """The Avro serde with every record through confluent_kafka (no fastavro path)."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    from processor_api.schemas.registry_serdes import RegistrySerde, _serializer_conf

    def make_ser(client):
        return AvroSerializer(client, SCHEMA, conf=_serializer_conf())

    return RegistrySerde("avro", registry, make_ser, AvroDeserializer)


class _Contender:
    """One serde's Task, fed ``records`` per repetition."""

    def __init__(self, serde, records: int) -> None:
        self.records = records
        self.bound = serde.for_topic("clicks", False)
        clicks = [{"user": f"u{i % 1000}", "page": "/home", "ms": i} for i in range(BATCH)]
        if serde.name == "bytes":  # the same payload size as JSON's, no decoding
            clicks = [json.dumps(c, separators=(",", ":")).encode() for c in clicks]
        self.values = [self.bound.serialize(c) for c in clicks]
        topology = Topology()
        topology.add_source("in", "clicks", key_serde=Serdes.string(), value_serde=serde)
        topology.add_processor("p", PassThrough, "in")
        topology.add_sink("out", "clicks-out", "p", key_serde=Serdes.string(), value_serde=serde)
        self.collector = ListCollector()
        self.task = Task(
            subtopology=topology.subtopologies()[0],
            partition=0,
            store_builders={},
            store_factory=lambda b, ts: b.build(timestamp_fn=ts),
            collector=self.collector,
            config=StreamsConfig.from_dict({"application_id": "bench-serdes"}),
        )
        self.task.initialize()
        self.offset = 0
        self.rates: list[float] = []
        self.serde_rates: list[float] = []

    def repeat(self) -> None:
        batches = []
        for _ in range(self.records // BATCH):
            batches.append(
                [
                    InputRecord("clicks", 0, self.offset + i, i, b"k", v)
                    for i, v in enumerate(self.values)
                ]
            )
            self.offset += BATCH
        started = time.perf_counter()
        for batch in batches:
            self.task.process_batch(batch)
            self.collector.drain()
        self.rates.append(self.records / (time.perf_counter() - started))
        serialize, deserialize = self.bound.serialize, self.bound.deserialize
        started = time.perf_counter()
        for value in self.values:
            serialize(deserialize(value))
        self.serde_rates.append(len(self.values) / (time.perf_counter() - started))


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    registry = f"mock://bench-{uuid.uuid4().hex}"
    load_start = list(os.getloadavg())
    contenders = {
        "avro": _Contender(Serdes.avro(SCHEMA, registry=registry), records),
        "avro-confluent": _Contender(_confluent_only(registry), records),
        "json": _Contender(Serdes.json(), records),
        "bytes": _Contender(Serdes.bytes(), records),
    }
    names = list(contenders)
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            contenders[name].repeat()
    medians = {k: round(statistics.median(c.rates)) for k, c in contenders.items()}
    serde_only = {k: round(statistics.median(c.serde_rates)) for k, c in contenders.items()}
    out = {
        "benchmark": "registry-serdes",
        "command": f"python -m bench.registry_serdes {records} {repeats}",
        "records_per_repeat": records,
        "repeats": repeats,
        "records_per_s_median": medians,
        "records_per_s_all": {k: [round(r) for r in c.rates] for k, c in contenders.items()},
        "serde_only_round_trips_per_s_median": serde_only,
        "avro_vs_json": round(medians["avro"] / medians["json"], 3),
        "loadavg_start": load_start,
        "loadavg_after": list(os.getloadavg()),
        "machine": machine_info(),
    }
    write_result("registry-serdes", out)
    table = "\n".join(f"| {k} | {v:,.0f} | {serde_only[k]:,.0f} |" for k, v in medians.items())
    result_path("registry-serdes", ".md").write_text(
        "# Schema Registry serde round trip (deserialize + serialize per record)\n\n"
        f"`{out['command']}`; alternating, median of {repeats}; load average {load_start} at "
        f"start, {out['loadavg_after']} after.\n\n"
        "| serde | through a Task, records/s (1 core) | serde alone, round trips/s |\n"
        f"|---|---:|---:|\n{table}\n"
    )
    print(
        json.dumps(
            {
                k: out[k]
                for k in (
                    "records_per_s_median",
                    "serde_only_round_trips_per_s_median",
                    "avro_vs_json",
                    "loadavg_start",
                )
            }
        )
    )


if __name__ == "__main__":
    main()
