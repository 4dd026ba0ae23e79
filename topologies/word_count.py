"""Word count through a repartition topic (seed 001, Apache Kafka's WordCount example).

The seed's DSL version::

    textLines.flatMapValues(line -> Arrays.asList(pattern.split(line.toLowerCase())))  // \\W+
             .groupBy((key, word) -> word)
             .count(Materialized.as("counts-store"))
             .toStream().to(sink, Produced.with(String, Long))

``groupBy`` changes the key, so Kafka Streams sends the re-keyed records through a repartition
topic: all the records of one word end up in one partition, hence in one task and one store.
The same shape with the Processor API, as two sub-topologies:

* sub-topology 0: source ``streams-plaintext-input`` (string key and value) -> ``split``
  (lower-case the line, split on the regex ``\\W+``, drop empty strings, forward one record per
  word keyed *and* valued by the word) -> sink to the repartition topic (default
  ``word-count-repartition``; string key and value; default partitioner: murmur2 of the key).
* sub-topology 1: source reading the repartition topic -> ``count`` (store ``counts-store``,
  string -> long, RocksDB, change-logged) -> forwards ``(word, count)`` on each update to sink
  ``streams-wordcount-output`` (string key, long value).

Null lines are skipped (``flatMapValues`` of Kafka Streams would fail on them).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.logging import get_logger
from processor_api.state import KeyValueStore

_log = get_logger(__name__)

DEFAULT_INPUT_TOPIC = "streams-plaintext-input"
DEFAULT_REPARTITION_TOPIC = "word-count-repartition"
DEFAULT_OUTPUT_TOPIC = "streams-wordcount-output"
DEFAULT_STORE_NAME = "counts-store"

WORD_SEPARATOR = re.compile(r"\W+")


def split_words(line: str) -> list[str]:
    """Lower-case ``line`` and split it on ``\\W+``, dropping empty strings."""
    return [word for word in WORD_SEPARATOR.split(line.lower()) if word]


class SplitProcessor(Processor):
    """Splits each text line into words and forwards one record per word, keyed by the word."""

    def __init__(self) -> None:
        self.context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context."""
        self.context = context

    def process(self, record: Record) -> None:
        """Forward ``Record(word, word)`` for every word of the line (null lines: nothing)."""
        assert self.context is not None
        if record.value is None:
            meta = self.context.record_metadata()
            _log.warning(
                "null_line_skipped",
                topic=meta.topic if meta else None,
                partition=meta.partition if meta else None,
                offset=meta.offset if meta else None,
            )
            return
        for word in split_words(record.value):
            self.context.forward(Record(word, word, record.timestamp, record.headers))


class CountProcessor(Processor):
    """Counts records per key in a store and forwards ``(key, count)`` after each update."""

    def __init__(self, store_name: str = DEFAULT_STORE_NAME) -> None:
        self.store_name = store_name
        self.context: ProcessorContext | None = None
        self.store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context and the counts store."""
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        """Increment the key's count and forward the new count."""
        assert self.context is not None and self.store is not None
        if record.key is None:  # cannot happen after ``split``; guard direct writers of the topic
            _log.warning("null_word_skipped")
            return
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(record.with_value(count))


def build_topology(
    *,
    input_topic: str = DEFAULT_INPUT_TOPIC,
    repartition_topic: str = DEFAULT_REPARTITION_TOPIC,
    output_topic: str = DEFAULT_OUTPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    split_supplier: Callable[[], Processor] = SplitProcessor,
) -> Topology:
    """Two sub-topologies: split lines -> ``repartition_topic`` -> count -> ``output_topic``.

    ``split_supplier`` makes the splitting processor (tests pass one that pauses or fails).
    """
    if repartition_topic in (input_topic, output_topic):
        raise ValueError(
            f"repartition topic {repartition_topic!r} must differ from the input and output topics"
        )
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        # sub-topology 0: lines -> words, re-keyed by word
        .add_source(
            "lines-source", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string()
        )
        .add_processor("split", split_supplier, "lines-source")
        .add_sink(
            "repartition-sink",
            repartition_topic,
            "split",
            key_serde=Serdes.string(),
            value_serde=Serdes.string(),
        )
        # sub-topology 1: words (co-located by key) -> counts
        .add_source(
            "repartition-source",
            repartition_topic,
            key_serde=Serdes.string(),
            value_serde=Serdes.string(),
        )
        .add_processor("count", lambda: CountProcessor(store_name), "repartition-source")
        .add_state_store(store, "count")
        .add_sink(
            "counts-sink",
            output_topic,
            "count",
            key_serde=Serdes.string(),
            value_serde=Serdes.long(),
        )
    )
