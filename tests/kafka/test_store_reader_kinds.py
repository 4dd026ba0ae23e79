"""Every store layer that changes the changelog's value format, read back from its changelog.

Each store is built from the topology's own builder, written through its typed API, and its
change records (the changelog format the runtime produces) go to the store's changelog topic
on the embedded broker, followed by a commit marker of its task. Then the store is read with
``processor_api.read_store`` and with the ``read-store`` command, which must agree: time to
live (key-value and timestamped key-value; expired entries are not returned, ``now`` taken from
the marker's stream time or the reader's clock), timestamped key-value, window, timestamped
window, session and versioned stores.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from structlog.testing import capture_logs

from processor_api import Processor, Serdes, Stores, Topology, read_store
from processor_api.cli.read_store import main as read_store_main
from processor_api.engine.metadata import TaskMetadata
from processor_api.kafka.markers import marker_value
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from processor_api.state import SessionWindow, Windowed
from processor_api.state.json_entries import entry_fields
from processor_api.state.manager import TaskStores
from processor_api.state.snapshots import UPLOADER, SnapshotSettings, TaskSnapshots
from processor_api.state.windowed_types import ValueAndTimestamp, VersionedRecord
from processor_api.store_queries import open_store_reader
from tests.harness.topics import produce, uid

pytestmark = pytest.mark.integration  # every test here uses the embedded broker

TOPOLOGY = "tests.kafka.test_store_reader_kinds:build_kinds"
TTL_MS = 1_000
WALL_TTL_MS = 60_000
WINDOW_MS = 1_000
RETENTION_MS = 3_600_000
#: Write times far before and after any run of this test, for the wall-clock store.
LONG_AGO = 1_000
FAR_AHEAD = 4_102_444_800_000  # 2100-01-01


def _builders() -> dict[str, Any]:
    string, long = Serdes.string(), Serdes.long()
    return {
        "ttl": Stores.key_value_store_builder(
            Stores.persistent_key_value_store("ttl"), string, long
        ).with_ttl(TTL_MS),
        "ttl-stamped": Stores.timestamped_key_value_store_builder(
            Stores.persistent_timestamped_key_value_store("ttl-stamped"), string, long
        ).with_ttl(TTL_MS),
        "ttl-wall": Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("ttl-wall"), string, long
        ).with_ttl(WALL_TTL_MS, clock="wall_clock"),
        "stamped": Stores.timestamped_key_value_store_builder(
            Stores.persistent_timestamped_key_value_store("stamped"), string, long
        ),
        "windows": Stores.window_store_builder(
            Stores.persistent_window_store("windows", RETENTION_MS, WINDOW_MS), string, long
        ),
        "stamped-windows": Stores.timestamped_window_store_builder(
            Stores.persistent_window_store("stamped-windows", RETENTION_MS, WINDOW_MS),
            string,
            long,
        ),
        "sessions": Stores.session_store_builder(
            Stores.persistent_session_store("sessions", RETENTION_MS), string, long
        ),
        "versions": Stores.versioned_key_value_store_builder(
            Stores.persistent_versioned_key_value_store("versions", RETENTION_MS), string, long
        ),
    }


class _KeepLatest(Processor):
    """Keeps every record in each store: the latest value per key (per window, session and
    version where the store has them)."""

    def init(self, context):
        self.stores = {name: context.get_state_store(name) for name in _builders()}

    def process(self, record):
        key, value, at = record.key, int(record.value), record.timestamp
        for name in ("ttl", "ttl-wall"):
            self.stores[name].put(key, value)
        for name in ("ttl-stamped", "stamped"):
            self.stores[name].put(key, ValueAndTimestamp(value, at))
        start = at - at % WINDOW_MS
        self.stores["windows"].put(key, value, start)
        self.stores["stamped-windows"].put(key, ValueAndTimestamp(value, at), start)
        self.stores["sessions"].put(Windowed(key, SessionWindow(at, at)), value)
        self.stores["versions"].put(key, value, at)


def build_kinds(source: str = "kinds-in") -> Topology:
    """One task per ``source`` partition, with a store of every readable kind and layer."""
    topology = (
        Topology()
        .add_source("in", source, key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("keep", _KeepLatest, "in")
    )
    for builder in _builders().values():
        topology.add_state_store(builder, "keep")
    return topology


@dataclass
class _App:
    """An application id whose topics exist: one input partition, so one task ``0_0``."""

    bootstrap: str
    app_id: str
    source: str
    record_time: int = 0
    stream_time: int = -1
    wall_time: int = 0

    def stack(self, store: str, tmp_path) -> Any:
        """A new store of the topology's builder for ``store``, on this app's clocks."""
        stack = _builders()[store].build(state_dir=tmp_path, timestamp_fn=lambda: self.record_time)
        if stack.ttl is not None:
            stack.ttl.attach(
                lambda: self.stream_time, lambda: self.record_time, lambda: self.wall_time
            )
        return stack

    def commit(self, store: str, stack: Any, stream_time: int, offset: int = 0) -> int:
        """The stack's change records to the store's changelog (which ends at ``offset``),
        then the task's marker; returns the changelog's new end."""
        stack.flush()
        changes = stack.changelog.drain_changes()
        produce(
            self.bootstrap,
            changelog_topic(self.app_id, store),
            [(c.key, c.value, 0, c.timestamp) for c in changes],
        )
        end = offset + len(changes)
        metadata = TaskMetadata(stream_time=stream_time, changelog_offsets={store: end})
        produce(
            self.bootstrap,
            commit_marker_topic(self.app_id),
            [(b"0_0", marker_value(1, metadata.to_json()), 0)],
        )
        return end

    def read(self, store: str, capsys, *cli_args: str, **selection: Any) -> list[Any]:
        """The store's entries read by ``read_store``; ``read-store`` (given the same
        selection as ``cli_args``) must print the same entries."""
        kwargs = {"topology_kwargs": {"source": self.source}}
        entries = list(
            read_store(self.bootstrap, self.app_id, TOPOLOGY, store, **kwargs, **selection)
        )
        code = read_store_main(
            [
                "--bootstrap-servers", self.bootstrap, "--application-id", self.app_id,
                "--topology", TOPOLOGY, "--topology-arg", f"source={self.source}",
                store, *cli_args,
            ]
        )  # fmt: skip
        captured = capsys.readouterr()
        assert code == 0, captured.err
        rows = [json.loads(line) for line in captured.out.splitlines()]
        assert rows == [{**entry_fields(e), "partition": 0} for e in entries]
        return entries


@pytest.fixture
def app(kafka, cli_logging) -> _App:
    app_id = uid("kinds-app")
    source = uid("kinds-in")
    kafka.create_topic(source, 1)
    kafka.create_topic(commit_marker_topic(app_id), 1)
    for store in _builders():
        kafka.create_topic(changelog_topic(app_id, store), 1)
    return _App(kafka.bootstrap_servers, app_id, source)


def _write_at(app: _App, stack: Any, writes: list[tuple[int, Callable[[Any], None]]]) -> None:
    """Each write runs with the record time (and stream time) it names."""
    for at, write in writes:
        app.record_time = at
        app.stream_time = max(app.stream_time, at)
        write(stack.store)


def test_a_ttl_store_is_read_without_the_write_times_or_its_expired_entries(app, tmp_path, capsys):
    stack = app.stack("ttl", tmp_path)
    _write_at(
        app,
        stack,
        [
            (100, lambda s: s.put("old", 1)),
            (100, lambda s: s.put("rewritten", 1)),
            (3_500, lambda s: s.put("deleted", 4)),
            (4_000, lambda s: s.put("rewritten", 3)),  # at the cutoff: still live
            (4_100, lambda s: s.put("fresh", 2)),
            (4_200, lambda s: s.delete("deleted")),
            (5_000, lambda s: s.put("latest", 5)),
        ],
    )
    # committed without expiring: the reader decides from the marker's stream time (5,000)
    app.commit("ttl", stack, stream_time=5_000)
    shown = [(e.key, e.value) for e in stack.store.all()]  # the store at now = 5,000
    assert shown == [("fresh", 2), ("latest", 5), ("rewritten", 3)]
    stack.close()

    assert [(e.key, e.value) for e in app.read("ttl", capsys)] == shown
    one = app.read("ttl", capsys, "--key", "rewritten", key="rewritten")
    assert [(e.key, e.value) for e in one] == [("rewritten", 3)]
    assert app.read("ttl", capsys, "--key", "old", key="old") == []
    ranged = app.read("ttl", capsys, "--from", "a", "--to", "m", key_from="a", key_to="m")
    assert [e.key for e in ranged] == ["fresh", "latest"]


def test_a_ttl_store_read_from_a_snapshot_leaves_its_expired_entries_out(app, tmp_path, capsys):
    """The snapshot holds the entries with their write times; the tail after it is replayed
    on top, and what the marker's stream time expired is not returned."""
    settings = SnapshotSettings(location=str(tmp_path / "snapshots"), interval_ms=0)
    directory = tmp_path / "task"
    builder = _builders()["ttl"]
    stores = TaskStores(
        application_id=app.app_id,
        task_id="0_0",
        partition=0,
        directory=directory,
        builders={"ttl": builder},
        changelog_topics={"ttl": changelog_topic(app.app_id, "ttl")},
        timestamp_fn=lambda: app.record_time,
        snapshots=TaskSnapshots(settings, task_id="0_0", partition=0, directory=directory),
    )
    stack = stores.build(builder, lambda: app.record_time)
    stack.ttl.attach(lambda: app.stream_time, lambda: app.record_time, lambda: app.wall_time)
    _write_at(app, stack, [(100, lambda s: s.put("old", 1)), (900, lambda s: s.put("mid", 2))])
    snapshot_end = app.commit("ttl", stack, stream_time=900)
    stores.commit({"ttl": snapshot_end})  # interval 0: a snapshot at every commit
    assert UPLOADER.wait_idle(60)
    _write_at(app, stack, [(2_000, lambda s: s.put("tail", 3))])
    app.commit("ttl", stack, stream_time=2_000, offset=snapshot_end)  # the tail: not snapshot
    stores.close()

    with capture_logs() as logs:
        reader = open_store_reader(
            app.bootstrap,
            app.app_id,
            TOPOLOGY,
            "ttl",
            topology_kwargs={"source": app.source},
            snapshots=settings,
        )
        entries = [entry for _, entry in reader.read()]
    reads = [e for e in logs if e["event"] == "store_partition_read"]
    assert [e["snapshot_offset"] for e in reads] == [snapshot_end]
    # now = 2,000, cutoff 1,000: "old" (100) and "mid" (900) expired, "tail" (2,000) live
    assert [(e.key, e.value) for e in entries] == [("tail", 3)]
    code = read_store_main(
        [
            "--bootstrap-servers", app.bootstrap, "--application-id", app.app_id,
            "--topology", TOPOLOGY, "--topology-arg", f"source={app.source}",
            "--config", f"state.snapshot.location={settings.location}", "ttl",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert [json.loads(line) for line in captured.out.splitlines()] == [
        {"key": "tail", "value": 3, "partition": 0}
    ]


def test_a_timestamped_ttl_store_is_read_as_value_and_timestamp(app, tmp_path, capsys):
    stack = app.stack("ttl-stamped", tmp_path)
    _write_at(
        app,
        stack,
        [
            (200, lambda s: s.put("old", ValueAndTimestamp(1, 200))),
            (2_600, lambda s: s.put("kept", ValueAndTimestamp(2, 2_600))),
            (3_000, lambda s: s.put("last", ValueAndTimestamp(3, 3_000))),
        ],
    )
    app.commit("ttl-stamped", stack, stream_time=3_000)
    stack.close()

    entries = app.read("ttl-stamped", capsys)
    assert [(e.key, e.value) for e in entries] == [
        ("kept", ValueAndTimestamp(2, 2_600)),
        ("last", ValueAndTimestamp(3, 3_000)),
    ]
    assert [e.key for e in app.read("ttl-stamped", capsys, "--prefix", "o", prefix="o")] == []


def test_a_wall_clock_ttl_store_expires_by_the_readers_clock(app, tmp_path, capsys):
    stack = app.stack("ttl-wall", tmp_path)
    for wall, key in ((LONG_AGO, "long-ago"), (FAR_AHEAD, "far-ahead")):
        app.wall_time = wall
        stack.store.put(key, wall)
    # the stream time in the marker is of no account for a wall-clock store
    app.commit("ttl-wall", stack, stream_time=0)
    stack.close()

    assert [(e.key, e.value) for e in app.read("ttl-wall", capsys)] == [("far-ahead", FAR_AHEAD)]


def test_a_timestamped_key_value_store_is_read(app, tmp_path, capsys):
    stack = app.stack("stamped", tmp_path)
    stack.store.put("a", ValueAndTimestamp(1, 10))
    stack.store.put("b", ValueAndTimestamp(2, 20))
    stack.store.put("a", ValueAndTimestamp(3, 30))
    stack.store.delete("b")
    stack.store.put("c", ValueAndTimestamp(4, 40))
    app.commit("stamped", stack, stream_time=40)
    stack.close()

    entries = app.read("stamped", capsys)
    assert [(e.key, e.value) for e in entries] == [
        ("a", ValueAndTimestamp(3, 30)),
        ("c", ValueAndTimestamp(4, 40)),
    ]
    assert [e.value for e in app.read("stamped", capsys, "--key", "c", key="c")] == [
        ValueAndTimestamp(4, 40)
    ]


def test_a_window_store_is_read_by_key_and_window(app, tmp_path, capsys):
    stack = app.stack("windows", tmp_path)
    stack.store.put("a", 1, 0)
    stack.store.put("a", 2, 1_000)
    stack.store.put("b", 3, 1_000)
    stack.store.put("a", None, 0)  # a window's tombstone
    app.commit("windows", stack, stream_time=1_000)
    stack.close()

    entries = app.read("windows", capsys)
    assert sorted((e.key.key, e.key.window.start, e.key.window.end, e.value) for e in entries) == [
        ("a", 1_000, 2_000, 2),
        ("b", 1_000, 2_000, 3),
    ]
    one = app.read("windows", capsys, "--key", "b", key="b")
    assert [(e.key.key, e.value) for e in one] == [("b", 3)]


def test_a_timestamped_window_store_is_read_with_value_and_timestamp(app, tmp_path, capsys):
    stack = app.stack("stamped-windows", tmp_path)
    stack.store.put("a", ValueAndTimestamp(1, 1_200), 1_000)
    stack.store.put("a", ValueAndTimestamp(2, 1_700), 1_000)
    stack.store.put("b", ValueAndTimestamp(3, 2_100), 2_000)
    app.commit("stamped-windows", stack, stream_time=2_100)
    stack.close()

    entries = app.read("stamped-windows", capsys)
    assert sorted((e.key.key, e.key.window.start, e.value) for e in entries) == [
        ("a", 1_000, ValueAndTimestamp(2, 1_700)),
        ("b", 2_000, ValueAndTimestamp(3, 2_100)),
    ]


def test_a_session_store_is_read_with_its_sessions(app, tmp_path, capsys):
    stack = app.stack("sessions", tmp_path)
    stack.store.put(Windowed("a", SessionWindow(0, 100)), 2)
    stack.store.put(Windowed("a", SessionWindow(5_000, 5_000)), 1)
    stack.store.put(Windowed("b", SessionWindow(300, 900)), 4)
    stack.store.remove(Windowed("a", SessionWindow(0, 100)))
    stack.store.put(Windowed("a", SessionWindow(0, 5_000)), 3)  # the two sessions merged
    stack.store.remove(Windowed("a", SessionWindow(5_000, 5_000)))
    app.commit("sessions", stack, stream_time=5_000)
    stack.close()

    entries = app.read("sessions", capsys)
    assert sorted((e.key.key, e.key.window.start, e.key.window.end, e.value) for e in entries) == [
        ("a", 0, 5_000, 3),
        ("b", 300, 900, 4),
    ]


def test_a_versioned_store_is_read_one_key_at_a_time(app, tmp_path, capsys):
    stack = app.stack("versions", tmp_path)
    stack.store.put("a", 1, 10)
    stack.store.put("a", 2, 20)
    stack.store.put("b", 7, 15)
    stack.store.delete("b", 25)
    app.commit("versions", stack, stream_time=25)
    stack.close()

    assert [e.value for e in app.read("versions", capsys, "--key", "a", key="a")] == [
        VersionedRecord(2, 20, None)
    ]
    earlier = app.read("versions", capsys, "--key", "a", "--as-of", "15", key="a", as_of=15)
    assert [e.value for e in earlier] == [VersionedRecord(1, 10, 20)]
    assert app.read("versions", capsys, "--key", "b", key="b") == []  # deleted at 25
    before = app.read("versions", capsys, "--key", "b", "--as-of", "16", key="b", as_of=16)
    assert [e.value for e in before] == [VersionedRecord(7, 15, 25)]
