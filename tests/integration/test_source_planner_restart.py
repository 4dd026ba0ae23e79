"""The Python process in which Spark plans the Kafka source's batches can die (seen once under
load: a segmentation fault in it failed the query with SQLSTATE XXKST, "java.io.EOFException
at PythonStreamingSourceRunner"). The runner starts the query again from its checkpoint, with a
warning, and the results are those of an undisturbed run."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from processor_api.serdes import Serdes
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid
from topologies.word_count import split_words

pytestmark = pytest.mark.integration

WORD_COUNT = "topologies.word_count:build_topology"
FIRST = ["all streams lead to kafka", "hello kafka streams"]
SECOND = ["join kafka summit", "streams streams again"]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _source_planners() -> list[int]:
    """Spark's source planner processes of this test session (children of its JVM)."""
    planners = []
    for jvm in _children(os.getpid()):
        for child in _children(jvm):
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"python_streaming_source_runner" in command:
                planners.append(child)
    return planners


def _lines(bootstrap: str, topic: str, lines: list[str], first: int) -> None:
    produce(
        bootstrap,
        topic,
        [
            (f"line-{first + i}".encode(), line.encode(), (first + i) % 3)
            for i, line in enumerate(lines)
        ],
    )


def _words(lines: list[str]) -> int:
    return sum(len(split_words(line)) for line in lines)


def test_a_killed_source_planner_restarts_the_query_and_changes_no_result(kafka, spark, tmp_path):
    run_id = uid()
    topics = {
        "input_topic": f"planner-in-{run_id}",
        "repartition_topic": f"planner-rep-{run_id}",
        "output_topic": f"planner-out-{run_id}",
    }
    kafka.create_topic(topics["input_topic"], 3)
    _lines(kafka.bootstrap_servers, topics["input_topic"], FIRST, 0)
    settings = settings_for(kafka.bootstrap_servers, f"planner-{run_id}", tmp_path / "state")
    with (
        TopicReader(
            kafka.bootstrap_servers, topics["output_topic"], bytes.decode, Serdes.long().deserialize
        ) as out,
        capture_logs() as logs,
        BackgroundRun(WORD_COUNT, settings, spark=spark, topology_kwargs=topics) as run,
    ):
        out.wait_for(lambda r: len(r) >= _words(FIRST), timeout_s=120, while_alive=run)
        planners = _source_planners()
        assert planners, "no python_streaming_source_runner process under this session's JVM"
        for pid in planners:
            os.kill(pid, signal.SIGKILL)
        _lines(kafka.bootstrap_servers, topics["input_topic"], SECOND, len(FIRST))
        out.wait_for(lambda r: len(r) >= _words(FIRST + SECOND), timeout_s=120, while_alive=run)
        run.stop()

    expected = Counter(word for line in FIRST + SECOND for word in split_words(line))
    latest = {record.key: record.value for record in out.records}
    assert latest == dict(expected)
    assert len(out.records) == _words(FIRST + SECOND)  # at least once, and nothing re-sent here
    restarts = [e for e in logs if e["event"] == "source_planner_died"]
    assert restarts and restarts[0]["restart"] == 1
