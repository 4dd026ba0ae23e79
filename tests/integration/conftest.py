"""Fixtures of the integration tests (besides ``kafka`` and ``spark``, see tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.local_cluster import one_cluster_at_a_time
from tests.harness.word_count import WordCountRun, run_word_count


@pytest.fixture(scope="session")
def word_count_local(kafka, spark, tmp_path_factory) -> WordCountRun:
    """Word count on the shared local SparkSession, run once per session."""
    return run_word_count(kafka, spark, tmp_path_factory.mktemp("word-count-local"))


@pytest.fixture
def local_cluster(tmp_path_factory) -> Iterator[None]:
    """For a test that starts ``local-cluster[...]``: no other such test runs meanwhile (see
    ``tests/harness/local_cluster.py``: the runs would share executor directories)."""
    shared = tmp_path_factory.getbasetemp().parent  # the same for every xdist worker
    with one_cluster_at_a_time(shared / "local-cluster.lock"):
        yield
