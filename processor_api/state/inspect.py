"""Reading a finished run's local stores (for demos, tests and operators)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from processor_api.serde import Serde
from processor_api.state.manager import TASK_DIR_PATTERN
from processor_api.state.rocksdb import RocksDBBytesStore


def read_local_store(
    state_dir: str | os.PathLike[str],
    application_id: str,
    store_name: str,
    key_serde: Serde,
    value_serde: Serde,
) -> dict[Any, Any]:
    """All entries of a persistent store over every task directory, deserialized.

    Only for stores no running task holds open (RocksDB allows one process at a time).
    """
    entries: dict[Any, Any] = {}
    root = Path(state_dir) / application_id
    if not root.exists():
        return entries
    for task_dir in sorted(p for p in root.iterdir() if TASK_DIR_PATTERN.fullmatch(p.name)):
        path = task_dir / "rocksdb" / store_name
        if not path.exists():
            continue
        store = RocksDBBytesStore(store_name, path)
        try:
            for key, value in store.range(None, None):
                entries[key_serde.deserialize(key)] = value_serde.deserialize(value)
        finally:
            store.close()
    return entries
