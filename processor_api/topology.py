"""Topology: the DAG of sources, processors, stores and sinks, and its sub-topologies.

Nodes are added in order; each processor names existing parents, so every processor has a
path from a source. A sub-topology is a connected component of the DAG, where processors
sharing a state store count as connected; components are numbered by their first-added node.
A topic written by a sink and read by a source of the same topology is an *internal*
(repartition) topic: records cross sub-topologies through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from processor_api.errors import TopologyError
from processor_api.processor import Processor, Record
from processor_api.serdes import Serde, Serdes
from processor_api.state.builder import StoreBuilder

if TYPE_CHECKING:
    from processor_api.topology_description import TopologyDescription

TimestampExtractor = Callable[[Record, int], int]
"""``extractor(record, partition_time) -> timestamp``: record carries the Kafka timestamp."""

StreamPartitioner = Callable[[str, Any, Any, int], "int | None"]
"""``partitioner(topic, key, value, num_partitions) -> partition`` (None: default partitioning)."""

TopicNameExtractor = Callable[[Record], str]

OFFSET_RESET_POLICIES = ("earliest", "latest")


@dataclass
class SourceNode:
    name: str
    topics: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde
    timestamp_extractor: TimestampExtractor | None
    offset_reset: str
    children: list[str] = field(default_factory=list)


@dataclass
class ProcessorNode:
    name: str
    supplier: Callable[[], Processor]
    parents: tuple[str, ...]
    stores: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)


@dataclass
class SinkNode:
    name: str
    topic: str | None
    topic_extractor: TopicNameExtractor | None
    parents: tuple[str, ...]
    key_serde: Serde
    value_serde: Serde
    partitioner: StreamPartitioner | None

    def topic_for(self, record: Record) -> str:
        """The topic this record goes to."""
        if self.topic is not None:
            return self.topic
        assert self.topic_extractor is not None
        topic = self.topic_extractor(record)
        if not isinstance(topic, str) or not topic:
            raise TopologyError(
                f"topic extractor of sink {self.name!r} returned {topic!r}, expected a topic name"
            )
        return topic


Node = SourceNode | ProcessorNode | SinkNode


@dataclass
class SubTopology:
    """One connected component of the topology: the unit a task runs."""

    id: int
    node_names: tuple[str, ...]  # insertion order, which is a topological order
    sources: tuple[SourceNode, ...]
    processors: tuple[ProcessorNode, ...]
    sinks: tuple[SinkNode, ...]
    store_names: tuple[str, ...]

    @property
    def source_topics(self) -> tuple[str, ...]:
        return tuple(t for source in self.sources for t in source.topics)

    @property
    def sink_topics(self) -> tuple[str, ...]:
        return tuple(sink.topic for sink in self.sinks if sink.topic is not None)

    def task_id(self, partition: int) -> str:
        return f"{self.id}_{partition}"


def _supplier_of(name: str, supplier: Any) -> Callable[[], Processor]:
    if isinstance(supplier, Processor):
        raise TopologyError(
            f"processor {name!r}: pass a Processor class or a zero-argument factory, not an "
            "instance (each task needs its own processor objects)"
        )
    if not callable(supplier):
        raise TopologyError(f"processor {name!r}: supplier {supplier!r} is not callable")
    return supplier


class Topology:
    """A DAG of sources, processors, state stores and sinks (Kafka Streams' ``Topology``).

    Every ``add_*`` method validates its arguments, raises :class:`TopologyError` naming the
    node at fault, and returns the topology so calls can be chained.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}
        self._stores: dict[str, StoreBuilder] = {}
        self._store_users: dict[str, list[str]] = {}
        self._topic_to_source: dict[str, str] = {}

    # ----------------------------------------------------------------- building
    def add_source(
        self,
        name: str,
        *topics: str,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        offset_reset: str = "earliest",
    ) -> Topology:
        """Add a source node reading ``topics`` (serdes default to bytes)."""
        self._check_new_name(name)
        if not topics:
            raise TopologyError(f"source {name!r} must read at least one topic")
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise TopologyError(f"source {name!r}: invalid topic name {topic!r}")
            if topic in self._topic_to_source:
                raise TopologyError(
                    f"topic {topic!r} of source {name!r} is already read by source "
                    f"{self._topic_to_source[topic]!r}"
                )
        if len(set(topics)) != len(topics):
            raise TopologyError(f"source {name!r} lists a topic twice: {list(topics)}")
        if offset_reset not in OFFSET_RESET_POLICIES:
            raise TopologyError(
                f"source {name!r}: offset_reset must be one of {OFFSET_RESET_POLICIES}, "
                f"got {offset_reset!r}"
            )
        for topic in topics:
            self._topic_to_source[topic] = name
        self._nodes[name] = SourceNode(
            name=name,
            topics=tuple(topics),
            key_serde=key_serde or Serdes.bytes(),
            value_serde=value_serde or Serdes.bytes(),
            timestamp_extractor=timestamp_extractor,
            offset_reset=offset_reset,
        )
        return self

    def add_processor(self, name: str, supplier: Any, *parent_names: str) -> Topology:
        """Add a processor created by ``supplier`` (a class or zero-arg factory) under parents."""
        self._check_new_name(name)
        if not parent_names:
            raise TopologyError(
                f"processor {name!r} has no parent: it must be connected to a source or "
                "processor, or it would never receive records"
            )
        self._check_parents(name, parent_names)
        self._nodes[name] = ProcessorNode(name, _supplier_of(name, supplier), tuple(parent_names))
        for parent in parent_names:
            self._parent(parent).children.append(name)
        return self

    def add_state_store(self, builder: StoreBuilder, *processor_names: str) -> Topology:
        """Add a store and connect it to ``processor_names`` (which must exist already)."""
        if not isinstance(builder, StoreBuilder):
            raise TopologyError(f"add_state_store expects a StoreBuilder, got {builder!r}")
        store_name = builder.name
        if store_name in self._stores:
            raise TopologyError(f"state store {store_name!r} is already added")
        self._stores[store_name] = builder
        self._store_users[store_name] = []
        if processor_names:
            self._connect_many(processor_names, store_name)
        return self

    def connect_processor_and_state_stores(
        self, processor_name: str, *store_names: str
    ) -> Topology:
        """Give ``processor_name`` access to already-added stores."""
        if not store_names:
            raise TopologyError(f"processor {processor_name!r}: no store names given to connect")
        node = self._nodes.get(processor_name)
        if not isinstance(node, ProcessorNode):
            what = "is not a processor" if node is not None else "does not exist"
            raise TopologyError(
                f"cannot connect stores {list(store_names)} to {processor_name!r}: that node {what}"
            )
        for store_name in store_names:
            if store_name not in self._stores:
                raise TopologyError(
                    f"cannot connect processor {processor_name!r} to state store "
                    f"{store_name!r}: the store is not added"
                )
            if store_name not in node.stores:
                node.stores.append(store_name)
                self._store_users[store_name].append(processor_name)
        return self

    def _connect_many(self, processor_names: Iterable[str], store_name: str) -> Topology:
        for processor_name in processor_names:
            self.connect_processor_and_state_stores(processor_name, store_name)
        return self

    def add_sink(
        self,
        name: str,
        topic: str | TopicNameExtractor,
        *parent_names: str,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        partitioner: StreamPartitioner | None = None,
    ) -> Topology:
        """Add a sink writing its parents' records to ``topic`` (or a per-record topic)."""
        self._check_new_name(name)
        if not parent_names:
            raise TopologyError(f"sink {name!r} has no parent: it would never receive records")
        self._check_parents(name, parent_names)
        if isinstance(topic, str):
            if not topic:
                raise TopologyError(f"sink {name!r}: empty topic name")
            static_topic, extractor = topic, None
        elif callable(topic):
            static_topic, extractor = None, topic
        else:
            raise TopologyError(f"sink {name!r}: topic must be a name or a callable, got {topic!r}")
        self._nodes[name] = SinkNode(
            name=name,
            topic=static_topic,
            topic_extractor=extractor,
            parents=tuple(parent_names),
            key_serde=key_serde or Serdes.bytes(),
            value_serde=value_serde or Serdes.bytes(),
            partitioner=partitioner,
        )
        for parent in parent_names:
            self._parent(parent).children.append(name)
        return self

    def _check_new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TopologyError(f"node name must be a non-empty string, got {name!r}")
        if name in self._nodes:
            raise TopologyError(f"a node named {name!r} is already added")

    def _check_parents(self, name: str, parent_names: tuple[str, ...]) -> None:
        for parent in parent_names:
            if parent == name:
                raise TopologyError(f"node {name!r} cannot be its own parent")
            node = self._nodes.get(parent)
            if node is None:
                raise TopologyError(f"parent {parent!r} of node {name!r} is not added yet")
            if isinstance(node, SinkNode):
                raise TopologyError(f"sink {parent!r} cannot be the parent of node {name!r}")
        if len(set(parent_names)) != len(parent_names):
            raise TopologyError(f"node {name!r} lists a parent twice: {list(parent_names)}")

    def _parent(self, name: str) -> SourceNode | ProcessorNode:
        node = self._nodes[name]
        assert not isinstance(node, SinkNode)
        return node

    # ---------------------------------------------------------------- queries
    @property
    def nodes(self) -> dict[str, Node]:
        return dict(self._nodes)

    @property
    def store_builders(self) -> dict[str, StoreBuilder]:
        return dict(self._stores)

    def source_topics(self) -> list[str]:
        return list(self._topic_to_source)

    def sink_topics(self) -> list[str]:
        return [
            n.topic for n in self._nodes.values() if isinstance(n, SinkNode) and n.topic is not None
        ]

    def internal_topics(self) -> list[str]:
        """Topics this topology both writes (static sink topic) and reads: repartition topics."""
        read = set(self._topic_to_source)
        return sorted({t for t in self.sink_topics() if t in read})

    def source_node_for_topic(self, topic: str) -> SourceNode | None:
        name = self._topic_to_source.get(topic)
        return None if name is None else self._nodes[name]  # type: ignore[return-value]

    def sink_for_topic(self, topic: str) -> SinkNode | None:
        """The first sink writing statically to ``topic`` (for default output serdes)."""
        for node in self._nodes.values():
            if isinstance(node, SinkNode) and node.topic == topic:
                return node
        return None

    def subtopologies(self) -> list[SubTopology]:
        """The connected components, numbered in node-insertion order."""
        self._validate()
        parent_of: dict[str, str] = {name: name for name in self._nodes}

        def find(name: str) -> str:
            while parent_of[name] != name:
                parent_of[name] = parent_of[parent_of[name]]
                name = parent_of[name]
            return name

        def union(a: str, b: str) -> None:
            root_a, root_b = find(a), find(b)
            if root_a != root_b:
                parent_of[root_b] = root_a

        for node in self._nodes.values():
            if isinstance(node, (ProcessorNode, SinkNode)):
                for parent in node.parents:
                    union(node.name, parent)
        for users in self._store_users.values():
            for other in users[1:]:
                union(users[0], other)

        groups: dict[str, list[str]] = {}
        for name in self._nodes:  # dicts keep insertion order
            groups.setdefault(find(name), []).append(name)
        result = []
        for sub_id, names in enumerate(groups.values()):
            nodes = [self._nodes[n] for n in names]
            stores: list[str] = []
            for node in nodes:
                if isinstance(node, ProcessorNode):
                    stores.extend(s for s in node.stores if s not in stores)
            result.append(
                SubTopology(
                    id=sub_id,
                    node_names=tuple(names),
                    sources=tuple(n for n in nodes if isinstance(n, SourceNode)),
                    processors=tuple(n for n in nodes if isinstance(n, ProcessorNode)),
                    sinks=tuple(n for n in nodes if isinstance(n, SinkNode)),
                    store_names=tuple(stores),
                )
            )
        return result

    def _validate(self) -> None:
        if not any(isinstance(n, SourceNode) for n in self._nodes.values()):
            raise TopologyError("the topology has no source: add_source() first")
        for store_name, users in self._store_users.items():
            if not users:
                raise TopologyError(f"state store {store_name!r} is not connected to any processor")

    def describe(self) -> TopologyDescription:
        """A description whose ``str()`` is Kafka Streams' ``TopologyDescription`` text."""
        from processor_api.topology_description import TopologyDescription

        return TopologyDescription(self)
