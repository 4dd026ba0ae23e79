"""State stores: typed stores over in-memory or RocksDB byte stores.

Layering, outermost first: the typed store (:class:`KeyValueStore`, :class:`WindowStore`,
:class:`SessionStore`, :class:`TimestampedKeyValueStore`; serdes) -> :class:`CachingBytesStore`
(if caching) -> :class:`ChangeLoggingBytesStore` (if logging) -> in-memory or RocksDB store
(segmented for window and session stores). :class:`VersionedKeyValueStore` keeps its versions
in an ordinary byte store and logs them itself.
"""

from processor_api.state.base import BytesStore, KeyValue
from processor_api.state.builder import (
    KeyValueBytesStoreSupplier,
    StoreBuilder,
    StoreStack,
)
from processor_api.state.caching import CachingBytesStore
from processor_api.state.changelogging import ChangeLoggingBytesStore, ChangeRecord
from processor_api.state.checkpoint import delete_checkpoint, read_checkpoint, write_checkpoint
from processor_api.state.in_memory import InMemoryBytesStore
from processor_api.state.iterators import StoreIterator, WindowStoreIterator
from processor_api.state.key_value import KeyValueIterator, KeyValueStore
from processor_api.state.kind_builders import (
    SessionBytesStoreSupplier,
    SessionStoreBuilder,
    TimestampedKeyValueStoreBuilder,
    TimestampedWindowStoreBuilder,
    VersionedBytesStoreSupplier,
    VersionedKeyValueStoreBuilder,
    WindowBytesStoreSupplier,
    WindowStoreBuilder,
)
from processor_api.state.rocksdb import RocksDBBytesStore
from processor_api.state.segments import SegmentedBytesStore
from processor_api.state.session import SessionStore
from processor_api.state.stores import Stores
from processor_api.state.timestamped import TimestampedKeyValueStore, TimestampedWindowStore
from processor_api.state.versioned import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    VersionedKeyValueStore,
)
from processor_api.state.window import WindowStore
from processor_api.state.windowed_types import (
    SessionWindow,
    TimeWindow,
    ValueAndTimestamp,
    VersionedRecord,
    Windowed,
)

__all__ = [
    "PUT_RETURN_CODE_NOT_PUT",
    "PUT_RETURN_CODE_VALID_TO_UNDEFINED",
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
    "SegmentedBytesStore",
    "SessionBytesStoreSupplier",
    "SessionStore",
    "SessionStoreBuilder",
    "SessionWindow",
    "StoreBuilder",
    "StoreIterator",
    "StoreStack",
    "Stores",
    "TimeWindow",
    "TimestampedKeyValueStore",
    "TimestampedKeyValueStoreBuilder",
    "TimestampedWindowStore",
    "TimestampedWindowStoreBuilder",
    "ValueAndTimestamp",
    "VersionedBytesStoreSupplier",
    "VersionedKeyValueStore",
    "VersionedKeyValueStoreBuilder",
    "VersionedRecord",
    "WindowBytesStoreSupplier",
    "WindowStore",
    "WindowStoreBuilder",
    "WindowStoreIterator",
    "Windowed",
    "delete_checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]
