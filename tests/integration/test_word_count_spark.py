"""Word count: two sub-topologies joined by a repartition topic, on Spark.

The run itself is the session fixture ``word_count_local`` (``tests/integration/conftest.py``,
built by ``tests.harness.word_count``): 9 lines on a 3-partition input topic, continuous run on
the shared local SparkSession until every count arrived, then ``request_stop()``.
``test_local_cluster`` compares its result with this one.
"""

from __future__ import annotations

from collections import Counter

import pytest

from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from tests.harness.word_count import WORD_COUNT_LINES
from topologies.word_count import split_words

pytestmark = pytest.mark.integration


def test_word_count_over_three_partitions_equals_a_counter(word_count_local):
    run = word_count_local
    expected = Counter(word for line in WORD_COUNT_LINES for word in split_words(line))
    total_words = sum(expected.values())

    # one output record (long value) per word occurrence; the latest count per word = Counter
    assert len(run.records) == total_words
    latest: dict[str, int] = {}
    for word, count, *_ in run.records:
        latest[word] = max(latest.get(word, 0), count)
    assert latest == dict(expected)
    # per word, the counts arrive in order 1, 2, ..., n (one task, one partition per word)
    for word in expected:
        assert [c for w, c, *_ in run.records if w == word] == list(range(1, expected[word] + 1))

    # sub-topology 0 -> repartition topic: every word once, each word in exactly one partition
    assert sorted(w for w, *_ in run.repartitioned) == sorted(expected.elements())
    partitions_by_word: dict[str, set[int]] = {}
    for word, _value, partition, *_ in run.repartitioned:
        partitions_by_word.setdefault(word, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_by_word.values())
    assert len({p for ps in partitions_by_word.values() for p in ps}) > 1  # really spread

    # both sub-topologies processed: lines (sub-topology 0) + words (sub-topology 1)
    assert run.result.records == len(WORD_COUNT_LINES) + total_words
    store = read_local_store(
        run.state_dir, run.app_id, "counts-store", Serdes.string(), Serdes.long()
    )
    assert store == dict(expected)
