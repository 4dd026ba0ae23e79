"""The task state every commit persists (commit markers, Spark's GroupState), which carries
a task across epochs and restarts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: Writer runs a commit state keeps: a writer changes only when a task restarts or a batch
#: aborts, so this covers that many restarts of a task behind its slowest reader.
MAX_WRITER_RUNS = 256


@dataclass
class CommitState:
    """Where a task's commits stand.

    * ``sequence``: number of the task's last committed batch (0: none yet);
    * ``marker_end``: offset after that batch's commit marker in the marker topic;
    * ``writers``: under exactly-once, which writer (transactional producer instance)
      committed which batches, as runs ``[first sequence, writer]`` in sequence order, the
      last :data:`MAX_WRITER_RUNS` of them: a reader of the task's repartition records tells
      committed from aborted ones by it (``kafka/batch_stamps.py``);
    * ``offsets``: the input offsets the batch committed to the consumer group (exactly-once:
      in its transaction), by which recovery tells a marker of an aborted transaction that
      the broker shows (Tansu) from a committed one (``CommitLog.newer``, ``kafka/markers.py``).
    """

    sequence: int = 0
    marker_end: int = 0
    writers: list[list[Any]] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)

    def committing(
        self, sequence: int, writer: str | None, offsets: dict[str, int] | None = None
    ) -> CommitState:
        """The state once batch ``sequence`` commits, written by ``writer`` (None: not kept),
        with ``offsets`` (input topic -> next offset of the task's partition) committed to the
        consumer group in the same transaction."""
        writers = [list(run) for run in self.writers]
        if writer is not None and (not writers or writers[-1][1] != writer):
            writers.append([sequence, writer])
            del writers[:-MAX_WRITER_RUNS]
        return CommitState(sequence, 0, writers, dict(offsets or {}))


@dataclass
class TaskMetadata:
    """Everything a task needs to resume exactly where it stopped.

    * ``stream_time``: largest record timestamp seen (-1: none yet); never goes back.
    * ``partition_times``: per input topic, the largest timestamp seen on this partition.
    * ``input_positions``: per input topic, the next offset to process.
    * ``schedules``: punctuation schedules by key (see ``runtime.punctuation``).
    * ``changelog_offsets``: per store, the changelog end offset the committed state matches.
    * ``commit``: the exactly-once commit state (:class:`CommitState`).
    * ``extra``: fields a runtime wants to carry that the engine does not interpret.
    """

    stream_time: int = -1
    partition_times: dict[str, int] = field(default_factory=dict)
    input_positions: dict[str, int] = field(default_factory=dict)
    schedules: dict[str, dict[str, Any]] = field(default_factory=dict)
    changelog_offsets: dict[str, int] = field(default_factory=dict)
    commit: CommitState = field(default_factory=CommitState)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes | None) -> TaskMetadata:
        """The metadata in ``text`` (Spark's GroupState); empty text: a task that never
        committed."""
        if not text:
            return cls()
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskMetadata:
        """The metadata of a decoded JSON object (a commit marker's, ``kafka/markers.py``)."""
        extra = dict(data.get("extra", {}))
        # checkpoints written before CommitState kept these two in ``extra``
        commit = data.get("commit") or {
            "sequence": extra.pop("sequence", 0),
            "marker_end": extra.pop("marker_end", 0),
        }
        return cls(
            stream_time=int(data.get("stream_time", -1)),
            partition_times={k: int(v) for k, v in data.get("partition_times", {}).items()},
            input_positions={k: int(v) for k, v in data.get("input_positions", {}).items()},
            schedules=dict(data.get("schedules", {})),
            changelog_offsets={k: int(v) for k, v in data.get("changelog_offsets", {}).items()},
            commit=CommitState(
                int(commit["sequence"]),
                int(commit["marker_end"]),
                [[int(first), str(writer)] for first, writer in commit.get("writers", [])],
                {k: int(v) for k, v in commit.get("offsets", {}).items()},
            ),
            extra=extra,
        )
