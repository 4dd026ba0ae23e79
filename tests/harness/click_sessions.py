"""A plain-Python model of ``topologies.click_sessions`` and a click stream to feed both.

:func:`reference_summaries` computes, from one partition's records in offset order, the
summaries the topology must have emitted once the last record was processed, when that last
record moved stream time more than a punctuation interval ahead (so the punctuation ran
after it): every window of an accepted record ending at or before ``stream time - grace``.
"""

from __future__ import annotations

import random
from typing import Any

ClickRecord = tuple[str, dict[str, Any], int]
"""(session id = record key, JSON value, timestamp)."""

_FIELDS = {"click": "clicks", "page_view": "page_views"}


def reference_summaries(
    records: list[ClickRecord], window_ms: int, grace_ms: int
) -> list[tuple[str, dict[str, Any]]]:
    """``(session, summary)`` pairs of every closed window, sorted by (session, window start)."""
    stream_time = -1
    windows: dict[tuple[str, int], dict[str, int]] = {}
    for session, value, timestamp in records:
        stream_time = max(stream_time, timestamp)
        field = _FIELDS.get(value.get("event"))
        time_spent = value.get("time_spent", 0)
        if field is None or isinstance(time_spent, bool) or not isinstance(time_spent, int):
            continue
        start = timestamp - timestamp % window_ms
        if start + window_ms <= stream_time - grace_ms:
            continue  # late
        aggregate = windows.setdefault(
            (session, start), {"clicks": 0, "page_views": 0, "time_spent": 0}
        )
        aggregate[field] += 1
        aggregate["time_spent"] += time_spent
    close_time = stream_time - grace_ms
    return [
        (
            session,
            {
                "session_id": session,
                "window_start": start,
                "window_end": start + window_ms,
                **aggregate,
            },
        )
        for (session, start), aggregate in sorted(windows.items())
        if start + window_ms <= close_time
    ]


def click_stream(
    sessions: list[str],
    start: int,
    end: int,
    *,
    step_ms: int,
    max_lateness_ms: int,
    seed: int,
) -> list[ClickRecord]:
    """Events of ``sessions`` from ``start`` to ``end`` every ``step_ms`` on average, each
    stamped up to ``max_lateness_ms`` before its place in the stream (out of order, some late)."""
    rng = random.Random(seed)
    records: list[ClickRecord] = []
    now = start
    while now < end:
        session = rng.choice(sessions)
        kind = rng.choice(("click", "page_view"))
        timestamp = max(start, now - rng.randrange(max_lateness_ms + 1))
        value = {
            "uuid": f"user-{session}",
            "session_id": session,
            "event": kind,
            "time_spent": rng.randrange(30),
        }
        records.append((session, value, timestamp))
        now += rng.randrange(1, 2 * step_ms)
    return records
