"""Structured logging for the library: one event per line, key=value fields.

Library code logs through :func:`get_logger`; it never prints. The CLI calls
:func:`configure_logging` once to choose console or JSON rendering.
"""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False
# One list, filled in place: loggers bound before configure_logging() (module-level ones, in
# Spark workers) keep a reference to it, so they follow the format configured later.
_PROCESSORS: list = []


def configure_logging(log_format: str = "console", level: str = "INFO") -> None:
    """Configure structlog for the process.

    ``log_format`` is ``"console"`` (key=value, human readable) or ``"json"``
    (one JSON object per line).
    """
    global _configured
    if log_format not in ("console", "json"):
        raise ValueError(f"unknown log format {log_format!r}: expected 'console' or 'json'")
    renderer = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.processors.KeyValueRenderer(
            key_order=["timestamp", "level", "event"], drop_missing=True
        )
    )
    _PROCESSORS[:] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=_PROCESSORS,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # one write() per event, line and newline together: print() writes them apart, and
        # the Spark JVM, sharing stderr, then put its own lines between the two
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str, **initial_fields: object) -> structlog.typing.FilteringBoundLogger:
    """Return a structlog logger bound to ``logger=name`` and any initial fields."""
    if not _configured:
        configure_logging()
    return structlog.get_logger().bind(logger=name, **initial_fields)
