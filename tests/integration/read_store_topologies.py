"""The topology of the ``read-store`` tests: a ledger whose stores can be checked at any commit.

Imported by reference by Spark's Python workers (``tests.integration.read_store_topologies:
build_ledger``), so it must stay importable from the repository root.

``ledger`` (string key, string value) per task:

* ``counts`` (key-value, string -> long): records per key; under :data:`TOTAL` the sum of
  those counts, under :data:`SEEN` every record the task processed. A record with value
  ``"del"`` deletes its key (a tombstone) and takes the key's count off the total. So after
  every record, hence at every commit, ``counts[TOTAL] == sum of the per-key counts``; a read
  that mixed two commits' writes would break it, and ``SEEN`` never goes back.
* ``per-second`` (window store, 1 s tumbling windows by record timestamp): records per key.
* ``visits`` (session store, 10 s inactivity gap): records per key and session.
"""

from __future__ import annotations

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.state import SessionWindow, Windowed

TOTAL = "__total__"
SEEN = "__seen__"
WINDOW_MS = 1000
GAP_MS = 10_000


class Ledger(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.counts = context.get_state_store("counts")
        self.windows = context.get_state_store("per-second")
        self.sessions = context.get_state_store("visits")

    def process(self, record: Record) -> None:
        key, counts = record.key, self.counts
        counts.put(SEEN, (counts.get(SEEN) or 0) + 1)
        total = counts.get(TOTAL) or 0
        if record.value == "del":
            counts.put(TOTAL, total - (counts.get(key) or 0))
            counts.delete(key)
            return
        counts.put(key, (counts.get(key) or 0) + 1)
        counts.put(TOTAL, total + 1)
        start = record.timestamp - record.timestamp % WINDOW_MS
        self.windows.put(key, (self.windows.fetch(key, start) or 0) + 1, start)
        self._visit(key, record.timestamp)

    def _visit(self, key: str, timestamp: int) -> None:
        start, end, count = timestamp, timestamp, 1
        for entry in list(self.sessions.find_sessions(key, timestamp - GAP_MS, timestamp + GAP_MS)):
            start = min(start, entry.key.window.start)
            end = max(end, entry.key.window.end)
            count += entry.value
            self.sessions.remove(entry.key)
        self.sessions.put(Windowed(key, SessionWindow(start, end)), count)


def build_ledger(*, input_topic: str = "ledger-input") -> Topology:
    """``input_topic`` -> ``ledger`` with the stores ``counts``, ``per-second`` and ``visits``."""
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("ledger", Ledger, "in")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
            ),
            "ledger",
        )
        .add_state_store(
            Stores.window_store_builder(
                Stores.persistent_window_store("per-second", 3_600_000, WINDOW_MS),
                Serdes.string(),
                Serdes.long(),
            ),
            "ledger",
        )
        .add_state_store(
            Stores.session_store_builder(
                Stores.persistent_session_store("visits", 3_600_000),
                Serdes.string(),
                Serdes.long(),
            ),
            "ledger",
        )
    )
