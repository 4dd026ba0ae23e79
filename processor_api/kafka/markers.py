"""Commit markers, in one place: what a marker holds, how it is encoded, written and read.

**What a marker holds.** Every commit of a task, under both guarantees, writes one record to
``<application.id>-task-commits`` (:func:`~processor_api.kafka.names.commit_marker_topic`):
partition = the task's index among the run's tasks, key = the task id, value = the JSON
object ``{"sequence": n, "metadata": {...}}`` (:func:`marker_value`). ``n`` numbers the task's
committed batches (1, 2, ...); ``metadata`` is the task's metadata after the batch
(``engine/metadata.py``, ``TaskMetadata``: input positions, stream and partition times,
punctuation schedules, the changelog offset of each store, and the commit state: the writer
runs of ``kafka/batch_stamps.py`` and the input offsets the batch committed to the consumer
group). The record's timestamp is the commit's time. Under ``exactly_once_v2`` the marker is
part of the batch's transaction. The topic is compacted: older markers of a task may be gone.

**Who writes.** The guarantees (``runtime/guarantee.py``), through :class:`CommitLog`.

**Who reads.** Recovery (:meth:`CommitLog.newer`: a marker newer than the state Spark hands
back is adopted), a downstream task telling committed from aborted repartition records
(``kafka/batch_stamps.py``: the writer runs), ``read-store`` (``kafka/store_reader.py``: each
store's changelog offset and the stream time) and ``processor-api status`` (``app_status.py``:
each task's last marker). All of them read markers ``read_committed`` through
:func:`read_latest_marker`, :func:`latest_markers` or :func:`decode_marker`.

This module is on the ``kafka`` floor, below the engine: a marker's metadata is kept as the
decoded JSON object; ``TaskMetadata.from_dict`` makes the engine's object of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from processor_api.errors import StreamsError
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic
from processor_api.kafka.offsets import beginning_offsets, end_offsets
from processor_api.kafka.producer import DeliveryTracker
from processor_api.kafka.reader import PartitionReader
from processor_api.logging import get_logger

#: How long a marker read waits for a partition that stops answering.
MARKER_READ_TIMEOUT_S = 30.0
#: Offsets read from the end of a marker partition first when looking for a marker (then 16
#: times as many, and so on back to the start).
MARKER_TAIL = 64


@dataclass(frozen=True)
class CommitMarker:
    """One committed marker as read back: where it is, and what it holds."""

    task_id: str
    offset: int
    sequence: int
    #: The task metadata after the batch, as the decoded JSON object.
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp_ms: int = 0

    @property
    def end(self) -> int:
        """The offset after the marker: where a later marker of the task can be."""
        return self.offset + 1

    @property
    def metadata_json(self) -> str:
        """The metadata as JSON text (what ``TaskMetadata.from_json`` takes)."""
        return json.dumps(self.metadata, separators=(",", ":"), sort_keys=True)

    @property
    def changelog_offsets(self) -> dict[str, int]:
        """Per store, the changelog end offset the committed state matches."""
        return {k: int(v) for k, v in self.metadata.get("changelog_offsets", {}).items()}

    @property
    def stream_time(self) -> int:
        """The task's stream time at the commit (-1: no record yet)."""
        return int(self.metadata.get("stream_time", -1))

    @property
    def writer_runs(self) -> list[tuple[int, str]]:
        """``(first batch, writer)`` runs: which transactional producer instance committed
        which batches (exactly-once; ``kafka/batch_stamps.py``)."""
        commit = self.metadata.get("commit") or {}
        return [(int(first), str(writer)) for first, writer in commit.get("writers", [])]

    @property
    def group_offsets(self) -> dict[str, int]:
        """The input offsets (per topic, the task's partition) the batch committed to the
        consumer group."""
        commit = self.metadata.get("commit") or {}
        return {k: int(v) for k, v in commit.get("offsets", {}).items()}


def marker_value(sequence: int, metadata_json: str) -> bytes:
    """A marker record's value: the batch's sequence number and the task metadata after it."""
    return json.dumps(
        {"sequence": sequence, "metadata": json.loads(metadata_json)},
        separators=(",", ":"),
    ).encode()


def decode_marker(message: Any, topic: str, partition: int) -> CommitMarker:
    """The marker in a consumed record of ``topic``; a :class:`StreamsError` naming the
    record (topic, partition, offset) and what is wrong when it is not one."""
    try:
        key = message.key()
        data = json.loads(message.value())
        metadata = data["metadata"]
        if not isinstance(metadata, dict):
            raise TypeError(f"its metadata is {type(metadata).__name__}, not an object")
        return CommitMarker(
            task_id=key.decode(),
            offset=message.offset(),
            sequence=int(data["sequence"]),
            metadata=metadata,
            timestamp_ms=message.timestamp()[1],
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StreamsError(
            f"commit marker at {topic}[{partition}]@{message.offset()} is not readable: "
            f"{type(exc).__name__}: {exc} (expected key = task id, value = "
            '{"sequence": <int>, "metadata": {...}})'
        ) from exc


def read_latest_marker(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    start: int,
    task_id: str | None,
    *,
    kafka: KafkaClientConfig | None = None,
    tail: int | None = None,
    before: int | None = None,
) -> CommitMarker | None:
    """The last committed marker of ``task_id`` (None: of any task) at or after offset
    ``start`` (read_committed), and before offset ``before`` if given.

    With ``tail``, only the last ``tail`` offsets before the end are read first, then 16 times
    as many, and so on back to ``start``, until a marker of the task is found.
    """
    tp = (topic, partition)
    end = end_offsets(bootstrap_servers, [tp], isolation_level="read_committed", kafka=kafka)[tp]
    if before is not None:
        end = min(end, before)
    with _marker_reader(bootstrap_servers, kafka) as reader:
        return _latest_in(reader, topic, partition, start, end, task_id, tail)


def latest_markers(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    *,
    kafka: KafkaClientConfig | None = None,
    tail: int = MARKER_TAIL,
) -> list[CommitMarker]:
    """The last committed marker in each of the ``partitions`` of the marker ``topic``, for
    the partitions that hold one (every task of a run, without knowing its topology)."""
    keys = [(topic, p) for p in range(partitions)]
    ends = end_offsets(bootstrap_servers, keys, isolation_level="read_committed", kafka=kafka)
    firsts = beginning_offsets(bootstrap_servers, keys, kafka=kafka)
    markers = []
    with _marker_reader(bootstrap_servers, kafka) as reader:
        for key in keys:
            found = _latest_in(
                reader, topic, key[1], firsts.get(key, 0), ends.get(key, 0), None, tail
            )
            if found is not None:
                markers.append(found)
    return markers


def _marker_reader(bootstrap_servers: str, kafka: KafkaClientConfig | None) -> PartitionReader:
    return PartitionReader(
        bootstrap_servers,
        "marker-reader",
        isolation_level="read_committed",
        fail_on_data_loss=False,  # a compacted topic: older markers may be gone
        kafka=kafka,
        stall_timeout_s=MARKER_READ_TIMEOUT_S,
    )


def _latest_in(
    reader: PartitionReader,
    topic: str,
    partition: int,
    start: int,
    end: int,
    task_id: str | None,
    tail: int | None,
) -> CommitMarker | None:
    window = tail
    while True:
        first = start if window is None else max(start, end - window)
        marker = _last_marker_in(reader, topic, partition, first, end, task_id)
        if marker is not None or first <= start:
            return marker
        window = 16 * window  # type: ignore[operator]


def _last_marker_in(
    reader: PartitionReader,
    topic: str,
    partition: int,
    start: int,
    end: int,
    task_id: str | None,
) -> CommitMarker | None:
    if end <= start:
        return None
    latest = None
    key = None if task_id is None else task_id.encode()
    for messages in reader.read(topic, partition, start, end):
        for message in messages:
            if message.key() is None or message.value() is None:
                continue  # not a marker (a compaction tombstone)
            if key is None or message.key() == key:
                latest = message
    return None if latest is None else decode_marker(latest, topic, partition)


def aborted_by_group(
    group: dict[str, int], offsets: dict[str, int], previous: dict[str, int]
) -> bool:
    """Whether a commit marker's transaction aborted, as the consumer group shows it.

    ``offsets``: the input offsets the marker's batch committed to the group in its
    transaction; ``previous``: those of the task's marker before it; ``group``: what the group
    holds now (per topic, the task's partition). Offset commits in a transaction take effect
    only when it commits, on Tansu as on Apache Kafka, so a group still at the previous batch's
    offsets for every topic this batch moved means the batch's transaction did not commit
    (Tansu shows the records, the marker included, of aborted transactions). A batch that
    moved no offset (a punctuation between batches) cannot be told apart: not aborted.
    """
    moved = {topic: offset for topic, offset in offsets.items() if previous.get(topic) != offset}
    if not moved:
        return False
    return all(group.get(topic) == previous.get(topic) for topic in moved)


class CommitLog:
    """One task's commit markers: the next one sent, the newest committed one found."""

    def __init__(
        self,
        bootstrap_servers: str,
        application_id: str,
        task_id: str,
        partition: int,
        kafka: KafkaClientConfig | None = None,
        *,
        transactional: bool = False,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._kafka = kafka
        self._app = application_id
        self._task_id = task_id
        self._input_partition = int(task_id.rpartition("_")[2])
        self._transactional = transactional
        self.topic = commit_marker_topic(application_id)
        self.partition = partition  # the task's partition of the marker topic
        self._log = get_logger("processor_api.markers", task=task_id)

    def send(self, tracker: DeliveryTracker, sequence: int, metadata_json: str) -> None:
        """Send the marker of batch ``sequence`` carrying ``metadata_json`` (not waited for:
        the guarantee waits for its acknowledgement, then :meth:`end_after_ack`)."""
        tracker.produce(
            self.topic,
            self._task_id.encode(),
            marker_value(sequence, metadata_json),
            partition=self.partition,
        )

    def end_after_ack(self, tracker: DeliveryTracker) -> int:
        """The offset after the acknowledged marker."""
        return tracker.acked_end_offsets()[(self.topic, self.partition)]

    def newer(self, sequence: int, marker_end: int) -> CommitMarker | None:
        """The task's last committed marker after batch ``sequence`` (whose marker ends at
        ``marker_end``), or None.

        Under exactly-once a marker whose transaction aborted is passed over even where the
        broker shows it (Tansu): the consumer group tells (:func:`aborted_by_group`).
        """
        marker = self._latest(marker_end)
        if marker is None or marker.sequence <= sequence:
            return None
        if self._transactional and self._aborted(marker):
            self._log.info(
                "aborted_batch_marker_ignored",
                sequence=marker.sequence,
                detail="the broker shows the commit marker of a transaction that aborted (the "
                "consumer group never got its offsets): that batch is processed again",
            )
            marker = self._latest(marker_end, before=marker.offset)
            if marker is None or marker.sequence <= sequence:
                return None
        return marker

    def _latest(self, start: int, before: int | None = None) -> CommitMarker | None:
        return read_latest_marker(
            self._bootstrap,
            self.topic,
            self.partition,
            start,
            self._task_id,
            kafka=self._kafka,
            tail=None if before is None else MARKER_TAIL,
            before=before,
        )

    def _aborted(self, marker: CommitMarker) -> bool:
        offsets = marker.group_offsets
        if not offsets:
            return False
        previous = self._latest(0, before=marker.offset)
        group = committed_offsets(
            self._bootstrap,
            self._app,
            [(topic, self._input_partition) for topic in offsets],
            kafka=self._kafka,
        )
        return aborted_by_group(
            {topic: offset for (topic, _), offset in group.items()},
            offsets,
            {} if previous is None else previous.group_offsets,
        )
