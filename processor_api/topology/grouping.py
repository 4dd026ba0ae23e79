"""How a topology's nodes are wired and fall into sub-topologies, and how those are numbered.

A sub-topology is a connected component of the DAG where processors sharing a state store
count as connected. Kafka Streams numbers its node groups by their first-added node; a
global store (its source and processor) is a node group too, so it takes a number, and the
task ids of later sub-topologies skip it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping

from processor_api.errors import TopologyError
from processor_api.topology.nodes import Node, ProcessorNode, SinkNode, SourceNode, SubTopology


def components(nodes: Mapping[str, Node], store_users: Iterable[list[str]]) -> list[list[str]]:
    """The connected components of ``nodes`` (each in add order), by their first node."""
    parent_of: dict[str, str] = {name: name for name in nodes}

    def find(name: str) -> str:
        while parent_of[name] != name:
            parent_of[name] = parent_of[parent_of[name]]
            name = parent_of[name]
        return name

    def union(a: str, b: str) -> None:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent_of[root_b] = root_a

    for node in nodes.values():
        if isinstance(node, (ProcessorNode, SinkNode)):
            for parent in node.parents:
                union(node.name, parent)
    for users in store_users:
        for other in users[1:]:
            union(users[0], other)
    groups: dict[str, list[str]] = {}
    for name in nodes:  # dicts keep insertion order
        groups.setdefault(find(name), []).append(name)
    return list(groups.values())


def group_ids(first_nodes: Iterable[str], order: Mapping[str, int]) -> dict[str, int]:
    """Number node groups by the add order of their first node: first node -> number."""
    firsts = sorted(first_nodes, key=order.__getitem__)
    return {name: number for number, name in enumerate(firsts)}


def make_subtopology(
    sub_id: int, nodes: list[Node], source_changelogs: Mapping[str, str]
) -> SubTopology:
    """The sub-topology ``sub_id`` of ``nodes`` (one component, in add order)."""
    stores: list[str] = []
    for node in nodes:
        if isinstance(node, ProcessorNode):
            stores.extend(s for s in node.stores if s not in stores)
    return SubTopology(
        id=sub_id,
        node_names=tuple(n.name for n in nodes),
        sources=tuple(n for n in nodes if isinstance(n, SourceNode)),
        processors=tuple(n for n in nodes if isinstance(n, ProcessorNode)),
        sinks=tuple(n for n in nodes if isinstance(n, SinkNode)),
        store_names=tuple(stores),
        source_changelogs={s: t for s, t in source_changelogs.items() if s in stores},
    )


def check_parents(
    nodes: Mapping[str, Node], all_names: Container[str], name: str, parent_names: tuple[str, ...]
) -> None:
    """``TopologyError`` unless every parent of node ``name`` is an added source or processor
    of a sub-topology (``all_names`` holds global stores' nodes too), listed once."""
    for parent in parent_names:
        if parent == name:
            raise TopologyError(f"node {name!r} cannot be its own parent")
        node = nodes.get(parent)
        if node is None:
            if parent in all_names:  # the source or processor of a global store
                raise TopologyError(
                    f"node {parent!r} of a global store cannot be the parent of node {name!r}"
                )
            raise TopologyError(f"parent {parent!r} of node {name!r} is not added yet")
        if isinstance(node, SinkNode):
            raise TopologyError(f"sink {parent!r} cannot be the parent of node {name!r}")
    if len(set(parent_names)) != len(parent_names):
        raise TopologyError(f"node {name!r} lists a parent twice: {list(parent_names)}")
