"""On a real broker and local Spark: what ``run-topology`` prints, and the Kafka
client settings on real clients. ``run-topology`` runs in a subprocess (``run_cli``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.harness.processes import run_cli
from tests.harness.topics import produce, uid

pytestmark = pytest.mark.integration

MAX_LINES = 25
FAILING = "tests.integration.failing_topology:build"
SALES = "topologies.sales_aggregation:build_topology"
SALES_EVENTS = [
    (b"product2", json.dumps({"product": "product2", "value": 1000}).encode()),
    (b"product1", json.dumps({"product": "product1", "value": 1500}).encode()),
    (b"product1", json.dumps({"product": "product1", "value": 1000}).encode()),
]


def _lines(result) -> list[str]:
    return (result.stdout + result.stderr).splitlines()


def _failing_run(kafka, tmp_path: Path, *extra: str):
    run_id = uid()
    source = f"ops-fail-in-{run_id}"
    kafka.create_topic(source, 1)
    produce(kafka.bootstrap_servers, source, [(b"k", b"a"), (b"k", b"boom"), (b"k", b"c")])
    state = tmp_path / "state"
    result = run_cli(
        [
            FAILING,
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--application-id",
            f"ops-fail-{run_id}",
            "--state-dir",
            str(state),
            "--master",
            "local[2]",
            "--available-now",
            "--topology-arg",
            f"input_topic={source}",
            "--topology-arg",
            f"output_topic=ops-fail-out-{run_id}",
            *extra,
        ],
        timeout_s=240,
    )
    return result, state / f"ops-fail-{run_id}" / "logs", source


def test_a_failing_processor_prints_the_cause_once_and_the_stacks_go_to_a_file(kafka, tmp_path):
    result, logs, source = _failing_run(kafka, tmp_path)
    lines = _lines(result)
    assert result.returncode == 1, result.stderr[-3000:]
    assert len(lines) <= MAX_LINES, "\n".join(lines)
    ours = [line for line in lines if line.startswith("run-topology: ")]
    assert len(ours) == 2, "\n".join(lines)
    report_line, cause = ours  # the cause is the last line
    for part in (f"topic={source}", "partition=0", "offset=1", "processor=explode", "ValueError"):
        assert part in cause
    assert not any("Traceback" in line for line in lines)
    # the cause once: not also as the task's own error event
    assert [line for line in lines if "cannot handle 'boom'" in line] == [cause], "\n".join(lines)
    (report,) = logs.glob("failure-*.txt")
    assert str(report.resolve()) in report_line
    text = report.read_text()
    assert "Traceback (most recent call last)" in text
    assert "ValueError: cannot handle 'boom'" in text  # the Python stack from the task
    assert "JVM stack trace" in text or "JVM stacktrace" in text
    assert "at org.apache.spark." in text


def test_debug_shows_what_the_default_level_cuts(kafka, tmp_path):
    result, _, _ = _failing_run(kafka, tmp_path, "--log-level", "debug")
    lines = _lines(result)
    assert result.returncode == 1
    assert len(lines) > 3 * MAX_LINES
    text = "\n".join(lines)
    assert "Traceback (most recent call last)" in text  # Spark's own report of the task
    assert "level='debug'" in text


def test_a_successful_run_prints_few_lines(kafka, tmp_path):
    run_id = uid()
    source = f"ops-sales-in-{run_id}"
    kafka.create_topic(source, 2)
    produce(kafka.bootstrap_servers, source, SALES_EVENTS)
    result = run_cli(
        [
            SALES,
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--application-id",
            f"ops-sales-{run_id}",
            "--state-dir",
            str(tmp_path / "state"),
            "--master",
            "local[2]",
            "--available-now",
            "--topology-arg",
            f"input_topic={source}",
            "--topology-arg",
            f"output_topic=ops-sales-out-{run_id}",
        ],
        timeout_s=240,
    )
    lines = _lines(result)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(lines) <= MAX_LINES, "\n".join(lines)
    assert not any(re.match(r"^\d\d/\d\d/\d\d .* (WARN|INFO) ", line) for line in lines)
    assert not any("FutureWarning" in line or "[Stage " in line for line in lines)
    assert any("event='run_finished'" in line and "records=3" in line for line in lines)


def test_kafka_client_settings_reach_the_clients_of_each_role(kafka, tmp_path):
    run_id = uid()
    source = f"ops-kc-in-{run_id}"
    kafka.create_topic(source, 1)
    produce(kafka.bootstrap_servers, source, SALES_EVENTS)
    properties = tmp_path / "client.properties"
    properties.write_text(
        "# per role, as Kafka Streams' consumer./producer./admin. prefixes\n"
        f"consumer.client.id=ops-c-{run_id}\n"
        f"producer.client.id=ops-p-{run_id}\n"
        "socket.timeout.ms = 30000\n"
        "producer.linger.ms: 2\n"
        "consumer.fetch.wait.max.ms=50\n"
    )
    result = run_cli(
        [
            SALES,
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--application-id",
            f"ops-kc-{run_id}",
            "--state-dir",
            str(tmp_path / "state"),
            "--master",
            "local[2]",
            "--available-now",
            "--topology-arg",
            f"input_topic={source}",
            "--topology-arg",
            f"output_topic=ops-kc-out-{run_id}",
            "--kafka-config-file",
            str(properties),
            "--kafka-config",
            "debug=metadata",  # librdkafka's lines name the client: "<client.id>#consumer-1"
            "--log-level",
            "debug",
        ],
        timeout_s=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stderr
    assert f"ops-c-{run_id}#consumer-" in text  # task readers, offset look-ups
    assert f"ops-p-{run_id}#producer-" in text  # task producers
    assert "will be ignored" not in text  # each role got only what it uses


def test_wrong_security_protocol_exits_2_naming_the_broker_and_the_setting(kafka, tmp_path):
    result = run_cli(
        [
            SALES,
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--state-dir",
            str(tmp_path),
            "--kafka-config",
            "security.protocol=SSL",
        ],
        timeout_s=60,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("run-topology: ")]
    assert kafka.bootstrap_servers in line and "security.protocol=SSL" in line
