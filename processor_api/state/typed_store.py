"""What every typed store shares: a name, key and value serdes over a byte-store stack, and
the open/closed life of the store (Kafka Streams' ``StateStore`` contract)."""

from __future__ import annotations

from typing import Any

from processor_api.errors import StoreError
from processor_api.serde import Serde
from processor_api.state.base import open_state_source


def check_time(store: str, what: str, value: Any) -> int:
    """``value`` as a non-negative int timestamp, else ``StoreError`` naming store and value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError(
            f"state store {store!r}: {what} must be a non-negative int (epoch ms), got {value!r}"
        )
    return value


class TypedStore:
    """The base of the typed stores (key-value, window, session, versioned).

    ``bytes_store`` is the top of the store's layer stack (caching, change logging, the
    persistent or in-memory store); closing the typed store closes the stack.
    """

    def __init__(self, name: str, bytes_store: Any, key_serde: Serde, value_serde: Serde) -> None:
        self._name = name
        self.bytes_store = bytes_store
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._open = True
        # bytes_store.is_open without the layers that only pass it on (checked per call)
        self._open_source = open_state_source(bytes_store)

    @property
    def name(self) -> str:
        """The store's name."""
        return self._name

    @property
    def persistent(self) -> bool:
        """True when the data lives on local disk (RocksDB)."""
        return self.bytes_store.persistent

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return self._open and self._open_source.is_open

    def _check_open(self) -> None:
        if not self._open or not self._open_source.is_open:
            raise StoreError(f"state store {self._name!r} is closed")

    def _key_bytes(self, key: Any, what: str = "key") -> bytes:
        if key is None:
            raise StoreError(f"state store {self._name!r}: {what} must not be None")
        return self.key_serde.serialize(key)  # type: ignore[return-value]

    def flush(self) -> None:
        """Flush every layer: the cache (its writes reach the change log), then the store."""
        self._check_open()
        self.bytes_store.flush()

    def close(self) -> None:
        """Close the store and its layers (dirty cache entries are written back first).

        Idempotent. Any later use of the store, or of its open iterators, raises ``StoreError``.
        """
        if not self._open:
            return
        self._open = False
        self.bytes_store.close()

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"{type(self).__name__}({self._name!r}, {state}, persistent={self.persistent})"
