"""Store entries as JSON and keys from text, shared by every reader of stores that answers in
JSON: ``read-store``, ``read_store_df``, interactive queries (worker side and driver side).

:func:`entry_fields` flattens an entry of any store kind, :func:`json_default` renders what
``json`` cannot (bytes as base64), :func:`parse_key` types a key given as text for a store's
key serde.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from processor_api.state.base import KeyValue


def plain_key(text: str, serde: Any) -> Any:
    """A key given as text, typed for ``serde`` but not checked against it: the text itself
    for a string serde, its UTF-8 bytes for a bytes serde, else its JSON value (or the text
    when it is not JSON)."""
    name = getattr(serde, "name", "custom")
    if name == "string":
        return text
    if name == "bytes":
        return text.encode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_key(text: str, serde: Any, store: str, what: str = "key") -> Any:
    """A key given as text (a command line's, a URL's), typed for the store's key serde: the
    text itself for string keys, its UTF-8 bytes for bytes keys, else JSON (or the text when
    it is not JSON, e.g. for a custom serde of plain text). Raises ``ConfigError`` naming
    ``what`` and the store when the serde cannot serialize it."""
    from processor_api.errors import ConfigError

    name = getattr(serde, "name", "custom")
    key = plain_key(text, serde)
    if name in ("string", "bytes"):
        return key
    try:
        serde.serialize(key)
    except Exception as exc:  # noqa: BLE001 - any serde failure is a bad key
        raise ConfigError(
            f"{what} {text!r} does not fit the key serde ({name}) of store {store!r}: {exc}"
        ) from None
    return key


def entry_fields(entry: KeyValue) -> dict[str, Any]:
    """One store entry as flat fields: ``key``, ``value``, and where the store has them
    ``window_start``/``window_end`` (window stores), ``session_start``/``session_end``
    (session stores, both inclusive), ``timestamp`` (timestamped and versioned stores) and
    ``valid_to`` (versioned stores: when the next version starts, None for the latest)."""
    from processor_api.state.windowed_types import (
        SessionWindow,
        ValueAndTimestamp,
        VersionedRecord,
        Windowed,
    )

    key, value = entry.key, entry.value
    fields: dict[str, Any] = {}
    if isinstance(key, Windowed):
        window = key.window
        fields["key"] = key.key
        prefix = "session" if isinstance(window, SessionWindow) else "window"
        fields[f"{prefix}_start"], fields[f"{prefix}_end"] = window.start, window.end
    else:
        fields["key"] = key
    if isinstance(value, ValueAndTimestamp | VersionedRecord):
        fields["value"], fields["timestamp"] = value.value, value.timestamp
        if isinstance(value, VersionedRecord):
            fields["valid_to"] = value.valid_to
    else:
        fields["value"] = value
    return {"key": fields.pop("key"), "value": fields.pop("value"), **fields}


def json_default(value: Any) -> Any:
    """``json.dumps`` fallback for entry fields: bytes as base64 text, sets and tuples as lists,
    Protobuf messages as their JSON mapping (field names as declared), anything else as its
    ``repr``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "SerializeToString"):
        from google.protobuf import json_format

        return json_format.MessageToDict(value, preserving_proto_field_name=True)
    return repr(value)
