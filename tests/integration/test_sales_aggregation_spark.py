"""Seed 000: the five sales events through local Spark and a real broker."""

from __future__ import annotations

import json
import time

import pytest

from processor_api.kafka.group import committed_offsets
from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid
from tests.harness.wire import high_watermarks

pytestmark = pytest.mark.integration

SEED_EVENTS = [
    ("product2", 1000),
    ("product1", 1500),
    ("product1", 1000),
    ("product2", 1300),
    ("product5", 1000),
]


def _wait_all_committed(bootstrap: str, app_id: str, topic: str, run: BackgroundRun) -> None:
    """Until the application's group has committed all of ``topic`` (every event processed)."""
    deadline = time.monotonic() + 30
    while True:
        offsets = committed_offsets(bootstrap, app_id, [(topic, p) for p in range(3)])
        if sum(offsets.values()) >= len(SEED_EVENTS):
            return
        assert run.is_alive() and time.monotonic() < deadline, f"committed so far: {offsets}"
        time.sleep(0.1)


def test_seed_000_notifications_within_30_seconds(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"sales-events-v1-{run_id}", f"notifications-events-v1-{run_id}"
    app_id = f"sales-{run_id}"
    kafka.create_topic(input_topic, 3)
    kafka.create_topic(output_topic, 3)
    produce(
        kafka.bootstrap_servers,
        input_topic,
        [
            (product.encode(), json.dumps({"product": product, "value": value}).encode())
            for product, value in SEED_EVENTS
        ],
    )

    # commits every 200 ms: the test stops the run once the group's offsets say that every
    # event was processed (a task of a worker may start its epoch after another one's
    # notifications are out: the notifications alone do not say that product5 was processed)
    settings = settings_for(
        kafka.bootstrap_servers, app_id, tmp_path / "state", config={"commit.interval.ms": "200"}
    )
    with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, json.loads) as out:
        with BackgroundRun(
            "topologies.sales_aggregation:build_topology",
            settings,
            spark=spark,
            topology_kwargs={"input_topic": input_topic, "output_topic": output_topic},
        ) as run:
            out.wait_for(lambda records: len(records) >= 2, timeout_s=30, while_alive=run)
            elapsed = time.monotonic() - run.started
            _wait_all_committed(kafka.bootstrap_servers, app_id, input_topic, run)
            result = run.stop()
        # the run stopped after the epoch that processed all five events (result.records
        # below): every notification it will ever write is in the topic now; a third (wrong)
        # one would be among what the reader has once it read up to the end
        out.wait_until_read(high_watermarks(kafka.bootstrap_servers, output_topic, 3), 30)

    print(f"notifications after {elapsed:.1f}s, stop took {run.stop_s:.1f}s, {result}")
    assert elapsed < 30
    assert sorted(out.pairs()) == [
        ("product1", {"product": "product1", "value": 2500}),
        ("product2", {"product": "product2", "value": 2300}),
    ]
    assert result.records == 5 and result.outputs == 2
    totals = read_local_store(
        tmp_path / "state", app_id, "PRODUCT_AGGREGATED_SALES", Serdes.string(), Serdes.long()
    )
    assert totals == {"product1": 2500, "product2": 2300, "product5": 1000}
