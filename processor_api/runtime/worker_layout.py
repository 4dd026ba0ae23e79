"""Which worker runs which task *now*: the run's layout, changed while the run goes on.

A run starts with the driver's assignment (``spark/assignment.py``, in the job spec). When an
executor is lost, its workers' tasks move to the workers still running (their hosts take them
into the epoch they run), and when executors come back the tasks are spread over every worker
again from the epoch after the next (``spark/failover.py``). Each change is a *generation* of the
layout, written by the driver to :data:`LAYOUT_FILE` in the run's Spark checkpoint (a shared
directory on a cluster: the executors read it):

* a generation applies to the epochs from ``from_epoch`` on; an epoch takes the newest
  generation that applies to it (a loss applies at once, ``from_epoch`` 0; a spread applies
  from an epoch no call has begun yet, so that two workers never hold a task in one epoch);
* the file names its run: a file left by another run is not this run's layout.

Readers are the epoch call (which tasks to hand its worker's host; a worker without tasks ends
its epoch at once and frees its slot) and the host, which reads it again after its producer's
``init_transactions`` (see :meth:`WorkerLayout.tasks_of`'s use in ``worker_host.py``): a host
that starts after the driver fenced its worker sees the generation that took its tasks away.
A local file is read with plain file I/O (a worker host does not import ``pyarrow``); another
location through ``pyarrow.fs`` (``state/snapshot_files.open_location``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

#: The layout file in the run's Spark checkpoint.
LAYOUT_FILE = "processor_api_layout.json"


@dataclass(frozen=True)
class LayoutGeneration:
    """One assignment of the run's tasks to its workers, for the epochs from ``from_epoch``."""

    generation: int
    from_epoch: int
    workers: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class WorkerLayout:
    """Every generation of a run's layout, oldest first."""

    run_id: str
    generations: tuple[LayoutGeneration, ...]

    @property
    def newest(self) -> LayoutGeneration:
        """The last generation written."""
        return self.generations[-1]

    def for_epoch(self, epoch: int) -> LayoutGeneration | None:
        """The newest generation that applies to ``epoch`` (None: none does yet)."""
        applying = [g for g in self.generations if g.from_epoch <= epoch]
        return max(applying, key=lambda g: g.generation) if applying else None

    def tasks_of(self, worker: str, epoch: int) -> tuple[str, ...] | None:
        """The tasks ``worker`` holds in ``epoch`` (None: the layout says nothing of it yet)."""
        generation = self.for_epoch(epoch)
        return None if generation is None else generation.workers.get(worker, ())

    def with_generation(
        self, from_epoch: int, workers: Mapping[str, tuple[str, ...]]
    ) -> WorkerLayout:
        """This layout and a next generation."""
        number = self.newest.generation + 1 if self.generations else 0
        added = LayoutGeneration(number, from_epoch, {w: tuple(t) for w, t in workers.items()})
        return WorkerLayout(self.run_id, (*self.generations, added))

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "run_id": self.run_id,
                    "generations": [
                        {
                            "generation": g.generation,
                            "from_epoch": g.from_epoch,
                            "workers": {w: list(t) for w, t in g.workers.items()},
                        }
                        for g in self.generations
                    ],
                },
                indent=1,
            )
            + "\n"
        )

    @classmethod
    def from_json(cls, text: str) -> WorkerLayout:
        data = json.loads(text)
        return cls(
            run_id=str(data["run_id"]),
            generations=tuple(
                LayoutGeneration(
                    int(g["generation"]),
                    int(g["from_epoch"]),
                    {w: tuple(t) for w, t in g["workers"].items()},
                )
                for g in data["generations"]
            ),
        )


@dataclass(frozen=True)
class LayoutLocation:
    """Where a run's layout file is: its checkpoint directory (a path or a ``pyarrow.fs``
    URI) and that filesystem's options."""

    directory: str
    options: Mapping[str, Any] | None = None

    @property
    def _local_path(self) -> Path | None:
        parsed = urlparse(self.directory)
        scheme = parsed.scheme.lower()
        if scheme == "file":
            return Path(parsed.path) / LAYOUT_FILE
        if scheme == "" or len(scheme) == 1:
            return Path(self.directory) / LAYOUT_FILE
        return None

    def read(self, run_id: str) -> WorkerLayout | None:
        """Run ``run_id``'s layout; None when the file is missing or another run's."""
        text = self._read_text()
        if text is None:
            return None
        layout = WorkerLayout.from_json(text)
        return layout if layout.run_id == run_id else None

    def write(self, layout: WorkerLayout) -> None:
        """Replace the file with ``layout`` (readers see the old file or the new, whole)."""
        text = layout.to_json()
        local = self._local_path
        if local is not None:
            local.parent.mkdir(parents=True, exist_ok=True)
            temporary = local.with_name(f".{LAYOUT_FILE}.{uuid.uuid4().hex}")
            temporary.write_text(text)
            os.replace(temporary, local)
            return
        filesystem, root = self._remote()
        # an object store's put is whole; a remote filesystem's move is atomic
        staged = f"{root}/.{LAYOUT_FILE}.{uuid.uuid4().hex}"
        with filesystem.open_output_stream(staged) as stream:
            stream.write(text.encode("utf-8"))
        filesystem.move(staged, f"{root}/{LAYOUT_FILE}")

    def _read_text(self) -> str | None:
        local = self._local_path
        if local is not None:
            try:
                return local.read_text()
            except FileNotFoundError:
                return None
        import pyarrow.fs as pafs

        filesystem, root = self._remote()
        path = f"{root}/{LAYOUT_FILE}"
        if filesystem.get_file_info(path).type != pafs.FileType.File:
            return None
        with filesystem.open_input_stream(path) as stream:
            return str(stream.read().decode("utf-8"))

    def _remote(self) -> tuple[Any, str]:
        from processor_api.state.snapshot_files import open_location

        filesystem, root = open_location(self.directory, self.options, setting="--checkpoint-dir")
        return filesystem, str(root).rstrip("/")
