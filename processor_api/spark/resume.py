"""Whether a run may resume the Spark checkpoint it finds.

A run's progress lives in Kafka: each task's input offsets in the consumer group
``<application.id>``, its metadata in its last commit marker, its stores in their changelogs.
The Spark checkpoint adds the epoch source's progress and every task's ``GroupState`` (the
metadata of its last commit that Spark knows of). A run without its checkpoint therefore
resumes from Kafka and gives the same results; a checkpoint Spark cannot resume is refused
at start with what to do, never half-read.
"""

from __future__ import annotations

import json
from pathlib import Path

from processor_api.errors import ConfigError

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


def check_checkpoint_mode(checkpoint_dir: str) -> None:
    """Refuse a checkpoint that a run in epochs cannot resume; mark a new one as ours.

    Refused: a checkpoint of an earlier version's micro-batch runs (another source and a
    GroupState with a timeout: Spark's state schema differs), one of the Python epoch source
    of earlier versions, and one whose marker names no known mode.
    """
    checkpoint = Path(checkpoint_dir)
    marker = checkpoint / MODE_MARKER
    if marker.exists():
        recorded = marker.read_text().strip()
        if recorded in MICRO_BATCH_MODES:
            raise ConfigError(
                f"the Spark checkpoint {checkpoint} was written by a micro-batch run "
                f"({recorded}) of an earlier version; the micro-batch runtime was removed and "
                f"a run in epochs cannot resume it (Spark's state schema differs): " + _FRESH_START
            )
        if recorded != EPOCHS:
            raise ConfigError(
                f"the Spark checkpoint {checkpoint} names an unknown mode {recorded!r} in its "
                f"{MODE_MARKER} file: is this directory a processor_api checkpoint? If so, "
                + _FRESH_START
            )
        if _written_by_python_epoch_source(checkpoint):
            raise ConfigError(
                f"the Spark checkpoint {checkpoint} was written by an earlier version, whose "
                f"epochs came from a Python source; this version's epochs come from Spark's "
                f"rate-micro-batch source, which cannot resume it: " + _FRESH_START
            )
        return
    if (checkpoint / "offsets").exists():
        raise ConfigError(
            f"the Spark checkpoint {checkpoint} has no {MODE_MARKER} file: it was written by "
            f"an earlier version's micro-batch run or is not a processor_api checkpoint, and "
            f"a run in epochs cannot resume it: " + _FRESH_START
        )
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker.write_text(EPOCHS + "\n")


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
