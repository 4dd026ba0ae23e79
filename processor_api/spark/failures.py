"""A failed query in one line (the Python error raised in the task), the rest for the report."""

from __future__ import annotations

import re

from processor_api.errors import StreamsError

_PYTHON_ERROR = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (.+)$", re.MULTILINE
)
_WRAPPER_PREFIXES = ("org.", "java.", "py4j.", "pyspark.errors.", "scala.")


def explain_failure(exc: BaseException) -> str:
    """The most useful line of a Spark failure: the Python error raised in the task."""
    text = str(exc)
    matches = [
        m
        for m in _PYTHON_ERROR.finditer(text)
        if not m.group(1).startswith(_WRAPPER_PREFIXES) and "py4j" not in m.group(1).lower()
    ]
    for match in reversed(matches):
        if "processor_api" in match.group(1) or match.group(1).endswith(
            ("ProcessingError", "StreamsError", "DeliveryError", "StoreError", "TimeoutError")
        ):
            return f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2).strip()}"
    if matches:
        return f"{matches[-1].group(1)}: {matches[-1].group(2).strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def failure_details(exc: BaseException) -> str:
    """Everything known about a Spark failure: its message (the task's Python traceback
    included) and the JVM stack trace, for the failure report file."""
    text = str(exc).rstrip()
    # pyspark's CapturedException keeps the JVM stack; str() shows it only when
    # spark.sql.pyspark.jvmStacktrace.enabled is set
    stack = getattr(exc, "_stackTrace", None)
    if stack and str(stack).strip() not in text:
        text += "\n\nJVM stack trace:\n" + str(stack).rstrip()
    return text


def query_failed(exc: BaseException) -> StreamsError:
    """The one-line error of a failed query; ``details`` holds the full text."""
    error = StreamsError(f"the streaming query failed: {explain_failure(exc)}")
    error.details = failure_details(exc)
    return error
