"""``processor-api broker``: a broker kept in the foreground for local development."""

from __future__ import annotations

import select
import signal
import socket
import subprocess
import sys

import pytest

from processor_api.cli.tools import main
from processor_api.kafka.admin import topic_partitions
from processor_api.testing.embedded import free_port


def _first_line(stream, timeout_s: float) -> str:
    ready, _, _ = select.select([stream], [], [], timeout_s)
    assert ready, f"no address printed within {timeout_s} s"
    return stream.readline().strip()


@pytest.mark.integration
def test_the_broker_prints_its_address_keeps_running_and_stops_on_ctrl_c():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "processor_api.cli.tools", "broker", "--port", str(port),
         "--topic", "orders:3", "--topic", "customers"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        address = _first_line(process.stdout, 60)
        assert address == f"127.0.0.1:{port}"
        assert topic_partitions(address, ["orders", "customers"]) == {"orders": 3, "customers": 1}
        assert process.poll() is None  # still serving after the topics were used
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "memory only: topics are lost when it stops" in process.stderr.read()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))  # the broker went with it


def test_a_taken_port_exits_2_naming_it(capsys, cli_logging):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["broker", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"processor-api broker: error: cannot start the embedded broker on 127.0.0.1:{port}" in (
        err
    )


def test_a_bad_topic_argument_is_a_usage_error(capsys, cli_logging):
    with pytest.raises(SystemExit) as exited:
        main(["broker", "--topic", "orders:none"])
    assert exited.value.code == 2
    assert "expected NAME or NAME:PARTITIONS, got 'orders:none'" in capsys.readouterr().err
