"""Records the producer reported undeliverable after ``produce()`` returned, and which of
them an exception handler may decide on.

librdkafka reports such failures in the delivery report of each record (the callback served
by ``poll``/``flush``), e.g. ``_MSG_TIMED_OUT`` when ``message.timeout.ms`` ran out, or
``_UNKNOWN_PARTITION`` for a partition the topic does not have. As Kafka Streams'
``RecordCollectorImpl.recordSendError`` does, a failure is sorted by its kind:

* ``FATAL``: the producer is unusable (librdkafka's fatal errors), or retrying cannot help
  and dropping the record would hide a broken setup (authentication, authorization, an
  invalid topic, an unknown server error, an illegal state): never offered to a handler;
* ``FENCED``: another producer took the task over (fenced, invalid epoch or producer id,
  out-of-order sequence): never offered to a handler, the task is someone else's now;
* ``ABORTED``: the record was purged because the producer was purged or its transaction
  aborted: a follow-up of another error, not an error of its own;
* ``HANDLED``: everything else, offered to the production exception handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, cast

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message

from processor_api.errors import RecordDeliveryError

RawHeaders = tuple[tuple[str, "bytes | None"], ...]


class FailureKind(Enum):
    """How a failed delivery is dealt with (see the module docs)."""

    HANDLED = "handled"
    FATAL = "fatal"
    FENCED = "fenced"
    ABORTED = "aborted"


_FATAL_CODES = frozenset(
    {
        KafkaError._FATAL,
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.SECURITY_DISABLED,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.UNKNOWN,
        KafkaError.OFFSET_METADATA_TOO_LARGE,
        KafkaError._STATE,
    }
)
_FENCED_CODES = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.INVALID_PRODUCER_ID_MAPPING,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    }
)
_ABORTED_CODES = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})

_WHY_NOT_HANDLED = {
    FailureKind.FATAL: "a fatal error, not offered to the production exception handler",
    FailureKind.FENCED: "the producer was fenced: another instance took the task over; not "
    "offered to the production exception handler",
    FailureKind.ABORTED: "the record was purged by an abort or purge of the producer",
}


def failure_kind(error: KafkaError) -> FailureKind:
    """The kind of a delivery report's error (see the module docs)."""
    code = error.code()
    if code in _FENCED_CODES:
        return FailureKind.FENCED
    if error.fatal() or code in _FATAL_CODES:
        return FailureKind.FATAL
    if code in _ABORTED_CODES:
        return FailureKind.ABORTED
    return FailureKind.HANDLED


@dataclass(frozen=True)
class FailedDelivery:
    """One record the producer reported undeliverable, as its delivery report gives it.

    ``partition`` is ``None`` when the producer had not chosen one; ``timestamp`` ``None``
    when the report carries none (librdkafka gives no timestamp or headers for a record that
    failed before it was sent, e.g. to an unknown partition).
    """

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: RawHeaders
    timestamp: int | None
    error: KafkaError

    @classmethod
    def from_report(cls, error: KafkaError, message: Message) -> FailedDelivery:
        """The failed delivery a delivery report (``error``, ``message``) describes."""
        partition = message.partition()
        timestamp_type, timestamp = message.timestamp()
        return cls(
            topic=cast(str, message.topic()),  # a produced message has its topic
            partition=partition if partition is not None and partition >= 0 else None,
            key=message.key(),
            value=message.value(),
            headers=cast(RawHeaders, tuple(message.headers() or ())),  # list of (str, bytes)
            timestamp=None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp,
            error=error,
        )

    @property
    def kind(self) -> FailureKind:
        """Whether it may go to a handler (see :class:`FailureKind`)."""
        return failure_kind(self.error)

    def describe(self) -> str:
        """``delivery to topic 't' partition 3 failed: CODE: reason`` (plus why no handler
        got it, for a fatal, fenced or purged record)."""
        where = (
            f"partition {self.partition}"
            if self.partition is not None
            else "(no partition chosen yet)"
        )
        text = (
            f"delivery to topic {self.topic!r} {where} failed: "
            f"{self.error.name()}: {self.error.str()}"
        )
        why = _WHY_NOT_HANDLED.get(self.kind)
        if self.error.fatal():
            why = "fatal: the producer must be recreated"
        return f"{text} ({why})" if why else text

    def exception(self) -> RecordDeliveryError:
        """The exception a production exception handler is given for this record."""
        return RecordDeliveryError(
            self.describe(),
            topic=self.topic,
            partition=self.partition,
            code=self.error.name(),
            retriable=self.error.retriable(),
            kafka_error=self.error,
        )


class DeliveryFailureHandler(Protocol):
    """Decides on the failed deliveries of a flush that may go to a handler (all ``HANDLED``).

    It returns when every record may be dropped (it may have produced dead-letter records
    through the same producer, which the flush then waits for), and raises to fail.
    """

    def __call__(self, failures: Sequence[FailedDelivery]) -> None: ...


def flush_failure(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a producer's ``flush``/``poll`` raised, if it raised one.

    Without an ``error_cb`` confluent-kafka raises a fatal error (a fenced transactional
    producer, say) from ``flush``; a delivery callback it runs meanwhile fails with a
    ``SystemError`` whose cause is that error.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args:
            error = seen.args[0]
            if isinstance(error, KafkaError):
                return error
        seen = seen.__cause__ or seen.__context__
    return None


def producer_failure_text(error: KafkaError) -> str:
    """``the producer failed: CODE: reason (why no handler got it)``."""
    why = _WHY_NOT_HANDLED.get(
        failure_kind(error), "not offered to the production exception handler"
    )
    if error.code() == KafkaError._FENCED:
        why = _WHY_NOT_HANDLED[FailureKind.FENCED]
    return f"the producer failed while flushing: {error.name()}: {error.str()} ({why})"


def failures_text(failures: Sequence[FailedDelivery]) -> str:
    """The first failure described, with how many failed in all."""
    return f"{failures[0].describe()}; {len(failures)} record(s) failed in total"
