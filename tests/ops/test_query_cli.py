"""``run-topology --query-*`` options are checked before anything starts; ``processor-api
query`` says when its endpoint does not answer."""

from __future__ import annotations

import socket

from processor_api.cli.run_topology import main
from processor_api.cli.tools import main as processor_api_main

ARGS = ["topologies.word_count:build_topology", "--bootstrap-servers", "127.0.0.1:1"]


def test_a_query_port_out_of_range_is_a_setup_error_naming_the_flag(capsys):
    assert main([*ARGS, "--query-port", "70000"]) == 2
    assert "--query-port must be 0-65535, got 70000" in capsys.readouterr().err


def test_an_empty_token_file_is_a_setup_error_naming_the_file(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("\n")
    assert main([*ARGS, "--query-port", "0", "--query-token-file", str(token)]) == 2
    assert f"the query token file {str(token)!r} is empty" in capsys.readouterr().err


def test_a_token_file_without_a_query_port_is_a_setup_error(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("secret\n")
    assert main([*ARGS, "--query-token-file", str(token)]) == 2
    assert "--query-token-file needs --query-port" in capsys.readouterr().err


def test_the_query_command_says_when_nothing_answers(capsys):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = processor_api_main(["query", "--url", f"http://127.0.0.1:{port}", "totals", "k"])
    assert code == 4
    assert f"the query endpoint http://127.0.0.1:{port} does not answer" in capsys.readouterr().err
