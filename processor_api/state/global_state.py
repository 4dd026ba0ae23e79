"""The local copy of a runtime's global stores: directory, checkpoint, wipe.

Layout: ``<directory>/.checkpoint`` (Kafka Streams' ``OffsetCheckpoint`` format: global topic,
partition, next offset to read) and ``<directory>/rocksdb/<store>`` for persistent global
stores. On Spark the directory is ``<task dir>/global`` (each worker host keeps its own copy;
see ARCHITECTURE.md), in the test driver a temporary one.

The checkpoint covers what the persistent stores hold durably (RocksDB runs without a
write-ahead log): an update deletes it before the first write (:meth:`begin_update`) and
writes it again once the stores are flushed (:meth:`checkpoint`). A persistent store whose
files exist but whose topic the checkpoint does not cover (an update died half-way, or the
checkpoint was lost) is wiped when opened, then filled from the beginning of its topic.
In-memory global stores start empty, from offset 0, every time they are opened.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from processor_api.logging import get_logger
from processor_api.state.builder import StoreBuilder, StoreStack
from processor_api.state.checkpoint import delete_checkpoint, read_checkpoint, write_checkpoint

_log = get_logger("processor_api.global_state")

Position = tuple[str, int]


class GlobalStateDirectory:
    """Opens the global stores under ``directory`` and keeps their checkpoint.

    ``topics`` maps each global store to its topic.
    """

    def __init__(
        self,
        directory: Path,
        builders: Mapping[str, StoreBuilder],
        topics: Mapping[str, str],
    ) -> None:
        self.directory = Path(directory)
        self.checkpoint_path = self.directory / ".checkpoint"
        self._builders = dict(builders)
        self._topics = dict(topics)
        self._persistent_topics = {
            topics[name] for name, builder in builders.items() if builder.persistent
        }
        self._checkpoint = read_checkpoint(self.checkpoint_path)
        unknown = sorted({t for t, _ in self._checkpoint} - set(self._topics.values()))
        if unknown:
            _log.info(
                "global_checkpoint_unknown_topics",
                topics=unknown,
                checkpoint=str(self.checkpoint_path),
                detail="no global store reads these topics any more; their entries are dropped",
            )
        self._checkpointed = True

    def build(self, builder: StoreBuilder, timestamp_fn: Callable[[], int]) -> StoreStack:
        """Store factory for :class:`~processor_api.engine.global_task.GlobalTask`."""
        name = builder.name
        files = self.directory / "rocksdb" / name
        topic = self._topics[name]
        if builder.persistent and files.exists() and not self._covers(topic):
            _log.info(
                "global_store_wipe",
                store=name,
                topic=topic,
                reason="its local files are not covered by the checkpoint",
            )
            shutil.rmtree(files, ignore_errors=True)
        return builder.build(state_dir=self.directory, timestamp_fn=timestamp_fn)

    def _covers(self, topic: str) -> bool:
        return any(t == topic for t, _ in self._checkpoint)

    def positions(self) -> dict[Position, int]:
        """Where to resume reading: the checkpointed offsets of the persistent stores' topics
        (in-memory stores and uncovered topics start at 0, so they are absent)."""
        return {
            key: offset
            for key, offset in self._checkpoint.items()
            if key[0] in self._persistent_topics
        }

    def begin_update(self) -> None:
        """Before writing to the stores: the checkpoint no longer covers them."""
        if self._checkpointed:
            delete_checkpoint(self.checkpoint_path)
            self._checkpointed = False

    def checkpoint(self, positions: Mapping[Position, int]) -> None:
        """After the stores are flushed: record the positions they hold (persistent only)."""
        offsets = {key: o for key, o in positions.items() if key[0] in self._persistent_topics}
        self.directory.mkdir(parents=True, exist_ok=True)
        write_checkpoint(self.checkpoint_path, offsets)
        self._checkpoint = dict(offsets)
        self._checkpointed = True
