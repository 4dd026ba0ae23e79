"""processor_api: Kafka-Streams-style Processor topologies on Apache Spark.

Write :class:`Processor` subclasses, wire them into a :class:`Topology` with state stores
from :class:`Stores`, test them with ``processor_api.testing.TopologyTestDriver`` and run
them on Spark Structured Streaming with the ``run-topology`` command.
"""

from processor_api.error_handlers import (
    DeadLetterRecord,
    ErrorHandlerContext,
    HandlerResponse,
    HandlerResult,
)
from processor_api.errors import (
    ConfigError,
    ProcessingError,
    StoreError,
    StreamsError,
    TopologyError,
)
from processor_api.processor import (
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from processor_api.restore_listener import StateRestoreListener
from processor_api.serdes import Serde, Serdes, SerdeUnavailableError, SerializationError
from processor_api.state import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    KeyValue,
    KeyValueStore,
    SessionStore,
    SessionWindow,
    StoreBuilder,
    Stores,
    TimestampedKeyValueStore,
    TimestampedWindowStore,
    TimeWindow,
    ValueAndTimestamp,
    VersionedKeyValueStore,
    VersionedRecord,
    Windowed,
    WindowStore,
    WindowStoreIterator,
)
from processor_api.store_queries import read_store
from processor_api.topology import Topology
from processor_api.topology.description import TopologyDescription

__version__ = "0.1.0"

__all__ = [
    "PUT_RETURN_CODE_NOT_PUT",
    "PUT_RETURN_CODE_VALID_TO_UNDEFINED",
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
    "SerdeUnavailableError",
    "SerializationError",
    "StoreBuilder",
    "StoreError",
    "Stores",
    "StreamsError",
    "Topology",
    "TopologyDescription",
    "TopologyError",
    "SessionStore",
    "SessionWindow",
    "StateRestoreListener",
    "TimeWindow",
    "TimestampedKeyValueStore",
    "TimestampedWindowStore",
    "ValueAndTimestamp",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "WindowStore",
    "WindowStoreIterator",
    "Windowed",
    "read_store",
]
