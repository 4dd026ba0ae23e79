"""Local checkpoint files in Kafka Streams' ``OffsetCheckpoint`` text format.

::

    0                      <- format version
    2                      <- number of entries
    app-store-changelog 0 1234
    app-other-changelog 0 17

Each entry is ``topic partition offset``: the changelog offset up to which the local store
holds the data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from processor_api.errors import StoreError
from processor_api.logging import get_logger

_log = get_logger(__name__)

VERSION = 0


def read_checkpoint(path: str | os.PathLike[str]) -> dict[tuple[str, int], int]:
    """Read ``{(topic, partition): offset}`` from ``path``; ``{}`` if the file is missing.

    Raises ``StoreError`` naming the file and line when the file is corrupt.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    lines = text.splitlines()

    def corrupt(line_no: int, why: str) -> StoreError:
        return StoreError(f"corrupt checkpoint file {file} at line {line_no}: {why}")

    if not lines:
        raise corrupt(1, "empty file, expected the version line")
    if lines[0].strip() != str(VERSION):
        raise corrupt(1, f"unsupported version {lines[0].strip()!r}, expected {VERSION}")
    if len(lines) < 2:
        raise corrupt(2, "missing the entry count line")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise corrupt(2, f"entry count {lines[1].strip()!r} is not an integer") from None
    if count < 0:
        raise corrupt(2, f"negative entry count {count}")
    entries = lines[2:]
    while entries and not entries[-1].strip():
        entries.pop()  # tolerate trailing blank lines
    if len(entries) > count:
        raise corrupt(3 + count, f"more entries than the count {count} on line 2")
    if len(entries) < count:
        raise corrupt(3 + len(entries), f"file ends after {len(entries)} of {count} entries")
    offsets: dict[tuple[str, int], int] = {}
    for line_no, line in enumerate(entries, start=3):
        parts = line.split()
        if len(parts) != 3:
            raise corrupt(line_no, f"expected 'topic partition offset', got {line!r}")
        topic, partition_text, offset_text = parts
        try:
            partition, offset = int(partition_text), int(offset_text)
        except ValueError:
            raise corrupt(line_no, f"partition and offset must be integers, got {line!r}") from None
        if partition < 0:
            raise corrupt(line_no, f"negative partition {partition}")
        if offset < 0:
            _log.warning(
                "checkpoint_negative_offset_skipped",
                file=str(file),
                topic=topic,
                partition=partition,
                offset=offset,
            )
            continue
        offsets[(topic, partition)] = offset
    return offsets


def write_checkpoint(path: str | os.PathLike[str], offsets: Mapping[tuple[str, int], int]) -> None:
    """Atomically replace ``path`` with ``offsets`` (write a temp file, fsync, rename, fsync dir)."""
    file = Path(path)
    lines = [str(VERSION), str(len(offsets))]
    for (topic, partition), offset in sorted(offsets.items()):
        if not topic or any(ch.isspace() for ch in topic):
            raise StoreError(f"checkpoint {file}: invalid topic name {topic!r}")
        if int(partition) < 0 or int(offset) < 0:
            raise StoreError(
                f"checkpoint {file}: invalid partition/offset {partition}/{offset} for {topic!r}"
            )
        lines.append(f"{topic} {int(partition)} {int(offset)}")
    data = ("\n".join(lines) + "\n").encode("utf-8")
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(file.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, file)
    _fsync_dir(file.parent)


def delete_checkpoint(path: str | os.PathLike[str]) -> None:
    """Remove the checkpoint file at ``path`` if it exists."""
    Path(path).unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
