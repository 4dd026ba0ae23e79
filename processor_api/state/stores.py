"""``Stores``: the factory of store suppliers and builders, as in Kafka Streams."""

from __future__ import annotations

from datetime import timedelta

from processor_api.errors import StoreError
from processor_api.serde import Serde
from processor_api.state.builder import (
    KeyValueBytesStoreSupplier,
    StoreBuilder,
    _in_memory_factory,
    _rocksdb_factory,
)
from processor_api.state.kind_builders import (
    SessionBytesStoreSupplier,
    SessionStoreBuilder,
    TimestampedKeyValueBytesStoreSupplier,
    TimestampedKeyValueStoreBuilder,
    TimestampedWindowStoreBuilder,
    VersionedBytesStoreSupplier,
    VersionedKeyValueStoreBuilder,
    WindowBytesStoreSupplier,
    WindowStoreBuilder,
)

Duration = int | timedelta
"""A duration: int milliseconds or a ``timedelta``."""


class Stores:
    """Factory of store suppliers and builders (Kafka Streams' ``Stores``).

    Persistent stores live in RocksDB at ``<task dir>/rocksdb/<name>``; in-memory ones are
    rebuilt from their change log after a restart.
    """

    # ------------------------------------------------------------------ key-value

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A RocksDB store on local disk, at ``<task dir>/rocksdb/<name>``."""
        return KeyValueBytesStoreSupplier(name, True, _rocksdb_factory)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """An in-memory store (rebuilt from its change log after a restart)."""
        return KeyValueBytesStoreSupplier(name, False, _in_memory_factory)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Serde, value_serde: Serde
    ) -> StoreBuilder:
        """A builder for a typed key-value store over ``supplier``'s byte store."""
        kind = getattr(supplier, "kind", None)
        if kind not in ("key-value", "timestamped-key-value"):
            raise StoreError(
                f"key_value_store_builder needs a key-value store supplier, got {supplier!r}"
            )
        return StoreBuilder(supplier, key_serde, value_serde)

    # ------------------------------------------------------------------ timestamped key-value

    @staticmethod
    def persistent_timestamped_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A RocksDB store whose values carry a timestamp."""
        return TimestampedKeyValueBytesStoreSupplier(name, True)

    @staticmethod
    def in_memory_timestamped_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """An in-memory store whose values carry a timestamp."""
        return TimestampedKeyValueBytesStoreSupplier(name, False)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Serde, value_serde: Serde
    ) -> TimestampedKeyValueStoreBuilder:
        """A builder for a ``TimestampedKeyValueStore`` (``value_serde``: the plain values)."""
        return TimestampedKeyValueStoreBuilder(supplier, key_serde, value_serde)

    # ------------------------------------------------------------------ window

    @staticmethod
    def persistent_window_store(
        name: str,
        retention_period: Duration,
        window_size: Duration,
        retain_duplicates: bool = False,
    ) -> WindowBytesStoreSupplier:
        """A segmented RocksDB window store keeping windows for ``retention_period``."""
        return WindowBytesStoreSupplier(
            name, True, retention_period, window_size, retain_duplicates
        )

    @staticmethod
    def in_memory_window_store(
        name: str,
        retention_period: Duration,
        window_size: Duration,
        retain_duplicates: bool = False,
    ) -> WindowBytesStoreSupplier:
        """An in-memory window store keeping windows for ``retention_period``."""
        return WindowBytesStoreSupplier(
            name, False, retention_period, window_size, retain_duplicates
        )

    @staticmethod
    def window_store_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Serde, value_serde: Serde
    ) -> WindowStoreBuilder:
        """A builder for a ``WindowStore``."""
        return WindowStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def timestamped_window_store_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Serde, value_serde: Serde
    ) -> TimestampedWindowStoreBuilder:
        """A builder for a ``TimestampedWindowStore`` (values are ``ValueAndTimestamp``)."""
        return TimestampedWindowStoreBuilder(supplier, key_serde, value_serde)

    # ------------------------------------------------------------------ session

    @staticmethod
    def persistent_session_store(
        name: str, retention_period: Duration
    ) -> SessionBytesStoreSupplier:
        """A segmented RocksDB session store keeping sessions for ``retention_period``."""
        return SessionBytesStoreSupplier(name, True, retention_period)

    @staticmethod
    def in_memory_session_store(name: str, retention_period: Duration) -> SessionBytesStoreSupplier:
        """An in-memory session store keeping sessions for ``retention_period``."""
        return SessionBytesStoreSupplier(name, False, retention_period)

    @staticmethod
    def session_store_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Serde, value_serde: Serde
    ) -> SessionStoreBuilder:
        """A builder for a ``SessionStore``."""
        return SessionStoreBuilder(supplier, key_serde, value_serde)

    # ------------------------------------------------------------------ versioned

    @staticmethod
    def persistent_versioned_key_value_store(
        name: str, history_retention: Duration
    ) -> VersionedBytesStoreSupplier:
        """A RocksDB versioned store answering queries up to ``history_retention`` back."""
        return VersionedBytesStoreSupplier(name, True, history_retention)

    @staticmethod
    def in_memory_versioned_key_value_store(
        name: str, history_retention: Duration
    ) -> VersionedBytesStoreSupplier:
        """An in-memory versioned store (not in Kafka Streams; same behaviour as RocksDB's)."""
        return VersionedBytesStoreSupplier(name, False, history_retention)

    @staticmethod
    def versioned_key_value_store_builder(
        supplier: VersionedBytesStoreSupplier, key_serde: Serde, value_serde: Serde
    ) -> VersionedKeyValueStoreBuilder:
        """A builder for a ``VersionedKeyValueStore``."""
        return VersionedKeyValueStoreBuilder(supplier, key_serde, value_serde)
