"""Local state damaged the ways issue 21 lists, for the corrupt-state tests.

Each corruption takes a task directory whose store ``STORE`` was committed and closed, and
damages it as a crash, a full disk, a copy or an upgrade might: the returned path is the file
the runtime's warning must name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from processor_api.kafka.names import changelog_topic
from processor_api.serdes import Serdes
from processor_api.state import Stores
from processor_api.state.builder import StoreBuilder
from processor_api.state.manager import IDENTITY_FILE, TaskStores

STORE = "counts"


def counts_builder() -> StoreBuilder:
    """A persistent string -> long key-value store named ``STORE``."""
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store(STORE), Serdes.string(), Serdes.long()
    )


def task_stores(directory: Path, app: str, builder: StoreBuilder | None = None) -> TaskStores:
    """The stores of task ``0_0`` (partition 0) of ``app`` in ``directory``, built."""
    builder = builder or counts_builder()
    stores = TaskStores(
        application_id=app,
        task_id="0_0",
        partition=0,
        directory=directory,
        builders={builder.name: builder},
        changelog_topics={builder.name: changelog_topic(app, builder.name)},
        timestamp_fn=lambda: 0,
    )
    stores.build(builder, lambda: 0)
    return stores


def _store_dir(task_dir: Path) -> Path:
    return task_dir / "rocksdb" / STORE


def truncated_sst(task_dir: Path) -> Path:
    """The store's first SST file cut to half its size (a crash or a full disk mid-write)."""
    sst = sorted(_store_dir(task_dir).glob("*.sst"))[0]
    sst.write_bytes(sst.read_bytes()[: sst.stat().st_size // 2])
    return sst


def garbage_checkpoint(task_dir: Path) -> Path:
    """The task's ``.checkpoint`` overwritten with bytes that are not a checkpoint."""
    checkpoint = task_dir / ".checkpoint"
    checkpoint.write_bytes(b"\x00\x17garbage\nnot a checkpoint\n")
    return checkpoint


def other_application(task_dir: Path) -> Path:
    """The store directory now says it belongs to another application (a copied dir)."""
    identity = _store_dir(task_dir) / IDENTITY_FILE
    data = json.loads(identity.read_text())
    data["application_id"] = "another-application"
    identity.write_text(json.dumps(data))
    return identity


def no_identity(task_dir: Path) -> Path:
    """The store directory has no identity file (not made by this runtime for this task)."""
    identity = _store_dir(task_dir) / IDENTITY_FILE
    identity.unlink()
    return identity


CORRUPTIONS: dict[str, Callable[[Path], Path]] = {
    "truncated_sst": truncated_sst,
    "garbage_checkpoint": garbage_checkpoint,
    "other_application": other_application,
    "no_identity": no_identity,
}
