"""Topologies for ``run-topology``'s setup check (``engine/setup_check.py``): a store name
typo in ``init()``, and a processor whose ``init()`` needs a setting only the executors have."""

from __future__ import annotations

import os

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology

#: The environment variable only the executors get (``spark.executorEnv.<name>``).
LOOKUP_ENV = "SETUP_CHECK_LOOKUP_URL"


class CountWithStoreTypo(Processor):
    """The README's count, with the store's name misspelt in ``init()``."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("count-store")  # the store is "counts-store"

    def process(self, record: Record) -> None:
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(record.with_value(count))


def build_store_typo(input_topic: str, output_topic: str) -> Topology:
    """``input_topic`` -> count (store ``counts-store``, ``init()`` asks for ``count-store``)."""
    counts = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts-store"), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        .add_source("events", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("count", CountWithStoreTypo, "events")
        .add_state_store(counts, "count")
        .add_sink(
            "counts-sink",
            output_topic,
            "count",
            key_serde=Serdes.string(),
            value_serde=Serdes.long(),
        )
    )


class TagWithLookup(Processor):
    """Reads ``$SETUP_CHECK_LOOKUP_URL`` in ``init()`` (a service only the executors reach)
    and tags every record's value with it; logs ``init <task> <pid>`` to ``log_path``."""

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.lookup_url = os.environ[LOOKUP_ENV]
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"init {context.task_id} {os.getpid()}\n")

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(f"{record.value}@{self.lookup_url}"))


def build_executor_only(input_topic: str, output_topic: str, log_path: str) -> Topology:
    """``input_topic`` -> ``TagWithLookup`` -> ``output_topic`` (strings)."""
    string = Serdes.string()
    return (
        Topology()
        .add_source("events", input_topic, key_serde=string, value_serde=string)
        .add_processor("tag", lambda: TagWithLookup(log_path), "events")
        .add_sink("tagged", output_topic, "tag", key_serde=string, value_serde=string)
    )
