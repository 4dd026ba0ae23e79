"""The import contract (``[tool.importlinter]`` in pyproject.toml, run by ``make lint``) breaks
when an arrow points up.

Each case copies the package and the contract into a temporary directory, adds one import
that points the wrong way to the copy, and runs ``lint-imports`` there: the contract must be
reported broken, naming the import. The unchanged copy must pass, so a broken case fails
because of its import and nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO / "processor_api",
        tmp_path / "processor_api",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", "pyproject.toml", "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _add_import(root: Path, module: str, statement: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{statement}\n")


def test_the_package_as_it_is_keeps_the_contract(tmp_path):
    result = _lint_imports(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "statement", "broken"),
    [
        # the arrow issue 37 named: kafka/ importing runtime/ for its types
        (
            "processor_api.kafka.transactions",
            "import processor_api.runtime.patience",
            "processor_api.kafka is not allowed to import processor_api.runtime",
        ),
        (
            "processor_api.state.base",
            "import processor_api.engine.task",
            "processor_api.state is not allowed to import processor_api.engine",
        ),
        (
            "processor_api.runtime.task_runner",
            "import processor_api.spark.runner",
            "processor_api.runtime is not allowed to import processor_api.spark",
        ),
        (
            "processor_api.spark.runner",
            "import processor_api.cli.run_topology",
            "processor_api.spark is not allowed to import processor_api.cli",
        ),
        # siblings: the task engine never reaches Kafka clients
        (
            "processor_api.engine.task",
            "import processor_api.kafka.admin",
            "processor_api.engine is not allowed to import processor_api.kafka",
        ),
        # a base module of the public API reaching a floor above it
        (
            "processor_api.serdes",
            "import processor_api.topology.dag",
            "processor_api.serdes is not allowed to import processor_api.topology",
        ),
        # the one allowed exception (engine -> kafka/names.py) holds only while names.py is a
        # leaf: through it the engine would reach a Kafka client
        (
            "processor_api.kafka.names",
            "import confluent_kafka",
            "processor_api.kafka.names is not allowed to import confluent_kafka",
        ),
    ],
)
def test_an_arrow_pointing_up_breaks_the_contract(tmp_path, module, statement, broken):
    root = _copy(tmp_path)
    _add_import(root, module, statement)
    result = _lint_imports(root)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in " ".join(result.stdout.split()), result.stdout
