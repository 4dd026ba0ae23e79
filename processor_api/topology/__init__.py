"""The topology: the DAG a user builds, its nodes, how it falls into sub-topologies, its
description and how a user's topology is loaded from ``"module:function"``.

* :mod:`~processor_api.topology.dag`: :class:`Topology`, the DAG of sources, processors,
  stores and sinks;
* :mod:`~processor_api.topology.nodes`: the node definitions and :class:`SubTopology`;
* :mod:`~processor_api.topology.grouping`: how nodes are wired and grouped into
  sub-topologies, and how those are numbered;
* :mod:`~processor_api.topology.description`: :class:`TopologyDescription`
  (``Topology.describe()``);
* :mod:`~processor_api.topology.loader`: ``load_topology("module:function")``.
"""

from processor_api.topology.dag import Topology
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
)

__all__ = [
    "OFFSET_RESET_POLICIES",
    "GlobalStoreNode",
    "Node",
    "ProcessorNode",
    "SinkNode",
    "SourceNode",
    "StreamPartitioner",
    "SubTopology",
    "TimestampExtractor",
    "TopicNameExtractor",
    "Topology",
    "TopologyDescription",
]
