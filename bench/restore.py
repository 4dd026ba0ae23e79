"""Restore: replay a changelog of N entries into a lost store, against a plain consumer.

The changelog ``bench-restore-restored-changelog`` (1 partition, ``cleanup.policy=compact``)
holds N distinct keys (``Serdes.string()`` keys, ``Serdes.long()`` values). Contenders, in
process, alternating:

* ``processor_api restore``: what a task does for a store with no local copy when it is built
  (``TaskRunner._rebuild``) -
  ``TaskStores.build`` + ``TaskStores.restore({store: N}, read_changelog)`` (confluent-kafka
  consumer, ``put_all`` WriteBatches into RocksDB, final flush);
* ``plain consumer``: a confluent-kafka consumer with default settings reading offsets
  ``[0, N)`` of the same partition (``consume(10000)`` batches, touching key and value);
* ``consumer + rocksdict WriteBatch``: the plain consumer writing each batch into a fresh
  rocksdict with one ``WriteBatch``: the floor for restoring by hand.
"""

from __future__ import annotations

import gc
import shutil
import struct
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Broker, bulk_producer, log, produce_waiting, stats

APP = "bench-restore"
STORE = "restored"
TOPIC = f"{APP}-{STORE}-changelog"
_LONG = struct.Struct(">q")


def produce_changelog(bootstrap: str, entries: int, topic: str = TOPIC) -> dict[str, Any]:
    """``entries`` distinct keys ``key-<i>`` with long values ``i`` on partition 0 of ``topic``."""
    producer = bulk_producer(bootstrap)
    started = time.monotonic()
    for i in range(entries):
        produce_waiting(
            producer,
            topic,
            _LONG.pack(i),
            b"key-%07d" % i,
            partition=0,
            timestamp=1_700_000_000_000 + i,
        )
        if i % 20_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("changelog not flushed")
    return {"entries": entries, "produce_s": round(time.monotonic() - started, 2)}


def _processor_api_restore(bootstrap: str, entries: int) -> tuple[float, dict]:
    from processor_api.kafka.reader import read_changelog
    from processor_api.serdes import Serdes
    from processor_api.state import Stores
    from processor_api.state.manager import TaskStores

    root = Path(tempfile.mkdtemp(prefix="bench-restore-"))
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(STORE), Serdes.string(), Serdes.long()
    )
    gc.collect()
    started = time.perf_counter()
    stores = TaskStores(
        application_id=APP,
        task_id="0_0",
        partition=0,
        directory=root / "0_0",
        builders={STORE: builder},
        changelog_topics={STORE: f"{APP}-{STORE}-changelog"},
        timestamp_fn=lambda: 0,
    )
    stack = stores.build(builder, lambda: 0)

    def reader(topic, partition, start, end, apply):  # noqa: ANN001
        return read_changelog(
            bootstrap, topic, partition, start, end, apply, isolation_level="read_uncommitted"
        )

    replayed = stores.restore({STORE: entries}, reader)
    elapsed = time.perf_counter() - started
    stack = stores.stacks[STORE]
    count = sum(1 for _ in stack.inner.range(None, None))
    stores.close()
    shutil.rmtree(root, ignore_errors=True)
    return elapsed, {"replayed": replayed.get(STORE), "entries_in_store": count}


def _plain_consumer(bootstrap: str, entries: int, write: bool) -> tuple[float, dict]:
    from confluent_kafka import Consumer, TopicPartition

    root = Path(tempfile.mkdtemp(prefix="bench-restore-floor-"))
    db = batch_cls = None
    if write:
        from rocksdict import Options, Rdict, WriteBatch

        db, batch_cls = Rdict(str(root / "db"), Options(raw_mode=True)), WriteBatch
    gc.collect()
    started = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"plain-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen = nbytes = 0
    last = -1
    while last < entries - 1:
        messages = consumer.consume(10_000, timeout=0.5)
        wb = batch_cls(raw_mode=True) if write else None
        for message in messages:
            if message.error() is not None:
                continue
            key, value = message.key(), message.value()
            nbytes += len(key) + len(value)
            if wb is not None:
                wb.put(key, value)
            last = message.offset()
            seen += 1
        if wb is not None and messages:
            db.write(wb)
    if db is not None:
        db.flush(True)
    elapsed = time.perf_counter() - started
    consumer.close()
    if db is not None:
        db.close()
    shutil.rmtree(root, ignore_errors=True)
    return elapsed, {"records": seen, "bytes": nbytes}


def run(broker: Broker, entries: int, reps: int) -> dict[str, Any]:
    broker.create_topic(TOPIC, 1, {"cleanup.policy": "compact"})
    log(f"restore: producing a changelog of {entries} entries")
    produced = produce_changelog(broker.bootstrap, entries)
    contenders = {
        "processor_api restore": lambda: _processor_api_restore(broker.bootstrap, entries),
        "plain consumer": lambda: _plain_consumer(broker.bootstrap, entries, write=False),
        "consumer + rocksdict WriteBatch": lambda: _plain_consumer(
            broker.bootstrap, entries, write=True
        ),
    }
    names = list(contenders)
    runs = []
    for rep in range(reps):
        for name in names[rep % 3 :] + names[: rep % 3]:
            elapsed, info = contenders[name]()
            log(
                f"  rep {rep + 1}/{reps}: {name}: {elapsed:.2f}s "
                f"({entries / elapsed:,.0f} records/s) {info}"
            )
            runs.append({"contender": name, "rep": rep, "seconds": elapsed, **info})
    summary = {}
    for name in names:
        s = stats([r["seconds"] for r in runs if r["contender"] == name])
        summary[name] = {
            "seconds": s,
            "records_per_s_median": entries / s["median"] if s["median"] else None,
        }
    ok = all(r.get("entries_in_store", entries) == entries for r in runs)
    restore_rate = summary["processor_api restore"]["records_per_s_median"]
    plain_rate = summary["plain consumer"]["records_per_s_median"]
    return {
        "entries": entries,
        "reps": reps,
        "topic": TOPIC,
        "produce": produced,
        "runs": runs,
        "summary": summary,
        "restored_all_entries": ok,
        "ratio_restore_vs_plain_consumer": restore_rate / plain_rate,
        "ratio_restore_vs_consumer_writebatch": restore_rate
        / summary["consumer + rocksdict WriteBatch"]["records_per_s_median"],
    }
