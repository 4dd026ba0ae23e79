"""The :class:`Serde` type and the built-in serdes for record keys, values and store entries.

:class:`~processor_api.serdes.Serdes` hands the built-in ones out (and the Schema Registry
serdes of ``schemas/``, which are ``Serde`` subclasses too). The wire formats match Kafka's Java serdes, so data written here is readable by Kafka
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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from collections.abc import Mapping

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class SerializationError(ValueError):
    """Raised when an object cannot be serialized or bytes cannot be deserialized."""


class SerdeUnavailableError(SerializationError):
    """A service the serde needs (a Schema Registry) did not answer: nothing is known to be
    wrong with the record. The deserialization, processing and production handlers are not
    asked, since one that continues would skip records the service would have read: the task
    fails, naming the record, and a run resumes from its last commit."""


class Serde:
    """A pair of functions turning objects into bytes and back.

    ``Serde(serializer, deserializer)`` where ``serializer(obj) -> bytes`` and
    ``deserializer(data: bytes) -> obj``. ``None`` passes through untouched.
    """

    __slots__ = ("_serializer", "_deserializer", "name")

    passthrough: ClassVar[bool] = False
    """Whether stored bytes may skip a deserialize/serialize round trip through this serde.

    ``True`` only for built-in serdes whose wire format round-trips exactly: then
    ``serialize(deserialize(data)) == data``, without error, for every ``data`` that
    :attr:`passthrough_check` accepts (every ``data`` when it is ``None``). The runtime uses it
    to forward raw store entries to a sink with the same serdes; custom serdes keep ``False``.
    """

    passthrough_check: ClassVar[staticmethod[[bytes], bool] | None] = None

    passthrough_check_all: ClassVar[staticmethod[[Sequence[bytes]], bool] | None] = None
    """:attr:`passthrough_check` for many values at once: ``True`` only if it accepts each."""

    topic_aware: ClassVar[bool] = False
    """Whether the bytes depend on the topic (Schema Registry subjects): then the runtime
    calls :meth:`for_topic` once per topic it reads or writes and uses what it returns."""

    def __init__(
        self,
        serializer: Callable[[Any], bytes],
        deserializer: Callable[[bytes], Any],
        name: str = "custom",
    ) -> None:
        self._serializer = serializer
        self._deserializer = deserializer
        self.name = name

    def for_topic(
        self, topic: str, is_key: bool, registry: Mapping[str, Any] | None = None
    ) -> Serde:
        """The serde to use for ``topic``'s keys (``is_key``) or values.

        Plain serdes are the same for every topic and return themselves; Schema Registry
        serdes return a copy bound to the topic's subject. ``registry`` is the run's
        ``schema.registry.*`` settings (client config), for registry serdes that name none.
        """
        return self

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


def _deserialize_string(data: bytes) -> str:
    return bytes(data).decode("utf-8")


def _is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _all_utf8(items: Sequence[bytes]) -> bool:
    # one C-level test for the common all-ASCII case; then value by value
    return b"".join(items).isascii() or all(map(_is_utf8, items))


def _all_4_bytes(items: Sequence[bytes]) -> bool:
    return set(map(len, items)) <= {4}


def _all_8_bytes(items: Sequence[bytes]) -> bool:
    return set(map(len, items)) <= {8}


def _is_4_bytes(data: bytes) -> bool:
    return len(data) == 4


def _is_8_bytes(data: bytes) -> bool:
    return len(data) == 8


# The built-in serdes below take the common case (an exact str / in-range int / float / bytes
# object, a bytes buffer) straight to the codec and leave everything else, including every
# error, to the generic Serde methods: same bytes, same exceptions, without the wrapper's
# checks and function calls per record.


class _StringSerde(Serde):
    __slots__ = ()
    passthrough = True
    passthrough_check = staticmethod(_is_utf8)
    passthrough_check_all = staticmethod(_all_utf8)

    def __init__(self) -> None:
        super().__init__(_serialize_string, _deserialize_string, "string")

    def serialize(self, obj: Any) -> bytes | None:
        if obj.__class__ is str:
            try:
                return obj.encode("utf-8")
            except UnicodeEncodeError:
                pass  # lone surrogates: the generic path raises the SerializationError
        return Serde.serialize(self, obj)

    def deserialize(self, data: bytes | None) -> Any:
        if data.__class__ is bytes:
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return Serde.deserialize(self, data)


class _BytesSerde(Serde):
    __slots__ = ()
    passthrough = True

    def __init__(self) -> None:
        super().__init__(_serialize_bytes, bytes, "bytes")

    def serialize(self, obj: Any) -> bytes | None:
        if obj.__class__ is bytes:
            return obj
        return Serde.serialize(self, obj)

    def deserialize(self, data: bytes | None) -> Any:
        if data.__class__ is bytes:
            return data
        return Serde.deserialize(self, data)


class _IntegerSerde(Serde):
    __slots__ = ()
    passthrough = True
    passthrough_check = staticmethod(_is_4_bytes)
    passthrough_check_all = staticmethod(_all_4_bytes)

    def __init__(self) -> None:
        super().__init__(_serialize_int, _deserialize_int, "integer")

    def serialize(self, obj: Any) -> bytes | None:
        if obj.__class__ is int and _INT_MIN <= obj <= _INT_MAX:
            return _INT.pack(obj)
        return Serde.serialize(self, obj)

    def deserialize(self, data: bytes | None) -> Any:
        if data.__class__ is bytes and len(data) == 4:
            return _INT.unpack(data)[0]
        return Serde.deserialize(self, data)


class _LongSerde(Serde):
    __slots__ = ()
    passthrough = True
    passthrough_check = staticmethod(_is_8_bytes)
    passthrough_check_all = staticmethod(_all_8_bytes)

    def __init__(self) -> None:
        super().__init__(_serialize_long, _deserialize_long, "long")

    def serialize(self, obj: Any) -> bytes | None:
        if obj.__class__ is int and _LONG_MIN <= obj <= _LONG_MAX:
            return _LONG.pack(obj)
        return Serde.serialize(self, obj)

    def deserialize(self, data: bytes | None) -> Any:
        if data.__class__ is bytes and len(data) == 8:
            return _LONG.unpack(data)[0]
        return Serde.deserialize(self, data)


class _DoubleSerde(Serde):
    __slots__ = ()
    passthrough = True
    passthrough_check = staticmethod(_is_8_bytes)
    passthrough_check_all = staticmethod(_all_8_bytes)

    def __init__(self) -> None:
        super().__init__(_serialize_double, _deserialize_double, "double")

    def serialize(self, obj: Any) -> bytes | None:
        if obj.__class__ is float:
            return _DOUBLE.pack(obj)
        return Serde.serialize(self, obj)

    def deserialize(self, data: bytes | None) -> Any:
        if data.__class__ is bytes and len(data) == 8:
            return _DOUBLE.unpack(data)[0]
        return Serde.deserialize(self, data)


#: The built-in serdes, one of each (``Serdes.string()`` and so on return these).
STRING: Serde = _StringSerde()
BYTES: Serde = _BytesSerde()
INTEGER: Serde = _IntegerSerde()
LONG: Serde = _LongSerde()
DOUBLE: Serde = _DoubleSerde()
JSON: Serde = Serde(_serialize_json, _deserialize_json, "json")
