"""Bad input and bad setup give clear errors: ``run-topology`` in a
subprocess, checking its exit status and what it prints on stderr."""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient

from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from processor_api.serdes import Serdes
from processor_api.testing.embedded import free_port
from tests.harness.logs import parse_log_line
from tests.harness.processes import CliRun, cli_args, run_cli
from tests.harness.topics import TopicReader, produce, read_topic, uid
from tests.harness.word_count import WORD_COUNT
from tests.integration.setup_check_topologies import LOOKUP_ENV
from topologies.word_count import split_words

pytestmark = pytest.mark.integration


def _error_line(stderr: str) -> str:
    """The ``run-topology: error: ...`` / ``run-topology: failed: ...`` line on stderr."""
    lines = [line for line in stderr.splitlines() if line.startswith("run-topology: ")]
    if not lines:
        raised = [
            line for line in stderr.splitlines() if re.match(r"^[\w.]+(Error|Exception): ", line)
        ]
        pytest.fail(
            "run-topology printed no 'run-topology: ...' error line; the last "
            "exception lines on its stderr were:\n"
            + "\n".join(raised[-3:])
            + f"\n--- stderr tail ---\n{stderr[-1500:]}"
        )
    return lines[-1]


def test_bad_module_path_exits_2_naming_the_module(tmp_path):
    result = run_cli(
        [
            "no_such_module_x1:build_topology",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--state-dir",
            str(tmp_path),
        ],
        timeout_s=60,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    line = _error_line(result.stderr)
    assert "no_such_module_x1" in line and "cannot import" in line


def test_unreachable_broker_exits_2_quickly_naming_the_address(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    result = run_cli(
        [WORD_COUNT, "--bootstrap-servers", address, "--state-dir", str(tmp_path)], timeout_s=60
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr[-3000:]
    assert address in _error_line(result.stderr)
    assert elapsed < 20, f"took {elapsed:.1f}s to give up on {address}"


def test_missing_input_topic_exits_2_naming_the_topic(kafka, tmp_path):
    topic = f"missing-input-{uid()}"
    result = run_cli(
        [
            WORD_COUNT,
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--topology-arg",
            f"input_topic={topic}",
            "--topology-arg",
            f"repartition_topic=missing-rep-{uid()}",
            "--topology-arg",
            f"output_topic=missing-out-{uid()}",
            "--state-dir",
            str(tmp_path),
        ],
        timeout_s=60,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    line = _error_line(result.stderr)
    assert topic in line and "do not exist" in line


SETUP_CHECK = "tests.integration.setup_check_topologies"


def test_a_store_name_typo_in_init_exits_2_before_topics_or_spark(kafka, tmp_path):
    run_id = uid()
    app_id = f"typo-{run_id}"
    input_topic = f"typo-in-{run_id}"
    kafka.create_topic(input_topic, 1)
    args = cli_args(
        f"{SETUP_CHECK}:build_store_typo",
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        topology_args={"input_topic": input_topic, "output_topic": f"typo-out-{run_id}"},
    )
    result = run_cli(args, timeout_s=240)
    assert result.returncode == 2, result.stderr[-3000:]
    # the error the task would have raised in its first epoch, where it was found
    line = _error_line(result.stderr)
    assert line.startswith(
        "run-topology: error: processor 'count' cannot access state store 'count-store': "
        "no such store (connected stores: ['counts-store'])"
    ), line
    assert "before the run started: init() of processor 'count', task 0_0" in line
    events = [e for e in map(parse_log_line, result.stderr.splitlines()) if e is not None]
    failed = [e for e in events if e["event"] == "setup_failed"]
    assert [e["error_type"] for e in failed] == ["SetupCheckError"]
    # stopped before the run was planned (the SparkSession starts after that): no
    # topology_planned event, no Spark query, no checkpoint, no topic created
    names = {e["event"] for e in events}
    assert not names & {"topology_planned", "query_started"}, sorted(names)
    assert not (tmp_path / "state" / app_id / "_spark_checkpoint").exists()
    topics = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=30)
    assert changelog_topic(app_id, "counts-store") not in topics.topics
    assert commit_marker_topic(app_id) not in topics.topics


def test_a_processor_whose_init_needs_the_executors_warns_and_runs(kafka, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"lookup-in-{run_id}", f"lookup-out-{run_id}"
    kafka.create_topic(input_topic, 2)
    kafka.create_topic(output_topic, 1)
    produce(kafka.bootstrap_servers, input_topic, [(b"k1", b"a", 0), (b"k2", b"b", 1)])
    log_path = tmp_path / "inits.log"
    args = cli_args(
        f"{SETUP_CHECK}:build_executor_only",
        kafka.bootstrap_servers,
        f"lookup-{run_id}",
        tmp_path / "state",
        topology_args={
            "input_topic": input_topic,
            "output_topic": output_topic,
            "log_path": str(log_path),
        },
        # the setting only the executors get (the driver's init() has no such variable)
        extra=["--spark-conf", f"spark.executorEnv.{LOOKUP_ENV}=http://lookup.test"],
    )
    with CliRun(args, None, {}, stdout_apart=True) as run:
        code = run.wait(240)
        assert run.process is not None
        driver_pid = run.process.pid
    assert code == 0, "\n".join(run.lines[-40:])
    warnings = [e.event for e in run.events if e.name == "setup_check_init_failed"]
    assert len(warnings) == 1, warnings
    assert warnings[0]["processor"] == "tag" and warnings[0]["task"] == "0_0"
    assert warnings[0]["error"].startswith(
        f"ProcessingError: init() raised KeyError: '{LOOKUP_ENV}'"
    )
    out = read_topic(kafka.bootstrap_servers, output_topic)
    assert sorted(r.value for r in out) == [b"a@http://lookup.test", b"b@http://lookup.test"]
    # the executors ran init() once per task; the driver's failed before it logged anything
    inits = [line.split() for line in log_path.read_text().splitlines()]
    assert Counter(task for _, task, _ in inits) == {"0_0": 1, "0_1": 1}
    assert all(int(pid) != driver_pid for _, _, pid in inits)


GOOD_LINES = ["poison ahead", "still counted", "after the poison"]
POISON = b"\xff\xfe not utf-8"


def test_poison_record_fails_with_log_and_fail_and_is_skipped_with_log_and_continue(
    kafka, tmp_path
):
    run_id = uid()
    input_topic = f"poison-in-{run_id}"
    kafka.create_topic(input_topic, 1)
    produce(
        kafka.bootstrap_servers,
        input_topic,
        [
            (b"a", GOOD_LINES[0].encode(), 0),
            (b"b", POISON, 0),  # offset 1
            (b"c", GOOD_LINES[1].encode(), 0),
            (b"d", GOOD_LINES[2].encode(), 0),
        ],
    )

    def cli(attempt: str, *extra: str):
        return run_cli(
            [
                WORD_COUNT,
                "--bootstrap-servers",
                kafka.bootstrap_servers,
                "--application-id",
                f"poison-{attempt}-{run_id}",
                "--state-dir",
                str(tmp_path / "state"),
                "--master",
                "local[2]",
                "--available-now",
                "--topology-arg",
                f"input_topic={input_topic}",
                "--topology-arg",
                f"repartition_topic=poison-rep-{attempt}-{run_id}",
                "--topology-arg",
                f"output_topic=poison-out-{attempt}-{run_id}",
                *extra,
            ],
            timeout_s=240,
        )

    # default handler log_and_fail: the run stops, exit 1, the message locates the record
    failed = cli("fail")
    assert failed.returncode == 1, failed.stderr[-3000:]
    coordinates = (
        f"topic={input_topic}",
        "partition=0",
        "offset=1",
        "processor=lines-source",
        "cannot deserialize",
        "SerializationError",
        "utf-8",
    )
    # the task's error reached the driver ...
    assert any(all(part in text for part in coordinates) for text in failed.stderr.splitlines()), (
        failed.stderr[-3000:]
    )
    # nothing was committed: the task of partition 0 failed before its first commit (the
    # good record before the poison one was not committed either), and the failed epoch,
    # the run's first Spark batch, has no commit in the Spark checkpoint
    app_id = f"poison-fail-{run_id}"
    offsets = committed_offsets(kafka.bootstrap_servers, app_id, [(input_topic, 0)])
    assert offsets == {}, f"the failed task committed input offsets: {offsets}"
    markers = read_topic(kafka.bootstrap_servers, commit_marker_topic(app_id))
    committed_tasks = {record.key for record in markers}
    assert b"0_0" not in committed_tasks, f"the failed task committed: {committed_tasks}"
    commits = tmp_path / "state" / app_id / "_spark_checkpoint" / "commits"
    assert not commits.exists() or not any(commits.iterdir()), sorted(commits.iterdir())
    # ... and run-topology reports it as one clear line, not as a Python traceback
    line = _error_line(failed.stderr)
    assert line.startswith("run-topology: failed: ")
    for part in coordinates:
        assert part in line, f"{part!r} missing from: {line}"

    # log_and_continue: the poison record is skipped, everything else is counted
    passed = cli("continue", "--config", "deserialization.exception.handler=log_and_continue")
    assert passed.returncode == 0, passed.stderr[-3000:]
    assert "deserialization_failed_record_skipped" in passed.stderr
    expected = Counter(word for line in GOOD_LINES for word in split_words(line))
    with TopicReader(
        kafka.bootstrap_servers,
        f"poison-out-continue-{run_id}",
        bytes.decode,
        Serdes.long().deserialize,
    ) as out:
        records = out.wait_for(lambda r: len(r) >= sum(expected.values()), timeout_s=20)
    latest: dict[str, int] = {}
    for word, count, *_ in records:
        latest[word] = max(latest.get(word, 0), count)
    assert latest == dict(expected) and len(records) == sum(expected.values())
