"""Punctuation schedules with Kafka Streams' timing rules.

A schedule has a due time. ``PunctuationQueue.may_punctuate(now)`` fires every schedule whose
due time is <= ``now`` once, with ``now`` as the timestamp, then moves its due time to the
next point of its grid strictly after ``now`` (missed intervals are skipped), exactly as
Kafka Streams' ``PunctuationSchedule.next``:

* STREAM_TIME: grid ``k * interval`` (first due 0), ``now`` = stream time.
* WALL_CLOCK_TIME: grid ``registered_at + k * interval`` (first due ``registered_at +
  interval``), ``now`` = system time.

Each schedule has a stable key (``"<processor>#<n>"``, the processor's n-th ``schedule()``
call) so its due time and cancellation survive the task being closed and re-created.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from processor_api.processor import Cancellable, PunctuationType


@dataclass
class ScheduleState:
    """What is persisted of a schedule between task incarnations."""

    type: PunctuationType
    interval: int
    next_due: int
    cancelled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "interval": self.interval,
            "next": self.next_due,
            "cancelled": self.cancelled,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScheduleState:
        return cls(
            type=PunctuationType(data["type"]),
            interval=int(data["interval"]),
            next_due=int(data["next"]),
            cancelled=bool(data.get("cancelled", False)),
        )


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
