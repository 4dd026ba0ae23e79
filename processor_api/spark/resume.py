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
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.topics import TopicPlan
from processor_api.logging import get_logger
from processor_api.topology import Topology

_log = get_logger("processor_api.runner")

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


def _written_by_python_epoch_source(checkpoint: Path) -> bool:
    """Whether the checkpoint's newest offsets are the old Python epoch source's
    (``{"epoch": n}``; Spark's rate-micro-batch source writes ``{"offset": .., "timestamp": ..}``)."""
    batches = _batches(checkpoint / "offsets")
    if not batches:
        return False
    for line in (checkpoint / "offsets" / str(batches[-1])).read_text().splitlines()[2:]:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and set(data) == {"epoch"}:
            return True
    return False


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


def check_checkpoint_mode(checkpoint_dir: str, available_now: bool, epochs: bool = False) -> None:
    """Refuse to resume a checkpoint written in another mode.

    Continuous micro-batch runs use a processing-time GroupState timeout and available-now
    runs none (Spark never ends an AvailableNow query otherwise); Spark stores the state with
    a different schema in each case and cannot resume one from the other. Runs in epochs
    (both kinds) read another source (``epochs.epoch_rows``) and use no timeout; a checkpoint
    of the Python epoch source of earlier versions is refused with what to do.
    """
    mode = "epochs" if epochs else "available-now" if available_now else "continuous"
    checkpoint = Path(checkpoint_dir)
    marker = checkpoint / "processor_api_mode"
    if marker.exists():
        recorded = marker.read_text().strip()
        if recorded != mode:
            raise ConfigError(
                f"the Spark checkpoint {checkpoint} was written by a {_run_kind(recorded)} and "
                f"cannot be resumed by a {_run_kind(mode)} (Spark's state schema differs); "
                f"run as it was ({_flags_of(recorded)}), or delete that directory or use "
                f"another --checkpoint-dir: a run without its checkpoint resumes from the "
                f"progress kept in Kafka and gives the same results"
            )
        if epochs and _written_by_python_epoch_source(checkpoint):
            raise ConfigError(
                f"the Spark checkpoint {checkpoint} was written by an earlier version, whose "
                f"epochs came from a Python source; this version's epochs come from Spark's "
                f"rate-micro-batch source, which cannot resume it. Delete that directory or "
                f"use another --checkpoint-dir: a run without its checkpoint resumes from "
                f"the progress kept in Kafka and gives the same results"
            )
        return
    if (checkpoint / "offsets").exists():
        return  # a checkpoint from before the marker existed: let Spark decide
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker.write_text(mode + "\n")


def _run_kind(mode: str) -> str:
    return "run in epochs" if mode == "epochs" else f"micro-batch run ({mode})"


def _flags_of(mode: str) -> str:
    """The ``run-topology`` flags of a run of ``mode``."""
    return {
        "epochs": "the default, in epochs",
        "available-now": "--micro-batches --available-now",
        "continuous": "--micro-batches, without --available-now",
    }.get(mode, f"an unknown mode {mode!r}: is this directory a processor_api checkpoint?")


def resume_offsets(
    bootstrap_servers: str,
    application_id: str,
    checkpoint_dir: str,
    plan: TopicPlan,
    topology: Topology,
    kafka: KafkaClientConfig,
) -> str:
    """The source's starting offsets: the checkpoint's, the group's, or the reset policy's."""
    partitions = [
        (topic, p)
        for topics in (plan.external_sources, plan.internal)
        for topic, count in topics.items()
        for p in range(count)
    ]
    group = committed_offsets(bootstrap_servers, application_id, partitions, kafka=kafka)
    positions = checkpoint_positions(checkpoint_dir)
    if positions is not None:
        check_agreement(checkpoint_dir, *positions, group, application_id)
        return _reset_policy(topology)  # Spark resumes from its checkpoint
    if group:
        _log.info(
            "resuming_from_consumer_group",
            group=application_id,
            partitions=len(group),
            detail="no Spark checkpoint: the source starts at the group's committed "
            "offsets and tasks adopt their last commit marker",
        )
        return starting_offsets_json(group)
    return _reset_policy(topology)


def _reset_policy(topology: Topology) -> str:
    policies = {
        node.offset_reset for node in topology.nodes.values() if hasattr(node, "offset_reset")
    }
    return "latest" if policies == {"latest"} else "earliest"
