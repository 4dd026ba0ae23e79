"""A task host's global stores against a real broker: restore from every partition, catch-up
of only what is new, resume from the checkpoint, and the last stable offset of an open
transaction under read_committed."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from processor_api import Processor, Serdes, Stores, Topology
from processor_api.config import StreamsConfig
from processor_api.runtime.global_stores import GlobalStores
from processor_api.state.checkpoint import read_checkpoint
from tests.harness.topics import produce, uid

pytestmark = pytest.mark.integration  # every test here uses the embedded broker

S = Serdes.string()


class Recorder(Processor):
    """Puts every record with a key; remembers every key it was given (None included)."""

    seen: list = []

    def init(self, context):
        self.store = context.get_state_store("table")

    def process(self, record):
        Recorder.seen.append(record.key)
        if record.key is not None:
            self.store.put(record.key, record.value)


def topology(topic: str) -> Topology:
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("table"), S, S
    ).with_logging_disabled()
    return (
        Topology()
        .add_global_store(builder, "gs", S, S, topic, "gp", Recorder)
        .add_source("s", "unused")
        .add_processor("p", Recorder, "s")
    )


def open_stores(kafka, topic, directory, isolation="read_uncommitted") -> GlobalStores:
    return GlobalStores(
        topology(topic),
        directory,
        bootstrap_servers=kafka.bootstrap_servers,
        isolation_level=isolation,
        config=StreamsConfig.from_dict({"application_id": "global-test"}),
    )


def test_restore_catch_up_and_resume_from_checkpoint(kafka, tmp_path):
    topic = uid("global")
    kafka.create_topic(topic, 3)
    records = [(f"k{i}".encode(), f"v{i}".encode(), i % 3) for i in range(60)]
    produce(kafka.bootstrap_servers, topic, [*records, (None, b"no key", 1)])
    Recorder.seen = []
    stores = open_stores(kafka, topic, tmp_path)
    try:
        restore = stores.catch_up()
        # the restore skips the record without a key, as Kafka Streams' global restore does
        assert (restore.records, restore.partitions_read, restore.restoring) == (61, 3, True)
        assert sorted(Recorder.seen) == sorted(f"k{i}" for i in range(60))
        table = stores.store("table")
        assert table.get("k59") == "v59" and table.approximate_num_entries() == 60
        assert stores.catch_up().records == 0

        Recorder.seen = []
        produce(kafka.bootstrap_servers, topic, [(b"k1", b"new", 1), (None, b"keyless", 2)])
        later = stores.catch_up()
        assert (later.records, later.partitions_read, later.restoring) == (2, 2, False)
        assert Recorder.seen == ["k1", None] or Recorder.seen == [None, "k1"]
        assert table.get("k1") == "new"
        checkpoint = read_checkpoint(tmp_path / ".checkpoint")
        assert checkpoint == {(topic, 0): 20, (topic, 1): 22, (topic, 2): 21}
    finally:
        stores.close()

    Recorder.seen = []
    stores = open_stores(kafka, topic, tmp_path)
    try:
        assert stores.catch_up().records == 0  # resumed at the checkpoint
        assert Recorder.seen == []
        assert stores.store("table").get("k1") == "new"
    finally:
        stores.close()


def test_read_committed_catch_up_stops_at_an_open_transaction(kafka, tmp_path):
    topic = uid("global-tx")
    kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, topic, [(b"before", b"1")])
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": uuid.uuid4().hex}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"in-tx", value=b"2")
    producer.flush(10)
    stores = open_stores(kafka, topic, tmp_path, "read_committed")
    try:
        assert stores.catch_up().records == 1
        assert stores.store("table").get("in-tx") is None
        producer.commit_transaction(30)
        assert stores.catch_up().records == 1
        assert stores.store("table").get("in-tx") == "2"
        # the position is past the commit marker: nothing is waited for next time
        assert stores.task.positions[(topic, 0)] == 3
        assert stores.catch_up().records == 0
    finally:
        stores.close()


def test_read_to_end_reuses_its_consumer_and_reports_each_end(kafka):
    from processor_api.kafka.reader import PartitionReader

    topic = uid("to-end")
    kafka.create_topic(topic, 2)
    produce(kafka.bootstrap_servers, topic, [(b"k%d" % i, b"v", i % 2) for i in range(7)])
    reader = PartitionReader(
        kafka.bootstrap_servers, "test", isolation_level="read_committed", stall_timeout_s=10
    )
    try:
        for start in (0, 2):  # the second read re-assigns partitions the first one paused
            starts = {(topic, 0): start, (topic, 1): start}
            offsets, ends = {}, {}
            for batch in reader.read_to_end(starts):
                offsets.setdefault(batch.partition, []).extend(m.offset() for m in batch.messages)
                if batch.end is not None:
                    ends[batch.partition] = batch.end
            assert ends == {0: 4, 1: 3}
            assert offsets == {0: list(range(start, 4)), 1: list(range(start, 3))}
    finally:
        reader.close()


def test_a_missing_global_topic_is_named(kafka, tmp_path):
    from processor_api.errors import MissingTopicError
    from processor_api.kafka.topics import plan_topics

    topic = uid("no-such-global")
    with pytest.raises(MissingTopicError, match=f"'{topic}'"):
        plan_topics(topology(topic), kafka.bootstrap_servers, "app")
    with pytest.raises(MissingTopicError, match=f"'{topic}' do not exist"):
        open_stores(kafka, topic, tmp_path)
