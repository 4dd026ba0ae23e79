"""topologies.sales_aggregation: the seed's component test, bad input, custom threshold."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from processor_api import Serdes
from processor_api.testing import TestInputTopic, TestOutputTopic, TopologyTestDriver
from topologies.sales_aggregation import build_topology, parse_sale_value

SEED_EVENTS = [
    ("product2", 1000),
    ("product1", 1500),
    ("product1", 1000),
    ("product2", 1300),
    ("product5", 1000),
]


@pytest.fixture
def driver() -> Iterator[TopologyTestDriver]:
    with TopologyTestDriver(build_topology()) as test_driver:
        yield test_driver


def topics(driver: TopologyTestDriver) -> tuple[TestInputTopic, TestOutputTopic]:
    return (
        driver.create_input_topic("sales-events-v1"),
        driver.create_output_topic("notifications-events-v1"),
    )


def pipe_sale(topic: TestInputTopic, product: str, value: object, timestamp: int = 0) -> None:
    topic.pipe_input(product, json.dumps({"product": product, "value": value}), timestamp)


def store_contents(driver: TopologyTestDriver) -> dict[str, int]:
    return {kv.key: kv.value for kv in driver.get_key_value_store("PRODUCT_AGGREGATED_SALES").all()}


def test_seed_component_test(driver: TopologyTestDriver) -> None:
    sales, notifications = topics(driver)
    for ts, (product, value) in enumerate(SEED_EVENTS):
        pipe_sale(sales, product, value, ts)

    assert notifications.read_key_values_to_list() == [
        ("product1", {"product": "product1", "value": 2500}),
        ("product2", {"product": "product2", "value": 2300}),
    ]
    assert store_contents(driver) == {"product1": 2500, "product2": 2300, "product5": 1000}


def test_output_wire_format_is_json(driver: TopologyTestDriver) -> None:
    sales, _ = topics(driver)
    raw = driver.create_output_topic("notifications-events-v1", Serdes.string(), Serdes.string())
    pipe_sale(sales, "p", 2000, 42)
    record = raw.read_record()
    assert record.key == "p"
    assert json.loads(record.value) == {"product": "p", "value": 2000}
    assert record.timestamp == 42


def test_groups_by_record_key_not_by_product_field(driver: TopologyTestDriver) -> None:
    sales, notifications = topics(driver)
    sales.pipe_input("key-a", json.dumps({"product": "other", "value": 2100}), 0)
    assert notifications.read_key_value() == ("key-a", {"product": "key-a", "value": 2100})
    assert store_contents(driver) == {"key-a": 2100}


def test_every_update_above_threshold_notifies(driver: TopologyTestDriver) -> None:
    sales, notifications = topics(driver)
    pipe_sale(sales, "p", 1999)
    assert notifications.is_empty()
    pipe_sale(sales, "p", 1)
    pipe_sale(sales, "p", 5)
    assert notifications.read_values_to_list() == [
        {"product": "p", "value": 2000},
        {"product": "p", "value": 2005},
    ]


@pytest.mark.parametrize(
    "value",
    [
        "{not json",
        json.dumps({"product": "product1"}),
        json.dumps({"product": "product1", "value": "a lot"}),
        json.dumps({"product": "product1", "value": 12.5}),
        json.dumps({"product": "product1", "value": True}),
        json.dumps({"product": "product1", "value": None}),
        json.dumps([1, 2, 3]),
    ],
)
def test_malformed_event_is_skipped_with_warning(driver: TopologyTestDriver, value: str) -> None:
    sales, notifications = topics(driver)
    pipe_sale(sales, "product1", 2500, 0)  # offset 0
    assert notifications.read_value() == {"product": "product1", "value": 2500}

    with capture_logs() as logs:
        sales.pipe_input("product1", value, 1)  # offset 1

    assert notifications.is_empty()
    assert store_contents(driver) == {"product1": 2500}
    warnings = [e for e in logs if e["event"] == "sale_event_skipped"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert (warnings[0]["topic"], warnings[0]["partition"], warnings[0]["offset"]) == (
        "sales-events-v1",
        0,
        1,
    )

    pipe_sale(sales, "product1", 1, 2)  # processing goes on
    assert notifications.read_value() == {"product": "product1", "value": 2501}


def test_null_key_and_null_value_are_skipped(driver: TopologyTestDriver) -> None:
    sales, notifications = topics(driver)
    sales.pipe_input(None, json.dumps({"product": "x", "value": 5000}))
    sales.pipe_input("x", None)
    assert notifications.is_empty()
    assert store_contents(driver) == {}


def test_custom_threshold_and_topics() -> None:
    topology = build_topology(
        input_topic="sales", output_topic="alerts", store_name="totals", threshold=100
    )
    with TopologyTestDriver(topology) as driver:
        sales = driver.create_input_topic("sales")
        alerts = driver.create_output_topic("alerts")
        pipe_sale(sales, "a", 60)
        pipe_sale(sales, "b", 100)
        pipe_sale(sales, "a", 40)
        assert alerts.read_key_values_to_list() == [
            ("b", {"product": "b", "value": 100}),
            ("a", {"product": "a", "value": 100}),
        ]
        totals = driver.get_key_value_store("totals")
        assert (totals.get("a"), totals.get("b")) == (100, 100)


def test_store_is_persistent_without_cache() -> None:
    topology = build_topology()
    builder = topology.store_builders["PRODUCT_AGGREGATED_SALES"]
    assert builder.persistent
    assert not builder.caching_enabled
    assert builder.logging_enabled


def test_parse_sale_value() -> None:
    assert parse_sale_value('{"product": "p", "value": 7}') == 7
    assert parse_sale_value(b'{"value": 7.0}') == 7
