"""Count per key: the throughput benchmark's topology (``bench/``).

* source ``input_topic`` (default ``count-input``): string keys, value bytes (not read);
* processor ``COUNTER``: ``count + 1`` per key in store ``store_name`` (default ``counts``;
  string -> long, RocksDB, change-logged, caching off). A record with a null key is skipped
  (it cannot be a store key);
* ``caching=True`` puts the write-back cache in front of the store (``with_caching_enabled``):
  writes to a key between two commits reach the changelog once;
* ``windowed=True`` counts per key and ``window_ms`` tumbling window (default one minute) in a
  window store (retention one hour, RocksDB segments, change-logged) instead: the same work
  as a windowed aggregation, for the end-to-end benchmark next to the key-value count;
* with ``repartition_topic`` set, the records go through that topic first (two
  sub-topologies, as behind a ``groupByKey`` after a key change: twice the tasks);
* with ``output_topic`` set, each new ``(key, count)`` is forwarded to that sink; by default
  nothing is forwarded (the benchmark measures the consume -> store update path, the same work
  as the hand-written loop, Quix Streams' stateful ``apply`` and ``transformWithStateInPandas``).

Run it with ``run-topology topologies.count_per_key:build_topology --available-now ...``;
``--topology-arg input_topic='"t"'`` picks the topic.
"""

from __future__ import annotations

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.state import KeyValueStore, WindowStore

DEFAULT_INPUT_TOPIC = "count-input"
DEFAULT_STORE_NAME = "counts"


class CountProcessor(Processor):
    """``store[key] += 1``; forwards ``(key, count)`` when it has a child."""

    def __init__(self, store_name: str = DEFAULT_STORE_NAME, forward: bool = False) -> None:
        self.store_name = store_name
        self.forward = forward
        self.context: ProcessorContext | None = None
        self.store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            return
        store = self.store
        count = (store.get(key) or 0) + 1  # type: ignore[union-attr]
        store.put(key, count)  # type: ignore[union-attr]
        if self.forward:
            self.context.forward(record.with_value(count))  # type: ignore[union-attr]


class WindowedCountProcessor(CountProcessor):
    """``store[key, window] += 1`` for the tumbling window of the record's timestamp."""

    def __init__(self, store_name: str, window_ms: int, forward: bool = False) -> None:
        super().__init__(store_name, forward)
        self.window_ms = window_ms

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            return
        start = record.timestamp - record.timestamp % self.window_ms
        store: WindowStore = self.store  # type: ignore[assignment]
        count = (store.fetch(key, start) or 0) + 1  # type: ignore[union-attr]
        store.put(key, count, start)  # type: ignore[union-attr]
        if self.forward:
            self.context.forward(record.with_value(count))  # type: ignore[union-attr]


def build_topology(
    *,
    input_topic: str = DEFAULT_INPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    output_topic: str | None = None,
    caching: bool = False,
    windowed: bool = False,
    window_ms: int = 60_000,
    repartition_topic: str | None = None,
) -> Topology:
    """``input_topic`` [-> ``repartition_topic``] -> ``COUNTER`` (store ``store_name``)
    [-> ``output_topic``]."""
    forward = output_topic is not None
    if windowed:
        supplier = Stores.persistent_window_store(
            store_name, retention_period=3_600_000, window_size=window_ms
        )
        store = Stores.window_store_builder(supplier, Serdes.string(), Serdes.long())
        make = lambda: WindowedCountProcessor(store_name, window_ms, forward)  # noqa: E731
    else:
        store = Stores.key_value_store_builder(
            Stores.persistent_key_value_store(store_name), Serdes.string(), Serdes.long()
        )
        make = lambda: CountProcessor(store_name, forward)  # noqa: E731
    if caching:
        store.with_caching_enabled()
    topology = Topology().add_source(
        "SOURCE", input_topic, key_serde=Serdes.string(), value_serde=Serdes.bytes()
    )
    counted = "SOURCE"
    if repartition_topic is not None:
        topology.add_sink(
            "REPARTITION",
            repartition_topic,
            "SOURCE",
            key_serde=Serdes.string(),
            value_serde=Serdes.bytes(),
        )
        topology.add_source(
            "REPARTITIONED",
            repartition_topic,
            key_serde=Serdes.string(),
            value_serde=Serdes.bytes(),
        )
        counted = "REPARTITIONED"
    topology.add_processor("COUNTER", make, counted).add_state_store(store, "COUNTER")
    if forward:
        topology.add_sink(
            "SINK", output_topic, "COUNTER", key_serde=Serdes.string(), value_serde=Serdes.long()
        )
    return topology
