"""Read-your-writes on a worker host: a read's position bound checked against its task.

Kafka Streams' IQv2 ``PositionBound``: a caller that produced a record at input offset O of
topic T, partition P asks for an answer that includes it; a store that has not processed it
yet answers ``NOT_UP_TO_BOUND`` and the caller asks again. Here a task's position is its
*input* position, per source topic of its partition (the task reads partition P of each of
its sub-topology's source topics): the offset of the last record it processed, as Kafka
Streams' ``Position`` holds it. The task keeps the next offset to process per topic for its
commits anyway (``Task``'s input positions), so the position costs one dict copy per read.

The comparison is Kafka Streams' (``StoreQueryUtils.isPermitted``): a bound's entries for
other partitions than the task's are not the task's business and pass; an entry for its
partition passes when the task processed that offset or a later one; a topic the task has
processed nothing of does not.

On the wire a bound is a list of ``[topic, partition, offset]``; a position is
``{topic: {partition (as text, a JSON key): offset}}`` (an answer's ``input_position``). A read whose bound is not reached is
answered at once with 503 ``not_up_to_bound``, naming the bound and the task's position; no
thread of the host waits for the task to catch up (the caller decides how long it waits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: The code of a read whose position bound the task has not reached.
NOT_UP_TO_BOUND = "not_up_to_bound"

Bound = list[tuple[str, int, int]]
Position = dict[str, dict[str, int]]
#: ``offsets(committed)``: a task's next offsets to process per input topic, live (False) or
#: as its last commit left them (True).
InputOffsets = Callable[[bool], Mapping[str, int]]


def bound_of(request: Mapping[str, Any]) -> Bound | None:
    """The position bound a read request carries (None: none)."""
    entries = request.get("bound")
    if not entries:
        return None
    return [(str(topic), int(partition), int(offset)) for topic, partition, offset in entries]


def position_of(next_offsets: Mapping[str, int], partition: int) -> Position:
    """A task's position from its next offsets to process per input topic: the last offset
    it processed per topic of its ``partition`` (topics it processed nothing of left out)."""
    return {
        topic: {str(partition): offset - 1} for topic, offset in next_offsets.items() if offset > 0
    }


def reached(next_offsets: Mapping[str, int], partition: int, bound: Bound) -> bool:
    """Whether a task of ``partition`` that will process ``next_offsets`` next (per input
    topic) has processed what ``bound`` asks for (see the module docs)."""
    for topic, bound_partition, offset in bound:
        if bound_partition != partition:
            continue
        if next_offsets.get(topic, 0) <= offset:
            return False
    return True


def not_up_to_bound(
    task_id: str, store: str, bound: Bound, position: Position, consistency: str
) -> tuple[int, dict[str, Any]]:
    """The answer to a read of ``task_id`` whose ``bound`` its ``position`` has not reached."""
    wanted = ",".join(f"{t}:{p}:{o}" for t, p, o in bound)
    seen = ",".join(
        f"{t}:{p}:{o}" for t, parts in sorted(position.items()) for p, o in parts.items()
    )
    return 503, {
        "error": f"store {store!r}, task {task_id}: its {consistency} position "
        f"({seen or 'nothing processed yet'}) has not reached the position bound {wanted}",
        "code": NOT_UP_TO_BOUND,
        "bound": [list(entry) for entry in bound],
        "input_position": position,
        "task": task_id,
    }


def check(
    task_id: str,
    partition: int,
    offsets: InputOffsets | None,
    request: Mapping[str, Any],
) -> tuple[Position | None, tuple[int, dict[str, Any]] | None]:
    """The task's position for ``request`` (read now: before the read's value, so the value
    is at least as new) and, when the request's bound is not reached, the answer to give
    instead of reading. ``offsets`` None: the reader does not know its position (a bound is
    then never reached)."""
    committed = bool(request.get("committed"))
    current = None if offsets is None else dict(offsets(committed))
    position = None if current is None else position_of(current, partition)
    bound = bound_of(request)
    if bound is None:
        return position, None
    if current is not None and reached(current, partition, bound):
        return position, None
    consistency = "committed" if committed else "live"
    store = str(request.get("store"))
    return position, not_up_to_bound(task_id, store, bound, position or {}, consistency)


def with_position(body: dict[str, Any], position: Position | None) -> dict[str, Any]:
    """An answer's ``body`` with the ``input_position`` it was read at, when known."""
    if position is not None:
        body["input_position"] = position
    return body
