"""``run-topology --metrics-port``: a port out of range is refused before anything starts."""

from __future__ import annotations

from processor_api.cli.run_topology import main


def test_a_metrics_port_out_of_range_is_a_setup_error_naming_the_flag(capsys):
    code = main(
        [
            "topologies.word_count:build_topology",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--metrics-port",
            "70000",
        ]
    )
    assert code == 2
    assert "--metrics-port must be 0-65535, got 70000" in capsys.readouterr().err
