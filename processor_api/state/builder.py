"""Store suppliers and builders: ``Stores`` and ``StoreBuilder``, as in Kafka Streams."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from processor_api.errors import StoreError
from processor_api.serde import Serde
from processor_api.state.base import BytesStore
from processor_api.state.caching import DEFAULT_MAX_ENTRIES, CachingBytesStore
from processor_api.state.changelogging import ChangeLoggingBytesStore
from processor_api.state.in_memory import InMemoryBytesStore
from processor_api.state.key_value import KeyValueStore
from processor_api.state.rocksdb import RocksDBBytesStore
from processor_api.state.ttl import CLOCKS, TtlBytesStore, ttl_ms


class KeyValueBytesStoreSupplier:
    """Makes the innermost byte store of a named store, once per task.

    ``persistent`` suppliers (RocksDB) put the store at ``state_dir / "rocksdb" / name``, where
    ``state_dir`` is the task's directory; in-memory suppliers ignore ``state_dir``.
    """

    kind = "key-value"

    def __init__(
        self,
        name: str,
        persistent: bool,
        factory: Callable[[str, Path | None], BytesStore],
    ) -> None:
        if not name:
            raise StoreError("a state store needs a non-empty name")
        self.name = name
        self.persistent = persistent
        self._factory = factory

    def get(self, state_dir: Path | None = None) -> BytesStore:
        """Create and open a new byte store (RocksDB needs ``state_dir``)."""
        if self.persistent and state_dir is None:
            raise StoreError(
                f"persistent state store {self.name!r} needs a state directory (state_dir=None)"
            )
        return self._factory(self.name, state_dir)

    def __repr__(self) -> str:
        kind = "persistent" if self.persistent else "in-memory"
        return f"{type(self).__name__}({self.name!r}, {kind})"


def _rocksdb_factory(name: str, state_dir: Path | None) -> BytesStore:
    assert state_dir is not None
    # No write-ahead log, as in Kafka Streams: the changelog topic is the durable copy, and
    # the local copy is only trusted up to its checkpoint. TaskStores.commit deletes the
    # checkpoint, writes the batch and flushes the memtables to SST files (RocksDB flush,
    # waited for), and only then writes the new checkpoint; a restore flushes what it
    # replayed. Writes lost in a crash are therefore never covered by a checkpoint: the store
    # is replayed from its checkpoint or wiped and rebuilt. A clean close flushes too.
    return RocksDBBytesStore(name, Path(state_dir) / "rocksdb" / name, disable_wal=True)


def _in_memory_factory(name: str, state_dir: Path | None) -> BytesStore:
    return InMemoryBytesStore(name)


@dataclass
class StoreStack:
    """One built store with every layer, as :meth:`StoreBuilder.build` returns it.

    ``store`` is the typed facade handed to processors (a ``KeyValueStore``, ``WindowStore``,
    ``SessionStore``, ``TimestampedKeyValueStore`` or ``VersionedKeyValueStore``); ``inner``
    the innermost byte store (restore writes go there, bypassing cache and change log);
    ``changelog`` (anything with ``drain_changes()``) and ``cache`` are the optional layers in
    between.
    """

    store: Any
    inner: BytesStore
    changelog: Any
    cache: CachingBytesStore | None
    ttl: TtlBytesStore | None = None

    @property
    def name(self) -> str:
        """The store's name."""
        return self.store.name

    def flush(self) -> None:
        """Flush the cache (so its writes reach the change log), then the inner store."""
        self.store.flush()

    def close(self) -> None:
        """Close the store and all its layers (dirty cache entries are written back first)."""
        self.store.close()


class StoreBuilder:
    """Builds a :class:`KeyValueStore` with its optional caching and change-logging layers.

    Logging is on and caching off by default. The ``with_*`` methods return the builder.
    Builders of the other store kinds subclass it and override :meth:`_facade` (and, for
    versioned stores, :meth:`build` and :meth:`restore_writer`).
    """

    kind = "key-value"
    changelog_has_versions = False
    """True when the changelog record timestamps are part of the data (versioned stores):
    a replay must pass ``(key, value, timestamp)`` records to :meth:`restore_writer`'s writer,
    and a batch's records of one key must not be collapsed to its last one."""

    def __init__(
        self, supplier: KeyValueBytesStoreSupplier, key_serde: Serde, value_serde: Serde
    ) -> None:
        if key_serde is None or value_serde is None:
            raise StoreError(f"state store {supplier.name!r} needs a key serde and a value serde")
        self.supplier = supplier
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.logging_enabled = True
        self.logging_config: dict[str, str] = self.changelog_topic_defaults()
        self.caching_enabled = False
        self.cache_max_entries = DEFAULT_MAX_ENTRIES
        self.ttl_ms: int | None = None
        self.ttl_clock = "stream_time"

    @property
    def name(self) -> str:
        """The store's name."""
        return self.supplier.name

    @property
    def persistent(self) -> bool:
        """Whether the supplier makes a persistent (RocksDB) store."""
        return self.supplier.persistent

    def changelog_topic_defaults(self) -> dict[str, str]:
        """Changelog topic configs this kind of store sets unless overridden."""
        return {}

    def bound_to(self, topic: str, registry: Mapping[str, Any] | None = None) -> StoreBuilder:
        """This builder with serdes bound to ``topic`` (the store's changelog topic).

        Returns ``self`` unless a serde's bytes depend on the topic (Schema Registry serdes):
        then a copy whose serdes use the subjects ``<topic>-key`` / ``<topic>-value``, as
        Kafka Streams' state serdes do. ``registry``: the run's registry settings.
        """
        if not (self.key_serde.topic_aware or self.value_serde.topic_aware):
            return self
        bound = copy.copy(self)
        bound.key_serde = self.key_serde.for_topic(topic, True, registry)
        bound.value_serde = self.value_serde.for_topic(topic, False, registry)
        return bound

    def with_logging_enabled(self, config: dict | None = None) -> StoreBuilder:
        """Log every write to the changelog topic; ``config`` holds extra topic configs."""
        self.logging_enabled = True
        self.logging_config = {
            **self.changelog_topic_defaults(),
            **{str(k): str(v) for k, v in (config or {}).items()},
        }
        return self

    def with_logging_disabled(self) -> StoreBuilder:
        """Do not log writes: the store is not restored after a loss of local state."""
        self.logging_enabled = False
        self.logging_config = {}
        return self

    def with_caching_enabled(self, max_entries: int | None = None) -> StoreBuilder:
        """Put a write-back cache (``max_entries`` dirty entries at most) in front of the store."""
        if max_entries is not None and max_entries < 1:
            raise StoreError(f"state store {self.name!r}: cache max_entries must be >= 1")
        self.caching_enabled = True
        self.cache_max_entries = DEFAULT_MAX_ENTRIES if max_entries is None else max_entries
        return self

    def with_ttl(self, ttl: int | timedelta, *, clock: str = "stream_time") -> StoreBuilder:
        """Forget entries whose last write is older than ``ttl`` (ms or timedelta).

        ``clock="stream_time"``: an entry written by a record (or punctuation) of timestamp
        ``t`` is visible while the task's stream time is at most ``t + ttl``, so a replay
        gives the same result; ``"wall_clock"``: the system clock instead. Expired entries
        are hidden at once and deleted at the next commit, with a changelog tombstone (see
        :mod:`processor_api.state.ttl`). Key-value and timestamped key-value stores only.
        """
        if self.kind not in ("key-value", "timestamped-key-value"):
            raise StoreError(
                f"state store {self.name!r}: with_ttl is for key-value stores, not {self.kind}"
            )
        if clock not in CLOCKS:
            raise StoreError(
                f"state store {self.name!r}: ttl clock must be one of {CLOCKS}, got {clock!r}"
            )
        self.ttl_ms = ttl_ms(self.name, ttl)
        self.ttl_clock = clock
        return self

    def with_caching_disabled(self) -> StoreBuilder:
        """Write straight through to the store (and its change log)."""
        self.caching_enabled = False
        return self

    def build(
        self,
        state_dir: Path | None = None,
        timestamp_fn: Callable[[], int] = lambda: 0,
        inner: BytesStore | None = None,
    ) -> StoreStack:
        """Open a new store instance with its layers (one per task).

        ``state_dir`` is the task directory (needed by persistent stores); ``timestamp_fn``
        stamps the change records. ``inner`` reuses an existing innermost byte store instead
        of asking the supplier for a new one (e.g. an in-memory store kept by the worker
        across task re-creations); it must be open.
        """
        inner = self._open_inner(state_dir, inner)
        layer: BytesStore = inner
        changelog = cache = None
        if self.logging_enabled:
            layer = changelog = ChangeLoggingBytesStore(layer, timestamp_fn)
        if self.caching_enabled:
            layer = cache = CachingBytesStore(layer, self.cache_max_entries)
        ttl = None
        if self.ttl_ms is not None:
            layer = ttl = TtlBytesStore(layer, self.ttl_ms, self.ttl_clock)
        store = self._facade(layer)
        return StoreStack(store=store, inner=inner, changelog=changelog, cache=cache, ttl=ttl)

    def _open_inner(self, state_dir: Path | None, inner: BytesStore | None) -> BytesStore:
        if inner is None:
            return self.supplier.get(state_dir)
        if not inner.is_open:
            raise StoreError(f"state store {self.name!r}: the given inner store is closed")
        return inner

    def _facade(self, layer: BytesStore) -> Any:
        """The typed store over the outermost byte layer."""
        return KeyValueStore(self.name, layer, self.key_serde, self.value_serde)

    def restore_writer(self, inner: BytesStore) -> Callable[[list], None]:
        """The function a changelog replay hands each batch of records to.

        For most kinds the records are ``(key, value)`` and go straight into the innermost
        byte store's ``put_all``.
        """
        return inner.put_all

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, persistent={self.persistent}, "
            f"logging={self.logging_enabled}, caching={self.caching_enabled})"
        )


def store_factory_in(state_dir: Path) -> Callable[[StoreBuilder, Callable[[], int]], StoreStack]:
    """A task's store factory that builds every store under ``state_dir`` (the runner's setup
    check of a topology before a run)."""

    def build(builder: StoreBuilder, timestamp_fn: Callable[[], int]) -> StoreStack:
        return builder.build(state_dir=state_dir, timestamp_fn=timestamp_fn)

    return build
