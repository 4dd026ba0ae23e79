"""The guard of ``tests/harness/integration_guard.py``: a test not marked ``integration`` that
uses the broker or Spark fixture, or starts a broker, a JVM or ``run-topology``, fails.

The inner session runs in a subprocess with fake ``kafka``/``spark`` fixtures and fake ``java``
and ``tansu`` executables that only leave a file behind, so nothing heavy starts even if the
guard were gone, and every assertion below fails then (the unmarked tests would pass).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.harness.integration_guard import heavy_process

REPO_ROOT = Path(__file__).resolve().parent.parent

INNER_CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    (tmp_path_factory.getbasetemp() / "kafka-started").write_text("")
    return "127.0.0.1:1"

@pytest.fixture
def uses_spark(spark):
    return spark

@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    (tmp_path_factory.getbasetemp() / "spark-started").write_text("")
    return object()
"""

INNER_TESTS = """
import os, subprocess, sys
import pytest

FAKES = os.environ["GUARD_FAKES"]

def run(name):
    subprocess.run([os.path.join(FAKES, name), name], check=True)

def test_unmarked_uses_kafka(kafka):
    pass

def test_unmarked_uses_spark_through_a_fixture(uses_spark):
    pass

def test_unmarked_starts_java():
    run("java")

def test_unmarked_swallows_the_refusal():
    try:
        run("tansu")
    except Exception:
        pass

def test_unmarked_starts_run_topology():
    subprocess.run([sys.executable, "-m", "processor_api.cli.run_topology", "--help"], capture_output=True)

def test_unmarked_runs_plain_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.integration
def test_marked_uses_kafka_and_starts_java(kafka):
    run("java")

"""


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    """``java`` and ``tansu`` executables that only write ``<name>-ran`` next to themselves."""
    directory = tmp_path / "fakes"
    directory.mkdir()
    for name in ("java", "tansu"):
        script = directory / name
        script.write_text(f'#!/bin/sh\ntouch "{directory}/$1-ran"\n')
        script.chmod(0o755)
    return directory


def _run_inner(pytester: pytest.Pytester, fakes: Path, monkeypatch) -> pytest.RunResult:
    monkeypatch.setenv("GUARD_FAKES", str(fakes))
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    basetemp = pytester.path / "basetemp"
    return pytester.runpytest_subprocess(
        "-p", "tests.harness.integration_guard", "-p", "no:cacheprovider", f"--basetemp={basetemp}"
    )


def test_unmarked_tests_that_start_a_broker_or_a_jvm_fail_and_start_nothing(
    pytester: pytest.Pytester, fakes: Path, monkeypatch
):
    result = _run_inner(pytester, fakes, monkeypatch)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 2, result.stdout.str()
    # the two fixture users error at setup; the three that start a process fail
    assert outcomes.get("errors") == 2 and outcomes.get("failed") == 3, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*test_unmarked_uses_kafka*not marked integration but uses the fixture(s) kafka*",
            "*test_unmarked_uses_spark_through_a_fixture*uses the fixture(s) spark*",
        ],
        consecutive=False,
    )
    text = result.stdout.str()
    assert "started a process: " + str(fakes / "java") in text
    assert "started a process: " + str(fakes / "tansu") in text
    assert "started a process: run-topology (python -m processor_api.cli.run_topology)" in text
    assert "mark it @pytest.mark.integration" in text
    # refused before anything ran: only the marked test ran java and set the broker fixture up
    assert sorted(p.name for p in fakes.glob("*-ran")) == ["java-ran"]
    assert (pytester.path / "basetemp" / "kafka-started").exists()
    assert not (pytester.path / "basetemp" / "spark-started").exists()


def test_a_module_mark_counts(pytester: pytest.Pytester, fakes: Path, monkeypatch):
    monkeypatch.setenv("GUARD_FAKES", str(fakes))
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(
        test_module_mark=f"""
        import subprocess
        import pytest
        pytestmark = pytest.mark.integration
        def test_runs_java():
            subprocess.run([{str(fakes / "java")!r}, "java"], check=True)
        """
    )
    result = pytester.runpytest_subprocess("-p", "tests.harness.integration_guard")
    result.assert_outcomes(passed=1)
    assert (fakes / "java-ran").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["/usr/lib/jvm/bin/java", "-cp", "x"], "/usr/lib/jvm/bin/java -cp x"),
        (["/opt/spark/./bin/spark-submit", "pyspark-shell"], "/opt/spark/./bin/spark-submit"),
        ("tansu broker --listener-url tcp://127.0.0.1:9", "tansu broker --listener-url"),
        (
            [sys.executable, "-m", "processor_api.cli.run_topology", "m:f"],
            "python -m processor_api.cli.run_topology",
        ),
        (
            [sys.executable, "-mprocessor_api.cli.run_topology"],
            "python -m processor_api.cli.run_topology",
        ),
        ([Path("/usr/local/bin/run-topology"), "m:f"], "run-topology m:f"),
        ([sys.executable, "-m", "processor_api.cli.tools", "broker"], "processor-api (python"),
        ([sys.executable, "-m", "processor_api.runtime.worker_host"], None),
        ([sys.executable, "-c", "import pyspark"], None),
        (["javac"], None),
    ],
)
def test_what_counts_as_a_broker_or_a_jvm(args, expected):
    found = heavy_process(args)
    assert found is None if expected is None else expected in found
