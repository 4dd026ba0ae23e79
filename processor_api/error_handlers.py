"""Exception handlers: what happens to a record that cannot be deserialized, processed or
produced (Kafka Streams' KIP-1033 and KIP-1034, in Pythonic form).

Three settings choose the handlers:

* ``deserialization.exception.handler``: a source's serde cannot read the key or value;
* ``processing.exception.handler``: ``process()`` or a punctuator raised;
* ``production.exception.handler``: a sink's serde cannot serialize the key or value (the
  engine), or the producer could not deliver a record (the runtime).

Each is ``log_and_fail`` (the default), ``log_and_continue``, or ``"module:callable"`` naming a
function ``handler(context, record, error) -> HandlerResponse``::

    from processor_api.error_handlers import ErrorHandlerContext, HandlerResponse

    def skip_value_errors(context: ErrorHandlerContext, record, error: Exception):
        if isinstance(error, ValueError):
            return HandlerResponse.resume(context.dead_letter_records(error))
        return HandlerResponse.fail()

``record`` is what failed: the raw :class:`~processor_api.engine.records.InputRecord` for a
deserialization error, the :class:`~processor_api.Record` the failing processor was given
(``None`` in a punctuator) for a processing error, the :class:`~processor_api.Record` being
serialized (or, for a record the producer could not deliver, the serialized ``OutputRecord``
as its delivery report gives it, with a :class:`~processor_api.errors.RecordDeliveryError`) for
a production error. Under ``exactly_once_v2`` such a delivery error fails the batch whatever
the handler answers: the failed send leaves the transaction abortable.
The dead-letter records of the response are produced whatever the result; with ``fail`` the
task then stops with a ``ProcessingError``. A handler that raises, or returns something else
than a :class:`HandlerResponse`, stops the task too.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from processor_api.errors import ConfigError

RawHeaders = tuple[tuple[str, "bytes | None"], ...]

ERROR_HEADER_PREFIX = "__streams.errors."
"""Prefix of the headers a standard dead-letter record carries (as in Kafka Streams)."""


@dataclass(frozen=True)
class ErrorHandlerContext:
    """Where the error happened: the input record being processed and the node at fault.

    ``topic``, ``partition``, ``offset``, ``timestamp``, ``headers``, ``source_raw_key`` and
    ``source_raw_value`` describe the input record the task was processing, as read from Kafka
    (all ``None``/empty in a punctuator, which has no input record). ``processor`` names the
    source, processor or sink that failed. ``serialization_origin`` is ``"key"`` or ``"value"``
    for a sink serialization error, else ``None`` (also when the producer refused the record
    at send time, e.g. larger than ``message.max.bytes``: a production error without origin). ``dead_letter_topic`` is the configured
    ``dead_letter_topic`` (``errors.dead.letter.queue.topic.name``), ``None`` if unset.
    """

    task_id: str
    processor: str | None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    timestamp: int | None = None
    headers: RawHeaders = ()
    source_raw_key: bytes | None = None
    source_raw_value: bytes | None = None
    serialization_origin: str | None = None
    dead_letter_topic: str | None = None

    def dead_letter_records(
        self, error: BaseException, topic: str | None = None
    ) -> tuple[DeadLetterRecord, ...]:
        """The standard dead-letter record of the input record, or none.

        It keeps the original key, value, timestamp and headers and adds the headers
        ``__streams.errors.exception``, ``.message``, ``.stacktrace``, ``.topic``,
        ``.partition``, ``.offset``, ``.processor`` and ``.task``. It goes to ``topic``, else
        to :attr:`dead_letter_topic`; with neither, or without an input record (punctuation),
        there is none.
        """
        topic = topic or self.dead_letter_topic
        if not topic or self.topic is None:
            return ()
        headers = tuple(self.headers) + tuple(
            (ERROR_HEADER_PREFIX + name, str(value).encode("utf-8"))
            for name, value in (
                ("exception", type(error).__name__),
                ("message", str(error)),
                ("stacktrace", "".join(traceback.format_exception(error)).strip()),
                ("topic", self.topic),
                ("partition", self.partition),
                ("offset", self.offset),
                ("processor", self.processor),
                ("task", self.task_id),
            )
            if value is not None
        )
        return (
            DeadLetterRecord(
                topic,
                self.source_raw_key,
                self.source_raw_value,
                headers,
                max(self.timestamp or 0, 0),
            ),
        )


@dataclass(frozen=True)
class DeadLetterRecord:
    """A record for a dead-letter topic: raw key and value bytes, headers, timestamp.

    ``timestamp`` ``None`` takes the input record's (0 in punctuation); ``partition`` ``None``
    lets the default partitioner choose.
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: RawHeaders = ()
    timestamp: int | None = None
    partition: int | None = None


class HandlerResult(Enum):
    """What a handler decided."""

    FAIL = "fail"
    """Stop the task with an error: nothing past the record is committed."""

    RESUME = "resume"
    """Go on: the record is skipped (deserialization, processing) or dropped (production)."""


@dataclass(frozen=True)
class HandlerResponse:
    """A handler's decision and the dead-letter records to produce (whatever the decision)."""

    result: HandlerResult
    dead_letter_records: tuple[DeadLetterRecord, ...] = ()

    @classmethod
    def fail(cls, dead_letter_records: Iterable[DeadLetterRecord] = ()) -> HandlerResponse:
        """Stop the task, after producing ``dead_letter_records``."""
        return cls(HandlerResult.FAIL, _checked(dead_letter_records))

    @classmethod
    def resume(cls, dead_letter_records: Iterable[DeadLetterRecord] = ()) -> HandlerResponse:
        """Go on with the next record, after producing ``dead_letter_records``."""
        return cls(HandlerResult.RESUME, _checked(dead_letter_records))

    @property
    def failed(self) -> bool:
        """True for :attr:`HandlerResult.FAIL`."""
        return self.result is HandlerResult.FAIL


def _checked(records: Iterable[DeadLetterRecord]) -> tuple[DeadLetterRecord, ...]:
    result = tuple(records or ())
    for record in result:
        if not isinstance(record, DeadLetterRecord):
            raise TypeError(f"dead-letter records must be DeadLetterRecord, got {record!r}")
    return result


ExceptionHandler = Callable[[ErrorHandlerContext, Any, Exception], HandlerResponse]
"""``handler(context, record, error) -> HandlerResponse``."""


def log_and_fail(context: ErrorHandlerContext, record: Any, error: Exception) -> HandlerResponse:
    """The default: stop the task (the engine logs the error). No dead-letter record."""
    return HandlerResponse.fail()


def log_and_continue(
    context: ErrorHandlerContext, record: Any, error: Exception
) -> HandlerResponse:
    """Go on (the engine logs a warning); the standard dead-letter record if a
    ``dead_letter_topic`` is configured."""
    return HandlerResponse.resume(context.dead_letter_records(error))


BUILT_IN_HANDLERS: dict[str, ExceptionHandler] = {
    "log_and_fail": log_and_fail,
    "log_and_continue": log_and_continue,
}


def resolve_handler(key: str, value: str | ExceptionHandler) -> ExceptionHandler:
    """The handler a setting names: a built-in name, ``"module:callable"`` or a callable.

    Raises ``ConfigError`` naming ``key`` and ``value`` when it names nothing callable.
    """
    if callable(value):
        return value
    if not isinstance(value, str):
        raise ConfigError(
            f"{key} must be log_and_fail, log_and_continue or MODULE:CALLABLE, got {value!r}"
        )
    built_in = BUILT_IN_HANDLERS.get(value.strip())
    if built_in is not None:
        return built_in
    return import_callable(key, value, "log_and_fail, log_and_continue or MODULE:CALLABLE")


def import_callable(key: str, value: str, expected: str = "MODULE:CALLABLE") -> Any:
    """The callable ``"module:attribute"`` names (attribute may be dotted).

    Raises ``ConfigError`` naming the setting ``key`` and ``value`` (``expected`` says what
    the setting takes) when the module does not import or the attribute is missing or not
    callable.
    """
    module_name, sep, attribute = value.strip().partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"{key} must be {expected}, got {value!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            f"{key}={value!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"{key}={value!r}: module {module_name!r} has no {attribute!r}")
    if not callable(target):
        raise ConfigError(f"{key}={value!r}: {attribute!r} is not callable")
    return target


def handler_name(handler: ExceptionHandler) -> str:
    """A readable name of a handler, for messages."""
    module = getattr(handler, "__module__", None)
    name = getattr(handler, "__qualname__", None) or type(handler).__name__
    return f"{module}:{name}" if module else name
