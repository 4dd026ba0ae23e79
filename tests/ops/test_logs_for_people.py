"""The log level, the progress event, the JVM's options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from processor_api.spark import progress as progress_module
from processor_api.spark.progress import Progress
from processor_api.spark.session import (
    LOG4J2_PROPERTIES,
    _driver_launch_conf,
    _executor_java_options,
)
from processor_api.spark.settings import RunSettings

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    environment = {k: v for k, v in os.environ.items() if k != "PROCESSOR_API_LOG_LEVEL"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )


def test_the_level_applies_to_loggers_bound_before_configure_logging():
    code = (
        "import processor_api.kafka.admin as admin\n"  # module-level logger bound at import
        "from processor_api.logging import configure_logging\n"
        "configure_logging('json', 'warning')\n"
        "admin._log.info('hidden_info')\n"
        "admin._log.warning('shown_warning')\n"
        "configure_logging('json', 'debug')\n"
        "admin._log.debug('shown_debug')\n"
    )
    result = _run(code)
    events = [json.loads(line)["event"] for line in result.stderr.splitlines()]
    assert events == ["shown_warning", "shown_debug"], result.stderr


def test_child_processes_inherit_the_level():
    code = (
        "import os, subprocess, sys\n"
        "from processor_api.logging import configure_logging\n"
        "configure_logging('json', 'error')\n"
        "child = 'from processor_api.logging import configure_logging, get_logger\\n"
        'configure_logging("json")\\nget_logger("x").warning("child_warning")\\n'
        'get_logger("x").error("child_error")\'\n'
        "subprocess.run([sys.executable, '-c', child], check=True)\n"
    )
    result = _run(code)
    events = [json.loads(line)["event"] for line in result.stderr.splitlines()]
    assert events == ["child_error"], result.stderr


def test_the_driver_jvm_gets_the_log4j2_file_before_it_starts():
    quiet = _driver_launch_conf(RunSettings("h:1"), quiet=True)["spark.driver.extraJavaOptions"]
    assert quiet.startswith(f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()} ")
    assert "-Dprocessor_api.spark.level=ERROR" in quiet
    assert "-Dprocessor_api.spark.failure.level=OFF" in quiet
    user = RunSettings("h:1", spark_conf={"spark.driver.extraJavaOptions": "-Dx=1"})
    loud = _driver_launch_conf(user, quiet=False)["spark.driver.extraJavaOptions"]
    assert "-Dprocessor_api.spark.level=WARN" in loud and loud.endswith("-Dx=1")
    assert LOG4J2_PROPERTIES.is_file()


def test_executors_on_a_cluster_get_the_log4j2_file_and_keep_the_users_options():
    assert _executor_java_options(RunSettings("h:1", master="local[2]")) is None
    user = RunSettings(
        "h:1",
        master="spark://host:7077",
        spark_conf={"spark.executor.extraJavaOptions": "-Dx=1"},
    )
    quiet = _executor_java_options(user, quiet=True)
    assert quiet is not None
    assert quiet.startswith(f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()} ")
    assert "-Dprocessor_api.spark.level=ERROR" in quiet and quiet.endswith("-Dx=1")
    # task failures stay in the executor's own log file: that is where an operator looks
    assert "-Dprocessor_api.spark.failure.level=ERROR" in quiet
    loud = _executor_java_options(user, quiet=False)
    assert loud is not None and "-Dprocessor_api.spark.level=WARN" in loud


def _batch(task: str, records: int, positions: dict[str, int]) -> list[dict]:
    row = {
        "task": task,
        "records": records,
        "outputs": 0,
        "changelog_records": 0,
        "restored": 0,
        "positions": json.dumps(positions),
        "duration_ms": 1.0,
        "epoch": 1,
    }
    return [row]


class _Frame:
    def __init__(self, rows):
        self.rows = rows

    def collect(self):
        return self.rows


class _Log:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def info(self, event: str, **fields) -> None:
        self.events.append({"event": event, **fields})

    debug = info


def test_progress_reports_rate_and_lag_per_task(monkeypatch):
    log = _Log()
    monkeypatch.setattr(progress_module, "_log", log)
    asked: list[list[tuple[str, int]]] = []

    def ends(keys):
        asked.append(keys)
        return {("in", 0): 100, ("in", 1): 40}

    progress = Progress(ends, interval_s=0.0)
    progress.on_batch(_Frame(_batch("0_0", 60, {"in": 60}) + _batch("0_1", 40, {"in": 40})), 0)
    (report,) = [e for e in log.events if e["event"] == "progress"]
    assert report["records"] == 100 and report["lag"] == 40
    assert report["lag_by_task"] == {"0_0": 40, "0_1": 0}
    assert report["records_per_s"] > 0
    assert asked == [[("in", 0), ("in", 1)]]


def test_no_progress_event_before_the_interval(monkeypatch):
    log = _Log()
    monkeypatch.setattr(progress_module, "_log", log)
    progress = Progress(lambda keys: {}, interval_s=3600.0)
    progress.on_batch(_Frame(_batch("0_0", 5, {"in": 5})), 0)
    assert [e["event"] for e in log.events] == ["batch_done"]


def test_a_timestamp_field_the_caller_passes_is_kept_and_the_log_time_goes_aside():
    code = (
        "from processor_api.logging import configure_logging, get_logger\n"
        "configure_logging('json')\n"
        "log = get_logger('my_processor')\n"
        "log.info('late_record', key='k1', timestamp=1700000000000)\n"
        "log.info('plain')\n"
        "log.info('both_taken', timestamp=1, log_timestamp=2)\n"
        "configure_logging('console')\n"
        "log.info('late_record', timestamp=1700000000000)\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    *events, console = result.stderr.splitlines()
    late, plain, both = (json.loads(line) for line in events)
    assert late["timestamp"] == 1700000000000 and late["key"] == "k1"
    assert late["log_timestamp"].endswith("Z") and "T" in late["log_timestamp"]
    assert plain["timestamp"].endswith("Z") and "log_timestamp" not in plain
    assert (both["timestamp"], both["log_timestamp"]) == (1, 2)
    assert console.startswith("timestamp=1700000000000 log_timestamp='"), console


def test_events_go_to_the_stderr_of_the_moment_not_the_one_at_configure_time():
    """A CLI's main() called under a captured stderr (a test) configured logging onto that
    stream; once it was closed every later event raised 'I/O operation on closed file'."""
    code = (
        "import io, sys\n"
        "from processor_api.logging import configure_logging, get_logger\n"
        "captured = sys.stderr = io.StringIO()\n"
        "configure_logging('json')\n"
        "sys.stderr = sys.__stderr__\n"
        "captured.close()\n"
        "get_logger('x').warning('after_the_capture')\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stderr.strip())["event"] == "after_the_capture"
