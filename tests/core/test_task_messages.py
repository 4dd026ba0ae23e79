"""A task fed the consumer's messages as they are (``MessageBatch`` of
``confluent_kafka.Message``, the worker's path): the same records, timestamps, headers,
positions, metadata and handler calls as from ``InputRecord``s."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from processor_api import HandlerResponse, ProcessingError, Processor, Serdes, Topology
from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, ListCollector, MessageBatch
from processor_api.errors import StreamsError
from tests.core.test_task import make_task  # partition 3


class Seen(Processor):
    """Keeps what it saw: the record and the context's metadata of it."""

    seen: list = []

    def init(self, context):
        self.context = context

    def process(self, record):
        meta = self.context.record_metadata()
        Seen.seen.append((record, (meta.topic, meta.partition, meta.offset)))
        self.context.forward(record)


@pytest.fixture(autouse=True)
def _reset():
    Seen.seen = []


def message(topic, offset, ts, value, *, key=b"k", headers=None, kind=TIMESTAMP_CREATE_TIME):
    return Message(
        topic=topic, partition=3, offset=offset, key=key, value=value, headers=headers,
        timestamp=(kind, ts),
    )  # fmt: skip


def task_of(*topics, value_serde=None, config=None, collector=None):
    top = (
        Topology()
        .add_source("src", *topics, key_serde=Serdes.bytes(),
                    value_serde=value_serde or Serdes.string())
        .add_processor("seen", Seen, "src")
        .add_sink("sink", "out", "seen", key_serde=Serdes.bytes(),
                  value_serde=value_serde or Serdes.string())
    )  # fmt: skip
    return make_task(top, lambda: 0, config=config, collector=collector)


def test_records_keep_their_timestamp_headers_and_coordinates():
    task = task_of("a")
    batch = MessageBatch(
        {"a": [message("a", 5, 100, b"x", headers=[("h", b"1"), ("h", None)]),
               message("a", 6, 101, b"y")]}
    )  # fmt: skip
    assert task.process_batch(batch) == 2
    (first, first_meta), (second, second_meta) = Seen.seen
    assert (first.value, first.timestamp, first.headers) == ("x", 100, (("h", b"1"), ("h", None)))
    assert type(first.timestamp) is int and type(first.headers) is tuple
    assert (second.value, second.timestamp, second.headers) == ("y", 101, ())
    assert (first_meta, second_meta) == (("a", 3, 5), ("a", 3, 6))
    assert task.metadata().input_positions == {"a": 7}
    assert task.record_context.raw is None  # nothing is being processed any more


def test_a_record_without_a_timestamp_is_skipped_and_passed():
    task = task_of("a")
    batch = MessageBatch(
        {"a": [message("a", 0, 0, b"none", kind=TIMESTAMP_NOT_AVAILABLE),
               message("a", 1, 7, b"ok")]}
    )  # fmt: skip
    assert task.process_batch(batch) == 1
    assert [record.value for record, _ in Seen.seen] == ["ok"]
    assert task.records_skipped == 1
    assert task.metadata().input_positions == {"a": 2}


def test_records_below_the_position_or_queued_already_are_not_taken_again():
    task = task_of("a")
    task.process_batch(MessageBatch({"a": [message("a", 0, 1, b"x"), message("a", 1, 2, b"y")]}))
    task.process_batch(MessageBatch({"a": [message("a", 1, 2, b"y"), message("a", 2, 3, b"z")]}))
    assert [record.value for record, _ in Seen.seen] == ["x", "y", "z"]


def test_co_partitioned_topics_are_merged_by_timestamp():
    task = task_of("a", "b")
    batch = MessageBatch(
        {"a": [message("a", 0, 10, b"a10"), message("a", 1, 30, b"a30")],
         "b": [message("b", 0, 20, b"b20"), message("b", 1, 40, b"b40")]}
    )  # fmt: skip
    task.update_lags({"a": 5, "b": 0})  # the broker has more of a
    assert task.process_batch(batch) == 3  # a ran empty: the task waits for more of it
    assert [record.value for record, _ in Seen.seen] == ["a10", "b20", "a30"]
    assert [meta for _, meta in Seen.seen] == [("a", 3, 0), ("b", 3, 0), ("a", 3, 1)]


def test_a_record_of_a_topic_no_source_reads_is_an_error_naming_it():
    task = task_of("a")
    with pytest.raises(StreamsError, match=r"topic 'z'.*they read \['a'\]"):
        task.process_batch(MessageBatch({"z": [message("z", 0, 1, b"x")]}))


def test_a_bad_record_fails_naming_its_topic_partition_and_offset():
    task = task_of("a", value_serde=Serdes.json())
    batch = MessageBatch({"a": [message("a", 0, 1, b"{}"), message("a", 41, 2, b"{not json")]})
    with pytest.raises(ProcessingError) as info:
        task.process_batch(batch)
    for part in ("topic=a", "partition=3", "offset=41", "cannot deserialize"):
        assert part in str(info.value)
    assert task.metadata().input_positions == {"a": 1}  # nothing past the bad record


def test_the_dead_letter_record_of_a_skipped_message_is_the_input_record():
    collector = ListCollector()
    config = StreamsConfig.from_dict(
        {
            "application.id": "t",
            "deserialization.exception.handler": "log_and_continue",
            "dead_letter_topic": "dlq",
        }
    )
    task = task_of("a", value_serde=Serdes.json(), config=config, collector=collector)
    batch = MessageBatch(
        {"a": [message("a", 8, 1, b"{not json", headers=[("h", b"1")]),
               message("a", 9, 2, json.dumps({"ok": 1}).encode())]}
    )  # fmt: skip
    assert task.process_batch(batch) == 1
    (dead,) = [r for r in collector.records if r.topic == "dlq"]
    assert (dead.key, dead.value) == (b"k", b"{not json")
    headers = dict(dead.headers)
    assert headers["h"] == b"1"
    assert headers["__streams.errors.topic"] == b"a"
    assert headers["__streams.errors.partition"] == b"3"
    assert headers["__streams.errors.offset"] == b"8"
    assert task.metadata().input_positions == {"a": 10}


def test_a_failing_processor_reports_the_message_as_an_input_record():
    handled: list = []

    class Boom(Processor):
        def process(self, record):
            raise ValueError("boom")

    def handler(context, record, exc):
        handled.append((context.topic, context.partition, context.offset, context.headers))
        return HandlerResponse.resume()

    top = (
        Topology()
        .add_source("s", "a", value_serde=Serdes.string())
        .add_processor("boom", Boom, "s")
    )
    config = StreamsConfig.from_dict(
        {"application.id": "t", "processing.exception.handler": handler}
    )
    task = make_task(top, lambda: 0, config=config)
    task.process_batch(MessageBatch({"a": [message("a", 4, 1, b"x", headers=[("h", b"2")])]}))
    assert handled == [("a", 3, 4, (("h", b"2"),))]
    assert task.metadata().input_positions == {"a": 5}


def test_input_records_and_messages_give_the_same_records():
    as_records = task_of("a")
    as_records.process_batch(
        [
            InputRecord("a", 3, 1, 9, b"k", b"y", ()),
            InputRecord("a", 3, 0, 8, b"k", b"x", (("h", b"1"),)),
        ]
    )
    from_records = list(Seen.seen)
    Seen.seen = []
    task_of("a").process_batch(
        MessageBatch(
            {"a": [message("a", 0, 8, b"x", headers=[("h", b"1")]), message("a", 1, 9, b"y")]}
        )
    )
    assert Seen.seen == from_records
