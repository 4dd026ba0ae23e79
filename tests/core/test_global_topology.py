"""Global and read-only state stores in the topology: validation, sub-topology numbering and
``describe()`` (the cases of Kafka Streams' ``TopologyTest`` and ``InternalTopologyBuilderTest``
that apply)."""

from __future__ import annotations

import pytest

from processor_api import Processor, Serdes, Stores, Topology, TopologyError


class Noop(Processor):
    def process(self, record):
        pass


def kv(name, logging=False):
    builder = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store(name), Serdes.string(), Serdes.string()
    )
    return builder if logging else builder.with_logging_disabled()


def with_global(top, store="global-store", source="globalSource", topic="global-topic",
                processor="global-processor"):  # fmt: skip
    return top.add_global_store(kv(store), source, None, None, topic, processor, Noop)


def test_describe_global_store_block():
    top = with_global(Topology(), "globalStore", "source", "globalTopic", "processor")
    assert str(top.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0 for global store (will not generate tasks)\n"
        "    Source: source (topics: [globalTopic])\n"
        "      --> processor\n"
        "    Processor: processor (stores: [globalStore])\n"
        "      --> none\n"
        "      <-- source\n"
    )


def test_describe_multiple_global_stores_numbered_in_add_order():
    top = with_global(Topology(), "globalStore1", "source1", "globalTopic1", "processor1")
    top = with_global(top, "globalStore2", "source2", "globalTopic2", "processor2")
    text = str(top.describe())
    assert "Sub-topology: 0 for global store (will not generate tasks)\n    Source: source1" in text
    assert "Sub-topology: 1 for global store (will not generate tasks)\n    Source: source2" in text
    assert [g.id for g in top.global_stores()] == [0, 1]


def test_global_store_takes_a_number_between_subtopologies_and_generates_no_task():
    top = Topology().add_source("s1", "t1").add_processor("p1", Noop, "s1")
    top = with_global(top)
    top.add_source("s2", "t2").add_processor("p2", Noop, "s2")
    assert [sub.id for sub in top.subtopologies()] == [0, 2]
    assert [sub.task_id(3) for sub in top.subtopologies()] == ["0_3", "2_3"]
    assert [g.id for g in top.global_stores()] == [1]
    text = str(top.describe())
    first, second, third = (text.index(f"Sub-topology: {n}") for n in (0, 1, 2))
    assert first < second < third
    # the global block ends with one newline, a sub-topology block with an empty line
    assert "      <-- globalSource\n  Sub-topology: 2\n" in text
    assert "      <-- s1\n\n  Sub-topology: 1 for global store" in text


def test_global_topic_is_not_a_task_source_topic():
    top = with_global(Topology().add_source("s", "t").add_processor("p", Noop, "s"))
    assert top.source_topics() == ["t"]
    assert top.global_topics() == ["global-topic"]
    assert top.source_node_for_topic("global-topic").name == "globalSource"
    assert "global-store" not in top.store_builders
    assert list(top.global_store_builders) == ["global-store"]
    assert all("globalSource" not in sub.node_names for sub in top.subtopologies())


def test_source_name_equal_to_processor_name_is_refused():
    with pytest.raises(TopologyError, match="source and the processor need different names"):
        Topology().add_global_store(
            kv("anyName"), "sameName", None, None, "anyTopicName", "sameName", Noop
        )


def test_logging_enabled_global_store_is_refused_naming_store_and_topic():
    with pytest.raises(
        TopologyError,
        match="'testStore' for a global store must not have logging enabled: its topic 'gt'",
    ):
        Topology().add_global_store(kv("testStore", logging=True), "s", None, None, "gt", "p", Noop)


def test_store_with_same_name_when_first_store_is_global():
    top = with_global(Topology(), store="testStore")
    with pytest.raises(TopologyError, match="a global state store named 'testStore'"):
        top.add_state_store(kv("testStore"))


def test_store_with_same_name_when_second_store_is_global():
    top = Topology().add_state_store(kv("testStore"))
    with pytest.raises(TopologyError, match="state store named 'testStore' is already added"):
        with_global(top, store="testStore")


def test_global_stores_with_same_name():
    top = with_global(Topology(), store="testStore")
    with pytest.raises(TopologyError, match="state store named 'testStore' is already added"):
        with_global(top, store="testStore", source="s2", topic="t2", processor="p2")


def test_global_topic_already_read_by_another_source():
    top = Topology().add_source("s", "shared")
    with pytest.raises(TopologyError, match="topic 'shared' of source 'globalSource' is already"):
        with_global(top, topic="shared")
    top = with_global(Topology(), topic="shared")
    with pytest.raises(TopologyError, match="topic 'shared' of source 's' is already read by"):
        top.add_source("s", "shared")


def test_global_node_names_are_taken():
    top = with_global(Topology())
    with pytest.raises(TopologyError, match="'global-processor' is already added"):
        top.add_source("global-processor", "x")
    with pytest.raises(TopologyError, match="node 'globalSource' of a global store cannot be"):
        top.add_processor("p", Noop, "globalSource")


def test_connecting_a_global_store_is_refused():
    top = with_global(Topology().add_source("s", "t").add_processor("p", Noop, "s"))
    with pytest.raises(TopologyError, match="global state store 'global-store' can be used by"):
        top.connect_processor_and_state_stores("p", "global-store")


def test_global_store_arguments_are_checked():
    with pytest.raises(TopologyError, match="expects a StoreBuilder"):
        Topology().add_global_store("store", "s", None, None, "t", "p", Noop)
    with pytest.raises(TopologyError, match="not an instance"):
        Topology().add_global_store(kv("g"), "s", None, None, "t", "p", Noop())
    with pytest.raises(TopologyError, match="source 's': the key deserializer must be a Serde"):
        Topology().add_global_store(kv("g"), "s", "t", "p", Noop, key_serde="utf-8")
    with pytest.raises(TypeError, match="topic 'utf-8' is followed by None, not a processor"):
        Topology().add_global_store(kv("g"), "s", "utf-8", None, "t", "p", Noop)
    with pytest.raises(TopologyError, match="invalid topic name ''"):
        Topology().add_global_store(kv("g"), "s", None, None, "", "p", Noop)


def test_a_topology_of_only_global_stores_has_no_subtopology():
    assert with_global(Topology()).subtopologies() == []
    with pytest.raises(TopologyError, match="no source"):
        Topology().subtopologies()


def test_read_only_state_store_has_its_own_subtopology_and_does_not_log():
    builder = kv("store", logging=True)
    top = Topology().add_read_only_state_store(
        builder, "source", None, None, "topic", "processor", Noop
    )
    assert builder.logging_enabled is False
    (sub,) = top.subtopologies()
    assert sub.node_names == ("source", "processor")
    assert sub.store_names == ("store",)
    assert sub.source_changelogs == {"store": "topic"}
    assert top.source_node_for_topic("topic").offset_reset == "earliest"
    assert str(top.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: source (topics: [topic])\n"
        "      --> processor\n"
        "    Processor: processor (stores: [store])\n"
        "      --> none\n"
        "      <-- source\n\n"
    )


def test_read_only_store_can_be_connected_to_other_processors_of_its_subtopology():
    top = Topology().add_read_only_state_store(kv("store"), "src", None, None, "t", "proc", Noop)
    top.add_source("orders", "o").add_processor("join", Noop, "orders")
    top.connect_processor_and_state_stores("join", "store")
    (sub,) = top.subtopologies()
    assert set(sub.node_names) == {"src", "proc", "orders", "join"}


def test_read_only_state_store_checks_names_first():
    top = Topology().add_state_store(kv("store"))
    with pytest.raises(TopologyError, match="state store named 'store' is already added"):
        top.add_read_only_state_store(kv("store"), "src", None, None, "t", "proc", Noop)
    assert top.source_topics() == []  # nothing half-added


def test_same_builder_added_again_connects_more_processors():
    builder = kv("counts", logging=True)
    top = Topology().add_source("s", "t").add_processor("a", Noop, "s")
    top.add_processor("b", Noop, "s").add_state_store(builder, "a")
    top.add_state_store(builder, "b")
    assert top.nodes["b"].stores == ["counts"]
    with pytest.raises(TopologyError, match="a different state store builder named 'counts'"):
        top.add_state_store(kv("counts", logging=True), "b")


class Tag(Processor):
    def process(self, record):
        pass


@pytest.mark.parametrize("method", ["add_global_store", "add_read_only_state_store"])
def test_serdes_by_keyword_and_kafka_streams_positional_order_build_the_same_nodes(method):
    def extractor(record, partition_time):
        return 1

    S, L = Serdes.string(), Serdes.long()
    by_keyword = getattr(Topology(), method)(
        kv("g"), "src", "topic", "proc", Tag, key_serde=S, value_serde=L,
        timestamp_extractor=extractor,
    )  # fmt: skip
    design_positional = getattr(Topology(), method)(
        kv("g"), "src", "topic", "proc", Tag, S, L, extractor
    )
    kafka_streams = getattr(Topology(), method)(
        kv("g"), "src", S, L, "topic", "proc", Tag, timestamp_extractor=extractor
    )
    for top in (by_keyword, design_positional, kafka_streams):
        source = top.source_node_for_topic("topic")
        assert (source.name, source.topics) == ("src", ("topic",))
        assert source.key_serde is S and source.value_serde is L
        assert source.timestamp_extractor is extractor
        assert str(top.describe()) == str(by_keyword.describe())
    bytes_default = getattr(Topology(), method)(kv("g"), "src", "topic", "proc", Tag)
    ks_none = getattr(Topology(), method)(kv("g"), "src", None, None, "topic", "proc", Tag)
    for top in (bytes_default, ks_none):
        source = top.source_node_for_topic("topic")
        assert source.key_serde.deserialize(b"\x01") == b"\x01"


@pytest.mark.parametrize("method", ["add_global_store", "add_read_only_state_store"])
def test_an_argument_list_of_neither_order_is_a_type_error_naming_both(method):
    with pytest.raises(TypeError, match=f"{method} takes .* or Kafka Streams' order"):
        getattr(Topology(), method)(kv("g"), "src", None, None, "topic", Tag)
    with pytest.raises(TypeError, match="multiple values"):
        getattr(Topology(), method)(
            kv("g"), "src", Serdes.string(), None, "topic", "proc", Tag, key_serde=None
        )
