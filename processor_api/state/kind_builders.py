"""Suppliers and builders of the window, session, timestamped and versioned stores."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from processor_api.errors import StoreError
from processor_api.serde import Serde
from processor_api.state.base import BytesStore
from processor_api.state.builder import (
    KeyValueBytesStoreSupplier,
    StoreBuilder,
    StoreStack,
    _in_memory_factory,
    _rocksdb_factory,
)
from processor_api.state.key_schemas import (
    SESSION_SUFFIX,
    WINDOW_SUFFIX,
    session_end_of,
    window_start_of,
)
from processor_api.state.segments import SegmentedBytesStore, segment_interval_for
from processor_api.state.session import SessionStore
from processor_api.state.timestamped import TimestampedKeyValueStore, TimestampedWindowStore
from processor_api.state.versioned import (
    ChangeLoggingVersionedBytesStore,
    VersionedBytesStore,
    VersionedKeyValueStore,
    restore_writer,
)
from processor_api.state.window import WindowStore

# Kafka Streams keeps windowed and versioned changelog records this much longer than the
# store does (``windowstore.changelog.additional.retention.ms``).
CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000


def duration_ms(store: str, what: str, value: int | timedelta) -> int:
    """``value`` (int ms or timedelta) as non-negative int ms, else ``StoreError``."""
    if isinstance(value, timedelta):
        value = int(value.total_seconds() * 1000)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError(
            f"state store {store!r}: {what} must be a non-negative number of ms, got {value!r}"
        )
    return value


def windowed_changelog_defaults(retention_period: int) -> dict[str, str]:
    """Topic settings of a window or session store's changelog (Kafka Streams' defaults)."""
    retention = retention_period + CHANGELOG_ADDITIONAL_RETENTION_MS
    return {"cleanup.policy": "compact,delete", "retention.ms": str(retention)}


def _base_factory(persistent: bool) -> Callable[[str, Path | None], BytesStore]:
    return _rocksdb_factory if persistent else _in_memory_factory


class TimestampedKeyValueBytesStoreSupplier(KeyValueBytesStoreSupplier):
    """Byte store of a timestamped key-value store (an ordinary key-value byte store)."""

    kind = "timestamped-key-value"

    def __init__(self, name: str, persistent: bool) -> None:
        super().__init__(name, persistent, _base_factory(persistent))


class _SegmentedBytesStoreSupplier(KeyValueBytesStoreSupplier):
    """A byte store in time segments (RocksDB or in-memory underneath), dropped by retention."""

    _timestamp_of: Callable[[bytes], int]
    _min_key_size: int

    def __init__(self, name: str, persistent: bool, retention_period: int | timedelta) -> None:
        super().__init__(name, persistent, self._segmented)
        self.retention_period = duration_ms(name, "retention period", retention_period)
        self.segment_interval = segment_interval_for(self.retention_period)
        self._backing = _base_factory(persistent)

    def _segmented(self, name: str, state_dir: Path | None) -> BytesStore:
        return SegmentedBytesStore(
            self._backing(name, state_dir),
            retention_period=self.retention_period,
            segment_interval=self.segment_interval,
            timestamp_of=type(self)._timestamp_of,
            min_key_size=self._min_key_size,
        )


class WindowBytesStoreSupplier(_SegmentedBytesStoreSupplier):
    """Segmented byte store of a window store, segments by window start."""

    kind = "window"
    _timestamp_of = staticmethod(window_start_of)
    _min_key_size = WINDOW_SUFFIX

    def __init__(
        self,
        name: str,
        persistent: bool,
        retention_period: int | timedelta,
        window_size: int | timedelta,
        retain_duplicates: bool,
    ) -> None:
        super().__init__(name, persistent, retention_period)
        self.window_size = duration_ms(name, "window size", window_size)
        if self.window_size > self.retention_period:
            raise StoreError(
                f"state store {name!r}: the retention period ({self.retention_period} ms) must "
                f"be no smaller than the window size ({self.window_size} ms)"
            )
        self.retain_duplicates = bool(retain_duplicates)


class SessionBytesStoreSupplier(_SegmentedBytesStoreSupplier):
    """Segmented byte store of a session store, segments by session end."""

    kind = "session"
    _timestamp_of = staticmethod(session_end_of)
    _min_key_size = SESSION_SUFFIX


class VersionedBytesStoreSupplier(KeyValueBytesStoreSupplier):
    """Byte store holding a versioned store's versions (an ordinary key-value byte store)."""

    kind = "versioned-key-value"

    def __init__(self, name: str, persistent: bool, history_retention: int | timedelta) -> None:
        super().__init__(name, persistent, _base_factory(persistent))
        self.history_retention = duration_ms(name, "history retention", history_retention)


def _require(supplier: Any, kinds: tuple[str, ...], builder: str) -> None:
    if getattr(supplier, "kind", None) not in kinds:
        raise StoreError(
            f"{builder} needs a supplier of kind {' or '.join(kinds)}, got {supplier!r}"
        )


class TimestampedKeyValueStoreBuilder(StoreBuilder):
    """Builds a :class:`TimestampedKeyValueStore` (cached if asked, logged by default)."""

    kind = "timestamped-key-value"

    def __init__(self, supplier: KeyValueBytesStoreSupplier, key_serde: Serde, value_serde: Serde):
        _require(
            supplier, ("key-value", "timestamped-key-value"), "timestamped_key_value_store_builder"
        )
        super().__init__(supplier, key_serde, value_serde)

    def _facade(self, layer: BytesStore) -> TimestampedKeyValueStore:
        return TimestampedKeyValueStore(self.name, layer, self.key_serde, self.value_serde)


class WindowStoreBuilder(StoreBuilder):
    """Builds a :class:`WindowStore` (cached if asked, logged by default)."""

    kind = "window"
    supplier: WindowBytesStoreSupplier
    facade_class: type[WindowStore] = WindowStore

    def __init__(self, supplier: WindowBytesStoreSupplier, key_serde: Serde, value_serde: Serde):
        _require(supplier, ("window",), "window_store_builder")
        super().__init__(supplier, key_serde, value_serde)

    def changelog_topic_defaults(self) -> dict[str, str]:
        """Kafka Streams' windowed changelog: compacted and deleted after retention + 1 day."""
        return windowed_changelog_defaults(self.supplier.retention_period)

    def _facade(self, layer: BytesStore) -> WindowStore:
        s = self.supplier
        return self.facade_class(
            self.name,
            layer,
            self.key_serde,
            self.value_serde,
            window_size=s.window_size,
            retention_period=s.retention_period,
            retain_duplicates=s.retain_duplicates,
        )


class TimestampedWindowStoreBuilder(WindowStoreBuilder):
    """Builds a :class:`TimestampedWindowStore`: values are ``ValueAndTimestamp``."""

    kind = "timestamped-window"
    facade_class = TimestampedWindowStore


class SessionStoreBuilder(StoreBuilder):
    """Builds a :class:`SessionStore` (cached if asked, logged by default)."""

    kind = "session"
    supplier: SessionBytesStoreSupplier

    def __init__(self, supplier: SessionBytesStoreSupplier, key_serde: Serde, value_serde: Serde):
        _require(supplier, ("session",), "session_store_builder")
        super().__init__(supplier, key_serde, value_serde)

    def changelog_topic_defaults(self) -> dict[str, str]:
        """Kafka Streams' windowed changelog: compacted and deleted after retention + 1 day."""
        return windowed_changelog_defaults(self.supplier.retention_period)

    def _facade(self, layer: BytesStore) -> SessionStore:
        return SessionStore(
            self.name,
            layer,
            self.key_serde,
            self.value_serde,
            retention_period=self.supplier.retention_period,
        )


class VersionedKeyValueStoreBuilder(StoreBuilder):
    """Builds a :class:`VersionedKeyValueStore`: logged by default, never cached.

    As in Kafka Streams, versioned stores do not support caching:
    :meth:`with_caching_enabled` raises ``StoreError``.
    """

    kind = "versioned-key-value"
    changelog_has_versions = True
    supplier: VersionedBytesStoreSupplier

    def __init__(self, supplier: VersionedBytesStoreSupplier, key_serde: Serde, value_serde: Serde):
        _require(supplier, ("versioned-key-value",), "versioned_key_value_store_builder")
        super().__init__(supplier, key_serde, value_serde)

    def changelog_topic_defaults(self) -> dict[str, str]:
        """Kafka Streams keeps older versions from compaction for history retention + 1 day."""
        lag = self.supplier.history_retention + CHANGELOG_ADDITIONAL_RETENTION_MS
        return {"min.compaction.lag.ms": str(lag)}

    def with_caching_enabled(self, max_entries: int | None = None) -> StoreBuilder:
        """Not supported (as in Kafka Streams): raises ``StoreError``."""
        raise StoreError(f"state store {self.name!r}: versioned stores do not support caching")

    def build(
        self,
        state_dir: Path | None = None,
        timestamp_fn: Callable[[], int] = lambda: 0,
        inner: BytesStore | None = None,
    ) -> StoreStack:
        """Open the store; change records carry the version timestamps (``timestamp_fn`` unused)."""
        inner = self._open_inner(state_dir, inner)
        history = self.supplier.history_retention
        top: Any = VersionedBytesStore(inner, history)
        changelog = None
        if self.logging_enabled:
            top = changelog = ChangeLoggingVersionedBytesStore(top)
        store = VersionedKeyValueStore(self.name, top, self.key_serde, self.value_serde, history)
        return StoreStack(store=store, inner=inner, changelog=changelog, cache=None)

    def restore_writer(self, inner: BytesStore) -> Callable[[list], None]:
        """Replays ``(key, value, timestamp)`` changelog records as versioned puts."""
        return restore_writer(inner, self.supplier.history_retention)
