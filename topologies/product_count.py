"""Product count with a periodic punctuation (seed 003, ``MyProductCountProcessor``).

The seed's low-level processor counts the records of each product key in a store ``Counts``,
schedules ``punctuate`` every 1000 ms, and there forwards every ``(key, count)`` of the store
and calls ``context.commit()``::

    topologyBuilder.addSource("SOURCE", "logs");
    topologyBuilder.addProcessor("PRODUCT_COUNTER", MyProductCountProcessor::new, "SOURCE");
    topologyBuilder.addStateStore(countStore, "PRODUCT_COUNTER");
    topologyBuilder.addSink("SINK_COUNTER", "counter_topic", ..., "PRODUCT_COUNTER");

Here:

* source ``logs`` (key serde configurable, default string; value serde configurable, default
  string; the value is not used).
* processor ``PRODUCT_COUNTER``: ``count + 1`` per key in store ``Counts`` (key serde as the
  source, long values, RocksDB, change-logged). Records with a null key are skipped with a
  warning (they cannot be a store key).
* a STREAM_TIME punctuation every ``punctuate_interval_ms`` (default 1000) of stream time
  forwards every ``(key, count)`` of the store, in key order, with the punctuation timestamp,
  to sink ``counter_topic`` (key serde as the source, long value), then ``context.commit()``.
  It uses ``context.forward_all``: with a built-in key serde the store and the sink share
  serdes, so the stored bytes are produced as they are.
  Stream time only moves with records, so nothing is emitted before the first record; the
  schedule's grid starts at 0, so the first record already triggers a punctuation.
"""

from __future__ import annotations

from processor_api import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Serde,
    Serdes,
    Stores,
    Topology,
)
from processor_api.logging import get_logger
from processor_api.state import KeyValueStore

_log = get_logger(__name__)

DEFAULT_INPUT_TOPIC = "logs"
DEFAULT_OUTPUT_TOPIC = "counter_topic"
DEFAULT_STORE_NAME = "Counts"
DEFAULT_PUNCTUATE_INTERVAL_MS = 1000


class ProductCountProcessor(Processor):
    """Counts records per product key; a stream-time punctuation forwards all the counts."""

    def __init__(
        self,
        store_name: str = DEFAULT_STORE_NAME,
        punctuate_interval_ms: int = DEFAULT_PUNCTUATE_INTERVAL_MS,
    ) -> None:
        self.store_name = store_name
        self.punctuate_interval_ms = punctuate_interval_ms
        self.context: ProcessorContext | None = None
        self.store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context and store; schedule :meth:`punctuate` on stream time."""
        self.context = context
        self.store = context.get_state_store(self.store_name)
        context.schedule(self.punctuate_interval_ms, PunctuationType.STREAM_TIME)

    def process(self, record: Record) -> None:
        """Increment the count of the record's key."""
        assert self.context is not None and self.store is not None
        if record.key is None:
            meta = self.context.record_metadata()
            _log.warning(
                "null_product_key_skipped",
                topic=meta.topic if meta else None,
                partition=meta.partition if meta else None,
                offset=meta.offset if meta else None,
            )
            return
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def punctuate(self, timestamp: int) -> None:
        """Forward every ``(key, count)`` with ``timestamp``, then request a commit."""
        assert self.context is not None and self.store is not None
        with self.store.all() as entries:
            forwarded = self.context.forward_all(entries, timestamp)
        _log.debug("product_counts_forwarded", timestamp=timestamp, products=forwarded)
        self.context.commit()


def build_topology(
    *,
    input_topic: str = DEFAULT_INPUT_TOPIC,
    output_topic: str = DEFAULT_OUTPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    punctuate_interval_ms: int = DEFAULT_PUNCTUATE_INTERVAL_MS,
    key_serde: Serde | None = None,
    value_serde: Serde | None = None,
) -> Topology:
    """Source ``input_topic`` -> ``PRODUCT_COUNTER`` (store ``store_name``) -> ``output_topic``.

    ``key_serde`` (default string) is used for the input keys, the store keys and the output
    keys; ``value_serde`` (default string) only reads the (unused) input values.
    """
    punctuate_interval_ms = int(punctuate_interval_ms)
    if punctuate_interval_ms < 1:
        raise ValueError(f"punctuate_interval_ms must be >= 1, got {punctuate_interval_ms}")
    keys = key_serde or Serdes.string()
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), keys, Serdes.long()
    )
    return (
        Topology()
        .add_source(
            "SOURCE", input_topic, key_serde=keys, value_serde=value_serde or Serdes.string()
        )
        .add_processor(
            "PRODUCT_COUNTER",
            lambda: ProductCountProcessor(store_name, punctuate_interval_ms),
            "SOURCE",
        )
        .add_state_store(store, "PRODUCT_COUNTER")
        .add_sink(
            "SINK_COUNTER",
            output_topic,
            "PRODUCT_COUNTER",
            key_serde=keys,
            value_serde=Serdes.long(),
        )
    )
