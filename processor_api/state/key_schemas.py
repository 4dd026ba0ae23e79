"""Byte layouts of window and session store keys: Kafka Streams' changelog key formats.

Window store key (``WindowKeySchema``): serialized key + 8-byte big-endian window start +
4-byte big-endian sequence number. Session store key (``SessionKeySchema``): serialized key +
8-byte big-endian session end + 8-byte big-endian session start. Timestamped values
(``ValueAndTimestampSerializer``): 8-byte big-endian timestamp + serialized value.

These are both the changelog record keys and the keys the stores keep, so a changelog replayed
into a store's innermost byte store rebuilds it as it was.
"""

from __future__ import annotations

import struct

from processor_api.state.windowed_types import MAX_TIMESTAMP

TIMESTAMP_SIZE = 8
SEQNUM_SIZE = 4
WINDOW_SUFFIX = TIMESTAMP_SIZE + SEQNUM_SIZE
SESSION_SUFFIX = 2 * TIMESTAMP_SIZE
MAX_SEQNUM = 0x7FFFFFFF

_LONG = struct.Struct(">q")
_WINDOW = struct.Struct(">qi")
_SESSION = struct.Struct(">qq")
_MAX_LONG = _LONG.pack(MAX_TIMESTAMP)


def pack_long(value: int) -> bytes:
    """8-byte big-endian two's complement (Java ``putLong``)."""
    return _LONG.pack(value)


def unpack_long(data: bytes, offset: int = 0) -> int:
    """Read an 8-byte big-endian long at ``offset``."""
    return _LONG.unpack_from(data, offset)[0]


def window_key(key: bytes, window_start: int, seqnum: int = 0) -> bytes:
    """A window store key: ``key + start + seqnum``."""
    return key + _WINDOW.pack(window_start, seqnum)


def window_key_parts(stored: bytes) -> tuple[bytes, int, int]:
    """Split a window store key into ``(key, window_start, seqnum)``."""
    start, seqnum = _WINDOW.unpack_from(stored, len(stored) - WINDOW_SUFFIX)
    return stored[:-WINDOW_SUFFIX], start, seqnum


def window_start_of(stored: bytes) -> int:
    """The window start of a window store key."""
    return _LONG.unpack_from(stored, len(stored) - WINDOW_SUFFIX)[0]


def session_key(key: bytes, start: int, end: int) -> bytes:
    """A session store key: ``key + end + start``."""
    return key + _SESSION.pack(end, start)


def session_key_parts(stored: bytes) -> tuple[bytes, int, int]:
    """Split a session store key into ``(key, start, end)``."""
    end, start = _SESSION.unpack_from(stored, len(stored) - SESSION_SUFFIX)
    return stored[:-SESSION_SUFFIX], start, end


def session_end_of(stored: bytes) -> int:
    """The session end of a session store key."""
    return _LONG.unpack_from(stored, len(stored) - SESSION_SUFFIX)[0]


def upper_bound_for_keys_up_to(key: bytes, suffix_size: int) -> bytes:
    """An inclusive bound above every stored key ``k + suffix`` with ``k <= key``.

    Timestamps are non-negative, so a suffix starts with a byte of at most ``0x7f``. A key
    ``k`` that is a proper prefix of ``key`` sorts its records by that suffix, possibly after
    ``key``'s own, so (as Kafka Streams' ``OrderedBytes.upperRange``) the bound keeps ``key``
    only up to its first byte, after the first, that is below ``0x7f``, then the largest
    suffix. Callers filter what lies between.
    """
    max_suffix = _MAX_LONG + b"\xff" * (suffix_size - TIMESTAMP_SIZE)
    end = 1
    while end < len(key) and key[end] >= max_suffix[0]:
        end += 1
    return key[:end] + max_suffix
