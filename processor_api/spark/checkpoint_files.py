"""The runner's own files in a Spark checkpoint, wherever the checkpoint is.

A checkpoint may be a local directory or a ``pyarrow.fs`` URI (``s3://``, ``s3a://``, ``gs://``,
``hdfs://``): it is opened with the snapshots' filesystem layer
(:func:`processor_api.state.snapshot_files.open_location`), so the mode marker
(``resume.py``), the group keys (``task_keys.py``) and the task assignment (``assignment.py``)
are read and written where Spark keeps the checkpoint, never as a local path named ``s3:``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.state.snapshot_files import open_location


def open_checkpoint(checkpoint_dir: str, config: StreamsConfig | None = None) -> CheckpointFiles:
    """The checkpoint's files. A remote checkpoint is opened with
    ``state.snapshot.filesystem.options`` of ``config`` when the snapshots are on the same
    kind of filesystem (by default they are inside the checkpoint)."""
    filesystem, root = open_location(
        checkpoint_dir, filesystem_options(checkpoint_dir, config), setting="--checkpoint-dir"
    )
    return CheckpointFiles(checkpoint_dir, filesystem, root)


def as_checkpoint(checkpoint: str | Path | CheckpointFiles) -> CheckpointFiles:
    """``checkpoint`` itself, or the checkpoint at that path or URI."""
    if isinstance(checkpoint, CheckpointFiles):
        return checkpoint
    return open_checkpoint(str(checkpoint))


def filesystem_options(
    checkpoint_dir: str, config: StreamsConfig | None
) -> Mapping[str, Any] | None:
    """The ``pyarrow.fs`` options to open the checkpoint with: the snapshots' when they are on
    the same kind of filesystem (None: none)."""
    if config is None or not config.state_snapshot_filesystem_options:
        return None
    snapshots = config.state_snapshot_location or checkpoint_dir
    if _scheme(snapshots) != _scheme(checkpoint_dir):
        return None  # options for another kind of filesystem
    return config.state_snapshot_filesystem_options


def _scheme(uri: str) -> str:
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return "s3" if scheme in ("s3a", "s3n") else scheme


class CheckpointFiles:
    """The few files the runner reads and writes in a Spark checkpoint, on its ``pyarrow.fs``
    filesystem (local, ``s3://``, ``gs://``, ``hdfs://``)."""

    def __init__(self, name: str, filesystem: Any, root: str) -> None:
        self.name = name
        self.fs = filesystem
        self.root = root.rstrip("/")

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def exists(self, relative: str) -> bool:
        import pyarrow.fs as pafs

        return bool(self.fs.get_file_info(self._path(relative)).type != pafs.FileType.NotFound)

    def read_text(self, relative: str) -> str | None:
        """The file's text, or None if there is no such file."""
        import pyarrow.fs as pafs

        if self.fs.get_file_info(self._path(relative)).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(self._path(relative)) as stream:
            return str(stream.read().decode("utf-8"))

    def write_text(self, relative: str, text: str) -> None:
        self.fs.create_dir(self.root, recursive=True)
        with self.fs.open_output_stream(self._path(relative)) as stream:
            stream.write(text.encode("utf-8"))

    def batches(self, relative: str) -> list[int]:
        """The numbered files of a directory of Spark's checkpoint, in order."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self._path(relative), allow_not_found=True)
        return sorted(
            int(info.base_name)
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and info.base_name.isdigit()
        )
