"""Fixtures of the integration tests (besides ``kafka`` and ``spark``, see tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.harness.word_count import WordCountRun, run_word_count


@pytest.fixture(scope="session")
def word_count_local(kafka, spark, tmp_path_factory) -> WordCountRun:
    """Word count on the shared local SparkSession, run once per session."""
    return run_word_count(kafka, spark, tmp_path_factory.mktemp("word-count-local"))
