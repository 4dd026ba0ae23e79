"""Schema Registry serde round trip through a topology: Avro vs the JSON serde, same run.

One Task (source -> pass-through processor -> sink, value serde under test) is fed batches of
pre-serialized records; each record is deserialized at the source and serialized at the sink.
The registry is confluent-kafka's in-process ``mock://`` one; after the first record the
schema cache is warm, so no registry call happens in the timed part. One core, one process.

    .venv/bin/python -m bench.registry_serdes [RECORDS]

Writes bench/results/registry-serdes.json and .md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid

from bench.common import RESULTS_DIR, machine_info
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


def _round_trip(serde, records: int, repeats: int = 5) -> float:
    topology = Topology()
    topology.add_source("in", "clicks", key_serde=Serdes.string(), value_serde=serde)
    topology.add_processor("p", PassThrough, "in")
    topology.add_sink("out", "clicks-out", "p", key_serde=Serdes.string(), value_serde=serde)
    bound = serde.for_topic("clicks", False)
    values = [
        bound.serialize({"user": f"u{i % 1000}", "page": "/home", "ms": i}) for i in range(BATCH)
    ]
    collector = ListCollector()
    task = Task(
        subtopology=topology.subtopologies()[0],
        partition=0,
        store_builders={},
        store_factory=lambda b, ts: b.build(timestamp_fn=ts),
        collector=collector,
        config=StreamsConfig.from_dict({"application_id": "bench-serdes"}),
    )
    task.initialize()
    rates = []
    offset = 0
    for _ in range(repeats):
        batches = []
        for _ in range(records // BATCH):
            batches.append(
                [InputRecord("clicks", 0, offset + i, i, b"k", v) for i, v in enumerate(values)]
            )
            offset += BATCH
        started = time.perf_counter()
        for batch in batches:
            task.process_batch(batch)
            collector.drain()
        rates.append(records / (time.perf_counter() - started))
    return statistics.median(rates)


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    registry = f"mock://bench-{uuid.uuid4().hex}"
    results = {
        "avro": _round_trip(Serdes.avro(SCHEMA, registry=registry), records),
        "json": _round_trip(Serdes.json(), records),
    }
    out = {
        "benchmark": "registry-serdes",
        "command": f"python -m bench.registry_serdes {records}",
        "records_per_repeat": records,
        "records_per_s_median_of_5": {k: round(v) for k, v in results.items()},
        "avro_vs_json": round(results["avro"] / results["json"], 3),
        "loadavg_after": list(os.getloadavg()),
        "machine": machine_info(),
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "registry-serdes.json").write_text(json.dumps(out, indent=2) + "\n")
    table = "\n".join(f"| {k} | {v:,.0f} |" for k, v in out["records_per_s_median_of_5"].items())
    (RESULTS_DIR / "registry-serdes.md").write_text(
        "# Schema Registry serde round trip (deserialize + serialize per record)\n\n"
        f"`{out['command']}`; load average {out['machine'].get('loadavg_at_start')} at start, "
        f"{out['loadavg_after']} after.\n\n| serde | records/s (1 core) |\n|---|---:|\n{table}\n"
    )
    print(json.dumps({k: out[k] for k in ("records_per_s_median_of_5", "avro_vs_json")}))


if __name__ == "__main__":
    main()
