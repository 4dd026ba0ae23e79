"""ProcessorContext.forward_all: the same records as a forward() per entry, fast path or not."""

from __future__ import annotations

import struct

import pytest

from processor_api import (
    ProcessingError,
    Processor,
    PunctuationType,
    Record,
    Serde,
    Serdes,
    Stores,
    Topology,
)
from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector, OutputRecord
from processor_api.engine.sink import SinkNode
from processor_api.engine.task import Task
from processor_api.processor import ProcessorContext
from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.testing import TopologyTestDriver


class Snapshot(Processor):
    """Counts per key; every 10 ms of stream time forwards the store, in bulk or one by one.

    A record with value ``"del"`` deletes its key; ``peek`` peeks before forwarding;
    ``materialize`` forwards a list of ``(key, value)`` tuples instead of the store iterator.
    """

    def __init__(self, bulk, child=None, peek=False, materialize=False, lo=None, hi=None):
        self.bulk, self.child, self.peek, self.materialize = bulk, child, peek, materialize
        self.lo, self.hi = lo, hi
        self.forwarded: list[int] = []

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("counts")
        context.schedule(10, PunctuationType.STREAM_TIME)

    def process(self, record):
        if record.value == "del":
            self.store.delete(record.key)
        else:
            self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def punctuate(self, timestamp):
        with self.store.range(self.lo, self.hi) as entries:
            if self.peek:
                entries.peek_next_key()
            if self.materialize:
                entries = [(entry.key, entry.value) for entry in entries]
            if self.bulk:
                self.forwarded.append(self.context.forward_all(entries, timestamp, self.child))
                return
            count = 0
            for key, value in entries:
                self.context.forward(Record(key, value, timestamp), self.child)
                count += 1
            self.forwarded.append(count)


class Relay(Processor):
    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record)


class LongAsText(Serde):
    """A custom serde with the long wire format: never passed through (not built-in)."""

    def __init__(self):
        super().__init__(
            struct.Struct(">q").pack, lambda data: struct.unpack(">q", data)[0], "long-as-text"
        )


def build(bulk, layout="sink", *, in_memory=False, caching=False, **options):
    supplier = (
        Stores.in_memory_key_value_store("counts")
        if in_memory
        else Stores.persistent_key_value_store("counts")
    )
    store = Stores.key_value_store_builder(supplier, Serdes.string(), Serdes.long())
    if caching:
        store.with_caching_enabled()
    processors: list[Snapshot] = []

    def supplier_fn():
        processor = Snapshot(bulk, **options)
        processors.append(processor)
        return processor

    topology = (
        Topology()
        .add_source("src", "in", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("snap", supplier_fn, "src")
        .add_state_store(store, "snap")
    )
    keys, longs = Serdes.string(), Serdes.long()
    if layout == "sink":
        topology.add_sink("out", "out", "snap", key_serde=keys, value_serde=longs)
    elif layout == "two-sinks":
        topology.add_sink("out", "out", "snap", key_serde=keys, value_serde=longs)
        topology.add_sink("copy", "copy", "snap", key_serde=keys, value_serde=longs)
    elif layout == "relay":
        topology.add_processor("relay", Relay, "snap")
        topology.add_sink("out", "out", "relay", key_serde=keys, value_serde=longs)
    elif layout == "sink-and-relay":
        topology.add_sink("out", "out", "snap", key_serde=keys, value_serde=longs)
        topology.add_processor("relay", Relay, "snap")
        topology.add_sink("copy", "copy", "relay", key_serde=keys, value_serde=longs)
    elif layout == "json-values":
        topology.add_sink("out", "out", "snap", key_serde=keys, value_serde=Serdes.json())
    elif layout == "custom-values":
        topology.add_sink("out", "out", "snap", key_serde=keys, value_serde=LongAsText())
    elif layout == "bytes-keys":
        topology.add_sink("out", "out", "snap", key_serde=Serdes.bytes(), value_serde=longs)
    elif layout == "partitioner":
        topology.add_sink(
            "out",
            "out",
            "snap",
            key_serde=keys,
            value_serde=longs,
            partitioner=lambda topic, key, value, count: 0,
        )
    elif layout == "extractor":
        topology.add_sink("out", lambda record: "out", "snap", key_serde=keys, value_serde=longs)
    else:
        raise AssertionError(layout)
    return topology, processors


INPUT = [
    ("b", "x", 1),
    ("a", "x", 3),
    ("c", "x", 5),
    ("a", "x", 12),
    ("é", "x", 13),
    ("b", "del", 14),
    ("d", "x", 25),
    ("b", "x", 26),
    ("a", "del", 40),
    ("e", "x", 41),
]


@pytest.fixture(autouse=True, params=["record-by-record", "lists"])
def collector_kind(request, monkeypatch):
    """Every test twice: collectors taking one record per call, and ones taking lists too
    (as the Kafka collector does: ``send_values``). Yields the lists handed over."""
    lists: list[int] = []
    if request.param == "lists":

        def send_values(self, topic, entries, timestamp):
            lists.append(len(entries))
            for key, value in entries:
                self.send(OutputRecord(topic, key, value, timestamp, (), None))

        monkeypatch.setattr(ListCollector, "send_values", send_values, raising=False)
    return lists


@pytest.fixture
def raw_sends(monkeypatch):
    """Counts the calls of the raw store-to-sink path."""
    calls = []
    original = SinkNode.send_raw

    def spy(store, entries, timestamp, sinks):
        calls.append(timestamp)
        return original(store, entries, timestamp, sinks)

    monkeypatch.setattr(SinkNode, "send_raw", staticmethod(spy))
    return calls


def run(topology, processors, records=INPUT):
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        for key, value, timestamp in records:
            topic.pipe_input(key, value, timestamp=timestamp)
        outputs = {name: list(queue) for name, queue in driver._output.items()}
    return outputs, [n for p in processors for n in p.forwarded]


def assert_same_as_loop(layout, **options):
    expected = run(*build(False, layout, **options))
    actual = run(*build(True, layout, **options))
    assert actual == expected
    assert expected[0]  # something was produced
    return actual


@pytest.mark.parametrize("in_memory", [False, True], ids=["rocksdb", "in-memory"])
@pytest.mark.parametrize("caching", [False, True], ids=["nocache", "cache"])
def test_fast_path_to_a_sink_produces_the_stored_bytes(raw_sends, in_memory, caching):
    outputs, counts = assert_same_as_loop("sink", in_memory=in_memory, caching=caching)
    assert raw_sends == [1, 12, 25, 40]  # every punctuation took the raw path
    assert counts == [1, 3, 4, 4]
    last = [(r.key, r.value, r.timestamp) for r in outputs["out"][-4:]]
    pack = struct.Struct(">q").pack
    # the punctuation at 40 runs after "a" was deleted (a cache tombstone when caching)
    assert last == [
        (b"b", pack(1), 40),
        (b"c", pack(1), 40),
        (b"d", pack(1), 40),
        ("é".encode(), pack(1), 40),
    ]
    assert all(r.headers == () and r.partition is None for r in outputs["out"])


def test_fast_path_to_two_sinks_interleaves_like_forward(raw_sends):
    outputs, _ = assert_same_as_loop("two-sinks")
    assert raw_sends
    assert len(outputs["copy"]) == len(outputs["out"])


def test_fast_path_for_a_named_child(raw_sends):
    outputs, _ = assert_same_as_loop("two-sinks", child="copy")
    assert raw_sends
    assert [topic for topic in outputs if not topic.endswith("-changelog")] == ["copy"]


def test_fast_path_over_a_range(raw_sends):
    outputs, counts = assert_same_as_loop("sink", lo="b", hi="d")
    assert raw_sends
    assert counts == [1, 2, 2, 3]


@pytest.mark.parametrize(
    "layout",
    ["relay", "sink-and-relay", "json-values", "custom-values", "partitioner", "extractor"],
)
def test_fallback_when_not_straight_to_a_sink_with_the_store_serdes(raw_sends, layout):
    assert_same_as_loop(layout)
    assert raw_sends == []


def test_fallback_fails_like_the_loop_when_the_sink_cannot_serialize(raw_sends):
    errors = []
    for bulk in (False, True):
        with pytest.raises(ProcessingError) as info:
            run(*build(bulk, "bytes-keys"))  # str keys to a bytes serde
        errors.append((str(info.value), type(info.value.__cause__)))
    assert errors[1] == errors[0]
    assert "bytes serde expects bytes" in errors[0][0]
    assert raw_sends == []


@pytest.mark.parametrize("option", ["peek", "materialize"])
def test_fallback_for_peeked_iterators_and_plain_pairs(raw_sends, option):
    assert_same_as_loop("sink", **{option: True})
    assert raw_sends == []


def make_task(topology, collector, task_dir, buffered=False):
    (sub,) = topology.subtopologies()

    def factory(builder, timestamp_fn):
        if not buffered:
            return builder.build(state_dir=task_dir, timestamp_fn=timestamp_fn)
        inner = BatchBufferBytesStore(builder.supplier.get(task_dir))
        return builder.build(timestamp_fn=timestamp_fn, inner=inner)

    return Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=factory,
        collector=collector,
        config=StreamsConfig(application_id="t"),
    )


def batch(records=INPUT):
    return [
        InputRecord("in", 0, offset, timestamp, key.encode(), value.encode())
        for offset, (key, value, timestamp) in enumerate(records)
    ]


def test_fast_path_sees_the_uncommitted_writes_of_a_batch_buffer(tmp_path, raw_sends):
    """As on Spark: the batch's writes are only in the buffer above RocksDB."""
    results = []
    for bulk in (False, True):
        collector = ListCollector()
        task = make_task(build(bulk)[0], collector, tmp_path / str(bulk), buffered=True)
        task.process_batch(batch())
        results.append(collector.drain())
        task.close()
    assert results[1] == results[0]
    assert raw_sends == [1, 12, 25, 40]


@pytest.mark.parametrize(
    ("bad_key", "bad_value", "error"),
    [
        (b"\xff\xfe", struct.pack(">q", 1), "string serde cannot deserialize"),
        (b"bad-length", b"\x00\x01", "long serde expects 8 bytes, got 2"),
    ],
)
def test_stored_bytes_the_serdes_reject_fail_as_in_a_loop(
    tmp_path, raw_sends, bad_key, bad_value, error
):
    results = []
    for bulk in (False, True):
        collector = ListCollector()
        task = make_task(build(bulk)[0], collector, tmp_path / str(bulk))
        task.stores["counts"].inner.put(bad_key, bad_value)
        with pytest.raises(ProcessingError) as info:
            task.process_batch(batch([("a", "x", 1)]))
        results.append((collector.drain(), str(info.value), type(info.value.__cause__)))
        task.close()
    assert results[1] == results[0]
    assert error in results[0][1]
    assert results[0][0]  # the entries before the bad one were produced
    assert raw_sends == [1]  # by the raw path in the bulk run


class BadCall(Snapshot):
    def __init__(self, child, timestamp):
        super().__init__(True, child=child)
        self.timestamp = timestamp

    def punctuate(self, timestamp):
        with self.store.all() as entries:
            self.context.forward_all(entries, self.timestamp, self.child)


@pytest.mark.parametrize(
    ("child", "timestamp", "error", "match"),
    [
        ("nope", 1, ProcessingError, "forwarded to unknown child 'nope'"),
        (None, -1, ValueError, "must be >= 0"),
        (None, 1.5, TypeError, "must be an int"),
    ],
)
def test_unknown_child_and_bad_timestamp(tmp_path, child, timestamp, error, match):
    store = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    topology = (
        Topology()
        .add_source("src", "in", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("snap", lambda: BadCall(child, timestamp), "src")
        .add_state_store(store, "snap")
        .add_sink("out", "out", "snap", key_serde=Serdes.string(), value_serde=Serdes.long())
    )
    task = make_task(topology, ListCollector(), tmp_path)
    with pytest.raises(ProcessingError, match=match) as info:
        task.process_batch(batch([("a", "x", 1)]))
    assert isinstance(info.value if error is ProcessingError else info.value.__cause__, error)
    assert task.collector.records == []
    task.close()


def test_base_context_forwards_one_record_per_entry():
    class Recording(ProcessorContext):
        def __init__(self):
            self.records = []

        def forward(self, record, child=None):
            self.records.append((record, child))

        def schedule(self, interval, type=PunctuationType.STREAM_TIME, punctuator=None):
            raise NotImplementedError

        def commit(self):
            pass

        def get_state_store(self, name):
            raise NotImplementedError

        def record_metadata(self):
            return None

        def current_stream_time_ms(self):
            return -1

        def current_system_time_ms(self):
            return 0

    context = Recording()
    assert context.forward_all([("a", 1), ("b", 2)], 7, "c") == 2
    assert context.records == [(Record("a", 1, 7), "c"), (Record("b", 2, 7), "c")]
    with pytest.raises(ValueError, match=">= 0"):
        context.forward_all([], -1)


def test_a_large_range_goes_out_in_lists_in_store_order(tmp_path, collector_kind):
    """More entries than one list holds, over a bounded range, forwards and backwards."""
    from processor_api.engine import sink

    keys = [f"k{i:05d}" for i in range(2 * sink._RAW_CHUNK + 10)]
    lo, hi = keys[3], keys[-4]
    results = []
    for bulk in (False, True):
        collector = ListCollector()
        topology = build(bulk, lo=lo, hi=hi)[0]
        task = make_task(topology, collector, tmp_path / str(bulk))
        task.stores["counts"].inner.put_all([(k.encode(), struct.pack(">q", 1)) for k in keys])
        task.process_batch(batch([("a", "x", 1)]))
        results.append([(r.key, r.value, r.timestamp) for r in collector.drain()])
        task.close()
    assert results[1] == results[0]
    assert [key for key, _, _ in results[1]] == [k.encode() for k in keys[3:-3]]
    if hasattr(ListCollector, "send_values"):  # the list-taking variant: lists were used
        assert sum(collector_kind) == len(keys) - 6
        assert max(collector_kind) == sink._RAW_CHUNK
