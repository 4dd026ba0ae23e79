"""Which task holds a key of a store: Kafka Streams' ``queryMetadataForKey``.

A store belongs to one sub-topology, whose task ``<sub>_<p>`` holds the keys of input
partition ``p``. A key's partition is the one Java's default partitioner (and librdkafka's
``murmur2_random``) gives its bytes in the store's key serde, as for a record keyed by it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from processor_api.kafka.partitioner import default_partition
from processor_api.query.errors import BadQueryError, UnknownStoreError
from processor_api.query.position import PARAMETER, PositionBound
from processor_api.runtime.job import parse_task_id
from processor_api.state.builder import StoreBuilder
from processor_api.state.json_entries import parse_key
from processor_api.topology import Topology


@dataclass(frozen=True)
class StoreRoute:
    """A queryable store: its builder and its tasks, by partition."""

    name: str
    builder: StoreBuilder
    tasks: tuple[str, ...]
    #: The source topics of the store's sub-topology (what a position bound may name).
    inputs: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """The store's kind (``key-value``, ``window``, ...)."""
        return self.builder.kind

    def key_bytes(self, text: str, what: str = "key") -> bytes:
        """``text`` parsed as ``read-store`` parses keys, serialized with the store's key
        serde; ``BadQueryError`` when it does not fit."""
        from processor_api.errors import ConfigError

        try:
            key = parse_key(text, self.builder.key_serde, self.name, what)
        except ConfigError as exc:
            raise BadQueryError(str(exc)) from None
        data = self.builder.key_serde.serialize(key)
        if data is None:
            raise BadQueryError(f"{what} {text!r} serializes to nothing for store {self.name!r}")
        return bytes(data)

    def check_bound(self, bound: PositionBound) -> None:
        """``BadQueryError`` unless every topic ``bound`` names is an input of the store's
        sub-topology and every partition one of its tasks' (a bound it can never reach)."""
        for topic, partition, _ in bound.entries():
            if topic not in self.inputs:
                raise BadQueryError(
                    f"{PARAMETER}: topic {topic!r} is no input of store {self.name!r} "
                    f"(its tasks read {', '.join(self.inputs) or 'no topic'}); a bound names "
                    "the input topic the store's own tasks read"
                )
            if partition >= len(self.tasks):
                raise BadQueryError(
                    f"{PARAMETER}: partition {partition} of topic {topic!r}: store "
                    f"{self.name!r} has {len(self.tasks)} tasks (partitions 0-{len(self.tasks) - 1})"
                )

    def task_for(self, key: bytes) -> str:
        """The task holding the serialized ``key``."""
        return self.tasks[default_partition(key, len(self.tasks))]


class StoreRoutes:
    """The task stores of a topology and the tasks that hold them."""

    def __init__(self, topology: Topology, task_ids: Iterable[str]) -> None:
        by_sub: dict[int, list[tuple[int, str]]] = {}
        for task_id in task_ids:
            sub_id, partition = parse_task_id(task_id)
            by_sub.setdefault(sub_id, []).append((partition, task_id))
        self._routes: dict[str, StoreRoute] = {}
        for sub in topology.subtopologies():
            tasks = tuple(t for _, t in sorted(by_sub.get(sub.id, [])))
            for name in sub.store_names:
                builder = topology.store_builders[name]
                self._routes[name] = StoreRoute(name, builder, tasks, tuple(sub.source_topics))

    def route(self, store: str) -> StoreRoute:
        """The route of ``store``; ``UnknownStoreError`` naming the known ones otherwise."""
        route = self._routes.get(store)
        if route is None or not route.tasks:
            raise UnknownStoreError(
                f"no store {store!r} in this application; its stores: "
                f"{', '.join(sorted(self._routes)) or 'none'}"
            )
        return route

    def describe(self) -> list[dict[str, Any]]:
        """Every store: name, kind, tasks."""
        return [
            {"store": r.name, "kind": r.kind, "tasks": list(r.tasks)}
            for r in sorted(self._routes.values(), key=lambda r: r.name)
        ]


def encode_key(data: bytes) -> str:
    """Serialized key bytes as text for the wire (base64)."""
    return base64.b64encode(data).decode()
