"""Sink nodes: serialize a record with the sink's serdes, pick its topic and partition, send it.

Kafka Streams' ``SinkNode`` and the serializing half of ``RecordCollectorImpl.send``: the
serialized record goes to the task's :class:`~processor_api.engine.records.RecordCollector`.
A key or value the sink's serde cannot serialize goes to ``on_serialization_error`` (the
production exception handler); a topic extractor or partitioner failing is a processing error.

Also the raw store-to-sink path of ``forward_all``: stored bytes produced as they are when the
store's serdes and the sink's have the same wire format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal

from processor_api.engine.records import OutputRecord, RecordCollector
from processor_api.errors import ProcessingError, RecordSendError, StreamsError
from processor_api.processor import Record
from processor_api.serde import Serde
from processor_api.state.key_value import KeyValueStore
from processor_api.topology.nodes import SinkNode as SinkDefinition

if TYPE_CHECKING:
    from processor_api.engine.nodes import ProcessorNode

SerializationOrigin = Literal["key", "value", "send"]

OnSerializationError = Callable[["SinkNode", Record, Exception, SerializationOrigin], None]
"""``on_error(sink, record, exc, origin)``: raises to fail, returns to drop the record."""


#: Raw store entries are handed to a collector's ``send_values`` in lists of this many.
_RAW_CHUNK = 4096


def sink_error(sink_name: str, exc: Exception, origin: str | None = None) -> ProcessingError:
    """The error of a sink that cannot serialize, route or send a record (``exc``)."""
    what = "send" if origin == "send" else "serialize or route"
    return ProcessingError(f"sink could not {what} the record: {exc}", processor=sink_name)


def _raise_sink_error(sink: SinkNode, record: Record, exc: Exception, origin: str) -> None:
    raise sink_error(sink.name, exc) from exc


def _same_wire_format(a: Serde, b: Serde) -> bool:
    """Whether bytes written with serde ``a`` can go out as serde ``b`` would write them."""
    return a.passthrough and a.__class__ is b.__class__


class SinkNode:
    """The running sink of one task: where records leave the sub-topology."""

    __slots__ = (
        "name",
        "topic",
        "partitioner",
        "key_serde",
        "value_serde",
        "collector",
        "_definition",
        "_on_serialization_error",
        "_registry",
        "_per_topic",
    )

    def __init__(
        self,
        definition: SinkDefinition,
        collector: RecordCollector,
        on_serialization_error: OnSerializationError = _raise_sink_error,
        registry: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = definition.name
        self.topic = definition.topic  # None: a topic extractor decides per record
        self.partitioner = definition.partitioner
        self.key_serde = definition.key_serde
        self.value_serde = definition.value_serde
        self.collector = collector
        self._definition = definition
        self._on_serialization_error = on_serialization_error
        self._registry = registry
        # Serdes whose bytes depend on the topic (Schema Registry subjects) are bound once to
        # a fixed topic; with a topic extractor, once per topic met (None: plain serdes).
        self._per_topic: dict[str, tuple[Serde, Serde]] | None = None
        if self.key_serde.topic_aware or self.value_serde.topic_aware:
            if self.topic is not None:
                self.key_serde = self.key_serde.for_topic(self.topic, True, registry)
                self.value_serde = self.value_serde.for_topic(self.topic, False, registry)
            else:
                self._per_topic = {}

    def send(self, record: Record) -> None:
        """Serialize ``record`` and hand it to the collector."""
        topic = self.topic
        partition = None
        if topic is None or self.partitioner is not None:
            try:
                topic = self._definition.topic_for(record)
                if self.partitioner is not None:
                    partition = self._partition(topic, record)
            except ProcessingError:
                raise
            except Exception as exc:
                raise sink_error(self.name, exc) from exc
        if self._per_topic is None:
            key_serde, value_serde = self.key_serde, self.value_serde
        else:
            key_serde, value_serde = self._serdes_for(topic)
        try:
            key = key_serde.serialize(record.key)
        except ProcessingError:
            raise
        except Exception as exc:
            self._on_serialization_error(self, record, exc, "key")
            return
        try:
            value = value_serde.serialize(record.value)
        except ProcessingError:
            raise
        except Exception as exc:
            self._on_serialization_error(self, record, exc, "value")
            return
        try:
            self.collector.send(
                OutputRecord(topic, key, value, record.timestamp, record.headers, partition)
            )
        except RecordSendError as exc:
            self._on_serialization_error(self, record, exc, "send")

    def _serdes_for(self, topic: str) -> tuple[Serde, Serde]:
        serdes = self._per_topic.get(topic)  # type: ignore[union-attr]
        if serdes is None:
            serdes = (
                self.key_serde.for_topic(topic, True, self._registry),
                self.value_serde.for_topic(topic, False, self._registry),
            )
            self._per_topic[topic] = serdes  # type: ignore[index]
        return serdes

    def _partition(self, topic: str, record: Record) -> int | None:
        count = self.collector.partition_count(topic)
        partition = self.partitioner(topic, record.key, record.value, count)  # type: ignore[misc]
        if partition is not None and not 0 <= partition < count:
            raise StreamsError(
                f"partitioner returned partition {partition} for topic {topic!r} "
                f"with {count} partitions"
            )
        return partition

    # ---------------------------------------------------------- raw fast path
    def takes_raw_from(self, store: KeyValueStore) -> bool:
        """Whether ``store``'s raw bytes may go out through this sink as they are.

        That is: a fixed topic, no partitioner, and key and value serdes of the store's
        built-in kind (see ``Serde.passthrough``).
        """
        return (
            self.topic is not None
            and self.partitioner is None
            and _same_wire_format(store.key_serde, self.key_serde)
            and _same_wire_format(store.value_serde, self.value_serde)
        )

    @staticmethod
    def passthrough_sinks(
        targets: Sequence[ProcessorNode], store: KeyValueStore
    ) -> list[SinkNode] | None:
        """The sinks of ``targets`` when all are sinks that take ``store``'s raw bytes."""
        sinks = []
        for target in targets:
            sink = target.sink
            if sink is None or not sink.takes_raw_from(store):
                return None
            sinks.append(sink)
        return sinks

    @staticmethod
    def send_raw(
        store: KeyValueStore,
        entries: Iterator[tuple[bytes, bytes]],
        timestamp: int,
        sinks: list[SinkNode],
    ) -> int:
        """Produce raw store entries through ``sinks`` (no deserialize/serialize round trip).

        An entry whose bytes the serde does not pass through as they are (e.g. not UTF-8 for
        a string serde) takes the normal path, so it fails (or not) exactly as ``forward()``
        would. Returns the number of entries.
        """
        collector = sinks[0].collector
        send_values = getattr(collector, "send_values", None)
        key_serde, value_serde = store.key_serde, store.value_serde
        if (
            send_values is not None
            and len(sinks) == 1
            and (key_serde.passthrough_check is None or key_serde.passthrough_check_all)
            and (value_serde.passthrough_check is None or value_serde.passthrough_check_all)
        ):
            return SinkNode._send_raw_chunks(store, entries, timestamp, sinks[0], send_values)
        return SinkNode._send_raw_each(store, entries, timestamp, sinks)

    @staticmethod
    def _send_raw_chunks(
        store: KeyValueStore,
        entries: Iterator[tuple[bytes, bytes]],
        timestamp: int,
        sink: SinkNode,
        send_values: Callable[[str, list[tuple[bytes, bytes]], int], None],
    ) -> int:
        """One sink whose collector takes lists: checked and handed over a chunk at a time."""
        key_all = store.key_serde.passthrough_check_all
        value_all = store.value_serde.passthrough_check_all
        topic = sink.topic
        take = getattr(entries, "next_chunk", None) or (lambda n: list(islice(entries, n)))
        count = 0
        while chunk := take(_RAW_CHUNK):
            count += len(chunk)
            if key_all is not None or value_all is not None:
                keys, values = zip(*chunk, strict=True)
                if (key_all is not None and not key_all(keys)) or (
                    value_all is not None and not value_all(values)
                ):
                    SinkNode._send_raw_each(store, iter(chunk), timestamp, [sink])
                    continue
            while chunk:
                try:
                    send_values(topic, chunk, timestamp)  # type: ignore[arg-type]
                    break
                except RecordSendError as exc:
                    if exc.index is None:
                        raise
                    # the entries before it went out; this one goes to the handler
                    refused = store.entry_from_bytes(*chunk[exc.index])
                    record = Record(refused.key, refused.value, timestamp)
                    sink._on_serialization_error(sink, record, exc, "send")
                    chunk = chunk[exc.index + 1 :]
        return count

    @staticmethod
    def _send_raw_each(
        store: KeyValueStore,
        entries: Iterator[tuple[bytes, bytes]],
        timestamp: int,
        sinks: list[SinkNode],
    ) -> int:
        """Entry by entry: each checked, and sent raw or through the typed path."""
        key_check = store.key_serde.passthrough_check
        value_check = store.value_serde.passthrough_check
        topics = [sink.topic for sink in sinks]
        send = sinks[0].collector.send
        topic = topics[0] if len(topics) == 1 else None
        count = 0
        for key, value in entries:
            count += 1
            if (key_check is None or key_check(key)) and (
                value_check is None or value_check(value)
            ):
                try:
                    if topic is not None:  # one sink, the usual case
                        send(OutputRecord(topic, key, value, timestamp, (), None))
                    else:
                        for each in topics:
                            send(OutputRecord(each, key, value, timestamp, (), None))  # type: ignore[arg-type]
                except RecordSendError as exc:
                    refused = store.entry_from_bytes(key, value)
                    sinks[0]._on_serialization_error(
                        sinks[0], Record(refused.key, refused.value, timestamp), exc, "send"
                    )
                continue
            typed = store.entry_from_bytes(key, value)
            record = Record(typed.key, typed.value, timestamp)
            for sink in sinks:
                sink.send(record)
        return count
