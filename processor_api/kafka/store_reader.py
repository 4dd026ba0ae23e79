"""Reading a store's committed contents from its changelog, without the application.

Every logged store is a compacted changelog ``<application.id>-<store>-changelog`` whose
partition ``p`` is written by task ``<sub-topology>_p``. With each commit (every
``commit.interval.ms``), a task writes a commit marker (``<application.id>-task-commits``,
the task's partition) whose metadata holds, per store, the changelog end offset that commit
reached -- under both processing guarantees. So the committed contents of a store partition are its changelog read
up to the offset in the task's last marker:

1. :meth:`StoreReader.committed_positions`: per changelog partition, the last marker of its
   task (read ``read_committed`` from the end of the marker partition backwards), the offset
   it records for the store (0, empty, when the task never committed) and the task's stream
   time then;
2. :meth:`StoreReader.read_partition`: the changelog ``read_committed`` from its first offset to
   that end, replayed with the store's own restore writer into a temporary store of the same
   kind (tombstones delete, window and session retention apply as in the application), then
   read with the store's typed API and the serdes the topology gives it.

A store with a time to live (``with_ttl``) keeps each value's write time in front of it, in
the changelog too: the reader strips it and leaves out the entries the store would hide, with
``now`` as :class:`CommittedPosition` decides it (the commit's stream time, or the reader's
clock for a ``"wall_clock"`` store).

What this excludes, and why it holds on Apache Kafka as on the embedded broker:

* records after the marker's offsets: a batch in flight, an exactly-once batch whose
  transaction aborted and was not retried yet, an at-least-once batch whose marker was not
  written. None of them is read, whatever the broker shows (Tansu shows aborted records to
  ``read_committed`` readers). On Apache Kafka an open transaction also holds the last stable
  offset back, and ``read_committed`` drops aborted records, so the end is where a
  ``read_committed`` consumer stops anyway.
* a marker of an aborted transaction is never seen on Apache Kafka (``read_committed``); on
  Tansu it is, and is taken as the task's last commit here; the application's recovery passes
  it over (the consumer group shows the transaction did not commit, ``kafka/markers.py``) and
  does the batch again, so between such a crash and the next start this reader shows that
  batch's writes on Tansu.
  Aborted records *between* two committed batches (a batch that aborted and was retried) are
  dropped by Apache Kafka; Tansu shows them, to this reader as to the application's restore,
  and the retry rewrites the same keys after them.

Each partition is read at the last batch its task committed; partitions of different tasks can
be at different commits (as a Kafka Streams instance's stores are).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor_api.errors import ConfigError, MissingTopicError, StreamsError
from processor_api.kafka.admin import topic_partitions
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.markers import CommitMarker, read_latest_marker
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from processor_api.kafka.reader import LARGE_FETCH, PartitionReader
from processor_api.kafka.topics import plan_topics
from processor_api.logging import get_logger
from processor_api.state import InMemoryBytesStore, KeyValue, StoreBuilder
from processor_api.state.manager import TaskStores
from processor_api.state.selection import (
    KEY_VALUE_KINDS,
    READABLE_KINDS,
    StoreSelection,
    check_selection,
    select,
    select_folded,
)
from processor_api.state.snapshots import SnapshotSettings, TaskSnapshots
from processor_api.state.ttl import live_value
from processor_api.topology import Topology

_log = get_logger("processor_api.read_store")

#: Offsets read from the end of a marker partition first (the window grows until a marker).
MARKER_TAIL = 64
#: Kinds whose innermost store is a plain byte store (no segments): replayed in memory.
_PLAIN_KINDS = ("key-value", "timestamped-key-value", "versioned-key-value")


@dataclass(frozen=True)
class StoreLocation:
    """Where a store's changelog and its tasks' commit markers are (picklable)."""

    bootstrap_servers: str
    application_id: str
    store: str
    changelog_topic: str
    partitions: int
    task_ids: tuple[str, ...]  # the task writing each changelog partition
    marker_topic: str
    marker_partitions: tuple[int, ...]  # each task's partition of the marker topic
    kafka: KafkaClientConfig | None = None


@dataclass(frozen=True)
class CommittedPosition:
    """One changelog partition at its task's last commit (picklable).

    ``end``: the store's changelog offset in the marker (0: the task never committed);
    ``stream_time``: the task's stream time in it (-1: none); ``wall_time``: the reader's
    system clock (epoch ms) when it read the marker.
    """

    end: int
    stream_time: int = -1
    wall_time: int = 0

    def ttl_now(self, clock: str) -> int:
        """``now`` for a store with a time to live on ``clock``, as its task would take it:
        the stream time the task committed at (``"stream_time"``; what a task restored from
        this commit starts with) or the reader's clock (``"wall_clock"``)."""
        return self.stream_time if clock == "stream_time" else self.wall_time


class StoreReader:
    """Reads one store of an application from Kafka (see the module docstring).

    ``topology`` is the application's topology (the store's kind and serdes come from it).
    Raises ``ConfigError`` for a store the topology does not have or that has no changelog,
    ``MissingTopicError`` when the application has no state on the broker.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        application_id: str,
        topology: Topology,
        store: str,
        *,
        kafka: KafkaClientConfig | None = None,
        registry: Mapping[str, Any] | None = None,
        snapshots: SnapshotSettings | None = None,
    ) -> None:
        self.snapshots = snapshots
        # serdes bound to the changelog topic, as the application's tasks bind them
        topic = changelog_topic(application_id, store)
        self.builder = store_builder(topology, store).bound_to(topic, registry)
        self.location = locate(bootstrap_servers, application_id, topology, store, kafka=kafka)

    @property
    def partitions(self) -> int:
        """How many changelog partitions (tasks) the store has."""
        return self.location.partitions

    def committed_ends(self) -> dict[int, int]:
        """Per changelog partition, the end offset of the last committed batch."""
        return {p: position.end for p, position in self.committed_positions().items()}

    def committed_positions(self) -> dict[int, CommittedPosition]:
        """Per changelog partition, where its task's last commit left it."""
        return committed_positions(self.location)

    def read_partition(
        self,
        partition: int,
        position: CommittedPosition,
        selection: StoreSelection | None = None,
    ) -> Iterator[KeyValue]:
        """The entries of ``partition`` committed up to ``position``."""
        return read_partition(
            self.location, self.builder, partition, position, selection, self.snapshots
        )

    def read(self, selection: StoreSelection | None = None) -> Iterator[tuple[int, KeyValue]]:
        """``(partition, entry)`` of every partition, each at its last committed batch (the
        commit markers are read now, the partitions as the iterator goes). Raises
        ``StoreError`` at once for a selection the store's kind cannot take."""
        check_selection(self.builder.kind, self.builder.name, selection or StoreSelection())
        return self._entries(self.committed_positions(), selection)

    def _entries(
        self, positions: dict[int, CommittedPosition], selection: StoreSelection | None
    ) -> Iterator[tuple[int, KeyValue]]:
        for partition in range(self.partitions):
            for entry in self.read_partition(partition, positions[partition], selection):
                yield partition, entry


def store_builder(topology: Topology, store: str) -> StoreBuilder:
    """The builder of a logged, readable store of ``topology``, or ``ConfigError``."""
    builders = topology.store_builders
    builder = builders.get(store)
    owners = [sub.id for sub in topology.subtopologies() if store in sub.store_names]
    if builder is None or not owners:
        known = sorted(n for sub in topology.subtopologies() for n in sub.store_names)
        what = "no store" if builder is None else "a global or read-only store"
        raise ConfigError(
            f"the topology has {what} {store!r} to read from its changelog; "
            f"its stores: {', '.join(known) or 'none'}"
        )
    if not builder.logging_enabled:
        raise ConfigError(
            f"state store {store!r} has logging disabled: it has no changelog to read it from"
        )
    if builder.kind not in READABLE_KINDS:
        raise ConfigError(f"state store {store!r} is of kind {builder.kind!r}: it cannot be read")
    return builder


def locate(
    bootstrap_servers: str,
    application_id: str,
    topology: Topology,
    store: str,
    *,
    kafka: KafkaClientConfig | None = None,
) -> StoreLocation:
    """Find the store's changelog and commit markers on the broker (metadata only)."""
    topic = changelog_topic(application_id, store)
    markers = commit_marker_topic(application_id)
    try:
        counts = topic_partitions(bootstrap_servers, [markers, topic], kafka=kafka)
    except MissingTopicError as exc:
        raise MissingTopicError(
            f"application {application_id!r} has no state for store {store!r} on "
            f"{bootstrap_servers}: topic(s) {', '.join(repr(t) for t in exc.topics)} do not "
            "exist (is the application id right, and has the application run?)",
            topics=exc.topics,
        ) from None
    plan = plan_topics(topology, bootstrap_servers, application_id, kafka=kafka)
    sub = next(s.id for s in topology.subtopologies() if store in s.store_names)
    task_ids = tuple(f"{sub}_{p}" for p in range(counts[topic]))
    if counts[markers] != len(plan.task_ids) or any(t not in plan.task_ids for t in task_ids):
        raise StreamsError(
            f"the topology's tasks ({len(plan.task_ids)}) do not match application "
            f"{application_id!r} on {bootstrap_servers}: {markers!r} has {counts[markers]} "
            f"partition(s), {topic!r} {counts[topic]}; is it the application's topology?"
        )
    return StoreLocation(
        bootstrap_servers=bootstrap_servers,
        application_id=application_id,
        store=store,
        changelog_topic=topic,
        partitions=counts[topic],
        task_ids=task_ids,
        marker_topic=markers,
        marker_partitions=tuple(plan.task_ids.index(t) for t in task_ids),
        kafka=kafka,
    )


def committed_positions(location: StoreLocation) -> dict[int, CommittedPosition]:
    """Per changelog partition, the store's changelog offset and the task's stream time in
    its task's last marker, with the system time the markers are read at."""
    positions: dict[int, CommittedPosition] = {}
    wall_time = time.time_ns() // 1_000_000  # the task clock (engine.task.wall_clock_ms)
    for partition, (task_id, marker_partition) in enumerate(
        zip(location.task_ids, location.marker_partitions, strict=True)
    ):
        marker = read_latest_marker(
            location.bootstrap_servers,
            location.marker_topic,
            marker_partition,
            0,  # the reader starts at the first offset a compacted topic still has
            task_id,
            kafka=location.kafka,
            tail=MARKER_TAIL,
        )
        positions[partition] = (
            CommittedPosition(0, wall_time=wall_time)
            if marker is None
            else _position(marker, location, task_id, wall_time)
        )
    _log.debug(
        "store_committed_ends",
        store=location.store,
        topic=location.changelog_topic,
        ends={p: position.end for p, position in positions.items()},
        stream_times={p: position.stream_time for p, position in positions.items()},
    )
    return positions


def _position(
    marker: CommitMarker, location: StoreLocation, task_id: str, wall_time: int
) -> CommittedPosition:
    try:
        return CommittedPosition(
            end=marker.changelog_offsets.get(location.store, 0),
            stream_time=marker.stream_time,
            wall_time=wall_time,
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise StreamsError(
            f"the commit marker of task {task_id} at offset {marker.offset} of "
            f"{location.marker_topic!r} has no readable changelog offsets: {exc!r}"
        ) from exc


def read_partition(
    location: StoreLocation,
    builder: StoreBuilder,
    partition: int,
    position: CommittedPosition,
    selection: StoreSelection | None = None,
    snapshots: SnapshotSettings | None = None,
) -> Iterator[KeyValue]:
    """Replay ``[0, position.end)`` of one changelog partition into a temporary store and select.

    Key-value stores (plain and timestamped) are folded into a dict instead: the changelog
    key is the store key, so the last write of each key, tombstones applied, is the store;
    with a time to live, entries expired at ``position``'s ``now`` are left out.
    With ``snapshots`` (a persistent store), the partition's newest usable snapshot at or
    below the end is downloaded and only the changelog after it is replayed.
    """
    selection = selection or StoreSelection()
    check_selection(builder.kind, builder.name, selection)
    end = position.end
    if snapshots is not None and builder.persistent and end > 0:
        yield from _read_from_snapshot(location, builder, partition, position, selection, snapshots)
        return
    if builder.kind in KEY_VALUE_KINDS:
        folded: dict[bytes, bytes] = {}
        if end > 0:
            _replay(location, builder, _Fold(folded), partition, end)
        if builder.ttl_ms is not None:
            folded = _unexpired(folded, builder, position, partition)
        facade = builder.build(inner=InMemoryBytesStore(builder.name)).store
        yield from select_folded(facade, folded, selection)
        return
    with tempfile.TemporaryDirectory(prefix="read-store-") as directory:
        stack = _scratch_store(builder, Path(directory))
        try:
            if end > 0:
                _replay(location, builder, stack.inner, partition, end)
            yield from select(builder.kind, stack.store, builder.name, selection)
        finally:
            stack.close()


def _unexpired(
    folded: dict[bytes, bytes],
    builder: StoreBuilder,
    position: CommittedPosition,
    partition: int,
) -> dict[bytes, bytes]:
    """The folded entries of a store with a time to live that it shows at ``position``'s
    ``now``, without their write-time stamps."""
    now = position.ttl_now(builder.ttl_clock)
    cutoff = now - builder.ttl_ms  # type: ignore[operator]
    live: dict[bytes, bytes] = {}
    for key, data in folded.items():
        value = live_value(data, cutoff)
        if value is not None:
            live[key] = value
    _log.debug(
        "store_ttl_applied",
        store=builder.name,
        partition=partition,
        clock=builder.ttl_clock,
        now=now,
        expired=len(folded) - len(live),
    )
    return live


def _read_from_snapshot(
    location: StoreLocation,
    builder: StoreBuilder,
    partition: int,
    position: CommittedPosition,
    selection: StoreSelection,
    settings: SnapshotSettings,
) -> Iterator[KeyValue]:
    """The partition's store restored as its task would restore it: snapshot, then tail."""
    end = position.end
    task_id = location.task_ids[partition]
    with tempfile.TemporaryDirectory(prefix="read-store-") as scratch:
        directory = Path(scratch) / task_id
        stores = TaskStores(
            application_id=location.application_id,
            task_id=task_id,
            partition=partition,
            directory=directory,
            builders={builder.name: builder},
            changelog_topics={builder.name: location.changelog_topic},
            timestamp_fn=lambda: 0,
            snapshots=TaskSnapshots(
                settings, task_id=task_id, partition=partition, directory=directory
            ),
        )
        stores.build(builder, lambda: 0)
        try:
            replayed = stores.restore({builder.name: end}, _changelog_reader(location))
            _log.info(
                "store_partition_read",
                store=location.store,
                topic=location.changelog_topic,
                partition=partition,
                end_offset=end,
                snapshot_offset=stores.snapshot_offsets.get(builder.name),
                records=replayed.get(builder.name, 0),
            )
            stack = stores.stacks[builder.name]
            if stack.ttl is not None:  # hides what expired at the commit's now, as the task
                now = position.ttl_now(builder.ttl_clock)
                stack.ttl.attach(lambda: now, lambda: now, lambda: now)
            yield from select(builder.kind, stack.store, builder.name, selection)
        finally:
            stores.close()


def _changelog_reader(location: StoreLocation) -> Callable[..., int]:
    """Reads a changelog range over this location's broker, ``read_committed``: the shape of
    ``TaskStores``' changelog reader, so a snapshot's tail and a full replay read alike."""

    def read(
        topic: str,
        partition: int,
        start: int,
        end: int,
        apply: Callable[[list[Any]], None],
        with_timestamps: bool = False,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> int:
        count = 0
        with PartitionReader(
            location.bootstrap_servers,
            "read-store",
            isolation_level="read_committed",
            fail_on_data_loss=False,  # compaction and retention remove a changelog's first offsets
            fetch=LARGE_FETCH,
            kafka=location.kafka,
        ) as reader:
            for messages in reader.read(topic, partition, start, end):
                if with_timestamps:
                    apply([(m.key(), m.value(), m.timestamp()[1]) for m in messages])
                else:
                    apply([(m.key(), m.value()) for m in messages])
                count += len(messages)
        return count

    return read


def _scratch_store(builder: StoreBuilder, directory: Path) -> Any:
    """A new, empty store of the builder's kind (in memory where no segments are needed)."""
    inner = InMemoryBytesStore(builder.name) if builder.kind in _PLAIN_KINDS else None
    return builder.build(state_dir=directory, inner=inner)


class _Fold:
    """A restore target folding ``(key, value)`` batches into a dict (``None`` deletes)."""

    def __init__(self, entries: dict[bytes, bytes]) -> None:
        self.entries = entries

    def put_all(self, batch: list[tuple[bytes, bytes | None]]) -> None:
        entries, pop = self.entries, self.entries.pop
        for key, value in batch:
            if value is None:
                pop(key, None)
            else:
                entries[key] = value


def _replay(
    location: StoreLocation, builder: StoreBuilder, inner: Any, partition: int, end: int
) -> int:
    write: Callable[[list[Any]], None] = (
        inner.put_all if isinstance(inner, _Fold) else builder.restore_writer(inner)
    )
    count = _changelog_reader(location)(
        location.changelog_topic,
        partition,
        0,
        end,
        write,
        with_timestamps=builder.changelog_has_versions,
    )
    _log.debug(
        "store_partition_read",
        store=location.store,
        topic=location.changelog_topic,
        partition=partition,
        end_offset=end,
        records=count,
    )
    return count
