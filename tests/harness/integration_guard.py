"""A pytest plugin keeping ``make test-fast`` (``-m "not integration"``) free of brokers and JVMs.

A test not marked ``integration`` fails when it

* requests the ``kafka`` (embedded broker) or ``spark`` (SparkSession) fixture, directly or
  through another fixture: it fails at setup, before the fixture starts anything;
* starts a process that is a broker or a JVM: ``tansu`` (what ``EmbeddedKafka`` runs), ``java``,
  ``spark-submit``/``spark-class`` (what a SparkSession launches), ``run-topology``
  (``python -m processor_api.cli.run_topology``) or ``processor-api broker``. A Python audit hook sees
  every ``subprocess.Popen`` however the module imported it; it refuses to start the process,
  and the test fails even if it caught the exception.

``tests/conftest.py`` loads it; ``tests/test_integration_guard.py`` proves it with pytester.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

#: Fixtures that start the embedded broker or a SparkSession.
HEAVY_FIXTURES = ("kafka", "spark")
#: Executable names that are a broker or a JVM (or launch one at once).
HEAVY_EXECUTABLES = frozenset(
    {"tansu", "java", "spark-submit", "spark-class", "pyspark", "run-topology", "processor-api"}
)
#: Modules that, run with ``python -m``, start a topology on Spark or a broker.
HEAVY_MODULES = {
    "processor_api.cli.run_topology": "run-topology",
    "processor_api.cli.tools": "processor-api",
}

_HINT = (
    "mark it @pytest.mark.integration (or pytestmark = pytest.mark.integration): "
    "'make test-fast' runs -m 'not integration' and must start neither a broker nor a JVM"
)

_violations = pytest.StashKey[list[str]]()
#: The item being run when it is not marked integration (the audit hook reads it).
_current: pytest.Item | None = None
_hook_installed = False


class UnmarkedIntegrationError(RuntimeError):
    """A test not marked ``integration`` tried to start a broker or a JVM."""


def heavy_process(args: Any) -> str | None:
    """What ``args`` (as given to ``subprocess.Popen``) starts, if it is a broker or a JVM."""
    if isinstance(args, (str, bytes)):
        argv = shlex.split(os.fsdecode(args))
    elif isinstance(args, os.PathLike):
        argv = [os.fsdecode(args)]
    else:
        try:
            argv = [os.fsdecode(a) for a in args]
        except TypeError:
            return None
    if not argv:
        return None
    if Path(argv[0]).name in HEAVY_EXECUTABLES:
        return " ".join(argv[:3])
    for i, arg in enumerate(argv):
        module = argv[i + 1] if arg == "-m" and i + 1 < len(argv) else arg.removeprefix("-m")
        if arg.startswith("-m") and module in HEAVY_MODULES:
            return f"{HEAVY_MODULES[module]} (python -m {module})"
    return None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    item = _current
    if item is None or event != "subprocess.Popen":
        return
    executable, argv = args[0], args[1]
    started = heavy_process(argv)
    if started is None and executable is not None:
        started = heavy_process([executable])
    if started is None:
        return
    message = f"{item.nodeid} is not marked integration but started a process: {started}; {_HINT}"
    item.stash.setdefault(_violations, []).append(message)
    raise UnmarkedIntegrationError(message)


def pytest_configure(config: pytest.Config) -> None:
    global _hook_installed
    config.addinivalue_line("markers", "integration: needs the embedded broker and/or local Spark")
    if not _hook_installed:
        sys.addaudithook(_audit)  # cannot be removed: it acts only while _current is set
        _hook_installed = True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    global _current
    _current = None if item.get_closest_marker("integration") else item
    try:
        yield
    finally:
        _current = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("integration"):
        return
    wanted = [name for name in HEAVY_FIXTURES if name in getattr(item, "fixturenames", ())]
    if wanted:
        pytest.fail(
            f"{item.nodeid} is not marked integration but uses the fixture(s) "
            f"{', '.join(wanted)} (embedded broker / SparkSession); {_HINT}",
            pytrace=False,
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    violations = item.stash.get(_violations, [])
    if not violations:
        return
    item.stash[_violations] = []
    if report.passed:  # the test swallowed the exception: fail it anyway
        report.outcome = "failed"
        report.longrepr = "\n".join(violations)
    else:
        report.sections.append(("integration guard", "\n".join(violations)))
