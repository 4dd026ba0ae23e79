"""An application's state as Kafka holds it (``processor-api status``), running or stopped.

Only the broker is asked:

* the commit markers topic (``<application.id>-task-commits``, one partition per task): each
  task's last committed marker (read_committed) names the task and carries its metadata (input
  positions, stream time, changelog offsets); the marker record's timestamp is the commit's
  time (``kafka/markers.py``);
* the consumer group ``<application.id>``: the committed offset of each input partition;
* the end offsets of the input partitions (the lag is end minus committed) and of the
  changelog partitions (with their beginning offsets: the records each changelog holds).

A task commits only when it did something, so an idle task's last commit ages too: "alive"
means a commit within ``alive_within_s`` (see the docs' ``status`` section).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from processor_api.engine.metadata import TaskMetadata
from processor_api.kafka.admin import topic_partitions
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.markers import latest_markers
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from processor_api.kafka.offsets import beginning_offsets, end_offsets

#: The last offsets of a marker partition read first (then 16 times more, and so on).
MARKER_TAIL = 16
#: A task that committed within this many seconds looks alive (``--alive-within``).
ALIVE_WITHIN_S = 120.0


@dataclass(frozen=True)
class InputStatus:
    """One input partition of a task: the group's committed offset, the end, the lag."""

    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int


@dataclass(frozen=True)
class ChangelogStatus:
    """One store's changelog partition: the offset the task's last commit covers, and the
    records the partition holds (end minus beginning offset)."""

    store: str
    topic: str
    committed_offset: int
    records: int


@dataclass(frozen=True)
class TaskStatus:
    """One task, from its last commit marker."""

    task_id: str
    stream_time: int | None  # ms; None: no record processed yet
    last_commit_ms: int
    last_commit_age_s: float
    alive: bool
    inputs: tuple[InputStatus, ...]
    changelogs: tuple[ChangelogStatus, ...]

    @property
    def lag(self) -> int:
        return sum(i.lag for i in self.inputs)


@dataclass(frozen=True)
class ApplicationStatus:
    """Every task of an application that has committed at least once."""

    application_id: str
    checked_at_ms: int
    tasks: tuple[TaskStatus, ...]

    @property
    def lag(self) -> int:
        return sum(t.lag for t in self.tasks)

    def to_json(self) -> str:
        """For scripts: every field, plus the total and per-task lag."""
        data = asdict(self)
        data["lag"] = self.lag
        for task, status in zip(data["tasks"], self.tasks, strict=True):
            task["lag"] = status.lag
        return json.dumps(data, indent=2, sort_keys=True)


def application_status(
    bootstrap_servers: str,
    application_id: str,
    *,
    kafka: KafkaClientConfig | None = None,
    alive_within_s: float = ALIVE_WITHIN_S,
) -> ApplicationStatus:
    """What Kafka says about ``application_id`` now (see the module docs).

    Raises ``MissingTopicError`` when the application has no commit markers topic (it never
    ran against this broker), and ``StreamsError`` when the broker does not answer.
    """
    topic = commit_marker_topic(application_id)
    partitions = topic_partitions(
        bootstrap_servers, [topic], kafka=kafka, role="commit markers topic"
    )[topic]
    markers = [
        (marker, TaskMetadata.from_dict(marker.metadata))
        for marker in latest_markers(
            bootstrap_servers, topic, partitions, kafka=kafka, tail=MARKER_TAIL
        )
    ]
    inputs = sorted(
        {(name, _partition_of(m.task_id)) for m, data in markers for name in data.input_positions}
    )
    changelogs = sorted(
        {
            (changelog_topic(application_id, store), _partition_of(m.task_id))
            for m, data in markers
            for store in data.changelog_offsets
        }
    )
    committed = committed_offsets(bootstrap_servers, application_id, inputs, kafka=kafka)
    ends = end_offsets(bootstrap_servers, inputs + changelogs, kafka=kafka) if markers else {}
    starts = beginning_offsets(bootstrap_servers, changelogs, kafka=kafka) if changelogs else {}
    now_ms = int(time.time() * 1000)
    tasks = []
    for marker, metadata in markers:
        partition = _partition_of(marker.task_id)
        task_inputs = []
        for name in sorted(metadata.input_positions):
            key = (name, partition)
            end = ends.get(key, 0)
            position = committed.get(key)
            task_inputs.append(
                InputStatus(name, partition, position, end, max(0, end - (position or 0)))
            )
        task_changelogs = []
        for store, offset in sorted(metadata.changelog_offsets.items()):
            key = (changelog_topic(application_id, store), partition)
            task_changelogs.append(
                ChangelogStatus(store, key[0], offset, ends.get(key, 0) - starts.get(key, 0))
            )
        age_s = max(0.0, (now_ms - marker.timestamp_ms) / 1000)
        tasks.append(
            TaskStatus(
                task_id=marker.task_id,
                stream_time=None if metadata.stream_time < 0 else metadata.stream_time,
                last_commit_ms=marker.timestamp_ms,
                last_commit_age_s=round(age_s, 3),
                alive=age_s <= alive_within_s,
                inputs=tuple(task_inputs),
                changelogs=tuple(task_changelogs),
            )
        )
    return ApplicationStatus(application_id, now_ms, tuple(sorted(tasks, key=_task_order)))


def _partition_of(task_id: str) -> int:
    return int(task_id.rpartition("_")[2])


def _task_order(task: TaskStatus) -> tuple[int, int]:
    sub, _, partition = task.task_id.partition("_")
    return int(sub), int(partition)


def format_table(status: ApplicationStatus) -> str:
    """The human view: one line per task and input partition, then the changelogs."""
    if not status.tasks:
        return f"application {status.application_id}: no task has committed yet\n"
    rows = [("TASK", "ALIVE", "LAST COMMIT", "STREAM TIME", "INPUT", "COMMITTED", "END", "LAG")]
    for task in status.tasks:
        first = True
        for item in task.inputs or (None,):
            rows.append(
                (
                    task.task_id if first else "",
                    ("yes" if task.alive else "no") if first else "",
                    f"{task.last_commit_age_s:.0f}s ago" if first else "",
                    _time(task.stream_time) if first else "",
                    "" if item is None else f"{item.topic}[{item.partition}]",
                    "" if item is None or item.committed is None else str(item.committed),
                    "" if item is None else str(item.end),
                    "" if item is None else str(item.lag),
                )
            )
            first = False
    lines = [f"application {status.application_id}: total lag {status.lag}", *_columns(rows)]
    stores = [(t.task_id, c) for t in status.tasks for c in t.changelogs]
    if stores:
        lines.append("")
        lines.extend(
            _columns(
                [("TASK", "STORE", "CHANGELOG", "COMMITTED OFFSET", "RECORDS")]
                + [
                    (task_id, c.store, c.topic, str(c.committed_offset), str(c.records))
                    for task_id, c in stores
                ]
            )
        )
    return "\n".join(lines) + "\n"


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
