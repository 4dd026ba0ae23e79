"""Shared fixtures: one embedded broker and one SparkSession per test session.

The helpers they and the tests use are the modules of ``tests/harness``. A test that uses either
fixture, or starts a broker, a JVM or ``run-topology`` itself, must be marked ``integration``:
``tests/harness/integration_guard.py`` fails it otherwise, so ``make test-fast`` stays light.
``make test`` runs two pytest-xdist workers, each with its own broker and SparkSession;
``tests/harness/long_first.py`` orders the files so the long ones start first.
"""

from __future__ import annotations

import os

import pytest

# the harness's own asserts report like the tests' (must come before anything imports it)
pytest.register_assert_rewrite("tests.harness")

from tests.harness.integration_guard import (  # noqa: E402  (hooks of this conftest)
    pytest_configure,
    pytest_runtest_makereport,
    pytest_runtest_protocol,
    pytest_runtest_setup,
)
from tests.harness.long_first import pytest_collection_modifyitems  # noqa: E402

__all__ = [
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_runtest_makereport",
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
]


@pytest.fixture(scope="session")
def kafka():
    """A real Kafka-protocol broker (Tansu) on a free loopback port, for the whole session."""
    from processor_api.testing.embedded import EmbeddedKafka

    with EmbeddedKafka() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local SparkSession shared by every test that needs Spark."""
    import sys
    from pathlib import Path

    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (pandas, pyarrow) and import the test modules
    # (e.g. tests.integration.topologies_for_tests): both are read when the JVM starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master(os.environ.get("PROCESSOR_API_TEST_MASTER", "local[2]"))
        .appName("processor-api-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture
def cli_logging(monkeypatch):
    """For tests that call a CLI's ``main()`` in this process: it configures logging (level,
    and ``$PROCESSOR_API_LOG_LEVEL`` that subprocesses of later tests inherit); put both back."""
    from processor_api.logging import LEVEL_ENV, configure_logging, current_level

    level = current_level()
    monkeypatch.setenv(LEVEL_ENV, level)  # restored (or removed) after the test
    yield
    configure_logging("console", level)


@pytest.fixture(scope="session")
def schema_registry():
    """A Confluent Schema Registry REST server on a loopback port, for the whole session
    (``tests/harness/schema_registry.py``); ``schema_registry.new_url()`` is a fresh registry."""
    from tests.harness.schema_registry import SchemaRegistryServer

    with SchemaRegistryServer() as server:
        yield server
