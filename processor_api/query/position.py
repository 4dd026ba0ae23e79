"""Read-your-writes: Kafka Streams IQv2's ``PositionBound`` for the query endpoint.

A position here is a task's *input* position: per topic and partition of its input, the
offset of the last record it processed (Kafka Streams' ``Position``). That is what a writer
knows: the offset its produce got in the delivery report. So a caller that produced a record
to ``orders`` partition 1 at offset 41 asks::

    client.get("totals", "alice", position_bound=PositionBound.at("orders", 1, 41))

or over HTTP ``?position_bound=orders:1:41`` (entries ``topic:partition:offset``, comma
separated); the task answers once it has processed offset 41 of ``orders`` partition 1, and
until then 503 ``not_up_to_bound`` naming the bound and the position it stands at. Every
answer says the input position it was read at (``input_position``, ``{topic: {partition:
offset}}``), which :meth:`PositionBound.from_position` turns into the bound of a later read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from processor_api.query.errors import BadQueryError

#: The HTTP parameter that carries a bound.
PARAMETER = "position_bound"


class PositionBound:
    """The input offsets a read must include: per (topic, partition) the offset of a record
    the answering task must have processed (an entry for another partition than the task's
    is not its business, as in Kafka Streams). Immutable; ``merge`` keeps the larger offset."""

    __slots__ = ("_offsets",)

    def __init__(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        self._offsets: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in (offsets or {}).items():
            _check(topic, partition, offset)
            self._offsets[(topic, partition)] = offset

    @classmethod
    def at(cls, topic: str, partition: int, offset: int) -> PositionBound:
        """At least ``offset`` of ``topic``'s ``partition`` (the offset a produce got)."""
        return cls({(topic, partition): offset})

    @classmethod
    def parse(cls, text: str, what: str = PARAMETER) -> PositionBound:
        """``topic:partition:offset[,...]``; ``BadQueryError`` naming ``what`` and the entry
        that is malformed."""
        offsets: dict[tuple[str, int], int] = {}
        if not text.strip():
            raise BadQueryError(f"{what} is empty; expected topic:partition:offset[,...]")
        for entry in text.split(","):
            topic, sep1, rest = entry.strip().rpartition(":")
            topic, sep2, partition_text = topic.rpartition(":")
            offset_text = rest
            if not (sep1 and sep2 and topic):
                raise BadQueryError(
                    f"{what}: entry {entry!r} is not topic:partition:offset (in {text!r})"
                )
            for name, value in (("partition", partition_text), ("offset", offset_text)):
                if not value.isdigit():
                    raise BadQueryError(
                        f"{what}: entry {entry!r} has {name} {value!r}, not a whole number >= 0"
                    )
            key = (topic, int(partition_text))
            offsets[key] = max(offsets.get(key, -1), int(offset_text))
        return cls(offsets)

    @classmethod
    def from_position(cls, position: Mapping[str, Mapping[Any, int]]) -> PositionBound:
        """The bound of an answer's ``input_position`` (``{topic: {partition: offset}}``):
        a later read sees at least what that answer saw."""
        return cls(
            {
                (topic, int(partition)): int(offset)
                for topic, parts in position.items()
                for partition, offset in parts.items()
            }
        )

    def merge(self, other: PositionBound) -> PositionBound:
        """Both bounds: per (topic, partition) the larger offset."""
        offsets = dict(self._offsets)
        for key, offset in other._offsets.items():
            offsets[key] = max(offsets.get(key, -1), offset)
        return PositionBound(offsets)

    def entries(self) -> list[tuple[str, int, int]]:
        """``(topic, partition, offset)``, sorted."""
        return sorted((t, p, o) for (t, p), o in self._offsets.items())

    def topics(self) -> set[str]:
        """The topics the bound names."""
        return {topic for topic, _ in self._offsets}

    def __bool__(self) -> bool:
        return bool(self._offsets)

    def __str__(self) -> str:
        return ",".join(f"{t}:{p}:{o}" for t, p, o in self.entries())

    def __repr__(self) -> str:
        return f"PositionBound({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PositionBound) and self._offsets == other._offsets

    def __hash__(self) -> int:
        return hash(frozenset(self._offsets.items()))


def as_bound(
    value: PositionBound | str | Iterable[tuple[str, int, int]] | None,
) -> PositionBound | None:
    """A client's ``position_bound=``: a :class:`PositionBound`, its text, or
    ``(topic, partition, offset)`` entries (None or empty: no bound)."""
    if value is None:
        return None
    if isinstance(value, PositionBound):
        bound = value
    elif isinstance(value, str):
        bound = PositionBound.parse(value)
    else:
        bound = PositionBound({})
        for topic, partition, offset in value:
            bound = bound.merge(PositionBound.at(topic, partition, offset))
    return bound or None


def _check(topic: object, partition: object, offset: object) -> None:
    if not isinstance(topic, str) or not topic or ":" in topic or "," in topic:
        raise BadQueryError(f"{PARAMETER}: topic {topic!r} is not a topic name")
    for name, value in (("partition", partition), ("offset", offset)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadQueryError(
                f"{PARAMETER}: {name} {value!r} of topic {topic!r} is not a whole number >= 0"
            )
