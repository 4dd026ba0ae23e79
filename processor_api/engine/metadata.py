"""The task state persisted between micro-batches (in Spark's GroupState) and restarts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CommitState:
    """Where a task's exactly-once commits stand (unused under at-least-once).

    * ``sequence``: number of the task's last committed transaction (0: none yet);
    * ``marker_end``: offset after that transaction's commit marker in the marker topic.
    """

    sequence: int = 0
    marker_end: int = 0


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
        if not text:
            return cls()
        data = json.loads(text)
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
            commit=CommitState(int(commit["sequence"]), int(commit["marker_end"])),
            extra=extra,
        )
