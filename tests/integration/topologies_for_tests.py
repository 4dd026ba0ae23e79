"""Topologies used only by the integration tests.

Spark's Python workers import them by reference (``tests.integration.topologies_for_tests:
build_...``), so this module must stay importable from the repository root (``tests/conftest.py``
puts the root on ``PYTHONPATH`` before the shared SparkSession starts).
"""

from __future__ import annotations

import os

from processor_api import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Serdes,
    SessionWindow,
    StoreBuilder,
    Stores,
    Topology,
    ValueAndTimestamp,
    Windowed,
)

DEFAULT_TICK_INTERVAL_MS = 500


class WallClockTicker(Processor):
    """Forwards ``(task id, wall-clock time)`` on every WALL_CLOCK_TIME punctuation.

    Input records are ignored: the point is that the punctuation fires in a task that never
    gets any input.
    """

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        context.schedule(self.interval_ms, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def tick(self, timestamp: int) -> None:
        assert self.context is not None
        self.context.forward(Record(self.context.task_id, timestamp, timestamp))

    def process(self, record: Record) -> None:
        pass


def build_ticker(
    *,
    input_topic: str = "ticker-input",
    output_topic: str = "ticker-output",
    interval_ms: int = DEFAULT_TICK_INTERVAL_MS,
) -> Topology:
    """``input_topic`` -> ``ticker`` (wall-clock punctuation) -> ``output_topic`` (string, long)."""
    interval_ms = int(interval_ms)
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("ticker", lambda: WallClockTicker(interval_ms), "in")
        .add_sink(
            "ticks", output_topic, "ticker", key_serde=Serdes.string(), value_serde=Serdes.long()
        )
    )


class LifetimeProcessor(Processor):
    """Counts per key and ticks on stream time; logs every ``init()``/``close()`` to a file.

    The log lines are ``init <task> <pid>`` and ``close <task> <pid>``, so a test can count
    how often Spark (re)built each task.
    """

    def __init__(self, log_path: str, interval_ms: int) -> None:
        self.log_path = log_path
        self.interval_ms = interval_ms

    def _log(self, what: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"{what} {self.context.task_id} {os.getpid()}\n")

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("lifetime-counts")
        context.schedule(self.interval_ms, PunctuationType.STREAM_TIME, self.tick)
        self._log("init")

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record(self.context.task_id, timestamp, timestamp), child="ticks")

    def process(self, record: Record) -> None:
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        key = f"{self.context.task_id}/{record.key}"  # keys are counted per task
        self.context.forward(record.with_key(key).with_value(count), child="counts")

    def close(self) -> None:
        self._log("close")


def build_lifetime(
    input_topic: str, ticks_topic: str, counts_topic: str, log_path: str, interval_ms: int
) -> Topology:
    """Input -> LifetimeProcessor (store ``lifetime-counts``) -> sinks ``ticks`` and ``counts``."""
    string, long = Serdes.string(), Serdes.long()
    topology = Topology()
    topology.add_source("input", input_topic, key_serde=string, value_serde=string)
    topology.add_processor("lifetime", lambda: LifetimeProcessor(log_path, interval_ms), "input")
    topology.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("lifetime-counts"), string, long
        ),
        "lifetime",
    )
    topology.add_sink("ticks", ticks_topic, "lifetime", key_serde=string, value_serde=long)
    topology.add_sink("counts", counts_topic, "lifetime", key_serde=string, value_serde=long)
    return topology


def build_echo(*, input_topic: str = "echo-input", output_topic: str = "echo-output") -> Topology:
    """``input_topic`` -> ``output_topic`` unchanged (string keys and values)."""
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_sink("out", output_topic, "in", key_serde=Serdes.string(), value_serde=Serdes.string())
    )


class PutLatest(Processor):
    """The processor of a read-only state store: the latest value of each key."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: ProcessorContext) -> None:
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        if record.key is not None:
            self.store.put(record.key, record.value)


class LookUp(Processor):
    """Forwards each record with the value its key has in a store: ``"<value>@<looked up>"``."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(f"{record.value}@{self.store.get(record.key)}"))


def build_read_only_lookup(
    prices_topic: str = "prices", orders_topic: str = "orders", output_topic: str = "priced"
) -> Topology:
    """A read-only state store ``prices`` fed by ``prices_topic``, looked up by the orders of
    the same key (the two topics are co-partitioned: one task per partition holds both)."""
    string = Serdes.string()
    prices = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("prices"), string, string
    )
    return (
        Topology()
        .add_read_only_state_store(
            prices, "prices-source", string, string, prices_topic, "prices-updater",
            lambda: PutLatest("prices"),
        )
        .add_source("orders", orders_topic, key_serde=string, value_serde=string)
        .add_processor("lookup", lambda: LookUp("prices"), "orders")
        .connect_processor_and_state_stores("lookup", "prices")
        .add_sink("priced", output_topic, "lookup", key_serde=string, value_serde=string)
    )  # fmt: skip


class _KindProcessor(Processor):
    """Base of the store-kind processors: forwards ``"<kind>|<what the store says>"``."""

    kind = ""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.kind)

    def emit(self, record: Record, text: str) -> None:
        self.context.forward(record.with_value(f"{self.kind}|{text}"))


class KeyValueKind(_KindProcessor):
    """Running total per key."""

    kind = "key-value"

    def process(self, record: Record) -> None:
        total = (self.store.get(record.key) or 0) + record.value
        self.store.put(record.key, total)
        self.emit(record, str(total))


class TimestampedKind(_KindProcessor):
    """Running total per key with the newest timestamp seen."""

    kind = "timestamped"

    def process(self, record: Record) -> None:
        old = self.store.get(record.key)
        total = (old.value if old else 0) + record.value
        newest = max(old.timestamp if old else -1, record.timestamp)
        self.store.put(record.key, ValueAndTimestamp(total, newest))
        self.emit(record, f"{total}@{newest}")


class WindowKind(_KindProcessor):
    """Sum per key and 1 s tumbling window; emits the windows of the last 10 s."""

    kind = "window"

    def process(self, record: Record) -> None:
        start = record.timestamp - record.timestamp % 1000
        total = (self.store.fetch(record.key, start) or 0) + record.value
        self.store.put(record.key, total, start)
        recent = self.store.fetch(record.key, record.timestamp - 10_000, record.timestamp)
        self.emit(record, ",".join(f"{s}:{v}" for s, v in recent))


class SessionKind(_KindProcessor):
    """Sessions per key with a 5 s inactivity gap; emits the merged session."""

    kind = "session"
    GAP = 5000

    def process(self, record: Record) -> None:
        ts, start, end, total = record.timestamp, record.timestamp, record.timestamp, record.value
        for windowed, value in list(
            self.store.find_sessions(record.key, ts - self.GAP, ts + self.GAP)
        ):
            start = min(start, windowed.window.start)
            end = max(end, windowed.window.end)
            total += value
            self.store.remove(windowed)
        self.store.put(Windowed(record.key, SessionWindow(start, end)), total)
        self.emit(record, f"{start}-{end}:{total}")


class VersionedKind(_KindProcessor):
    """Keeps each key's amounts as versions; emits the version valid just before the record."""

    kind = "versioned"

    def process(self, record: Record) -> None:
        before = self.store.get(record.key, record.timestamp - 1)
        self.store.put(record.key, record.value, record.timestamp)
        self.emit(record, "none" if before is None else f"{before.value}@{before.timestamp}")


STORE_KINDS = (KeyValueKind, TimestampedKind, WindowKind, SessionKind, VersionedKind)


def _store_of_kind(kind: str) -> StoreBuilder:
    string, long = Serdes.string(), Serdes.long()
    hour = 3_600_000
    if kind == "key-value":
        return Stores.key_value_store_builder(Stores.persistent_key_value_store(kind), string, long)
    if kind == "timestamped":
        supplier = Stores.persistent_timestamped_key_value_store(kind)
        return Stores.timestamped_key_value_store_builder(supplier, string, long)
    if kind == "window":
        supplier = Stores.persistent_window_store(kind, retention_period=hour, window_size=1000)
        return Stores.window_store_builder(supplier, string, long)
    if kind == "session":
        supplier = Stores.persistent_session_store(kind, retention_period=hour)
        return Stores.session_store_builder(supplier, string, long)
    supplier = Stores.persistent_versioned_key_value_store(kind, history_retention=hour)
    return Stores.versioned_key_value_store_builder(supplier, string, long)


def build_store_kinds(
    input_topic: str = "kinds-input", output_topic: str = "kinds-output"
) -> Topology:
    """One processor per persistent store kind, all fed the same ``(string, long)`` records,
    each forwarding what its store says after the record to one sink; every store logged."""
    string, long = Serdes.string(), Serdes.long()
    topology = Topology().add_source("in", input_topic, key_serde=string, value_serde=long)
    for processor in STORE_KINDS:
        topology.add_processor(processor.kind, processor, "in")
        topology.add_state_store(_store_of_kind(processor.kind), processor.kind)
    names = [p.kind for p in STORE_KINDS]
    return topology.add_sink("out", output_topic, *names, key_serde=string, value_serde=string)


class SplitThenFailOnce(Processor):
    """Word count's split, failing once (the first time ``flag_path`` does not exist) on a
    line containing ``boom``, after its words and those of earlier lines were sent: under
    exactly-once their transaction aborts, with records of it already on the broker."""

    def __init__(self, flag_path: str) -> None:
        self.flag_path = flag_path
        self.context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        import time

        from topologies.word_count import split_words

        assert self.context is not None
        for word in split_words(record.value):
            self.context.forward(Record(word, word, record.timestamp))
        if "boom" in record.value and not os.path.exists(self.flag_path):
            with open(self.flag_path, "w"):
                pass
            # let the producer send what was forwarded (librdkafka lingers 5 ms), so the
            # aborted transaction leaves records on the broker; the test checks they are there
            time.sleep(1.0)
            raise RuntimeError("failing once, after sending this batch's words")


def build_word_count_failing_once(
    *, input_topic: str, repartition_topic: str, output_topic: str, flag_path: str
) -> Topology:
    """Word count (``topologies.word_count``) whose split fails once (``SplitThenFailOnce``)."""
    from topologies.word_count import build_topology

    return build_topology(
        input_topic=input_topic,
        repartition_topic=repartition_topic,
        output_topic=output_topic,
        split_supplier=lambda: SplitThenFailOnce(flag_path),
    )


class QuoteKeeper(Processor):
    """Keeps every quote of a symbol as a version valid from the quote's timestamp."""

    def init(self, context: ProcessorContext) -> None:
        self.quotes = context.get_state_store("quotes")

    def process(self, record: Record) -> None:
        self.quotes.put(record.key, record.value, record.timestamp)


class TradeEnricher(Processor):
    """Forwards each trade with the quote of its symbol valid at the trade's timestamp."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.quotes = context.get_state_store("quotes")

    def process(self, record: Record) -> None:
        quote = self.quotes.get(record.key, record.timestamp)
        price = "none" if quote is None else f"{quote.value}@{quote.timestamp}"
        self.context.forward(record.with_value(f"{record.value}:{price}"))


def build_trade_enrichment(
    trades_topic: str = "trades", quotes_topic: str = "quotes", output_topic: str = "enriched"
) -> Topology:
    """Trades joined with the quote valid at their timestamp (co-partitioned inputs, one
    versioned store): the answer depends on processing both inputs in timestamp order."""
    string = Serdes.string()
    supplier = Stores.persistent_versioned_key_value_store("quotes", history_retention=86_400_000)
    return (
        Topology()
        .add_source("trades", trades_topic, key_serde=string, value_serde=string)
        .add_source("quotes", quotes_topic, key_serde=string, value_serde=string)
        .add_processor("keep-quote", QuoteKeeper, "quotes")
        .add_processor("enrich", TradeEnricher, "trades")
        .add_state_store(
            Stores.versioned_key_value_store_builder(supplier, string, string),
            "keep-quote",
            "enrich",
        )
        .add_sink("out", output_topic, "enrich", key_serde=string, value_serde=string)
    )


class ForgetfulCounter(Processor):
    """Counts per key in a store with a time to live; forwards ``(key, count)``."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.counts = context.get_state_store("recent-counts")

    def process(self, record: Record) -> None:
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        self.context.forward(record.with_value(count))


def build_forgetful_count(
    input_topic: str = "ttl-in", output_topic: str = "ttl-out", ttl_ms: int = 1_000
) -> Topology:
    """Counts per key that restart after ``ttl_ms`` of stream time without the key."""
    string, long = Serdes.string(), Serdes.long()
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("recent-counts"), string, long
    ).with_ttl(ttl_ms)
    return (
        Topology()
        .add_source("in", input_topic, key_serde=string, value_serde=string)
        .add_processor("count", ForgetfulCounter, "in")
        .add_state_store(store, "count")
        .add_sink("out", output_topic, "count", key_serde=string, value_serde=long)
    )
