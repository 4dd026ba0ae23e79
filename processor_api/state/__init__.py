"""State stores: typed key-value stores over in-memory or RocksDB byte stores.

Layering, outermost first: :class:`KeyValueStore` (typed, serdes) -> :class:`CachingBytesStore`
(if caching) -> :class:`ChangeLoggingBytesStore` (if logging) -> in-memory or RocksDB store.
"""

from processor_api.state.base import BytesStore, KeyValue
from processor_api.state.builder import (
    KeyValueBytesStoreSupplier,
    StoreBuilder,
    Stores,
    StoreStack,
)
from processor_api.state.caching import CachingBytesStore
from processor_api.state.changelogging import ChangeLoggingBytesStore, ChangeRecord
from processor_api.state.checkpoint import delete_checkpoint, read_checkpoint, write_checkpoint
from processor_api.state.in_memory import InMemoryBytesStore
from processor_api.state.key_value import KeyValueIterator, KeyValueStore
from processor_api.state.rocksdb import RocksDBBytesStore

__all__ = [
    "BytesStore",
    "CachingBytesStore",
    "ChangeLoggingBytesStore",
    "ChangeRecord",
    "InMemoryBytesStore",
    "KeyValue",
    "KeyValueBytesStoreSupplier",
    "KeyValueIterator",
    "KeyValueStore",
    "RocksDBBytesStore",
    "StoreBuilder",
    "StoreStack",
    "Stores",
    "delete_checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]
