"""Unknown settings are refused, by the CLI (exit 2) and the Python API."""

from __future__ import annotations

import sys

import pytest

from processor_api.cli.run_topology import main
from processor_api.config import StreamsConfig, known_keys
from processor_api.errors import ConfigError
from processor_api.testing import TopologyTestDriver
from topologies.sales_aggregation import build_topology

SALES = "topologies.sales_aggregation:build_topology"


@pytest.fixture(autouse=True)
def _keep_logging(monkeypatch):
    """main() would point structlog at pytest's captured stderr, closed after the test."""
    monkeypatch.setattr(
        "processor_api.cli.run_topology.configure_logging", lambda *args, **kwargs: None
    )


NOWHERE = ["--bootstrap-servers", "127.0.0.1:1"]  # never reached: arguments fail first


def test_misspelt_key_is_refused_with_the_closest_known_key():
    with pytest.raises(ConfigError) as raised:
        StreamsConfig.from_dict({"dead_leter_topic": "x"})
    assert str(raised.value).startswith(
        "unknown config key 'dead_leter_topic' (did you mean 'dead_letter_topic'?)"
    )


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("default.deserialization.exception.handler", "log_and_continue", None),
        ("deserialization.exception.handler", "log_and_continue", None),
        ("default_processing_exception_handler", "log_and_continue", None),
        ("errors.dead.letter.queue.topic.name", "dlq", "dead_letter_topic"),
        ("processing.guarantee", "exactly_once_v2", None),
        ("application.id", "app-x", None),
    ],
)
def test_kafka_streams_names_are_accepted_dotted_or_underscored(key, value, field):
    for spelling in (key, key.replace(".", "_")):
        config = StreamsConfig.from_dict({spelling: value})
        name = field or key.replace(".", "_").removeprefix("default_")
        actual = getattr(config, name)
        assert getattr(actual, "value", actual) == value


def test_known_keys_include_the_handler_keys_and_keys_read_from_extra():
    assert {
        "deserialization_exception_handler",
        "processing_exception_handler",
        "production_exception_handler",
        "dead_letter_topic",
        "processing_guarantee",
        "application_id",
    } <= known_keys()
    config = StreamsConfig.from_dict({"production.exception.handler": "log_and_continue"})
    assert config.production_exception_handler == "log_and_continue"


def test_a_setting_with_a_flag_of_its_own_says_which_flag():
    with pytest.raises(ConfigError, match="--bootstrap-servers"):
        StreamsConfig.from_dict({"bootstrap.servers": "h:1"})


def test_the_test_driver_refuses_unknown_keys_too():
    with pytest.raises(ConfigError, match="unknown config key 'procesing.guarantee'"):
        TopologyTestDriver(build_topology(), {"procesing.guarantee": "exactly_once_v2"})


def _cli(capsys, *args: str) -> tuple[int, str]:
    status = main([SALES, *NOWHERE, *args])
    err = capsys.readouterr().err
    return status, err


def test_cli_unknown_config_key_exits_2_with_a_suggestion(capsys):
    status, err = _cli(capsys, "--config", "dead_leter_topic=x")
    assert status == 2
    assert (
        "run-topology: error: unknown config key 'dead_leter_topic' "
        "(did you mean 'dead_letter_topic'?)" in err
    )


def test_cli_config_contradicting_a_flag_exits_2(capsys):
    status, err = _cli(capsys, "--config", "application.id=a", "--application-id", "b")
    assert status == 2 and "contradicts --application-id b" in err


def test_cli_unknown_topology_argument_exits_2_naming_it_and_the_parameters(capsys):
    status, err = _cli(capsys, "--topology-arg", "nn=3")
    assert status == 2
    (line,) = [x for x in err.splitlines() if x.startswith("run-topology: ")]
    assert "unknown topology argument 'nn'" in line
    assert "build_topology(*, input_topic='sales-events-v1'" in line and "threshold=2000" in line


def test_cli_topology_argument_the_function_refuses_exits_2(capsys):
    status, err = _cli(capsys, "--topology-arg", "threshold=abc")
    assert status == 2
    (line,) = [x for x in err.splitlines() if x.startswith("run-topology: ")]
    assert "raised ValueError" in line and "threshold='abc'" in line and "parameters:" in line


def test_cli_finds_a_module_in_the_current_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "ops_cwd_module.py").write_text(
        "from topologies.sales_aggregation import build_topology as build\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "ops_cwd_module", raising=False)
    status = main(["ops_cwd_module:build", "--bootstrap-servers", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert status == 2
    assert "cannot import" not in err and "127.0.0.1:1" in err  # loaded; the broker is next
