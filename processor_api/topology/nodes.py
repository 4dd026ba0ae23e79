"""The nodes of a :class:`~processor_api.topology.Topology` and what it is cut into.

Sources, processors and sinks are the definitions a topology holds; a :class:`SubTopology` is
one connected component that runs as tasks, a :class:`GlobalStoreNode` the source and
processor that keep one global store up to date (Kafka Streams' global "sub-topology" that
generates no task).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from processor_api.errors import TopologyError
from processor_api.processor import Processor, Record
from processor_api.serdes import Serde, Serdes

TimestampExtractor = Callable[[Record, int], int]
"""``extractor(record, partition_time) -> timestamp``: record carries the Kafka timestamp."""

StreamPartitioner = Callable[[str, Any, Any, int], "int | None"]
"""``partitioner(topic, key, value, num_partitions) -> partition`` (None: default partitioning)."""

TopicNameExtractor = Callable[[Record], str]

OFFSET_RESET_POLICIES = ("earliest", "latest")


#: The longest topic name Kafka accepts (``org.apache.kafka.common.internals.Topic``).
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


@lru_cache(maxsize=4096)
def topic_name_problem(name: object) -> str | None:
    """Why Kafka would refuse ``name`` as a topic name, or None if it is legal.

    Kafka's rule: a non-empty string of ASCII letters, digits, ``.``, ``_`` and ``-``, at most
    249 characters, and neither ``.`` nor ``..``. The embedded broker accepts more, so the
    topology checks names itself rather than leave it to the broker.
    """
    if not isinstance(name, str) or not name:
        return "a topic name must be a non-empty string"
    if name in (".", ".."):
        return "a topic name cannot be '.' or '..'"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"a topic name can be at most {MAX_TOPIC_NAME_LENGTH} characters long, "
            f"this one has {len(name)}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        illegal = "".join(sorted({c for c in name if not _LEGAL_TOPIC_NAME.fullmatch(c)}))
        return (
            "a topic name may contain only ASCII letters, digits, '.', '_' and '-', "
            f"not {illegal!r}"
        )
    return None


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
        problem = topic_name_problem(topic)
        if problem is not None:
            raise TopologyError(
                f"topic extractor of sink {self.name!r} returned {topic!r}, not a topic name "
                f"Kafka accepts: {problem}"
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
    #: Stores whose changelog is a source topic of the sub-topology (read-only state stores):
    #: store name -> topic.
    source_changelogs: dict[str, str] = field(default_factory=dict)

    @property
    def source_topics(self) -> tuple[str, ...]:
        return tuple(t for source in self.sources for t in source.topics)

    @property
    def sink_topics(self) -> tuple[str, ...]:
        return tuple(sink.topic for sink in self.sinks if sink.topic is not None)

    def task_id(self, partition: int) -> str:
        return f"{self.id}_{partition}"


@dataclass
class GlobalStoreNode:
    """A global store with the source and processor that keep it up to date.

    ``source`` reads every partition of its single topic, which is the store's changelog;
    ``processor`` gets each of its records and writes ``store_name``. ``id`` is the number
    Kafka Streams gives its node group (it takes a sub-topology number, but no task).
    """

    id: int
    store_name: str
    source: SourceNode
    processor: ProcessorNode
    builder: Any  # the StoreBuilder

    @property
    def topic(self) -> str:
        """The topic the store is filled from (all its partitions)."""
        return self.source.topics[0]


def supplier_of(name: str, supplier: Any) -> Callable[[], Processor]:
    """``supplier`` checked as the processor factory of node ``name``."""
    if isinstance(supplier, Processor):
        raise TopologyError(
            f"processor {name!r}: pass a Processor class or a zero-argument factory, not an "
            "instance (each task needs its own processor objects)"
        )
    if not callable(supplier):
        raise TopologyError(f"processor {name!r}: supplier {supplier!r} is not callable")
    return supplier


def as_deserializer(source: str, what: str, serde: Any) -> Serde:
    """The ``what`` ("key"/"value") deserializer of ``source``: a Serde, None meaning bytes."""
    if serde is None:
        return Serdes.bytes()
    if not callable(getattr(serde, "deserialize", None)):
        raise TopologyError(
            f"source {source!r}: the {what} deserializer must be a Serde (with deserialize()), "
            f"got {serde!r}"
        )
    return serde


def global_store_node(
    store_builder: Any,
    source_name: str,
    key_deserializer: Any,
    value_deserializer: Any,
    topic: str,
    processor_name: str,
    processor_supplier: Any,
    timestamp_extractor: TimestampExtractor | None,
) -> GlobalStoreNode:
    """The source and processor of a global store, checked (its number is set later)."""
    store_name = store_builder.name
    if store_builder.logging_enabled:
        raise TopologyError(
            f"state store {store_name!r} for a global store must not have logging enabled: its "
            f"topic {topic!r} is its changelog (call with_logging_disabled() on its builder)"
        )
    supplier = supplier_of(processor_name, processor_supplier)
    source = SourceNode(
        name=source_name,
        topics=(topic,),
        key_serde=as_deserializer(source_name, "key", key_deserializer),
        value_serde=as_deserializer(source_name, "value", value_deserializer),
        timestamp_extractor=timestamp_extractor,
        offset_reset="earliest",
        children=[processor_name],
    )
    processor = ProcessorNode(processor_name, supplier, (source_name,), stores=[store_name])
    return GlobalStoreNode(-1, store_name, source, processor, store_builder)
