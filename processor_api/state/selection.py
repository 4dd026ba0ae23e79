"""What a read of a whole store selects (``read-store``), and reading it from a typed store.

A :class:`StoreSelection` is one key, an inclusive key range, a key prefix, or everything. It
is applied with the store's own typed API, so the entries come out as a processor would see
them: ``KeyValue(key, value)`` for key-value stores (``ValueAndTimestamp`` values for
timestamped ones), ``KeyValue(Windowed(key, TimeWindow | SessionWindow), value)`` for window
and session stores, ``KeyValue(key, VersionedRecord)`` for versioned stores: the latest
version, or the one valid at ``as_of``, one key at a time (as Kafka Streams'
``VersionedKeyQuery``, ``asOf`` included).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from processor_api.errors import StoreError
from processor_api.state.base import KeyValue
from processor_api.state.windowed_types import MAX_TIMESTAMP

KEY_VALUE_KINDS = ("key-value", "timestamped-key-value")
WINDOW_KINDS = ("window", "timestamped-window")
SESSION_KINDS = ("session",)
VERSIONED_KINDS = ("versioned-key-value",)
READABLE_KINDS = KEY_VALUE_KINDS + WINDOW_KINDS + SESSION_KINDS + VERSIONED_KINDS


@dataclass(frozen=True)
class StoreSelection:
    """Which entries to read: ``key``, or ``key_from``..``key_to`` (inclusive, either side may
    stay open), or ``prefix`` (key-value stores), or everything (nothing set). ``as_of``
    (epoch ms, versioned stores, with ``key``) reads the version valid at that time."""

    key: Any = None
    key_from: Any = None
    key_to: Any = None
    prefix: Any = None
    as_of: int | None = None

    def __post_init__(self) -> None:
        ranged = self.key_from is not None or self.key_to is not None
        chosen = [
            name
            for name, given in (
                ("key", self.key is not None),
                ("key range (from/to)", ranged),
                ("prefix", self.prefix is not None),
            )
            if given
        ]
        if len(chosen) > 1:
            raise StoreError(f"select one of key, key range or prefix; got {' and '.join(chosen)}")
        if self.as_of is not None and (isinstance(self.as_of, bool) or self.as_of < 0):
            raise StoreError(f"as_of must be a timestamp in epoch ms >= 0, got {self.as_of!r}")

    @property
    def everything(self) -> bool:
        """True when nothing narrows the read."""
        return self == StoreSelection()


def check_selection(kind: str, name: str, selection: StoreSelection) -> None:
    """Raise ``StoreError`` if ``selection`` cannot read store ``name`` of kind ``kind``."""
    if kind not in READABLE_KINDS:
        raise StoreError(
            f"state store {name!r} is of kind {kind!r}, which cannot be read outside the "
            f"application (readable kinds: {', '.join(READABLE_KINDS)})"
        )
    if kind in VERSIONED_KINDS:
        if selection.key is None:
            raise StoreError(
                f"state store {name!r} is a versioned store: it can only be read one key at a "
                "time (give a key, and as_of for the version valid at a time)"
            )
        return
    if selection.as_of is not None:
        raise StoreError(
            f"state store {name!r} is a {kind} store: as_of reads versioned stores only"
        )
    if selection.prefix is not None and kind not in KEY_VALUE_KINDS:
        what = "session" if kind in SESSION_KINDS else "window"
        raise StoreError(
            f"state store {name!r} is a {what} store: a prefix selects key-value stores only "
            "(give a key or a key range)"
        )


def select(kind: str, store: Any, name: str, selection: StoreSelection) -> Iterator[KeyValue]:
    """The entries of the typed ``store`` (of kind ``kind``, named ``name``) ``selection`` picks."""
    check_selection(kind, name, selection)
    if kind in KEY_VALUE_KINDS:
        return _key_value(store, selection)
    if kind in WINDOW_KINDS:
        return _windowed(store, selection, "window")
    if kind in SESSION_KINDS:
        return _windowed(store, selection, "session")
    return _one(selection.key, store.get(selection.key, selection.as_of))


def _one(key: Any, value: Any) -> Iterator[KeyValue]:
    if value is not None:
        yield KeyValue(key, value)


def _drain(entries: Any) -> Iterator[KeyValue]:
    try:
        yield from entries
    finally:
        close = getattr(entries, "close", None)
        if close is not None:
            close()


def _key_value(store: Any, selection: StoreSelection) -> Iterator[KeyValue]:
    if selection.key is not None:
        return _one(selection.key, store.get(selection.key))
    if selection.prefix is not None:
        return _drain(store.prefix_scan(selection.prefix))
    return _drain(store.range(selection.key_from, selection.key_to))


def _windowed(store: Any, selection: StoreSelection, what: str) -> Iterator[KeyValue]:
    if selection.key is not None:
        lo = hi = selection.key
    else:
        lo, hi = selection.key_from, selection.key_to
    if what == "session":
        return _drain(store.fetch(lo, hi))
    return _drain(store.fetch(lo, hi, 0, MAX_TIMESTAMP))


def select_folded(
    store: Any, entries: Mapping[bytes, bytes], selection: StoreSelection
) -> Iterator[KeyValue]:
    """For key-value kinds: the entries of a folded changelog (key bytes -> value bytes, the
    last write of each key, tombstones applied) that ``selection`` picks, in key order, typed
    by ``store`` (a key-value facade). Bounds compare serialized keys, as ``range`` does."""
    serialize, entry = store.key_serde.serialize, store.entry_from_bytes
    if selection.key is not None:
        key = serialize(selection.key)
        value = entries.get(key)
        if value is not None:
            yield entry(key, value)
        return
    keys = sorted(entries)
    if selection.prefix is not None:
        prefix = serialize(selection.prefix)
        for key in keys[bisect_left(keys, prefix) :]:
            if not key.startswith(prefix):
                return
            yield entry(key, entries[key])
        return
    lo = 0 if selection.key_from is None else bisect_left(keys, serialize(selection.key_from))
    hi = len(keys) if selection.key_to is None else bisect_right(keys, serialize(selection.key_to))
    for key in keys[lo:hi]:
        yield entry(key, entries[key])
