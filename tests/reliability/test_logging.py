"""What an operator reads: structlog events in the chosen format, one clear error line.

Two library bugs found while building the crash tests, pinned here (fixed in 4f494bb):

* module-level loggers ignored ``--log-format json`` in Spark's Python workers (they are bound
  before the worker configures logging), so events such as ``restore_start`` / ``store_wipe``
  came out as ``key='value'`` lines in a JSON log (``tests.harness.logs.parse_log_line`` reads
  both);
* a Kafka exception raised in a worker (e.g. ``init_transactions`` timing out once the broker
  is gone) reached the user as Spark's wrapper line ending in "Traceback (most recent call
  last):", because ``explain_failure`` only recognized undotted exception names.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from processor_api.spark.failures import explain_failure
from tests.harness.logs import parse_log_line
from tests.harness.processes import REPO_ROOT


def test_parse_log_line_reads_json_and_console_lines():
    assert parse_log_line('{"event": "batch_done", "batch": 3}') == {
        "event": "batch_done",
        "batch": 3,
    }
    console = (
        "timestamp='2026-01-01T00:00:00Z' level='info' event='restore_start' "
        "logger='processor_api.task_state' task='0_1' partition=1 end_offset=402"
    )
    event = parse_log_line(console)
    assert event["event"] == "restore_start" and event["task"] == "0_1"
    assert event["end_offset"] == 402
    assert parse_log_line("26/11/21 19:15:43 WARN TaskSetManager: Lost task") is None


def test_module_level_loggers_follow_the_format_configured_later():
    """A logger bound at import (before ``configure_logging('json')``) prints JSON."""
    code = (
        "import processor_api.state.manager as task_state\n"
        "from processor_api.logging import configure_logging\n"
        "configure_logging('json')\n"
        "task_state._log.info('probe_event', task='0_0')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    lines = [line for line in result.stderr.splitlines() if "probe_event" in line]
    assert len(lines) == 1, result.stderr
    assert json.loads(lines[0])["event"] == "probe_event"


def test_each_event_is_one_write_of_a_whole_line():
    """Another process writing to the same stderr (the Spark JVM) must not land between an
    event and its newline: an event went out as two writes, and a JVM warning glued to the
    ``query_stopped`` line made it unreadable."""
    code = (
        "import sys\n"
        "class Recorder:\n"
        "    def __init__(self):\n"
        "        self.writes = []\n"
        "    def write(self, text):\n"
        "        self.writes.append(text)\n"
        "        return len(text)\n"
        "    def flush(self):\n"
        "        pass\n"
        "sys.stderr = recorder = Recorder()\n"
        "from processor_api.logging import configure_logging, get_logger\n"
        "configure_logging('json')\n"
        "get_logger('probe').info('query_stopped', application_id='a')\n"
        "get_logger('probe').info('run_finished', batches=2)\n"
        "print(repr(recorder.writes))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    writes = ast.literal_eval(result.stdout.strip())
    assert len(writes) == 2, writes
    for text, event in zip(writes, ["query_stopped", "run_finished"], strict=True):
        assert text.endswith("\n") and text.count("\n") == 1, text
        assert json.loads(text)["event"] == event


# str() of the StreamingQueryException that `run-topology` got when the broker stopped in the
# middle of an exactly-once run (an earlier version's runtime, whose frames these are; trimmed:
# paths shortened, Java frames cut): a task's Kafka error wrapped in Spark's and Py4J's text
WORKER_KAFKA_FAILURE = """\
[STREAM_FAILED] Query [id = 8417a3ba, runId = fa7720d5] terminated with exception: \
[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach \
batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback \
(most recent call last):
  File "py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "pyspark/sql/utils.py", line 163, in call
    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)
  File "processor_api/runtime/spark_runner.py", line 93, in on_batch
    rows = frame.collect()
  File "pyspark/errors/exceptions/captured.py", line 262, in deco
    raise converted from None
  File "processor_api/runtime/spark_task.py", line 302, in run
    tracker = runtime.transactional().for_task(self.app_id, self.task_id, self.directory)
  File "processor_api/runtime/transactions.py", line 77, in for_task
    producer.init_transactions(INIT_TIMEOUT_S)
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python \
worker:
Traceback (most recent call last):
  File "processor_api/runtime/spark_task.py", line 212, in run_task
    stats = batch.run(metadata, records)
  File "processor_api/runtime/transactions.py", line 77, in for_task
    producer.init_transactions(INIT_TIMEOUT_S)
cimpl.KafkaException: KafkaError{code=_TIMED_OUT,val=-185,str="Timed out waiting for \
operation to finish, retry call to resume"}
 SQLSTATE: 39000
\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(\
ForeachBatchSink.scala:60)
"""


def test_a_worker_kafka_exception_is_explained():
    line = explain_failure(RuntimeError(WORKER_KAFKA_FAILURE))
    assert "Traceback" not in line, line
    assert "KafkaException" in line and "_TIMED_OUT" in line, line
