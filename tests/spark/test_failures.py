"""Telling a query that failed because its source planner process died from other failures."""

from __future__ import annotations

from processor_api.errors import StreamsError
from processor_api.spark.failures import source_planner_died

PLANNER_EOF = """org.apache.spark.sql.streaming.StreamingQueryException:  SQLSTATE: XXKST
Caused by: java.io.EOFException
	at java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)
	at org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.latestOffset(PythonStreamingSourceRunner.scala:120)"""


def _failed(details: str | None) -> StreamsError:
    error = StreamsError("the streaming query failed: [STREAM_FAILED] ... SQLSTATE: XXKST")
    error.details = details
    return error


def test_an_end_of_file_from_the_source_planner_is_a_planner_death():
    assert source_planner_died(_failed(PLANNER_EOF))


def test_other_failures_are_not():
    assert not source_planner_died(_failed(None))
    assert not source_planner_died(_failed("java.io.EOFException at ShuffleBlockFetcher"))
    assert not source_planner_died(
        _failed("ProcessingError: ... at PythonStreamingSourceRunner.latestOffset (a Python error)")
    )
