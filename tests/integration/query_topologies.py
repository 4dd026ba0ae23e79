"""The topology of the interactive-query tests, one store of every readable kind.

Imported by reference by Spark's Python workers (``tests.integration.query_topologies:
build_shop``), so it must stay importable from the repository root.

``shop`` reads ``(customer, amount)`` records (string key, string value holding an integer)
and keeps, keyed by the customer (so the input's partitioner routes every store's keys):

* ``totals`` (key-value with a cache, string -> long): the sum of the amounts;
* ``seen`` (timestamped key-value, string -> long): the last amount, stamped with its record;
* ``per-minute`` (window store, 1 minute tumbling windows): the amounts' sum per window;
* ``visits`` (session store, 10 s inactivity gap): records per session;
* ``prices`` (versioned, string -> string): the amount as text, a version per record.

``by-amount`` (long keys: the amount) only exists so a string key can be of the wrong type.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.restore_listener import StateRestoreListener, TopicPartition
from processor_api.state import SessionWindow, ValueAndTimestamp, Windowed

MINUTE_MS = 60_000
GAP_MS = 10_000
STORES = ("totals", "seen", "per-minute", "visits", "prices", "by-amount")


class Shop(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.stores = {name: context.get_state_store(name) for name in STORES}

    def process(self, record: Record) -> None:
        key, amount, at = record.key, int(record.value), record.timestamp
        s = self.stores
        s["totals"].put(key, (s["totals"].get(key) or 0) + amount)
        s["seen"].put(key, ValueAndTimestamp(amount, at))
        start = at - at % MINUTE_MS
        s["per-minute"].put(key, (s["per-minute"].fetch(key, start) or 0) + amount, start)
        s["prices"].put(key, str(amount), at)
        s["by-amount"].put(amount, key)
        begin, end, count = at, at, 1
        for entry in list(s["visits"].find_sessions(key, at - GAP_MS, at + GAP_MS)):
            begin, end = min(begin, entry.key.window.start), max(end, entry.key.window.end)
            count += entry.value
            s["visits"].remove(entry.key)
        s["visits"].put(Windowed(key, SessionWindow(begin, end)), count)


def build_shop(*, input_topic: str = "shop-input") -> Topology:
    """``input_topic`` -> ``shop`` with the stores of the module docs."""
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("shop", Shop, "in")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("totals"), Serdes.string(), Serdes.long()
            ).with_caching_enabled(),
            "shop",
        )
        .add_state_store(
            Stores.timestamped_key_value_store_builder(
                Stores.persistent_timestamped_key_value_store("seen"),
                Serdes.string(),
                Serdes.long(),
            ),
            "shop",
        )
        .add_state_store(
            Stores.window_store_builder(
                Stores.persistent_window_store("per-minute", 86_400_000, MINUTE_MS),
                Serdes.string(),
                Serdes.long(),
            ),
            "shop",
        )
        .add_state_store(
            Stores.session_store_builder(
                Stores.persistent_session_store("visits", 86_400_000),
                Serdes.string(),
                Serdes.long(),
            ),
            "shop",
        )
        .add_state_store(
            Stores.versioned_key_value_store_builder(
                Stores.persistent_versioned_key_value_store("prices", 86_400_000),
                Serdes.string(),
                Serdes.string(),
            ),
            "shop",
        )
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.in_memory_key_value_store("by-amount"), Serdes.long(), Serdes.string()
            ),
            "shop",
        )
    )


class GatedRestoreListener(StateRestoreListener):
    """Holds every store's restore at its start until the gate file of the application
    (:func:`restore_gate`) exists, at most ``GATE_LIMIT_S``: a test can watch a task that is
    restoring for as long as it needs to."""

    def on_restore_start(
        self, topic_partition: TopicPartition, store_name: str, start_offset: int, end_offset: int
    ) -> None:
        gate = restore_gate(topic_partition.topic.split("-", 1)[0])
        deadline = time.monotonic() + GATE_LIMIT_S
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


#: The longest a gated restore waits for its gate.
GATE_LIMIT_S = 120.0


def restore_gate(application_id: str) -> Path:
    """The file that lets the restores of ``application_id`` (no dashes in it) go on."""
    return Path(tempfile.gettempdir()) / f"processor-api-restore-gate-{application_id}"
