"""Where a run resumes: the Spark checkpoint, the consumer group, or the source's reset policy.

The application's progress lives in two places: the Spark checkpoint (source offsets of each
micro-batch and every task's ``GroupState``) and Kafka (each task's input offsets committed to
the consumer group ``<application.id>``, and its metadata in its last commit marker). So:

* checkpoint present: Spark resumes from it. The group must agree: its offsets may be equal
  to the checkpoint's last committed batch or up to one batch ahead (tasks commit before
  Spark does); anything else (the group was reset or moved, the checkpoint belongs to another
  history) stops the run with an error naming both positions and how to reset.
* checkpoint missing, group offsets present: the source starts at the group's offsets, and
  every task adopts its last commit marker (``guarantee.py``), so nothing is processed twice
  and stores are restored to the marker's changelog offsets.
* neither: the source's ``offset_reset`` policy (earliest / latest).
"""

from __future__ import annotations

import json
from pathlib import Path

from processor_api.errors import ConfigError

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


def _batch_offsets(path: Path) -> Offsets:
    """The Kafka source offsets in one ``offsets/<batch>`` file of a Spark checkpoint."""
    offsets: Offsets = {}
    for line in path.read_text().splitlines()[2:]:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        for topic, partitions in data.items():
            if not isinstance(partitions, dict):
                continue  # another source (the task bootstrap: {"emitted": 1})
            for partition, offset in partitions.items():
                offsets[(topic, int(partition))] = int(offset)
    return offsets


def _batches(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def checkpoint_positions(checkpoint_dir: str | Path) -> tuple[Offsets, Offsets] | None:
    """``(committed, planned)`` source offsets of a Spark checkpoint, ``None`` if it has none.

    ``committed`` are the end offsets of the last micro-batch Spark committed, ``planned`` those
    of the last one it planned (the same, or one batch further).
    """
    root = Path(checkpoint_dir)
    planned_batches = _batches(root / "offsets")
    if not planned_batches:
        return None
    committed_batches = _batches(root / "commits")
    planned = _batch_offsets(root / "offsets" / str(planned_batches[-1]))
    committed: Offsets = {}
    if committed_batches:
        committed = _batch_offsets(root / "offsets" / str(committed_batches[-1]))
    return committed, planned


def check_agreement(
    checkpoint_dir: str | Path, committed: Offsets, planned: Offsets, group: Offsets, group_id: str
) -> None:
    """Raise :class:`ConfigError` if the group's offsets cannot come from this checkpoint."""
    for tp, offset in sorted(group.items()):
        low = committed.get(tp)
        high = planned.get(tp, low)
        if low is None:
            continue  # the checkpoint has not read this partition yet
        if offset < low or (high is not None and offset > high):
            topic, partition = tp
            where = "behind" if offset < low else "ahead of"
            raise ConfigError(
                f"the consumer group {group_id!r} and the Spark checkpoint {checkpoint_dir} "
                f"disagree on {topic}[{partition}]: the group committed offset {offset}, "
                f"{where} the checkpoint ({low} committed, {high} planned). To resume from "
                f"the group, delete the checkpoint directory; to resume from the checkpoint, "
                f"delete the group's offsets (kafka-consumer-groups --delete-offsets --group "
                f"{group_id} --topic {topic}); to start over, use a new --application-id"
            )


def starting_offsets_json(group: Offsets) -> str:
    """The source's ``starting.offsets`` option for resuming from the group's offsets."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(group.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out)
