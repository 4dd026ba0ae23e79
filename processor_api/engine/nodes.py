"""The running node graph of one task: processor nodes, their children, ``forward()``.

Kafka Streams' ``ProcessorNode`` and ``ProcessorTopology`` in one place: the task builds a
:class:`NodeGraph` from its sub-topology (one processor instance per node, one
:class:`~processor_api.engine.sink.SinkNode` per sink) and every ``forward()`` is a
synchronous, depth-first call into the children.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from processor_api.engine.sink import SinkNode
from processor_api.errors import ProcessingError, StreamsError
from processor_api.processor import Processor, Record, _check_timestamp
from processor_api.state.key_value import KeyValueIterator
from processor_api.topology.nodes import ProcessorNode as ProcessorDefinition
from processor_api.topology.nodes import SinkNode as SinkDefinition
from processor_api.topology.nodes import SourceNode as SourceDefinition
from processor_api.topology.nodes import SubTopology

if TYPE_CHECKING:
    from processor_api.engine.context import ProcessorContextImpl


class ProcessorNode:
    """A node of the running sub-topology: a source or processor, or a sink (``sink`` set).

    A processor node has its processor instance, its context and the names of the stores it
    may use; a source node only has children.
    """

    __slots__ = (
        "name",
        "processor",
        "children",
        "children_by_name",
        "sink",
        "stores",
        "context",
        "schedule_count",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.processor: Processor | None = None
        self.children: list[ProcessorNode] = []
        self.children_by_name: dict[str, ProcessorNode] = {}
        self.sink: SinkNode | None = None
        self.stores: frozenset[str] = frozenset()
        self.context: ProcessorContextImpl | None = None
        self.schedule_count = 0  # how many schedule() calls it made (schedule keys)


def _not_a_record(node: ProcessorNode, forwarded: object) -> TypeError:
    return TypeError(
        f"processor {node.name!r} forwarded {type(forwarded).__name__}, expected a Record"
    )


class NodeGraph:
    """The nodes of one task, wired as the sub-topology says, and record forwarding.

    ``make_sink`` builds the running sink of a sink definition; ``make_context`` the context
    handed to a processor node's ``init()``.
    """

    def __init__(
        self,
        subtopology: SubTopology,
        make_sink: Callable[[SinkDefinition], SinkNode],
        make_context: Callable[[ProcessorNode], ProcessorContextImpl],
    ) -> None:
        self.subtopology = subtopology
        # The record a processor was given when it raised (the innermost one), for the
        # processing exception handler; None when the error did not come from process().
        self.failed_record: Record | None = None
        nodes = {name: ProcessorNode(name) for name in subtopology.node_names}
        definitions: dict[str, SourceDefinition | ProcessorDefinition | SinkDefinition] = {}
        for source in subtopology.sources:
            definitions[source.name] = source
        for processor in subtopology.processors:
            definitions[processor.name] = processor
        for sink in subtopology.sinks:
            definitions[sink.name] = sink
        for name, definition in definitions.items():
            node = nodes[name]
            if isinstance(definition, SinkDefinition):
                node.sink = make_sink(definition)
                continue
            node.children = [nodes[child] for child in definition.children]
            node.children_by_name = {child.name: child for child in node.children}
            if isinstance(definition, ProcessorDefinition):
                node.stores = frozenset(definition.stores)
                instance = definition.supplier()
                if not isinstance(instance, Processor):
                    raise StreamsError(
                        f"supplier of processor {name!r} returned {instance!r}, "
                        "expected a Processor instance"
                    )
                node.processor = instance
                node.context = make_context(node)
        self.nodes = nodes
        self.sources_by_topic: dict[str, tuple[SourceDefinition, ProcessorNode]] = {
            topic: (source, nodes[source.name])
            for source in subtopology.sources
            for topic in source.topics
        }

    def processor_nodes(self) -> list[ProcessorNode]:
        """The nodes that run a processor, in topology order."""
        nodes = self.nodes
        return [
            nodes[name] for name in self.subtopology.node_names if nodes[name].processor is not None
        ]

    def forward(self, node: ProcessorNode, record: Record, child: str | None) -> None:
        """Deliver ``record`` from ``node`` to all its children, or to ``child`` only."""
        if not isinstance(record, Record):
            raise _not_a_record(node, record)
        if child is None:
            deliver = self.deliver
            for target in node.children:
                deliver(target, record)
            return
        self.deliver(self.child(node, child), record)

    def check_forward(self, node: ProcessorNode, record: Record, child: str | None) -> None:
        """Raise what :meth:`forward` would raise before delivering ``record``: it is not a
        :class:`Record`, or ``child`` is not a child of ``node``."""
        if not isinstance(record, Record):
            raise _not_a_record(node, record)
        if child is not None:
            self.child(node, child)

    def child(self, node: ProcessorNode, name: str) -> ProcessorNode:
        """``node``'s child called ``name``; a ProcessingError naming both if there is none."""
        target = node.children_by_name.get(name)
        if target is None:
            raise ProcessingError(
                f"processor {node.name!r} forwarded to unknown child {name!r}; its children "
                f"are {sorted(node.children_by_name)}",
                processor=node.name,
            )
        return target

    def deliver(self, target: ProcessorNode, record: Record) -> None:
        """Hand ``record`` to one node: its sink, or its processor's ``process()``."""
        sink = target.sink
        if sink is not None:
            sink.send(record)
            return
        try:
            target.processor.process(record)  # type: ignore[union-attr]
        except ProcessingError:
            raise
        except Exception as exc:
            self.failed_record = record
            raise ProcessingError(
                f"process() raised {type(exc).__name__}: {exc}", processor=target.name
            ) from exc

    def forward_all(
        self,
        node: ProcessorNode,
        entries: Iterable[tuple[Any, Any]],
        timestamp: int,
        child: str | None,
    ) -> int:
        """``ProcessorContext.forward_all``: the raw store-to-sink path, else one record each."""
        _check_timestamp(timestamp)
        if child is None:
            targets = node.children
        else:
            target = node.children_by_name.get(child)
            targets = [] if target is None else [target]
        if targets and entries.__class__ is KeyValueIterator:
            raw = entries.raw_entries()
            if raw is not None:
                store, raw_entries = raw
                sinks = SinkNode.passthrough_sinks(targets, store)
                if sinks is not None:
                    return SinkNode.send_raw(store, raw_entries, timestamp, sinks)
        forward = self.forward
        count = 0
        for key, value in entries:
            forward(node, Record(key, value, timestamp), child)
            count += 1
        return count
