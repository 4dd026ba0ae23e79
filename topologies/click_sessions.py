"""Click-session summaries per tumbling window: one downstream write per session window.

Seeds 001 and 002 describe the same use case: a web site emits 80-120K click events per second,
too many to write to a database one by one, but the events of a user session bunch up in time.
Aggregating them per session in a time window (``TimeWindows.of(1 * 60 * 1000)`` in seed 002)
turns ``x`` clicks and ``y`` page views into a single database write per window, cutting the
write rate to ``1 / (x + y)``. The seed does it with the DSL (``groupBy(session)`` ->
``aggregate(ClickStreamCollector, TimeWindows.of(60s))`` -> ``to(summary topic)``); this module
does it with the Processor API, a window store and a punctuation that emits each window once,
when stream time closes it: what the DSL does with ``emitStrategy(EmitStrategy.onWindowClose())``
(or ``suppress(untilWindowCloses)``).

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
  ``[start, start + window_ms)`` with ``start = timestamp - timestamp % window_ms``, in the
  window store ``click-session-windows``.
* a STREAM_TIME punctuation every ``punctuate_interval_ms`` (default 1000) emits one summary per
  (session, window) whose ``window_end <= stream time - grace_ms`` to sink
  ``click-session-summaries`` (string key = session id, JSON value ``{"session_id",
  "window_start", "window_end", "clicks", "page_views", "time_spent"}``, record timestamp = the
  punctuation's stream time). Summaries of one punctuation come in the window store's order:
  by session id (its UTF-8 bytes), then window start.
* a record whose window is already closed (``window_end <= stream time - grace_ms``, the rule of
  Kafka Streams' windowed aggregations) is dropped with a warning and counted in
  :attr:`SessionWindowAggregator.late_records_dropped`. So a window never gets an event after
  it could have been emitted, and each (session, window) is emitted exactly once.

Stores:

* ``click-session-windows``: a persistent window store (``Stores.persistent_window_store``,
  RocksDB in time segments, cached, change-logged), key = session id, window = the tumbling
  window, value = JSON ``{"clicks", "page_views", "time_spent", "uuid", "first_timestamp",
  "last_timestamp"}`` (``uuid``: the user of the last event seen). Its retention is
  ``window_ms + grace_ms + punctuate_interval_ms``: Kafka Streams' least (window size + grace)
  plus one punctuation interval, so that the punctuation following a window's close still
  finds it. Emitted windows are never deleted one by one: retention drops them, a whole RocksDB
  segment (one range delete) at a time, so the store holds the open windows and the closed ones
  of the last retention period only.
* ``click-session-windows-last-emitted``: a persistent, change-logged key-value store with one
  entry per task, key = the window store's name, value = the close time (``stream time -
  grace_ms``) up to which windows have been emitted. Windows are not deleted after being emitted
  (retention drops them); what is remembered is how far emission has gone. Each punctuation
  fetches, with one time-ranged ``fetch_all``, only the windows that closed since: starts in
  ``(last close - window_ms, close - window_ms]``, and none at all when no window boundary
  was crossed; the store reads only the RocksDB segments of those starts (with the defaults,
  a 60 s window per 60 s segment: the closed window's segment, not the open one's). This is what Kafka Streams' own emit-on-window-close aggregation does (it keeps
  the last emit close time as processor metadata committed with the task's offsets; a
  change-logged store is the Processor API's way to commit a value with the task). It costs
  one store write per emitting punctuation, where deleting each emitted window would add a
  tombstone per window to the changelog and to RocksDB: as many writes again as the summaries,
  in a use case whose point is to cut writes. The store is committed with the task's outputs
  and input offsets (in one transaction under ``exactly_once_v2``), so after a restart, or
  after the local state is lost and restored from the changelogs, emission resumes where it
  stopped: each window is emitted once (under ``at_least_once``, as for any output, a crash
  between producing and committing repeats the uncommitted summaries).

One case the punctuation alone would get wrong: stream time moves only with records, and a
record more than a punctuation interval ahead of the previous one (the first record after a
quiet period, say) moves the store's observed time so far that closed windows not yet emitted
would expire at its ``put``, before the punctuation that follows the record runs. Before such
a ``put`` the processor emits the closed windows itself (the same summaries, timestamped with
the current stream time), so no window is lost; while records keep coming, the punctuation
emits every window.
"""

from __future__ import annotations

from typing import Any

from processor_api import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Serdes,
    Stores,
    Topology,
)
from processor_api.logging import get_logger
from processor_api.state import KeyValueStore, WindowStore

_log = get_logger(__name__)

DEFAULT_INPUT_TOPIC = "click-events"
DEFAULT_OUTPUT_TOPIC = "click-session-summaries"
DEFAULT_STORE_NAME = "click-session-windows"
LAST_EMITTED_SUFFIX = "-last-emitted"
DEFAULT_WINDOW_MS = 60_000
DEFAULT_GRACE_MS = 0
DEFAULT_PUNCTUATE_INTERVAL_MS = 1000

EVENT_TYPES = {"click": "clicks", "page_view": "page_views"}
"""Event type -> the aggregate field it increments."""


def retention_ms(window_ms: int, grace_ms: int, punctuate_interval_ms: int) -> int:
    """The window store's retention: window size + grace + one punctuation interval."""
    return window_ms + grace_ms + punctuate_interval_ms


def last_emitted_store_name(store_name: str) -> str:
    """The key-value store remembering how far ``store_name``'s windows have been emitted."""
    return store_name + LAST_EMITTED_SUFFIX


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
        self.retention_ms = retention_ms(window_ms, grace_ms, punctuate_interval_ms)
        self.punctuate_interval_ms = punctuate_interval_ms
        self.late_records_dropped = 0
        self.context: ProcessorContext | None = None
        self.windows: WindowStore | None = None
        self.last_emitted: KeyValueStore | None = None
        self._last_close: int | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context and the stores; schedule the emission on stream time."""
        self.context = context
        self.windows = context.get_state_store(self.store_name)
        self.last_emitted = context.get_state_store(last_emitted_store_name(self.store_name))
        self._last_close = self.last_emitted.get(self.store_name)
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

    def _first_unemitted_start(self) -> int:
        """The first window start (a multiple of ``window_ms``) not emitted yet."""
        if self._last_close is None:
            return 0
        # Emitted: the windows ending at or before the last close, starting at or before
        # last close - window_ms; the next window starts at the next multiple of window_ms.
        lower = max(self._last_close - self.window_ms + 1, 0)
        return -(-lower // self.window_ms) * self.window_ms

    def process(self, record: Record) -> None:
        """Add the event to its (session, window) aggregate, unless the window is closed."""
        assert self.context is not None and self.windows is not None
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
        stream_time = self.context.current_stream_time_ms()
        if window_end <= stream_time - self.grace_ms:
            self.late_records_dropped += 1
            _log.warning(
                "late_click_event_dropped",
                session_id=session_id,
                timestamp=timestamp,
                window_start=window_start,
                window_end=window_end,
                stream_time=stream_time,
                grace_ms=self.grace_ms,
                dropped_total=self.late_records_dropped,
                **self._coordinates(),
            )
            return

        # The put moves the store's observed time to window_start at least, expiring windows
        # starting at or before window_start - retention: all closed; emit those not yet emitted.
        if window_start - self.retention_ms >= self._first_unemitted_start():
            self.emit_closed_windows(stream_time)

        aggregate = self.windows.fetch(session_id, window_start) or {
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
        self.windows.put(session_id, aggregate, window_start)

    def emit_closed_windows(self, timestamp: int) -> None:
        """Forward every window closed since the last emission (``end <= timestamp - grace``).

        One ``fetch_all`` over the window starts in ``[first not emitted, close - window_ms]``,
        none when no window has closed since the last emission; then the close time is stored.
        """
        assert self.context is not None and self.windows is not None
        assert self.last_emitted is not None
        close_time = timestamp - self.grace_ms
        lower = self._first_unemitted_start()
        upper = close_time - self.window_ms  # windows starting here or before have ended
        if lower > upper:
            return
        emitted = 0
        with self.windows.fetch_all(lower, upper) as closed:
            for entry in closed:
                session_id, window = entry.key.key, entry.key.window
                aggregate = entry.value
                summary = {
                    "session_id": session_id,
                    "window_start": window.start,
                    "window_end": window.end,
                    "clicks": aggregate["clicks"],
                    "page_views": aggregate["page_views"],
                    "time_spent": aggregate["time_spent"],
                }
                self.context.forward(Record(session_id, summary, timestamp))
                emitted += 1
        self.last_emitted.put(self.store_name, close_time)
        self._last_close = close_time
        if emitted:
            _log.debug(
                "session_windows_emitted",
                stream_time=timestamp,
                close_time=close_time,
                windows=emitted,
            )


def build_topology(
    *,
    input_topic: str = DEFAULT_INPUT_TOPIC,
    output_topic: str = DEFAULT_OUTPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    window_ms: int = DEFAULT_WINDOW_MS,
    grace_ms: int = DEFAULT_GRACE_MS,
    punctuate_interval_ms: int = DEFAULT_PUNCTUATE_INTERVAL_MS,
) -> Topology:
    """Source ``input_topic`` -> ``aggregate-sessions`` (stores ``store_name`` and
    ``store_name + "-last-emitted"``) -> ``output_topic``.

    ``window_ms``: tumbling window size; ``grace_ms``: how long after its end (in stream time)
    a window still accepts records; ``punctuate_interval_ms``: how often (in stream time) the
    closed windows are emitted. The window store keeps windows for their sum.
    """
    window_ms, grace_ms = int(window_ms), int(grace_ms)
    punctuate_interval_ms = int(punctuate_interval_ms)
    if window_ms < 1:
        raise ValueError(f"window_ms must be >= 1, got {window_ms}")
    if grace_ms < 0:
        raise ValueError(f"grace_ms must be >= 0, got {grace_ms}")
    if punctuate_interval_ms < 1:
        raise ValueError(f"punctuate_interval_ms must be >= 1, got {punctuate_interval_ms}")
    windows = Stores.window_store_builder(
        Stores.persistent_window_store(
            store_name,
            retention_period=retention_ms(window_ms, grace_ms, punctuate_interval_ms),
            window_size=window_ms,
        ),
        Serdes.string(),
        Serdes.json(),
    ).with_caching_enabled()
    last_emitted = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(last_emitted_store_name(store_name)),
        Serdes.string(),
        Serdes.long(),
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
        .add_state_store(windows, "aggregate-sessions")
        .add_state_store(last_emitted, "aggregate-sessions")
        .add_sink(
            "summaries-sink",
            output_topic,
            "aggregate-sessions",
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
        )
    )
