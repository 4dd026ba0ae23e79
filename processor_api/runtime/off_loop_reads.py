"""Point reads of a task's key-value stores answered on the query link's thread.

A read queued for the loop thread waits until the loop reaches a point between two task
turns or two processing chunks, so a long chunk or the store step of a commit is its
latency (``query_link.py``). A point read of a key-value or timestamped key-value store does
not need the loop: it is one lookup per layer, and the layers it goes through are safe to
read from another thread while the loop writes, under the interpreter's lock:

* the write-back cache and the batch buffer: one dict lookup each; a write-back fills the
  layer below before it drops its entries (``CachingBytesStore.get``), and a commit that
  completes after a cut removes only entries the layer below holds already, so a key is
  found in one layer or the next, with its old or its new value, never missing;
* the change-logging layer only passes reads on;
* RocksDB: a read is a read of the DB's current state (thread-safe; a commit's writes are
  one atomic write batch); an in-memory store: one dict lookup.

The typed facade is not used: its ``get`` remembers the last key read for the task's own
next ``put`` (``KeyValueStore._last_key``), which a read from another thread must not
change. So the key is serialized and the value deserialized here, with the store's serdes.

Whatever else (ranges, windows, sessions, versioned reads, a store with a TTL, a store whose
layers are not the ones above, a store closed or replaced meanwhile) goes to the loop as
before (``None``). ``position`` (and the input position a read's position bound is checked
against, ``query_bounds.py``) is read before the value, so a committed read covers at least
the commit it names, and a live read at least the input records its position names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor_api.runtime import query_bounds
from processor_api.runtime.job import parse_task_id
from processor_api.runtime.query_bounds import InputOffsets
from processor_api.runtime.query_link import decode_key
from processor_api.state.base import KeyValue
from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.state.caching import CachingBytesStore
from processor_api.state.changelogging import ChangeLoggingBytesStore
from processor_api.state.in_memory import InMemoryBytesStore
from processor_api.state.json_entries import entry_fields
from processor_api.state.key_value import KeyValueStore
from processor_api.state.rocksdb import RocksDBBytesStore
from processor_api.state.timestamped import TimestampedKeyValueStore

_FACADES = (KeyValueStore, TimestampedKeyValueStore)
_PASSING_LAYERS = (CachingBytesStore, ChangeLoggingBytesStore)
_INNERMOST = (RocksDBBytesStore, InMemoryBytesStore)

Answer = tuple[int, dict[str, Any]]


def readable_off_loop(stack: Any) -> bool:
    """Whether a point read of ``stack`` (a :class:`~processor_api.state.builder.StoreStack`
    under the runtime's batch buffer) may run on another thread than the task's loop: only
    the exact layer types listed in the module docs, no TTL layer."""
    if stack.ttl is not None or type(stack.store) not in _FACADES:
        return False
    layer = stack.store.bytes_store
    while type(layer) in _PASSING_LAYERS:
        layer = layer.inner
    return type(layer) is BatchBufferBytesStore and type(layer.inner) in _INNERMOST


def answer_point_read(
    task_id: str,
    stacks: dict[str, Any],
    buffers: dict[str, BatchBufferBytesStore],
    position: Callable[[str], int | None],
    request: dict[str, Any],
    input_offsets: InputOffsets | None = None,
) -> Answer | None:
    """The answer to ``request`` read on the calling thread, as
    :meth:`~processor_api.runtime.query_link.TaskStoreReader.answer` gives it; None when the
    loop must answer it (see the module docs). ``input_offsets`` as the reader takes them:
    a position bound not reached is answered here at once."""
    if request.get("kind") != "key" or request.get("as_of") is not None:
        return None
    name = str(request.get("store"))
    stack = stacks.get(name)
    buffer = buffers.get(name)
    if stack is None or buffer is None or not readable_off_loop(stack):
        return None
    committed = bool(request.get("committed"))
    facade = stack.store
    at = position(name)  # before the value: the value is at least as new
    input_position, refusal = query_bounds.check(
        task_id, parse_task_id(task_id)[1], input_offsets, request
    )
    if refusal is not None:
        return refusal
    # any failure (a key the serde refuses, a store closed meanwhile): the loop answers it,
    # with the error it names
    try:
        key = decode_key(request.get("key"), facade)
        top = buffer.inner if committed else facade.bytes_store
        raw = top.get(facade.key_serde.serialize(key))
        value = facade.value_serde.deserialize(raw)
        entries = [] if value is None else [entry_fields(KeyValue(key, value))]
    except Exception:  # noqa: BLE001 - see above
        return None
    return 200, query_bounds.with_position(
        {
            "entries": entries,
            "more": False,
            "last": None,
            "position": at,
            "consistency": "committed" if committed else "live",
        },
        input_position,
    )
