"""The test topics of :class:`~processor_api.testing.driver.TopologyTestDriver`: what pipes
records in (:class:`TestInputTopic`) and reads what the topology produced
(:class:`TestOutputTopic`), as in Kafka Streams' test utilities."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from processor_api.errors import StreamsError
from processor_api.processor import Record
from processor_api.serde import Serde
from processor_api.state.base import KeyValue

if TYPE_CHECKING:
    from processor_api.testing.driver import TopologyTestDriver

__all__ = ["NoSuchElementError", "TestInputTopic", "TestOutputTopic", "to_ms"]


class NoSuchElementError(LookupError):
    """Reading from an output topic that has no (more) records."""


def to_ms(value: int | timedelta) -> int:
    """``value`` in milliseconds (an int as it is, a timedelta converted)."""
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected milliseconds (int) or timedelta, got {value!r}")
    return value


class TestInputTopic:
    """Pipes records into one input topic of a :class:`TopologyTestDriver`."""

    __test__ = False

    def __init__(
        self,
        driver: TopologyTestDriver,
        topic: str,
        key_serde: Serde,
        value_serde: Serde,
        start_timestamp: int,
        auto_advance: int,
    ) -> None:
        self.topic = topic
        self._driver = driver
        registry = driver.config.schema_registry
        self._key_serde = key_serde.for_topic(topic, True, registry)
        self._value_serde = value_serde.for_topic(topic, False, registry)
        if auto_advance < 0:
            raise ValueError(
                f"topic {topic!r}: auto_advance must not be negative, got {auto_advance!r}"
            )
        self._current_time = start_timestamp
        self._auto_advance = auto_advance

    def pipe_input(
        self,
        key: Any,
        value: Any,
        timestamp: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
    ) -> None:
        """Send one record; without ``timestamp`` the topic's current time is used."""
        if timestamp is None:
            timestamp = self._current_time
            self._current_time += self._auto_advance
        record = Record(key, value, timestamp, tuple(headers or ()))  # validates
        self._driver._pipe(
            self.topic,
            self._key_serde.serialize(record.key),
            self._value_serde.serialize(record.value),
            record.timestamp,
            record.headers,
        )

    def pipe_record(self, record: Record) -> None:
        """Send a :class:`Record` as it is."""
        self.pipe_input(record.key, record.value, record.timestamp, record.headers)

    def pipe_key_value_list(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Send ``(key, value)`` pairs in order."""
        for key, value in pairs:
            self.pipe_input(key, value)

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        """Send values with null keys, in order."""
        for value in values:
            self.pipe_input(None, value)

    def advance_time(self, advance: int | timedelta) -> None:
        """Move this topic's current time (used for records piped without a timestamp);
        a negative ``advance`` is refused, as in Kafka Streams."""
        ms = to_ms(advance)
        if ms < 0:
            raise ValueError(f"topic {self.topic!r}: advance must not be negative, got {advance!r}")
        self._current_time += ms


class TestOutputTopic:
    """Reads what the topology produced to one topic, in order, deserialized."""

    __test__ = False

    def __init__(
        self, driver: TopologyTestDriver, topic: str, key_serde: Serde, value_serde: Serde
    ) -> None:
        self.topic = topic
        self._driver = driver
        registry = driver.config.schema_registry
        self._key_serde = key_serde.for_topic(topic, True, registry)
        self._value_serde = value_serde.for_topic(topic, False, registry)

    def read_record(self) -> Record:
        """The next record (key, value, timestamp, headers); raises NoSuchElementError if none."""
        raw = self._driver._take(self.topic)
        return Record(
            self._key_serde.deserialize(raw.key),
            self._value_serde.deserialize(raw.value),
            raw.timestamp,
            raw.headers,
        )

    def read_key_value(self) -> KeyValue:
        record = self.read_record()
        return KeyValue(record.key, record.value)

    def read_value(self) -> Any:
        return self.read_record().value

    def read_records_to_list(self) -> list[Record]:
        records = []
        while not self.is_empty():
            records.append(self.read_record())
        return records

    def read_key_values_to_list(self) -> list[KeyValue]:
        return [KeyValue(r.key, r.value) for r in self.read_records_to_list()]

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Latest value per key; a null key is an error (as in Kafka Streams)."""
        result: dict[Any, Any] = {}
        for record in self.read_records_to_list():
            if record.key is None:
                raise StreamsError(f"null key on topic {self.topic}: not allowed in a map")
            result[record.key] = record.value
        return result

    def is_empty(self) -> bool:
        return self._driver._queue_size(self.topic) == 0

    def get_queue_size(self) -> int:
        return self._driver._queue_size(self.topic)
