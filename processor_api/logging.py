"""Structured logging for the library: one event per line, key=value fields.

Library code logs through :func:`get_logger`; it never prints. The CLI calls
:func:`configure_logging` once to choose console or JSON rendering and the level.

The level is kept in one mutable place and checked by the first processor, so loggers bound
before :func:`configure_logging` (module-level ones) follow the level set later. It is also
exported as ``PROCESSOR_API_LOG_LEVEL`` so that processes started from this one (Spark's Python
workers, worker hosts) log at the same level: :func:`configure_logging` without a level reads it.

Every event gets its log time (ISO 8601, UTC) under ``timestamp``, unless the caller passed a
``timestamp`` field of its own (a record's timestamp, say): that one is kept as given and the
log time goes under ``log_timestamp``. Fields a caller passes are never overwritten.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO, cast

import structlog

LEVELS = ("debug", "info", "warning", "error")
LEVEL_ENV = "PROCESSOR_API_LOG_LEVEL"

_configured = False
# One list, filled in place: loggers bound before configure_logging() (module-level ones, in
# Spark workers) keep a reference to it, so they follow the format configured later.
_PROCESSORS: list = []
_LEVEL = [logging.INFO]
_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def _level_number(level: str) -> int:
    name = str(level).strip().lower()
    if name not in _METHOD_LEVELS:
        raise ValueError(f"unknown log level {level!r}: expected one of {', '.join(LEVELS)}")
    return _METHOD_LEVELS[name]


def _drop_below_level(logger: Any, method_name: str, event_dict: dict) -> dict:
    if _METHOD_LEVELS.get(method_name, logging.INFO) < _LEVEL[0]:
        raise structlog.DropEvent
    return event_dict


#: Where the log time goes: ``timestamp``, or ``log_timestamp`` when the event has its own.
LOG_TIME_KEY = "timestamp"
LOG_TIME_ASIDE_KEY = "log_timestamp"
_STAMP = structlog.processors.TimeStamper(fmt="iso", utc=True, key=LOG_TIME_KEY)
_STAMP_ASIDE = structlog.processors.TimeStamper(fmt="iso", utc=True, key=LOG_TIME_ASIDE_KEY)


def _add_log_time(logger: Any, method_name: str, event_dict: Any) -> Any:
    if LOG_TIME_KEY in event_dict:
        if LOG_TIME_ASIDE_KEY in event_dict:
            return event_dict  # both taken by the caller: add nothing rather than overwrite
        return _STAMP_ASIDE(logger, method_name, event_dict)
    return _STAMP(logger, method_name, event_dict)


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when an event is written, not when logging was configured:
    a caller that redirects or captures stderr (pytest's capsys, a notebook) gets the events,
    and a replaced stream that was closed since is never written to."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def current_level() -> str:
    """The configured level's name (``"info"``, ...)."""
    return logging.getLevelName(_LEVEL[0]).lower()


def debug_enabled() -> bool:
    """True when debug events are shown (``--log-level debug``)."""
    return _LEVEL[0] <= logging.DEBUG


def configure_logging(log_format: str = "console", level: str | None = None) -> None:
    """Configure structlog for the process.

    ``log_format`` is ``"console"`` (key=value, human readable) or ``"json"``
    (one JSON object per line). ``level`` is ``debug``, ``info``, ``warning`` or ``error``;
    ``None`` takes ``$PROCESSOR_API_LOG_LEVEL`` (else ``info``). The level is exported to
    ``$PROCESSOR_API_LOG_LEVEL`` for child processes.
    """
    global _configured
    if log_format not in ("console", "json"):
        raise ValueError(f"unknown log format {log_format!r}: expected 'console' or 'json'")
    if level is None:
        level = os.environ.get(LEVEL_ENV) or "info"
    _LEVEL[0] = _level_number(level)
    os.environ[LEVEL_ENV] = logging.getLevelName(_LEVEL[0]).lower()
    renderer = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.processors.KeyValueRenderer(
            key_order=[LOG_TIME_KEY, LOG_TIME_ASIDE_KEY, "level", "event"], drop_missing=True
        )
    )
    _PROCESSORS[:] = [
        _drop_below_level,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _add_log_time,
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=_PROCESSORS,
        # no level in the wrapper: it is frozen into loggers bound before this call;
        # _drop_below_level reads the current level instead
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        # one write() per event, line and newline together: print() writes them apart, and
        # the Spark JVM, sharing stderr, then put its own lines between the two
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str, **initial_fields: object) -> structlog.typing.FilteringBoundLogger:
    """Return a structlog logger bound to ``logger=name`` and any initial fields."""
    if not _configured:
        configure_logging()
    return structlog.get_logger().bind(logger=name, **initial_fields)
