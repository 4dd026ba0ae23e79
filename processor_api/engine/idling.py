"""When a task with several co-partitioned inputs may go on: Kafka Streams' ``max.task.idle.ms``.

Kafka Streams' ``PartitionGroup.readyToProcess``: a task takes the record with the smallest
timestamp among its input partitions' heads, which only gives timestamp order if every input
has a head. When some inputs have no buffered record:

* ``max.task.idle.ms = -1``: go on at once (records may be processed out of timestamp order);
* the input's lag on the broker is unknown, or known to be > 0: wait (the data is there and
  will be read);
* its lag is known to be 0: wait until ``max.task.idle.ms`` (default 0: not at all) has passed
  since the input was first seen empty, then go on anyway ("enforced processing").

Kafka Streams logs every enforced processing at INFO. Here a task logs the first one at info,
then at most one info line a minute (wall clock) carrying how many happened since the last
one; the others go to debug. A two-input topology whose second input is mostly empty would
otherwise log a line for nearly every record (1,844 lines for 4,000 records in the driver).

The host tells the task the lags (:meth:`InputIdling.update_lags`); a topic it never gave a lag
for counts as caught up (lag 0), so a runtime that hands the task everything there is (the test
driver) need not say anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Any

from processor_api.errors import StreamsError

MAX_TASK_IDLE_DISABLED = -1
#: At most one ``enforced_processing`` info line per task in this much wall-clock time (ms).
ENFORCED_INFO_INTERVAL_MS = 60_000


class InputIdling:
    """The lags, idle deadlines and decision of one task (see module docs)."""

    __slots__ = (
        "max_task_idle_ms",
        "task_id",
        "enforced_total",
        "_lags",
        "_deadlines",
        "_logged",
        "_log",
        "_info_at",
        "_since_info",
    )

    def __init__(self, max_task_idle_ms: int, topics: list[str], task_id: str, log: Any) -> None:
        self.max_task_idle_ms = max_task_idle_ms
        self.task_id = task_id
        self._lags: dict[str, int | None] = dict.fromkeys(topics, 0)
        self._deadlines: dict[str, int] = {}
        self._logged: dict[str, int] = {}  # topic -> deadline whose enforcement was logged
        self._log = log
        self.enforced_total = 0  # decisions to go on past an empty input (Kafka's sensor)
        self._info_at: int | None = None  # wall clock of the last info line
        self._since_info = 0  # enforced waits logged at debug since then

    def update_lags(self, lags: Mapping[str, int | None]) -> None:
        """Per input topic, how many records the broker has past what the task was handed
        (None: unknown, the task waits until it is known)."""
        for topic, lag in lags.items():
            if topic not in self._lags:
                raise StreamsError(
                    f"task {self.task_id}: lag given for topic {topic!r}, which none of its "
                    f"sources reads (they read {sorted(self._lags)})"
                )
            if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int) or lag < 0):
                raise StreamsError(
                    f"task {self.task_id}: lag of topic {topic!r} must be an int >= 0 or None, "
                    f"got {lag!r}"
                )
            self._lags[topic] = lag

    def lag(self, topic: str) -> int | None:
        """The last lag the host gave for ``topic`` (None: unknown)."""
        return self._lags[topic]

    def filled(self, topic: str) -> None:
        """``topic`` got records: an idle wait on it is over."""
        self._deadlines.pop(topic, None)
        self._logged.pop(topic, None)

    def ready(self, queues: Mapping[str, Sized], now: int) -> bool:
        """Whether the task may take its next record at wall-clock time ``now`` (ms)."""
        buffered = [topic for topic, queue in queues.items() if len(queue)]
        if not buffered:
            return False
        if len(buffered) == len(queues) or self.max_task_idle_ms == MAX_TASK_IDLE_DISABLED:
            return True
        enforced: dict[str, int] = {}
        for topic, queue in queues.items():
            if len(queue):
                self._deadlines.pop(topic, None)
                continue
            lag = self._lags[topic]
            if lag is None or lag > 0:
                self._deadlines.pop(topic, None)
                self._log.debug("task_waiting_for_input", topic=topic, lag=lag)
                return False
            deadline = self._deadlines.setdefault(topic, now + self.max_task_idle_ms)
            if now < deadline:
                self._log.debug(
                    "task_idling_for_input",
                    topic=topic,
                    now=now,
                    deadline=deadline,
                    max_task_idle_ms=self.max_task_idle_ms,
                )
                return False
            enforced[topic] = deadline
        self.enforced_total += 1
        fresh = {t: d for t, d in enforced.items() if self._logged.get(t) != d}
        if fresh:
            self._logged.update(fresh)
            fields = {
                "buffered_topics": buffered,
                "empty_topics_deadlines": enforced,
                "max_task_idle_ms": self.max_task_idle_ms,
                "now": now,
            }
            if self._info_at is None or now - self._info_at >= ENFORCED_INFO_INTERVAL_MS:
                self._log.info(
                    "enforced_processing",
                    **fields,
                    enforced_since_last_info=self._since_info,
                    hint="records may be processed out of timestamp order; further ones are "
                    "logged at debug, with at most one info line a minute",
                )
                self._info_at, self._since_info = now, 0
            else:
                self._since_info += 1
                self._log.debug("enforced_processing", **fields)
        return True

    def next_deadline(self, queues: Mapping[str, Sized]) -> int | None:
        """The earliest idle deadline of an empty input while others have records, if any:
        when the task should be given a chance to go on without new input."""
        if not any(len(queue) for queue in queues.values()):
            return None
        pending = [d for t, d in self._deadlines.items() if not len(queues[t])]
        return min(pending) if pending else None
