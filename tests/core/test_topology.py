"""Topology validation, sub-topology derivation and Kafka Streams' description format."""

from __future__ import annotations

import pytest

from processor_api import Processor, Serdes, Stores, Topology, TopologyError


class Noop(Processor):
    def process(self, record):
        pass


def store(name):
    return Stores.key_value_store_builder(
        Stores.in_memory_key_value_store(name), Serdes.string(), Serdes.long()
    )


def test_duplicate_names_are_rejected():
    top = Topology().add_source("s", "t")
    with pytest.raises(TopologyError, match="'s' is already added"):
        top.add_processor("s", Noop, "s")


def test_unknown_parent_is_named():
    top = Topology().add_source("s", "t")
    with pytest.raises(TopologyError, match="parent 'nope' of node 'p'"):
        top.add_processor("p", Noop, "nope")


def test_processor_without_parent_has_no_path_from_a_source():
    with pytest.raises(TopologyError, match="processor 'p' has no parent"):
        Topology().add_source("s", "t").add_processor("p", Noop)


def test_topic_claimed_by_two_sources():
    top = Topology().add_source("s1", "t")
    with pytest.raises(
        TopologyError, match="topic 't' of source 's2' is already read by source 's1'"
    ):
        top.add_source("s2", "x", "t")


def test_store_connected_to_unknown_processor():
    top = Topology().add_source("s", "t")
    with pytest.raises(TopologyError, match="'ghost'.*does not exist"):
        top.add_state_store(store("kv"), "ghost")


def test_unknown_store_and_sink_as_parent():
    top = Topology().add_source("s", "t").add_processor("p", Noop, "s").add_sink("k", "o", "p")
    with pytest.raises(TopologyError, match="state store 'missing': the store is not added"):
        top.connect_processor_and_state_stores("p", "missing")
    with pytest.raises(TopologyError, match="sink 'k' cannot be the parent"):
        top.add_processor("q", Noop, "k")


def test_processor_instance_instead_of_supplier():
    with pytest.raises(TopologyError, match="not an instance"):
        Topology().add_source("s", "t").add_processor("p", Noop(), "s")


def test_unconnected_store_is_reported():
    top = Topology().add_source("s", "t").add_processor("p", Noop, "s").add_state_store(store("kv"))
    with pytest.raises(TopologyError, match="'kv' is not connected"):
        top.subtopologies()


def test_subtopologies_are_components_joined_by_stores_in_insertion_order():
    top = (
        Topology()
        .add_source("s1", "t1")
        .add_source("s2", "t2")
        .add_processor("p1", Noop, "s1")
        .add_processor("p2", Noop, "s2")
        .add_source("s3", "t3")
        .add_processor("p3", Noop, "s3")
        .add_state_store(store("shared"), "p1", "p3")
    )
    subs = top.subtopologies()
    assert [sub.node_names for sub in subs] == [("s1", "p1", "s3", "p3"), ("s2", "p2")]
    assert subs[0].source_topics == ("t1", "t3")
    assert subs[0].store_names == ("shared",)
    assert subs[1].task_id(4) == "1_4"


def test_repartition_topics_are_internal():
    top = (
        Topology()
        .add_source("s", "in")
        .add_processor("p", Noop, "s")
        .add_sink("k", "by-word", "p")
        .add_source("s2", "by-word")
        .add_processor("c", Noop, "s2")
    )
    assert top.internal_topics() == ["by-word"]
    assert len(top.subtopologies()) == 2


def test_describe_matches_kafka_streams_text_format():
    top = (
        Topology()
        .add_source("Source", "streams-plaintext-input")
        .add_processor("Split", Noop, "Source")
        .add_sink("Repartition", "words", "Split")
        .add_source("WordsSource", "words")
        .add_processor("Count", Noop, "WordsSource")
        .add_state_store(store("counts-store"), "Count")
        .add_sink("Sink", "streams-wordcount-output", "Count")
    )
    expected = (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: Source (topics: [streams-plaintext-input])\n"
        "      --> Split\n"
        "    Processor: Split (stores: [])\n"
        "      --> Repartition\n"
        "      <-- Source\n"
        "    Sink: Repartition (topic: words)\n"
        "      <-- Split\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: WordsSource (topics: [words])\n"
        "      --> Count\n"
        "    Processor: Count (stores: [counts-store])\n"
        "      --> Sink\n"
        "      <-- WordsSource\n"
        "    Sink: Sink (topic: streams-wordcount-output)\n"
        "      <-- Count\n"
        "\n"
    )
    assert str(top.describe()) == expected


def test_describe_orders_nodes_by_subtree_size_then_name():
    top = (
        Topology()
        .add_source("src", "t")
        .add_processor("b", Noop, "src")
        .add_processor("a", Noop, "src")
        .add_processor("c", Noop, "b")
    )
    text = str(top.describe())
    assert text.index("Processor: b") < text.index("Processor: a") < text.index("Processor: c")
    assert "      --> b, a\n" in text


ILLEGAL_TOPICS = [
    ("", "non-empty"),
    (".", "cannot be '.' or '..'"),
    ("..", "cannot be '.' or '..'"),
    ("x" * 250, "at most 249 characters long, this one has 250"),
    ("session summaries/v1!", "only ASCII letters, digits, '.', '_' and '-', not ' !/'"),
    ("tópico", "not 'ó'"),
]


@pytest.mark.parametrize(("topic", "rule"), ILLEGAL_TOPICS)
def test_topic_names_kafka_refuses_are_refused_naming_the_node_and_the_rule(topic, rule):
    kv = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("g"), Serdes.string(), Serdes.long()
    ).with_logging_disabled()
    attempts = {
        "source 'src'": lambda: Topology().add_source("src", "ok", topic),
        "sink 'out'": lambda: Topology().add_source("s", "t").add_sink("out", topic, "s"),
        "source 'gsrc'": lambda: Topology().add_global_store(kv, "gsrc", topic, "gp", Noop),
        "source 'rsrc'": lambda: Topology().add_read_only_state_store(
            kv, "rsrc", topic, "rp", Noop
        ),
    }
    for node, attempt in attempts.items():
        with pytest.raises(TopologyError) as caught:
            attempt()
        message = str(caught.value)
        assert message.startswith(f"{node}: invalid topic name {topic!r}: "), message
        assert rule in message


def test_legal_topic_names_at_the_limits_are_accepted():
    names = ["x" * 249, "a.b_c-D9", "...", "_", "-"]
    top = Topology().add_source("s", *names)
    top.add_sink("out", "y" * 249, "s")
    assert sorted(top.source_topics()) == sorted(names)


def test_a_topic_extractors_illegal_result_fails_the_record_naming_the_sink_and_rule():
    from processor_api.errors import ProcessingError
    from processor_api.testing import TopologyTestDriver

    top = (
        Topology()
        .add_source("s", "in", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_sink("out", lambda record: f"summaries {record.value}", "s")
    )
    with TopologyTestDriver(top) as driver:
        with pytest.raises(ProcessingError) as caught:
            driver.create_input_topic("in").pipe_input("k", "v1")
    message = str(caught.value)
    assert "topic extractor of sink 'out' returned 'summaries v1'" in message
    assert "may contain only ASCII letters, digits, '.', '_' and '-', not ' '" in message
    assert "processor=out" in message and "offset=0" in message
