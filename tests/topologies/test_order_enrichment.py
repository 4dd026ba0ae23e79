"""topologies.order_enrichment: orders enriched from the global store of customers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from processor_api import ProcessingError, Serdes
from processor_api.testing import TopologyTestDriver
from topologies.order_enrichment import build_topology

ADA = {"name": "Ada", "tier": "gold"}
BOB = {"name": "Bob", "tier": "silver"}


@pytest.fixture(params=[True, False], ids=["rocksdb", "in-memory"])
def driver(request) -> Iterator[TopologyTestDriver]:
    with TopologyTestDriver(build_topology(persistent=request.param)) as test_driver:
        yield test_driver


def test_orders_are_enriched_with_the_customer_current_at_their_time(driver):
    customers = driver.create_input_topic("customers")
    orders = driver.create_input_topic("orders")
    enriched = driver.create_output_topic("orders-enriched")
    customers.pipe_input("c1", ADA)
    customers.pipe_input("c2", BOB)
    orders.pipe_input("o1", {"customer_id": "c1", "amount": 10})
    customers.pipe_input("c1", {**ADA, "tier": "platinum"})
    orders.pipe_input("o2", {"customer_id": "c1", "amount": 20})
    orders.pipe_input("o3", {"customer_id": "c2", "amount": 30})
    customers.pipe_input("c2", None)  # deleted
    orders.pipe_input("o4", {"customer_id": "c2", "amount": 40})
    assert enriched.read_key_values_to_list() == [
        ("o1", {"customer_id": "c1", "amount": 10, "customer": ADA}),
        ("o2", {"customer_id": "c1", "amount": 20, "customer": {**ADA, "tier": "platinum"}}),
        ("o3", {"customer_id": "c2", "amount": 30, "customer": BOB}),
        ("o4", {"customer_id": "c2", "amount": 40, "customer": None}),
    ]
    store = driver.get_key_value_store("customers")
    assert {kv.key: kv.value for kv in store.all()} == {"c1": {**ADA, "tier": "platinum"}}


def test_inner_join_drops_orders_of_unknown_customers_with_a_warning():
    with TopologyTestDriver(build_topology(inner_join=True)) as driver:
        driver.create_input_topic("customers").pipe_input("c1", ADA)
        orders = driver.create_input_topic("orders")
        with capture_logs() as logs:
            orders.pipe_input("o1", {"customer_id": "nobody", "amount": 1})
        orders.pipe_input("o2", {"customer_id": "c1", "amount": 2})
        out = driver.create_output_topic("orders-enriched").read_key_values_to_list()
        assert out == [("o2", {"customer_id": "c1", "amount": 2, "customer": ADA})]
    (warning,) = [e for e in logs if e["event"] == "order_of_unknown_customer_dropped"]
    assert (warning["topic"], warning["partition"], warning["offset"]) == ("orders", 0, 0)


def test_bad_orders_are_skipped_naming_the_record(driver):
    orders = driver.create_input_topic("orders")
    enriched = driver.create_output_topic("orders-enriched")
    with capture_logs() as logs:
        orders.pipe_input("o1", ["not", "an", "object"])
        orders.pipe_input("o2", {"amount": 3})
    assert enriched.is_empty()
    skipped = [e for e in logs if e["event"] == "order_without_customer_id_skipped"]
    assert [e["offset"] for e in skipped] == [0, 1]


def test_a_customer_that_is_not_json_goes_to_the_deserialization_handler():
    with TopologyTestDriver(build_topology()) as driver:
        customers = driver.create_input_topic("customers", Serdes.string(), Serdes.bytes())
        with pytest.raises(ProcessingError, match="cannot deserialize record.*topic=customers"):
            customers.pipe_input("c1", b"{not json")
    config = {"deserialization_exception_handler": "log_and_continue"}
    with TopologyTestDriver(build_topology(), config) as driver:
        customers = driver.create_input_topic("customers", Serdes.string(), Serdes.bytes())
        customers.pipe_input("c1", b"{not json")
        customers.pipe_input("c2", b'{"name": "Cy"}')
        store = driver.get_key_value_store("customers")
        assert (store.get("c1"), store.get("c2")) == (None, {"name": "Cy"})


def test_describe_shows_the_global_store_block():
    text = str(build_topology().describe())
    assert text == (
        "Topologies:\n"
        "   Sub-topology: 0 for global store (will not generate tasks)\n"
        "    Source: CUSTOMERS_SOURCE (topics: [customers])\n"
        "      --> CUSTOMERS_UPDATER\n"
        "    Processor: CUSTOMERS_UPDATER (stores: [customers])\n"
        "      --> none\n"
        "      <-- CUSTOMERS_SOURCE\n"
        "  Sub-topology: 1\n"
        "    Source: ORDERS_SOURCE (topics: [orders])\n"
        "      --> ENRICH\n"
        "    Processor: ENRICH (stores: [])\n"
        "      --> ENRICHED_SINK\n"
        "      <-- ORDERS_SOURCE\n"
        "    Sink: ENRICHED_SINK (topic: orders-enriched)\n"
        "      <-- ENRICH\n\n"
    )
