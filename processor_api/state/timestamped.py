"""Timestamped stores: values are ``ValueAndTimestamp(value, timestamp)``.

Stored (and logged) as Kafka Streams does: an 8-byte big-endian timestamp followed by the
value's bytes. A ``None`` value (or ``ValueAndTimestamp(None, ts)``) deletes.
"""

from __future__ import annotations

from typing import Any

from processor_api.errors import StoreError
from processor_api.serde import Serde
from processor_api.state.base import BytesStore
from processor_api.state.key_schemas import TIMESTAMP_SIZE, pack_long, unpack_long
from processor_api.state.key_value import KeyValueStore
from processor_api.state.window import WindowStore
from processor_api.state.windowed_types import ValueAndTimestamp


class ValueAndTimestampSerde(Serde):
    """Wraps a value serde: ``ValueAndTimestamp`` <-> 8-byte timestamp + value bytes."""

    __slots__ = ("value_serde", "_store")

    def __init__(self, value_serde: Serde, store_name: str) -> None:
        super().__init__(
            self._to_bytes, self._from_bytes, f"value-and-timestamp({value_serde.name})"
        )
        self.value_serde = value_serde
        self._store = store_name

    def serialize(self, obj: Any) -> bytes | None:
        """``None`` (or a ``None`` value) stays ``None``: a delete."""
        if obj is None:
            return None
        if not isinstance(obj, ValueAndTimestamp):
            raise StoreError(
                f"state store {self._store!r} is timestamped: values must be "
                f"ValueAndTimestamp(value, timestamp), got {obj!r}"
            )
        if obj.value is None:
            return None
        timestamp = obj.timestamp
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise StoreError(
                f"state store {self._store!r}: ValueAndTimestamp timestamp must be an int "
                f"(epoch ms), got {timestamp!r}"
            )
        return pack_long(timestamp) + self.value_serde.serialize(obj.value)  # type: ignore[operator]

    def _to_bytes(self, obj: Any) -> bytes:
        data = self.serialize(obj)
        assert data is not None
        return data

    def _from_bytes(self, data: bytes) -> ValueAndTimestamp:
        if len(data) < TIMESTAMP_SIZE:
            raise StoreError(
                f"state store {self._store!r}: timestamped value of {len(data)} bytes is "
                "shorter than its 8-byte timestamp"
            )
        return ValueAndTimestamp(
            self.value_serde.deserialize(data[TIMESTAMP_SIZE:]), unpack_long(data)
        )

    def deserialize(self, data: bytes | None) -> Any:
        """``None`` stays ``None``."""
        return None if data is None else self._from_bytes(data)


class TimestampedKeyValueStore(KeyValueStore):
    """A :class:`KeyValueStore` whose values are ``ValueAndTimestamp(value, timestamp)``.

    ``value_serde`` is the serde of the plain values; ``plain_value_serde`` keeps it, while
    the store's ``value_serde`` is the timestamped wrapper.
    """

    def __init__(
        self, name: str, bytes_store: BytesStore, key_serde: Serde, value_serde: Serde
    ) -> None:
        super().__init__(name, bytes_store, key_serde, ValueAndTimestampSerde(value_serde, name))
        self.plain_value_serde = value_serde


class TimestampedWindowStore(WindowStore):
    """A :class:`WindowStore` whose values are ``ValueAndTimestamp(value, timestamp)``."""

    def __init__(
        self,
        name: str,
        bytes_store: BytesStore,
        key_serde: Serde,
        value_serde: Serde,
        *,
        window_size: int,
        retention_period: int,
        retain_duplicates: bool = False,
    ) -> None:
        super().__init__(
            name,
            bytes_store,
            key_serde,
            ValueAndTimestampSerde(value_serde, name),
            window_size=window_size,
            retention_period=retention_period,
            retain_duplicates=retain_duplicates,
        )
        self.plain_value_serde = value_serde
