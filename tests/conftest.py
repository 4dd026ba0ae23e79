"""Shared fixtures: one embedded broker and one SparkSession per test session."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def kafka():
    """A real Kafka-protocol broker (Tansu) on a free loopback port, for the whole session."""
    from processor_api.kafka.embedded import EmbeddedKafka

    with EmbeddedKafka() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local SparkSession shared by every test that needs Spark."""
    from pyspark.sql import SparkSession

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
