"""The task state persisted between micro-batches (in Spark's GroupState) and restarts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TaskMetadata:
    """Everything a task needs to resume exactly where it stopped.

    * ``stream_time``: largest record timestamp seen (-1: none yet); never goes back.
    * ``partition_times``: per input topic, the largest timestamp seen on this partition.
    * ``input_positions``: per input topic, the next offset to process.
    * ``schedules``: punctuation schedules by key (see ``runtime.punctuation``).
    * ``changelog_offsets``: per store, the changelog end offset the committed state matches.
    * ``extra``: runtime-specific fields (e.g. transaction markers).
    """

    stream_time: int = -1
    partition_times: dict[str, int] = field(default_factory=dict)
    input_positions: dict[str, int] = field(default_factory=dict)
    schedules: dict[str, dict[str, Any]] = field(default_factory=dict)
    changelog_offsets: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes | None) -> TaskMetadata:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(
            stream_time=int(data.get("stream_time", -1)),
            partition_times={k: int(v) for k, v in data.get("partition_times", {}).items()},
            input_positions={k: int(v) for k, v in data.get("input_positions", {}).items()},
            schedules=dict(data.get("schedules", {})),
            changelog_offsets={k: int(v) for k, v in data.get("changelog_offsets", {}).items()},
            extra=dict(data.get("extra", {})),
        )
