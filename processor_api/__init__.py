"""processor_api: Kafka-Streams-style Processor topologies on Apache Spark.

Write :class:`Processor` subclasses, wire them into a :class:`Topology` with state stores
from :class:`Stores`, test them with ``processor_api.testing.TopologyTestDriver`` and run
them on Spark Structured Streaming with the ``run-topology`` command.
"""

from processor_api.errors import (
    ConfigError,
    ProcessingError,
    StoreError,
    StreamsError,
    TopologyError,
)
from processor_api.handlers import (
    DeadLetterRecord,
    ErrorHandlerContext,
    HandlerResponse,
    HandlerResult,
)
from processor_api.processor import (
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from processor_api.serdes import Serde, Serdes, SerializationError
from processor_api.state import KeyValue, KeyValueStore, StoreBuilder, Stores
from processor_api.topology import Topology, TopologyDescription

__version__ = "0.1.0"

__all__ = [
    "Cancellable",
    "ConfigError",
    "DeadLetterRecord",
    "ErrorHandlerContext",
    "HandlerResponse",
    "HandlerResult",
    "KeyValue",
    "KeyValueStore",
    "ProcessingError",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordMetadata",
    "Serde",
    "Serdes",
    "SerializationError",
    "StoreBuilder",
    "StoreError",
    "Stores",
    "StreamsError",
    "Topology",
    "TopologyDescription",
    "TopologyError",
]
