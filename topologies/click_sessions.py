"""Click-session summaries per tumbling window: one downstream write per session window.

Seeds 001 and 002 describe the same use case: a web site emits 80-120K click events per second,
too many to write to a database one by one, but the events of a user session bunch up in time.
Aggregating them per session in a time window (``TimeWindows.of(1 * 60 * 1000)`` in seed 002)
turns ``x`` clicks and ``y`` page views into a single database write per window, cutting the
write rate to ``1 / (x + y)``. The seed does it with the DSL (``groupBy(session)`` ->
``aggregate(ClickStreamCollector, TimeWindows.of(60s))`` -> ``to(summary topic)``); this module
does it with the Processor API, a window store built on a key-value store, and a punctuation
that emits each window exactly once, when stream time closes it (what the DSL needs
``suppress(untilWindowCloses)`` for).

Topology (one sub-topology):

* source ``click-events``: key = session id (string), value = JSON click event
  ``{"uuid": ..., "session_id": ..., "event": "click" | "page_view", "time_spent": int}``.
  The input is expected to be **keyed by session** (the seed re-keys by ``session_id`` through
  an intermediate topic first; producers here must key by session themselves, or a re-keying
  sub-topology must be put in front). The record key is authoritative; ``session_id`` in the
  value is not used for grouping. Records with a null key, a value that is not a JSON object,
  an unknown ``event`` or a non-integer ``time_spent`` are skipped with a warning (a missing
  ``time_spent`` counts as 0). Bytes that are not JSON at all are a deserialization error,
  handled by the configured deserialization handler.
* processor ``aggregate-sessions``: adds each event to its session's tumbling window
  ``[start, start + window_ms)`` with ``start = timestamp - timestamp % window_ms``, in store
  ``click-session-windows``.
* a STREAM_TIME punctuation every ``punctuate_interval_ms`` (default 1000) emits one summary per
  (session, window) whose ``window_end <= stream time - grace_ms`` to sink
  ``click-session-summaries`` (string key = session id, JSON value ``{"session_id",
  "window_start", "window_end", "clicks", "page_views", "time_spent"}``, record timestamp = the
  punctuation's stream time), and deletes the window from the store.
* a record whose window is already closed (``window_end <= stream time - grace_ms``, the rule of
  Kafka Streams' windowed aggregations) is dropped with a warning and counted in
  :attr:`SessionWindowAggregator.late_records_dropped`. So a window never gets an event after
  it could have been emitted, and each (session, window) is emitted exactly once.

Store layout: ``click-session-windows`` is a persistent (RocksDB, change-logged) key-value
store whose keys are :class:`SessionWindowKey` ``(window_end, session_id)`` serialized by
:data:`SESSION_WINDOW_KEY_SERDE` as the 8-byte big-endian unsigned window end followed by the
UTF-8 session id. Stores order keys by their bytes, and big-endian non-negative integers sort
bytewise like numbers, so the store is sorted by window end (then session): the punctuation
reads only the closed windows with one range scan from the start of the store up to the
cut-off and stops at the first open window, never touching the open ones. (Tumbling windows
all have the same size, so ordering by end is ordering by start; the end is stored because it
is what the close rule compares.) Values are JSON objects ``{"window_start", "clicks",
"page_views", "time_spent", "uuid", "first_timestamp", "last_timestamp"}`` (``uuid``: the user
of the last event seen).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from processor_api import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Serde,
    Serdes,
    Stores,
    Topology,
)
from processor_api.logging import get_logger
from processor_api.state import KeyValueStore

_log = get_logger(__name__)

DEFAULT_INPUT_TOPIC = "click-events"
DEFAULT_OUTPUT_TOPIC = "click-session-summaries"
DEFAULT_STORE_NAME = "click-session-windows"
DEFAULT_WINDOW_MS = 60_000
DEFAULT_GRACE_MS = 0
DEFAULT_PUNCTUATE_INTERVAL_MS = 1000

EVENT_TYPES = {"click": "clicks", "page_view": "page_views"}
"""Event type -> the aggregate field it increments."""

_WINDOW_END = struct.Struct(">Q")


class SessionWindowKey(NamedTuple):
    """Store key of one session window: its end (epoch ms, exclusive) and the session id."""

    window_end: int
    session_id: str


def _serialize_window_key(key: Any) -> bytes:
    if not isinstance(key, SessionWindowKey):
        key = SessionWindowKey(*key)
    if isinstance(key.window_end, bool) or not isinstance(key.window_end, int):
        raise TypeError(f"window_end must be an int, got {key.window_end!r}")
    if key.window_end < 0:
        raise ValueError(f"window_end must be >= 0, got {key.window_end}")
    if not isinstance(key.session_id, str):
        raise TypeError(f"session_id must be a str, got {key.session_id!r}")
    return _WINDOW_END.pack(key.window_end) + key.session_id.encode("utf-8")


def _deserialize_window_key(data: bytes) -> SessionWindowKey:
    if len(data) < _WINDOW_END.size:
        raise ValueError(f"a session window key has at least 8 bytes, got {len(data)}")
    (window_end,) = _WINDOW_END.unpack_from(data)
    return SessionWindowKey(window_end, bytes(data[_WINDOW_END.size :]).decode("utf-8"))


SESSION_WINDOW_KEY_SERDE = Serde(
    _serialize_window_key, _deserialize_window_key, "session-window-key"
)
"""8-byte big-endian window end + UTF-8 session id: byte order = (window end, session) order."""


class SessionWindowAggregator(Processor):
    """Aggregates click events per session and tumbling window; emits closed windows once.

    ``late_records_dropped`` counts the records dropped because their window was closed.
    """

    def __init__(
        self,
        store_name: str = DEFAULT_STORE_NAME,
        window_ms: int = DEFAULT_WINDOW_MS,
        grace_ms: int = DEFAULT_GRACE_MS,
        punctuate_interval_ms: int = DEFAULT_PUNCTUATE_INTERVAL_MS,
    ) -> None:
        self.store_name = store_name
        self.window_ms = window_ms
        self.grace_ms = grace_ms
        self.punctuate_interval_ms = punctuate_interval_ms
        self.late_records_dropped = 0
        self.context: ProcessorContext | None = None
        self.store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context and the window store; schedule the emission on stream time."""
        self.context = context
        self.store = context.get_state_store(self.store_name)
        context.schedule(
            self.punctuate_interval_ms, PunctuationType.STREAM_TIME, self.emit_closed_windows
        )

    def _coordinates(self) -> dict[str, Any]:
        meta = self.context.record_metadata() if self.context else None
        if meta is None:
            return {}
        return {"topic": meta.topic, "partition": meta.partition, "offset": meta.offset}

    def _skip(self, reason: str, **fields: Any) -> None:
        _log.warning("click_event_skipped", reason=reason, **fields, **self._coordinates())

    def process(self, record: Record) -> None:
        """Add the event to its (session, window) aggregate, unless the window is closed."""
        assert self.context is not None and self.store is not None
        session_id = record.key
        event = record.value
        if session_id is None:
            self._skip("null key: input must be keyed by session id")
            return
        if not isinstance(event, dict):
            self._skip(f"value is not a JSON object: {type(event).__name__}")
            return
        kind = event.get("event")
        field = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
        if field is None:
            self._skip(f"unknown event type {kind!r}")
            return
        time_spent = event.get("time_spent")
        if time_spent is None:
            time_spent = 0
        if isinstance(time_spent, bool) or not isinstance(time_spent, int):
            self._skip(f"time_spent is not an integer: {time_spent!r}")
            return

        timestamp = record.timestamp
        window_start = timestamp - timestamp % self.window_ms
        window_end = window_start + self.window_ms
        close_time = self.context.current_stream_time_ms() - self.grace_ms
        if window_end <= close_time:
            self.late_records_dropped += 1
            _log.warning(
                "late_click_event_dropped",
                session_id=session_id,
                timestamp=timestamp,
                window_start=window_start,
                window_end=window_end,
                stream_time=self.context.current_stream_time_ms(),
                grace_ms=self.grace_ms,
                dropped_total=self.late_records_dropped,
                **self._coordinates(),
            )
            return

        key = SessionWindowKey(window_end, session_id)
        aggregate = self.store.get(key) or {
            "window_start": window_start,
            "clicks": 0,
            "page_views": 0,
            "time_spent": 0,
            "uuid": None,
            "first_timestamp": timestamp,
            "last_timestamp": timestamp,
        }
        aggregate[field] += 1
        aggregate["time_spent"] += time_spent
        if event.get("uuid") is not None:
            aggregate["uuid"] = event["uuid"]
        aggregate["first_timestamp"] = min(aggregate["first_timestamp"], timestamp)
        aggregate["last_timestamp"] = max(aggregate["last_timestamp"], timestamp)
        self.store.put(key, aggregate)

    def emit_closed_windows(self, timestamp: int) -> None:
        """Forward and delete every window with ``window_end <= timestamp - grace_ms``.

        One range scan over the window-end-ordered store, stopping at the first open window.
        """
        assert self.context is not None and self.store is not None
        cutoff = timestamp - self.grace_ms
        if cutoff <= 0:  # every window ends after 0
            return
        closed: list[tuple[SessionWindowKey, dict[str, Any]]] = []
        # hi is inclusive and (cutoff + 1, "") may itself be a key, hence the explicit check
        with self.store.range(None, SessionWindowKey(cutoff + 1, "")) as entries:
            for key, aggregate in entries:
                if key.window_end > cutoff:
                    break
                closed.append((key, aggregate))
        for key, aggregate in closed:
            summary = {
                "session_id": key.session_id,
                "window_start": aggregate["window_start"],
                "window_end": key.window_end,
                "clicks": aggregate["clicks"],
                "page_views": aggregate["page_views"],
                "time_spent": aggregate["time_spent"],
            }
            self.context.forward(Record(key.session_id, summary, timestamp))
            self.store.delete(key)
        if closed:
            _log.debug("session_windows_emitted", stream_time=timestamp, windows=len(closed))


def build_topology(
    *,
    input_topic: str = DEFAULT_INPUT_TOPIC,
    output_topic: str = DEFAULT_OUTPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    window_ms: int = DEFAULT_WINDOW_MS,
    grace_ms: int = DEFAULT_GRACE_MS,
    punctuate_interval_ms: int = DEFAULT_PUNCTUATE_INTERVAL_MS,
) -> Topology:
    """Source ``input_topic`` -> ``aggregate-sessions`` (store ``store_name``) -> ``output_topic``.

    ``window_ms``: tumbling window size; ``grace_ms``: how long after its end (in stream time)
    a window still accepts records; ``punctuate_interval_ms``: how often (in stream time) the
    closed windows are emitted.
    """
    window_ms, grace_ms = int(window_ms), int(grace_ms)
    punctuate_interval_ms = int(punctuate_interval_ms)
    if window_ms < 1:
        raise ValueError(f"window_ms must be >= 1, got {window_ms}")
    if grace_ms < 0:
        raise ValueError(f"grace_ms must be >= 0, got {grace_ms}")
    if punctuate_interval_ms < 1:
        raise ValueError(f"punctuate_interval_ms must be >= 1, got {punctuate_interval_ms}")
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), SESSION_WINDOW_KEY_SERDE, Serdes.json()
    )
    return (
        Topology()
        .add_source(
            "clicks-source", input_topic, key_serde=Serdes.string(), value_serde=Serdes.json()
        )
        .add_processor(
            "aggregate-sessions",
            lambda: SessionWindowAggregator(store_name, window_ms, grace_ms, punctuate_interval_ms),
            "clicks-source",
        )
        .add_state_store(store, "aggregate-sessions")
        .add_sink(
            "summaries-sink",
            output_topic,
            "aggregate-sessions",
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
        )
    )
