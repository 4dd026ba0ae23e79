"""Prototype fast paths for the hot spots the profiles show, measured before/after in one run.

The library is not changed: :func:`apply` patches it in this process only, and every
measurement alternates "as is" and "patched" runs (patch, measure, undo). Each patch keeps
the library's behaviour (same bytes, same errors: anything off the fast path falls back to the
original code); they are what RESULTS.md proposes for the library.

* P1 ``Record.__post_init__`` (processor.py): return at once when ``timestamp`` is a
  non-negative ``int`` and ``headers`` is the empty tuple (today a generator expression runs
  for every record, even without headers).
* P2 built-in serdes (serdes.py): ``Serdes.string()`` / ``Serdes.long()`` serialize an exact
  ``str`` / in-range ``int`` and deserialize ``bytes`` directly (``str.encode``,
  ``struct.pack``/``unpack``), skipping the generic wrapper's checks and the ``bytes()`` copy.
* P3 ``Task._send_to_sink`` (task.py): a sink with a fixed topic and no partitioner skips
  ``topic_for`` and the partitioner branch.
* P4 (per-record workload only) ``state/builder.py`` ``_rocksdb_factory``: open RocksDB stores
  with the write-ahead log disabled, as Kafka Streams does for its stores (the changelog is the
  durable copy; ``TaskStores.write_checkpoint`` already flushes the memtables before it writes
  ``.checkpoint``, and a crash before that leaves no checkpoint, so the store is rebuilt).
* P5 (changelog workload) ``runtime/kafka_io.py`` ``KafkaCollector.send_changes``: call
  ``Producer.produce`` directly (positional arguments, the tracker's delivery callback) and
  count the batch's pending records once, instead of ``DeliveryTracker.produce`` per record
  (a kwargs dict, a lock, a Counter update and ``poll(0)`` each). ``Producer.produce_batch``
  would be cheaper still but raises "Message timestamps are not currently supported in batch
  mode" (confluent-kafka 2.16), and change records carry the record's timestamp.
"""

from __future__ import annotations

import gc
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import log, stats

_LONG = struct.Struct(">q")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def apply_wal_off() -> Callable[[], None]:
    """P4: RocksDB stores without the write-ahead log."""
    from processor_api.state import builder
    from processor_api.state.rocksdb import RocksDBBytesStore

    original = builder._rocksdb_factory

    def factory(name: str, state_dir: Path | None) -> Any:
        return RocksDBBytesStore(name, Path(state_dir) / "rocksdb" / name, disable_wal=True)

    builder._rocksdb_factory = factory

    def undo() -> None:
        builder._rocksdb_factory = original

    return undo


def send_changes_lean(collector: Any, topic: str, partition: int, changes: list) -> None:
    """P5: ``KafkaCollector.send_changes`` without the per-record tracker bookkeeping."""
    tracker = collector.tracker
    producer = tracker.producer
    produce, poll, callback = producer.produce, producer.poll, tracker._on_delivery
    with tracker._lock:  # counted once per batch, before any callback can run
        tracker._pending += len(changes)
        tracker._pending_by_topic[topic] += len(changes)
    for index, change in enumerate(changes):
        timestamp = change.timestamp
        while True:
            try:
                if timestamp > 0:
                    produce(topic, change.value, change.key, partition, callback, timestamp)
                else:
                    produce(topic, change.value, change.key, partition, callback)
                break
            except BufferError:
                poll(0.05)
        if not index & 1023:
            poll(0)


def changelog_produce(bootstrap: str, records: int, reps: int) -> dict[str, Any]:
    """Produce ``records`` change records and wait for the acks: as is vs P5, alternating."""
    import uuid

    from processor_api.kafka.admin import create_topics
    from processor_api.kafka.producer import DeliveryTracker, make_producer
    from processor_api.runtime.kafka_io import KafkaCollector
    from processor_api.state.changelogging import ChangeRecord

    topic = f"bench-whatif-changelog-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [(topic, 1, {"cleanup.policy": "compact"})], exist_ok=False)
    changes = [ChangeRecord(b"key-%07d" % i, _LONG.pack(i), 1_700_000_000_000 + i)
               for i in range(records)]
    collector = KafkaCollector(DeliveryTracker(make_producer(bootstrap)), bootstrap)
    samples: dict[str, list[float]] = {"as is": [], "patched": []}
    for rep in range(reps):
        for name in (["as is", "patched"] if rep % 2 == 0 else ["patched", "as is"]):
            collector.tracker.reset()
            gc.collect()
            started = time.perf_counter()
            if name == "as is":
                collector.send_changes(topic, 0, changes)
            else:
                send_changes_lean(collector, topic, 0, changes)
            collector.tracker.flush_and_check(120)
            samples[name].append(records / (time.perf_counter() - started))
            assert collector.tracker.delivered == records, collector.tracker.delivered
    s = {name: stats(v) for name, v in samples.items()}
    log(f"  changelog produce: as is {s['as is']['median']:,.0f}/s, "
        f"patched {s['patched']['median']:,.0f}/s")
    return {"records": records, "records_per_s": s, "samples": samples,
            "speedup": s["patched"]["median"] / s["as is"]["median"]}


def apply() -> Callable[[], None]:
    """Patch the library in this process (P1-P3); returns the undo function."""
    from processor_api.processor import Record
    from processor_api.runtime.records import OutputRecord
    from processor_api.runtime.task import Task
    from processor_api.serdes import Serde, Serdes

    original_post_init = Record.__post_init__
    original_send = Task._send_to_sink

    def post_init(self: Record) -> None:
        timestamp = self.timestamp
        if self.headers.__class__ is tuple and not self.headers and (
            timestamp.__class__ is int and timestamp >= 0
        ):
            return
        original_post_init(self)

    class FastString(Serde):
        __slots__ = ()

        def serialize(self, obj: Any) -> bytes | None:
            if obj.__class__ is str:
                return obj.encode("utf-8")
            return Serde.serialize(self, obj)

        def deserialize(self, data: bytes | None) -> Any:
            if data.__class__ is bytes:
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            return Serde.deserialize(self, data)

    class FastLong(Serde):
        __slots__ = ()

        def serialize(self, obj: Any) -> bytes | None:
            if obj.__class__ is int and _LONG_MIN <= obj <= _LONG_MAX:
                return _LONG.pack(obj)
            return Serde.serialize(self, obj)

        def deserialize(self, data: bytes | None) -> Any:
            if data.__class__ is bytes and len(data) == 8:
                return _LONG.unpack(data)[0]
            return Serde.deserialize(self, data)

    def send_to_sink(self: Task, sink: Any, record: Record) -> None:
        topic = sink.topic
        if topic is None or sink.partitioner is not None:
            return original_send(self, sink, record)
        try:
            key = sink.key_serde.serialize(record.key)
            value = sink.value_serde.serialize(record.value)
        except Exception:  # noqa: BLE001 - the original path raises the proper error
            return original_send(self, sink, record)
        self.collector.send(OutputRecord(topic, key, value, record.timestamp, record.headers,
                                         None))
        return None

    Record.__post_init__ = post_init
    Serdes.string().__class__ = FastString
    Serdes.long().__class__ = FastLong
    Task._send_to_sink = send_to_sink

    def undo() -> None:
        Record.__post_init__ = original_post_init
        Serdes.string().__class__ = Serde
        Serdes.long().__class__ = Serde
        Task._send_to_sink = original_send

    return undo


def _punctuation_once(size: int, task_factory: Callable, fill: Callable) -> Callable[[], float]:
    from processor_api.runtime.records import InputRecord, ListCollector
    from topologies.product_count import build_topology

    root = Path(tempfile.mkdtemp(prefix="bench-whatif-"))
    collector = ListCollector()
    task = task_factory(build_topology(punctuate_interval_ms=1000), root / "0_0", collector)
    fill(task, "Counts", size)
    state = {"offset": 0}

    def fire() -> float:
        collector.drain()
        offset = state["offset"]
        state["offset"] += 1
        gc.collect()
        started = time.perf_counter()
        task.process_batch([InputRecord("logs", 0, offset, offset * 1000, b"key-0000000", b"v")])
        elapsed = time.perf_counter() - started
        forwarded = len(collector.drain())
        task.flush()
        return forwarded / elapsed

    fire.close = lambda: (task.close(), shutil.rmtree(root, ignore_errors=True))  # type: ignore[attr-defined]
    return fire


def run(sizes: list[int], reps: int, records: int, bootstrap: str | None = None) -> dict[str, Any]:
    from bench.punctuation import _fill, _records, make_task
    from processor_api.runtime.records import ListCollector
    from topologies.count_per_key import build_topology

    patches = ["P" + " ".join(p.split()) for p in __doc__.split("\n* P")[1:]]
    out: dict[str, Any] = {"patches": patches,
                           "punctuation": {}, "per_record": {}}
    for size in sizes:
        log(f"what-if: punctuation over {size} keys, as is vs patched")
        fire = _punctuation_once(size, make_task, _fill)
        fire()  # warm-up
        samples: dict[str, list[float]] = {"as is": [], "patched": []}
        for rep in range(reps):
            for name in (["as is", "patched"] if rep % 2 == 0 else ["patched", "as is"]):
                undo = apply() if name == "patched" else None
                try:
                    samples[name].append(fire())
                finally:
                    if undo:
                        undo()
        fire.close()  # type: ignore[attr-defined]
        s = {name: stats(v) for name, v in samples.items()}
        out["punctuation"][str(size)] = {
            "entries_per_s": s, "samples": samples,
            "speedup": s["patched"]["median"] / s["as is"]["median"],
        }
        log(f"  as is {s['as is']['median']:,.0f}/s, patched {s['patched']['median']:,.0f}/s")

    log(f"what-if: count per key, {records} records in process, as is vs patched")
    batch = _records(records)
    variants: dict[str, Callable[[], list[Callable[[], None]]]] = {
        "as is": lambda: [],
        "patched": lambda: [apply()],
        "patched + WAL off": lambda: [apply(), apply_wal_off()],
    }
    names = list(variants)
    per_record: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % 3:] + names[: rep % 3]:
            undos = variants[name]()
            root = Path(tempfile.mkdtemp(prefix="bench-whatif-"))
            try:
                task = make_task(build_topology(), root / "0_0", ListCollector())
                gc.collect()
                started = time.perf_counter()
                task.process_batch(batch)
                per_record[name].append((time.perf_counter() - started) / len(batch) * 1e6)
                task.flush()
                task.close()
            finally:
                for undo in undos:
                    undo()
                shutil.rmtree(root, ignore_errors=True)
    s = {name: stats(v) for name, v in per_record.items()}
    out["per_record"] = {"records": records, "us_per_record": s, "samples": per_record,
                         "speedup": s["as is"]["median"] / s["patched"]["median"],
                         "speedup_wal_off": s["as is"]["median"]
                         / s["patched + WAL off"]["median"]}
    log(f"  as is {s['as is']['median']:.2f} µs/record, patched {s['patched']['median']:.2f}, "
        f"+ WAL off {s['patched + WAL off']['median']:.2f}")
    if bootstrap:
        log(f"what-if: changelog produce of {records} records, as is vs lean produce")
        out["changelog_produce"] = changelog_produce(bootstrap, records, reps)
    out["reps"] = reps
    return out
