"""``state.restore.listener``: a task's restore from a real changelog partition tells the
listener where it starts, each batch it applies and where it ends, as Kafka Streams'
``StateRestoreListener`` is told."""

from __future__ import annotations

import functools

import pytest

from processor_api import StateRestoreListener
from processor_api.config import StreamsConfig
from processor_api.errors import ConfigError
from processor_api.kafka import reader as reader_module
from processor_api.kafka.names import changelog_topic
from processor_api.restore_listener import TopicPartition, resolve_restore_listener
from processor_api.serdes import Serdes
from processor_api.state import Stores
from processor_api.state.manager import TaskStores
from tests.harness.topics import produce, uid

STORE = "totals"


class Recording(StateRestoreListener):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_restore_start(self, topic_partition, store_name, start_offset, end_offset):
        self.calls.append(("start", topic_partition, store_name, start_offset, end_offset))

    def on_batch_restored(self, topic_partition, store_name, batch_end_offset, num_restored):
        self.calls.append(("batch", topic_partition, store_name, batch_end_offset, num_restored))

    def on_restore_end(self, topic_partition, store_name, total_restored):
        self.calls.append(("end", topic_partition, store_name, total_restored))


def _stores(tmp_path, app: str) -> TaskStores:
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(STORE), Serdes.string(), Serdes.long()
    )
    stores = TaskStores(
        application_id=app,
        task_id="0_1",
        partition=1,
        directory=tmp_path / "0_1",
        builders={STORE: builder},
        changelog_topics={STORE: changelog_topic(app, STORE)},
        timestamp_fn=lambda: 0,
    )
    stores.build(builder, lambda: 0)
    return stores


@pytest.mark.integration
def test_the_listener_sees_start_every_batch_and_end_of_a_real_restore(
    kafka, tmp_path, monkeypatch
):
    app = uid("restore-listener")
    topic = changelog_topic(app, STORE)
    kafka.create_topic(topic, 2)
    long = Serdes.long()
    records = [(f"k{i % 7}".encode(), long.serialize(i), 1) for i in range(25)]
    produce(kafka.bootstrap_servers, topic, records)
    monkeypatch.setattr(reader_module, "RESTORE_BATCH", 10)
    read = functools.partial(
        reader_module.read_changelog, kafka.bootstrap_servers, isolation_level="read_committed"
    )
    stores = _stores(tmp_path, app)
    listener = Recording()
    try:
        assert stores.restore({STORE: 25}, read, listener) == {STORE: 25}
        last = {f"k{k}": max(i for i in range(25) if i % 7 == k) for k in range(7)}
        assert dict(stores.stacks[STORE].store.all()) == last
    finally:
        stores.close()
    tp = TopicPartition(topic, 1)
    assert listener.calls == [
        ("start", tp, STORE, 0, 25),
        ("batch", tp, STORE, 10, 10),
        ("batch", tp, STORE, 20, 10),
        ("batch", tp, STORE, 25, 5),
        ("end", tp, STORE, 25),
    ]


def test_a_store_already_at_its_committed_offset_is_not_restored(tmp_path):
    app = uid("restore-listener-none")
    stores = _stores(tmp_path, app)
    listener = Recording()
    try:
        # nothing committed yet and no changelog records: nothing to replay, nothing told
        assert stores.restore({STORE: 0}, lambda *a, **k: 0, listener) == {}
    finally:
        stores.close()
    assert listener.calls == []


class NotAListener:
    pass


def test_the_setting_names_a_callable_returning_a_listener():
    name = f"{__name__}:Recording"
    assert isinstance(resolve_restore_listener(name), Recording)
    assert StreamsConfig.from_dict({"state.restore.listener": name}).state_restore_listener == name
    with pytest.raises(ConfigError, match=r"NotAListener.* returned NotAListener, not a State"):
        StreamsConfig.from_dict({"state.restore.listener": f"{__name__}:NotAListener"})
    with pytest.raises(ConfigError, match=r"state_restore_listener='no_such_module:X': cannot"):
        StreamsConfig.from_dict({"state.restore.listener": "no_such_module:X"})
    with pytest.raises(ConfigError, match=r"state_restore_listener must be MODULE:CALLABLE, got"):
        StreamsConfig.from_dict({"state_restore_listener": "Recording"})
