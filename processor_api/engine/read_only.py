"""The view of a global store a task's processor gets: every read, no write.

Kafka Streams hands a task's processor a read-only decorator of a global store (its writes,
``flush`` and ``close`` throw "Global store is read only"): only the global store's own
processor updates it, from its topic. :class:`ReadOnlyStoreView` does the same for every
store kind here; ``isinstance`` still sees the wrapped kind (``KeyValueStore``,
``WindowStore``, ...), so code that checks the kind keeps working.
"""

from __future__ import annotations

from typing import Any

from processor_api.errors import StoreError

#: Methods that change a store (any kind), or its lifecycle: refused on a read-only view.
WRITE_METHODS = frozenset(
    {
        "put",
        "put_if_absent",
        "put_all",
        "delete",
        "remove",
        "flush",
        "close",
        "track_writes",
        "undo_write",
    }
)


class ReadOnlyStoreView:
    """A store's read methods; its write methods raise :class:`StoreError` naming the store
    and the processor that tried."""

    def __init__(self, store: Any, processor: str, owner: str) -> None:
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_processor", processor)
        object.__setattr__(self, "_owner", owner)
        # The read methods, bound once: a lookup costs no more than on the store itself.
        for name in dir(type(store)):
            if name.startswith("_") or name in WRITE_METHODS:
                continue
            if callable(getattr(type(store), name, None)):
                object.__setattr__(self, name, getattr(store, name))

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(view, KeyValueStore) as for the store itself
        return type(self._store)

    def __getattr__(self, name: str) -> Any:
        if name in WRITE_METHODS:
            return self._refuse(name)
        return getattr(self._store, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise StoreError(f"global state store {self._store.name!r} is read-only: cannot set {name}")

    def _refuse(self, method: str) -> Any:
        store, processor, owner = self._store.name, self._processor, self._owner

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise StoreError(
                f"processor {processor!r} cannot {method}() global state store {store!r}: a "
                f"global store is read-only for the processors of a task; only its global "
                f"processor {owner!r} updates it, from its topic"
            )

        return refused

    def __repr__(self) -> str:
        return f"ReadOnlyStoreView({self._store!r}, processor={self._processor!r})"
