"""Pluggable exception handlers: ``module:callable`` handlers with typed responses
(KIP-1033/KIP-1034), the production handler for sink serialization errors and for the
runtime's delivery errors, and the rollback of a skipped record's store writes."""

from __future__ import annotations

import pytest

from processor_api import (
    ConfigError,
    DeadLetterRecord,
    ErrorHandlerContext,
    HandlerResponse,
    ProcessingError,
    Processor,
    PunctuationType,
    Record,
    Serdes,
    SessionWindow,
    Stores,
    Topology,
    Windowed,
)
from processor_api.config import StreamsConfig
from processor_api.engine.error_handling import FatalProcessingError, handle_production_error
from processor_api.engine.records import InputRecord, OutputRecord
from processor_api.errors import RecordSendError
from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.testing import TopologyTestDriver

HERE = __name__  # handlers are named "tests.core.test_handlers:<function>"
CALLS: list[tuple[ErrorHandlerContext, object, Exception]] = []


@pytest.fixture(autouse=True)
def reset_calls():
    CALLS.clear()


# ------------------------------------------------------------ handlers named in the config
def resume_to_quarantine(context, record, error):
    CALLS.append((context, record, error))
    return HandlerResponse.resume(
        [DeadLetterRecord("quarantine", b"why", str(error).encode(), (("n", b"1"),))]
    )


def fail_with_dead_letter(context, record, error):
    CALLS.append((context, record, error))
    return HandlerResponse.fail(context.dead_letter_records(error, topic="last-words"))


def resume_standard(context, record, error):
    CALLS.append((context, record, error))
    return HandlerResponse.resume(context.dead_letter_records(error))


def broken_handler(context, record, error):
    raise KeyError("handler bug")


def says_yes(context, record, error):
    return "yes"


NOT_CALLABLE = 42


# ------------------------------------------------------------------------------ topologies
class Doubler(Processor):
    """Forwards ``value * 2`` (as a long) to its child; ``fail`` raises in the child."""

    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record.with_value(record.value * 2))


class Picky(Processor):
    def init(self, context):
        self.context = context

    def process(self, record):
        if record.value == 14:
            raise ValueError("14 is not welcome")
        self.context.forward(record)


def doubling_topology(sink_value_serde=None):
    return (
        Topology()
        .add_source("in", "numbers", key_serde=Serdes.string(), value_serde=Serdes.long())
        .add_processor("double", Doubler, "in")
        .add_processor("picky", Picky, "double")
        .add_sink(
            "out",
            "doubled",
            "picky",
            key_serde=Serdes.string(),
            value_serde=sink_value_serde or Serdes.long(),
        )
    )


# ------------------------------------------------------------------------------ config
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("no_such_module_xyz:handler", "cannot import module 'no_such_module_xyz'"),
        (f"{HERE}:missing", "has no 'missing'"),
        (f"{HERE}:NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
        ("log_and_panic", "must be log_and_fail, log_and_continue or MODULE:CALLABLE"),
    ],
)
@pytest.mark.parametrize(
    "key",
    [
        "deserialization.exception.handler",
        "processing.exception.handler",
        "production.exception.handler",
    ],
)
def test_a_bad_handler_is_a_config_error_naming_key_and_value(key, value, why):
    normalized = key.replace(".", "_")
    with pytest.raises(ConfigError, match=f"{normalized}.*{value}.*") as info:
        StreamsConfig.from_dict({key: value})
    assert why in str(info.value)


def test_handlers_resolve_by_name_by_reference_or_as_callables():
    config = StreamsConfig.from_dict(
        {
            "deserialization.exception.handler": f"{HERE}:resume_to_quarantine",
            "processing.exception.handler": resume_standard,
            "production.exception.handler": "log_and_continue",
        }
    )
    assert config.deserialization_exception_handler == f"{HERE}:resume_to_quarantine"
    assert config.processing_exception_handler is resume_standard


# ------------------------------------------------------------------- deserialization
def test_deserialization_handler_resumes_with_its_own_dead_letter_records():
    config = {"deserialization.exception.handler": f"{HERE}:resume_to_quarantine"}
    with TopologyTestDriver(doubling_topology(), config) as driver:
        text = driver.create_input_topic("numbers", value_serde=Serdes.string())
        text.pipe_input("a", "oops", timestamp=5, headers=[("h", b"v")])
        driver.create_input_topic("numbers").pipe_input("b", 3, timestamp=6)
        assert driver.create_output_topic("doubled").read_key_values_to_list() == [("b", 6)]
        (dead,) = driver.create_output_topic("quarantine").read_records_to_list()
        assert (dead.key, dead.headers, dead.timestamp) == (b"why", (("n", b"1"),), 5)
        assert b"long serde expects 8 bytes" in dead.value
    ((context, record, error),) = CALLS
    assert (context.topic, context.partition, context.offset) == ("numbers", 0, 0)
    assert (context.processor, context.task_id, context.timestamp) == ("in", "0_0", 5)
    assert (context.source_raw_key, context.source_raw_value) == (b"a", b"oops")
    assert context.headers == (("h", b"v"),)
    assert isinstance(record, InputRecord) and record.value == b"oops"
    assert type(error).__name__ == "SerializationError"


def test_fail_with_dead_letter_records_produces_them_then_stops():
    config = {
        "deserialization.exception.handler": f"{HERE}:fail_with_dead_letter",
        "dead_letter_topic": "dlq",
    }
    with TopologyTestDriver(doubling_topology(), config) as driver:
        text = driver.create_input_topic("numbers", value_serde=Serdes.string())
        with pytest.raises(ProcessingError, match="cannot deserialize record.*offset=0"):
            text.pipe_input("a", "oops", timestamp=5)
        (dead,) = driver._collector.drain()  # produced before the task stopped
    assert (dead.topic, dead.key, dead.value) == ("last-words", b"a", b"oops")
    headers = dict(dead.headers)
    assert headers["__streams.errors.processor"] == b"in"
    assert headers["__streams.errors.exception"] == b"SerializationError"


# ------------------------------------------------------------------------ processing
def test_processing_handler_gets_the_record_the_failing_processor_got():
    config = {"processing.exception.handler": f"{HERE}:resume_standard", "dead_letter_topic": "dlq"}
    with TopologyTestDriver(doubling_topology(), config) as driver:
        numbers = driver.create_input_topic("numbers")
        numbers.pipe_input("a", 7, timestamp=9)  # doubled to 14: picky raises
        numbers.pipe_input("b", 1, timestamp=10)
        assert driver.create_output_topic("doubled").read_key_values_to_list() == [("b", 2)]
        (dead,) = driver.create_output_topic(
            "dlq", Serdes.bytes(), Serdes.bytes()
        ).read_records_to_list()
    ((context, record, error),) = CALLS
    assert record == Record("a", 14, 9)  # what "picky" got, not the source record
    assert isinstance(error, ValueError) and context.processor == "picky"
    assert (dead.key, dead.value) == (b"a", Serdes.long().serialize(7))  # the input's bytes
    assert dict(dead.headers)["__streams.errors.message"] == b"14 is not welcome"


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("broken_handler", "processing exception handler .*broken_handler raised KeyError"),
        ("says_yes", "returned 'yes', expected a HandlerResponse"),
    ],
)
def test_a_handler_that_raises_or_answers_nonsense_stops_the_task(handler, message):
    config = {"processing.exception.handler": f"{HERE}:{handler}"}
    with TopologyTestDriver(doubling_topology(), config) as driver:
        numbers = driver.create_input_topic("numbers")
        with pytest.raises(FatalProcessingError, match=f"{message}.*offset=0.*processor=picky"):
            numbers.pipe_input("a", 7, timestamp=9)


# ------------------------------------------------------------------------ production
class Shout(Processor):
    """Writes the value to store ``seen`` and forwards it to both sinks."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("seen")

    def process(self, record):
        self.store.put(record.key, record.value)
        self.context.forward(record)


def two_sinks_topology():
    store = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("seen"), Serdes.string(), Serdes.string()
    )
    return (
        Topology()
        .add_source("in", "words", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("shout", Shout, "in")
        .add_state_store(store, "shout")
        .add_sink("as-long", "longs", "shout", key_serde=Serdes.string(), value_serde=Serdes.long())
        .add_sink(
            "as-text", "texts", "shout", key_serde=Serdes.string(), value_serde=Serdes.string()
        )
    )


def test_production_handler_continue_drops_only_the_unserializable_output():
    config = {
        "production.exception.handler": f"{HERE}:resume_standard",
        "dead_letter_topic": "dlq",
    }
    with TopologyTestDriver(two_sinks_topology(), config) as driver:
        driver.create_input_topic("words").pipe_input("k", "hello", timestamp=3)
        assert driver.create_output_topic("longs").is_empty()
        assert driver.create_output_topic("texts").read_key_values_to_list() == [("k", "hello")]
        assert driver.get_key_value_store("seen").get("k") == "hello"  # no rollback
        (dead,) = driver.create_output_topic(
            "dlq", Serdes.bytes(), Serdes.bytes()
        ).read_records_to_list()
        assert dict(dead.headers)["__streams.errors.processor"] == b"as-long"
    ((context, record, error),) = CALLS
    assert context.serialization_origin == "value" and context.processor == "as-long"
    assert record == Record("k", "hello", 3)
    assert context.offset == 0 and type(error).__name__ == "SerializationError"


def test_production_fail_is_final_even_when_processing_errors_continue():
    config = {"processing.exception.handler": "log_and_continue"}  # production: log_and_fail
    with TopologyTestDriver(two_sinks_topology(), config) as driver:
        words = driver.create_input_topic("words")
        with pytest.raises(
            FatalProcessingError,
            match="sink could not serialize or route the record: long serde expects int.*"
            "offset=0.*processor=as-long",
        ):
            words.pipe_input("k", "hello", timestamp=3)


def test_the_runtime_asks_the_production_handler_about_delivery_errors():
    sent: list[OutputRecord] = []
    record = OutputRecord("out", b"k", b"v", 12, (), 1)
    config = StreamsConfig.from_dict(
        {"production.exception.handler": f"{HERE}:resume_to_quarantine"}
    )
    response = handle_production_error(
        config, task_id="0_1", record=record, error=TimeoutError("broker gone"), send=sent.append
    )
    assert not response.failed
    assert sent == [OutputRecord("quarantine", b"why", b"broker gone", 0, (("n", b"1"),), None)]
    ((context, given, error),) = CALLS
    assert given is record and context.task_id == "0_1" and context.topic is None
    default = handle_production_error(
        StreamsConfig(), task_id="0_1", record=record, error=TimeoutError("x"), send=sent.append
    )
    assert default.failed and len(sent) == 1


# -------------------------------------------------------------------------- rollback
class Ledger(Processor):
    """Per record: ``total[key] += value``, a blind write of ``last``, ``put_if_absent`` of
    ``first[key]``, a bulk write and a delete; raises at the end when the value is 13."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("ledger")
        context.schedule(100, PunctuationType.STREAM_TIME, self.tick)

    def process(self, record):
        store = self.store
        store.put(f"total:{record.key}", (store.get(f"total:{record.key}") or 0) + record.value)
        store.put("last", record.value)
        store.put_if_absent(f"first:{record.key}", record.value)
        store.put_all([(f"bulk:{record.value % 3}", record.value), ("bulk:x", record.value)])
        store.delete("doomed")
        if record.value == 13:
            raise RuntimeError("13 brings bad luck")
        self.context.forward(record)

    def tick(self, timestamp):
        self.store.put("last", -1)
        self.store.put("tick", timestamp)
        if timestamp >= 200:
            raise RuntimeError("punctuation at 200 fails")


def ledger_topology(persistent: bool, caching: bool):
    supplier = (
        Stores.persistent_key_value_store("ledger")
        if persistent
        else Stores.in_memory_key_value_store("ledger")
    )
    store = Stores.key_value_store_builder(supplier, Serdes.string(), Serdes.long())
    if caching:
        store.with_caching_enabled()
    return (
        Topology()
        .add_source("in", "amounts", key_serde=Serdes.string(), value_serde=Serdes.long())
        .add_processor("ledger", Ledger, "in")
        .add_state_store(store, "ledger")
        .add_sink("out", "accepted", "ledger", key_serde=Serdes.string(), value_serde=Serdes.long())
    )


def contents(store):
    return {entry.key: entry.value for entry in store.all()}


@pytest.mark.parametrize("buffered", [False, True], ids=["direct", "batch-buffer"])
@pytest.mark.parametrize("caching", [False, True], ids=["nocache", "cache"])
@pytest.mark.parametrize("persistent", [False, True], ids=["in-memory", "rocksdb"])
def test_a_skipped_record_leaves_the_stores_as_they_were(
    persistent, caching, buffered, monkeypatch
):
    if buffered:  # the Spark runtime's layout: a batch buffer right above the inner store
        from processor_api.state.builder import StoreBuilder

        build = StoreBuilder.build

        def buffered_build(self, state_dir=None, timestamp_fn=lambda: 0, inner=None):
            raw = inner if inner is not None else self.supplier.get(state_dir)
            return build(self, state_dir, timestamp_fn, BatchBufferBytesStore(raw))

        monkeypatch.setattr(StoreBuilder, "build", buffered_build)
    config = {"processing.exception.handler": "log_and_continue"}
    with TopologyTestDriver(ledger_topology(persistent, caching), config) as driver:
        amounts = driver.create_input_topic("amounts")
        store = driver.get_key_value_store("ledger")
        store.put("doomed", 99)
        amounts.pipe_input("a", 5, timestamp=10)
        store.put("doomed", 98)
        before = contents(store)
        amounts.pipe_input("a", 13, timestamp=20)  # fails after writing five keys
        assert contents(store) == before
        amounts.pipe_input("a", 2, timestamp=30)
        assert store.get("total:a") == 7 and store.get("first:a") == 5 and store.get("last") == 2
        assert driver.create_output_topic("accepted").read_values_to_list() == [5, 2]
        amounts.pipe_input("b", 4, timestamp=120)  # punctuation at 120 writes last=-1
        assert store.get("last") == -1 and store.get("tick") == 120
        amounts.pipe_input("b", 1, timestamp=130)
        before = contents(store)
        amounts.pipe_input("b", 6, timestamp=250)  # the record is fine, the punctuation fails
        after = contents(store)
        assert after["tick"] == 120 and after["last"] == 6  # only the punctuation was undone
        assert after["total:b"] == 11 and after != before


def test_the_changelog_replays_to_the_rolled_back_state():
    from processor_api.engine.records import ListCollector
    from processor_api.engine.task import Task

    topology = ledger_topology(persistent=False, caching=False)
    (sub,) = topology.subtopologies()
    task = Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(timestamp_fn=ts),
        collector=ListCollector(),
        config=StreamsConfig.from_dict({"processing.exception.handler": "log_and_continue"}),
        clock=lambda: 0,
    )
    long = Serdes.long().serialize
    task.process_batch(
        [InputRecord("amounts", 0, i, 10 + i, b"a", long(v), ()) for i, v in enumerate([5, 13, 2])]
    )
    replayed: dict[bytes, bytes] = {}
    for change in task.flush()["ledger"]:
        if change.value is None:
            replayed.pop(change.key, None)
        else:
            replayed[change.key] = change.value
    store = task.stores["ledger"].store
    assert {k.decode(): Serdes.long().deserialize(v) for k, v in replayed.items()} == contents(
        store
    )
    assert store.get("total:a") == 7
    task.close()


class BlindWriter(Processor):
    """``add``: total += value (read, then write); ``set``: blind write; ``boom`` raises."""

    def init(self, context):
        self.store = context.get_state_store("ledger")

    def process(self, record):
        action, amount = record.value.split(":")
        if action == "add":
            self.store.put("total", (self.store.get("total") or 0) + int(amount))
        else:
            self.store.put("total", int(amount))
            raise RuntimeError("blind write, then boom")


def test_rollback_after_a_dropped_batch_restores_the_committed_value():
    """The facade remembers its last read to journal writes cheaply; a batch buffer dropping
    a failed batch changes the store below it, so each batch starts by forgetting it."""
    from processor_api.engine.records import ListCollector
    from processor_api.engine.task import Task

    store = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("ledger"), Serdes.string(), Serdes.long()
    )
    topology = (
        Topology()
        .add_source("in", "ops", value_serde=Serdes.string())
        .add_processor("w", BlindWriter, "in")
        .add_state_store(store, "w")
    )
    (sub,) = topology.subtopologies()
    buffers = []

    def factory(builder, timestamp_fn):
        buffers.append(BatchBufferBytesStore(builder.supplier.get(None)))
        return builder.build(timestamp_fn=timestamp_fn, inner=buffers[-1])

    task = Task(
        subtopology=sub,
        partition=0,
        store_builders=topology.store_builders,
        store_factory=factory,
        collector=ListCollector(),
        config=StreamsConfig.from_dict({"processing.exception.handler": "log_and_continue"}),
        clock=lambda: 0,
    )

    def op(offset, text):
        return InputRecord("ops", 0, offset, offset, None, text.encode(), ())

    task.process_batch([op(0, "add:5")])
    task.flush()
    buffers[0].commit()
    task.process_batch([op(1, "add:7")])  # total 12, then the batch fails in the runtime
    buffers[0].discard()
    task.process_batch([op(2, "set:100")])  # a blind write of a failing record: undone
    assert task.stores["ledger"].store.get("total") == 5
    task.close()


# ------------------------------------------------------- records the producer refuses
class RefusingCollector:
    """Refuses values over ``limit`` bytes as a producer refuses a record larger than its
    ``message.max.bytes`` (``RecordSendError``), one by one or within a list."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.records: list[OutputRecord] = []

    def send(self, record: OutputRecord) -> None:
        if record.value is not None and len(record.value) > self.limit:
            raise RecordSendError(f"the producer refused a record for topic {record.topic!r}")
        self.records.append(record)

    def send_values(self, topic, entries, timestamp):
        for index, (key, value) in enumerate(entries):
            if value is not None and len(value) > self.limit:
                raise RecordSendError(f"refused in a list for topic {topic!r}", index)
            self.records.append(OutputRecord(topic, key, value, timestamp, (), None))

    def partition_count(self, topic: str) -> int:
        return 1


class Echo(Processor):
    """Stores every value; forwards it, and on ``"dump"`` forwards the whole store."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("kept")

    def process(self, record):
        if record.value == "dump":
            with self.store.all() as entries:
                self.context.forward_all(entries, record.timestamp)
            return
        self.store.put(record.key, record.value)
        self.context.forward(record)


def refusing_task(tmp_path, handler: str, limit: int = 8):
    from processor_api.engine.task import Task

    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("kept"), Serdes.string(), Serdes.string()
    )
    topology = (
        Topology()
        .add_source("in", "words", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("echo", Echo, "in")
        .add_state_store(store, "echo")
        .add_sink("out", "echoes", "echo", key_serde=Serdes.string(), value_serde=Serdes.string())
    )
    collector = RefusingCollector(limit)
    task = Task(
        subtopology=topology.subtopologies()[0],
        partition=0,
        store_builders=topology.store_builders,
        store_factory=lambda builder, ts: builder.build(state_dir=tmp_path, timestamp_fn=ts),
        collector=collector,  # type: ignore[arg-type]
        config=StreamsConfig.from_dict(
            {"application_id": "refuse", "production.exception.handler": handler}
        ),
    )
    task.initialize()
    return task, collector


def _words(*pairs, first=0):
    return [
        InputRecord("words", 0, offset, 10 + offset, key.encode(), value.encode())
        for offset, (key, value) in enumerate(pairs, start=first)
    ]


def test_a_record_the_producer_refuses_goes_to_the_production_handler(tmp_path):
    task, collector = refusing_task(tmp_path, f"{HERE}:resume_standard")
    task.process_batch(_words(("a", "short"), ("b", "far too long"), ("c", "ok")))
    assert [(r.key, r.value) for r in collector.records] == [(b"a", b"short"), (b"c", b"ok")]
    ((context, record, error),) = CALLS
    assert record == Record("b", "far too long", 11)
    assert context.processor == "out" and context.offset == 1
    assert context.serialization_origin is None  # a send error, not a serialization error
    assert type(error).__name__ == "RecordSendError"
    task.close()


def test_refused_records_in_a_forwarded_store_go_to_the_handler_one_by_one(tmp_path):
    task, collector = refusing_task(tmp_path, f"{HERE}:resume_standard", limit=100)
    task.process_batch(_words(("a", "x" * 50), ("b", "y" * 150), ("c", "z" * 60)))
    CALLS.clear()
    collector.records.clear()
    collector.limit = 55  # "c" is now refused too, inside the list the store goes out in
    task.process_batch(_words(("d", "dump"), first=3))
    assert [r.key for r in collector.records] == [b"a"]
    assert [record.key for _, record, _ in CALLS] == ["b", "c"]
    task.close()


def test_a_refused_record_fails_the_task_under_log_and_fail(tmp_path):
    task, _ = refusing_task(tmp_path, "log_and_fail")
    with pytest.raises(
        FatalProcessingError,
        match=r"sink could not send the record: the producer refused a record for topic "
        r"'echoes'.*offset=0.*processor=out",
    ):
        task.process_batch(_words(("a", "much too long")))


# ----------------------------------------------- rollback of window and session stores
class Sessions(Processor):
    """Per record: a window count at ``timestamp // 10 * 10`` and a session ``[ts, ts]``
    aggregate; removes the session ``[0, 0]`` of the key; raises when the value is 13."""

    def init(self, context):
        self.windows = context.get_state_store("windows")
        self.sessions = context.get_state_store("sessions")

    def process(self, record):
        start = record.timestamp // 10 * 10
        with self.windows.fetch(record.key, start, start) as found:
            count = next((entry.value for entry in found), 0)
        self.windows.put(record.key, count + record.value, start)
        self.sessions.put(
            Windowed(record.key, SessionWindow(record.timestamp, record.timestamp)), record.value
        )
        self.sessions.remove(Windowed(record.key, SessionWindow(0, 0)))
        if record.value == 13:
            raise RuntimeError("13 brings bad luck")


def sessions_topology(persistent: bool, caching: bool):
    windows_supplier = (
        Stores.persistent_window_store("windows", 10_000, 10)
        if persistent
        else Stores.in_memory_window_store("windows", 10_000, 10)
    )
    sessions_supplier = (
        Stores.persistent_session_store("sessions", 10_000)
        if persistent
        else Stores.in_memory_session_store("sessions", 10_000)
    )
    windows = Stores.window_store_builder(windows_supplier, Serdes.string(), Serdes.long())
    sessions = Stores.session_store_builder(sessions_supplier, Serdes.string(), Serdes.long())
    if caching:
        windows.with_caching_enabled()
        sessions.with_caching_enabled()
    return (
        Topology()
        .add_source("in", "amounts", key_serde=Serdes.string(), value_serde=Serdes.long())
        .add_processor("sessions", Sessions, "in")
        .add_state_store(windows, "sessions")
        .add_state_store(sessions, "sessions")
    )


def window_contents(store):
    with store.all() as entries:
        return [(entry.key, entry.value) for entry in entries]


def session_contents(store):
    with store.fetch("a") as entries:
        return [(entry.key, entry.value) for entry in entries]


@pytest.mark.parametrize("caching", [False, True], ids=["nocache", "cache"])
@pytest.mark.parametrize("persistent", [False, True], ids=["in-memory", "rocksdb"])
def test_a_skipped_record_leaves_window_and_session_stores_as_they_were(persistent, caching):
    config = {"processing.exception.handler": "log_and_continue"}
    topology = sessions_topology(persistent, caching)
    with TopologyTestDriver(topology, config) as driver:
        amounts = driver.create_input_topic("amounts")
        sessions = driver.get_session_store("sessions")
        windows = driver.get_window_store("windows")
        sessions.put(Windowed("a", SessionWindow(0, 0)), 99)
        amounts.pipe_input("a", 5, timestamp=12)
        sessions.put(Windowed("a", SessionWindow(0, 0)), 98)
        before = (window_contents(windows), session_contents(sessions))
        assert before[1] and before[0]
        amounts.pipe_input("a", 13, timestamp=15)  # adds to a window, puts and removes sessions
        assert (window_contents(windows), session_contents(sessions)) == before
        amounts.pipe_input("a", 2, timestamp=17)
        counts = window_contents(windows)
        assert [(k.key, k.window.start, v) for k, v in counts] == [("a", 10, 7)]
        assert [(k.key, k.window.start, v) for k, v in session_contents(sessions)] == [
            ("a", 12, 5),
            ("a", 17, 2),
        ]
