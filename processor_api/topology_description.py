"""``Topology.describe()``: the topology's structure in Kafka Streams' text format."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from processor_api.topology import ProcessorNode, SourceNode

if TYPE_CHECKING:
    from processor_api.topology import Topology


class TopologyDescription:
    """Structure of a :class:`Topology`; ``str()`` gives Kafka Streams' text format."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology
        self.subtopologies = topology.subtopologies()

    def __str__(self) -> str:
        nodes = self._topology.nodes
        children = {name: list(getattr(node, "children", [])) for name, node in nodes.items()}
        parents = {name: list(getattr(node, "parents", ())) for name, node in nodes.items()}
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
                return (
                    f"Source: {name} (topics: [{', '.join(node.topics)}])\n"
                    f"      --> {names(children[name])}"
                )
            if isinstance(node, ProcessorNode):
                return (
                    f"Processor: {name} (stores: [{', '.join(sorted(node.stores))}])\n"
                    f"      --> {names(children[name])}\n"
                    f"      <-- {names(parents[name])}"
                )
            if node.topic is not None:
                target = f"topic: {node.topic}"
            else:
                target = f"extractor class: {node.topic_extractor!r}"
            return f"Sink: {name} ({target})\n      <-- {names(parents[name])}"

        out = ["Topologies:\n "]
        for sub in self.subtopologies:
            body = "".join(f"    {render(n)}\n" for n in order(sub.node_names))
            out.append(f"  Sub-topology: {sub.id}\n{body}\n")
        return "".join(out)

    def __repr__(self) -> str:
        return str(self)
