"""Structlog events as ``run-topology`` prints them on stderr.

:func:`parse_log_line` reads JSON lines, and the ``key='value'`` lines that Spark workers'
module-level loggers printed before 4f494bb (see ``tests/reliability/test_logging.py``).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

_KV = re.compile(r"""(\w+)=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)""")


def parse_log_line(line: str) -> dict[str, Any] | None:
    """One structlog event from a stderr line (JSON or ``key='value'``), or None."""
    for segment in line.split("\r"):
        segment = segment.strip()
        if segment.startswith("{") and '"event"' in segment:
            try:
                event = json.loads(segment)
            except ValueError:
                continue
            if isinstance(event, dict):
                return event
        start = segment.find("timestamp=")
        if start >= 0 and " event=" in segment:
            event = {}
            for key, raw in _KV.findall(segment[start:]):
                try:
                    event[key] = ast.literal_eval(raw)
                except (ValueError, SyntaxError):
                    event[key] = raw
            if "event" in event:
                event["_console_format"] = True
                return event
    return None


@dataclass
class LoggedEvent:
    """One parsed event of a run: its position among the run's events and when it was read."""

    index: int
    at: float  # monotonic seconds
    event: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.event.get("event"))
