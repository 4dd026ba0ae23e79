"""Whether a run may resume the Spark checkpoint it finds.

A run's progress lives in Kafka: each task's input offsets in the consumer group
``<application.id>``, its metadata in its last commit marker, its stores in their changelogs.
The Spark checkpoint adds the epoch source's progress and every task's ``GroupState`` (the
metadata of its last commit that Spark knows of). A run without its checkpoint therefore
resumes from Kafka and gives the same results; a checkpoint Spark cannot resume is refused
at start with what to do, never half-read.

The checkpoint is read with ``pyarrow.fs``, the filesystem layer of the snapshots
(:func:`processor_api.state.snapshot_files.open_location`), so a checkpoint in an object store
or on HDFS is checked where it is, and the check runs before the run creates any topic.
"""

from __future__ import annotations

import json

from processor_api.config import StreamsConfig
from processor_api.errors import ConfigError
from processor_api.spark.checkpoint_files import CheckpointFiles, open_checkpoint

#: The file in a Spark checkpoint that says which kind of run wrote it.
MODE_MARKER = "processor_api_mode"
#: The mode of a run in epochs (every run of this version).
EPOCHS = "epochs"
#: Modes that earlier versions' micro-batch runs recorded.
MICRO_BATCH_MODES = ("continuous", "available-now")

_FRESH_START = (
    "delete that directory or use another --checkpoint-dir: a run without its checkpoint "
    "resumes from the progress kept in Kafka and gives the same results"
)


def check_checkpoint_mode(checkpoint_dir: str, config: StreamsConfig | None = None) -> None:
    """Refuse a checkpoint that a run in epochs cannot resume; mark a new one as ours.

    Refused: a checkpoint of an earlier version's micro-batch runs (another source and a
    GroupState with a timeout: Spark's state schema differs), one of the Python epoch source
    of earlier versions, and one whose marker names no known mode.

    ``checkpoint_dir`` is a local path or a ``pyarrow.fs`` URI (``s3://``, ``s3a://``,
    ``gs://``, ``hdfs://``). A remote one is opened with ``state.snapshot.filesystem.options``
    of ``config`` when the snapshots are on the same kind of filesystem (by default they are
    inside the checkpoint). A checkpoint that cannot be opened or read is a
    :class:`ConfigError` naming it: the run cannot tell what it would resume.
    """
    checkpoint = open_checkpoint(checkpoint_dir, config)
    try:
        recorded = checkpoint.read_text(MODE_MARKER)
        if recorded is not None:
            _check_recorded_mode(checkpoint, recorded.strip())
            return
        if checkpoint.exists("offsets"):
            raise ConfigError(
                f"the Spark checkpoint {checkpoint_dir} has no {MODE_MARKER} file: it was "
                f"written by an earlier version's micro-batch run or is not a processor_api "
                f"checkpoint, and a run in epochs cannot resume it: " + _FRESH_START
            )
        checkpoint.write_text(MODE_MARKER, EPOCHS + "\n")
    except OSError as exc:
        raise ConfigError(
            f"the Spark checkpoint {checkpoint_dir} cannot be read or marked, so a run cannot "
            f"tell whether it may resume it: {str(exc).strip().splitlines()[0]}"
        ) from exc


def _check_recorded_mode(checkpoint: CheckpointFiles, recorded: str) -> None:
    if recorded in MICRO_BATCH_MODES:
        raise ConfigError(
            f"the Spark checkpoint {checkpoint.name} was written by a micro-batch run "
            f"({recorded}) of an earlier version; the micro-batch runtime was removed and "
            f"a run in epochs cannot resume it (Spark's state schema differs): " + _FRESH_START
        )
    if recorded != EPOCHS:
        raise ConfigError(
            f"the Spark checkpoint {checkpoint.name} names an unknown mode {recorded!r} in its "
            f"{MODE_MARKER} file: is this directory a processor_api checkpoint? If so, "
            + _FRESH_START
        )
    if _written_by_python_epoch_source(checkpoint):
        raise ConfigError(
            f"the Spark checkpoint {checkpoint.name} was written by an earlier version, whose "
            f"epochs came from a Python source; this version's epochs come from Spark's "
            f"rate-micro-batch source, which cannot resume it: " + _FRESH_START
        )


def _written_by_python_epoch_source(checkpoint: CheckpointFiles) -> bool:
    """Whether the checkpoint's newest offsets are the old Python epoch source's
    (``{"epoch": n}``; Spark's rate-micro-batch source writes ``{"offset": .., "timestamp": ..}``)."""
    batches = checkpoint.batches("offsets")
    if not batches:
        return False
    text = checkpoint.read_text(f"offsets/{batches[-1]}") or ""
    for line in text.splitlines()[2:]:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and set(data) == {"epoch"}:
            return True
    return False
