"""On Spark, a record skipped under ``log_and_continue`` leaves a versioned store as it was,
and so does a restore from its changelog.

Run 1 processes records whose failing ones write versions (a newer latest, older history, a
tombstone, a version far ahead in stream time) before they raise; the state directory is then
deleted, and run 2 restores the store from its changelog topic and goes on. Every record that
succeeds forwards what the store answers for its keys; the reference is the same topology in
``TopologyTestDriver`` over the records that succeed only. Run 2's put at 25 is applied only if
the restored stream time is 30 (the skipped put at 5000 would put it beyond the grace period).
"""

from __future__ import annotations

import shutil

import pytest

from processor_api import Processor, Serdes, Stores, Topology
from processor_api.spark.runner import TopologyRunner
from processor_api.testing import TopologyTestDriver
from tests.harness.runs import NO_SNAPSHOTS, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

TOPOLOGY = f"{__name__}:build_versioned_history"
HISTORY = 1_000
KEYS = ("k", "j", "n")
AS_OF = (None, 5, 10, 15, 20, 25, 27, 29, 30, 35, 40, 50, 5000)
FIRST = [
    "put:k:v10:10;put:j:j10:10",
    "put:k:v30:30",
    "put:k:v40:40;boom",
    "put:k:v20:20;put:k:x30:30;boom",
    "del:j:35;put:n:n5:5;del:k:15;boom",
    "put:k:far:5000;boom",
    "read",
]
SECOND = [
    "put:k:v25:25",
    "put:k:v27:27;del:k:29;put:j:j29:29;boom",
    "put:j:j50:50",
    "read",
]


class VersionedHistory(Processor):
    """Applies the record's writes (``put:key:value:timestamp``, ``del:key:timestamp``) to the
    versioned store ``history``; ``boom`` raises; then forwards what the store answers."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("history")

    def process(self, record):
        for write in record.value.split(";"):
            kind, *args = write.split(":")
            if kind == "put":
                self.store.put(args[0], args[1], int(args[2]))
            elif kind == "del":
                self.store.delete(args[0], int(args[1]))
            elif kind == "boom":
                raise RuntimeError(f"record {record.value!r} fails after its writes")
        answers = []
        for key in KEYS:
            for as_of in AS_OF:
                found = self.store.get(key, as_of)
                answers.append("-" if found is None else f"{found.value}@{found.timestamp}")
        self.context.forward(record.with_value(f"{record.value} => {' '.join(answers)}"))


def build_versioned_history(
    input_topic: str = "history-in", output_topic: str = "history-out"
) -> Topology:
    store = Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store("history", HISTORY),
        Serdes.string(),
        Serdes.string(),
    )
    return (
        Topology()
        .add_source("in", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("history", VersionedHistory, "in")
        .add_state_store(store, "history")
        .add_sink(
            "out", output_topic, "history", key_serde=Serdes.string(), value_serde=Serdes.string()
        )
    )


def _reference() -> list[str]:
    """What a run that never saw the failing records forwards."""
    with TopologyTestDriver(build_versioned_history()) as driver:
        topic = driver.create_input_topic("history-in")
        for offset, value in enumerate(FIRST + SECOND):
            if not value.endswith("boom"):
                topic.pipe_input("r", value, timestamp=1_000 + offset)
        return driver.create_output_topic("history-out").read_values_to_list()


def test_skipped_versioned_writes_are_rolled_back_and_never_restored(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"vh-in-{run_id}", f"vh-out-{run_id}"
    kafka.create_topic(input_topic, 1)
    kafka.create_topic(output_topic, 1)
    state_dir = tmp_path / "state"
    settings = settings_for(
        kafka.bootstrap_servers,
        f"vh-{run_id}",
        state_dir,
        available_now=True,
        checkpoint_dir=str(tmp_path / "checkpoint"),  # kept: only the local state is lost
        config={"processing.exception.handler": "log_and_continue", **NO_SNAPSHOTS},
    )
    kwargs = {"input_topic": input_topic, "output_topic": output_topic}
    offsets = iter(range(1_000_000, 2_000_000))

    def run(values):
        produce(
            kafka.bootstrap_servers,
            input_topic,
            [(b"r", value.encode(), None, next(offsets)) for value in values],
        )
        return TopologyRunner(TOPOLOGY, settings, topology_kwargs=kwargs, spark=spark).run()

    one = run(FIRST)
    assert one.records == len(FIRST) and one.restored == 0
    shutil.rmtree(state_dir)
    two = run(SECOND)
    assert two.records == len(SECOND) and two.restored > 0

    expected = _reference()
    with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, bytes.decode) as out:
        records = out.wait_for(lambda r: len(r) >= len(expected), timeout_s=60)
    assert [r[1] for r in sorted(records, key=lambda r: r[3])] == expected
    assert expected[-2].startswith("put:j:j50:50 => v30@30 ")  # v25 went in: run 2's history
    assert " v25@25 " in expected[-1]
