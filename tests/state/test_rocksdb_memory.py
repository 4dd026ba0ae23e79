"""A worker's RocksDB memory by budget: one block cache and one memtable budget for all the
stores of the process (``state/rocksdb.configure_memory``), set from the run's settings.

Each check runs in a child process: the budget is the process's, set once before its first
store opens, as in a worker host."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from processor_api.config import StreamsConfig
from processor_api.errors import ConfigError


def _run(code: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_store_of_the_process_charges_one_memtable_budget_to_one_cache(tmp_path) -> None:
    out = _run(
        """
        import sys
        from processor_api.state import rocksdb
        rocksdb.configure_memory(rocksdb.RocksDBMemory(8 << 20, write_buffer_bytes=4 << 20))
        stores = [rocksdb.RocksDBBytesStore(f"s{i}", f"{sys.argv[1]}/s{i}") for i in range(3)]
        before = rocksdb._block_cache().get_usage()
        for store in stores:
            store.put_all([(b"k%06d" % i, b"v" * 200) for i in range(5000)])
        manager = rocksdb._buffer_manager()
        print(manager.get_buffer_size(), manager.get_usage() > 0,
              rocksdb._block_cache().get_usage() > before)
        for store in stores:
            store.close()
        """,
        tmp_path,
    )
    assert out == f"{4 << 20} True True"


def test_without_a_budget_stores_have_no_write_buffer_manager(tmp_path) -> None:
    out = _run(
        """
        import sys
        from processor_api.state import rocksdb
        store = rocksdb.RocksDBBytesStore("s", f"{sys.argv[1]}/s")
        print(rocksdb._buffer_manager())
        store.close()
        """,
        tmp_path,
    )
    assert out == "None"


def test_the_budget_settings_are_read_and_checked() -> None:
    config = StreamsConfig.from_dict(
        {"rocksdb.block.cache.bytes": "1048576", "rocksdb.write.buffer.manager.bytes": 524288}
    )
    assert (config.rocksdb_block_cache_bytes, config.rocksdb_write_buffer_manager_bytes) == (
        1 << 20,
        1 << 19,
    )
    with pytest.raises(ConfigError, match="rocksdb_write_buffer_manager_bytes must be at least 1"):
        StreamsConfig.from_dict({"rocksdb.write.buffer.manager.bytes": "0"})
    with pytest.raises(ConfigError, match="num_stream_threads must be at least 1, got 0"):
        StreamsConfig.from_dict({"num.stream.threads": "0"})
