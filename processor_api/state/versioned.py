"""Versioned key-value stores (Kafka Streams' ``VersionedKeyValueStore``).

Every put adds a version of the key valid from its timestamp until the next newer version's
timestamp. The versions live in an ordinary ordered byte store: the stored key is ``0x00`` +
serialized key + 8-byte big-endian version timestamp, the stored value ``0x01`` + value bytes
(``0x00`` alone for a tombstone), and one ``0x01``-prefixed entry keeps the observed stream
time. So the runtime's batch buffer and RocksDB or in-memory stores hold them unchanged.

The change log has Kafka Streams' format (``ChangeLoggingVersionedKeyValueBytesStore``): the
record key is the serialized key, the value the serialized value (``None`` for a delete) and
the record timestamp the version's timestamp; :meth:`VersionedBytesStore.restore_batch`
replays such ``(key, value, timestamp)`` records.

A record skipped by the processing exception handler leaves the store as it was before it
(:mod:`.undo`): while a task's undo log tracks the store, the versioned layer journals each
raw entry it writes and the change-logging layer each change record it keeps; undoing writes
the raw entries back and takes those change records off the pending ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.serde import Serde
from processor_api.state.base import BytesStore, InnerLayer
from processor_api.state.changelogging import ChangeRecord
from processor_api.state.facade import find_layer
from processor_api.state.key_schemas import TIMESTAMP_SIZE, pack_long, unpack_long
from processor_api.state.typed_store import TypedStore, check_time
from processor_api.state.windowed_types import MAX_TIMESTAMP, VersionedRecord

_log = get_logger(__name__)

PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
"""``put`` returns this when the new version is the latest one."""
PUT_RETURN_CODE_NOT_PUT = -(2**63)
"""``put`` returns this (Java's ``Long.MIN_VALUE``) when the record was older than the grace period."""

_DATA = b"\x00"
_OBSERVED_KEY = b"\x01observed-stream-time"
_VALUE = b"\x01"
_TOMBSTONE = b"\x00"

RawVersion = tuple[bytes | None, int, int | None]
"""``(value bytes or None for a tombstone, timestamp, valid_to or None)``."""

Journal = list[tuple[Any, Any, Any]]
"""An ``UndoLog``'s entries: ``(layer, key, previous)``, undone by ``layer.undo_write``."""


class VersionedBytesStore(InnerLayer):
    """The versioned store over raw bytes, on top of an ordered byte store ``inner``.

    ``history_retention`` bounds both how far back ``get(key, as_of)`` answers and, as in
    Kafka Streams, the grace period: a put or delete older than the observed stream time minus
    ``history_retention`` is not applied. Unreachable old versions of a key are deleted
    when that key is written.

    ``undo`` (set by the facade's ``track_writes``) is the journal of a task's undo log, or
    ``None``: each raw entry written is journaled with its previous bytes first.
    """

    def __init__(self, inner: BytesStore, history_retention: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.history_retention = history_retention
        self.undo: Journal | None = None

    @property
    def observed_stream_time(self) -> int:
        """The largest version timestamp written so far (``-1`` before the first)."""
        stored = self.inner.get(_OBSERVED_KEY)
        return -1 if stored is None else unpack_long(stored)

    # ------------------------------------------------------------------ reading versions

    @staticmethod
    def _prefix(key: bytes) -> bytes:
        return _DATA + key

    def _versions(
        self, prefix: bytes, low: int, high: int, reverse: bool
    ) -> Iterator[tuple[int, bytes]]:
        size = len(prefix) + TIMESTAMP_SIZE
        for stored, data in self.inner.range(
            prefix + pack_long(low), prefix + pack_long(high), reverse
        ):
            if len(stored) == size:  # not a longer key sharing these bytes
                yield unpack_long(stored, len(prefix)), data

    def _first(self, prefix: bytes, low: int, high: int, reverse: bool) -> tuple[int, bytes] | None:
        if low > high:
            return None
        return next(iter(self._versions(prefix, low, high, reverse)), None)

    def _valid_to(self, prefix: bytes, timestamp: int) -> int | None:
        newer = self._first(prefix, timestamp + 1, MAX_TIMESTAMP, False)
        return None if newer is None else newer[0]

    def get(self, key: bytes, as_of: int | None = None) -> RawVersion | None:
        """The latest version, or the one valid at ``as_of``; ``None`` for none or a tombstone."""
        prefix = self._prefix(key)
        if as_of is None or as_of < self.observed_stream_time - self.history_retention:
            # Beyond the history retention only the latest version is still known.
            latest = self._first(prefix, 0, MAX_TIMESTAMP, True)
            if latest is None or (as_of is not None and latest[0] > as_of):
                return None
            timestamp, data = latest
            return None if data == _TOMBSTONE else (data[1:], timestamp, None)
        found = self._first(prefix, 0, as_of, True)
        if found is None or found[1] == _TOMBSTONE:
            return None
        timestamp, data = found
        return data[1:], timestamp, self._valid_to(prefix, timestamp)

    # ------------------------------------------------------------------ writing versions

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        """Add the version; returns its ``valid_to``, ``-1`` if latest, or ``NOT_PUT`` if expired."""
        observed = self.observed_stream_time
        if timestamp < observed - self.history_retention:
            _log.debug(
                "skipping_expired_version",
                store=self.name,
                timestamp=timestamp,
                observed_stream_time=observed,
            )
            return PUT_RETURN_CODE_NOT_PUT
        prefix = self._prefix(key)
        stored_key = prefix + pack_long(timestamp)
        writes: list[tuple[bytes, bytes | None]] = [
            (stored_key, _TOMBSTONE if value is None else _VALUE + value)
        ]
        undo = self.undo
        if timestamp > observed:
            if undo is not None:
                # Newer than every version written so far: it replaces none (no read).
                undo.append((self, stored_key, None))
                undo.append((self, _OBSERVED_KEY, None if observed < 0 else pack_long(observed)))
            observed = timestamp
            writes.append((_OBSERVED_KEY, pack_long(observed)))
        elif undo is not None:
            undo.append((self, stored_key, self.inner.get(stored_key)))
        self.inner.put_all(writes)
        self._drop_unreachable(prefix, observed - self.history_retention)
        valid_to = self._valid_to(prefix, timestamp)
        return PUT_RETURN_CODE_VALID_TO_UNDEFINED if valid_to is None else valid_to

    def delete(self, key: bytes, timestamp: int) -> RawVersion | None:
        """Put a tombstone at ``timestamp``; returns the version valid there before, if any."""
        if timestamp < self.observed_stream_time - self.history_retention:
            return None
        existing = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return existing

    def _drop_unreachable(self, prefix: bytes, cutoff: int) -> None:
        """Delete the versions no query can reach: superseded at or before ``cutoff``."""
        if cutoff <= 0:
            return
        doomed: list[tuple[bytes, bytes]] = []  # (stored key, its data)
        previous: int | None = None
        last_data = b""
        for timestamp, data in self._versions(prefix, 0, MAX_TIMESTAMP, False):
            if previous is not None:
                if timestamp > cutoff:
                    break
                doomed.append((prefix + pack_long(previous), last_data))
            previous = timestamp
            last_data = data
        else:
            # Every version was superseded (or the key has none): a lone old tombstone goes too.
            if previous is not None and previous <= cutoff and last_data == _TOMBSTONE:
                doomed.append((prefix + pack_long(previous), last_data))
        if doomed:
            if self.undo is not None:
                self.undo.extend((self, stored, data) for stored, data in doomed)
            self.inner.put_all([(stored, None) for stored, _ in doomed])

    def undo_write(self, stored_key: bytes, previous: bytes | None) -> None:
        """Put ``previous`` back under ``stored_key`` in the inner store (an undo entry)."""
        self.inner.put(stored_key, previous)

    def restore_batch(self, records: Iterable[tuple[bytes, bytes | None, int]]) -> None:
        """Replay changelog records ``(key, value, timestamp)`` in order, as puts."""
        for key, value, timestamp in records:
            self.put(key, value, timestamp)

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """Flush the inner store."""
        self.inner.flush()

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()


class ChangeLoggingVersionedBytesStore(InnerLayer):
    """Records every applied put and delete of ``inner`` as a Kafka Streams changelog record.

    ``undo`` (set by the facade's ``track_writes``) is the journal of a task's undo log, or
    ``None``: each change record kept is journaled, and undoing takes it off again.
    """

    def __init__(self, inner: VersionedBytesStore) -> None:
        self.inner = inner
        self.name = inner.name
        self._changes: list[ChangeRecord] = []
        self.undo: Journal | None = None

    def _log(self, change: ChangeRecord) -> None:
        self._changes.append(change)
        if self.undo is not None:
            self.undo.append((self, change, None))

    def undo_write(self, change: ChangeRecord, previous: None) -> None:
        """Take ``change`` (the newest pending change record) off: it is never sent.

        Raises ``StoreError`` when it is no longer pending (drained in the middle of the unit
        of work being undone): the changelog could not be made to match the store then.
        """
        changes = self._changes
        if not changes or changes[-1] is not change:
            raise StoreError(
                f"state store {self.name!r}: cannot undo the versioned write of timestamp "
                f"{change.timestamp}: its changelog record was drained before the undo"
            )
        changes.pop()

    @property
    def pending_change_count(self) -> int:
        """Number of change records not yet drained."""
        return len(self._changes)

    def drain_changes(self) -> list[ChangeRecord]:
        """Return the pending change records, oldest first, and forget them."""
        changes, self._changes = self._changes, []
        return changes

    def get(self, key: bytes, as_of: int | None = None) -> RawVersion | None:
        """Read from the inner store."""
        return self.inner.get(key, as_of)

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        """Put into the inner store; log the record unless it was too old to be applied."""
        result = self.inner.put(key, value, timestamp)
        if result != PUT_RETURN_CODE_NOT_PUT:
            self._log(ChangeRecord(key, value, timestamp))
        return result

    def delete(self, key: bytes, timestamp: int) -> RawVersion | None:
        """Delete in the inner store and log a tombstone stamped ``timestamp``."""
        if timestamp < self.inner.observed_stream_time - self.inner.history_retention:
            return None
        existing = self.inner.delete(key, timestamp)
        self._log(ChangeRecord(key, None, timestamp))
        return existing

    def flush(self) -> None:
        """Flush the inner store (pending change records stay until drained)."""
        self.inner.flush()

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()


class VersionedKeyValueStore(TypedStore):
    """A key-value store keeping each key's versions by timestamp, for ``history_retention`` ms.

    ``put(key, value, timestamp)`` returns the new version's ``valid_to`` (the next newer
    version's timestamp), ``PUT_RETURN_CODE_VALID_TO_UNDEFINED`` (-1) when it is the latest,
    or ``PUT_RETURN_CODE_NOT_PUT`` when ``timestamp`` is older than the observed stream time
    minus the history retention (the grace period). ``value=None`` puts a tombstone.
    """

    def __init__(
        self,
        name: str,
        bytes_store: VersionedBytesStore | ChangeLoggingVersionedBytesStore,
        key_serde: Serde,
        value_serde: Serde,
        history_retention: int,
    ) -> None:
        super().__init__(name, bytes_store, key_serde, value_serde)
        self.history_retention = history_retention

    def track_writes(self, log: Any) -> None:
        """Journal every write in ``log`` (an ``UndoLog``; None: stop), below the change log."""
        journal = None if log is None else log.entries
        changelog = find_layer(self.bytes_store, ChangeLoggingVersionedBytesStore)
        if changelog is not None:
            changelog.undo = journal
        store = find_layer(self.bytes_store, VersionedBytesStore)
        if store is not None:
            store.undo = journal

    def forget_last_read(self) -> None:
        """Nothing is remembered between calls (every journaled write reads what it needs)."""

    def _key(self, key: Any) -> bytes:
        self._check_open()
        return self._key_bytes(key)

    def _timestamp(self, what: str, value: Any) -> int:
        return check_time(self._name, what, value)

    def _record(self, raw: RawVersion | None) -> VersionedRecord | None:
        if raw is None:
            return None
        data, timestamp, valid_to = raw
        return VersionedRecord(self.value_serde.deserialize(data), timestamp, valid_to)

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Add a version of ``key`` valid from ``timestamp`` (``value=None``: a tombstone)."""
        key_bytes = self._key(key)
        timestamp = self._timestamp("timestamp", timestamp)
        result = self.bytes_store.put(key_bytes, self.value_serde.serialize(value), timestamp)
        if result == PUT_RETURN_CODE_NOT_PUT:
            _log.warning("skipping_record_for_expired_put", store=self._name, timestamp=timestamp)
        return result

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord | None:
        """The latest version of ``key``, or the one valid at ``as_of_timestamp``.

        ``None`` when there is none, when it is a tombstone, or when ``as_of_timestamp`` is
        beyond the history retention and the latest version is newer than it.
        """
        key_bytes = self._key(key)
        if as_of_timestamp is not None:
            if isinstance(as_of_timestamp, bool) or not isinstance(as_of_timestamp, int):
                raise StoreError(
                    f"state store {self._name!r}: as_of_timestamp must be an int (epoch ms), "
                    f"got {as_of_timestamp!r}"
                )
            if as_of_timestamp < 0:
                return None
        return self._record(self.bytes_store.get(key_bytes, as_of_timestamp))

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        """Put a tombstone at ``timestamp``; return the version valid there before, or ``None``.

        Nothing happens (and ``None`` is returned) when ``timestamp`` is older than the grace
        period.
        """
        key_bytes = self._key(key)
        timestamp = self._timestamp("timestamp", timestamp)
        return self._record(self.bytes_store.delete(key_bytes, timestamp))


def restore_writer(inner: BytesStore, history_retention: int) -> Callable[[list], None]:
    """A changelog replay function writing ``(key, value, timestamp)`` records into ``inner``."""
    return VersionedBytesStore(inner, history_retention).restore_batch
