"""What a task does with a record it cannot deserialize or process: the exception handlers
(``log_and_fail``, ``log_and_continue``) and the dead-letter records."""

from __future__ import annotations

import traceback
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.records import InputRecord, OutputRecord, RecordCollector
from processor_api.errors import ProcessingError

ERROR_HEADER_PREFIX = "__streams.errors."


class ErrorHandling:
    """The exception handlers of one task, as configured."""

    def __init__(
        self, config: StreamsConfig, task_id: str, collector: RecordCollector, log: Any
    ) -> None:
        self.config = config
        self.task_id = task_id
        self.collector = collector
        self._log = log

    def on_deserialization_error(self, raw: InputRecord, source: str, exc: Exception) -> None:
        """Raise (``log_and_fail``) or return to skip the record (``log_and_continue``)."""
        error = ProcessingError(
            f"cannot deserialize record: {type(exc).__name__}: {exc}",
            topic=raw.topic,
            partition=raw.partition,
            offset=raw.offset,
            processor=source,
            task_id=self.task_id,
        )
        error.__cause__ = exc
        if self.config.deserialization_exception_handler == "log_and_fail":
            self._log.error("deserialization_failed", error=str(error))
            raise error
        self._log.warning("deserialization_failed_record_skipped", error=str(error))
        self._dead_letter(raw, error)

    def on_processing_error(self, error: ProcessingError, raw: InputRecord | None) -> None:
        """Raise (``log_and_fail``) or return to go on (``log_and_continue``).

        ``raw`` is the input record being processed, None in punctuation.
        """
        located = error.with_coordinates(
            topic=raw.topic if raw else None,
            partition=raw.partition if raw else None,
            offset=raw.offset if raw else None,
            task_id=self.task_id,
        )
        if self.config.processing_exception_handler == "log_and_fail":
            self._log.error("processing_failed", error=str(located))
            raise located from error.__cause__
        self._log.warning("processing_failed_continuing", error=str(located))
        if raw is not None:
            self._dead_letter(raw, located)

    def _dead_letter(self, raw: InputRecord, error: ProcessingError) -> None:
        topic = self.config.dead_letter_topic
        if not topic:
            return
        cause = error.__cause__ or error
        headers = tuple(raw.headers) + tuple(
            (ERROR_HEADER_PREFIX + name, str(value).encode("utf-8"))
            for name, value in (
                ("exception", type(cause).__name__),
                ("message", error.reason),
                ("stacktrace", "".join(traceback.format_exception(cause)).strip()),
                ("topic", raw.topic),
                ("partition", raw.partition),
                ("offset", raw.offset),
                ("processor", error.processor),
                ("task", self.task_id),
            )
            if value is not None
        )
        self.collector.send(
            OutputRecord(topic, raw.key, raw.value, max(raw.timestamp, 0), headers, None)
        )
