"""topologies.word_count: counts match a plain Counter; records cross the repartition topic."""

from __future__ import annotations

import re
from collections import Counter

from processor_api.testing import TopologyTestDriver
from topologies.word_count import build_topology, split_words

LINES = [
    "Hello Kafka Streams",
    "All streams lead to Kafka",
    "Join Kafka Summit!",
    "  hello,   HELLO... world  ",
    "",
    "---",
]


def expected_counts(lines: list[str]) -> Counter[str]:
    return Counter(w for line in lines for w in re.split(r"\W+", line.lower()) if w)


def test_counts_match_counter_and_store() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        lines = driver.create_input_topic("streams-plaintext-input")
        output = driver.create_output_topic("streams-wordcount-output")
        repartition = driver.create_output_topic("word-count-repartition")
        for ts, line in enumerate(LINES):
            lines.pipe_input(None, line, ts)

        expected = expected_counts(LINES)
        assert output.get_queue_size() == sum(expected.values())  # one update per word
        assert output.read_key_values_to_map() == dict(expected)

        store = driver.get_key_value_store("counts-store")
        assert {kv.key: kv.value for kv in store.all()} == dict(expected)
        assert [kv.key for kv in store.all()] == sorted(expected)

        # every word went through the repartition topic, keyed and valued by the word
        through = repartition.read_key_values_to_list()
        assert len(through) == sum(expected.values())
        assert all(kv.key == kv.value for kv in through)
        assert Counter(kv.key for kv in through) == expected


def test_each_update_is_forwarded_in_order() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        lines = driver.create_input_topic("streams-plaintext-input")
        output = driver.create_output_topic("streams-wordcount-output")
        lines.pipe_input("k", "a b a", 5)
        records = output.read_records_to_list()
        assert [(r.key, r.value) for r in records] == [("a", 1), ("b", 1), ("a", 2)]
        assert all(r.timestamp == 5 for r in records)
        lines.pipe_input("k", None, 6)  # null line: nothing
        assert output.is_empty()


def test_two_subtopologies_and_custom_names() -> None:
    topology = build_topology(
        input_topic="text",
        repartition_topic="words-by-word",
        output_topic="counts",
        store_name="wc",
    )
    subs = topology.subtopologies()
    assert len(subs) == 2
    assert subs[0].source_topics == ("text",) and subs[0].sink_topics == ("words-by-word",)
    assert subs[1].source_topics == ("words-by-word",) and subs[1].store_names == ("wc",)
    assert topology.internal_topics() == ["words-by-word"]
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("text").pipe_input(None, "x y x", 0)
        assert driver.create_output_topic("counts").read_key_values_to_map() == {"x": 2, "y": 1}
        assert driver.get_key_value_store("wc").get("x") == 2


def test_split_words() -> None:
    assert split_words("It's a Test--of SPLIT_words, 42 times") == [
        "it",
        "s",
        "a",
        "test",
        "of",
        "split_words",
        "42",
        "times",
    ]
    assert split_words("  ...  ") == []
