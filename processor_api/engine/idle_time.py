"""Stream time on an idle input: the opt-in ``stream.time.idle.advance.ms``.

Stream time moves only with records, so on a quiet partition windows never close and
STREAM_TIME punctuations never fire. With ``stream.time.idle.advance.ms`` = N, once a task got
no input (and processed none it held back) for N ms of wall-clock time, its stream time becomes
the stream time the last input left plus the wall-clock time since that input came. Not before
the first record (there is no stream time to move); a new task counts from its start.
"""

from __future__ import annotations


class IdleStreamTime:
    """When a task last had input, and the stream time it left (see module docs)."""

    __slots__ = ("idle_ms", "input_wall", "base")

    def __init__(self, idle_ms: int | None, stream_time: int) -> None:
        self.idle_ms = idle_ms  # None: off
        self.input_wall: int | None = None  # wall clock of the last input (None: not started)
        self.base = stream_time  # stream time when it came

    def active(self, now: int, stream_time: int) -> None:
        """Input came (or held-back input was processed) at wall-clock ``now``."""
        self.input_wall, self.base = now, stream_time

    def target(self, now: int, stream_time: int, holding_input: bool) -> int | None:
        """The stream time an idle input moves to at ``now``, if it moves."""
        idle_ms, since = self.idle_ms, self.input_wall
        if idle_ms is None or since is None or self.base < 0 or holding_input:
            return None
        elapsed = now - since
        if elapsed < idle_ms:
            return None
        target = self.base + elapsed
        return target if target > stream_time else None

    def next_due(self, stream_due: int | None) -> int | None:
        """The wall-clock time at which idle advance reaches stream time ``stream_due``."""
        idle_ms, since = self.idle_ms, self.input_wall
        if idle_ms is None or since is None or self.base < 0 or stream_due is None:
            return None
        return since + max(idle_ms, stream_due - self.base)
