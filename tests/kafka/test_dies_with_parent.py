"""Brokers and Spark JVMs end with the process that started them, however it ends.

A test run stopped with SIGTERM (or SIGKILL) runs no finalizer, so before the broker was tied to
its parent it stayed behind (two ``tansu broker`` processes after an interrupted ``make test``).
Each test starts the owner in a child process, kills it, and polls (with a deadline) until the
processes it started are gone; whatever is left is killed so a failure does not leak it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable

import pytest

from processor_api.kafka.admin import check_broker
from tests.harness.processes import (
    CliRun,
    _alive,
    _task_hosts_of,
    cli_environment,
    descendants,
)

#: How long the killed owner's processes may take to go (task hosts notice within 0.5 s).
GONE_WITHIN_S = 60.0


def _first_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    assert ready, f"the child printed nothing within {timeout_s:g}s"
    line = process.stdout.readline().strip()
    assert line, f"the child exited with {process.wait()} before printing"
    return line


def _still_alive_after(pids: Iterable[int], timeout_s: float) -> list[int]:
    """The ``pids`` still running once all are gone or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [pid for pid in pids if _alive(pid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _child(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,  # kept open: the child waits on it until it is killed
        stdout=subprocess.PIPE,
        text=True,
        env=cli_environment(),
        start_new_session=True,
    )


# started from a thread that ends at once: the broker must outlive that thread, not the process
BROKER_OWNER = """
    import sys, threading
    from processor_api.testing.embedded import EmbeddedKafka
    broker = EmbeddedKafka()
    starter = threading.Thread(target=broker.start)
    starter.start()
    starter.join()
    print(broker.pid, broker.bootstrap_servers, flush=True)
    sys.stdin.read()
"""


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_embedded_broker_dies_with_the_process_that_started_it(sig):
    owner = _child(BROKER_OWNER)
    broker_pid = None
    try:
        pid_text, bootstrap = _first_line(owner, 60).split()
        broker_pid = int(pid_text)
        check_broker(bootstrap, timeout_s=10)  # alive although the thread that started it ended
        owner.send_signal(sig)
        assert owner.wait(30) == -sig
        assert _still_alive_after([broker_pid], GONE_WITHIN_S) == []
    finally:
        owner.kill()
        owner.wait()
        if broker_pid is not None:
            _kill([broker_pid])


SPARK_OWNER = """
    import sys
    from pyspark.sql import SparkSession
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    print(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
    sys.stdin.read()
"""


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_spark_jvm_dies_with_the_process_that_started_it(sig):
    owner = _child(SPARK_OWNER)
    jvm_pid = None
    try:
        jvm_pid = int(_first_line(owner, 120))
        assert _alive(jvm_pid)
        owner.send_signal(sig)
        assert owner.wait(30) == -sig
        assert _still_alive_after([jvm_pid], GONE_WITHIN_S) == []
    finally:
        owner.kill()
        owner.wait()
        if jvm_pid is not None:
            _kill([jvm_pid])


@pytest.mark.integration
def test_run_topology_with_embedded_broker_leaves_nothing_behind_when_killed(tmp_path):
    args = [
        "topologies.count_per_key:build_topology",
        "--embedded-broker",
        "--application-id",
        "dies-with-parent",
        "--state-dir",
        str(tmp_path / "state"),
        "--master",
        "local[1]",
        "--log-format",
        "json",
        "--spark-conf",
        "spark.ui.showConsoleProgress=false",
    ]
    started: list[int] = []
    with CliRun(args, tmp_path / "run.log") as run:
        broker_pid = int(run.wait_event("embedded_kafka_started", 120).event["pid"])
        run.wait_event("query_started", 180)
        tree = descendants(run.pid)
        started = sorted({broker_pid, *tree, *_task_hosts_of(set(tree))})
        run.signal(signal.SIGKILL)  # the CLI process alone, as the OOM killer would
        assert run.process is not None and run.process.wait(30) == -signal.SIGKILL
        try:
            assert _still_alive_after(started, GONE_WITHIN_S) == []
        finally:
            _kill(started)
