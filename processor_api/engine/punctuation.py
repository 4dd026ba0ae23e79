"""Punctuation schedules with Kafka Streams' timing rules.

A schedule has a due time. ``PunctuationQueue.may_punctuate(now)`` fires every schedule whose
due time is <= ``now`` once, with ``now`` as the timestamp, then moves its due time to the
next point of its grid strictly after ``now`` (missed intervals are skipped), exactly as
Kafka Streams' ``PunctuationSchedule.next``:

* STREAM_TIME: grid ``k * interval`` (first due 0), ``now`` = stream time.
* WALL_CLOCK_TIME: grid ``registered_at + k * interval`` (first due ``registered_at +
  interval``), ``now`` = system time.
* Anchored (Kafka Streams 4.2, KIP-1146: ``schedule(..., start_time=...)``), either type: grid
  ``start_time + k * interval``, first due ``start_time`` (a start time already passed is due
  at the first check, which then moves the schedule to the grid point after it).

Each schedule has a stable key (``"<processor>#<n>"``, the processor's n-th ``schedule()``
call) so its due time and cancellation survive the task being closed and re-created.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from processor_api.processor import Cancellable, PunctuationType


@dataclass
class ScheduleState:
    """What is persisted of a schedule between task incarnations."""

    type: PunctuationType
    interval: int
    next_due: int
    cancelled: bool = False
    anchor: int | None = None  # the start_time (epoch ms) of an anchored schedule

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": self.type.value,
            "interval": self.interval,
            "next": self.next_due,
            "cancelled": self.cancelled,
        }
        if self.anchor is not None:
            data["anchor"] = self.anchor
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScheduleState:
        anchor = data.get("anchor")
        return cls(
            type=PunctuationType(data["type"]),
            interval=int(data["interval"]),
            next_due=int(data["next"]),
            cancelled=bool(data.get("cancelled", False)),
            anchor=None if anchor is None else int(anchor),
        )

    @classmethod
    def registered(
        cls,
        persisted: ScheduleState | None,
        type: PunctuationType,
        interval: int,
        anchor: int | None,
        clock: Callable[[], int],
    ) -> ScheduleState:
        """The state of a schedule registered now: ``persisted`` if it continues it (see
        :meth:`resumed_by`), else a new one first due at the anchor, at 0 (STREAM_TIME) or
        one interval from now (WALL_CLOCK_TIME)."""
        state = None if persisted is None else persisted.resumed_by(type, interval, anchor)
        if state is not None:
            return state
        if anchor is not None:
            first_due = anchor
        elif type is PunctuationType.STREAM_TIME:
            first_due = 0
        else:
            first_due = clock() + interval
        return cls(type, interval, first_due, anchor=anchor)

    def resumed_by(
        self, type: PunctuationType, interval: int, anchor: int | None
    ) -> ScheduleState | None:
        """This persisted state, if a new registration continues it; None for a new schedule.

        A registration continues a schedule of the same type and interval on the same grid:
        both unanchored, or both anchored with anchors a whole number of intervals apart (an
        anchor computed from the current time, "the last full hour", moves on the same grid
        from one start to the next). An anchor later than the persisted due time holds the
        schedule back until then.
        """
        if self.type is not type or self.interval != interval:
            return None
        if anchor is None or self.anchor is None:
            return self if anchor is None and self.anchor is None else None
        if (anchor - self.anchor) % interval:
            return None
        self.anchor = anchor
        self.next_due = max(self.next_due, anchor)
        return self


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def interval_ms_of(interval: int | timedelta) -> int:
    """Milliseconds (>= 1) of a ``schedule()`` interval: int ms or ``timedelta``."""
    if isinstance(interval, timedelta):
        ms = interval // timedelta(milliseconds=1)
    elif isinstance(interval, int) and not isinstance(interval, bool):
        ms = interval
    else:
        raise TypeError(
            f"punctuation interval must be int milliseconds or timedelta, got {interval!r}"
        )
    if ms < 1:
        raise ValueError(f"punctuation interval must be at least 1 ms, got {interval!r}")
    return ms


def start_time_ms(start_time: datetime | int, processor: str) -> int:
    """Epoch milliseconds of a ``schedule(start_time=...)`` argument; errors name the processor."""
    if isinstance(start_time, datetime):
        if start_time.tzinfo is None or start_time.utcoffset() is None:
            raise ValueError(
                f"processor {processor!r}: punctuation start_time {start_time.isoformat()} has no "
                "time zone; give an aware datetime (e.g. datetime(..., tzinfo=timezone.utc) or "
                "a zoneinfo.ZoneInfo) or epoch milliseconds"
            )
        ms = (start_time - _EPOCH) // timedelta(milliseconds=1)
    elif isinstance(start_time, int) and not isinstance(start_time, bool):
        ms = start_time
    else:
        raise TypeError(
            f"processor {processor!r}: punctuation start_time must be an aware datetime or int "
            f"epoch milliseconds, got {type(start_time).__name__} {start_time!r}"
        )
    if ms < 0:
        raise ValueError(
            f"processor {processor!r}: punctuation start_time must not be before the epoch "
            f"(1970-01-01T00:00:00Z), got {start_time!r} ({ms} ms)"
        )
    return ms


def next_due_after(due: int, interval: int, now: int) -> int:
    """The next grid point after a punctuation at ``now`` of a schedule that was due at ``due``."""
    next_due = due + interval
    if now >= next_due:
        missed = (now - due) // interval
        next_due = due + (missed + 1) * interval
    return next_due


class PunctuationSchedule(Cancellable):
    """One registered schedule; also the ``Cancellable`` handed to the processor."""

    __slots__ = ("key", "node_name", "punctuator", "state")

    def __init__(
        self,
        key: str,
        node_name: str,
        punctuator: Callable[[int], None],
        state: ScheduleState,
    ) -> None:
        self.key = key
        self.node_name = node_name
        self.punctuator = punctuator
        self.state = state

    def cancel(self) -> None:
        self.state.cancelled = True

    @property
    def cancelled(self) -> bool:
        return self.state.cancelled

    def __repr__(self) -> str:
        return (
            f"PunctuationSchedule({self.key}, {self.state.type.name}, "
            f"interval={self.state.interval}, next={self.state.next_due}, "
            f"cancelled={self.state.cancelled})"
        )


FireFn = Callable[[PunctuationSchedule, int], None]

NEVER = sys.maxsize
"""What :meth:`PunctuationQueue.earliest_due` returns when no live schedule is left."""


class PunctuationQueue:
    """Schedules of one punctuation type, ordered by due time."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, PunctuationSchedule]] = []
        self._seq = 0

    def add(self, schedule: PunctuationSchedule) -> None:
        if not schedule.cancelled:
            heapq.heappush(self._heap, (schedule.state.next_due, self._seq, schedule))
            self._seq += 1

    def next_due(self) -> int | None:
        """The earliest due time of a live schedule, or None."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def earliest_due(self) -> int:
        """Like :meth:`next_due`, but :data:`NEVER` when there is no live schedule.

        Schedules cancelled later do not update it: callers comparing against it must treat
        it as a lower bound (a check at or after it may find nothing due).
        """
        due = self.next_due()
        return NEVER if due is None else due

    def may_punctuate(self, now: int, fire: FireFn) -> bool:
        """Fire every schedule due at ``now``; returns whether any fired."""
        fired = False
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, schedule = heapq.heappop(heap)
            if schedule.cancelled:
                continue
            state = schedule.state
            # Move the due time before firing, so a punctuator that fails or cancels leaves
            # a consistent schedule behind.
            due = state.next_due
            state.next_due = next_due_after(due, state.interval, now)
            fire(schedule, now)
            fired = True
            if not schedule.cancelled:
                self.add(schedule)
        return fired
