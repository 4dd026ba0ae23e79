"""topologies.order_enrichment on local Spark and a real broker: every worker host fills its
copy of the global store (one for all its tasks) from every partition of the customers topic,
catches it up while its tasks run (at most a second behind, in epochs), and refills it after
the executor's state directory is lost."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from processor_api.state.checkpoint import read_checkpoint
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.scrape import wait_for
from tests.harness.topics import TopicReader, produce, uid
from tests.harness.wire import high_watermarks

pytestmark = pytest.mark.integration

CUSTOMERS = 30


def customer(i: int, tier: str = "basic") -> dict:
    return {"name": f"customer-{i}", "tier": tier}


def order(i: int, customer_id: str) -> tuple[bytes, bytes]:
    return f"o{i}".encode(), json.dumps({"customer_id": customer_id, "amount": i}).encode()


def enriched(reader: TopicReader) -> dict[str, dict | None]:
    return {key: value["customer"] for key, value in reader.pairs()}


def test_orders_enriched_from_a_global_store_on_spark(kafka, spark, tmp_path):
    run_id = uid()
    customers_topic, orders_topic = f"customers-{run_id}", f"orders-{run_id}"
    output_topic, app_id = f"orders-enriched-{run_id}", f"enrich-{run_id}"
    kafka.create_topic(customers_topic, 3)
    kafka.create_topic(orders_topic, 2)
    kafka.create_topic(output_topic, 2)
    produce(
        kafka.bootstrap_servers,
        customers_topic,
        [(f"c{i}".encode(), json.dumps(customer(i)).encode()) for i in range(CUSTOMERS)],
    )
    produce(kafka.bootstrap_servers, orders_topic, [order(i, f"c{i}") for i in range(10)])
    state = tmp_path / "state"
    settings = settings_for(kafka.bootstrap_servers, app_id, state)
    kwargs = {
        "orders_topic": orders_topic,
        "customers_topic": customers_topic,
        "output_topic": output_topic,
    }

    def reader() -> TopicReader:
        return TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, json.loads)

    def background() -> BackgroundRun:
        return BackgroundRun(
            "topologies.order_enrichment:build_topology",
            settings,
            spark=spark,
            topology_kwargs=kwargs,
        )

    def global_copies_at(ends: dict[int, int]) -> bool | None:
        """Whether the workers' global copies caught up to ``ends`` (their checkpoints)."""
        copies = [
            path / ".checkpoint"
            for path in (state / app_id).glob("global-w*")
            if re.fullmatch(r"global-w\d+", path.name)  # not a host's private copy
        ]
        if not copies:
            return None
        for path in copies:
            if not path.exists() or read_checkpoint(path) != {
                (customers_topic, p): end for p, end in ends.items()
            }:
                return None
        return True

    # 1. the first orders, then a customer update and a deletion the next orders must see once
    # the workers' global copies have them (as in Kafka Streams, a global store is updated
    # beside the tasks, not in step with their input)
    with reader() as out, background() as run:
        out.wait_for(lambda records: len(records) >= 10, timeout_s=60, while_alive=run)
        produce(
            kafka.bootstrap_servers,
            customers_topic,
            [(b"c1", json.dumps(customer(1, "platinum")).encode()), (b"c2", None)],
        )
        updated = high_watermarks(kafka.bootstrap_servers, customers_topic, 3)
        wait_for("the global copies to catch up", lambda: global_copies_at(updated), 60, run)
        produce(kafka.bootstrap_servers, orders_topic, [order(10, "c1"), order(11, "c2")])
        out.wait_for(lambda records: len(records) >= 12, timeout_s=60, while_alive=run)
        run.stop()
    assert enriched(out) == {
        **{f"o{i}": customer(i) for i in range(10)},
        "o10": customer(1, "platinum"),
        "o11": None,
    }
    assert global_copies_at(high_watermarks(kafka.bootstrap_servers, customers_topic, 3))

    # 2. the executor's state is lost: each worker host refills its copy from the topic
    assert not list((state / app_id).glob("*/global")), "a task kept a copy of its own"
    shutil.rmtree(state / app_id)
    produce(kafka.bootstrap_servers, orders_topic, [order(12, "c1"), order(13, "c29")])
    with reader() as out, background() as run:
        out.wait_for(
            lambda records: {"o12", "o13"} <= {r.key for r in records},
            timeout_s=60,
            while_alive=run,
        )
        run.stop()
    got = enriched(out)
    assert (got["o12"], got["o13"]) == (customer(1, "platinum"), customer(29))
