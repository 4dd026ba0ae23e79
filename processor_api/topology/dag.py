"""Topology: the DAG of sources, processors, stores and sinks, and its sub-topologies.

Nodes are added in order; each processor names existing parents, so every processor has a
path from a source. A sub-topology is a connected component of the DAG, where processors
sharing a state store count as connected; components are numbered by their first-added node,
global stores included (each takes a number but generates no task, as in Kafka Streams).
A topic written by a sink and read by a source of the same topology is an *internal*
(repartition) topic: records cross sub-topologies through it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from processor_api.errors import TopologyError
from processor_api.serdes import Serde, Serdes
from processor_api.state.builder import StoreBuilder
from processor_api.topology import grouping
from processor_api.topology.description import TopologyDescription
from processor_api.topology.nodes import (
    OFFSET_RESET_POLICIES,
    GlobalStoreNode,
    Node,
    ProcessorNode,
    SinkNode,
    SourceNode,
    StreamPartitioner,
    SubTopology,
    TimestampExtractor,
    TopicNameExtractor,
    as_deserializer,
    global_store_node,
    supplier_of,
    topic_name_problem,
)

__all__ = ["Topology"]


class Topology:
    """A DAG of sources, processors, state stores and sinks (Kafka Streams' ``Topology``).

    Every ``add_*`` method validates its arguments, raises :class:`TopologyError` naming the
    node, store or topic at fault, and returns the topology so calls can be chained.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}
        self._stores: dict[str, StoreBuilder] = {}
        self._store_users: dict[str, list[str]] = {}
        self._topic_to_source: dict[str, str] = {}
        self._global: dict[str, GlobalStoreNode] = {}  # by store name
        self._source_changelogs: dict[str, str] = {}  # read-only store -> its source topic
        self._order: dict[str, int] = {}  # every node name, global ones too -> add order

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
            self._check_topic_free(name, topic)
        if len(set(topics)) != len(topics):
            raise TopologyError(f"source {name!r} lists a topic twice: {list(topics)}")
        if offset_reset not in OFFSET_RESET_POLICIES:
            raise TopologyError(
                f"source {name!r}: offset_reset must be one of {OFFSET_RESET_POLICIES}, "
                f"got {offset_reset!r}"
            )
        for topic in topics:
            self._topic_to_source[topic] = name
        self._add_node(
            SourceNode(
                name=name,
                topics=tuple(topics),
                key_serde=key_serde or Serdes.bytes(),
                value_serde=value_serde or Serdes.bytes(),
                timestamp_extractor=timestamp_extractor,
                offset_reset=offset_reset,
            )
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
        self._add_node(ProcessorNode(name, supplier_of(name, supplier), tuple(parent_names)))
        for parent in parent_names:
            self._parent(parent).children.append(name)
        return self

    def add_state_store(self, builder: StoreBuilder, *processor_names: str) -> Topology:
        """Add a store and connect it to ``processor_names`` (which must exist already).

        Adding the same builder again connects the store to more processors, as in Kafka
        Streams; another builder with an already added store's name is an error.
        """
        if not isinstance(builder, StoreBuilder):
            raise TopologyError(f"add_state_store expects a StoreBuilder, got {builder!r}")
        store_name = builder.name
        if store_name in self._global:
            raise TopologyError(f"a global state store named {store_name!r} is already added")
        known = self._stores.get(store_name)
        if known is not None and known is not builder:
            raise TopologyError(
                f"a different state store builder named {store_name!r} is already added"
            )
        if known is None:
            self._stores[store_name] = builder
            self._store_users[store_name] = []
        for processor_name in processor_names:
            self.connect_processor_and_state_stores(processor_name, store_name)
        return self

    def add_global_store(
        self,
        store_builder: StoreBuilder,
        source_name: str,
        topic: str,
        processor_name: str,
        state_update_supplier: Any,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> Topology:
        """Add a global store filled from every partition of ``topic`` (Kafka Streams'
        ``addGlobalStore``).

        Source ``source_name`` reads ``topic`` with ``key_serde``/``value_serde`` (None: bytes)
        and hands each record to processor ``processor_name`` (made by
        ``state_update_supplier``), which keeps the store up to date. The topic is the store's
        changelog: the builder must have logging disabled. Every task's processors read the
        store with ``context.get_state_store(name)`` without being connected to it; only the
        global processor writes it. ``timestamp_extractor`` stamps the records the global
        processor gets (default: their Kafka timestamp).

        Kafka Streams' positional order is accepted too: ``(store_builder, source_name,
        key_serde, value_serde, topic, processor_name, state_update_supplier)``. A topic is
        always a ``str`` and a serde never is, so the third argument tells the two apart.
        """
        topic, processor_name, supplier, key_serde, value_serde = _fed_store_arguments(
            "add_global_store", topic, processor_name, state_update_supplier, key_serde,
            value_serde,
        )  # fmt: skip
        store_name = self._check_fed_store("add_global_store", store_builder, source_name,
                                           processor_name, topic)  # fmt: skip
        node = global_store_node(
            store_builder, source_name, key_serde, value_serde, topic,
            processor_name, supplier, timestamp_extractor,
        )  # fmt: skip
        self._global[store_name] = node
        self._order[source_name] = len(self._order)
        self._order[processor_name] = len(self._order)
        return self

    def add_read_only_state_store(
        self,
        store_builder: StoreBuilder,
        source_name: str,
        topic: str,
        processor_name: str,
        state_update_supplier: Any,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> Topology:
        """Add a read-only state store fed by ``topic`` (Kafka Streams' ``addReadOnlyStateStore``).

        Unlike a global store it is an ordinary store of the tasks of its own sub-topology
        (one per partition of ``topic``): source ``source_name`` (offset reset ``earliest``)
        hands the records to processor ``processor_name``, which keeps the store up to date.
        Logging is disabled: the topic is the store's changelog, so after a loss of local
        state the store is restored from the topic as it is (the processor must store the
        records' bytes unchanged, as in Kafka Streams); the topic should be compacted.
        Arguments as :meth:`add_global_store`, Kafka Streams' positional order included.
        """
        topic, processor_name, supplier, key_serde, value_serde = _fed_store_arguments(
            "add_read_only_state_store", topic, processor_name, state_update_supplier,
            key_serde, value_serde,
        )  # fmt: skip
        store_name = self._check_fed_store("add_read_only_state_store", store_builder,
                                           source_name, processor_name, topic)  # fmt: skip
        supplier = supplier_of(processor_name, supplier)
        store_builder.with_logging_disabled()
        self.add_source(
            source_name,
            topic,
            key_serde=as_deserializer(source_name, "key", key_serde),
            value_serde=as_deserializer(source_name, "value", value_serde),
            timestamp_extractor=timestamp_extractor,
            offset_reset="earliest",
        )
        self.add_processor(processor_name, supplier, source_name)
        self.add_state_store(store_builder, processor_name)
        self._source_changelogs[store_name] = topic
        return self

    def _check_fed_store(
        self, method: str, builder: Any, source_name: str, processor_name: str, topic: Any
    ) -> str:
        """The checks a global or read-only store shares; returns the store name."""
        if not isinstance(builder, StoreBuilder):
            raise TopologyError(f"{method} expects a StoreBuilder, got {builder!r}")
        store_name = builder.name
        if store_name in self._stores or store_name in self._global:
            raise TopologyError(f"{method}: a state store named {store_name!r} is already added")
        for name in (source_name, processor_name):
            self._check_new_name(name)
        if source_name == processor_name:
            raise TopologyError(
                f"{method} (store {store_name!r}): the source and the processor need different "
                f"names, both are {source_name!r}"
            )
        self._check_topic_free(source_name, topic)
        return store_name

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
            if store_name in self._global:
                raise TopologyError(
                    f"global state store {store_name!r} can be used by processor "
                    f"{processor_name!r} without being connected: do not connect it"
                )
            if store_name not in self._stores:
                raise TopologyError(
                    f"cannot connect processor {processor_name!r} to state store "
                    f"{store_name!r}: the store is not added"
                )
            if store_name not in node.stores:
                node.stores.append(store_name)
                self._store_users[store_name].append(processor_name)
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
            _check_topic_name(f"sink {name!r}", topic)
            static_topic, extractor = topic, None
        elif callable(topic):
            static_topic, extractor = None, topic
        else:
            raise TopologyError(f"sink {name!r}: topic must be a name or a callable, got {topic!r}")
        self._add_node(
            SinkNode(
                name=name,
                topic=static_topic,
                topic_extractor=extractor,
                parents=tuple(parent_names),
                key_serde=key_serde or Serdes.bytes(),
                value_serde=value_serde or Serdes.bytes(),
                partitioner=partitioner,
            )
        )
        for parent in parent_names:
            self._parent(parent).children.append(name)
        return self

    def _add_node(self, node: Node) -> None:
        self._nodes[node.name] = node
        self._order[node.name] = len(self._order)

    def _check_new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TopologyError(f"node name must be a non-empty string, got {name!r}")
        if name in self._order:
            raise TopologyError(f"a node named {name!r} is already added")

    def _check_topic_free(self, source: str, topic: Any) -> None:
        _check_topic_name(f"source {source!r}", topic)
        other = self._topic_to_source.get(topic) or self._global_sources().get(topic)
        if other is not None:
            raise TopologyError(
                f"topic {topic!r} of source {source!r} is already read by source {other!r}"
            )

    def _check_parents(self, name: str, parent_names: tuple[str, ...]) -> None:
        grouping.check_parents(self._nodes, self._order, name, parent_names)

    def _parent(self, name: str) -> SourceNode | ProcessorNode:
        node = self._nodes[name]
        assert not isinstance(node, SinkNode)
        return node

    # ---------------------------------------------------------------- queries
    @property
    def nodes(self) -> dict[str, Node]:
        """The nodes of the sub-topologies (not those of global stores), in add order."""
        return dict(self._nodes)

    @property
    def store_builders(self) -> dict[str, StoreBuilder]:
        """The builders of the tasks' stores (global stores: :attr:`global_store_builders`)."""
        return dict(self._stores)

    @property
    def global_store_builders(self) -> dict[str, StoreBuilder]:
        """The builders of the global stores, by store name."""
        return {name: store.builder for name, store in self._global.items()}

    def global_stores(self) -> list[GlobalStoreNode]:
        """The global stores with their source, processor and Kafka Streams number."""
        ids = self._group_ids()
        return [replace(g, id=ids[g.source.name]) for g in self._global.values()]

    def global_topics(self) -> list[str]:
        """The topics global stores are filled from."""
        return list(self._global_sources())

    def _global_sources(self) -> dict[str, str]:
        return {g.topic: g.source.name for g in self._global.values()}

    def source_topics(self) -> list[str]:
        """The topics the sub-topologies' sources read (global stores' topics excluded)."""
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
        """The source reading ``topic``: a sub-topology's, or a global store's."""
        name = self._topic_to_source.get(topic)
        if name is not None:
            return self._nodes[name]  # type: ignore[return-value]
        for store in self._global.values():
            if store.topic == topic:
                return store.source
        return None

    def sink_for_topic(self, topic: str) -> SinkNode | None:
        """The first sink writing statically to ``topic`` (for default output serdes)."""
        for node in self._nodes.values():
            if isinstance(node, SinkNode) and node.topic == topic:
                return node
        return None

    def _group_ids(self) -> dict[str, int]:
        firsts = [
            group[0] for group in grouping.components(self._nodes, self._store_users.values())
        ]
        firsts += [g.source.name for g in self._global.values()]
        return grouping.group_ids(firsts, self._order)

    def subtopologies(self) -> list[SubTopology]:
        """The connected components that run as tasks, numbered in node-insertion order."""
        self._validate()
        ids = self._group_ids()
        return [
            grouping.make_subtopology(
                ids[names[0]], [self._nodes[n] for n in names], self._source_changelogs
            )
            for names in grouping.components(self._nodes, self._store_users.values())
        ]

    def _validate(self) -> None:
        if not self._global and not any(isinstance(n, SourceNode) for n in self._nodes.values()):
            raise TopologyError("the topology has no source: add_source() first")
        for store_name, users in self._store_users.items():
            if not users:
                raise TopologyError(f"state store {store_name!r} is not connected to any processor")

    def describe(self) -> TopologyDescription:
        """A description whose ``str()`` is Kafka Streams' ``TopologyDescription`` text."""
        return TopologyDescription(self)


def _check_topic_name(node: str, topic: Any) -> None:
    """Refuse a topic name Kafka would refuse, naming the node (e.g. ``"sink 'out'"``)."""
    problem = topic_name_problem(topic)
    if problem is not None:
        raise TopologyError(f"{node}: invalid topic name {topic!r}: {problem}")


def _fed_store_arguments(
    method: str, topic: Any, processor_name: Any, supplier: Any, key_serde: Any, value_serde: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """``(topic, processor_name, supplier, key_serde, value_serde)`` of a global or read-only
    store, from either the keyword form or Kafka Streams' positional order.

    In Kafka Streams' order the serdes come before the topic, so the parameters hold (key serde,
    value serde, topic, processor name, supplier) in that order. A topic is always a ``str``
    and a serde never is (None also means the bytes serde), so a non-``str`` third argument
    means Kafka Streams' order.
    """
    forms = (
        f"{method} takes (store_builder, source_name, topic, processor_name, "
        "state_update_supplier, key_serde=..., value_serde=...), or Kafka Streams' order "
        "(store_builder, source_name, key_serde, value_serde, topic, processor_name, "
        "state_update_supplier)"
    )
    if isinstance(topic, str):
        if not isinstance(processor_name, str):
            raise TypeError(
                f"{forms}: topic {topic!r} is followed by {processor_name!r}, not a processor "
                "name (a serde given as a str?)"
            )
        return topic, processor_name, supplier, key_serde, value_serde
    ks_key, ks_value, ks_topic, ks_processor, ks_supplier = (
        topic, processor_name, supplier, key_serde, value_serde,
    )  # fmt: skip
    if not isinstance(ks_topic, str) or not isinstance(ks_processor, str) or ks_supplier is None:
        raise TypeError(
            f"{forms}: the third argument {topic!r} is not a topic name and the rest does not "
            "match Kafka Streams' order"
        )
    return ks_topic, ks_processor, ks_supplier, ks_key, ks_value
