"""``Topology.describe()``: the structure of a topology in Kafka Streams' text format.

Sub-topologies and global stores share one numbering (Kafka Streams numbers its node groups
by their first-added node); the text lists them by number. Within a sub-topology, nodes are
listed by decreasing subtree size, then name, as Kafka Streams' ``NodeComparator`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from processor_api.topology.nodes import (
    GlobalStoreNode,
    Node,
    ProcessorNode,
    SourceNode,
    SubTopology,
)

if TYPE_CHECKING:
    from processor_api.topology import Topology

ARROW_DOWN = "\n      --> "
ARROW_UP = "\n      <-- "


class TopologyDescription:
    """Structure of a :class:`Topology`; ``str()`` gives Kafka Streams' text format.

    ``subtopologies`` are the sub-topologies that run as tasks, ``global_stores`` the global
    stores (each a source and a processor that generate no task).
    """

    def __init__(self, topology: Topology) -> None:
        self._nodes: Mapping[str, Node] = topology.nodes
        self.subtopologies: list[SubTopology] = topology.subtopologies()
        self.global_stores: list[GlobalStoreNode] = topology.global_stores()

    def __str__(self) -> str:
        blocks: list[tuple[int, str]] = [
            (sub.id, self._render_subtopology(sub)) for sub in self.subtopologies
        ]
        blocks += [(store.id, _render_global_store(store)) for store in self.global_stores]
        return "Topologies:\n " + "".join(f"  {text}" for _, text in sorted(blocks))

    def _render_subtopology(self, sub: SubTopology) -> str:
        nodes = self._nodes
        children = {name: list(getattr(nodes[name], "children", [])) for name in sub.node_names}
        parents = {name: list(getattr(nodes[name], "parents", ())) for name in sub.node_names}
        size: dict[str, int] = {}

        def subtree_size(name: str) -> int:
            if name not in size:
                size[name] = 1 + sum(subtree_size(c) for c in children[name])
            return size[name]

        def order(names: Iterable[str]) -> list[str]:
            return sorted(names, key=lambda n: (-subtree_size(n), n))

        def names(items: Iterable[str]) -> str:
            ordered = order(items)
            return ", ".join(ordered) if ordered else "none"

        def render(name: str) -> str:
            node = nodes[name]
            if isinstance(node, SourceNode):
                return f"Source: {name} (topics: [{', '.join(node.topics)}]){ARROW_DOWN}" + names(
                    children[name]
                )
            if isinstance(node, ProcessorNode):
                return (
                    f"Processor: {name} (stores: [{', '.join(sorted(node.stores))}])"
                    f"{ARROW_DOWN}{names(children[name])}{ARROW_UP}{names(parents[name])}"
                )
            if node.topic is not None:
                target = f"topic: {node.topic}"
            else:
                target = f"extractor class: {node.topic_extractor!r}"
            return f"Sink: {name} ({target}){ARROW_UP}{names(parents[name])}"

        body = "".join(f"    {render(n)}\n" for n in order(sub.node_names))
        return f"Sub-topology: {sub.id}\n{body}\n"

    def __repr__(self) -> str:
        return str(self)


def _render_global_store(store: GlobalStoreNode) -> str:
    source, processor = store.source, store.processor
    return (
        f"Sub-topology: {store.id} for global store (will not generate tasks)\n"
        f"    Source: {source.name} (topics: [{store.topic}]){ARROW_DOWN}{processor.name}\n"
        f"    Processor: {processor.name} (stores: [{store.store_name}])"
        f"{ARROW_DOWN}none{ARROW_UP}{source.name}\n"
    )
