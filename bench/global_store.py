"""Global stores on a task host: what a 1M-entry global topic costs (issue 12, item 4).

``python -m bench.global_store [--entries 1000000] [--reps 3] [--batches 20]`` starts an
embedded broker, fills a 3-partition topic ``bench-global-customers`` with N customers
(string key ``c0000001``, JSON value of about 60 bytes, as ``topologies/order_enrichment.py``
reads them) and measures, in this process, the code a task host runs
(``processor_api.runtime.global_stores.GlobalStores`` with the order_enrichment topology's
global store and processor):

* **initial fill** (the host's first task on an executor, or after its state is lost):
  a new ``GlobalStores`` and its first ``catch_up()`` - partition look-up, one read of every
  partition to its end, the global processor per record (string + JSON deserialization, ``put``),
  flush, checkpoint. Contenders, alternating: RocksDB store, in-memory store, and a plain
  confluent-kafka consumer (same fetch sizes) reading the same records without processing
  them (the floor).
* **reopen** (a task host restarts on the same executor with its copy intact): open the
  RocksDB copy and catch up from its checkpoint with nothing new.
* **per-batch catch-up** on a filled copy: ``catch_up()`` with nothing new (one read of all
  partitions to their end: what every micro-batch of every task paid in the micro-batch
  runtime, in which the recorded result was measured; in epochs a task host catches up every
  ``GLOBAL_CATCH_UP_S``, ``runtime/epoch_runner.py``), and with 1,000 new customer records
  per batch.

Writes ``bench/results/global-store-<entries>-<date>.json`` (machine, load average at start and end,
medians). Run it under the machine-wide lock: ``flock /tmp/spark-tests.lock python -m
bench.global_store``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import (
    Broker,
    bulk_producer,
    log,
    machine_info,
    produce_waiting,
    stats,
    write_result,
)

TOPIC = "bench-global-customers"
PARTITIONS = 3


def customer_value(i: int, version: int = 0) -> bytes:
    return json.dumps({"name": f"customer {i}", "tier": "gold", "since": 2000 + version}).encode()


def produce_customers(bootstrap: str, start: int, count: int, version: int = 0) -> float:
    producer = bulk_producer(bootstrap, {"partitioner": "murmur2_random"})
    started = time.monotonic()
    for i in range(start, start + count):
        produce_waiting(producer, TOPIC, customer_value(i, version), b"c%07d" % i)
        if i % 20_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("customers not flushed")
    return time.monotonic() - started


def open_stores(bootstrap: str, directory: Path, persistent: bool) -> Any:
    from processor_api.config import StreamsConfig
    from processor_api.runtime.global_stores import GlobalStores
    from topologies.order_enrichment import build_topology

    return GlobalStores(
        build_topology(customers_topic=TOPIC, persistent=persistent),
        directory,
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        config=StreamsConfig.from_dict({"application_id": "bench-global"}),
    )


def fill(bootstrap: str, persistent: bool, entries: int) -> tuple[float, dict]:
    root = Path(tempfile.mkdtemp(prefix="bench-global-"))
    gc.collect()
    started = time.perf_counter()
    stores = open_stores(bootstrap, root / "global", persistent)
    done = stores.catch_up()
    elapsed = time.perf_counter() - started
    count = sum(1 for _ in stores.task.stores["customers"].inner.range(None, None))
    stores.close()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    shutil.rmtree(root, ignore_errors=True)
    return elapsed, {
        "records_read": done.records,
        "entries_in_store": count,
        "disk_bytes": size,
    }


def plain_consumer(bootstrap: str, entries: int) -> tuple[float, dict]:
    from confluent_kafka import Consumer, TopicPartition

    gc.collect()
    started = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"plain-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # the fetch sizes GlobalStores uses, so the floor reads the same way
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen = nbytes = 0
    at_end: set[int] = set()
    while len(at_end) < PARTITIONS:
        for message in consumer.consume(10_000, timeout=0.1):
            if message.error() is not None:
                at_end.add(message.partition())
                continue
            nbytes += len(message.key()) + len(message.value())
            seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed, {"records_read": seen, "bytes": nbytes}


def catch_up_costs(bootstrap: str, batches: int, new_per_batch: int, entries: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench-global-catchup-"))
    stores = open_stores(bootstrap, root / "global", persistent=True)
    stores.catch_up()
    stores.close()
    reopen = []
    for _ in range(3):
        started = time.perf_counter()
        stores = open_stores(bootstrap, root / "global", persistent=True)
        records = stores.catch_up().records
        reopen.append(time.perf_counter() - started)
        assert records == 0, records
        stores.close()
    stores = open_stores(bootstrap, root / "global", persistent=True)
    stores.catch_up()
    idle, busy = [], []
    for batch in range(batches):
        started = time.perf_counter()
        done = stores.catch_up()
        idle.append(time.perf_counter() - started)
        produce_customers(bootstrap, (batch * new_per_batch) % entries, new_per_batch, batch + 1)
        started = time.perf_counter()
        done = stores.catch_up()
        busy.append(time.perf_counter() - started)
        assert done.records == new_per_batch, done
    stores.close()
    shutil.rmtree(root, ignore_errors=True)
    ms = lambda values: {k: (v * 1000 if v else v) for k, v in stats(values).items() if k != "n"}  # noqa: E731
    return {
        "reopen_with_checkpoint_ms": ms(reopen),
        "catch_up_nothing_new_ms": ms(idle),
        "new_records_per_batch": new_per_batch,
        "catch_up_with_new_records_ms": ms(busy),
        "batches": batches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--new-per-batch", type=int, default=1_000)
    args = parser.parse_args()
    machine = machine_info()
    broker = Broker.start()
    try:
        broker.create_topic(TOPIC, PARTITIONS, {"cleanup.policy": "compact"})
        log(f"producing {args.entries:,} customers")
        produce_s = produce_customers(broker.bootstrap, 0, args.entries)
        contenders = {
            "GlobalStores fill, RocksDB": lambda: fill(broker.bootstrap, True, args.entries),
            "GlobalStores fill, in-memory": lambda: fill(broker.bootstrap, False, args.entries),
            "plain consumer (no processing)": lambda: plain_consumer(
                broker.bootstrap, args.entries
            ),
        }
        names = list(contenders)
        runs = []
        for rep in range(args.reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                elapsed, info = contenders[name]()
                log(f"  rep {rep + 1}/{args.reps}: {name}: {elapsed:.2f}s {info}")
                runs.append({"contender": name, "rep": rep, "seconds": elapsed, **info})
        fills = {}
        for name in names:
            seconds = stats([r["seconds"] for r in runs if r["contender"] == name])
            fills[name] = {
                "seconds": seconds,
                "records_per_s_median": args.entries / seconds["median"],
            }
        log("per-batch catch-up on a filled RocksDB copy")
        catch_up = catch_up_costs(broker.bootstrap, args.batches, args.new_per_batch, args.entries)
        log(json.dumps(catch_up))
    finally:
        broker.stop()
    disk = [r["disk_bytes"] for r in runs if r["contender"] == "GlobalStores fill, RocksDB"]
    payload = {
        "benchmark": "global-store",
        "command": "flock /tmp/spark-tests.lock python -m bench.global_store "
        f"--entries {args.entries} --reps {args.reps} --batches {args.batches} "
        f"--new-per-batch {args.new_per_batch}",
        "machine": machine,
        "loadavg_at_end": list(os.getloadavg()),
        "entries": args.entries,
        "partitions": PARTITIONS,
        "produce_s": round(produce_s, 2),
        "fill": fills,
        "fill_runs": runs,
        "rocksdb_copy_disk_bytes_median": statistics.median(disk) if disk else None,
        "catch_up": catch_up,
        "all_entries_in_store": all(
            r.get("entries_in_store", args.entries) == args.entries for r in runs
        ),
    }
    write_result(f"global-store-{args.entries}", payload)


if __name__ == "__main__":
    main()
