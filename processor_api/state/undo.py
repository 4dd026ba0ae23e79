"""Undoing the store writes of one record whose processing failed and was skipped.

Kafka Streams keeps such writes; here a record skipped by the processing exception handler
leaves the stores as they were before it. Each store of a task appends ``(target, key,
previous)`` to the task's :class:`UndoLog` before each write; the task clears the log when a
record (or punctuator) starts and, when the handler skips it, :meth:`UndoLog.rollback` calls
``target.undo_write(key, previous)`` for each entry, newest first.

Key-value stores (plain and timestamped), window stores (plain and timestamped) and session
stores journal ``(facade, stored key, previous value bytes)`` (a window or session store under
its composite key) and undo by writing the previous value back through the store's layers.
Those restoring writes are ordinary writes: a cache coalesces them, a change log records them
(the changelog then holds the skipped write and its reversal; replaying it gives the same
state). The observed stream time a skipped window or session write advanced stays advanced,
as the segments it may have dropped stay dropped.

Versioned stores (:mod:`.versioned`) journal below their change log, since a version cannot be
taken back by a later changelog record (a tombstone is a version too): the versioned layer
journals every raw entry it writes (the version, the observed stream time, the unreachable
old versions it deletes), the change-logging layer each change record it keeps. Undoing
writes the raw entries back into the inner store and takes the skipped record's change
records off the pending ones (they are drained only at commit, between records), so the
store, its history and its observed stream time are as before the record and the changelog
never holds the skipped writes.

The previous value usually costs nothing: a read-modify-write (``get`` then ``put`` of the
same key) reuses the value ``get`` read, so only a blind write reads the store first.
"""

from __future__ import annotations

from typing import Any, Protocol


class Undoable(Protocol):
    """What an :class:`UndoLog` entry names: something that can take one write back."""

    def undo_write(self, key: Any, previous: Any) -> None:
        """Undo the write journaled as ``(self, key, previous)``."""


class UndoLog:
    """The writes made since :meth:`clear` by the stores that :meth:`track` it."""

    __slots__ = ("entries", "_stores")

    def __init__(self) -> None:
        self.entries: list[tuple[Undoable, Any, Any]] = []
        self._stores: list[Any] = []

    def track(self, store: object) -> None:
        """Journal ``store``'s writes here (until it is tracked by another log); an object
        without ``track_writes`` (not a store of this package) is left as it is."""
        track_writes = getattr(store, "track_writes", None)
        if track_writes is None:
            return
        if store not in self._stores:
            self._stores.append(store)
        track_writes(self)

    def clear(self) -> None:
        """Forget the journaled writes: the unit of work they belong to succeeded."""
        self.entries.clear()

    def forget_reads(self) -> None:
        """Drop what the stores remember of their last read (their content may have changed
        below them, e.g. a restore or a dropped batch): the next blind write reads again."""
        for store in self._stores:
            store.forget_last_read()

    def rollback(self) -> int:
        """Undo the journaled writes, newest first; returns how many entries were undone."""
        entries = self.entries
        count = len(entries)
        for target, key, previous in reversed(entries):
            target.undo_write(key, previous)
        entries.clear()
        self.forget_reads()
        return count
