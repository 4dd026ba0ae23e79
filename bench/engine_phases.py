"""Diagnostic contender: the processor_api engine without Spark, phase by phase.

``python -m bench.engine_phases --bootstrap B --topic T --partitions 3 --records N``

Does, in one Python process, what one Spark run does per task and micro-batch, with the
library's own functions: ``read_range`` (the data source's reader: confluent-kafka ->
Arrow batches), Arrow -> pandas, ``spark_task._input_records``, ``Task.process_batch`` of
``topologies.count_per_key`` (RocksDB store, change logging), ``KafkaCollector.send_changes``
and ``DeliveryTracker.flush_and_check`` (changelog produced and acknowledged). Prints one JSON
line with the seconds spent in each phase: where the engine's own time goes, and how far it is
from the hand-written loop without Spark in the way.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch", type=int, default=200_000, help="records per task call")
    args = parser.parse_args()
    started = time.monotonic()

    from processor_api.config import StreamsConfig
    from processor_api.engine.task import Task
    from processor_api.kafka.admin import create_topics
    from processor_api.kafka.collector import KafkaCollector
    from processor_api.kafka.offsets import end_offsets
    from processor_api.kafka.producer import DeliveryTracker, make_producer
    from processor_api.logging import configure_logging
    from processor_api.spark.kafka_source import KafkaSourceOptions, read_range
    from processor_api.spark.task_function import _input_records
    from topologies.count_per_key import build_topology

    configure_logging("console", level="WARNING")
    topology = build_topology(input_topic=args.topic)
    sub = topology.subtopologies()[0]
    app = f"bench-engine-{uuid.uuid4().hex[:6]}"
    changelog = f"{app}-counts-changelog"
    create_topics(
        args.bootstrap,
        [(changelog, args.partitions, {"cleanup.policy": "compact"})],
        exist_ok=False,
    )
    options = KafkaSourceOptions.from_options(
        {"bootstrap.servers": args.bootstrap, "topics": args.topic}
    )
    ends = end_offsets(args.bootstrap, [(args.topic, p) for p in range(args.partitions)])
    tracker = DeliveryTracker(make_producer(args.bootstrap))
    collector = KafkaCollector(tracker, args.bootstrap)
    root = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    phases = dict.fromkeys(
        [
            "read_range",
            "to_pandas",
            "input_records",
            "process_batch",
            "flush_changes",
            "send_changes",
            "flush_and_check",
        ],
        0.0,
    )
    processed = 0
    ready = time.monotonic()
    for partition in range(args.partitions):
        task = Task(
            subtopology=sub,
            partition=partition,
            store_builders=topology.store_builders,
            store_factory=lambda b, ts, p=partition: b.build(
                state_dir=root / f"0_{p}", timestamp_fn=ts
            ),
            collector=collector,
            config=StreamsConfig.from_dict({"application_id": app}),
        )
        task.initialize()
        position, end = 0, ends[(args.topic, partition)]
        while position < end:
            stop = min(end, position + args.batch)
            t0 = time.perf_counter()
            batches = list(read_range(options, args.topic, partition, position, stop))
            t1 = time.perf_counter()
            frames = [b.to_pandas() for b in batches]
            t2 = time.perf_counter()
            records = _input_records(frames)
            t3 = time.perf_counter()
            processed += task.process_batch(records)
            t4 = time.perf_counter()
            changes = task.flush()
            t5 = time.perf_counter()
            tracker.reset()
            for store_changes in changes.values():
                collector.send_changes(changelog, partition, store_changes)
            t6 = time.perf_counter()
            tracker.flush_and_check(60)
            t7 = time.perf_counter()
            for name, dt in zip(
                phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6), strict=True
            ):
                phases[name] += dt
            position = stop
        task.close()
    done = time.monotonic()
    print(
        json.dumps(
            {
                "records": processed,
                "loop_s": round(done - ready, 3),
                "process_s": round(done - started, 3),
                **{f"{k}_s": round(v, 3) for k, v in phases.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
