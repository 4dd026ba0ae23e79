"""``run-topology`` stops before anything starts, exit 2, when the topology's module or
function fails, or when a ``mock://`` schema registry would serve a run on Spark.

``main()`` runs in this process (the command's own code path and exit status); the broker
address given is never reached, and no Spark starts."""

from __future__ import annotations

import re
import sys

import pytest

from processor_api.cli.run_topology import main
from processor_api.testing.embedded import free_port

MODULE = "tests.ops.setup_error_topologies"


@pytest.fixture(autouse=True)
def _keep_logging(monkeypatch):
    """main() would point structlog at pytest's captured stderr, closed after the test."""
    monkeypatch.setattr(
        "processor_api.cli.run_topology.configure_logging", lambda *args, **kwargs: None
    )


def _run(capsys, tmp_path, topology: str, *extra: str) -> tuple[int, list[str]]:
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there
    status = main([topology, "--bootstrap-servers", nowhere, "--state-dir", str(tmp_path), *extra])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("run-topology: ")]
    assert lines, err[-3000:]
    assert nowhere not in err, "the broker was contacted before the refusal"
    return status, lines


def test_a_topology_function_that_raises_exits_2_naming_the_error_and_where(capsys, tmp_path):
    status, lines = _run(capsys, tmp_path, f"{MODULE}:build_raising")
    assert status == 2, lines
    assert lines[-1].startswith(
        f"run-topology: error: {MODULE}:build_raising raised RuntimeError: "
        "the products file is empty while building the topology (at "
    ), lines
    assert re.search(r"setup_error_topologies\.py:\d+ in _read_products\)$", lines[-1]), lines
    # the user's traceback is kept in the error report named on the line before
    (report,) = re.findall(r"full error report \(stack traces\): (\S+)$", lines[-2])
    with open(report, encoding="utf-8") as file:
        text = file.read()
    assert "in build_raising" in text and "in _read_products" in text


@pytest.mark.parametrize(
    ("source", "raised", "at"),
    [
        ("x = 1\n1 / 0\n", "ZeroDivisionError: division by zero", ":2 in <module>)"),
        ("def build(:\n", "SyntaxError: invalid syntax", ":1)"),
    ],
    ids=["raises", "syntax-error"],
)
def test_a_module_that_fails_to_import_exits_2(capsys, tmp_path, monkeypatch, source, raised, at):
    (tmp_path / "broken_topology_module.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_topology_module", raising=False)
    status, lines = _run(capsys, tmp_path, "broken_topology_module:build")
    assert status == 2, lines
    assert lines[-1].startswith(
        "run-topology: error: importing module 'broken_topology_module' of "
        f"'broken_topology_module:build' raised {raised}"
    ), lines
    assert lines[-1].endswith(f"broken_topology_module.py{at}"), lines


def test_a_mock_registry_in_the_run_config_is_refused_on_spark(capsys, tmp_path):
    url = "mock://setup-errors-config"
    status, lines = _run(
        capsys, tmp_path, f"{MODULE}:build_avro", "--config", f"schema.registry.url={url}"
    )
    assert status == 2, lines
    line = lines[-1]
    assert line.startswith("run-topology: error: a mock:// schema registry cannot serve"), line
    assert "lives inside one process" in line and "http(s)://" in line  # why, and instead
    assert line.endswith(f"Found: --config schema.registry.url={url}"), line


def test_a_mock_registry_named_by_a_serde_is_refused_on_spark(capsys, tmp_path):
    url = "mock://setup-errors-serde"
    status, lines = _run(
        capsys,
        tmp_path,
        f"{MODULE}:build_avro",
        "--topology-arg",
        f"registry={url}",
        "--config",
        "schema.registry.url=http://127.0.0.1:1",
    )
    assert status == 2, lines
    assert lines[-1].endswith(
        f"Found: the value serde of sink 'out' (topic visits-copy): registry={url}"
    ), lines


def test_every_place_a_serde_can_name_a_mock_registry_is_found():
    from processor_api import Processor, Serdes, Stores, Topology
    from processor_api.spark.mock_registries import in_process_registries
    from tests.ops.setup_error_topologies import VISIT

    class Keep(Processor):
        def process(self, record):
            pass

    mock = Serdes.avro(VISIT, registry="mock://everywhere")
    plain = Serdes.string()
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("s"), plain, mock)
    table = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("g"), mock, plain
    ).with_logging_disabled()
    topology = (
        Topology()
        .add_source("in", "a", key_serde=mock, value_serde=plain)
        .add_processor("p", Keep, "in")
        .add_state_store(store, "p")
        .add_global_store(table, "g-in", "g-topic", "g-p", Keep, plain, mock)
    )
    assert in_process_registries(topology, {"url": "http://registry:8081"}) == [
        "the key serde of source 'in' (topics a): registry=mock://everywhere",
        "the value serde of store 's': registry=mock://everywhere",
        "the value serde of the source of global store 'g' (topic g-topic): "
        "registry=mock://everywhere",
        "the key serde of global store 'g' (topic g-topic): registry=mock://everywhere",
    ]
    assert in_process_registries(topology.__class__(), {"url": "MOCK://x"}) == [
        "--config schema.registry.url=MOCK://x"
    ]
