"""A versioned store read from its changelog on the embedded broker: the latest version of a
key, or with ``as_of`` the one valid then; and ``read-store``'s exit status when the selection
does not fit the store (2, as for any bad argument)."""

from __future__ import annotations

import pytest

from processor_api import Processor, Serdes, Stores, Topology
from processor_api.cli.read_store import main as read_store_main
from processor_api.errors import StoreError
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from processor_api.kafka.store_reader import CommittedPosition, StoreLocation, read_partition
from processor_api.state.selection import StoreSelection
from processor_api.state.windowed_types import VersionedRecord
from tests.harness.topics import produce, uid

pytestmark = pytest.mark.integration  # every test here uses the embedded broker

HISTORY = "history"
TOPOLOGY = "tests.kafka.test_store_reader:build_history"


def _history_builder():
    return Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store(HISTORY, history_retention=3_600_000),
        Serdes.string(),
        Serdes.long(),
    )


class _KeepVersions(Processor):
    def init(self, context):
        self.history = context.get_state_store(HISTORY)

    def process(self, record):
        self.history.put(record.key, record.value, record.timestamp)


def build_history(source: str = "history-in") -> Topology:
    """Versions of each key's value: the topology ``read-store`` is pointed at below."""
    return (
        Topology()
        .add_source("in", source, key_serde=Serdes.string(), value_serde=Serdes.long())
        .add_processor("keep", _KeepVersions, "in")
        .add_state_store(_history_builder(), "keep")
        .add_source("counts-in", f"{source}-counts", key_serde=Serdes.string())
        .add_processor("count", _KeepVersions, "counts-in")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.in_memory_key_value_store("counts"), Serdes.string(), Serdes.long()
            ),
            "count",
        )
    )


def test_a_versioned_changelog_is_read_as_of_a_time(kafka, tmp_path):
    builder = _history_builder()
    stack = builder.build(state_dir=tmp_path)
    store = stack.store
    store.put("a", 1, 10)
    store.put("a", 2, 20)
    store.put("b", 7, 15)
    store.delete("b", 25)
    stack.flush()
    changes = stack.changelog.drain_changes()
    stack.close()
    topic = uid("versioned-changelog")
    kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, topic, [(c.key, c.value, 0, c.timestamp) for c in changes])
    location = StoreLocation(
        kafka.bootstrap_servers, "app", HISTORY, topic, 1, ("0_0",), "markers", (0,)
    )

    end = CommittedPosition(len(changes))

    def read(key, as_of=None):
        selection = StoreSelection(key=key, as_of=as_of)
        return [e.value for e in read_partition(location, builder, 0, end, selection)]

    assert read("a") == [VersionedRecord(2, 20, None)]
    assert read("a", as_of=15) == [VersionedRecord(1, 10, 20)]
    assert read("a", as_of=20) == [VersionedRecord(2, 20, None)]
    assert read("a", as_of=9) == []
    assert read("b", as_of=16) == [VersionedRecord(7, 15, 25)]
    assert read("b") == []  # deleted at 25
    with pytest.raises(StoreError, match="versioned store: it can only be read one key"):
        read(None)


@pytest.fixture
def history_app(kafka):
    """An application id whose topics exist (no batch committed yet, so nothing to read)."""
    app = uid("history-app")
    source = uid("history-in")
    for topic in (
        source,
        f"{source}-counts",
        changelog_topic(app, HISTORY),
        changelog_topic(app, "counts"),
    ):
        kafka.create_topic(topic, 1)
    kafka.create_topic(commit_marker_topic(app), 2)  # one partition per task
    return kafka.bootstrap_servers, app, source


def _read_store(history_app, *args):
    bootstrap, app, source = history_app
    return read_store_main(
        [
            "--bootstrap-servers", bootstrap, "--application-id", app, "--topology", TOPOLOGY,
            "--topology-arg", f"source={source}", *args,
        ]
    )  # fmt: skip


def test_read_store_exits_2_for_a_versioned_store_without_key(history_app, capsys, cli_logging):
    assert _read_store(history_app, HISTORY) == 2
    err = capsys.readouterr().err
    assert "read-store: error: state store 'history' is a versioned store" in err
    assert "give --key, and --as-of" in err


def test_read_store_as_of_is_refused_for_other_kinds_and_bad_times(
    history_app, capsys, cli_logging
):
    assert _read_store(history_app, "counts", "--as-of", "100") == 2
    assert "'counts' is a key-value store: --as-of reads versioned stores only" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as exited:
        _read_store(history_app, HISTORY, "--key", "a", "--as-of", "yesterday")
    assert exited.value.code == 2
    assert "'yesterday' is neither epoch milliseconds nor an ISO-8601" in capsys.readouterr().err


def test_read_store_takes_as_of_in_epoch_ms_or_iso_8601(history_app, capsys, cli_logging):
    from processor_api.cli.read_store import _timestamp

    same = ("1700000000000", "2023-11-14T22:13:20", "2023-11-14T23:13:20+01:00")
    assert {_timestamp(text) for text in same} == {1_700_000_000_000}
    for as_of in same:
        assert _read_store(history_app, HISTORY, "--key", "a", "--as-of", as_of) == 0
        assert capsys.readouterr().out == ""  # nothing committed yet: no version
