"""``read-store`` on a 1M-key store against a plain consumer reading the same changelog.

``python -m bench.read_store [--entries 1000000] [--reps 3]`` (under the machine-wide lock).

The application ``bench-read-store`` has one task (``0_0``) with a key-value store ``counts``
(``Serdes.string()`` keys, ``Serdes.long()`` values). The bench writes its state the way the
runtime does: N distinct keys on ``bench-read-store-counts-changelog`` (``bench.restore.produce_changelog``) (1 partition, compacted)
and one commit marker on ``bench-read-store-task-commits`` (``marker_value`` of a
``TaskMetadata`` whose ``changelog_offsets`` end at N), so the read path is the one a stopped
application's state takes. Contenders, alternating, each reading all N entries:

* ``processor_api.read_store``: markers, changelog replay into the scratch store, typed
  iteration (``KeyValue(str, int)``);
* ``read-store command``: ``python -m processor_api.cli.read_store`` to ``/dev/null`` (JSON
  lines; includes interpreter start and topology import);
* ``plain consumer``: confluent-kafka ``Consumer`` reading ``[0, N)`` in ``consume(10000)``
  batches, touching key and value (no deserialization, no fold): the floor;
* ``consumer + dict fold``: the plain consumer folding into a dict (last write wins, tombstones
  delete) and deserializing keys and values: what reading it by hand takes.

Result: ``bench/results/read-store-<N>-<date>.json`` with the machine, the load average before and
after every run, medians per contender.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
import uuid
from typing import Any

from bench.common import REPO_DIR, Broker, log, machine_info, stats, write_result
from bench.restore import produce_changelog

APP = "bench-read-store"
STORE = "counts"
TOPIC = f"{APP}-{STORE}-changelog"
MARKERS = f"{APP}-task-commits"
INPUT = f"{APP}-input"
TOPOLOGY = "bench.read_store:build_topology"


def build_topology(input_topic: str = INPUT) -> Any:
    """One source, one counting processor with the store ``counts`` (never run here)."""
    from processor_api import Processor, Serdes, Stores, Topology

    class Count(Processor):
        def init(self, context: Any) -> None:
            self.store = context.get_state_store(STORE)

        def process(self, record: Any) -> None:
            self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("count", Count, "in")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store(STORE), Serdes.string(), Serdes.long()
            ),
            "count",
        )
    )


def write_state(broker: Broker, entries: int) -> dict[str, Any]:
    """The changelog of ``entries`` keys and the task's commit marker, as the runtime writes."""
    from confluent_kafka import Producer

    from processor_api.engine.metadata import TaskMetadata
    from processor_api.kafka.markers import marker_value

    broker.create_topic(INPUT, 1)
    broker.create_topic(TOPIC, 1, {"cleanup.policy": "compact"})
    broker.create_topic(MARKERS, 1, {"cleanup.policy": "compact"})
    produced = produce_changelog(broker.bootstrap, entries, TOPIC)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    metadata = TaskMetadata(changelog_offsets={STORE: entries}, input_positions={INPUT: entries})
    producer.produce(MARKERS, marker_value(1, metadata.to_json()), b"0_0", partition=0)
    if producer.flush(30):
        raise RuntimeError("the commit marker was not flushed")
    return produced


def _read_store(bootstrap: str, entries: int) -> tuple[float, dict]:
    from processor_api import read_store

    gc.collect()
    started = time.perf_counter()
    count = checksum = 0
    for entry in read_store(bootstrap, APP, TOPOLOGY, STORE):
        count += 1
        checksum += entry.value
    return time.perf_counter() - started, {"entries": count, "value_sum": checksum}


def _command(bootstrap: str, entries: int) -> tuple[float, dict]:
    argv = [
        sys.executable,
        "-m",
        "processor_api.cli.read_store",
        "--bootstrap-servers",
        bootstrap,
        "--application-id",
        APP,
        "--topology",
        TOPOLOGY,
        STORE,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    started = time.perf_counter()
    with open(os.devnull, "w") as sink:
        subprocess.run(argv, stdout=sink, check=True, cwd=REPO_DIR, env=env)
    return time.perf_counter() - started, {}


def _plain(bootstrap: str, entries: int, fold: bool) -> tuple[float, dict]:
    from confluent_kafka import Consumer, TopicPartition

    from processor_api import Serdes

    key_of, value_of = Serdes.string().deserialize, Serdes.long().deserialize
    gc.collect()
    started = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"plain-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    state: dict[bytes, bytes] = {}
    seen = nbytes = 0
    last = -1
    while last < entries - 1:
        for message in consumer.consume(10_000, timeout=0.5):
            if message.error() is not None:
                continue
            key, value = message.key(), message.value()
            last = message.offset()
            seen += 1
            if fold:
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
            else:
                nbytes += len(key) + len(value)
    checksum = 0
    if fold:
        typed = {key_of(k): value_of(v) for k, v in state.items()}
        checksum = sum(typed.values())
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed, {"records": seen, "value_sum": checksum} if fold else {"records": seen}


def run(broker: Broker, entries: int, reps: int) -> dict[str, Any]:
    log(f"read-store: writing a {entries}-key store")
    produced = write_state(broker, entries)
    contenders = {
        "processor_api.read_store": lambda: _read_store(broker.bootstrap, entries),
        "read-store command": lambda: _command(broker.bootstrap, entries),
        "plain consumer": lambda: _plain(broker.bootstrap, entries, fold=False),
        "consumer + dict fold": lambda: _plain(broker.bootstrap, entries, fold=True),
    }
    names = list(contenders)
    runs = []
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            load_before = os.getloadavg()
            elapsed, info = contenders[name]()
            log(f"  rep {rep + 1}/{reps}: {name}: {elapsed:.2f}s ({entries / elapsed:,.0f}/s)")
            runs.append(
                {
                    "contender": name,
                    "rep": rep,
                    "seconds": elapsed,
                    "loadavg_before": list(load_before),
                    "loadavg_after": list(os.getloadavg()),
                    **info,
                }
            )
    expected_sum = entries * (entries - 1) // 2
    summary = {}
    for name in names:
        s = stats([r["seconds"] for r in runs if r["contender"] == name])
        summary[name] = {"seconds": s, "entries_per_s_median": entries / s["median"]}
    read_rate = summary["processor_api.read_store"]["entries_per_s_median"]
    return {
        "entries": entries,
        "reps": reps,
        "state": produced,
        "runs": runs,
        "summary": summary,
        "all_entries_read": all(
            r.get("entries", entries) == entries
            and r.get("value_sum", expected_sum) == expected_sum
            for r in runs
        ),
        "ratio_read_store_vs_plain_consumer": read_rate
        / summary["plain consumer"]["entries_per_s_median"],
        "ratio_read_store_vs_consumer_dict_fold": read_rate
        / summary["consumer + dict fold"]["entries_per_s_median"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from processor_api.logging import configure_logging

    configure_logging("console", level="warning")
    machine = machine_info()
    broker = Broker.start()
    try:
        body = run(broker, args.entries, args.reps)
    finally:
        broker.stop()
    write_result(
        f"read-store-{args.entries}",
        {
            "benchmark": "read-store",
            "command": f"python -m bench.read_store --entries {args.entries} --reps {args.reps}",
            "machine": machine,
            "loadavg_at_end": list(os.getloadavg()),
            **body,
        },
    )


if __name__ == "__main__":
    main()
