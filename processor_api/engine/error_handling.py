"""What a task does with a record it cannot deserialize, process or produce: it asks the
configured exception handler (see :mod:`processor_api.error_handlers`), produces the dead-letter
records of its response, then fails or goes on.

* deserialization error: ``FAIL`` raises a ``ProcessingError`` naming the record; ``RESUME``
  skips the record (its offset counts as done);
* processing error (``process()``, a punctuator, a sink's topic extractor or partitioner):
  ``FAIL`` raises; ``RESUME`` rolls back the store writes of the failed record or punctuator
  (:class:`~processor_api.state.undo.UndoLog`) and goes on;
* sink serialization error: ``FAIL`` raises a :class:`FatalProcessingError` (the processing
  handler does not get it a second time); ``RESUME`` drops the output record and processing
  of the input record goes on, as in Kafka Streams;
* a record the producer reported undeliverable after it was sent (the runtime collects them
  at its flush): :meth:`ErrorHandling.on_delivery_error`. ``FAIL`` fails the batch; ``RESUME``
  drops the record. Inside a transaction (exactly_once_v2) the failed send has already doomed
  the transaction, so the batch fails whatever the response and its dead-letter records are
  not sent (they would be aborted with it).

A handler that raises, or returns something else than a ``HandlerResponse``, fails the task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.context import RecordContext
from processor_api.engine.records import InputRecord, OutputRecord
from processor_api.engine.sink import SerializationOrigin, SinkNode, sink_error
from processor_api.error_handlers import (
    ERROR_HEADER_PREFIX,
    ErrorHandlerContext,
    ExceptionHandler,
    HandlerResponse,
    handler_name,
    resolve_handler,
)
from processor_api.errors import ProcessingError
from processor_api.logging import get_logger
from processor_api.processor import Record
from processor_api.serde import SerdeUnavailableError
from processor_api.state.undo import UndoLog

__all__ = [
    "ERROR_HEADER_PREFIX",
    "ErrorHandling",
    "FatalProcessingError",
    "handle_production_error",
]

Send = Callable[[OutputRecord], None]


class FatalProcessingError(ProcessingError):
    """An error a handler already decided on (or a handler's own failure): it stops the task
    without reaching another handler."""


def _coordinates(raw: InputRecord | None) -> dict[str, Any]:
    if raw is None:
        return {}
    return {"topic": raw.topic, "partition": raw.partition, "offset": raw.offset}


class ErrorHandling:
    """The three exception handlers of one task, resolved from the configuration.

    ``send`` produces dead-letter records; ``record_context`` tells which input record is
    being processed; ``undo`` is the task's store-write journal.
    """

    def __init__(
        self,
        config: StreamsConfig,
        task_id: str,
        send: Send,
        record_context: RecordContext | None = None,
        undo: UndoLog | None = None,
        log: Any = None,
    ) -> None:
        self.task_id = task_id
        self.dead_letter_topic = config.dead_letter_topic
        self.deserialization: ExceptionHandler = resolve_handler(
            "deserialization_exception_handler", config.deserialization_exception_handler
        )
        self.processing: ExceptionHandler = resolve_handler(
            "processing_exception_handler", config.processing_exception_handler
        )
        self.production: ExceptionHandler = resolve_handler(
            "production_exception_handler", config.production_exception_handler
        )
        self._send = send
        self._record_context = record_context or RecordContext()
        self._undo = undo
        self._log = log or get_logger("processor_api.task", task=task_id)
        #: Records a handler let go, per handler kind (``deserialization``, ``processing``,
        #: ``production``): the ``processor_api_dropped_records_total`` metric reads it.
        self.dropped: dict[str, int] = {}

    # --------------------------------------------------------------- helpers
    def context(
        self, raw: InputRecord | None, processor: str | None, origin: str | None = None
    ) -> ErrorHandlerContext:
        """The handler context of an error at ``processor`` while processing ``raw``."""
        if raw is None:
            return ErrorHandlerContext(
                self.task_id,
                processor,
                serialization_origin=origin,
                dead_letter_topic=self.dead_letter_topic,
            )
        return ErrorHandlerContext(
            self.task_id,
            processor,
            topic=raw.topic,
            partition=raw.partition,
            offset=raw.offset,
            timestamp=raw.timestamp,
            headers=tuple(raw.headers),
            source_raw_key=raw.key,
            source_raw_value=raw.value,
            serialization_origin=origin,
            dead_letter_topic=self.dead_letter_topic,
        )

    def _respond(
        self,
        kind: str,
        handler: ExceptionHandler,
        context: ErrorHandlerContext,
        record: Any,
        error: BaseException,
        send_dead_letters: bool = True,
    ) -> HandlerResponse:
        """Ask ``handler`` and produce the dead-letter records of its response (unless told
        not to)."""
        where: dict[str, Any] = {
            "topic": context.topic,
            "partition": context.partition,
            "offset": context.offset,
            "processor": context.processor,
            "task_id": self.task_id,
        }
        unavailable = _unavailable_service(error)
        if unavailable is not None:
            # a handler that continues would skip records the service would have read
            self._log.error(
                f"{kind}_failed_service_unavailable",
                error=f"{type(unavailable).__name__}: {unavailable}",
                handler_not_asked=handler_name(handler),
                **where,
            )
            return HandlerResponse.fail()
        try:
            response = handler(context, record, error)  # type: ignore[arg-type]
        except Exception as exc:
            raise FatalProcessingError(
                f"{kind} exception handler {handler_name(handler)} raised "
                f"{type(exc).__name__}: {exc} (handling {type(error).__name__}: {error})",
                **where,
            ) from exc
        if not isinstance(response, HandlerResponse):
            raise FatalProcessingError(
                f"{kind} exception handler {handler_name(handler)} returned {response!r}, "
                f"expected a HandlerResponse (handling {type(error).__name__}: {error})",
                **where,
            )
        default_timestamp = max(context.timestamp or 0, 0)
        for dead in response.dead_letter_records if send_dead_letters else ():
            timestamp = default_timestamp if dead.timestamp is None else dead.timestamp
            self._send(
                OutputRecord(
                    dead.topic, dead.key, dead.value, timestamp, dead.headers, dead.partition
                )
            )
        return response

    # ------------------------------------------------------------- the three
    def on_deserialization_error(self, raw: InputRecord, source: str, exc: Exception) -> None:
        """Raise (``FAIL``) or return: the record is skipped (``RESUME``)."""
        error = ProcessingError(
            f"cannot deserialize record: {type(exc).__name__}: {exc}",
            **_coordinates(raw),
            processor=source,
            task_id=self.task_id,
        )
        error.__cause__ = exc
        context = self.context(raw, source)
        if self._respond("deserialization", self.deserialization, context, raw, exc).failed:
            # debug: the error raised carries the same text, and the runtime reports it once
            self._log.debug("deserialization_failed", error=str(error))
            raise error
        self.dropped["deserialization"] = self.dropped.get("deserialization", 0) + 1
        self._log.warning("deserialization_failed_record_skipped", error=str(error))

    def on_processing_error(
        self, error: ProcessingError, raw: InputRecord | None, record: Record | None
    ) -> None:
        """Raise (``FAIL``) or return after undoing the failed unit's store writes.

        ``raw`` is the input record being processed and ``record`` what the failing processor
        got; both None in punctuation.
        """
        located = error.with_coordinates(**_coordinates(raw), task_id=self.task_id)
        if isinstance(error, FatalProcessingError):
            raise located from error.__cause__
        cause = error.__cause__ or error
        context = self.context(raw, located.processor)
        if self._respond("processing", self.processing, context, record, cause).failed:
            self._log.debug("processing_failed", error=str(located))  # reported once, raised
            raise located from error.__cause__
        undone = self._undo.rollback() if self._undo is not None else 0
        self.dropped["processing"] = self.dropped.get("processing", 0) + 1
        self._log.warning("processing_failed_continuing", error=str(located), undone=undone)

    def on_serialization_error(
        self, sink: SinkNode, record: Record, exc: Exception, origin: SerializationOrigin
    ) -> None:
        """A sink's serde failed, or the producer refused the record when it was sent
        (``origin="send"``): raise (``FAIL``) or return to drop the record (``RESUME``)."""
        raw = self._record_context.raw
        error = sink_error(sink.name, exc, origin).with_coordinates(
            **_coordinates(raw), task_id=self.task_id
        )
        context = self.context(raw, sink.name, None if origin == "send" else origin)
        if self._respond("production", self.production, context, record, exc).failed:
            self._log.error("production_failed", error=str(error))
            fatal = FatalProcessingError(
                error.reason,
                **_coordinates(raw),
                processor=sink.name,
                task_id=self.task_id,
            )
            raise fatal from exc
        self.dropped["production"] = self.dropped.get("production", 0) + 1
        self._log.warning("production_failed_record_dropped", error=str(error), origin=origin)

    def on_delivery_error(
        self,
        record: OutputRecord,
        exc: Exception,
        *,
        processor: str | None = None,
        source: InputRecord | None = None,
        in_transaction: bool = False,
    ) -> HandlerResponse:
        """The producer could not deliver ``record``: ask the production handler.

        Its dead-letter records are sent; the caller fails if the response ``failed``, else
        the record is dropped (logged here, once). ``in_transaction`` (exactly_once_v2): the
        failed send left the transaction abortable, so the caller aborts it whatever the
        handler answers; the handler is still asked (as in Kafka Streams), but its dead-letter
        records are not sent, since they would be aborted with the transaction.
        """
        context = self.context(source, processor)
        response = self._respond(
            "production", self.production, context, record, exc, not in_transaction
        )
        where = {"topic": record.topic, "partition": record.partition, "processor": processor}
        if in_transaction:
            self._log.error(
                "delivery_failed_transaction_aborted",
                **where,
                error=f"{exc}",
                handler_result=response.result.value,
                dead_letter_records_not_sent=len(response.dead_letter_records),
                detail="under exactly_once_v2 a failed send leaves the transaction abortable: "
                "the batch is aborted and re-run whatever the handler answers",
            )
        elif response.failed:
            self._log.error("delivery_failed", **where, error=f"{exc}")
        else:
            self._log.warning("delivery_failed_record_dropped", **where, error=f"{exc}")
        return response


def handle_production_error(
    config: StreamsConfig,
    *,
    task_id: str,
    record: OutputRecord,
    error: Exception,
    send: Send,
    processor: str | None = None,
    source: InputRecord | None = None,
) -> HandlerResponse:
    """For a runtime whose producer could not deliver ``record``: the production handler's
    response (after its dead-letter records went to ``send``).

    ``response.failed``: the runtime fails as it would without a handler (nothing committed
    past the batch); else the record is dropped and the batch may commit. ``processor`` and
    ``source`` (the sink and the input record that produced it) are passed on to the handler
    when the runtime knows them.
    """
    handling = ErrorHandling(config, task_id, send)
    return handling.on_delivery_error(record, error, processor=processor, source=source)


def _unavailable_service(error: BaseException) -> SerdeUnavailableError | None:
    """The :class:`SerdeUnavailableError` ``error`` is or was raised from, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, SerdeUnavailableError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
