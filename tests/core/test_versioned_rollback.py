"""The rollback of a skipped record's writes to a versioned store.

A record the processing exception handler skips (``log_and_continue``, or a user handler
answering resume) leaves a versioned store as a run that never saw it: the latest value, the
history, the observed stream time (so the grace period) and the changelog, whose replay gives
the same store. The rollback of the other store kinds is tested in ``test_handlers.py``.
"""

from __future__ import annotations

import pytest

from processor_api import (
    HandlerResponse,
    Processor,
    PunctuationType,
    Serdes,
    Stores,
    Topology,
    VersionedRecord,
)
from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.state.facade import find_layer
from processor_api.state.kind_builders import VersionedKeyValueStoreBuilder
from processor_api.state.versioned import VersionedBytesStore
from processor_api.testing import TopologyTestDriver

HISTORY = 1_000

# Each input record is a list of writes to the store "history", ``put:key:value:timestamp``
# or ``del:key:timestamp``, separated by ";"; a record ending in ";boom" raises after them.
OK = "ok"
SKIPPED = "skipped"
SCRIPT = [
    (OK, "put:k:v10:10;put:j:j10:10"),
    (OK, "put:k:v30:30"),
    (SKIPPED, "put:k:v40:40;boom"),  # the latest v30 moves into history
    (SKIPPED, "put:k:v20:20;boom"),  # an older version into history
    (SKIPPED, "put:k:x30:30;boom"),  # replaces the version at 30
    (SKIPPED, "del:j:35;boom"),  # a tombstone as the latest
    (SKIPPED, "put:n:n5:5;del:k:15;boom"),  # a new key; a tombstone into history
    (SKIPPED, "put:k:far:5000;boom"),  # stream time past the history: drops v10 of k
    (OK, "put:k:v25:25"),  # within the grace period only if stream time is back at 30
    (SKIPPED, "put:k:v27:27;put:k:v28:28;del:k:29;put:j:j29:29;boom"),
    (OK, "put:j:j50:50"),
]
KEYS = ("k", "j", "n")
AS_OF = (None, 0, 5, 9, 10, 15, 20, 25, 27, 28, 29, 30, 35, 40, 50, 5000)


def resume(context, record, error):
    return HandlerResponse.resume()


class History(Processor):
    """Applies the writes its record's value lists to the versioned store ``history``."""

    def init(self, context):
        self.store = context.get_state_store("history")

    def process(self, record):
        for write in record.value.split(";"):
            kind, *args = write.split(":")
            if kind == "put":
                key, value, timestamp = args
                self.store.put(key, value, int(timestamp))
            elif kind == "del":
                self.store.delete(args[0], int(args[1]))
            else:
                raise RuntimeError(f"record {record.value!r} fails after its writes")


def history_topology(persistent: bool, processor: type[Processor] = History) -> Topology:
    supplier = (
        Stores.persistent_versioned_key_value_store("history", HISTORY)
        if persistent
        else Stores.in_memory_versioned_key_value_store("history", HISTORY)
    )
    store = Stores.versioned_key_value_store_builder(supplier, Serdes.string(), Serdes.string())
    return (
        Topology()
        .add_source("in", "writes", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("history", processor, "in")
        .add_state_store(store, "history")
    )


def snapshot(store) -> dict:
    """Every answer the store gives about ``KEYS``: latest, and as of each of ``AS_OF``."""
    return {(key, as_of): store.get(key, as_of) for key in KEYS for as_of in AS_OF}


def raw_entries(store) -> list[tuple[bytes, bytes]]:
    """The inner store's entries: every version kept, and the observed stream time."""
    return list(find_layer(store.bytes_store, VersionedBytesStore).inner.range(None, None))


def replayed(changelog: list[tuple[bytes, bytes | None, int]]) -> dict:
    """The state a restore from ``changelog`` gives: a fresh store replaying its records."""
    builder = Stores.versioned_key_value_store_builder(
        Stores.in_memory_versioned_key_value_store("replay", HISTORY),
        Serdes.string(),
        Serdes.string(),
    ).with_logging_disabled()
    stack = builder.build()
    builder.restore_writer(stack.inner)(changelog)
    try:
        return snapshot(stack.store)
    finally:
        stack.close()


def run(script, persistent: bool, handler: str) -> tuple[dict, list, list]:
    """Pipe ``script``; returns the final snapshot, its changelog records and, per skipped
    record, ``(snapshot, raw entries)`` before it and after it."""
    config = {"processing.exception.handler": handler}
    with TopologyTestDriver(history_topology(persistent), config) as driver:
        writes = driver.create_input_topic("writes")
        store = driver.get_versioned_key_value_store("history")
        around_skipped = []
        for offset, (kind, value) in enumerate(script):
            before = (snapshot(store), raw_entries(store))
            writes.pipe_input("r", value, timestamp=offset)
            if kind == SKIPPED:
                around_skipped.append((before, (snapshot(store), raw_entries(store))))
        topic = f"{driver.config.application_id}-history-changelog"
        changelog = [
            (r.key, r.value, r.timestamp)
            for r in driver.create_output_topic(
                topic, Serdes.bytes(), Serdes.bytes()
            ).read_records_to_list()
        ]
        return snapshot(store), changelog, around_skipped


@pytest.fixture(params=[False, True], ids=["direct", "batch-buffer"])
def buffered(request, monkeypatch):
    if request.param:  # the Spark runtime's layout: a batch buffer right above the inner store
        build = VersionedKeyValueStoreBuilder.build

        def buffered_build(self, state_dir=None, timestamp_fn=lambda: 0, inner=None):
            raw = inner if inner is not None else self.supplier.get(state_dir)
            return build(self, state_dir, timestamp_fn, BatchBufferBytesStore(raw))

        monkeypatch.setattr(VersionedKeyValueStoreBuilder, "build", buffered_build)
    return request.param


@pytest.mark.parametrize("handler", ["log_and_continue", f"{__name__}:resume"])
@pytest.mark.parametrize("persistent", [False, True], ids=["in-memory", "rocksdb"])
def test_a_skipped_record_leaves_a_versioned_store_as_it_was(persistent, handler, buffered):
    final, changelog, around_skipped = run(SCRIPT, persistent, handler)
    assert len(around_skipped) == sum(kind == SKIPPED for kind, _ in SCRIPT)
    for before, after in around_skipped:
        assert after == before  # the answers, the versions kept, the observed stream time
    # the same as a run that never saw the skipped records ...
    only_ok = [(kind, value) for kind, value in SCRIPT if kind == OK]
    final_ok, changelog_ok, _ = run(only_ok, persistent, handler)
    assert final == final_ok
    # ... whose values are these (v25 was put: the stream time was back at 30, not 5000)
    assert final[("k", None)] == VersionedRecord("v30", 30, None)
    assert final[("k", 27)] == VersionedRecord("v25", 25, 30)
    assert final[("k", 20)] == VersionedRecord("v10", 10, 25)
    assert final[("k", 5)] is None
    assert final[("j", None)] == VersionedRecord("j50", 50, None)
    assert final[("j", 40)] == VersionedRecord("j10", 10, 50)
    assert all(final[("n", as_of)] is None for as_of in AS_OF)
    # the changelog holds no skipped write, and replays to the same store
    assert changelog == changelog_ok
    assert replayed(changelog) == final


class Ticker(History):
    """``History``, plus a stream-time punctuation every 100 ms that writes, then raises."""

    def init(self, context):
        super().init(context)
        context.schedule(100, PunctuationType.STREAM_TIME, self.tick)

    def tick(self, timestamp):
        self.store.put("k", f"tick{timestamp}", timestamp)  # the latest v50 into history
        self.store.put("k", "tock", 20)  # an older version
        self.store.delete("j", timestamp - 1)
        raise RuntimeError("the punctuation fails after its writes")


def test_a_skipped_punctuation_leaves_a_versioned_store_as_it_was():
    config = {"processing.exception.handler": "log_and_continue"}
    states = []
    for processor in (Ticker, History):
        with TopologyTestDriver(history_topology(False, processor), config) as driver:
            writes = driver.create_input_topic("writes")
            store = driver.get_versioned_key_value_store("history")
            writes.pipe_input("r", "put:k:v10:10;put:j:j10:10", timestamp=0)
            writes.pipe_input("r", "put:k:v50:50", timestamp=100)  # then the punctuation at 100
            states.append((snapshot(store), raw_entries(store)))
    assert states[0] == states[1]
    assert states[0][0][("k", None)] == VersionedRecord("v50", 50, None)
    assert states[0][0][("k", 20)] == VersionedRecord("v10", 10, 50)
    assert states[0][0][("j", None)] == VersionedRecord("j10", 10, None)
