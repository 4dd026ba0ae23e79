"""Global and read-only state stores in the TopologyTestDriver (the cases of Kafka Streams'
``TopologyTestDriverTest`` that apply), and what task and global processors may do with them."""

from __future__ import annotations

import pytest

from processor_api import (
    HandlerResponse,
    KeyValueStore,
    ProcessingError,
    Processor,
    PunctuationType,
    Record,
    Serdes,
    StoreError,
    Stores,
    StreamsError,
    Topology,
    WindowStore,
)
from processor_api.testing import TopologyTestDriver

S = Serdes.string()


def global_kv(name, persistent=False):
    supplier = (
        Stores.persistent_key_value_store(name)
        if persistent
        else Stores.in_memory_key_value_store(name)
    )
    return Stores.key_value_store_builder(supplier, S, S).with_logging_disabled()


class PutInStore(Processor):
    """The usual global store processor: every record goes into the store."""

    def __init__(self, store_name="global-store"):
        self.store_name = store_name
        self.seen = []

    def init(self, context):
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record):
        self.seen.append((record, self.context.record_metadata()))
        if record.value is None:
            self.store.delete(record.key)
        else:
            self.store.put(record.key, record.value)


class Enrich(Processor):
    """A task processor that looks each key up in the global store."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("global-store")

    def process(self, record):
        self.context.forward(record.with_value(f"{record.value}+{self.store.get(record.key)}"))


def enrichment_topology(persistent=False, global_processor=PutInStore):
    return (
        Topology()
        .add_global_store(
            global_kv("global-store", persistent),
            "globalSource",
            S,
            S,
            "global-topic",
            "globalProcessor",
            global_processor,
        )
        .add_source("source", "input", key_serde=S, value_serde=S)
        .add_processor("enrich", Enrich, "source")
        .add_sink("sink", "output", "enrich", key_serde=S, value_serde=S)
    )


@pytest.mark.parametrize("persistent", [False, True], ids=["in-memory", "rocksdb"])
def test_global_store_is_populated_from_its_topic_and_read_by_tasks(persistent):
    with TopologyTestDriver(enrichment_topology(persistent)) as driver:
        store = driver.get_key_value_store("global-store")
        assert driver.get_state_store("global-store") is store
        assert store.persistent is persistent
        table = driver.create_input_topic("global-topic")
        inputs = driver.create_input_topic("input")
        output = driver.create_output_topic("output")
        table.pipe_input("k1", "one")
        assert store.get("k1") == "one"
        inputs.pipe_input("k1", "a")
        inputs.pipe_input("k2", "b")
        table.pipe_input("k2", "two")
        table.pipe_input("k1", None)
        inputs.pipe_input("k2", "c")
        inputs.pipe_input("k1", "d")
        assert output.read_values_to_list() == ["a+one", "b+None", "c+two", "d+None"]
        assert store.get("k1") is None


def test_global_processor_gets_deserialized_records_with_metadata_and_kafka_timestamp():
    processors = []

    def supplier():
        processors.append(PutInStore())
        return processors[-1]

    topology = enrichment_topology(global_processor=supplier)
    with TopologyTestDriver(topology) as driver:
        table = driver.create_input_topic("global-topic")
        table.pipe_input("k", "v", timestamp=42, headers=[("h", b"1")])
        table.pipe_input("k", "w", timestamp=7)
    (processor,) = processors
    (first, meta1), (second, meta2) = processor.seen
    assert (first.key, first.value, first.timestamp, first.headers) == (
        "k",
        "v",
        42,
        (("h", b"1"),),
    )
    assert (meta1.topic, meta1.partition, meta1.offset) == ("global-topic", 0, 0)
    assert (second.timestamp, meta2.offset) == (7, 1)


def test_global_source_timestamp_extractor_stamps_the_records():
    seen = []

    class Keep(Processor):
        def process(self, record):
            seen.append(record.timestamp)

    topology = (
        Topology()
        .add_global_store(
            global_kv("g"),
            "gs",
            S,
            S,
            "gt",
            "gp",
            Keep,
            timestamp_extractor=lambda record, partition_time: int(record.value),
        )
        .add_source("s", "in")
        .add_processor("p", Keep, "s")
    )
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("gt").pipe_input("k", "1234", timestamp=5)
    assert seen == [1234]


class Writer(Processor):
    def __init__(self, action):
        self.action = action

    def init(self, context):
        self.store = context.get_state_store("global-store")
        assert isinstance(self.store, KeyValueStore)

    def process(self, record):
        self.action(self.store)


@pytest.mark.parametrize(
    "write",
    [
        lambda s: s.put("k", "v"),
        lambda s: s.put_if_absent("k", "v"),
        lambda s: s.put_all([("k", "v")]),
        lambda s: s.delete("k"),
        lambda s: s.flush(),
        lambda s: s.close(),
        lambda s: s.undo_write(b"k", b"v"),
    ],
    ids=["put", "put_if_absent", "put_all", "delete", "flush", "close", "undo_write"],
)
def test_task_processor_cannot_write_a_global_store(write):
    topology = enrichment_topology()
    topology.add_processor("writer", lambda: Writer(write), "source")
    with TopologyTestDriver(topology) as driver:
        with pytest.raises(ProcessingError) as raised:
            driver.create_input_topic("input").pipe_input("k", "x")
        message = str(raised.value)
        assert "processor 'writer' cannot" in message
        assert "global state store 'global-store'" in message
        assert "only its global processor 'globalProcessor' updates it" in message
        assert raised.value.processor == "writer"
        # reads still work and the store is untouched
        assert driver.get_key_value_store("global-store").get("k") is None


def test_task_processor_write_in_init_is_refused_too():
    class WriteInInit(Processor):
        def init(self, context):
            context.get_state_store("global-store").put("k", "v")

        def process(self, record):
            pass

    topology = enrichment_topology()
    topology.add_processor("early", WriteInInit, "source")
    with pytest.raises(StoreError, match="processor 'early' cannot put\\(\\) global state store"):
        TopologyTestDriver(topology)


def test_global_window_store_view_refuses_put_and_keeps_reads():
    window = Stores.window_store_builder(
        Stores.in_memory_window_store("win", 60_000, 1_000, False), S, S
    ).with_logging_disabled()
    got = {}

    class Fill(Processor):
        def init(self, context):
            self.store = context.get_state_store("win")

        def process(self, record):
            self.store.put(record.key, record.value, record.timestamp)

    class Read(Processor):
        def init(self, context):
            self.store = context.get_state_store("win")

        def process(self, record):
            got["isinstance"] = isinstance(self.store, WindowStore)
            got["fetch"] = self.store.fetch(record.key, 1_000)
            self.store.put(record.key, "x", 2_000)

    topology = (
        Topology()
        .add_global_store(window, "gs", S, S, "gt", "gp", Fill)
        .add_source("s", "in", key_serde=S, value_serde=S)
        .add_processor("reader", Read, "s")
    )
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("gt").pipe_input("k", "v", timestamp=1_000)
        with pytest.raises(
            ProcessingError, match="'reader' cannot put\\(\\) global state store 'win'"
        ):
            driver.create_input_topic("in").pipe_input("k", "x")
        assert got == {"isinstance": True, "fetch": "v"}
        assert driver.get_window_store("win").fetch("k", 2_000) is None


def test_global_processor_cannot_forward_schedule_or_read_stream_time():
    calls = {}

    class Probe(Processor):
        def init(self, context):
            self.context = context
            for name, call in {
                "schedule": lambda: context.schedule(10, PunctuationType.WALL_CLOCK_TIME),
                "stream_time": context.current_stream_time_ms,
            }.items():
                with pytest.raises(StreamsError) as raised:
                    call()
                calls[name] = str(raised.value)
            context.commit()  # allowed, does nothing
            calls["task_id"] = context.task_id

        def process(self, record):
            self.context.forward(record)

    topology = enrichment_topology(global_processor=Probe)
    with TopologyTestDriver(topology) as driver:
        assert "'globalProcessor' cannot schedule" in calls["schedule"]
        assert "no stream time for a global processor" in calls["stream_time"]
        assert calls["task_id"] == "-1_-1"
        with pytest.raises(ProcessingError, match="'globalProcessor' cannot forward records"):
            driver.create_input_topic("global-topic").pipe_input("k", "v")


def test_global_processor_failure_names_store_topic_offset_and_processor():
    class Boom(Processor):
        def process(self, record):
            raise ValueError("bad customer")

    topology = enrichment_topology(global_processor=Boom)
    with TopologyTestDriver(topology) as driver:
        table = driver.create_input_topic("global-topic")
        with pytest.raises(ProcessingError) as raised:
            table.pipe_input("k", "v")
    error = raised.value
    assert "global store 'global-store': process() raised ValueError: bad customer" in str(error)
    assert (error.topic, error.partition, error.offset, error.processor) == (
        "global-topic",
        0,
        0,
        "globalProcessor",
    )


def test_global_deserialization_errors_go_to_the_handler():
    topology = (
        Topology()
        .add_global_store(
            Stores.key_value_store_builder(
                Stores.in_memory_key_value_store("g"), S, Serdes.long()
            ).with_logging_disabled(),
            "gs",
            S,
            Serdes.long(),
            "gt",
            "gp",
            lambda: PutInStore("g"),
        )
        .add_source("s", "in")
        .add_processor("p", lambda: PutInStore("g"), "s")
    )
    with TopologyTestDriver(topology) as driver:
        table = driver.create_input_topic("gt", S, Serdes.bytes())
        with pytest.raises(ProcessingError, match="cannot deserialize record.*topic=gt"):
            table.pipe_input("k", b"abc")
    config = {"deserialization_exception_handler": "log_and_continue"}
    with TopologyTestDriver(topology, config) as driver:
        table = driver.create_input_topic("gt", S, Serdes.bytes())
        table.pipe_input("bad", b"abc")
        table.pipe_input("good", (5).to_bytes(8, "big"))
        store = driver.get_key_value_store("g")
        assert (store.get("bad"), store.get("good")) == (None, 5)


def test_records_written_to_a_global_topic_update_the_store_in_order():
    """Kafka Streams' shouldApplyGlobalUpdatesCorrectlyInRecursiveTopologies and
    shouldCaptureGlobalTopicNameIfWrittenInto."""

    class Recursive(Processor):
        def init(self, context):
            self.context = context

        def process(self, record):
            if not record.value.startswith("recurse-"):
                self.context.forward(record.with_value("recurse-" + record.value), "recursiveSink")
            self.context.forward(record, "sink")
            self.context.forward(record, "globalSink")

    topology = (
        Topology()
        .add_source("source", "input", key_serde=S, value_serde=S)
        .add_global_store(
            global_kv("global-store"),
            "globalSource",
            S,
            S,
            "global-topic",
            "globalProcessor",
            PutInStore,
        )
        .add_processor("recursiveProcessor", Recursive, "source")
        .add_sink("recursiveSink", "input", "recursiveProcessor", key_serde=S, value_serde=S)
        .add_sink("sink", "output", "recursiveProcessor", key_serde=S, value_serde=S)
        .add_sink("globalSink", "global-topic", "recursiveProcessor", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(topology) as driver:
        assert driver.produced_topics() == []
        driver.create_input_topic("input").pipe_input("A", "alpha")
        assert driver.get_key_value_store("global-store").get("A") == "recurse-alpha"
        events = driver.create_output_topic("global-topic").read_key_values_to_list()
        assert events == [("A", "alpha"), ("A", "recurse-alpha")]
        assert "global-topic" in driver.produced_topics()


def test_typed_getters_find_global_stores_and_check_their_kind():
    with TopologyTestDriver(enrichment_topology()) as driver:
        with pytest.raises(StoreError, match="'global-store' is not a window store"):
            driver.get_window_store("global-store")
        with pytest.raises(StoreError, match="no state store named 'nope'.*'global-store'"):
            driver.get_state_store("nope")


def test_read_only_state_store_is_filled_by_its_processor_and_read_by_connected_processors():
    class Lookup(Processor):
        def init(self, context):
            self.context = context
            self.store = context.get_state_store("customers")

        def process(self, record):
            self.context.forward(record.with_value(self.store.get(record.key)))

    topology = (
        Topology()
        .add_read_only_state_store(
            Stores.key_value_store_builder(Stores.persistent_key_value_store("customers"), S, S),
            "customers-source",
            S,
            S,
            "customers",
            "customers-processor",
            lambda: PutInStore("customers"),
        )
        .add_source("orders", "orders", key_serde=S, value_serde=S)
        .add_processor("lookup", Lookup, "orders")
        .connect_processor_and_state_stores("lookup", "customers")
        .add_sink("out", "enriched", "lookup", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("customers").pipe_input("c1", "Ada")
        driver.create_input_topic("orders").pipe_input("c1", "order-1")
        assert driver.create_output_topic("enriched").read_value() == "Ada"
        assert driver.get_key_value_store("customers").get("c1") == "Ada"
        assert driver.produced_topics() == ["enriched"]  # no changelog topic: logging is off


def test_input_topic_time_cannot_go_back():
    with TopologyTestDriver(enrichment_topology()) as driver:
        topic = driver.create_input_topic("input", start_timestamp=100)
        with pytest.raises(ValueError, match="topic 'input': advance must not be negative"):
            topic.advance_time(-1)
        with pytest.raises(ValueError, match="auto_advance must not be negative"):
            driver.create_input_topic("input", auto_advance=-5)
        topic.advance_time(0)
        topic.pipe_input("k", "v")
        assert driver.create_output_topic("output").read_record().timestamp == 100


def test_record_type_is_checked_before_reaching_the_global_processor():
    with TopologyTestDriver(enrichment_topology()) as driver:
        table = driver.create_input_topic("global-topic")
        table.pipe_record(Record("k", "v", 3))
        assert driver.get_key_value_store("global-store").get("k") == "v"


class PutTwice(Processor):
    def init(self, context):
        self.store = context.get_state_store("counts")

    def process(self, record):
        self.store.put(record.key, 1)
        self.store.put(record.key, 2)


@pytest.mark.parametrize("caching", [False, True], ids=["no-cache", "cache"])
def test_changelog_records_can_be_read_like_an_output_topic(caching):
    builder = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("counts"), S, Serdes.long()
    )
    if caching:
        builder.with_caching_enabled()
    topology = (
        Topology()
        .add_source("s", "in", key_serde=S, value_serde=S)
        .add_processor("p", PutTwice, "s")
        .add_state_store(builder, "p")
    )
    config = {"application_id": "app"}
    with TopologyTestDriver(topology, config) as driver:
        driver.create_input_topic("in").pipe_input("k", "x", timestamp=5)
        driver.create_input_topic("in").pipe_input("j", "x", timestamp=6)
        assert driver.produced_topics() == ["app-counts-changelog"]
        changelog = driver.create_output_topic("app-counts-changelog", S, Serdes.long())
        records = [(r.key, r.value, r.timestamp) for r in changelog.read_records_to_list()]
    if caching:  # the driver commits after each input record: one change per key and record
        assert records == [("k", 2, 5), ("j", 2, 6)]
    else:
        assert records == [("k", 1, 5), ("k", 2, 5), ("j", 1, 6), ("j", 2, 6)]


def resume_to_dead_letters(context, record, error):
    return HandlerResponse.resume(context.dead_letter_records(error))


def test_global_deserialization_handler_dead_letter_records_are_produced():
    topology = enrichment_topology()
    config = {
        "deserialization.exception.handler": f"{__name__}:resume_to_dead_letters",
        "dead_letter_topic": "dlq",
    }
    with TopologyTestDriver(topology, config) as driver:
        table = driver.create_input_topic("global-topic", S, Serdes.bytes())
        table.pipe_input("bad", b"\xff\xfe", timestamp=9)  # not UTF-8
        (dead,) = driver.create_output_topic("dlq").read_records_to_list()
        assert dead.key == b"bad" and dead.timestamp == 9
        assert driver.get_key_value_store("global-store").get("bad") is None
