"""Serializers and deserializers for record keys, values and store entries.

The wire formats match Kafka's Java serdes, so data written here is readable by Kafka
Streams and other Java clients and the other way round:

* ``string``: UTF-8
* ``integer``: 4-byte big-endian two's complement (``IntegerSerializer``)
* ``long``: 8-byte big-endian two's complement (``LongSerializer``)
* ``double``: 8-byte big-endian IEEE 754 (``DoubleSerializer``)
* ``json``: UTF-8 JSON text (compact separators)
* ``bytes``: the bytes unchanged

``None`` is never passed to a serializer or deserializer: it maps to ``None`` (a null key or
value, a tombstone) in both directions.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")


class SerializationError(ValueError):
    """Raised when an object cannot be serialized or bytes cannot be deserialized."""


class Serde:
    """A pair of functions turning objects into bytes and back.

    ``Serde(serializer, deserializer)`` where ``serializer(obj) -> bytes`` and
    ``deserializer(data: bytes) -> obj``. ``None`` passes through untouched.
    """

    __slots__ = ("_serializer", "_deserializer", "name")

    def __init__(
        self,
        serializer: Callable[[Any], bytes],
        deserializer: Callable[[bytes], Any],
        name: str = "custom",
    ) -> None:
        self._serializer = serializer
        self._deserializer = deserializer
        self.name = name

    def serialize(self, obj: Any) -> bytes | None:
        """Serialize ``obj`` to bytes; ``None`` stays ``None``."""
        if obj is None:
            return None
        try:
            data = self._serializer(obj)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{self.name} serde cannot serialize {type(obj).__name__} value {obj!r}: {exc}"
            ) from exc
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SerializationError(
                f"{self.name} serializer returned {type(data).__name__}, expected bytes"
            )
        return bytes(data)

    def deserialize(self, data: bytes | None) -> Any:
        """Deserialize ``data``; ``None`` stays ``None``."""
        if data is None:
            return None
        try:
            return self._deserializer(data)
        except SerializationError:
            raise
        except Exception as exc:
            preview = bytes(data[:64])
            raise SerializationError(
                f"{self.name} serde cannot deserialize {len(data)} bytes {preview!r}: {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"Serde({self.name})"


def _serialize_string(obj: Any) -> bytes:
    if not isinstance(obj, str):
        raise SerializationError(f"string serde expects str, got {type(obj).__name__} {obj!r}")
    return obj.encode("utf-8")


def _serialize_int(obj: Any) -> bytes:
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise SerializationError(f"integer serde expects int, got {type(obj).__name__} {obj!r}")
    try:
        return _INT.pack(obj)
    except struct.error as exc:
        raise SerializationError(f"integer serde: {obj} does not fit in 32 bits") from exc


def _deserialize_int(data: bytes) -> int:
    if len(data) != 4:
        raise SerializationError(f"integer serde expects 4 bytes, got {len(data)}")
    return _INT.unpack(data)[0]


def _serialize_long(obj: Any) -> bytes:
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise SerializationError(f"long serde expects int, got {type(obj).__name__} {obj!r}")
    try:
        return _LONG.pack(obj)
    except struct.error as exc:
        raise SerializationError(f"long serde: {obj} does not fit in 64 bits") from exc


def _deserialize_long(data: bytes) -> int:
    if len(data) != 8:
        raise SerializationError(f"long serde expects 8 bytes, got {len(data)}")
    return _LONG.unpack(data)[0]


def _serialize_double(obj: Any) -> bytes:
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        raise SerializationError(f"double serde expects float, got {type(obj).__name__} {obj!r}")
    return _DOUBLE.pack(float(obj))


def _deserialize_double(data: bytes) -> float:
    if len(data) != 8:
        raise SerializationError(f"double serde expects 8 bytes, got {len(data)}")
    return _DOUBLE.unpack(data)[0]


def _serialize_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _deserialize_json(data: bytes) -> Any:
    return json.loads(data)


def _serialize_bytes(obj: Any) -> bytes:
    if not isinstance(obj, (bytes, bytearray, memoryview)):
        raise SerializationError(f"bytes serde expects bytes, got {type(obj).__name__} {obj!r}")
    return bytes(obj)


class Serdes:
    """Factory of the built-in serdes (Kafka's Java wire formats)."""

    _STRING = Serde(_serialize_string, lambda data: bytes(data).decode("utf-8"), "string")
    _BYTES = Serde(_serialize_bytes, bytes, "bytes")
    _INTEGER = Serde(_serialize_int, _deserialize_int, "integer")
    _LONG_SERDE = Serde(_serialize_long, _deserialize_long, "long")
    _DOUBLE_SERDE = Serde(_serialize_double, _deserialize_double, "double")
    _JSON = Serde(_serialize_json, _deserialize_json, "json")

    @staticmethod
    def string() -> Serde:
        """UTF-8 text."""
        return Serdes._STRING

    @staticmethod
    def bytes() -> Serde:
        """Raw bytes, unchanged."""
        return Serdes._BYTES

    @staticmethod
    def integer() -> Serde:
        """32-bit signed integer, big-endian (Java ``IntegerSerializer``)."""
        return Serdes._INTEGER

    @staticmethod
    def long() -> Serde:
        """64-bit signed integer, big-endian (Java ``LongSerializer``)."""
        return Serdes._LONG_SERDE

    @staticmethod
    def double() -> Serde:
        """64-bit IEEE 754 float, big-endian (Java ``DoubleSerializer``)."""
        return Serdes._DOUBLE_SERDE

    @staticmethod
    def json() -> Serde:
        """Any JSON-compatible Python object as compact UTF-8 JSON."""
        return Serdes._JSON
