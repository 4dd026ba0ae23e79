"""The per-record path of the Avro registry serde: fastavro with what confluent_kafka learned.

``confluent_kafka``'s ``AvroSerializer`` / ``AvroDeserializer`` spend most of a record's time
around the encoding, not in it: subject and rule lookups, inline-tag walks of the schema, the
schema id read into an object (about 14 us to deserialize a 3-field record, 5 us to
serialize, against 3 us each for the ``fastavro`` calls inside them). For schemas without
data-contract rules or references that work has no effect on the bytes or the values, so:

* the first record of each subject (serializing) or of each 5-byte frame (magic byte 0 and
  schema id, deserializing) goes through ``confluent_kafka``'s own (de)serializer, which
  registers or fetches the schema, frames the bytes and raises its errors as ever;
* after that, records of an eligible schema are (de)coded with ``fastavro``'s
  ``schemaless_writer``/``schemaless_reader`` on the schema parsed as ``confluent_kafka``
  parses it, the frame being the bytes confluent_kafka wrote (or read) for that id.

Anything else (frames of other magic bytes, schemas with rules, references or of another
type) always takes ``confluent_kafka``'s path. ``tests/core/test_avro_fast_path.py`` checks
the bytes and values are the same as ``confluent_kafka``'s both ways.
"""

from __future__ import annotations

import io
import threading
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

try:  # the parsing confluent_kafka's Avro serdes use; without it, no fast path
    from confluent_kafka.schema_registry.common.avro import (
        _schema_loads,
        parse_schema_with_repo,
    )
except ImportError:  # pragma: no cover - another confluent_kafka layout
    _schema_loads = parse_schema_with_repo = None  # type: ignore[assignment]

#: The frame of the wire format's first version: magic byte 0 and a 4-byte schema id.
FRAME = 5


def parse(schema_str: str) -> Any:
    """``schema_str`` parsed for fastavro as ``confluent_kafka``'s Avro serdes parse it, or
    ``None`` when that cannot be done here (then the fast path is off for it)."""
    if parse_schema_with_repo is None:
        return None
    try:
        loaded = _schema_loads(schema_str).schema_str
        return None if loaded is None else parse_schema_with_repo(loaded, named_schemas={})
    except Exception:  # confluent_kafka's own path reports what is wrong with it
        return None


def _plain_avro(schema: Any) -> bool:
    """Whether a registered schema needs nothing of confluent_kafka beyond the encoding."""
    rules = getattr(schema, "rule_set", None)
    has_rules = rules is not None and any(
        getattr(rules, kind, None) for kind in ("migration_rules", "domain_rules", "encoding_rules")
    )
    plain_type = getattr(schema, "schema_type", None) in (None, "AVRO")
    return plain_type and not getattr(schema, "references", None) and not has_rules


class FastAvroSerializer:
    """``AvroSerializer(client, schema)`` with its per-record work done by fastavro after
    the first record of each subject (see the module docstring)."""

    __slots__ = ("_confluent", "_parsed", "_frames", "_lock")

    def __init__(self, confluent: Any, schema_str: str) -> None:
        self._confluent = confluent
        self._parsed = parse(schema_str)
        self._frames: dict[tuple[str, Any], bytes] = {}
        self._lock = threading.Lock()

    def __call__(self, obj: Any, ctx: Any) -> bytes:
        frame = self._frames.get((ctx.topic, ctx.field))
        if frame is None:
            return self._first(obj, ctx)
        out = io.BytesIO()
        out.write(frame)
        schemaless_writer(out, self._parsed, obj)
        return out.getvalue()

    def _first(self, obj: Any, ctx: Any) -> bytes:
        data = self._confluent(obj, ctx)  # registers under the subject, frames the bytes
        if self._parsed is not None and data[:1] == b"\x00" and len(data) >= FRAME:
            with self._lock:
                self._frames[(ctx.topic, ctx.field)] = data[:FRAME]
        return data


class FastAvroDeserializer:
    """``AvroDeserializer(client)`` (writer's schema) with its per-record work done by
    fastavro once a frame's schema is known (see the module docstring)."""

    __slots__ = ("_confluent", "_client", "_schemas", "_slow", "_lock")

    def __init__(self, confluent: Any, client: Any) -> None:
        self._confluent = confluent
        self._client = client
        self._schemas: dict[bytes, Any] = {}
        self._slow: set[bytes] = set()
        self._lock = threading.Lock()

    def __call__(self, data: bytes, ctx: Any) -> Any:
        parsed = self._schemas.get(data[:FRAME])
        if parsed is None:
            return self._first(data, ctx)
        payload = io.BytesIO(data)
        payload.seek(FRAME)
        return schemaless_reader(payload, parsed, None)

    def _first(self, data: bytes, ctx: Any) -> Any:
        value = self._confluent(data, ctx)  # fetches the writer's schema, raises on bad data
        frame = bytes(data[:FRAME])
        if parse_schema_with_repo is not None and data[:1] == b"\x00" and frame not in self._slow:
            schema = self._client.get_schema(int.from_bytes(frame[1:], "big"))  # cached
            parsed = parse(schema.schema_str) if _plain_avro(schema) else None
            with self._lock:
                if parsed is None:
                    self._slow.add(frame)
                else:
                    self._schemas[frame] = parsed
        return value
