"""Topologies used only by the reliability tests.

Spark's Python workers import them by reference
(``tests.reliability.topologies_for_tests:build_amounts``), so this module must stay importable
from the repository root (``run-topology`` subprocesses get the root on ``PYTHONPATH``).
"""

from __future__ import annotations

import time

from processor_api import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Serdes,
    StateRestoreListener,
    Stores,
    Topology,
)
from processor_api.logging import get_logger
from topologies import sales_aggregation
from topologies.sales_aggregation import SalesAggregator

SOURCE = "amounts-source"
PROCESSOR = "sum-amounts"
SINK = "totals-sink"
STORE = "amount-totals"


class AmountSummer(Processor):
    """Running total of ``value["amount"]`` per key, forwarded on every update.

    Bad input, on purpose:

    * a value that is not JSON fails in the source's JSON serde (deserialization handler);
    * ``{"amount": "five"}`` (wrong type) makes ``int + str`` raise ``TypeError`` in
      ``process`` (processing handler);
    * ``{"explode": true}`` raises ``RuntimeError`` in ``process``;
    * the STREAM_TIME punctuator (every ``punctuate_ms``) raises ``ValueError`` once stream time
      reaches ``fail_punctuation_at`` (never when it is None).
    """

    def __init__(self, punctuate_ms: int, fail_punctuation_at: int | None) -> None:
        self.punctuate_ms = punctuate_ms
        self.fail_punctuation_at = fail_punctuation_at
        self.context: ProcessorContext | None = None
        self.store = None

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(STORE)
        context.schedule(self.punctuate_ms, PunctuationType.STREAM_TIME, self.check_time)

    def process(self, record: Record) -> None:
        value = record.value
        if isinstance(value, dict) and value.get("explode"):
            raise RuntimeError(f"exploding on purpose for key {record.key!r}")
        total = (self.store.get(record.key) or 0) + value["amount"]
        self.store.put(record.key, total)
        self.context.forward(record.with_value(total))

    def check_time(self, timestamp: int) -> None:
        if self.fail_punctuation_at is not None and timestamp >= self.fail_punctuation_at:
            raise ValueError(f"punctuation at stream time {timestamp} fails on purpose")


def build_amounts(
    *,
    input_topic: str = "amounts",
    output_topic: str = "amount-totals",
    punctuate_ms: int = 1000,
    fail_punctuation_at: int | None = None,
) -> Topology:
    """``input_topic`` (string key, JSON value) -> ``sum-amounts`` -> ``output_topic`` (string,
    long); store ``amount-totals`` (string -> long, RocksDB, logged)."""
    punctuate_ms = int(punctuate_ms)
    fail_at = None if fail_punctuation_at is None else int(fail_punctuation_at)
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(STORE), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        .add_source(SOURCE, input_topic, key_serde=Serdes.string(), value_serde=Serdes.json())
        .add_processor(PROCESSOR, lambda: AmountSummer(punctuate_ms, fail_at), SOURCE)
        .add_state_store(store, PROCESSOR)
        .add_sink(
            SINK, output_topic, PROCESSOR, key_serde=Serdes.string(), value_serde=Serdes.long()
        )
    )


class PacedSalesAggregator(SalesAggregator):
    """Seed 000's aggregator, sleeping ``pause_ms`` after each record.

    Same output; a task's transaction then stays open, with its first notifications already
    in the log, for long enough that a ``kill -9`` reliably lands inside it (without the pause
    a task produces, flushes and commits within a few milliseconds).
    """

    def __init__(self, store_name: str, threshold: int, pause_ms: float) -> None:
        super().__init__(store_name, threshold)
        self.pause_s = pause_ms / 1000

    def process(self, record: Record) -> None:
        super().process(record)
        time.sleep(self.pause_s)


def build_paced_sales(
    *,
    input_topic: str = sales_aggregation.DEFAULT_INPUT_TOPIC,
    output_topic: str = sales_aggregation.DEFAULT_OUTPUT_TOPIC,
    store_name: str = sales_aggregation.DEFAULT_STORE_NAME,
    threshold: int = sales_aggregation.DEFAULT_THRESHOLD,
    pause_ms: float = 2.0,
) -> Topology:
    """``topologies.sales_aggregation.build_topology`` with :class:`PacedSalesAggregator`."""
    threshold, pause_ms = int(threshold), float(pause_ms)
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), Serdes.string(), Serdes.long()
    ).with_caching_disabled()
    return (
        Topology()
        .add_source(
            "sales-source", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string()
        )
        .add_processor(
            "aggregate",
            lambda: PacedSalesAggregator(store_name, threshold, pause_ms),
            "sales-source",
        )
        .add_state_store(store, "aggregate")
        .add_sink(
            "notifications-sink",
            output_topic,
            "aggregate",
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
        )
    )


class PausingRestoreListener(StateRestoreListener):
    """Holds every restored batch for ``PAUSE_S`` before the restore goes on, so that a test
    can kill the process while a restore is in flight however small the changelog is."""

    PAUSE_S = 5.0

    def on_batch_restored(self, topic_partition, store_name, batch_end_offset, num_restored):
        get_logger("tests.restore_listener").info(
            "restore_batch_paused",
            store=store_name,
            topic=topic_partition.topic,
            partition=topic_partition.partition,
            batch_end_offset=batch_end_offset,
            records=num_restored,
        )
        time.sleep(self.PAUSE_S)


class PacedSplit(Processor):
    """Word count's split, sleeping ``pause_ms`` after each line, so that an upstream task's
    transaction stays open with words already on the repartition topic long enough for a
    ``kill -9`` to land inside it."""

    def __init__(self, pause_ms: float) -> None:
        self.pause_s = pause_ms / 1000
        self.context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        from topologies.word_count import split_words

        assert self.context is not None
        for word in split_words(record.value or ""):
            self.context.forward(Record(word, word, record.timestamp))
        time.sleep(self.pause_s)


def build_paced_word_count(
    *, input_topic: str, repartition_topic: str, output_topic: str, pause_ms: float = 2.0
) -> Topology:
    """``topologies.word_count.build_topology`` with :class:`PacedSplit`."""
    from topologies.word_count import build_topology

    pause_ms = float(pause_ms)
    return build_topology(
        input_topic=input_topic,
        repartition_topic=repartition_topic,
        output_topic=output_topic,
        split_supplier=lambda: PacedSplit(pause_ms),
    )
