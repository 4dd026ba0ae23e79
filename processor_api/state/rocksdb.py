"""RocksDB byte store on local disk, through rocksdict in raw (bytes) mode."""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import cast

import rocksdict

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.state.base import BytesStore

_log = get_logger(__name__)

_WRITE_BUFFER_BYTES = 32 * 1024 * 1024
_MAX_WRITE_BUFFERS = 3
#: The default block cache of a process (a worker: every store of its tasks).
BLOCK_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RocksDBMemory:
    """The RocksDB memory of one process (a worker host: all its tasks' stores), as Kafka
    Streams' bounded-memory ``rocksdb.config.setter`` recipe sets it: one LRU block cache
    shared by every store, and optionally one write-buffer budget for every store's memtables,
    charged to that cache (so the cache bounds both)."""

    block_cache_bytes: int = BLOCK_CACHE_BYTES
    #: The memtables' budget (``WriteBufferManager``); None: each store's own limit only.
    write_buffer_bytes: int | None = None


_memory = RocksDBMemory()
_shared_block_cache: rocksdict.Cache | None = None
_write_buffer_manager: rocksdict.WriteBufferManager | None = None


def configure_memory(memory: RocksDBMemory) -> None:
    """Set this process's RocksDB memory before its first store opens (a worker host does it
    from the run's settings); stores opened later share what it makes."""
    global _memory, _shared_block_cache, _write_buffer_manager
    if memory == _memory:
        return
    if _shared_block_cache is not None:
        _log.warning(
            "rocksdb_memory_not_changed",
            detail="stores of this process are open already: the first settings stay",
        )
        return
    _memory = memory


def _block_cache() -> rocksdict.Cache:
    """One LRU block cache shared by every store of the process (bounded total memory)."""
    global _shared_block_cache
    if _shared_block_cache is None:
        _shared_block_cache = rocksdict.Cache(_memory.block_cache_bytes)
    return _shared_block_cache


def _buffer_manager() -> rocksdict.WriteBufferManager | None:
    """The process's memtable budget, charged to its block cache (None: not set)."""
    global _write_buffer_manager
    if _memory.write_buffer_bytes is None:
        return None
    if _write_buffer_manager is None:
        _write_buffer_manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            _memory.write_buffer_bytes, False, _block_cache()
        )
    return _write_buffer_manager


def _options() -> rocksdict.Options:
    """Options close to Kafka Streams' RocksDB defaults, in raw bytes mode."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(_WRITE_BUFFER_BYTES)
    opts.set_max_write_buffer_number(_MAX_WRITE_BUFFERS)
    opts.increase_parallelism(max(os.cpu_count() or 2, 2))
    opts.set_max_background_jobs(max(os.cpu_count() or 2, 2))
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_keep_log_file_num(2)
    opts.set_max_log_file_size(1024 * 1024)
    opts.set_use_fsync(False)
    table = rocksdict.BlockBasedOptions()
    table.set_block_size(4096)
    table.set_block_cache(_block_cache())
    table.set_bloom_filter(10, False)
    # Index and filter blocks stay with the table readers, as in Kafka Streams' defaults. In
    # the shared 64 MB cache a compacted 1M-key store read 95 us a point read instead of 2.3 us
    # (bench/rocksdb_point_reads.py); a 512 MB cache was fast again, which fits a large file's
    # filter block (~1.2 MB) not fitting one cache shard.
    table.set_cache_index_and_filter_blocks(False)
    opts.set_block_based_table_factory(table)
    manager = _buffer_manager()
    if manager is not None:
        opts.set_write_buffer_manager(manager)
    return opts


class RocksDBBytesStore(BytesStore):
    """A persistent byte store backed by RocksDB at ``path`` (created if missing).

    Writes go through the write-ahead log without an fsync per write, or skip it with
    ``disable_wal=True`` (what ``Stores.persistent_key_value_store`` does: the changelog is the
    durable copy); either way ``flush()`` flushes the memtables to SST files and ``close()``
    flushes and closes. Bulk writes (``put_all``) are one atomic ``WriteBatch``.

    Range iterators are native RocksDB iterators: each reads the consistent snapshot taken
    when it was made, so writing while iterating is safe and never extends the iteration.
    A native iterator keeps the DB (and its ``LOCK`` file) alive, so the store tracks its open
    iterators and ``close()`` releases them: the DB is really closed afterwards and another
    process can open it at once.
    """

    def __init__(self, name: str, path: str | os.PathLike[str], *, disable_wal: bool = False):
        self.name = name
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db: rocksdict.Rdict | None = rocksdict.Rdict(str(self.path), _options())
        except Exception as exc:
            raise StoreError(f"cannot open RocksDB store {name!r} at {self.path}: {exc}") from exc
        # Open iterators pin the DB (and its LOCK file); close() releases them.
        self._iterators: weakref.WeakSet[_RangeIterator] = weakref.WeakSet()
        if disable_wal:
            write_opts = rocksdict.WriteOptions()
            # rocksdict's stubs type this property as a method
            write_opts.disable_wal = True  # type: ignore[method-assign,assignment]
            self._db.set_write_options(write_opts)
        _log.debug("store_opened", store=name, kind="rocksdb", path=str(self.path))

    @property
    def persistent(self) -> bool:
        """Always ``True``."""
        return True

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return self._db is not None

    def _handle(self) -> rocksdict.Rdict:
        db = self._db
        if db is None:
            raise StoreError(f"state store {self.name!r} is closed")
        return db

    def get(self, key: bytes) -> bytes | None:
        """Return the value under ``key`` or ``None``."""
        return self._handle().get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        """Store ``value`` under ``key``; ``None`` deletes."""
        db = self._handle()
        if value is None:
            db.delete(key)
        else:
            db.put(key, value)

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write all entries in one atomic ``WriteBatch``; ``None`` values delete."""
        db = self._handle()
        batch = rocksdict.WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        for key, value in entries:
            if value is None:
                delete(key)
            else:
                put(key, value)
        if batch.len():
            db.write(batch)

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key`` and return its old value, or ``None``."""
        db = self._handle()
        old = db.get(key)
        if old is not None:
            db.delete(key)
        return old

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Delete every key with ``lo <= key < hi`` with one RocksDB ``DeleteRange``."""
        if lo < hi:
            self._handle().delete_range(lo, hi)

    def range(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Iterate entries with ``lo <= key <= hi`` (``None`` = open) in key order.

        The iterator reads a consistent snapshot of the DB taken now (writes made while
        iterating are not seen), like Kafka Streams' RocksDB store iterators.
        """
        db = self._handle()
        if lo is not None and hi is not None and lo > hi:
            return iter(())
        start, end = (hi, lo) if reverse else (lo, hi)
        native = db.items(backwards=reverse, from_key=start)
        iterator = _RangeIterator(self, cast(Iterator[tuple[bytes, bytes]], native), end, reverse)
        self._iterators.add(iterator)
        return iterator

    def approximate_num_entries(self) -> int:
        """RocksDB's ``rocksdb.estimate-num-keys`` (may be off after deletes/overwrites)."""
        value = self._handle().property_int_value("rocksdb.estimate-num-keys")
        return max(int(value or 0), 0)

    def approximate_bytes(self) -> int:
        """Bytes the store holds: its live SST files plus its memtables (RocksDB properties
        ``rocksdb.live-sst-files-size`` and ``rocksdb.cur-size-all-mem-tables``)."""
        db = self._handle()
        return sum(
            max(int(db.property_int_value(name) or 0), 0)
            for name in ("rocksdb.live-sst-files-size", "rocksdb.cur-size-all-mem-tables")
        )

    def flush(self) -> None:
        """Flush the memtables to SST files and wait for it."""
        self._handle().flush(True)

    def create_checkpoint(self, path: Path) -> None:
        """A RocksDB checkpoint at the new directory ``path``: the memtables are flushed, then
        the SST files hard-linked (copied across disks) with the small files beside them."""
        try:
            rocksdict.Checkpoint(self._handle()).create_checkpoint(str(path))
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(
                f"cannot checkpoint RocksDB store {self.name!r} to {path}: {exc}"
            ) from exc

    def close(self) -> None:
        """Flush, close the DB and release its LOCK file. Idempotent."""
        db = self._db
        if db is None:
            return
        self._db = None
        for iterator in list(self._iterators):
            iterator.release()
        self._iterators.clear()
        try:
            db.close()
        finally:
            del db
        _log.debug("store_closed", store=self.name, kind="rocksdb", path=str(self.path))

    @staticmethod
    def destroy(path: str | os.PathLike[str]) -> None:
        """Delete the store directory at ``path`` (the store must be closed). No-op if absent."""
        target = Path(path)
        if not target.exists():
            return
        rocksdict.Rdict.destroy(str(target), rocksdict.Options(raw_mode=True))
        shutil.rmtree(target, ignore_errors=True)


class _RangeIterator(Iterator[tuple[bytes, bytes]]):
    """A bounded scan over a native ``RdictItems`` iterator, releasable by the store."""

    __slots__ = ("_store", "_native", "_end", "_reverse", "__weakref__")

    def __init__(
        self,
        store: RocksDBBytesStore,
        native: Iterator[tuple[bytes, bytes]],
        end: bytes | None,
        reverse: bool,
    ) -> None:
        self._store = store
        self._native: Iterator[tuple[bytes, bytes]] | None = native
        self._end = end
        self._reverse = reverse

    def __iter__(self) -> _RangeIterator:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        native = self._native
        if native is None:
            if self._store._db is None:
                self._store._handle()  # raises StoreError: closed
            raise StopIteration
        entry = next(native, None)
        end = self._end
        if (
            entry is None
            or end is not None
            and (entry[0] < end if self._reverse else entry[0] > end)
        ):
            self._native = None  # exhausted: drop the native iterator at once
            raise StopIteration
        return entry

    def next_chunk(self, size: int) -> list[tuple[bytes, bytes]]:
        """Up to ``size`` next entries at once (fewer only at the end; ``[]`` when done)."""
        native = self._native
        if native is None:
            if self._store._db is None:
                self._store._handle()  # raises StoreError: closed
            return []
        chunk = list(islice(native, size))
        if len(chunk) < size:
            self._native = None
        end = self._end
        if end is not None and chunk:
            reverse = self._reverse
            last = chunk[-1][0]
            if last < end if reverse else last > end:
                self._native = None
                chunk = [e for e in chunk if not (e[0] < end if reverse else e[0] > end)]
        return chunk

    def release(self) -> None:
        """Drop the native iterator (it pins the DB); later ``next`` calls raise or stop."""
        self._native = None

    close = release
