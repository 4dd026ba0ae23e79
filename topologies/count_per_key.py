"""Count per key: the throughput benchmark's topology (``bench/``, issue #5).

* source ``input_topic`` (default ``count-input``): string keys, value bytes (not read);
* processor ``COUNTER``: ``count + 1`` per key in store ``store_name`` (default ``counts``;
  string -> long, RocksDB, change-logged, caching off). A record with a null key is skipped
  (it cannot be a store key);
* ``caching=True`` puts the write-back cache in front of the store (``with_caching_enabled``):
  writes to a key between two commits reach the changelog once;
* with ``output_topic`` set, each new ``(key, count)`` is forwarded to that sink; by default
  nothing is forwarded (the benchmark measures the consume -> store update path, the same work
  as the hand-written loop, Quix Streams' stateful ``apply`` and ``transformWithStateInPandas``).

Run it with ``run-topology topologies.count_per_key:build_topology --available-now ...``;
``--topology-arg input_topic='"t"'`` picks the topic.
"""

from __future__ import annotations

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.state import KeyValueStore

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


def build_topology(
    *,
    input_topic: str = DEFAULT_INPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    output_topic: str | None = None,
    caching: bool = False,
) -> Topology:
    """``input_topic`` -> ``COUNTER`` (store ``store_name``) [-> ``output_topic``]."""
    forward = output_topic is not None
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), Serdes.string(), Serdes.long()
    )
    if caching:
        store.with_caching_enabled()
    topology = (
        Topology()
        .add_source("SOURCE", input_topic, key_serde=Serdes.string(), value_serde=Serdes.bytes())
        .add_processor("COUNTER", lambda: CountProcessor(store_name, forward), "SOURCE")
        .add_state_store(store, "COUNTER")
    )
    if forward:
        topology.add_sink(
            "SINK", output_topic, "COUNTER", key_serde=Serdes.string(), value_serde=Serdes.long()
        )
    return topology
