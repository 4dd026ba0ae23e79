"""Exception types raised by processor_api."""

from __future__ import annotations


class StreamsError(Exception):
    """Base class of every error raised by processor_api."""

    #: Everything known about the failure (e.g. a failed Spark query's Python and JVM stack
    #: traces) when the message is only its summary; ``run-topology`` writes it to a file.
    details: str | None = None


class TopologyError(StreamsError):
    """The topology is malformed: the message names the node, store or topic at fault."""


class SetupCheckError(TopologyError):
    """A processor's ``init()`` failed the setup check that ``run-topology`` runs on the
    driver before the run starts (an unknown state store, a bad punctuation schedule, a
    forward to an unknown child...): the message is the error the running task would raise,
    followed by the processor and task it was found in."""


class StoreError(StreamsError):
    """A state store was used wrongly (unknown, closed, not connected to the processor)."""


class ProcessingError(StreamsError):
    """A record could not be deserialized or processed.

    Carries the coordinates of the failing record so an operator can find it.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        processor: str | None = None,
        task_id: str | None = None,
    ) -> None:
        self.reason = message
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.processor = processor
        self.task_id = task_id
        where = ", ".join(
            f"{label}={value}"
            for label, value in (
                ("task", task_id),
                ("topic", topic),
                ("partition", partition),
                ("offset", offset),
                ("processor", processor),
            )
            if value is not None
        )
        super().__init__(f"{message} ({where})" if where else message)

    def with_coordinates(self, **coordinates: object) -> ProcessingError:
        """A copy with missing coordinates (topic, partition, offset, processor, task_id) filled."""
        merged = {
            name: getattr(self, name)
            for name in ("topic", "partition", "offset", "processor", "task_id")
        }
        for name, value in coordinates.items():
            if merged.get(name) is None:
                merged[name] = value
        error = type(self)(self.reason, **merged)
        error.__cause__ = self.__cause__
        return error


class ConfigError(StreamsError):
    """A configuration value or command-line argument is invalid."""


class TopologyLoadError(ConfigError):
    """Importing a ``MODULE:FUNCTION`` topology's module, or calling its function, raised.

    A setup error like any ``ConfigError`` (``run-topology`` exits 2); the exception the
    user's code raised is ``__cause__``.
    """


class BrokerUnavailableError(StreamsError):
    """No Kafka broker answered at the given address, or the embedded broker failed to start."""


class MissingTopicError(StreamsError):
    """One or more topics (or partitions) do not exist; ``topics`` names them."""

    def __init__(self, message: str, topics: tuple[str, ...] = ()) -> None:
        self.topics = topics
        super().__init__(message)


class TopicMismatchError(StreamsError):
    """An existing topic does not match what is required (e.g. its partition count)."""


class DeliveryError(StreamsError):
    """Records could not be produced: a delivery failed or was not acknowledged in time."""


class RecordDeliveryError(DeliveryError):
    """The producer reported one record undeliverable after ``produce()`` returned (in its
    delivery report): what the production exception handler gets for such a record.

    ``topic``; ``partition`` (``None``: the producer had not chosen one yet); ``code``, the
    librdkafka error name (``"_MSG_TIMED_OUT"``, ``"_UNKNOWN_PARTITION"``, ...);
    ``retriable``; ``kafka_error``, confluent-kafka's ``KafkaError`` itself.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int | None,
        code: str,
        retriable: bool,
        kafka_error: object = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.code = code
        self.retriable = retriable
        self.kafka_error = kafka_error
        super().__init__(message)


class RecordSendError(StreamsError):
    """The producer refused one record when it was sent (e.g. larger than
    ``message.max.bytes``): Kafka Streams hands such errors to the production exception
    handler. ``index``: the record's position in a list handed over at once, if it was one."""

    def __init__(self, message: str, index: int | None = None) -> None:
        self.index = index
        super().__init__(message)


class SourceReadError(StreamsError):
    """The Kafka source could not read a planned offset range; names topic, partition, offset."""

    def __init__(
        self, message: str, *, topic: str, partition: int, offset: int | None = None
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = f"topic={topic}, partition={partition}"
        if offset is not None:
            where += f", offset={offset}"
        super().__init__(f"{message} ({where})")


class StalledReadError(SourceReadError):
    """No record and no end of partition came from the broker within a read's stall timeout
    (the broker is unreachable or does not answer): worth retrying while a task may wait."""


class TaskTimeoutError(StreamsError):
    """A task waited for the broker longer than ``task.timeout.ms``; names the task, the broker,
    the client role and what it waited for."""


class WaitInterrupted(StreamsError):
    """A wait for the broker was cut short: the run stops, or the task moved elsewhere."""


class ProducerWedgedError(StreamsError):
    """A transactional producer's call did not return although its timeout ran out (a
    librdkafka bug while a coordinator is unreachable): its transaction is abandoned and the
    task goes on with a new producer, which fences the old one."""
